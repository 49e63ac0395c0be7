import CairnTestSupport
import CairnStore
import CairnUploader
import CLMDB
import Foundation
import Testing

/// The LMDB snapshot store: exact bytes across reopen, ordering, caps and eviction
/// counts, map growth, set-aside of unreadable environments, a full disk, and readers
/// that are not ours (`mdb_dump`, Python's `lmdb`).
@Suite struct SnapshotStoreTests {

    static func request(_ n: Int, bodySize: Int = 1000) -> UploadRequest {
        var body = [UInt8](repeating: 0, count: bodySize)
        for i in body.indices { body[i] = UInt8(truncatingIfNeeded: i &* 31 &+ n) }
        return UploadRequest(url: "https://collector.example/v1/batch?n=\(n)",
                             headers: [HTTPHeader("Content-Encoding", "zstd"),
                                       HTTPHeader("Idempotency-Key", "key-\(n)"),
                                       HTTPHeader("User-Agent", "cairn-swift/0.1.0")],
                             body: body, idempotencyKey: "key-\(n)")
    }

    static func run(_ argv: [String]) throws -> (status: Int32, out: String, err: String) {
        try runCapturing("/usr/bin/env", argv)
    }

    @Test func exactBytesSurviveReopenOldestFirst() throws {
        let dir = Scratch()
        var ids: [SnapshotID] = []
        do {
            let store = try SnapshotStore(directory: dir.store, options: .requests)
            for n in 0..<20 { ids.append(try store.put(Self.request(n), priority: .sampled, now: 1_000 + UInt64(n))) }
            #expect(store.stats.count == 20)
        }
        let store = try SnapshotStore(directory: dir.store, options: .requests)
        #expect(store.stats.count == 20 && store.stats.bytes > 20 * 1000)
        let oldest = try store.oldest(limit: 5)
        #expect(oldest.map(\.id) == Array(ids.prefix(5)))
        #expect(oldest.map(\.request) == (0..<5).map { Self.request($0) })
        #expect(oldest.allSatisfy { $0.attempts == 0 && $0.priority == .sampled })
        try store.delete(ids[0])
        try store.delete(ids[0]) // not there any more: not an error
        #expect(try store.get(ids[0]) == nil)
        #expect(try store.oldest(limit: 1).first?.id == ids[1])
        #expect(store.stats.count == 19)
    }

    /// Records put together are stored together, or not at all (over the cap together,
    /// though each alone would fit: none is stored, the failure counted once).
    @Test func recordsPutTogetherAreAllOrNone() throws {
        let dir = Scratch()
        let store = try SnapshotStore(directory: dir.store, options: .init(maxBytes: 64 << 10))
        let ids = try store.put(all: (0..<3).map { Self.request($0).record }, priority: .critical, now: 2_000)
        #expect(ids.count == 3 && Set(ids).count == 3 && ids == ids.sorted())
        #expect(try store.oldest(limit: 10).map(\.id) == ids)
        #expect(try store.oldest(limit: 10).map(\.request) == (0..<3).map { Self.request($0) })
        #expect(store.stats.count == 3)

        let before = store.stats
        let large = (0..<3).map { Self.request(10 + $0, bodySize: 30 << 10).record }
        #expect(throws: StoreError.self) { try store.put(all: large, priority: .critical) }
        #expect(store.stats.count == before.count && store.stats.bytes == before.bytes)
        #expect(try store.oldest(limit: 10).map(\.id) == ids, "none of them stored, nothing evicted")
        #expect(store.stats.failedPuts == before.failedPuts + 1)
    }

    @Test func attemptsAreRecordedWithoutTouchingTheRequest() throws {
        let dir = Scratch()
        let store = try SnapshotStore(directory: dir.store, options: .requests)
        let id = try store.put(Self.request(7), priority: .important, now: 5_000)
        try store.recordAttempt(id, nextAttemptAt: 9_000)
        try store.recordAttempt(id, nextAttemptAt: 12_000)
        let s = try #require(try store.get(id))
        #expect(s.attempts == 2 && s.nextAttemptAt == 12_000 && s.createdAt == 5_000)
        #expect(s.request == Self.request(7))
        #expect(try store.oldest(limit: 10, readyAt: 11_999).isEmpty)
        #expect(try store.oldest(limit: 10, readyAt: 12_000).map(\.id) == [id])
    }

