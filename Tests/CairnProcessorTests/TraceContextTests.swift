import CairnProcessor
import Testing

/// `traceparent` parsing per W3C Trace Context, and the ids written into events.
@Suite struct TraceContextTests {
    static let example = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

    @Test func parsesTheSpecExamples() throws {
        let parent = try #require(TraceParent(header: Self.example))
        #expect(parent.traceID.high == 0x4bf9_2f35_77b3_4da6)
        #expect(parent.traceID.low == 0xa3ce_929d_0e0e_4736)
        #expect(parent.traceID.description == "4bf92f3577b34da6a3ce929d0e0e4736")
        #expect(parent.parentID.value == 0x00f0_67aa_0ba9_02b7)
        #expect(parent.parentID.description == "00f067aa0ba902b7")
        #expect(parent.sampled)
        let unsampled = try #require(TraceParent(header: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"))
        #expect(!unsampled.sampled)
        // Other flag bits are ignored; only bit 0 is the sampled flag.
        #expect(TraceParent(header: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-02")?.sampled == false)
        #expect(TraceParent(header: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03")?.sampled == true)
    }

    @Test func trimsOptionalWhitespace() {
        #expect(TraceParent(header: "  \t" + Self.example + " \t") == TraceParent(header: Self.example))
        #expect(TraceParent(header: "\n" + Self.example) == nil)
    }

    @Test func futureVersions() {
        let body = "4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        #expect(TraceParent(header: "01-" + body) != nil)
        #expect(TraceParent(header: "cc-" + body + "-what-the-future-holds") != nil)
        #expect(TraceParent(header: "fe-" + body + "-") != nil)
        #expect(TraceParent(header: "cc-" + body + "x") == nil)
        #expect(TraceParent(header: "ff-" + body) == nil)
        #expect(TraceParent(header: "00-" + body + "-00") == nil)
        #expect(TraceParent(header: "0g-" + body) == nil)
    }

    @Test(arguments: [
        "",
        "00",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-010",
        "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e47366-0f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b-01",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0A",
        "0A-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7_01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
        "00-4bf92f3577b34da6-a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
        "00-+bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01é",
    ])
    func rejectsInvalidHeaders(header: String) {
        #expect(TraceParent(header: header) == nil)
    }

    @Test func roundTrips() throws {
        #expect(TraceParent(header: Self.example)?.header == Self.example)
        for sampled in [true, false] {
            let parent = TraceParent(traceID: .random(), parentID: .random(), sampled: sampled)
            #expect(parent.header.utf8.count == 55)
            #expect(TraceParent(header: parent.header) == parent)
        }
        let future = try #require(TraceParent(header: "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09-x"))
        #expect(future.header == Self.example)
    }

    @Test func idsFromHex() {
        #expect(TraceID(hex: "0000000000000000000000000000000a") == TraceID(high: 0, low: 10))
        #expect(TraceID(hex: "00000000000000000000000000000000")?.isValid == false)
        #expect(TraceID(hex: "4bf92f3577b34da6a3ce929d0e0e4736")?.isValid == true)
        #expect(TraceID(hex: "4BF92F3577B34DA6A3CE929D0E0E4736") == nil)
        #expect(TraceID(hex: "4bf92f3577b34da6a3ce929d0e0e473") == nil)
        #expect(TraceID(hex: "x-4bf92f3577b34da6a3ce929d0e0e4736".dropFirst(2)) != nil)
        #expect(SpanID(hex: "ffffffffffffffff") == SpanID(value: .max))
        #expect(SpanID(hex: "fffffffffffffff") == nil)
        #expect(SpanID(hex: "0000000000000000")?.isValid == false)
        #expect(TraceID(high: 0xab, low: 1).description == "00000000000000ab0000000000000001")
        #expect(SpanID(value: 0xdead_beef).description == "00000000deadbeef")
    }

    @Test func randomIDsAreValidAndUnique() {
        var traces = Set<TraceID>(), spans = Set<SpanID>()
        for _ in 0..<10_000 {
            let trace = TraceID.random(), span = SpanID.random()
            #expect(trace.isValid && span.isValid)
            #expect(TraceID(hex: trace.description) == trace)
            #expect(SpanID(hex: span.description) == span)
            traces.insert(trace)
            spans.insert(span)
        }
        #expect(traces.count == 10_000 && spans.count == 10_000)
    }
}
