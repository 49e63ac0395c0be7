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
    package static let maxSensitiveKeyBytes = 2048

    /// The normalised length of ``sensitiveKeys`` summed (see ``maxSensitiveKeyBytes``).
    package var sensitiveKeyBytes: Int {
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
