/// What was wrong with a snapshot store, and what could be kept.
///
/// ``SnapshotStore/Stats/damage`` holds it when the store was damaged when opened (the
/// SDK reports it as the drop reason `store_corrupt`); ``StoreInspection/damage`` when
/// a read-only inspection found damage.
package struct StoreDamage: Sendable, Equatable, CustomStringConvertible {
    /// What was found, in one line: the first problem and how many more there are,
    /// such as `"snapshots tree: page 17: lower 4, upper 9000 (and 2 more)"`.
    package var found: String
    /// Requests the damaged store held, as its `snapshots` database counted them; nil
    /// when that count could not be read.
    package var expected: Int?
    /// Requests proven intact: kept by the fresh store (or, for an inspection,
    /// readable).
    package var salvaged: Int
    /// Of those, requests found on pages no tree reached any more (under a damaged
    /// branch page, or with both meta pages damaged).
    package var recoveredFromPages: Int
    /// Metadata entries kept.
    package var metadataSalvaged: Int
    /// Where the damaged store was moved (it is never deleted); nil for an inspection.
    package var setAsidePath: String?

    /// A store nothing could be salvaged from, nor counted (with an LMDB whose layout the
    /// guard does not know): `found`, and where it was moved.
    static func unsalvaged(found: String, setAside: String?) -> StoreDamage {
        StoreDamage(found: found, expected: nil, salvaged: 0, recoveredFromPages: 0, metadataSalvaged: 0,
                    setAsidePath: setAside)
    }

    /// Requests lost: ``expected`` minus ``salvaged`` (never negative), or nil when the
    /// damaged store's count is unknown.
    package var lost: Int? { expected.map { max(0, $0 - salvaged) } }

    /// One line: what was found, what was kept and lost, and where the store went.
    package var description: String {
        var s = "\(found); \(salvaged) requests salvaged"
        if let expected { s += " of \(expected) (\(lost ?? 0) lost)" } else { s += " (how many were lost is unknown)" }
        if recoveredFromPages > 0 { s += ", \(recoveredFromPages) of them from pages outside the trees" }
        s += ", \(metadataSalvaged) metadata entries"
        if let setAsidePath { s += "; set aside as \(setAsidePath)" }
        return s
    }
}

/// A metadata entry of the store.
package struct StoreMetadataEntry: Sendable, Equatable {
    /// Its key.
    package var key: String
    /// Its value.
    package var value: [UInt8]
}

/// What a read-only look at a store found: see ``SnapshotStore/inspect(directory:)``.
package struct StoreInspection: Sendable, Equatable {
    /// Intact snapshots, oldest first (key order).
    package var snapshots: [Snapshot]
    /// Their total size in bytes (keys and values).
    package var bytes: Int
    /// Entries of a value version this build does not read: kept by the store, not
    /// listed in ``snapshots``.
    package var otherVersions: Int
    /// Metadata entries, in key order.
    package var metadata: [StoreMetadataEntry]
    /// The damage found, or nil when the store is intact.
    package var damage: StoreDamage?
}

/// Receives the entries of a data file that can be proven intact, as
/// ``LMDBFile/readContents(_:into:)`` reads them: first the snapshots found on pages
/// no tree reached (a key may come more than once), then the `snapshots` tree's (which
/// replace a copy from the pages), then the metadata.
protocol ContentSink {
    /// A snapshot from a page no tree reached; of two copies, the sink keeps the one
    /// `verifier` finds ``BatchVerifier/newer(_:than:key:)``.
    mutating func pageSnapshot(key: [UInt8], value: [UInt8], verifier: BatchVerifier) throws(StoreError)
    /// A snapshot of the `snapshots` tree.
    mutating func treeSnapshot(key: [UInt8], value: [UInt8]) throws(StoreError)
    /// A metadata entry.
    mutating func metadata(key: [UInt8], value: [UInt8]) throws(StoreError)
}

