import CairnCrash
import CairnProcessor
import CairnStore
import CairnUploader
public import FoundationEssentials
import Dispatch
import Glibc
import Synchronization

/// How `setUserProperties(_:mode:)` changes the user's properties on the collector.
public enum UserPropertyMode: String, Sendable, CaseIterable {
    /// Set the values (type `user_set`).
    case set
    /// Set the values only where none is set yet (type `user_setOnce`).
    case setOnce
    /// Add the numbers to the current values (type `user_add`); values that are not
    /// numbers are dropped and counted.
    case add
    /// Remove the properties named by the keys; the values are ignored (type
    /// `user_unset`).
    case unset

    var eventType: EventType {
        switch self {
        case .set: return .userSet
        case .setOnce: return .userSetOnce
        case .add: return .userAdd
        case .unset: return .userUnset
        }
    }
}

/// A typed event: services declare an enum of what can happen and track its cases.
///
/// ```swift
/// enum OrderEvent: CairnEvent {
///     case placed(total: Double), failed(reason: String)
///     var name: String { switch self { case .placed: "order_placed"; case .failed: "order_failed" } }
///     var properties: [String: CairnValue] {
///         switch self { case .placed(let t): ["total": .double(t)]; case .failed(let r): ["reason": .string(r)] }
///     }
///     var isError: Bool { if case .failed = self { true } else { false } }
/// }
/// cairn.track(OrderEvent.placed(total: 42))
/// ```
public protocol CairnEvent: Sendable {
    /// The event's name.
    var name: String { get }
    /// Its properties (default: none).
    var properties: [String: CairnValue] { get }
    /// How much it matters (default: `.sampled`).
    var tier: Tier { get }
    /// Whether it reports an error: errors are always kept by sampling and folded by
    /// deduplication (default: false).
    var isError: Bool { get }
}

extension CairnEvent {
    /// No properties.
    public var properties: [String: CairnValue] { [:] }
    /// The sampled tier.
    public var tier: Tier { .sampled }
    /// Not an error.
    public var isError: Bool { false }
}

/// The Cairn SDK: start it once, early, then track what happens.
///
/// ```swift
/// let cairn = try Cairn.start(.fromEnvironment())
/// cairn.track("order_placed", properties: ["plan": "pro", "seats": 3])
/// ```
///
/// Tracking calls return in about a microsecond: the event is encoded on the caller's
/// thread straight into a memory-mapped ring on disk (it survives a crash or
/// `kill -9` from then on) and one background thread batches, compresses and uploads.
/// Nothing here blocks on the network, and bad input is counted and dropped, never
/// thrown at the caller.
public final class Cairn: @unchecked Sendable {
    // @unchecked: mutable state lives in `state` (a lock) and atomics.

    /// The started SDK, or nil before `start` (and after `shutdown`).
    public static var shared: Cairn? { sharedInstance.withLock { $0 } }
    private static let sharedInstance = Locked<Cairn?>(nil)
    // One instance at a time: set by a compare-and-exchange on the thread that calls
    // `start`, cleared when that instance's `shutdown` is over.
    private static let startedOnce = Atomic<Bool>(false)

    /// The options it started with.
    public let options: Options
    /// This process run's session id (UUIDv7).
    public let sessionID: String
    /// The processor every event goes through.
    package let processor: Processor
    /// When this data directory was first used (Unix ms) and in which time zone: read
    /// (at the first start, written) by the background thread at start; an access before
    /// that reads it at once.
    package var install: InstallRecord {
        installSlot.withLock { slot in
            if let record = slot.record { return record }
            let record = isEnabled ? InstallRecord.load(directory: options.dataDirectory, release: options.release)
                : InstallRecord.unsaved(release: options.release)
            slot.record = record
            return record
        }
    }

    /// The install record, read on first use: by the background thread at start, or
    /// by an `app_install` tracked before that.
    private let installSlot = Locked(InstallSlot())

    struct InstallSlot {
        var record: InstallRecord?
    }

    /// nil in a disabled SDK (`startOrDisabled` after a failed start).
    let ring: Ring?
    /// Whether the ring lacks a context record of this process's current context:
    /// until one is appended, events are written whole (with their context), since a
    /// bare event would take an earlier run's context (docs/FORMATS.md, "Ring file").
    private let contextPending = Atomic<Bool>(true)
    /// Held while a context record is appended, so two never race.
    private let contextAppend = Locked(())
    /// Events estimated larger than this are cleaned before they are encoded (16 KiB,
    /// or the ring's largest record if smaller).
    private let fastPathLimit: Int
    /// nil in a disabled SDK.
    let crash: CrashCapture?
    /// Why this SDK is disabled (every call a no-op), or nil when it runs.
    public let startError: CairnStartError?
    /// Whether this SDK runs; false for the disabled SDK `startOrDisabled` returns when
    /// `start` failed, on which every call is a cheap no-op.
    public var isEnabled: Bool { ring != nil }
    let dedup: Deduplicator
    /// The first event of each open deduplication window, to build its summary from.
    private let dedupFirst = Locked(FirstEvents())

    /// A dictionary in a plain struct: `Locked<[UInt64: Event]>` would make the runtime
    /// look up `UInt64: Hashable` while `start` runs; a non-generic wrapper does not.
    struct FirstEvents {
        var byFingerprint: [UInt64: Event] = [:]
    }
    let drops: DropCounters
    private let state: Locked<State>
    private let background: BackgroundWork

