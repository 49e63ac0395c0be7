import CairnBase
import CairnProcessor
import Foundation
import Testing

/// Golden JSON for every event type the processor writes (docs/FORMATS.md, "Event"),
/// byte for byte: a fixed id, time, zone and common properties.
@Suite struct EventGoldenTests {
    static let common: CommonProperties = {
        var c = CommonProperties()
        c.appID = "orders"
        c.release = "orders@1.4.2"
        c.environment = "production"
        c.hostName = "web-1"
        c.osName = "Debian GNU/Linux"
        c.osVersion = "12"
        c.kernel = "6.1.0-13-amd64"
        c.arch = "x86_64"
        c.cpuCount = 2
        c.memoryLimit = 536_870_912
        c.processName = "orders"
        c.pid = 4242
        c.timeZone = "Europe/Berlin"
        return c
    }()
    static let processor = Processor(common: common, sdkVersion: "0.1.0", clock: EventClock(fixedOffsetMinutes: 60))
    static let id: (UInt64, UInt64) = (0x0193_8A2B_C000_7123, 0x8456_7890_ABCD_EF01)
    static let millis: UInt64 = 1_796_237_584_512 // 2026-12-02T18:53:04.512Z
    static let context = #""context":{"app":{"id":"orders","release":"orders@1.4.2","environment":"production"},"#
        + #""host":{"name":"web-1"},"os":{"name":"Debian GNU/Linux","version":"12","kernel":"6.1.0-13-amd64"},"#
        + #""arch":"x86_64","cpu_count":2,"memory_limit":536870912,"process":{"name":"orders","pid":4242},"#
        + #""time_zone":"Europe/Berlin"},"sdk":{"name":"cairn-swift","version":"0.1.0"}"#
    static let head = #"{"event_id":"01938a2b-c000-7123-8456-7890abcdef01","#

    static func golden(_ type: String, _ name: String, _ rest: String, _ props: String) -> String {
        head + #""type":"\#(type)","name":"\#(name)","time":"2026-12-02T19:53:04.512+01:00","zone_offset":60,"#
            + rest + #""properties":\#(props),"# + context + "}"
    }

    static func record(_ type: EventType, _ name: String, _ props: [String: CairnValue], span: SpanContext? = nil,
                       account: String? = nil) -> String {
        let e = Event(type: type, name: name, properties: props, timeMillis: millis,
                      identity: Identity(distinctID: "host-7", accountID: account), sessionID: "s-1", span: span)
        return String(decoding: processor.record(e, id: id), as: UTF8.self)
    }

    static let ids = #""distinct_id":"host-7","session_id":"s-1","#

