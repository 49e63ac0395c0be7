#!/bin/sh
# A package that depends on Cairn the way a user's does: on a tagged version, through
# the product "Cairn", with `import Cairn` alone. Its main.swift is the README's first
# Swift snippet, copied verbatim; Support.swift gives it the service around it. The
# package is built, then run once with a throwaway data directory.
#
# The tagged version is a clone of this repository's HEAD (committed work only), tagged
# with the SDK version. Everything is made under .build/consumer.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
work="$root/.build/consumer"
version=$(sed -n 's/^public let cairnVersion = "\(.*\)"$/\1/p' "$root/Sources/"*/*.swift | head -n 1)
[ -n "$version" ] || { echo "consumer: the SDK version was not found" >&2; exit 1; }
# Everything anew each time, caches included: SwiftPM would otherwise reuse the checkout
# of an earlier clone that had the same URL and tag.
rm -rf "$work"
mkdir -p "$work/app/Sources/ReadmeService"
git clone -q "$root" "$work/Cairn"
git -C "$work/Cairn" tag "$version"
cat > "$work/app/Package.swift" <<MANIFEST
// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "ReadmeConsumer",
    dependencies: [.package(url: "file://$work/Cairn", exact: "$version")],
    targets: [
        .executableTarget(name: "ReadmeService", dependencies: [.product(name: "Cairn", package: "Cairn")],
                          path: "Sources/ReadmeService"),
    ]
)
MANIFEST
# The first ```swift block of the README, as it is written there.
awk '/^```swift$/ && !done { inside = 1; next } inside && /^```$/ { inside = 0; done = 1; next } inside' \
    "$root/README.md" > "$work/app/Sources/ReadmeService/main.swift"
[ -s "$work/app/Sources/ReadmeService/main.swift" ] || { echo "consumer: no swift block in README.md" >&2; exit 1; }
cp "$root/Tests/Consumer/Support.swift" "$work/app/Sources/ReadmeService/Support.swift"
swift build --cache-path "$work/cache" --manifest-cache local --package-path "$work/app" 2>&1 | grep -v '^\[' || true
bin=$(swift build --cache-path "$work/cache" --manifest-cache local --package-path "$work/app" --show-bin-path)/ReadmeService
[ -x "$bin" ] || { echo "consumer: the README snippet did not build" >&2; exit 1; }
CAIRN_APP_ID=readme-consumer CAIRN_DATA_DIR="$work/data" "$bin"
echo "consumer: the README snippet builds against Cairn $version (tagged) with import Cairn alone, and runs"
