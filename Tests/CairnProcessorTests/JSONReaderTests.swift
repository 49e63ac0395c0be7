import CairnBase
import CairnProcessor
import CairnTestSupport
import Foundation
import Testing

/// `CairnValue(json:)`, the SDK's one JSON reader: what the JSON writer writes reads back
/// as the same value; what Foundation's parser accepts or refuses, it accepts or refuses
/// too (on valid documents and on damaged ones), and it never traps on garbage.
@Suite struct JSONReaderTests {
    /// A random value: every kind, nested up to `depth`, with hostile strings.
    static func value(_ rng: inout SplitMix, depth: Int = 0) -> CairnValue {
        let strings = ["", "a\"b\\c\nd\u{01}e\u{7F}", "é😀/", "\u{FFFD}x", " spaced ", "0", "null"]
        switch rng.next() % (depth >= 4 ? 5 : 7) {
        case 0: return .null
        case 1: return .bool(rng.next() & 1 == 0)
        case 2: return .int(Int64(bitPattern: rng.next()) >> (rng.next() % 64))
        case 3: return .double(Double(Int64(bitPattern: rng.next() >> 12)) / 1024)
        case 4: return .string(strings[Int(rng.next() % UInt64(strings.count))])
        case 5: return .array((0..<(rng.next() % 5)).map { _ in value(&rng, depth: depth + 1) })
        default:
            var m: [String: CairnValue] = [:]
            for i in 0..<(rng.next() % 5) { m["k\(i)\(strings[Int(rng.next() % UInt64(strings.count))])"] = value(&rng, depth: depth + 1) }
            return .object(m)
        }
    }

    @Test func writtenValuesReadBackTheSame() {
        var rng = SplitMix(seed: 0x15_0A)
        for _ in 0..<2000 {
            let v = Self.value(&rng)
            let bytes = JSONWriter.bytes { $0.value(v) }
            let read = CairnValue(json: bytes)
            // Whole doubles are written as integers; compare what they mean.
            #expect(read.map(Self.normalized) == Self.normalized(v), "\(String(decoding: bytes, as: UTF8.self))")
        }
    }

    static func normalized(_ v: CairnValue) -> CairnValue {
        switch v {
        case .double(let d) where d == d.rounded() && abs(d) < 9e15: return .int(Int64(d))
        case .array(let items): return .array(items.map(normalized))
        case .object(let m): return .object(m.mapValues(normalized))
        default: return v
        }
    }

    @Test func acceptsAndRefusesAsFoundationDoes() {
        let cases = [
            #"{"a":1,"b":[true,false,null],"c":{"d":"e"}}"#, " [1 , 2 ] ", #""\u00e9\ud83d\ude00""#, "-0.5e-3", "12",
            "{", "}", "{\"a\":}", "{\"a\" 1}", "[1 2]", "tru", "nul", "01x", "-", "1.", ".5", "1e", "\"a",
            "\"\t\"", "{\"a\":1}x", "[\"\\x\"]", "", "   ", "[[[]]]",
        ]
        for text in cases {
            let foundation = (try? JSONSerialization.jsonObject(with: Data(text.utf8), options: [.fragmentsAllowed])) != nil
            #expect((CairnValue(json: Array(text.utf8)) != nil) == foundation, "\(text)")
        }
        // Where Foundation departs from RFC 8259: it takes trailing commas, and refuses a
        // lone surrogate escape (which the reader, like most, reads as U+FFFD).
        for text in ["[1,]", #"{"a":1,}"#] { #expect(CairnValue(json: Array(text.utf8)) == nil, "\(text)") }
        #expect(CairnValue(json: Array(#""\ud800""#.utf8)) == .string("\u{FFFD}"))
    }

    /// Damaged documents: never a trap; valid ones that Foundation reads, it reads too.
    @Test func damagedDocumentsNeverTrap() {
        var rng = SplitMix(seed: 0xDA_3A6E)
        var agreed = 0
        for _ in 0..<3000 {
            var bytes = JSONWriter.bytes { $0.value(Self.value(&rng)) }
            guard !bytes.isEmpty else { continue }
            for _ in 0..<(1 + rng.next() % 3) {
                bytes[Int(rng.next() % UInt64(bytes.count))] = UInt8(truncatingIfNeeded: rng.next())
            }
            let ours = CairnValue(json: bytes) != nil
            let theirs = (try? JSONSerialization.jsonObject(with: Data(bytes), options: [.fragmentsAllowed])) != nil
            if ours == theirs { agreed += 1 }
        }
        // Foundation takes a few documents RFC 8259 does not (and the reverse for
        // invalid UTF-8, which the reader repairs): nearly all agree.
        #expect(agreed > 2900, "\(agreed) of 3000")
    }

    @Test func nestingBeyondTheLimitIsRefused() {
        let deep = CairnValue.jsonDepthLimit
        #expect(CairnValue(json: Array((String(repeating: "[", count: deep) + String(repeating: "]", count: deep)).utf8)) != nil)
        #expect(CairnValue(json: Array((String(repeating: "[", count: deep + 1) + String(repeating: "]", count: deep + 1)).utf8)) == nil)
        #expect(CairnValue(json: Array(String(repeating: "[", count: 100_000).utf8)) == nil, "no stack overflow")
    }

    @Test func numbersAndStrings() {
        #expect(CairnValue(json: Array("9223372036854775807".utf8)) == .int(.max))
        #expect(CairnValue(json: Array("9223372036854775808".utf8)) == .double(9_223_372_036_854_775_808))
        #expect(CairnValue(json: Array("1e400".utf8)) == nil, "not finite")
        #expect(CairnValue(json: Array(#""\ud83d\ude00 \u00e9 \ud800x""#.utf8)) == .string("😀 é \u{FFFD}x"))
        #expect(CairnValue(json: Array(#"{"a":1,"a":2}"#.utf8)) == .object(["a": 2]))
    }
}
