import CairnBase
import CairnProcessor
import Foundation
import Testing

/// `EventEnvelope`, the one place that knows how an event's bytes carry its context:
/// a bare event completed with its run's fragment is byte for byte the whole encoding,
/// whatever its properties (none included); a recovered context is marked inside `sdk`
/// and stays valid JSON; what is not an object goes as it is.
@Suite struct EventEnvelopeTests {
    static let processor = EventGoldenTests.processor

    static func encoded(_ event: Event, context: Bool) -> [UInt8] {
        JSONWriter.bytes { w in processor.encode(event, id: EventGoldenTests.id, into: &w, context: context) }
    }

    static func completed(_ bare: [UInt8], fragment: [UInt8]) -> [UInt8]? {
        bare.withUnsafeBytes { raw -> [UInt8]? in
            guard let (head, comma) = EventEnvelope.bareHead(raw) else { return nil }
            let completion = EventEnvelope.completion(fragment)
            return Array(bare[0..<head]) + (comma ? completion : Array(completion.dropFirst()))
        }
    }

    @Test(arguments: [[:], ["plan": "pro", "seats": 3], ["nested": ["a": [1, 2, nil]]]] as [[String: CairnValue]])
    func aCompletedBareEventIsTheWholeEncoding(_ properties: [String: CairnValue]) throws {
        let event = Event(name: "checkout", properties: properties, timeMillis: EventGoldenTests.millis,
                          identity: Identity(distinctID: "host-7"))
        let fragment = Self.processor.contextFragment
        #expect(EventEnvelope.isFragment(fragment))
        let bare = Self.encoded(event, context: false)
        let whole = Self.encoded(event, context: true)
        #expect(Self.completed(bare, fragment: fragment) == whole)
    }

    @Test func theEmptyObjectTakesTheFragmentWithoutAComma() {
        #expect(Self.completed(Array("{}".utf8), fragment: Array(#""context":{},"sdk":{}"#.utf8))
            == Array(#"{"context":{},"sdk":{}}"#.utf8))
        #expect(Self.completed(Array("[1]".utf8), fragment: []) == nil, "not an object: sent as it is")
        #expect(Self.completed(Array("}".utf8), fragment: []) == nil)
    }

    @Test func aRecoveredContextIsMarkedInsideSDK() throws {
        let fragment = Self.processor.contextFragment
        for recovered in [EventEnvelope.recoveredFragment(current: fragment, sdkVersion: "0.2.0"),
                          EventEnvelope.recoveredFragment(current: nil, sdkVersion: "0.2.0"),
                          EventEnvelope.recoveredFragment(current: Array("garbage".utf8), sdkVersion: "0.2.0")] {
            #expect(EventEnvelope.isFragment(recovered) && recovered.count <= EventEnvelope.recoveredBound)
            let object = try #require(try JSONSerialization.jsonObject(with: Data([UInt8(ascii: "{")] + recovered + [UInt8(ascii: "}")]))
                as? [String: Any])
            let sdk = try #require(object["sdk"] as? [String: Any])
            #expect(sdk["context_recovered"] as? Bool == false && sdk["name"] as? String == "cairn-swift", "\(sdk)")
            #expect(object["context"] is [String: Any])
        }
        let kept = EventEnvelope.recoveredFragment(current: fragment, sdkVersion: "0.2.0")
        #expect(kept.starts(with: fragment.dropLast()), "this run's context, the marker added")
    }

    @Test func fragmentsAreRecognised() {
        #expect(!EventEnvelope.isFragment(Array(Array(#""context":{}"#.utf8).dropLast())))
        #expect(!EventEnvelope.isFragment(Array("\"context\":{\n}".utf8)), "no newline in NDJSON")
        #expect(!EventEnvelope.isFragment(Array(#""sdk":{}"#.utf8)))
        #expect(!EventEnvelope.isFragment(Array(#""context":"#.utf8) + [UInt8](repeating: 0x20, count: EventEnvelope.maxFragment) + [0x7D]))
        #expect(EventEnvelope.labels(ofRecords: [Array(#"{"type":"user_set","name":"checkout"}"#.utf8),
                                                 Array(#"{"type":"user_set"}"#.utf8), Array("not json".utf8)])
                == ["checkout", "user_set"])
    }
}
