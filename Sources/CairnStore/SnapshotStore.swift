package import CairnBase
import CLMDB
import FoundationEssentials
import Glibc

/// An error from the LMDB store: the LMDB (or system) function, its code, the file
/// or directory concerned, and `mdb_strerror`'s text.
package struct StoreError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The function that failed, such as `"mdb_put"`.
    package let function: String
    /// LMDB's code (negative `MDB_*`), an `errno` value, or one of Cairn's codes below.
    package let code: Int32
    /// The file or directory the call was about, when there is one.
    package let path: String?
    /// Creates an error for `code` returned by `function` about `path`.
    package init(_ code: Int32, function: String, path: String? = nil) {
        self.code = code
        self.function = function
        self.path = path
    }
    /// LMDB's description of ``code`` (it also describes `errno` values, as
    /// `strerror` does).
    package var message: String {
        switch code {
        case Self.overCap: "the snapshot does not fit under the store's size cap"
        case Self.inUse: "the store is damaged and another process has it open; it was left as it is"
        case Self.unsettled: "data.mdb kept changing while it was read"
        default: String(cString: mdb_strerror(code))
        }
    }
    /// `"<function> <path>: <message> (<code>)"`, without the path when there is none.
    package var description: String {
        "\(function)\(path.map { " \($0)" } ?? ""): \(message) (\(code))"
    }
    /// The map is full (`MDB_MAP_FULL`).
    package static let mapFull = MDB_MAP_FULL
    /// No space left on the device.
    package static let noSpace = ENOSPC
    /// The snapshot cannot fit under the size cap, even after evicting everything of
    /// its priority or lower (a code outside LMDB's range).
    package static let overCap: Int32 = -30000
    /// The store is damaged, but another process has the environment open, so it is
    /// neither salvaged nor set aside from under it.
    package static let inUse: Int32 = -30001
    /// The data file changed under every one of several reads (another process kept
    /// committing); nothing could be read consistently.
    package static let unsettled: Int32 = -30002
}

/// The identifier of a stored snapshot: 16 bytes, big-endian creation time in
/// milliseconds then a per-process sequence, so byte order is time order.
package struct SnapshotID: Hashable, Comparable, Sendable, CustomStringConvertible {
    /// The 16 key bytes, as stored.
    package let bytes: [UInt8]
    /// Wraps stored key bytes.
    package init(bytes: [UInt8]) { self.bytes = bytes }
    /// Orders by bytes: by creation time, then sequence.
    package static func < (a: SnapshotID, b: SnapshotID) -> Bool { a.bytes.lexicographicallyPrecedes(b.bytes) }
    /// Hexadecimal.
    package var description: String { Hex.string(bytes) }
}

/// A stored record (for the uploader, a request) with its delivery state.
package struct Snapshot: Sendable, Equatable {
    /// Its key in the store.
    package var id: SnapshotID
    /// The record, exactly as stored: bytes the store does not interpret (the uploader
    /// keeps a request in it; docs/FORMATS.md, "Request record").
    package var record: [UInt8]
    /// Its priority.
    package var priority: Tier
    /// When it was built, in milliseconds since the Unix epoch.
    package var createdAt: UInt64
    /// Attempts made so far (in any process).
    package var attempts: UInt32
    /// The earliest time of the next attempt, in milliseconds since the Unix epoch.
    package var nextAttemptAt: UInt64
}

