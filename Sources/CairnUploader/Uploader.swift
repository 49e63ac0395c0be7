package import CairnBase
package import CairnStore
import CairnProcessor
import CCairnCore
import FoundationEssentials
import Glibc

/// Drains the ring into batches, builds each request once, and delivers it: retries
/// with backoff, honours `Retry-After`, stores what cannot be delivered in the
/// snapshot store and replays it later, with the same bytes and idempotency key.
///
/// One background thread forms batches (up to twice ``UploaderOptions/maxInFlight``
/// framed at once while the collector answers) and decides what happens to them; up to
/// ``UploaderOptions/maxInFlight`` sender threads, started as they are needed (another
/// when an attempt has waited 2 ms for one while the senders were busy half their
/// time or more), make the attempts. The ring's records are
/// released, in order, only when their batch is acknowledged or safely stored.
///
/// ```swift
/// let uploader = Uploader(ring: ring, store: store, transport: HTTPTransport(),
///                         options: UploaderOptions(url: "https://collector.example/v1/batch"))
/// uploader.start()
/// …
/// uploader.shutdown(timeout: .seconds(5))
/// ```
package final class Uploader: @unchecked Sendable {
    // @unchecked: the mutable state lives in `state` (a lock) or is touched only by
    // the worker thread (`flights`, `encoder`, `breaker`); `ring`, `store` and
    // `transport` are Sendable.

    struct Shared {
        var stats = UploaderStats()
        var flushRequests = 0
        var stopping = false
        var started = false
        var finished = false
        var idle = false
        /// Flushes asked for so far; the worker publishes `idleGeneration` for the latest
        /// one it saw before looking at the ring, so a flush never takes an idle verdict
        /// formed before it was asked for.
        var flushGeneration = 0
        var idleGeneration = 0
        /// The worker's passes so far (for tests: an idle worker makes none).
        var passes = 0
        /// The latest deadline of the flushes waiting now: attempts made for them end by then.
        var flushDeadline: ContinuousClock.Instant?
    }

    let ring: Ring
    /// nil when no store could be opened: batches then stay in the ring until delivered.
    let store: SnapshotStore?
    let transport: any Transport
    /// The uploader's options.
    package let options: UploaderOptions
    let state = Locked(Shared())
    let wake = Condition()
    /// Guarded by `wake`.
    var signalled = false
    let clock = ContinuousClock()

    // Worker-only state.
    /// Batches formed and not yet released, in ring order.
    var flights: [Flight] = []
    /// The stored request being replayed, if one is.
    var replaying: Replaying?
    var nextToken = 0
    /// Requests at once: ``UploaderOptions/maxInFlight`` within 1...``RingBatchMark/slots``.
    let maxInFlight: Int

    // Sender threads: `jobs`, `idleSenders`, `senderCount`, `sendersStopped` and
    // `senderLoad` are guarded by `senders`; what they bring back goes to `outcomes`.
    let senders = Condition()
    var jobs: [Job] = []
    var idleSenders = 0
    var senderCount = 0
    var sendersStopped = false
    var senderLoad = SenderLoad(now: ContinuousClock().now)
    var mostSenders = 0
    let outcomes = Locked<[Outcome]>([])

    /// Each destination's delivery state (worker-only), by ``UploadDestination/index``:
    /// one destination failing, paused or refusing the credentials never slows another's
    /// requests (docs/ARCHITECTURE.md, "Export destinations").
    var routes: [Route]
    /// The destinations this uploader sends to (``destinations(_:)``).
    let destinations: [UploadDestination]
    var encoder: FrameEncoder?
    /// The OTLP encoders, one per encoding the signals use (worker-only).
    var otlpEncoders: [OTLPEncoder] = []
    /// The zstd context of OTLP requests compressed with zstd (worker-only).
    var otlpZstd: ZstdContext?
    /// The partial-success messages said so far (worker-only; each is said once).
    var partialMessages = Set<String>()
    /// The contexts of bare records (``RingContexts``).
    let contexts: RingContexts
    /// Whose drop counts the table holds (worker-only; set when the worker starts).
    var dropSessions: DropSessions?
    var firstSeen: (position: UInt64, at: ContinuousClock.Instant)?
    /// The run being formed and the batch being framed, reused from batch to batch so
    /// that their arrays are allocated once (worker thread only).
    var peeked = Ring.Run()
    var framing = RingContexts.Batch()
    var lastSync: ContinuousClock.Instant
    /// The store's ``SnapshotStore/commits`` at the last sync: none is needed while it
    /// has not changed.
    var syncedCommits: UInt64 = 0
    /// Batches framed since the heap was last trimmed, and when that was.
    var framedSinceRelease = 0
    var lastRelease = ContinuousClock().now
    /// Until a replay fails, stored requests are due whatever their backoff said: a new
    /// process (often with a corrected URL or key) tries them all at once.
    var replayAllDue = true
    /// Batches grow under load: a batch that its limits cut short (more records wait
    /// behind it) while half the request slots or more are out doubles the next one's
    /// limits, up to ``maxBatchScale`` times the options' (and ``maxGrownBatchBytes``); a
    /// batch that closes on its age halves them.
    var batchScale = 1
    /// Ring bytes per record in the last batch, to tell where a batch will be full.
    var ringBytesPerRecord: UInt64 = 256

    /// How far batches grow under load: 16 times ``UploaderOptions/maxBatchEvents`` and
    /// ``UploaderOptions/maxBatchBytes`` (never more than ``maxGrownBatchBytes``, nor an
    /// eighth of the ring's bytes).
    package static let maxBatchScale = 16
    /// Bytes of a backlog kept mapped past the next batch's start and before the write
    /// position, 256 KiB: the rest waits in the ring file (``Ring/releaseBacklog(keeping:)``).
    static let backlogKeptMapped = 256 * 1024
    /// The most a grown batch holds, 768 KiB (unless ``UploaderOptions/maxBatchBytes``
    /// is larger): a batch's ring pages stay in memory until it is framed, so a larger
    /// ring buys headroom, not larger batches. Eight requests out of 768 KiB each carry
    /// about 170k events a second of 10-property events over a 50 ms round trip; at
    /// 100k events a second, 768 KiB instead of 1 MiB took 0.4-0.5 MiB off the RSS
    /// added (the mean of 30 samples over 8 s, in each of several runs).
    package static let maxGrownBatchBytes = 768 << 10

    /// Creates an uploader; nothing runs until ``start()``.
    ///
    /// - Parameter store: Where undeliverable requests wait; nil when none could be
    ///   opened, in which case batches stay in the ring (which survives a restart) and
    ///   are retried from there, and prebuilt requests are refused.
    package init(ring: Ring, store: SnapshotStore?, transport: any Transport, options: UploaderOptions) {
        self.ring = ring
        self.store = store
        self.transport = transport
        self.options = options
        self.routes = UploadDestination.allCases.map { _ in Route(breaker: options.breaker) }
        self.destinations = Self.destinations(options)
        self.maxInFlight = min(max(1, options.maxInFlight), RingBatchMark.slots)
        self.lastSync = ContinuousClock().now
        contexts = RingContexts(sdkVersion: options.sdkVersion, current: options.currentContext)
        // Evictions are counted, in events, as they happen, whichever thread stores; what
        // an evicted request reported never reached a collector and is counted again.
        // A burst wakes the worker as soon as a batch is full, not at the batch's age.
        ring.onFillAlarm { [weak self] in self?.signal() }
        store?.evictionObserver = { [ring, state] evictions in
            for e in evictions {
                // A record that does not decode was still one request's worth of data.
                let request = UploadRequest(record: e.record)
                let events = request?.events ?? 1
                state.withLock { $0.stats.dropped[e.reason, default: 0] += events }
                Self.countInTable(ring, e.reason, events)
                for (reason, n) in request?.reportedDrops ?? [:] { Self.countInTable(ring, DropReason(name: reason), n) }
            }
        }
    }

    /// Starts the background worker (once).
    package func start() {
        let first = state.withLock { s -> Bool in
            defer { s.started = true }
            return !s.started
        }
        guard first else { return }
        if !startThread(name: "cairn-uploader", { [self] in self.run() }) {
            // Thread limit reached: events wait in the ring; the next start uploads them.
            writeStandardError("[cairn] uploader not started: the system refused a thread\n")
        }
    }

    /// Sends what is pending now, waiting at most `timeout`. Returns `true` once the ring
    /// is empty, no batch waits in memory, and every request that was not delivered is
    /// in the snapshot store, synced to disk. With the collector answering, stored
    /// requests that are due are also sent first; while it fails (errors, pauses, an open
    /// breaker), batches are stored at once instead of waiting out their retries, so a
    /// flush ends as soon as everything is safe. What could not be made safe in time
    /// stays in the ring (which survives a crash) and the call returns false.
    @discardableResult
    package func flush(timeout: Duration) -> Bool {
        let deadline = clock.now + timeout
        let generation = state.withLock { s -> Int in
            s.flushGeneration += 1
            s.flushRequests += 1
            s.flushDeadline = max(s.flushDeadline ?? deadline, deadline)
            s.idle = false
            return s.flushGeneration
        }
        signal()
        defer {
            state.withLock { s in
                s.flushRequests -= 1
                if s.flushRequests == 0 { s.flushDeadline = nil }
            }
        }
        // A look at the ring that began after this request and found everything safe
        // is the answer, whatever the worker does next (it may start replaying a stored
        // request at once, which makes it busy again but puts nothing at risk).
        var safe = false
        while clock.now < deadline {
            let (seen, finished) = state.withLock { ($0.idleGeneration >= generation, $0.finished) }
            if seen { safe = true; break }
            if finished { break }
            usleep(2_000)
        }
        guard safe || isDrained() else { return false }
        do {
            try store?.sync()
        } catch {
            return false
        }
        return true
    }

    /// Flushes within `timeout`, then stops the worker, returning by the deadline in
    /// every state (an attempt still running then is left to end on its own; its
    /// batch stays in the ring). Nothing is lost: what was not sent stays in the ring
    /// file or the snapshot store for the next start.
    @discardableResult
    package func shutdown(timeout: Duration) -> Bool {
        let deadline = clock.now + timeout
        let drained = flush(timeout: timeout)
        state.withLock { $0.stopping = true }
        signal()
        while !state.withLock({ $0.finished || !$0.started }) && clock.now < deadline {
            usleep(2_000)
        }
        try? store?.sync()
        try? ring.sync()
        return drained
    }

    /// The uploader's counters.
    package var stats: UploaderStats {
        var stats = state.withLock { $0.stats }
        senders.lock()
        stats.senderThreads = senderCount
        stats.mostSenderThreads = mostSenders
        senders.unlock()
        return stats
    }

    // MARK: Building requests

    /// Builds the exact request the uploader would send for `records` (each one JSON
    /// object, without newlines), without sending it: for integrators who send it
    /// themselves.
    package func buildRequest(records: [[UInt8]]) throws(CairnError) -> UploadRequest {
        let encoder = try FrameEncoder(level: options.compressionLevel)
        return makeRequest(body: try encoder.encode(batchID: UInt64.random(in: 1...UInt64.max), records: records),
                           reportingDrops: false).request
    }

    /// Hands over a complete request body (for example a batch built elsewhere): it
    /// gets the same snapshot, retry and persistence treatment as the uploader's own
    /// batches. The request is built once, here.
    ///
    /// - Throws: ``StoreError`` when it cannot be stored (no store could be opened, a
    ///   full disk, larger than the size cap).
    @discardableResult
    package func sendPrebuilt(body: [UInt8], contentEncoding: String = "zstd",
                             priority: Tier = .important) throws(StoreError) -> UploadRequest {
        guard let store else { throw StoreError(ENODEV, function: "Uploader.sendPrebuilt (no snapshot store)") }
        var request = makeRequest(body: body, reportingDrops: false).request
        if let i = request.headers.firstIndex(where: { $0.name == "Content-Encoding" }) {
            request.headers[i].value = contentEncoding
        }
        try store.put(request.record, priority: priority, durable: priority == .critical)
        signal()
        return request
    }

    /// Stores `records` (whole events) as requests of their own, one per destination (a
    /// batch frame for the native upload, OTLP logs, traces and metrics requests), put in the
    /// snapshot store together (one transaction) with `priority` (synced when Critical)
    /// before it returns: for
    /// records that do not go through the ring (Critical events, a previous run's crash
    /// and session end). Callable from any thread.
    ///
    /// - Throws: ``StoreError`` when they cannot be stored (no store could be opened, a
    ///   full disk, larger than the size cap); `CairnError` when they cannot be framed.
    package func storeRecords(_ records: [[UInt8]], priority: Tier) throws {
        guard let store else { throw StoreError(ENODEV, function: "Uploader.storeRecords (no snapshot store)") }
        var requests: [UploadRequest] = []
        if options.native {
            let body = try FrameEncoder().encode(batchID: UInt64.random(in: 1...UInt64.max), records: records)
            requests.append(makeRequest(body: body, reportingDrops: false).request)
        }
        if let otlp = options.otlp {
            var encoders: [OTLPEncoder] = []  // this call's own: any thread may call it
            let built = Self.otlpRequests(otlp, settings: otlpSettings, sdkVersion: options.sdkVersion,
                                          encoders: &encoders, records: { add in
                                              for r in records { r.withUnsafeBytes { add($0, nil) } }
                                          })
            if built.refused > 0 { count(drop: .unframeable, built.refused) }
            requests += built.requests
        }
        // Together: a kill leaves them in every destination's requests, or in none.
        try store.put(all: requests.map(\.record), priority: priority, durable: priority == .critical)
        signal()
    }

    /// Whether a snapshot store was given (``sendPrebuilt(body:contentEncoding:priority:)``
    /// needs one).
    package var hasStore: Bool { store != nil }

    /// Builds a request. With `reportingDrops` (the worker's batches only, so that one
    /// thread decides what is reported), a `Cairn-Dropped` header carries every drop the
    /// ring's table has not reported yet, and the counts it carries are returned, to be
    /// marked reported once the request is acknowledged or stored.
    func makeRequest(body: [UInt8], key: String = UUID().uuidString.lowercased(),
                             reportingDrops: Bool) -> (request: UploadRequest, reported: [DropReport]) {
        var request = UploadRequest.batch(url: options.url, apiKey: options.apiKey, sdkVersion: options.sdkVersion,
                                          body: body, key: key)
        var reported: [DropReport] = []
        if reportingDrops {
            let drops = ring.drops()
            // Every count not yet reported, and (with a session) whose it is.
            let shares = (dropSessions ?? DropSessions(session: "", drops: [])).unreported(drops)
            var counts: [String: UInt64] = [:]
            var upTo: [Int32: UInt64] = [:]
            for c in shares.flatMap(\.counts) {
                counts[c.reason, default: 0] += c.count
                upTo[c.slot] = max(upTo[c.slot] ?? 0, c.upTo)
            }
            reported = upTo.sorted { $0.key < $1.key }.map { DropReport(slot: $0.key, counted: $0.value) }
            if !counts.isEmpty {
                let text = counts.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ",")
                request.headers.append(HTTPHeader("Cairn-Dropped", text))
                if dropSessions != nil {
                    request.headers.append(HTTPHeader("Cairn-Dropped-Sessions", DropSessions.header(shares)))
                }
            }
        }
        return (request, reported)
    }

    /// `request` as it goes out now: with ``UploaderOptions/followDestination``, to the
    /// current URL with the current API key; body, key and other headers as built.
    func resolved(_ request: UploadRequest) -> UploadRequest {
        guard options.followDestination else { return request }
        if request.destination.isOTLP {
            // To the signal's current URL with its current headers (new credentials);
            // body and encoding as built. A signal no longer configured: as built.
            guard let signal = options.otlp?.signal(for: request.destination) else { return request }
            var r = request
            r.url = signal.url
            let own = ["content-type", "content-encoding", "user-agent"]
            r.headers = request.headers.filter { own.contains($0.name.lowercased()) } + signal.headers
            return r
        }
        var r = request
        r.url = options.url
        r.headers.removeAll { $0.name.lowercased() == "authorization" }
        if let apiKey = options.apiKey { r.headers.append(HTTPHeader("Authorization", "Bearer \(apiKey)")) }
        return r
    }

    // MARK: The worker (forming in Uploader+Batches, marks in +Marks, attempts in
    // +Flights, senders in +Senders, replay in +Replay, drop reports in +Drops)

    func run() {
        if options.debugLogging {
            let r = ring.stats()
            var notes: [String] = []
            if r.origin == .setAside { notes.append("ring file was unreadable: set aside, fresh ring created") }
            if r.skippedCorrupt > 0 { notes.append("ring: \(r.skippedCorrupt) torn regions skipped (\(r.skippedBytes) bytes)") }
            if r.recovered > 0 { notes.append("ring: \(r.recovered) records recovered from the last run") }
            if store == nil { notes.append("no snapshot store: undelivered batches stay in the ring") }
            if let d = store?.stats.damage { notes.append("snapshot store damaged: \(d)") }
            if let n = store?.stats.count, n > 0 { notes.append("snapshot store: \(n) requests to replay") }
            for note in notes { writeStandardError("[cairn] \(note)\n") }
        }
        // Damage found when the ring and the store were opened is counted once, in the
        // drop table, so that it is reported even if this process is killed soon.
        let r = ring.stats()
        count(drop: .ringCorrupt, Int(r.skippedCorrupt))
        if r.origin == .setAside { count(drop: .ringSetAside, 1) }
        // Requests the salvage could not prove intact (one when their number is unknown).
        if let d = store?.stats.damage { count(drop: .storeCorrupt, d.lost ?? 1) }
        _ = try? store?.evictExpired()
        dropSessions = noteDropSession()
        for d in UploadDestination.allCases {
            routes[d.index].status.restore(try? store?.metadata(DeliveryStatus.metadataKey(for: d)))
        }
        contexts.restore(from: store, ring: ring)
        resumeMarkedBatches()
        while !state.withLock({ $0.passes += 1; return $0.stopping }) {
            let now = clock.now
            if let store, store.commits != syncedCommits, now - lastSync >= options.syncInterval {
                let commits = store.commits
                try? store.sync()
                syncedCommits = commits
                lastSync = now
            }
            collectOutcomes()
            releaseDone()
            var wake: [ContinuousClock.Instant] = []
            let paused = pausedEverywhere(now)
            if let paused, !flushing {
                // Nothing is formed or sent while every destination is paused, unless a
                // flush waits (then batches are stored at once).
                wake.append(paused)
            } else {
                // New events first, so a backlog of stored requests never starves the ring.
                if let next = formBatches() { wake.append(next) }
                if let next = advanceFlights() { wake.append(next) }
                replayIfDue()
            }
            if let next = growSenders() { wake.append(next) }
            if let store, store.commits != syncedCommits { wake.append(lastSync + options.syncInterval) }
            // A backlog (producers ahead of the collector) waits in the ring file, not
            // in the process: only the pages near the two cursors stay mapped.
            try? ring.releaseBacklog(keeping: Self.backlogKeptMapped)
            if !pendingOutcomes && !progressed {
                // Idle (nothing formed, out, stored, paused or to retry), the worker
                // sleeps until a record is appended (the fill alarm formBatches armed),
                // a flush or a send's end wakes it; otherwise it looks again at the
                // batch age, as its duties that keep no time of their own need.
                let idle = flights.isEmpty && replaying == nil && deliveredUndeleted.isEmpty && paused == nil
                    && marksFailingSince == nil && (store?.count ?? 0) == 0
                sleep(until: wake.min() ?? clock.now + (idle ? Self.idleWake : options.maxBatchAge))
                ring.disarmFillAlarm()
            }
            progressed = false
        }
        stopSenders()
        state.withLock { $0.finished = true }
        signal()
    }

    /// The worker's passes so far.
    var workerPasses: Int { state.withLock { $0.passes } }

    /// A flush is waiting.
    var flushing: Bool { state.withLock { $0.flushRequests > 0 } }

    /// Something changed in this pass that may allow more work at once.
    var progressed = false

    /// How long an idle worker sleeps when nothing is timed: a safety net, since every
    /// change that gives it work (a record appended, a flush, a send's end, a pause's
    /// end) wakes it.
    static let idleWake: Duration = .seconds(300)

    /// Since when the store has refused to keep marks; nil while it keeps them.
    var marksFailingSince: ContinuousClock.Instant?

    /// Stored requests that were delivered but could not be deleted (a full disk, see
    /// ``SnapshotStore``): skipped by replays, their deletes tried again once a second.
    /// Beyond ``maxUndeleted`` such requests, one may be sent again (same key).
    var deliveredUndeleted: [SnapshotID] = []
    /// Stored requests for a destination this process does not send to (worker-only):
    /// passed over by replay.
    var parked = Set<SnapshotID>()
    var undeletedRetry = ContinuousClock.now

    // MARK: Coordination

    /// Publishes whether the worker is idle, as seen by a look at the ring that began
    /// after flush `generation` was asked for.
    func markIdle(_ generation: Int) {
        // Stored requests wait for a replay, except in store-only mode, where they stay,
        // and while the collector fails, when they are safe where they are.
        let failing = everyRouteFailing
        let idle = flights.isEmpty && replaying == nil && (options.storeOnly || store == nil || failing
            || store?.count == 0 || ((try? store?.oldest(limit: 1, readyAt: replayReadyAt).isEmpty) ?? true))
        // No signal here: it would wake this very worker, which would find nothing to do,
        // mark itself idle and signal again: a busy loop. `flush` polls `idle`.
        state.withLock { s in
            s.idle = idle
            if idle { s.idleGeneration = max(s.idleGeneration, generation) }
        }
    }

    /// Everything appended is delivered or stored (asked from any thread: the ring's
    /// stats, not its consumer calls).
    func isDrained() -> Bool {
        ring.stats().used == 0 && state.withLock { $0.idle || $0.finished }
    }

    /// Wakes the worker (flush, shutdown, a new snapshot). The flag makes a signal sent
    /// while the worker is not yet waiting wake its next wait instead of being lost.
    func signal() {
        wake.lock()
        signalled = true
        wake.broadcast()
        wake.unlock()
    }

    /// The worker sleeps until `deadline` or a signal, whichever comes first; it does
    /// not sleep at all once asked to stop.
    func sleep(until deadline: ContinuousClock.Instant) {
        let remaining = deadline - clock.now
        guard remaining > .zero, !state.withLock({ $0.stopping }) else { return }
        wake.lock()
        while !signalled && wake.wait(until: deadline) {}
        signalled = false
        wake.unlock()
    }
}

