import CairnBase
import CairnProcessor
import CairnStore
import FoundationEssentials
import Glibc

/// Drops counted by reason: in memory for ``Cairn/dropCounts`` and `sdk_health` (this
/// process), and in the ring's drop table, which survives a `kill -9` until a request
/// has reported them (the `Cairn-Dropped` header). What the sanitising and privacy
/// rules changed is counted apart, in memory only: a changed event was not dropped.
final class DropCounters: Sendable {
    /// In a plain struct, so that creating the counters at start needs no runtime
    /// lookup of `String: Hashable` (as `Locked<[String: Int]>` would).
    private struct Counts {
        /// Per reason: this process's count, and its drop table slot (looked up once).
        var byReason: [String: (count: Int, slot: Int32?)] = [:]
        /// Per rule: what the rules changed in this process.
        var changes: [String: Int] = [:]
    }

    private let counts = Locked(Counts())
    private let ring: Ring?

    /// Counters that also count into `ring`'s drop table (nil: in memory only).
    init(ring: Ring?) { self.ring = ring }

    /// Counts `n` drops for `reason` (kept by its name, so that making the counters
    /// needs no generic type of its own at start).
    func add(_ reason: DropReason, _ n: Int) {
        guard n > 0 else { return }
        let reason = reason.name
        let slot = counts.withLock { c -> Int32? in
            if let entry = c.byReason[reason] {
                c.byReason[reason] = (entry.count + n, entry.slot)
                return entry.slot
            }
            let slot = ring.map { $0.dropSlot(reason) ?? Ring.otherDropSlot }
            c.byReason[reason] = (n, slot)
            return slot
        }
        if let slot { ring?.countDrops(slot: slot, UInt64(n)) }
    }

    /// Counts what the rules changed (not drops: they stay out of the drop table).
    func addChanges(_ c: RuleCounts) {
        let changed = [("non_finite", c.droppedNonFinite), ("string_truncated", c.truncatedStrings),
                       ("key_truncated", c.truncatedKeys), ("key_dropped", c.droppedKeys),
                       ("too_deep", c.droppedDepth), ("array_truncated", c.truncatedArrays),
                       ("text_repaired", c.repairedUTF8), ("privacy_redacted", c.redactedKeys),
                       ("privacy_masked", c.maskedValues), ("cycle_cut", c.cutCycles)]
        counts.withLock { counts in
            for (rule, n) in changed where n > 0 { counts.changes[rule, default: 0] += n }
        }
    }

    /// Counts one change by the rule `rule` (what the SDK did to something the service
    /// gave it, e.g. `trace_header_invalid`).
    func addChange(_ rule: String) {
        counts.withLock { $0.changes[rule, default: 0] += 1 }
    }

    /// This process's drops counted here, by reason name.
    func snapshot() -> [String: Int] { counts.withLock { $0.byReason.mapValues(\.count) } }

    /// This process's changes, by rule.
    func changes() -> [String: Int] { counts.withLock { $0.changes } }
}
