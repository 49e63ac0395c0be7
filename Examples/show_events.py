#!/usr/bin/env python3
"""Prints what the demo collector received: one line per event, and for a crash its
reason and symbolicated frames. Usage: show_events.py http://127.0.0.1:<port>"""
import json
import sys
import urllib.request

events = json.load(urllib.request.urlopen(sys.argv[1] + "/_control/events"))
records = sorted((json.loads(e["record"]) for e in events), key=lambda r: r.get("time", ""))
seen = set()
for r in records:
    if r["event_id"] in seen:
        continue
    seen.add(r["event_id"])
    props = r.get("properties", {})
    line = "%-29s %-12s %-16s session %s" % (r.get("time"), r.get("type"), r.get("name"), r.get("session_id", "")[:13])
    if r.get("type") == "track":
        line += "  " + json.dumps(props, sort_keys=True)
    if r.get("name") == "session_end":
        line += "  reason: " + props.get("reason", "?")
    print(line)
    if r.get("type") == "crash":
        print("    reason: %s" % props.get("reason"))
        print("    signal: %s (%s), thread %s" % (props.get("signal"), props.get("code", "-"),
                                                  props.get("thread", {}).get("name")))
        for f in props.get("frames", [])[:8]:
            where = "%s:%s" % (f["file"].rsplit("/", 1)[-1], f["line"]) if f.get("file") and f.get("line") else f.get("module", "?").rsplit("/", 1)[-1]
            print("    #%-2d %s  (%s)" % (f["index"], f.get("symbol", f["address"]), where))
        crumbs = props.get("context", {}).get("breadcrumbs", [])
        print("    breadcrumbs: " + "; ".join(c["message"] for c in crumbs))
print("%d events" % len(seen))
