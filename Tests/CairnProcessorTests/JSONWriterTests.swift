import CairnBase
import CairnProcessor
import Foundation
import Testing

/// The hand-written JSON writer and the event clock, checked against Foundation's
/// JSON parser and ISO 8601 parser (independent implementations).
@Suite struct JSONWriterTests {
    static func encode(_ value: CairnValue) -> [UInt8] {
        JSONWriter.bytes { $0.value(value) }
    }

    /// Random values with hostile strings (control characters, quotes, backslashes,
    /// invalid UTF-8 repaired by Swift, emoji), from a fixed seed.
    struct Generator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state = state &* 6364136223846793005 &+ 1442695040888963407
            return state >> 11
        }
        mutating func string() -> String {
            let n = Int(next() % 24)
            let bytes = (0..<n).map { _ -> UInt8 in
                let pick = next() % 10
                return pick < 3 ? UInt8(next() % 0x20) : pick < 5 ? [0x22, 0x5C, 0x2F][Int(next() % 3)] : UInt8(next() % 256)
            }
            return String(decoding: bytes, as: UTF8.self) + (next() % 5 == 0 ? "é😀" : "")
        }
        mutating func value(depth: Int = 0) -> CairnValue {
            switch next() % (depth > 4 ? 5 : 7) {
            case 0: return .null
            case 1: return .bool(next() % 2 == 0)
            case 2: return .int(Int64(bitPattern: next() &* 0x9E3779B97F4A7C15))
            case 3: return .double(Double(Int64(next() % 2_000_000) - 1_000_000) / Double(1 + next() % 1000))
            case 4: return .string(string())
            case 5: return .array((0..<Int(next() % 4)).map { _ in value(depth: depth + 1) })
            default:
                var m: [String: CairnValue] = [:]
                for _ in 0..<Int(next() % 4) { m[string()] = value(depth: depth + 1) }
                return .object(m)
            }
        }
    }

    static func same(_ v: CairnValue, _ any: Any) -> Bool {
        switch v {
        case .null: return any is NSNull
        case .bool(let b): return (any as? NSNumber).map { String(cString: $0.objCType) == "c" && $0.boolValue == b } ?? false
        case .int(let i): return (any as? NSNumber)?.int64Value == i
        case .double(let d): return (any as? NSNumber).map { abs($0.doubleValue - d) <= abs(d) * 1e-15 } ?? false
        case .string(let s): return (any as? String) == s
        case .array(let items):
            guard let a = any as? [Any], a.count == items.count else { return false }
            return zip(items, a).allSatisfy { same($0, $1) }
        case .object(let m):
            guard let o = any as? [String: Any], o.count == m.count else { return false }
            return m.allSatisfy { k, v in o[k].map { same(v, $0) } ?? false }
        }
    }

    @Test func randomValuesRoundTripThroughFoundation() throws {
        var g = Generator(state: 42)
        for i in 0..<3000 {
            let v = CairnValue.array([g.value()])
            let bytes = Self.encode(v)
            let parsed = try JSONSerialization.jsonObject(with: Data(bytes), options: [.fragmentsAllowed])
            #expect(Self.same(v, parsed), "value \(i): \(String(decoding: bytes, as: UTF8.self))")
        }
    }

    @Test func overflowReportsTheSizeNeededAndNeverWritesPastCapacity() {
        let v: CairnValue = ["k": "a \"quoted\"\n value", "n": [1, 2.5, nil, true]]
        let full = Self.encode(v)
        for capacity in 0..<full.count {
            var bytes = [UInt8](repeating: 0xEE, count: capacity + 8)
            let count = bytes.withUnsafeMutableBytes { buf -> Int in
                var w = JSONWriter(into: UnsafeMutableRawBufferPointer(rebasing: buf[0..<capacity]))
                w.value(v)
                #expect(w.overflowed)
                return w.count
            }
            #expect(count == full.count)
            #expect(bytes[capacity...].allSatisfy { $0 == 0xEE }, "nothing written past \(capacity)")
        }
    }

    @Test func numbersAreValidJSON() throws {
        for d in [0.0, -0.0, 1.0, 1e300, -1e-300, 0.1, 123456789.125, Double.nan, .infinity] {
            let bytes = Self.encode(.array([.double(d)]))
            let parsed = try JSONSerialization.jsonObject(with: Data(bytes)) as? [Any]
            if d.isFinite {
                #expect((parsed?.first as? NSNumber)?.doubleValue == d, "\(d) → \(String(decoding: bytes, as: UTF8.self))")
            } else {
                #expect(parsed?.first is NSNull)
            }
        }
        #expect(String(decoding: Self.encode(.int(.min)), as: UTF8.self) == "-9223372036854775808")
    }

    /// `-0.0 == 0.0`, so the check above cannot see a lost sign: look at the text and at
    /// the sign Foundation reads back.
    @Test func negativeZeroKeepsItsSign() throws {
        for (d, text) in [(-0.0, "-0.0"), (0.0, "0.0"), (-2.0, "-2.0"), (-1e14, "-100000000000000.0")] {
            let bytes = Self.encode(.array([.double(d)]))
            #expect(String(decoding: bytes, as: UTF8.self) == "[\(text)]")
            let parsed = try JSONSerialization.jsonObject(with: Data(bytes)) as? [Any]
            #expect((parsed?.first as? NSNumber)?.doubleValue.sign == d.sign, "\(text)")
        }
    }

    /// Doubles are written as Swift's `description` writes them (the shortest text that
    /// reads back as the same double), whether or not they take the short-decimal path.
    @Test func doublesAreWrittenAsTheirShortestText() {
        var g = Generator(state: 11)
        var values: [Double] = [0.001, 0.0009999, 0.75, 12.5, -12.5, 0.1, 0.2, 0.3, 0.30000000000000004,
                                999_999_999.999, 1e9 - 0.5, 1e9 + 0.5, 0.005, 0.05, 0.010, 123.456, -0.001]
        for _ in 0..<20_000 {
            let m = Int64(g.next() % 2_000_000_000_000) - 1_000_000_000_000
            values.append(Double(m) / 1000)                  // up to three decimals
            values.append(Double(m) / 997)                   // rarely short
            values.append(Double(bitPattern: g.next() << 11 ^ g.next()))  // anything
        }
        for d in values where d.isFinite && d != d.rounded(.towardZero) {
            let text = String(decoding: Self.encode(.double(d)), as: UTF8.self)
            #expect(text == d.description, "\(d)")
        }
    }

    @Test func eventClockTextIsTheSameInstant() throws {
        let clock = EventClock()
        let parser = ISO8601DateFormatter()
        parser.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        var g = Generator(state: 7)
        for _ in 0..<2000 {
            let millis = g.next() % 4_102_444_800_000 // 1970 ... 2100
            let text = clock.text(millis)
            let date = try #require(parser.date(from: text), "\(text) parses as RFC 3339")
            #expect(UInt64((date.timeIntervalSince1970 * 1000).rounded()) == millis, "\(millis) → \(text)")
            #expect(text.count == 29)
        }
    }
}