    struct State {
        var identity: Identity
        var accountSent: Set<String> = []
        var uploader: Uploader?
        var store: SnapshotStore?
        var ready = false
        var stopped = false
        /// `shutdown` stopped waiting for the background start: it must not start the
        /// uploader after that.
        var startAbandoned = false
        /// What the first `shutdown` returned, once it has finished.
        var shutdownResult: Bool?
        /// How long `start` took on the caller's thread, for the first `sdk_health`.
        var startNanos: UInt64 = 0
    }

    /// The task-local span: events tracked inside `withSpan` carry its trace and span ids.
    @TaskLocal public static var currentSpan: SpanContext?

    private init(options: Options, crash: CrashCapture?, ring: Ring?, processor: Processor,
                 startError: CairnStartError? = nil) {
        self.options = options
        self.crash = crash
        sessionID = crash?.sessionID ?? ""
        self.ring = ring
        drops = DropCounters(ring: ring)
        self.startError = startError
        let stats = ring?.stats()
        fastPathLimit = min(16 << 10, Int(stats?.maxRecord ?? 0))
        self.processor = processor
        dedup = Deduplicator(options: options.dedup)
        state = Locked(State(identity: Identity(distinctID: options.distinctID)))
        health = Locked(HealthState(baseline: HealthBaseline(at: DispatchTime.now().uptimeNanoseconds, ring: stats)))
        background = BackgroundWork()
    }

    // MARK: Start

    /// Starts the SDK (and sets `Cairn.shared`). On the caller's thread it does only what
    /// must come before the first crash or event: checks the options, installs the crash
    /// handler, builds the processor with the common properties that need no file read,
    /// opens the event ring. This run's record, the rest of the common properties, the
    /// install record, claiming the previous runs, opening the snapshot store,
    /// replaying what is stored, reporting previous runs and uploading happen on a
    /// background thread.
    ///
    /// One instance runs at a time (there is one crash handler per process): once
    /// ``shutdown(timeout:)`` has returned, `start` may be called again, and begins a new
    /// run (a new session) in the data directory it is given. A test suite can so start
    /// a fresh SDK per test, each in a directory of its own. The same directory again
    /// needs the earlier instance released first (its event ring stays open, and locked,
    /// while it lives).
    ///
    /// - Throws: `CairnStartError`: which option is invalid and why; `.alreadyStarted`
    ///   while another instance runs; `.disabled`; `.storage` when the data directory
    ///   cannot be used.
    @discardableResult
    public static func start(_ options: Options) throws(CairnStartError) -> Cairn {
        if options.disabled { throw .disabled }
        try options.validate()
        let options = options.normalized()
        guard startedOnce.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged
        else { throw .alreadyStarted }
        let began = DispatchTime.now().uptimeNanoseconds
        do {
            let cairn = try startOnce(options)
            sharedInstance.withLock { $0 = cairn }
            let took = DispatchTime.now().uptimeNanoseconds &- began
            cairn.state.withLock { $0.startNanos = took }
            return cairn
        } catch {
            startedOnce.store(false, ordering: .releasing)
            throw error
        }
    }

    /// Starts the SDK as `start` does, but never throws: when it cannot start (an
    /// invalid option, a data directory it cannot use, `CAIRN_DISABLED=1`, a second
    /// start) it writes the reason to stderr once and returns a disabled SDK whose
    /// calls do nothing and cost next to nothing. The pattern for services that must
    /// never stop because of their telemetry:
    ///
    /// ```swift
    /// let cairn = Cairn.startOrDisabled(.fromEnvironment())
    /// if let error = cairn.startError { myLogger.warning("telemetry off: \(error)") }
    /// ```
    ///
    /// A disabled SDK is not ``shared``. With `disabled` set (by choice), the note is
    /// written only with debug logging on.
    public static func startOrDisabled(_ options: Options) -> Cairn {
        do {
            return try start(options)
        } catch {
            if error != .disabled || options.debugLogging {
                writeStandardError("[cairn] not started: \(error); tracking calls do nothing\n")
            }
            return disabled(options, error)
        }
    }

    /// A disabled SDK: no files, no threads, no handlers.
    private static func disabled(_ options: Options, _ error: CairnStartError) -> Cairn {
        let processor = Processor(options: ProcessorOptions(limits: options.limits, privacy: options.privacy,
                                                            sampling: options.sampling, filter: options.filter),
                                  common: CommonProperties(), sdkVersion: cairnVersion)
        return Cairn(options: options, crash: nil, ring: nil, processor: processor, startError: error)
    }

