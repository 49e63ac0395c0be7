import CairnBase
import CairnProcessor
import Foundation
import Testing

/// Event names, `distinct_id` and `account_id` (docs/FORMATS.md, "Sanitising", names
/// and ids): refused when empty, control characters replaced, cut to the limit on a
/// character boundary, every change counted; the JSON stays valid whatever they hold.
@Suite struct NameRulesTests {
    static let processor = Processor()
    static let limit = SanitizerLimits().maxNameLength

    static func event(_ name: String, distinctID: String = "user-1", accountID: String? = nil,
                      type: EventType = .track, tier: Tier = .sampled, identityGiven: Bool = false) -> Event {
        Event(type: type, name: name, timeMillis: 1_764_000_000_000,
              identity: Identity(distinctID: distinctID, accountID: accountID), tier: tier,
              identityGiven: identityGiven)
    }

    /// Names and ids that no rule leaves alone, or that look hostile and are fine.
    static let hostile: [String] = [
        "a\u{0}b", "tab\tname", "line\nbreak\r", "del\u{7F}", "c1\u{85}", "\u{FEFF}bom", "nonchar\u{FFFF}",
        String(repeating: "n", count: 100_000), String(repeating: "é", count: 150),
        String(repeating: "a", count: 199) + "e\u{301}", "e" + String(repeating: "\u{301}", count: 300),
        String(repeating: "\u{1}", count: 100), String(decoding: [0x61, 0xFF, 0x62, 0xC3], as: UTF8.self),
        "q\"uote\\", "🇩🇪" + String(repeating: "x", count: 250), "ok",
    ]

    @Test(arguments: EventType.allCases)
    func emptyNamesAndDistinctIDsAreRefused(_ type: EventType) {
        let p = Self.processor
        #expect(p.admit(Self.event("", type: type)) == .invalidName)
        #expect(p.admit(Self.event("", type: type, tier: .critical)) == .invalidName)
        #expect(p.admit(Self.event("e", distinctID: "", type: type)) == .invalidIdentity)
        #expect(p.admit(Self.event("e", distinctID: "", type: type, tier: .critical)) == .invalidIdentity)
        #expect(p.admit(Self.event("e", type: type)) == nil)
        #expect(DropReason.invalidName.name == "invalid_name" && DropReason.invalidIdentity.name == "invalid_identity")
    }

