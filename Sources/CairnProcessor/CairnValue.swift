import FoundationEssentials

/// A property value of an event: what JSON can hold, typed, so call sites read
/// naturally (`["plan": "pro", "seats": 3, "trial": false]`) and nothing untyped
/// (`Any`) reaches the SDK. Bridging code converts `Any` with
/// `init(sanitizing:)`.
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
    /// The most container levels ``init(sanitizing:counts:)`` converts: an array or
    /// dictionary nested deeper becomes `null`. Above any sensible
    /// ``SanitizerLimits/maxDepth``, so the sanitiser's own limit is what events see.
    package static let conversionDepthLimit = 32

    /// The most values ``init(sanitizing:counts:)`` converts in all (containers, their
    /// elements, scalars): a container shared many times over (the same array in both
    /// halves of its parent, thirty levels down) would otherwise expand to billions.
    package static let conversionValueLimit = 100_000

    /// What ``init(sanitizing:counts:)`` writes where a container would contain itself.
    package static let cycleMarker = "[cycle]"

    /// Converts a value from untyped code (JSON decoded with `JSONSerialization`,
    /// Objective-C style dictionaries) as ``init(sanitizing:counts:)`` does, discarding
    /// the counts. Never traps.
    package init(sanitizing value: Any?) {
        var counts = RuleCounts()
        self.init(sanitizing: value, counts: &counts)
    }

    /// Converts a value from untyped code: strings, numbers, booleans, `NSNull`, dates
    /// (RFC 3339 text), URLs, UUIDs, arrays (`[Any]`, `NSArray`) and dictionaries
    /// (`[String: Any]`, `[AnyHashable: Any]`, `NSDictionary`) map to their case; an
    /// optional that is `nil` becomes `.null`; anything else becomes its description as
    /// text (the type's own code, which this conversion cannot vouch for; likewise the
    /// `object(at:)` of an `NSArray` subclass other than Foundation's). Never traps,
    /// recurses or loops on hostile input:
    ///
    /// - A container that contains itself (an `NSMutableArray` added to itself, two
    ///   dictionaries holding each other) becomes ``cycleMarker`` where the chain closes;
    ///   counted in ``RuleCounts/cutCycles``.
    /// - Containers nested deeper than ``conversionDepthLimit`` become `null`, without
    ///   being looked into; counted in ``RuleCounts/droppedDepth``.
    /// - After ``conversionValueLimit`` values, the containers still open keep what they
    ///   have; counted in ``RuleCounts/truncatedArrays`` (one per array) and
    ///   ``RuleCounts/droppedKeys`` (one per key).
    /// - A dictionary key that is not text is written as its text when it is a number,
    ///   a boolean, a date, a URL or a UUID; other keys are dropped, as is a key whose
    ///   text another key of the same dictionary already has. Counted in
    ///   ``RuleCounts/droppedKeys``.
    ///
    /// Foundation containers are read without bridging (`NSArray as? [Any]` would copy
    /// the whole tree, recursively, before a single check could run).
    package init(sanitizing value: Any?, counts: inout RuleCounts) {
        var converter = UntypedConverter()
        self = converter.convert(value)
        counts.add(converter.counts)
    }
}

/// The work of ``CairnValue/init(sanitizing:counts:)``: a depth-first walk with an
/// explicit stack of open containers, so neither the input's depth nor its cycles can
/// exhaust the thread's stack.
private struct UntypedConverter {
    var counts = RuleCounts()
    private var budget = CairnValue.conversionValueLimit
    private var stack: [Frame] = []
    /// The Foundation containers open on the stack, to recognise a cycle.
    private var open: Set<ObjectIdentifier> = []

    /// A container being converted.
    private struct Frame {
        /// Its key in the enclosing object; nil inside an array and at the root.
        var key: String?
        var identity: ObjectIdentifier?
        var elements: Elements
        var position = 0
        var array: [CairnValue] = []
        var object: [String: CairnValue] = [:]

        enum Elements {
            case array([Any])
            case dictionary([String: Any], Dictionary<String, Any>.Index)
            case pairs([(key: String, value: Any)])
        }

        var isObject: Bool {
            if case .array = elements { return false }
            return true
        }

        /// The next element and its key (nil in arrays), or nil at the end.
        mutating func next() -> (key: String?, value: Any)? {
            switch elements {
            case .array(let items):
                guard position < items.count else { return nil }
                position += 1
                return (nil, items[position - 1])
            case .dictionary(let members, let index):
                guard index != members.endIndex else { return nil }
                elements = .dictionary(members, members.index(after: index))
                return (members[index].key, members[index].value)
            case .pairs(let pairs):
                guard position < pairs.count else { return nil }
                position += 1
                return (pairs[position - 1].key, pairs[position - 1].value)
            }
        }

