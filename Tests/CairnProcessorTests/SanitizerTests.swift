import CairnProcessor
import Foundation
import Testing

@Suite struct SanitizerTests {
    let sanitizer = Sanitizer()

    @Test func cleanPropertiesComeBackUnchangedAndUncounted() {
        let props: [String: CairnValue] = ["plan": "pro", "seats": 3, "ratio": 0.5, "trial": false, "none": nil,
                                           "tags": ["a", 1, ["k": "v"]], "text": "tab\tnew\nline\r ünïcödé 🇫🇷 e\u{301}"]
        var counts = RuleCounts()
        #expect(sanitizer.sanitize(props, counts: &counts) == props)
        #expect(counts.isEmpty)
    }

    @Test(arguments: [Double.nan, .infinity, -.infinity, .signalingNaN])
    func nonFiniteNumbersBecomeNull(_ number: Double) {
        var counts = RuleCounts()
        let out = sanitizer.sanitize(["n": .double(number), "nested": [.double(number), ["x": .double(number)]]],
                                     counts: &counts)
        #expect(out == ["n": nil, "nested": [nil, ["x": nil]]])
        #expect(counts.droppedNonFinite == 3)
        var expected = RuleCounts()
        expected.droppedNonFinite = 3
        #expect(counts == expected)
    }

    @Test(arguments: [0.0, -0.0, 1e308, -1e-308, Double.leastNonzeroMagnitude, .greatestFiniteMagnitude])
    func finiteNumbersStay(_ number: Double) {
        var counts = RuleCounts()
        #expect(sanitizer.sanitize(.double(number), counts: &counts) == .double(number))
        #expect(counts.isEmpty)
    }

    static let repairs: [(String, String)] = [
        ("a\u{0}b", "a\u{FFFD}b"),
        ("\u{1B}[31mred", "\u{FFFD}[31mred"),
        ("bell\u{7}", "bell\u{FFFD}"),
        ("del\u{7F}", "del\u{FFFD}"),
        ("c1 \u{85} \u{9B}", "c1 \u{FFFD} \u{FFFD}"),
        ("\u{FFFE}\u{FFFF}", "\u{FFFD}\u{FFFD}"),
        ("\u{FEFF}bom", "\u{FFFD}bom"),
        ("\u{1F}\u{0B}\u{0C}", "\u{FFFD}\u{FFFD}\u{FFFD}"),
    ]

    @Test(arguments: repairs)
    func controlCharactersAreReplaced(_ input: String, _ expected: String) {
        var counts = RuleCounts()
        #expect(sanitizer.sanitize(.string(input), counts: &counts) == .string(expected))
        #expect(counts.repairedUTF8 == 1 && counts.truncatedStrings == 0)
    }

    @Test(arguments: ["tab\t", "lf\n", "cr\r", "nbsp\u{A0}", "\u{A0}\u{BF}\u{100}", "\u{FEFE}\u{FFBF}\u{EFFF}", "repl\u{FFFD}", "\u{FFFC}\u{FFFD}",
                      "quote\" backslash\\ slash/", "\u{2028}\u{2029}", "𝄞 👨‍👩‍👧‍👦", "",
                      String(decoding: [0xFF, 0xFE, 0x41, 0xC3, 0x28, 0xED, 0xA0, 0x80] as [UInt8], as: UTF8.self)])
    func allowedCharactersStay(_ input: String) {
        var counts = RuleCounts()
        #expect(sanitizer.sanitize(.string(input), counts: &counts) == .string(input))
        #expect(counts.isEmpty)
    }

    @Test func keysAreRepairedToo() {
        var counts = RuleCounts()
        let out = sanitizer.sanitize(["k\u{0}ey": 1, "fine": 2], counts: &counts)
        #expect(out == ["k\u{FFFD}ey": 1, "fine": 2])
        #expect(counts.repairedUTF8 == 1)
    }

    @Test func longStringsAreCutWithAnEllipsis() {
        var counts = RuleCounts()
        let exact = String(repeating: "a", count: 4096)
        #expect(sanitizer.sanitize(.string(exact), counts: &counts) == .string(exact))
        #expect(counts.isEmpty)

        let long = String(repeating: "a", count: 5000)
        guard case .string(let cut) = sanitizer.sanitize(.string(long), counts: &counts) else {
            Issue.record("not a string")
            return
        }
        #expect(cut.utf8.count == 4096)
        #expect(cut == String(repeating: "a", count: 4093) + "…")
        #expect(counts.truncatedStrings == 1)
    }

