import CairnTestSupport
import CCairnCrash
import Foundation
import Testing

/// Real child processes (`cairn-crash-child`) crash with Cairn's handler installed.
/// Each must die with the signal it would have died of without Cairn and leave one
/// complete report whose frames include the crashing function.
@Suite struct CrashTests {
    struct Outcome {
        let signal: Int32
        let report: cairn_crash_report_t
        let bytes: [UInt8]
        let crashFunction: UInt64
        let stderr: String
    }

    /// Runs the child in `mode`; with `killWith`, sends that signal once it is ready.
    /// With `launcher`, the child runs under that command (for example `unshare`).
    static func crash(_ mode: String, killWith: Int32? = nil, child: String = "cairn-crash-child",
                      launcher: [String] = [], exits: Bool = false) throws -> (Outcome, TempDir) {
        let dir = TempDir()
        let childPath = productsDirectory + "/" + child
        let argv = launcher.isEmpty ? [childPath, dir.path, mode] : launcher + [childPath, dir.path, mode]
        // A crash must end the process promptly; a hang is a failure, not a stuck run
        // (runToEnd kills the child's whole process group at the deadline).
        let ended = try runToEnd(argv[0], Array(argv.dropFirst()), timeout: 60, signalWhenReady: killWith)
        #expect(!ended.timedOut, "\(mode): the crashed process did not end within 60 s")
        let text = ended.out
        let fn = text.split(separator: "\n").first { $0.hasPrefix("FN ") }
            .flatMap { UInt64($0.dropFirst(5), radix: 16) } ?? 0
        // Named after the child's pid: under a launcher, the pid the child saw.
        let name = try FileManager.default.contentsOfDirectory(atPath: dir.path).first { $0.hasSuffix(".report") }
        let path = dir.file(name ?? "crash-\(ended.pid).report")
        let bytes = Array(FileManager.default.contents(atPath: path) ?? Data())
        var report = cairn_crash_report_t()
        let rc = bytes.withUnsafeBytes { cairn_crash_report_parse($0.baseAddress, $0.count, &report) }
        #expect(rc == 0, "\(mode): the report parses")
        if launcher.isEmpty {
            #expect(ended.signaled == !exits, "\(mode): died as it would without Cairn")
        }
        return (Outcome(signal: ended.status, report: report, bytes: bytes, crashFunction: fn, stderr: ended.err), dir)
    }

    /// `cairn_crash_install` is all or nothing: one that fails (here its context buffers
    /// cannot be allocated under an address-space limit) replaces no handler and holds
    /// no buffer, and a later install in the same process works and reports the crash.
    /// (Not under AddressSanitizer, whose shadow memory alone exceeds the child's 1 GiB
    /// address-space limit.)
    @Test(.disabled(if: ProcessInfo.processInfo.environment["ASAN_OPTIONS"] != nil,
                    "AddressSanitizer reserves more address space than the limit the child sets"))
    func aFailedInstallLeavesNothingBehind() throws {
        let (o, _) = try Self.crash("nomem")
        #expect(o.stderr.contains("first install: out of memory; SIGSEGV handler: unchanged"), "\(o.stderr)")
        #expect(o.signal == SIGSEGV && o.report.signal == SIGSEGV)
    }

    static func frames(_ r: cairn_crash_report_t) -> [UInt64] {
        (0..<Int(r.frame_count)).map { i in
            (0..<8).reduce(UInt64(0)) { $0 | UInt64(r.frames[i * 8 + $1]) << (8 * $1) }
        }
    }

    static func context(_ r: cairn_crash_report_t) -> String {
        String(decoding: UnsafeRawBufferPointer(start: r.context, count: r.context_len), as: UTF8.self)
    }

