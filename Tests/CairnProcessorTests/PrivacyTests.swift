import CairnProcessor
import Foundation
import Testing

@Suite struct PrivacyTests {
    let masker = PrivacyMasker()

    // MARK: - Keys

    @Test(arguments: [
        ("password", true), ("PASSWORD", true), ("user_password_hash", true), ("X-API-Key", true), ("api key", true),
        ("Set-Cookie", true), ("cookie", true), ("Authorization", true), ("accessKeyId", true), ("private_key", true),
        ("session_id", true), ("client-secret", true), ("refresh_token", true), ("ssn", true), ("credit-card", true),
        ("card_number", true), ("CVV", true), ("credentials", true), ("passwd", true),
        ("plan", false), ("name", false), ("email", false), ("pass", false), ("keyboard", false), ("api", false),
        ("card", false), ("secre", false), ("", false), ("tok-en", true), ("ses sion", true),
    ])
    func sensitiveKeys(_ key: String, _ sensitive: Bool) {
        #expect(masker.isSensitive(key: key) == sensitive)
    }

    @Test func sensitiveValuesAreRedactedWhateverTheirType() {
        var counts = RuleCounts()
        let out = masker.apply(["password": "hunter2", "api_key": 42, "session": ["id": "x"], "cookie": nil, "plan": "pro"],
                               counts: &counts)
        #expect(out == ["password": "[redacted]", "api_key": "[redacted]", "session": "[redacted]", "cookie": "[redacted]",
                        "plan": "pro"])
        #expect(counts.redactedKeys == 4 && counts.maskedValues == 0)
    }

    @Test func rulesApplyAtEveryDepth() {
        var counts = RuleCounts()
        let props: [String: CairnValue] = [
            "request": ["headers": ["Authorization": "Bearer abcdefgh12345678", "Accept": "json"],
                        "users": [["email": "bob@example.com", "token": "t"], "call +14155552671"]],
        ]
        let out = masker.apply(props, counts: &counts)
        #expect(out == [
            "request": ["headers": ["Authorization": "[redacted]", "Accept": "json"],
                        "users": [["email": "[email]", "token": "[redacted]"], "call [phone]"]],
        ])
        #expect(counts.redactedKeys == 2 && counts.maskedValues == 2)
    }

    @Test func keyRulesWinOverSensitiveKeys() {
        let options = PrivacyOptions(keyRules: ["Session_ID": .keep, "customer": .redact, "notes": .mask, "raw": .keep],
                                     maskEmails: false, maskPhoneNumbers: false)
        let masker = PrivacyMasker(options: options)
        #expect(!masker.isSensitive(key: "session_id"))      // kept although "session" is sensitive
        #expect(masker.isSensitive(key: "session_start"))    // the rule is for the exact key only
        #expect(masker.isSensitive(key: "CUSTOMER"))         // case-insensitive
        #expect(!masker.isSensitive(key: "customers"))
        var counts = RuleCounts()
        let out = masker.apply([
            "session_id": "s-1", "customer": ["id": 1], "plan": "mail bob@example.com",
            "notes": ["mail bob@example.com", ["password": "x", "deeper": "call +14155552671"]],
            "raw": ["password": "x", "note": "bob@example.com Bearer abcdefgh12345678"],
        ], counts: &counts)
        #expect(out == [
            "session_id": "s-1", "customer": "[redacted]", "plan": "mail bob@example.com",  // e-mail masking is off
            "notes": ["mail [email]", ["password": "[redacted]", "deeper": "call [phone]"]],   // .mask forces it on
            "raw": ["password": "x", "note": "bob@example.com Bearer abcdefgh12345678"],       // .keep touches nothing
        ])
        #expect(counts.redactedKeys == 2 && counts.maskedValues == 2)
    }

    @Test func customSensitiveKeysAreNormalised() {
        let masker = PrivacyMasker(options: PrivacyOptions(sensitiveKeys: ["Tax-ID", "", "--"]))
        #expect(masker.isSensitive(key: "user_tax_id") && masker.isSensitive(key: "TAXID"))
        #expect(!masker.isSensitive(key: "password") && !masker.isSensitive(key: "plan"))
    }

    @Test func disabledPrivacyChangesNothing() {
        let masker = PrivacyMasker(options: PrivacyOptions(enabled: false, keyRules: ["plan": .redact]))
        let props: [String: CairnValue] = ["password": "hunter2", "plan": "pro", "mail": "bob@example.com",
                                           "nested": ["token": "abc", "card": "4111 1111 1111 1111"]]
        var counts = RuleCounts()
        #expect(masker.apply(props, counts: &counts) == props)
        #expect(counts.isEmpty)
        #expect(masker.mask("bob@example.com") == "bob@example.com")
        #expect(masker.maskURL("/p?token=abc") == "/p?token=abc")
        #expect(!masker.isSensitive(key: "password"))
    }

    @Test func maskingSwitchesAreIndependent() {
        let text = "bob@example.com +14155552671 4111 1111 1111 1111 Bearer abcdefgh12345678 /p?token=abc"
        let none = PrivacyMasker(options: PrivacyOptions(maskEmails: false, maskPhoneNumbers: false, maskCardNumbers: false,
                                                         maskTokens: false, maskURLQueries: false))
        #expect(none.mask(text) == text)
        #expect(PrivacyMasker(options: PrivacyOptions(maskEmails: false)).mask(text)
            == "bob@example.com [phone] [card] Bearer [token] /p?token=[redacted]")
        #expect(PrivacyMasker(options: PrivacyOptions(maskCardNumbers: false, maskURLQueries: false)).mask(text)
            == "[email] [phone] 4111 1111 1111 1111 Bearer [token] /p?token=abc")
        #expect(masker.mask(text) == "[email] [phone] [card] Bearer [token] /p?token=[redacted]")
    }

    // MARK: - Values

    @Test(arguments: [
        ("contact bob.smith+tag@example.co.uk now", "contact [email] now"),
        ("a@b.io", "[email]"),
        ("Mail: JOHN_DOE@Example.COM.", "Mail: [email]."),
        ("<first-last@sub.example-mail.org>", "<[email]>"),
        ("x,y@z.com;w@v.net", "x,[email];[email]"),
        ("@mention", "@mention"),
        ("foo@localhost", "foo@localhost"),
        ("a@b.c", "a@b.c"),
        ("price 5@3.50", "price 5@3.50"),
        ("x@.com", "x@.com"),
        ("a@b.com1", "a@b.com1"),
        ("@", "@"),
        (".@x.com", ".@x.com"),
    ])
    func emails(_ input: String, _ expected: String) {
        #expect(masker.mask(input) == expected)
    }

    @Test(arguments: [
        ("+1 555 123 4567", "[phone]"),
        ("+14155552671", "[phone]"),
        ("call (555) 123-4567 today", "call [phone] today"),
        ("555-123-4567", "[phone]"),
        ("555.123.4567", "[phone]"),
        ("+44 20 7946 0958", "[phone]"),
        ("020 7946 0958", "[phone]"),
        ("+1 (555) 123-4567", "[phone]"),
        ("tel:+33123456789", "tel:[phone]"),
        ("1-800-555-1234", "[phone]"),
        ("01 23 45 67 89", "[phone]"),
        ("+14155552671 12345", "[phone] 12345"),
        ("+1234567", "+1234567"),                     // 7 digits
        ("+1234567890123456", "+1234567890123456"),   // 16 digits
        ("1+23456789012", "1+23456789012"),
        ("1e+10", "1e+10"),
        ("1234567890", "1234567890"),                 // a plain number, no separator
        ("id 5551234567", "id 5551234567"),
        ("2026-12-02T10:11:12Z", "2026-12-02T10:11:12Z"),
        ("2026-12-02 10:11:12", "2026-12-02 10:11:12"),
        ("12:30:45.123456", "12:30:45.123456"),
        ("1.2.3", "1.2.3"),
        ("v1.22.333.4444", "v1.22.333.4444"),
        ("10.0.0.1", "10.0.0.1"),
        ("192.168.100.200", "192.168.100.200"),
        ("3.14159265358979", "3.14159265358979"),
        ("550e8400-e29b-41d4-a716-446655440000", "550e8400-e29b-41d4-a716-446655440000"),
        ("12345678-1234-1234-1234-123456789012", "12345678-1234-1234-1234-123456789012"),
        ("deadbeef12345678", "deadbeef12345678"),
        ("order 42 of 100", "order 42 of 100"),
        ("555-123-4567x", "555-123-4567x"),
    ])
    func phones(_ input: String, _ expected: String) {
        #expect(masker.mask(input) == expected)
    }

    @Test(arguments: [
        ("4111 1111 1111 1111", "[card]"),
        ("4111-1111-1111-1111", "[card]"),
        ("4111111111111111", "[card]"),
        ("card: 5500 0000 0000 0004.", "card: [card]."),
        ("amex 3782 822463 10005", "amex [card]"),
        ("qty 2 4111 1111 1111 1111", "qty 2 [card]"),
        ("4111 1111 1111 1111 2026", "[card] 2026"),
        ("4111 1111 1111 1111 5x", "[card] 5x"),
        ("1234 5678 9012 3456", "1234 5678 9012 3456"),   // not Luhn-valid
        ("4111 1111 1111 1112", "4111 1111 1111 1112"),   // not Luhn-valid
        ("1733134272000", "1733134272000"),               // epoch milliseconds
        ("x4111111111111111", "x4111111111111111"),
        ("4111111111111111abc", "4111111111111111abc"),
        ("41111111111111111111", "41111111111111111111"), // 20 digits
        ("4111  1111  1111  1111", "4111  1111  1111  1111"),
    ])
    func cards(_ input: String, _ expected: String) {
        #expect(masker.mask(input) == expected)
    }

    static let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjMifQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"

    @Test(arguments: [
        ("Authorization: Bearer abcdef123456", "Authorization: Bearer [token]"),
        ("bearer    xyz.abc-123_456~+/=", "bearer    [token]"),
        ("BEARER\tabcdefgh", "BEARER\t[token]"),
        ("Bearer of bad news", "Bearer of bad news"),
        ("Bearer:abcdefghijk", "Bearer:abcdefghijk"),
        ("forbearer abcdefghijk", "forbearer abcdefghijk"),
        (jwt, "[jwt]"),
        ("id_token=\(jwt)&x=1", "id_token=[jwt]&x=1"),
        ("eyJhbGciOiJub25lIn0.eyJzdWIiOiIxIn0.", "[jwt]"),
        ("jwe eyJhbGciOiJSU0EifQ.a.b.c.d end", "jwe [jwt] end"),
        ("Bearer \(jwt)", "Bearer [token]"),
        ("eyJhbGciOiJIUzI1NiJ9", "eyJhbGciOiJIUzI1NiJ9"),
        ("keyJhbGciOiJIUzI1NiJ9.a.b", "keyJhbGciOiJIUzI1NiJ9.a.b"),
        ("eyJ.a.b", "eyJ.a.b"),
    ])
    func tokens(_ input: String, _ expected: String) {
        #expect(masker.mask(input) == expected)
    }

    @Test(arguments: [
        ("https://h/p?a=1&token=abc#frag", "https://h/p?a=1&token=[redacted]#frag"),
        ("/p?x=1", "/p?x=1"),
        ("/p?code=xyz&state=ok", "/p?code=[redacted]&state=ok"),
        ("https://h/cb#access_token=abc&expires_in=3600", "https://h/cb#access_token=[redacted]&expires_in=3600"),
        ("https://user:pw@h.example.com/x", "https://user:[redacted]@h.example.com/x"),
        ("https://h/?next=/x?sig=abc", "https://h/?next=/x?sig=[redacted]"),
        ("https://h/?Signature=abc;key=k&KEY=", "https://h/?Signature=[redacted];key=[redacted]&KEY="),
        ("https://h/?monkey=1&keyboard=2&zipcode=3&author=4", "https://h/?monkey=1&keyboard=2&zipcode=3&author=4"),
        ("https://h/?api_key=1&X-Amz-Credential=2&Password=3", "https://h/?api_key=[redacted]&X-Amz-Credential=[redacted]&Password=[redacted]"),
        ("?auth=a&refresh_token=b&id_token=c&access_token=d", "?auth=[redacted]&refresh_token=[redacted]&id_token=[redacted]&access_token=[redacted]"),
        ("https://h/p?token", "https://h/p?token"),
        ("https://h/?a=%20&b", "https://h/?a=%20&b"),
    ])
    func urls(_ input: String, _ expected: String) {
        #expect(masker.maskURL(input) == expected)
        #expect(masker.mask(input) == expected)
    }

    @Test func urlQueriesInsideText() {
        #expect(masker.mask("GET https://h/p?token=abc HTTP/1.1") == "GET https://h/p?token=[redacted] HTTP/1.1")
        #expect(masker.mask("see \"/cb?code=123\" or 'x?sig=9'") == "see \"/cb?code=[redacted]\" or 'x?sig=[redacted]'")
        #expect(masker.mask("Really? token=abc") == "Really? token=abc")
        // maskURL masks only URL parts, whatever the other switches say.
        #expect(masker.maskURL("https://h/?email=bob@example.com&code=1") == "https://h/?email=bob@example.com&code=[redacted]")
        #expect(masker.mask("https://h/?email=bob@example.com&code=1") == "https://h/?email=[email]&code=[redacted]")
        let off = PrivacyMasker(options: PrivacyOptions(maskURLQueries: false))
        #expect(off.mask("/p?token=abc") == "/p?token=abc")
        #expect(off.maskURL("/p?token=abc") == "/p?token=[redacted]")
    }

    @Test func keyRulesApplyToQueryNames() {
        let masker = PrivacyMasker(options: PrivacyOptions(keyRules: ["code": .keep, "ref": .redact]))
        #expect(masker.maskURL("/cb?code=1&ref=2&token=3") == "/cb?code=1&ref=[redacted]&token=[redacted]")
    }

    // MARK: - Fast path and stability

    static let plainValues = ["GET /orders/42", "2026-12-02T10:11:12Z", "2026-12-02T10:11:12.512+01:00", "1.2.3",
                              "550e8400-e29b-41d4-a716-446655440000", "10.0.0.1", "192.168.1.254", "deadbeefcafe0123",
                              "0x7f3a2b1c9d8e", "user 1234 bought 3 items for 99.95", "", "ünïcödé 🇫🇷",
                              "POST /api/v2/orders/123456/items?limit=10&offset=20", "a+b", "what? nothing.",
                              "1234567890", "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
                              "The bearer of the news", "keyJar", "#42 fixed"]

    @Test(arguments: plainValues)
    func plainValuesAreUntouched(_ value: String) {
        #expect(masker.mask(value) == value)
    }

    @Test func plainPropertiesAreReturnedUncounted() {
        var props: [String: CairnValue] = ["count": .int(1_234_567_890), "big": .int(4_111_111_111_111_111), "ok": true,
                                           "ratio": .double(4111111111111111), "nested": [["a": "b"], nil]]
        for (i, value) in Self.plainValues.enumerated() { props["p\(i)"] = .string(value) }
        var counts = RuleCounts()
        #expect(masker.apply(props, counts: &counts) == props)
        #expect(counts.isEmpty)
    }

    @Test func unchangedStringsKeepTheirStorage() {
        let text = "GET /orders/42 from a long enough string to live on the heap"
        let masked = masker.mask(text)
        let before = text.utf8.withContiguousStorageIfAvailable { $0.baseAddress }
        let after = masked.utf8.withContiguousStorageIfAvailable { $0.baseAddress }
        #expect(before != nil && before == after)
        // Also when a detector ran (13+ digits, an '@') and found nothing.
        let busy = "2026-12-02T10:11:12Z 2026-12-02T10:11:13Z foo@localhost"
        #expect(busy.utf8.withContiguousStorageIfAvailable { $0.baseAddress }
            == masker.mask(busy).utf8.withContiguousStorageIfAvailable { $0.baseAddress })
    }

    @Test func maskingIsStable() {
        let text = "bob@example.com +14155552671 4111 1111 1111 1111 Bearer abcdefgh12345678 \(Self.jwt) "
            + "https://u:p@h.io/p?token=abc&code=1#id_token=x (555) 123-4567"
        let once = masker.mask(text)
        #expect(once == "[email] [phone] [card] Bearer [token] [jwt] "
            + "https://u:[redacted]@h.io/p?token=[redacted]&code=[redacted]#id_token=[redacted] [phone]")
        #expect(masker.mask(once) == once)
        var counts = RuleCounts()
        _ = masker.apply(["a": .string(once), "password": "[redacted]"], counts: &counts)
        #expect(counts.isEmpty)
    }
}
