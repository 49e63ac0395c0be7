import CairnProcessor
import Testing

/// Allow and deny lists, and the glob patterns they hold.
@Suite struct FilterTests {
    static func pathMatches(_ pattern: String, _ path: String) -> Bool {
        EventFilter(options: EventFilterOptions(allowPaths: [pattern])).allows(name: "request", path: path)
    }

    static func nameMatches(_ pattern: String, _ name: String) -> Bool {
        EventFilter(options: EventFilterOptions(allowNames: [pattern])).allows(name: name, path: nil)
    }

    static let pathCases: [(String, String, Bool)] = [
        ("/health", "/health", true),
        ("/health", "/health/", false),
        ("/health", "/Health", false),
        ("/users/*", "/users/42", true),
        ("/users/*", "/users/", true),
        ("/users/*", "/users/42/orders", false),
        ("/users/*/orders", "/users/42/orders", true),
        ("/users/*/orders", "/users/4/2/orders", false),
        ("/api/**", "/api/v1/users/42", true),
        ("/api/**", "/api/", true),
        ("/api/**", "/apiv1", false),
        ("**/edit", "/a/b/c/edit", true),
        ("**/edit", "/a/b/c/editor", false),
        ("/a/**/z", "/a/z", false),
        ("/a/**/z", "/a//z", true),
        ("/a/**/z", "/a/b/c/z", true),
        ("/a/**/*.json", "/a/b/c/data.json", true),
        ("/a/**/*.json", "/a/b/c/data.json/x", false),
        ("/a/**/b*c", "/a/x/bc/y/bxxc", true),
        ("/a/**/b*c", "/a/x/b/c", false),
        ("/a/***", "/a/b/c", true),
        ("/v?/items", "/v1/items", true),
        ("/v?/items", "/v12/items", false),
        ("/v?/items", "/v/items", false),
        ("/a?b", "/a/b", false),
        ("/caf?", "/café", true),
        ("/caf??", "/café", false),
        ("/*é*", "/xéy", true),
        ("*", "", true),
        ("", "", true),
        ("", "/", false),
        ("/*/*", "/a/b", true),
        ("/*/*", "/a/b/c", false),
        ("*x*y*", "axbyc", true),
        ("*x*y*", "ax/byc", false),
        ("**x*y*", "a/x/byc", false),
        ("**x*y*", "a/b/xzyc", true),
    ]

    @Test func pathPatterns() {
        for (pattern, path, expected) in Self.pathCases {
            #expect(Self.pathMatches(pattern, path) == expected, "\(pattern) vs \(path)")
        }
    }

    @Test func namePatterns() {
        let cases: [(String, String, Bool)] = [
            ("checkout", "checkout", true),
            ("checkout", "Checkout", false),
            ("checkout", "checkout_done", false),
            ("debug_*", "debug_cache", true),
            ("debug_*", "debug_", true),
            ("debug_*", "xdebug_", false),
            ("*", "a/b/c", true),
            ("http.*", "http.GET /users/1", true),
            ("span_?", "span_a", true),
            ("span_?", "span_/", true),
            ("span_?", "span_ab", false),
            ("*_done", "job_done", true),
            ("*_done", "job_done_", false),
        ]
        for (pattern, name, expected) in cases {
            #expect(Self.nameMatches(pattern, name) == expected, "\(pattern) vs \(name)")
        }
    }

    @Test func denyWinsOverAllow() {
        let filter = EventFilter(options: EventFilterOptions(
            allowNames: ["http_*"], denyNames: ["http_health*"],
            allowPaths: ["/api/**"], denyPaths: ["/api/internal/**"]))
        #expect(filter.allows(name: "http_request", path: "/api/users"))
        #expect(!filter.allows(name: "http_healthcheck", path: "/api/users"))
        #expect(!filter.allows(name: "page_view", path: "/api/users"))
        #expect(!filter.allows(name: "http_request", path: "/api/internal/metrics"))
        #expect(!filter.allows(name: "http_request", path: "/static/app.js"))
        #expect(filter.allows(name: "http_request", path: nil))
    }