    static let cuts: [(String, Int, String)] = [
        ("abcdefghij", 8, "abcde…"),
        ("abcdefghij", 10, "abcdefghij"),
        ("abcdefghij", 2, "ab"),                                  // too short for the ellipsis
        ("ééééé", 8, "éé…"),                                        // never half a UTF-8 sequence
        ("e\u{301}e\u{301}e\u{301}e\u{301}", 8, "e\u{301}…"),      // never an accent without its letter
        ("🇫🇷🇫🇷🇫🇷", 15, "🇫🇷…"),                                  // never half a flag
        ("👨‍👩‍👧‍👦👨‍👩‍👧‍👦", 30, "👨‍👩‍👧‍👦…"),
        ("\u{0}\u{0}\u{0}\u{0}", 8, "\u{FFFD}…"),                    // the limit applies after repair
    ]

    @Test(arguments: cuts)
    func cutsLandOnCharacterBoundaries(_ input: String, _ limit: Int, _ expected: String) {
        var counts = RuleCounts()
        let out = Sanitizer(limits: SanitizerLimits(maxStringLength: limit)).sanitize(.string(input), counts: &counts)
        #expect(out == .string(expected))
        if case .string(let s) = out { #expect(s.utf8.count <= limit) }
        #expect(counts.truncatedStrings == (input == expected ? 0 : 1))
    }

    @Test func zalgoTextIsCutLinearlyAtAScalarBoundary() {
        let zalgo = "a" + String(repeating: "\u{301}", count: 5000)
        var counts = RuleCounts()
        let out = Sanitizer(limits: SanitizerLimits(maxStringLength: 100)).sanitize(.string(zalgo), counts: &counts)
        guard case .string(let s) = out else {
            Issue.record("not a string")
            return
        }
        #expect(s.utf8.count <= 100 && s.hasSuffix("…") && s.unicodeScalars.first == "a")
        #expect(counts.truncatedStrings == 1)
    }

    @Test func longKeysAreCutAndCollisionsResolvedByOrder() {
        let prefix = String(repeating: "k", count: 128)
        var counts = RuleCounts()
        let out = sanitizer.sanitize([prefix + "b": 2, prefix + "a": 1, "short": 3], counts: &counts)
        #expect(out == [prefix: 1, "short": 3])  // of the two, the key that sorts first survives
        #expect(counts.truncatedKeys == 1 && counts.droppedKeys == 1)

        counts = RuleCounts()
        let multibyte = String(repeating: "é", count: 100)  // 200 bytes
        let cut = sanitizer.sanitize([multibyte: 1], counts: &counts)
        #expect(cut == [String(repeating: "é", count: 64): 1])
        #expect(counts.truncatedKeys == 1)
    }

    @Test func emptyKeysAreDropped() {
        var counts = RuleCounts()
        #expect(sanitizer.sanitize(["": 1, "a": ["": 2, "b": 3]], counts: &counts) == ["a": ["b": 3]])
        #expect(counts.droppedKeys == 2)
    }

    @Test func extraKeysAreDroppedKeepingTheFirstInOrder() {
        var props: [String: CairnValue] = [:]
        for i in 0..<300 { props[String(format: "k%03d", i)] = .int(Int64(i)) }
        var counts = RuleCounts()
        let out = sanitizer.sanitize(props, counts: &counts)
        #expect(out.count == 256)
        #expect(out.keys.sorted() == (0..<256).map { String(format: "k%03d", $0) })
        #expect(counts.droppedKeys == 44)
        // Values of dropped keys are not inspected, so they add no other counts.
        props["k299"] = .double(.nan)
        counts = RuleCounts()
        _ = sanitizer.sanitize(props, counts: &counts)
        #expect(counts.droppedNonFinite == 0 && counts.droppedKeys == 44)
    }

    @Test func longArraysAreCut() {
        var counts = RuleCounts()
        let items = (0..<300).map { CairnValue.int(Int64($0)) }
        #expect(sanitizer.sanitize(.array(items), counts: &counts) == .array(Array(items.prefix(256))))
        #expect(counts.truncatedArrays == 1)
        counts = RuleCounts()
        #expect(sanitizer.sanitize(.array(Array(items.prefix(256))), counts: &counts) == .array(Array(items.prefix(256))))
        #expect(counts.isEmpty)
    }

    static func nest(_ levels: Int) -> CairnValue {
        (0..<levels).reduce(CairnValue.int(1)) { inner, level in level.isMultiple(of: 2) ? .array([inner]) : .object(["k": inner]) }
    }

    static func containerDepth(_ value: CairnValue) -> Int {
        switch value {
        case .array(let items): 1 + (items.map(containerDepth).max() ?? 0)
        case .object(let object): 1 + (object.values.map(containerDepth).max() ?? 0)
        default: 0
        }
    }

    @Test func deepValuesBecomeNull() {
        var counts = RuleCounts()
        // The properties object is level 1, so 7 containers inside it reach level 8.
        #expect(sanitizer.sanitize(["a": Self.nest(7)], counts: &counts) == ["a": Self.nest(7)])
        #expect(counts.isEmpty)
        let cut = sanitizer.sanitize(["a": Self.nest(8), "b": "kept"], counts: &counts)
        #expect(counts.droppedDepth == 1)
        #expect(Self.containerDepth(.object(cut)) == 8 && cut["b"] == "kept")
        // A value passed on its own is level 1.
        counts = RuleCounts()
        #expect(sanitizer.sanitize(Self.nest(8), counts: &counts) == Self.nest(8))
        #expect(Self.containerDepth(sanitizer.sanitize(Self.nest(60), counts: &counts)) == 8)
        #expect(counts.droppedDepth == 1)
    }

    @Test func depthLimitBelowOneActsAsOne() {
        var counts = RuleCounts()
        let flat = Sanitizer(limits: SanitizerLimits(maxDepth: 0))
        #expect(flat.sanitize(["a": 1, "b": [1]], counts: &counts) == ["a": 1, "b": nil])
        #expect(counts.droppedDepth == 1)
    }

    @Test func countsAdd() {
        var a = RuleCounts()
        a.droppedNonFinite = 1
        a.maskedValues = 2
        var b = RuleCounts()
        b.maskedValues = 3
        b.redactedKeys = 4
        a.add(b)
        #expect(a.droppedNonFinite == 1 && a.maskedValues == 5 && a.redactedKeys == 4 && !a.isEmpty)
        #expect(RuleCounts().isEmpty)
    }

    // MARK: - Property test

    /// Hostile values from a fixed seed through privacy then sanitising: the result always
    /// survives a Foundation JSON round trip, holds the limits, contains none of the
    /// planted secrets, and a second pass of either stage changes and counts nothing.
    @Test func hostileValuesEncodeWithinLimits() throws {
        let limitSets = [SanitizerLimits(),
                         SanitizerLimits(maxDepth: 4, maxKeyLength: 16, maxStringLength: 64, maxProperties: 20, maxArrayLength: 10),
                         SanitizerLimits(maxDepth: 2, maxKeyLength: 3, maxStringLength: 5, maxProperties: 3, maxArrayLength: 2)]
        let masker = PrivacyMasker()
        var generator = HostileValues(seed: 0xCA1_2026)
        var failures: [String] = []
        var total = RuleCounts()
        for round in 0..<2000 {
            let limits = limitSets[round % limitSets.count]
            let sanitizer = Sanitizer(limits: limits)
            let input = generator.properties(big: round.isMultiple(of: 200))
            var counts = RuleCounts()
            let masked = masker.apply(input, counts: &counts)
            let output = sanitizer.sanitize(masked, counts: &counts)
            total.add(counts)

            var problems = LimitCheck.violations(.object(output), limits)
            for secret in HostileValues.secrets where LimitCheck.anyString(.object(output), contains: secret) {
                problems.append("secret \(secret) survived")
            }
            let foundation = FoundationJSON.object(.object(output))
            if JSONSerialization.isValidJSONObject(foundation) {
                let data = try JSONSerialization.data(withJSONObject: foundation)
                let back = try JSONSerialization.jsonObject(with: data)
                if let difference = FoundationJSON.difference(back, .object(output), path: "") {
                    problems.append("JSON round trip differs at \(difference)")
                }
            } else {
                problems.append("not a valid JSON object")
            }

            var again = RuleCounts()
            _ = masker.apply(masked, counts: &again)
            if !again.isEmpty { problems.append("masking twice changed more: \(again)") }
            let resanitized = sanitizer.sanitize(output, counts: &again)
            if resanitized != output || !again.isEmpty { problems.append("sanitising twice changed more: \(again)") }

            if !problems.isEmpty && failures.count < 5 { failures.append("round \(round): \(problems.prefix(3))") }
        }
        #expect(failures.isEmpty, "\(failures)")
        // The generator really exercised every rule.
        #expect(total.droppedNonFinite > 0 && total.truncatedStrings > 0 && total.truncatedKeys > 0)
        #expect(total.droppedKeys > 0 && total.droppedDepth > 0 && total.truncatedArrays > 0)
        #expect(total.repairedUTF8 > 0 && total.redactedKeys > 0 && total.maskedValues > 0)
    }
}

// MARK: - Test support

/// SplitMix64: a fixed seed gives the same values on every run and platform.
private struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// Random nested property values built to break encoders.
private struct HostileValues {
    static let secrets = ["4111 1111 1111 1111", "alice@example.com", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjMifQ.c2lnbmF0dXJl",
                          "+14155552671", "sk_live_abcdefgh12345", "hunter2secret", "(555) 123-4567"]
    static let plantings = ["4111 1111 1111 1111", "alice@example.com", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjMifQ.c2lnbmF0dXJl",
                            "+14155552671", "Bearer sk_live_abcdefgh12345", "https://h/p?token=hunter2secret", "(555) 123-4567"]
    static let pieces = ["\"", "\\", "/", "\u{0}", "\u{1F}", "\u{7F}", "\u{85}", "\u{9B}", "\u{FFFE}", "\u{FFFF}", "\u{FEFF}",
                         "\u{2028}", "\u{FFFD}", "👨‍👩‍👧‍👦", "🇫🇷", "e\u{301}", "\u{200D}", "𝄞", "é", "中文", "\t", "\n", "\r",
                         "{", "}", "[", "]", ":", ",", "\\u0000", "a", "Z", "9", " ", "@", "?", "=", "&", "#", "+"]
    static let keys = ["password", "X-Api-Key", "session_id", "plan", "user", "email", "url", "notes", "authorization"]

