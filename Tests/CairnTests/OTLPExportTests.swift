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
