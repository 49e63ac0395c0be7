#!/usr/bin/env python3
"""Prints what the demo's OTLP receiver took: the OTLP/HTTP exports the test collector
decoded with the official OpenTelemetry definitions (opentelemetry-proto, strictly; see
Tests/Tools/otlp_decode.py), as a backend would see them: each service run's Resource,
its log records (severity, event name, trace context, attributes; a crash's exception
attributes) and its spans (kind, parent, duration, status).

Usage: show_otlp.py http://127.0.0.1:<port>"""
import json
import sys
import urllib.request

attempts = json.load(urllib.request.urlopen(sys.argv[1] + "/_control/requests"))
taken = [a for a in attempts if a.get("otlp") and (a.get("response") or {}).get("status", 200) < 300]
failed = [a for a in attempts if a.get("otlp_signal") and a.get("error")]
for a in failed:
    print("NOT DECODED: %s %s" % (a["path"], a["error"]))


def value(v):
    """An AnyValue as plain Python."""
    if "string_value" in v:
        return v["string_value"]
    if "int_value" in v:
        return int(v["int_value"])
    if "double_value" in v:
        return v["double_value"]
    if "bool_value" in v:
        return v["bool_value"]
    if "array_value" in v:
        return [value(x) for x in v["array_value"].get("values", [])]
    if "kvlist_value" in v:
        return attributes(v["kvlist_value"].get("values", []))
    return None


def attributes(kvs):
    return {kv["key"]: value(kv.get("value", {})) for kv in kvs}


def seconds(nanos):
    n = int(nanos)
    return "%d.%03d" % (n // 1_000_000_000 % 100_000, n // 1_000_000 % 1000)


resources, logs, spans = {}, [], []
for a in taken:
    for kind, scopes_key, items_key in (("resource_logs", "scope_logs", "log_records"),
                                        ("resource_spans", "scope_spans", "spans")):
        for rs in a["otlp"].get(kind, []):
            resource = attributes(rs.get("resource", {}).get("attributes", []))
            run = resource.get("service.instance.id", "?")
            resources[run] = resource
            for scope in rs.get(scopes_key, []):
                for item in scope.get(items_key, []):
                    (logs if items_key == "log_records" else spans).append((run, item))

runs = sorted(resources, key=lambda r: resources[r].get("process.creation.time", ""))
for n, run in enumerate(runs, 1):
    r = resources[run]
    print("Resource of run %d: service.name=%s service.version=%s service.instance.id=%s" % (
        n, r.get("service.name"), r.get("service.version"), run))
    print("    host.name=%s process.pid=%s process.runtime=%s %s telemetry.sdk=%s %s" % (
        r.get("host.name"), r.get("process.pid"), r.get("process.runtime.name"), r.get("process.runtime.version"),
        r.get("telemetry.sdk.name"), r.get("telemetry.sdk.version")))
print()
print("Log records (/v1/logs), in time order:")
shown = set()
for run, rec in sorted(logs, key=lambda x: int(x[1].get("time_unix_nano", 0))):
    attrs = attributes(rec.get("attributes", []))
    uid = attrs.get("log.record.uid")
    if uid in shown:
        continue
    shown.add(uid)
    trace = rec.get("trace_id", "")
    line = "  %s  run %d  %-5s %-16s" % (seconds(rec.get("time_unix_nano", 0)), runs.index(run) + 1,
                                         rec.get("severity_text", ""), rec.get("event_name", ""))
    if trace:
        line += "  trace %s span %s" % (trace[:8], rec.get("span_id", "")[:8])
    own = {k: v for k, v in attrs.items() if "." not in k}
    if rec.get("event_name") == "sdk_health":
        own = {k: own[k] for k in ("delivered_events", "dropped", "final") if k in own}
    if own and "exception.type" not in attrs:
        line += "  " + json.dumps(own, sort_keys=True)
    print(line)
    if "exception.type" in attrs:
        print("      exception.type:    %s" % attrs["exception.type"])
        print("      exception.message: %s" % attrs.get("exception.message"))
        for frame in (attrs.get("exception.stacktrace") or "").splitlines()[:6]:
            print("      | " + frame)
print()
print("Spans (/v1/traces):")
for run, s in sorted(spans, key=lambda x: int(x[1].get("start_time_unix_nano", 0))):
    ms = (int(s.get("end_time_unix_nano", 0)) - int(s.get("start_time_unix_nano", 0))) / 1e6
    status = s.get("status", {}).get("code", "STATUS_CODE_UNSET").replace("STATUS_CODE_", "")
    print("  run %d  %-14s %-9s trace %s span %s parent %-8s %7.2f ms  %s" % (
        runs.index(run) + 1, s.get("name"), s.get("kind", "").replace("SPAN_KIND_", ""), s.get("trace_id", "")[:8],
        s.get("span_id", "")[:8], s.get("parent_span_id", "-")[:8], ms, status))
print("%d log records, %d spans, %d requests decoded with the official definitions%s" % (
    len(shown), len(spans), len(taken), "" if not failed else "; %d NOT DECODED" % len(failed)))
