import CairnProcessor
import FoundationEssentials
import Dispatch
import Glibc

/// A finished event: its JSON record exactly as it is sent (docs/FORMATS.md, "Event").
public struct FinishedEvent: Sendable, Equatable {
    /// The JSON object's bytes, one line.
    public let json: [UInt8]

    /// Wraps a record.
    public init(json: [UInt8]) { self.json = json }

    /// The record as text.
    public var text: String { String(decoding: json, as: UTF8.self) }

    /// The record parsed (for tests and tools; not for hot paths): objects as
    /// `[String: Any]`, arrays as `[Any]`, numbers as `Int` when whole and in range
    /// (else `Double`), `String`, `Bool`, and JSON `null` as `nil` boxed in `Any`
    /// (`Optional<Any>.none`). Read with the toolchain's `JSONDecoder`, so that Cairn
    /// does not make a service load Foundation.
    public var object: [String: Any]? {
        (try? JSONDecoder().decode(AnyJSON.self, from: Data(json)))?.value as? [String: Any]
    }

    /// The event's `name`.
    public var name: String? { object?["name"] as? String }
}

/// Somewhere finished events go besides the upload URL: a service adds its own sink
/// without touching call sites. Called on the SDK's background thread with events in
/// the order they were tracked, after the event left the service's thread; return
/// quickly (queue slow work). An event recovered after a crash may arrive again.
public protocol Destination: Sendable {
    /// Receives finished events.
    func receive(_ events: [FinishedEvent])
}

/// Writes each event as one JSON line to standard output.
public struct StdoutDestination: Destination {
    /// A stdout destination.
    public init() {}

    /// Writes the lines.
    public func receive(_ events: [FinishedEvent]) {
        var out: [UInt8] = []
        for e in events {
            out += e.json
            out.append(0x0A)
        }
        out.withUnsafeBytes { bytes in
            var done = 0
            while done < bytes.count {
                let n = write(1, bytes.baseAddress.map { $0 + done }, bytes.count - done)
                if n < 0 && errno == EINTR { continue }
                if n <= 0 { return }
                done += n
            }
        }
    }
}

/// Any JSON value as the `Any` that ``FinishedEvent/object`` describes.
private struct AnyJSON: Decodable {
    let value: Any

    private struct Key: CodingKey {
        let stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    init(from decoder: any Decoder) throws {
        if let keyed = try? decoder.container(keyedBy: Key.self) {
            var members: [String: Any] = [:]
            for key in keyed.allKeys { members[key.stringValue] = try keyed.decode(AnyJSON.self, forKey: key).value }
            value = members
        } else if var unkeyed = try? decoder.unkeyedContainer() {
            var items: [Any] = []
            while !unkeyed.isAtEnd { items.append(try unkeyed.decode(AnyJSON.self).value) }
            value = items
        } else {
            let single = try decoder.singleValueContainer()
            if single.decodeNil() {
                value = Optional<Any>.none as Any
            } else if let b = try? single.decode(Bool.self) {
                value = b
            } else if let i = try? single.decode(Int.self) {
                value = i
            } else if let d = try? single.decode(Double.self) {
                value = d
            } else {
                value = try single.decode(String.self)
            }
        }
    }
}
