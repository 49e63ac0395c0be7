import CairnTestSupport
import Foundation
import Testing

/// A service configured by the standard OpenTelemetry variables (docs/FORMATS.md, "OTLP
/// export") exports its events as OTLP to the test collector, which decodes every
/// request with the official definitions; the answers' rules hold.
@Suite(.serialized) struct OTLPExportTests {
    /// The log records the collector decoded, from every attempt it answered 2xx.
    static func logRecords(_ collector: CollectorProcess) throws -> [[String: Any]] {
        try collector.rawRequests().filter { ($0["response"] as? [String: Any])?["status"] as? Int ?? 200 < 300 }
            .compactMap { $0["otlp"] as? [String: Any] }
            .flatMap { ($0["resource_logs"] as? [[String: Any]]) ?? [] }
            .flatMap { ($0["scope_logs"] as? [[String: Any]]) ?? [] }
            .flatMap { ($0["log_records"] as? [[String: Any]]) ?? [] }
    }

    static func index(_ record: [String: Any]) -> Int? {
        for kv in record["attributes"] as? [[String: Any]] ?? [] where kv["key"] as? String == "i" {
            return ((kv["value"] as? [String: Any])?["int_value"] as? String).flatMap { Int($0) }
        }
        return nil
    }

    static func env(_ dir: String, _ extra: [String: String]) -> [String: String] {
        var env = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("CAIRN_") && !$0.key.hasPrefix("OTEL_") }
        env["CAIRN_DATA_DIR"] = dir
        env["CAIRN_BATCH_AGE_MS"] = "50"
        return env.merging(extra) { $1 }
    }

    /// Only `OTEL_EXPORTER_OTLP_ENDPOINT` (no Cairn variable but the data directory): the
    /// service's events arrive as OTLP log records, each once, under the service name
    /// OpenTelemetry's variables give, and nothing goes to a native endpoint.
    @Test func onlyTheOpenTelemetryEndpoint() throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        let dir = try TemporaryDirectory("cairn-otlp")
        let r = try runToEnd(productsDirectory + "/cairn-service-child", ["run", "40"],
                             environment: Self.env(dir.path, ["OTEL_EXPORTER_OTLP_ENDPOINT": collector.baseURL,
                                                              "OTEL_SERVICE_NAME": "orders",
                                                              "OTEL_RESOURCE_ATTRIBUTES": "team=payments"]),
                             timeout: 60)
        #expect(r.status == 0, "\(r.err)")
        let attempts = try collector.rawRequests()
        #expect(attempts.allSatisfy { ($0["path"] as? String) == "/v1/logs" || ($0["path"] as? String) == "/v1/traces" })
        #expect(attempts.allSatisfy { $0["error"] is NSNull }, "\(attempts.compactMap { $0["error"] as? String })")
        let records = try Self.logRecords(collector).filter { $0["event_name"] as? String == "child_event" }
        #expect(records.compactMap(Self.index).sorted() == Array(0..<40), "\(r.err.suffix(3000))")
        let resource = try #require(try collector.rawRequests().compactMap { $0["otlp"] as? [String: Any] }.first
            .flatMap { ($0["resource_logs"] as? [[String: Any]])?.first?["resource"] as? [String: Any] })
        let names = (resource["attributes"] as? [[String: Any]] ?? []).reduce(into: [String: String]()) {
            $0[$1["key"] as? String ?? ""] = ($1["value"] as? [String: Any])?["string_value"] as? String
        }
        #expect(names["service.name"] == "orders" && names["team"] == "payments" && names["telemetry.sdk.name"] == "cairn")
    }

    /// The native upload and OTLP at once: one ring, each event in both.
    @Test func nativeAndOTLPTogether() throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        let dir = try TemporaryDirectory("cairn-otlp")
        let r = try runToEnd(productsDirectory + "/cairn-service-child", ["run", "30"],
                             environment: Self.env(dir.path, ["CAIRN_APP_ID": "orders", "CAIRN_API_KEY": "k",
                                                              "CAIRN_UPLOAD_URL": collector.baseURL + "/v1/batch",
                                                              "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": collector.baseURL + "/v1/logs",
                                                              "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip"]),
                             timeout: 60)
        #expect(r.status == 0, "\(r.err)")
        #expect(LifecycleTests.childIndexes(try LifecycleTests.received(collector)).sorted() == Array(0..<30))
        #expect(try Self.logRecords(collector).compactMap(Self.index).sorted() == Array(0..<30))
        let otlp = try collector.rawRequests().filter { $0["path"] as? String == "/v1/logs" }
        #expect(!otlp.isEmpty && otlp.allSatisfy { $0["content_encoding"] as? String == "gzip" && $0["error"] is NSNull })
    }

    /// The destination set in code (``Cairn/Options/otlp``): JSON, zstd, the headers and
    /// resource attributes it names; the collector decodes both signals strictly.
    @Test func setInCode() throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        let dir = try TemporaryDirectory("cairn-otlp")
        let r = try runToEnd(productsDirectory + "/cairn-service-child", ["run", "25"],
                             environment: Self.env(dir.path, ["CAIRN_APP_ID": "orders",
                                                              "CAIRN_TEST_OTLP_IN_CODE": collector.baseURL + "/"]),
                             timeout: 60)
        #expect(r.status == 0, "\(r.err)")
        let logs = try collector.rawRequests().filter { $0["path"] as? String == "/v1/logs" }
        func header(_ a: [String: Any], _ name: String) -> String? {
            (a["headers"] as? [[String]] ?? []).first { $0.first?.lowercased() == name }?.last
        }
        #expect(!logs.isEmpty && logs.allSatisfy {
            header($0, "content-encoding") == "zstd" && header($0, "content-type") == "application/json"
                && header($0, "x-tenant") == "payments" && $0["error"] is NSNull
        }, "\(logs.map { ($0["headers"] ?? "", $0["error"] ?? "") })")
        #expect(try Self.logRecords(collector).compactMap(Self.index).sorted() == Array(0..<25))
        let resource = try #require(logs.compactMap { $0["otlp"] as? [String: Any] }.first
            .flatMap { ($0["resource_logs"] as? [[String: Any]])?.first?["resource"] as? [String: Any] })
        let names = (resource["attributes"] as? [[String: Any]] ?? []).reduce(into: [String: String]()) {
            $0[$1["key"] as? String ?? ""] = ($1["value"] as? [String: Any])?["string_value"] as? String
        }
        #expect(names["service.name"] == "orders-in-code" && names["team"] == "core")
    }

    /// The spans the collector decoded from taken requests, each with its resource's
    /// `service.name` (as "service").
    static func spans(_ collector: CollectorProcess) throws -> [[String: Any]] {
        var out: [[String: Any]] = []
        let taken = try collector.rawRequests().filter { ($0["response"] as? [String: Any])?["status"] as? Int ?? 200 < 300 }
        for resourceSpans in taken.compactMap({ $0["otlp"] as? [String: Any] })
            .flatMap({ ($0["resource_spans"] as? [[String: Any]]) ?? [] }) {
            let service = ((resourceSpans["resource"] as? [String: Any])?["attributes"] as? [[String: Any]] ?? [])
                .first { $0["key"] as? String == "service.name" }
                .flatMap { ($0["value"] as? [String: Any])?["string_value"] as? String }
            for scope in resourceSpans["scope_spans"] as? [[String: Any]] ?? [] {
                for var span in scope["spans"] as? [[String: Any]] ?? [] {
                    span["service"] = service
                    out.append(span)
                }
            }
        }
        return out
    }

    /// A trace across two processes: a service gets a request carrying `traceparent`
    /// and `tracestate`, serves it in a server span, calls a second service (a process
    /// of its own) from a client span with the headers `withOutbound` gives, and that
    /// service serves the call in its own server span. Three levels under the upstream
    /// caller's span, one trace id, each span's parent the one above, kinds SERVER,
    /// CLIENT, SERVER, the trace state and the random flag carried through, and each
    /// service's events under its own span; decoded with the official definitions.
    @Test(arguments: ["http/protobuf", "http/json"])
    func spanTreeAcrossTwoProcesses(_ proto: String) throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        let dir = try TemporaryDirectory("cairn-otlp")
        let upstreamTrace = "4bf92f3577b34da6a3ce929d0e0e4736", upstreamSpan = "00f067aa0ba902b7"
        let r = try runToEnd(productsDirectory + "/cairn-service-child", ["trace-parent", "0"],
                             environment: Self.env(dir.path, [
                                 "OTEL_EXPORTER_OTLP_ENDPOINT": collector.baseURL, "OTEL_SERVICE_NAME": "checkout",
                                 "OTEL_EXPORTER_OTLP_PROTOCOL": proto, "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip",
                                 "CAIRN_TEST_TRACEPARENT": "00-\(upstreamTrace)-\(upstreamSpan)-03",
                                 "CAIRN_TEST_TRACESTATE": "congo=t61rcWkgMzE, rojo=00f067aa0ba902b7"]),
                             timeout: 60)
        #expect(r.status == 0 && r.out.contains("callee 201"), "\(r.out) \(r.err)")
        let attempts = try collector.rawRequests()
        #expect(attempts.allSatisfy { $0["error"] is NSNull }, "\(attempts.compactMap { $0["error"] as? String })")
        let spans = try Self.spans(collector)
        func one(_ name: String) throws -> [String: Any] {
            let found = spans.filter { $0["name"] as? String == name }
            try #require(found.count == 1, "\(name): \(spans.map { $0["name"] ?? "" })")
            return found[0]
        }
        let server = try one("GET /checkout/:id"), client = try one("http.client"), callee = try one("POST /pay")
        for span in [server, client, callee] {
            #expect(span["trace_id"] as? String == upstreamTrace)
            #expect(span["trace_state"] as? String == "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")
            // Sampled (0x01), random (0x02) from the header, and the parent remote (0x100|0x200)
            // for the server spans only.
            let flags = span["flags"] as? Int ?? 0
            #expect(flags & 0xFF == 0x03, "\(span["name"] ?? ""): \(flags)")
        }
        #expect(server["parent_span_id"] as? String == upstreamSpan && server["kind"] as? String == "SPAN_KIND_SERVER")
        #expect(client["parent_span_id"] as? String == server["span_id"] as? String
                && client["kind"] as? String == "SPAN_KIND_CLIENT")
        #expect(callee["parent_span_id"] as? String == client["span_id"] as? String
                && callee["kind"] as? String == "SPAN_KIND_SERVER")
        #expect(server["service"] as? String == "checkout" && client["service"] as? String == "checkout"
                && callee["service"] as? String == "payments")
        #expect((server["flags"] as? Int ?? 0) & 0x300 == 0x300 && (callee["flags"] as? Int ?? 0) & 0x300 == 0x300)
        #expect((client["flags"] as? Int ?? 0) & 0x300 == 0x100, "a local parent")
        // Each service's event under its own server span.
        let records = try Self.logRecords(collector)
        let started = records.first { $0["event_name"] as? String == "checkout_started" }
        let taken = records.first { $0["event_name"] as? String == "payment_taken" }
        #expect(started?["span_id"] as? String == server["span_id"] as? String
                && started?["trace_id"] as? String == upstreamTrace)
        #expect(taken?["span_id"] as? String == callee["span_id"] as? String && taken?["trace_id"] as? String == upstreamTrace)
    }

    /// A collector that answers 503, then 429 with a Retry-After in seconds, then 502,
    /// then takes it: the request is kept on disk and sent again by the next starts,
    /// with the same bytes every time, every event once. One that answers 400: the
    /// request is dropped, counted as `otlp_rejected`, never sent again.
    @Test func retriedWithTheSameBytesOrDroppedAndCounted() throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        try collector.script([["status": 503], ["status": 429, "retry_after": "1"], ["status": 502]])
        let dir = try TemporaryDirectory("cairn-otlp")
        let env = Self.env(dir.path, ["CAIRN_APP_ID": "orders", "OTEL_EXPORTER_OTLP_ENDPOINT": collector.baseURL,
                                      "CAIRN_BATCH_EVENTS": "1000", "CAIRN_BATCH_AGE_MS": "200",
                                      "CAIRN_TEST_PRINT_DROPS": "1"])
        let r = try runToEnd(productsDirectory + "/cairn-service-child", ["run", "20"], environment: env, timeout: 90)
        #expect(r.status == 0, "\(r.err)")
        func status(_ a: [String: Any]) -> Int { (a["response"] as? [String: Any])?["status"] as? Int ?? 200 }
        func bodies() throws -> (refused: Set<String>, taken: [String]) {
            let logs = try collector.rawRequests().filter { $0["path"] as? String == "/v1/logs" }
            return (Set(logs.filter { status($0) >= 500 || status($0) == 429 }.compactMap { $0["body_sha256"] as? String }),
                    logs.filter { status($0) < 300 }.compactMap { $0["body_sha256"] as? String })
        }
        // The next starts replay what waits on disk (a start's own last batch may meet a
        // scripted failure too: then the one after sends it).
        for _ in 0..<8 {
            let (refused, taken) = try bodies()
            if try Self.logRecords(collector).compactMap(Self.index).count >= 20, refused.isSubset(of: Set(taken)) { break }
            let next = try runToEnd(productsDirectory + "/cairn-service-child", ["run", "0"],
                                    environment: env.merging(["CAIRN_TEST_PAUSE_MS": "1500"]) { $1 }, timeout: 90)
            #expect(next.status == 0, "\(next.err)")
        }
        let (refusedBodies, takenBodies) = try bodies()
        #expect(refusedBodies.count >= 1 && refusedBodies.isSubset(of: Set(takenBodies)),
                "every request answered 503, 429 or 502 was sent again, the same bytes, and taken")
        #expect(takenBodies.count == Set(takenBodies).count, "none taken twice")
        #expect(try Self.logRecords(collector).compactMap(Self.index).sorted() == Array(0..<20))

        try collector.reset()
        try collector.setDefault(["status": 400, "body": "bad"])
        let dir2 = try TemporaryDirectory("cairn-otlp")
        let refused = try runToEnd(productsDirectory + "/cairn-service-child", ["run", "20"],
                                   environment: Self.env(dir2.path, env.filter { $0.key != "CAIRN_DATA_DIR" }), timeout: 60)
        #expect(refused.status == 0, "\(refused.err)")
        let sent = try collector.rawRequests().filter { $0["path"] as? String == "/v1/logs" }
        #expect(Set(sent.compactMap { $0["body_sha256"] as? String }).count == sent.count, "never sent twice")
        let dropped = refused.out.split(separator: "\n").first { $0.hasPrefix("dropped otlp_rejected ") }
        #expect((dropped?.split(separator: " ").last).flatMap { Int($0) } ?? 0 >= 20, "\(refused.out)")
    }
}
