import CairnBase

// Reading an event's JSON in place, without building values: the OTLP encoder walks a
// record once and writes its fields as it meets them.

/// A forward cursor over JSON bytes (RFC 8259) that hands out where strings and numbers
/// are, unparsed. Strict: anything that is not JSON makes the call that meets it return
/// nil or false, and the caller drops the record.
struct JSONScan {
    let bytes: UnsafeRawBufferPointer
    var i = 0

    /// With `openEnded`, the outermost object may end where the bytes end, without its
    /// `}`: a bare record of the ring (docs/FORMATS.md, "Ring file", "Records").
    init(_ bytes: UnsafeRawBufferPointer, openEnded: Bool = false) {
        self.bytes = bytes
        self.openEnded = openEnded
    }

    let openEnded: Bool
    /// Objects and arrays entered and not yet left.
    private(set) var depth = 0

    /// What a value is, by its first byte.
    enum Kind { case object, array, string, number, literal, invalid }

    var atEnd: Bool { i >= bytes.count }

    mutating func skipSpace() {
        while i < bytes.count {
            switch bytes[i] {
            case 0x20, 0x0A, 0x0D, 0x09: i += 1
            default: return
            }
        }
    }

    /// The kind of the value at the cursor (white space skipped).
    mutating func peek() -> Kind {
        skipSpace()
        guard i < bytes.count else { return .invalid }
        switch bytes[i] {
        case 0x7B: return .object
        case 0x5B: return .array
        case 0x22: return .string
        case 0x2D, 0x30...0x39: return .number
        case 0x74, 0x66, 0x6E: return .literal
        default: return .invalid
        }
    }

    /// Steps into an object (`{`); then ``member()`` until it returns nil.
    mutating func enterObject() -> Bool {
        skipSpace()
        guard i < bytes.count, bytes[i] == 0x7B else { return false }
        i += 1
        depth += 1
        return true
    }

    /// Whether the cursor is at its container's first member or element: the last byte
    /// before it that is not white space opens the container.
    private func atFirst(_ open: UInt8) -> Bool {
        var k = i - 1
        while k >= 0 {
            switch bytes[k] {
            case 0x20, 0x0A, 0x0D, 0x09: k -= 1
            default: return bytes[k] == open
            }
        }
        return false
    }

    /// The next member's key (its escaped text, without quotes), the cursor left on its
    /// value; nil at the object's end (the cursor past `}`) or on bad JSON (``failed``).
    mutating func member() -> UnsafeRawBufferPointer? {
        skipSpace()
        guard i < bytes.count else {
            // A bare record ends here: after a value, not after `{` or `,`.
            if openEnded && depth == 1 && !atFirst(0x7B) && i > 0 && bytes[lastNonSpace()] != 0x2C {
                depth -= 1
            } else {
                failed = true
            }
            return nil
        }
        if bytes[i] == 0x7D {
            // `{}`, or `}` after a member's value (not after a `,`).
            guard atFirst(0x7B) || bytes[lastNonSpace()] != 0x2C else { failed = true; return nil }
            i += 1
            depth -= 1
            return nil
        }
        if !atFirst(0x7B) {
            guard bytes[i] == 0x2C else { failed = true; return nil }
            i += 1
            skipSpace()
        }
        guard let key = string() else { failed = true; return nil }
        skipSpace()
        guard i < bytes.count, bytes[i] == 0x3A else { failed = true; return nil }
        i += 1
        return key
    }

    /// Steps into an array (`[`); then ``element()`` until it returns false.
    mutating func enterArray() -> Bool {
        skipSpace()
        guard i < bytes.count, bytes[i] == 0x5B else { return false }
        i += 1
        depth += 1
        return true
    }

    /// Where the last byte before the cursor that is not white space is.
    private func lastNonSpace() -> Int {
        var k = i - 1
        while k > 0, bytes[k] == 0x20 || bytes[k] == 0x0A || bytes[k] == 0x0D || bytes[k] == 0x09 { k -= 1 }
        return k
    }

