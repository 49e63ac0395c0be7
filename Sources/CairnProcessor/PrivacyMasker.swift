import CairnBase
// The privacy rules' entry points (docs/FORMATS.md, "Sanitising and privacy rules"):
// key redaction and value masking of properties and strings, and the scopes the
// processor's single-pass encoder asks for. The value detectors are in
// PrivacyDetectors.swift, the key patterns in PrivacyKeyRules.swift.

package struct PrivacyMasker: Sendable {
    /// The options this masker applies.
    package let options: PrivacyOptions
    private let kinds: MaskKinds
    let patterns: KeyPatterns
    let rules: KeyRuleTable

    /// A masker for `options`.
    package init(options: PrivacyOptions = .init()) {
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
    package func apply(_ properties: [String: CairnValue], counts: inout RuleCounts) -> [String: CairnValue] {
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
    package func mask(_ text: String) -> String {
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
    package func maskURL(_ url: String) -> String {
        guard options.enabled else { return url }
        return maskText(url, kinds: .urls) ?? url
    }

    /// Whether a key is sensitive under these options: its value would be redacted.
    package func isSensitive(key: String) -> Bool {
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
}