    @Test(arguments: [("segv", SIGSEGV), ("fpe", SIGFPE), ("abort", SIGABRT), ("bus", SIGBUS),
                      ("raise", SIGSEGV), ("thread", SIGSEGV), ("chain", SIGSEGV)])
    func crashIsReportedAndTheProcessDiesAsItWould(mode: String, signal: Int32) throws {
        let (o, _) = try Self.crash(mode)
        #expect(o.signal == signal, "\(mode): same signal as without Cairn")
        #expect(o.report.complete == 1 && o.report.signal == signal)
        #expect(o.report.frame_count >= 3)
        let frames = Self.frames(o.report)
        if mode != "abort" && mode != "raise" {
            // The crashing function is the innermost frame of a hardware fault.
            #expect(frames.contains { $0 >= o.crashFunction && $0 < o.crashFunction + 1024 },
                    "\(mode): crash_here at \(String(o.crashFunction, radix: 16)) in \(frames.map { String($0, radix: 16) })")
        } else {
            // abort() and raise() crash inside libc, called from crash_here.
            #expect(frames.contains { $0 > o.crashFunction && $0 < o.crashFunction + 1024 })
        }
        #expect(o.report.module_count >= 2, "the executable and libc at least")
        #expect(Self.context(o.report) == #"{"mode":"\#(mode)"}"#)
        #expect(o.report.handler_ns > 0 && o.report.tid > 0)
        if mode == "chain" { #expect(o.stderr.contains("EARLIER HANDLER RAN"), "the previous handler is called") }
        if mode == "thread" { #expect(o.report.tid != o.report.pid, "the crashed thread is the background one") }
    }

    /// Swift traps (SIGILL on x86-64, SIGTRAP on arm64) carry the runtime's message.
    @Test(arguments: [("fatal", "Fatal error: the service gave up: fatal"),
                      ("index", "Fatal error: Index out of range"),
                      ("unwrap", "Fatal error: Unexpectedly found nil while unwrapping an Optional value")])
    func swiftTrapsCarryTheRuntimeMessage(mode: String, message: String) throws {
        let (o, _) = try Self.crash(mode, child: "cairn-swift-crash-child")
        #if arch(x86_64)
        let trap = SIGILL
        #else
        let trap = SIGTRAP
        #endif
        #expect(o.signal == trap && o.report.complete == 1 && o.report.signal == trap)
        let text = String(decoding: UnsafeRawBufferPointer(start: o.report.message, count: o.report.message_len), as: UTF8.self)
        #expect(text.contains(message), "message: \(text)")
        #expect(o.report.frame_count >= 3)
    }

    @Test func killFromAnotherProcessIsReported() throws {
        let (o, _) = try Self.crash("wait", killWith: SIGSEGV)
        #expect(o.signal == SIGSEGV && o.report.complete == 1 && o.report.signal == SIGSEGV)
        #expect(o.report.code <= 0, "si_code says it was sent, not a fault")
    }

    @Test(arguments: ["overflow", "overflow-thread"])
    func stackOverflowIsReported(mode: String) throws {
        let (o, _) = try Self.crash(mode)
        #expect(o.signal == SIGSEGV && o.report.complete == 1 && o.report.frame_count >= 3)
        if mode == "overflow-thread" { #expect(o.report.tid != o.report.pid, "on the worker thread") }
    }

    @Test func twentyThreadsCrashingAtOnceGiveExactlyOneReport() throws {
        let (o, dir) = try Self.crash("many")
        #expect(o.signal == SIGSEGV && o.report.complete == 1)
        let reports = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.hasSuffix(".report") }
        #expect(reports.count == 1)
    }

    /// Twenty threads crash at once under a handler installed before Cairn that takes
    /// 4 s and then exits with its own status: the report is written once, the earlier
    /// handler runs to its end (the threads that lost the race wait for the report,
    /// then meet the earlier handler too, rather than end the process themselves), and
    /// the process ends with the earlier handler's status, as it would without Cairn.
    @Test func aSlowEarlierHandlerFinishesWhenManyThreadsCrash() throws {
        let (o, dir) = try Self.crash("chain-many", exits: true)
        #expect(o.signal == 42, "exit status \(o.signal), the earlier handler's is 42")
        #expect(o.report.complete == 1 && o.report.signal == SIGSEGV)
        #expect(o.stderr.contains("SLOW EARLIER HANDLER RAN"))
        let reports = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.hasSuffix(".report") }
        #expect(reports.count == 1)
    }