    @Test func sizeCapEvictsLowestPriorityOldestFirstAndCounts() throws {
        let dir = Scratch()
        // Room for about 10 snapshots of ~1.2 KB.
        let store = try SnapshotStore(directory: dir.store, options: .init(maxBytes: 12_500, recordCheck: UploadRequest.recordCheck))
        var critical: [SnapshotID] = [], debug: [SnapshotID] = [], sampled: [SnapshotID] = []
        for n in 0..<3 { critical.append(try store.put(Self.request(n), priority: .critical, now: UInt64(n))) }
        for n in 3..<7 { debug.append(try store.put(Self.request(n), priority: .debug, now: UInt64(n))) }
        for n in 7..<10 { sampled.append(try store.put(Self.request(n), priority: .sampled, now: UInt64(n))) }
        #expect(store.stats.count == 10 && store.stats.evictedSize.isEmpty)
        // Three more sampled: the three oldest debug snapshots go, in that order.
        for n in 10..<13 { sampled.append(try store.put(Self.request(n), priority: .sampled, now: UInt64(n))) }
        let left = Set(try store.oldest(limit: 100).map(\.id))
        #expect(store.stats.evictedSize == [.debug: 3])
        #expect(left == Set(critical + [debug[3]] + sampled))
        #expect(store.stats.bytes <= 12_500)
        // A debug snapshot may push out an older debug one...
        let newest = try store.put(Self.request(13), priority: .debug, now: 13)
        #expect(store.stats.evictedSize == [.debug: 4])
        // ...but never anything more important: with no debug snapshot left to evict,
        // it is refused and counted.
        try store.delete(newest)
        try store.put(Self.request(14, bodySize: 2000), priority: .sampled, now: 14)
        #expect(throws: StoreError(StoreError.overCap, function: "SnapshotStore.put")) {
            try store.put(Self.request(15), priority: .debug, now: 15)
        }
        #expect(store.stats.failedPuts == 1)
        #expect(Set(try store.oldest(limit: 100).map(\.id)).isSuperset(of: Set(critical)))
        // A snapshot larger than the whole cap is refused with its own error.
        #expect(throws: StoreError(StoreError.overCap, function: "SnapshotStore.put")) {
            try store.put(Self.request(99, bodySize: 20_000), priority: .critical)
        }
    }

    @Test func ageCapEvictsAndCounts() throws {
        let dir = Scratch()
        let store = try SnapshotStore(directory: dir.store, options: .init(maxAge: .seconds(60), recordCheck: UploadRequest.recordCheck))
        let now: UInt64 = 10_000_000
        for n in 0..<5 { try store.put(Self.request(n), priority: .sampled, now: now - 120_000 + UInt64(n)) }
        let young = try store.put(Self.request(5), priority: .sampled, now: now - 30_000)
        #expect(try store.evictExpired(now: now) == 5)
        #expect(store.stats.evictedAge == 5 && store.stats.count == 1)
        #expect(try store.oldest(limit: 10).map(\.id) == [young])
    }

    @Test func fullMapGrowsInsteadOfFailing() throws {
        let dir = Scratch()
        let store = try SnapshotStore(directory: dir.store, options: .init(maxBytes: 8 << 20, recordCheck: UploadRequest.recordCheck))
        let start = store.stats.mapSize
        // 6 MB in 100 KB snapshots: more than the initial map can hold with LMDB's overhead.
        for n in 0..<60 { try store.put(Self.request(n, bodySize: 100_000), priority: .sampled) }
        #expect(store.stats.count == 60)
        #expect(store.stats.mapSize >= start)
        #expect(try store.oldest(limit: 100).count == 60)
    }

    @Test func metadataRoundTrips() throws {
        let dir = Scratch()
        do {
            let store = try SnapshotStore(directory: dir.store, options: .requests)
            #expect(try store.metadata("install.time") == nil)
            try store.setMetadata("install.time", Array("2026-12-02T15:48:52.000Z".utf8), durable: true)
            try store.setMetadata("run.state", [1])
        }
        let store = try SnapshotStore(directory: dir.store, options: .requests)
        #expect(try store.metadata("install.time") == Array("2026-12-02T15:48:52.000Z".utf8))
        #expect(try store.metadata("run.state") == [1])
    }

    @Test func unreadableEnvironmentIsSetAsideAndTheStoreKeepsWorking() throws {
        let dir = Scratch()
        do {
            let store = try SnapshotStore(directory: dir.store, options: .requests)
            try store.put(Self.request(1), priority: .sampled)
        }
        // Garbage over the data file.
        let data = dir.store + "/data.mdb"
        let garbage = Data((0..<65_536).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 3) })
        #expect(FileManager.default.createFile(atPath: data, contents: garbage))
        let store = try SnapshotStore(directory: dir.store, options: .requests)
        #expect(store.stats.setAside && store.stats.count == 0)
        try store.put(Self.request(2), priority: .sampled)
        #expect(try store.oldest(limit: 10).map(\.request) == [Self.request(2)])
        let aside = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.hasPrefix("store.corrupt-") }
        #expect(aside.count == 1)
        if let a = aside.first {
            #expect(FileManager.default.contents(atPath: dir.path + "/" + a + "/data.mdb") == garbage, "kept, not deleted")
        }
    }

    /// Writes fail on a full disk (a 1 MiB tmpfs mounted by the test): the put is
    /// refused and counted, nothing stored is lost, and storing resumes once space
    /// returns.
    @Test func fullDiskRefusesPutsAndRecovers() throws {
        let dir = Scratch()
        let mount = dir.path + "/small"
        try FileManager.default.createDirectory(atPath: mount, withIntermediateDirectories: true)
        let mounted = try Self.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mount])
        try #require(mounted.status == 0, "mounting a tmpfs needs root: \(mounted.err)")
        // Lazily: the store still has its files open when this runs.
        defer { _ = try? Self.run(["umount", "-l", mount]) }
        let store = try SnapshotStore(directory: mount + "/store", options: .init(maxBytes: 8 << 20, recordCheck: UploadRequest.recordCheck))
        var stored = 0, refused = 0
        for n in 0..<40 {
            do {
                try store.put(Self.request(n, bodySize: 60_000), priority: .sampled)
                stored += 1
            } catch {
                refused += 1
            }
        }
        #expect(stored > 0 && refused > 0, "the 1 MiB disk must fill: stored \(stored), refused \(refused)")
        #expect(store.stats.failedPuts == refused)
        let kept = try store.oldest(limit: 100)
        #expect(kept.count == stored)
        // Space returns: delete what was stored, and puts succeed again.
        for s in kept { try store.delete(s.id) }
        try store.put(Self.request(99, bodySize: 60_000), priority: .sampled)
        #expect(try store.oldest(limit: 100).map(\.request) == [Self.request(99, bodySize: 60_000)])
    }

    @Test func mdbDumpAndPythonLmdbReadTheStore() throws {
        let dir = Scratch()
        var requests: [UploadRequest] = []
        do {
            let store = try SnapshotStore(directory: dir.store, options: .requests)
            for n in 0..<5 {
                requests.append(Self.request(n, bodySize: 500 + n))
                try store.put(requests[n], priority: n == 0 ? .critical : .sampled, now: 1_700_000_000_000 + UInt64(n))
            }
            try store.setMetadata("install.zone", Array("Europe/Paris".utf8))
            try store.sync()
        }
        let dump = try Self.run(["mdb_dump", "-s", "snapshots", dir.store])
        #expect(dump.status == 0, "mdb_dump: \(dump.err)")
        #expect(dump.out.contains("HEADER=END") && dump.out.contains("DATA=END"))

        let py = try Self.run(["python3", repoRoot.path + "/Tests/Tools/read_store.py", dir.store])
        #expect(py.status == 0, "read_store.py: \(py.err)")
        let rows = py.out.split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
        #expect(rows.count == 5)
        for (n, row) in rows.enumerated() {
            #expect(row["url"] as? String == requests[n].url)
            #expect(row["idempotency_key"] as? String == requests[n].idempotencyKey)
            #expect(row["body_length"] as? Int == requests[n].body.count)
            #expect(row["priority"] as? Int == (n == 0 ? 0 : 2))
            #expect(row["created_at"] as? Int == 1_700_000_000_000 + n)
        }
        // The body bytes, independently hashed.
        let first = dir.path + "/body0"
        #expect(FileManager.default.createFile(atPath: first, contents: Data(requests[0].body)))
        let sha = try Self.run(["sha256sum", first])
        #expect(sha.out.hasPrefix(rows.first?["body_sha256"] as? String ?? "missing"))
        let meta = try Self.run(["python3", repoRoot.path + "/Tests/Tools/read_store.py", dir.store, "--meta"])
        #expect(meta.out.contains(Array("Europe/Paris".utf8).map { String(format: "%02x", $0) }.joined()))
    }
}
