#if Logging && Metrics && ServiceLifecycle
import CairnTestSupport
import Foundation
import Testing

/// swift-log's `Logger`, with Cairn's handler, in a service process (cairn-ecosystem-child,
/// which uses the public API only): what the native collector and an OTLP collector
/// receive, field by field, with the privacy rules, sampling and spans of any event.
@Suite(.serialized) struct LoggingTests {
    /// Every level, metadata, source and span of a record arrives as the documented `log`
    /// event, natively and as an OTLP log record; levels below the handler's are never
    /// sent; records from four threads all arrive; the console still prints each record,
    /// with the span's ids from the metadata provider.
    @Test func recordsArriveAsLogEvents() throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        let dir = try TemporaryDirectory("cairn-log")
        let r = try runToEnd(Ecosystem.child, ["log"], environment: Ecosystem.env(dir.path, collector), timeout: 60)
        #expect(r.status == 0, "\(r.err)")
        let logs = try Ecosystem.native(collector).filter { $0["type"] as? String == "log" }
        let orders = logs.filter { $0["name"] as? String == "orders" }
        let messages = orders.compactMap { Ecosystem.props($0)["message"] as? String }
        #expect(messages.sorted() == ["in span", "ledger unavailable", "order placed", "payment failed",
                                      "slow payment provider", "stock low", "with handler metadata"], "\(messages)")
        func event(_ message: String) -> [String: Any] {
            orders.first { Ecosystem.props($0)["message"] as? String == message } ?? [:]
        }
        let levels = ["order placed": "info", "stock low": "notice", "slow payment provider": "warning",
                      "payment failed": "error", "ledger unavailable": "critical"]
        for (message, level) in levels { #expect(event(message)["level"] as? String == level, "\(message)") }

        let placed = event("order placed"), p = Ecosystem.props(placed)
        #expect(placed["distinct_id"] as? String == "host-7" && placed["trace_id"] == nil)
        #expect(p["order_id"] as? String == "42" && p["attempt"] as? String == "3")
        #expect(p["items"] as? [String] == ["a", "b"] && (p["shipping"] as? [String: String]) == ["city": "Lyon"])
        #expect(p["customer"] as? String != "alice@example.com" && (p["customer"] as? String)?.contains("@example.com") != true,
                "an e-mail in metadata is masked: \(p["customer"] ?? "")")
        #expect(p["password"] as? String != "hunter2", "a sensitive key's value is masked: \(p["password"] ?? "")")
        #expect(p["log.source"] as? String == "cairn_ecosystem_child")
        #expect((p["code.file.path"] as? String)?.hasSuffix("main.swift") == true)
        #expect(p["code.function.name"] as? String != nil && (p["code.line.number"] as? Int ?? 0) > 0)

        let tagged = Ecosystem.props(event("with handler metadata"))
        #expect(tagged["request"] as? String == "r-2" && tagged["extra"] as? String == "yes",
                "the call's metadata wins over the handler's")

        let spanLine = try #require(r.out.split(separator: "\n").first { $0.hasPrefix("span ") })
        let ids = spanLine.split(separator: " ").dropFirst().map(String.init)
        let inSpan = event("in span")
        #expect(inSpan["trace_id"] as? String == ids.first && inSpan["span_id"] as? String == ids.last)
        #expect(Ecosystem.props(inSpan)["trace_id"] == nil, "the provider's ids are not repeated as properties")
        #expect(r.err.contains("trace_id=\(ids[0])") && r.err.contains("in span"),
                "the console line of a record in a span shows its ids: \(r.err.suffix(2000))")
        #expect(r.err.contains("order placed") && !r.err.contains("not logged"))
        #expect(!logs.contains { (Ecosystem.props($0)["message"] as? String)?.hasPrefix("not logged") == true })

        let threaded = logs.filter { $0["name"] as? String == "worker" }.map { Ecosystem.props($0) }
        let pairs = Set(threaded.compactMap { p in (p["t"] as? String).flatMap { t in (p["i"] as? String).map { "\(t)/\($0)" } } })
        #expect(threaded.count == 200 && pairs.count == 200, "\(threaded.count) records, \(pairs.count) distinct")

        // The same records as OTLP log records.
        let records = try Ecosystem.otlp(collector)
        func record(_ message: String) -> [String: Any] {
            records.first { ($0["body"] as? [String: Any])?["string_value"] as? String == message } ?? [:]
        }
        let severities = ["order placed": (9, "INFO"), "stock low": (10, "INFO2"), "slow payment provider": (13, "WARN"),
                          "payment failed": (17, "ERROR"), "ledger unavailable": (21, "FATAL")]
        for (message, (number, text)) in severities {
            let rec = record(message)
            #expect(rec["severity_number"] as? String == Self.severityName(number) && rec["severity_text"] as? String == text,
                    "\(message): \(rec)")
            #expect(rec["event_name"] == nil || rec["event_name"] as? String == "", "a log record is not an event: \(rec)")
        }
        let a = Ecosystem.attributes(record("order placed"))
        #expect(a["cairn.logger"] as? String == "orders" && a["order_id"] as? String == "42" && a["message"] == nil)
        #expect(a["code.line.number"] as? String == "\(p["code.line.number"] as? Int ?? -1)", "\(a)")
        #expect(a["customer"] as? String == p["customer"] as? String)
        let spanRecord = record("in span")
        #expect(Self.hex(spanRecord["trace_id"]) == ids.first && Self.hex(spanRecord["span_id"]) == ids.last)
    }

    /// The protobuf enum name the collector's decoder gives a severity number.
    static func severityName(_ number: Int) -> String {
        ["1": "SEVERITY_NUMBER_TRACE", "5": "SEVERITY_NUMBER_DEBUG", "9": "SEVERITY_NUMBER_INFO",
         "10": "SEVERITY_NUMBER_INFO2", "13": "SEVERITY_NUMBER_WARN", "17": "SEVERITY_NUMBER_ERROR",
         "21": "SEVERITY_NUMBER_FATAL"]["\(number)"] ?? "?"
    }

    /// An id as the collector reports it (hex, or base64 of the bytes), as lowercase hex.
    static func hex(_ value: Any?) -> String? {
        guard let text = value as? String else { return nil }
        if text.allSatisfy(\.isHexDigit), text.count % 2 == 0 { return text.lowercased() }
        return Data(base64Encoded: text).map { $0.map { String(format: "%02x", $0) }.joined() }
    }

    /// Sampling applies as to any event: with the Sampled tier's rate at 0, `info` and
    /// `notice` records are dropped (and counted), `warning` and above are kept.
    @Test func samplingKeepsWarningsAndErrors() throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        let dir = try TemporaryDirectory("cairn-log")
        let r = try runToEnd(Ecosystem.child, ["log"], environment: Ecosystem.env(dir.path, collector, ["CAIRN_SAMPLE_RATE": "0"]),
                             timeout: 60)
        #expect(r.status == 0, "\(r.err)")
        let logs = try Ecosystem.native(collector).filter { $0["type"] as? String == "log" }
        let levels = Set(logs.compactMap { $0["level"] as? String })
        #expect(levels == ["warning", "error", "critical"], "\(levels)")
        let health = try Ecosystem.native(collector).filter { $0["name"] as? String == "sdk_health" }
        let sampled = health.compactMap { (Ecosystem.props($0)["dropped"] as? [String: Any])?["sampled"] as? Int }.reduce(0, +)
        #expect(sampled >= 204, "the info and notice records are counted as sampled out: \(sampled)")
    }

    /// An error record is a breadcrumb of the crash report: the next start sends the
    /// crash with it, masked like any breadcrumb.
    @Test func errorRecordsAreBreadcrumbsOfTheCrash() throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        let dir = try TemporaryDirectory("cairn-log")
        let crashed = try runToEnd(Ecosystem.child, ["log-crash"], environment: Ecosystem.env(dir.path, collector), timeout: 60)
        #expect(crashed.status != 0 && crashed.status != 4, "died of the signal: \(crashed.status) \(crashed.err)")
        let next = try runToEnd(Ecosystem.child, ["idle"], environment: Ecosystem.env(dir.path, collector), timeout: 60)
        #expect(next.status == 0, "\(next.err)")
        let crash = try #require(try Ecosystem.native(collector).first { $0["type"] as? String == "crash" })
        let context = Ecosystem.props(crash)["context"] as? [String: Any]
        let crumbs = try #require(context?["breadcrumbs"] as? [[String: Any]], "\(crash)")
        let crumb = try #require(crumbs.last)
        #expect(crumb["category"] as? String == "auth")
        let message = crumb["message"] as? String ?? ""
        #expect(message.hasPrefix("no account for ") && !message.contains("bob@example.com"), "\(message)")
    }
}
#endif
