import CairnBase
@testable import CairnStore
import CairnTestSupport
import Foundation
import Testing

/// The snapshot store with an LMDB whose file layout the damage guard does not know
/// (`LMDBVersion`), forced with `CAIRN_TEST_LMDB_LAYOUT=unknown` in child processes:
/// LMDB reads (and, opening read-write, writes) the store in a forked child first; a
/// store it cannot read is set aside whole. Every damage case of ``StoreFaultTests``:
/// no process dies of a signal or hangs, the store works afterwards, and what was
/// opened without damage is read by `mdb_dump` too.
@Suite struct StoreUnknownLayoutTests {
    static let unknown: [String: String] = ProcessInfo.processInfo.environment
        .filter { !$0.key.hasPrefix("CAIRN_") }.merging(["CAIRN_TEST_LMDB_LAYOUT": "unknown"]) { $1 }

    static func run(_ argv: [String]) throws -> StoreFaultTests.Ran {
        try StoreFaultTests.run(argv, environment: unknown, timeout: 90)
    }

    /// The child's first line (the open), and the snapshots it lists.
    static func opened(_ out: String) throws -> (open: [String: Any], listed: [[String: Any]]) {
        let lines = out.split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
        let first = try #require(lines.first)
        return (first, lines.dropFirst().filter { $0["id"] != nil })
    }

    @Test func anIntactStoreOpensWhole() throws {
        let t = try Template.shared.get()
        let dir = Scratch()
        try t.write(t.data, into: dir)
        let r = try Self.run([productsDirectory + "/cairn-store-child", "open", dir.store])
        #expect(!r.signaled && !r.timedOut && r.status == 0, "cairn-store-child exited \(r.status): \(r.err)")
        let (open, listed) = try Self.opened(r.out)
        #expect(open["damage"] is NSNull, "an intact store read as damaged: \(String(describing: open["damage"]))")
        #expect(open["count"] as? Int == t.snapshots.count)
        let byID = Dictionary(listed.map { ($0["id"] as? String ?? "", $0) }) { first, _ in first }
        let changed = t.snapshots.filter { byID[$0.id.description].map(StoreFaultTests.snapshot) != StoreFaultTests.snapshot($0) }
        #expect(changed.isEmpty, "snapshots missing or changed: \(changed.map(\.id))")
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path) == ["store"], "nothing set aside")
        // Read-only commands read it too (LMDB reads it, after a child did).
        let status = try Self.run([productsDirectory + "/cairn", "status", dir.path])
        #expect(!status.signaled && status.status == 0, "cairn status: \(status.err)")
        #expect(status.out.contains("stored requests: \(t.snapshots.count + 1) "), "\(status.out)")
    }

    @Test(arguments: StoreFaultTests.cases)
    func damagedStore(_ damage: StoreFaultTests.Damage) throws {
        let t = try Template.shared.get()
        let dir = Scratch()
        let bytes = try damage.write(t, into: dir)

        // Read-only: no signal, no hang, nothing written.
        let before = try StoreFaultTests.tree(dir.path)
        let status = try Self.run([productsDirectory + "/cairn", "status", dir.path])
        #expect(!status.signaled && !status.timedOut && [0, 5].contains(status.status), "cairn status: \(status.err)")
        #expect(try StoreFaultTests.tree(dir.path) == before, "cairn status changed the directory")

        // Read-write: the store works afterwards, whatever LMDB made of the damage.
        let r = try Self.run([productsDirectory + "/cairn-store-child", "open", dir.store])
        #expect(!r.signaled && !r.timedOut && r.status == 0, "cairn-store-child exited \(r.status): \(r.err)")
        let (open, listed) = try Self.opened(r.out)
        #expect(listed.contains { $0["idempotencyKey"] as? String == "child-put" }, "the store takes new snapshots")
        print("unknown layout, \(damage): \((open["damage"] as? [String: Any])?["found"] ?? "opened as LMDB read it")")
        if let report = open["damage"] as? [String: Any] {
            // Set aside whole, unchanged: a salvage needs the layout.
            let aside = try #require(report["setAside"] as? String)
            #expect(FileManager.default.contents(atPath: aside + "/data.mdb") == Data(bytes), "set aside unchanged")
            #expect(report["salvaged"] as? Int == 0)
            #expect((report["found"] as? String ?? "").contains("LMDB"), "\(report)")
        } else {
            // LMDB read and wrote it whole: the same LMDB's mdb_dump reads it.
            let dump = try StoreFaultTests.run(["/usr/bin/env", "mdb_dump", "-s", "snapshots", dir.store])
            #expect(dump.status == 0, "mdb_dump: \(dump.err)")
        }
    }
}
