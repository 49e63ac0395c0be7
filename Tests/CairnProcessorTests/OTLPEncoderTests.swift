import CairnBase
import CairnProcessor
import CairnTestSupport
import Foundation
import Testing

/// The OTLP encoding (docs/FORMATS.md, "OTLP export"), checked with a decoder that is not
/// ours: every request is decoded by the official definitions (Python's
/// `opentelemetry-proto`, Tests/Tools/otlp_decode.py), strictly: protobuf must come out
/// byte for byte the same when serialised again, JSON must parse with unknown fields
/// refused. Records are written by the real processor, as the ring holds them.
@Suite struct OTLPEncoderTests {
    static let processor = EventGoldenTests.processor
    static let millis = EventGoldenTests.millis
    static let session = "01938a2b-c000-7123-8456-7890abcdef01"
    static let observed: UInt64 = 1_800_000_000_000_000_000

    static func record(_ type: EventType = .track, _ name: String, _ props: [String: CairnValue] = [:],
                       span: SpanContext? = nil, isError: Bool = false, session: String? = session,
                       account: String? = nil) -> [UInt8] {
        let e = Event(type: type, name: name, properties: props, timeMillis: millis,
                      identity: Identity(distinctID: "host-7", accountID: account), sessionID: session, span: span,
                      isError: isError)
        return processor.record(e)
    }

    /// `requests` decoded by otlp_decode.py, one dictionary each.
    static func decode(_ requests: [OTLPEncoder.Request], signal: String, encoding: OTLPEncoder.Encoding)
        throws -> [[String: Any]]
    {
        let dir = try TemporaryDirectory()
        var paths: [String] = []
        for (k, r) in requests.enumerated() {
            let path = dir.path + "/\(k).bin"
            try Data(r.body).write(to: URL(fileURLWithPath: path))
            paths.append(path)
        }
        let run = try runToEnd("/usr/bin/env", ["python3", repoRoot.path + "/Tests/Tools/otlp_decode.py", signal,
                                                encoding == .protobuf ? "protobuf" : "json"] + paths)
        guard run.status == 0 else {
            Issue.record("otlp_decode.py: \(run.err)")
            return []
        }
        return try run.out.split(separator: "\n").map {
            try #require(try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any])
        }
    }

