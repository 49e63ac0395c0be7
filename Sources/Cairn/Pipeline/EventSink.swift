import CairnBase
import CairnProcessor
import CairnStore
import CairnUploader
import Synchronization

/// The last stages: clean, encode, and keep. Every finished event goes to one of two
/// places: the event ring (encoded straight into its reservation on the caller's
/// thread; the uploader batches it), or, for a Critical event once the snapshot store is
/// open, the store at once (a request of its own with the priority of its tier, synced).
/// Destinations see each event as the collector will: the ring's through the uploader's
/// tap, the store's here.
final class EventSink: Sendable {
    let ring: Ring
    let processor: Processor
    let drops: DropCounters
    let destinations: [any Destination]
    let debugLogging: Bool
    /// Events estimated larger than this are cleaned before they are encoded (16 KiB,
    /// or the ring's largest record if smaller).
    let fastPathLimit: Int
    /// Whether the ring lacks a context record of this process's current context:
    /// until one is appended, events are written whole (with their context), since a
    /// bare event would take an earlier run's context (docs/FORMATS.md, "Ring file").
    let contextPending = Atomic<Bool>(true)
    /// Held while a context record is appended, so two never race.
    private let contextAppend = Locked(())
    /// The uploader, set once the background start has made it (its store takes
    /// Critical events).
    let uploader = Locked<Uploader?>(nil)

    init(ring: Ring, processor: Processor, drops: DropCounters, destinations: [any Destination], debugLogging: Bool) {
        self.ring = ring
        self.processor = processor
        self.drops = drops
        self.destinations = destinations
        self.debugLogging = debugLogging
        fastPathLimit = min(16 << 10, Int(ring.stats().maxRecord))
    }

    /// Takes an admitted, enriched event.
    func accept(_ event: inout Event) {
        if event.tier == .critical, let uploader = uploader.withLock({ $0 }), uploader.hasStore {
            clean(&event)
            if !storeCritical(event, in: uploader) { write(&event, cleaned: true) }
        } else {
            write(&event, cleaned: false)
        }
    }

    /// Encodes `event` into the ring, in one pass when its properties are not `cleaned`
    /// yet and no privacy or sanitising rule would change them (the common case);
    /// otherwise `event` is cleaned (what the rules changed is counted) and encoded again
    /// into the same reservation. A full ring, or a record too big for it, counts its own
    /// drop. The event is written bare (without its context and sdk fields, which the
    /// uploader adds back from the context record in force) once this run's context
    /// record is in the ring, whole before that.
    func write(_ event: inout Event, cleaned: Bool) {
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
                if debugLogging { writeStandardError("[cairn] event \(event.name) dropped: \(error)\n") }
                return
            }
        }
    }

    /// Applies the privacy and sanitising rules to `event`'s properties, counting what
    /// they changed.
    func clean(_ event: inout Event) {
        var counts = RuleCounts()
        processor.clean(&event, counts: &counts)
        if !counts.isEmpty { drops.addChanges(counts) }
    }

    /// A Critical event (cleaned) goes to the snapshot store at once, in a request of its
    /// own with the Critical priority, synced before ``Cairn/track(_:time:identity:)`` returns: stored, it outlives
    /// the eviction of Sampled and Important requests when the store is full, and a crash
    /// right after. Destinations see it now. False when the store refuses it: the ring
    /// takes it instead (synced too), as it does before the background start has opened
    /// the store, or without one.
    private func storeCritical(_ event: Event, in uploader: Uploader) -> Bool {
        do {
            try storeNow([processor.record(event)], tier: .critical, in: uploader)
        } catch {
            if debugLogging { writeStandardError("[cairn] critical event \(event.name) not stored: \(error)\n") }
            return false
        }
        return true
    }

    /// The sink for finished records that do not go through the ring: one request of
    /// their own, stored (synced) with the priority of their tier before it returns,
    /// then handed to the destinations. Critical events, the previous runs' `crash` and
    /// `session_end`, the install's `user_setOnce`.
    func storeNow(_ records: [[UInt8]], tier: Tier, in uploader: Uploader) throws {
        try uploader.storeRecords(records, priority: tier)
        Self.deliver(records, to: destinations)
    }

    /// Hands finished records (whole events, as the collector receives them) to
    /// `destinations`, on the calling thread.
    static func deliver(_ records: [[UInt8]], to destinations: [any Destination]) {
        guard !destinations.isEmpty, !records.isEmpty else { return }
        let events = records.map(FinishedEvent.init(json:))
        for d in destinations { d.receive(events) }
    }

    /// Appends the processor's current context fragment to the ring as a context
    /// record; the events after it are written bare. When the ring has no room, events
    /// are written whole until the background thread's next try succeeds (a context
    /// record is not an event: a refused try is not counted as a drop, unless the ring
    /// filled between the look at its room and the append).
    func appendContext() {
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
}
