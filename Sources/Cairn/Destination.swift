import CairnProcessor
import Foundation

/// A finished event: its JSON record exactly as it is sent (docs/FORMATS.md, "Event").
public struct FinishedEvent: Sendable, Equatable {
    /// The JSON object's bytes, one line.
    public let json: [UInt8]

    /// Wraps a record.
    public init(json: [UInt8]) { self.json = json }

    /// The record as text.
    public var text: String { String(decoding: json, as: UTF8.self) }

    /// The record parsed with Foundation (for tests and tools; not for hot paths).
    public var object: [String: Any]? {
        (try? JSONSerialization.jsonObject(with: Data(json))) as? [String: Any]
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
        FileHandle.standardOutput.write(Data(out))
    }
}