    /// Whether another element follows (the cursor left on it); false at the array's end
    /// (the cursor past `]`) or on bad JSON (``failed``).
    mutating func element() -> Bool {
        skipSpace()
        guard i < bytes.count else { failed = true; return false }
        if bytes[i] == 0x5D {
            guard atFirst(0x5B) || bytes[lastNonSpace()] != 0x2C else { failed = true; return false }
            i += 1
            depth -= 1
            return false
        }
        if !atFirst(0x5B) {
            guard bytes[i] == 0x2C else { failed = true; return false }
            i += 1
        }
        return true
    }

    /// Set when ``member()`` or ``element()`` stopped on something that is not JSON.
    var failed = false
    /// Whether the last string ``string()`` read is plain: ASCII, without escapes (its
    /// text is then the string's bytes).
    private(set) var lastPlain = false

    /// The string at the cursor: its escaped text, without quotes; the escapes are
    /// checked (``JSONText/unescape(_:into:)`` reads them).
    mutating func string() -> UnsafeRawBufferPointer? {
        skipSpace()
        guard i < bytes.count, bytes[i] == 0x22 else { return nil }
        i += 1
        let start = i
        var seen: UInt64 = 0
        var plain = true
        while i < bytes.count {
            // Eight bytes at a time while none is a quote, a backslash or a control
            // character (most of a string); then straight to the first that is (the
            // lowest flag is exact: a borrow only runs upward from a byte that matched).
            while i + 8 <= bytes.count {
                let v = bytes.loadUnaligned(fromByteOffset: i, as: UInt64.self)
                let flags = Self.stringEnds(v)
                if flags != 0 {
                    let k = UInt64(littleEndian: flags).trailingZeroBitCount >> 3
                    if k > 0 {
                        seen |= UInt64(littleEndian: v) & (UInt64.max >> UInt64(64 - 8 * k))
                        i += k
                    }
                    break
                }
                seen |= v
                i += 8
            }
            guard i < bytes.count else { break }
            let b = bytes[i]
            if b == 0x22 {
                let text = UnsafeRawBufferPointer(rebasing: bytes[start..<i])
                i += 1
                lastPlain = plain && seen & 0x8080_8080_8080_8080 == 0
                return text
            }
            if b < 0x20 { return nil }
            if b >= 0x80 { plain = false }
            if b == 0x5C {
                plain = false
                guard i + 1 < bytes.count else { return nil }
                switch bytes[i + 1] {
                case 0x22, 0x5C, 0x2F, 0x62, 0x66, 0x6E, 0x72, 0x74: i += 2
                case 0x75:
                    guard i + 6 <= bytes.count, (2..<6).allSatisfy({ Hex.value(bytes[i + $0]) != nil })
                    else { return nil }
                    i += 6
                default: return nil
                }
                continue
            }
            i += 1
        }
        return nil
    }

    /// The high bit of each of the eight bytes of `v` (as loaded) that may be `"`, `\\`
    /// or below 0x20 (SWAR tests): zero when none is; the lowest byte flagged is one.
    @inline(__always)
    static func stringEnds(_ v: UInt64) -> UInt64 {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highs: UInt64 = 0x8080_8080_8080_8080
        let quote = v ^ 0x2222_2222_2222_2222, backslash = v ^ 0x5C5C_5C5C_5C5C_5C5C
        // No branch between: a byte below 0x20, or that is 0x22 or 0x5C.
        return ((quote &- ones) & ~quote | (backslash &- ones) & ~backslash | (v &- 0x2020_2020_2020_2020) & ~v)
            & highs
    }

    /// The number at the cursor, as written, and whether it is an integer (no fraction or
    /// exponent).
    mutating func number() -> (text: UnsafeRawBufferPointer, integer: Bool)? {
        skipSpace()
        let start = i
        var integer = true
        if i < bytes.count, bytes[i] == 0x2D { i += 1 }
        guard i < bytes.count else { return nil }
        if bytes[i] == 0x30 {
            i += 1
        } else {
            guard digits() else { return nil }
        }
        if i < bytes.count, bytes[i] == 0x2E {
            i += 1
            integer = false
            guard digits() else { return nil }
        }
        if i < bytes.count, bytes[i] == 0x65 || bytes[i] == 0x45 {
            i += 1
            integer = false
            if i < bytes.count, bytes[i] == 0x2B || bytes[i] == 0x2D { i += 1 }
            guard digits() else { return nil }
        }
        return (UnsafeRawBufferPointer(rebasing: bytes[start..<i]), integer)
    }

