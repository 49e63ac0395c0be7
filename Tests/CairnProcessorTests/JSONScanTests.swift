@testable import CairnProcessor
import CairnTestSupport
import Testing

/// The JSON string scanner (eight bytes at a time, then straight to the first byte that
/// may end the string) against a byte-by-byte reference, on strings with quotes,
/// escapes (valid and not), control characters and UTF-8 at every offset, with and
/// without bytes after the string.
struct JSONScanTests {
    /// What a string starting after the quote at `doc[0]` holds: its text's end, and
    /// whether it is plain ASCII without escapes; nil when it is not a valid string.
    static func reference(_ doc: [UInt8]) -> (end: Int, plain: Bool)? {
        var i = 1, plain = true
        func hex(_ b: UInt8) -> Bool { (0x30...0x39).contains(b) || (0x61...0x66).contains(b) || (0x41...0x46).contains(b) }
        while i < doc.count {
            let b = doc[i]
            if b == 0x22 { return (i, plain) }
            if b < 0x20 { return nil }
            if b >= 0x80 { plain = false }
            if b == 0x5C {
                plain = false
                guard i + 1 < doc.count else { return nil }
                switch doc[i + 1] {
                case 0x22, 0x5C, 0x2F, 0x62, 0x66, 0x6E, 0x72, 0x74: i += 2
                case 0x75:
                    guard i + 6 <= doc.count, (2..<6).allSatisfy({ hex(doc[i + $0]) }) else { return nil }
                    i += 6
                default: return nil
                }
                continue
            }
            i += 1
        }
        return nil
    }

    @Test func agreesWithAByteByByteScan() {
        var rng = SplitMix(seed: 0x5EED)
        let pieces: [[UInt8]] = [Array("a".utf8), Array("xyz".utf8), Array("0123456789".utf8), [0x22], [0x5C, 0x6E],
                                 [0x5C, 0x22], [0x5C, 0x78], Array(#"\u00e9"#.utf8), Array(#"\u00g9"#.utf8), [0x5C],
                                 [0x01], [0x1F], [0x7F], [0xC3, 0xA9], [0xF0, 0x9F, 0x98, 0x80], [0x20]]
        var checked = 0
        for _ in 0..<20_000 {
            var doc: [UInt8] = [0x22]
            for _ in 0..<Int(rng.next() % 12) {
                // Mostly plain text, so that specials land at every offset of an 8-byte block.
                let pick = rng.next() % 100
                doc += pick < 70 ? pieces[Int(pick % 3)] : pieces[Int(rng.next() % UInt64(pieces.count))]
            }
            if rng.next() % 3 != 0 { doc.append(0x22) }
            if rng.next() % 2 == 0 { doc += Array(#",1,"k":"v"}"#.utf8) }
            let want = Self.reference(doc)
            doc.withUnsafeBytes { d in
                var scan = JSONScan(d)
                let got = scan.string()
                #expect(got.map { $0.count } == want.map { $0.end - 1 }, "\(doc)")
                if let want, got != nil { #expect(scan.lastPlain == want.plain, "\(doc)") }
            }
            checked += 1
        }
        #expect(checked == 20_000)
    }
}