/// The entries of a data file that can be proven intact, all in memory (for an
/// inspection, which lists them all; a salvage streams them instead).
struct StoreContents: ContentSink {
    /// Snapshot keys and values, in key order (once ``finish()`` is called).
    var snapshots: [(key: [UInt8], value: [UInt8])] = []
    /// Metadata keys and values, in key order.
    var metadata: [(key: [UInt8], value: [UInt8])] = []
    /// The `snapshots` database's own count, when its record was read.
    var expected: Int?
    /// Snapshots found on pages outside the trees.
    var fromPages = 0
    private var kept: [[UInt8]: [UInt8]] = [:], found: [[UInt8]: [UInt8]] = [:]

    mutating func pageSnapshot(key: [UInt8], value: [UInt8], verifier: BatchVerifier) {
        if let other = found[key], !verifier.newer(value, than: other, key: key) { return }
        found[key] = value
    }

    mutating func treeSnapshot(key: [UInt8], value: [UInt8]) { kept[key] = value }

    mutating func metadata(key: [UInt8], value: [UInt8]) { metadata.append((key, value)) }

    /// Sorts what was received into ``snapshots``.
    mutating func finish() {
        fromPages = found.keys.reduce(0) { $0 + (kept[$1] == nil ? 1 : 0) }
        kept.merge(found) { tree, _ in tree }
        snapshots = kept.sorted { $0.key.lexicographicallyPrecedes($1.key) }.map { ($0.key, $0.value) }
        kept = [:]
        found = [:]
    }

    /// The damage record for `analysis`.
    func damage(_ analysis: LMDBFile.Analysis, setAside: String?) -> StoreDamage {
        StoreDamage(found: analysis.summary, expected: expected, salvaged: snapshots.count,
                    recoveredFromPages: fromPages, metadataSalvaged: metadata.count, setAsidePath: setAside)
    }
}

extension LMDBFile {
    /// Reads the entries of `analysis`'s trees that can be proven intact, all in memory.
    func contents(_ a: Analysis) throws(StoreError) -> StoreContents {
        var out = StoreContents()
        out.expected = try readContents(a, into: &out)
        out.finish()
        return out
    }

    /// Passes the entries of `analysis`'s trees that can be proven intact to `sink`,
    /// one at a time (see ``ContentSink`` for the order); returns the `snapshots`
    /// database's own count, when its record was read.
    ///
    /// With an intact file, that is every entry. With a damaged one:
    /// - a snapshot of version 1 must decode, its key must start with its creation
    ///   time, and its record must pass the owner's ``SnapshotStore/RecordCheck`` (the
    ///   uploader's: a request whose body is a batch frame that decodes whole with its
    ///   checksum); values of another version, found in a sound tree, are kept as they
    ///   are;
    /// - when the `snapshots` tree could not be walked whole, or a meta page is
    ///   damaged (so the newest commit is unknown), every leaf page no tree reached
    ///   is read as well, and its entries are kept when they pass the same test and
    ///   their body is a batch that verifies. Pages the free-page tree lists as free
    ///   are skipped when both meta pages are sound (they hold deleted snapshots).
    ///   A snapshot found twice keeps the tree's copy, or else the copy with more
    ///   attempts.
    func readContents(_ a: Analysis, into sink: inout some ContentSink) throws(StoreError) -> Int? {
        let strict = !a.intact
        let verifier = BatchVerifier(recordCheck)
        if !a.bothMetas || !snapshotsTreeSound(a) {
            try scanPages(a, verifier: verifier) { (key, value) throws(StoreError) in
                try sink.pageSnapshot(key: key, value: value, verifier: verifier)
            }
        }
        var expected: Int?
        if let tree = a.trees[Self.snapshotsTree] {
            expected = Int(clamping: tree.record.entries)
            for e in tree.entries {
                let node = a.pages.nodes[e.node]
                let key = try key(node, page: e.page, pageSize: a.pageSize)
                guard let value = try value(node, page: e.page, a) else { continue }
                if !strict || verifier.accepts(key: key, value: value, fromTree: true) {
                    try sink.treeSnapshot(key: key, value: value)
                }
            }
        }
        if let tree = a.trees[Self.metaTree] {
            for e in tree.entries {
                let node = a.pages.nodes[e.node]
                if let value = try value(node, page: e.page, a) {
                    try sink.metadata(key: try key(node, page: e.page, pageSize: a.pageSize), value: value)
                }
            }
        }
        return expected
    }

