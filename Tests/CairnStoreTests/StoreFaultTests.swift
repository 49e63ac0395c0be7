import CairnBase
@testable import CairnStore
import CairnUploader
import CairnTestSupport
import Foundation
import Testing

/// The snapshot store against damaged files, bad permissions and a running writer.
///
/// One real store is built (batch bodies, overflow values, metadata, deletions and
/// retries, so the free-page tree has entries); each case of ``StoreFaultTests/cases``
/// damages a copy of its `data.mdb`, then `cairn status` and `cairn events` read it and
/// `cairn-store-child` opens it read-write and stores one more snapshot, all as child
/// processes, so a signal fails the case instead of killing the test runner. A case
/// passes when no process dies of a signal or hangs, the damage is reported, the
/// read-only commands changed no byte of the directory, the damaged store was set
/// aside unchanged, and every snapshot whose pages the damage left alone comes back
/// byte for byte, in a store that `mdb_dump` reads.
@Suite struct StoreFaultTests {
    // MARK: The damage table

    /// What a case does to the files, and whether the damage must be reported.
    struct Damage: CustomStringConvertible, Sendable {
        let description: String
        /// Changes the bytes of `data.mdb`.
        let apply: @Sendable (inout [UInt8], Template) -> Void
        /// Whether opening must report damage.
        let reported: @Sendable (Template) -> Bool
        /// Bytes to write as `lock.mdb` (none is written otherwise).
        var lock: [UInt8]? = nil

        init(_ description: String, reported: @escaping @Sendable (Template) -> Bool = { _ in true },
             lock: [UInt8]? = nil, _ apply: @escaping @Sendable (inout [UInt8], Template) -> Void) {
            self.description = description
            self.apply = apply
            self.reported = reported
            self.lock = lock
        }

        /// Writes the template's store, so damaged, into `dir.store`; returns the
        /// damaged `data.mdb`.
        func write(_ t: Template, into dir: Scratch) throws -> [UInt8] {
            var bytes = t.data
            apply(&bytes, t)
            try t.write(bytes, into: dir)
            if let lock { try Data(lock).write(to: URL(fileURLWithPath: dir.store + "/lock.mdb")) }
            return bytes
        }

        static func zero(_ b: inout [UInt8], page: Int, size: Int) {
            for i in (page * size)..<min(b.count, (page + 1) * size) { b[i] = 0 }
        }

        static func noise(_ b: inout [UInt8], _ range: Range<Int>, seed: UInt64) {
            var rng = SplitMix(seed: seed)
            for i in range where i < b.count { b[i] = UInt8.random(in: 0...255, using: &rng) }
        }

        /// Makes `page` a leaf page whose `nodes` pointers all lead to one node of 32
        /// bytes at the page's end (a 16-byte key, an 8-byte value): each node reads
        /// well alone, but they lie on each other.
        static func overlapping(_ b: inout [UInt8], page: Int, size: Int, nodes: Int) {
            func put(_ v: UInt64, _ at: Int, _ n: Int) {
                for i in 0..<n { b[page * size + at + i] = UInt8(truncatingIfNeeded: v >> (8 * i)) }
            }
            zero(&b, page: page, size: size)
            let node = size - 32
            put(UInt64(page), 0, 8)
            put(0x02, 10, 2)
            put(UInt64(16 + 2 * nodes), 12, 2)
            put(UInt64(node), 14, 2)
            for k in 0..<nodes { put(UInt64(node), 16 + 2 * k, 2) }
            put(8, node, 2)
            put(16, node + 6, 2)
            for i in 0..<24 { put(UInt64(i + 1), node + 8 + i, 1) }
        }
    }

