// Demangling through the runtimes already loaded in every Swift process on Linux:
// libswiftCore exports `swift_demangle`, and libswiftCore links libstdc++, which exports
// `__cxa_demangle`. Both are looked up once with dlsym, so nothing links them directly.
#if canImport(Glibc)
import Glibc
#endif

private typealias SwiftDemangle = @Sendable @convention(c) (
    UnsafePointer<CChar>?, Int, UnsafeMutablePointer<CChar>?, UnsafeMutablePointer<Int>?, UInt32
) -> UnsafeMutablePointer<CChar>?

private typealias CxxDemangle = @Sendable @convention(c) (
    UnsafePointer<CChar>?, UnsafeMutablePointer<CChar>?, UnsafeMutablePointer<Int>?, UnsafeMutablePointer<Int32>?
) -> UnsafeMutablePointer<CChar>?

/// The process's demangler entry points; nil when a runtime does not export one.
private struct Demanglers: Sendable {
    let swift: SwiftDemangle?
    let cxx: CxxDemangle?

    static let shared = Demanglers(
        swift: dlsym(nil, "swift_demangle").map { unsafeBitCast($0, to: SwiftDemangle.self) },
        cxx: dlsym(nil, "__cxa_demangle").map { unsafeBitCast($0, to: CxxDemangle.self) })
}

extension Symbolizer {
    /// Demangles a Swift (`$s…`, `$S…`, `_T0…`, `$e…`) or C++ (`_Z…`) symbol; returns the
    /// input unchanged if it is neither or demangling fails.
    ///
    /// ```swift
    /// Symbolizer.demangle("$sSi")           // "Swift.Int"
    /// Symbolizer.demangle("_ZN3foo3barEi")  // "foo::bar(int)"
    /// Symbolizer.demangle("main")           // "main"
    /// ```
    package static func demangle(_ symbol: String) -> String {
        let demanglers = Demanglers.shared
        var result: UnsafeMutablePointer<CChar>?
        if ["$s", "$S", "_T0", "$e"].contains(where: symbol.hasPrefix), let swiftDemangle = demanglers.swift {
            result = symbol.withCString { swiftDemangle($0, strlen($0), nil, nil, 0) }
        } else if symbol.hasPrefix("_Z"), let cxxDemangle = demanglers.cxx {
            var status: Int32 = -1
            result = symbol.withCString { cxxDemangle($0, nil, nil, &status) }
            if status != 0 {
                free(result)
                result = nil
            }
        }
        guard let result else { return symbol }
        defer { free(result) }
        let demangled = String(cString: result)
        if demangled.isEmpty { return symbol }
        return symbol.hasPrefix("_Z") ? demangled : sugared(demangled)
    }

    /// The type sugar `swift-demangle` prints, which the runtime's `swift_demangle`
    /// leaves out: `Swift.Optional<T>` as `T?`, `Swift.Array<T>` as `[T]`,
    /// `Swift.Dictionary<K, V>` as `[K : V]`, nested at any depth.
    ///
    /// ```swift
    /// Symbolizer.sugared("f(Swift.Optional<Swift.Int>) -> Swift.Array<Swift.String>")
    /// // "f(Swift.Int?) -> [Swift.String]"
    /// ```
    package static func sugared(_ text: String) -> String {
        guard text.contains("Swift.Optional<") || text.contains("Swift.Array<") || text.contains("Swift.Dictionary<")
        else { return text }
        return sugar(Array(text)[...], depth: 0)
    }

    private static let sugarable: [(prefix: [Character], kind: Int)] =
        [(Array("Swift.Optional<"), 0), (Array("Swift.Array<"), 1), (Array("Swift.Dictionary<"), 2)]

