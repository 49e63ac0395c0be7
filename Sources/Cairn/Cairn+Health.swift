// `sdk_health`: what the SDK did, counted and tracked as an event.
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
    func healthDueIn() -> Duration? {
        guard let interval = options.healthInterval else { return nil }
        let since = DispatchTime.now().uptimeNanoseconds &- health.withLock { $0.baseline.at }
        return interval - .nanoseconds(Int64(clamping: since))
    }

    /// The background loop's next wake-up: within a second (deduplication windows), or
    /// when the next `sdk_health` or periodic work is due.
    func nextWake() -> Duration {
        max(.milliseconds(1), min(.seconds(1), healthDueIn() ?? .seconds(1), periodicDueIn() ?? .seconds(1)))
    }

    /// Tracks `sdk_health` (docs/FORMATS.md, "SDK health"): what the SDK did since the
    /// previous one, as counts, and how full its ring is.
    func emitHealth(final: Bool) {
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
        let uploader = self.uploader
        let startNanos = state.withLock { $0.startNanos }
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
            p["thread_stacks"] = .string(CrashCapture.threadStacks)
            if r.origin == .repaired { p["ring_repaired"] = .array(Self.repairNames(r.repairs).map { .string($0) }) }
            if let damage = state.withLock({ $0.store })?.stats.damage {
                p["store_damage"] = .string(damage.found)
                p["store_requests_lost"] = damage.lost.map { .int(Int64($0)) } ?? .null
                p["store_requests_salvaged"] = .int(Int64(damage.salvaged))
            }
        }
        // What an OTLP collector said of its last partial success, since the last one.
        if u.otlpMessages > ub.otlpMessages { p["otlp_message"] = .string(u.lastOTLPMessage) }
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
}
