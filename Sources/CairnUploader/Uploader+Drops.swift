// Drop reporting: the drop counts a request carries (``DropReport``), the sessions they
// belong to, and counting a drop in the stats and the ring's table.
import CairnBase
import CairnStore
import CCairnCore
import FoundationEssentials
import Glibc

extension Uploader {
    /// This session in the chain of sessions whose drops the table holds, read from the
    /// store and written back to it (best effort: without it, the drops earlier
    /// processes left unreported are reported with this session).
    func noteDropSession() -> DropSessions? {
        guard let session = options.sessionID else { return nil }
        let drops = ring.drops()
        guard let store else { return DropSessions(session: session, drops: drops) }
        let sessions = DropSessions(saved: try? store.metadata(DropSessions.metadataKey), session: session, drops: drops)
        try? store.setMetadata(DropSessions.metadataKey, sessions.text)
        return sessions
    }

    /// The drops a request carried are reported: it was acknowledged, refused for
    /// good, or stored (a stored request keeps its header).
    func markReported(_ reported: [DropReport]) {
        for r in reported { try? ring.markReported(slot: r.slot, upTo: r.counted) }
    }

    /// Counts `n` drops: in this uploader's stats, and in the ring's drop table, which
    /// outlives the process until a request has reported them.
    func count(drop reason: DropReason, _ n: Int, inStats: Bool = true) {
        guard n > 0 else { return }
        if inStats { state.withLock { $0.stats.dropped[reason, default: 0] += n } }
        Self.countInTable(ring, reason, n)
    }

    static func countInTable(_ ring: Ring, _ reason: DropReason, _ n: Int) {
        guard n > 0 else { return }
        ring.countDrops(slot: ring.dropSlot(reason.name) ?? Ring.otherDropSlot, UInt64(n))
    }
}