    /// A `log` event's level is its envelope's `level`.
    @Test func logRecord() {
        let e = Event(type: .log, name: "orders.db", properties: ["message": "slow query"], timeMillis: Self.millis,
                      identity: Identity(distinctID: "host-7"), sessionID: "s-1", tier: .important, severity: .warning)
        #expect(String(decoding: Self.processor.record(e, id: Self.id), as: UTF8.self)
                == Self.golden("log", "orders.db", Self.ids, #"{"message":"slow query"}"#)
                    .replacingOccurrences(of: #""name":"orders.db","#, with: #""name":"orders.db","level":"warning","#))
    }

    /// The size estimate covers what the one-pass encoding writes, for every head an
    /// event can have (a level, an error, a span with its flags, kind and state, an
    /// account), with and without the context: the hot path never encodes an event
    /// twice for want of room when no string needs escaping (string properties, whose
    /// estimate is exact, leave no slack for the envelope's).
    @Test(arguments: [true, false])
    func estimateCoversTheEncoding(context: Bool) throws {
        let span = SpanContext(traceID: try #require(TraceID(hex: "4bf92f3577b34da6a3ce929d0e0e4736")),
                               spanID: try #require(SpanID(hex: "00f067aa0ba902b7")),
                               parentSpanID: SpanID(hex: "00f067aa0ba902b8"),
                               traceState: TraceState(headers: ["congo=t61rcWkgMzE"]), kind: .server)
        let session = "01938a2b-c000-7123-8456-7890abcdef01"
        var events: [Event] = []
        for severity in Severity.allCases {
            events.append(Event(type: .log, name: "l", properties: ["message": "m"], timeMillis: Self.millis,
                                identity: Identity(distinctID: "h"), sessionID: session, severity: severity))
        }
        events.append(Event(type: .track, name: "e", timeMillis: Self.millis, identity: Identity(distinctID: "h"),
                            sessionID: session, isError: true))
        events.append(Event(type: .userSetOnce, name: "user_properties", properties: ["plan": "pro", "region": "eu"],
                            timeMillis: Self.millis, identity: Identity(distinctID: "h"), sessionID: session))
        events.append(Event(type: .span, name: "s", properties: ["duration_ms": 1.5], timeMillis: Self.millis,
                            identity: Identity(distinctID: "h", accountID: "a"), sessionID: session, span: span,
                            isError: true))
        events.append(Event(type: .log, name: "l", timeMillis: Self.millis, identity: Identity(distinctID: "h"),
                            sessionID: session, span: span, isError: true, severity: .critical))
        for event in events {
            var w = JSONWriter()
            #expect(Self.processor.encodeIfClean(event, id: Self.id, into: &w, context: context))
            #expect(w.count <= Self.processor.estimate(event, context: context), "\(event.type) \(event.name): \(w.count)")
        }
    }

    @Test func track() {
        #expect(Self.record(.track, "order_placed", ["total": 42.5])
                == Self.golden("track", "order_placed", Self.ids, #"{"total":42.5}"#))
    }

    @Test func trackInASpanWithAnAccount() throws {
        let span = SpanContext(traceID: try #require(TraceID(hex: "4bf92f3577b34da6a3ce929d0e0e4736")),
                               spanID: try #require(SpanID(hex: "00f067aa0ba902b7")))
        #expect(Self.record(.track, "charge", ["ok": true], span: span, account: "acct-9")
                == Self.golden("track", "charge", #""distinct_id":"host-7","account_id":"acct-9","session_id":"s-1","#
                               + #""trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","span_id":"00f067aa0ba902b7","#,
                               #"{"ok":true}"#))
    }

    @Test(arguments: [(EventType.userSet, #"{"plan":"pro"}"#, ["plan": CairnValue.string("pro")]),
                      (.userSetOnce, #"{"first_release":"orders@1.0.0"}"#, ["first_release": "orders@1.0.0"]),
                      (.userAdd, #"{"logins":1}"#, ["logins": 1]),
                      (.userUnset, #"{"old_flag":null}"#, ["old_flag": nil])])
    func userProperties(type: EventType, json: String, props: [String: CairnValue]) {
        #expect(Self.record(type, "user_properties", props) == Self.golden(type.rawValue, "user_properties", Self.ids, json))
    }

    @Test func span() throws {
        let span = SpanContext(traceID: try #require(TraceID(hex: "4bf92f3577b34da6a3ce929d0e0e4736")),
                               spanID: try #require(SpanID(hex: "b7ad6b7169203331")),
                               parentSpanID: SpanID(value: 0x00f0_67aa_0ba9_02b7))
        #expect(Self.record(.span, "checkout", ["status": "ok"], span: span)
                == Self.golden("span", "checkout", Self.ids + #""trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","#
                               + #""span_id":"b7ad6b7169203331","parent_span_id":"00f067aa0ba902b7","#
                               + #""trace_flags":"03","#,
                               #"{"status":"ok"}"#))
        // The server side of a request that came in unsampled, with a trace state (whose
        // values may hold a quote: escaped).
        var server = span
        server.sampled = false
        server.random = false
        server.kind = .server
        server.traceState = TraceState(header: #"congo=t61rcWkgMzE,rojo=a"b"#)
        #expect(Self.record(.span, "GET /orders/:id", ["status": 200], span: server)
                == Self.golden("span", "GET /orders/:id", Self.ids + #""trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","#
                               + #""span_id":"b7ad6b7169203331","parent_span_id":"00f067aa0ba902b7","#
                               + #""trace_flags":"00","span_kind":"server","trace_state":"congo=t61rcWkgMzE,rojo=a\"b","#,
                               #"{"status":200}"#))
        // An event in a span has no flags, kind or state of its own.
        #expect(!Self.record(.track, "in_span", [:], span: server).contains("trace_flags"))
    }

    /// An error event says so (`"level":"error"` after its name); other events have no level.
    @Test func errorEventHasItsLevel() {
        let e = Event(name: "payment_failed", properties: ["code": 402], timeMillis: Self.millis,
                      identity: Identity(distinctID: "host-7"), sessionID: "s-1", isError: true)
        let text = String(decoding: Self.processor.record(e, id: Self.id), as: UTF8.self)
        let expected = Self.golden("track", "payment_failed", Self.ids, #"{"code":402}"#)
            .replacingOccurrences(of: #""name":"payment_failed","#, with: #""name":"payment_failed","level":"error","#)
        #expect(text == expected)
        #expect(!Self.record(.track, "ok", [:]).contains("\"level\""))
    }

    @Test func health() {
        #expect(Self.record(.health, "sdk_health", ["ring_fill": 0.25])
                == Self.golden("health", "sdk_health", Self.ids, #"{"ring_fill":0.25}"#))
    }

    /// Many properties (whose order is not significant) and hostile text: valid JSON that
    /// says the same.
    @Test func manyPropertiesParseBack() throws {
        let props: [String: CairnValue] = ["a": 1, "b": "x\"y\\z\n\u{01}", "c": [1, 2], "d": ["e": nil], "é😀": -0.5]
        let text = Self.record(.track, "many", props)
        let o = try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
        let p = try #require(o["properties"] as? [String: Any])
        #expect(p["a"] as? Int == 1 && p["b"] as? String == "x\"y\\z\n\u{01}" && p["c"] as? [Int] == [1, 2])
        #expect((p["d"] as? [String: Any])?["e"] is NSNull && p["é😀"] as? Double == -0.5)
    }
}
