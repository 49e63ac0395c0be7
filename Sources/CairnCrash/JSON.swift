import CairnProcessor
import FoundationEssentials

/// A JSON value, written in the order it was built (objects keep their key order), so
/// events are stable byte for byte and easy to compare in tests.
public enum JSONValue: Sendable, Equatable {
    /// `null`.
    case null
    /// `true` or `false`.
    case bool(Bool)
    /// An integer.
    case int(Int64)
    /// An unsigned integer (addresses, counters).
    case uint(UInt64)
    /// A finite number; NaN and infinities are written as `null`.
    case double(Double)
    /// A string; invalid UTF-8 never reaches here (Swift strings are valid).
    case string(String)
    /// An array.
    case array([JSONValue])
    /// An object, keys in order.
    case object([(String, JSONValue)])

    /// Whether this is an object.
    public var isObject: Bool {
        if case .object = self { return true }
        return false
    }

    /// Compares element by element (objects: same keys, same order).
    public static func == (a: JSONValue, b: JSONValue) -> Bool {
        switch (a, b) {
        case (.null, .null): return true
        case let (.bool(x), .bool(y)): return x == y
        case let (.int(x), .int(y)): return x == y
        case let (.uint(x), .uint(y)): return x == y
        case let (.double(x), .double(y)): return x == y
        case let (.string(x), .string(y)): return x == y
        case let (.array(x), .array(y)): return x == y
        case let (.object(x), .object(y)):
            return x.count == y.count && zip(x, y).allSatisfy { $0.0 == $1.0 && $0.1 == $1.1 }
        default: return false
        }
    }

    /// The compact JSON text (no newline; `/` is not escaped).
    public var bytes: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(256)
        write(into: &out)
        return out
    }

    /// Appends the compact JSON text to `out`.
    public func write(into out: inout [UInt8]) {
        switch self {
        case .null: out += Array("null".utf8)
        case .bool(let b): out += Array((b ? "true" : "false").utf8)
        case .int(let i): out += Array(String(i).utf8)
        case .uint(let u): out += Array(String(u).utf8)
        case .double(let d): out += Array((d.isFinite ? "\(d)" : "null").utf8)
        case .string(let s): Self.writeString(s, into: &out)
        case .array(let items):
            out.append(UInt8(ascii: "["))
            for (i, item) in items.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                item.write(into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let members):
            out.append(UInt8(ascii: "{"))
            for (i, (key, value)) in members.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                Self.writeString(key, into: &out)
                out.append(UInt8(ascii: ":"))
                value.write(into: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    private static let hex = Array("0123456789abcdef".utf8)

    private static func writeString(_ s: String, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        for b in s.utf8 {
            switch b {
            case UInt8(ascii: "\""): out += [UInt8(ascii: "\\"), UInt8(ascii: "\"")]
            case UInt8(ascii: "\\"): out += [UInt8(ascii: "\\"), UInt8(ascii: "\\")]
            case 0x0A: out += [UInt8(ascii: "\\"), UInt8(ascii: "n")]
            case 0x0D: out += [UInt8(ascii: "\\"), UInt8(ascii: "r")]
            case 0x09: out += [UInt8(ascii: "\\"), UInt8(ascii: "t")]
            case 0..<0x20, 0x7F:
                out += Array("\\u00".utf8)
                out.append(hex[Int(b >> 4)])
                out.append(hex[Int(b & 0xF)])
            default: out.append(b)
            }
        }
        out.append(UInt8(ascii: "\""))
    }
}

extension JSONValue {
    /// `bytes` read as JSON (any value at the top, objects' keys sorted); nil when they
    /// are not JSON. With the toolchain's `JSONDecoder` (FoundationEssentials), not
    /// `JSONSerialization`, which would make every service load Foundation.
    package static func parse(_ bytes: [UInt8]) -> JSONValue? {
        (try? JSONDecoder().decode(Decoded.self, from: Data(bytes)))?.value
    }

    /// The member `key` of an object; nil for other values and absent keys.
    subscript(key: String) -> JSONValue? {
        guard case .object(let members) = self else { return nil }
        return members.first { $0.0 == key }?.1
    }

    /// The text of a string.
    var text: String? {
        if case .string(let s) = self { return s }
        return nil
    }

    /// A whole number that is not negative, from any of the number cases.
    var unsigned: UInt64? {
        switch self {
        case .int(let i): return UInt64(exactly: i)
        case .uint(let u): return u
        case .double(let d): return UInt64(exactly: d)
        default: return nil
        }
    }

    /// What `JSONDecoder` makes of any JSON value.
    private struct Decoded: Decodable {
        let value: JSONValue

        struct Key: CodingKey {
            let stringValue: String
            var intValue: Int? { nil }
            init(stringValue: String) { self.stringValue = stringValue }
            init?(intValue: Int) { nil }
        }

        init(from decoder: any Decoder) throws {
            if let keyed = try? decoder.container(keyedBy: Key.self) {
                var members: [(String, JSONValue)] = []
                for key in keyed.allKeys.sorted(by: { $0.stringValue < $1.stringValue }) {
                    members.append((key.stringValue, try keyed.decode(Decoded.self, forKey: key).value))
                }
                value = .object(members)
            } else if var unkeyed = try? decoder.unkeyedContainer() {
                var items: [JSONValue] = []
                while !unkeyed.isAtEnd { items.append(try unkeyed.decode(Decoded.self).value) }
                value = .array(items)
            } else {
                let single = try decoder.singleValueContainer()
                if single.decodeNil() {
                    value = .null
                } else if let b = try? single.decode(Bool.self) {
                    value = .bool(b)
                } else if let i = try? single.decode(Int64.self) {
                    value = .int(i)
                } else if let u = try? single.decode(UInt64.self) {
                    value = .uint(u)
                } else if let d = try? single.decode(Double.self) {
                    value = .double(d)
                } else {
                    value = .string(try single.decode(String.self))
                }
            }
        }
    }
}

/// A UUIDv7 (RFC 9562) as lowercase text: the processor's event ids, with their random
/// bits from `random` when given (ids derived from a report), else from the system.
func uuidV7(millis: UInt64, random: (UInt64, UInt64)? = nil) -> String {
    EventIDGenerator.text(random.map { EventIDGenerator.id(millis: millis, random: $0) }
        ?? EventIDGenerator().next(millis: millis))
}

/// Formats times in the host's zone, as every other event does.
private let eventClock = EventClock()

/// The time `millis` (Unix ms) as RFC 3339 with milliseconds and the local offset, and
/// that offset in minutes east of UTC.
func rfc3339(millis: UInt64) -> (text: String, offsetMinutes: Int) {
    (eventClock.text(millis), eventClock.offsetMinutes(at: millis))
}

/// Unix time in milliseconds.
func nowMillis() -> UInt64 { EventClock.nowMillis() }
