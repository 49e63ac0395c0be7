import CairnBase
import CCairnCrash
import CairnProcessor
import CairnStore
import FoundationEssentials
import Glibc
import Synchronization

/// Why crash capture could not start or record the end of its run.
package enum CrashCaptureError: Error, Equatable, Sendable, CustomStringConvertible {
    /// An option is out of range; says which and why.
    case invalidOption(String)
    /// `CrashCapture.start` was already called in this process (there is one crash
    /// handler per process).
    case alreadyStarted
    /// A file operation failed: what was done, and the errno.
    case io(String, Int32)
    /// `cairn_crash_install` failed with this CAIRN_E* code or errno.
    case install(Int32)

    /// Readable text.
    package var description: String {
        switch self {
        case .invalidOption(let why): return "invalid crash capture option: \(why)"
        case .alreadyStarted: return "crash capture is already started in this process"
        case .io(let what, let e): return "\(what): \(String(cString: strerror(e)))"
        case .install(let rc): return "crash handler install failed: \(String(cString: cairn_strerror(rc)))"
        }
    }
}

/// How one previous run ended, and what was stored about it.
package struct PreviousRun: Sendable {
    /// The run's session id (from its run record, or its crash report's context).
    package var sessionID: String?
    /// How it ended.
    package var reason: SessionEndReason
    /// The `event_id` of its `crash` event, when it crashed.
    package var crashEventID: String?
    /// The events built for it (`crash`, then `session_end`), for the processor to
    /// encode.
    package var events: [EndedRunEvent]
    /// Its crash report as read, when it crashed.
    package var report: CrashReport?
    /// The report's frames, symbolicated from the files on this machine.
    package var frames: [SymbolizedFrame]
    /// Whether `store` accepted them; when not, the run's files stay for the next start.
    package var stored: Bool
    /// Why storing failed, when it did.
    package var error: String?
}

/// What `CrashCapture.processPreviousRuns` did.
package struct PreviousRunsResult: Sendable {
    /// The previous runs found, oldest first.
    package var runs: [PreviousRun]
    /// Runs (with their reports) deleted unprocessed because more than
    /// `Options.maxPendingRuns` were waiting: oldest first, counted here.
    package var dropped: Int
    /// Run records still locked by live processes sharing the directory: left alone.
    package var live: Int
}