    private mutating func digits() -> Bool {
        let start = i
        while i < bytes.count, bytes[i] >= 0x30 && bytes[i] <= 0x39 { i += 1 }
        return i > start
    }

    /// `true`, `false` or `null` at the cursor: true, false, or nil for null; the
    /// outer nil when it is none of them.
    mutating func literal() -> Bool?? {
        skipSpace()
        func word(_ w: StaticString) -> Bool {
            let n = w.utf8CodeUnitCount
            guard bytes.count - i >= n else { return false }
            for k in 0..<n where bytes[i + k] != w.utf8Start[k] { return false }
            i += n
            return true
        }
        if word("true") { return .some(true) }
        if word("false") { return .some(false) }
        if word("null") { return .some(nil) }
        return nil
    }

    /// Steps over the value at the cursor, checking it is JSON, at most `depth` deep.
    mutating func skipValue(depth: Int = CairnValue.jsonDepthLimit) -> Bool {
        switch peek() {
        case .object:
            guard depth > 0, enterObject() else { return false }
            while member() != nil { guard skipValue(depth: depth - 1) else { return false } }
            return !failed
        case .array:
            guard depth > 0, enterArray() else { return false }
            while element() { guard skipValue(depth: depth - 1) else { return false } }
            return !failed
        case .string: return string() != nil
        case .number: return number() != nil
        case .literal: return literal() != nil
        case .invalid: return false
        }
    }

    /// The bytes of the object at the cursor, stepped over by its brackets and strings
    /// only (what is between is not checked: the caller reads it with a scan of its own);
    /// nil when it does not end.
    mutating func rawObject() -> UnsafeRawBufferPointer? {
        skipSpace()
        let start = i
        guard i < bytes.count, bytes[i] == 0x7B else { return nil }
        var nesting = 0
        while i < bytes.count {
            switch bytes[i] {
            case 0x22:
                guard string() != nil else { return nil }
                continue
            case 0x7B, 0x5B: nesting += 1
            case 0x7D, 0x5D:
                nesting -= 1
                if nesting == 0 {
                    i += 1
                    return UnsafeRawBufferPointer(rebasing: bytes[start..<i])
                }
            default: break
            }
            i += 1
        }
        return nil
    }

    /// The bytes of the value at the cursor, stepped over.
    mutating func rawValue() -> UnsafeRawBufferPointer? {
        skipSpace()
        let start = i
        guard skipValue() else { return nil }
        return UnsafeRawBufferPointer(rebasing: bytes[start..<i])
    }
}

/// JSON string text: escapes, UTF-8.
enum JSONText {
    /// Whether `text` (a string's escaped text) is plain: no escape and ASCII only, so
    /// its bytes are the string's.
    static func isPlain(_ text: UnsafeRawBufferPointer) -> Bool {
        var i = 0
        let ones: UInt64 = 0x0101_0101_0101_0101, highs: UInt64 = 0x8080_8080_8080_8080
        while i + 8 <= text.count {
            let v = text.loadUnaligned(fromByteOffset: i, as: UInt64.self)
            let backslash = v ^ (ones &* 0x5C)
            if v & highs != 0 || (backslash &- ones) & ~backslash & highs != 0 { return false }
            i += 8
        }
        while i < text.count {
            if text[i] == 0x5C || text[i] >= 0x80 { return false }
            i += 1
        }
        return true
    }

