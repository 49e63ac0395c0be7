// Privacy rules: key redaction and value masking, applied to every event's properties on
// the caller's thread. No regex engine: each detector walks the UTF-8 bytes, and a
// single pre-scan decides which detectors can possibly match, so a string without any
// trigger (no '@', '?', '#', '+', "eyJ", "bearer", and fewer than 10 digits) is returned
// untouched without allocating. The rules are documented in docs/FORMATS.md,
// "Sanitising and privacy rules".

/// What to do with a property whose key matches a rule.
public enum KeyAction: Sendable, Equatable {
    /// Replace the value, whatever its type, by the string `"[redacted]"`.
    case redact
    /// Mask the value's strings with every masking rule, even those switched off in
    /// ``PrivacyOptions``; keys inside it are still checked.
    case mask
    /// Leave the value and everything inside it untouched.
    case keep
}

/// Which privacy rules run.
public struct PrivacyOptions: Sendable, Equatable {
    /// The default ``sensitiveKeys``.
    public static let defaultSensitiveKeys: [String] = [
        "authorization", "cookie", "setcookie", "token", "password", "passwd", "secret", "apikey",
        "accesskey", "privatekey", "credential", "session", "ssn", "creditcard", "cardnumber", "cvv",
    ]

    /// The longest ``sensitiveKeys`` list `Cairn.start` accepts, in normalised bytes summed
    /// over the entries: they are compiled into one automaton whose size grows with it.
    public static let maxSensitiveKeyBytes = 2048

    /// The normalised length of ``sensitiveKeys`` summed (see ``maxSensitiveKeyBytes``).
    public var sensitiveKeyBytes: Int {
        sensitiveKeys.reduce(0) { $0 + $1.utf8.count { normalise($0) != nil } }
    }

    /// When false, nothing is redacted or masked: every entry point returns its input.
    public var enabled: Bool
    /// Substrings that make a key sensitive (its value is redacted). Matching is ASCII
    /// case-insensitive and ignores `-`, `_` and spaces in both the key and the entry, so
    /// "api_key" matches "X-API-Key". Entries that normalise to nothing are ignored.
    public var sensitiveKeys: [String]
    /// Exact keys (ASCII case-insensitive, nothing ignored) and their action; a rule wins
    /// over ``sensitiveKeys``. Also applies to URL query parameter names.
    public var keyRules: [String: KeyAction]
    /// Mask e-mail addresses as `[email]`.
    public var maskEmails: Bool
    /// Mask phone numbers as `[phone]`.
    public var maskPhoneNumbers: Bool
    /// Mask Luhn-valid card numbers (13–19 digits, optionally grouped) as `[card]`.
    public var maskCardNumbers: Bool
    /// Mask `Bearer` tokens (as `Bearer [token]`) and JWTs (as `[jwt]`).
    public var maskTokens: Bool
    /// Mask the values of sensitive URL query and fragment parameters, and URL passwords,
    /// as `[redacted]`.
    public var maskURLQueries: Bool

    /// Options with every rule on and the default sensitive keys.
    public init(enabled: Bool = true, sensitiveKeys: [String] = PrivacyOptions.defaultSensitiveKeys,
                keyRules: [String: KeyAction] = [:], maskEmails: Bool = true, maskPhoneNumbers: Bool = true,
                maskCardNumbers: Bool = true, maskTokens: Bool = true, maskURLQueries: Bool = true) {
        self.enabled = enabled
        self.sensitiveKeys = sensitiveKeys
        self.keyRules = keyRules
        self.maskEmails = maskEmails
        self.maskPhoneNumbers = maskPhoneNumbers
        self.maskCardNumbers = maskCardNumbers
        self.maskTokens = maskTokens
        self.maskURLQueries = maskURLQueries
    }
}

/// Applies ``PrivacyOptions`` to event properties: redacts values of sensitive keys and
/// masks personal data and credentials inside strings. Immutable and `Sendable`; build
/// one at configuration time (it pre-processes the key lists) and share it.
///
/// ```swift
/// let masker = PrivacyMasker()
/// masker.mask("mail bob@example.com, card 4111 1111 1111 1111")
/// // "mail [email], card [card]"
/// ```
public struct PrivacyMasker: Sendable {
    /// The options this masker applies.
    public let options: PrivacyOptions
    private let kinds: MaskKinds
    private let patterns: KeyPatterns
    private let rules: KeyRuleTable

    /// A masker for `options`.
    public init(options: PrivacyOptions = .init()) {
        self.options = options
        var kinds: MaskKinds = []
        if options.maskEmails { kinds.insert(.emails) }
        if options.maskPhoneNumbers { kinds.insert(.phones) }
        if options.maskCardNumbers { kinds.insert(.cards) }
        if options.maskTokens { kinds.insert(.tokens) }
        if options.maskURLQueries { kinds.insert(.urls) }
        self.kinds = kinds
        patterns = KeyPatterns(options.sensitiveKeys)
        rules = KeyRuleTable(options.keyRules)
    }

    /// Applies key rules and value masking to every property, recursively, adding what
    /// changed to `counts`. Keys themselves are never changed. When nothing matches, the
    /// input is returned as is.
    public func apply(_ properties: [String: CairnValue], counts: inout RuleCounts) -> [String: CairnValue] {
        apply(properties, maxDepth: .max, counts: &counts)
    }