/// Crash capture for a service: installs the C crash handler, records that this run is
/// running (a run record, locked for the life of the process), keeps the handler's
/// context (session id, release, breadcrumbs) current, and on the next start turns the
/// previous runs' run records and crash reports into `crash` and `session_end` events.
///
/// ```swift
/// let crashes = try CrashCapture.start(.init(directory: dataDir + "/crash"))
/// // later, off the caller's thread:
/// let processor = Processor()
/// let result = crashes.processPreviousRuns { events in
///     var changed = RuleCounts()
///     try store(events.map { processor.record(endedRun: $0.event, context: $0.context, counts: &changed) })
/// }
/// // at a clean shutdown:
/// try crashes.endSession()
/// ```
package final class CrashCapture: @unchecked Sendable {
    // @unchecked: mutable state is in `state`, behind a lock.

    /// Options of `CrashCapture.start`.
    package struct Options: Sendable, Equatable {
        /// Directory of run records and crash reports; created if missing. Several
        /// processes may share it: each handles only runs that have ended.
        package var directory: String
        /// The service's release, written into run records and events.
        package var release: String?
        /// What this run's events on the next start are told about it: `distinct_id`
        /// (their `distinct_id`, until ``CrashCapture/setIdentity(distinctID:accountID:)``
        /// sets another), and `app_id` and `environment` (their `context.app`, when the
        /// run ends before ``CrashCapture/recordContext(_:)``). Kept in the run record.
        package var attributes: [String: String]
        /// Also capture SIGQUIT (off: services use it for thread dumps).
        package var captureSIGQUIT: Bool
        /// Largest context blob the handler keeps, bytes (256 ... 1 MiB).
        package var contextCapacity: Int
        /// Breadcrumbs kept in the context, newest last (0 ... 1000).
        package var maxBreadcrumbs: Int
        /// Previous runs kept on disk while their events cannot be stored (1 ... 10000).
        package var maxPendingRuns: Int
        /// When true, `start` leaves what the first crash can do without to
        /// ``CrashCapture/finishSetup()``, which the caller then runs soon, off its own
        /// thread: writing this run's record (a crash before it is still reported whole,
        /// from the context blob, which names the run; a run killed before it is not
        /// reported at all), claiming the records of previous runs that have ended,
        /// reading the cgroup's OOM-kill counter (an OOM kill before it is read makes the
        /// run `abnormal`, not `oom_killed`) and libunwind's set-up (a crash before it
        /// only takes longer to walk). Off by default.
        package var deferSetup: Bool
        /// Give every thread created after the handler is installed an alternate
        /// signal stack (through the C core's `pthread_create`, which every call in the
        /// process reaches), so that a stack overflow is reported on any thread:
        /// libdispatch's workers, which run the Swift concurrency runtime's tasks,
        /// included. Each costs a few microseconds at thread creation and 68 KiB of
        /// address space, not resident until a signal uses it, unmapped when the thread
        /// ends. Threads that existed before are not covered (call
        /// `cairn_crash_prepare_thread()` on them). Fixed by the first start in a
        /// process. On by default.
        package var alternateStacksForNewThreads = true
        /// A crash always ends the process: once the report is written and the signal
        /// handed on to the handler installed before Cairn's (the Swift runtime's
        /// backtracer, the service's own), a process still alive after this long (that
        /// handler hung) is ended by the crash's own signal, and the report says so.
        /// Whole seconds (alarm(2)), and only where the service leaves SIGALRM to its
        /// default action. 30 s by default; nil never ends it.
        package var crashDeadline: Duration? = .seconds(30)

        /// Options with defaults: 16 KiB of context, 32 breadcrumbs, 16 pending runs.
        package init(directory: String, release: String? = nil, attributes: [String: String] = [:],
                    captureSIGQUIT: Bool = false, contextCapacity: Int = 16 * 1024, maxBreadcrumbs: Int = 32,
                    maxPendingRuns: Int = 16, deferSetup: Bool = false) {
            self.directory = directory
            self.release = release
            self.attributes = attributes
            self.captureSIGQUIT = captureSIGQUIT
            self.contextCapacity = contextCapacity
            self.maxBreadcrumbs = maxBreadcrumbs
            self.maxPendingRuns = maxPendingRuns
            self.deferSetup = deferSetup
        }

        func validate() throws(CrashCaptureError) {
            if directory.isEmpty { throw .invalidOption("directory is empty") }
            if !(256...(1 << 20)).contains(contextCapacity) {
                throw .invalidOption("contextCapacity \(contextCapacity) is outside 256 ... 1048576")
            }
            if !(0...1000).contains(maxBreadcrumbs) {
                throw .invalidOption("maxBreadcrumbs \(maxBreadcrumbs) is outside 0 ... 1000")
            }
            if !(1...10000).contains(maxPendingRuns) {
                throw .invalidOption("maxPendingRuns \(maxPendingRuns) is outside 1 ... 10000")
            }
        }
    }

    private struct Breadcrumb {
        var millis: UInt64
        var category: String?
        var message: String
    }

    private struct State {
        var breadcrumbs: [Breadcrumb] = []
        /// This run's record: nil until it is written (with `deferSetup`, by
        /// `finishSetup` or whatever needs it first), and when writing it failed.
        var runFile: LockedFile?
        var runFileError: CrashCaptureError?
        var claimed: [LockedFile] = []
        var live: [String] = []
        var processed = false
        var ended = false
        /// The run is over (``endSession()`` was called, whatever came of it): nothing
        /// of this capture reaches the handler any more, which may serve a later run.
        var over = false
        var setUp = false
        /// The identity set with ``setIdentity(distinctID:accountID:)``, if any.
        var identity: RunIdentity?
        /// It is in the run record (written there, or nothing to write).
        var identityRecorded = true
    }

    // The process's one crash handler: installed by the first start; a run is live from
    // its start until ``endSession()``, and a later start, once no run is live, points
    // the handler at its own report (`cairn_crash_set_report`).

    /// A run is live (taken by a compare-and-exchange, so one start at a time).
    private static let live = Atomic<Bool>(false)
    /// The handler is installed (only read and written by the start holding `live`).
    private static let installed = Atomic<Bool>(false)

    /// This run's session id (UUIDv7).
    package let sessionID: String
    /// The options it was started with.
    package let options: Options
    /// What the first line of this run's record says.
    private let start: RunStart
    private let state: Locked<State>

    private init(start: RunStart, options: Options, runFile: LockedFile?, claimed: [LockedFile], live: [String]) {
        sessionID = start.sessionID
        self.start = start
        self.options = options
        state = Locked(State(runFile: runFile, claimed: claimed, live: live))
    }

    /// Why this run's record could not be written, or nil. With ``Options/deferSetup``
    /// it is written by ``finishSetup()``; known from then on. Without a record, the next
    /// start cannot tell how this run ended unless it crashed.
    package var runRecordError: CrashCaptureError? { state.withLock { $0.runFileError } }

    /// How threads created from now on get an alternate signal stack, so that a stack
    /// overflow on them is reported (`sdk_health`'s `thread_stacks`):
    /// - `on`: every new thread gets one (the C core's `pthread_create` hook);
    /// - `fallback`: the same, the C library's `pthread_create` found through its own
    ///   handle because the usual lookup failed;
    /// - `off`: no hook (not installed, turned off, or compiled out: sanitizers, musl);
    /// - `missing`: no `pthread_create` of the C library could be found, and threads
    ///   cannot be created (a fully static glibc build made without
    ///   `CAIRN_NO_THREAD_HOOK`).
    package static var threadStacks: String {
        switch cairn_crash_thread_hook() {
        case CAIRN_THREAD_HOOK_ON: return "on"
        case CAIRN_THREAD_HOOK_FALLBACK: return "fallback"
        case CAIRN_THREAD_HOOK_MISSING: return "missing"
        default: return "off"
        }
    }

    /// Starts crash capture: claims the run records of previous runs that have ended,
    /// writes and locks this run's record, installs the crash handler (reports go to
    /// `<directory>/crash-<session id>.report`) and sets its first context. Only this
    /// runs on the caller's thread (with ``Options/deferSetup``, less: see there);
    /// `processPreviousRuns` does the rest later.
    ///
    /// One run at a time: a start while another run is live (not yet ended by
    /// ``endSession()``) throws `.alreadyStarted`. After it, a start begins a new run
    /// with its own session id, record and report path, in the directory it is given;
    /// the handler stays installed (``Options/captureSIGQUIT`` is the first start's).
    ///
    /// - Throws: `.invalidOption`, `.alreadyStarted`, `.io`, `.install`.
    package static func start(_ options: Options) throws(CrashCaptureError) -> CrashCapture {
        try options.validate()
        guard live.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged
        else { throw .alreadyStarted }
        do {
            let capture = try startOnce(options, retarget: installed.load(ordering: .acquiring))
            installed.store(true, ordering: .releasing)
            return capture
        } catch {
            live.store(false, ordering: .releasing)
            throw error
        }
    }

    private static func startOnce(_ options: Options, retarget: Bool) throws(CrashCaptureError) -> CrashCapture {
        let dir = options.directory
        let made = SmallFile.makeDirectories(dir)
        if made != 0 { throw .io("create \(dir)", made) }
        // Deferred, nothing is claimed here (not even an empty set is built: on this
        // thread, each new generic type costs the runtime a lookup).
        var claimed: [LockedFile] = []
        var live: [String] = []
        if !options.deferSetup { (claimed, live) = claimEndedRuns(in: dir, except: nil) }
        let now = nowMillis()
        let sessionID = uuidV7(millis: now)
        let start = RunStart(sessionID: sessionID, pid: getpid(), startedAtMillis: now, release: options.release,
                             attributes: options.attributes)
        // Deferred, the record is written by `finishSetup`, off this thread.
        var runFile: LockedFile?
        if !options.deferSetup { runFile = try createRecord(start, in: dir) }
        var flags = CAIRN_CRASH_DEFER_WARM_UP
        if options.captureSIGQUIT { flags |= CAIRN_CRASH_SIGQUIT }
        if !options.alternateStacksForNewThreads { flags |= CAIRN_CRASH_NO_THREAD_STACKS }
        var deadline: UInt32 = 0
        if let d = options.crashDeadline {
            deadline = UInt32(clamping: max(1, d.components.seconds + (d.components.attoseconds > 0 ? 1 : 0)))
        } else {
            flags |= CAIRN_CRASH_NO_DEADLINE
        }
        let rc = dir.withCString { d in
            "crash-\(sessionID).report".withCString { name in
                if retarget { return cairn_crash_set_report(d, name) }
                var o = cairn_crash_options_t(report_dir: d, flags: flags,
                                              context_capacity: UInt32(options.contextCapacity), report_name: name,
                                              deadline_seconds: deadline)
                return cairn_crash_install(&o)
            }
        }
        guard rc == 0 else {
            if let runFile { unlink(runFile.path) }
            throw .install(rc)
        }
        let capture = CrashCapture(start: start, options: options, runFile: runFile, claimed: claimed, live: live)
        capture.state.withLock { capture.publishContext($0.breadcrumbs, identity: nil) }
        if !options.deferSetup { capture.finishSetup() }
        return capture
    }

    /// What `start` leaves for later with ``Options/deferSetup``: writes this run's
    /// record (see ``runRecordError``), claims the records of previous runs that have
    /// ended, reads the OOM-kill counter of this process's cgroup into the run record (a
    /// line of its own, see docs/FORMATS.md, "Run record") and sets up libunwind. Without
    /// `deferSetup`, `start` has called it; `processPreviousRuns` calls it first. Later
    /// calls do nothing.
    package func finishSetup() {
        state.withLock { s in
            guard !s.setUp else { return }
            s.setUp = true
            // First, so that other processes sharing the directory see this run as live.
            let runFile = record(&s)
            if options.deferSetup {
                (s.claimed, s.live) = Self.claimEndedRuns(in: options.directory, except: sessionID)
            }
            // The next start's run record, made now, off the thread that starts.
            LockedFile.makeSpare(options.directory + "/" + Self.spareName)
            if !s.ended, let runFile, let (file, kills) = OOMCounter.locate() {
                let line = JSONWriter.bytes { w in
                    w.ascii(#"{"oom":{"file":"#)
                    w.string(file)
                    w.ascii(#","oom_kill":"#)
                    w.uint(kills)
                    w.ascii("}}")
                }
                // Best effort: without this line the run can end as `abnormal` but not `oom_killed`.
                try? runFile.append(line)
            }
            if !s.ended, let runFile { recordIdentity(&s, in: runFile) }
        }
        cairn_crash_warm_up()
    }

    /// Keeps `context` (a JSON object: the service's common properties, as events carry
    /// them in `context`) in this run's record, for its `crash` and `session_end`
    /// events on the next start. The last one recorded wins. Not for hot paths.
    package func recordContext(_ context: [UInt8]) {
        guard case .object? = CairnValue(json: context) else { return }
        state.withLock { s in
            guard !s.ended, let runFile = record(&s) else { return }
            // Best effort: without this line the events of this run carry no context.
            try? runFile.append(Array(#"{"context":"#.utf8) + context + [UInt8(ascii: "}")])
        }
    }

    /// Records who this run's events are about now (the SDK calls it when the default
    /// `distinct_id` or the account changes): the context blob carries it, for a crash,
    /// and a line of the run record, for how the run ends otherwise; the next start gives
    /// this run's `crash` and `session_end` events the identity recorded last (docs/
    /// FORMATS.md, "Run record"). Not for hot paths: it writes to the run record.
    package func setIdentity(distinctID: String, accountID: String?) {
        let identity = RunIdentity(distinctID: distinctID, accountID: accountID.flatMap { $0.isEmpty ? nil : $0 })
        state.withLock { s in
            guard !s.over, s.identity != identity else { return }
            s.identity = identity
            s.identityRecorded = false
            publishContext(s.breadcrumbs, identity: identity)
            // Before the run record exists (a deferred start), `finishSetup` writes it.
            if let runFile = s.runFile { recordIdentity(&s, in: runFile) }
        }
    }

    /// Appends the identity line to the run record when it is not there yet. Best
    /// effort: without it, the run's end carries the identity it started with.
    private func recordIdentity(_ s: inout State, in runFile: LockedFile) {
        guard !s.identityRecorded, let identity = s.identity else { return }
        s.identityRecorded = true
        try? runFile.append(JSONWriter.bytes { w in
            w.ascii(#"{"identity":"#)
            identity.write(&w)
            w.byte(0x7D)
        })
    }

    /// Adds a breadcrumb to the context a crash report carries (the newest
    /// `maxBreadcrumbs` are kept; messages are cut at 512 bytes). Not for hot paths:
    /// it re-serialises the context.
    package func addBreadcrumb(_ message: String, category: String? = nil) {
        let crumb = Breadcrumb(millis: nowMillis(), category: category, message: Self.cut(message, 512))
        state.withLock { s in
            guard options.maxBreadcrumbs > 0, !s.over else { return }
            s.breadcrumbs.append(crumb)
            if s.breadcrumbs.count > options.maxBreadcrumbs { s.breadcrumbs.removeFirst(s.breadcrumbs.count - options.maxBreadcrumbs) }
            publishContext(s.breadcrumbs, identity: s.identity)
        }
    }

    /// Records a clean shutdown of this run (appended to its run record and synced);
    /// the next start reports it as `clean`. Calling it again does nothing. It also
    /// ends the run in this process, even when recording fails: breadcrumbs added
    /// after it are not published, and a new ``start(_:)`` may begin the next run.
    package func endSession() throws(CrashCaptureError) {
        try state.withLock { (s: inout State) throws(CrashCaptureError) in
            if !s.over {
                // The run is over whatever comes of recording it: a new one may start.
                s.over = true
                Self.live.store(false, ordering: .releasing)
            }
            guard !s.ended else { return }
            guard let runFile = record(&s) else { throw s.runFileError ?? .io("run record", EIO) }
            try runFile.append(JSONWriter.bytes { w in
                w.ascii(#"{"end":"clean","ended_at_ms":"#)
                w.uint(nowMillis())
                w.byte(0x7D)
            })
            guard fsync(runFile.fd) == 0 else { throw .io("fsync \(runFile.path)", errno) }
            s.ended = true
        }
    }

    /// Turns the runs claimed at start into events and hands them to `store`, one call
    /// per run (`crash` first when it crashed, then `session_end`), for it to encode
    /// (`Processor.record(endedRun:context:counts:)`) and keep. `store` must make
    /// them durable before it returns; only then are the run's record and report deleted.
    /// When it throws, they stay for the next start. Orphan reports (no run record, for
    /// example from C programs using `cairn_crash_install` directly) become `crash`
    /// events too. Runs once per process; later calls return an empty result.
    /// Parsing, symbolication and storing happen on the calling thread: call it off the
    /// service's hot paths.
    ///
    /// `mask` is applied to the runtime's fatal-error message of a crash (which may quote
    /// the service's data: `fatalError("no account for \(email)")`) before it goes into
    /// the event; the SDK passes its privacy rules.
    package func processPreviousRuns(mask: (String) -> String = { $0 },
                                    store: ([EndedRunEvent]) throws -> Void) -> PreviousRunsResult {
        finishSetup()
        let (claimed, live) = state.withLock { s -> ([LockedFile], [String]) in
            defer {
                s.claimed = []
                s.processed = true
            }
            return s.processed ? ([], []) : (s.claimed, s.live)
        }
        let dir = options.directory
        let now = nowMillis()
        // An orphan is a report without a run record: its claimed file is the report itself.
        var units: [(record: RunRecord, file: LockedFile, id: String?, report: String?, orphan: Bool)] = []
        var reports = Set(SmallFile.names(in: dir)
            .filter { $0.hasPrefix("crash-") && $0.hasSuffix(".report") })
        for file in claimed {
            let record = RunRecord(bytes: file.contents())
            let id = record.start?.sessionID ?? Self.idOf(file.path)
            let report = id.flatMap { reports.remove("crash-\($0).report") }
            units.append((record, file, id, report.map { dir + "/" + $0 }, false))
        }
        // Reports of live runs are theirs; the rest without a run record are orphans.
        let busy = Set(live + [sessionID])
        for name in reports.sorted() where !busy.contains(where: { name == "crash-\($0).report" }) {
            let path = dir + "/" + name
            guard let file = LockedFile.claim(path), Self.settled(file) else { continue }
            units.append((RunRecord(bytes: []), file, nil, path, true))
        }
        units.sort { ($0.record.start?.startedAtMillis ?? 0) < ($1.record.start?.startedAtMillis ?? 0) }
        var result = PreviousRunsResult(runs: [], dropped: 0, live: live.count)
        if units.count > options.maxPendingRuns {
            for unit in units.prefix(units.count - options.maxPendingRuns) {
                if let report = unit.report { unlink(report) }
                if !unit.orphan { unlink(unit.file.path) }
                result.dropped += 1
            }
            units.removeFirst(units.count - options.maxPendingRuns)
        }
        // Made for the first crash report only: a start with none opens no ELF file,
        // reads no debug information and runs none of the symbolizer's code.
        var symbolizer: Symbolizer?
        for unit in units {
            var start = unit.record.start
            var run = PreviousRun(sessionID: unit.id, reason: .abnormal, crashEventID: nil, events: [], report: nil,
                                  frames: [], stored: false, error: nil)
            var endedAt: UInt64?
            if let path = unit.report {
                let bytes = Self.read(path)
                var report = CrashReport(bytes: bytes)
                report.message = report.message.map(mask)
                // A run that crashed before its record was written: its context blob
                // names it (only an orphan's own start is taken from there).
                if unit.orphan { start = RunStart(context: report) }
                let symbolizing = symbolizer ?? Symbolizer()
                symbolizer = symbolizing
                let crash = CrashEvent.crash(report: report, rawBytes: bytes, start: start,
                                             identity: unit.record.identity, symbolizer: symbolizing,
                                             fallbackMillis: Self.mtimeMillis(path) ?? now)
                run.reason = .crashed
                run.crashEventID = crash.event.event.id.map(EventIDGenerator.text)
                run.events.append(crash.event)
                run.report = report
                run.frames = crash.frames
                if run.sessionID == nil { run.sessionID = crash.event.event.sessionID }
                endedAt = report.timeNanos > 0 ? report.timeNanos / 1_000_000 : nil
            } else if let clean = unit.record.cleanEndMillis {
                run.reason = .clean
                endedAt = clean
            } else if let s = start, let file = s.oomFile, let before = s.oomKills,
                      let after = OOMCounter.read(file), after > before {
                run.reason = .oomKilled
            }
            // A run record always gets its end; an orphan report only when its context
            // blob names the run (a C program's has no run to end).
            if !unit.orphan || start != nil, let sid = run.sessionID {
                run.events.append(CrashEvent.sessionEnd(start: start, identity: unit.record.identity, sessionID: sid,
                                                        reason: run.reason, endedAt: endedAt,
                                                        crashEventID: run.crashEventID, detectedAt: now))
            }
            do {
                try store(run.events)
                run.stored = true
                if let report = unit.report { unlink(report) }
                if !unit.orphan { unlink(unit.file.path) }
            } catch {
                run.error = "\(error)"
            }
            result.runs.append(run)
        }
        return result
    }

    // MARK: Helpers

    /// This run's record, written now if it is not yet; nil when that fails (the reason
    /// is kept, and it is not tried again).
    private func record(_ s: inout State) -> LockedFile? {
        if let file = s.runFile { return file }
        guard s.runFileError == nil else { return nil }
        do {
            s.runFile = try Self.createRecord(start, in: options.directory)
        } catch {
            s.runFileError = error
        }
        return s.runFile
    }

    private static func createRecord(_ start: RunStart, in dir: String) throws(CrashCaptureError) -> LockedFile {
        try LockedFile.create(dir + "/run-\(start.sessionID).json", line: start.line, spare: dir + "/" + spareName)
    }

    /// Serialises the context blob and hands it to the handler; called with the lock held
    /// (the C call must not overlap itself). Oldest breadcrumbs go first when it would
    /// not fit the capacity.
    private func publishContext(_ all: [Breadcrumb], identity: RunIdentity?) {
        var crumbs = all[...]
        while true {
            let bytes = JSONWriter.bytes { w in
                w.byte(0x7B)
                // What the run record's start line says, for a crash before it is written.
                start.writeFields(&w)
                w.byte(0x2C)
                if let identity {
                    w.key("identity")
                    identity.write(&w)
                    w.byte(0x2C)
                }
                w.key("breadcrumbs")
                w.byte(0x5B)
                for (i, c) in crumbs.enumerated() {
                    if i > 0 { w.byte(0x2C) }
                    w.byte(0x7B)
                    w.key("time")
                    w.string(rfc3339(millis: c.millis).text)
                    if let category = c.category {
                        w.byte(0x2C)
                        w.key("category")
                        w.string(category)
                    }
                    w.byte(0x2C)
                    w.key("message")
                    w.string(c.message)
                    w.byte(0x7D)
                }
                w.byte(0x5D)
                w.byte(0x7D)
            }
            if bytes.count <= options.contextCapacity || crumbs.isEmpty {
                _ = bytes.withUnsafeBytes { cairn_crash_set_context($0.baseAddress, $0.count) }
                return
            }
            crumbs = crumbs.dropFirst()
        }
    }

    private static func cut(_ s: String, _ limit: Int) -> String {
        guard s.utf8.count > limit else { return s }
        var out = ""
        for ch in s where out.utf8.count + ch.utf8.count <= limit { out.append(ch) }
        return out
    }

    /// `<id>` of `.../run-<id>.json` or `.../run-<id>.json.tmp`.
    /// Takes the locks of the run records whose runs have ended (see docs/FORMATS.md,
    /// "Who may touch what"); the ids of the others, which are live.
    private static func claimEndedRuns(in dir: String, except own: String?) -> ([LockedFile], [String]) {
        var claimed: [LockedFile] = []
        var live: [String] = []
        for name in SmallFile.names(in: dir)
        where name.hasPrefix("run-") && (name.hasSuffix(".json") || name.hasSuffix(".json.tmp")) {
            let id = idOf(name)
            if own != nil && id == own { continue }
            if let file = LockedFile.claim(dir + "/" + name) {
                claimed.append(file)
            } else if let id {
                live.append(id)
            }
        }
        return (claimed, live)
    }

    /// The empty file the next start renames into its run record (docs/FORMATS.md,
    /// "Run record").
    static let spareName = "next-run.record"

    private static func idOf(_ path: String) -> String? {
        let name = path.split(separator: "/").last.map(String.init) ?? path
        guard name.hasPrefix("run-") else { return nil }
        let rest = name.dropFirst(4)
        guard let dot = rest.firstIndex(of: ".") else { return nil }
        let id = String(rest[..<dot])
        return id.isEmpty ? nil : id
    }

    /// Whether an orphan report is done: complete, or untouched for 30 s (a handler
    /// still writing it touches it within milliseconds).
    private static func settled(_ file: LockedFile) -> Bool {
        if CrashReport(bytes: file.contents()).complete { return true }
        guard let m = mtimeMillis(file.path) else { return false }
        return nowMillis() > m + 30_000
    }

    private static func mtimeMillis(_ path: String) -> UInt64? {
        var st = stat()
        guard stat(path, &st) == 0 else { return nil }
        return UInt64(st.st_mtim.tv_sec) * 1000 + UInt64(st.st_mtim.tv_nsec) / 1_000_000
    }

    private static func read(_ path: String) -> [UInt8] {
        Array(FileManager.default.contents(atPath: path) ?? Data())
    }
}
