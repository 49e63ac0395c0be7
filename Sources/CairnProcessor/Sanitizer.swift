import CairnBase
// Sanitising: every event's properties pass through here on the caller's thread, inside
// `track()`, so the common case (nothing to change) reads each byte once and allocates
// nothing. The rules are documented in docs/FORMATS.md, "Sanitising and privacy rules".

/// Counters of what the sanitising and privacy rules changed, by reason; merged into the
/// SDK's drop counts.
///
/// Each counter counts values (or keys), not occurrences inside a value: a string with
/// three control characters adds 1 to ``repairedUTF8``.
package struct RuleCounts: Sendable, Equatable {
    /// Doubles that were NaN or infinite and became `null`.
    package var droppedNonFinite = 0
    /// Strings cut to ``SanitizerLimits/maxStringLength``, and event names, distinct ids
    /// and account ids cut to ``SanitizerLimits/maxNameLength``.
    package var truncatedStrings = 0
    /// Keys cut to ``SanitizerLimits/maxKeyLength``.
    package var truncatedKeys = 0
    /// Keys dropped with their values: empty keys, keys that collided with another key
    /// after truncation, keys beyond ``SanitizerLimits/maxProperties``, an empty account
    /// id (left out of its event), and keys ``CairnValue/init(sanitizing:counts:)`` could
    /// not turn into text or had no room for.
    package var droppedKeys = 0
    /// Objects and arrays nested deeper than ``SanitizerLimits/maxDepth`` (or, when
    /// converting untyped values, ``CairnValue/conversionDepthLimit``) that became `null`
    /// (one per replaced container; what it held is not counted).
    package var droppedDepth = 0
    /// Arrays cut to ``SanitizerLimits/maxArrayLength``, or cut short when a conversion
    /// reached ``CairnValue/conversionValueLimit``.
    package var truncatedArrays = 0
    /// Strings, keys, event names and ids whose control characters or noncharacters were
    /// replaced by U+FFFD.
    package var repairedUTF8 = 0
    /// Values replaced by `"[redacted]"` because their key is sensitive.
    package var redactedKeys = 0
    /// Strings in which an e-mail address, phone number, card number, token, JWT, URL
    /// password or sensitive query value was masked.
    package var maskedValues = 0
    /// Arrays and dictionaries that contained themselves (through any chain of containers),
    /// written as `"[cycle]"` where the chain closed, by ``CairnValue/init(sanitizing:counts:)``.
    package var cutCycles = 0

    /// All counters zero.
    package init() {}

    /// Adds every counter of `other` to this one.
    package mutating func add(_ other: RuleCounts) {
        droppedNonFinite += other.droppedNonFinite
        truncatedStrings += other.truncatedStrings
        truncatedKeys += other.truncatedKeys
        droppedKeys += other.droppedKeys
        droppedDepth += other.droppedDepth
        truncatedArrays += other.truncatedArrays
        repairedUTF8 += other.repairedUTF8
        redactedKeys += other.redactedKeys
        maskedValues += other.maskedValues
        cutCycles += other.cutCycles
    }

    /// Whether no rule changed anything.
    package var isEmpty: Bool { self == RuleCounts() }
}

/// The bounds the sanitiser enforces. Lengths are in UTF-8 bytes.
public struct SanitizerLimits: Sendable, Equatable {
    /// Container nesting, counting the properties object (or the value passed to
    /// `sanitize(_ value:counts:)`) as level 1; an object or array at
    /// a deeper level becomes `null`. Values below 1 act as 1.
    public var maxDepth: Int
    /// Longest key; longer keys are cut on a character boundary (no ellipsis).
    public var maxKeyLength: Int
    /// Longest string, ellipsis included; longer strings are cut on a character boundary
    /// and end in "…" (U+2026, 3 bytes) when the limit is at least 3.
    public var maxStringLength: Int
    /// Most keys per object; beyond it, the keys that sort first (Swift `String` order)
    /// are kept and the rest dropped.
    public var maxProperties: Int
    /// Most elements per array; later elements are dropped.
    public var maxArrayLength: Int
    /// Longest event name, `distinct_id` and `account_id`; longer ones are cut on a
    /// character boundary (no ellipsis). Values below 4 act as 4, so one character
    /// always fits.
    public var maxNameLength: Int

    /// Limits with the defaults: depth 8, keys 128 bytes, strings 4096 bytes, 256 keys
    /// per object, 256 elements per array, names and ids 200 bytes.
    public init(maxDepth: Int = 8, maxKeyLength: Int = 128, maxStringLength: Int = 4096,
                maxProperties: Int = 256, maxArrayLength: Int = 256, maxNameLength: Int = 200) {
        self.maxDepth = maxDepth
        self.maxKeyLength = maxKeyLength
        self.maxStringLength = maxStringLength
        self.maxProperties = maxProperties
        self.maxArrayLength = maxArrayLength
        self.maxNameLength = maxNameLength
    }
}