/// The durable store of what could not be delivered yet (records: for the uploader,
/// requests) and of the SDK's metadata, in one LMDB environment in the data directory.
/// It knows records as bytes with a priority, a creation time and a delivery state;
/// what they mean is their owner's (who also tells a salvage how to check one, with a
/// ``RecordCheck``).
///
/// Snapshots are keyed by time, so replay goes oldest first; their total size and age
/// are capped, and what the caps evict is counted by reason. Critical snapshots are
/// committed with a durable sync; the rest are committed without one and synced by
/// ``sync()``, which the uploader calls periodically. When the map fills, it grows
/// up to twice the size cap and then evicts; a full disk fails the call with a
/// ``StoreError`` and leaves the store as it was.
///
/// Every file it opens is untrusted. Before LMDB maps `data.mdb`, the file is read
/// with `pread` and checked (meta pages, length, every page of every tree; see
/// `LMDBFile`), because LMDB reads a short or damaged file through its mapping and
/// dies of SIGBUS or SIGSEGV. A damaged store (or one LMDB refuses) is salvaged: the
/// snapshots that can be proven intact and the readable metadata go into a fresh
/// store, the damaged directory is renamed aside (never deleted), and
/// ``Stats/damage`` says what was found, kept and lost. Permission and other I/O
/// errors are thrown, naming the path, and set nothing aside. ``inspect(directory:)``
/// reads a store without writing anything, for tools. The layout is in
/// docs/FORMATS.md, readable with `mdb_dump` and Python's `lmdb`.
///
/// ```swift
/// let store = try SnapshotStore(directory: dataDirectory + "/store")
/// let id = try store.put(request.record, priority: .sampled)
/// for snapshot in try store.oldest(limit: 10) { … try store.delete(snapshot.id) }
/// ```
///
/// A full disk: LMDB copies every page it changes, so even a delete needs a few free
/// pages, and the data file never shrinks. Were puts to take the last of them, no
/// delivered request could be deleted again. So the store keeps a reserve file
/// (`reserve`, 256 KiB, allocated when the store opens) and, when a write finds the disk
/// full (`ENOSPC`, `EDQUOT`, or LMDB's `EIO` for a short write), releases it for the
/// deletes and bookkeeping that free space, and from then on refuses puts that would
/// take the store within the reserve's size of what it held at that moment
/// (``Stats/diskFullCap``), so the pages the deletes free are kept for the next
/// deletes. Once a second, a refused put tries to allocate the reserve again: when the
/// disk has room once more, the limit is lifted.
///
/// Thread-safety: every method may be called from any thread. LMDB serialises write
/// transactions itself and read transactions are not tied to threads (`MDB_NOTLS`);
/// the Swift-side counters and the map size are guarded by a mutex.
package final class SnapshotStore: @unchecked Sendable {
    /// Limits of the store.
    package struct Options: Sendable, Equatable {
        /// Snapshots older than this are evicted (counted as `age`). Default 7 days.
        package var maxAge: Duration
        /// The total size of stored snapshots (keys and values) is kept under this;
        /// the lowest priority, oldest first, is evicted (counted as `size`).
        /// Default 32 MiB.
        package var maxBytes: Int
        /// How a salvage checks a record (nil: see ``RecordCheck``).
        package var recordCheck: RecordCheck?
        /// How long LMDB's own read of an existing store may take, with an LMDB whose file
        /// layout the damage guard does not know (``LMDBVersion``); a store that takes
        /// longer is set aside.
        package var probeTimeout: Duration = .seconds(30)
        /// Creates options.
        package init(maxAge: Duration = .seconds(7 * 24 * 3600), maxBytes: Int = 32 << 20,
                    recordCheck: RecordCheck? = nil) {
            self.maxAge = maxAge
            self.maxBytes = maxBytes
            self.recordCheck = recordCheck
        }
    }

    /// What the store has done since it was opened.
    package struct Stats: Sendable, Equatable {
        /// Snapshots stored now.
        package var count: Int
        /// Their total size in bytes (keys and values).
        package var bytes: Int
        /// Snapshots evicted for age, since open.
        package var evictedAge: Int
        /// Snapshots evicted to stay under the size cap, since open, by priority.
        package var evictedSize: [Tier: Int]
        /// Puts refused because the store could not hold them (disk full, or a single
        /// snapshot larger than the cap), since open.
        package var failedPuts: Int
        /// Whether a damaged environment was set aside when the store was opened.
        package var setAside: Bool
        /// What was found, salvaged and lost when the store was opened damaged; nil when
        /// it opened intact.
        package var damage: StoreDamage?
        /// The LMDB map size now.
        package var mapSize: Int
        /// The largest total size puts may reach while the disk is full (see
        /// ``SnapshotStore`` "A full disk"); nil when the disk has room.
        package var diskFullCap: Int?
    }

    private struct State {
        var mapSize: Int
        var bytes: Int
        var count: Int
        var commits: UInt64 = 0
        var evictedAge = 0
        var evictedSize: [Tier: Int] = [:]
        var failedPuts = 0
        var sequence: UInt64
        /// Set when a write found the disk full: puts keep the store under it.
        var diskFullCap: Int?
        /// When a put last looked for room again (milliseconds since the epoch).
        var lastRoomCheck: UInt64 = 0
        /// The snapshots' bytes by tier (``evictionTier(_:)``'s store code), so that an
        /// eviction knows which tiers it takes from before it reads a key.
        var tierBytes: [Int]
    }

    private let env: OpaquePointer
    private let snapshots: MDB_dbi
    private let meta: MDB_dbi
    private let state: Locked<State>
    /// Held for every transaction: resizing the map needs no transaction active in
    /// the process, and counters stay consistent with what was committed. (It guards an
    /// unused Int, not `()`: ThreadSanitizer places the exclusivity access of a
    /// zero-sized value on the object's header, which other threads read to retain it,
    /// and reported that as a race.)
    private let serial = Locked(0)
    /// Where LMDB maps the data file (start address, length), found in /proc/self/maps
    /// on first need and again after the map grows; 0 when it could not be found.
    private let mapped = Locked<(address: UInt, length: Int)?>(nil)
    /// Fault injection for tests: while set, every write fails with `EIO`, as a failing
    /// disk's would (a real store cannot be made to fail on demand).
    package let failingWrites = Locked(false)
    private let damage: StoreDamage?

    /// The directory holding the environment.
    package let directory: String
    /// The store's limits.
    package let options: Options

    /// What evicting a snapshot loses: its record (for its owner to count what it
    /// held) and why (`store_age` or `store_size`).
    package struct Eviction: Sendable {
        /// The evicted record; empty when it could not be read back.
        package var record: [UInt8]
        /// ``DropReason/storeAge`` or ``DropReason/storeSize``.
        package var reason: DropReason
    }

    /// How a salvage decides that a record read from a damaged store is intact (the
    /// store cannot: records are its owner's bytes). Without one, a salvage keeps the
    /// records its trees still reach and none found only on loose pages.
    package struct RecordCheck: Sendable, Equatable {
        /// What the check says of one record.
        package enum Verdict: Sendable {
            /// Whole and consistent: kept.
            case intact
            /// Not a record, or a damaged one: left out.
            case damaged
            /// Cannot be checked here: kept only when the store's tree still reached it.
            case unverifiable
        }
        /// What the check is called: two checks with one name are the same check.
        package let name: String
        let check: @Sendable ([UInt8]) -> Verdict

        /// A check named `name`.
        package init(name: String, _ check: @escaping @Sendable ([UInt8]) -> Verdict) {
            self.name = name
            self.check = check
        }

        /// What the check says of `record`.
        package func verdict(_ record: [UInt8]) -> Verdict { check(record) }

        /// The checks' names are equal.
        package static func == (a: RecordCheck, b: RecordCheck) -> Bool { a.name == b.name }
    }

    /// Called with what is evicted, inside the transaction that evicts it, before it
    /// commits: a process killed right after the commit has already counted the loss
    /// (a commit that then fails counts it once too often, never too few). It runs on
    /// the thread that stores, under the store's lock: it must not call the store.
    package var evictionObserver: (@Sendable ([Eviction]) -> Void)? {
        get { observer.withLock { $0.call } }
        set { observer.withLock { $0.call = newValue } }
    }
    private struct Observer { var call: (@Sendable ([Eviction]) -> Void)? }
    private let observer = Locked(Observer())

    /// Opens (creating if needed) the store in `directory`.
    ///
    /// An existing `data.mdb` is checked before LMDB maps it. When it is damaged, or
    /// LMDB refuses it or fails on the first full read, it is salvaged into a fresh
    /// store and set aside (see the type's description); ``Stats/damage`` tells.
    ///
    /// - Throws: ``StoreError`` naming the path: the directory cannot be created or
    ///   read (`EACCES`, `ENOTDIR`, `EROFS`, `ENOSPC`…), `data.mdb` is not a file, a
    ///   damaged store cannot be salvaged (the damaged one is then left in place), or
    ///   ``StoreError/inUse`` when another process has a damaged store open.
    package init(directory: String, options: Options = Options()) throws(StoreError) {
        self.directory = directory
        self.options = options
        let mapSize = Self.initialMapSize(options)
        var damage: StoreDamage?
        if LMDBVersion.known {
            if let analysis = try Self.check(directory, options: options), !analysis.intact {
                damage = try Self.salvage(directory, found: nil, options: options)
            }
        } else {
            damage = try Self.guardUnknownLayout(directory, options: options)
        }
        var opened = try Self.open(directory, mapSize: mapSize, damage: &damage, options: options)
        var tally: (count: Int, bytes: Int, tierBytes: [Int])
        do {
            tally = try Self.tally(opened.env, opened.snapshots, release: Self.mappedPagesReleaser(directory))
        } catch where Self.isUnreadable(error.code) && damage == nil {
            mdb_env_close(opened.env)
            damage = try Self.salvage(directory, found: "LMDB: \(error)", options: options)
            opened = try Self.open(directory, mapSize: mapSize, damage: &damage, options: options)
            tally = try Self.tally(opened.env, opened.snapshots, release: Self.mappedPagesReleaser(directory))
        }
        (env, snapshots, meta) = opened
        self.damage = damage
        var info = MDB_envinfo()
        mdb_env_info(env, &info)
        state = Locked(State(mapSize: max(mapSize, Int(info.me_mapsize)), bytes: tally.bytes, count: tally.count,
                            sequence: UInt64(UInt32.random(in: 0...UInt32.max)) << 32, tierBytes: tally.tierBytes))
        Self.allocateReserve(directory)
    }

    /// Reads the store in `directory` without writing anything: no lock file, no
    /// rename, no repair. It works on a read-only directory and beside a running SDK
    /// (a read that a commit overlapped is made again).
    ///
    /// `data.mdb` is read with `pread` and checked as ``init(directory:options:)``
    /// does; the snapshots and metadata that can be proven intact are returned, with
    /// the damage found, if any. A version-1 value that does not decode is damage too.
    ///
    /// - Throws: ``StoreError`` naming the path: `ENOENT` when there is no store
    ///   (no directory, or no `data.mdb`), `EACCES` and other `errno` values when it
    ///   cannot be read, `ENOTDIR` or `EISDIR` for a file where a directory should be
    ///   or the reverse, ``StoreError/unsettled`` when commits kept overlapping.
    package static func inspect(directory: String, recordCheck: RecordCheck? = nil) throws(StoreError) -> StoreInspection {
        var st = stat()
        if stat(directory, &st) != 0 { throw StoreError(errno, function: "stat", path: directory) }
        if st.st_mode & S_IFMT != S_IFDIR { throw StoreError(ENOTDIR, function: "stat", path: directory) }
        var out = StoreInspection(snapshots: [], bytes: 0, otherVersions: 0, metadata: [], damage: nil)
        let analysis: LMDBFile.Analysis?, contents: StoreContents
        if LMDBVersion.known {
            (analysis, contents) = try examine(directory + "/data.mdb", maxSize: LMDBFile.largestStore, contents: true,
                                               recordCheck: recordCheck)
        } else {
            // LMDB reads it, once a child has read it whole without harm.
            if access(directory + "/data.mdb", F_OK) != 0 {
                throw StoreError(ENOENT, function: "open", path: directory + "/data.mdb")
            }
            if let found = try unreadableByLMDB(directory, writes: false, timeout: Options().probeTimeout) {
                out.damage = .unsalvaged(found: found, setAside: nil)
                return out
            }
            analysis = nil
            contents = try readWithLMDB(directory)
        }
        var undecodable = 0
        for (key, value) in contents.snapshots {
            if let s = SnapshotCodec.decode(id: SnapshotID(bytes: key), value) {
                out.snapshots.append(s)
                out.bytes += key.count + value.count
            } else if value.first == SnapshotCodec.version {
                undecodable += 1
            } else {
                out.otherVersions += 1
            }
        }
        out.metadata = contents.metadata.map { StoreMetadataEntry(key: String(decoding: $0.key, as: UTF8.self), value: $0.value) }
        if let analysis, !analysis.intact {
            var d = contents.damage(analysis, setAside: nil)
            d.salvaged = out.snapshots.count + out.otherVersions
            out.damage = d
        } else if undecodable > 0 {
            out.damage = StoreDamage(found: "\(undecodable) snapshot values do not decode", expected: contents.expected,
                                     salvaged: out.snapshots.count + out.otherVersions, recoveredFromPages: 0,
                                     metadataSalvaged: out.metadata.count, setAsidePath: nil)
        }
        return out
    }

    deinit { mdb_env_close(env) }

    // MARK: Snapshots

    /// Stores `record` and returns its id.
    ///
    /// - Parameters:
    ///   - durable: Sync to disk before returning. Defaults to `true` for
    ///     ``Tier/critical`` and `false` otherwise.
    ///   - attempts: Attempts already made before storing (they count toward the
    ///     retry number sent with later attempts).
    ///   - now: The creation time in milliseconds since the epoch.
    ///   - metadata: Metadata entries set in the same transaction: they are committed
    ///     together with the snapshot or not at all.
    /// - Throws: ``StoreError`` when the snapshot cannot be stored (full disk, or larger
    ///   than the size cap); the failure is counted and nothing else changes.
    @discardableResult
    package func put(_ record: [UInt8], priority: Tier, durable: Bool? = nil, attempts: UInt32 = 0,
                    now: UInt64 = SnapshotStore.nowMillis(),
                    metadata: [(key: String, value: [UInt8])] = []) throws(StoreError) -> SnapshotID {
        let ids = try put(all: [record], priority: priority, durable: durable, attempts: attempts, now: now,
                          metadata: metadata)
        return ids[0]
    }

    /// Stores `records` in one transaction, all of them or none (a kill at any instant
    /// leaves every one or none), and returns their ids, in order; the parameters and
    /// errors as ``put(_:priority:durable:attempts:now:metadata:)``'s, the size cap
    /// applying to them together.
    @discardableResult
    package func put(all records: [[UInt8]], priority: Tier, durable: Bool? = nil, attempts: UInt32 = 0,
                    now: UInt64 = SnapshotStore.nowMillis(),
                    metadata: [(key: String, value: [UInt8])] = []) throws(StoreError) -> [SnapshotID] {
        let ids = records.map { _ in nextID(now: now) }
        let values = zip(ids, records).map { id, record in
            SnapshotCodec.encode(Snapshot(id: id, record: record, priority: priority, createdAt: now,
                                          attempts: attempts, nextAttemptAt: now))
        }
        let size = zip(ids, values).reduce(0) { $0 + $1.0.bytes.count + $1.1.count }
        do throws(StoreError) {
            if size > options.maxBytes { throw StoreError(StoreError.overCap, function: "SnapshotStore.put") }
            if !roomWhileDiskFull(for: size) { throw StoreError(ENOSPC, function: "SnapshotStore.put", path: directory) }
            var victims: [Victim] = []
            try write(spending: true, { txn throws(StoreError) in
                victims = try self.evictForSpace(txn, incoming: size, incomingPriority: priority)
                if !victims.isEmpty {
                    self.evictionObserver?(victims.map { Eviction(record: $0.record, reason: .storeSize) })
                }
                for (id, value) in zip(ids, values) { try Self.put(txn, self.snapshots, key: id.bytes, value: value) }
                for m in metadata { try Self.put(txn, self.meta, key: Array(m.key.utf8), value: m.value) }
            }, committed: {
                self.state.withLock { s in
                    for v in victims {
                        s.bytes -= v.size
                        s.count -= 1
                        s.tierBytes[Int(v.priority.storeCode)] -= v.size
                        s.evictedSize[v.priority, default: 0] += 1
                    }
                    s.bytes += size
                    s.count += records.count
                    s.tierBytes[Int(priority.storeCode)] += size
                }
            })
        } catch {
            state.withLock { $0.failedPuts += 1 }
            throw error
        }
        if durable ?? (priority == .critical) { try sync() }
        return ids
    }

    /// The snapshot with `id`, or `nil`.
    package func get(_ id: SnapshotID) throws(StoreError) -> Snapshot? {
        try read { txn throws(StoreError) in
            guard let value = try Self.get(txn, self.snapshots, key: id.bytes) else { return nil }
            return SnapshotCodec.decode(id: id, value)
        }
    }

    /// Up to `limit` snapshots, oldest first; with `readyAt`, only those whose next
    /// attempt is due by then. Values that cannot be decoded are skipped.
    package func oldest(limit: Int, readyAt: UInt64? = nil) throws(StoreError) -> [Snapshot] {
        try read { txn throws(StoreError) in
            var out: [Snapshot] = []
            // Only the headers are read while looking: a record is copied (its pages
            // touched) only when it is taken.
            try Self.forEach(txn, self.snapshots, release: releaseMappedPages) { key, value in
                guard let header = SnapshotCodec.header(value) else { return true }
                if readyAt.map({ header.nextAttemptAt <= $0 }) ?? true,
                   let s = SnapshotCodec.decode(id: SnapshotID(bytes: Array(key)), Array(value)) {
                    out.append(s)
                }
                return out.count < limit
            }
            return out
        }
    }

    /// Removes the snapshot with `id` (delivered, or dropped by policy). Removing a
    /// snapshot that is not there is not an error.
    package func delete(_ id: SnapshotID) throws(StoreError) {
        var removed = 0, tier = 0
        try write({ txn throws(StoreError) in
            if let value = try Self.get(txn, self.snapshots, key: id.bytes) {
                removed = id.bytes.count + value.count
                tier = value.withUnsafeBytes { Int(Self.evictionTier($0).storeCode) }
                try Self.del(txn, self.snapshots, key: id.bytes)
            }
        }, committed: {
            if removed > 0 { self.state.withLock { $0.bytes -= removed; $0.count -= 1; $0.tierBytes[tier] -= removed } }
        })
    }

    /// Records a failed attempt: increments the attempt count (unless
    /// `countingAttempt` is false: the request was put off, not tried) and sets the time
    /// of the next one. The request bytes are untouched.
    package func recordAttempt(_ id: SnapshotID, nextAttemptAt: UInt64, countingAttempt: Bool = true) throws(StoreError) {
        try write { txn throws(StoreError) in
            guard let value = try Self.get(txn, self.snapshots, key: id.bytes),
                  var s = SnapshotCodec.decode(id: id, value) else { return }
            if countingAttempt { s.attempts &+= 1 }
            s.nextAttemptAt = nextAttemptAt
            try Self.put(txn, self.snapshots, key: id.bytes, value: SnapshotCodec.encode(s))
        }
    }

    /// Evicts snapshots created before `now - maxAge`; returns how many.
    @discardableResult
    package func evictExpired(now: UInt64 = SnapshotStore.nowMillis()) throws(StoreError) -> Int {
        let ageMillis = UInt64(max(0, options.maxAge.components.seconds)) * 1000
        let cutoff = now > ageMillis ? now - ageMillis : 0
        var evicted: [(key: [UInt8], size: Int, tier: Int, record: [UInt8])] = []
        try write({ txn throws(StoreError) in
            evicted = []
            try Self.forEach(txn, self.snapshots, release: releaseMappedPages) { key, value in
                guard let header = SnapshotCodec.header(value) else { return true }
                // Keys are time-ordered, so the first young one ends the scan.
                if header.createdAt >= cutoff { return false }
                evicted.append((Array(key), key.count + value.count, Int(header.priority.storeCode),
                                Array(value[SnapshotCodec.headerSize...])))
                return true
            }
            for e in evicted { try Self.del(txn, self.snapshots, key: e.key) }
            if !evicted.isEmpty {
                self.evictionObserver?(evicted.map { Eviction(record: $0.record, reason: .storeAge) })
            }
        }, committed: {
            let freed = evicted.reduce(0) { $0 + $1.size }
            self.state.withLock {
                $0.bytes -= freed
                $0.count -= evicted.count
                $0.evictedAge += evicted.count
                for e in evicted { $0.tierBytes[e.tier] -= e.size }
            }
        })
        return evicted.count
    }

    /// Flushes committed transactions to disk (`mdb_env_sync`).
    package func sync() throws(StoreError) {
        let rc = mdb_env_sync(env, 1)
        if rc != 0 { throw StoreError(rc, function: "mdb_env_sync") }
    }

    /// Snapshots stored now (``Stats/count`` without the rest of the counters).
    package var count: Int { state.withLock { $0.count } }

    /// Write transactions committed since the store was opened: a caller that syncs
    /// (``sync()``) on a timer need not when it has not changed.
    package var commits: UInt64 { state.withLock { $0.commits } }

    /// The store's counters.
    package var stats: Stats {
        state.withLock { s in
            Stats(count: s.count, bytes: s.bytes, evictedAge: s.evictedAge, evictedSize: s.evictedSize,
                  failedPuts: s.failedPuts, setAside: damage != nil, damage: damage, mapSize: s.mapSize,
                  diskFullCap: s.diskFullCap)
        }
    }

    // MARK: Metadata

    /// The metadata value stored under `key`, or `nil`.
    package func metadata(_ key: String) throws(StoreError) -> [UInt8]? {
        try read { txn throws(StoreError) in try Self.get(txn, self.meta, key: Array(key.utf8)) }
    }

    /// Stores a metadata value (install time, last run state, config cache, counters).
    /// With `durable`, syncs before returning.
    package func setMetadata(_ key: String, _ value: [UInt8], durable: Bool = false) throws(StoreError) {
        try write { txn throws(StoreError) in try Self.put(txn, self.meta, key: Array(key.utf8), value: value) }
        if durable { try sync() }
    }

    /// Milliseconds since the Unix epoch, now.
    package static func nowMillis() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return UInt64(max(0, ts.tv_sec)) * 1000 + UInt64(max(0, ts.tv_nsec)) / 1_000_000
    }

    // MARK: Internals

    private func nextID(now: UInt64) -> SnapshotID {
        let seq = state.withLock { s -> UInt64 in s.sequence &+= 1; return s.sequence }
        var bytes = [UInt8](repeating: 0, count: 16)
        for i in 0..<8 {
            bytes[i] = UInt8(truncatingIfNeeded: now >> (56 - 8 * i))
            bytes[8 + i] = UInt8(truncatingIfNeeded: seq >> (56 - 8 * i))
        }
        return SnapshotID(bytes: bytes)
    }

    private struct Victim {
        let key: [UInt8]
        let size: Int
        let priority: Tier
        var record: [UInt8] = []
    }

    /// Makes room for `incoming` bytes under the size cap inside `txn`: deletes the
    /// lowest priority first, oldest first within it, but never a snapshot of higher
    /// priority than the one coming in (that one is refused instead). Returns what it
    /// deleted, to be counted once the transaction commits.
    private func evictForSpace(_ txn: OpaquePointer, incoming: Int, incomingPriority: Tier) throws(StoreError) -> [Victim] {
        let (current, tierBytes) = state.withLock { ($0.bytes, $0.tierBytes) }
        var excess = current + incoming - options.maxBytes
        guard excess > 0 else { return [] }
        // What each tier must give, from the least important up to the incoming one's:
        // the lower tiers whole, the last the bytes still missing. The scan (oldest
        // first) keeps only what is needed and stops once every tier has given it, so
        // a put at the cap reads a few keys, not all of them. When the tiers allowed
        // cannot make the room, every key is read (and the put refused).
        var need = [Int](repeating: 0, count: tierBytes.count)
        var missing = excess
        for code in stride(from: tierBytes.count - 1, through: Int(incomingPriority.storeCode), by: -1) where missing > 0 {
            need[code] = min(tierBytes[code], missing)
            missing -= need[code]
        }
        if missing > 0 { need = tierBytes.map { _ in Int.max } }
        var taken = [Int](repeating: 0, count: tierBytes.count)
        var candidates: [Victim] = []
        try Self.forEach(txn, snapshots, release: releaseMappedPages) { key, value in
            let priority = Self.evictionTier(value)
            let code = Int(priority.storeCode)
            guard taken[code] < need[code] else { return true }
            candidates.append(Victim(key: Array(key), size: key.count + value.count, priority: priority))
            taken[code] += key.count + value.count
            return zip(taken, need).contains { $0 < $1 }
        }
        // Keys were visited oldest first; a stable sort keeps that within a priority.
        let order = candidates.enumerated().sorted {
            $0.element.priority != $1.element.priority ? $0.element.priority > $1.element.priority : $0.offset < $1.offset
        }
        var victims: [Victim] = []
        for (_, c) in order where excess > 0 {
            if c.priority < incomingPriority { break }
            victims.append(c)
            excess -= c.size
        }
        if excess > 0 { throw StoreError(StoreError.overCap, function: "SnapshotStore.put") }
        for i in victims.indices {
            if let value = try Self.get(txn, snapshots, key: victims[i].key) {
                victims[i].record = SnapshotCodec.decode(id: SnapshotID(bytes: victims[i].key), value)?.record ?? []
            }
            try Self.del(txn, snapshots, key: victims[i].key)
        }
        return victims
    }

    /// Counts the snapshots and their bytes by tier: the first full read of a fresh
    /// open. It reads each value's priority byte, a page per snapshot (and the kernel
    /// maps the pages around it): the pages are released every 16 entries, and at the
    /// end, or opening a full store (32 MiB) mapped most of it (+23 MiB VmHWM).
    private static func tally(_ env: OpaquePointer, _ dbi: MDB_dbi, release: @escaping () -> Void) throws(StoreError)
        -> (count: Int, bytes: Int, tierBytes: [Int])
    {
        var txn: OpaquePointer?
        let rc = mdb_txn_begin(env, nil, UInt32(MDB_RDONLY), &txn)
        guard rc == 0, let txn else { throw StoreError(rc, function: "mdb_txn_begin") }
        defer { mdb_txn_abort(txn) }
        var bytes = 0, count = 0
        var tierBytes = [Int](repeating: 0, count: Tier.allCases.count)
        defer { release() }
        try forEach(txn, dbi, release: release) { key, value in
            bytes += key.count + value.count
            tierBytes[Int(evictionTier(value).storeCode)] += key.count + value.count
            count += 1
            return true
        }
        return (count, bytes, tierBytes)
    }

    /// The tier a snapshot is evicted as: its value's priority byte, or the first to go
    /// (``Tier/debug``) for a value without a known one.
    private static func evictionTier(_ value: UnsafeRawBufferPointer) -> Tier {
        value.count > 1 ? Tier(storeCode: value[1]) ?? .debug : .debug
    }

    /// Runs `body` in a write transaction and commits it, then runs `committed`, all
    /// under the store's lock. When the map is full, grows it (up to twice the size cap
    /// plus headroom) and runs `body` again. When the disk is full, limits puts from then
    /// on, and a write that is not `spending` (one that frees space or keeps its size)
    /// runs again in the space of the released reserve.
    private func write(spending: Bool = false, _ body: (OpaquePointer) throws(StoreError) -> Void,
                       committed: () -> Void = {}) throws(StoreError) {
        if failingWrites.withLock({ $0 }) { throw StoreError(EIO, function: "mdb_txn_commit") }
        try serial.withLock { _ throws(StoreError) in
            var reserveReleased = false
            for _ in 0..<8 {
                var txn: OpaquePointer?
                var rc = mdb_txn_begin(env, nil, 0, &txn)
                guard rc == 0, let txn else { throw StoreError(rc, function: "mdb_txn_begin") }
                do throws(StoreError) {
                    try body(txn)
                    rc = mdb_txn_commit(txn)
                } catch {
                    mdb_txn_abort(txn)
                    guard error.code == MDB_MAP_FULL else { throw error }
                    rc = error.code
                }
                if rc == 0 {
                    committed()
                    state.withLock { $0.commits &+= 1 }
                    releaseMappedPages()
                    return
                }
                if Self.meansDiskFull(rc) {
                    // Set once per full disk (a later put refused under it lowers nothing:
                    // it took no pages, and what puts leave free is the deletes' share).
                    state.withLock { s in s.diskFullCap = s.diskFullCap ?? max(0, s.bytes - Self.reserveBytes) }
                    if !spending && !reserveReleased && unlink(directory + "/" + Self.reserveName) == 0 {
                        reserveReleased = true
                        continue
                    }
                }
                guard rc == MDB_MAP_FULL, try growMap() else { throw StoreError(rc, function: "mdb_txn_commit") }
            }
            throw StoreError(MDB_MAP_FULL, function: "mdb_txn_commit")
        }
    }

    // MARK: A full disk

    /// The reserve file's name in the store's directory, and its size.
    static let reserveName = "reserve"
    static let reserveBytes = 256 << 10

    /// Whether LMDB's `rc` says the disk (or the user's quota) is full: `EIO` is what
    /// LMDB reports for a short write.
    private static func meansDiskFull(_ rc: Int32) -> Bool { rc == ENOSPC || rc == EDQUOT || rc == EIO }

    /// Allocates the reserve file when it is missing; false when the disk has no room
    /// for it (nothing is left behind then).
    @discardableResult
    private static func allocateReserve(_ directory: String) -> Bool {
        let path = directory + "/" + reserveName
        return reserveIsWhole(path) || allocate(path, keep: true)
    }

    /// Whether the disk has room again: the reserve allocated anew when it was
    /// released, or else room for as much again (allocated and removed).
    private static func diskHasRoom(_ directory: String) -> Bool {
        let path = directory + "/" + reserveName
        return reserveIsWhole(path) ? allocate(path + ".probe", keep: false) : allocate(path, keep: true)
    }

    /// Whether the reserve file at `path` is there with its whole size.
    private static func reserveIsWhole(_ path: String) -> Bool {
        var st = stat()
        return stat(path, &st) == 0 && Int(st.st_size) == reserveBytes
    }

    /// Creates `path` (0600) with `reserveBytes` allocated on disk; false when they
    /// cannot be, leaving no file. With `keep` false, removes it again.
    private static func allocate(_ path: String, keep: Bool) -> Bool {
        let fd = Glibc.open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return false }
        let rc = posix_fallocate(fd, 0, off_t(reserveBytes))
        close(fd)
        if rc != 0 || !keep { unlink(path) }
        return rc == 0
    }

    /// Whether a put of `size` bytes may be tried: always while the disk has room; while
    /// it is full, when the store stays under ``Stats/diskFullCap``, or when the reserve
    /// could be allocated again (tried once a second), which ends the limit.
    private func roomWhileDiskFull(for size: Int) -> Bool {
        let now = Self.nowMillis()
        let check: Bool? = state.withLock { s in
            guard let cap = s.diskFullCap else { return nil }
            if s.bytes + size <= cap { return nil }
            guard now >= s.lastRoomCheck + 1000 else { return false }
            s.lastRoomCheck = now
            return true
        }
        guard let check else { return true }
        guard check, serial.withLock({ _ in Self.diskHasRoom(directory) }) else { return false }
        state.withLock { $0.diskFullCap = nil }
        return true
    }

    /// Doubles the map size within the limit; false when already at the limit.
    private func growMap() throws(StoreError) -> Bool {
        let limit = Self.maxMapSize(options)
        let next: Int? = state.withLock { s in
            guard s.mapSize < limit else { return nil }
            s.mapSize = min(limit, s.mapSize * 2)
            return s.mapSize
        }
        guard let next else { return false }
        // Safe here: the caller holds the store's lock, so no transaction of this
        // process is active, as LMDB requires.
        let rc = mdb_env_set_mapsize(env, next)
        if rc != 0 { throw StoreError(rc, function: "mdb_env_set_mapsize") }
        mapped.withLock { $0 = nil }  // mapped anew, maybe elsewhere
        return true
    }

    private func read<T: Sendable>(_ body: (OpaquePointer) throws(StoreError) -> T) throws(StoreError) -> T {
        try serial.withLock { _ throws(StoreError) -> T in
            var txn: OpaquePointer?
            let rc = mdb_txn_begin(env, nil, UInt32(MDB_RDONLY), &txn)
            guard rc == 0, let txn else { throw StoreError(rc, function: "mdb_txn_begin") }
            defer {
                mdb_txn_abort(txn)
                releaseMappedPages()
            }
            return try body(txn)
        }
    }

    /// Lets go of the data file's pages this process has mapped in: LMDB reads through a
    /// shared, read-only map of the file, so every page a transaction touched would
    /// otherwise stay in the process's RSS as the store grows towards its cap (32 MiB).
    /// The pages stay in the page cache (a later read maps them again without I/O), and
    /// nothing is lost: the map is of the file, never written through. Called with the
    /// store's lock held, after each transaction.
    private func releaseMappedPages() {
        let range = mapped.withLock { m in
            if m == nil { m = Self.mapping(of: directory + "/data.mdb") ?? (0, 0) }
            return m ?? (0, 0)
        }
        Self.release(range)
    }

    /// ``releaseMappedPages()`` for the scans of `init`, before the store exists: the
    /// map of `directory`'s data file, found once.
    private static func mappedPagesReleaser(_ directory: String) -> () -> Void {
        var range: (address: UInt, length: Int)?
        return {
            if range == nil { range = mapping(of: directory + "/data.mdb") ?? (0, 0) }
            if let range { release(range) }
        }
    }

    /// Unmaps `range` of the data file's map (nothing for an empty one).
    private static func release(_ range: (address: UInt, length: Int)) {
        guard range.address != 0, range.length > 0, let start = UnsafeMutableRawPointer(bitPattern: range.address)
        else { return }
        _ = madvise(start, range.length, MADV_DONTNEED)
    }

    /// The largest mapping of `path` in this process (LMDB's map of the data file: its
    /// API gives the map's address only for a fixed map), by the file's inode in
    /// /proc/self/maps.
    private static func mapping(of path: String) -> (address: UInt, length: Int)? {
        var st = stat()
        guard stat(path, &st) == 0, let text = SmallFile.text("/proc/self/maps", limit: 4 << 20) else { return nil }
        var best: (address: UInt, length: Int)?
        for line in text.split(separator: "\n") {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            guard fields.count >= 6, UInt64(fields[4]) == UInt64(st.st_ino), fields[5].hasSuffix("/data.mdb") else { continue }
            let bounds = fields[0].split(separator: "-")
            guard bounds.count == 2, let start = UInt(bounds[0], radix: 16), let end = UInt(bounds[1], radix: 16),
                  end > start else { continue }
            if (best?.length ?? 0) < Int(end - start) { best = (start, Int(end - start)) }
        }
        return best
    }

    private static func initialMapSize(_ o: Options) -> Int { min(maxMapSize(o), max(1 << 20, o.maxBytes)) }
    /// B-tree pages and free-list overhead need room beyond the data itself.
    private static func maxMapSize(_ o: Options) -> Int { max(1 << 20, o.maxBytes * 2 + (4 << 20)) }
    /// The largest data file a store may hold before it is read: the largest map of
    /// the SDK's options (``LMDBFile/largestStore``), or of these options when they
    /// allow more. A store written with other options is never larger.
    private static func largestStore(_ o: Options) -> Int { max(LMDBFile.largestStore, maxMapSize(o)) }

    private static func isUnreadable(_ code: Int32) -> Bool {
        code == MDB_INVALID || code == MDB_CORRUPTED || code == MDB_VERSION_MISMATCH || code == MDB_PANIC
            || code == MDB_PAGE_NOTFOUND || code == MDB_BAD_DBI || code == MDB_INCOMPATIBLE
    }

    // MARK: Checking and salvaging

    /// Checks `directory/data.mdb` before LMDB maps it; nil when there is no file yet
    /// (LMDB creates it) or when other processes kept committing while it was read
    /// (LMDB then has it open and working).
    ///
    /// - Throws: ``StoreError`` for permissions, a directory that is not one, and I/O
    ///   errors.
    private static func check(_ directory: String, options: Options) throws(StoreError) -> LMDBFile.Analysis? {
        let path = directory + "/data.mdb"
        do {
            return try examine(path, maxSize: largestStore(options), contents: false, recordCheck: nil).analysis
        } catch where error.code == ENOENT && error.path == path {
            return nil
        } catch where error.code == StoreError.unsettled {
            return nil
        }
    }

    /// Reads `path` until one read saw no commit happen (the meta pages did not change
    /// from start to end): up to 30 times, waiting a few milliseconds (more each time,
    /// at random) between reads, so that a read beside a writer committing flat out
    /// falls between two of its commits.
    static func examine(_ path: String, maxSize: Int, contents: Bool, recordCheck: RecordCheck?) throws(StoreError)
        -> (analysis: LMDBFile.Analysis, contents: StoreContents)
    {
        for attempt in 0..<30 {
            if attempt > 0 { usleep(UInt32.random(in: 0...UInt32(min(attempt, 10) * 2_000))) }
            let file = try LMDBFile(path: path)
            file.recordCheck = recordCheck
            let analysis = try file.analyze(maxSize: maxSize)
            let found = contents ? try file.contents(analysis) : StoreContents()
            if try file.stampNow(pageSize: analysis.pageSize) == analysis.stamp { return (analysis, found) }
        }
        throw StoreError(StoreError.unsettled, function: "read", path: path)
    }

    /// Salvages the damaged store in `directory`: what can be proven intact goes into a
    /// fresh store built beside it, then the damaged directory is renamed aside and the
    /// fresh one takes its place. On any failure before the renames, the fresh copy is
    /// removed and the damaged store stays where it was.
    ///
    /// - Parameter found: What LMDB reported, when it is LMDB that refused the store.
    private static func salvage(_ directory: String, found: String?, options: Options) throws(StoreError) -> StoreDamage {
        if environmentInUse(directory) { throw StoreError(StoreError.inUse, function: "SnapshotStore.init", path: directory) }
        let suffix = asideSuffix()
        guard LMDBVersion.known else { return try setAside(directory, found: found ?? "damaged", suffix: suffix) }
        let fresh = "\(directory).salvage-\(suffix)", aside = "\(directory).corrupt-\(suffix)"
        var damage: StoreDamage
        do {
            damage = try writeFresh(fresh, from: directory + "/data.mdb", options: options)
        } catch {
            removeFresh(fresh)
            throw error
        }
        if rename(directory, aside) != 0 {
            let code = errno
            removeFresh(fresh)
            throw StoreError(code, function: "rename", path: directory)
        }
        if rename(fresh, directory) != 0 {
            let code = errno
            _ = rename(aside, directory)
            removeFresh(fresh)
            throw StoreError(code, function: "rename", path: fresh)
        }
        damage.setAsidePath = aside
        if let found { damage.found = found }
        return damage
    }

    private static func asideSuffix() -> String {
        "\(Int(Date().timeIntervalSince1970))-\(getpid())-\(UInt16.random(in: 0...UInt16.max))"
    }

    /// With an LMDB whose file layout ``LMDBFile`` does not know: LMDB reads an existing
    /// store whole in a child process first (``LMDBVersion/probe(_:writes:timeout:)``); one it
    /// cannot read is set aside whole (a salvage needs the layout), and a fresh store
    /// takes its place. Without a child process nothing is known, and the store is not
    /// opened (the events wait in the ring; the next start tries again).
    private static func guardUnknownLayout(_ directory: String, options: Options) throws(StoreError) -> StoreDamage? {
        let path = directory + "/data.mdb"
        guard access(path, F_OK) == 0 else { return nil }
        // The write pass needs the store to itself: a store another process has open
        // was checked by that process when it opened it.
        if environmentInUse(directory) { return nil }
        guard let found = try unreadableByLMDB(directory, writes: true, timeout: options.probeTimeout) else { return nil }
        if environmentInUse(directory) { throw StoreError(StoreError.inUse, function: "SnapshotStore.init", path: directory) }
        return try setAside(directory, found: found, suffix: asideSuffix())
    }

    /// What LMDB's own pass over the store found (``LMDBVersion/probe(_:writes:timeout:)``):
    /// nil when it read (and wrote) it whole.
    ///
    /// - Throws: ``StoreError`` when no child process could be made (nothing is known).
    private static func unreadableByLMDB(_ directory: String, writes: Bool, timeout: Duration) throws(StoreError) -> String? {
        switch LMDBVersion.probe(directory, writes: writes, timeout: timeout) {
        case .read: return nil
        case .noChild(let code): throw StoreError(code, function: "fork", path: directory)
        case let outcome: return outcome.description
        }
    }

    /// Moves the store in `directory` aside whole (renamed `<directory>.corrupt-<suffix>`,
    /// never deleted): what it held is lost to this SDK, and how much is unknown.
    private static func setAside(_ directory: String, found: String, suffix: String) throws(StoreError) -> StoreDamage {
        let aside = "\(directory).corrupt-\(suffix)"
        if rename(directory, aside) != 0 { throw StoreError(errno, function: "rename", path: directory) }
        return .unsalvaged(found: found, setAside: aside)
    }

    /// Builds a store in `fresh` (which must not exist) holding what can be proven
    /// intact of the data file `path`, and says what was found and kept. Entries are
    /// copied as they are read, so memory stays bounded whatever the store's size.
    /// When a commit overlapped the read (the meta pages changed), the fresh store is
    /// removed and built again, at most five times.
    private static func writeFresh(_ fresh: String, from path: String, options: Options) throws(StoreError) -> StoreDamage {
        for _ in 0..<5 {
            let file: LMDBFile
            do {
                file = try LMDBFile(path: path)
                file.recordCheck = options.recordCheck
            } catch where error.code == ENOENT && error.path == path {
                // LMDB refused an environment without a data file (its lock file): nothing to read.
                let store = try FreshStore(fresh, mapSize: initialMapSize(options))
                _ = try store.finish()
                return StoreDamage(found: "", expected: nil, salvaged: 0, recoveredFromPages: 0, metadataSalvaged: 0,
                                   setAsidePath: nil)
            }
            let a = try file.analyze(maxSize: largestStore(options))
            // What is kept lies within the pages read; B-tree and overflow pages take at
            // most about twice that.
            var store = try FreshStore(fresh, mapSize: max(initialMapSize(options), 2 * a.pages.count * a.pageSize + (4 << 20)))
            let expected = try file.readContents(a, into: &store)
            if try file.stampNow(pageSize: a.pageSize) == a.stamp {
                let kept = try store.finish()
                return StoreDamage(found: a.summary, expected: expected, salvaged: kept.snapshots,
                                   recoveredFromPages: kept.fromPages, metadataSalvaged: kept.metadata, setAsidePath: nil)
            }
            store.abandon()
            removeFresh(fresh)
        }
        throw StoreError(StoreError.unsettled, function: "read", path: path)
    }

    /// Bytes of keys and values a salvage puts into the fresh store before it commits.
    static let salvageChunk = 4 << 20

    /// A store being built by a salvage: entries go in as they are read, committed
    /// every ``SnapshotStore/salvageChunk`` bytes, so a salvage holds a few MiB of
    /// them at most.
    private final class FreshStore: ContentSink {
        let directory: String
        private var env: OpaquePointer?
        private let snapshots: MDB_dbi, meta: MDB_dbi
        private var txn: OpaquePointer?
        private var pending = 0
        /// Distinct keys found on pages, and how many of them the tree had too.
        private var fromPages = 0, inTree = 0

        /// Creates the store in `directory`.
        init(_ directory: String, mapSize: Int) throws(StoreError) {
            if mkdir(directory, 0o700) != 0 { throw StoreError(errno, function: "mkdir", path: directory) }
            self.directory = directory
            (env, snapshots, meta) = try SnapshotStore.openEnvironment(directory, mapSize: mapSize)
        }

        deinit { abandon() }

        func pageSnapshot(key: [UInt8], value: [UInt8], verifier: BatchVerifier) throws(StoreError) {
            let txn = try transaction()
            if let other = try SnapshotStore.get(txn, snapshots, key: key) {
                guard verifier.newer(value, than: other, key: key) else { return }
            } else {
                fromPages += 1
            }
            try put(txn, snapshots, key, value)
        }

        func treeSnapshot(key: [UInt8], value: [UInt8]) throws(StoreError) {
            let txn = try transaction()
            if fromPages > 0, try SnapshotStore.get(txn, snapshots, key: key) != nil { inTree += 1 }
            try put(txn, snapshots, key, value)
        }

        func metadata(key: [UInt8], value: [UInt8]) throws(StoreError) {
            try put(try transaction(), meta, key, value)
        }

        /// Commits what is left and syncs; returns how many snapshots and metadata
        /// entries the store holds, and how many snapshots came from pages only.
        func finish() throws(StoreError) -> (snapshots: Int, metadata: Int, fromPages: Int) {
            let txn = try transaction()
            var s = MDB_stat(), m = MDB_stat()
            mdb_stat(txn, snapshots, &s)
            mdb_stat(txn, meta, &m)
            try commit()
            if let env {
                let rc = mdb_env_sync(env, 1)
                if rc != 0 { throw StoreError(rc, function: "mdb_env_sync", path: directory) }
            }
            abandon()
            return (Int(s.ms_entries), Int(m.ms_entries), max(0, fromPages - inTree))
        }

        /// Aborts the open transaction and closes the environment.
        func abandon() {
            if let txn { mdb_txn_abort(txn) }
            txn = nil
            if let env { mdb_env_close(env) }
            env = nil
        }

        private func transaction() throws(StoreError) -> OpaquePointer {
            if let txn { return txn }
            guard let env else { throw StoreError(EINVAL, function: "mdb_txn_begin", path: directory) }
            var out: OpaquePointer?
            let rc = mdb_txn_begin(env, nil, 0, &out)
            guard rc == 0, let out else { throw StoreError(rc, function: "mdb_txn_begin", path: directory) }
            txn = out
            return out
        }

        private func put(_ txn: OpaquePointer, _ dbi: MDB_dbi, _ key: [UInt8], _ value: [UInt8]) throws(StoreError) {
            try SnapshotStore.put(txn, dbi, key: key, value: value)
            pending += key.count + value.count
            if pending >= SnapshotStore.salvageChunk { try commit() }
        }

        private func commit() throws(StoreError) {
            guard let txn else { return }
            self.txn = nil
            pending = 0
            let rc = mdb_txn_commit(txn)
            if rc != 0 { throw StoreError(rc, function: "mdb_txn_commit", path: directory) }
        }
    }

    /// Whether another process has the LMDB environment in `directory` open: LMDB holds
    /// a lock on the first byte of `lock.mdb` in every process that has it open.
    ///
    /// Only called before this process opens the environment: closing a descriptor of
    /// `lock.mdb` drops every lock this process holds on it.
    private static func environmentInUse(_ directory: String) -> Bool {
        let fd = Glibc.open(directory + "/lock.mdb", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var lock = flock()
        lock.l_type = Int16(F_WRLCK)
        lock.l_whence = Int16(SEEK_SET)
        lock.l_start = 0
        lock.l_len = 1
        guard fcntl(fd, F_GETLK, &lock) == 0 else { return false }
        return lock.l_type != Int16(F_UNLCK)
    }

    /// Removes a fresh store this process was building (only LMDB's two files).
    private static func removeFresh(_ directory: String) {
        unlink(directory + "/data.mdb")
        unlink(directory + "/lock.mdb")
        rmdir(directory)
    }

    /// Opens the environment in `directory`, creating it if needed. When LMDB refuses
    /// it (a damaged lock file, or damage the check cannot see), salvages it once and
    /// opens the fresh one.
    private static func open(_ directory: String, mapSize: Int, damage: inout StoreDamage?,
                             options: Options) throws(StoreError) -> (env: OpaquePointer, snapshots: MDB_dbi, meta: MDB_dbi) {
        do {
            return try openEnvironment(directory, mapSize: mapSize)
        } catch where isUnreadable(error.code) && damage == nil {
            damage = try salvage(directory, found: "LMDB: \(error)", options: options)
            return try openEnvironment(directory, mapSize: mapSize)
        }
    }

    private static func openEnvironment(_ directory: String, mapSize: Int) throws(StoreError) -> (env: OpaquePointer, snapshots: MDB_dbi, meta: MDB_dbi) {
        if mkdir(directory, 0o700) != 0 && errno != EEXIST { throw StoreError(errno, function: "mkdir", path: directory) }
        var envOut: OpaquePointer?
        var rc = mdb_env_create(&envOut)
        guard rc == 0, let env = envOut else { throw StoreError(rc, function: "mdb_env_create") }
        func fail(_ rc: Int32, _ function: String) -> StoreError {
            mdb_env_close(env)
            return StoreError(rc, function: function, path: directory)
        }
        mdb_env_set_maxdbs(env, 4)
        mdb_env_set_mapsize(env, mapSize)
        rc = mdb_env_open(env, directory, UInt32(MDB_NOSYNC | MDB_NOTLS | MDB_NORDAHEAD), 0o600)
        if rc != 0 { throw fail(rc, "mdb_env_open") }
        var txn: OpaquePointer?
        rc = mdb_txn_begin(env, nil, 0, &txn)
        guard rc == 0, let txn else { throw fail(rc, "mdb_txn_begin") }
        var snapshots = MDB_dbi(), meta = MDB_dbi()
        rc = mdb_dbi_open(txn, "snapshots", UInt32(MDB_CREATE), &snapshots)
        if rc == 0 { rc = mdb_dbi_open(txn, "meta", UInt32(MDB_CREATE), &meta) }
        if rc == 0 { rc = mdb_txn_commit(txn) } else { mdb_txn_abort(txn) }
        if rc != 0 { throw fail(rc, "mdb_dbi_open") }
        return (env, snapshots, meta)
    }

    private static func put(_ txn: OpaquePointer, _ dbi: MDB_dbi, key: [UInt8], value: [UInt8]) throws(StoreError) {
        var k = key, v = value
        let rc = k.withUnsafeMutableBytes { kb in
            v.withUnsafeMutableBytes { vb in
                var mk = MDB_val(mv_size: kb.count, mv_data: kb.baseAddress)
                var mv = MDB_val(mv_size: vb.count, mv_data: vb.baseAddress)
                return mdb_put(txn, dbi, &mk, &mv, 0)
            }
        }
        if rc != 0 { throw StoreError(rc, function: "mdb_put") }
    }

    private static func get(_ txn: OpaquePointer, _ dbi: MDB_dbi, key: [UInt8]) throws(StoreError) -> [UInt8]? {
        var k = key
        var value = MDB_val()
        let rc = k.withUnsafeMutableBytes { kb in
            var mk = MDB_val(mv_size: kb.count, mv_data: kb.baseAddress)
            return mdb_get(txn, dbi, &mk, &value)
        }
        if rc == MDB_NOTFOUND { return nil }
        if rc != 0 { throw StoreError(rc, function: "mdb_get") }
        return Array(UnsafeRawBufferPointer(start: value.mv_data, count: value.mv_size))
    }

    private static func del(_ txn: OpaquePointer, _ dbi: MDB_dbi, key: [UInt8]) throws(StoreError) {
        var k = key
        let rc = k.withUnsafeMutableBytes { kb in
            var mk = MDB_val(mv_size: kb.count, mv_data: kb.baseAddress)
            return mdb_del(txn, dbi, &mk, nil)
        }
        if rc != 0 && rc != MDB_NOTFOUND { throw StoreError(rc, function: "mdb_del") }
    }

    /// Visits entries in key order until `visit` returns false. Key and value are LMDB's
    /// own bytes in the map, valid during the call only: what `visit` does not read is
    /// never paged in. With `release`, it is called every 16 entries (about 1 MiB of pages
    /// mapped at most when `visit` reads headers: the kernel maps 64 KiB around each page
    /// read), so that a scan of a full store does not map the whole file at once
    /// (``releaseMappedPages()``: the map is of the file and read-only, so the pages of
    /// entries already visited, and of those to come, are read again from the page cache
    /// if touched again).
    /// The snapshots and metadata of the store in `directory`, read by LMDB, read-only
    /// and without the lock file (nothing is written): for an inspection with an LMDB
    /// whose layout ``LMDBFile`` does not know, after a child read it whole.
    private static func readWithLMDB(_ directory: String) throws(StoreError) -> StoreContents {
        var envOut: OpaquePointer?
        var rc = mdb_env_create(&envOut)
        guard rc == 0, let env = envOut else { throw StoreError(rc, function: "mdb_env_create") }
        defer { mdb_env_close(env) }
        mdb_env_set_maxdbs(env, 4)
        rc = mdb_env_open(env, directory, UInt32(MDB_RDONLY | MDB_NOLOCK | MDB_NOTLS | MDB_NORDAHEAD), 0o600)
        if rc != 0 { throw StoreError(rc, function: "mdb_env_open", path: directory) }
        var txnOut: OpaquePointer?
        rc = mdb_txn_begin(env, nil, UInt32(MDB_RDONLY), &txnOut)
        guard rc == 0, let txn = txnOut else { throw StoreError(rc, function: "mdb_txn_begin", path: directory) }
        defer { mdb_txn_abort(txn) }
        var contents = StoreContents()
        for (name, isMeta) in [("snapshots", false), ("meta", true)] {
            var dbi = MDB_dbi()
            rc = mdb_dbi_open(txn, name, 0, &dbi)
            if rc == MDB_NOTFOUND { continue }
            if rc != 0 { throw StoreError(rc, function: "mdb_dbi_open", path: directory) }
            try forEach(txn, dbi) { key, value in
                if isMeta {
                    contents.metadata(key: Array(key), value: Array(value))
                } else {
                    contents.treeSnapshot(key: Array(key), value: Array(value))
                }
                return true
            }
        }
        contents.finish()
        return contents
    }

    private static func forEach(_ txn: OpaquePointer, _ dbi: MDB_dbi, release: (() -> Void)? = nil,
                                _ visit: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) -> Bool) throws(StoreError) {
        var cursor: OpaquePointer?
        var rc = mdb_cursor_open(txn, dbi, &cursor)
        guard rc == 0, let cursor else { throw StoreError(rc, function: "mdb_cursor_open") }
        defer { mdb_cursor_close(cursor) }
        var key = MDB_val(), value = MDB_val()
        rc = mdb_cursor_get(cursor, &key, &value, MDB_FIRST)
        var visited = 0
        while rc == 0 {
            let k = UnsafeRawBufferPointer(start: key.mv_data, count: key.mv_size)
            let v = UnsafeRawBufferPointer(start: value.mv_data, count: value.mv_size)
            if !visit(k, v) { return }
            visited += 1
            if visited % 16 == 0 { release?() }
            rc = mdb_cursor_get(cursor, &key, &value, MDB_NEXT)
        }
        if rc != MDB_NOTFOUND { throw StoreError(rc, function: "mdb_cursor_get") }
    }
}