    /// `apply` for the processor: containers deeper than `maxDepth` (the properties
    /// object is level 1) are left as they are, for the sanitiser replaces them next; so
    /// a hostile nesting is never walked further than that.
    func apply(_ properties: [String: CairnValue], maxDepth: Int, counts: inout RuleCounts) -> [String: CairnValue] {
        guard options.enabled else { return properties }
        return applyObject(properties, kinds: kinds, level: 1, maxDepth: maxDepth, counts: &counts) ?? properties
    }

    /// Masks sensitive content in one string with the rules switched on in ``options``;
    /// returns it unchanged (same storage) when nothing matches.
    public func mask(_ text: String) -> String {
        guard options.enabled, !kinds.isEmpty else { return text }
        return maskText(text, kinds: kinds) ?? text
    }

    /// Masks the values of sensitive query parameters (names matched like sensitive keys,
    /// plus "code", "sig", "signature", "key", "access_token", "refresh_token",
    /// "id_token", "auth") and the password of `user:password@` in a URL string; keeps
    /// everything else byte for byte. Works on "https://h/p?a=1&token=abc#frag" and on
    /// relative "/p?x=1". Parameters in the fragment (`#access_token=…`) are masked too.
    /// Runs whether or not ``PrivacyOptions/maskURLQueries`` is set, unless privacy is
    /// disabled.
    public func maskURL(_ url: String) -> String {
        guard options.enabled else { return url }
        return maskText(url, kinds: .urls) ?? url
    }

    /// Whether a key is sensitive under these options: its value would be redacted.
    public func isSensitive(key: String) -> Bool {
        guard options.enabled else { return false }
        return action(forKey: key) == .redact
    }

    // MARK: - Properties

    static let redacted = "[redacted]"

    private func action(forKey key: String) -> KeyAction? {
        withUTF8Bytes(key, action(forKey:))
    }

    /// A key rule's action, else `.redact` for a sensitive key, else nil.
    private func action(forKey key: UnsafeBufferPointer<UInt8>) -> KeyAction? {
        if let rule = rules.action(for: key) { return rule }
        return patterns.matches(key) ? .redact : nil
    }

    // Each helper returns nil for "unchanged", so untouched values are never rebuilt.

    private func applyObject(_ object: [String: CairnValue], kinds: MaskKinds, level: Int, maxDepth: Int,
                             counts: inout RuleCounts) -> [String: CairnValue]? {
        var out = object
        var changed = false
        for (key, value) in object {
            let replacement: CairnValue?
            switch action(forKey: key) {
            case .keep?:
                continue
            case .redact?:
                if value == .string(Self.redacted) { continue }
                counts.redactedKeys += 1
                replacement = .string(Self.redacted)
            case .mask?:
                replacement = applyValue(value, kinds: .all, level: level + 1, maxDepth: maxDepth, counts: &counts)
            case nil:
                replacement = applyValue(value, kinds: kinds, level: level + 1, maxDepth: maxDepth, counts: &counts)
            }
            if let replacement {
                out[key] = replacement
                changed = true
            }
        }
        return changed ? out : nil
    }

    private func applyValue(_ value: CairnValue, kinds: MaskKinds, level: Int, maxDepth: Int,
                            counts: inout RuleCounts) -> CairnValue? {
        switch value {
        case .null, .bool, .int, .double:
            return nil
        case .string(let text):
            guard !kinds.isEmpty, let masked = maskText(text, kinds: kinds) else { return nil }
            counts.maskedValues += 1
            return .string(masked)
        case .array(let items):
            guard level <= maxDepth else { return nil }
            var out = items
            var changed = false
            for i in items.indices {
                if let fixed = applyValue(items[i], kinds: kinds, level: level + 1, maxDepth: maxDepth, counts: &counts) {
                    out[i] = fixed
                    changed = true
                }
            }
            return changed ? .array(out) : nil
        case .object(let object):
            guard level <= maxDepth else { return nil }
            return applyObject(object, kinds: kinds, level: level, maxDepth: maxDepth, counts: &counts)
                .map(CairnValue.object)
        }
    }

    // MARK: - Strings

    private func maskText(_ text: String, kinds: MaskKinds) -> String? {
        withUTF8Bytes(text) { bytes -> String? in
            let run = Triggers(bytes).detectors(kinds)
            guard !run.isEmpty else { return nil }
            var found = Matches()
            if run.contains(.urlPasswords) { findURLPasswords(bytes, into: &found) }
            if run.contains(.queryValues) { findQueryValues(bytes, into: &found) }
            if run.contains(.bearerTokens) { findBearerTokens(bytes, into: &found) }
            if run.contains(.jwts) { findJWTs(bytes, into: &found) }
            if run.contains(.emails) { findEmails(bytes, into: &found) }
            if run.contains(.cards) { findCards(bytes, into: &found) }
            if run.contains(.phones) { findPhones(bytes, into: &found) }
            return found.isEmpty ? nil : found.render(bytes)
        }
    }

    // MARK: - The processor's single-pass check

    /// How the value of `key` is treated, for the processor's single-pass encoder, which
    /// must agree with ``apply(_:counts:)`` exactly: `.off` when no privacy rule applies
    /// below this key (privacy disabled, or a `.keep` rule), `.mask(kinds)` when strings
    /// below it are masked with `kinds`, and nil when its value would be redacted.
    /// `inherited` is what applied to the enclosing object.
    func scope(forKey key: UnsafeBufferPointer<UInt8>, inherited: PrivacyScope) -> PrivacyScope? {
        guard case .mask(let kinds) = inherited else { return .off }
        switch action(forKey: key) {
        case .keep?: return .off
        case .redact?: return nil
        case .mask?: return .mask(.all)
        case nil: return .mask(kinds)
        }
    }