/// Makes property values safe to encode: finite numbers, bounded sizes, no control
/// characters, valid UTF-8. Stateless and `Sendable`; one instance can serve every thread.
///
/// ```swift
/// var counts = RuleCounts()
/// let clean = Sanitizer().sanitize(["ratio": .double(.nan)], counts: &counts)
/// // clean == ["ratio": .null], counts.droppedNonFinite == 1
/// ```
///
/// Run it after ``PrivacyMasker/apply(_:counts:)``: masking sees whole strings (a cut never
/// leaves half a card number behind) and the limits hold for what is finally written.
package struct Sanitizer: Sendable {
    /// The limits this sanitiser enforces.
    package let limits: SanitizerLimits
    let maxDepth: Int
    let maxKeyLength: Int
    let maxStringLength: Int
    let maxProperties: Int
    let maxArrayLength: Int
    let maxNameLength: Int

    /// A sanitiser enforcing `limits`.
    package init(limits: SanitizerLimits = .init()) {
        self.limits = limits
        maxDepth = max(1, limits.maxDepth)
        maxKeyLength = max(0, limits.maxKeyLength)
        maxStringLength = max(0, limits.maxStringLength)
        maxProperties = max(0, limits.maxProperties)
        maxArrayLength = max(0, limits.maxArrayLength)
        maxNameLength = max(4, limits.maxNameLength)
    }

    /// Returns properties that always encode to valid JSON within the limits, adding what
    /// was changed to `counts`. When nothing needs changing the input is returned as is.
    package func sanitize(_ properties: [String: CairnValue], counts: inout RuleCounts) -> [String: CairnValue] {
        cleanObject(properties, level: 1, counts: &counts) ?? properties
    }

    /// Returns `value` made safe the same way; a container passed here is level 1.
    package func sanitize(_ value: CairnValue, counts: inout RuleCounts) -> CairnValue {
        clean(value, level: 1, counts: &counts) ?? value
    }

    /// Returns an event name, `distinct_id` or `account_id` made safe: every control
    /// character (tab, LF and CR included) and noncharacter replaced by U+FFFD, then cut
    /// to ``SanitizerLimits/maxNameLength`` bytes on a character boundary, without an
    /// ellipsis and never to nothing. When nothing needs changing the input is returned
    /// as is. An empty name stays empty: refusing it is the processor's decision.
    package func sanitize(name: String, counts: inout RuleCounts) -> String {
        guard let fixed = TextRepair.clean(name, limit: maxNameLength, kind: .name) else { return name }
        if fixed.repaired { counts.repairedUTF8 += 1 }
        if fixed.truncated { counts.truncatedStrings += 1 }
        return fixed.text
    }

    /// `name` as ``sanitize(name:counts:)`` returns it, uncounted.
    func cleaned(name: String) -> String {
        TextRepair.clean(name, limit: maxNameLength, kind: .name)?.text ?? name
    }

    /// Whether ``sanitize(name:counts:)`` keeps `name` as it is.
    func leavesUnchanged(name: String) -> Bool {
        withUTF8Bytes(name, leavesUnchanged(name:))
    }

    // Every helper returns nil for "unchanged", so untouched values are never rebuilt.

    private func clean(_ value: CairnValue, level: Int, counts: inout RuleCounts) -> CairnValue? {
        switch value {
        case .null, .bool, .int:
            return nil
        case .double(let d):
            if d.isFinite { return nil }
            counts.droppedNonFinite += 1
            return .null
        case .string(let s):
            guard let fixed = TextRepair.clean(s, limit: maxStringLength, kind: .value) else { return nil }
            if fixed.repaired { counts.repairedUTF8 += 1 }
            if fixed.truncated { counts.truncatedStrings += 1 }
            return .string(fixed.text)
        case .array(let items):
            if level > maxDepth { counts.droppedDepth += 1; return .null }
            return cleanArray(items, level: level, counts: &counts).map(CairnValue.array)
        case .object(let object):
            if level > maxDepth { counts.droppedDepth += 1; return .null }
            return cleanObject(object, level: level, counts: &counts).map(CairnValue.object)
        }
    }

    private func cleanArray(_ items: [CairnValue], level: Int, counts: inout RuleCounts) -> [CairnValue]? {
        var out = items
        var changed = false
        if items.count > maxArrayLength {
            out = Array(items.prefix(maxArrayLength))
            counts.truncatedArrays += 1
            changed = true
        }
        for i in 0..<out.count {
            if let fixed = clean(out[i], level: level + 1, counts: &counts) {
                out[i] = fixed
                changed = true
            }
        }
        return changed ? out : nil
    }

    private func cleanObject(_ object: [String: CairnValue], level: Int,
                             counts: inout RuleCounts) -> [String: CairnValue]? {
        if object.count <= maxProperties, object.keys.allSatisfy(isCleanKey) {
            var out = object
            var changed = false
            for (key, value) in object {
                if let fixed = clean(value, level: level + 1, counts: &counts) {
                    out[key] = fixed
                    changed = true
                }
            }
            return changed ? out : nil
        }
        return rebuildObject(object, level: level, counts: &counts)
    }

    private func isCleanKey(_ key: String) -> Bool {
        withUTF8Bytes(key, leavesUnchanged(key:))
    }

    /// Whether the sanitiser keeps this key as it is (the processor's single-pass check).
    func leavesUnchanged(key: UnsafeBufferPointer<UInt8>) -> Bool {
        key.count > 0 && key.count <= maxKeyLength && !TextRepair.needsRepair(key, allowingWhitespace: true)
    }

    /// Whether the sanitiser keeps this string value as it is.
    func leavesUnchanged(string: UnsafeBufferPointer<UInt8>) -> Bool {
        string.count <= maxStringLength && !TextRepair.needsRepair(string, allowingWhitespace: true)
    }

    /// Whether ``sanitize(name:counts:)`` keeps this name or id as it is: one bounded
    /// byte scan, no allocation.
    func leavesUnchanged(name: UnsafeBufferPointer<UInt8>) -> Bool {
        name.count <= maxNameLength && !TextRepair.needsRepair(name, allowingWhitespace: false)
    }

    private struct Entry {
        var key: String
        var original: String
        var value: CairnValue
        var repaired: Bool
        var truncated: Bool
    }

    /// The slow path: some key must change or go. Entries are processed in the sorted
    /// order of their cleaned keys (ties by original key), so which key survives a
    /// collision or the property limit does not depend on dictionary order.
    private func rebuildObject(_ object: [String: CairnValue], level: Int,
                               counts: inout RuleCounts) -> [String: CairnValue] {
        var entries: [Entry] = []
        entries.reserveCapacity(object.count)
        for (key, value) in object {
            var entry = Entry(key: key, original: key, value: value, repaired: false, truncated: false)
            if let fixed = TextRepair.clean(key, limit: maxKeyLength, kind: .key) {
                entry.key = fixed.text
                entry.repaired = fixed.repaired
                entry.truncated = fixed.truncated
            }
            if entry.key.isEmpty {
                counts.droppedKeys += 1
                continue
            }
            entries.append(entry)
        }
        entries.sort { $0.key != $1.key ? $0.key < $1.key : $0.original < $1.original }
        var out: [String: CairnValue] = [:]
        out.reserveCapacity(min(entries.count, maxProperties))
        for entry in entries {
            if out.count >= maxProperties || out.index(forKey: entry.key) != nil {
                counts.droppedKeys += 1
                continue
            }
            if entry.repaired { counts.repairedUTF8 += 1 }
            if entry.truncated { counts.truncatedKeys += 1 }
            out[entry.key] = clean(entry.value, level: level + 1, counts: &counts) ?? entry.value
        }
        return out
    }
}

