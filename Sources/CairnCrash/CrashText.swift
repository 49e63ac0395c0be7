import CairnBase
package import CairnProcessor

extension Symbolizer {
    /// A function's short name, as a person reads it in a backtrace:
    /// `orders.OrderService.checkout(order: Swift.Int) -> Swift.Int` becomes
    /// `checkout(order:)`; an unlabelled parameter is `_:`; `closure #1 in …` keeps its
    /// prefix and shortens the rest; a C name stays as it is.
    package static func shortName(_ symbol: String) -> String {
        // The compiler's name for a runtime check's trap says it all.
        if symbol.hasPrefix("Swift runtime failure: ") { return symbol }
        var s = Substring(symbol)
        // `(1) await resume partial function for f(x:)`: the part of an async function
        // that runs after a suspension is that function.
        if s.hasPrefix("("), let close = s.firstIndex(of: ")") {
            let rest = s[s.index(after: close)...]
            for kind in [" await resume partial function for ", " suspend resume partial function for "]
            where rest.hasPrefix(kind) {
                s = rest.dropFirst(kind.count)
            }
        }
        for prefix in ["generic specialization ", "function signature specialization ", "merged ",
                       "reabstraction thunk helper from "] where s.hasPrefix(prefix) {
            // "<...> of f(x:)": what it specialises.
            if let of = topLevelRange(of: " of ", in: s) { s = s[of.upperBound...] }
        }
        for prefix in ["partial apply forwarder for ", "partial apply for "] where s.hasPrefix(prefix) {
            s = s.dropFirst(prefix.count)
        }
        if let inRange = topLevelRange(of: " in ", in: s) {
            // `closure #1 (Swift.Int) -> () in …`: the closure's own signature is noise.
            let head = s[..<inRange.lowerBound]
            let what = topLevelRange(of: " (", in: head).map { head[..<$0.lowerBound] } ?? head
            return String(what) + " in " + shortName(String(s[inRange.upperBound...]))
        }
        // An accessor, `Swift.Array.subscript.getter : (Swift.Int) -> A`: `subscript.getter`.
        if let colon = topLevelRange(of: " : ", in: s) {
            let parts = s[..<colon.lowerBound].split(separator: ".")
            return parts.suffix(parts.count >= 2 ? 2 : 1).joined(separator: ".")
        }
        if let arrow = topLevelRange(of: " -> ", in: s) { s = s[..<arrow.lowerBound] }
        // Effects (`async throws`), last first; a typed throw's error type with them.
        if s.hasSuffix(")"), let open = matchingOpen(s), s[..<open].hasSuffix(" throws") { s = s[..<open] }
        while let effect = [" throws", " rethrows", " async"].first(where: { s.hasSuffix($0) }) {
            s = s.dropLast(effect.count)
        }
        guard s.hasSuffix(")"), let open = matchingOpen(s) else { return String(lastComponent(s)) }
        var name = lastComponent(s[..<open])
        // Generic parameters: `withSpan<A>` is `withSpan`.
        if name.hasSuffix(">"), let angle = name.firstIndex(of: "<") { name = name[..<angle] }
        let params = splitTopLevel(s[s.index(after: open)..<s.index(before: s.endIndex)])
        let labels = params.map { p -> String in
            let trimmed = p.drop(while: \.isWhitespace)
            if trimmed.isEmpty { return "" }
            if let colon = topLevelRange(of: ": ", in: Substring(trimmed)) { return String(trimmed[..<colon.lowerBound]) + ":" }
            return "_:"
        }.filter { !$0.isEmpty }
        return name + "(" + labels.joined() + ")"
    }

    /// Whether a demangled name is a Swift async function, or a part of one that runs
    /// after a suspension (`(1) await resume partial function for …`): a frame whose
    /// async context chain leads to its callers.
    package static func isAsyncFunction(_ symbol: String) -> Bool {
        if symbol.contains(" resume partial function for ") { return true }
        guard let arrow = topLevelRange(of: " -> ", in: Substring(symbol)) else { return false }
        var effects = Substring(symbol)[..<arrow.lowerBound]
        // Typed throws: `f() async throws(E) -> ()`.
        if effects.hasSuffix(")"), let open = matchingOpen(effects), effects[..<open].hasSuffix(" async throws") {
            effects = effects[..<open]
        }
        return effects.hasSuffix(" async") || effects.hasSuffix(" async throws") || effects.hasSuffix(" async rethrows")
    }