    @Test(arguments: hostile.indices)
    func namesAndIDsComeOutValidBoundedAndCounted(_ index: Int) throws {
        let text = Self.hostile[index]
        let p = Self.processor
        var event = Self.event(text, distinctID: text, accountID: text)
        var counts = RuleCounts()
        p.clean(&event, counts: &counts)
        let forbidden = text.unicodeScalars.contains {
            $0.value < 0x20 || (0x7F...0x9F).contains($0.value) || [0xFEFF, 0xFFFE, 0xFFFF].contains($0.value)
        }
        let repairedLength = text.unicodeScalars.reduce(0) { n, s in
            n + (s.value < 0x20 || (0x7F...0x9F).contains(s.value) || [0xFEFF, 0xFFFE, 0xFFFF].contains(s.value)
                 ? 3 : UTF8.width(s))
        }
        for out in [event.name, event.identity.distinctID, event.identity.accountID ?? ""] {
            #expect(!out.isEmpty && out.utf8.count <= Self.limit)
            #expect(!out.unicodeScalars.contains { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) })
            if repairedLength <= Self.limit {
                #expect(out.unicodeScalars.count == text.unicodeScalars.count, "only replaced, never cut")
            }
        }
        // One count per field changed, by kind of change.
        #expect(counts.repairedUTF8 == (forbidden ? 3 : 0), "\(counts)")
        #expect(counts.truncatedStrings == (repairedLength > Self.limit ? 3 : 0), "\(counts)")
        #expect(counts.droppedKeys == 0)

        // The record reads back with exactly the cleaned name and ids, with or without
        // the one-pass path, and encoding the raw event writes the same.
        let record = p.record(event, id: (1, 2))
        let json = try #require(try JSONSerialization.jsonObject(with: Data(record)) as? [String: Any])
        #expect(json["name"] as? String == event.name)
        #expect(json["distinct_id"] as? String == event.identity.distinctID)
        #expect(json["account_id"] as? String == event.identity.accountID)
        #expect(p.record(Self.event(text, distinctID: text, accountID: text), id: (1, 2)) == record)
        var measure = JSONWriter()
        #expect(p.encodeIfClean(Self.event(text, distinctID: text, accountID: text), id: (1, 2), into: &measure)
                == counts.isEmpty)
    }

    @Test func aCutKeepsWholeCharacters() {
        var counts = RuleCounts()
        let s = Sanitizer()
        // "é" written as e + U+0301 straddles the limit: it goes whole.
        #expect(s.sanitize(name: String(repeating: "a", count: 199) + "e\u{301}", counts: &counts)
                == String(repeating: "a", count: 199))
        // Two-byte characters: 100 fit exactly; after an odd start, 99.
        #expect(s.sanitize(name: String(repeating: "é", count: 50_000), counts: &counts)
                == String(repeating: "é", count: 100))
        #expect(s.sanitize(name: "a" + String(repeating: "é", count: 150), counts: &counts)
                == "a" + String(repeating: "é", count: 99))
        // One character longer than the limit (zalgo): cut between its scalars, not emptied.
        let zalgo = s.sanitize(name: "e" + String(repeating: "\u{301}", count: 300), counts: &counts)
        #expect(zalgo.utf8.count == 199 && zalgo.unicodeScalars.first == "e")
        // Exactly at the limit: untouched.
        let exact = String(repeating: "x", count: 200)
        #expect(s.sanitize(name: exact, counts: &counts) == exact)
        #expect(counts.truncatedStrings == 4 && counts.repairedUTF8 == 0)
        // A limit below 4 acts as 4: a character always fits.
        #expect(Sanitizer(limits: SanitizerLimits(maxNameLength: 0)).sanitize(name: "😀😀", counts: &counts) == "😀")
    }

    @Test func invalidUTF8WasRepairedBySwiftAndIsLeftAlone() {
        let text = String(decoding: [0x61, 0xFF, 0x62, 0xC3], as: UTF8.self)
        #expect(text == "a\u{FFFD}b\u{FFFD}")
        var counts = RuleCounts()
        #expect(Sanitizer().sanitize(name: text, counts: &counts) == text)
        #expect(counts.isEmpty)
    }

    @Test func anEmptyAccountIDIsLeftOutAndCounted() throws {
        let p = Self.processor
        var event = Self.event("e", accountID: "")
        var counts = RuleCounts()
        p.clean(&event, counts: &counts)
        #expect(event.identity.accountID == nil && counts.droppedKeys == 1)
        var measure = JSONWriter()
        #expect(!p.encodeIfClean(Self.event("e", accountID: ""), id: (1, 2), into: &measure))
        let json = try #require(try JSONSerialization.jsonObject(with: Data(p.record(Self.event("e", accountID: ""))))
                                as? [String: Any])
        #expect(json["account_id"] == nil)
    }

    @Test func filtersAndSamplingSeeTheNameAsWritten() {
        let cut = String(repeating: "a", count: 200)
        let p = Processor(options: ProcessorOptions(filter: EventFilterOptions(denyNames: [cut, "bad\u{FFFD}name"])))
        #expect(p.admit(Self.event(String(repeating: "a", count: 300))) == .filtered)
        #expect(p.admit(Self.event("bad\u{0}name")) == .filtered)
        #expect(p.admit(Self.event("bad name")) == nil)
        // Sampling on a given identity hashes the distinct id as written: a cut id
        // samples like its cut form.
        let sampled = Processor(options: ProcessorOptions(sampling: SamplingOptions(rate: 0.5)))
        var counts = RuleCounts()
        for i in 0..<64 {
            let id = String(repeating: "u\(i)-", count: 100)
            let written = Sanitizer().sanitize(name: id, counts: &counts)
            #expect(sampled.admit(Self.event("e", distinctID: id, identityGiven: true))
                == sampled.admit(Self.event("e", distinctID: written, identityGiven: true)))
        }
        #expect(counts.truncatedStrings == 64)
    }
}