    /// A crash always ends the process: a handler installed before Cairn's that never
    /// returns (one thread, or twenty crashing at once; or twenty threads that block
    /// SIGALRM, under a handler that parks the first of them with every signal blocked,
    /// as the Swift runtime's backtracer does) is cut short by the deadline, the process
    /// still dies of the crash's own signal, and the report says so.
    @Test(arguments: ["hang", "hang-many", "park-many"])
    func aHangingEarlierHandlerIsEndedByTheDeadline(mode: String) throws {
        let dir = TempDir()
        let ended = try runToEnd(productsDirectory + "/cairn-crash-child", [dir.path, mode],
                                 environment: ProcessInfo.processInfo.environment.merging(["CAIRN_TEST_DEADLINE_S": "1"]) { $1 },
                                 timeout: 20)
        #expect(!ended.timedOut, "\(mode): the deadline ended it")
        #expect(ended.signaled && ended.status == SIGSEGV, "\(mode): the crash's own signal, \(ended.status)")
        #expect(ended.err.contains(mode == "park-many" ? "PARKING EARLIER HANDLER RAN" : "HANGING EARLIER HANDLER RAN"),
                "the earlier handler was called: \(ended.err)")
        let name = try #require(try FileManager.default.contentsOfDirectory(atPath: dir.path).first { $0.hasSuffix(".report") })
        let bytes = Array(FileManager.default.contents(atPath: dir.file(name)) ?? Data())
        var report = cairn_crash_report_t()
        let rc = bytes.withUnsafeBytes { cairn_crash_report_parse($0.baseAddress, $0.count, &report) }
        #expect(rc == 0 && report.complete == 1 && report.signal == SIGSEGV)
        #expect(report.deadline_seconds == 1, "the report says the deadline ended it")
        #expect(report.frame_count >= 3, "and is otherwise whole")
    }

    /// A program that handles SIGALRM itself keeps it: no deadline is armed (so the hang
    /// goes on, and the runner's own deadline ends it), and the report says nothing of one.
    @Test func aServiceThatUsesSIGALRMKeepsIt() throws {
        let dir = TempDir()
        let ended = try runToEnd(productsDirectory + "/cairn-crash-child", [dir.path, "hang-alarm"],
                                 environment: ProcessInfo.processInfo.environment.merging(["CAIRN_TEST_DEADLINE_S": "1"]) { $1 },
                                 timeout: 4)
        #expect(ended.timedOut, "nothing of the program's was displaced, so nothing ended the hang")
        let name = try #require(try FileManager.default.contentsOfDirectory(atPath: dir.path).first { $0.hasSuffix(".report") })
        let bytes = Array(FileManager.default.contents(atPath: dir.file(name)) ?? Data())
        var report = cairn_crash_report_t()
        _ = bytes.withUnsafeBytes { cairn_crash_report_parse($0.baseAddress, $0.count, &report) }
        #expect(report.complete == 1 && report.deadline_seconds == 0)
    }

    /// Twenty threads crashing at once, a hundred times in a row: every process ends,
    /// with SIGSEGV and one complete report, and the runner never waits on it.
    @Test func twentyThreadsCrashingAtOnceNeverHang() throws {
        for run in 0..<100 {
            let dir = TempDir()
            let ended = try runToEnd(productsDirectory + "/cairn-crash-child", [dir.path, "many"], timeout: 30)
            #expect(!ended.timedOut && ended.signaled && ended.status == SIGSEGV, "run \(run): \(ended.status)")
            let reports = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.hasSuffix(".report") }
            #expect(reports.count == 1, "run \(run)")
            if ended.timedOut { break }
        }
    }

    /// The handler itself faults (it reads the Swift runtime's fatal-message slot, which
    /// the child pointed at unmapped memory): the second entry adds a nested section and
    /// completes the report; the process still dies of the first signal.
    @Test func faultInsideTheHandlerStillGivesAReport() throws {
        let (o, _) = try Self.crash("corrupt")
        #expect(o.signal == SIGSEGV && o.report.complete == 1 && o.report.signal == SIGSEGV)
        #expect(o.report.nested == 1, "the fault inside the handler is recorded")
        #expect(o.report.frame_count >= 3 && o.report.module_count >= 2, "what came before the fault is kept")
        #expect(o.report.message_len == 0)
    }

    /// PID 1 of a PID namespace ignores signals it has no handler for, so a re-raised
    /// SIGABRT would not end it: the handler's _exit fallback must. A fault still kills it.
    @Test(arguments: [("abort", SIGABRT), ("segv", SIGSEGV)])
    func crashAsPIDOneEndsPromptlyWithAReport(mode: String, signal: Int32) throws {
        let (o, dir) = try Self.crash(mode, launcher: ["/usr/bin/unshare", "--pid", "--fork"])
        #expect(o.report.complete == 1 && o.report.signal == signal && o.report.pid == 1, "report of PID 1")
        // unshare passes on the child's end: the signal, or the exit status 128 + signal.
        #expect(o.signal == signal || o.signal == 128 + signal, "ended by \(o.signal)")
        #expect(FileManager.default.fileExists(atPath: dir.file("crash-1.report")))
    }

    /// Cut at every byte: the reader returns what is complete, says it is partial, and
    /// never crashes; garbage is refused.
    @Test func truncatedReportsParseAsPartial() throws {
        let (o, _) = try Self.crash("segv")
        let full = o.bytes
        #expect(!full.isEmpty)
        var partialWithSignal = 0
        for cut in 0..<full.count {
            var r = cairn_crash_report_t()
            let rc = full.withUnsafeBytes { cairn_crash_report_parse($0.baseAddress, cut, &r) }
            if cut < 16 { #expect(rc == CAIRN_ECORRUPT); continue }
            #expect(rc == 0 && r.complete == 0, "cut at \(cut)")
            if r.signal == SIGSEGV { partialWithSignal += 1 }
        }
        #expect(partialWithSignal > full.count / 2, "most cuts keep the signal section")
        var garbage = full
        garbage[0] ^= 0xFF
        var r = cairn_crash_report_t()
        #expect(garbage.withUnsafeBytes { cairn_crash_report_parse($0.baseAddress, $0.count, &r) } == CAIRN_ECORRUPT)
    }
}