    static let cases: [Damage] = [
        Damage("truncated to 0 bytes") { b, _ in b = [] },
        Damage("truncated to 8 KiB") { b, _ in b = Array(b.prefix(8192)) },
        Damage("truncated to half") { b, _ in b = Array(b.prefix(b.count / 2)) },
        Damage("one page short") { b, t in b = Array(b.prefix(b.count - t.pageSize)) },
        Damage("meta page 0 zeroed") { b, t in Damage.zero(&b, page: 0, size: t.pageSize) },
        Damage("meta page 1 zeroed") { b, t in Damage.zero(&b, page: 1, size: t.pageSize) },
        Damage("both meta pages zeroed") { b, t in
            Damage.zero(&b, page: 0, size: t.pageSize)
            Damage.zero(&b, page: 1, size: t.pageSize)
        },
        Damage("a branch page of snapshots zeroed") { b, t in Damage.zero(&b, page: t.branches[0], size: t.pageSize) },
        Damage("a leaf page of snapshots zeroed") { b, t in Damage.zero(&b, page: t.leaves[1], size: t.pageSize) },
        Damage("an overflow page zeroed") { b, t in Damage.zero(&b, page: t.overflows[0], size: t.pageSize) },
        Damage("a page of the free-page tree zeroed") { b, t in Damage.zero(&b, page: t.freeTree[0], size: t.pageSize) },
        Damage("the last page zeroed", reported: { t in t.used[t.lastPage] }) { b, t in
            Damage.zero(&b, page: t.lastPage, size: t.pageSize)
        },
        Damage("random bytes over the whole file") { b, _ in Damage.noise(&b, 0..<b.count, seed: 11) },
        Damage("random bytes over one leaf page") { b, t in
            let p = t.leaves[t.leaves.count / 2]
            Damage.noise(&b, (p * t.pageSize)..<((p + 1) * t.pageSize), seed: 12)
        },
        Damage("random bytes over the last quarter") { b, _ in Damage.noise(&b, (b.count * 3 / 4)..<b.count, seed: 13) },
        Damage("300 bytes flipped at random places") { b, _ in
            var rng = SplitMix(seed: 14)
            for _ in 0..<300 { b[Int.random(in: 0..<b.count, using: &rng)] ^= UInt8.random(in: 1...255, using: &rng) }
        },
        Damage("a leaf page of thousands of nodes on one another") { b, t in
            Damage.overlapping(&b, page: t.leaves[0], size: t.pageSize, nodes: (t.pageSize - 48) / 2)
        },
        Damage("a leaf page of two nodes on one another") { b, t in
            Damage.overlapping(&b, page: t.leaves[1], size: t.pageSize, nodes: 2)
        },
        Damage("garbage lock.mdb", reported: { _ in false },
               lock: (0..<8192).map { UInt8(truncatingIfNeeded: $0 &* 131 &+ 7) }) { _, _ in },
    ]

