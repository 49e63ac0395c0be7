import CairnBase
import CairnProcessor
import CairnStore

/// The first stage: whether an event goes on. The processor's rules (a name and a
/// `distinct_id`, the filters, sampling), then shedding under load by tier, then the
/// folding of repeated errors. A refused event is counted as a drop, by reason.
struct Admission: Sendable {
    let processor: Processor
    let ring: Ring
    let folding: ErrorFolding
    let drops: DropCounters

    /// What is admitted: `.keep` with the fingerprint of an error event (to remember
    /// once written), or `.dropped` (counted already).
    enum Verdict {
        case keep(fingerprint: UInt64?)
        case dropped
    }

    func admit(_ event: inout Event) -> Verdict {
        if let reason = processor.admit(&event) {
            drops.add(reason, 1)
            return .dropped
        }
        if let threshold = Self.shedThreshold(event.tier) {
            let stats = ring.stats()
            if Double(stats.used) > Double(stats.capacity) * threshold {
                drops.add(.overload(tier: event.tier.rawValue), 1)
                return .dropped
            }
        }
        guard let fingerprint = folding.offer(event) else {
            drops.add(.deduplicated, 1)
            return .dropped
        }
        return .keep(fingerprint: fingerprint)
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
}