    @Test func emptyListsAllowEverything() {
        let open = EventFilter(options: EventFilterOptions())
        #expect(open.allows(name: "anything", path: "/any/path"))
        #expect(open.allows(name: "", path: nil))
        let denyOnly = EventFilter(options: EventFilterOptions(denyNames: ["secret"], denyPaths: ["/admin/**"]))
        #expect(denyOnly.allows(name: "public", path: "/home"))
        #expect(!denyOnly.allows(name: "secret", path: "/home"))
        #expect(!denyOnly.allows(name: "public", path: "/admin/users"))
        #expect(denyOnly.allows(name: "public", path: "/admin"))
    }

    @Test func severalAllowPatterns() {
        let filter = EventFilter(options: EventFilterOptions(allowNames: ["signup", "checkout_*", "ping"]))
        #expect(filter.allows(name: "signup", path: nil))
        #expect(filter.allows(name: "checkout_paid", path: nil))
        #expect(filter.allows(name: "ping", path: nil))
        #expect(!filter.allows(name: "pong", path: nil))
    }

    /// Backtracking that re-explores every way the stars can split the text would not finish.
    @Test func pathologicalPatternsFinish() {
        let text = String(repeating: "a", count: 10_000)
        #expect(!Self.nameMatches("*a*a*a*a*a*b", text))
        #expect(Self.nameMatches("*a*a*a*a*a*b", text + "b"))
        #expect(!Self.pathMatches("*a*a*a*a*a*b", text))
        #expect(!Self.pathMatches("**a**a**a**a**a**b", text))
        #expect(!Self.pathMatches("**a*a*a**a*a*b", String(repeating: "aa/", count: 3_000)))
        #expect(Self.pathMatches("**a*a*a**a*a*b", String(repeating: "aa/", count: 3_000) + "aaaaab"))
    }

    /// The pattern rules written as plain recursion over Unicode scalars: slow, but
    /// obviously right for short inputs.
    static func reference(_ pattern: [Unicode.Scalar], _ text: [Unicode.Scalar], path: Bool) -> Bool {
        guard let first = pattern.first else { return text.isEmpty }
        if first == "*" {
            var stars = 0
            while stars < pattern.count && pattern[stars] == "*" { stars += 1 }
            let rest = Array(pattern[stars...])
            let crossesSlash = !path || stars >= 2
            for taken in 0...text.count {
                if taken > 0 && !crossesSlash && text[taken - 1] == "/" { return false }
                if reference(rest, Array(text[taken...]), path: path) { return true }
            }
            return false
        }
        guard let head = text.first else { return false }
        if first == "?" ? !(path && head == "/") : first == head {
            return reference(Array(pattern.dropFirst()), Array(text.dropFirst()), path: path)
        }
        return false
    }

    /// Every pattern and text over a small alphabet, matched both ways.
    @Test func agreesWithReferenceMatcher() {
        var state: UInt64 = 0x2545_F491_4F6C_DD1D
        func next(_ bound: Int) -> Int {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Int((state >> 33) % UInt64(bound))
        }
        let patternAlphabet: [Unicode.Scalar] = ["a", "b", "/", "é", "?", "*", "*", "*"]
        let textAlphabet: [Unicode.Scalar] = ["a", "b", "/", "é"]
        var disagreements: [String] = []
        for _ in 0..<20_000 {
            let pattern = (0..<next(7)).map { _ in patternAlphabet[next(patternAlphabet.count)] }
            let text = (0..<next(9)).map { _ in textAlphabet[next(textAlphabet.count)] }
            let p = String(String.UnicodeScalarView(pattern)), t = String(String.UnicodeScalarView(text))
            if Self.pathMatches(p, t) != Self.reference(pattern, text, path: true) { disagreements.append("path \(p) \(t)") }
            if Self.nameMatches(p, t) != Self.reference(pattern, text, path: false) { disagreements.append("name \(p) \(t)") }
        }
        let count = disagreements.count
        #expect(count == 0, "first disagreements: \(disagreements.prefix(10))")
    }
}