    @Test(arguments: cases)
    func damagedStore(_ damage: Damage) throws {
        let t = try Template.shared.get()
        let dir = Scratch()
        let bytes = try damage.write(t, into: dir)
        let reported = damage.reported(t)

        // Read-only commands: they tell, and change nothing.
        let before = try Self.tree(dir.path)
        for command in ["status", "events"] {
            let r = try Self.run([productsDirectory + "/cairn", command, dir.path])
            #expect(!r.signaled && !r.timedOut, "cairn \(command): \(r.err)")
            #expect(r.status == (reported ? 5 : 0), "cairn \(command) exited \(r.status): \(r.err)")
            if reported { #expect(r.err.contains("is damaged"), "\(r.err)") }
        }
        #expect(try Self.tree(dir.path) == before, "the read-only commands changed the directory")

        // A read-write open: salvage, set aside, and a store that works.
        let r = try Self.run([productsDirectory + "/cairn-store-child", "open", dir.store])
        #expect(!r.signaled && !r.timedOut && r.status == 0, "cairn-store-child exited \(r.status): \(r.err)")
        let lines = r.out.split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
        let opened = try #require(lines.first)
        let damageReport = opened["damage"] as? [String: Any]
        #expect((damageReport != nil) == reported, "damage: \(String(describing: opened["damage"]))")
        if let damageReport {
            let aside = try #require(damageReport["setAside"] as? String)
            #expect(FileManager.default.contents(atPath: aside + "/data.mdb") == Data(bytes), "set aside unchanged")
            #expect(damageReport["salvaged"] as? Int == opened["count"] as? Int)
            let dump = try Self.run(["/usr/bin/env", "mdb_dump", "-s", "snapshots", dir.store])
            #expect(dump.status == 0, "mdb_dump: \(dump.err)")
            let entries = dump.out.split(separator: "\n").filter { $0.hasPrefix(" ") }.count / 2
            #expect(entries == (opened["count"] as? Int ?? -1) + 1)
        } else {
            #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path) == ["store"])
        }
        let listed = lines.dropFirst().filter { $0["id"] != nil }
        #expect(listed.contains { $0["idempotencyKey"] as? String == "child-put" }, "the store takes new snapshots")
        let byID = Dictionary(listed.map { ($0["id"] as? String ?? "", $0) }) { first, _ in first }

        // Every snapshot on pages the damage left alone is back, byte for byte.
        let damaged = Self.damagedPages(t.data, bytes, pageSize: t.pageSize)
        let lost = t.snapshots.filter { s in
            t.pagesOf[s.id, default: []].allSatisfy { !damaged.contains($0) }
                && byID[s.id.description].map { Self.snapshot($0) } != Self.snapshot(s)
        }
        #expect(lost.isEmpty, "on intact pages but missing or changed: \(lost.map { "\($0.id) \(t.pagesOf[$0.id] ?? [])" })")
        // Nothing is invented: every body listed holds the records of one that was
        // stored (what its zstd checksum covers; the metadata frame's batch id, the
        // URL and headers have no checksum).
        let decoder = try FrameDecoder(maxContentSize: 64 << 20)
        let invented = listed.filter { row in
            let body = [UInt8](Data(base64Encoded: row["body"] as? String ?? "") ?? Data())
            return row["idempotencyKey"] as? String != "child-put"
                && !((try? decoder.decode(body).body).map { t.contents.contains($0) } ?? false)
        }
        #expect(invented.isEmpty, "bodies never stored: \(invented.map { $0["id"] ?? "?" })")
    }

    // MARK: Hostile files cost bounded memory and time

    /// Pages whose node pointers all lead to one node are damage, and the pass keeps no
    /// node of theirs: the file keeps no more nodes than the intact store (unchecked,
    /// every such page kept two thousand).
    @Test func overlappingNodesAreDamageAndKeptNot() throws {
        let t = try Template.shared.get()
        let dir = Scratch()
        var bytes = t.data
        for p in t.leaves { Damage.overlapping(&bytes, page: p, size: t.pageSize, nodes: (t.pageSize - 48) / 2) }
        #expect(FileManager.default.createFile(atPath: dir.path + "/intact.mdb", contents: Data(t.data)))
        #expect(FileManager.default.createFile(atPath: dir.path + "/crafted.mdb", contents: Data(bytes)))
        let intact = try LMDBFile(path: dir.path + "/intact.mdb").analyze()
        let a = try LMDBFile(path: dir.path + "/crafted.mdb").analyze()
        #expect(!a.intact)
        #expect(a.pages.nodes.count <= intact.pages.nodes.count,
                "\(a.pages.nodes.count) nodes kept, \(intact.pages.nodes.count) in the intact store")
        for p in t.leaves {
            guard case .defective = a.pages.kind(UInt64(p)) else {
                Issue.record("page \(p) reads as \(a.pages.kind(UInt64(p)))")
                continue
            }
        }
    }

    /// A file far larger than any store, or whose meta pages say so, is damage found
    /// without reading it: the pass stops at the meta page's last page, at the largest
    /// store, or where the data of a sparse file ends. Unchecked, both took hours.
    @Test(arguments: [false, true])
    func hugeSparseFilesAreDamageReadPromptly(metasClaimIt: Bool) throws {
        let t = try Template.shared.get()
        let dir = Scratch()
        var bytes = t.data
        var size = 64 << 30
        if metasClaimIt {
            // Both meta pages say the store ends 256 GiB in, and the file does.
            size = 256 << 30
            let last = UInt64(size) / UInt64(t.pageSize) - 1
            for slot in 0..<2 {
                for i in 0..<8 { bytes[slot * t.pageSize + 136 + i] = UInt8(truncatingIfNeeded: last >> (8 * i)) }
            }
        }
        try FileManager.default.createDirectory(atPath: dir.store, withIntermediateDirectories: true)
        #expect(FileManager.default.createFile(atPath: dir.store + "/data.mdb", contents: Data(bytes)))
        try #require(truncate(dir.store + "/data.mdb", size) == 0, "truncate: \(String(cString: strerror(errno)))")

        let status = try Self.run([productsDirectory + "/cairn", "status", dir.path])
        try #require(!status.signaled && !status.timedOut, "cairn status: \(status.err)")
        #expect(status.status == 5 && status.err.contains("beyond the largest store"), "\(status.status): \(status.err)")

        let r = try Self.run([productsDirectory + "/cairn-store-child", "open", dir.store])
        try #require(!r.signaled && !r.timedOut && r.status == 0, "cairn-store-child exited \(r.status): \(r.err)")
        let opened = try #require(r.out.split(separator: "\n").first.flatMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        })
        let damage = try #require(opened["damage"] as? [String: Any], "no damage reported: \(r.out)")
        let salvaged = damage["salvaged"] as? Int ?? -1
        if metasClaimIt {
            #expect(salvaged > 0, "nothing salvaged from the pages")
        } else {
            #expect(salvaged == t.snapshots.count)
        }
    }

