import CairnTestSupport
import Foundation
import Glibc
import Testing

/// Every file Cairn reads back is untrusted. A service's data directory is filled the
/// way real runs fill it (requests stored while the collector was down, events left in
/// the ring by a `kill -9`, a run record, a crash report, the install record); one file
/// is then damaged as a table says, and the service starts again with the collector up.
/// Each case asserts: the service never dies of a signal and ends normally, it keeps
/// tracking (its new events arrive), the events in files that were not damaged arrive,
/// nothing is invented, and the damage is reported where an operator looks (the
/// `Cairn-Dropped` header or `sdk_health`).
///
/// The store's damage positions at page level (meta, branch, leaf, overflow, free-list
/// pages, flipped bytes) are covered in `StoreFaultTests`, the ring's header bytes in
/// the ring tests; this suite runs the SDK end to end on each file kind.
@Suite(.serialized) struct FaultInjectionTests {
    typealias Child = ServiceProcessTests

    /// One damage: which file, what is done to it, and what must still arrive.
    struct Damage: CustomStringConvertible, Sendable {
        var description: String
        /// Path inside the data directory; a glob-free name or a prefix ending in `*`.
        var file: String
        var apply: @Sendable (String) throws -> Void
        /// The stored requests' events must still arrive (their file was not touched).
        var storedSurvive = true
        /// The ring's events (left by the killed run) must still arrive.
        var ringSurvives = true
        /// A reason that must appear in `Cairn-Dropped` or `sdk_health`, if any.
        var reported: String?
    }

    static func truncate(to size: Int) -> @Sendable (String) throws -> Void {
        { path in
            guard Glibc.truncate(path, off_t(size)) == 0 else { throw POSIXError(.EIO) }
        }
    }

    static func overwrite(at offset: Int, count: Int, random: Bool) -> @Sendable (String) throws -> Void {
        { path in
            let fd = open(path, O_WRONLY)
            guard fd >= 0 else { throw POSIXError(.ENOENT) }
            defer { close(fd) }
            var g = SplitMix(seed: UInt64(offset + count))
            let bytes = (0..<count).map { _ in random ? UInt8.random(in: 0...255, using: &g) : 0 }
            guard pwrite(fd, bytes, count, off_t(offset)) == count else { throw POSIXError(.EIO) }
        }
    }

    static func replace(with text: String) -> @Sendable (String) throws -> Void {
        { path in try Data(text.utf8).write(to: URL(fileURLWithPath: path)) }
    }