/// Whole milliseconds in `d` (0 for negative durations).
func milliseconds(_ d: Duration) -> UInt64 {
    let c = d.components
    guard c.seconds >= 0 else { return 0 }
    return UInt64(c.seconds) * 1000 + UInt64(max(0, c.attoseconds) / 1_000_000_000_000_000)
}

/// One destination's delivery state: its circuit breaker, the pause its collector asked
/// for, the hold of a refused configuration, and what the operator was last told.
struct Route {
    var breaker: CircuitBreaker
    /// Refusals of the configuration in a row (``DeliveryAction/hold``).
    var holds = 0
    /// Until when the last refusal holds stored requests (milliseconds since 1970).
    var heldUntil: UInt64 = 0
    /// Until when the collector asked for no requests (429, 503 with `Retry-After`).
    var pausedUntil: ContinuousClock.Instant?
    /// Its last attempt failed (its breaker counts failures: a delivery or a drop
    /// resets them): its stored requests are safe where they are, a flush need not wait
    /// for their replay, and one attempt at a time goes to it.
    var failing: Bool { breaker.failures > 0 }
    /// What the operator was last told about its delivery.
    var status = DeliveryStatus()

    /// Whether a pause is on at `now`.
    func paused(at now: ContinuousClock.Instant) -> Bool { (pausedUntil ?? now) > now }