    /// What applies to the properties object itself.
    var rootScope: PrivacyScope { options.enabled ? .mask(kinds) : .off }

    /// Whether masking `text` with `kinds` would leave it unchanged because none of the
    /// detectors has its trigger in it.
    func leavesUnchanged(_ text: UnsafeBufferPointer<UInt8>, kinds: MaskKinds) -> Bool {
        kinds.isEmpty || Triggers(text).detectors(kinds).isEmpty
    }

    private func findQueryValues(_ b: UnsafeBufferPointer<UInt8>, into found: inout Matches) {
        let n = b.count
        var i = 0
        while i < n {
            guard b[i] == Byte.question || b[i] == Byte.hash else { i += 1; continue }
            // Parameters run to a terminator; '?', '#', '&' and ';' each start a new one, so
            // a URL nested in a value ("?next=/x?token=abc") has its own parameters checked.
            var j = i + 1
            while j < n && !isQueryTerminator(b[j]) {
                let nameStart = j
                while j < n && !isQueryTerminator(b[j]) && !isParameterSeparator(b[j]) && b[j] != Byte.equals { j += 1 }
                let nameEnd = j
                guard j < n, b[j] == Byte.equals else {
                    if j < n && isParameterSeparator(b[j]) { j += 1; continue }
                    break
                }
                j += 1
                let valueStart = j
                while j < n && !isQueryTerminator(b[j]) && !isParameterSeparator(b[j]) { j += 1 }
                if j > valueStart && nameEnd > nameStart
                    && isSensitiveParameter(UnsafeBufferPointer(rebasing: b[nameStart..<nameEnd]))
                    && !equals(b, valueStart..<j, Self.redacted) {
                    found.add(valueStart, j, .redacted)
                }
                if j < n && isParameterSeparator(b[j]) { j += 1 }
            }
            i = j
        }
    }

    private func isSensitiveParameter(_ name: UnsafeBufferPointer<UInt8>) -> Bool {
        if let rule = rules.action(for: name) { return rule != .keep }
        return patterns.matches(name) || KeyPatterns.isExtraQueryName(name)
    }

    /// `scheme://user:password@host`: the password becomes `[redacted]`.
    private func findURLPasswords(_ b: UnsafeBufferPointer<UInt8>, into found: inout Matches) {
        let n = b.count
        var i = 0
        while i + 3 <= n {
            guard b[i] == Byte.colon, i + 2 < n, b[i + 1] == Byte.slash, b[i + 2] == Byte.slash else { i += 1; continue }
            let start = i + 3
            var j = start
            var colon = -1
            var at = -1
            while j < n {
                let c = b[j]
                if c == Byte.slash || c == Byte.question || c == Byte.hash || isQueryTerminator(c) { break }
                if c == Byte.at { at = j } else if c == Byte.colon && colon < 0 && at < 0 { colon = j }
                j += 1
            }
            if at > 0, colon >= 0, colon < at, colon + 1 < at, !equals(b, (colon + 1)..<at, Self.redacted) {
                found.add(colon + 1, at, .redacted)
                found.claimedAt.append(at)
            }
            i = j
        }
    }

    private func findBearerTokens(_ b: UnsafeBufferPointer<UInt8>, into found: inout Matches) {
        let n = b.count
        var i = 0
        while i + 6 < n {
            guard b[i] | 0x20 == UInt8(ascii: "b"), startsWithBearer(b, at: i),
                  i == 0 || !isAlnum(b[i - 1]) else { i += 1; continue }
            var j = i + 6
            guard b[j] == Byte.space || b[j] == Byte.tab else { i += 1; continue }
            while j < n && (b[j] == Byte.space || b[j] == Byte.tab) { j += 1 }
            let start = j
            while j < n && isTokenByte(b[j]) { j += 1 }
            if j - start >= 8 { found.add(start, j, .token) }
            i = max(j, i + 1)
        }
    }

    private func findJWTs(_ b: UnsafeBufferPointer<UInt8>, into found: inout Matches) {
        let n = b.count
        var i = 0
        while i + 3 <= n {
            guard b[i] == UInt8(ascii: "e"), b[i + 1] == UInt8(ascii: "y"), b[i + 2] == UInt8(ascii: "J"),
                  i == 0 || !(isBase64URL(b[i - 1]) || b[i - 1] == Byte.dot) else { i += 1; continue }
            var j = i
            while j < n && isBase64URL(b[j]) { j += 1 }
            guard j - i >= 10, j < n, b[j] == Byte.dot else { i = j; continue }
            j += 1
            let payload = j
            while j < n && isBase64URL(b[j]) { j += 1 }
            guard j > payload, j < n, b[j] == Byte.dot else { i = j; continue }
            j += 1
            while j < n && isBase64URL(b[j]) { j += 1 }  // the signature; empty for "alg":"none"
            // Encrypted tokens (JWE) have five segments.
            while j + 1 < n && b[j] == Byte.dot && isBase64URL(b[j + 1]) {
                j += 1
                while j < n && isBase64URL(b[j]) { j += 1 }
            }
            found.add(i, j, .jwt)
            i = j
        }
    }

