#!/bin/sh
# A package that depends on Cairn the way a user's does: on a tagged version, through
# its products. Every Swift snippet of the README is a target of it (make_package.py):
# the first, the quick start, verbatim with `import Cairn` alone (Support.swift gives it
# the service around it); the others as written, with the imports of their section.
# The package is built, then the quick start is run once with a throwaway data
# directory.
#
# The tagged version is a clone of this repository's HEAD (committed work only), tagged
# with the SDK version. Everything is made under .build/consumer.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
work="$root/.build/consumer"
version=$(sed -n 's/^#define CAIRN_VERSION_STRING "\(.*\)"$/\1/p' "$root/CSources/CCairnCore/include/cairn_core.h")
[ -n "$version" ] || { echo "consumer: the SDK version was not found" >&2; exit 1; }
# Everything anew each time, caches included: SwiftPM would otherwise reuse the checkout
# of an earlier clone that had the same URL and tag.
rm -rf "$work"
mkdir -p "$work/app"
# Named as the README's package URL names it: SwiftPM identifies a package by that name.
git clone -q "$root" "$work/cairn-swift"
git -C "$work/cairn-swift" tag "$version"
python3 "$root/Tests/Consumer/make_package.py" "$root/README.md" "$root/Tests/Consumer" "$work/app" \
    "file://$work/cairn-swift" "$version"
build() { swift build --cache-path "$work/cache" --manifest-cache local --package-path "$work/app" "$@"; }
if ! build > "$work/build.log" 2>&1; then
    grep -v '^\[' "$work/build.log" >&2
    echo "consumer: a README snippet did not build" >&2
    exit 1
fi
# A user's build of a package that depends on Cairn shows no warning of Cairn's.
if grep -E 'warning:' "$work/build.log" >&2; then
    echo "consumer: the build printed warnings (above)" >&2
    exit 1
fi
bin=$(build --show-bin-path)/ReadmeService
CAIRN_APP_ID=readme-consumer CAIRN_DATA_DIR="$work/data" "$bin"
echo "consumer: every README snippet builds against Cairn $version (tagged), without a warning; the quick start, with import Cairn alone, runs"