    /// A salvage copies entries into the fresh store as it reads them, committing every
    /// few MiB, rather than holding them all: a store of 12 MiB of snapshots, damaged
    /// only in its length, comes back whole through several commits.
    @Test func salvageCommitsAsItReads() throws {
        let dir = Scratch()
        var rng = SplitMix(seed: 21)
        let encoder = try FrameEncoder()
        var total = 0
        do {
            let store = try SnapshotStore(directory: dir.store, options: .requests)
            var n = 0
            while total < 12 << 20 {
                let body = try encoder.encode(batchID: UInt64(n), records: (0..<1500).map { Template.record(n, $0, &rng) })
                let request = UploadRequest(url: "https://collector.example/v1/batch", headers: [],
                                            body: body, idempotencyKey: "key-\(n)")
                try store.put(request, priority: .sampled, now: 1_700_000_000_000 + UInt64(n))
                total += body.count
                n += 1
            }
            try store.sync()
        }
        let expected = try SnapshotStore.inspect(directory: dir.store, recordCheck: UploadRequest.recordCheck).snapshots
        try #require(truncate(dir.store + "/data.mdb", 64 << 30) == 0, "truncate: \(String(cString: strerror(errno)))")

        let store = try SnapshotStore(directory: dir.store, options: .requests)
        let damage = try #require(store.stats.damage)
        #expect(damage.salvaged == expected.count && damage.lost == 0, "\(damage)")
        #expect(try store.oldest(limit: Int.max) == expected)
        let fresh = try LMDBFile(path: dir.store + "/data.mdb").analyze()
        let commits = try #require(fresh.meta).txnid
        // A commit at least every 4 MiB, besides the one that creates the databases.
        #expect(commits > UInt64(total >> 22), "\(commits) commits for \(total) bytes")
    }

    // MARK: The reader agrees with LMDB

    /// The pass reads the undamaged store as LMDB does: the same entries with the same
    /// bytes, and the page counts `mdb_stat` gives for every tree and the free list.
    @Test func intactStoreReadsAsLMDBReadsIt() throws {
        let t = try Template.shared.get()
        let dir = Scratch()
        try t.write(t.data, into: dir)
        let file = try LMDBFile(path: dir.store + "/data.mdb")
        let a = try file.analyze()
        #expect(a.intact, "\(a.faults)")
        let contents = try file.contents(a)
        #expect(contents.snapshots.map(\.key) == t.snapshots.map(\.id.bytes))
        #expect(contents.snapshots.map(\.value) == t.snapshots.map { SnapshotCodec.encode($0) })
        #expect(contents.metadata.map { String(decoding: $0.key, as: UTF8.self) } == t.metadata.keys.sorted())
        #expect(contents.metadata.map(\.value) == t.metadata.keys.sorted().map { t.metadata[$0] ?? [] })

        let stat = try Self.run(["/usr/bin/env", "mdb_stat", "-a", "-f", dir.store])
        #expect(stat.status == 0, "mdb_stat: \(stat.err)")
        let counts = Self.mdbStat(stat.out)
        for (name, section) in [("Main DB", LMDBFile.mainTree), ("snapshots", LMDBFile.snapshotsTree),
                                ("meta", LMDBFile.metaTree), ("Freelist Status", LMDBFile.freeTree)] {
            let tree = try #require(a.trees[section])
            let c = counts[name] ?? [:]
            #expect(c["Branch pages"] == tree.branches.count && c["Leaf pages"] == tree.leaves.count, "\(name): \(c)")
            #expect(c["Entries"] == tree.entries.count, "\(name): \(c)")
            let overflowPages = tree.overflows.reduce(0) { n, p in
                if case .overflow(let pages) = a.pages.kinds[p] { return n + pages }
                return n
            }
            #expect(c["Overflow pages"] == overflowPages, "\(name): \(c)")
        }
        #expect(counts["Freelist Status"]?["Free pages"] == a.free.filter { $0 }.count)
        #expect(t.branches.count > 0 && t.overflows.count > 0 && t.freeTree.count > 0, "the template covers every page kind")
    }