/// Control-character repair and length limits for strings, keys, names and ids.
private enum TextRepair {
    struct Result {
        var text: String
        var repaired: Bool
        var truncated: Bool
    }

    /// What is being cleaned, which decides the details of the rules.
    enum Kind {
        /// A string value: tab, LF and CR are kept; a cut ends in "…".
        case value
        /// A key: tab, LF and CR are kept; a cut has no ellipsis and may leave nothing
        /// (the key is then dropped).
        case key
        /// An event name or id: every control character is replaced; a cut has no
        /// ellipsis and always keeps at least one character.
        case name

        var allowsWhitespace: Bool { self != .name }
    }

    /// Whether `scalar` is replaced by U+FFFD: C0 controls (other than tab, LF and CR
    /// when `allowingWhitespace`), DEL, C1 controls, the noncharacters U+FFFE and U+FFFF,
    /// and U+FEFF. A byte order mark is never meaningful inside a value, and decoders
    /// that strip it (Foundation's JSON parser drops it at the start of a string) would
    /// change keys and values.
    static func isForbidden(_ scalar: Unicode.Scalar, allowingWhitespace: Bool) -> Bool {
        let v = scalar.value
        if v < 0x20 { return !allowingWhitespace || (v != 0x09 && v != 0x0A && v != 0x0D) }
        return (v >= 0x7F && v <= 0x9F) || v == 0xFFFE || v == 0xFFFF || v == 0xFEFF
    }

