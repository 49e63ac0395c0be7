// Flush, shutdown, and what was dropped or changed.
import CairnBase
import CairnCrash
import CairnProcessor
import CairnStore
import CairnUploader
import FoundationEssentials
import Dispatch
import Glibc
import Synchronization

extension Cairn {
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
        guard waitUntilReady(until: deadline), let uploader else { return false }
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
            runPeriodic(final: true)
            emitHealth(final: true)
        } else {
            state.withLock { $0.startAbandoned = true }
        }
        let flushed = flush(until: deadline)
        let uploader = self.uploader
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
        dropTotals(ring: ring?.stats(), upload: uploader?.stats)
    }

    /// What the privacy and sanitising rules changed since start in this process, by
    /// rule (`privacy_masked`, `privacy_redacted`, `string_truncated`, `key_dropped`, ...):
    /// the events were kept, changed; and `trace_header_invalid`, the trace headers that
    /// could not be used (a new trace started instead). Also in `sdk_health`'s
    /// `changed`; not reported in `Cairn-Dropped`.
    public var changeCounts: [String: Int] { drops.changes() }

    /// The drops of ``dropCounts``, by reason name, from the ring's and the uploader's
    /// counts given.
    func dropTotals(ring r: Ring.Stats?, upload u: UploaderStats?) -> [String: Int] {
        var all = drops.snapshot()
        if let r {
            if r.droppedFull > 0 { all["ring_full", default: 0] += Int(clamping: r.droppedFull) }
            if r.droppedTooBig > 0 { all["ring_too_big", default: 0] += Int(clamping: r.droppedTooBig) }
        }
        for (reason, n) in u?.dropped ?? [:] { all[reason.name, default: 0] += n }
        return all
    }
}
