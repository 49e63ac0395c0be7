import Foundation

/// A property value of an event: what JSON can hold, typed, so call sites read
/// naturally (`["plan": "pro", "seats": 3, "trial": false]`) and nothing untyped
/// (`Any`) reaches the SDK. Bridging code converts `Any` with
/// ``init(sanitizing:)``.
public enum CairnValue: Sendable, Hashable {
    /// JSON `null`.
    case null
    /// `true` or `false`.
    case bool(Bool)
    /// A whole number.
    case int(Int64)
    /// A number; NaN and infinities are replaced by the sanitiser (docs/FORMATS.md).
    case double(Double)
    /// Text.
    case string(String)
    /// A list.
    case array([CairnValue])
    /// Named values; keys are unique, their order is not significant.
    case object([String: CairnValue])
}

extension CairnValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral,
    ExpressibleByBooleanLiteral, ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral, ExpressibleByNilLiteral {
    /// `"text"`.
    public init(stringLiteral value: String) { self = .string(value) }
    /// `42`.
    public init(integerLiteral value: Int64) { self = .int(value) }
    /// `1.5`.
    public init(floatLiteral value: Double) { self = .double(value) }
    /// `true`.
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    /// `[1, "two"]`.
    public init(arrayLiteral elements: CairnValue...) { self = .array(elements) }
    /// `["key": value]`; a repeated key keeps its last value.
    public init(dictionaryLiteral elements: (String, CairnValue)...) {
        self = .object(Dictionary(elements, uniquingKeysWith: { _, last in last }))
    }
    /// `nil`.
    public init(nilLiteral: ()) { self = .null }
}

extension CairnValue {
    /// Converts a value from untyped code (JSON decoded with `JSONSerialization`,
    /// Objective-C style dictionaries): strings, numbers, booleans, `NSNull`, dates
    /// (RFC 3339 text), URLs, UUIDs, arrays and string-keyed dictionaries map to their
    /// case; an optional that is `nil` becomes `.null`; anything else becomes its
    /// description as text. Nesting deeper than 32 levels becomes `.null`. Never traps.
    public init(sanitizing value: Any?) {
        self = Self.convert(value, depth: 0)
    }

    private static func convert(_ value: Any?, depth: Int) -> CairnValue {
        guard depth < 32, let value else { return .null }
        // A real NSNumber (JSONSerialization's numbers) would match `as Bool` too.
        if type(of: value) is NSNumber.Type, let v = value as? NSNumber {
            if String(cString: v.objCType) == "c" { return .bool(v.boolValue) }
            if let i = Int64(exactly: v.doubleValue), !"\(v)".contains(".") { return .int(i) }
            return .double(v.doubleValue)
        }
        switch value {
        case let v as CairnValue: return v
        case let v as String: return .string(v)
        case let v as Substring: return .string(String(v))
        case let v as Bool: return .bool(v)
        case let v as Int: return .int(Int64(v))
        case let v as Int64: return .int(v)
        case let v as Int32: return .int(Int64(v))
        case let v as Int16: return .int(Int64(v))
        case let v as Int8: return .int(Int64(v))
        case let v as UInt8: return .int(Int64(v))
        case let v as UInt16: return .int(Int64(v))
        case let v as UInt32: return .int(Int64(v))
        case let v as UInt: return v <= UInt(Int64.max) ? .int(Int64(v)) : .double(Double(v))
        case let v as UInt64: return v <= UInt64(Int64.max) ? .int(Int64(v)) : .double(Double(v))
        case let v as Double: return .double(v)
        case let v as Float: return .double(Double(v))
        case let v as Decimal: return .double(NSDecimalNumber(decimal: v).doubleValue)
        case is NSNull: return .null
        case let v as Date: return .string(ISO8601DateFormatter.string(from: v, timeZone: TimeZone(identifier: "UTC") ?? .current,
                                                                          formatOptions: [.withInternetDateTime, .withFractionalSeconds]))
        case let v as URL: return .string(v.absoluteString)
        case let v as UUID: return .string(v.uuidString.lowercased())
        case let v as [String: Any]:
            var out: [String: CairnValue] = [:]
            out.reserveCapacity(v.count)
            for (k, item) in v { out[k] = convert(item, depth: depth + 1) }
            return .object(out)
        case let v as [Any]: return .array(v.map { convert($0, depth: depth + 1) })
        case let v as [Any?]: return .array(v.map { convert($0, depth: depth + 1) })
        default:
            let mirror = Mirror(reflecting: value)
            if mirror.displayStyle == .optional {
                return mirror.children.first.map { convert($0.value, depth: depth + 1) } ?? .null
            }
            return .string(String(describing: value))
        }
    }
}
