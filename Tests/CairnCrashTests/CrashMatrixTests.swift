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
        Case(child: "cairn-crash-child", mode: "overflow", signal: SIGSEGV, symbols: ["recurse"]),
        Case(child: "cairn-crash-child", mode: "overflow-thread", signal: SIGSEGV, symbols: ["recurse"]),
        Case(child: "cairn-crash-child", mode: "many", signal: SIGSEGV, symbols: ["crash_here", "crowd_thread"]),
        Case(child: "cairn-crash-child", mode: "corrupt", signal: SIGSEGV, symbols: ["crash_here", "main"]),
        Case(child: "cairn-crash-child", mode: "abort", signal: SIGABRT, symbols: ["abort", "crash_here", "main"],
             prefix: ["/usr/bin/unshare", "--pid", "--fork"]),
        Case(child: "cairn-swift-crash-child", mode: "fatal", signal: trap, symbols: [swiftTrap],
             reason: "Fatal error: the service gave up: fatal"),
        Case(child: "cairn-swift-crash-child", mode: "index", signal: trap, symbols: [swiftTrap],
             reason: "Fatal error: Index out of range"),
        Case(child: "cairn-swift-crash-child", mode: "unwrap", signal: trap, symbols: [swiftTrap],
             reason: "Fatal error: Unexpectedly found nil while unwrapping an Optional value"),
    ]

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
        if c.mode == "thread" || c.mode == "overflow-thread" || c.mode == "many" {
            #expect((props["thread"] as? [String: Any])?["main"] as? Bool == false)
        }
    }
}