    /// Appends the string `text` (escaped, as ``JSONScan/string()`` returns it) stands
    /// for, as valid UTF-8: escapes resolved (a lone surrogate becomes U+FFFD), and each
    /// byte sequence that is not UTF-8 replaced by U+FFFD, so that what is written is
    /// always a valid protobuf `string`.
    static func unescape(_ text: UnsafeRawBufferPointer, into out: inout [UInt8]) {
        var i = 0
        let n = text.count
        while i < n {
            let b = text[i]
            if b < 0x80 && b != 0x5C {
                out.append(b)
                i += 1
                continue
            }
            if b == 0x5C {
                guard i + 1 < n else { return }
                let e = text[i + 1]
                i += 2
                switch e {
                case 0x6E: out.append(0x0A)
                case 0x72: out.append(0x0D)
                case 0x74: out.append(0x09)
                case 0x62: out.append(0x08)
                case 0x66: out.append(0x0C)
                case 0x75:
                    guard let unit = hex4(text, i) else { return }
                    i += 4
                    var scalar: UInt32 = 0xFFFD
                    if (0xD800..<0xDC00).contains(unit) {
                        if i + 6 <= n, text[i] == 0x5C, text[i + 1] == 0x75, let low = hex4(text, i + 2),
                           (0xDC00..<0xE000).contains(low) {
                            scalar = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)
                            i += 6
                        }
                    } else if !(0xDC00..<0xE000).contains(unit) {
                        scalar = unit
                    }
                    appendScalar(scalar, into: &out)
                default: out.append(e)
                }
                continue
            }
            // A multi-byte sequence: copied when it is well formed, else one U+FFFD for
            // its first byte.
            let length = utf8SequenceLength(text, i)
            if length > 0 {
                for k in 0..<length { out.append(text[i + k]) }
                i += length
            } else {
                appendScalar(0xFFFD, into: &out)
                i += 1
            }
        }
    }

    /// The length of the well-formed UTF-8 sequence at `i` (2 to 4), or 0.
    static func utf8SequenceLength(_ t: UnsafeRawBufferPointer, _ i: Int) -> Int {
        let n = t.count
        let b0 = t[i]
        func cont(_ k: Int) -> Bool { i + k < n && t[i + k] & 0xC0 == 0x80 }
        switch b0 {
        case 0xC2...0xDF: return cont(1) ? 2 : 0
        case 0xE0: return cont(1) && t[i + 1] >= 0xA0 && cont(2) ? 3 : 0
        case 0xED: return cont(1) && t[i + 1] < 0xA0 && cont(2) ? 3 : 0
        case 0xE1...0xEC, 0xEE...0xEF: return cont(1) && cont(2) ? 3 : 0
        case 0xF0: return cont(1) && t[i + 1] >= 0x90 && cont(2) && cont(3) ? 4 : 0
        case 0xF4: return cont(1) && t[i + 1] < 0x90 && cont(2) && cont(3) ? 4 : 0
        case 0xF1...0xF3: return cont(1) && cont(2) && cont(3) ? 4 : 0
        default: return 0
        }
    }

    private static func hex4(_ t: UnsafeRawBufferPointer, _ i: Int) -> UInt32? {
        guard i + 4 <= t.count else { return nil }
        var v: UInt32 = 0
        for k in 0..<4 {
            guard let d = Hex.value(t[i + k]) else { return nil }
            v = v << 4 | UInt32(d)
        }
        return v
    }

    static func appendScalar(_ s: UInt32, into out: inout [UInt8]) {
        switch s {
        case 0..<0x80: out.append(UInt8(s))
        case 0x80..<0x800:
            out.append(UInt8(0xC0 | s >> 6)); out.append(UInt8(0x80 | s & 0x3F))
        case 0x800..<0x10000:
            out.append(UInt8(0xE0 | s >> 12)); out.append(UInt8(0x80 | s >> 6 & 0x3F))
            out.append(UInt8(0x80 | s & 0x3F))
        default:
            out.append(UInt8(0xF0 | s >> 18)); out.append(UInt8(0x80 | s >> 12 & 0x3F))
            out.append(UInt8(0x80 | s >> 6 & 0x3F)); out.append(UInt8(0x80 | s & 0x3F))
        }
    }
}
