import Cairn
import CairnProcessor
import CairnTestKit
import CairnTestSupport
import Foundation
import Testing

/// The public API in this test process: one SDK started once (there is one per
/// process), sending to the real test collector over TCP and recording every finished
/// event with `RecordingDestination`. Each test uses its own event names.
enum Live {
    static let dataDirectory = URL(fileURLWithPath: NSTemporaryDirectory()).standardizedFileURL.path
        + "/cairn-api-\(getpid())-\(UUID().uuidString.prefix(8))"
    static let recorder = RecordingDestination()
    nonisolated(unsafe) static let collector: CollectorProcess? = try? CollectorProcess()

    static let cairn: Cairn? = {
        guard let collector else { return nil }
        var o = Cairn.Options(appID: "orders", distinctID: "host-7", release: "orders@1.4.2", build: "812",
                              environment: "test", uploadURL: collector.baseURL + "/v1/batch",
                              apiKey: "test-key", dataDirectory: dataDirectory)
        o.maxBatchAge = .milliseconds(50)
        // Room for the 10k-event burst below without shedding (a 4 MiB ring sheds the
        // Sampled tier above 80 % full, which a burst at full speed reaches).
        o.ringCapacity = 32 << 20
        o.destinations = [recorder]
        o.sampling = SamplingOptions(eventRates: ["never_kept": 0])
        o.filter = EventFilterOptions(denyNames: ["denied_*"])
        o.dynamicProperties = { ["build_flavour": "test", "plan": "dynamic"] }
        // The SDK runs until the test process ends; its data directory goes then.
        atexit { try? FileManager.default.removeItem(atPath: Live.dataDirectory) }
        return try? Cairn.start(o)
    }()

    /// The recorded events named `name`, parsed, once `count` of them arrived.
    static func events(_ name: String, count: Int, timeout: Duration = .seconds(20)) -> [[String: Any]] {
        let deadline = ContinuousClock.now + timeout
        var found: [[String: Any]] = []
        while ContinuousClock.now < deadline {
            _ = cairn?.flush(timeout: .seconds(5))
            found = recorder.events.compactMap(\.object).filter { $0["name"] as? String == name }
            if found.count >= count { break }
            usleep(10_000)
        }
        return found
    }

    static func props(_ e: [String: Any]) -> [String: Any] { e["properties"] as? [String: Any] ?? [:] }
}

