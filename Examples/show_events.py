#!/usr/bin/env python3
"""Prints what the demo collector received: one line per event, marking the crashed run's events that arrived only after the
restart (they waited in the ring file), in time order; span durations; the install's properties; and
for a crash its reason and symbolicated frames.

Usage: show_events.py http://127.0.0.1:<port> [<events received before the restart>]"""
import json
import sys
import urllib.request

events = json.load(urllib.request.urlopen(sys.argv[1] + "/_control/events"))
before_restart = int(sys.argv[2]) if len(sys.argv) > 2 else len(events)
first_session = None
seen = set()
records = [(arrival, json.loads(e["record"])) for arrival, e in enumerate(events)]
first_session = min(records, key=lambda a: a[1].get("time", ""))[1].get("session_id") if records else None
for arrival, r in sorted(records, key=lambda a: a[1].get("time", "")):
    if r["event_id"] in seen:
        continue
    seen.add(r["event_id"])
    props = r.get("properties", {})
    line = "%-29s %-12s %-16s session %s" % (r.get("time"), r.get("type"), r.get("name"), r.get("session_id", "")[:13])
    if r.get("type") == "track":
        line += "  " + json.dumps(props, sort_keys=True)
    if r.get("type") == "span":
        line += "  %.2f ms" % props.get("duration_ms", 0)
    if r.get("type") == "user_setOnce":
        line += "  " + json.dumps(props, sort_keys=True)
    if r.get("name") == "session_end":
        line += "  reason: " + props.get("reason", "?")
    if arrival >= before_restart and r.get("session_id") == first_session and r.get("type") in ("track", "span"):
        line += "   <- from the ring, after the restart"
    print(line)
    if r.get("type") == "crash":
        print("    reason: %s" % props.get("reason"))
        print("    signal: %s (%s), thread %s" % (props.get("signal"), props.get("code", "-"),
                                                  props.get("thread", {}).get("name")))
        for f in props.get("frames", [])[:8]:
            where = "%s:%s" % (f["file"].rsplit("/", 1)[-1], f["line"]) if f.get("file") and f.get("line") else f.get("module", "?").rsplit("/", 1)[-1]
            print("    #%-2d %s  (%s)" % (f["index"], f.get("function", f.get("symbol", f["address"])), where))
        crumbs = props.get("context", {}).get("breadcrumbs", [])
        print("    breadcrumbs: " + "; ".join(c["message"] for c in crumbs))
print("%d events" % len(seen))