    private static func startOnce(_ options: Options) throws(CairnStartError) -> Cairn {
        let dir = options.dataDirectory
        let made = SmallFile.makeDirectories(dir)
        if made != 0 { throw .storage("cannot create \(dir): \(String(cString: strerror(made)))") }
        var attributes = ["distinct_id": options.distinctID, "app_id": options.appID]
        if let environment = options.environment { attributes["environment"] = environment }
        let crash: CrashCapture
        do {
            crash = try CrashCapture.start(.init(directory: dir + "/crash", release: options.release,
                                                 attributes: attributes, captureSIGQUIT: options.captureSIGQUIT,
                                                 deferSetup: true))
        } catch .alreadyStarted {
            throw .alreadyStarted
        } catch {
            throw .storage("crash capture: \(error)")
        }
        let processor = Processor(options: ProcessorOptions(limits: options.limits, privacy: options.privacy,
                                                            sampling: options.sampling, filter: options.filter),
                                  common: options.common(.collectWithoutFiles()), sdkVersion: cairnVersion)
        let ring: Ring
        do {
            ring = try Ring(path: dir + "/events.ring", options: .init(capacity: options.ringCapacity))
        } catch {
            throw .storage("event ring: \(error)")
        }
        let cairn = Cairn(options: options, crash: crash, ring: ring, processor: processor)
        // Before any event: this run's bare events take the context in force.
        cairn.appendContext(to: ring)
        cairn.background.start { [cairn] in cairn.startInBackground(crash: crash, ring: ring) }
        if !options.terminationSignals.isEmpty {
            TerminationHandler.install(signals: options.terminationSignals) { [cairn] in
                cairn.shutdown(timeout: cairn.options.shutdownTimeout)
            }
        }
        return cairn
    }

    /// The background half of `start`: store, uploader, previous runs, install
    /// properties; then upkeep (deduplication summaries) until shutdown.
    private func startInBackground(crash: CrashCapture, ring: Ring) {
        crash.finishSetup()  // first: the run record, and the OOM-kill baseline as early as it can
        if let error = crash.runRecordError {
            // Crashes are still reported; how the run ended otherwise is not.
            drops.add("run_record_unavailable", 1)
            if options.debugLogging { writeStandardError("[cairn] run record: \(error)\n") }
        }
        let common = options.common(.collect())
        processor.updateCommon(common)
        // Events tracked meanwhile may land on either side of the new context record:
        // both are this run's, and the new one holds everything the first did.
        appendContext(to: ring)
        crash.recordContext(common.encodedContext())
        _ = install
        let dir = options.dataDirectory
        var store: SnapshotStore?
        do {
            store = try SnapshotStore(directory: dir + "/store", options: .init(maxBytes: options.storeMaxBytes))
        } catch {
            // Events still flow: undelivered batches wait in the ring instead.
            drops.add("store_unavailable", 1)
            if options.debugLogging { writeStandardError("[cairn] snapshot store: \(error)\n") }
        }
        let destinations = options.destinations
        var tap: (@Sendable ([[UInt8]]) -> Void)?
        if !destinations.isEmpty {
            tap = { (records: [[UInt8]]) -> Void in Self.deliver(records, to: destinations) }
        }
        var uploadOptions = UploaderOptions(url: options.uploadURL ?? "", apiKey: options.apiKey,
                                            maxBatchEvents: options.maxBatchEvents,
                                            maxBatchBytes: options.maxBatchBytes, maxBatchAge: options.maxBatchAge)
        uploadOptions.debugLogging = options.debugLogging
        uploadOptions.observer = options.uploadObserver
        uploadOptions.storeOnly = options.uploadURL == nil
        uploadOptions.followDestination = options.storedRequestsFollowDestination
        uploadOptions.tap = tap
        uploadOptions.currentContext = { [processor] in processor.contextFragment }
        // One idle connection kept for each request the uploader may have out: fewer, and
        // every burst past them pays a new connection (and a TLS handshake) per request.
        let transport = options.transport
            ?? HTTPTransport(maxIdleConnections: uploadOptions.maxInFlight, caFile: options.caFile,
                             tlsLibrary: options.tlsLibrary)
        let uploader = Uploader(ring: ring, store: store, transport: transport, options: uploadOptions)
        // A shutdown that gave up waiting for this start must not find an uploader
        // started behind its back.
        let started = state.withLock { s -> Bool in
            s.store = store
            guard !s.startAbandoned else { return false }
            s.uploader = uploader
            return true
        }
        guard started else {
            state.withLock { $0.ready = true }
            background.signal()
            return
        }
        uploader.start()
        // The ended runs' own events, recovered from the ring, are made safe (delivered,
        // or stored, which replays oldest first) before their crash and session_end are
        // stored: a collector sees a run's events before its end. Bounded: past the
        // limit, the previous runs are reported anyway.
        if ring.stats().recovered > 0 { _ = uploader.flush(timeout: Self.recoveredEventsFirstLimit) }
        reportPreviousRuns(uploader)
        sendInstallProperties(uploader)
        state.withLock { $0.ready = true }
        background.signal()
        while !background.waitForStop(timeout: nextWake()) {
            if contextPending.load(ordering: .acquiring) { appendContext(to: ring) }
            emitDedupSummaries()
            if let due = healthDueIn(), due <= .zero { emitHealth(final: false) }
        }
        emitDedupSummaries()
    }

    // MARK: SDK health

    /// Where the next `sdk_health` counts from; held while one is built and tracked, so
    /// the periodic one and the final one at `shutdown` never interleave.
    private let health: Locked<HealthState>

    struct HealthState {
        var baseline: HealthBaseline
        var finalSent = false
    }

    /// What an `sdk_health` event counts from: the previous one (or the start).
    struct HealthBaseline {
        var at: UInt64
        var ring: Ring.Stats?
        var drops: [String: Int] = [:]
        var changes: [String: Int] = [:]
        var upload = UploaderStats()
        var first = true
    }

