/// Writes compact JSON into memory the caller provides: the ring's reservation on the
/// hot path, so an event is encoded once, in place, without an intermediate buffer.
///
/// The writer never writes past `capacity`; when the text does not fit it keeps
/// counting and sets `overflowed`, and `count` then tells how many bytes the whole text
/// needs, so the caller can retry with enough room. Strings are escaped as RFC 8259
/// requires (quote, backslash, and control characters below 0x20); `/` and non-ASCII
/// text are written as they are.
package struct JSONWriter {
    @usableFromInline let base: UnsafeMutablePointer<UInt8>?
    @usableFromInline let capacity: Int
    @usableFromInline var written = 0

    /// Bytes the text needs so far (may exceed `capacity` once `overflowed`).
    @inlinable package var count: Int { written }

    /// Writes into `buffer`.
    @inlinable
    package init(into buffer: UnsafeMutableRawBufferPointer) {
        base = buffer.baseAddress?.assumingMemoryBound(to: UInt8.self)
        capacity = buffer.count
    }

    /// Counts only: `count` ends as the exact size of the text.
    @inlinable
    package init(measuring: Void = ()) {
        base = nil
        capacity = 0
    }

    /// True once something did not fit.
    @inlinable
    package var overflowed: Bool { written > capacity }

    /// The text `write` produces, as bytes of exactly its size: `write` runs twice,
    /// measuring, then writing (for cold paths; the hot path writes into the ring).
    @inlinable
    package static func bytes(_ write: (inout JSONWriter) -> Void) -> [UInt8] {
        var size = JSONWriter()
        write(&size)
        var bytes = [UInt8](repeating: 0, count: size.count)
        bytes.withUnsafeMutableBytes { buf in
            var w = JSONWriter(into: buf)
            write(&w)
        }
        return bytes
    }

    /// Appends one byte.
    @inlinable
    package mutating func byte(_ b: UInt8) {
        if written < capacity, let base { base[written] = b }
        written += 1
    }

    /// Appends bytes that are already JSON (a pre-encoded fragment).
    @inlinable
    package mutating func raw(_ bytes: UnsafeRawBufferPointer) {
        if let base, written + bytes.count <= capacity, let src = bytes.baseAddress {
            Self.copy(base + written, src, bytes.count)
        }
        written += bytes.count
    }

    /// Copies `n` bytes; most pieces of an event are a few bytes long, which overlapping
    /// word moves copy faster than a call to `memmove`.
    @inlinable @inline(__always)
    static func copy(_ dst: UnsafeMutablePointer<UInt8>, _ src: UnsafeRawPointer, _ n: Int) {
        let d = UnsafeMutableRawPointer(dst)
        if n > 16 {
            d.copyMemory(from: src, byteCount: n)
        } else if n >= 8 {
            d.storeBytes(of: src.loadUnaligned(as: UInt64.self), as: UInt64.self)
            (d + (n - 8)).storeBytes(of: (src + (n - 8)).loadUnaligned(as: UInt64.self), as: UInt64.self)
        } else if n >= 4 {
            d.storeBytes(of: src.loadUnaligned(as: UInt32.self), as: UInt32.self)
            (d + (n - 4)).storeBytes(of: (src + (n - 4)).loadUnaligned(as: UInt32.self), as: UInt32.self)
        } else if n > 0 {
            dst[0] = src.load(as: UInt8.self)
            dst[n >> 1] = src.load(fromByteOffset: n >> 1, as: UInt8.self)
            dst[n - 1] = src.load(fromByteOffset: n - 1, as: UInt8.self)
        }
    }

    /// Appends bytes that are already JSON.
    @inlinable
    package mutating func raw(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { raw($0) }
    }

    /// Appends ASCII text that needs no escaping (a key written by the SDK, a number).
    @inlinable
    package mutating func ascii(_ text: StaticString) {
        raw(UnsafeRawBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }

    @usableFromInline static let hex: StaticString = "0123456789abcdef"

    /// Appends a JSON string: quotes, escapes.
    @inlinable
    package mutating func string(_ text: String) {
        withUTF8Bytes(text) { utf8 in string(utf8: utf8) }
    }

    /// Appends a JSON string from UTF-8 bytes (assumed valid, as Swift strings are).
    @inlinable
    package mutating func string(utf8: UnsafeBufferPointer<UInt8>) {
        // The common case: it fits and nothing needs escaping, so it is copied whole.
        let n = utf8.count
        if let base, let src = utf8.baseAddress, written &+ n &+ 2 <= capacity, !Self.needsEscape(src, n) {
            let dst = base + written
            dst[0] = 0x22
            Self.copy(dst + 1, src, n)
            dst[n &+ 1] = 0x22
            written &+= n &+ 2
            return
        }
        byte(0x22)
        var start = 0
        var i = 0
        while i < utf8.count {
            let b = utf8[i]
            if b >= 0x20 && b != 0x22 && b != 0x5C {
                i += 1
                continue
            }
            if i > start { raw(UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(utf8)[start..<i])) }
            byte(0x5C)
            switch b {
            case 0x22: byte(0x22)
            case 0x5C: byte(0x5C)
            case 0x0A: byte(UInt8(ascii: "n"))
            case 0x0D: byte(UInt8(ascii: "r"))
            case 0x09: byte(UInt8(ascii: "t"))
            default:
                ascii("u00")
                Self.hex.withUTF8Buffer { h in
                    byte(h[Int(b >> 4)])
                    byte(h[Int(b & 0xF)])
                }
            }
            i += 1
            start = i
        }
        if i > start { raw(UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(utf8)[start..<i])) }
        byte(0x22)
    }

    /// Whether any of the `n` bytes at `p` is a quote, a backslash or a control
    /// character, eight bytes at a time with the classic word tests, each exact for the
    /// word as a whole: `(v - 0x01..) & ~v & 0x80..` is nonzero iff some byte of `v` is
    /// zero, `(x - 0x20..) & ~x & 0x80..` iff some byte of `x` is below 0x20.
    @inlinable @inline(__always)
    static func needsEscape(_ p: UnsafePointer<UInt8>, _ n: Int) -> Bool {
        let ones: UInt64 = 0x0101_0101_0101_0101, highs: UInt64 = 0x8080_8080_8080_8080
        var i = 0
        while i &+ 8 <= n {
            let x = UnsafeRawPointer(p + i).loadUnaligned(as: UInt64.self)
            let quote = x ^ (ones &* 0x22), backslash = x ^ (ones &* 0x5C)
            let control = (x &- ones &* 0x20) & ~x
            let quotes = (quote &- ones) & ~quote, backslashes = (backslash &- ones) & ~backslash
            if (control | quotes | backslashes) & highs != 0 { return true }
            i &+= 8
        }
        while i < n {
            let b = p[i]
            if b < 0x20 || b == 0x22 || b == 0x5C { return true }
            i &+= 1
        }
        return false
    }

    /// Appends `"key":`.
    @inlinable
    package mutating func key(_ key: StaticString) {
        byte(0x22)
        ascii(key)
        byte(0x22)
        byte(0x3A)
    }

    /// Appends `"key":` for a key that may need escaping.
    @inlinable
    package mutating func key(_ key: String) {
        string(key)
        byte(0x3A)
    }

    /// Appends a signed integer.
    @inlinable
    package mutating func int(_ value: Int64) {
        if value < 0 {
            byte(UInt8(ascii: "-"))
            uint(value == Int64.min ? UInt64(Int64.max) + 1 : UInt64(-value))
        } else {
            uint(UInt64(value))
        }
    }

    /// Appends an unsigned integer.
    @inlinable
    package mutating func uint(_ value: UInt64) {
        var digits: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0) // 32 bytes of scratch
        withUnsafeMutableBytes(of: &digits) { d in
            var v = value
            var n = 0
            repeat {
                d[31 - n] = UInt8(truncatingIfNeeded: v % 10) + 0x30
                v /= 10
                n += 1
            } while v > 0
            raw(UnsafeRawBufferPointer(rebasing: d[(32 - n)...]))
        }
    }

    /// Appends a number; NaN and infinities (which JSON cannot hold) become `null`.
    /// Negative zero keeps its sign (`-0.0`).
    @inlinable
    package mutating func double(_ value: Double) {
        guard value.isFinite else {
            ascii("null")
            return
        }
        if value == value.rounded(.towardZero) && abs(value) < 1e15 {
            if value.sign == .minus { byte(UInt8(ascii: "-")) }
            uint(UInt64(abs(value)))
            ascii(".0")
            return
        }
        // Up to three decimals, as most measured values have: the decimal m / 1000 that
        // reads back as `value` is then its shortest form, the one `description` gives
        // (two such decimals differ by 0.001, far more than the spacing of doubles
        // below 1e9), so it is written without formatting through a String.
        let magnitude = abs(value)
        if magnitude >= 0.001 && magnitude < 1e9 {
            let scaled = (magnitude * 1000).rounded()
            if scaled / 1000 == magnitude {
                let m = UInt64(scaled)
                if value < 0 { byte(UInt8(ascii: "-")) }
                uint(m / 1000)
                byte(UInt8(ascii: "."))
                var fraction = m % 1000
                var digits = 3
                while digits > 1 && fraction % 10 == 0 {
                    fraction /= 10
                    digits -= 1
                }
                if digits == 3 { byte(UInt8(truncatingIfNeeded: fraction / 100) + 0x30) }
                if digits >= 2 { byte(UInt8(truncatingIfNeeded: fraction / 10 % 10) + 0x30) }
                byte(UInt8(truncatingIfNeeded: fraction % 10) + 0x30)
                return
            }
        }
        var text = value.description
        text.withUTF8 { raw(UnsafeRawBufferPointer($0)) }
    }

    /// Appends `true` or `false`.
    @inlinable
    package mutating func bool(_ value: Bool) {
        if value { ascii("true") } else { ascii("false") }
    }
}

/// `body` over `text`'s UTF-8 bytes: in place when the string is native and contiguous
/// (almost always), else over a contiguous copy.
@inlinable
package func withUTF8Bytes<R>(_ text: String, _ body: (UnsafeBufferPointer<UInt8>) -> R) -> R {
    if let result = text.utf8.withContiguousStorageIfAvailable(body) { return result }
    var text = text
    return text.withUTF8(body)
}
