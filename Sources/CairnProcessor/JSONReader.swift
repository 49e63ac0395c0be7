extension CairnValue {
    /// Deepest nesting ``init(json:)`` reads (deeper input is refused, not recursed into).
    package static let jsonDepthLimit = 64

    /// `bytes` read as one JSON value (RFC 8259), surrounded by optional white space; nil
    /// when they are not JSON, or nest deeper than ``jsonDepthLimit``. Whole numbers that
    /// fit an `Int64` become `.int`, other numbers `.double`; a repeated key keeps its
    /// last value; invalid UTF-8 and lone surrogates in strings become U+FFFD.
    ///
    /// The SDK's one JSON reader (the files it reads back: run records, crash contexts,
    /// the install record, and ``FinishedEvent/object``). Small and without Foundation,
    /// so that reading a file at start costs no framework's first use.
    package init?(json bytes: [UInt8]) {
        var reader = JSONReader(bytes)
        guard let value = reader.value(depth: 0) else { return nil }
        reader.skipSpace()
        guard reader.atEnd else { return nil }
        self = value
    }

    /// The member `key` of an object; nil for other values and absent keys.
    package subscript(key: String) -> CairnValue? {
        guard case .object(let members) = self else { return nil }
        return members[key]
    }

    /// The text of a string; nil for other values.
    package var text: String? {
        if case .string(let s) = self { return s }
        return nil
    }

    /// A whole number that is not negative (`.int`, or a `.double` that is one); nil
    /// otherwise.
    package var unsigned: UInt64? {
        switch self {
        case .int(let i): return UInt64(exactly: i)
        case .double(let d): return d.isFinite ? UInt64(exactly: d) : nil
        default: return nil
        }
    }
}

/// A recursive-descent JSON reader over bytes.
private struct JSONReader {
    let bytes: [UInt8]
    var i = 0

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    var atEnd: Bool { i >= bytes.count }

    mutating func skipSpace() {
        while i < bytes.count, bytes[i] == 0x20 || bytes[i] == 0x0A || bytes[i] == 0x0D || bytes[i] == 0x09 { i += 1 }
    }

    mutating func value(depth: Int) -> CairnValue? {
        skipSpace()
        guard i < bytes.count else { return nil }
        switch bytes[i] {
        case 0x7B: return depth < CairnValue.jsonDepthLimit ? object(depth: depth + 1) : nil
        case 0x5B: return depth < CairnValue.jsonDepthLimit ? array(depth: depth + 1) : nil
        case 0x22: return string().map(CairnValue.string)
        case 0x74: return word("true") ? .bool(true) : nil
        case 0x66: return word("false") ? .bool(false) : nil
        case 0x6E: return word("null") ? .null : nil
        default: return number()
        }
    }

    private mutating func word(_ w: StaticString) -> Bool {
        let n = w.utf8CodeUnitCount
        guard bytes.count - i >= n else { return false }
        for k in 0..<n where bytes[i + k] != w.utf8Start[k] { return false }
        i += n
        return true
    }

    private mutating func object(depth: Int) -> CairnValue? {
        i += 1
        var members: [String: CairnValue] = [:]
        skipSpace()
        if i < bytes.count, bytes[i] == 0x7D {
            i += 1
            return .object(members)
        }
        while true {
            skipSpace()
            guard let key = string() else { return nil }
            skipSpace()
            guard i < bytes.count, bytes[i] == 0x3A else { return nil }
            i += 1
            guard let v = value(depth: depth) else { return nil }
            members[key] = v
            skipSpace()
            guard i < bytes.count else { return nil }
            if bytes[i] == 0x2C {
                i += 1
            } else if bytes[i] == 0x7D {
                i += 1
                return .object(members)
            } else {
                return nil
            }
        }
    }

    private mutating func array(depth: Int) -> CairnValue? {
        i += 1
        var items: [CairnValue] = []
        skipSpace()
        if i < bytes.count, bytes[i] == 0x5D {
            i += 1
            return .array(items)
        }
        while true {
            guard let v = value(depth: depth) else { return nil }
            items.append(v)
            skipSpace()
            guard i < bytes.count else { return nil }
            if bytes[i] == 0x2C {
                i += 1
            } else if bytes[i] == 0x5D {
                i += 1
                return .array(items)
            } else {
                return nil
            }
        }
    }

    private mutating func string() -> String? {
        guard i < bytes.count, bytes[i] == 0x22 else { return nil }
        i += 1
        var out: [UInt8] = []
        while i < bytes.count {
            let b = bytes[i]
            i += 1
            if b == 0x22 { return String(decoding: out, as: UTF8.self) }
            if b < 0x20 { return nil }
            if b != 0x5C {
                out.append(b)
                continue
            }
            guard i < bytes.count else { return nil }
            let e = bytes[i]
            i += 1
            switch e {
            case 0x22, 0x5C, 0x2F: out.append(e)
            case 0x6E: out.append(0x0A)
            case 0x72: out.append(0x0D)
            case 0x74: out.append(0x09)
            case 0x62: out.append(0x08)
            case 0x66: out.append(0x0C)
            case 0x75:
                guard let unit = hex4() else { return nil }
                var scalar: UInt32 = 0xFFFD
                if (0xD800..<0xDC00).contains(unit) {
                    // A high surrogate: a pair when a low one follows, else U+FFFD.
                    if bytes.count - i >= 6, bytes[i] == 0x5C, bytes[i + 1] == 0x75 {
                        let save = i
                        i += 2
                        if let low = hex4(), (0xDC00..<0xE000).contains(low) {
                            scalar = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)
                        } else {
                            i = save
                        }
                    }
                } else if !(0xDC00..<0xE000).contains(unit) {
                    scalar = unit
                }
                out += Array(String(Character(Unicode.Scalar(scalar) ?? "\u{FFFD}")).utf8)
            default: return nil
            }
        }
        return nil
    }

    private mutating func hex4() -> UInt32? {
        guard bytes.count - i >= 4 else { return nil }
        var v: UInt32 = 0
        for _ in 0..<4 {
            let b = bytes[i]
            let d: UInt8
            switch b {
            case 0x30...0x39: d = b - 0x30
            case 0x61...0x66: d = b - 0x61 + 10
            case 0x41...0x46: d = b - 0x41 + 10
            default: return nil
            }
            v = v << 4 | UInt32(d)
            i += 1
        }
        return v
    }

    /// `-? int frac? exp?` as RFC 8259 has it.
    private mutating func number() -> CairnValue? {
        let start = i
        var whole = true
        if i < bytes.count, bytes[i] == 0x2D { i += 1 }
        guard digits() else { return nil }
        if i < bytes.count, bytes[i] == 0x2E {
            i += 1
            whole = false
            guard digits() else { return nil }
        }
        if i < bytes.count, bytes[i] == 0x65 || bytes[i] == 0x45 {
            i += 1
            whole = false
            if i < bytes.count, bytes[i] == 0x2B || bytes[i] == 0x2D { i += 1 }
            guard digits() else { return nil }
        }
        let text = String(decoding: bytes[start..<i], as: UTF8.self)
        if whole, let n = Int64(text) { return .int(n) }
        guard let d = Double(text), d.isFinite else { return nil }
        return .double(d)
    }

    private mutating func digits() -> Bool {
        let start = i
        while i < bytes.count, bytes[i] >= 0x30 && bytes[i] <= 0x39 { i += 1 }
        return i > start
    }
}