    private func findEmails(_ b: UnsafeBufferPointer<UInt8>, into found: inout Matches) {
        let n = b.count
        for at in 0..<n where b[at] == Byte.at && !found.claimedAt.contains(at) {
            var start = at
            while start > 0 && isEmailLocal(b[start - 1]) { start -= 1 }
            while start < at && b[start] == Byte.dot { start += 1 }
            guard start < at, b[at - 1] != Byte.dot else { continue }
            var end = at + 1
            while end < n && isDomainByte(b[end]) { end += 1 }
            while end > at + 1 && (b[end - 1] == Byte.dot || b[end - 1] == Byte.dash) { end -= 1 }
            if isEmailDomain(b, (at + 1)..<end) { found.add(start, end, .email) }
        }
    }

    /// Labels of letters, digits and '-', at least two of them, the last (the TLD) two
    /// or more letters.
    private func isEmailDomain(_ b: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) -> Bool {
        guard !range.isEmpty else { return false }
        var labels = 0
        var labelStart = range.lowerBound
        for i in range.lowerBound...range.upperBound {
            if i == range.upperBound || b[i] == Byte.dot {
                let length = i - labelStart
                guard length > 0 && length <= 63 else { return false }
                labels += 1
                labelStart = i + 1
            }
        }
        guard labels >= 2 else { return false }
        var tld = range.upperBound
        while tld > range.lowerBound && b[tld - 1] != Byte.dot { tld -= 1 }
        guard range.upperBound - tld >= 2 else { return false }
        for i in tld..<range.upperBound where !isAlpha(b[i]) { return false }
        return true
    }

    private func findCards(_ b: UnsafeBufferPointer<UInt8>, into found: inout Matches) {
        let n = b.count
        var i = 0
        while i < n {
            guard isDigit(b[i]), i == 0 || !isWordByte(b[i - 1]) else { i += 1; continue }
            // A run of digit groups joined by single spaces or dashes; most runs (dates,
            // times, ids) are too short to hold a card and are skipped without collecting.
            var j = i
            var digits = 0
            while true {
                let start = j
                while j < n && isDigit(b[j]) { j += 1 }
                digits += j - start
                guard j + 1 < n, b[j] == Byte.space || b[j] == Byte.dash, isDigit(b[j + 1]) else { break }
                j += 1
            }
            let runEnd = j
            guard digits >= 13 else { i = runEnd; continue }
            var groups: [Range<Int>] = []
            j = i
            while j < runEnd {
                let start = j
                while j < runEnd && isDigit(b[j]) { j += 1 }
                groups.append(start..<j)
                j += 1
            }
            let endOK = runEnd == n || !(isWordByte(b[runEnd]) || (b[runEnd] == Byte.dot && runEnd + 1 < n && isDigit(b[runEnd + 1])))
            matchCards(b, groups, lastGroupEndsWord: endOK, into: &found)
            i = runEnd
        }
    }

    /// Within a run of digit groups: one unseparated group of 13–19 digits, or consecutive
    /// groups shaped like a printed card (4-4-4-4 with a last group of 1–4 digits, or 4-6-4 / 4-6-5): Luhn-valid and
    /// starting with 2–6 (the card networks' ranges), so epoch milliseconds and snowflake
    /// ids starting with 1 are left alone.
    private func matchCards(_ b: UnsafeBufferPointer<UInt8>, _ groups: [Range<Int>], lastGroupEndsWord: Bool,
                            into found: inout Matches) {
        var first = 0
        while first < groups.count {
            var matched = -1
            var last = first
            var digits = 0
            while last < groups.count && digits + groups[last].count <= 19 {
                digits += groups[last].count
                let window = groups[first...last]
                let bounded = last < groups.count - 1 || lastGroupEndsWord
                let shaped = last == first ? digits >= 13 : digits >= 13 && isCardShape(window)
                if bounded && shaped && isCardNumber(b, window) { matched = last }
                last += 1
            }
            if matched >= 0 {
                found.add(groups[first].lowerBound, groups[matched].upperBound, .card)
                first = matched + 1
            } else {
                first += 1
            }
        }
    }

    private func isCardShape(_ groups: ArraySlice<Range<Int>>) -> Bool {
        let sizes = groups.map(\.count)
        if sizes.count == 3 && sizes[sizes.startIndex] == 4 && sizes[sizes.startIndex + 1] == 6 {
            return sizes[sizes.startIndex + 2] == 4 || sizes[sizes.startIndex + 2] == 5
        }
        return sizes.dropLast().allSatisfy { $0 == 4 } && (1...4).contains(sizes.last ?? 0)
    }

    private func isCardNumber(_ b: UnsafeBufferPointer<UInt8>, _ groups: ArraySlice<Range<Int>>) -> Bool {
        guard let firstGroup = groups.first, (UInt8(ascii: "2")...UInt8(ascii: "6")).contains(b[firstGroup.lowerBound]) else {
            return false
        }
        var sum = 0
        var double = false
        for group in groups.reversed() {
            for i in group.reversed() {
                var d = Int(b[i] - Byte.zero)
                if double {
                    d *= 2
                    if d > 9 { d -= 9 }
                }
                sum += d
                double.toggle()
            }
        }
        return sum % 10 == 0
    }