@Suite(.serialized) struct CairnAPITests {
    @Test func startedAndASecondStartIsAnError() throws {
        let cairn = try #require(Live.cairn, "the SDK started")
        #expect(Cairn.shared === cairn)
        #expect(throws: CairnStartError.alreadyStarted) {
            try Cairn.start(Cairn.Options(appID: "x", distinctID: "y", dataDirectory: Live.dataDirectory + "/2"))
        }
    }

    @Test func trackedEventHasTheSchema() throws {
        let cairn = try #require(Live.cairn)
        cairn.track("order_placed", properties: ["plan": "pro", "seats": 3, "ratio": 0.5, "trial": false,
                                                 "tags": ["a", "b"]])
        let e = try #require(Live.events("order_placed", count: 1).first)
        let id = try #require(e["event_id"] as? String)
        #expect(id.count == 36 && Array(id)[14] == "7", "UUIDv7: \(id)")
        #expect(e["type"] as? String == "track" && e["distinct_id"] as? String == "host-7")
        #expect(e["session_id"] as? String == cairn.sessionID && e["account_id"] == nil)
        let parser = ISO8601DateFormatter()
        parser.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        let time = try #require((e["time"] as? String).flatMap { parser.date(from: $0) })
        #expect(abs(time.timeIntervalSinceNow) < 60)
        #expect(e["zone_offset"] is Int)
        let p = Live.props(e)
        #expect(p["plan"] as? String == "pro" && p["seats"] as? Int == 3 && p["ratio"] as? Double == 0.5)
        #expect(p["trial"] as? Bool == false && p["tags"] as? [String] == ["a", "b"])
        #expect(p["build_flavour"] as? String == "test", "dynamic properties fill in")
        let context = try #require(e["context"] as? [String: Any])
        let app = context["app"] as? [String: Any]
        #expect(app?["id"] as? String == "orders" && app?["release"] as? String == "orders@1.4.2")
        #expect(app?["build"] as? String == "812" && app?["environment"] as? String == "test")
        #expect((context["process"] as? [String: Any])?["pid"] as? Int == Int(getpid()))
        #expect(context["arch"] is String && (context["host"] as? [String: Any])?["name"] is String)
        #expect((e["sdk"] as? [String: Any])?["name"] as? String == "cairn-swift")
    }

    /// `start` puts what it reads without opening files into the first events; once the
    /// background thread has read the rest (before the SDK is ready), events carry it all.
    @Test func eventsAfterStartCarryTheWholeContext() throws {
        let cairn = try #require(Live.cairn)
        #expect(cairn.flush(timeout: .seconds(10)))
        cairn.track("context_checked")
        let e = try #require(Live.events("context_checked", count: 1).first)
        let context = try #require(e["context"] as? [String: Any])
        let expected = CommonProperties.collect()
        #expect((context["os"] as? [String: Any])?["name"] as? String == expected.osName)
        #expect((context["process"] as? [String: Any])?["name"] as? String == expected.processName)
        #expect(context["time_zone"] as? String == expected.timeZone)
        #expect(context["cpu_count"] as? Int == expected.cpuCount && expected.cpuCount ?? 0 >= 1)
        #expect(expected.processName != nil)
    }

    @Test func callSitePropertiesWinOverDynamicOnes() throws {
        let cairn = try #require(Live.cairn)
        cairn.track("plan_changed", properties: ["plan": "enterprise"])
        let p = Live.props(try #require(Live.events("plan_changed", count: 1).first))
        #expect(p["plan"] as? String == "enterprise" && p["build_flavour"] as? String == "test")
    }

    @Test func perCallIdentityOverridesForThatEventOnly() throws {
        let cairn = try #require(Live.cairn)
        cairn.track("acting_for_tenant", identity: Identity(distinctID: "tenant-42", accountID: "acct-9"))
        cairn.track("acting_for_self")
        let a = try #require(Live.events("acting_for_tenant", count: 1).first)
        let b = try #require(Live.events("acting_for_self", count: 1).first)
        #expect(a["distinct_id"] as? String == "tenant-42" && a["account_id"] as? String == "acct-9")
        #expect(b["distinct_id"] as? String == "host-7")
    }

    @Test func privacyRulesApplyOnTheWay() throws {
        let cairn = try #require(Live.cairn)
        cairn.track("signup", properties: ["password": "hunter2", "email": "jane.doe@example.com", "note": "ok"])
        let p = Live.props(try #require(Live.events("signup", count: 1).first))
        #expect(p["password"] as? String != "hunter2")
        #expect((p["email"] as? String)?.contains("jane.doe") == false)
        #expect(p["note"] as? String == "ok")
        #expect((cairn.changeCounts["privacy_redacted"] ?? 0) >= 1)
        #expect(cairn.dropCounts["privacy_redacted"] == nil, "a masked event is changed, not dropped")
    }

    /// An event with a 9 MiB string (too big to send as it is) is cut by the sanitiser
    /// and sent, not refused as too big.
    @Test func oversizedValuesAreCutNotDropped() throws {
        let cairn = try #require(Live.cairn)
        let before = cairn.changeCounts["string_truncated"] ?? 0
        cairn.track("upload_failed", properties: ["body": .string(String(repeating: "x", count: 9 << 20)), "n": 1])
        let p = Live.props(try #require(Live.events("upload_failed", count: 1).first))
        let body = try #require(p["body"] as? String)
        #expect(body.utf8.count == 4096 && body.hasSuffix("\u{2026}") && p["n"] as? Int == 1)
        #expect((cairn.changeCounts["string_truncated"] ?? 0) - before == 1)
    }

    @Test func samplingAndFilteringDropAndCount() throws {
        let cairn = try #require(Live.cairn)
        let before = cairn.dropCounts
        for _ in 0..<5 { cairn.track("never_kept") }
        cairn.track("denied_event")
        cairn.track("kept_marker")
        _ = Live.events("kept_marker", count: 1)
        #expect(Live.recorder.events(named: "never_kept").isEmpty && Live.recorder.events(named: "denied_event").isEmpty)
        #expect((cairn.dropCounts["sampled"] ?? 0) - (before["sampled"] ?? 0) == 5)
        #expect((cairn.dropCounts["filtered"] ?? 0) - (before["filtered"] ?? 0) == 1)
    }

    @Test func userPropertiesUseTheirMode() throws {
        let cairn = try #require(Live.cairn)
        cairn.setUserProperties(["plan": "pro"], mode: .set)
        cairn.setUserProperties(["first_seen": "2026-12-02"], mode: .setOnce)
        cairn.setUserProperties(["logins": 1, "name": "not a number"], mode: .add)
        cairn.setUserProperties(["old_flag": true], mode: .unset)
        let all = Live.events("user_properties", count: 4)
        func of(_ type: String) -> [String: Any]? {
            all.last { $0["type"] as? String == type && !(Live.props($0).keys.contains("account_id")) }.map(Live.props)
        }
        #expect(of("user_set")?["plan"] as? String == "pro")
        #expect(of("user_setOnce")?["first_seen"] as? String == "2026-12-02")
        #expect(of("user_add").map { $0.count == 1 && $0["logins"] as? Int == 1 } == true)
        // JSON null: `nil` boxed in `Any` (absent would read "absent").
        #expect(String(describing: of("user_unset")?["old_flag"] ?? "absent") == "nil")
    }

    /// Runs last among the identity tests: it changes the default account.
    @Test func accountIDFlowsIntoLaterEventsAndIsSentOnce() throws {
        let cairn = try #require(Live.cairn)
        cairn.setAccountID("acct-1")
        cairn.setAccountID("acct-1")
        cairn.track("after_account")
        cairn.setUserProperties(["seat": "a"], mode: .set)
        let e = try #require(Live.events("after_account", count: 1).first)
        #expect(e["account_id"] as? String == "acct-1")
        let all = Live.events("user_properties", count: 1)
        let once = all.filter { $0["type"] as? String == "user_setOnce" && Live.props($0)["account_id"] != nil }
        #expect(once.count == 1 && Live.props(once[0])["account_id"] as? String == "acct-1")
        let set = all.last { $0["type"] as? String == "user_set" && Live.props($0)["seat"] != nil }
        #expect(set?["account_id"] as? String == "acct-1", "user-property requests carry it too")
        cairn.setAccountID(nil)
    }

    @Test func spansLinkEventsAndNest() throws {
        let cairn = try #require(Live.cairn)
        var header = ""
        cairn.withSpan("checkout") {
            cairn.track("inside_span")
            cairn.withSpan("charge_card") {
                header = Cairn.traceparent()
                cairn.track("inside_child_span")
            }
        }
        cairn.track("outside_span")
        let inner = try #require(Live.events("inside_span", count: 1).first)
        let child = try #require(Live.events("inside_child_span", count: 1).first)
        let outer = try #require(Live.events("checkout", count: 1).first)
        let charge = try #require(Live.events("charge_card", count: 1).first)
        let outside = try #require(Live.events("outside_span", count: 1).first)
        let trace = try #require(inner["trace_id"] as? String)
        #expect(trace.count == 32 && child["trace_id"] as? String == trace && outside["trace_id"] == nil)
        #expect(outer["type"] as? String == "span" && outer["span_id"] as? String == inner["span_id"] as? String)
        #expect(charge["parent_span_id"] as? String == outer["span_id"] as? String)
        #expect(Live.props(outer)["status"] as? String == "ok" && Live.props(outer)["duration_ms"] is Double)
        let parsed = try #require(TraceParent(header: header))
        #expect(parsed.traceID.description == trace && parsed.parentID.description == charge["span_id"] as? String)
    }

    /// A request that came with a `traceparent` continues the caller's trace: its events
    /// carry the caller's trace id, the span's parent is the caller's span, the caller's
    /// `sampled` flag is passed on; a malformed header starts a new trace.
    @Test func spansContinueAnIncomingTrace() throws {
        let cairn = try #require(Live.cairn)
        let incoming = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
        var outgoing = "", fresh = ""
        cairn.withSpan("continued_request", traceparent: "  " + incoming + "\t") {
            cairn.track("inside_continued")
            outgoing = Cairn.traceparent()
        }
        cairn.withSpan("fresh_request", traceparent: "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01") {
            fresh = Cairn.traceparent()
        }
        let event = try #require(Live.events("inside_continued", count: 1).first)
        let span = try #require(Live.events("continued_request", count: 1).first)
        #expect(event["trace_id"] as? String == "4bf92f3577b34da6a3ce929d0e0e4736")
        #expect(span["parent_span_id"] as? String == "00f067aa0ba902b7")
        let out = try #require(TraceParent(header: outgoing))
        #expect(out.traceID.description == "4bf92f3577b34da6a3ce929d0e0e4736" && !out.sampled)
        #expect(out.parentID.description == span["span_id"] as? String)
        let other = try #require(TraceParent(header: fresh))
        #expect(other.traceID.description != "4bf92f3577b34da6a3ce929d0e0e4736" && other.sampled,
                "uppercase hex is not a valid traceparent: a new trace")
    }

    /// An outbound call: its span event has the masked URL, status and outcome, and the
    /// traceparent handed to the request names that span; failures are kept as errors.
    @Test func outboundCallsAreRecordedAsSpans() throws {
        let cairn = try #require(Live.cairn)
        var sent = ""
        let value = cairn.withOutbound(method: "post", url: "https://pay.example/v1/charge?token=s3cr3t&amount=5") { headers in
            sent = headers.first { $0.name == "traceparent" }?.value ?? ""
            return ("paid", status: 201)
        }
        #expect(value == "paid")
        struct Down: Error {}
        #expect(throws: Down.self) {
            try cairn.withOutbound(method: "GET", url: "https://stock.example/v1/items") { _ -> (Int, status: Int?) in
                throw Down()
            }
        }
        let calls = Live.events("http.client", count: 2)
        let ok = try #require(calls.first { Live.props($0)["status"] as? Int == 201 })
        let p = Live.props(ok)
        #expect(p["method"] as? String == "POST" && p["outcome"] as? String == "ok")
        #expect((p["url"] as? String)?.contains("s3cr3t") == false && (p["url"] as? String)?.contains("amount=5") == true)
        let parsed = try #require(TraceParent(header: sent))
        #expect(parsed.parentID.description == ok["span_id"] as? String && ok["type"] as? String == "span")
        let failed = try #require(calls.first { Live.props($0)["outcome"] as? String == "error" })
        #expect(Live.props(failed)["error"] is String && Live.props(failed)["status"] == nil)
    }

    /// Eight threads track while a ninth changes the default identity: every event
    /// carries values that were set, whole (run under ThreadSanitizer too).
    @Test func trackingWhileIdentityChanges() throws {
        let cairn = try #require(Live.cairn)
        let group = DispatchGroup()
        for t in 0..<8 {
            DispatchQueue.global().async(group: group) {
                for i in 0..<200 { cairn.track("concurrent", properties: ["t": .int(Int64(t)), "i": .int(Int64(i))]) }
            }
        }
        DispatchQueue.global().async(group: group) {
            for k in 0..<200 {
                cairn.identify(distinctID: "user-\(k)-" + String(repeating: "x", count: k % 50))
                cairn.setAccountID("acct-\(k)")
            }
        }
        group.wait()
        cairn.identify(distinctID: "host-7")
        cairn.setAccountID(nil)
        let events = Live.events("concurrent", count: 1600)
        #expect(events.count == 1600)
        for e in events {
            let d = e["distinct_id"] as? String ?? ""
            let ok = d == "host-7" || (d.hasPrefix("user-") && {
                let parts = d.split(separator: "-", omittingEmptySubsequences: false)
                guard parts.count == 3, let k = Int(parts[1]) else { return false }
                return parts[2] == String(repeating: "x", count: k % 50)
            }())
            #expect(ok, "whole distinct id: \(d)")
            if let a = e["account_id"] as? String { #expect(a.hasPrefix("acct-") && Int(a.dropFirst(5)) != nil) }
        }
    }

    /// The end-to-end path: 10k events tracked, flushed, and all received by the
    /// collector over TCP with the schema, each event id once.
    @Test func tenThousandEventsReachTheCollector() throws {
        let cairn = try #require(Live.cairn)
        let collector = try #require(Live.collector)
        for i in 0..<10_000 { cairn.track("bulk", properties: ["i": .int(Int64(i))]) }
        #expect(cairn.flush(timeout: .seconds(60)))
        #expect(cairn.dropCounts["overload_sampled"] == nil, "nothing shed: \(cairn.dropCounts)")
        let received = try collector.events().compactMap {
            (try? JSONSerialization.jsonObject(with: Data($0.record.utf8))) as? [String: Any]
        }.filter { $0["name"] as? String == "bulk" }
        #expect(received.count == 10_000)
        #expect(Set(received.compactMap { $0["event_id"] as? String }).count == 10_000)
        #expect(Set(received.compactMap { Live.props($0)["i"] as? Int }) == Set(0..<10_000))
        #expect(received.allSatisfy { $0["type"] as? String == "track" && $0["context"] != nil && $0["time"] is String })
        let attempts = try collector.requests()
        #expect(attempts.allSatisfy { $0.headerValues("Authorization") == ["Bearer test-key"] })
    }
}

/// The W3C Trace Context test suite's cases (w3c/trace-context, test/test.py, strict
/// level 2), through the incoming-request API as a service runs them: a request with
/// these headers comes in, and the service calls out from inside it; what it sends on
/// (`Cairn.traceparent()`, `Cairn.tracestate()`) must continue the trace or start a new
/// one as the suite expects.
@Suite(.serialized) struct TraceContextVectorTests {
    static let trace = "12345678901234567890123456789012"
    static let parent = "00-12345678901234567890123456789012-1234567890123456-00"

    /// What the service sends on from inside a request with `headers`.
    static func outgoing(_ headers: [(String, String)]) throws -> (parent: TraceParent, state: String?) {
        let cairn = try #require(Live.cairn)
        var sent = ("", String?.none)
        cairn.withIncomingRequest(method: "POST", route: "/test", headers: headers.map { (name: $0.0, value: $0.1) }) {
            sent = (Cairn.traceparent(), Cairn.tracestate())
            return ((), status: 200)
        }
        let parsed = try #require(TraceParent(header: sent.0), "a valid traceparent is always sent: \(sent.0)")
        return (parsed, sent.1)
    }

    static let continued: [String] = [
        "00-12345678901234567890123456789012-1234567890123456-01",
        "cc-12345678901234567890123456789012-1234567890123456-01",
        "cc-12345678901234567890123456789012-1234567890123456-01-what-the-future-will-be-like",
        " 00-12345678901234567890123456789012-1234567890123456-01",
        "\t00-12345678901234567890123456789012-1234567890123456-01",
        "00-12345678901234567890123456789012-1234567890123456-01 ",
        "00-12345678901234567890123456789012-1234567890123456-01\t",
        "\t 00-12345678901234567890123456789012-1234567890123456-01 \t",
    ]

    @Test(arguments: continued)
    func validTraceparentIsContinued(_ header: String) throws {
        for name in ["traceparent", "TraceParent", "TrAcEpArEnT", "TRACEPARENT"] {
            let out = try Self.outgoing([(name, header)])
            #expect(out.parent.traceID.description == Self.trace, "\(name): \(header)")
            #expect(out.parent.parentID.description != "1234567890123456", "a span of its own")
        }
    }

    static let refused: [String] = [
        "00-12345678901234567890123456789012-1234567890123456-01.",
        "00-12345678901234567890123456789012-1234567890123456-01-what-the-future-will-be-like",
        "cc-12345678901234567890123456789012-1234567890123456-01.what-the-future-will-be-like",
        "ff-12345678901234567890123456789012-1234567890123456-01",
        ".0-12345678901234567890123456789012-1234567890123456-01",
        "0.-12345678901234567890123456789012-1234567890123456-01",
        "000-12345678901234567890123456789012-1234567890123456-01",
        "0000-12345678901234567890123456789012-1234567890123456-01",
        "0-12345678901234567890123456789012-1234567890123456-01",
        "00-00000000000000000000000000000000-1234567890123456-01",
        "00-.2345678901234567890123456789012-1234567890123456-01",
        "00-1234567890123456789012345678901.-1234567890123456-01",
        "00-123456789012345678901234567890123-1234567890123456-01",
        "00-1234567890123456789012345678901-1234567890123456-01",
        "00-12345678901234567890123456789012-0000000000000000-01",
        "00-12345678901234567890123456789012-.234567890123456-01",
        "00-12345678901234567890123456789012-123456789012345.-01",
        "00-12345678901234567890123456789012-12345678901234567-01",
        "00-12345678901234567890123456789012-123456789012345-01",
        "00-12345678901234567890123456789012-1234567890123456-.0",
        "00-12345678901234567890123456789012-1234567890123456-0.",
        "00-12345678901234567890123456789012-1234567890123456-001",
        "00-12345678901234567890123456789012-1234567890123456-1",
    ]

    /// A header that is not a valid traceparent starts a new trace (never the ids it
    /// carried), and is counted.
    @Test(arguments: refused)
    func invalidTraceparentStartsANewTrace(_ header: String) throws {
        let cairn = try #require(Live.cairn)
        let before = cairn.changeCounts["trace_header_invalid"] ?? 0
        let out = try Self.outgoing([("traceparent", header), ("tracestate", "foo=1")])
        let id = out.parent.traceID.description
        #expect(id != Self.trace && id != "00000000000000000000000000000000" && !header.contains(id), "\(header)")
        #expect(out.state == nil, "a tracestate without a valid traceparent is dropped")
        #expect(cairn.changeCounts["trace_header_invalid"] == before + 1)
    }

    @Test func missingMisnamedOrDuplicatedTraceparent() throws {
        #expect(try Self.outgoing([]).parent.traceID.isValid)
        for name in ["trace-parent", "trace.parent"] {
            #expect(try Self.outgoing([(name, Self.continued[0])]).parent.traceID.description != Self.trace)
        }
        let two = try Self.outgoing([("traceparent", "00-12345678901234567890123456789011-1234567890123456-01"),
                                     ("traceparent", Self.continued[0])])
        #expect(!["12345678901234567890123456789011", Self.trace].contains(two.parent.traceID.description))
        #expect(try Self.outgoing([("tracestate", "foo=1")]).state == nil)
    }

    /// The `tracestate` cases: what is carried on (the members, in order), or nil when
    /// the header is to be dropped.
    static let states: [([String], String?)] = {
        let key = "abcdefghijklmnopqrstuvwxyz0123456789_-*/"
        let value = (0x20...0x2B).map { String(UnicodeScalar($0)!) }.joined()
            + (0x2D...0x3C).map { String(UnicodeScalar($0)!) }.joined()
            + (0x3E...0x7E).map { String(UnicodeScalar($0)!) }.joined()
        let bars = (1...33).map { String(format: "bar%02d=%02d", $0, $0) }
        return [
            (["foo=1,bar=2"], "foo=1,bar=2"),
            ([""], nil), (["foo=1", ""], "foo=1"), (["", "foo=1"], "foo=1"),
            (["foo=1,bar=2", "rojo=1,congo=2", "baz=3"], "foo=1,bar=2,rojo=1,congo=2,baz=3"),
            (["foo=1,foo=1"], nil), (["foo=1,foo=2"], nil), (["foo=1", "foo=1"], nil), (["foo=1", "foo=2"], nil),
            ([key + "=" + value], key + "=" + value),
            ([key + "@a-z0-9_-*/=" + value], key + "@a-z0-9_-*/=" + value),
            (["foo=1 \t , \t bar=2, \t baz=3"], "foo=1,bar=2,baz=3"),
            (["foo=1\t \t,\t \tbar=2,\t \tbaz=3"], "foo=1,bar=2,baz=3"),
            ([" foo=1"], "foo=1"), (["\tfoo=1"], "foo=1"), (["foo=1 "], "foo=1"), (["foo=1\t"], "foo=1"),
            (["\t foo=1 \t"], "foo=1"),
            (["foo =1"], nil), (["FOO=1"], nil), (["foo.bar=1"], nil),
            (["foo@=1,bar=2"], nil), (["@foo=1,bar=2"], nil), (["foo@@bar=1,bar=2"], nil), (["foo@bar@baz=1,bar=2"], nil),
            ([bars[0..<10].joined(separator: ","), bars[10..<20].joined(separator: ","),
              bars[20..<30].joined(separator: ","), bars[30..<32].joined(separator: ",")],
             bars[0..<32].joined(separator: ",")),
            ([bars[0..<10].joined(separator: ","), bars[10..<20].joined(separator: ","),
              bars[20..<30].joined(separator: ","), bars[30..<33].joined(separator: ",")], nil),
            (["foo=1", String(repeating: "z", count: 256) + "=1"], "foo=1," + String(repeating: "z", count: 256) + "=1"),
            (["foo=1", String(repeating: "z", count: 257) + "=1"], nil),
            (["foo=1", String(repeating: "t", count: 241) + "@" + String(repeating: "v", count: 14) + "=1"],
             "foo=1," + String(repeating: "t", count: 241) + "@" + String(repeating: "v", count: 14) + "=1"),
            (["foo=1", String(repeating: "t", count: 242) + "@v=1"], nil),
            (["foo=1", "t@" + String(repeating: "v", count: 15) + "=1"], nil),
            (["foo=bar=baz"], nil), (["foo=,bar=3"], nil),
        ]
    }()

    @Test func tracestateIsCarriedOnOrDropped() throws {
        for (headers, expected) in Self.states {
            for name in ["tracestate", "TraceState", "TRACESTATE"] {
                let out = try Self.outgoing([("traceparent", Self.parent)] + headers.map { (name, $0) })
                #expect(out.parent.traceID.description == Self.trace)
                #expect(out.state == expected, "\(headers)")
            }
        }
        for name in ["trace-state", "trace.state"] {
            #expect(try Self.outgoing([("traceparent", Self.parent), (name, "foo=1")]).state == nil)
        }
    }

    /// Several calls from one request: one trace, a span (parent id) for each.
    @Test func callsFromOneRequestShareItsTrace() throws {
        let cairn = try #require(Live.cairn)
        var sent: [String] = []
        cairn.withIncomingRequest(method: "GET", route: "/fan-out", headers: [(name: "traceparent", value: Self.continued[0])]) {
            for _ in 0..<3 {
                let call = cairn.beginOutbound()
                sent.append(call.traceparent)
                cairn.endOutbound(call, method: "GET", url: "http://127.0.0.1:9/x", status: 200)
            }
            return ((), status: 200)
        }
        let parsed = sent.compactMap { TraceParent(header: $0) }
        #expect(Set(parsed.map(\.traceID.description)) == [Self.trace] && Set(parsed.map(\.parentID)).count == 3)
    }

    /// The request's span event: its name from the method and route template, the
    /// server kind, the trace's flags and state; a failure (5xx) kept as an error.
    @Test func incomingRequestSpanEvent() throws {
        let cairn = try #require(Live.cairn)
        let value = cairn.withIncomingRequest(method: "get", route: "/orders/:id",
                                              headers: [(name: "traceparent", value: Self.continued[0]),
                                                        (name: "tracestate", value: "congo=t61rcWkgMzE")]) {
            cairn.track("inside_incoming")
            return ("order", status: 200)
        }
        #expect(value == "order")
        cairn.withIncomingRequest(method: "POST", route: "/orders", headers: []) { ((), status: 503) }
        let span = try #require(Live.events("GET /orders/:id", count: 1).first)
        #expect(span["span_kind"] as? String == "server" && span["trace_flags"] as? String == "01")
        #expect(span["trace_state"] as? String == "congo=t61rcWkgMzE" && span["trace_id"] as? String == Self.trace)
        #expect(span["parent_span_id"] as? String == "1234567890123456" && span["level"] == nil)
        let p = Live.props(span)
        #expect(p["method"] as? String == "GET" && p["route"] as? String == "/orders/:id" && p["status"] as? Int == 200)
        #expect(Live.events("inside_incoming", count: 1).first?["span_id"] as? String == span["span_id"] as? String)
        let failed = try #require(Live.events("POST /orders", count: 1).first)
        #expect(failed["level"] as? String == "error" && failed["trace_flags"] as? String == "03",
                "a trace Cairn starts is sampled and random")
        #expect(failed["span_kind"] as? String == "server" && failed["parent_span_id"] == nil)
        let call = try #require(Live.events("http.client", count: 1).first)
        #expect(call["span_kind"] as? String == "client")
    }
}