/// The stored value of a snapshot (docs/FORMATS.md, "Snapshot store"), version 1.
/// A snapshot's value (docs/FORMATS.md, "Database `snapshots`"): a 24-byte header,
/// then the record.
enum SnapshotCodec {
    static let version: UInt8 = 1

    static func encode(_ s: Snapshot) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(24 + s.record.count)
        out.append(version)
        out.append(s.priority.storeCode)
        out += [0, 0]
        LittleEndian.append(&out, UInt64(s.attempts), bytes: 4)
        LittleEndian.append(&out, s.createdAt, bytes: 8)
        LittleEndian.append(&out, s.nextAttemptAt, bytes: 8)
        out += s.record
        return out
    }

    /// The header's size: the record follows it.
    static let headerSize = 24

    /// The header alone (version 1, a known priority, something after it), read in
    /// place: the record's bytes are not touched.
    static func header(_ b: UnsafeRawBufferPointer) -> (priority: Tier, createdAt: UInt64, nextAttemptAt: UInt64)? {
        guard b.count > headerSize, b[0] == version, let priority = Tier(storeCode: b[1]) else { return nil }
        func u64(_ at: Int) -> UInt64 { (0..<8).reduce(UInt64(0)) { $0 | UInt64(b[at + $1]) << (8 * $1) } }
        return (priority, u64(8), u64(16))
    }

    /// nil for another version, a bad priority, or no record after the header.
    static func decode(id: SnapshotID, _ b: [UInt8]) -> Snapshot? {
        var r = LittleEndian.Reader(bytes: b)
        guard let v = r.u8(), v == version, let p = r.u8(), let priority = Tier(storeCode: p),
              r.skip(2), let attempts = r.u32(), let created = r.u64(), let next = r.u64(), !r.atEnd else { return nil }
        return Snapshot(id: id, record: Array(b[r.at...]), priority: priority, createdAt: created,
                        attempts: attempts, nextAttemptAt: next)
    }
}