    private func findPhones(_ b: UnsafeBufferPointer<UInt8>, into found: inout Matches) {
        let n = b.count
        var i = 0
        while i < n {
            let c = b[i]
            let before: UInt8 = i > 0 ? b[i - 1] : Byte.space
            if c == Byte.plus, i + 1 < n, isDigit(b[i + 1]), !isWordByte(before), before != Byte.plus {
                if let end = internationalPhoneEnd(b, from: i + 1) {
                    found.add(i, end, .phone)
                    i = end
                    continue
                }
            } else if (isDigit(c) || (c == Byte.openParen && i + 1 < n && isDigit(b[i + 1]))) && !isWordByte(before)
                        && before != Byte.dot && before != Byte.dash && before != Byte.slash
                        && before != Byte.colon && before != Byte.plus {
                if let end = nationalPhoneEnd(b, from: i) {
                    found.add(i, end, .phone)
                    i = end
                    continue
                }
            }
            i += 1
        }
    }

    /// After "+": 8–15 digits, separated by at most two of space, '-', '.', '(' and ')';
    /// neither a group past the 15th digit nor one after a group of 6+ digits is part of it.
    private func internationalPhoneEnd(_ b: UnsafeBufferPointer<UInt8>, from start: Int) -> Int? {
        let n = b.count
        var j = start
        var digits = 0
        var end = start
        var endDigits = 0
        while j < n {
            let group = j
            while j < n && isDigit(b[j]) { j += 1 }
            guard digits + (j - group) <= 15 else {
                // A number running on past 15 digits: the phone number ends at the group
                // before, if there was one; one unbroken run that long is no phone number.
                if group == start { return nil }
                break
            }
            digits += j - group
            end = j
            endDigits = digits
            // A long group is a number written compactly ("+14155552671"); digits after a
            // space belong to something else.
            if j - group >= 6 { break }
            var k = j
            while k < n && k - j < 2 && isPhoneSeparator(b[k]) { k += 1 }
            guard k > j, k < n, isDigit(b[k]) else { break }
            j = k
        }
        guard endDigits >= 8, isPhoneEnd(b, end) else { return nil }
        return end
    }

    /// Without "+": 10–15 digits in at least two groups, the first of 1–4 digits (or 2–4
    /// in parentheses), the others 2–4, joined by one kind of separator (space, '-', or
    /// '.' only in the 3-3-4 form), not continuing a number written in the same style, so
    /// dates, times, versions, IPv4 addresses, UUIDs and card-like runs are not phone numbers.
    private func nationalPhoneEnd(_ b: UnsafeBufferPointer<UInt8>, from start: Int) -> Int? {
        let n = b.count
        var j = start
        var groups = 0
        var digits = 0
        var threeThreeFour = true  // the groups so far are 3, 3, 4 digits long
        func readGroup() -> Int {
            let g = j
            while j < n && isDigit(b[j]) { j += 1 }
            return j - g
        }
        if b[j] == Byte.openParen {
            j += 1
            let area = readGroup()
            guard (2...4).contains(area), j < n, b[j] == Byte.closeParen else { return nil }
            j += 1
            if j < n && b[j] == Byte.space { j += 1 }
            // "(555) 123-4567": the group after the parenthesis has no separator before it.
            let next = readGroup()
            guard (2...4).contains(next) else { return nil }
            groups = 2
            digits = area + next
            threeThreeFour = false
        } else {
            let first = readGroup()
            guard first <= 4 else { return nil }
            groups = 1
            digits = first
            threeThreeFour = first == 3
        }
        var end = j
        var separator: UInt8 = 0
        while j + 1 < n, b[j] == Byte.space || b[j] == Byte.dash || b[j] == Byte.dot, isDigit(b[j + 1]) {
            let sep = b[j]
            if separator != 0 && sep != separator { break }
            j += 1
            let size = readGroup()
            // More than 15 digits in one style is a longer sequence (a card, an id), not a phone.
            if digits + size > 15 { return nil }
            guard (2...4).contains(size) else { break }
            separator = sep
            groups += 1
            digits += size
            if size != (groups == 2 ? 3 : 4) || groups > 3 { threeThreeFour = false }
            end = j
        }
        guard groups >= 2, (10...15).contains(digits) else { return nil }
        // "1234 5678 9012 3456" holds no phone number starting at "5678": a group that
        // continues a number in the same style is not a start.
        if start >= 2 && b[start - 1] == separator && isDigit(b[start - 2]) { return nil }
        if separator == Byte.dot && !(threeThreeFour && groups == 3) { return nil }
        guard isPhoneEnd(b, end) else { return nil }
        return end
    }

    private func isPhoneEnd(_ b: UnsafeBufferPointer<UInt8>, _ end: Int) -> Bool {
        guard end < b.count else { return true }
        let c = b[end]
        if isWordByte(c) { return false }
        if c == Byte.dot || c == Byte.dash || c == Byte.colon || c == Byte.slash {
            return !(end + 1 < b.count && isAlnum(b[end + 1]))
        }
        return true
    }
}

// MARK: - Matching support

/// What the privacy rules do below a key (see ``PrivacyMasker/scope(forKey:inherited:)``).
enum PrivacyScope {
    /// Nothing: no key or value below it is looked at.
    case off
    /// Keys are checked and strings masked with these kinds.
    case mask(MaskKinds)
}

/// The kinds of personal data and credentials masked in strings.
struct MaskKinds: OptionSet, Sendable {
    let rawValue: UInt8
    static let emails = MaskKinds(rawValue: 1)
    static let phones = MaskKinds(rawValue: 2)
    static let cards = MaskKinds(rawValue: 4)
    static let tokens = MaskKinds(rawValue: 8)
    static let urls = MaskKinds(rawValue: 16)
    static let all: MaskKinds = [.emails, .phones, .cards, .tokens, .urls]
}