    /// How long until the next `sdk_health` is due (zero or less: now); nil when off.
    private func healthDueIn() -> Duration? {
        guard let interval = options.healthInterval else { return nil }
        let since = DispatchTime.now().uptimeNanoseconds &- health.withLock { $0.baseline.at }
        return interval - .nanoseconds(Int64(clamping: since))
    }

    /// The background loop's next wake-up: within a second (deduplication windows), or
    /// when the next `sdk_health` is due.
    private func nextWake() -> Duration {
        max(.milliseconds(1), min(.seconds(1), healthDueIn() ?? .seconds(1)))
    }

    /// Tracks `sdk_health` (docs/FORMATS.md, "SDK health"): what the SDK did since the
    /// previous one, as counts, and how full its ring is.
    private func emitHealth(final: Bool) {
        guard options.healthInterval != nil, let ring else { return }
        health.withLock { h in
            guard !h.finalSent else { return }
            h.finalSent = final
            let before = h.baseline
            h.baseline = trackHealth(since: before, final: final, ring: ring)
        }
    }

    /// Tracks the `sdk_health` event for what happened since `before`; returns where the
    /// next one counts from.
    private func trackHealth(since before: HealthBaseline, final: Bool, ring: Ring) -> HealthBaseline {
        let (uploader, startNanos) = state.withLock { ($0.uploader, $0.startNanos) }
        let r = ring.stats()
        let upload = uploader?.stats ?? UploaderStats()
        let now = HealthBaseline(at: DispatchTime.now().uptimeNanoseconds, ring: r,
                                 drops: dropTotals(ring: r, upload: upload), changes: drops.changes(),
                                 upload: upload, first: false)
        let ur = before.ring ?? r
        func delta<N: BinaryInteger>(_ a: N, _ b: N) -> CairnValue { .int(Int64(clamping: a >= b ? a - b : 0)) }
        func deltas(_ a: [String: Int], _ b: [String: Int]) -> CairnValue {
            var out: [String: CairnValue] = [:]
            for (k, v) in a where v > (b[k] ?? 0) { out[k] = .int(Int64(v - (b[k] ?? 0))) }
            return .object(out)
        }
        func share(_ n: UInt64) -> CairnValue {
            .double(r.capacity == 0 ? 0 : (Double(n) / Double(r.capacity) * 1000).rounded() / 1000)
        }
        let (u, ub) = (now.upload, before.upload)
        var p: [String: CairnValue] = [
            "interval_ms": delta(now.at / 1_000_000, before.at / 1_000_000),
            "events_written": delta(r.appended, ur.appended),
            "ring_fill": share(r.used),
            "ring_high_water": share(r.highWater),
            "dropped": deltas(now.drops, before.drops),
            "changed": deltas(now.changes, before.changes),
            "delivered_batches": delta(u.deliveredBatches, ub.deliveredBatches),
            "delivered_events": delta(u.deliveredEvents, ub.deliveredEvents),
            "failed_attempts": delta(u.failedAttempts, ub.failedAttempts),
            "stored_batches": delta(u.storedBatches, ub.storedBatches),
            "replayed_batches": delta(u.replayedBatches, ub.replayedBatches),
            "breaker_openings": delta(u.breakerOpenings, ub.breakerOpenings),
            "pauses": delta(u.pauses, ub.pauses),
            "store_failures": delta(u.storeFailures, ub.storeFailures),
        ]
        if before.first {
            p["start_ms"] = .double((Double(startNanos) / 1e3).rounded() / 1e3)
            p["ring_recovered"] = .int(Int64(clamping: r.recovered))
            p["ring_skipped_corrupt"] = .int(Int64(clamping: r.skippedCorrupt))
            p["ring_open"] = .string(Self.originName(r.origin))
            if r.origin == .repaired { p["ring_repaired"] = .array(Self.repairNames(r.repairs).map { .string($0) }) }
            if let damage = state.withLock({ $0.store })?.stats.damage {
                p["store_damage"] = .string(damage.found)
                p["store_requests_lost"] = damage.lost.map { .int(Int64($0)) } ?? .null
                p["store_requests_salvaged"] = .int(Int64(damage.salvaged))
            }
        }
        if final { p["final"] = true }
        submit(Event(type: .health, name: "sdk_health", properties: p, timeMillis: EventClock.nowMillis(),
                     identity: currentIdentity(nil), sessionID: sessionID, tier: .important))
        return now
    }

    static func originName(_ origin: Ring.Origin) -> String {
        switch origin {
        case .created: return "created"
        case .reopened: return "reopened"
        case .setAside: return "set_aside"
        case .repaired: return "repaired"
        }
    }

    /// What a ring repair rewrote, as names (docs/FORMATS.md, "SDK health").
    static func repairNames(_ r: Ring.Repairs) -> [String] {
        let names: [(Ring.Repairs, String)] = [
            (.magic, "magic"), (.version, "version"), (.headerSize, "header_size"), (.capacity, "capacity"),
            (.salt, "salt"), (.flags, "flags"), (.headerChecksum, "header_checksum"),
            (.writePosition, "write_position"), (.readPosition, "read_position"), (.fileSize, "file_size"),
            (.windowInferred, "window_inferred"),
        ]
        return names.filter { r.contains($0.0) }.map(\.1)
    }

    /// How long the background start waits for recovered events to be safe before it
    /// reports the previous runs.
    static let recoveredEventsFirstLimit: Duration = .seconds(5)

