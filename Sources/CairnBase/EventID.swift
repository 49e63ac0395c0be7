import Synchronization

/// Time-ordered unique event ids (UUIDv7, RFC 9562): 48 bits of Unix milliseconds, then
/// 74 random bits from a generator seeded once from the system and advanced with one
/// atomic add per id (no system call, no lock on the hot path).
package final class EventIDGenerator: Sendable {
    private let state: Atomic<UInt64>

    /// A generator seeded from the system's random source.
    package init() {
        var g = SystemRandomNumberGenerator()
        state = Atomic(g.next())
    }

    /// The 16 bytes of a new id for `millis`.
    package func next(millis: UInt64) -> (UInt64, UInt64) {
        let s = state.wrappingAdd(0xA076_1D64_78BD_642F, ordering: .relaxed).newValue
        return Self.id(millis: millis, random: (Self.mix(s), Self.mix(s ^ 0xE703_7ED1_A0B4_28DB)))
    }

    /// The id for `millis` with its 74 random bits taken from `random` (the version and
    /// variant bits replace the rest): for ids that must come out the same every time,
    /// such as those derived from a crash report.
    package static func id(millis: UInt64, random: (UInt64, UInt64)) -> (UInt64, UInt64) {
        let high = (millis & 0xFFFF_FFFF_FFFF) << 16 | 0x7000 | (random.0 & 0x0FFF)
        let low = (random.1 & 0x3FFF_FFFF_FFFF_FFFF) | 0x8000_0000_0000_0000
        return (high, low)
    }

    /// wyhash's mixer: a 128-bit multiply folded to 64 bits.
    private static func mix(_ x: UInt64) -> UInt64 {
        let m = x.multipliedFullWidth(by: x ^ 0xE703_7ED1_A0B4_28DB)
        return m.high ^ m.low
    }

    /// Writes an id as its 36-character text, quoted.
    package static func write(_ id: (UInt64, UInt64), into w: inout JSONWriter) {
        var buf: (UInt64, UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0, 0)
        withUnsafeMutableBytes(of: &buf) { b in
            @inline(__always) func digit(_ v: UInt64) -> UInt8 { Hex.digit(UInt8(truncatingIfNeeded: v & 0xF)) }
            b[0] = 0x22
            var i = 1
            for n in 0..<16 {  // 8-4-4 of the first word, dashes after the 8th and 12th digit
                if n == 8 || n == 12 {
                    b[i] = 0x2D
                    i &+= 1
                }
                b[i] = digit(id.0 >> UInt64(60 - 4 * n))
                i &+= 1
            }
            for n in 0..<16 {  // -4-12 of the second
                if n == 0 || n == 4 {
                    b[i] = 0x2D
                    i &+= 1
                }
                b[i] = digit(id.1 >> UInt64(60 - 4 * n))
                i &+= 1
            }
            b[i] = 0x22
            w.raw(UnsafeRawBufferPointer(rebasing: b[0...i]))
        }
    }

    /// An id as text.
    package static func text(_ id: (UInt64, UInt64)) -> String {
        var bytes = [UInt8](repeating: 0, count: 38)
        bytes.withUnsafeMutableBytes { buf in
            var w = JSONWriter(into: buf)
            write(id, into: &w)
        }
        return String(decoding: bytes[1..<37], as: UTF8.self)
    }
}
