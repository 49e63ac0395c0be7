// Deduplication of error events: a burst of the same error (same fingerprint) becomes the
// first event plus one summary carrying how many repeats were folded into it. Offered on the
// caller's thread, so the critical section is a dictionary lookup and, for a new window, an
// append; closing windows and building summaries happens in `drainClosed`, off the hot path.

import Glibc

/// How error events are folded.
public struct DedupOptions: Sendable, Equatable {
    /// How long after the first event of a fingerprint repeats are folded into it.
    public var window: Duration
    /// How many fingerprints have an open window at most; past this, the oldest window is
    /// closed early. At least 1.
    public var maxFingerprints: Int

    /// Options with a 10-second window over at most 1024 fingerprints by default.
    public init(window: Duration = .seconds(10), maxFingerprints: Int = 1024) {
        self.window = window
        self.maxFingerprints = maxFingerprints
    }
}

/// What to do with an offered event.
package enum DedupDecision: Sendable, Equatable {
    /// The first event of its fingerprint in a window: send it.
    case emit
    /// A repeat inside an open window: drop it; it is counted in the window's summary.
    case folded
}

/// Folds repeated error events.
///
/// A window opens when a fingerprint is offered and has no open window; that event is
/// emitted. Until `window` has passed since that first event (`now - start < window`),
/// events of the same fingerprint are folded and counted. Then the window is closed: the
/// next event of the fingerprint opens a new one, and ``drainClosed(nowNanos:)`` reports
/// the closed window once, as `(fingerprint, repeats)`, when it folded any.
///
/// When a new window would make more than `maxFingerprints` windows open, the one opened
/// first is closed early (and reported like any other closed window).
///
/// Thread-safe: every method may be called from any thread.
package final class Deduplicator: @unchecked Sendable {
    private struct Window {
        var start: UInt64
        var repeats: Int
        /// Tells this window apart from an earlier one of the same fingerprint in `order`.
        var serial: UInt64
    }

    private let windowNanos: UInt64
    private let maxFingerprints: Int
    /// Guards everything below. A pthread mutex rather than `Synchronization.Mutex`, whose
    /// atomics ThreadSanitizer on Linux reports as races.
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private var open: [UInt64: Window] = [:]
    /// Windows in the order they opened: (fingerprint, serial). Entries whose window has
    /// since closed are skipped when they reach the front.
    private var order: [(fingerprint: UInt64, serial: UInt64)] = []
    private var orderHead = 0
    private var nextSerial: UInt64 = 0
    /// Windows closed by `offer` (renewed or evicted) with repeats, not yet drained. Capped
    /// at `maxFingerprints`; past that the oldest summaries are dropped and counted.
    private var closed: [(fingerprint: UInt64, repeats: Int)] = []
    private var droppedSummaryCount = 0

    /// A deduplicator for `options`.
    package init(options: DedupOptions) {
        let components = options.window.components
        if components.seconds < 0 || (components.seconds == 0 && components.attoseconds <= 0) {
            windowNanos = 0
        } else {
            let (whole, overflow) = UInt64(components.seconds).multipliedReportingOverflow(by: 1_000_000_000)
            let (sum, overflow2) = whole.addingReportingOverflow(UInt64(components.attoseconds / 1_000_000_000))
            windowNanos = overflow || overflow2 ? .max : sum
        }
        maxFingerprints = max(options.maxFingerprints, 1)
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deinitialize(count: 1)
        mutex.deallocate()
    }

    /// Offers an event of `fingerprint`. `nowNanos`: a monotonic clock reading passed in
    /// (so tests need not sleep); readings a little out of order between threads count as
    /// inside the window.
    package func offer(fingerprint: UInt64, nowNanos: UInt64) -> DedupDecision {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        if let index = open.index(forKey: fingerprint) {
            let window = open.values[index]
            if nowNanos < window.start || nowNanos - window.start < windowNanos {
                open.values[index].repeats += 1
                return .folded
            }
            if window.repeats > 0 { addClosed(fingerprint, window.repeats) }
        } else if open.count >= maxFingerprints {
            evictOldest()
        }
        nextSerial += 1
        open[fingerprint] = Window(start: nowNanos, repeats: 0, serial: nextSerial)
        order.append((fingerprint, nextSerial))
        if order.count > 4 * maxFingerprints { compactOrder() }
        return .emit
    }

    /// Windows that have closed with folded repeats, to report as one summary event each:
    /// `(fingerprint, repeats)`, where `repeats` does not count the emitted first event.
    /// Closes the windows that have ended by `nowNanos` and removes everything it returns.
    package func drainClosed(nowNanos: UInt64) -> [(fingerprint: UInt64, repeats: Int)] {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        var result = closed
        closed.removeAll(keepingCapacity: true)
        while orderHead < order.count {
            let entry = order[orderHead]
            if let window = open[entry.fingerprint], window.serial == entry.serial {
                guard nowNanos >= window.start, nowNanos - window.start >= windowNanos else { break }
                open[entry.fingerprint] = nil
                if window.repeats > 0 { result.append((entry.fingerprint, window.repeats)) }
            }
            orderHead += 1
        }
        compactOrder()
        return result
    }

    /// Summaries lost because more than `maxFingerprints` closed windows waited for
    /// ``drainClosed(nowNanos:)``.
    package var droppedSummaries: Int {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return droppedSummaryCount
    }

    /// The fingerprint of an error event: ``StableHash`` of the parts `name`, `message`
    /// (an absent message hashes like an empty one) and each of `extra`, in that order.
    package static func fingerprint(name: String, message: String?, extra: [String]) -> UInt64 {
        var hasher = StableHash.Hasher()
        hasher.feed(name)
        hasher.separator()
        if let message { hasher.feed(message) }
        for part in extra {
            hasher.separator()
            hasher.feed(part)
        }
        return hasher.finalized
    }

    // MARK: - Under the mutex

    private func evictOldest() {
        while orderHead < order.count {
            let entry = order[orderHead]
            orderHead += 1
            if let window = open[entry.fingerprint], window.serial == entry.serial {
                open[entry.fingerprint] = nil
                if window.repeats > 0 { addClosed(entry.fingerprint, window.repeats) }
                break
            }
        }
        compactOrder()
    }

    private func addClosed(_ fingerprint: UInt64, _ repeats: Int) {
        if closed.count >= maxFingerprints {
            closed.removeFirst()
            droppedSummaryCount += 1
        }
        closed.append((fingerprint, repeats))
    }

    /// Drops consumed entries from the front of `order`, and stale ones when renewals have
    /// piled them up, so it stays within a few times `maxFingerprints`.
    private func compactOrder() {
        if orderHead > 0 && orderHead >= order.count / 2 {
            order.removeFirst(orderHead)
            orderHead = 0
        }
        if order.count > 4 * maxFingerprints {
            order.removeAll { entry in open[entry.fingerprint]?.serial != entry.serial }
        }
    }
}