    /// Whether a demangled name is the Swift standard library's (or its concurrency
    /// library's), through the specialisations and thunks made of it:
    /// `generic specialization <Swift.Int> of Swift.Array.subscript.getter …`,
    /// `static Swift.String.== infix(…)`.
    package static func isStandardLibrary(_ symbol: String) -> Bool {
        var s = Substring(symbol)
        var changed = true
        while changed {
            changed = false
            for prefix in ["static ", "merged ", "outlined ", "partial apply forwarder for ", "partial apply for "]
            where s.hasPrefix(prefix) {
                s = s.dropFirst(prefix.count)
                changed = true
            }
            for prefix in ["generic specialization ", "function signature specialization ",
                           "reabstraction thunk helper from "] where s.hasPrefix(prefix) {
                guard let of = topLevelRange(of: " of ", in: s) else { continue }
                s = s[of.upperBound...]
                changed = true
            }
        }
        return ["Swift.", "(extension in Swift):", "_Concurrency.", "(extension in _Concurrency):"]
            .contains { s.hasPrefix($0) }
    }

    /// The indices of `s` outside (), <> and [] (a closing bracket back at the top
    /// counts as outside): where the helpers below look for separators.
    private static func topLevelIndices(_ s: Substring) -> [Substring.Index] {
        var out: [Substring.Index] = []
        var depth = 0
        for i in s.indices {
            let c = s[i]
            if c == "(" || c == "<" || c == "[" { depth += 1 }
            if c == ")" || c == ">" || c == "]" { depth = max(0, depth - 1) }
            if depth == 0 { out.append(i) }
        }
        return out
    }

    /// The first `needle` in `s` outside (), <> and [].
    private static func topLevelRange(of needle: String, in s: Substring) -> Range<Substring.Index>? {
        topLevelIndices(s).first { s[$0...].hasPrefix(needle) }.map { $0..<s.index($0, offsetBy: needle.count) }
    }

    /// The `(` matching the final `)`.
    private static func matchingOpen(_ s: Substring) -> Substring.Index? {
        var depth = 0
        var i = s.index(before: s.endIndex)
        while true {
            let c = s[i]
            if c == ")" { depth += 1 }
            if c == "(" {
                depth -= 1
                if depth == 0 { return i }
            }
            if i == s.startIndex { return nil }
            i = s.index(before: i)
        }
    }

    /// What follows the last `.` outside brackets (`orders.OrderService.checkout` →
    /// `checkout`).
    private static func lastComponent(_ s: Substring) -> Substring {
        topLevelIndices(s).last { s[$0] == "." }.map { s[s.index(after: $0)...] } ?? s
    }

    /// `s` cut at its commas outside brackets.
    private static func splitTopLevel(_ s: Substring) -> [Substring] {
        var parts: [Substring] = []
        var start = s.startIndex
        for i in topLevelIndices(s) where s[i] == "," {
            parts.append(s[start..<i])
            start = s.index(after: i)
        }
        parts.append(s[start...])
        return parts
    }
}

extension CrashReport {
    /// A raw crash report read and symbolicated from the files on this machine: its
    /// `crash` event (for the processor to encode), the report, and its frames.
    package static func symbolicated(reportBytes: [UInt8]) -> (event: EndedRunEvent, report: CrashReport,
                                                              frames: [SymbolizedFrame]) {
        let report = CrashReport(bytes: reportBytes)
        let built = CrashEvent.crash(report: report, rawBytes: reportBytes, start: RunStart(context: report),
                                     identity: nil, symbolizer: Symbolizer(), fallbackMillis: nowMillis())
        return (built.event, CrashEvent.withRuntimeFailure(report, frames: built.frames), built.frames)
    }

