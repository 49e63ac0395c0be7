/// Lowercase hexadecimal, the one implementation of the SDK's layers: ids, build ids,
/// addresses, store keys.
///
/// ```swift
/// Hex.string([0xde, 0xad])   // "dead"
/// Hex.address(0x7f00)        // "0x7f00"
/// ```
package enum Hex {
    /// The lowercase hex digit of `nibble` (0...15).
    @inlinable package static func digit(_ nibble: UInt8) -> UInt8 {
        nibble < 10 ? nibble &+ 0x30 : nibble &+ 0x57
    }

    /// Two lowercase hex digits per byte. (Inlinable, as ``FNV1a/hash(_:seed:)``: a
    /// generic called from another module would otherwise run unspecialized.)
    @inlinable package static func string(_ bytes: some Sequence<UInt8>) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.underestimatedCount * 2)
        for b in bytes {
            out.append(digit(b >> 4))
            out.append(digit(b & 0xF))
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// `0x` and the value in lowercase hex, without leading zeros.
    package static func address(_ value: UInt64) -> String { "0x" + String(value, radix: 16) }

    /// Writes `value` as 16 lowercase hex digits at `offset`.
    @inlinable package static func write(_ value: UInt64, into buffer: UnsafeMutableBufferPointer<UInt8>, at offset: Int) {
        for i in 0..<16 {
            buffer[offset + i] = digit(UInt8(truncatingIfNeeded: value >> UInt64(60 - 4 * i)) & 0xF)
        }
    }

    /// The value of one hex digit, in either case (`0-9`, `a-f`, `A-F`); nil for any
    /// other byte.
    @inlinable @inline(__always) package static func value(_ byte: UInt8) -> UInt8? {
        switch byte {
        case 0x30...0x39: return byte - 0x30
        case 0x61...0x66: return byte - 0x61 + 10
        case 0x41...0x46: return byte - 0x41 + 10
        default: return nil
        }
    }

    /// The value of `count` (at most 16) lowercase hex digits at `from`, or `nil` when
    /// one is not `0-9` or `a-f` or the bytes end first.
    package static func parse(_ bytes: UnsafeBufferPointer<UInt8>, from: Int, count: Int) -> UInt64? {
        guard from >= 0, count <= 16, from + count <= bytes.count else { return nil }
        var value: UInt64 = 0
        for i in from..<(from + count) {
            let byte = bytes[i]
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            default: return nil
            }
            value = value << 4 | UInt64(digit)
        }
        return value
    }
}

/// FNV-1a, 64 bits (offset basis `0xcbf29ce484222325`, prime `0x100000001b3`): the one
/// stable hash of the SDK's layers, the same in every process and SDK variant. Fed
/// byte by byte, so callers hash their parts (or lowercased bytes) without joining them.
package struct FNV1a {
    /// The offset basis: the hash of no bytes. (Inlinable constants: hot hashing loops of
    /// other modules fold them instead of calling a global's accessor.)
    @inlinable package static var offsetBasis: UInt64 { 0xcbf2_9ce4_8422_2325 }
    /// The prime.
    @inlinable package static var prime: UInt64 { 0x100_0000_01b3 }

    /// The hash of the bytes fed so far.
    package private(set) var value: UInt64

    /// A hash of no bytes yet, from `seed` (the offset basis unless continuing another).
    @inlinable package init(seed: UInt64 = FNV1a.offsetBasis) { value = seed }

    /// Feeds one byte.
    @inlinable package mutating func feed(_ byte: UInt8) { value = (value ^ UInt64(byte)) &* Self.prime }

    /// The hash of `bytes`, from `seed`.
    @inlinable package static func hash(_ bytes: some Sequence<UInt8>, seed: UInt64 = offsetBasis) -> UInt64 {
        var h = FNV1a(seed: seed)
        for b in bytes { h.feed(b) }
        return h.value
    }
}