/// The detectors of ``PrivacyMasker``, each a search for one kind of match.
struct Detectors: OptionSet {
    let rawValue: UInt8
    static let urlPasswords = Detectors(rawValue: 1)
    static let queryValues = Detectors(rawValue: 2)
    static let bearerTokens = Detectors(rawValue: 4)
    static let jwts = Detectors(rawValue: 8)
    static let emails = Detectors(rawValue: 16)
    static let cards = Detectors(rawValue: 32)
    static let phones = Detectors(rawValue: 64)
}

/// What one pass over a string saw; each detector runs only when its trigger was seen.
struct Triggers {
    var at = false, query = false, equals = false, plus = false, scheme = false
    var bearer = false, jwt = false
    var digits = 0

    /// The detectors of `kinds` whose triggers were seen: the only ones that can match.
    func detectors(_ kinds: MaskKinds) -> Detectors {
        var run: Detectors = []
        if kinds.contains(.urls) {
            if at && scheme { run.insert(.urlPasswords) }
            if query && equals { run.insert(.queryValues) }
        }
        if kinds.contains(.tokens) {
            if bearer { run.insert(.bearerTokens) }
            if jwt { run.insert(.jwts) }
        }
        if kinds.contains(.emails) && at { run.insert(.emails) }
        if kinds.contains(.cards) && digits >= 13 { run.insert(.cards) }
        if kinds.contains(.phones) && (digits >= 10 || (plus && digits >= 8)) { run.insert(.phones) }
        return run
    }

    init(_ b: UnsafeBufferPointer<UInt8>) {
        let n = b.count
        var i = 0
        while i < n {
            switch b[i] {
            case Byte.zero...Byte.nine: digits &+= 1
            case Byte.at: at = true
            case Byte.question, Byte.hash: query = true
            case Byte.equals: equals = true
            case Byte.plus: plus = true
            case Byte.colon: if i + 2 < n && b[i + 1] == Byte.slash && b[i + 2] == Byte.slash { scheme = true }
            case UInt8(ascii: "b"), UInt8(ascii: "B"): if startsWithBearer(b, at: i) { bearer = true }
            case UInt8(ascii: "e"): if i + 2 < n && b[i + 1] == UInt8(ascii: "y") && b[i + 2] == UInt8(ascii: "J") { jwt = true }
            default: break
            }
            i &+= 1
        }
    }
}

/// The placeholders, in the order that wins when two matches start at the same byte.
private enum Placeholder: UInt8 {
    case redacted, token, jwt, email, card, phone

    var text: StaticString {
        switch self {
        case .redacted: "[redacted]"
        case .token: "[token]"
        case .jwt: "[jwt]"
        case .email: "[email]"
        case .card: "[card]"
        case .phone: "[phone]"
        }
    }
}

/// Byte ranges to replace. Overlapping ranges are merged (nothing inside either survives)
/// and take the placeholder of the one that starts first.
private struct Matches {
    struct Match {
        var start: Int
        var end: Int
        var placeholder: Placeholder
    }

    var items: [Match] = []
    /// '@' signs already used as a URL's userinfo separator, not e-mail addresses.
    var claimedAt: [Int] = []

    var isEmpty: Bool { items.isEmpty }

    mutating func add(_ start: Int, _ end: Int, _ placeholder: Placeholder) {
        items.append(Match(start: start, end: end, placeholder: placeholder))
    }

    func render(_ b: UnsafeBufferPointer<UInt8>) -> String {
        let sorted = items.sorted {
            if $0.start != $1.start { return $0.start < $1.start }
            if $0.placeholder != $1.placeholder { return $0.placeholder.rawValue < $1.placeholder.rawValue }
            return $0.end > $1.end
        }
        var out: [UInt8] = []
        out.reserveCapacity(b.count + 16)
        var position = 0
        var k = 0
        while k < sorted.count {
            let first = sorted[k]
            var end = first.end
            k += 1
            while k < sorted.count && sorted[k].start < end {
                end = max(end, sorted[k].end)
                k += 1
            }
            out.append(contentsOf: b[position..<first.start])
            let text = first.placeholder.text
            out.append(contentsOf: UnsafeBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
            position = end
        }
        out.append(contentsOf: b[position..<b.count])
        return String(decoding: out, as: UTF8.self)
    }
}

/// The sensitive-key substrings, normalised (ASCII lowercase, without '-', '_', ' '),
/// compiled into one deterministic automaton (Aho–Corasick with its failure links
/// folded into the table), so a key is checked against every pattern in one pass over
/// its bytes, one table read per byte, without normalising a copy of it.
///
/// Size: one `UInt32` per (state, column), where states are at most the patterns' total
/// length plus one and columns the distinct bytes in them plus one: about 12 KiB for
/// the default list, 2 MiB at most for the longest list the options accept
/// (``PrivacyOptions/maxSensitiveKeyBytes``).
private struct KeyPatterns: Sendable {
    /// The column of each byte: 1... for the bytes that occur in some pattern (an ASCII
    /// capital shares its lowercase letter's), 0 for every other byte, `skip` for the
    /// bytes that normalising removes.
    private var column = [UInt8](repeating: 0, count: 256)
    private var columns = 1
    /// `table[state * columns + column]`: the next state's row (`state * columns`), with
    /// `accept` set when a pattern ends there. Empty when there are no patterns.
    private var table: [UInt32] = []
    private static let skip: UInt8 = 0xFF
    private static let accept: UInt32 = 1 << 31

