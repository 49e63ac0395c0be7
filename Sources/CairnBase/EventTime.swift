import Glibc
import Synchronization

/// Event times: Unix milliseconds, written as RFC 3339 with milliseconds and the host's
/// UTC offset (`2026-12-02T19:03:04.512+01:00`), plus that offset in minutes.
///
/// The offset comes from the C library's time zone (`localtime_r`), asked at most once
/// per minute of event time and kept in one atomic word; the date itself is computed
/// with integer arithmetic, so formatting costs tens of nanoseconds.
package final class EventClock: Sendable {
    // minute index (Unix minutes) in the high 44 bits, offset + 2048 in the low 12; 0 = empty.
    private let cache = Atomic<UInt64>(0)

    private let fixedOffset: Int?

    /// A clock using the process's time zone (the `TZ` variable or /etc/localtime).
    package init() { fixedOffset = nil }

    /// A clock with a fixed UTC offset in minutes east (for golden tests and for
    /// services that report in one zone whatever the host says).
    package init(fixedOffsetMinutes: Int) { fixedOffset = max(-2047, min(2047, fixedOffsetMinutes)) }

    /// Unix time now, in milliseconds.
    package static func nowMillis() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return UInt64(ts.tv_sec) &* 1000 &+ UInt64(ts.tv_nsec) / 1_000_000
    }

    /// The UTC offset in minutes east at `millis`.
    package func offsetMinutes(at millis: UInt64) -> Int {
        if let fixedOffset { return fixedOffset }
        let minute = millis / 60_000
        let word = cache.load(ordering: .relaxed)
        if word != 0 && word >> 12 == minute { return Int(word & 0xFFF) - 2048 }
        var seconds = time_t(Int64(clamping: millis / 1000))
        var t = tm()
        localtime_r(&seconds, &t)
        let offset = max(-2047, min(2047, Int(t.tm_gmtoff) / 60))
        cache.store(minute << 12 | UInt64(offset + 2048), ordering: .relaxed)
        return offset
    }

    /// Writes `millis` as an RFC 3339 JSON string (quoted) and returns the offset used.
    @discardableResult
    package func write(_ millis: UInt64, into w: inout JSONWriter) -> Int {
        let offset = offsetMinutes(at: millis)
        let local = Int64(millis / 1000) + Int64(offset) * 60
        let days = local >= 0 ? local / 86400 : (local - 86399) / 86400
        let secs = local - days * 86400
        let (y, m, d) = Self.civil(days: days)
        var buf: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        withUnsafeMutableBytes(of: &buf) { b in
            var i = 0
            func put(_ v: Int64, _ width: Int) {
                var v = v
                for k in stride(from: width - 1, through: 0, by: -1) {
                    b[i + k] = UInt8(truncatingIfNeeded: v % 10) + 0x30
                    v /= 10
                }
                i += width
            }
            func sym(_ c: UInt8) {
                b[i] = c
                i += 1
            }
            sym(0x22)
            put(max(0, min(9999, y)), 4); sym(0x2D); put(m, 2); sym(0x2D); put(d, 2); sym(0x54)
            put(secs / 3600, 2); sym(0x3A); put(secs / 60 % 60, 2); sym(0x3A); put(secs % 60, 2); sym(0x2E)
            put(Int64(millis % 1000), 3)
            sym(offset < 0 ? 0x2D : 0x2B)
            put(Int64(abs(offset) / 60), 2); sym(0x3A); put(Int64(abs(offset) % 60), 2)
            sym(0x22)
            w.raw(UnsafeRawBufferPointer(rebasing: b[0..<i]))
        }
        return offset
    }

    /// The RFC 3339 text of `millis` (without quotes).
    package func text(_ millis: UInt64) -> String {
        var bytes = [UInt8](repeating: 0, count: 40)
        let n = bytes.withUnsafeMutableBytes { buf -> Int in
            var w = JSONWriter(into: buf)
            write(millis, into: &w)
            return w.count
        }
        return String(decoding: bytes[1..<(n - 1)], as: UTF8.self)
    }

    /// Year, month, day of a day count since 1970-01-01 (proleptic Gregorian; Howard
    /// Hinnant's civil_from_days).
    static func civil(days: Int64) -> (Int64, Int64, Int64) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        return (yoe + era * 400 + (m <= 2 ? 1 : 0), m, d)
    }
}