    /// A store that only ever saw ordinary use is never reported damaged, whatever
    /// the mix of sizes, deletions, retries, evictions and map growth.
    @Test func ordinaryUseNeverReadsAsDamage() throws {
        let dir = Scratch()
        var rng = SplitMix(seed: 99)
        let encoder = try FrameEncoder()
        var ids: [SnapshotID] = []
        for round in 0..<8 {
            do {
                let store = try SnapshotStore(directory: dir.store, options: .init(maxBytes: 1 << 20, recordCheck: UploadRequest.recordCheck))
                #expect(store.stats.damage == nil, "round \(round): \(String(describing: store.stats.damage))")
                for n in 0..<30 {
                    let records = (0..<Int.random(in: 1...40, using: &rng)).map { Template.record(round * 100 + n, $0, &rng) }
                    let body = try encoder.encode(batchID: UInt64(n), records: records)
                    let request = UploadRequest(url: "https://collector.example/v1/batch", headers: [], body: body,
                                                idempotencyKey: "r\(round)-\(n)")
                    if let id = try? store.put(request, priority: Tier.allCases.randomElement(using: &rng) ?? .sampled) {
                        ids.append(id)
                    }
                    if Bool.random(using: &rng), let victim = ids.randomElement(using: &rng) { try store.delete(victim) }
                    if Bool.random(using: &rng), let retried = ids.randomElement(using: &rng) {
                        try store.recordAttempt(retried, nextAttemptAt: UInt64(n))
                    }
                }
                try store.setMetadata("round", [UInt8(round)])
                try store.sync()
            }
            let inspection = try SnapshotStore.inspect(directory: dir.store, recordCheck: UploadRequest.recordCheck)
            #expect(inspection.damage == nil, "round \(round): \(String(describing: inspection.damage))")
            let store = try SnapshotStore(directory: dir.store, options: .init(maxBytes: 1 << 20, recordCheck: UploadRequest.recordCheck))
            #expect(inspection.snapshots == (try store.oldest(limit: Int.max)))
        }
    }

    // MARK: Errors that are not damage

