#!/bin/sh
# Packages that depend on Cairn the way a user's do: on a tagged version, through its
# products. Every Swift snippet of the README is a target (make_package.py): the first,
# the quick start, verbatim with `import Cairn` alone (Support.swift gives it the service
# around it); the others as written, with the imports of their section. The first
# package depends on Cairn alone and is resolved, with no mirror settings: it must pin
# nothing but Cairn. The second enables Cairn's traits and depends on the ecosystem's
# packages as the README's Swift server section says; it holds every snippet, is built
# (one build of Cairn for all), and runs the quick start and the first Swift server
# snippet once each with a throwaway data directory.
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
mkdir -p "$work/app-ecosystem"
python3 "$root/Tests/Consumer/make_package.py" "$root/README.md" "$root/Tests/Consumer" "$work/app" \
    "file://$work/cairn-swift" "$version" "$work/app-ecosystem"
# The second package resolves from the offline mirrors where SWIFTPM_MIRROR names them
# (else from GitHub, as a user's would).
if [ -n "${SWIFTPM_MIRROR:-}" ]; then "$SWIFTPM_MIRROR/setup.sh" "$work/app-ecosystem" > /dev/null; fi
build() { swift build --cache-path "$work/cache" --manifest-cache local --package-path "$work/app-ecosystem" "$@"; }
# build_clean <build function> <log>: builds, and fails unless it built without a warning
# (a user's build of a package that depends on Cairn shows no warning of Cairn's: SwiftPM
# does not show a dependency's).
build_clean() {
    if ! "$1" > "$2" 2>&1; then
        grep -v '^\[' "$2" >&2
        echo "consumer: a README snippet did not build ($2)" >&2
        exit 1
    fi
    if grep -E 'warning:' "$2" >&2; then
        echo "consumer: the build printed warnings (above; $2)" >&2
        exit 1
    fi
}
# Cairn alone brings no other package: with its integrations' traits off, the ecosystem's
# packages are neither fetched (this package has no mirror settings: a fetch from
# github.com would fail here, and for a user would be a needless download) nor pinned.
if ! swift package resolve --cache-path "$work/cache" --manifest-cache local --package-path "$work/app" \
        > "$work/resolve.log" 2>&1; then
    cat "$work/resolve.log" >&2
    echo "consumer: a package that uses Cairn alone did not resolve" >&2
    exit 1
fi
pinned=$(python3 -c 'import json,sys; print(" ".join(p["identity"] for p in json.load(open(sys.argv[1]))["pins"]))' \
    "$work/app/Package.resolved")
if [ "$pinned" != "cairn-swift" ] || grep -Ei 'fetching.*(swift-log|swift-metrics|swift-distributed-tracing|swift-service)' "$work/resolve.log" >&2; then
    echo "consumer: a package that uses Cairn alone resolved more than Cairn: $pinned" >&2
    exit 1
fi
build_clean build "$work/build.log"
# Nothing but `Cairn`, `CairnTestKit` and the integrations (`CairnLogging`, ...) is a product, and the modules Cairn is built
# from show nothing to a package that imports them anyway: a target that names their
# types does not build, and a dependency on one of them as a product is refused.
manifest="$work/app-ecosystem/Package.swift"
cp "$manifest" "$work/Package.swift.kept"
mkdir -p "$work/app-ecosystem/Sources/Leak"
cat > "$work/app-ecosystem/Sources/Leak/main.swift" <<'SWIFT'
import Cairn
import CairnBase
import CairnStore
import CairnUploader
import CairnCrash
import CairnProcessor
_ = Ring.self
_ = Uploader.self
_ = CrashCapture.self
_ = Processor.self
_ = Locked<Int>.self
_ = HTTPTransport.self
SWIFT
python3 - "$manifest" <<'PY'
import re, sys
path = sys.argv[1]
text = open(path).read()
dep = re.search(r'\.product\(name: "Cairn", package: "([^"]+)"\)', text).group(0)
text = text.replace("    ]\n)", '        .executableTarget(name: "Leak", dependencies: [%s], path: "Sources/Leak"),\n    ]\n)' % dep)
open(path, "w").write(text)
PY
if build --target Leak > "$work/leak.log" 2>&1; then
    echo "consumer: a package reached the modules Cairn is built from" >&2
    exit 1
fi
for pair in Ring:CairnStore Uploader:CairnUploader CrashCapture:CairnCrash Processor:CairnProcessor \
            Locked:CairnBase HTTPTransport:CairnUploader; do
    symbol=${pair%%:*} module=${pair#*:}
    grep -Eq "error: .*('$symbol'|no such module '$module')" "$work/leak.log" || {
        grep -v '^\[' "$work/leak.log" >&2
        echo "consumer: $symbol did not fail as it should" >&2
        exit 1
    }
done
sed 's/\.product(name: "Cairn", package/.product(name: "CairnStore", package/' "$work/Package.swift.kept" > "$manifest"
if build > "$work/product.log" 2>&1 || ! grep -q "CairnStore" "$work/product.log"; then
    grep -v '^\[' "$work/product.log" >&2
    echo "consumer: CairnStore was accepted as a product" >&2
    exit 1
fi
cp "$work/Package.swift.kept" "$manifest"
rm -rf "$work/app-ecosystem/Sources/Leak"

bin=$(build --show-bin-path)/ReadmeService
CAIRN_APP_ID=readme-consumer CAIRN_DATA_DIR="$work/data" "$bin"
CAIRN_APP_ID=readme-consumer CAIRN_DATA_DIR="$work/data-ecosystem" "$(build --show-bin-path)/EcosystemSnippet1" \
    > "$work/ecosystem-run.log" 2>&1 || { cat "$work/ecosystem-run.log" >&2; echo "consumer: EcosystemSnippet1 failed" >&2; exit 1; }
echo "consumer: a package that depends on Cairn $version (tagged) alone resolves Cairn alone; every README snippet builds against it, with Cairn's traits and the ecosystem's packages, without a warning; the quick start, with import Cairn alone, runs, and the first Swift server snippet; nothing but Cairn, CairnTestKit and the integrations is a product, and the modules below Cairn show a package nothing"