    private func reportPreviousRuns(_ uploader: Uploader) {
        guard let crash else { return }
        let result = crash.processPreviousRuns { events in
            let body = try FrameEncoder().encode(batchID: UInt64.random(in: 1...UInt64.max), records: events)
            try uploader.sendPrebuilt(body: body, priority: .critical)
            deliverToDestinations(events)
        }
        if options.debugLogging {
            for run in result.runs {
                let note = "[cairn] previous run \(run.sessionID ?? "?") ended: \(run.reason.rawValue)"
                    + (run.stored ? "" : " (not stored: \(run.error ?? "?"))")
                writeStandardError((note + "\n"))
            }
        }
    }

    /// The fixed user properties of the install, sent once per data directory with
    /// `user_setOnce`, in a request of their own.
    private func sendInstallProperties(_ uploader: Uploader) {
        guard !install.propertiesSent else { return }
        let event = Event(type: .userSetOnce, name: "user_properties", properties: install.userProperties(clock: processor.clock),
                          timeMillis: install.timeMillis, identity: currentIdentity(nil), sessionID: sessionID,
                          tier: .important)
        let record = processor.record(event)
        do {
            let body = try FrameEncoder().encode(batchID: UInt64.random(in: 1...UInt64.max), records: [record])
            try uploader.sendPrebuilt(body: body, priority: .important)
            install.markPropertiesSent(directory: options.dataDirectory)
            deliverToDestinations([record])
        } catch {
            drops.add("install_properties", 1)
        }
    }

    // MARK: Tracking

    /// Tracks an event. `time` defaults to now (for `app_install`, to the install time);
    /// `identity` overrides the default distinct and account ids for this event only.
    /// Returns at once; a dropped event (sampled, filtered, ring full) is counted and,
    /// with debug logging, logged.
    public func track(_ name: String, properties: [String: CairnValue] = [:], time: Date? = nil,
                      identity: Identity? = nil) {
        let millis: UInt64
        if let time {
            millis = UInt64(max(0, time.timeIntervalSince1970 * 1000))
        } else if name == "app_install" {
            millis = install.timeMillis
        } else {
            millis = EventClock.nowMillis()
        }
        submit(Event(type: .track, name: name, properties: properties, timeMillis: millis,
                     identity: currentIdentity(identity), sessionID: sessionID, span: Self.currentSpan,
                     identityGiven: identity != nil))
    }

    /// Tracks a typed event, with its tier. A ``Tier/critical`` event (a payment, an
    /// audit record) is not sampled or shed, and is made durable before this returns:
    /// once the SDK's background start has opened the snapshot store, it is stored
    /// there at once, in a request of its own with Critical priority (which the store's
    /// size and age caps evict last), and synced; before that, it is written to the
    /// event ring and synced. That costs a disk sync on the calling thread (about a
    /// millisecond): keep the tier for events that must not be lost.
    public func track(_ event: some CairnEvent, time: Date? = nil, identity: Identity? = nil) {
        let millis = time.map { UInt64(max(0, $0.timeIntervalSince1970 * 1000)) } ?? EventClock.nowMillis()
        submit(Event(type: .track, name: event.name, properties: event.properties, timeMillis: millis,
                     identity: currentIdentity(identity), sessionID: sessionID, span: Self.currentSpan,
                     tier: event.tier, isError: event.isError, identityGiven: identity != nil))
    }

    /// Changes the default distinct id of later events.
    public func identify(distinctID: String) {
        guard !distinctID.isEmpty else {
            drops.add("invalid_identity", 1)
            return
        }
        state.withLock { $0.identity.distinctID = distinctID }
    }

    /// Sets the account of later events and user-property requests (nil clears it).
    /// The first time an account id is set in this process, it is also sent once as
    /// the `user_setOnce` property `account_id`.
    public func setAccountID(_ accountID: String?) {
        let sendOnce = state.withLock { s -> Identity? in
            s.identity.accountID = accountID
            guard let accountID, s.accountSent.insert(accountID).inserted else { return nil }
            return s.identity
        }
        if let identity = sendOnce, let accountID {
            submit(Event(type: .userSetOnce, name: "user_properties", properties: ["account_id": .string(accountID)],
                         timeMillis: EventClock.nowMillis(), identity: identity, sessionID: sessionID,
                         tier: .important))
        }
    }

    /// Updates the user's properties on the collector, as `mode` says.
    public func setUserProperties(_ properties: [String: CairnValue], mode: UserPropertyMode = .set,
                                  identity: Identity? = nil) {
        var props = properties
        switch mode {
        case .unset:
            props = Dictionary(uniqueKeysWithValues: properties.keys.map { ($0, CairnValue.null) })
        case .add:
            props = properties.filter { _, v in
                if case .int = v { return true }
                if case .double(let d) = v, d.isFinite { return true }
                return false
            }
            if props.count < properties.count { drops.add("user_add_not_a_number", properties.count - props.count) }
        case .set, .setOnce:
            break
        }
        guard !props.isEmpty else { return }
        submit(Event(type: mode.eventType, name: "user_properties", properties: props,
                     timeMillis: EventClock.nowMillis(), identity: currentIdentity(identity), sessionID: sessionID,
                     tier: .important, identityGiven: identity != nil))
    }