    /// A store the process may not read: a clear error naming the path and errno's
    /// text, and nothing set aside. As root (CI), the commands run as `nobody`;
    /// otherwise `data.mdb` is made unreadable.
    @Test func permissionDeniedIsAnErrorNotDamage() throws {
        let t = try Template.shared.get()
        let dir = Scratch()
        try FileManager.default.createDirectory(atPath: dir.store, withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: dir.path)
        #expect(FileManager.default.createFile(atPath: dir.store + "/data.mdb", contents: Data(t.data)))
        var prefix: [String] = []
        if getuid() == 0 {
            prefix = ["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
            let probe = try Self.run(prefix + [productsDirectory + "/cairn", "events", "/nonexistent"])
            try #require(probe.status == 3, "nobody cannot run the built cairn: \(probe.err)")
        } else {
            chmod(dir.store + "/data.mdb", 0)
        }
        defer { chmod(dir.store + "/data.mdb", 0o600) }
        let before = try Self.tree(dir.path)
        let status = try Self.run(prefix + [productsDirectory + "/cairn", "status", dir.path])
        #expect(status.status == 4 && status.err.contains("Permission denied") && status.err.contains(dir.store),
                "\(status.status): \(status.err)")
        let child = try Self.run(prefix + [productsDirectory + "/cairn-store-child", "open", dir.store])
        #expect(!child.signaled && child.status == 1 && child.err.contains("Permission denied")
                && child.err.contains(dir.store), "\(child.status): \(child.err)")
        #expect(try Self.tree(dir.path) == before, "nothing set aside")
    }

    /// A file where the store's directory should be, and a directory where `data.mdb`
    /// should be: errors naming the path, nothing set aside.
    @Test func wrongFileTypesAreErrorsNotDamage() throws {
        let dir = Scratch()
        #expect(FileManager.default.createFile(atPath: dir.store, contents: Data("not a store".utf8)))
        let notDirectory = try Self.run([productsDirectory + "/cairn-store-child", "open", dir.store])
        #expect(notDirectory.status == 1 && notDirectory.err.contains("Not a directory"), "\(notDirectory.err)")
        let status = try Self.run([productsDirectory + "/cairn", "status", dir.path])
        #expect(status.status == 4 && status.err.contains("Not a directory"), "\(status.err)")
        try FileManager.default.removeItem(atPath: dir.store)
        try FileManager.default.createDirectory(atPath: dir.store + "/data.mdb", withIntermediateDirectories: true)
        let isDirectory = try Self.run([productsDirectory + "/cairn-store-child", "open", dir.store])
        #expect(isDirectory.status == 1 && isDirectory.err.contains("Is a directory")
                && isDirectory.err.contains(dir.store + "/data.mdb"), "\(isDirectory.err)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path) == ["store"])
        let missing = try Self.run([productsDirectory + "/cairn", "events", dir.path + "/nowhere"])
        #expect(missing.status == 3 && missing.err.contains("no snapshot store"), "\(missing.err)")
        #expect(throws: StoreError(ENOENT, function: "stat", path: dir.path + "/nowhere/store")) {
            try SnapshotStore.inspect(directory: dir.path + "/nowhere/store", recordCheck: UploadRequest.recordCheck)
        }
    }

    /// On a read-only file system (a tmpfs remounted read-only), `cairn status` reads
    /// the store; a read-write open fails with EROFS and sets nothing aside.
    @Test func readOnlyFileSystemIsReadAndNeverWritten() throws {
        let t = try Template.shared.get()
        let dir = Scratch()
        let mount = dir.path + "/ro"
        try FileManager.default.createDirectory(atPath: mount, withIntermediateDirectories: true)
        let mounted = try Self.run(["/usr/bin/env", "mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", mount])
        try #require(mounted.status == 0, "mounting a tmpfs needs root: \(mounted.err)")
        defer { _ = try? Self.run(["/usr/bin/env", "umount", mount]) }
        try FileManager.default.createDirectory(atPath: mount + "/store", withIntermediateDirectories: true)
        #expect(FileManager.default.createFile(atPath: mount + "/store/data.mdb", contents: Data(t.data)))
        let ro = try Self.run(["/usr/bin/env", "mount", "-o", "remount,ro", mount])
        try #require(ro.status == 0, "remount read-only: \(ro.err)")
        let status = try Self.run([productsDirectory + "/cairn", "status", mount])
        #expect(status.status == 0 && status.out.contains("stored requests: \(t.snapshots.count) "),
                "\(status.status): \(status.out) \(status.err)")
        let child = try Self.run([productsDirectory + "/cairn-store-child", "open", mount + "/store"])
        #expect(child.status == 1 && child.err.contains("Read-only file system"), "\(child.err)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: mount) == ["store"])
        #expect(try FileManager.default.contentsOfDirectory(atPath: mount + "/store") == ["data.mdb"])
    }

    /// `cairn status` beside a process that keeps committing: it never mistakes a
    /// commit for damage, and creates no lock file.
    @Test func inspectionBesideAWriterSeesNoDamage() throws {
        let t = try Template.shared.get()
        let dir = Scratch()
        try t.write(t.data, into: dir)
        let status = try Self.run([productsDirectory + "/cairn", "status", dir.path])
        #expect(status.status == 0, "\(status.err)")
        #expect(!FileManager.default.fileExists(atPath: dir.store + "/lock.mdb"), "no lock file from a read")
        let writer = try ChildProcess(productsDirectory + "/cairn-store-child", ["put", dir.store, "400"])
        var reads = 0
        repeat {
            let r = try Self.run([productsDirectory + "/cairn", "status", dir.path])
            #expect(r.status == 0 && !r.signaled, "read \(reads) beside the writer: \(r.status) \(r.err)")
            reads += 1
            writer.keepReading(for: 0)
        } while !writer.hasEnded
        let wrote = writer.finish(timeout: 60)
        #expect(wrote.status == 0 && !wrote.signaled, "\(wrote.err)")
        let last = try Self.run([productsDirectory + "/cairn", "status", dir.path])
        #expect(last.out.contains("stored requests: \(t.snapshots.count + 400) "), "\(last.out)")
    }

    /// Python's `lmdb` (not ours) reads a salvaged store: every snapshot decodes.
    @Test func pythonLmdbReadsASalvagedStore() throws {
        let t = try Template.shared.get()
        let dir = Scratch()
        var bytes = t.data
        Damage.zero(&bytes, page: t.branches[0], size: t.pageSize)
        try FileManager.default.createDirectory(atPath: dir.store, withIntermediateDirectories: true)
        #expect(FileManager.default.createFile(atPath: dir.store + "/data.mdb", contents: Data(bytes)))
        let child = try Self.run([productsDirectory + "/cairn-store-child", "open", dir.store])
        #expect(child.status == 0, "\(child.err)")
        let py = try Self.run(["/usr/bin/env", "python3", repoRoot.path + "/Tests/Tools/read_store.py", dir.store])
        #expect(py.status == 0, "read_store.py: \(py.err)")
        let rows = py.out.split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
        #expect(rows.count == t.snapshots.count + 1, "salvaged all, plus the child's")
        let keys = Set(rows.compactMap { $0["idempotency_key"] as? String })
        #expect(keys.isSuperset(of: t.snapshots.map(\.request.idempotencyKey)))
    }

    // MARK: Helpers

    /// Pages whose bytes differ, or that the damaged file no longer holds whole.
    static func damagedPages(_ before: [UInt8], _ after: [UInt8], pageSize: Int) -> Set<Int> {
        var out = Set<Int>()
        for p in 0..<(before.count / pageSize) {
            let range = (p * pageSize)..<((p + 1) * pageSize)
            if after.count < range.upperBound || before[range] != after[range] { out.insert(p) }
        }
        return out
    }

    /// A snapshot's fields as the child prints them.
    static func snapshot(_ row: [String: Any]) -> [String] {
        [row["id"], row["priority"], row["attempts"], row["createdAt"], row["nextAttemptAt"], row["method"], row["url"],
         row["idempotencyKey"], row["headers"], row["body"]].map { "\($0 ?? "-")" }
    }

    static func snapshot(_ s: Snapshot) -> [String] {
        let row: [String: Any] = [
            "id": s.id.description, "priority": Int(s.priority.storeCode), "attempts": Int(s.attempts),
            "createdAt": s.createdAt, "nextAttemptAt": s.nextAttemptAt, "method": s.request.method, "url": s.request.url,
            "idempotencyKey": s.request.idempotencyKey, "headers": s.request.headers.map { [$0.name, $0.value] },
            "body": Data(s.request.body).base64EncodedString(),
        ]
        // Through JSON, as the child's lines are.
        let data = (try? JSONSerialization.data(withJSONObject: row)) ?? Data()
        return snapshot((try? JSONSerialization.jsonObject(with: data) as? [String: Any]) ?? [:])
    }

    /// Every file and directory under `path`, with the files' bytes.
    static func tree(_ path: String) throws -> [String: Data] {
        var out: [String: Data] = [:]
        let fm = FileManager.default
        guard let names = fm.enumerator(atPath: path) else { return out }
        for case let name as String in names {
            var isDirectory: ObjCBool = false
            _ = fm.fileExists(atPath: path + "/" + name, isDirectory: &isDirectory)
            out[name] = isDirectory.boolValue ? Data("directory".utf8) : (fm.contents(atPath: path + "/" + name) ?? Data("unreadable".utf8))
        }
        return out
    }

    /// `mdb_stat -a -f` as numbers by section ("Main DB", "snapshots", "Freelist Status").
    static func mdbStat(_ text: String) -> [String: [String: Int]] {
        var out: [String: [String: Int]] = [:]
        var section = ""
        for line in text.split(separator: "\n") {
            if line.hasPrefix("Status of ") { section = String(line.dropFirst("Status of ".count)); continue }
            if line.hasPrefix("Freelist Status") { section = "Freelist Status"; continue }
            let parts = line.split(separator: ":", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            if parts.count == 2, let n = Int(parts[1]), out[section]?[parts[0]] == nil { out[section, default: [:]][parts[0]] = n }
        }
        return out
    }

    struct Ran {
        var status: Int32
        var signaled: Bool
        var timedOut: Bool
        var out: String
        var err: String
    }

    /// Runs `argv` (the first element a path) with `environment` (nil: this process's); a
    /// process still running after `timeout` seconds is killed and reported as timed out.
    static func run(_ argv: [String], environment: [String: String]? = nil, timeout: Double = 60) throws -> Ran {
        let f = try runToEnd(argv[0], Array(argv.dropFirst()), environment: environment, timeout: timeout)
        return Ran(status: f.status, signaled: f.signaled, timedOut: f.timedOut, out: f.out, err: f.err)
    }
}

