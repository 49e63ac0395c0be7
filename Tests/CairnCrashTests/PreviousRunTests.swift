import CairnBase
import CairnTestSupport
import CairnStore
import Foundation
import Testing

/// Real runs of a Swift service (`cairn-run-child`) that end cleanly, crash, are killed
/// or run out of memory; then a real next start (`cairn-run-child <dir> next`) turns
/// them into events, stores them durably in the snapshot store, and deletes the files.
/// The stored batches are read back with Python's `lmdb` and `zstandard`, not with ours.
@Suite(.serialized) struct PreviousRunTests {
    /// A scratch directory holding the crash directory and the next start's store.
    final class Dirs {
        private let directory: TemporaryDirectory
        var root: String { directory.path }
        var crash: String { root + "/crash" }
        var data: String { root + "/data" }
        init() throws {
            directory = try TemporaryDirectory("cairn-run-test")
            try FileManager.default.createDirectory(atPath: data, withIntermediateDirectories: true)
        }
        func files() -> [String] { ((try? FileManager.default.contentsOfDirectory(atPath: crash)) ?? []).sorted() }
    }

    struct Ended {
        var status: Int32
        var signaled: Bool
        var lines: [String]
        var stderr: String
        var session: String { lines.first { $0.hasPrefix("SESSION ") }.map { String($0.dropFirst(8)) } ?? "" }
    }

    /// Runs `argv` (the first element a path) by the tests' runner rules (its own
    /// process group, killed at the deadline; a clean signal mask; the Swift runtime's
    /// backtracer off unless `environment` sets `SWIFT_BACKTRACE`), optionally sending
    /// `signal` once it prints READY; a process still running after 60 s fails the test.
    static func run(_ argv: [String], environment: [String: String] = [:], signal: Int32? = nil,
                    prefix: [String] = []) throws -> Ended {
        let all = prefix + argv
        let ended = try runToEnd(all[0], Array(all.dropFirst()),
                                 environment: ProcessInfo.processInfo.environment.merging(environment) { $1 },
                                 timeout: 60, signalWhenReady: signal)
        #expect(!ended.timedOut, "\(argv) did not end within 60 s")
        return Ended(status: ended.status, signaled: ended.signaled,
                     lines: ended.out.split(separator: "\n").map(String.init), stderr: ended.err)
    }

    static func service(_ dirs: Dirs, _ mode: String, signal: Int32? = nil, prefix: [String] = [],
                        environment: [String: String] = [:]) throws -> Ended {
        try run([productsDirectory + "/cairn-run-child", dirs.crash, mode], environment: environment, signal: signal,
                prefix: prefix)
    }

    /// The next start: previous runs as parsed JSON objects, and the summary line.
    static func nextStart(_ dirs: Dirs, failing: Bool = false,
                          environment: [String: String] = [:]) throws -> (runs: [[String: Any]], summary: [String: Any]) {
        let ended = try run([productsDirectory + "/cairn-run-child", dirs.crash, failing ? "next-fail" : "next", dirs.data],
                            environment: environment)
        #expect(ended.status == 0 && !ended.signaled, "next start: \(ended.stderr)")
        let objects = ended.lines.compactMap {
            (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any]
        }
        return (objects.filter { $0["reason"] != nil }, objects.first { $0["dropped"] != nil } ?? [:])
    }

    /// The snapshot store's records, read with Python's lmdb and zstandard modules.
    static func storedRecords(_ dirs: Dirs) throws -> [(priority: Int, records: [[String: Any]])] {
        let r = try run(["/usr/bin/env", "python3", repoRoot.path + "/Tests/Tools/read_store.py", dirs.data + "/store",
                         "--records"])
        #expect(r.status == 0, "read_store.py: \(r.stderr)")
        return r.lines.compactMap { line in
            guard let o = (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any] else { return nil }
            return ((o["priority"] as? Int) ?? -1, (o["records"] as? [[String: Any]]) ?? [])
        }
    }

    static func properties(_ event: [String: Any]) -> [String: Any] { event["properties"] as? [String: Any] ?? [:] }

    static func events(_ run: [String: Any]) -> [[String: Any]] { run["events"] as? [[String: Any]] ?? [] }

    /// The `app` group of an event's context (the ended run's release, app id, ...).
    static func app(_ event: [String: Any]) -> [String: Any] {
        (event["context"] as? [String: Any])?["app"] as? [String: Any] ?? [:]
    }

