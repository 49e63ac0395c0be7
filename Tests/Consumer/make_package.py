"""Writes the consumer package of Tests/Consumer/build.sh.

Usage: make_package.py <README.md> <Tests/Consumer> <package dir> <Cairn URL> <version>

Every ```swift block of the README becomes an executable target of a package that
depends on Cairn at <URL>, as the README's `// Package.swift` block says (its URL
replaced by <URL>, whose last path component must match it; else exactly <version>). The first block (the quick start) is
main.swift as written, next to Support.swift; every other block is main.swift as
written too, preceded by `import Cairn` and `import Glibc` when it has no import of its
own (it continues the section above it), next to SnippetSupport.swift. Each target
depends on the Cairn products its imports name.

With a sixth argument, <ecosystem package dir>, the blocks that import a module of the
Swift server ecosystem (swift-log's `Logging`, ...) or one of Cairn's integrations
(`CairnLogging`, ...) go to a second package there instead, whose manifest is the
README's `// Package.swift` block that enables Cairn's traits: its Cairn dependency
with the tagged clone's URL (and its requirement and traits as written), its other
dependencies as written (the real URLs). Each of those targets depends on the products
of that block that its imports name. The second package also has every target of the
first, as they are there (so that one build compiles every snippet: the first package
is then only resolved).
"""
import pathlib
import re
import shutil
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "Tools"))
from readme_blocks import blocks as readme_blocks  # noqa: E402

readme, consumer, package, url, version = sys.argv[1:6]
ecosystem_package = pathlib.Path(sys.argv[6]) if len(sys.argv) > 6 else None
consumer = pathlib.Path(consumer)
package = pathlib.Path(package)
blocks = readme_blocks(readme, "swift")
if not blocks:
    sys.exit("consumer: no swift block in README.md")
# The modules of the ecosystem's packages and of Cairn's integrations.
ECOSYSTEM = {"Logging", "CairnLogging", "Metrics", "CoreMetrics", "CairnMetrics", "ServiceLifecycle",
             "CairnServiceLifecycle"}

# The block that starts `// Package.swift` is the README's dependency lines: the consumer's
# manifest uses them as written, with the URL of the tagged clone for the README's.
identity, requirement = "Cairn", f'exact: "{version}"'
manifests = [b for b in blocks if b.startswith("// Package.swift") and "traits:" not in b]
ecosystem_manifests = [b for b in blocks if b.startswith("// Package.swift") and "traits:" in b]
blocks = [b for b in blocks if not b.startswith("// Package.swift")]
ecosystem_blocks = [b for b in blocks if ECOSYSTEM & set(re.findall(r"^import (\w+)$", b, re.M))]
blocks = [b for b in blocks if b not in ecosystem_blocks]
if manifests:
    m = manifests[0]
    dep = re.search(r'\.package\(url: "([^"]+)", (from: "[^"]+")\)', m)
    product = re.search(r'\.product\(name: "Cairn", package: "([^"]+)"\)', m)
    if not dep or not product:
        sys.exit("consumer: the README's Package.swift lines lack .package(url:from:) or .product(name: \"Cairn\", ...)")
    readme_identity = dep.group(1).rstrip("/").split("/")[-1].removesuffix(".git").lower()
    if product.group(1) != readme_identity:
        sys.exit(f"consumer: .product(package: \"{product.group(1)}\") does not name the package at {dep.group(1)}")
    if url.rstrip("/").split("/")[-1].lower() != readme_identity:
        sys.exit(f"consumer: the tagged clone must be named {readme_identity}, as the README's URL")
    identity, requirement = product.group(1), dep.group(2)

products = ["Cairn", "CairnTestKit"]
targets = []
for index, block in enumerate(blocks):
    name = "ReadmeService" if index == 0 else f"ReadmeSnippet{index + 1}"
    source = package / "Sources" / name
    source.mkdir(parents=True, exist_ok=True)
    imports = re.findall(r"^import (\w+)$", block, re.M)
    text = block
    if index > 0 and not imports:
        text = "import Cairn\nimport Glibc\n\n" + block
        imports = ["Cairn"]
    (source / "main.swift").write_text(text)
    support = "Support.swift" if index == 0 else "SnippetSupport.swift"
    shutil.copy(consumer / support, source / support)
    deps = ", ".join(f'.product(name: "{p}", package: "{identity}")' for p in products if p in imports)
    targets.append(f'        .executableTarget(name: "{name}", dependencies: [{deps}], path: "Sources/{name}"),')

(package / "Package.swift").write_text(f"""// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "ReadmeConsumer",
    dependencies: [.package(url: "{url}", {requirement})],
    targets: [
{chr(10).join(targets)}
    ]
)
""")
print(f"consumer: {len(blocks)} README snippets")
targets_cairn_only = targets

if ecosystem_package is not None:
    if not ecosystem_blocks or not ecosystem_manifests:
        sys.exit("consumer: the README has no snippet of the ecosystem's integrations, or no Package.swift block with traits")
    m = ecosystem_manifests[0]
    cairn = re.search(r'\.package\(url: "([^"]+)", (from: "[^"]+"),\s*traits: (\[[^\]]*\])\)', m)
    if not cairn or cairn.group(1).rstrip("/").split("/")[-1].removesuffix(".git").lower() != identity.lower():
        sys.exit("consumer: the README's Package.swift block with traits lacks .package(url: <Cairn's URL>, from:, traits:)")
    others = [d for d in re.findall(r'\.package\(url: "[^"]+", from: "[^"]+"\)', m)]
    products = re.findall(r'\.product\(name: "(\w+)", package: "([\w-]+)"\)', m)
    targets = []
    for index, block in enumerate(ecosystem_blocks):
        name = f"EcosystemSnippet{index + 1}"
        source = ecosystem_package / "Sources" / name
        source.mkdir(parents=True, exist_ok=True)
        (source / "main.swift").write_text(block)
        shutil.copy(consumer / "SnippetSupport.swift", source / "SnippetSupport.swift")
        imports = set(re.findall(r"^import (\w+)$", block, re.M))
        missing = imports - {"Glibc", "Foundation"} - {p for p, _ in products}
        if missing:
            sys.exit(f"consumer: an ecosystem snippet imports {sorted(missing)}, which the README's Package.swift block does not list")
        deps = ", ".join(f'.product(name: "{p}", package: "{k}")' for p, k in products if p in imports)
        targets.append(f'        .executableTarget(name: "{name}", dependencies: [{deps}], path: "Sources/{name}"),')
    # The other snippets too, as they are in the first package: one build of Cairn for all.
    for name in sorted(p.name for p in (package / "Sources").iterdir()):
        shutil.copytree(package / "Sources" / name, ecosystem_package / "Sources" / name, dirs_exist_ok=True)
    targets = targets_cairn_only + targets
    dependencies = [f'.package(url: "{url}", {cairn.group(2)}, traits: {cairn.group(3)})'] + others
    (ecosystem_package / "Package.swift").write_text(f"""// swift-tools-version:6.1
import PackageDescription

let package = Package(
    name: "ReadmeEcosystemConsumer",
    dependencies: [
        {(","+chr(10)+"        ").join(dependencies)},
    ],
    targets: [
{chr(10).join(targets)}
    ]
)
""")
    print(f"consumer: {len(ecosystem_blocks)} README snippets of the ecosystem's integrations")
