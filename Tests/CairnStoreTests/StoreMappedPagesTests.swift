import CairnBase
import CairnStore
import CairnTestSupport
import Foundation
import Testing

/// The store's data file is read through LMDB's map of it; pages a read touches would
/// stay in the process's RSS. Opening a store counts its snapshots by tier, which reads
/// each snapshot's priority byte (a page per snapshot, and the kernel maps 64 KiB around
/// each): measured in a child process of its own (`cairn-store-child peak`), so that
/// the peak RSS (VmHWM) is the open's alone.
@Suite struct StoreMappedPagesTests {
    @Test func openingAFullStoreDoesNotMapItWhole() throws {
        let scratch = Scratch()
        do {
            let store = try SnapshotStore(directory: scratch.store, options: .init(maxBytes: 64 << 20))
            var rng = SplitMix(seed: 7)
            let value = (0..<(64 << 10)).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            for i in 0..<240 {
                try store.put(value, priority: Tier.allCases[i % Tier.allCases.count])
            }
            #expect(store.stats.count == 240)
        }
        let size = try #require(try FileManager.default.attributesOfItem(atPath: scratch.store + "/data.mdb")[.size] as? Int)
        #expect(size >= 15 << 20, "the store holds 15 MiB")
        let r = try runCapturing(productsDirectory + "/cairn-store-child", ["peak", scratch.store])
        #expect(r.status == 0, "\(r.err)")
        func figure(_ name: String) -> Int? {
            r.out.split(separator: "\n").first { $0.hasPrefix(name + " ") }?.split(separator: " ").last.flatMap { Int($0) }
        }
        // Released every 16 snapshots (1 MiB of 64 KiB windows at most), and at the end;
        // an empty store's open raises the peak by about 2 MiB (the child's first use of
        // the code and the libraries), the whole file mapped by 15 MiB more.
        let peak = try #require(figure("PEAK"), "\(r.out)")
        #expect(peak < 5 << 10, "opening a 15 MiB store raised the peak RSS by \(peak) KiB")
        let mapped = try #require(figure("MAPPED"), "\(r.out)")
        #expect(mapped < 1 << 10, "\(mapped) KiB of data.mdb stay resident after the open")
    }
}