    init(_ keys: [String]) {
        // Flat arrays of plain integers only: this runs inside `Cairn.start`, where each
        // new generic type costs the runtime a metadata lookup.
        var bytes: [UInt8] = []   // the normalised patterns, back to back
        var ends: [Int] = []      // where each ends in `bytes`
        bytes.reserveCapacity(keys.reduce(0) { $0 + $1.utf8.count })
        ends.reserveCapacity(keys.count)
        for key in keys {
            let before = bytes.count
            for c in key.utf8 { if let n = normalise(c) { bytes.append(n) } }
            if bytes.count > before { ends.append(bytes.count) }
        }
        guard !ends.isEmpty else { return }
        for c in [Byte.dash, Byte.underscore, Byte.space] { column[Int(c)] = Self.skip }
        for c in bytes where column[Int(c)] == 0 {
            column[Int(c)] = UInt8(columns)  // at most 227 distinct normalised bytes
            columns += 1
        }
        for c in UInt8(ascii: "A")...UInt8(ascii: "Z") { column[Int(c)] = column[Int(lowercaseASCII(c))] }
        // The trie, one row of `columns` entries per state, built in the table itself:
        // an entry is the child state, 0 for none (the root is no one's child). One
        // array of 32-bit entries, room for every state (this runs on the caller's
        // thread in `Cairn.start`: 12 KiB for the default keys).
        var next = [UInt32](repeating: 0, count: (bytes.count + 1) * columns)
        var final = [Bool](repeating: false, count: bytes.count + 1)
        var states = 1
        var start = 0
        for end in ends {
            var state = 0
            for i in start..<end {
                let slot = state * columns + Int(column[Int(bytes[i])])
                if next[slot] == 0 {
                    next[slot] = UInt32(states)
                    states += 1
                }
                state = Int(next[slot])
            }
            final[state] = true
            start = end
        }
        next.removeLast(next.count - states * columns)
        final.removeLast(final.count - states)
        // Breadth first, so a state's failure state is complete before the state itself.
        // In place: a row not yet visited holds only trie children (nonzero), and a
        // missing child becomes where the failure state goes. Through unsafe buffers (the
        // trie's indices are in range by construction): this runs inside `Cairn.start`.
        let cols = columns, accept = Self.accept
        next.withUnsafeMutableBufferPointer { next in
            final.withUnsafeMutableBufferPointer { final in
                // Each state's failure state, then the queue: one scratch allocation.
                let fail = UnsafeMutablePointer<Int32>.allocate(capacity: 2 * states)
                defer { fail.deallocate() }
                fail.initialize(repeating: 0, count: 2 * states)
                let queue = fail + states
                var tail = 0
                for col in 0..<cols where next[col] != 0 {
                    queue[tail] = Int32(next[col])
                    tail &+= 1
                }
                var head = 0
                while head < tail {
                    let state = Int(queue[head])
                    head &+= 1
                    let f = Int(fail[state])
                    if final[f] { final[state] = true }
                    let row = state &* cols, failRow = f &* cols
                    for col in 0..<cols {
                        let via = next[failRow &+ col]
                        let child = next[row &+ col]
                        if child != 0 {
                            fail[Int(child)] = Int32(via)
                            queue[tail] = Int32(child)
                            tail &+= 1
                        } else {
                            next[row &+ col] = via
                        }
                    }
                }
                // Entries hold the next state's row offset, so a step is one add and one load.
                for i in 0..<next.count {
                    let n = Int(next[i])
                    next[i] = UInt32(n &* cols) | (final[n] ? accept : 0)
                }
            }
        }
        table = next
    }

    /// Whether the normalised key contains one of the patterns.
    func matches(_ key: UnsafeBufferPointer<UInt8>) -> Bool {
        guard !table.isEmpty else { return false }
        return column.withUnsafeBufferPointer { column in
            table.withUnsafeBufferPointer { table in
                var row = 0
                for b in key {
                    let col = column[Int(b)]
                    if col == Self.skip { continue }
                    let n = table[row &+ Int(col)]
                    if n & Self.accept != 0 { return true }
                    row = Int(n)
                }
                return false
            }
        }
    }

    private static let extraQueryNames: [[UInt8]] = ["code", "sig", "signature", "key", "accesstoken",
                                                      "refreshtoken", "idtoken", "auth"].map { Array($0.utf8) }

    /// Whether the normalised query parameter name is one of the extra names.
    static func isExtraQueryName(_ name: UnsafeBufferPointer<UInt8>) -> Bool {
        extraQueryNames.contains { extra in
            var k = 0
            for c in name {
                guard let folded = normalise(c) else { continue }
                guard k < extra.count, extra[k] == folded else { return false }
                k += 1
            }
            return k == extra.count
        }
    }
}

/// ``PrivacyOptions/keyRules`` by a hash of the ASCII-lowercased key, so a lookup needs
/// no lowercased copy of the key.
private struct KeyRuleTable: Sendable {
    private struct Rule: Sendable {
        var key: [UInt8]
        var action: KeyAction
    }

    private var table: [UInt64: [Rule]] = [:]

