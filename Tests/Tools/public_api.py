#!/usr/bin/env python3
"""Counts the public declarations of Cairn's Swift modules, from the symbol graphs the
docs build emits (`make docs`), so that the API's growth is seen at every build.

Usage: public_api.py SYMBOL_GRAPH_DIR [MODULE ...]

For each module (default: every `<Module>.symbols.json` in the directory whose name
starts with "Cairn"), counts the symbols of access level `public` or `open` in
`<Module>.symbols.json` and in its extensions of other modules' types
(`<Module>@<Other>.symbols.json`): those it declares (their mangled names are the
module's, or an extension's in it), and those `import <Module>` shows (its own and
those of the modules it re-exports). Members the compiler synthesizes (an `Equatable`
conformance's `!=`, a protocol extension's defaults, whose identifiers hold
`::SYNTHESIZED::`) are not declarations and are left out. Prints one line per module
and the total declared; exits 1 when a named module has no symbol graph.
"""
import glob
import json
import os
import sys


def declarations(path):
    """The precise identifiers of the public declarations in one symbol-graph file."""
    with open(path, encoding="utf-8") as f:
        graph = json.load(f)
    found = set()
    for symbol in graph.get("symbols", []):
        precise = symbol.get("identifier", {}).get("precise", "")
        if "::SYNTHESIZED::" in precise:
            continue
        if symbol.get("accessLevel") in ("public", "open"):
            found.add(precise)
    return found


def declared_in(module, precise):
    """Whether a Swift symbol's mangled name says `module` declares it: the module's
    own (`s:<len><name>...`), or a member of an extension in it (`...<len><name>E...`)."""
    own = f"{len(module)}{module}"
    return precise.startswith("s:" + own) or (own + "E") in precise


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    directory = argv[1]
    modules = argv[2:] or sorted(
        os.path.basename(p)[: -len(".symbols.json")]
        for p in glob.glob(os.path.join(directory, "Cairn*.symbols.json"))
        if "@" not in os.path.basename(p))
    total, missing = 0, []
    for module in modules:
        main_file = os.path.join(directory, module + ".symbols.json")
        if not os.path.exists(main_file):
            missing.append(module)
            continue
        visible = declarations(main_file)
        for extension in glob.glob(os.path.join(directory, module + "@*.symbols.json")):
            # The compiler writes a module's graphs together, and an extension graph only
            # while the module has public extensions there: an older one is left from an
            # earlier build.
            if os.path.getmtime(extension) < os.path.getmtime(main_file) - 5:
                continue
            visible |= declarations(extension)
        declared = [p for p in visible if declared_in(module, p)]
        print(f"public declarations: {module:<16} {len(declared):>5} declared, "
              f"{len(visible):>5} seen by `import {module}`")
        total += len(declared)
    print(f"public declarations: {'all':<16} {total:>5} declared")
    if missing:
        print("no symbol graph for: " + ", ".join(missing), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
