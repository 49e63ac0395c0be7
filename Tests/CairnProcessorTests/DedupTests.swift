import CairnProcessor
import Foundation
import Testing

/// Folding repeated errors, with clock readings passed in (no sleeping).
@Suite struct DedupTests {
    static let second: UInt64 = 1_000_000_000

    static func sorted(_ closed: [(fingerprint: UInt64, repeats: Int)]) -> [[UInt64]] {
        closed.map { [$0.fingerprint, UInt64($0.repeats)] }.sorted { $0[0] < $1[0] }
    }

    @Test func foldsInsideTheWindowOnly() {
        let dedup = Deduplicator(options: DedupOptions(window: .seconds(10)))
        let start = 5 * Self.second
        #expect(dedup.offer(fingerprint: 1, nowNanos: start) == .emit)
        #expect(dedup.offer(fingerprint: 1, nowNanos: start + 1) == .folded)
        #expect(dedup.offer(fingerprint: 1, nowNanos: start + 10 * Self.second - 1) == .folded)
        #expect(dedup.offer(fingerprint: 2, nowNanos: start + 2) == .emit)
        #expect(dedup.offer(fingerprint: 1, nowNanos: start + 10 * Self.second) == .emit)
        #expect(dedup.offer(fingerprint: 1, nowNanos: start + 11 * Self.second) == .folded)
    }