    init(_ rules: [String: KeyAction]) {
        guard !rules.isEmpty else { return }
        // Sorted, so of two rules differing only in case the first in order wins, always.
        for (key, action) in rules.sorted(by: { $0.key < $1.key }) {
            let folded = key.utf8.map(lowercaseASCII)
            let hash = Self.hash(folded.withUnsafeBufferPointer { $0 })
            if table[hash]?.contains(where: { $0.key == folded }) == true { continue }
            table[hash, default: []].append(Rule(key: folded, action: action))
        }
    }

    func action(for key: UnsafeBufferPointer<UInt8>) -> KeyAction? {
        guard !table.isEmpty, let candidates = table[Self.hash(key)] else { return nil }
        for rule in candidates where rule.key.count == key.count {
            if zip(rule.key, key).allSatisfy({ $0 == lowercaseASCII($1) }) { return rule.action }
        }
        return nil
    }

    /// FNV-1a over the ASCII-lowercased bytes.
    private static func hash(_ bytes: UnsafeBufferPointer<UInt8>) -> UInt64 {
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        for c in bytes { h = (h ^ UInt64(lowercaseASCII(c))) &* 0x100_0000_01b3 }
        return h
    }
}

// MARK: - Byte classes

private enum Byte {
    static let tab = UInt8(ascii: "\t"), space = UInt8(ascii: " "), plus = UInt8(ascii: "+")
    static let dash = UInt8(ascii: "-"), dot = UInt8(ascii: "."), slash = UInt8(ascii: "/")
    static let colon = UInt8(ascii: ":"), equals = UInt8(ascii: "="), question = UInt8(ascii: "?")
    static let hash = UInt8(ascii: "#"), at = UInt8(ascii: "@"), underscore = UInt8(ascii: "_")
    static let openParen = UInt8(ascii: "("), closeParen = UInt8(ascii: ")")
    static let zero = UInt8(ascii: "0"), nine = UInt8(ascii: "9")
}

@inline(__always) private func lowercaseASCII(_ c: UInt8) -> UInt8 {
    c &- UInt8(ascii: "A") < 26 ? c | 0x20 : c
}

/// The key-matching normalisation: ASCII lowercase; nil for the ignored '-', '_', ' '.
@inline(__always) private func normalise(_ c: UInt8) -> UInt8? {
    c == Byte.dash || c == Byte.underscore || c == Byte.space ? nil : lowercaseASCII(c)
}

@inline(__always) private func isDigit(_ c: UInt8) -> Bool { c &- Byte.zero < 10 }
@inline(__always) private func isAlpha(_ c: UInt8) -> Bool { (c | 0x20) &- UInt8(ascii: "a") < 26 }
@inline(__always) private func isAlnum(_ c: UInt8) -> Bool { isDigit(c) || isAlpha(c) }
@inline(__always) private func isWordByte(_ c: UInt8) -> Bool { isAlnum(c) || c == Byte.underscore }
@inline(__always) private func isBase64URL(_ c: UInt8) -> Bool { isAlnum(c) || c == Byte.dash || c == Byte.underscore }

/// RFC 6750 b64token: letters, digits and `-._~+/=`.
@inline(__always) private func isTokenByte(_ c: UInt8) -> Bool {
    isAlnum(c) || c == Byte.dash || c == Byte.dot || c == Byte.underscore || c == UInt8(ascii: "~")
        || c == Byte.plus || c == Byte.slash || c == Byte.equals
}

@inline(__always) private func isEmailLocal(_ c: UInt8) -> Bool {
    isAlnum(c) || c == Byte.dot || c == Byte.underscore || c == UInt8(ascii: "%") || c == Byte.plus || c == Byte.dash
}

@inline(__always) private func isDomainByte(_ c: UInt8) -> Bool { isAlnum(c) || c == Byte.dot || c == Byte.dash }

@inline(__always) private func isPhoneSeparator(_ c: UInt8) -> Bool {
    c == Byte.space || c == Byte.dash || c == Byte.dot || c == Byte.openParen || c == Byte.closeParen
}

/// Ends a URL query in free text: whitespace, quotes, angle brackets, backtick.
@inline(__always) private func isQueryTerminator(_ c: UInt8) -> Bool {
    c <= Byte.space || c == UInt8(ascii: "\"") || c == UInt8(ascii: "'") || c == UInt8(ascii: "<")
        || c == UInt8(ascii: ">") || c == UInt8(ascii: "`") || c == 0x7F
}

@inline(__always) private func isParameterSeparator(_ c: UInt8) -> Bool {
    c == UInt8(ascii: "&") || c == UInt8(ascii: ";") || c == Byte.question || c == Byte.hash
}

/// Case-insensitive "bearer" at `i`.
@inline(__always) private func startsWithBearer(_ b: UnsafeBufferPointer<UInt8>, at i: Int) -> Bool {
    guard i + 6 <= b.count else { return false }
    return b[i] | 0x20 == UInt8(ascii: "b") && b[i + 1] | 0x20 == UInt8(ascii: "e") && b[i + 2] | 0x20 == UInt8(ascii: "a")
        && b[i + 3] | 0x20 == UInt8(ascii: "r") && b[i + 4] | 0x20 == UInt8(ascii: "e") && b[i + 5] | 0x20 == UInt8(ascii: "r")
}

private func equals(_ b: UnsafeBufferPointer<UInt8>, _ range: Range<Int>, _ text: String) -> Bool {
    range.count == text.utf8.count && zip(b[range], text.utf8).allSatisfy { $0 == $1 }
}