    static let cases: [Damage] = [
        Damage(description: "store truncated to 8 KiB", file: "store/data.mdb", apply: truncate(to: 8192),
               storedSurvive: false, reported: "store_corrupt"),
        // Which single page is live depends on LMDB's copy-on-write history (a zeroed stale
        // page is no damage at all; StoreFaultTests picks live ones): zero them all.
        Damage(description: "store pages zeroed, meta pages kept", file: "store/data.mdb", apply: { path in
                   let size = (try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0
                   try overwrite(at: 8192, count: size - 8192, random: false)(path)
               }, storedSurvive: false, reported: "store_damage"),
        Damage(description: "store filled with random bytes", file: "store/data.mdb",
               apply: overwrite(at: 0, count: 64 << 10, random: true), storedSurvive: false,
               reported: "store_damage"),
        Damage(description: "store truncated to zero", file: "store/data.mdb", apply: truncate(to: 0),
               storedSurvive: false),
        Damage(description: "store lock file garbage", file: "store/lock.mdb",
               apply: overwrite(at: 0, count: 4096, random: true)),
        Damage(description: "ring header byte flipped (capacity)", file: "events.ring",
               apply: overwrite(at: 17, count: 1, random: true), reported: "ring_repaired"),
        Damage(description: "ring header zeroed", file: "events.ring",
               apply: overwrite(at: 0, count: 64, random: false), reported: "ring_repaired"),
        Damage(description: "ring truncated inside the data", file: "events.ring", apply: truncate(to: 4096 + 2048),
               ringSurvives: false, reported: "ring_repaired"),
        Damage(description: "ring data garbage", file: "events.ring",
               apply: overwrite(at: 4096, count: 64 << 10, random: true), ringSurvives: false),
        Damage(description: "ring file random throughout", file: "events.ring",
               apply: overwrite(at: 0, count: 64 << 10, random: true), ringSurvives: false),
        Damage(description: "run record garbage", file: "crash/run-*", apply: replace(with: "\u{0}\u{7}garbage{")),
        Damage(description: "run record truncated", file: "crash/run-*", apply: truncate(to: 7)),
        Damage(description: "crash report garbage", file: "crash/crash-*", apply: overwrite(at: 0, count: 512, random: true)),
        Damage(description: "crash report truncated", file: "crash/crash-*", apply: truncate(to: 100)),
        Damage(description: "install record garbage", file: "install.json", apply: replace(with: "{\"install_time_ms\":\"x")),
    ]

    static func resolve(_ dir: String, _ file: String) -> [String] {
        guard file.hasSuffix("*") else { return [dir + "/" + file] }
        let prefix = (file as NSString).lastPathComponent.dropLast()
        let folder = dir + "/" + (file as NSString).deletingLastPathComponent
        let names = (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []
        return names.filter { $0.hasPrefix(prefix) }.map { folder + "/" + $0 }
    }

    @Test(arguments: cases) func serviceSurvivesDamage(_ damage: Damage) throws {
        let dir = try Child.DataDir()
        let gone = try CollectorProcess()
        let deadURL = gone.baseURL + "/v1/batch"
        gone.stop()
        let base = ["CAIRN_APP_ID": "orders", "CAIRN_DATA_DIR": dir.path, "CAIRN_SHUTDOWN_TIMEOUT_MS": "8000"]

        // Requests stored while the collector was down.
        let stored = try Child.child(["run", "20"], env: base.merging([
            "CAIRN_UPLOAD_URL": deadURL, "CAIRN_BATCH_AGE_MS": "20", "CAIRN_TEST_EVENT_NAME": "stored_event",
        ]) { $1 })
        #expect(stored.status == 0, "\(stored.err)")
        // A crash report and its run record.
        let crashed = try Child.child(["crash"], env: base.merging(["CAIRN_UPLOAD_URL": deadURL]) { $1 })
        #expect(crashed.status != 0)
        // Events left in the ring by a run killed before its batch was due.
        let killed = try LifecycleTests.Running(["serve", "20"], env: base.merging([
            "CAIRN_UPLOAD_URL": deadURL, "CAIRN_BATCH_AGE_MS": "600000", "CAIRN_TEST_EVENT_NAME": "ring_event",
        ]) { $1 })
        #expect(killed.waitUntilReady())
        killed.signal(SIGKILL)
        _ = killed.wait()

        let targets = Self.resolve(dir.path, damage.file)
        #expect(!targets.isEmpty, "nothing to damage at \(damage.file)")
        for path in targets { try damage.apply(path) }

        let collector = try CollectorProcess()
        let next = try Child.child(["run", "5"], env: base.merging([
            "CAIRN_UPLOAD_URL": collector.baseURL + "/v1/batch", "CAIRN_BATCH_AGE_MS": "20",
            "CAIRN_TEST_EVENT_NAME": "new_event", "CAIRN_SHUTDOWN_TIMEOUT_MS": "15000",
        ]) { $1 })
        #expect(next.status == 0, "the service ends normally: \(next.status) \(next.err)")

        let received = try LifecycleTests.received(collector)
        func indexes(_ name: String) -> [Int] {
            received.filter { $0["name"] as? String == name }
                .compactMap { ($0["properties"] as? [String: Any])?["i"] as? Int }
        }
        #expect(Set(indexes("new_event")) == Set(0..<5), "the service keeps tracking")
        if damage.storedSurvive { #expect(Set(indexes("stored_event")) == Set(0..<20), "stored requests arrive") }
        if damage.ringSurvives { #expect(Set(indexes("ring_event")) == Set(0..<20), "the ring's events arrive") }
        for name in ["stored_event", "ring_event", "new_event"] {
            #expect(indexes(name).allSatisfy { (0..<20).contains($0) }, "nothing invented")
        }
        if let reason = damage.reported {
            let headers = try collector.requests().flatMap { $0.headerValues("Cairn-Dropped") }.joined(separator: ",")
            let health = received.filter { $0["name"] as? String == "sdk_health" }
                .map { String(describing: $0["properties"] ?? "") }.joined()
            #expect(headers.contains(reason + "=") || health.contains(reason), "\(reason) reported: \(headers)")
        }
    }
}