    var rng: SplitMix64

    init(seed: UInt64) { rng = SplitMix64(state: seed) }

    mutating func int(_ range: Range<Int>) -> Int { Int.random(in: range, using: &rng) }
    mutating func chance(_ percent: Int) -> Bool { int(0..<100) < percent }

    mutating func string(long: Bool = true) -> String {
        switch int(0..<8) {
        case 0:
            return String(decoding: (0..<int(0..<40)).map { _ in UInt8.random(in: 0...255, using: &rng) }, as: UTF8.self)
        case 1:
            return String(String.UnicodeScalarView((0..<int(0..<20)).compactMap { _ in
                Unicode.Scalar(UInt32([int(0..<0x20), int(0x7F..<0xA0), 0xFFFE, 0xFFFF, 0x22, 0x5C][int(0..<6)]))
            }))
        case 2 where long && chance(15):
            let piece = Self.pieces[int(0..<Self.pieces.count)] + " " + Self.plantings[int(0..<Self.plantings.count)] + " "
            return String(repeating: piece, count: int(100..<600))
        case 3 where long && chance(10):
            return "a" + String(repeating: "\u{301}", count: int(10..<3000))
        case 4:
            return " " + Self.plantings[int(0..<Self.plantings.count)] + " "
        case 5:
            return String(decoding: (0..<int(0..<30)).map { _ in UInt8.random(in: 0x20...0x7E, using: &rng) }, as: UTF8.self)
        default:
            return (0..<int(0..<12)).map { _ in Self.pieces[int(0..<Self.pieces.count)] }.joined()
        }
    }