        /// Elements not taken yet.
        var remaining: Int {
            switch elements {
            case .array(let items): return items.count - position
            case .dictionary(let members, let index): return members.distance(from: index, to: members.endIndex)
            case .pairs(let pairs): return pairs.count - position
            }
        }

        /// Adds a converted element; a key already present keeps its first value.
        mutating func add(_ value: CairnValue, key: String?, counts: inout RuleCounts) {
            guard let key else {
                array.append(value)
                return
            }
            if object[key] == nil {
                object[key] = value
            } else {
                counts.droppedKeys += 1
            }
        }

        var value: CairnValue { isObject ? .object(object) : .array(array) }
    }

    /// One input value: a finished value, or a container to walk.
    private enum Node {
        case value(CairnValue)
        case container(Frame)
    }

    mutating func convert(_ root: Any?) -> CairnValue {
        budget -= 1
        switch node(root) {
        case .value(let v): return v
        case .container(let frame): push(frame)
        }
        while let top = stack.indices.last {
            if budget > 0, let (key, element) = stack[top].next() {
                budget -= 1
                switch node(element) {
                case .value(let v):
                    stack[top].add(v, key: key, counts: &counts)
                case .container(var frame):
                    frame.key = key
                    push(frame)
                }
                continue
            }
            let rest = stack[top].remaining
            if rest > 0 {
                if stack[top].isObject { counts.droppedKeys += rest } else { counts.truncatedArrays += 1 }
            }
            let done = stack.removeLast()
            if let identity = done.identity { open.remove(identity) }
            guard let parent = stack.indices.last else { return done.value }
            stack[parent].add(done.value, key: done.key, counts: &counts)
        }
        return .null
    }

    private mutating func push(_ frame: Frame) {
        if let identity = frame.identity { open.insert(identity) }
        stack.append(frame)
    }

    /// Classifies `value`. Foundation's classes (`NSNumber`, `NSNull`, `NSArray`,
    /// `NSDictionary`, from `JSONSerialization` or Objective-C-style code) are recognised
    /// by their type's name alone, before any cast, so that this module need not link
    /// Foundation (a service without it would load it for Cairn: about 7 MiB and 4 ms of
    /// process start) and no container is bridged: casting an `NSArray` to a Swift type
    /// makes Foundation bridge it all the way down, which never ends on a cycle.
    private mutating func node(_ value: Any?) -> Node {
        guard var value else { return .value(.null) }
        while true {
            let type = type(of: value)
            if type is AnyObject.Type, let foundation = FoundationClass(type) {
                switch foundation {
                case .null: return .value(.null)
                case .boolean: return .value(.bool((value as? Bool) ?? false))
                case .number: return .value(Self.number(value))
                case .array:
                    let identity = ObjectIdentifier(value as AnyObject)
                    if let cut = cut(identity: identity) { return .value(cut) }
                    guard let items = Self.elements(of: value) else { return .value(.string(String(describing: value))) }
                    return .container(Frame(identity: identity, elements: .array(items)))
                case .dictionary:
                    let identity = ObjectIdentifier(value as AnyObject)
                    if let cut = cut(identity: identity) { return .value(cut) }
                    guard let entries = Self.entries(of: value) else { return .value(.string(String(describing: value))) }
                    return .container(Frame(identity: identity, elements: .pairs(pairs(entries))))
                }
            }
            guard let optional = value as? AnyOptional else { break }
            guard let wrapped = optional.wrapped else { return .value(.null) }
            value = wrapped
        }
        if let scalar = Self.scalar(value) { return .value(scalar) }
        if let members = value as? [String: Any] {
            if let cut = cut(identity: nil) { return .value(cut) }
            return .container(Frame(identity: nil, elements: .dictionary(members, members.startIndex)))
        }
        if let members = value as? [AnyHashable: Any] {
            if let cut = cut(identity: nil) { return .value(cut) }
            let entries = pairs(members.lazy.map { ($0.key.base, $0.value) })
            return .container(Frame(identity: nil, elements: .pairs(entries)))
        }
        if let items = value as? [Any] {
            if let cut = cut(identity: nil) { return .value(cut) }
            return .container(Frame(identity: nil, elements: .array(items)))
        }
        return .value(.string(String(describing: value)))
    }