    /// Whether the `snapshots` tree was walked whole, or is surely absent.
    private func snapshotsTreeSound(_ a: Analysis) -> Bool {
        guard a.meta != nil, let main = a.trees[Self.mainTree] else { return false }
        return a.trees[Self.snapshotsTree]?.complete ?? main.complete
    }

    /// Calls `found` for each snapshot on a leaf page no tree reached.
    private func scanPages(_ a: Analysis, verifier: BatchVerifier,
                           _ found: ([UInt8], [UInt8]) throws(StoreError) -> Void) throws(StoreError) {
        let limit = a.meta.map { min(Int($0.lastPage) + 1, a.pages.count) } ?? a.pages.count
        guard limit > LMDBLayout.metaPages else { return }
        for p in LMDBLayout.metaPages..<limit {
            if p < a.used.count && a.used[p] { continue }
            if a.bothMetas && p < a.free.count && a.free[p] { continue }
            guard case .leaf(let first, let count) = a.pages.kinds[p] else { continue }
            for n in first..<(first + count) {
                let node = a.pages.nodes[n]
                guard node.keySize == 16, node.flags & ~LMDBLayout.bigData == 0 else { continue }
                if node.flags & LMDBLayout.bigData != 0 {
                    guard node.page >= UInt64(LMDBLayout.metaPages), node.page < UInt64(a.pages.count),
                          case .overflow(let pages) = a.pages.kinds[Int(node.page)],
                          pages >= LMDBLayout.overflowPages(node.dataSize, pageSize: a.pageSize),
                          Int(node.page) + pages <= a.pages.count else { continue }
                }
                let key = try key(node, page: p, pageSize: a.pageSize)
                guard let value = try value(node, page: p, a),
                      verifier.accepts(key: key, value: value, fromTree: false) else { continue }
                try found(key, value)
            }
        }
    }
}

/// Decides whether a snapshot value read from a damaged file is intact.
final class BatchVerifier {
    private let recordCheck: SnapshotStore.RecordCheck?

    init(_ recordCheck: SnapshotStore.RecordCheck?) { self.recordCheck = recordCheck }

    /// See ``LMDBFile/contents(_:)``: `fromTree` says whether the value comes from a
    /// tree walked from a meta page (a value of another version, or a record that cannot
    /// be verified, is then kept as it is) or from a page no tree reached.
    func accepts(key: [UInt8], value: [UInt8], fromTree: Bool) -> Bool {
        guard let version = value.first else { return false }
        guard version == SnapshotCodec.version else { return fromTree }
        guard let s = SnapshotCodec.decode(id: SnapshotID(bytes: key), value), key.count == 16,
              key.prefix(8).reduce(UInt64(0), { $0 << 8 | UInt64($1) }) == s.createdAt else { return false }
        switch recordCheck?.check(s.record) ?? .unverifiable {
        case .intact: return true
        case .unverifiable: return fromTree
        case .damaged: return false
        }
    }

    /// Of two copies of one snapshot, whether `a` is the later one (more attempts, or
    /// a later next attempt).
    func newer(_ a: [UInt8], than b: [UInt8], key: [UInt8]) -> Bool {
        let id = SnapshotID(bytes: key)
        guard let x = SnapshotCodec.decode(id: id, a), let y = SnapshotCodec.decode(id: id, b) else { return false }
        return (x.attempts, x.nextAttemptAt) > (y.attempts, y.nextAttemptAt)
    }
}
