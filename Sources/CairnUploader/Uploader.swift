public import CairnBase
public import CairnStore
import CCairnCore
import FoundationEssentials
import Glibc

/// Options of the ``Uploader``.
public struct UploaderOptions: Sendable {
    /// The collector's batch endpoint.
    public var url: String
    /// Sent as `Authorization: Bearer <key>` (redacted in logs).
    public var apiKey: String?
    /// A batch closes at this many events...
    public var maxBatchEvents: Int
    /// ...or this many bytes of JSON...
    public var maxBatchBytes: Int
    /// ...or when its first event has waited this long.
    public var maxBatchAge: Duration
    /// Attempts in this process before a batch goes to the snapshot store.
    public var attempts: Int
    /// Waits between attempts (and between replays of a stored snapshot).
    public var backoff: Backoff
    /// The longest pause a `Retry-After` can impose.
    public var maxPause: Duration
    /// Waits while the collector refuses the configuration (``DeliveryAction/hold``):
    /// after the n-th refusal in a row, a random time between half and all of
    /// min(cap, base × 2^n) passes before one stored request probes again; 30 s to 10 min
    /// by default.
    public var holdBackoff = Backoff(base: .seconds(30), cap: .seconds(600))
    /// Receives one line (without a newline) whenever delivery changes state: failing
    /// (since when, why, how many requests wait on disk), refused (a configuration fault:
    /// nothing is dropped), recovered. Never one per attempt. nil: nothing is said.
    public var notice: (@Sendable (String) -> Void)?
    /// Opens after repeated failures; probes before closing.
    public var breaker: CircuitBreaker
    /// Status code → action.
    public var policy: StatusPolicy
    /// Total time allowed for one request.
    public var requestTimeout: Duration
    /// Uncritical snapshots are synced to disk at least this often.
    public var syncInterval: Duration
    /// Tier of event batches in the snapshot store.
    public var priority: Tier
    /// zstd level of batch frames.
    public var compressionLevel: Int32
    /// Print start and result logs to stderr.
    public var debugLogging: Bool
    /// Receives every start and result log, unchanged.
    public var observer: (any UploadObserver)?
    /// The SDK version in `User-Agent: cairn-swift/<version>`.
    public var sdkVersion: String
    /// Keep batches in the snapshot store instead of sending them (an SDK without an
    /// upload URL): they wait there, within the store's caps, to be read or sent later.
    public var storeOnly: Bool
    /// Receives the records of every batch formed from the ring, on the uploader's
    /// thread, before it is sent or stored (other destinations of the same events).
    /// Records recovered after a crash may be seen again: at least once.
    public var tap: (@Sendable ([[UInt8]]) -> Void)?
    /// Whether a stored request is sent to the current ``url`` with the current
    /// ``apiKey`` (true, the default), or to the URL and key it was built with. Its body
    /// and `Idempotency-Key` never change either way.
    public var followDestination: Bool = true
    /// How many requests may be out at once while the collector answers (one at a time
    /// while it fails): a distant collector's round trip then bounds throughput less.
    /// Batches are still released from the ring in order. 1 to 16; 8 by default (at
    /// 100k events a second and a 50 ms round trip, 4 left no room for a slow answer).
    public var maxInFlight: Int = 8
    /// How long a sender thread waits with nothing to send before it ends (all but the
    /// last): the senders a backlog needed are not kept for the quiet that follows.
    var senderIdleExit: Duration = .seconds(30)
    /// This process's `"context":{...},"sdk":{...}` fragment, for bare ring records
    /// whose own context was lost (no snapshot store, or its `ring_context` missing or
    /// damaged): they are sent with it, marked `"context_recovered":false` in `sdk`.
    /// nil: an empty context, marked the same way.
    public var currentContext: (@Sendable () -> [UInt8])?
    /// This process's session id: named by `Cairn-Dropped-Sessions` in the requests that
    /// report its drops, and noted in the store so that a later process reports the drops
    /// this one leaves unreported under this session (``DropSessions``). nil: drops are
    /// reported without a session.
    public var sessionID: String?
    /// How long a batch waits for its mark to be kept in the snapshot store before it is
    /// sent without one (docs/FORMATS.md, `ring_batch`): while the store refuses writes
    /// (full, failing), batches wait this long, then delivery goes on at least once.
    /// 10 s by default.
    public var markPatience: Duration = .seconds(10)

    /// Creates options with defaults near those of OpenTelemetry's batch processor
    /// and Datadog's SDKs: 500 events, 512 KiB or 1 s per batch; 3 attempts with
    /// full-jitter backoff from 0.5 s; a breaker that opens after 5 failures for 30 s.
    public init(url: String, apiKey: String? = nil, maxBatchEvents: Int = 500,
                maxBatchBytes: Int = 512 * 1024, maxBatchAge: Duration = .seconds(1), attempts: Int = 3,
                backoff: Backoff = Backoff(), maxPause: Duration = .seconds(600),
                breaker: CircuitBreaker = CircuitBreaker(), policy: StatusPolicy = .standard,
                requestTimeout: Duration = .seconds(30), syncInterval: Duration = .seconds(5),
                priority: Tier = .sampled, compressionLevel: Int32 = 1, debugLogging: Bool = false,
                observer: (any UploadObserver)? = nil, sdkVersion: String = cairnVersion, storeOnly: Bool = false,
                tap: (@Sendable ([[UInt8]]) -> Void)? = nil) {
        self.url = url
        self.apiKey = apiKey
        self.maxBatchEvents = max(1, maxBatchEvents)
        self.maxBatchBytes = max(1, maxBatchBytes)
        self.maxBatchAge = maxBatchAge
        self.attempts = max(1, attempts)
        self.backoff = backoff
        self.maxPause = maxPause
        self.breaker = breaker
        self.policy = policy
        self.requestTimeout = requestTimeout
        self.syncInterval = syncInterval
        self.priority = priority
        self.compressionLevel = compressionLevel
        self.debugLogging = debugLogging
        self.observer = observer
        self.sdkVersion = sdkVersion
        self.storeOnly = storeOnly
        self.tap = tap
    }
}

