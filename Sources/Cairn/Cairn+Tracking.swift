// Tracking: the public calls, and the hot path from admission to the ring (or, for
// Critical events, the store).
import CairnBase
import CairnCrash
import CairnProcessor
import CairnStore
import CairnUploader
public import FoundationEssentials
import Dispatch
import Glibc
import Synchronization

extension Cairn {
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
            drops.add(.invalidIdentity, 1)
            return
        }
        let identity = state.withLock { s -> Identity in
            s.identity.distinctID = distinctID
            return s.identity
        }
        crash?.setIdentity(distinctID: identity.distinctID, accountID: identity.accountID)
    }

    /// Sets the account of later events and user-property requests (nil clears it).
    /// The first time an account id is set in this process, it is also sent once as
    /// the `user_setOnce` property `account_id`.
    public func setAccountID(_ accountID: String?) {
        let (identity, sendOnce) = state.withLock { s -> (Identity, Bool) in
            s.identity.accountID = accountID
            guard let accountID, s.accountSent.insert(accountID).inserted else { return (s.identity, false) }
            return (s.identity, true)
        }
        crash?.setIdentity(distinctID: identity.distinctID, accountID: identity.accountID)
        if sendOnce, let accountID {
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
            if props.count < properties.count { drops.add(.userAddNotANumber, properties.count - props.count) }
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
            drops.add(reason, 1)
            return
        }
        if let threshold = Self.shedThreshold(event.tier) {
            let stats = ring.stats()
            if Double(stats.used) > Double(stats.capacity) * threshold {
                drops.add(.overload(tier: event.tier.rawValue), 1)
                return
            }
        }
        var fingerprint: UInt64?
        if event.isError {
            let message: String? = if case .string(let m)? = event.properties["message"] { m } else { nil }
            let print = Deduplicator.fingerprint(name: event.name, message: message, extra: [])
            if dedup.offer(fingerprint: print, nowNanos: DispatchTime.now().uptimeNanoseconds) == .folded {
                drops.add(.deduplicated, 1)
                return
            }
            fingerprint = print
        }
        // Dynamic properties fill keys the call site did not set; they describe events,
        // not users: user-property requests go as set.
        if event.type == .track, let dynamic = options.dynamicProperties?(), !dynamic.isEmpty {
            for (k, v) in dynamic where event.properties[k] == nil { event.properties[k] = v }
        }
        if event.tier == .critical, let uploader = state.withLock({ $0.uploader }), uploader.hasStore {
            clean(&event)
            if !storeCritical(event, in: uploader) { write(&event, cleaned: true, into: ring) }
        } else {
            write(&event, cleaned: false, into: ring)
        }
        if let fingerprint { remember(event, fingerprint) }
    }

    /// A Critical event (cleaned) goes to the snapshot store at once, in a request of its
    /// own with the Critical priority, synced before `track` returns: stored, it outlives
    /// the eviction of Sampled and Important requests when the store is full, and a crash
    /// right after. Destinations see it now. False when the store refuses it: the ring
    /// takes it instead (synced too), as it does before the background start has opened
    /// the store, or without one.
    private func storeCritical(_ event: Event, in uploader: Uploader) -> Bool {
        do {
            try storeNow([processor.record(event)], tier: .critical, in: uploader)
        } catch {
            if options.debugLogging { writeStandardError("[cairn] critical event \(event.name) not stored: \(error)\n") }
            return false
        }
        return true
    }

    /// The sink for finished records that do not go through the ring: one request of
    /// their own, stored (synced) with the priority of their tier before it returns,
    /// then handed to the destinations. Critical events, the previous runs' `crash` and
    /// `session_end`, the install's `user_setOnce`.
    func storeNow(_ records: [[UInt8]], tier: Tier, in uploader: Uploader) throws {
        let body = try FrameEncoder().encode(batchID: UInt64.random(in: 1...UInt64.max), records: records)
        try uploader.sendPrebuilt(body: body, priority: Self.priority(tier))
        deliverToDestinations(records)
    }

    /// The store's eviction order for a tier: the same four levels (the store knows
    /// priorities, not events).
    static func priority(_ tier: Tier) -> Priority {
        switch tier {
        case .critical: return .critical
        case .important: return .important
        case .sampled: return .sampled
        case .debug: return .debug
        }
    }

    /// Hands finished records (whole events, as the collector receives them) to the
    /// destinations, on the calling thread: the ring's batches as the uploader frames
    /// them, and the events that go to the store directly (Critical events, previous
    /// runs' crash and session_end, the install properties).
    func deliverToDestinations(_ records: [[UInt8]]) {
        Self.deliver(records, to: options.destinations)
    }

    static func deliver(_ records: [[UInt8]], to destinations: [any Destination]) {
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
    func appendContext(to ring: Ring) {
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
    func emitDedupSummaries() {
        for closed in dedup.drainClosed(nowNanos: DispatchTime.now().uptimeNanoseconds) {
            guard var summary = dedupFirst.withLock({ $0.byFingerprint.removeValue(forKey: closed.fingerprint) }) else { continue }
            summary.properties["repeat_count"] = .int(Int64(closed.repeats))
            summary.properties["deduplicated"] = .bool(true)
            summary.timeMillis = EventClock.nowMillis()
            summary.id = nil  // an event of its own
            if let ring { write(&summary, cleaned: true, into: ring) }
        }
    }
}