    /// The report as a person reads it, like the Swift runtime's backtracer: the reason
    /// (the runtime's message, or the signal explained) first, then the function that
    /// crashed (the first frame in the service's own code) with its file:line, the
    /// signal and thread, then every frame with its short name. `cairn report` prints it.
    package static func text(report: CrashReport, frames: [SymbolizedFrame], event: Event? = nil) -> String {
        var lines: [String] = [CrashEvent.reason(report)]
        let culprit = frames.first(where: isServiceFrame) ?? frames.first
        if let f = culprit {
            lines.append("Crashed in " + describe(f))
        } else {
            lines.append("Crashed at an unknown place: the report holds no frames")
        }
        if report.unreadable == nil, report.signal != 0 {
            var what = SignalNames.name(report.signal)
            if let code = SignalNames.code(report.signal, report.code) { what += " (\(code))" }
            what += " at \(Hex.address(report.faultAddress))"
            if report.tid != 0 {
                what += ", thread \(report.tid)" + (report.threadName.isEmpty ? "" : " \"\(report.threadName)\"")
                    + (report.tid == report.pid ? " (main)" : "")
            }
            if report.pid != 0 { what += ", pid \(report.pid)" }
            lines.append(what)
        }
        var run: [String] = []
        if let session = event?.sessionID { run.append("session \(session)") }
        if let millis = event?.timeMillis { run.append(rfc3339(millis: millis).text) }
        if !report.complete || report.unreadable != nil { run.append("partial report") }
        if !run.isEmpty { lines.append(run.joined(separator: ", ")) }
        if report.endedByDeadlineSeconds > 0 {
            lines.append("The process was still alive \(report.endedByDeadlineSeconds) s after this report (a crash "
                + "handler it was handed on to hung): Cairn ended it with the same signal")
        }
        if !frames.isEmpty {
            lines.append("")
            lines.append("Frames (frame 0 is where it stopped):")
            // Numbered by machine frame: a function inlined into the next shares its number.
            var machine = 0
            for f in frames {
                let module = f.module.map { ($0.split(separator: "/").last.map(String.init) ?? $0) } ?? "?"
                let marks = (f.inlined ? "[inlined] " : "") + (f.isAsync ? "[async] " : "")
                var line = "  " + String(machine).leftPadded(to: 3) + "  " + marks
                line += f.symbol.map(Symbolizer.shortName) ?? "???"
                if let file = f.file, let l = f.line {
                    line += " at " + (file.split(separator: "/").last.map(String.init) ?? file) + ":\(l)"
                        + (f.column.map { $0 > 0 ? ":\($0)" : "" } ?? "")
                }
                line += "  [" + module + (f.moduleOffset.map { " + " + Hex.address($0) } ?? "") + "]"
                lines.append(line)
                if !f.inlined { machine += 1 }
            }
        }
        return lines.joined(separator: "\n") + "\n"
    }

    /// The crash in one line: the reason, then the function that crashed in the
    /// service's own code with its file:line (the `crash` event's `headline`).
    ///
    /// `Fatal error: Index out of range in trap(_:) at main.swift:20:9 (orders)`
    package static func headline(report: CrashReport, frames: [SymbolizedFrame]) -> String {
        let reason = CrashEvent.reason(report).split(separator: "\n").first.map(String.init) ?? ""
        guard let culprit = frames.first(where: isServiceFrame) ?? frames.first else { return reason }
        return reason + " in " + describe(culprit)
    }

    /// `checkout(order:) at OrderService.swift:49:22 (orders)`.
    private static func describe(_ f: SymbolizedFrame) -> String {
        var s = f.symbol.map(Symbolizer.shortName) ?? Hex.address(f.address)
        if let file = f.file, let line = f.line {
            s += " at " + (file.split(separator: "/").last.map(String.init) ?? file) + ":\(line)"
                + (f.column.map { $0 > 0 ? ":\($0)" : "" } ?? "")
        }
        if let module = f.module?.split(separator: "/").last { s += " (\(module))" }
        return s
    }

    /// A frame of the service's own code: symbolicated, not in the C library, the
    /// dynamic loader, the Swift runtime or Cairn, and not the runtime's failure path nor
    /// standard library code.
    private static func isServiceFrame(_ f: SymbolizedFrame) -> Bool {
        guard let symbol = f.symbol, let module = f.module else { return false }
        let name = module.split(separator: "/").last.map(String.init) ?? module
        for system in ["libc.so", "libc-", "ld-linux", "libpthread", "libswift", "libdispatch",
                       "libFoundation", "libcairn", "libstdc++", "libgcc"] where name.hasPrefix(system) {
            return false
        }
        // The runtime's failure path, and standard library code (inlined into the
        // service's module in a release build: `Swift._checkSubscript(_:wasNativeTypeChecked:)`).
        for runtime in ["Swift runtime failure: ", "swift_"] where symbol.hasPrefix(runtime) {
            return false
        }
        return !Symbolizer.isStandardLibrary(symbol)
    }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: " ", count: width - count) + self
    }
}