/// The undamaged store every case starts from, with what it holds and where.
struct Template: Sendable {
    /// `data.mdb` as the store left it.
    let data: [UInt8]
    /// What it holds (LMDB's view), oldest first.
    let snapshots: [Snapshot]
    /// The decompressed body of every snapshot ever stored, deleted ones included.
    let contents: Set<[UInt8]>
    let metadata: [String: [UInt8]]
    let pageSize: Int
    let lastPage: Int
    /// Pages of the `snapshots` tree, and of the free-page tree.
    let branches: [Int], leaves: [Int], overflows: [Int], freeTree: [Int]
    /// Pages some tree uses.
    let used: [Bool]
    /// The pages each snapshot lives on: its leaf, and its overflow pages.
    let pagesOf: [SnapshotID: [Int]]

    static let shared = Result { try Template() }

    /// Writes `bytes` (the template's `data.mdb`, or a damaged copy) as `dir.store`'s
    /// data file.
    func write(_ bytes: [UInt8], into dir: Scratch) throws {
        try FileManager.default.createDirectory(atPath: dir.store, withIntermediateDirectories: true)
        try Data(bytes).write(to: URL(fileURLWithPath: dir.store + "/data.mdb"))
    }

    /// A JSON record with 304 hex digits of noise, so batches do not shrink to nothing.
    static func record(_ n: Int, _ i: Int, _ rng: inout SplitMix) -> [UInt8] {
        let digits = Array("0123456789abcdef".utf8)
        var out = Array(#"{"event":"e\#(n)-\#(i)","noise":""#.utf8)
        for _ in 0..<19 {
            var v = rng.next()
            for _ in 0..<16 {
                out.append(digits[Int(v & 15)])
                v >>= 4
            }
        }
        return out + Array(#""}"#.utf8)
    }

    private init() throws {
        let dir = Scratch()
        var rng = SplitMix(seed: 7)
        let encoder = try FrameEncoder()
        var contents = Set<[UInt8]>()
        let decoder = try FrameDecoder(maxContentSize: 64 << 20)
        let metadata: [String: [UInt8]] = ["install.time": Array("2026-12-02T15:48:52.000Z".utf8),
                                           "install.zone": Array("Europe/Paris".utf8), "run.state": [1, 2, 3]]
        func request(_ n: Int, records: Int) throws -> UploadRequest {
            let body = try encoder.encode(batchID: UInt64(n), records: (0..<records).map { Self.record(n, $0, &rng) })
            contents.insert(try decoder.decode(body).body)
            return UploadRequest(url: "https://collector.example/v1/batch?n=\(n)",
                                 headers: [HTTPHeader("Content-Encoding", "zstd"), HTTPHeader("Idempotency-Key", "key-\(n)")],
                                 body: body, idempotencyKey: "key-\(n)")
        }
        do {
            let store = try SnapshotStore(directory: dir.store, options: .requests)
            var ids: [SnapshotID] = []
            // Mostly values that fit in a leaf, every tenth one on overflow pages.
            for n in 0..<60 {
                ids.append(try store.put(try request(n, records: n % 10 == 3 ? 40 : 3), priority: n % 7 == 0 ? .critical : .sampled,
                                         now: 1_700_000_000_000 + UInt64(n) * 1000))
            }
            for (key, value) in metadata { try store.setMetadata(key, value) }
            for id in ids[5..<13] { try store.delete(id) }
            for id in ids[20..<25] { try store.recordAttempt(id, nextAttemptAt: 1_800_000_000_000) }
            // Last, a new overflow value: the newest commit adds pages.
            try store.put(try request(60, records: 40), priority: .important, now: 1_700_000_100_000)
            try store.sync()
            snapshots = try store.oldest(limit: Int.max)
        }
        data = [UInt8](try Data(contentsOf: URL(fileURLWithPath: dir.store + "/data.mdb")))
        self.contents = contents
        self.metadata = metadata
        let file = try LMDBFile(path: dir.store + "/data.mdb")
        let a = try file.analyze()
        guard a.intact, let meta = a.meta, let tree = a.trees[LMDBFile.snapshotsTree],
              let free = a.trees[LMDBFile.freeTree] else { throw LMDBFile.Fault("the template store reads as damaged: \(a.faults)") }
        pageSize = a.pageSize
        lastPage = Int(meta.lastPage)
        branches = tree.branches
        leaves = tree.leaves
        overflows = tree.overflows
        freeTree = free.branches + free.leaves + free.overflows
        used = a.used
        var pagesOf: [SnapshotID: [Int]] = [:]
        for e in tree.entries {
            let node = a.pages.nodes[e.node]
            var pages = [e.page]
            if case .overflow(let n) = a.pages.kind(node.page) { pages += (Int(node.page)..<(Int(node.page) + n)) }
            pagesOf[SnapshotID(bytes: try file.key(node, page: e.page, pageSize: a.pageSize))] = pages
        }
        self.pagesOf = pagesOf
    }
}

