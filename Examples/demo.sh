#!/usr/bin/env bash
# `make demo`: a service crashes, restarts and reports the crash, end to end, against
# the local test collector; then the same service, configured only by the standard
# OpenTelemetry variables, exports the same story as OTLP, which the collector decodes
# with the official definitions. Everything runs on 127.0.0.1 in a temporary directory.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(swift build --show-bin-path)
WORK=$(mktemp -d)
trap 'kill "$COLLECTOR" 2>/dev/null || true; rm -rf "$WORK"' EXIT

python3 Tests/Collector/collector.py --ignore-stdin > "$WORK/collector.out" 2> "$WORK/collector.err" &
COLLECTOR=$!
for _ in $(seq 100); do grep -q PORT "$WORK/collector.out" 2>/dev/null && break; sleep 0.05; done
PORT=$(awk '/PORT/ {print $2}' "$WORK/collector.out")

export CAIRN_APP_ID=orders CAIRN_RELEASE=orders@1.4.2 CAIRN_DISTINCT_ID=demo-host \
       CAIRN_UPLOAD_URL="http://127.0.0.1:$PORT/v1/batch" CAIRN_DATA_DIR="$WORK/cairn" \
       CAIRN_BATCH_AGE_MS=200 SWIFT_BACKTRACE=enable=no

echo "== run 1: handles two orders, then traps on a malformed third"
set +e
"$BIN/orders-service" --crash
STATUS=$?
set -e
SIGNAL=""
[ "$STATUS" -gt 128 ] && SIGNAL=" = 128 + SIG$(kill -l $((STATUS - 128)))"
echo "(run 1 ended with status $STATUS$SIGNAL: what it would have died of without Cairn)"
# What had arrived when run 1 died: the rest of its events wait in the ring.
ARRIVED=$(python3 -c 'import json, sys, urllib.request; print(len(json.load(urllib.request.urlopen(sys.argv[1]))))' \
          "http://127.0.0.1:$PORT/_control/events")
echo "(the collector had $ARRIVED of its events; the others waited in the ring file on disk)"
echo
echo "== run 2: the next start reports run 1's crash, handles two orders, shuts down"
"$BIN/orders-service"
echo
echo "== what the collector on 127.0.0.1:$PORT received"
python3 Examples/show_events.py "http://127.0.0.1:$PORT" "$ARRIVED"

echo
echo "== the same over OTLP: only OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_SERVICE_NAME set"
python3 -c 'import sys, urllib.request; urllib.request.urlopen(urllib.request.Request(sys.argv[1], data=b"", method="POST"))' \
        "http://127.0.0.1:$PORT/_control/reset"
unset CAIRN_APP_ID CAIRN_UPLOAD_URL
export OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$PORT" OTEL_SERVICE_NAME=orders \
       OTEL_RESOURCE_ATTRIBUTES="deployment.environment.name=demo" CAIRN_DATA_DIR="$WORK/cairn-otlp"
echo "== run 1 (OTLP): two orders, then the trap"
set +e
"$BIN/orders-service" --crash
set -e
echo "== run 2 (OTLP): reports run 1's crash, two orders, shuts down"
"$BIN/orders-service"
echo
echo "== what the OTLP receiver on 127.0.0.1:$PORT decoded (/v1/logs, /v1/traces)"
python3 Examples/show_otlp.py "http://127.0.0.1:$PORT"