    mutating func key() -> String {
        switch int(0..<10) {
        case 0: return ""
        case 1: return String(repeating: Self.pieces[int(0..<Self.pieces.count)], count: int(20..<120))
        case 2, 3: return Self.keys[int(0..<Self.keys.count)]
        default: return string(long: false)
        }
    }

    mutating func double() -> Double {
        [Double.nan, .infinity, -.infinity, -0.0, .greatestFiniteMagnitude, .leastNonzeroMagnitude,
         Double.random(in: -1e12...1e12, using: &rng)][int(0..<7)]
    }

    /// About 30 values per call on average: containers get rarer with depth, and the rare
    /// huge ones (250–320 items) hold only scalars.
    mutating func value(depth: Int) -> CairnValue {
        let container = int(0..<100) < max(0, 45 - 10 * depth) ? int(0..<3) : 3
        switch container {
        case 0:
            let count = chance(3) ? int(250..<320) : int(0..<5)
            return .array((0..<count).map { _ in value(depth: count > 5 ? 9 : depth + 1) })
        case 1:
            let count = chance(3) ? int(250..<320) : int(0..<5)
            return .object(object(count: count, depth: count > 5 ? 9 : depth + 1))
        case 2 where chance(20):
            var deep = value(depth: 9)
            for level in 0..<int(50..<80) {
                deep = level.isMultiple(of: 2) ? .array([deep, .string(string(long: false))]) : .object([key(): deep])
            }
            return deep
        default:
            switch int(0..<6) {
            case 0: return .null
            case 1: return .bool(chance(50))
            case 2: return .int(Int64.random(in: .min ... .max, using: &rng))
            case 3: return .double(double())
            default: return .string(string())
            }
        }
    }

