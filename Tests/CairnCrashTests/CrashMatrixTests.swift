import CairnTestSupport
import CairnCrash
import Foundation
import Testing

/// Every way a process can crash, each in a real child process: it must die as it would
/// have without Cairn, and the next start (another real process) must store a
/// symbolicated `crash` event whose frames name the functions that crashed (demangled
/// for Swift).
@Suite struct CrashMatrixTests {
    struct Case: CustomStringConvertible, Sendable {
        var child: String
        var mode: String
        /// The signal the child dies of (or, under `unshare`, 128 + it as exit status).
        var signal: Int32
        /// Symbols (substrings) that must all appear among the frames.
        var symbols: [String]
        /// Sent to the child once it is ready, when the crash comes from outside.
        var sendSignal: Int32? = nil
        /// A command the child runs under.
        var prefix: [String] = []
        /// Text the event's reason must contain.
        var reason: String? = nil
        /// The event's `unwinder`, when the case is about it.
        var unwinder: String? = nil
        var description: String { "\(child) \(mode)" + (prefix.isEmpty ? "" : " under \(prefix[0])") }
    }

    #if arch(x86_64)
    static let trap = SIGILL
    #else
    static let trap = SIGTRAP
    #endif
    static let swiftTrap = "cairn_swift_crash_child.trap(Swift.String) -> Swift.Int"

    static let cases: [Case] = [
        Case(child: "cairn-crash-child", mode: "segv", signal: SIGSEGV, symbols: ["crash_here", "main"],
             reason: "SIGSEGV (SEGV_MAPERR): bad access at 0x0"),
        Case(child: "cairn-crash-child", mode: "fpe", signal: SIGFPE, symbols: ["crash_here", "main"],
             reason: "FPE_INTDIV"),
        Case(child: "cairn-crash-child", mode: "abort", signal: SIGABRT, symbols: ["abort", "crash_here", "main"],
             reason: "SIGABRT sent by the process itself"),
        Case(child: "cairn-crash-child", mode: "bus", signal: SIGBUS, symbols: ["crash_here", "main"],
             reason: "SIGBUS (BUS_ADRERR)"),
        Case(child: "cairn-crash-child", mode: "raise", signal: SIGSEGV, symbols: ["crash_here", "main"],
             reason: "sent by the process itself"),
        Case(child: "cairn-crash-child", mode: "wait", signal: SIGSEGV, symbols: ["main"], sendSignal: SIGSEGV,
             reason: "SIGSEGV sent by another process (SI_USER)"),
        Case(child: "cairn-crash-child", mode: "thread", signal: SIGSEGV, symbols: ["crash_here", "crashing_thread"]),
        Case(child: "cairn-crash-child", mode: "chain", signal: SIGSEGV, symbols: ["crash_here", "main"]),
        Case(child: "cairn-crash-child", mode: "overflow", signal: SIGSEGV, symbols: ["recurse"], reason: "stack overflow"),
        Case(child: "cairn-crash-child", mode: "overflow-thread", signal: SIGSEGV, symbols: ["recurse"], reason: "stack overflow"),
        Case(child: "cairn-crash-child", mode: "many", signal: SIGSEGV, symbols: ["crash_here", "crowd_thread"]),
        Case(child: "cairn-crash-child", mode: "corrupt", signal: SIGSEGV, symbols: ["crash_here", "main"]),
        Case(child: "cairn-crash-child", mode: "abort", signal: SIGABRT, symbols: ["abort", "crash_here", "main"],
             prefix: ["/usr/bin/unshare", "--pid", "--fork"]),
    ] + jit + [
        Case(child: "cairn-swift-crash-child", mode: "fatal", signal: trap, symbols: [swiftTrap],
             reason: "Fatal error: the service gave up: fatal"),
        Case(child: "cairn-swift-crash-child", mode: "index", signal: trap, symbols: [swiftTrap],
             reason: "Fatal error: Index out of range"),
        Case(child: "cairn-swift-crash-child", mode: "unwrap", signal: trap, symbols: [swiftTrap],
             reason: "Fatal error: Unexpectedly found nil while unwrapping an Optional value"),
    ]

    /// Generated code with frame pointers but no unwind information between
    /// `crash_here` and `main`: libunwind stops there, the frame pointers go on.
    #if arch(x86_64)
    static let jit = [Case(child: "cairn-crash-child", mode: "jit", signal: SIGSEGV, symbols: ["crash_here", "main"],
                           unwinder: "libunwind+frame_pointers")]
    #else
    static let jit: [Case] = []
    #endif

