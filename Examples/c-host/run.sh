#!/bin/sh
# Builds libcairn, installs it into a scratch prefix, builds c-host against it with
# pkg-config as another SDK's build would, runs it (it crashes), and reads what it left:
# the ring with Tests/Tools/read_ring.py and `cairn status`, the crash report with
# `cairn report`. The README's C blocks are compiled against the installed header too.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
make -s -C "$root" install PREFIX="$scratch/prefix" >/dev/null
export PKG_CONFIG_PATH="$scratch/prefix/lib/pkgconfig"
cc -std=c11 -O1 -g -Wall -Wextra -Werror "$root/Examples/c-host/main.c" -o "$scratch/c-host" \
   $(pkg-config --cflags --libs cairn) -Wl,-rpath,"$scratch/prefix/lib"
# Every C block of the README compiles against the installed header.
echo "c-host: $(python3 "$root/Tests/Tools/readme_blocks.py" "$root/README.md" c "$scratch")"
for f in "$scratch"/readme-*.c; do
    cc -std=c11 -Wall -Wextra -Werror -c "$f" -o "$f.o" $(pkg-config --cflags cairn)
done
mkdir -p "$scratch/data"
status=0
"$scratch/c-host" "$scratch/data" 25 > "$scratch/out.txt" 2>&1 || status=$?
cat "$scratch/out.txt" | head -2
[ "$status" -eq 139 ] || { echo "c-host: expected to die of SIGSEGV (139), got $status"; cat "$scratch/out.txt"; exit 1; }
records=$(python3 "$root/Tests/Tools/read_ring.py" "$scratch/data/events.ring" | grep -c '"c_host_event"')
[ "$records" -eq 25 ] || { echo "c-host: the ring holds $records of its 25 events"; exit 1; }
# The Swift side reads the same ring without opening it: `cairn status` counts it.
"$root/.build/debug/cairn" status "$scratch/data" > "$scratch/status.txt"
grep -qx "event ring: 25 events waiting .*" "$scratch/status.txt" \
    || { echo "c-host: cairn status does not count the ring's 25 events:"; cat "$scratch/status.txt"; exit 1; }
report=$(ls "$scratch/data"/crash-*.report)
"$root/.build/debug/cairn" report --json "$report" > "$scratch/report.json"
"$root/.build/debug/cairn" report "$report" | head -2
python3 - "$scratch/report.json" <<'PY'
import json, sys
event = json.load(open(sys.argv[1]))
p = event["properties"]
frames = p.get("frames", [])
assert p["signal"] == "SIGSEGV", p["signal"]
assert any(f.get("symbol") == "charge_card" and f.get("file", "").endswith("c-host/main.c") for f in frames), frames[:3]
assert p["context"]["breadcrumbs"][0]["message"] == "charging", p["context"]
assert event["session_id"] == "c-host-run", event.get("session_id")
print("c-host: 25 events read back from its ring; its crash report names charge_card at main.c:%d"
      % next(f["line"] for f in frames if f.get("symbol") == "charge_card"))
PY