/// Counters of an uploader since it started.
public struct UploaderStats: Sendable, Equatable {
    /// Batches the collector acknowledged, including replayed ones.
    public var deliveredBatches = 0
    /// Events in them (for replayed requests, as counted by their batch frame).
    public var deliveredEvents = 0
    /// Attempts that failed and will be retried.
    public var failedAttempts = 0
    /// Batches put in the snapshot store after their in-process attempts.
    public var storedBatches = 0
    /// Stored snapshots delivered by replay (also counted in ``deliveredBatches``).
    public var replayedBatches = 0
    /// Events (or stored requests) dropped, by reason (`.rejected(status: 400)`,
    /// `.storeSize`, ...).
    public var dropped: [DropReason: Int] = [:]
    /// Times the circuit breaker opened.
    public var breakerOpenings = 0
    /// Attempts whose answer refused the configuration (``DeliveryAction/hold``): their
    /// requests were kept.
    public var holds = 0
    /// Batches the collector found too large (413), stored as two halves instead.
    public var splitBatches = 0
    /// Times a `Retry-After` or 429/503 paused the uploader.
    public var pauses = 0
    /// Times a batch could not be put in the snapshot store (full disk, over the cap);
    /// its records stayed in the ring and it was tried again later.
    public var storeFailures = 0
    /// Times a batch's mark (or the contexts its records need) could not be kept in the
    /// snapshot store: the batch waited, and was tried again at the next pass.
    public var markFailures = 0
    /// Batches sent although their mark could not be kept for
    /// ``UploaderOptions/markPatience``: a process killed before they are safe sends their
    /// events again under another `Idempotency-Key` (with the same event ids).
    public var unmarkedSends = 0
    /// Sender threads running now (a gauge, not a count since start). They start as the
    /// collector's pace needs them, up to ``UploaderOptions/maxInFlight``, and end after
    /// 30 s with nothing to send (all but one).
    public var senderThreads = 0
    /// The most sender threads that ran at once.
    public var mostSenderThreads = 0

    /// All counts zero.
    public init() {}
}

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
public final class Uploader: @unchecked Sendable {
    // @unchecked: the mutable state lives in `state` (a lock) or is touched only by
    // the worker thread (`flights`, `encoder`, `breaker`); `ring`, `store` and
    // `transport` are Sendable.

    private struct Shared {
        var stats = UploaderStats()
        var pausedUntil: ContinuousClock.Instant?
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
        /// The last attempt failed: stored requests are safe where they are, and a flush
        /// need not wait for their replay.
        var collectorFailing = false
    }

    private let ring: Ring
    /// nil when no store could be opened: batches then stay in the ring until delivered.
    private let store: SnapshotStore?
    private let transport: any Transport
    /// The uploader's options.
    public let options: UploaderOptions
    private let state = Locked(Shared())
    private let wake = Condition()
    /// Guarded by `wake`.
    private var signalled = false
    private let clock = ContinuousClock()

    // Worker-only state.
    /// Batches formed and not yet released, in ring order.
    private var flights: [Flight] = []
    /// The stored request being replayed, if one is.
    private var replaying: Replaying?
    private var nextToken = 0
    /// Requests at once: ``UploaderOptions/maxInFlight`` within 1...``RingBatchMark/slots``.
    private let maxInFlight: Int

    // Sender threads: `jobs`, `idleSenders`, `senderCount`, `sendersStopped` and
    // `senderLoad` are guarded by `senders`; what they bring back goes to `outcomes`.
    private let senders = Condition()
    private var jobs: [Job] = []
    private var idleSenders = 0
    private var senderCount = 0
    private var sendersStopped = false
    private var senderLoad = SenderLoad(now: ContinuousClock().now)
    private var mostSenders = 0
    private let outcomes = Locked<[Outcome]>([])

    private var breaker: CircuitBreaker
    /// Refusals of the configuration in a row (``DeliveryAction/hold``).
    private var holds = 0
    /// Until when the last refusal holds stored requests (milliseconds since 1970).
    private var heldUntil: UInt64 = 0
    /// What the operator was last told about delivery.
    private var deliveryStatus = DeliveryStatus()
    private var encoder: FrameEncoder?
    /// The contexts of bare records (``RingContexts``).
    private let contexts: RingContexts
    /// Whose drop counts the table holds (worker-only; set when the worker starts).
    private var dropSessions: DropSessions?
    private var firstSeen: (position: UInt64, at: ContinuousClock.Instant)?
    /// The run being formed and the batch being framed, reused from batch to batch so
    /// that their arrays are allocated once (worker thread only).
    private var peeked = Ring.Run()
    private var framing = RingContexts.Batch()
    private var lastSync: ContinuousClock.Instant
    /// The store's ``SnapshotStore/commits`` at the last sync: none is needed while it
    /// has not changed.
    private var syncedCommits: UInt64 = 0
    /// Batches framed since the heap was last trimmed, and when that was.
    private var framedSinceRelease = 0
    private var lastRelease = ContinuousClock().now
    /// Until a replay fails, stored requests are due whatever their backoff said: a new
    /// process (often with a corrected URL or key) tries them all at once.
    private var replayAllDue = true
    /// Batches grow under load: a batch that its limits cut short (more records wait
    /// behind it) while half the request slots or more are out doubles the next one's
    /// limits, up to ``maxBatchScale`` times the options' (and ``maxGrownBatchBytes``); a
    /// batch that closes on its age halves them.
    private var batchScale = 1
    /// Ring bytes per record in the last batch, to tell where a batch will be full.
    private var ringBytesPerRecord: UInt64 = 256

    /// How far batches grow under load: 16 times ``UploaderOptions/maxBatchEvents`` and
    /// ``UploaderOptions/maxBatchBytes`` (never more than ``maxGrownBatchBytes``, nor an
    /// eighth of the ring's bytes).
    public static let maxBatchScale = 16
    /// Bytes of a backlog kept mapped past the next batch's start and before the write
    /// position, 256 KiB: the rest waits in the ring file (``Ring/releaseBacklog(keeping:)``).
    static let backlogKeptMapped = 256 * 1024
    /// The most a grown batch holds, 768 KiB (unless ``UploaderOptions/maxBatchBytes``
    /// is larger): a batch's ring pages stay in memory until it is framed, so a larger
    /// ring buys headroom, not larger batches. Eight requests out of 768 KiB each carry
    /// about 170k events a second of 10-property events over a 50 ms round trip; at
    /// 100k events a second, 768 KiB instead of 1 MiB took 0.4-0.5 MiB off the RSS
    /// added (the mean of 30 samples over 8 s, in each of several runs).
    public static let maxGrownBatchBytes = 768 << 10