    /// Leaves a breadcrumb: the last ones travel with a crash report. The privacy rules
    /// mask the message and the category first (an e-mail, a bearer token, …), so what
    /// the crash report keeps on disk, and later sends, is already masked.
    public func breadcrumb(_ message: String, category: String? = nil) {
        guard let crash else { return }
        crash.addBreadcrumb(processor.maskText(message), category: category.map(processor.maskText))
    }

    func currentIdentity(_ override: Identity?) -> Identity {
        if let override { return override }
        return state.withLock { $0.identity }
    }

    /// Ring fill above which events of a tier are shed, lowest tier first, so that a
    /// burst cannot crowd out what matters: Debug above half full, Sampled above 80 %.
    /// Important and Critical events are refused only by a full ring. Always counted.
    static func shedThreshold(_ tier: Tier) -> Double? {
        switch tier {
        case .debug: return 0.5
        case .sampled: return 0.8
        case .important, .critical: return nil
        }
    }

    /// The hot path: admit, deduplicate, clean, encode into the ring.
    func submit(_ event: consuming Event) {
        guard let ring else { return }  // disabled
        var event = event
        if let reason = processor.admit(&event) {
            drops.add(reason.rawValue, 1)
            return
        }
        if let threshold = Self.shedThreshold(event.tier) {
            let stats = ring.stats()
            if Double(stats.used) > Double(stats.capacity) * threshold {
                drops.add("overload_\(event.tier.rawValue)", 1)
                return
            }
        }
        var fingerprint: UInt64?
        if event.isError {
            let message: String? = if case .string(let m)? = event.properties["message"] { m } else { nil }
            let print = Deduplicator.fingerprint(name: event.name, message: message, extra: [])
            if dedup.offer(fingerprint: print, nowNanos: DispatchTime.now().uptimeNanoseconds) == .folded {
                drops.add("deduplicated", 1)
                return
            }
            fingerprint = print
        }
        // Dynamic properties fill keys the call site did not set; they describe events,
        // not users: user-property requests go as set.
        if event.type == .track, let dynamic = options.dynamicProperties?(), !dynamic.isEmpty {
            for (k, v) in dynamic where event.properties[k] == nil { event.properties[k] = v }
        }
        if event.tier != .critical || !storeCritical(&event) {
            write(&event, cleaned: false, into: ring)
        }
        if let fingerprint { remember(event, fingerprint) }
    }

    /// A Critical event goes to the snapshot store at once, in a request of its own with
    /// the Critical priority, synced before `track` returns: stored, it outlives the
    /// eviction of Sampled and Important requests when the store is full, and a crash
    /// right after. Destinations see it now. False (the ring takes it instead, synced
    /// too) before the background start has opened the store, without one, or when the
    /// store refuses it.
    private func storeCritical(_ event: inout Event) -> Bool {
        guard let uploader = state.withLock({ $0.uploader }), uploader.hasStore else { return false }
        clean(&event)
        let record = processor.record(event)
        do {
            let body = try FrameEncoder().encode(batchID: UInt64.random(in: 1...UInt64.max), records: [record])
            try uploader.sendPrebuilt(body: body, priority: .critical)
        } catch {
            if options.debugLogging { writeStandardError("[cairn] critical event \(event.name) not stored: \(error)\n") }
            return false
        }
        deliverToDestinations([record])
        return true
    }

    /// Hands finished records (whole events, as the collector receives them) to the
    /// destinations, on the calling thread: the ring's batches as the uploader frames
    /// them, and the events that go to the store directly (Critical events, previous
    /// runs' crash and session_end, the install properties).
    func deliverToDestinations(_ records: [[UInt8]]) {
        Self.deliver(records, to: options.destinations)
    }

    private static func deliver(_ records: [[UInt8]], to destinations: [any Destination]) {
        guard !destinations.isEmpty, !records.isEmpty else { return }
        let events = records.map(FinishedEvent.init(json:))
        for d in destinations { d.receive(events) }
    }

    /// Keeps the first event of a window; bounded: past twice the open windows allowed,
    /// the oldest entries (whose windows are long closed) are forgotten.
    private func remember(_ event: Event, _ fingerprint: UInt64) {
        let limit = max(1, options.dedup.maxFingerprints) * 2
        dedupFirst.withLock { first in
            first.byFingerprint[fingerprint] = event
            let count = first.byFingerprint.count
            guard count > limit else { return }
            let oldest = first.byFingerprint.sorted { $0.value.timeMillis < $1.value.timeMillis }.prefix(count - limit / 2)
            for (key, _) in oldest { first.byFingerprint[key] = nil }
        }
    }

    /// Appends the processor's current context fragment to the ring as a context
    /// record; the events after it are written bare. When the ring has no room, events
    /// are written whole until the background thread's next try succeeds (a context
    /// record is not an event: a refused try is not counted as a drop, unless the ring
    /// filled between the look at its room and the append).
    private func appendContext(to ring: Ring) {
        contextAppend.withLock { _ in
            let fragment = processor.contextFragment
            let stats = ring.stats()
            let need = UInt64(32 + fragment.count)
            guard stats.capacity >= stats.used + need, (try? ring.append(fragment, kind: .context)) != nil else {
                contextPending.store(true, ordering: .releasing)
                return
            }
            contextPending.store(false, ordering: .releasing)
        }
    }

