import CairnStore
import CairnTestSupport
import CairnUploader
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

    /// Each destination has its own delivery state. The native collector refuses the key
    /// (401, held) while the OTLP collector takes everything: OTLP gets every event at
    /// once, the operator is told of the native refusal only, and the held native
    /// requests wait on disk. Then the reverse, after a restart with the key fixed: the
    /// OTLP collector answers 503 to everything (its breaker opens) while the native
    /// collector takes the stored requests and the new events; nothing arrives twice.
    @Test func oneDestinationFailingDoesNotHoldTheOther() throws {
        let native = try CollectorProcess(), otlp = try CollectorProcess()
        defer {
            native.stop()
            otlp.stop()
        }
        try native.expect(["api_key": "right"])
        let dir = try TemporaryDirectory("cairn-otlp")
        func env(_ key: String, _ name: String) -> [String: String] {
            Self.env(dir.path, ["CAIRN_APP_ID": "orders", "CAIRN_API_KEY": key,
                                "CAIRN_UPLOAD_URL": native.baseURL + "/v1/batch",
                                "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": otlp.baseURL + "/v1/logs",
                                "CAIRN_TEST_EVENT_NAME": name, "CAIRN_BATCH_EVENTS": "10"])
        }
        let first = try runToEnd(productsDirectory + "/cairn-service-child", ["run", "40"],
                                 environment: env("wrong", "first"), timeout: 60)
        #expect(first.status == 0, "\(first.err)")
        let otlpFirst = try Self.logRecords(otlp).filter { $0["event_name"] as? String == "first" }
        #expect(otlpFirst.compactMap(Self.index).sorted() == Array(0..<40), "OTLP took every event while native was refused")
        let refusals = first.err.split(separator: "\n").filter { $0.contains("refused") }
        #expect(refusals.count == 1 && refusals[0].contains("/v1/batch") && refusals[0].contains("API key"), "\(first.err)")
        #expect(!first.err.contains("/v1/logs"), "nothing said of the OTLP destination: \(first.err)")
        #expect(try native.rawRequests().allSatisfy { ($0["response"] as? [String: Any])?["status"] as? Int == 401 })
        #expect(try LifecycleTests.received(native).isEmpty)

        // The reverse: the key fixed, the OTLP collector failing.
        try native.expect([:])
        try otlp.setDefault(["status": 503])
        let before = try otlp.rawRequests().count
        let second = try runToEnd(productsDirectory + "/cairn-service-child", ["run", "40"],
                                  environment: env("right", "second").merging(["CAIRN_TEST_PAUSE_MS": "1500"]) { $1 },
                                  timeout: 90)
        #expect(second.status == 0, "\(second.err)")
        let arrived = try LifecycleTests.received(native)
        for name in ["first", "second"] {
            let got = arrived.filter { $0["name"] as? String == name }
                .compactMap { ($0["properties"] as? [String: Any])?["i"] as? Int }
            #expect(got.sorted() == Array(0..<40), "native got \(name)'s events once each: \(got.sorted())")
        }
        #expect(try otlp.rawRequests().count > before, "the OTLP collector was tried")
        #expect(try Self.logRecords(otlp).filter { $0["event_name"] as? String == "second" }.isEmpty)
        #expect(second.err.contains("/v1/logs") && !second.err.contains("/v1/batch refused"), "\(second.err)")
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

    /// OTLP's answers across kills and restarts, one data directory throughout:
    /// 1. the collector wants a key the service does not have (401): the request is kept;
    ///    the service is killed (SIGKILL);
    /// 2. restarted with the rotated key (`OTEL_EXPORTER_OTLP_HEADERS`): 503, 429 with a
    ///    `Retry-After` in seconds, 429 with one as an HTTP date (each waited out), then an
    ///    attempt killed while the collector holds it;
    /// 3. restarted: a 400 (dropped), a partial success, then everything taken.
    /// Every refused request is sent again with the same bytes and taken; no request is
    /// taken twice and no event arrives twice; every event arrives or is in the request
    /// refused for good, counted as `otlp_rejected`; the partial success's rejected
    /// records are counted as `otlp_partial`.
    @Test func killAndRestartMatrix() throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        let dir = try TemporaryDirectory("cairn-otlp")
        try collector.expect(["api_key": "new"])
        func env(_ key: String, _ name: String, _ extra: [String: String] = [:]) -> [String: String] {
            Self.env(dir.path, ["CAIRN_APP_ID": "orders", "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": collector.baseURL + "/v1/logs",
                                "OTEL_EXPORTER_OTLP_HEADERS": "Authorization=Bearer%20\(key)",
                                "CAIRN_TEST_EVENT_NAME": name, "CAIRN_BATCH_EVENTS": "1000",
                                "CAIRN_TEST_PRINT_DROPS": "1"].merging(extra) { $1 })
        }
        func attempts() throws -> [[String: Any]] { try collector.rawRequests().filter { $0["path"] as? String == "/v1/logs" } }
        func status(_ a: [String: Any]) -> Int { (a["response"] as? [String: Any])?["status"] as? Int ?? 200 }
        func waitFor(_ what: String, _ condition: ([[String: Any]]) -> Bool) throws {
            let deadline = Date().addingTimeInterval(60)
            while try !condition(attempts()) {
                let seen = try attempts().map(status)
                try #require(Date() < deadline, "waited 60 s for \(what): \(seen)")
                usleep(50_000)
            }
        }

        // 1. The wrong key: held, then killed.
        let first = try ChildProcess(productsDirectory + "/cairn-service-child", ["serve", "30"], environment: env("old", "s1"))
        try waitFor("a 401") { $0.contains { status($0) == 401 } }
        usleep(300_000)
        first.signal(SIGKILL)
        #expect(first.finish(timeout: 30).signaled)

        // 2. The rotated key; 503, 429 (seconds), 429 (an HTTP date), then killed while
        // an attempt is out.
        try collector.expect([:])
        let dateEpoch = (Date().timeIntervalSince1970 + 8).rounded(.up)
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        let httpDate = formatter.string(from: Date(timeIntervalSince1970: dateEpoch))
        try collector.script([["status": 503], ["status": 429, "retry_after": "2"],
                              ["status": 429, "retry_after": httpDate], ["status": 503, "stall": 5]])
        let before = try attempts().count
        let second = try ChildProcess(productsDirectory + "/cairn-service-child", ["serve", "30"], environment: env("new", "s2"))
        try waitFor("the held attempt") { $0.count >= before + 4 }  // one at a time after the first pause
        usleep(200_000)
        second.signal(SIGKILL)
        #expect(second.finish(timeout: 30).signaled)
        // Each 429's wait is kept: no attempt starts after its answer until the time it
        // names (attempts already out when it came, arriving within 0.3 s, aside), and
        // one starts after it.
        let times = try attempts()[before...].map { (time: $0["time"] as? Double ?? 0, status: status($0),
                                                    after: ($0["response"] as? [String: Any])?["retry_after"] as? String) }
        let pauses = times.filter { $0.status == 429 }.map { ($0.time, $0.after == "2" ? $0.time + 2 : dateEpoch) }
        #expect(pauses.count == 2)
        for (answered, until) in pauses {
            #expect(!times.contains { $0.time > answered + 0.3 && $0.time < until - 0.05 }, "\(times) \(pauses)")
            #expect(times.contains { $0.time >= until - 0.05 }, "\(times) \(pauses)")
        }

        // 3. A 400 (dropped for good), a partial success, then 200s.
        // ExportLogsServiceResponse { partial_success { rejected_log_records: 3, error_message: "3 too old" } }
        let partial = "0a0d080312093320746f6f206f6c64"
        try collector.script([["status": 400, "body": "bad"],
                              ["status": 200, "body_hex": partial, "content_type": "application/x-protobuf"]])
        let third = try runToEnd(productsDirectory + "/cairn-service-child", ["run", "20"],
                                 environment: env("new", "s3", ["CAIRN_TEST_PAUSE_MS": "3000", "CAIRN_BATCH_EVENTS": "10"]),
                                 timeout: 90)
        #expect(third.status == 0, "\(third.err)")

        let all = try attempts()
        func header(_ a: [String: Any], _ name: String) -> String? {
            (a["headers"] as? [[String]] ?? []).first { $0.first?.lowercased() == name }?.last
        }
        #expect(all.filter { status($0) == 401 }.allSatisfy { header($0, "authorization") == "Bearer old" })
        let taken = all.filter { status($0) < 300 }
        #expect(taken.allSatisfy { header($0, "authorization") == "Bearer new" && $0["error"] is NSNull })
        let takenBodies = taken.compactMap { $0["body_sha256"] as? String }
        // (The 400 may fall on a request refused before: then it is refused for good.)
        let refusedForGood = Set(all.filter { status($0) == 400 }.compactMap { $0["body_sha256"] as? String })
        let refusedBodies = Set(all.filter { [401, 429, 503].contains(status($0)) }.compactMap { $0["body_sha256"] as? String })
            .subtracting(refusedForGood)
        #expect(!refusedBodies.isEmpty && refusedBodies.isSubset(of: Set(takenBodies)),
                "every request refused for a while was sent again with the same bytes, and taken")
        #expect(Set(takenBodies).isDisjoint(with: refusedForGood))
        #expect(Set(takenBodies).count == takenBodies.count, "no request taken twice")
        func records(_ attempts: [[String: Any]]) -> [[String: Any]] {
            attempts.compactMap { $0["otlp"] as? [String: Any] }
                .flatMap { ($0["resource_logs"] as? [[String: Any]]) ?? [] }
                .flatMap { ($0["scope_logs"] as? [[String: Any]]) ?? [] }
                .flatMap { ($0["log_records"] as? [[String: Any]]) ?? [] }
        }
        func uid(_ r: [String: Any]) -> String? {
            (r["attributes"] as? [[String: Any]] ?? []).first { $0["key"] as? String == "log.record.uid" }
                .flatMap { ($0["value"] as? [String: Any])?["string_value"] as? String }
        }
        let arrived = records(taken)
        let uids = arrived.compactMap(uid)
        #expect(uids.count == arrived.count && Set(uids).count == uids.count, "no event arrives twice")
        let rejected = records(all.filter { status($0) == 400 })
        for name in ["s1", "s2", "s3"] {
            let got = arrived.filter { $0["event_name"] as? String == name }.compactMap(Self.index)
            let lost = rejected.filter { $0["event_name"] as? String == name }.compactMap(Self.index)
            #expect((got + lost).sorted() == Array(0..<(name == "s3" ? 20 : 30)), "\(name): \(got.sorted()) + \(lost.sorted())")
        }
        func dropped(_ reason: String) -> Int {
            third.out.split(separator: "\n").first { $0.hasPrefix("dropped \(reason) ") }
                .flatMap { $0.split(separator: " ").last }.flatMap { Int($0) } ?? 0
        }
        #expect(!rejected.isEmpty && dropped("otlp_rejected") == rejected.count, "\(third.out)")
        #expect(dropped("otlp_partial") == 3, "\(third.out)")
        // The collector's message in the next sdk_health.
        let health = arrived.filter { $0["event_name"] as? String == "sdk_health" }.map {
            ($0["attributes"] as? [[String: Any]] ?? []).first { $0["key"] as? String == "otlp_message" }
                .flatMap { ($0["value"] as? [String: Any])?["string_value"] as? String }
        }
        #expect(health.contains("3 too old"), "\(health)")
    }

    /// A collector that answers 503, then 429 with a Retry-After in seconds, then 502,
    /// then takes it: the request is kept on disk and sent again by the next starts,
    /// with the same bytes every time, every event once. One that answers 400: the
    /// request is dropped, counted as `otlp_rejected`, never sent again. With 400 events
    /// a request is several frames, kept packed in memory and on disk (`PackedBody`).
    @Test(arguments: [20, 400]) func retriedWithTheSameBytesOrDroppedAndCounted(events: Int) throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        try collector.script([["status": 503], ["status": 429, "retry_after": "1"], ["status": 502]])
        let dir = try TemporaryDirectory("cairn-otlp")
        let env = Self.env(dir.path, ["CAIRN_APP_ID": "orders", "OTEL_EXPORTER_OTLP_ENDPOINT": collector.baseURL,
                                      "CAIRN_BATCH_EVENTS": "1000", "CAIRN_BATCH_AGE_MS": "200",
                                      "CAIRN_TEST_PRINT_DROPS": "1"])
        let r = try runToEnd(productsDirectory + "/cairn-service-child", ["run", "\(events)"], environment: env, timeout: 90)
        #expect(r.status == 0, "\(r.err)")
        func status(_ a: [String: Any]) -> Int { (a["response"] as? [String: Any])?["status"] as? Int ?? 200 }
        func bodies() throws -> (refused: Set<String>, taken: [String]) {
            let logs = try collector.rawRequests().filter { $0["path"] as? String == "/v1/logs" }
            return (Set(logs.filter { status($0) >= 500 || status($0) == 429 }.compactMap { $0["body_sha256"] as? String }),
                    logs.filter { status($0) < 300 }.compactMap { $0["body_sha256"] as? String })
        }
        if events == 400 {
            // What the first start kept on disk: the refused request, packed; the same
            // bytes as refused once unpacked.
            let store = try SnapshotStore(directory: dir.path + "/store", options: .init())
            let kept = try store.oldest(limit: 100).compactMap { UploadRequest(record: $0.record) }
            let packed = kept.filter(\.packed)
            #expect(!packed.isEmpty, "\(kept.map { ($0.destination, $0.body.count) })")
            let refused = try bodies().refused
            #expect(try packed.allSatisfy { refused.contains(try sha256Hex(try #require($0.wireBody))) })
            let largest = try collector.rawRequests().compactMap { $0["body_length"] as? Int }.max() ?? 0
            #expect(largest > PackedBody.frameBytes)
        }
        // The next starts replay what waits on disk (a start's own last batch may meet a
        // scripted failure too: then the one after sends it).
        for _ in 0..<8 {
            let (refused, taken) = try bodies()
            if try Self.logRecords(collector).compactMap(Self.index).count >= events, refused.isSubset(of: Set(taken)) { break }
            let next = try runToEnd(productsDirectory + "/cairn-service-child", ["run", "0"],
                                    environment: env.merging(["CAIRN_TEST_PAUSE_MS": "1500"]) { $1 }, timeout: 90)
            #expect(next.status == 0, "\(next.err)")
        }
        let (refusedBodies, takenBodies) = try bodies()
        #expect(refusedBodies.count >= 1 && refusedBodies.isSubset(of: Set(takenBodies)),
                "every request answered 503, 429 or 502 was sent again, the same bytes, and taken")
        #expect(takenBodies.count == Set(takenBodies).count, "none taken twice")
        #expect(try Self.logRecords(collector).compactMap(Self.index).sorted() == Array(0..<events))

        try collector.reset()
        try collector.setDefault(["status": 400, "body": "bad"])
        let dir2 = try TemporaryDirectory("cairn-otlp")
        let refused = try runToEnd(productsDirectory + "/cairn-service-child", ["run", "\(events)"],
                                   environment: Self.env(dir2.path, env.filter { $0.key != "CAIRN_DATA_DIR" }), timeout: 60)
        #expect(refused.status == 0, "\(refused.err)")
        let sent = try collector.rawRequests().filter { $0["path"] as? String == "/v1/logs" }
        #expect(Set(sent.compactMap { $0["body_sha256"] as? String }).count == sent.count, "never sent twice")
        let dropped = refused.out.split(separator: "\n").first { $0.hasPrefix("dropped otlp_rejected ") }
        #expect((dropped?.split(separator: " ").last).flatMap { Int($0) } ?? 0 >= events, "\(refused.out)")
    }
}
