// What the privacy rules share while matching: scopes, the kinds of masking, the
// pre-scan's triggers, placeholders and the ranges found.

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
enum Placeholder: UInt8 {
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
struct Matches {
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