    /// Encodes `event` into the ring, in one pass when its properties are not `cleaned`
    /// yet and no privacy or sanitising rule would change them (the common case);
    /// otherwise `event` is cleaned (what the rules changed is counted) and encoded again
    /// into the same reservation. A full ring, or a record too big for it, counts its own
    /// drop. The event is written bare (without its context and sdk fields, which the
    /// uploader adds back from the context record in force) once this run's context
    /// record is in the ring, whole before that.
    private func write(_ event: inout Event, cleaned: Bool, into ring: Ring) {
        var cleaned = cleaned
        let whole = contextPending.load(ordering: .acquiring)
        var needed = processor.estimate(event, context: whole)
        if !cleaned && needed > fastPathLimit {
            // Large before cleaning (a long string, a big array): clean first, so that
            // what the rules cut is not reserved, or refused as too big.
            clean(&event)
            cleaned = true
            needed = processor.estimate(event, context: whole)
        }
        for _ in 0..<2 {
            do {
                var overflow = 0
                let done = try ring.withReservation(capacity: needed, kind: whole ? .data : .bare) { buf -> Int? in
                    var w = JSONWriter(into: buf)
                    if !cleaned && processor.encodeIfClean(event, into: &w, context: whole) == nil {
                        clean(&event)
                        cleaned = true
                    }
                    if cleaned {
                        w = JSONWriter(into: buf)
                        processor.encode(event, into: &w, context: whole)
                    }
                    if w.overflowed {
                        overflow = w.count
                        return nil
                    }
                    return w.count
                }
                if done {
                    if event.tier == .critical { try? ring.sync() }
                    return
                }
                needed = overflow
            } catch {
                if options.debugLogging {
                    writeStandardError("[cairn] event \(event.name) dropped: \(error)\n")
                }
                return
            }
        }
    }

    /// Applies the privacy and sanitising rules to `event`'s properties, counting what
    /// they changed.
    private func clean(_ event: inout Event) {
        var counts = RuleCounts()
        processor.clean(&event, counts: &counts)
        if !counts.isEmpty { drops.addChanges(counts) }
    }

    /// Each closed window with repeats becomes one event: the first event again, with
    /// `repeat_count` (the repeats folded into it) and `deduplicated: true`.
    private func emitDedupSummaries() {
        for closed in dedup.drainClosed(nowNanos: DispatchTime.now().uptimeNanoseconds) {
            guard var summary = dedupFirst.withLock({ $0.byFingerprint.removeValue(forKey: closed.fingerprint) }) else { continue }
            summary.properties["repeat_count"] = .int(Int64(closed.repeats))
            summary.properties["deduplicated"] = .bool(true)
            summary.timeMillis = EventClock.nowMillis()
            summary.id = nil  // an event of its own
            if let ring { write(&summary, cleaned: true, into: ring) }
        }
    }

    // MARK: Spans

    /// Runs `operation` inside a new span named `name`: events tracked inside carry its
    /// trace and span ids, and a `span` event with its duration and outcome is tracked
    /// when it ends. A span inside another span continues its trace.
    ///
    /// `traceparent` is the W3C header of the request being served, if it had one: the
    /// span then continues that trace (its parent is the caller's span, and the caller's
    /// `sampled` flag is passed on by ``traceparent()``), so sampling, which keeps or
    /// drops a trace's events together by its trace id, decides the same way in every
    /// service the trace crosses. An invalid header is ignored (a new trace starts).
    ///
    /// ```swift
    /// try cairn.withSpan("GET /orders", traceparent: request.headers["traceparent"]) {
    ///     try handle(request)
    /// }
    /// ```
    public func withSpan<T>(_ name: String, traceparent: String? = nil, operation: () throws -> T) rethrows -> T {
        let span = Self.childSpan(continuing: traceparent)
        let started = DispatchTime.now().uptimeNanoseconds
        do {
            let result = try Self.$currentSpan.withValue(span) { try operation() }
            endSpan(name, span, started: started, error: nil)
            return result
        } catch {
            endSpan(name, span, started: started, error: error)
            throw error
        }
    }

    /// The async form of `withSpan`.
    public func withSpan<T>(_ name: String, traceparent: String? = nil,
                            operation: () async throws -> T) async rethrows -> T {
        let span = Self.childSpan(continuing: traceparent)
        let started = DispatchTime.now().uptimeNanoseconds
        do {
            let result = try await Self.$currentSpan.withValue(span) { try await operation() }
            endSpan(name, span, started: started, error: nil)
            return result
        } catch {
            endSpan(name, span, started: started, error: error)
            throw error
        }
    }

    /// A span context under the caller's span named by a valid `traceparent`, else under
    /// the current span, else in a new trace.
    static func childSpan(continuing traceparent: String? = nil) -> SpanContext {
        if let header = traceparent, let caller = TraceParent(header: header) {
            return SpanContext(traceID: caller.traceID, spanID: .random(), parentSpanID: caller.parentID,
                               sampled: caller.sampled)
        }
        if let parent = currentSpan {
            return SpanContext(traceID: parent.traceID, spanID: .random(), parentSpanID: parent.spanID,
                               sampled: parent.sampled)
        }
        return SpanContext(traceID: .random(), spanID: .random())
    }