    mutating func object(count: Int, depth: Int) -> [String: CairnValue] {
        var out: [String: CairnValue] = [:]
        for _ in 0..<count { out[key()] = value(depth: depth) }
        return out
    }

    mutating func properties(big: Bool) -> [String: CairnValue] {
        var props = object(count: int(0..<10), depth: 1)
        if big {
            for i in 0..<1000 { props["k\(i)-" + string(long: false)] = value(depth: 9) }
        }
        return props
    }
}

/// Checks the sanitiser's guarantees on an output value.
private enum LimitCheck {
    static func violations(_ value: CairnValue, _ limits: SanitizerLimits) -> [String] {
        var out: [String] = []
        walk(value, level: 1, limits, &out)
        return out
    }

    private static func walk(_ value: CairnValue, level: Int, _ limits: SanitizerLimits, _ out: inout [String]) {
        switch value {
        case .null, .bool, .int: break
        case .double(let d): if !d.isFinite { out.append("non-finite \(d)") }
        case .string(let s): checkText(s, limit: limits.maxStringLength, what: "string", &out)
        case .array(let items):
            if level > max(1, limits.maxDepth) { out.append("array at level \(level)") }
            if items.count > limits.maxArrayLength { out.append("array of \(items.count)") }
            for item in items { walk(item, level: level + 1, limits, &out) }
        case .object(let object):
            if level > max(1, limits.maxDepth) { out.append("object at level \(level)") }
            if object.count > limits.maxProperties { out.append("object of \(object.count) keys") }
            for (key, item) in object {
                if key.isEmpty { out.append("empty key") }
                checkText(key, limit: limits.maxKeyLength, what: "key", &out)
                walk(item, level: level + 1, limits, &out)
            }
        }
    }

    private static func checkText(_ text: String, limit: Int, what: String, _ out: inout [String]) {
        if text.utf8.count > limit { out.append("\(what) of \(text.utf8.count) bytes") }
        for scalar in text.unicodeScalars {
            let v = scalar.value
            if (v < 0x20 && v != 0x09 && v != 0x0A && v != 0x0D) || (0x7F...0x9F).contains(v) || v == 0xFFFE || v == 0xFFFF || v == 0xFEFF {
                out.append("\(what) holds U+\(String(v, radix: 16))")
                return
            }
        }
    }

    static func anyString(_ value: CairnValue, contains needle: String) -> Bool {
        switch value {
        case .string(let s): return s.contains(needle)
        case .array(let items): return items.contains { anyString($0, contains: needle) }
        case .object(let object): return object.values.contains { anyString($0, contains: needle) }
        default: return false
        }
    }
}

/// Conversion to and comparison with Foundation's JSON types, to validate output with a
/// JSON implementation that is not the SDK's.
private enum FoundationJSON {
    static func object(_ value: CairnValue) -> Any {
        switch value {
        case .null: return NSNull()
        case .bool(let b): return NSNumber(value: b)
        case .int(let i): return NSNumber(value: i)
        case .double(let d): return NSNumber(value: d)
        case .string(let s): return s
        case .array(let items): return items.map(object)
        case .object(let o): return o.mapValues(object)
        }
    }

    /// The path of the first place where `json` does not hold `value`, or nil.
    static func difference(_ json: Any, _ value: CairnValue, path: String) -> String? {
        func mismatch() -> String { "\(path): \(String(reflecting: json).prefix(80)) vs \(String(describing: value).prefix(80))" }
        switch value {
        case .null: return json is NSNull ? nil : mismatch()
        case .bool(let b): return (json as? NSNumber)?.boolValue == b ? nil : mismatch()
        case .int(let i): return (json as? NSNumber)?.int64Value == i ? nil : mismatch()
        case .double(let d):
            guard let n = (json as? NSNumber)?.doubleValue, abs(n - d) <= 1e-9 * max(1, abs(d)) else { return mismatch() }
            return nil
        case .string(let s):
            guard let t = json as? String, t.unicodeScalars.elementsEqual(s.unicodeScalars) else { return mismatch() }
            return nil
        case .array(let items):
            guard let array = json as? [Any], array.count == items.count else { return mismatch() }
            for (i, (element, item)) in zip(array, items).enumerated() {
                if let found = difference(element, item, path: "\(path)[\(i)]") { return found }
            }
            return nil
        case .object(let object):
            guard let dict = json as? [String: Any], dict.count == object.count else { return mismatch() }
            for (key, item) in object {
                guard let element = dict[key] else { return "\(path): key \(key.debugDescription) missing" }
                if let found = difference(element, item, path: "\(path).\(key.debugDescription)") { return found }
            }
            return nil
        }
    }
}
