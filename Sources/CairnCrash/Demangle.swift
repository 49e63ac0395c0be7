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
    public static func demangle(_ symbol: String) -> String {
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
        return demangled.isEmpty ? symbol : demangled
    }
}