    @Test func drainReportsClosedWindowsWithRepeats() {
        let dedup = Deduplicator(options: DedupOptions(window: .seconds(1)))
        #expect(dedup.offer(fingerprint: 7, nowNanos: 0) == .emit)
        for i in 1...4 { #expect(dedup.offer(fingerprint: 7, nowNanos: UInt64(i)) == .folded) }
        #expect(dedup.offer(fingerprint: 8, nowNanos: 10) == .emit)
        #expect(dedup.drainClosed(nowNanos: Self.second - 1).isEmpty)
        // Fingerprint 8 never repeated, so it closes without a summary.
        #expect(Self.sorted(dedup.drainClosed(nowNanos: 2 * Self.second)) == [[7, 4]])
        #expect(dedup.drainClosed(nowNanos: 3 * Self.second).isEmpty)
        #expect(dedup.offer(fingerprint: 7, nowNanos: 3 * Self.second) == .emit)
    }

    @Test func renewedWindowKeepsTheOldSummary() {
        let dedup = Deduplicator(options: DedupOptions(window: .seconds(1)))
        #expect(dedup.offer(fingerprint: 3, nowNanos: 0) == .emit)
        #expect(dedup.offer(fingerprint: 3, nowNanos: 1) == .folded)
        #expect(dedup.offer(fingerprint: 3, nowNanos: 2) == .folded)
        #expect(dedup.offer(fingerprint: 3, nowNanos: Self.second) == .emit)
        #expect(dedup.offer(fingerprint: 3, nowNanos: Self.second + 1) == .folded)
        #expect(Self.sorted(dedup.drainClosed(nowNanos: Self.second + 2)) == [[3, 2]])
        #expect(Self.sorted(dedup.drainClosed(nowNanos: 2 * Self.second)) == [[3, 1]])
    }

    @Test func oldestWindowClosesWhenFull() {
        let dedup = Deduplicator(options: DedupOptions(window: .seconds(60), maxFingerprints: 3))
        for fp in UInt64(1)...3 {
            #expect(dedup.offer(fingerprint: fp, nowNanos: fp) == .emit)
            #expect(dedup.offer(fingerprint: fp, nowNanos: fp + 10) == .folded)
        }
        // A fourth fingerprint closes the window of 1, the first opened.
        #expect(dedup.offer(fingerprint: 4, nowNanos: 20) == .emit)
        #expect(dedup.offer(fingerprint: 2, nowNanos: 21) == .folded)
        #expect(dedup.offer(fingerprint: 3, nowNanos: 22) == .folded)
        #expect(dedup.offer(fingerprint: 1, nowNanos: 23) == .emit)  // and this closes 2
        #expect(dedup.offer(fingerprint: 2, nowNanos: 24) == .emit)  // and this closes 3
        #expect(Self.sorted(dedup.drainClosed(nowNanos: 25)) == [[1, 1], [2, 2], [3, 2]])
        #expect(dedup.droppedSummaries == 0)
    }

    @Test func manyRenewalsStayCorrect() {
        // Renewals leave stale entries behind; the table must keep deciding correctly.
        let dedup = Deduplicator(options: DedupOptions(window: .nanoseconds(10), maxFingerprints: 2))
        var now: UInt64 = 0
        for _ in 0..<1_000 {
            #expect(dedup.offer(fingerprint: 1, nowNanos: now) == .emit)
            #expect(dedup.offer(fingerprint: 1, nowNanos: now + 9) == .folded)
            now += 10
        }
        let summaries = dedup.drainClosed(nowNanos: now + 100)
        #expect(summaries.count + dedup.droppedSummaries == 1_000)
        #expect(summaries.allSatisfy { $0.fingerprint == 1 && $0.repeats == 1 })
    }

    @Test func zeroWindowNeverFolds() {
        let dedup = Deduplicator(options: DedupOptions(window: .zero))
        #expect(dedup.offer(fingerprint: 1, nowNanos: 5) == .emit)
        #expect(dedup.offer(fingerprint: 1, nowNanos: 5) == .emit)
    }

    /// Records what each thread was told; the threads only meet in the deduplicator.
    final class Tally: @unchecked Sendable {
        private let lock = NSLock()
        private var emits: [UInt64: Int] = [:]
        private var folds = 0
        func add(emits batch: [UInt64], folds count: Int) {
            lock.lock()
            for fp in batch { emits[fp, default: 0] += 1 }
            folds += count
            lock.unlock()
        }
        var result: (emits: [UInt64: Int], folds: Int) {
            lock.lock()
            defer { lock.unlock() }
            return (emits, folds)
        }
    }

    @Test func concurrentOffersEmitOncePerWindow() {
        let dedup = Deduplicator(options: DedupOptions(window: .seconds(10), maxFingerprints: 1024))
        let tally = Tally()
        let fingerprints = (0..<200).map { Deduplicator.fingerprint(name: "error", message: "e\($0)", extra: []) }
        let threads = 8, rounds = 50
        let group = DispatchGroup()
        for thread in 0..<threads {
            group.enter()
            Thread.detachNewThread {
                var emitted: [UInt64] = []
                var folded = 0
                for round in 0..<rounds {
                    for i in 0..<fingerprints.count {
                        let fp = fingerprints[(i + thread * 31) % fingerprints.count]
                        switch dedup.offer(fingerprint: fp, nowNanos: UInt64(round)) {
                        case .emit: emitted.append(fp)
                        case .folded: folded += 1
                        }
                    }
                }
                tally.add(emits: emitted, folds: folded)
                group.leave()
            }
        }
        group.wait()
        let (emits, folds) = tally.result
        #expect(emits.count == fingerprints.count)
        #expect(emits.values.allSatisfy { $0 == 1 })
        #expect(folds == threads * rounds * fingerprints.count - fingerprints.count)
        let summaries = dedup.drainClosed(nowNanos: 20 * Self.second)
        #expect(summaries.count == fingerprints.count)
        #expect(summaries.allSatisfy { $0.repeats == threads * rounds - 1 })
    }

    @Test func fingerprintsSeparateTheirParts() {
        let base = Deduplicator.fingerprint(name: "db_error", message: "timeout", extra: ["orders.swift:42"])
        #expect(base == Deduplicator.fingerprint(name: "db_error", message: "timeout", extra: ["orders.swift:42"]))
        #expect(base == StableHash.hash64("db_error", "timeout", "orders.swift:42"))
        #expect(base != Deduplicator.fingerprint(name: "db_error", message: "timeout", extra: ["orders.swift:43"]))
        #expect(base != Deduplicator.fingerprint(name: "db_error", message: "timeout", extra: []))
        #expect(Deduplicator.fingerprint(name: "e", message: nil, extra: []) == StableHash.hash64("e", ""))
        #expect(Deduplicator.fingerprint(name: "e", message: nil, extra: ["x"])
            != Deduplicator.fingerprint(name: "e", message: "x", extra: []))
    }
}
