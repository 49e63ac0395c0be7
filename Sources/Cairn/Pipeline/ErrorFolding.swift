import CairnBase
import CairnProcessor
import Dispatch

/// Folds repeats of an error event (same name and message) within a window into one
/// summary: the first is kept and written, the repeats are counted as
/// ``DropReason/deduplicated`` drops, and when the window closes with repeats, the first event is written once more
/// with `repeat_count` and `deduplicated: true` (docs/FORMATS.md, "Sampling, filtering
/// and deduplication").
final class ErrorFolding: Sendable {
    private let dedup: Deduplicator
    /// The first event of each open window, to build its summary from.
    private let first = Locked(FirstEvents())
    /// Entries kept at most: past it, the oldest (whose windows are long closed) go.
    private let limit: Int

    /// A dictionary in a plain struct: `Locked<[UInt64: Event]>` would make the runtime
    /// look up `UInt64: Hashable` while ``Cairn/start(_:)`` runs; a non-generic wrapper
    /// does not.
    private struct FirstEvents {
        var byFingerprint: [UInt64: Event] = [:]
    }

    init(options: DedupOptions) {
        dedup = Deduplicator(options: options)
        limit = max(1, options.maxFingerprints) * 2
    }

    /// For an error event: nil when it repeats one of an open window (fold it), else
    /// its fingerprint, for ``remember(_:_:)`` once it is written. For other events:
    /// `.some(nil)`, kept as they are.
    func offer(_ event: Event) -> UInt64?? {
        guard event.isError else { return .some(nil) }
        let message: String? = if case .string(let m)? = event.properties["message"] { m } else { nil }
        let print = Deduplicator.fingerprint(name: event.name, message: message, extra: [])
        if dedup.offer(fingerprint: print, nowNanos: DispatchTime.now().uptimeNanoseconds) == .folded { return nil }
        return .some(print)
    }

    /// Keeps the first event of a window, as written.
    func remember(_ event: Event, _ fingerprint: UInt64) {
        first.withLock { first in
            first.byFingerprint[fingerprint] = event
            let count = first.byFingerprint.count
            guard count > limit else { return }
            let oldest = first.byFingerprint.sorted { $0.value.timeMillis < $1.value.timeMillis }.prefix(count - limit / 2)
            for (key, _) in oldest { first.byFingerprint[key] = nil }
        }
    }

    /// The summaries of the windows closed by now that had repeats: each the first
    /// event again, with `repeat_count` (the repeats folded into it), `deduplicated:
    /// true`, the time now and an id of its own.
    func closedSummaries() -> [Event] {
        var out: [Event] = []
        for closed in dedup.drainClosed(nowNanos: DispatchTime.now().uptimeNanoseconds) {
            guard var summary = first.withLock({ $0.byFingerprint.removeValue(forKey: closed.fingerprint) }) else { continue }
            summary.properties["repeat_count"] = .int(Int64(closed.repeats))
            summary.properties["deduplicated"] = .bool(true)
            summary.timeMillis = EventClock.nowMillis()
            summary.id = nil
            out.append(summary)
        }
        return out
    }
}