    @Test(arguments: cases)
    func crashBecomesASymbolicatedEvent(_ c: Case) throws {
        let dirs = try PreviousRunTests.Dirs()
        try FileManager.default.createDirectory(atPath: dirs.crash, withIntermediateDirectories: true)
        let ended = try PreviousRunTests.run([productsDirectory + "/" + c.child, dirs.crash, c.mode],
                                             signal: c.sendSignal, prefix: c.prefix)
        if c.prefix.isEmpty {
            #expect(ended.signaled && ended.status == c.signal, "\(c): died of \(ended.status)")
        } else {
            #expect(ended.status == c.signal || ended.status == 128 + c.signal, "\(c): ended with \(ended.status)")
        }
        let reports = dirs.files().filter { $0.hasSuffix(".report") }
        #expect(reports.count == 1, "\(c): one report, got \(reports)")
        let bytes = Array(FileManager.default.contents(atPath: dirs.crash + "/" + (reports.first ?? "")) ?? Data())
        let report = CrashReport(bytes: bytes)
        #expect(report.complete && report.signal == c.signal)
        // The next start, a real process, turns it into an event and stores it.
        let next = try PreviousRunTests.nextStart(dirs)
        let run = try #require(next.runs.first { $0["reason"] as? String == "crashed" })
        #expect(run["stored"] as? Bool == true && !dirs.files().contains { $0.hasSuffix(".report") })
        let event = try #require(PreviousRunTests.events(run).first)
        #expect(event["type"] as? String == "crash")
        let props = event["properties"] as? [String: Any] ?? [:]
        let frames = props["frames"] as? [[String: Any]] ?? []
        let symbols = frames.compactMap { $0["symbol"] as? String }
        for want in c.symbols {
            #expect(symbols.contains { $0 == want || $0.hasPrefix(want) }, "\(c): \(want) in \(symbols)")
        }
        if let reason = c.reason {
            #expect((props["reason"] as? String)?.contains(reason) == true, "\(c): \(props["reason"] ?? "")")
        }
        if c.child == "cairn-swift-crash-child" {
            let top = frames.first { ($0["symbol"] as? String) == Self.swiftTrap }
            #expect((top?["file"] as? String)?.hasSuffix("Tests/SwiftCrashChild/main.swift") == true,
                    "\(c): a Swift frame has its file: \(top ?? [:])")
        }
        if c.mode == "corrupt" { #expect(props["nested_faults"] as? Int == 1) }
        if let unwinder = c.unwinder {
            #expect(props["unwinder"] as? String == unwinder)
            // The generated code's frame, which no module holds, between the two.
            #expect(frames.count > 2 && frames[1]["note"] as? String == "no module contains the address"
                    && frames[2]["symbol"] as? String == "main", "\(frames)")
        }
        if c.mode == "thread" || c.mode == "overflow-thread" || c.mode == "many" {
            #expect((props["thread"] as? [String: Any])?["main"] as? Bool == false)
        }
    }

    /// The crash child as `make bench` builds it, in release (-O -g): what services ship.
    static let releaseChild = productsDirectory + "/../release/cairn-swift-crash-child"

    /// The Swift runtime's checks in a release build trap without a message; the debug
    /// information names the failure (an inlined `Swift runtime failure: …` function) and
    /// where the service called it. Compared with the toolchain's
    /// `llvm-symbolizer --inlining` on the same address: the event's message is the
    /// failure's name (or, where the runtime still writes one, its message), and the
    /// first frame in the service's code is the function that crashed, at the file:line
    /// llvm-symbolizer gives. Runs where the release child exists (`make test` builds
    /// it with the benchmarks, before the tests).
    @Test(.enabled(if: FileManager.default.fileExists(atPath: releaseChild), "needs the release build of make bench"),
          arguments: ["unwrap", "index", "overflow", "divide", "precondition"])
    func releaseBuildTrapsNameTheFailureAndTheLine(mode: String) throws {
        let child = URL(fileURLWithPath: Self.releaseChild).standardizedFileURL.path
        let dir = try TemporaryDirectory("cairn-release-crash")
        let ended = try runToEnd(child, [dir.path, mode], environment: ["SWIFT_BACKTRACE": "enable=no"])
        #expect(ended.status != 0)
        let name = try #require(try FileManager.default.contentsOfDirectory(atPath: dir.path).first { $0.hasSuffix(".report") })
        let bytes = Array(try #require(FileManager.default.contents(atPath: dir.appending(name))))
        let crash = CrashReport.symbolicated(reportBytes: bytes)
        #expect(crash.report.signal == Self.trap, "\(mode): \(crash.report.signal)")

        // The oracle: llvm-symbolizer's inline chain at the trap, names not demangled.
        let pc = try #require(crash.report.frames.first)
        let module = try #require(crash.report.modules.first { $0.start <= pc && pc < $0.end })
        #expect(module.path == child)
        let toolchain = try SymbolizerTests.toolchain()
        let oracle = try runToEnd(toolchain + "/llvm-symbolizer", ["--inlining", "--no-demangle", "--obj=" + child,
                                                                  "0x" + String(pc - module.loadAddress, radix: 16)])
        let lines = oracle.out.split(separator: "\n").map(String.init)
        let levels = stride(from: 0, to: lines.count - 1, by: 2).map { (function: lines[$0], place: lines[$0 + 1]) }
        let failure = try #require(levels.first, "\(oracle.out)")
        // The first level in the service's own module (not the runtime's failure path,
        // nor standard library code inlined into it).
        let service = try #require(levels.first { $0.function.contains("cairn_swift_crash_child") }, "\(levels)")
        let message = crash.report.message ?? ""
        if failure.function.hasPrefix("Swift runtime failure: ") {
            #expect(message == failure.function, "\(mode): message \(message), oracle \(failure.function)")
        } else {
            #expect(message.hasPrefix("Fatal error"), "\(mode): the runtime's own message: \(message)")
        }
        // Ours: the same function and place.
        let frames = crash.frames.prefix { $0.address == pc }
        let ours = try #require(frames.first { $0.mangledSymbol == service.function || $0.symbol == service.function },
                                "\(mode): \(service.function) among \(frames.map { $0.mangledSymbol ?? $0.symbol ?? "?" })")
        let place = service.place.split(separator: ":")
        let file = place.first.map { $0.split(separator: "/").last.map(String.init) ?? "" } ?? ""
        #expect(ours.file?.hasSuffix("/" + file) == true && ours.line == place.dropFirst().first.flatMap { Int($0) },
                "\(mode): ours \(ours.file ?? "?"):\(ours.line ?? 0), llvm-symbolizer \(service.place)")
        // The event and the readable report say it in their first lines.
        let headline = CrashReport.headline(report: crash.report, frames: crash.frames)
        #expect(headline.hasPrefix(message) && headline.contains(" in trap(_:) at main.swift:\(ours.line ?? 0)"),
                "\(mode): \(headline)")
    }
}
