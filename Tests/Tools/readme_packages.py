#!/usr/bin/env python3
"""Checks the README's Debian package lists against the Makefile's.

usage: readme_packages.py README.md "BUILD_PACKAGES" "APT_PACKAGES"

The README names the packages a user's build needs ("To build, Debian 12 needs `...`")
and those `make deps` installs ("apt packages `...`"); each list must hold exactly the
Makefile's, in any order, so a new machine set up from the README builds.
"""
import re
import sys


def listed(readme: str, lead: str) -> list[str]:
    match = re.search(re.escape(lead) + r"\s+`([^`]+)`", readme)
    if not match:
        sys.exit(f"readme-packages: the README has no list after '{lead}'")
    return match.group(1).split()


def main() -> None:
    readme_path, build, apt = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
    readme = re.sub(r"\s+", " ", open(readme_path, encoding="utf-8").read())
    failed = False
    for lead, expected, what in (("To build, Debian 12 needs", build, "BUILD_PACKAGES"),
                                 ("(apt packages", apt, "APT_PACKAGES")):
        got = listed(readme, lead)
        if sorted(got) != sorted(expected):
            failed = True
            missing = sorted(set(expected) - set(got))
            extra = sorted(set(got) - set(expected))
            print(f"readme-packages: the list after '{lead}' is not the Makefile's {what}: "
                  f"missing {missing or 'nothing'}, not installed by make deps {extra or 'nothing'}")
    if failed:
        sys.exit(1)
    print(f"readme-packages: the README lists the {len(build)} build packages and the "
          f"{len(apt)} packages make deps installs")


if __name__ == "__main__":
    main()
