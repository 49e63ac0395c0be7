import CairnTestSupport
import CairnStore
import CairnUploader
import Foundation
import Testing

/// The whole data directory (ring and store) on a small filesystem that the test
/// mounts (a 3 MiB tmpfs, as root; CI runs as root). The collector is down, so batches
/// go to the store until the disk is full.
@Suite struct DiskFullTests {
    @Test func trackingGoesOnDropsAreCountedAndStoringResumes() throws {
        let scratch = try TemporaryDirectory("cairn-full")
        let base = scratch.path
        try #require(runQuietly(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", base]) == 0,
                     "mounting a tmpfs needs root")
        defer { _ = runQuietly(["umount", "-l", base]) }

        let collector = try CollectorProcess()
        try collector.setDefault(["status": 500])
        let ring = try Ring(path: base + "/events.ring")        // 1 MiB, allocated up front
        let store = try SnapshotStore(directory: base + "/store", options: .init(maxBytes: 32 << 20))
        var options = UploaderOptions(url: collector.baseURL + "/v1/batch", maxBatchEvents: 300,
                                      maxBatchAge: .milliseconds(20), attempts: 1,
                                      backoff: Backoff(base: .milliseconds(20), cap: .milliseconds(100)),
                                      breaker: CircuitBreaker(threshold: 1_000_000), requestTimeout: .seconds(5))
        // Once the disk is full, batch marks may fail too: batches then wait this long
        // before they go out (and, failing, are offered to the full store).
        options.markPatience = .milliseconds(500)
        let uploader = Uploader(ring: ring, store: store, transport: HTTPTransport(), options: options)
        uploader.start()

        // Incompressible payloads, so the store fills the 3 MiB disk quickly.
        var rng = SystemRandomNumberGenerator()
        func event(_ i: Int) -> [UInt8] {
            let noise = (0..<600).map { _ in "0123456789abcdef".randomElement(using: &rng) ?? "0" }
            return Array(#"{"event_id":"f-\#(i)","noise":"\#(String(noise))"}"#.utf8)
        }
        var accepted: [String] = [], refused = 0
        // (Under ThreadSanitizer on a busy machine, filling it can take 20 s or more.)
        let deadline = Date().addingTimeInterval(60)
        var i = 0
        while uploader.stats.storeFailures == 0 && Date() < deadline {
            do {
                try ring.append(event(i))
                accepted.append("f-\(i)")
            } catch {
                refused += 1
                usleep(2_000)
            }
            i += 1
        }
        #expect(uploader.stats.storeFailures > 0, "the disk must fill up: \(uploader.stats), store \(store.stats), ring \(ring.stats()), appended \(accepted.count)")
        // Tracking goes on: appends are accepted or refused at once and counted, never a crash.
        for j in 0..<2000 {
            if (try? ring.append(event(i + j))) != nil { accepted.append("f-\(i + j)") } else { refused += 1 }
        }
        #expect(UInt64(refused) == ring.stats().droppedFull)

        // Space returns (the collector comes back: delivered snapshots free the disk),
        // and everything accepted arrives.
        try collector.setDefault(["status": 200])
        let drained = Date().addingTimeInterval(60)
        while (store.stats.count > 0 || ring.stats().used > 0) && Date() < drained {
            uploader.flush(timeout: .seconds(1))
        }
        // What the collector answered, by status (for a failure message).
        func answers() -> [Int: Int] {
            Dictionary(((try? collector.requests()) ?? []).map { ($0.response.status ?? 0, 1) }, uniquingKeysWith: +)
        }
        let drainedIn = 60 - drained.timeIntervalSinceNow
        uploader.shutdown(timeout: .seconds(5))
        #expect(store.stats.count == 0 && ring.stats().used == 0,
                "not drained after \(drainedIn) s: \(uploader.stats), store \(store.stats), ring \(ring.stats()), collector answered \(answers())")
        let delivered = Set(try collector.events().compactMap { e -> String? in
            guard let o = try? JSONSerialization.jsonObject(with: Data(e.record.utf8)) as? [String: Any] else { return nil }
            return o["event_id"] as? String
        })
        // A delivered request is not sent again, not even when the full disk keeps it
        // from being deleted (only an answer the uploader did not see in time may be).
        let acknowledged = try collector.requests().filter(\.acknowledged).compactMap(\.idempotency_key)
        #expect(acknowledged.count - Set(acknowledged).count <= 2,
                "\(acknowledged.count - Set(acknowledged).count) delivered requests sent again")
        let lost = Set(accepted).subtracting(delivered)
        #expect(lost.isEmpty, "\(lost.count) accepted events lost")
        #expect(uploader.stats.storedBatches > 0, "storing resumed after the failures")
    }
}
