import CairnBase
import CairnStore
import CairnTestSupport
import Foundation
import Testing

/// The size cap's evictions against a model of the rule (the least important tier first,
/// oldest first within it, never a snapshot more important than the one coming in):
/// random puts of every tier and size, deletes and a reopen, at a small cap. The store
/// reads only the keys an eviction needs (it keeps its bytes by tier); the model looks at
/// everything, so a wrong early stop shows as a different set of snapshots.
@Suite struct StoreEvictionModelTests {
    struct Entry { let id: SnapshotID; let tier: Tier; let size: Int }

    @Test(arguments: [1, 2, 3])
    func evictionsMatchTheRule(seed: UInt64) throws {
        let dir = Scratch()
        let cap = 40_000
        var store: SnapshotStore? = try SnapshotStore(directory: dir.store, options: .init(maxBytes: cap))
        var model: [Entry] = []  // oldest first
        var rng = SplitMix(seed: seed)
        var evictions = 0, refusals = 0, tiersEvicted = Set<Tier>()
        for step in 0..<600 {
            guard let s = store else { break }
            switch Int.random(in: 0..<20, using: &rng) {
            case 0:
                // Reopen: the bytes by tier are counted again from the file.
                store = nil
                store = try SnapshotStore(directory: dir.store, options: .init(maxBytes: cap))
            case 1...3 where !model.isEmpty:
                let victim = model.remove(at: Int.random(in: 0..<model.count, using: &rng))
                try s.delete(victim.id)
            default:
                let tier = Tier.allCases.randomElement(using: &rng) ?? .debug
                let record = [UInt8](repeating: UInt8(step & 0xff), count: Int.random(in: 100...6_000, using: &rng))
                let size = 16 + 24 + record.count
                // The model's eviction: what the rule takes, or a refusal.
                var excess = model.reduce(0) { $0 + $1.size } + size - cap
                var victims = Set<SnapshotID>()
                let order = model.enumerated().sorted {
                    $0.element.tier != $1.element.tier ? $0.element.tier > $1.element.tier : $0.offset < $1.offset
                }
                for (_, e) in order where excess > 0 && e.tier >= tier {
                    victims.insert(e.id)
                    excess -= e.size
                }
                if excess > 0 {
                    refusals += 1
                    #expect(throws: StoreError.self) { try s.put(record, priority: tier, now: UInt64(step)) }
                } else {
                    let id = try s.put(record, priority: tier, now: UInt64(step))
                    evictions += victims.count
                    for e in model where victims.contains(e.id) { tiersEvicted.insert(e.tier) }
                    model.removeAll { victims.contains($0.id) }
                    model.append(Entry(id: id, tier: tier, size: size))
                }
            }
            let stored = try #require(store).oldest(limit: 1000).map(\.id)
            #expect(stored == model.map(\.id), "step \(step)")
            #expect(try #require(store).stats.bytes == model.reduce(0) { $0 + $1.size }, "step \(step)")
            if stored != model.map(\.id) { break }
        }
        // The cases the rule has: evictions from every tier, and refusals.
        #expect(evictions > 50 && refusals > 5 && tiersEvicted.count == 4,
                "\(evictions) evictions from \(tiersEvicted), \(refusals) refusals")
    }
}