    /// Whether an attempt may go to it at `now` (neither paused nor its breaker open).
    func available(at now: ContinuousClock.Instant) -> Bool { !paused(at: now) && breaker.wouldAllow(at: now) }

    /// When it may take an attempt again, if not at `now`: the end of its pause and of
    /// its breaker's open time (a probe out: a second from now).
    func availableFrom(_ now: ContinuousClock.Instant) -> ContinuousClock.Instant? {
        var from = paused(at: now) ? pausedUntil : nil
        switch breaker.state {
        case .closed: break
        case .halfOpen: from = max(from ?? now, now + .seconds(1))
        case .open(let until): if until > now { from = max(from ?? until, until) }
        }
        return from
    }
}

/// The host's id (`/etc/machine-id`, OTLP's `host.id`), read once, when the first OTLP
/// request is built: never on the thread that starts Cairn.
let hostMachineID: String? = (try? SmallFile.read("/etc/machine-id", limit: 256).get())
    .map { String(decoding: $0, as: UTF8.self).trimmingWhiteSpace }.flatMap { $0.isEmpty ? nil : $0 }

extension Uploader {
    /// What the OTLP encoders add to the records: ``UploaderOptions/otlpResource``, with
    /// the host's id when the options give none.
    var otlpSettings: OTLPEncoder.Settings {
        var s = options.otlpResource
        if s.hostID == nil { s.hostID = hostMachineID }
        return s
    }

