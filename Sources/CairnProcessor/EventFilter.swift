import CairnBase
// The server-sent filter of auto-tracking SDKs: allow and deny lists of glob patterns for
// event names and paths (an HTTP route). Patterns are compiled once; matching walks the
// UTF-8 bytes with two-pointer backtracking, so it takes at most
// O(pattern length × text length) steps and allocates nothing.

/// Allow and deny lists for event names and paths.
///
/// Pattern syntax (case-sensitive, everything not listed here is literal; there is no
/// escape):
/// - `?` matches exactly one character (one Unicode scalar); in paths, not `/`;
/// - `*` matches any run of characters, possibly empty; in paths, not `/`;
/// - `**` (two or more `*` in a row) matches any run of characters, `/` included.
///
/// In names, `*` and `**` are the same. A list that is empty allows everything; a match in
/// a deny list wins over the allow list. Path lists only apply to events that have a path.
public struct EventFilterOptions: Sendable, Equatable {
    /// Names that are allowed; empty allows all.
    public var allowNames: [String]
    /// Names that are dropped, even when allowed.
    public var denyNames: [String]
    /// Paths that are allowed; empty allows all.
    public var allowPaths: [String]
    /// Paths that are dropped, even when allowed.
    public var denyPaths: [String]

    /// Lists of patterns; all empty (the default) lets every event through.
    public init(allowNames: [String] = [], denyNames: [String] = [], allowPaths: [String] = [],
                denyPaths: [String] = []) {
        self.allowNames = allowNames
        self.denyNames = denyNames
        self.allowPaths = allowPaths
        self.denyPaths = denyPaths
    }
}

/// Decides whether an event passes the filter.
///
/// ```swift
/// let filter = EventFilter(options: EventFilterOptions(denyNames: ["debug_*"],
///                                                      denyPaths: ["/health", "/internal/**"]))
/// filter.allows(name: "http_request", path: "/internal/metrics")  // false
/// ```
package struct EventFilter: Sendable {
    private let allowNames: [GlobPattern]
    private let denyNames: [GlobPattern]
    private let allowPaths: [GlobPattern]
    private let denyPaths: [GlobPattern]

    /// A filter for `options`; the patterns are compiled here, once.
    package init(options: EventFilterOptions) {
        allowNames = options.allowNames.map { GlobPattern($0, separatorAware: false) }
        denyNames = options.denyNames.map { GlobPattern($0, separatorAware: false) }
        allowPaths = options.allowPaths.map { GlobPattern($0, separatorAware: true) }
        denyPaths = options.denyPaths.map { GlobPattern($0, separatorAware: true) }
    }

    /// Whether any path pattern is set (else the path need not be looked up).
    package var filtersPaths: Bool { !allowPaths.isEmpty || !denyPaths.isEmpty }

    /// `true` when the event passes: its name is not denied and is allowed (or the allow
    /// list is empty), and, when it has a path, the same holds for the path. An event
    /// without a path is not subject to the path lists.

    package func allows(name: String, path: String?) -> Bool {
        guard Self.passes(name, allow: allowNames, deny: denyNames) else { return false }
        guard let path else { return true }
        return Self.passes(path, allow: allowPaths, deny: denyPaths)
    }

    @inline(__always)
    private static func passes(_ text: String, allow: [GlobPattern], deny: [GlobPattern]) -> Bool {
        if allow.isEmpty && deny.isEmpty { return true }
        return withUTF8Bytes(text) { bytes in
            for pattern in deny where pattern.matches(bytes) { return false }
            if allow.isEmpty { return true }
            for pattern in allow where pattern.matches(bytes) { return true }
            return false
        }
    }
}

/// One compiled pattern.
private struct GlobPattern: Sendable {
    private enum Token: Sendable {
        case literal(UInt8)
        /// `?`: one Unicode scalar (not `/` in paths).
        case one
        /// `*` in paths: a run without `/`.
        case segmentRun
        /// `**`, or `*` in names: any run.
        case anyRun
    }

    private let tokens: [Token]
    /// The pattern's bytes when it has no wildcard: matching is then a comparison.
    private let literal: [UInt8]?
    /// Whether `?` and `*` stop at `/`.
    private let separatorAware: Bool

    init(_ pattern: String, separatorAware: Bool) {
        self.separatorAware = separatorAware
        let bytes = Array(pattern.utf8)
        var tokens: [Token] = []
        tokens.reserveCapacity(bytes.count)
        var i = 0
        while i < bytes.count {
            switch bytes[i] {
            case UInt8(ascii: "*"):
                var end = i + 1
                while end < bytes.count && bytes[end] == UInt8(ascii: "*") { end += 1 }
                tokens.append(end - i >= 2 || !separatorAware ? .anyRun : .segmentRun)
                i = end
            case UInt8(ascii: "?"):
                tokens.append(.one)
                i += 1
            case let byte:
                tokens.append(.literal(byte))
                i += 1
            }
        }
        self.tokens = tokens
        literal = tokens.allSatisfy({ if case .literal = $0 { true } else { false } }) ? bytes : nil
    }

    /// Two-pointer backtracking. Only the latest run of each kind needs remembering: a later
    /// run can absorb whatever an earlier one could (the `**` after any earlier run, and a
    /// `*` after an earlier `*`, because everything between them matched without crossing
    /// `/`). When the latest `*` cannot grow over a `/`, the latest `**` grows instead.
    func matches(_ text: UnsafeBufferPointer<UInt8>) -> Bool {
        if let literal {
            return literal.count == text.count && literal.withUnsafeBufferPointer { $0.elementsEqual(text) }
        }
        return tokens.withUnsafeBufferPointer { pattern in
            let slash = UInt8(ascii: "/")
            var p = 0, t = 0
            // The latest run (pattern index after it, text index where it would grow).
            var runP = -1, runT = 0
            // The latest `**` (or `*` in names).
            var anyP = -1, anyT = 0
            while t < text.count {
                if p < pattern.count {
                    switch pattern[p] {
                    case .literal(let byte) where byte == text[t]:
                        p += 1
                        t += 1
                        continue
                    case .one where isScalarStart(text[t]) && !(separatorAware && text[t] == slash):
                        p += 1
                        t += 1
                        while t < text.count && !isScalarStart(text[t]) { t += 1 }
                        continue
                    case .segmentRun:
                        p += 1
                        runP = p
                        runT = t
                        continue
                    case .anyRun:
                        p += 1
                        runP = p
                        runT = t
                        anyP = p
                        anyT = t
                        continue
                    default:
                        break
                    }
                }
                // Mismatch: let the latest run absorb one more byte.
                if runP >= 0 && runP != anyP && text[runT] != slash {
                    runT += 1
                    p = runP
                    t = runT
                } else if anyP >= 0 {
                    anyT += 1
                    runP = anyP
                    runT = anyT
                    p = anyP
                    t = anyT
                } else {
                    return false
                }
            }
            while p < pattern.count {
                switch pattern[p] {
                case .segmentRun, .anyRun: p += 1
                default: return false
                }
            }
            return true
        }
    }

    @inline(__always)
    private func isScalarStart(_ byte: UInt8) -> Bool { byte & 0xC0 != 0x80 }
}