    private static func sugar(_ c: ArraySlice<Character>, depth: Int) -> String {
        guard depth < 64 else { return String(c) }
        var out = ""
        var i = c.startIndex
        scan: while i < c.endIndex {
            let atWordStart = i == c.startIndex || !(c[i - 1].isLetter || c[i - 1].isNumber || c[i - 1] == "_" || c[i - 1] == ".")
            if atWordStart && c[i] == "S" {
                for (prefix, kind) in sugarable where c[i...].starts(with: prefix) {
                    let open = i + prefix.count - 1
                    guard let close = matchingClose(c, open: open) else { continue }
                    let args = splitTopLevel(c[(open + 1)..<close]).map {
                        sugar($0, depth: depth + 1).trimmingSpaces
                    }
                    // `Swift.Array<A where A == T>` names a constrained extension, not a type.
                    let sugared: String?
                    switch args.contains(where: hasTopLevelWhere) ? (-1, 0) : (kind, args.count) {
                    case (0, 1): sugared = (needsParentheses(args[0]) ? "(\(args[0]))" : args[0]) + "?"
                    case (1, 1): sugared = "[\(args[0])]"
                    case (2, 2): sugared = "[\(args[0]) : \(args[1])]"
                    default: sugared = nil
                    }
                    guard let sugared else { continue }
                    out += sugared
                    i = close + 1
                    continue scan
                }
            }
            out.append(c[i])
            i += 1
        }
        return out
    }

    /// The index of the `>` closing the `<` at `open`; the `>` of an arrow (`->`) does
    /// not count.
    private static func matchingClose(_ c: ArraySlice<Character>, open: Int) -> Int? {
        var depth = 0
        var i = open
        while i < c.endIndex {
            switch c[i] {
            case "<", "(", "[": depth += 1
            case ">" where i > c.startIndex && c[i - 1] == "-": break
            case ">", ")", "]":
                depth -= 1
                if depth == 0 { return c[i] == ">" ? i : nil }
            default: break
            }
            i += 1
        }
        return nil
    }

    /// `a, b` split at its top-level commas.
    private static func splitTopLevel(_ c: ArraySlice<Character>) -> [ArraySlice<Character>] {
        var parts: [ArraySlice<Character>] = []
        var depth = 0
        var start = c.startIndex
        for i in c.indices {
            switch c[i] {
            case "<", "(", "[": depth += 1
            case ">" where i > c.startIndex && c[i - 1] == "-": break
            case ">", ")", "]": depth -= 1
            case "," where depth == 0:
                parts.append(c[start..<i])
                start = i + 1
            default: break
            }
        }
        parts.append(c[start...])
        return parts
    }

    /// Whether `text` has a ` where ` outside brackets (a generic signature's clause).
    private static func hasTopLevelWhere(_ text: String) -> Bool {
        guard text.contains(" where ") else { return false }
        let chars = Array(text)
        var depth = 0
        for i in chars.indices {
            switch chars[i] {
            case "<", "(", "[": depth += 1
            case ">" where i > 0 && chars[i - 1] == "-": break
            case ">", ")", "]": depth -= 1
            case " " where depth == 0 && chars[i...].starts(with: " where "): return true
            default: break
            }
        }
        return false
    }

    /// Whether `T?` needs `(T)?`: a function type (`(A) -> B`, `@Sendable (A) -> B`), a
    /// composition (`A & B`), an existential (`any P`, `some P`). Anything else goes as it
    /// is, however much text it holds (`CodingKeys in f() -> T?`).
    private static func needsParentheses(_ type: String) -> Bool {
        if type.hasPrefix("any ") || type.hasPrefix("some ") || type.hasPrefix("@") { return true }
        let chars = Array(type)
        var depth = 0
        for (i, ch) in chars.enumerated() {
            switch ch {
            case "<", "(", "[": depth += 1
            case ">" where i > 0 && chars[i - 1] == "-": break
            case ">", ")", "]":
                depth -= 1
                // `(…) -> …`, `(…) async …`, `(…) throws …`: the whole is a function type.
                if depth == 0 && ch == ")" && chars.first == "(" {
                    let rest = String(chars[(i + 1)...])
                    return rest.hasPrefix(" -> ") || rest.hasPrefix(" async") || rest.hasPrefix(" throws")
                }
            case "&" where depth == 0: return true
            default: break
            }
        }
        return false
    }
}

private extension String {
    /// Without leading and trailing spaces.
    var trimmingSpaces: String {
        String(drop { $0 == " " }.reversed().drop { $0 == " " }.reversed())
    }
}