    static func encode(_ records: [[UInt8]], _ encoding: OTLPEncoder.Encoding,
                       settings: (inout OTLPEncoder.Settings) -> Void = { _ in })
        -> (logs: [OTLPEncoder.Request], traces: [OTLPEncoder.Request], metrics: [OTLPEncoder.Request])
    {
        var s = OTLPEncoder.Settings(encoding: encoding, hostID: "4c4c4544004d3510")
        settings(&s)
        let encoder = OTLPEncoder(settings: s)
        for r in records { #expect(encoder.add(r, observedNanos: observed)) }
        return encoder.finish()
    }

    /// The log records of decoded requests, with their resource's attributes.
    static func logRecords(_ decoded: [[String: Any]]) -> [(record: [String: Any], resource: [String: Any])] {
        var out: [(record: [String: Any], resource: [String: Any])] = []
        for request in decoded {
            for rl in request["resource_logs"] as? [[String: Any]] ?? [] {
                let resource = attributes((rl["resource"] as? [String: Any])?["attributes"])
                for sl in rl["scope_logs"] as? [[String: Any]] ?? [] {
                    #expect((sl["scope"] as? [String: Any])?["name"] as? String == "cairn")
                    #expect((sl["scope"] as? [String: Any])?["version"] as? String == cairnVersion)
                    for r in sl["log_records"] as? [[String: Any]] ?? [] { out.append((r, resource)) }
                }
            }
        }
        return out
    }

    static func spans(_ decoded: [[String: Any]]) -> [[String: Any]] {
        decoded.flatMap { ($0["resource_spans"] as? [[String: Any]] ?? []).flatMap { rs in
            (rs["scope_spans"] as? [[String: Any]] ?? []).flatMap { $0["spans"] as? [[String: Any]] ?? [] }
        } }
    }

    /// `KeyValue`s as a dictionary of plain values (AnyValue unwrapped).
    static func attributes(_ list: Any?) -> [String: Any] {
        var out: [String: Any] = [:]
        for kv in list as? [[String: Any]] ?? [] {
            out[kv["key"] as? String ?? ""] = plain(kv["value"])
        }
        return out
    }

    static func plain(_ any: Any?) -> Any {
        guard let v = any as? [String: Any] else { return NSNull() }
        if let s = v["string_value"] as? String { return s }
        if let b = v["bool_value"] as? Bool { return b }
        if let i = v["int_value"] as? String, let n = Int64(i) { return n }
        if let d = v["double_value"] as? Double { return d }
        if let a = v["array_value"] as? [String: Any] { return (a["values"] as? [Any] ?? []).map(plain) }
        if let a = v["array_value"], a is [String: Any] == false { return [] as [Any] }
        if let k = v["kvlist_value"] as? [String: Any] { return attributes(k["values"]) }
        return NSNull()
    }

    // MARK: Log records

    @Test(arguments: [OTLPEncoder.Encoding.protobuf, .json])
    func everyEventTypeIsALogRecord(encoding: OTLPEncoder.Encoding) throws {
        let records = [
            Self.record(.track, "order_placed", ["total": 42.5, "items": 3, "gift": false, "note": nil,
                                                 "tags": ["a", 1, true], "address": ["city": "Köln", "zip": "50667"],
                                                 "session.id": "mine", "text": "tab\tquote\"é😀"], account: "acct-9"),
            Self.record(.userSet, "user_properties", ["plan": "pro"]),
            Self.record(.track, "payment_failed", ["code": 402], isError: true),
            Self.record(.session, "session_end", ["reason": "crashed", "pid": 4242]),
            Self.record(.session, "session_end", ["reason": "clean"]),
            Self.record(.health, "sdk_health", ["ring_fill": 0.25]),
            Self.record(.crash, "crash", [
                "reason": "Fatal error: Index out of range", "message": "Fatal error: Index out of range",
                "headline": "Fatal error: Index out of range in trap(_:) at main.swift:20:9 (orders)",
                "signal": "SIGILL", "signal_number": 4,
                "frames": [["index": 0, "address": "0x55d0c0de1234", "module": "/app/orders", "offset": "0x1234",
                            "function": "trap(_:)", "file": "main.swift", "line": 20, "column": 9],
                           ["index": 1, "address": "0x7f0000001000"]],
                "modules": [["path": "/app/orders", "load_address": "0x55d0c0de0000", "build_id": "ab12cd"]],
            ]),
        ]
        let (logs, traces, _) = Self.encode(records, encoding)
        #expect(traces.isEmpty)
        #expect(logs.count == 1 && logs.first?.records == records.count)
        let decoded = Self.logRecords(try Self.decode(logs, signal: "logs", encoding: encoding))
        try #require(decoded.count == records.count)
        let byName = { (name: String) in decoded.filter { $0.record["event_name"] as? String == name } }

        let (order, resource) = try #require(byName("order_placed").first)
        #expect(order["severity_number"] as? String == "SEVERITY_NUMBER_INFO" && order["severity_text"] as? String == "INFO")
        #expect(order["time_unix_nano"] as? String == String(Self.millis * 1_000_000))
        #expect(order["observed_time_unix_nano"] as? String == String(Self.millis * 1_000_000))
        let a = Self.attributes(order["attributes"])
        #expect(a["total"] as? Double == 42.5 && a["items"] as? Int64 == 3 && a["gift"] as? Bool == false)
        #expect(a["note"] == nil, "null properties are left out")
        #expect((a["tags"] as? [Any])?.count == 3)
        #expect((a["address"] as? [String: Any])?["city"] as? String == "Köln")
        #expect(a["text"] as? String == "tab\tquote\"é😀")
        #expect(a["cairn.property.session.id"] as? String == "mine", "a property named like an envelope attribute moves")
        #expect(a["session.id"] as? String == Self.session && a["user.id"] as? String == "host-7")
        #expect(a["cairn.account_id"] as? String == "acct-9" && a["cairn.event.type"] as? String == "track")
        #expect(a["cairn.zone_offset"] as? Int64 == 60)
        #expect((a["log.record.uid"] as? String)?.count == 36)

        #expect(resource["service.name"] as? String == "orders")
        #expect(resource["service.version"] as? String == "orders@1.4.2")
        #expect(resource["service.instance.id"] as? String == Self.session)
        #expect(resource["deployment.environment.name"] as? String == "production")
        #expect(resource["host.name"] as? String == "web-1" && resource["host.id"] as? String == "4c4c4544004d3510")
        #expect(resource["host.arch"] as? String == "amd64" && resource["os.type"] as? String == "linux")
        #expect(resource["os.description"] as? String == "Debian GNU/Linux 12")
        #expect(resource["os.version"] as? String == "6.1.0-13-amd64")
        #expect(resource["process.pid"] as? Int64 == 4242)
        #expect(resource["process.executable.name"] as? String == "orders")
        // The session id is a UUIDv7: its time is the run's start.
        #expect(resource["process.creation.time"] as? String == "2024-12-03T01:39:03.296+00:00")
        #expect(resource["telemetry.sdk.name"] as? String == "cairn" && resource["telemetry.sdk.language"] as? String == "swift")
        #expect(resource["cairn.cpu_count"] as? Int64 == 2 && resource["cairn.time_zone"] as? String == "Europe/Berlin")
        #expect(resource["cairn.memory_limit"] as? Int64 == 536_870_912)

        #expect(byName("payment_failed").first?.record["severity_text"] as? String == "ERROR")
        let ends = byName("session_end").map { $0.record["severity_text"] as? String }
        #expect(ends.sorted { ($0 ?? "") < ($1 ?? "") } == ["INFO", "WARN"])
        #expect(byName("session_end").allSatisfy { $0.record["observed_time_unix_nano"] as? String == String(Self.observed) },
                "a previous run's records are observed when sent")
        #expect(byName("user_properties").first.map { Self.attributes($0.record["attributes"])["plan"] as? String } == "pro")

        let crash = try #require(byName("crash").first?.record)
        #expect(crash["severity_number"] as? String == "SEVERITY_NUMBER_FATAL")
        #expect((crash["body"] as? [String: Any])?["string_value"] as? String
                == "Fatal error: Index out of range in trap(_:) at main.swift:20:9 (orders)")
        let c = Self.attributes(crash["attributes"])
        #expect(c["exception.type"] as? String == "Swift runtime failure")
        #expect(c["exception.message"] as? String == "Fatal error: Index out of range")
        #expect(c["exception.stacktrace"] as? String
                == "#0 trap(_:) (orders+0x1234) at main.swift:20:9\n#1 ??? (0x7f0000001000)")
        let frames = try #require(c["frames"] as? [Any])
        #expect((frames.first as? [String: Any])?["offset"] as? String == "0x1234")
        #expect(((c["modules"] as? [Any])?.first as? [String: Any])?["build_id"] as? String == "ab12cd")
    }

    /// `log` events (swift-log's records): the level is the severity, the message the
    /// body, the label the `cairn.logger` attribute, and there is no event name. A level
    /// the table does not know is INFO; a message that is not a string is no body.
    @Test(arguments: [OTLPEncoder.Encoding.protobuf, .json])
    func logEventsAreLogRecords(encoding: OTLPEncoder.Encoding) throws {
        func log(_ severity: Severity, _ message: CairnValue, _ extra: [String: CairnValue] = [:]) -> [UInt8] {
            let e = Event(type: .log, name: "orders.db", properties: ["message": message, "code.line.number": 12]
                            .merging(extra) { $1 },
                          timeMillis: Self.millis, identity: Identity(distinctID: "host-7"), sessionID: Self.session,
                          tier: severity.tier, isError: severity.isError, severity: severity)
            return Self.processor.record(e)
        }
        let expected: [(Severity, String, String)] = [
            (.trace, "SEVERITY_NUMBER_TRACE", "TRACE"), (.debug, "SEVERITY_NUMBER_DEBUG", "DEBUG"),
            (.info, "SEVERITY_NUMBER_INFO", "INFO"), (.notice, "SEVERITY_NUMBER_INFO2", "INFO2"),
            (.warning, "SEVERITY_NUMBER_WARN", "WARN"), (.error, "SEVERITY_NUMBER_ERROR", "ERROR"),
            (.critical, "SEVERITY_NUMBER_FATAL", "FATAL"),
        ]
        var records = expected.map { log($0.0, .string("m-\($0.2)")) }
        records.append(log(.info, 42, ["cairn.logger": "mine"]))
        let (logs, traces, _) = Self.encode(records, encoding)
        #expect(traces.isEmpty)
        let decoded = Self.logRecords(try Self.decode(logs, signal: "logs", encoding: encoding)).map(\.record)
        try #require(decoded.count == records.count)
        for (k, (_, number, text)) in expected.enumerated() {
            let r = decoded[k]
            #expect(r["severity_number"] as? String == number && r["severity_text"] as? String == text, "\(r)")
            #expect((r["body"] as? [String: Any])?["string_value"] as? String == "m-\(text)")
            #expect(r["event_name"] == nil, "a log record has no event name: \(r)")
            let a = Self.attributes(r["attributes"])
            #expect(a["cairn.logger"] as? String == "orders.db" && a["message"] == nil)
            #expect(a["code.line.number"] as? Int64 == 12 && a["cairn.event.type"] as? String == "log")
        }
        let odd = try #require(decoded.last)
        #expect(odd["body"] == nil, "a message that is not a string is not a body")
        let a = Self.attributes(odd["attributes"])
        #expect(a["message"] as? Int64 == 42 && a["cairn.property.cairn.logger"] as? String == "mine"
                && a["cairn.logger"] as? String == "orders.db")
    }

    /// Metric reports (`metric` events, docs/FORMATS.md, "Metric reports") are OTLP
    /// metrics, one data point each, beside the batch's log records and not among them:
    /// a cumulative monotonic sum (integer and double), a gauge, a histogram with its
    /// buckets, bounds, min and max, dimensions as the point's attributes, a unit.
    @Test(arguments: [OTLPEncoder.Encoding.protobuf, .json])
    func metricReportsAreMetrics(encoding: OTLPEncoder.Encoding) throws {
        let start: Int64 = 1_796_237_000_000
        let records = [
            Self.record(.metric, "orders_placed", ["kind": "sum", "monotonic": true, "temporality": "cumulative",
                                                   "value": 7, "start_ms": .int(start),
                                                   "dimensions": ["plan": "pro", "region": "eu"]]),
            Self.record(.metric, "revenue", ["kind": "sum", "monotonic": true, "temporality": "cumulative",
                                             "value": 25.5, "start_ms": .int(start)]),
            Self.record(.metric, "queue_depth", ["kind": "gauge", "value": 0.0]),
            Self.record(.metric, "db_query", ["kind": "histogram", "temporality": "cumulative", "count": 3, "sum": 0.532,
                                              "min": 0.002, "max": 0.5, "bounds": [0.005, 0.05, 1.0], "counts": [1, 1, 1, 0],
                                              "unit": "s", "start_ms": .int(start), "dimensions": ["table": "orders"]]),
            Self.record(.track, "order_placed", ["plan": "pro"]),
        ]
        let (logs, traces, metrics) = Self.encode(records, encoding)
        #expect(traces.isEmpty && logs.count == 1 && logs.first?.records == 1, "the one tracked event is the log record")
        try #require(metrics.count == 1 && metrics.first?.records == 4)
        let decoded = try Self.decode(metrics, signal: "metrics", encoding: encoding)
        let resourceMetrics = try #require((decoded.first?["resource_metrics"] as? [[String: Any]])?.first)
        let resource = Self.attributes((resourceMetrics["resource"] as? [String: Any])?["attributes"])
        #expect(resource["service.name"] as? String == "orders")
        let scope = try #require((resourceMetrics["scope_metrics"] as? [[String: Any]])?.first)
        #expect((scope["scope"] as? [String: Any])?["name"] as? String == "cairn")
        let list = scope["metrics"] as? [[String: Any]] ?? []
        let byName = Dictionary(list.map { ($0["name"] as? String ?? "", $0) }) { $1 }
        let startNanos = String(start * 1_000_000), time = String(Self.millis * 1_000_000)

        let sum = try #require(byName["orders_placed"]?["sum"] as? [String: Any], "\(list)")
        #expect(sum["aggregation_temporality"] as? String == "AGGREGATION_TEMPORALITY_CUMULATIVE" && sum["is_monotonic"] as? Bool == true)
        let point = try #require((sum["data_points"] as? [[String: Any]])?.first)
        #expect(point["as_int"] as? String == "7" && point["start_time_unix_nano"] as? String == startNanos
                && point["time_unix_nano"] as? String == time)
        let dims = Self.attributes(point["attributes"])
        #expect(dims.count == 2 && dims["plan"] as? String == "pro" && dims["region"] as? String == "eu")

        let revenue = (byName["revenue"]?["sum"] as? [String: Any])?["data_points"] as? [[String: Any]]
        #expect(revenue?.first?["as_double"] as? Double == 25.5)
        let gauge = (byName["queue_depth"]?["gauge"] as? [String: Any])?["data_points"] as? [[String: Any]]
        #expect(gauge?.first?["as_double"] as? Double == 0.0, "a zero value is still a value (a oneof member)")

        let query = try #require(byName["db_query"])
        #expect(query["unit"] as? String == "s")
        let histogram = try #require(query["histogram"] as? [String: Any])
        #expect(histogram["aggregation_temporality"] as? String == "AGGREGATION_TEMPORALITY_CUMULATIVE")
        let h = try #require((histogram["data_points"] as? [[String: Any]])?.first)
        #expect(h["count"] as? String == "3" && h["sum"] as? Double == 0.532)
        #expect(h["bucket_counts"] as? [String] == ["1", "1", "1", "0"] && h["explicit_bounds"] as? [Double] == [0.005, 0.05, 1.0])
        #expect(h["min"] as? Double == 0.002 && h["max"] as? Double == 0.5)
        #expect(Self.attributes(h["attributes"])["table"] as? String == "orders")
    }

    /// A metric report that is not one (no kind, a histogram whose counts do not fit its
    /// bounds, a value that is not a number) is refused, as any record that cannot be
    /// mapped, and the rest of the batch is encoded.
    @Test func damagedMetricReportsAreRefused() throws {
        let encoder = OTLPEncoder(settings: OTLPEncoder.Settings(encoding: .protobuf))
        let bad = [
            Self.record(.metric, "m", ["value": 1]),
            Self.record(.metric, "m", ["kind": "histogram", "bounds": [1.0], "counts": [1]]),
            Self.record(.metric, "m", ["kind": "gauge", "value": "high"]),
            Self.record(.metric, "m", ["kind": "summary", "value": 1]),
        ]
        for r in bad { #expect(!encoder.add(r, observedNanos: Self.observed)) }
        #expect(encoder.add(Self.record(.metric, "ok", ["kind": "gauge", "value": 1]), observedNanos: Self.observed))
        let (_, _, metrics) = encoder.finish()
        #expect(metrics.count == 1 && metrics.first?.records == 1)
        _ = try Self.decode(metrics, signal: "metrics", encoding: .protobuf)
    }

    /// An event inside a span carries its trace and span ids.
    @Test(arguments: [OTLPEncoder.Encoding.protobuf, .json])
    func eventInASpanCarriesItsIDs(encoding: OTLPEncoder.Encoding) throws {
        let span = SpanContext(traceID: try #require(TraceID(hex: "4bf92f3577b34da6a3ce929d0e0e4736")),
                               spanID: try #require(SpanID(hex: "00f067aa0ba902b7")))
        let (logs, _, _) = Self.encode([Self.record(.track, "charge", span: span)], encoding)
        let r = try #require(Self.logRecords(try Self.decode(logs, signal: "logs", encoding: encoding)).first?.record)
        #expect(r["trace_id"] as? String == "4bf92f3577b34da6a3ce929d0e0e4736")
        #expect(r["span_id"] as? String == "00f067aa0ba902b7")
    }

    // MARK: Spans

    @Test(arguments: [OTLPEncoder.Encoding.protobuf, .json])
    func spansAreSpans(encoding: OTLPEncoder.Encoding) throws {
        let trace = try #require(TraceID(hex: "4bf92f3577b34da6a3ce929d0e0e4736"))
        let root = try #require(SpanID(hex: "00f067aa0ba902b7"))
        let child = try #require(SpanID(hex: "b7ad6b7169203331"))
        let call = try #require(SpanID(hex: "1111111111111111"))
        let records = [
            Self.record(.span, "GET /orders/:id", ["duration_ms": 12.5, "status": "ok"],
                        span: SpanContext(traceID: trace, spanID: root)),
            Self.record(.span, "charge", ["duration_ms": 2.0, "status": "error", "error": "declined(card: 42)"],
                        span: SpanContext(traceID: trace, spanID: child, parentSpanID: root), isError: true),
            Self.record(.span, "http.client", ["method": "POST", "url": "https://pay.example/charge",
                                               "status": 503, "duration_ms": 1.25, "outcome": "error",
                                               "message": "POST https://pay.example/charge 503"],
                        span: SpanContext(traceID: trace, spanID: call, parentSpanID: child), isError: true),
            Self.record(.track, "not_a_span"),
            Self.record(.span, "PUT /orders/:id", ["method": "PUT", "route": "/orders/:id", "status": 200,
                                                   "duration_ms": 3.0],
                        span: SpanContext(traceID: trace, spanID: try #require(SpanID(hex: "2222222222222222")),
                                          parentSpanID: SpanID(value: 0x3333_3333_3333_3333), sampled: true,
                                          random: false, traceState: TraceState(header: "congo=t61rcWkgMzE"),
                                          kind: .server)),
        ]
        let (logs, traces, _) = Self.encode(records, encoding)
        #expect(logs.first?.records == 1 && traces.first?.records == 4)
        let spans = Self.spans(try Self.decode(traces, signal: "traces", encoding: encoding))
        try #require(spans.count == 4)
        let byName = { (n: String) in spans.first { $0["name"] as? String == n } ?? [:] }
        let end = Self.millis * 1_000_000
        let server = byName("GET /orders/:id")
        #expect(server["trace_id"] as? String == "4bf92f3577b34da6a3ce929d0e0e4736")
        #expect(server["span_id"] as? String == "00f067aa0ba902b7" && server["parent_span_id"] == nil)
        #expect(server["kind"] as? String == "SPAN_KIND_INTERNAL")
        #expect(server["end_time_unix_nano"] as? String == String(end))
        #expect(server["start_time_unix_nano"] as? String == String(end - 12_500_000))
        #expect(server["status"] == nil, "a span that succeeded leaves its status unset")
        let attrs = Self.attributes(server["attributes"])
        #expect(attrs["duration_ms"] == nil && attrs["status"] == nil && attrs["session.id"] as? String == Self.session)

        let failed = byName("charge")
        #expect(failed["parent_span_id"] as? String == "00f067aa0ba902b7")
        let status = failed["status"] as? [String: Any]
        #expect(status?["code"] as? String == "STATUS_CODE_ERROR" && status?["message"] as? String == "declined(card: 42)")
        let event = (failed["events"] as? [[String: Any]])?.first
        #expect(event?["name"] as? String == "exception")
        #expect(Self.attributes(event?["attributes"])["exception.message"] as? String == "declined(card: 42)")

        let client = byName("http.client")
        #expect(client["kind"] as? String == "SPAN_KIND_CLIENT")
        let c = Self.attributes(client["attributes"])
        #expect(c["http.request.method"] as? String == "POST" && c["url.full"] as? String == "https://pay.example/charge")
        #expect(c["http.response.status_code"] as? Int64 == 503)
        #expect(c["outcome"] == nil && c["message"] == nil && c["method"] == nil)
        #expect((client["status"] as? [String: Any])?["message"] as? String == "HTTP 503")
        #expect(client["flags"] as? Int == 0x103, "a trace Cairn started: sampled, random; its parent is local")

        let incoming = byName("PUT /orders/:id")
        #expect(incoming["kind"] as? String == "SPAN_KIND_SERVER" && incoming["trace_state"] as? String == "congo=t61rcWkgMzE")
        #expect(incoming["flags"] as? Int == 0x301, "sampled, and its parent is remote")
        let i = Self.attributes(incoming["attributes"])
        #expect(i["http.request.method"] as? String == "PUT" && i["http.route"] as? String == "/orders/:id")
        #expect(i["http.response.status_code"] as? Int64 == 200 && incoming["status"] == nil)
    }

    // MARK: Resources, settings, limits

    /// Records of different contexts or sessions go under a resource each; the service's
    /// own resource attributes and name apply as the environment's rules say.
    @Test func groupsAndServiceSettings() throws {
        let other = Processor(common: { var c = EventGoldenTests.common; c.appID = "billing"; return c }(),
                              sdkVersion: "0.1.0", clock: EventClock(fixedOffsetMinutes: 0))
        let e = Event(name: "x", timeMillis: Self.millis, identity: Identity(distinctID: "h"), sessionID: Self.session)
        let records = [Self.record(.track, "a"), other.record(e), Self.record(.track, "b", session: "s-2"),
                       Self.record(.track, "c")]
        let (logs, _, _) = Self.encode(records, .protobuf) {
            $0.resourceAttributes = [("service.namespace", "shop"), ("team", "payments"), ("host.name", "ignored")]
        }
        let decoded = Self.logRecords(try Self.decode(logs, signal: "logs", encoding: .protobuf))
        #expect(decoded.count == 4)
        let resources = Set(decoded.map { "\($0.resource["service.name"] ?? "")/\($0.resource["service.instance.id"] ?? "-")" })
        #expect(resources == ["orders/\(Self.session)", "billing/\(Self.session)", "orders/s-2"])
        let first = try #require(decoded.first { $0.record["event_name"] as? String == "a" }?.resource)
        #expect(first["service.namespace"] as? String == "shop" && first["team"] as? String == "payments")
        #expect(first["host.name"] as? String == "web-1", "Cairn's own attributes win for the keys they set")
        #expect(first["process.creation.time"] != nil)
        #expect(decoded.first { $0.record["event_name"] as? String == "b" }?.resource["process.creation.time"] == nil,
                "no creation time from a session id that is not a UUIDv7")

        let (named, _, _) = Self.encode([Self.record(.track, "a")], .json) {
            $0.serviceName = "orders-api"
            $0.resourceAttributes = [("service.name", "from-attributes")]
        }
        #expect(Self.logRecords(try Self.decode(named, signal: "logs", encoding: .json)).first?
            .resource["service.name"] as? String == "orders-api")
    }

    /// An encoder reused across batches (its buffers kept between them) gives each
    /// batch the bytes a new encoder gives it: batches of several groups, then of one,
    /// then of spans and logs, then one cut into several requests.
    @Test(arguments: [OTLPEncoder.Encoding.protobuf, .json])
    func reusedAcrossBatches(encoding: OTLPEncoder.Encoding) throws {
        let other = Processor(common: { var c = EventGoldenTests.common; c.appID = "billing"; return c }(),
                              sdkVersion: "0.1.0", clock: EventClock(fixedOffsetMinutes: 0))
        let e = Event(name: "x", timeMillis: Self.millis, identity: Identity(distinctID: "h"), sessionID: Self.session)
        let span = Event(type: .span, name: "charge", properties: ["duration_ms": 3.5, "status": "ok"],
                         timeMillis: Self.millis, identity: Identity(distinctID: "h"), sessionID: Self.session,
                         span: SpanContext(traceID: .random(), spanID: .random()))
        let batches: [[[UInt8]]] = [
            [Self.record(.track, "a"), other.record(e), Self.record(.track, "b", session: "s-2"), Self.record(.track, "c")],
            [Self.record(.track, "d", ["k": 1])],
            [Self.processor.record(span), Self.record(.track, "e", ["nested": ["x": [1, 2]]])],
            (0..<40).map { Self.record(.track, "f\($0)", ["pad": .string(String(repeating: "x", count: 200))]) },
            // Records of 16 KiB and more (a length of three bytes).
            [Self.record(.track, "g", ["pad": .string(String(repeating: "y", count: 20_000))]),
             Self.record(.track, "h", ["pad": .string(String(repeating: "z", count: 17_000))])],
        ]
        var settings = OTLPEncoder.Settings(encoding: encoding, hostID: "4c4c4544004d3510")
        settings.maxRequestBytes = 4096
        // (a record over the limit goes alone)
        let reused = OTLPEncoder(settings: settings)
        for (k, batch) in batches.enumerated() {
            for r in batch { #expect(reused.add(r, observedNanos: Self.observed)) }
            let got = reused.finish()
            let fresh = OTLPEncoder(settings: settings)
            for r in batch { #expect(fresh.add(r, observedNanos: Self.observed)) }
            let want = fresh.finish()
            #expect(got.logs.map(\.body) == want.logs.map(\.body) && got.traces.map(\.body) == want.traces.map(\.body),
                    "batch \(k)")
            #expect(!got.logs.isEmpty && (k != 3 || got.logs.count > 1))
            _ = try Self.decode(got.logs, signal: "logs", encoding: encoding)
        }
    }

    /// A batch over the size limit is cut into requests of whole records, each under it.
    @Test(arguments: [OTLPEncoder.Encoding.protobuf, .json])
    func largeBatchIsCut(encoding: OTLPEncoder.Encoding) throws {
        let records = (0..<300).map { Self.record(.track, "e\($0)", ["payload": .string(String(repeating: "x", count: 200))],
                                                  session: $0 % 3 == 0 ? "s-\($0 % 2)" : Self.session) }
        let (logs, _, _) = Self.encode(records, encoding) { $0.maxRequestBytes = 16 << 10 }
        #expect(logs.count > 3)
        #expect(logs.allSatisfy { $0.body.count <= 16 << 10 })
        #expect(logs.reduce(0) { $0 + $1.records } == 300)
        let names = Self.logRecords(try Self.decode(logs, signal: "logs", encoding: encoding))
            .compactMap { $0.record["event_name"] as? String }
        #expect(Set(names) == Set((0..<300).map { "e\($0)" }) && names.count == 300)
    }

    /// The ring's form: bare records and the completion of their context record read
    /// as the whole records do; a completion that marks the context as another run's
    /// says so on every record.
    @Test(arguments: [OTLPEncoder.Encoding.protobuf, .json])
    func bareRecordsWithTheirCompletion(encoding: OTLPEncoder.Encoding) throws {
        let whole = [Self.record(.track, "a", ["k": 1]), Self.record(.track, "b", ["nested": ["x": [1, 2]]]),
                     Self.record(.track, "c")]
        func split(_ r: [UInt8]) -> (bare: [UInt8], completion: [UInt8]) {
            let marker = Array(#","context":"#.utf8)
            let at = (0...(r.count - marker.count)).last { Array(r[$0..<($0 + marker.count)]) == marker }!
            return (Array(r[..<at]), Array(r[at...]))
        }
        let fragment = EventGoldenTests.common.encodedFragment(sdkVersion: "0.1.0")
        #expect(split(whole[0]).completion == EventEnvelope.completion(fragment))
        let encoder = OTLPEncoder(settings: .init(encoding: encoding, hostID: "4c4c4544004d3510"))
        for r in whole {
            let (bare, completion) = split(r)
            #expect(bare.withUnsafeBytes { b in completion.withUnsafeBytes { encoder.add(b, completion: $0, observedNanos: 1) } })
        }
        let recovered = EventEnvelope.completion(EventEnvelope.recoveredFragment(current: fragment, sdkVersion: "0.1.0"))
        let lost = split(Self.record(.track, "d")).bare
        #expect(lost.withUnsafeBytes { b in recovered.withUnsafeBytes { encoder.add(b, completion: $0, observedNanos: 1) } })
        // A bare record cut inside a value, and a completion that is not one.
        let cut = Array(split(whole[1]).bare.dropLast(3))
        #expect(!cut.withUnsafeBytes { b in recovered.withUnsafeBytes { encoder.add(b, completion: $0, observedNanos: 1) } })
        let bad = Array(#","context":{"#.utf8)
        #expect(!lost.withUnsafeBytes { b in bad.withUnsafeBytes { encoder.add(b, completion: $0, observedNanos: 1) } })
        // A member after `properties` (the processor writes none, another writer may),
        // and kinds that read their properties first (a span, a session end).
        var later = split(Self.record(.track, "e", ["k": 2])).bare
        later += Array(#","seq":7"#.utf8)
        let span = SpanContext(traceID: try #require(TraceID(hex: "4bf92f3577b34da6a3ce929d0e0e4736")),
                               spanID: try #require(SpanID(hex: "00f067aa0ba902b7")))
        let spanBare = split(Self.record(.span, "s", ["duration_ms": 2.0, "status": "error", "error": "x"], span: span)).bare
        let endBare = split(Self.record(.session, "session_end", ["reason": "crashed"])).bare
        let completion = split(whole[0]).completion
        for r in [later, spanBare, endBare] {
            #expect(r.withUnsafeBytes { b in completion.withUnsafeBytes { encoder.add(b, completion: $0, observedNanos: 1) } })
        }
        let (logsOut, tracesOut, _) = encoder.finish()
        let spanOut = Self.spans(try Self.decode(tracesOut, signal: "traces", encoding: encoding))
        #expect(spanOut.count == 1 && (spanOut.first?["status"] as? [String: Any])?["message"] as? String == "x")
        let all = Self.logRecords(try Self.decode(logsOut, signal: "logs", encoding: encoding))
        #expect(all.first { $0.record["event_name"] as? String == "session_end" }?.record["severity_text"] as? String == "WARN")
        let e = try #require(all.first { $0.record["event_name"] as? String == "e" })
        #expect(Self.attributes(e.record["attributes"])["k"] as? Int64 == 2)
        let fromBare = all.filter { !["e", "session_end"].contains($0.record["event_name"] as? String ?? "") }
        let fromWhole = Self.logRecords(try Self.decode(Self.encode(whole, encoding).logs, signal: "logs", encoding: encoding))
        try #require(fromBare.count == 4 && fromWhole.count == 3)
        func canonical(_ v: [String: Any]) throws -> String {
            String(decoding: try JSONSerialization.data(withJSONObject: v, options: [.sortedKeys]), as: UTF8.self)
        }
        for k in 0..<3 {
            #expect(try canonical(Self.attributes(fromBare[k].record["attributes"]))
                    == (try canonical(Self.attributes(fromWhole[k].record["attributes"]))))
            #expect(try canonical(fromBare[k].resource) == (try canonical(fromWhole[k].resource)))
        }
        let d = try #require(fromBare.first { $0.record["event_name"] as? String == "d" })
        #expect(Self.attributes(d.record["attributes"])["cairn.context_recovered"] as? Bool == false)
        #expect(Self.attributes(fromBare[0].record["attributes"])["cairn.context_recovered"] == nil)
    }

    // MARK: Damaged and random input

    /// What is not an event is refused (and counted by the caller); text that is not
    /// UTF-8 inside a valid record still makes a message the official definitions read.
    @Test func damagedRecords() throws {
        let good = Self.record(.track, "ok", ["k": "v"])
        let encoder = OTLPEncoder(settings: .init(encoding: .protobuf))
        for bad in [Array(good.dropLast()), Array(good.prefix(good.count / 2)), [UInt8](repeating: 0, count: 64),
                    Array("[1,2]".utf8), Array(#"{"type":"track","name":"x"}"#.utf8),
                    Array(#"{"type":"track","name":"x","time":"yesterday"}"#.utf8),
                    Array(#"{"type":"track","name":"","time":"2026-12-02T19:53:04.512+01:00"}"#.utf8),
                    Array(#"{"type":"track","name":"x","time":"2026-12-02T19:53:04Z","properties":{"a":1,}}"#.utf8),
                    Array(#"{"type":"track","name":"x","time":"2026-12-02T19:53:04Z","properties":[]}"#.utf8), []] {
            #expect(!encoder.add(bad, observedNanos: 0), "\(String(decoding: bad, as: UTF8.self))")
        }
        var odd = Array(#"{"type":"track","name":"n\#u{00E9}","time":"2026-12-02T19:53:04Z","properties":{"#.utf8)
        odd += [0x22, 0x6B, 0xFF, 0x22, 0x3A, 0x22, 0xC3, 0x28, 0xED, 0xA0, 0x80, 0x22]  // "k\xFF":"\xC3(\xED\xA0\x80"
        odd += Array(#","lone":"\ud800x","pair":"\ud83d\ude00"}}"#.utf8)
        for encoding in [OTLPEncoder.Encoding.protobuf, .json] {
            let e = OTLPEncoder(settings: .init(encoding: encoding))
            #expect(e.add(odd, observedNanos: 0) && e.add(good, observedNanos: 0))
            let decoded = Self.logRecords(try Self.decode(e.finish().logs, signal: "logs", encoding: encoding))
            let a = Self.attributes(decoded.first?.record["attributes"])
            #expect(a["k\u{FFFD}"] as? String == "\u{FFFD}(\u{FFFD}\u{FFFD}\u{FFFD}")
            #expect(a["lone"] as? String == "\u{FFFD}x" && a["pair"] as? String == "😀")
            #expect(decoded.count == 2)
        }
    }

    /// Random properties, as the processor writes them, come back from the official
    /// decoder as the same values, in both encodings (a seeded round trip).
    @Test func randomPropertiesRoundTrip() throws {
        var rng = SplitMix(seed: 0xC0FFEE)
        func value(_ depth: Int) -> CairnValue {
            switch Int(rng.next() % (depth > 2 ? 5 : 7)) {
            case 0: return .int(Int64(bitPattern: rng.next()) >> Int(rng.next() % 64))
            case 1: return .double(Double(Int64(bitPattern: rng.next()) % 1_000_000) / 64)
            case 2: return .bool(rng.next() % 2 == 0)
            case 3: return .null
            case 4:
                let alphabet = Array("aZ09 _-\"\\/\n\té€😀\u{01}")
                return .string(String((0..<Int(rng.next() % 12)).map { _ in alphabet[Int(rng.next() % UInt64(alphabet.count))] }))
            case 5: return .array((0..<Int(rng.next() % 4)).map { _ in value(depth + 1) })
            default:
                return .object(Dictionary(uniqueKeysWithValues: (0..<Int(rng.next() % 4)).map { ("k\($0)", value(depth + 1)) }))
            }
        }
        var sent: [[String: CairnValue]] = []
        var records: [[UInt8]] = []
        for k in 0..<150 {
            var props: [String: CairnValue] = [:]
            for p in 0..<Int(rng.next() % 6) { props["p\(p)"] = value(0) }
            sent.append(props)
            records.append(Self.record(.track, "r\(k)", props))
        }
        func expected(_ v: CairnValue) -> Any {
            switch v {
            case .int(let i): return i
            case .double(let d): return d
            case .bool(let b): return b
            case .null: return NSNull()
            case .string(let s): return s
            case .array(let a): return a.map(expected)
            case .object(let o): return o.filter { $0.value != .null }.mapValues(expected)
            }
        }
        func canonical(_ v: [String: Any]) throws -> String {
            String(decoding: try JSONSerialization.data(withJSONObject: v, options: [.sortedKeys]), as: UTF8.self)
        }
        var decodedByEncoding: [[String]] = []
        for encoding in [OTLPEncoder.Encoding.protobuf, .json] {
            let decoded = Self.logRecords(try Self.decode(Self.encode(records, encoding).logs, signal: "logs",
                                                          encoding: encoding))
            try #require(decoded.count == 150)
            var texts: [String] = []
            for (k, props) in sent.enumerated() {
                let r = try #require(decoded.first { $0.record["event_name"] as? String == "r\(k)" })
                let got = Self.attributes(r.record["attributes"]).filter { $0.key.hasPrefix("p") }
                let want = props.filter { $0.value != .null }.mapValues(expected)
                let gotText = try canonical(got)
                #expect(gotText == (try canonical(want)), "record r\(k): \(props)")
                texts.append(gotText)
            }
            decodedByEncoding.append(texts)
        }
        #expect(decodedByEncoding[0] == decodedByEncoding[1], "both encodings say the same")
    }

    /// Records damaged at random (bytes flipped, cut, spliced): each is refused or
    /// encoded, never a crash, and what is encoded is a message the official definitions
    /// read, in both encodings.
    @Test func randomlyDamagedRecords() throws {
        var rng = SplitMix(seed: 0xDA3A6E)
        let span = SpanContext(traceID: try #require(TraceID(hex: "4bf92f3577b34da6a3ce929d0e0e4736")),
                               spanID: try #require(SpanID(hex: "00f067aa0ba902b7")))
        let seeds = [Self.record(.track, "order", ["a": 1, "b": ["c": [true, nil, 2.5]], "d": "é😀\n"]),
                     Self.record(.span, "GET /x", ["duration_ms": 3.5, "status": "error", "error": "boom"], span: span,
                                 isError: true),
                     Self.record(.session, "session_end", ["reason": "crashed"])]
        for encoding in [OTLPEncoder.Encoding.protobuf, .json] {
            let encoder = OTLPEncoder(settings: .init(encoding: encoding))
            var accepted = 0
            for _ in 0..<3000 {
                var r = seeds[Int(rng.next() % UInt64(seeds.count))]
                for _ in 0..<(1 + Int(rng.next() % 3)) {
                    let at = Int(rng.next() % UInt64(r.count))
                    switch rng.next() % 4 {
                    case 0: r[at] = UInt8(truncatingIfNeeded: rng.next())
                    case 1:
                        let structural = Array(#"{}[]",:\0-e."#.utf8)
                        r[at] = structural[Int(rng.next() % UInt64(structural.count))]
                    case 2: r.removeSubrange(at..<min(r.count, at + Int(rng.next() % 8)))
                    default: r.insert(contentsOf: r[at..<min(r.count, at + 6)], at: at)
                    }
                    if r.isEmpty { break }
                }
                if encoder.add(r, observedNanos: 1) { accepted += 1 }
            }
            #expect(accepted > 100, "some damaged records are still events")
            let (logs, traces, _) = encoder.finish()
            #expect(logs.reduce(0) { $0 + $1.records } + traces.reduce(0) { $0 + $1.records } == accepted)
            _ = try Self.decode(logs, signal: "logs", encoding: encoding)
            _ = try Self.decode(traces, signal: "traces", encoding: encoding)
        }
    }

    /// Collectors' answers, made by the official definitions: a partial success is read
    /// from protobuf and JSON, for logs and traces; an empty answer, or one that rejected
    /// nothing, is a plain success; garbage is never read as one.
    @Test func partialSuccessAnswers() throws {
        let script = """
        import sys
        from google.protobuf import json_format
        from opentelemetry.proto.collector.logs.v1 import logs_service_pb2 as l
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as t
        msg = "x" * 150 + "é" * 40
        answers = [
            l.ExportLogsServiceResponse(partial_success=l.ExportLogsPartialSuccess(rejected_log_records=3, error_message="too old")),
            t.ExportTraceServiceResponse(partial_success=t.ExportTracePartialSuccess(rejected_spans=2, error_message=msg)),
            l.ExportLogsServiceResponse(),
            l.ExportLogsServiceResponse(partial_success=l.ExportLogsPartialSuccess(error_message="warning only")),
        ]
        for a in answers:
            print(a.SerializeToString().hex())
            print(json_format.MessageToJson(a, indent=None).encode().hex())
        """
        let run = try runToEnd("/usr/bin/env", ["python3", "-c", script])
        try #require(run.status == 0, "\(run.err)")
        // (An empty answer is an empty line.)
        let lines = run.out.split(separator: "\n", omittingEmptySubsequences: false).dropLast().map { line in
            stride(from: 0, to: line.count, by: 2).map { k -> UInt8 in
                let start = line.index(line.startIndex, offsetBy: k)
                return UInt8(line[start..<line.index(start, offsetBy: 2)], radix: 16)!
            }
        }
        try #require(lines.count == 8)
        for json in [false, true] {
            let at = json ? 1 : 0
            #expect(OTLPPartialSuccess(body: lines[at], json: json) == OTLPPartialSuccess(rejected: 3, message: "too old"))
            let traces = try #require(OTLPPartialSuccess(body: lines[2 + at], json: json))
            #expect(traces.rejected == 2 && traces.message.utf8.count <= 200 && traces.message.hasPrefix("xxx"))
            #expect(traces.message.hasSuffix("é"), "cut at a character's end")
            #expect(OTLPPartialSuccess(body: lines[4 + at], json: json) == nil)
            #expect(OTLPPartialSuccess(body: lines[6 + at], json: json)?.message == "warning only")
        }
        #expect(OTLPPartialSuccess(body: [], json: false) == nil)
        var rng = SplitMix(seed: 7)
        for _ in 0..<2000 {
            var damaged = lines[Int(rng.next() % 8)]
            if !damaged.isEmpty { damaged[Int(rng.next() % UInt64(damaged.count))] = UInt8(truncatingIfNeeded: rng.next()) }
            if rng.next() % 2 == 0 { damaged = Array(damaged.prefix(Int(rng.next() % UInt64(damaged.count + 1)))) }
            if let read = OTLPPartialSuccess(body: damaged, json: rng.next() % 2 == 0) {
                #expect(read.message.utf8.count <= 200)
            }
        }
    }

    @Test func rfc3339() {
        func nanos(_ s: String) -> UInt64? { Array(s.utf8).withUnsafeBytes { rfc3339Nanos($0) } }
        #expect(nanos("2026-12-02T19:53:04.512+01:00") == Self.millis * 1_000_000)
        #expect(nanos("2026-12-02T18:53:04.512Z") == Self.millis * 1_000_000)
        #expect(nanos("2026-12-02T18:53:04.512123456789Z") == Self.millis * 1_000_000 + 123_456)
        #expect(nanos("1970-01-01T00:00:00Z") == 0)
        #expect(nanos("2000-02-29T00:00:00-00:30") == 951_784_200 * 1_000_000_000)
        for bad in ["", "2026-12-02", "2026-13-02T00:00:00Z", "2026-12-02T19:53:04.+01:00", "2026-12-02T19:53:04+0100",
                    "1969-12-31T23:59:59Z", "2026-12-02T19:53:04Zjunk"] {
            #expect(nanos(bad) == nil, "\(bad)")
        }
    }
}