    /// The destinations `options` sends to.
    static func destinations(_ options: UploaderOptions) -> [UploadDestination] {
        guard !options.storeOnly else { return [] }
        var out: [UploadDestination] = options.native ? [.native] : []
        if options.otlp?.logs != nil { out.append(.otlpLogs) }
        if options.otlp?.traces != nil { out.append(.otlpTraces) }
        if options.otlp?.metrics != nil { out.append(.otlpMetrics) }
        return out
    }

    /// When the first of their pauses ends, if every destination is paused at `now`.
    func pausedEverywhere(_ now: ContinuousClock.Instant) -> ContinuousClock.Instant? {
        let used = destinations.map { routes[$0.index] }
        guard !used.isEmpty, used.allSatisfy({ $0.paused(at: now) }) else { return nil }
        return used.compactMap(\.pausedUntil).min()
    }

    /// Whether every destination fails (its last attempt failed, or its breaker is
    /// open): stored requests are then safe where they are.
    var everyRouteFailing: Bool {
        let now = clock.now
        let used = destinations
        return !used.isEmpty && used.allSatisfy { routes[$0.index].failing || !routes[$0.index].breaker.wouldAllow(at: now) }
    }

    /// Whether any destination fails.
    var anyRouteFailing: Bool { destinations.contains { routes[$0.index].failing } }
}