    static func frames(_ crash: [String: Any]) -> [[String: Any]] {
        properties(crash)["frames"] as? [[String: Any]] ?? []
    }

    static func lineOf(_ needle: String, in file: String) -> Int? {
        let text = (try? String(contentsOfFile: repoRoot.path + "/" + file, encoding: .utf8)) ?? ""
        return text.split(separator: "\n", omittingEmptySubsequences: false).firstIndex { $0.contains(needle) }.map { $0 + 1 }
    }

    // MARK: Session end reasons

    @Test func cleanShutdownIsReportedClean() throws {
        let dirs = try Dirs()
        let first = try Self.service(dirs, "clean")
        #expect(first.status == 0 && !first.session.isEmpty)
        let next = try Self.nextStart(dirs)
        #expect(next.runs.count == 1)
        let run = try #require(next.runs.first)
        #expect(run["reason"] as? String == "clean" && run["session_id"] as? String == first.session)
        let events = Self.events(run)
        #expect(events.count == 1 && events.first?["name"] as? String == "session_end")
        #expect(Self.properties(events[0])["reason"] as? String == "clean")
        #expect(events[0]["distinct_id"] as? String == "host-7" && Self.app(events[0])["release"] as? String == "orders@1.4.2")
        #expect(!dirs.files().contains { $0.contains(first.session) }, "the run's record is deleted once stored")
    }

    /// The identity a run set last (`setIdentity`, which the SDK calls from `identify`
    /// and `setAccountID`) is the one its `crash` and `session_end` carry: from the
    /// context blob for a crash, from the run record otherwise; with the record written
    /// at start and written later (deferred setup, the identity set before it exists).
    @Test(arguments: [("clean", false), ("segv", false), ("clean", true), ("segv", true)])
    func endedRunCarriesTheIdentityItSetLast(mode: String, deferred: Bool) throws {
        let dirs = try Dirs()
        var environment = ["CAIRN_TEST_IDENTITY": "user-9/acct-3"]
        if deferred { environment["CAIRN_TEST_DEFER_SETUP"] = "1" }
        let first = try Self.service(dirs, mode, environment: environment)
        #expect(first.signaled == (mode == "segv"))
        let run = try #require(try Self.nextStart(dirs).runs.first)
        let events = Self.events(run)
        #expect(events.count == (mode == "segv" ? 2 : 1))
        for event in events {
            #expect(event["distinct_id"] as? String == "user-9" && event["account_id"] as? String == "acct-3", "\(event)")
        }
    }

    /// Each run leaves an empty spare file that the next start renames into its run
    /// record (creating a file costs more than renaming one on the starting thread). The
    /// spare is never taken for a run, and one that is not empty is left alone.
    @Test func theNextRunRecordIsTheSpareTheLastRunLeft() throws {
        let dirs = try Dirs()
        func inode(_ path: String) -> UInt64? {
            var st = stat()
            return stat(path, &st) == 0 ? UInt64(st.st_ino) : nil
        }
        let spare = dirs.crash + "/next-run.record"
        let first = try Self.service(dirs, "clean")
        #expect(first.status == 0)
        let left = try #require(inode(spare), "the first run left a spare")
        let second = try Self.service(dirs, "wait", signal: SIGKILL)
        #expect(second.signaled)
        #expect(inode(dirs.crash + "/run-\(second.session).json") == left, "the second run's record is that spare")
        #expect(inode(spare) != nil && inode(spare) != left, "and it left a new one")
        // A spare with bytes in it (not ours, or damaged) is neither taken nor reported.
        try Data("garbage".utf8).write(to: URL(fileURLWithPath: spare))
        let garbage = try #require(inode(spare))
        let third = try Self.service(dirs, "clean")
        #expect(third.status == 0 && inode(dirs.crash + "/run-\(third.session).json") != garbage)
        #expect((try? Data(contentsOf: URL(fileURLWithPath: spare))) == Data("garbage".utf8))
        let next = try Self.nextStart(dirs)
        let reasons = Dictionary(next.runs.map { ($0["session_id"] as? String ?? "", $0["reason"] as? String ?? "") }) { a, _ in a }
        #expect(reasons == [first.session: "clean", second.session: "abnormal", third.session: "clean"])
    }

