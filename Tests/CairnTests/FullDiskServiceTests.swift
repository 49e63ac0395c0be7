import CairnTestSupport
import Foundation
import Testing

/// A service whose data directory is on a volume that fills up (a 20 MiB tmpfs the test
/// mounts, as root; CI runs as root: the 16 MiB ring, then the store until the disk is
/// full), through the public API in real processes: with the collector failing, the first
/// run stores what it can and keeps the rest in the ring; the next start, with the
/// collector back, delivers everything that was accepted, each event once, and the store
/// empties as it goes (the deletes never lack room).
@Suite(.serialized) struct FullDiskServiceTests {
    typealias Child = ServiceProcessTests

    @Test func everythingAcceptedArrivesOnceWhenTheDiskFilled() throws {
        let scratch = try TemporaryDirectory("cairn-disk")
        try #require(runQuietly(["mount", "-t", "tmpfs", "-o", "size=20m", "tmpfs", scratch.path]) == 0,
                     "mounting a tmpfs needs root")
        defer { _ = runQuietly(["umount", "-l", scratch.path]) }
        let collector = try CollectorProcess()
        defer { collector.stop() }
        try collector.setDefault(["status": 500])
        let events = 6000
        let env = ["CAIRN_APP_ID": "orders", "CAIRN_API_KEY": "k", "CAIRN_DATA_DIR": scratch.path + "/cairn",
                   "CAIRN_UPLOAD_URL": collector.baseURL + "/v1/batch",
                   // 2,000 random hex digits per event: about 1 KB each once compressed.
                   "CAIRN_TEST_PAD": "2000"]
        let first = try Child.child(["run", "\(events)"], env: env)
        // Exit status 3: its shutdown said not everything could be made safe (what the
        // full disk kept out of the store waits in the ring).
        #expect(first.status == 3, "\(first.err)")
        var fs = statvfs()
        #expect(statvfs(scratch.path, &fs) == 0 && fs.f_bavail * UInt(fs.f_frsize) < 512 << 10,
                "the disk filled up: \(fs.f_bavail * UInt(fs.f_frsize)) bytes left")
        #expect(try collector.events().isEmpty)
        // Something else on the volume takes what is left (a log file, say): not a byte free.
        let filler = open(scratch.path + "/filler", O_WRONLY | O_CREAT, 0o600)
        var chunk = [UInt8](repeating: 0x2e, count: 4096)
        while chunk.withUnsafeMutableBytes({ write(filler, $0.baseAddress, $0.count) }) > 0 {}
        chunk = [0x2e]
        while chunk.withUnsafeMutableBytes({ write(filler, $0.baseAddress, 1) }) > 0 {}
        close(filler)

        try collector.setDefault(["status": 200])
        let second = try Child.child(["run", "0"], env: env)
        #expect(second.status == 0, "\(second.err)")
        let indexes = LifecycleTests.childIndexes(try LifecycleTests.received(collector))
        #expect(Set(indexes).count == indexes.count, "each event once: \(indexes.count - Set(indexes).count) twice")
        // What did not arrive was refused when tracked (the ring full), and reported.
        var reported = 0, keys = Set<String>(), reasons: [String] = []
        for attempt in try collector.requests() where attempt.acknowledged {
            guard let key = attempt.idempotency_key, keys.insert(key).inserted else { continue }
            for pair in (attempt.headerValues("Cairn-Dropped").first ?? "").split(separator: ",") {
                // The run record the full disk kept out is counted too, but is no event.
                if pair.hasPrefix("run_record_unavailable=") { continue }
                let parts = pair.split(separator: "=")
                if parts.count == 2, let n = Int(parts[1]) { reported += n }
                reasons.append(String(pair))
            }
        }
        #expect(indexes.count + reported == events, "\(indexes.count) delivered, \(reported) reported dropped: \(reasons); first run: \(first.err)")
        #expect(indexes.count > events / 2, "\(indexes.count) delivered")
        let shown = try Child.run("cairn", ["status", scratch.path + "/cairn"])
        #expect(shown.out.contains("stored requests: 0 (0 bytes)"), "\(shown.out)")
    }
}
