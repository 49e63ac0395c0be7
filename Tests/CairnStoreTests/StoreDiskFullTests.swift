import CairnBase
import CairnStore
import CairnTestSupport
import Foundation
import Testing

/// The snapshot store on a filesystem that fills up: a 1 MiB tmpfs that the test mounts
/// (as root; CI runs as root). LMDB copies the pages it changes, so a delete needs free
/// pages too: were puts to take the last of them, delivered requests could never be
/// deleted again and would be replayed forever.
@Suite struct StoreDiskFullTests {
    /// Mounts a tmpfs of `size` on a fresh directory and runs `body` with its path.
    private func onSmallDisk(_ size: String, _ body: (String) throws -> Void) throws {
        let scratch = try TemporaryDirectory("cairn-store-full")
        try #require(runQuietly(["mount", "-t", "tmpfs", "-o", "size=\(size)", "tmpfs", scratch.path]) == 0,
                     "mounting a tmpfs needs root")
        defer { _ = runQuietly(["umount", "-l", scratch.path]) }
        try body(scratch.path)
    }

    private func noise(_ count: Int) -> [UInt8] {
        var rng = SystemRandomNumberGenerator()
        return (0..<count).map { _ in UInt8.random(in: 0...255, using: &rng) }
    }

    /// Rounds of "store until refused, then delete the two oldest", with sizes from a
    /// few bytes to several pages: no delete ever fails, puts go on after the disk first
    /// filled, and when the disk has room again the limit is lifted.
    @Test func deletesAlwaysFindRoomAndPutsResume() throws {
        try onSmallDisk("1m") { base in
            let store = try SnapshotStore(directory: base + "/store")
            var reserve = stat()
            #expect(stat(base + "/store/reserve", &reserve) == 0 && reserve.st_size == 256 << 10
                    && reserve.st_mode & 0o777 == 0o600, "the reserve is allocated, private")
            var ids: [SnapshotID] = []
            var deleteFailures: [String] = []
            var putsAfterFull = 0
            for round in 0..<200 {
                let size = [40_000, 9_000, 2_000, 500, 100, 30_000][round % 6]
                while true {
                    guard let id = try? store.put(noise(size), priority: .important) else { break }
                    ids.append(id)
                    if store.stats.diskFullCap != nil { putsAfterFull += 1 }
                }
                for _ in 0..<2 where !ids.isEmpty {
                    do {
                        try store.delete(ids[0])
                        ids.removeFirst()
                    } catch {
                        deleteFailures.append("round \(round): \(error)")
                    }
                }
            }
            #expect(deleteFailures.isEmpty, "\(deleteFailures.count) deletes failed: \(deleteFailures.prefix(3))")
            let full = store.stats
            #expect(full.diskFullCap != nil && full.failedPuts >= 200, "\(full)")
            #expect(putsAfterFull > 0, "puts go on under the limit once deletes made room: \(full)")
            // Everything that was stored is still there, oldest first.
            #expect(try store.oldest(limit: ids.count + 1).map(\.id) == ids)

            // Still full a second later: the limit holds.
            usleep(1_100_000)
            #expect((try? store.put(noise(40_000), priority: .important)) == nil && store.stats.diskFullCap != nil)
            // Room again (the operator grew the volume): a put a second later lifts the limit.
            try #require(runQuietly(["mount", "-o", "remount,size=8m", base]) == 0)
            usleep(1_100_000)
            try store.put(noise(40_000), priority: .important)
            #expect(store.stats.diskFullCap == nil)
            #expect(stat(base + "/store/reserve", &reserve) == 0 && reserve.st_size == 256 << 10)
        }
    }
}