    /// Creates an uploader; nothing runs until ``start()``.
    ///
    /// - Parameter store: Where undeliverable requests wait; nil when none could be
    ///   opened, in which case batches stay in the ring (which survives a restart) and
    ///   are retried from there, and prebuilt requests are refused.
    public init(ring: Ring, store: SnapshotStore?, transport: any Transport, options: UploaderOptions) {
        self.ring = ring
        self.store = store
        self.transport = transport
        self.options = options
        self.breaker = options.breaker
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
    public func start() {
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
    public func flush(timeout: Duration) -> Bool {
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
    public func shutdown(timeout: Duration) -> Bool {
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
    public var stats: UploaderStats {
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
    public func buildRequest(records: [[UInt8]]) throws(CairnError) -> UploadRequest {
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
    public func sendPrebuilt(body: [UInt8], contentEncoding: String = "zstd",
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

    /// Whether a snapshot store was given (``sendPrebuilt(body:contentEncoding:priority:)``
    /// needs one).
    public var hasStore: Bool { store != nil }

    /// This session in the chain of sessions whose drops the table holds, read from the
    /// store and written back to it (best effort: without it, the drops earlier
    /// processes left unreported are reported with this session).
    private func noteDropSession() -> DropSessions? {
        guard let session = options.sessionID else { return nil }
        let drops = ring.drops()
        guard let store else { return DropSessions(session: session, drops: drops) }
        let sessions = DropSessions(saved: try? store.metadata(DropSessions.metadataKey), session: session, drops: drops)
        try? store.setMetadata(DropSessions.metadataKey, sessions.text)
        return sessions
    }

    /// Builds a request. With `reportingDrops` (the worker's batches only, so that one
    /// thread decides what is reported), a `Cairn-Dropped` header carries every drop the
    /// ring's table has not reported yet, and the counts it carries are returned, to be
    /// marked reported once the request is acknowledged or stored.
    private func makeRequest(body: [UInt8], key: String = UUID().uuidString.lowercased(),
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
    private func resolved(_ request: UploadRequest) -> UploadRequest {
        guard options.followDestination else { return request }
        var r = request
        r.url = options.url
        r.headers.removeAll { $0.name.lowercased() == "authorization" }
        if let apiKey = options.apiKey { r.headers.append(HTTPHeader("Authorization", "Bearer \(apiKey)")) }
        return r
    }

    /// The drops a request carried are reported: it was acknowledged, refused for
    /// good, or stored (a stored request keeps its header).
    private func markReported(_ reported: [DropReport]) {
        for r in reported { try? ring.markReported(slot: r.slot, upTo: r.counted) }
    }

    // MARK: The worker

    /// A batch formed from the ring, from its framing until its records are released.
    /// Flights are kept in ring order; their records are released in that order, each
    /// once it and every flight before it is done (delivered, refused or stored).
    private final class Flight {
        let token: Int
        /// The request, as built once (nil for a batch the last process had stored:
        /// only its records remain to be released).
        let request: UploadRequest?
        let mark: RingBatchMark
        /// The metadata slot its mark is kept in.
        let slot: Int
        let events: Int
        /// The drop counts its request carries.
        let reported: [DropReport]
        /// Attempts made in this process.
        var attempts = 0
        /// When the next attempt may start.
        var due: ContinuousClock.Instant
        /// When the store may be offered it again, after it refused it (full, failing).
        var storeDue: ContinuousClock.Instant?
        var sending = false
        var done = false
        /// Whether its mark, and the contexts its records need, are in the snapshot
        /// store (``keepMarks()``); always with no store.
        var marked = false
        /// Counted in ``UploaderStats/unmarkedSends``.
        var unmarkedCounted = false
        init(token: Int, request: UploadRequest?, mark: RingBatchMark, slot: Int, events: Int,
             reported: [DropReport], due: ContinuousClock.Instant, done: Bool = false) {
            self.token = token
            self.request = request
            self.mark = mark
            self.slot = slot
            self.events = events
            self.reported = reported
            self.due = due
            self.done = done
        }
    }

    /// A stored request being replayed.
    private struct Replaying {
        let token: Int
        let snapshot: Snapshot
        /// The request its record holds.
        let request: UploadRequest
    }

    /// One attempt handed to a sender thread, and what came of it.
    private struct Job: @unchecked Sendable {
        // @unchecked: the start log holds only values.
        let token: Int
        let request: UploadRequest
        let attempt: Int
        let timeout: Duration
        let log: UploadStartLog?
        /// When it was handed over.
        let queued: ContinuousClock.Instant
    }
    private struct Outcome: @unchecked Sendable {
        let job: Job
        let result: TransportResult
        let duration: Duration
    }

    private func run() {
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
        deliveryStatus.restore(try? store?.metadata(DeliveryStatus.metadataKey))
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
            let paused = state.withLock { s in s.pausedUntil.flatMap { $0 > now ? $0 : nil } }
            if let paused, !flushing {
                // Nothing is formed or sent while paused, unless a flush waits (then
                // batches are stored at once).
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
    private var flushing: Bool { state.withLock { $0.flushRequests > 0 } }

    /// Something changed in this pass that may allow more work at once.
    private var progressed = false

    /// How many batches may be formed and not yet released: the requests out, plus as
    /// many again framed ahead while the collector answers. A batch framed ahead waits
    /// in memory compressed (about a tenth of its size in the ring) instead of in the
    /// ring's pages, which go as soon as it is framed: at 100k events a second and
    /// every slot out for a 50 ms round trip, the ring otherwise holds 2 MiB or more
    /// unframed. While the collector fails, no more than the requests allowed out.
    private var maxFormed: Int {
        state.withLock { $0.collectorFailing } ? maxInFlight : min(2 * maxInFlight, RingBatchMark.slots)
    }

    /// Forms batches from the ring while fewer than ``maxFormed`` are formed and not yet
    /// released and one is due (full, old enough, or a flush waits). Returns when to
    /// look again when the next batch is not due yet.
    private func formBatches() -> ContinuousClock.Instant? {
        while flights.count < maxFormed {
            let now = clock.now
            let generation = state.withLock { $0.flushGeneration }
            let limits = batchLimits
            let from = flights.last?.mark.next ?? ring.readPosition
            do {
                try ring.peek(from: from, maxRecords: limits.events, maxBytes: limits.bytes, into: &peeked)
            } catch {
                return now + .milliseconds(100)
            }
            let peekedRecords = peeked.records.count
            let peekedBytes = peeked.records.reduce(0) { $0 + $1.bytes.count }
            // The byte limit is on what is sent: bare records completed with their context.
            contexts.fit(&peeked, maxBytes: limits.bytes)
            let run = peeked
            if run.records.isEmpty {
                // Padding only: released now when nothing waits before it, else with the
                // next batch, whose mark starts before it. The context in force goes on
                // past it (the padding ends a lap, its run's records continue at the
                // start): kept first to cover the new cursor, or a process killed now
                // would start without it.
                if flights.isEmpty && run.next != ring.readPosition
                    && contexts.persist(to: store, ring: ring, upTo: run.next) {
                    try? ring.commit(upTo: run.next)
                }
                firstSeen = nil
                if flights.isEmpty {
                    markIdle(generation)
                    releaseBuffersIfDue(now)
                    // Nothing formed and nothing out: no pass until the first record
                    // appended (the alarm wakes the worker), but for the buffers'
                    // release, or padding left (its context could not be kept).
                    guard ring.armFillAlarm(at: run.next + 1) else { return now + .milliseconds(1) }
                    if run.next != ring.readPosition { return now + options.maxBatchAge }
                    return framedSinceRelease > 0 ? lastRelease + Self.bufferReleaseDelay : nil
                }
                // Records are 16 bytes at least: wake early rather than late, and measure.
                let fullAt = run.next + min(UInt64(limits.bytes), UInt64(limits.events) * 16)
                return ring.armFillAlarm(at: fullAt) ? now + options.maxBatchAge : now + .milliseconds(1)
            }
            let first = run.records[0].position
            if firstSeen?.position != first { firstSeen = (first, now) }
            // Full when the limits cut the run short: its count, its size with contexts, or
            // its size, which the next record would take past the limit. (Not merely a
            // record after it: woken by a burst's first record, the worker finds the
            // burst still being appended.)
            let full = run.records.count >= limits.events || run.records.count < peekedRecords
                || ((try? ring.peek(from: run.next, maxRecords: 1, maxBytes: .max).records.first)
                    .map { peekedBytes + $0.bytes.count > limits.bytes } ?? false)
            let due = (firstSeen?.at ?? now) + options.maxBatchAge
            ringBytesPerRecord = max(16, (run.next - first) / UInt64(run.records.count))
            if !full && !flushing && now < due {
                // Wake when the batch would be full, or at its age. Armed too late (the
                // records are there already): look again soon.
                let fullAt = first + min(UInt64(limits.bytes), UInt64(limits.events) * ringBytesPerRecord)
                return ring.armFillAlarm(at: fullAt) ? due : min(due, now + .milliseconds(1))
            }
            // Grow only while requests queue up (half the slots out or more): a full batch
            // alone, with the collector keeping up, is no reason to hold more in memory.
            // Not smaller batches to free ring pages sooner: at 100k events a second, twice
            // the requests grew the senders' heap arenas by more (0.4 MiB) than the ring
            // pages saved (0.2 MiB).
            let out = flights.filter { !$0.done }.count
            if full && out >= max(1, maxInFlight / 2) {
                batchScale = min(batchScale * 2, Self.maxBatchScale)
            } else if !full {
                batchScale = max(1, batchScale / 2)
            }
            // The mark names the run from where this batch was read (padding may come
            // before the first record), which is where the next start finds it.
            let mark = RingBatchMark(ringID: ring.id, first: from, next: run.next,
                                     events: UInt32(run.records.count),
                                     batchID: UInt64.random(in: 1...UInt64.max), key: UUID().uuidString.lowercased())
            startBatch(run, mark: mark, slot: freeSlot())
            firstSeen = nil
            progressed = true
        }
        return nil
    }

    /// Once the uploader is idle after framing batches, at most once a second, lets go
    /// of what framing keeps between batches: the zstd context (about 0.3 MiB resident,
    /// its own mapping, so freeing it returns it to the system) and the reused run and
    /// batch arrays. The next batch makes them again (tens of microseconds).
    ///
    /// Not glibc's `malloc_trim`: it walks and locks every arena, the service's main
    /// arena included; on a fragmented 1 GiB heap it held that lock for 65-70 ms.
    private func releaseBuffersIfDue(_ now: ContinuousClock.Instant) {
        guard framedSinceRelease > 0, now - lastRelease >= Self.bufferReleaseDelay else { return }
        encoder = nil
        peeked = Ring.Run()
        framing = RingContexts.Batch()
        framedSinceRelease = 0
        lastRelease = now
    }

    /// How long after a release the framing buffers (the zstd context among them) may
    /// be released again, once batches were framed since.
    static let bufferReleaseDelay: Duration = .seconds(1)
    /// How long an idle worker sleeps when nothing is timed: a safety net, since every
    /// change that gives it work (a record appended, a flush, a send's end, a pause's
    /// end) wakes it.
    static let idleWake: Duration = .seconds(300)

    /// A metadata slot no flight holds.
    private func freeSlot() -> Int {
        var slot = 0
        while flights.contains(where: { $0.slot == slot }) { slot += 1 }
        return slot
    }

    /// The limits of the next batch: the options' times ``batchScale``.
    private var batchLimits: (events: Int, bytes: Int) {
        let bytes = min(options.maxBatchBytes.multipliedReportingOverflow(by: batchScale).partialValue,
                        max(options.maxBatchBytes, min(Self.maxGrownBatchBytes, Int(clamping: ring.capacity / 8))))
        return (options.maxBatchEvents * batchScale, bytes)
    }

    /// Frames `run` as the batch `mark` describes and adds it to the flights, with its
    /// mark kept in metadata slot `slot` (``keepMarks()``): a process killed before the
    /// batch is safe rebuilds exactly this batch, with this key, at its next start
    /// (``resumeMarkedBatches()``).
    private func startBatch(_ run: Ring.Run, mark: RingBatchMark, slot: Int, resumed: Bool = false) {
        // Bare records completed with their context; context records are not sent, but
        // the ones the next start may need are kept before any record is released.
        contexts.complete(run, into: &framing)
        if framing.fallbacks > 0 && options.debugLogging {
            let note = "[cairn] \(framing.fallbacks) events without the context of the run that tracked them "
                + "(lost with the snapshot store's ring_context): sent with this process's, marked "
                + "\"context_recovered\":false (\(contexts.fallbacks) since start)\n"
            writeStandardError(note)
        }
        // Nothing to send (context records only, or records that cannot be framed): its
        // records are released in turn. Its mark says so (as for a stored batch), so
        // that a process killed before then goes on past it to the batches after.
        var nothingToSend = mark
        nothingToSend.stored = true
        guard framing.events > 0 else {
            nextToken += 1
            add(Flight(token: nextToken, request: nil, mark: nothingToSend, slot: slot, events: 0, reported: [],
                       due: clock.now, done: true))
            return
        }
        do {
            let encoder = try self.encoder ?? FrameEncoder(level: options.compressionLevel)
            self.encoder = encoder
            let body = try framing.withSlices { (slices, ends) throws(CairnError) in
                try encoder.encode(batchID: mark.batchID, pieces: slices, ends: ends)
            }
            if let tap = options.tap { tap(framing.records()) }
            framedSinceRelease += 1
            // The request holds the batch now: its ring pages need not stay in memory
            // while it is out (the ring file keeps them until they are released).
            try? ring.releasePages(from: mark.first, to: run.next)
            // And a backlog behind it (see the main loop), at each batch: a pass that
            // stores many batches (a slow collector, a full store) takes a while.
            try? ring.releaseBacklog(keeping: Self.backlogKeptMapped)
            // Drops ride with one request at a time, so that no count is reported twice;
            // the mark keeps them, so a batch resumed after a kill (which the collector
            // may already hold) is rebuilt with the same drop headers under its key.
            var mark = mark
            var built: (request: UploadRequest, reported: [DropReport])
            if resumed {
                built = makeRequest(body: body, key: mark.key, reportingDrops: false)
                if let carried = mark.drops {
                    built.request.headers += carried.headers
                    built.reported = carried.reported
                }
            } else {
                let carrying = flights.contains { !$0.done && !$0.reported.isEmpty }
                built = makeRequest(body: body, key: mark.key, reportingDrops: !carrying)
                if !built.reported.isEmpty {
                    let names = ["cairn-dropped", "cairn-dropped-sessions"]
                    mark.drops = .init(headers: built.request.headers.filter { names.contains($0.name.lowercased()) },
                                       reported: built.reported)
                }
            }
            nextToken += 1
            add(Flight(token: nextToken, request: built.request, mark: mark, slot: slot,
                       events: framing.events, reported: built.reported, due: clock.now))
        } catch {
            // Records that cannot be framed (a newline inside one): drop them, counted,
            // rather than block the ring.
            count(drop: .unframeable, framing.events)
            nextToken += 1
            add(Flight(token: nextToken, request: nil, mark: nothingToSend, slot: slot, events: 0, reported: [],
                       due: clock.now, done: true))
        }
    }

    private func add(_ f: Flight) {
        flights.append(f)
        keepMarks()
    }

    /// Keeps in the snapshot store, for the flights not yet marked and in ring order,
    /// what a process killed from now on needs to rebuild them exactly: the contexts
    /// their records need, then their marks. A batch is sent, and records released,
    /// only once it and every batch before it is marked (``advanceFlights()``,
    /// ``releaseDone()``), so the next start finds the chain of marks from the read
    /// cursor whole and no event goes out under two keys. A failed write (the store
    /// full or failing) is counted and tried again at the next pass.
    private func keepMarks() {
        guard let last = flights.last, flights.contains(where: { !$0.marked }) else { return }
        guard let store else {
            for f in flights { f.marked = true }
            return
        }
        var failure: String?
        if !contexts.persist(to: store, ring: ring, upTo: last.mark.next) {
            failure = "the contexts of its records"
        } else {
            for f in flights where !f.marked {
                do {
                    try store.setMetadata(RingBatchMark.metadataKey(slot: f.slot), f.mark.encoded())
                    f.marked = true
                } catch {
                    failure = "its mark (\(error))"
                    break
                }
            }
        }
        guard let failure else {
            marksFailingSince = nil
            return
        }
        marksFailingSince = marksFailingSince ?? clock.now
        state.withLock { $0.stats.markFailures += 1 }
        if options.debugLogging {
            writeStandardError("[cairn] a batch waits: the snapshot store did not keep \(failure); tried again\n")
        }
    }

    /// Since when the store has refused to keep marks; nil while it keeps them.
    private var marksFailingSince: ContinuousClock.Instant?

    /// Whether flight `f` may be sent or released: it is marked, or the store has
    /// refused marks for longer than ``UploaderOptions/markPatience`` (then every batch
    /// goes out as it comes, until a mark is kept again).
    private func sendable(_ f: Flight) -> Bool {
        f.marked || marksFailingSince.map { clock.now - $0 >= options.markPatience } ?? false
    }

    /// At start: batches the last process had formed but not yet made safe are formed
    /// again from the same records with the same batch ids and `Idempotency-Key`s, so a
    /// collector that received them drops the copies; batches it had stored but not
    /// yet released from the ring are released (the store has them). The marks are
    /// followed from the read cursor, each starting where the one before ended.
    private func resumeMarkedBatches() {
        guard let store else { return }
        var marks: [(slot: Int, mark: RingBatchMark)] = []
        for slot in 0..<RingBatchMark.slots {
            if let bytes = try? store.metadata(RingBatchMark.metadataKey(slot: slot)), let mark = RingBatchMark(bytes),
               mark.ringID == ring.id { marks.append((slot, mark)) }
        }
        var cursor = ring.readPosition
        while let (slot, mark) = marks.first(where: { $0.mark.first == cursor }) {
            // Records are at least 16 bytes: a mark claiming more is damaged.
            guard UInt64(mark.events) <= (mark.next - mark.first) / 16,
                  let run = try? ring.peek(from: cursor, maxRecords: Int(mark.events), maxBytes: Int(ring.capacity)),
                  run.records.count == Int(mark.events), run.next <= mark.next else { break }
            if run.next < mark.next {
                // The batch was read with a larger limit, which also took the padding after
                // its last record: only padding may lie between.
                guard let tail = try? ring.peek(from: run.next, maxRecords: 1, maxBytes: Int(ring.capacity)),
                      (tail.records.first?.position ?? tail.next) == mark.next else { break }
            }
            if mark.stored {
                // The store has this batch (or it had nothing to send): its records are
                // released in turn, once the contexts among them are kept. The drops its
                // request carries are reported by it (the process may have been killed
                // between storing it and marking them).
                markReported(mark.drops?.reported ?? [])
                contexts.observe(run)
                nextToken += 1
                add(Flight(token: nextToken, request: nil, mark: mark, slot: slot, events: 0,
                           reported: [], due: clock.now, done: true))
            } else {
                startBatch(run, mark: mark, slot: slot, resumed: true)
            }
            cursor = mark.next
            marks.removeAll { $0.slot == slot }
        }
        releaseDone()
    }

    /// Releases the ring records of the flights at the front that are done.
    private func releaseDone() {
        var upTo: UInt64?
        keepMarks()
        while let f = flights.first, f.done, sendable(f) {
            upTo = f.mark.next
            flights.removeFirst()
        }
        guard let upTo else { return }
        do {
            try ring.commit(upTo: upTo)
        } catch {
            if options.debugLogging {
                writeStandardError("[cairn] batch records not released: \(error)\n")
            }
        }
        progressed = true
    }

    /// Starts the attempts that are due, stores what should not wait (out of attempts,
    /// paused, breaker open, store-only), and returns when a waiting attempt is due.
    private func advanceFlights() -> ContinuousClock.Instant? {
        var next: ContinuousClock.Instant?
        keepMarks()
        for f in flights where !f.done && !f.sending {
            let now = clock.now
            guard let request = f.request else { continue }
            // Nothing goes out before it and every batch before it is marked, or has
            // waited long enough (then at least once, counted).
            guard sendable(f) else {
                next = min(next ?? now + .milliseconds(100), now + .milliseconds(100))
                break
            }
            if !f.marked && !f.unmarkedCounted {
                f.unmarkedCounted = true
                state.withLock { $0.stats.unmarkedSends += 1 }
            }
            let paused = state.withLock { ($0.pausedUntil ?? now) > now }
            // Paused while a flush waits, or the breaker open: store now rather than wait
            // (unless the store refused it a moment ago).
            if options.storeOnly || paused || f.attempts >= options.attempts || !breaker.allows(at: now) {
                if let t = f.storeDue, t > now {
                    next = min(next ?? t, t)
                } else {
                    storeFlight(f)
                }
                continue
            }
            if f.due > now {
                next = min(next ?? f.due, f.due)
                continue
            }
            if !canSendAnother { break }
            f.sending = true
            dispatch(token: f.token, request, attempt: f.attempts)
            f.attempts += 1
        }
        return next
    }

    /// Whether another attempt may start now: several at once while the collector
    /// answers, one at a time while it fails (and while the breaker probes); none once
    /// the uploader is stopping (its flush is over: an attempt started now could not be
    /// waited for, and its outcome would not be taken in).
    private var canSendAnother: Bool {
        let sending = flights.filter(\.sending).count + (replaying == nil ? 0 : 1)
        let (failing, stopping) = state.withLock { ($0.collectorFailing, $0.stopping) }
        return !stopping && sending < maxInFlight && (sending == 0 || !failing)
    }

    /// Keeps a flight's exact request in the store and releases its records in turn;
    /// without a store, or when the store refuses it (full), it stays in the ring and is
    /// tried again later.
    private func storeFlight(_ f: Flight) {
        guard let store, let request = f.request else {
            // No store: the records stay in the ring, which is retried after a pause.
            f.attempts = 0
            f.due = clock.now + options.backoff.cap / 10
            return
        }
        keep(f, as: [request], in: store) { $0.storedBatches += 1 }
    }

    /// A batch the collector found too large (413) goes to the store as two halves
    /// (``UploadRequest/halves(level:)``), its mark with the second: its records are then
    /// released in turn, and the halves are replayed. False when it cannot be halved (one
    /// event) or stored: then it is dropped, or tried again later.
    private func storeHalves(of f: Flight) -> Bool {
        guard let store, let request = f.request, let (first, second) = request.halves(level: options.compressionLevel)
        else { return false }
        keep(f, as: [first, second], in: store) { $0.splitBatches += 1 }
        return true
    }

    /// Puts `requests` in the store for flight `f`, its mark (stored) in the same
    /// transaction as the last, and releases the flight in turn; `counting` updates the
    /// stats. When the store refuses (full, failing), the records stay in the ring and
    /// this request in memory, tried again later.
    private func keep(_ f: Flight, as requests: [UploadRequest], in store: SnapshotStore,
                      counting: (inout UploaderStats) -> Void) {
        do {
            var mark = f.mark
            mark.stored = true
            for (i, request) in requests.enumerated() {
                let last = i == requests.count - 1
                try store.put(request.record, priority: options.priority, attempts: UInt32(f.attempts),
                              metadata: last ? [(RingBatchMark.metadataKey(slot: f.slot), mark.encoded())] : [])
            }
            markReported(f.reported)
            f.done = true
            progressed = true
            state.withLock { counting(&$0.stats) }
        } catch {
            // The store refused it (a full disk, a failing one): it stays in the ring and
            // in memory, and goes back to the collector, which may be back by then (one
            // more attempt, then the store again), rather than waiting on the store alone.
            state.withLock { $0.stats.storeFailures += 1 }
            let wait = options.backoff.cap / 10
            f.storeDue = clock.now + wait
            f.due = clock.now + wait
            f.attempts = min(f.attempts, max(0, options.attempts - 1))
        }
    }

    /// Stored requests that were delivered but could not be deleted (a full disk, see
    /// ``SnapshotStore``): skipped by replays, their deletes tried again once a second.
    /// Beyond ``maxUndeleted`` such requests, one may be sent again (same key).
    private var deliveredUndeleted: [SnapshotID] = []
    private var undeletedRetry = ContinuousClock.now
    private static let maxUndeleted = 64

    /// Stored requests whose next attempt is due by this time are replayed now.
    private var replayReadyAt: UInt64 { replayAllDue ? .max : SnapshotStore.nowMillis() }

    /// Sends the oldest stored snapshot that is due, when no replay is out and a sender
    /// is free.
    private func replayIfDue() {
        guard replaying == nil, !options.storeOnly, let store,
              !state.withLock({ ($0.pausedUntil ?? clock.now) > clock.now }) else { return }
        if !deliveredUndeleted.isEmpty && clock.now >= undeletedRetry {
            deliveredUndeleted.removeAll { (try? store.delete($0)) != nil }
            undeletedRetry = clock.now + .seconds(1)
        }
        // The breaker first: while the collector is down, a pass must not read the
        // store's keys looking for a due request that could not be sent anyway.
        // An empty store is not read: an idle service's passes touch neither LMDB nor
        // the store's code (which then stays out of memory, see Cairn's page releases).
        guard canSendAnother, store.count > 0, breaker.wouldAllow(at: clock.now),
              let snapshot = try? store.oldest(limit: deliveredUndeleted.count + 1, readyAt: replayReadyAt)
                  .first(where: { !deliveredUndeleted.contains($0.id) }),
              breaker.allows(at: clock.now) else { return }
        guard let request = UploadRequest(record: snapshot.record) else {
            // Not a request (written by something else, or damaged where no check
            // could see it): one request's worth of events lost, counted.
            try? store.delete(snapshot.id)
            count(drop: .storeCorrupt, 1)
            return
        }
        nextToken += 1
        replaying = Replaying(token: nextToken, snapshot: snapshot, request: request)
        dispatch(token: nextToken, request, attempt: Int(snapshot.attempts))
    }

    /// Logs the start of an attempt and hands it to a sender thread. While a flush
    /// waits, the attempt ends by the flush's deadline.
    private func dispatch(token: Int, _ stored: UploadRequest, attempt: Int) {
        let request = resolved(stored)
        // Logs decode the batch: only when someone reads them.
        let logging = options.debugLogging || options.observer != nil
        let log = logging ? UploadStartLog(request: request, attempt: attempt) : nil
        if let log {
            options.observer?.uploadWillStart(log)
            if options.debugLogging { writeStandardError((log.description + "\n")) }
        }
        var timeout = options.requestTimeout
        if let deadline = state.withLock({ $0.flushDeadline }) {
            timeout = max(.milliseconds(100), min(timeout, deadline - clock.now))
        }
        let job = Job(token: token, request: request, attempt: attempt, timeout: timeout, log: log, queued: clock.now)
        senders.lock()
        jobs.append(job)
        senders.signal()
        senders.unlock()
        _ = growSenders()
    }

    /// How long an attempt waits for a busy sender before another sender may start.
    /// Senders start as the collector's pace needs them, not one per attempt handed
    /// over while the others are busy: a collector that answers in a millisecond keeps
    /// one busy, and each sender thread costs its stack and a heap arena of its own
    /// (glibc keeps the arena for the next thread), and its connection stays pooled.
    static let senderGrowthDelay: Duration = .milliseconds(2)
    /// How busy the senders must have been (``SenderLoad``) for another to start: half
    /// their time in sends. Senders all busy read as N/(N+1) once another has started,
    /// so a pool whose senders are all busy can double before the figure catches up.
    static let senderGrowthLoad = 0.5
    /// How often the load is looked at again while an attempt waits for senders that
    /// were not busy enough: a send that hangs makes them busy within a window.
    static let senderLoadRecheck: Duration = .milliseconds(25)

    /// Starts a sender when none is idle, fewer than ``UploaderOptions/maxInFlight``
    /// run, and there are none yet, or the oldest attempt waiting has waited
    /// ``senderGrowthDelay`` while the senders were busy ``senderGrowthLoad`` of their
    /// time. Returns when to look again while one waits.
    private func growSenders() -> ContinuousClock.Instant? {
        let now = clock.now
        senders.lock()
        guard let oldest = jobs.first?.queued, idleSenders == 0, senderCount < maxInFlight else {
            senders.unlock()
            return nil
        }
        let waited = now - oldest >= Self.senderGrowthDelay
        let spawn = senderCount == 0
            || (waited && senderLoad.utilization(senders: senderCount, at: now) >= Self.senderGrowthLoad)
        if spawn { senderCount += 1 }
        senders.unlock()
        // Senders not busy enough: the attempt waits for one of them (its end wakes the
        // worker); the load is looked at again in a while, for a send that hangs.
        guard spawn else { return waited ? now + Self.senderLoadRecheck : oldest + Self.senderGrowthDelay }
        let started = startThread(name: "cairn-sender", { [self] in self.sendLoop() })
        senders.lock()
        if started {
            mostSenders = max(mostSenders, senderCount)
        } else {
            senderCount -= 1
        }
        senders.unlock()
        if !started {
            // Thread limit reached: the senders there are (or the next spawn) take it.
            if options.debugLogging { writeStandardError("[cairn] sender not started: the system refused a thread\n") }
            return now + .milliseconds(100)
        }
        return nil
    }

    /// A sender thread: sends the attempts it is handed, one at a time, and hands back
    /// what came of them. Sender threads are started as attempts need them, up to
    /// ``UploaderOptions/maxInFlight``, and end when the uploader stops or after
    /// ``UploaderOptions/senderIdleExit`` with nothing to send (all but the last).
    private func sendLoop() {
        while true {
            senders.lock()
            var idleSince = clock.now
            while jobs.isEmpty && !sendersStopped {
                idleSenders += 1
                let signalled = senders.wait(until: idleSince + max(options.senderIdleExit, .milliseconds(10)))
                idleSenders -= 1
                if !signalled && jobs.isEmpty && !sendersStopped {
                    if senderCount > 1 { break }
                    idleSince = clock.now
                }
            }
            if jobs.isEmpty {
                senderCount -= 1
                senders.unlock()
                return
            }
            let job = jobs.removeFirst()
            senders.unlock()
            // The transport's one-time set-up (loading the TLS library) is not the
            // collector's time: a first send must not look like a slow collector and
            // start another sender.
            transport.prepare(for: job.request)
            senders.lock()
            let started = clock.now
            senderLoad.began(at: started)
            senders.unlock()
            let result = transport.send(job.request, attempt: job.attempt, timeout: job.timeout)
            let ended = clock.now
            senders.lock()
            senderLoad.ended(startedAt: started, at: ended)
            senders.unlock()
            outcomes.withLock { $0.append(Outcome(job: job, result: result, duration: ended - started)) }
            signal()
        }
    }

    private func stopSenders() {
        senders.lock()
        sendersStopped = true
        senders.broadcast()
        senders.unlock()
    }

    private var pendingOutcomes: Bool { !outcomes.withLock { $0.isEmpty } }

    /// Takes in what the senders have brought back.
    private func collectOutcomes() {
        let arrived = outcomes.withLock { o -> [Outcome] in
            defer { o.removeAll() }
            return o
        }
        for outcome in arrived {
            progressed = true
            let action = classify(outcome)
            if let r = replaying, r.token == outcome.job.token {
                replaying = nil
                finishReplay(r.snapshot, r.request, action)
                continue
            }
            guard let f = flights.first(where: { $0.token == outcome.job.token }) else { continue }
            f.sending = false
            switch action {
            case .delivered:
                markReported(f.reported)
                f.done = true
                state.withLock { $0.stats.deliveredBatches += 1; $0.stats.deliveredEvents += f.events }
            case .drop(let reason):
                // Too large: stored as two halves, which go on their own.
                if reason == .rejected(status: 413), storeHalves(of: f) { continue }
                // Refused: its drop counts were not taken, the next batch reports them.
                f.done = true
                count(drop: reason, f.events)
            case .pauseAndRetry, .hold:
                storeFlight(f)
            case .retry:
                let delay = options.backoff.delay(afterAttempt: f.attempts - 1, random: Double.random(in: 0..<1))
                // A flush that would end before the next attempt wants the batch safe
                // now: stored, it is retried later.
                let flushEnds = state.withLock { $0.flushDeadline }
                if f.attempts < options.attempts && flushEnds.map({ clock.now + delay < $0 }) ?? true {
                    f.due = clock.now + delay
                } else {
                    f.attempts = options.attempts
                    storeFlight(f)
                }
            }
        }
    }

    /// What one replay's outcome means for the stored request.
    private func finishReplay(_ snapshot: Snapshot, _ request: UploadRequest, _ action: DeliveryAction) {
        guard let store else { return }
        switch action {
        case .delivered:
            do {
                try store.delete(snapshot.id)
            } catch {
                // Delivered, but still stored (the disk is full): not sent again.
                if deliveredUndeleted.count < Self.maxUndeleted { deliveredUndeleted.append(snapshot.id) }
            }
            let events = (try? FrameDecoder.info(of: request.body)).map { Int($0.recordCount) } ?? 0
            state.withLock {
                $0.stats.replayedBatches += 1
                $0.stats.deliveredBatches += 1
                $0.stats.deliveredEvents += events
            }
        case .drop(let reason):
            if reason == .rejected(status: 413), let (first, second) = request.halves(level: options.compressionLevel) {
                // Too large: replaced by its halves (a kill in between leaves it to be
                // split again, into the same halves under the same keys).
                do {
                    try store.put(first.record, priority: snapshot.priority, attempts: snapshot.attempts)
                    try store.put(second.record, priority: snapshot.priority, attempts: snapshot.attempts)
                    try store.delete(snapshot.id)
                    state.withLock { $0.stats.splitBatches += 1 }
                } catch {
                    state.withLock { $0.stats.storeFailures += 1 }
                }
                return
            }
            try? store.delete(snapshot.id)
            count(drop: reason, request.events)
            // The drops it reported were never taken: count them again for the next batch.
            for (r, n) in request.reportedDrops { count(drop: DropReason(name: r), n, inStats: false) }
        case .hold:
            replayAllDue = false
            try? store.recordAttempt(snapshot.id, nextAttemptAt: heldUntil)
        case .retry, .pauseAndRetry:
            replayAllDue = false
            // Half to full backoff, so replays of many snapshots do not bunch up.
            let delay = options.backoff.delay(afterAttempt: Int(snapshot.attempts) + 1, random: Double.random(in: 0.5..<1))
            try? store.recordAttempt(snapshot.id, nextAttemptAt: SnapshotStore.nowMillis() + milliseconds(delay))
        }
    }

    /// What an attempt's result means: logs it, classifies it, updates the breaker and
    /// pauses.
    private func classify(_ outcome: Outcome) -> DeliveryAction {
        let action: DeliveryAction
        var pause: Duration?
        switch outcome.result {
        case .response(let response):
            action = options.policy.action(for: response.status)
            if action == .pauseAndRetry {
                pause = response.header("Retry-After").flatMap { StatusPolicy.parseRetryAfter($0) } ?? options.backoff.base
            }
        case .failure(let failure):
            // A request that cannot be sent as configured (the URL, a proxy variable)
            // is a configuration fault: kept, never dropped.
            action = failure.kind == .invalidRequest ? .hold : .retry
        }
        if let log = outcome.job.log {
            let finished = UploadResultLog(start: log, result: outcome.result, duration: outcome.duration,
                                           success: action == .delivered)
            options.observer?.uploadDidFinish(finished)
            if options.debugLogging { writeStandardError((finished.description + "\n")) }
        }

        let now = clock.now
        switch action {
        case .delivered, .drop:
            holds = 0
            breaker.succeeded()
            state.withLock { $0.collectorFailing = false }
        case .hold:
            // Nothing is sent (stored requests wait) until one probe after the wait.
            holds += 1
            let wait = options.holdBackoff.delay(afterAttempt: holds - 1, random: Double.random(in: 0.5..<1))
            heldUntil = SnapshotStore.nowMillis() + milliseconds(wait)
            let before = breaker.openings
            breaker.hold(until: now + wait)
            state.withLock {
                $0.collectorFailing = true
                $0.stats.failedAttempts += 1
                $0.stats.holds += 1
                if breaker.openings > before { $0.stats.breakerOpenings += 1 }
            }
        case .retry, .pauseAndRetry:
            let before = breaker.openings
            breaker.failed(at: now)
            state.withLock {
                $0.collectorFailing = true
                $0.stats.failedAttempts += 1
                if breaker.openings > before { $0.stats.breakerOpenings += 1 }
            }
        }
        noteDeliveryState(action, outcome)
        if let pause {
            let until = now + min(pause, options.maxPause)
            state.withLock { s in
                s.pausedUntil = max(s.pausedUntil ?? until, until)
                s.stats.pauses += 1
            }
        }
        return action
    }

    /// Tells the operator when delivery changes state (``DeliveryStatus``), and keeps the
    /// state in the store for `cairn status`.
    private func noteDeliveryState(_ action: DeliveryAction, _ outcome: Outcome) {
        let nowMillis = SnapshotStore.nowMillis()
        guard let line = deliveryStatus.record(action, outcome.result, url: outcome.job.request.url, now: nowMillis,
                                               waiting: { store?.stats.count })
        else { return }
        options.notice?("[cairn] " + line)
        try? store?.setMetadata(DeliveryStatus.metadataKey, deliveryStatus.encoded(now: nowMillis))
    }

    // MARK: Coordination

    /// Counts `n` drops: in this uploader's stats, and in the ring's drop table, which
    /// outlives the process until a request has reported them.
    private func count(drop reason: DropReason, _ n: Int, inStats: Bool = true) {
        guard n > 0 else { return }
        if inStats { state.withLock { $0.stats.dropped[reason, default: 0] += n } }
        Self.countInTable(ring, reason, n)
    }

    private static func countInTable(_ ring: Ring, _ reason: DropReason, _ n: Int) {
        guard n > 0 else { return }
        ring.countDrops(slot: ring.dropSlot(reason.name) ?? Ring.otherDropSlot, UInt64(n))
    }

    /// Publishes whether the worker is idle, as seen by a look at the ring that began
    /// after flush `generation` was asked for.
    private func markIdle(_ generation: Int) {
        // Stored requests wait for a replay, except in store-only mode, where they stay,
        // and while the collector fails, when they are safe where they are.
        let failing = state.withLock { $0.collectorFailing } || !breaker.allows(at: clock.now)
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
    private func isDrained() -> Bool {
        ring.stats().used == 0 && state.withLock { $0.idle || $0.finished }
    }

    /// Wakes the worker (flush, shutdown, a new snapshot). The flag makes a signal sent
    /// while the worker is not yet waiting wake its next wait instead of being lost.
    private func signal() {
        wake.lock()
        signalled = true
        wake.broadcast()
        wake.unlock()
    }

    /// The worker sleeps until `deadline` or a signal, whichever comes first; it does
    /// not sleep at all once asked to stop.
    private func sleep(until deadline: ContinuousClock.Instant) {
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