    private func endSpan(_ name: String, _ span: SpanContext, started: UInt64, error: (any Error)?) {
        let ms = Double(DispatchTime.now().uptimeNanoseconds &- started) / 1e6
        var props: [String: CairnValue] = ["duration_ms": .double(ms), "status": .string(error == nil ? "ok" : "error")]
        if let error { props["error"] = .string(String(describing: error)) }
        submit(Event(type: .span, name: name, properties: props, timeMillis: EventClock.nowMillis(),
                     identity: currentIdentity(nil), sessionID: sessionID, span: span, isError: error != nil))
    }

    /// The `traceparent` header to send on an outbound request from the current span
    /// (a new sampled trace outside any span), with the `sampled` flag of the trace as
    /// this service received it.
    public static func traceparent() -> String {
        let span = currentSpan ?? SpanContext(traceID: .random(), spanID: .random())
        return TraceParent(traceID: span.traceID, parentID: span.spanID, sampled: span.sampled).header
    }

    // MARK: Flush and shutdown

    /// Waits until every event tracked so far is delivered, or stored on disk (synced)
    /// because the collector could not take it now, or dropped for a reason that is
    /// counted. Returns true then, and false when `timeout` passed first; it returns by
    /// its deadline in every state, the collector down or unreachable included. A
    /// disabled SDK has nothing to flush: true.
    @discardableResult
    public func flush(timeout: Duration) -> Bool {
        flush(until: ContinuousClock.now + timeout)
    }

    private func flush(until deadline: ContinuousClock.Instant) -> Bool {
        guard isEnabled else { return true }
        guard waitUntilReady(until: deadline), let uploader = state.withLock({ $0.uploader }) else { return false }
        return uploader.flush(timeout: deadline - ContinuousClock.now)
    }

    /// Flushes, records a clean end of this run (the next start reports `clean`), and
    /// stops the background thread, all within `timeout`: it returns by then in every
    /// state, even with the collector unreachable (what was not sent stays on disk for
    /// the next start). Later calls do nothing; tracking after it is dropped. Returns
    /// what the flush returned.
    ///
    /// Call it when the service stops (from its lifecycle code, or let the SDK do it on
    /// SIGTERM with ``Options/terminationSignals``).
    @discardableResult
    public func shutdown(timeout: Duration) -> Bool {
        let first = state.withLock { s -> Bool in
            defer { s.stopped = true }
            return !s.stopped
        }
        let deadline = ContinuousClock.now + timeout
        guard first else {
            // Another shutdown runs (a termination signal and the service's own stop):
            // wait for it, so that nobody goes on as if it were done.
            while ContinuousClock.now < deadline {
                if let result = state.withLock({ $0.shutdownResult }) { return result }
                usleep(2_000)
            }
            return state.withLock { $0.shutdownResult } ?? false
        }
        guard let ring, let crash else {
            state.withLock { $0.shutdownResult = true }
            return true
        }
        let ready = waitUntilReady(until: deadline)
        if ready {
            emitHealth(final: true)
        } else {
            state.withLock { $0.startAbandoned = true }
        }
        let flushed = flush(until: deadline)
        let uploader = state.withLock { $0.uploader }
        _ = uploader?.shutdown(timeout: deadline - ContinuousClock.now)
        background.stop()
        try? ring.sync()
        try? crash.endSession()
        Self.sharedInstance.withLock { if $0 === self { $0 = nil } }
        state.withLock { $0.shutdownResult = flushed }
        // Over: a new start may begin the next run in this process.
        Self.startedOnce.store(false, ordering: .releasing)
        return flushed
    }

    private func waitUntilReady(until deadline: ContinuousClock.Instant) -> Bool {
        while !state.withLock({ $0.ready }) {
            if ContinuousClock.now >= deadline { return false }
            background.waitForSignal(timeout: .milliseconds(10))
        }
        return true
    }

    /// Events dropped since start in this process, by reason: what the processor
    /// refused (`sampled`, `filtered`, `deduplicated`, `overload_<tier>`, ...), what the
    /// ring refused (`ring_full`, `ring_too_big`) and what the uploader dropped (a final
    /// 4xx, store evictions, damage found at start). The reasons are those of the
    /// `Cairn-Dropped` header and of `sdk_health`'s `dropped` (docs/FORMATS.md, "Upload
    /// request"): the same drops are kept in the ring file until a request has reported
    /// them, so a process killed before that still has them reported by the next one.
    /// What the privacy and sanitising rules changed is not a drop: see ``changeCounts``.
    public var dropCounts: [String: Int] {
        dropTotals(ring: ring?.stats(), upload: state.withLock { $0.uploader }?.stats)
    }

    /// What the privacy and sanitising rules changed since start in this process, by
    /// rule (`privacy_masked`, `privacy_redacted`, `string_truncated`, `key_dropped`, ...):
    /// the events were kept, changed. Also in `sdk_health`'s `changed`; not reported in
    /// `Cairn-Dropped`.
    public var changeCounts: [String: Int] { drops.changes() }

    /// The drops of ``dropCounts`` from the ring's and the uploader's counts given.
    private func dropTotals(ring r: Ring.Stats?, upload u: UploaderStats?) -> [String: Int] {
        var all = drops.snapshot()
        if let r {
            if r.droppedFull > 0 { all["ring_full", default: 0] += Int(clamping: r.droppedFull) }
            if r.droppedTooBig > 0 { all["ring_too_big", default: 0] += Int(clamping: r.droppedTooBig) }
        }
        for (reason, n) in u?.dropped ?? [:] { all[reason, default: 0] += n }
        return all
    }
}