    /// The Foundation classes read specially, by their type's qualified name.
    private enum FoundationClass {
        case null, boolean, number, array, dictionary

        init?(_ type: Any.Type) {
            switch String(reflecting: type) {
            case "Foundation.NSNull": self = .null
            case "Foundation.__NSCFBoolean": self = .boolean
            case "Foundation.NSNumber", "Foundation.NSDecimalNumber": self = .number
            case "Foundation.NSArray", "Foundation.NSMutableArray": self = .array
            case "Foundation.NSDictionary", "Foundation.NSMutableDictionary": self = .dictionary
            default: return nil
            }
        }
    }

    /// What stands for a container at the next level when it may not be opened: the
    /// cycle marker when it is open already, `null` when it lies too deep; else nil.
    private mutating func cut(identity: ObjectIdentifier?) -> CairnValue? {
        if let identity, open.contains(identity) {
            counts.cutCycles += 1
            return .string(CairnValue.cycleMarker)
        }
        if stack.count >= CairnValue.conversionDepthLimit {
            counts.droppedDepth += 1
            return .null
        }
        return nil
    }

    /// The elements of an `NSArray` or `NSMutableArray`, unbridged: Foundation's own
    /// classes reflect their elements as their mirror's children.
    private static func elements(of array: Any) -> [Any]? {
        Mirror(reflecting: array).children.map(\.value)
    }

    /// The entries of an `NSDictionary` or `NSMutableDictionary`, unbridged: their
    /// mirror's children are `(key, value)` pairs. Nil when a child is not a pair.
    private static func entries(of dictionary: Any) -> [(Any, Any)]? {
        var out: [(Any, Any)] = []
        for child in Mirror(reflecting: dictionary).children {
            let pair = Mirror(reflecting: child.value).children.map(\.value)
            guard pair.count == 2 else { return nil }
            out.append((pair[0], pair[1]))
        }
        return out
    }

    /// Entries with keys as text; keys with no text are dropped and counted.
    private mutating func pairs(_ entries: some Sequence<(Any, Any)>) -> [(key: String, value: Any)] {
        var out: [(key: String, value: Any)] = []
        for (key, value) in entries {
            if let text = Self.keyText(key) {
                out.append((text, value))
            } else {
                counts.droppedKeys += 1
            }
        }
        return out
    }

    /// A dictionary key as text: text itself, or a number, boolean, date, URL or UUID.
    private static func keyText(_ key: Any) -> String? {
        let type = type(of: key)
        if type is AnyObject.Type, let foundation = FoundationClass(type) {
            switch foundation {
            case .null, .array, .dictionary: return nil
            case .boolean: return (key as? Bool).map { $0 ? "true" : "false" }
            case .number: return text(of: Self.number(key))
            }
        }
        return scalar(key).flatMap(text(of:))
    }

    private static func text(of value: CairnValue) -> String? {
        switch value {
        case .string(let s): return s
        case .int(let i): return String(i)
        case .double(let d): return d.isFinite ? d.description : nil
        case .bool(let b): return b ? "true" : "false"
        case .null, .array, .object: return nil
        }
    }

    /// An `NSNumber` (not a boolean) as the case its contents call for: whole numbers
    /// that fit are integers, the sign of -0.0 is kept, the rest are doubles. Read
    /// through Foundation's own bridging casts to Swift numbers, which copy nothing.
    private static func number(_ v: Any) -> CairnValue {
        if let d = v as? Double, d == 0 && d.sign == .minus { return .double(d) }
        if let i = v as? Int64 { return .int(i) }
        if let d = v as? Double { return .double(d) }
        if let u = v as? UInt64 { return .double(Double(u)) }
        return .string(String(describing: v))
    }

    /// A value that is not a container, or nil. Only casts to Swift value types, which
    /// never bridge a Swift container (the caller has ruled out Foundation containers).
    private static func scalar(_ value: Any) -> CairnValue? {
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
        case let v as Decimal: return .double(Double(v.description) ?? .nan)
        case let v as Date: return .string(v.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true)))
        case let v as URL: return .string(v.absoluteString)
        case let v as UUID: return .string(v.uuidString.lowercased())
        default: return nil
        }
    }
}

/// Lets a value of unknown type be asked whether it is an optional, and unwrapped.
private protocol AnyOptional {
    var wrapped: Any? { get }
}

extension Optional: AnyOptional {
    var wrapped: Any? { map { $0 } }
}