    @Test func sigkillIsReportedAbnormal() throws {
        let dirs = try Dirs()
        let first = try Self.service(dirs, "wait", signal: SIGKILL)
        #expect(first.signaled && first.status == SIGKILL)
        let run = try #require(try Self.nextStart(dirs).runs.first)
        #expect(run["reason"] as? String == "abnormal" && run["session_id"] as? String == first.session)
        #expect(Self.events(run).map { $0["name"] as? String } == ["session_end"])
    }

    /// A Swift service segfaults: it dies of SIGSEGV as it would have without Cairn; the
    /// next start stores a symbolicated `crash` event (demangled Swift name, file and
    /// line), then `session_end` with reason `crashed`, both at the Critical priority,
    /// and deletes the report.
    @Test func crashIsSymbolicatedStoredAndItsReportDeleted() throws {
        let dirs = try Dirs()
        let first = try Self.service(dirs, "segv")
        #expect(first.signaled && first.status == SIGSEGV, "same death as without Cairn")
        #expect(dirs.files().contains("crash-\(first.session).report"))
        let next = try Self.nextStart(dirs)
        let run = try #require(next.runs.first)
        #expect(run["reason"] as? String == "crashed" && run["stored"] as? Bool == true)
        let events = Self.events(run)
        #expect(events.map { $0["name"] as? String } == ["crash", "session_end"])
        let crash = events[0], props = Self.properties(crash)
        #expect(crash["type"] as? String == "crash" && crash["session_id"] as? String == first.session)
        #expect(props["signal"] as? String == "SIGSEGV" && props["code"] as? String == "SEGV_MAPERR")
        #expect(props["fault_address"] as? String == "0x8" && props["partial"] as? Bool == false)
        let top = try #require(Self.frames(crash).first)
        #expect((top["symbol"] as? String)?.contains("OrderService.checkout(order: Swift.Int)") == true, "\(top)")
        #expect((top["file"] as? String)?.hasSuffix("Tests/RunChild/main.swift") == true)
        #expect(top["line"] as? Int == Self.lineOf("bad?.pointee = order", in: "Tests/RunChild/main.swift"))
        let context = props["context"] as? [String: Any]
        let crumbs = (context?["breadcrumbs"] as? [[String: Any]])?.compactMap { $0["message"] as? String }
        #expect(crumbs == ["GET /orders/42", "checkout started for order 42"])
        #expect(Self.properties(events[1])["crash_event_id"] as? String == crash["event_id"] as? String)
        #expect(!dirs.files().contains { $0.hasPrefix("crash-") }, "report deleted after the event is stored")
        // Read back from the store with tools that are not ours.
        let stored = try Self.storedRecords(dirs)
        #expect(stored.count == 1 && stored.first?.priority == Int(Tier.critical.storeCode))
        #expect(stored.first?.records.compactMap { $0["event_id"] as? String }
                == events.compactMap { $0["event_id"] as? String })
    }

    /// A service started by a relative path (`./service`, as a container's command may
    /// be): the report names the program by its absolute path all the same, and its
    /// frames are symbolicated. (Started by an absolute path, the handler takes the path
    /// from the kernel's auxiliary vector; otherwise it reads `/proc/self/exe`.)
    @Test func crashOfAProgramStartedByARelativePathIsSymbolicated() throws {
        let dirs = try Dirs()
        let first = try Self.run(["/bin/sh", "-c", "cd \"$0\" && exec ./cairn-run-child \"$1\" segv", productsDirectory,
                                  dirs.crash])
        #expect(first.signaled && first.status == SIGSEGV)
        let run = try #require(try Self.nextStart(dirs).runs.first)
        let crash = try #require(Self.events(run).first)
        let modules = Self.properties(crash)["modules"] as? [[String: Any]] ?? []
        let main = try #require(modules.first?["path"] as? String)
        #expect(main.hasPrefix("/") && main.hasSuffix("/cairn-run-child"), "\(main)")
        let top = try #require(Self.frames(crash).first)
        #expect((top["file"] as? String)?.hasSuffix("Tests/RunChild/main.swift") == true, "\(top)")
    }

    /// `fatalError` in Swift: SIGILL (x86-64) or SIGTRAP (arm64), and the event's reason
    /// is the runtime's own message.
    @Test func swiftFatalErrorCarriesItsMessage() throws {
        let dirs = try Dirs()
        let first = try Self.service(dirs, "fatal")
        #if arch(x86_64)
        let trap = SIGILL
        #else
        let trap = SIGTRAP
        #endif
        #expect(first.signaled && first.status == trap)
        let run = try #require(try Self.nextStart(dirs).runs.first)
        let crash = try #require(Self.events(run).first)
        let reason = Self.properties(crash)["reason"] as? String ?? ""
        #expect(reason.contains("Fatal error: order 42 has no line items"), "\(reason)")
        let symbols = Self.frames(crash).compactMap { $0["symbol"] as? String }
        #expect(symbols.contains { $0.contains("OrderService.checkout(order: Swift.Int)") }, "\(symbols)")
    }

    /// A report with no run record (a C program using `cairn_crash_install` directly)
    /// still becomes a `crash` event, with no session to end.
    @Test func orphanReportBecomesACrashEvent() throws {
        let dirs = try Dirs()
        try FileManager.default.createDirectory(atPath: dirs.crash, withIntermediateDirectories: true)
        let c = try Self.run([productsDirectory + "/cairn-crash-child", dirs.crash, "fpe"])
        #expect(c.signaled && c.status == SIGFPE)
        let run = try #require(try Self.nextStart(dirs).runs.first { $0["reason"] as? String == "crashed" })
        let events = Self.events(run)
        #expect(events.map { $0["name"] as? String } == ["crash"])
        let props = Self.properties(events[0])
        #expect(props["signal"] as? String == "SIGFPE" && props["code"] as? String == "FPE_INTDIV")
        #expect(Self.frames(events[0]).first?["symbol"] as? String == "crash_here")
        #expect(!dirs.files().contains { $0.hasSuffix(".report") })
    }

    /// With `deferSetup` (as `Cairn.start` runs it) a run crashes before its record is
    /// written: the report alone (its context blob names the run) gives the whole run,
    /// `crash` with the run's attributes, then `session_end`.
    @Test func crashBeforeTheRunRecordIsWrittenIsReportedWhole() throws {
        let dirs = try Dirs()
        let first = try Self.service(dirs, "segv", environment: ["CAIRN_TEST_DEFER_SETUP": "never"])
        #expect(first.signaled && first.status == SIGSEGV)
        #expect(dirs.files().filter { $0.hasPrefix("run-") }.isEmpty, "no record was written")
        #expect(dirs.files().contains("crash-\(first.session).report"))
        let run = try #require(try Self.nextStart(dirs).runs.first)
        #expect(run["session_id"] as? String == first.session && run["reason"] as? String == "crashed")
        let events = Self.events(run)
        #expect(events.map { $0["name"] as? String } == ["crash", "session_end"])
        for event in events {
            #expect(event["session_id"] as? String == first.session && Self.app(event)["release"] as? String == "orders@1.4.2")
            #expect(event["distinct_id"] as? String == "host-7" && Self.app(event)["id"] as? String == "orders")
            #expect(event["release"] == nil && event["app_id"] == nil, "no top-level copies since 0.2.0")
        }
        let end = Self.properties(events[1])
        #expect(end["reason"] as? String == "crashed" && end["crash_event_id"] as? String == events[0]["event_id"] as? String)
        #expect(end["started_at"] is String, "the start time, from the blob")
        #expect(!dirs.files().contains { $0.contains(first.session) })
    }

    // MARK: Durability and limits

    /// Storing fails: the run's files stay; the next start stores the same events (same
    /// event ids, so the collector keeps one copy) and only then deletes them.
    @Test func failedStoreKeepsTheReportForTheNextStart() throws {
        let dirs = try Dirs()
        let first = try Self.service(dirs, "segv")
        let failed = try Self.nextStart(dirs, failing: true)
        let run1 = try #require(failed.runs.first)
        #expect(run1["stored"] as? Bool == false)
        #expect(dirs.files().contains("crash-\(first.session).report")
                && dirs.files().contains("run-\(first.session).json"))
        let run2 = try #require(try Self.nextStart(dirs).runs.first { $0["session_id"] as? String == first.session })
        #expect(run2["stored"] as? Bool == true && run2["reason"] as? String == "crashed")
        #expect(Self.events(run2).compactMap { $0["event_id"] as? String }
                == Self.events(run1).compactMap { $0["event_id"] as? String })
        #expect(!dirs.files().contains { $0.contains(first.session) })
    }

    /// A run that is still alive (its record is locked) is never reported; once it is
    /// killed, it is.
    /// Also with `deferSetup` (how `Cairn.start` runs it): the runs are claimed later, on
    /// another thread, and a start never takes its own run for a previous one.
    @Test(arguments: [false, true])
    func liveRunsAreLeftAlone(deferred: Bool) throws {
        let dirs = try Dirs()
        let environment = deferred ? ["CAIRN_TEST_DEFER_SETUP": "1"] : [:]
        let child = try ChildProcess(productsDirectory + "/cairn-run-child", [dirs.crash, "wait"],
                                     environment: ProcessInfo.processInfo.environment.merging(environment) { $1 })
        #expect(child.waitForOutput("READY\n", timeout: 60))
        let text = child.out
        let live = try Self.nextStart(dirs, environment: environment)
        #expect(live.runs.isEmpty && live.summary["live"] as? Int == 1)
        child.signal(SIGKILL)
        #expect(child.finish(timeout: 60).signaled)
        let session = text.split(separator: "\n").first { $0.hasPrefix("SESSION ") }.map { String($0.dropFirst(8)) }
        let after = try Self.nextStart(dirs, environment: environment)
        #expect(after.runs.count == 2 && after.summary["live"] as? Int == 0, "the two ended runs, not this one")
        #expect(after.runs.first { $0["session_id"] as? String == session }?["reason"] as? String == "abnormal")
    }

    /// More runs waiting than `maxPendingRuns`: the oldest are deleted and counted.
    @Test func pendingRunsAreBounded() throws {
        let dirs = try Dirs()
        var sessions: [String] = []
        for _ in 0..<4 { sessions.append(try Self.service(dirs, "wait", signal: SIGKILL).session) }
        let next = try Self.nextStart(dirs, environment: ["CAIRN_TEST_MAX_PENDING_RUNS": "2"])
        #expect(next.summary["dropped"] as? Int == 2)
        #expect(next.runs.compactMap { $0["session_id"] as? String } == Array(sessions.suffix(2)))
        #expect(!dirs.files().contains { name in sessions.contains { name.contains($0) } })
    }

    // MARK: OOM kill

    /// A memory cgroup with a small limit that this process may create (root, cgroup v1
    /// or v2 with the memory controller); nil where the machine does not allow it.
    static func makeMemoryCgroup() -> (dir: String, procs: String)? {
        let cgroup = MemoryCgroup.current()
        let bases = [cgroup.v2.first, cgroup.v1.first].compactMap { $0 }
        for base in bases {
            let dir = base + "/cairn-oom-test-\(getpid())-\(UUID().uuidString.prefix(6))"
            guard mkdir(dir, 0o755) == 0 else { continue }
            let limit = Array("\(96 << 20)".utf8)
            for file in ["memory.max", "memory.limit_in_bytes"] {
                let fd = open(dir + "/" + file, O_WRONLY)
                if fd >= 0 {
                    let ok = write(fd, limit, limit.count) == limit.count
                    close(fd)
                    if ok { return (dir, dir + "/cgroup.procs") }
                }
            }
            rmdir(dir)
        }
        return nil
    }

    static let canMakeMemoryCgroup: Bool = {
        guard let cg = makeMemoryCgroup() else { return false }
        rmdir(cg.dir)
        return true
    }()

    /// The service runs in a memory cgroup of its own and allocates until the kernel's
    /// OOM killer ends it (SIGKILL): the counter in the cgroup rose, so the next start
    /// says `oom_killed`, not `abnormal`.
    /// Also with `deferSetup`, where the counter is read on another thread after start.
    @Test(.enabled(if: canMakeMemoryCgroup, "needs a writable memory cgroup (root, cgroup v1 or v2)"),
          arguments: [false, true])
    func oomKillIsRecognised(deferred: Bool) throws {
        let dirs = try Dirs()
        let cg = try #require(Self.makeMemoryCgroup())
        defer { rmdir(cg.dir) }
        let child = productsDirectory + "/cairn-run-child"
        let first = try Self.run(["/bin/sh", "-c", "echo $$ > \"$0\" && exec \"$1\" \"$2\" oom", cg.procs, child,
                                  dirs.crash], environment: deferred ? ["CAIRN_TEST_DEFER_SETUP": "1"] : [:])
        #expect(first.signaled && first.status == SIGKILL, "killed by the OOM killer: \(first.stderr)")
        let run = try #require(try Self.nextStart(dirs).runs.first)
        #expect(run["reason"] as? String == "oom_killed" && run["session_id"] as? String == first.session)
    }
}