    /// Whether these UTF-8 bytes hold a forbidden scalar; reads them without decoding.
    @inline(__always)
    static func needsRepair(_ bytes: UnsafeBufferPointer<UInt8>, allowingWhitespace: Bool) -> Bool {
        let n = bytes.count
        var i = 0
        // Whole words of printable ASCII first: no byte below 0x20 (the high bit of
        // x - 0x20.. set where x's is clear) and none above 0x7E (x + 0x01.. cannot
        // carry between bytes below 0x80, and x's own high bit catches the rest).
        if let p = bytes.baseAddress {
            let ones: UInt64 = 0x0101_0101_0101_0101, highs: UInt64 = 0x8080_8080_8080_8080
            @inline(__always) func printable(_ at: Int) -> Bool {
                let x = UnsafeRawPointer(p + at).loadUnaligned(as: UInt64.self)
                return (((x &- ones &* 0x20) & ~x) | (x &+ ones) | x) & highs == 0
            }
            while i &+ 8 <= n && printable(i) { i &+= 8 }
            // The last bytes as one word, overlapping the ones checked (names and keys
            // are rarely a multiple of eight long).
            if i < n && n >= 8 && i &+ 8 > n && printable(n &- 8) { return false }
        }
        while i < n {
            let b = bytes[i]
            if b &- 0x20 < 0x5F {  // printable ASCII, the common case
                i &+= 1
                continue
            }
            if b < 0x20 {
                if !allowingWhitespace || (b != 0x09 && b != 0x0A && b != 0x0D) { return true }
            } else if b == 0x7F {
                return true
            } else if b == 0xC2 {  // U+0080...U+00BF; C1 controls are C2 80...C2 9F
                if i + 1 < n && bytes[i + 1] <= 0x9F { return true }
            } else if b == 0xEF {  // U+FFFE, U+FFFF are EF BF BE, EF BF BF; U+FEFF is EF BB BF
                if i + 2 < n {
                    let b1 = bytes[i + 1], b2 = bytes[i + 2]
                    if (b1 == 0xBF && b2 >= 0xBE) || (b1 == 0xBB && b2 == 0xBF) { return true }
                }
            }
            i &+= 1
        }
        return false
    }

    /// `text` repaired and cut to `limit` bytes as `kind` requires, or nil when it is
    /// already fine.
    static func clean(_ text: String, limit: Int, kind: Kind) -> Result? {
        let tooLong = text.utf8.count > limit
        if !tooLong && !withUTF8Bytes(text, { needsRepair($0, allowingWhitespace: kind.allowsWhitespace) }) {
            return nil
        }

        // Build the repaired prefix, a few bytes past the limit so the character
        // boundary at the cut can be judged by the scalar that follows it.
        var scalars = String.UnicodeScalarView()
        var bytes = 0
        var firstRepair = Int.max
        let stop = limit + 8
        for scalar in text.unicodeScalars {
            var kept = scalar
            if isForbidden(scalar, allowingWhitespace: kind.allowsWhitespace) {
                kept = "\u{FFFD}"
                firstRepair = min(firstRepair, bytes)
            }
            scalars.append(kept)
            bytes += UTF8.width(kept)
            if bytes > stop { break }
        }
        let repaired = String(scalars)
        if bytes <= limit {
            return Result(text: repaired, repaired: firstRepair != .max, truncated: false)
        }

        let mark = kind == .value && limit >= 3
        let budget = mark ? limit - 3 : limit
        let utf8 = repaired.utf8
        var cut = utf8.index(utf8.startIndex, offsetBy: budget)
        while cut > utf8.startIndex && UTF8.isContinuation(utf8[cut]) { cut = utf8.index(before: cut) }
        // Prefer a grapheme boundary (never split "é" written as e + U+0301, a flag or an
        // emoji sequence); give up after 32 scalars so zalgo text stays linear. A name
        // whose first character alone is too long is cut inside it rather than emptied.
        let scalarCut = cut
        var tries = 0
        while cut > repaired.startIndex && cut.samePosition(in: repaired) == nil && tries < 32 {
            cut = repaired.unicodeScalars.index(before: cut)
            tries += 1
        }
        if cut.samePosition(in: repaired) == nil || (kind == .name && cut == repaired.startIndex) { cut = scalarCut }
        let keptBytes = utf8.distance(from: utf8.startIndex, to: cut)
        var out = String(repaired[..<cut])
        if mark { out.append("\u{2026}") }
        return Result(text: out, repaired: firstRepair < keptBytes, truncated: true)
    }
}

