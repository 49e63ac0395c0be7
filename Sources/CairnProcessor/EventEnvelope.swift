import CairnBase
import FoundationEssentials

/// How an event's bytes carry its context (docs/FORMATS.md, "Ring file", "Records"): the
/// processor owns every byte of both, and the uploader, which moves records as opaque
/// bytes, completes bare events through this type alone.
///
/// The SDK writes its `"context":{...},"sdk":{...}` fragment (``CommonProperties/encodedFragment(sdkVersion:)``)
/// once per run as a context record, and each event after it *bare*: the event object
/// without those two members, which are its last ones. What the collector gets is every
/// event whole, as ``Processor`` encodes it with its context: a bare event's bytes
/// without their final `}` (``bareHead(_:)``), then `,`, the fragment and `}`
/// (``completion(_:)``). The context travels with every event, not once per batch: a
/// collector reads each line alone, and zstd stores the repeats in a batch as
/// back-references (the benchmark's `wire_bytes_per_event_context_each` against
/// `..._context_once` shows what that costs on the wire).
package enum EventEnvelope {
    /// The largest context fragment: what a context record may hold.
    package static let maxFragment = 64 << 10

    /// A bound on ``recoveredFragment(current:sdkVersion:)``'s size, for a batch's byte
    /// budget before the fragment is made.
    package static let recoveredBound = 4096

    /// The member added to the `sdk` object of an event completed with another run's
    /// context because its own was lost.
    static let recoveredMarker = Array(#","context_recovered":false"#.utf8)

    /// Whether `bytes` can be a context fragment: `"context":` first, `}` last, no newline
    /// (it goes into NDJSON), and not over ``maxFragment``. (Not generic: called from the
    /// uploader's module, a generic would run unspecialized, through the standard
    /// library's shared code, whose pages would then stay resident in an idle service.)
    package static func isFragment(_ bytes: UnsafeRawBufferPointer) -> Bool {
        let head = #""context":"#.utf8
        return bytes.count > head.count && bytes.count <= maxFragment && bytes.starts(with: head)
            && bytes[bytes.count - 1] == UInt8(ascii: "}") && bytes.firstIndex(of: UInt8(ascii: "\n")) == nil
    }

    /// The same check of an array's bytes.
    package static func isFragment(_ bytes: [UInt8]) -> Bool {
        bytes.withUnsafeBytes { isFragment($0) }
    }

    /// How a bare event is completed: the count of its bytes that come first (all but its
    /// final `}`), and whether the completion follows them from its `,` (false after an
    /// empty object, which takes the fragment without it). Nil when the bytes are not an
    /// object that can be completed: they then go as they are.
    package static func bareHead(_ bare: UnsafeRawBufferPointer) -> (count: Int, comma: Bool)? {
        guard bare.count >= 2, bare[bare.count - 1] == UInt8(ascii: "}") else { return nil }
        return (bare.count - 1, bare[bare.count - 2] != UInt8(ascii: "{"))
    }

    /// What follows a bare event's head: `,<fragment>}` (from index 1 when
    /// ``bareHead(_:)`` says no comma).
    package static func completion(_ fragment: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(fragment.count + 2)
        out.append(UInt8(ascii: ","))
        out += fragment
        out.append(UInt8(ascii: "}"))
        return out
    }

    /// The fragment for events whose own context is lost: `current` (this run's
    /// fragment) with `"context_recovered":false` added to its `sdk` object, its last
    /// member; or, without a usable one, an empty context and the SDK's name and version
    /// with the marker. At most ``recoveredBound`` bytes.
    package static func recoveredFragment(current: [UInt8]?, sdkVersion: String) -> [UInt8] {
        if let f = current, isFragment(f), f.count < recoveredBound - recoveredMarker.count {
            return Array(f.dropLast()) + recoveredMarker + [UInt8(ascii: "}")]
        }
        return JSONWriter.bytes { w in
            w.ascii(#""context":{},"#)
            CommonProperties.writeSDK(version: String(sdkVersion.prefix(64)), into: &w, extra: recoveredMarker)
        }
    }

    /// What a log calls each record: its event's `name`, or for a user-property request
    /// its `type`; records that are not such an object are left out.
    package static func labels(ofRecords records: [[UInt8]]) -> [String] {
        struct Named: Decodable {
            var name: String?
            var type: String?
        }
        let decoder = JSONDecoder()
        return records.compactMap { record in
            guard let named = try? decoder.decode(Named.self, from: Data(record)) else { return nil }
            return named.name ?? named.type
        }
    }
}
