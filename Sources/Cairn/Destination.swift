import CairnBase
import CairnCrash
import CairnProcessor
import CairnStore
import FoundationEssentials

/// A finished event: its JSON record exactly as it is sent (docs/FORMATS.md, "Event").
public struct FinishedEvent: Sendable, Equatable {
    /// The JSON object's bytes, one line.
    public let json: [UInt8]

    /// Wraps a record.
    package init(json: [UInt8]) { self.json = json }

    /// The record as text.
    public var text: String { String(decoding: json, as: UTF8.self) }

    /// The record parsed (for tests and tools; not for hot paths): objects as
    /// `[String: Any]`, arrays as `[Any]`, numbers as `Int` when whole and in range
    /// (else `Double`), `String`, `Bool`, and JSON `null` as `nil` boxed in `Any`
    /// (`Optional<Any>.none`). Read with `CairnValue(json:)`, so that Cairn does not make
    /// a service load Foundation.
    public var object: [String: Any]? {
        CairnValue(json: json).map(Self.any) as? [String: Any]
    }

    /// A parsed value as ``object`` describes it.
    private static func any(_ value: CairnValue) -> Any {
        switch value {
        case .null: return Optional<Any>.none as Any
        case .bool(let b): return b
        case .int(let i): return Int(i)
        case .double(let d): return d
        case .string(let s): return s
        case .array(let items): return items.map(any)
        case .object(let members): return members.mapValues(any)
        }
    }

    /// The event's `name`.
    public var name: String? { object?["name"] as? String }
}

/// Somewhere finished events go besides the upload URL: a service adds its own sink
/// without touching call sites. Every event the collector gets goes here too: tracked
/// events, `sdk_health`, the install's `user_setOnce`, and the `crash` and
/// `session_end` events of previous runs. Called on the SDK's background thread, with
/// tracked events in the order they were tracked, after they left the service's thread;
/// a Critical event is handed over on the thread that tracked it, once it is stored
/// (see ``Cairn/track(_:time:identity:)`` for typed events). Return quickly (queue slow
/// work). An event recovered after a crash may arrive again.
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
        out.withUnsafeBytes { writeAll($0, to: 1) }
    }
}

