import CCairnCore
import Synchronization

/// A file-backed ring buffer of records: the hot path of Cairn's event pipeline.
///
/// Any number of threads append records without taking a lock; one consumer reads
/// them in order with ``peek(from:maxRecords:maxBytes:)`` and releases them with
/// ``commit(upTo:)`` once they are safe elsewhere. A record survives the process being
/// killed as soon as ``append(_:)`` returns; it survives power loss after ``sync()``.
///
/// ```swift
/// let ring = try Ring(path: "/var/lib/myservice/cairn/events.ring")
/// try ring.append(Array(#"{"name":"checkout"}"#.utf8))
/// let run = try ring.peek(maxRecords: 500, maxBytes: 512 * 1024)
/// for record in run.records { send(record.bytes) }
/// try ring.commit(upTo: run.next)
/// ```
///
/// `Ring` is `Sendable` because the C core synchronises producers with atomics on the
/// shared mapping; ``peek(from:maxRecords:maxBytes:)`` and ``commit(upTo:)`` belong to a
/// single consumer, which the caller guarantees (as with any single-consumer queue).
package final class Ring: @unchecked Sendable {
    /// Options for opening a ring.
    package struct Options: Sendable, Equatable {
        /// Data capacity in bytes, rounded up to a power of two between 64 KiB and
        /// 1 GiB. An existing ring keeps the capacity it was created with.
        package var capacity: Int
        /// Largest record accepted, in bytes; `nil` means a quarter of the capacity
        /// (also the upper limit).
        package var maxRecord: Int?
        /// Consumed pages leave memory once this many bytes of them have been
        /// committed; 0 keeps every page resident.
        package var reclaimBytes: Int

        /// Creates options; the defaults suit a service tracking a few thousand
        /// events per second.
        package init(capacity: Int = 1 << 20, maxRecord: Int? = nil, reclaimBytes: Int = 64 * 1024) {
            self.capacity = capacity
            self.maxRecord = maxRecord
            self.reclaimBytes = reclaimBytes
        }
    }

    /// How the ring file was found when it was opened.
    package enum Origin: UInt32, Sendable {
        /// No ring existed; a fresh one was created.
        case created = 0
        /// An existing ring was reopened with its unconsumed records.
        case reopened = 1
        /// Nothing in the file could be trusted (no sound header and no intact record),
        /// or it was written in a newer format: it was renamed aside
        /// (`<path>.corrupt-<seconds>-<pid>`) and a fresh ring created.
        case setAside = 2
        /// The header was damaged or the file truncated or extended: the header was
        /// rebuilt and every record still proven intact by its checksum kept.
        /// ``Stats/repairs`` says what was repaired.
        case repaired = 3
    }

    /// What opening the ring repaired: one member per header field rewritten, plus how
    /// the window was found.
    package struct Repairs: OptionSet, Sendable, Hashable {
        package let rawValue: UInt32
        /// Creates a set from the C core's `CAIRN_RING_REPAIR_*` bits.
        package init(rawValue: UInt32) { self.rawValue = rawValue }

        /// The magic number.
        package static let magic = Repairs(rawValue: CAIRN_RING_REPAIR_MAGIC)
        /// The format version.
        package static let version = Repairs(rawValue: CAIRN_RING_REPAIR_VERSION)
        /// The header size.
        package static let headerSize = Repairs(rawValue: CAIRN_RING_REPAIR_HEADER_SIZE)
        /// The capacity, taken from the file size.
        package static let capacity = Repairs(rawValue: CAIRN_RING_REPAIR_CAPACITY)
        /// The salt, inferred from the records.
        package static let salt = Repairs(rawValue: CAIRN_RING_REPAIR_SALT)
        /// The flags.
        package static let flags = Repairs(rawValue: CAIRN_RING_REPAIR_FLAGS)
        /// The header checksum.
        package static let headerChecksum = Repairs(rawValue: CAIRN_RING_REPAIR_HEADER_CRC)
        /// The write position.
        package static let writePosition = Repairs(rawValue: CAIRN_RING_REPAIR_WRITE_POS)
        /// The read position, or its check copy.
        package static let readPosition = Repairs(rawValue: CAIRN_RING_REPAIR_READ_POS)
        /// The file's length: zeros restored to a truncated file, extra bytes cut.
        package static let fileSize = Repairs(rawValue: CAIRN_RING_REPAIR_FILE_SIZE)
        /// The read position was lost and inferred from the records: records already
        /// consumed may be delivered again (their event ids let a collector drop them).
        package static let windowInferred = Repairs(rawValue: CAIRN_RING_REPAIR_WINDOW_INFERRED)
    }

    /// Counters of an open ring, since it was opened. The persistent, cumulative drop
    /// counts are in the drop table (``drops()``).
    package struct Stats: Sendable, Equatable {
        /// Data capacity in bytes.
        package var capacity: UInt64
        /// Bytes between the read and write cursors.
        package var used: UInt64
        /// Largest ``used`` seen.
        package var highWater: UInt64
        /// Records published.
        package var appended: UInt64
        /// Appends refused because the ring was full, since open (the drop table counts
        /// them persistently as `ring_full`).
        package var droppedFull: UInt64
        /// Appends refused because the record was too large, since open (the drop table
        /// counts them persistently as `ring_too_big`).
        package var droppedTooBig: UInt64
        /// Unconsumed records found intact when the ring was opened.
        package var recovered: UInt64
        /// Torn or damaged regions skipped when the ring was opened.
        package var skippedCorrupt: UInt64
        /// Bytes in those regions.
        package var skippedBytes: UInt64
        /// How the file was found.
        package var origin: Origin
        /// Largest record accepted.
        package var maxRecord: UInt32
        /// What opening repaired; empty unless ``origin`` is ``Origin/repaired``.
        package var repairs: Repairs
        /// Header fields rewritten when the ring was opened.
        package var repairedFields: UInt32
        /// Bytes a truncated file lacked, restored as zeros when it was opened.
        package var restoredBytes: UInt64
        /// Bytes past the end of the ring, cut from a longer file when it was opened.
        package var cutBytes: UInt64
        /// Drop table slots found damaged when the ring was opened, and fixed.
        package var dropSlotsRepaired: UInt32
    }

    /// What waits in a ring file, as ``Ring/inspect(path:)`` found it.
    package struct Inspection: Sendable, Equatable {
        /// Data capacity in bytes (0 for an empty file).
        package var capacity: UInt64
        /// Bytes from the read cursor to the write cursor.
        package var used: UInt64
        /// Intact event records waiting (data and bare records).
        package var events: UInt64
        /// Intact context records waiting.
        package var contexts: UInt64
        /// Regions the next open skips as torn or damaged. In a ring a process has open,
        /// a record being written at that moment reads as torn.
        package var tornRegions: UInt64
        /// Bytes in those regions.
        package var tornBytes: UInt64
        /// What the next open would repair in the header.
        package var repairs: Repairs
    }

    /// Counts what waits in the ring file at `path` without opening it as a ring
    /// (`cairn_ring_inspect`): a read-only mapping, no lock, nothing repaired or
    /// written, so it works beside the process that has the ring open and on a
    /// read-only directory.
    ///
    /// - Throws: ``CairnError`` with `ENOENT` when there is no file, ``CairnError/corrupt``
    ///   for a file that is not a ring (the next open sets it aside),
    ///   ``CairnError/version`` for a ring of a newer format, or another `errno` code.
    package static func inspect(path: String) throws(CairnError) -> Inspection {
        var i = cairn_ring_inspection_t()
        let rc = path.withCString { cairn_ring_inspect($0, &i) }
        guard rc == 0 else { throw CairnError(rc, function: "cairn_ring_inspect") }
        return Inspection(capacity: i.capacity, used: i.write_pos - i.read_pos, events: i.events,
                          contexts: i.contexts, tornRegions: i.torn_regions, tornBytes: i.torn_bytes,
                          repairs: Repairs(rawValue: i.repairs))
    }

    /// A drop reason's counters in the ring's drop table, which lives in the ring file
    /// and so outlives the process (a `kill -9` included).
    package struct Drop: Sendable, Equatable {
        /// The slot, for ``Ring/countDrops(slot:_:)`` and ``Ring/markReported(slot:upTo:)``.
        package var slot: Int32
        /// The reason, `[a-z0-9_]`, at most ``Ring/maxDropReasonLength`` bytes.
        package var reason: String
        /// Drops counted since the ring file was created.
        package var counted: UInt64
        /// Drops known to have been reported (at most ``counted``).
        package var reported: UInt64
        /// ``counted`` when this ring handle opened the file (at most ``counted``): what
        /// earlier processes counted; the rest is this process's.
        package var countedAtOpen: UInt64
        /// Drops still to report.
        package var unreported: UInt64 { counted > reported ? counted - reported : 0 }

        /// Creates a value, as ``Ring/drops()`` does (and as tests of code that reads
        /// the table may).
        package init(slot: Int32, reason: String, counted: UInt64, reported: UInt64, countedAtOpen: UInt64 = 0) {
            self.slot = slot
            self.reason = reason
            self.counted = counted
            self.reported = reported
            self.countedAtOpen = countedAtOpen
        }
    }

    /// Longest drop reason, in bytes.
    package static let maxDropReasonLength = Int(CAIRN_RING_DROP_REASON_MAX)

    /// The catch-all drop slot, reason `other`: reasons that find the table full count
    /// here.
    package static let otherDropSlot = Int32(CAIRN_RING_DROP_OTHER)

    /// What a record's payload is (docs/FORMATS.md, "Ring file", "Records"). The ring
    /// keeps and returns the kind; what a context means to the records after it is the
    /// consumer's business.
    package enum Kind: UInt32, Sendable {
        /// A complete record, delivered as it is.
        case data = 0
        /// A context: it applies to every ``bare`` record after it, in ring order,
        /// until the next context record.
        case context = 2
        /// A record completed by the context in force where it lies.
        case bare = 3
    }

    /// A record returned by ``Ring/peek(from:maxRecords:maxBytes:)``.
    ///
    /// ``bytes`` points into the ring's mapping: it stays valid until the record is
    /// committed or the ring is closed. Copy what must outlive that.
    package struct Record: @unchecked Sendable {
        /// The payload, inside the mapping.
        package let bytes: UnsafeRawBufferPointer
        /// The record's absolute position in the ring.
        package let position: UInt64
        /// Its kind.
        package let kind: Kind
    }

    /// A run of records in order, and the position that releases them.
    package struct Run: @unchecked Sendable {
        /// The records, oldest first.
        package fileprivate(set) var records: [Record]
        /// Pass to ``Ring/commit(upTo:)`` to release the run, or to
        /// ``Ring/peek(from:maxRecords:maxBytes:)`` to continue after it.
        package fileprivate(set) var next: UInt64

        init(records: [Record], next: UInt64) {
            self.records = records
            self.next = next
        }

        /// An empty run, to be filled by ``Ring/peek(from:maxRecords:maxBytes:into:)``.
        package init() { self.init(records: [], next: 0) }

        /// Keeps its first `count` records, in place (the array keeps its storage): the
        /// run then ends where the next record starts. Nothing changes when `count`
        /// covers the run.
        package mutating func truncate(to count: Int) {
            guard count >= 0, count < records.count else { return }
            next = records[count].position
            records.removeSubrange(count...)
        }
    }

    private let handle: OpaquePointer

    /// The position at which the fill alarm goes off (`UInt64.max`: not armed), and what
    /// it does (see ``armFillAlarm(at:)``).
    private let fillAlarm = Atomic<UInt64>(.max)
    private let fillAction = Mutex<FillAction?>(nil)

    /// The alarm's action in a class: taking it out of the lock is then a retain, where
    /// taking out a bare closure allocated a reabstraction box on every alarm, on the
    /// producer's thread (about 150 a second at 100k events a second), and the host's
    /// main heap crept upwards by about 4 KiB a second.
    private final class FillAction: Sendable {
        let run: @Sendable () -> Void
        init(_ run: @escaping @Sendable () -> Void) { self.run = run }
    }

    /// The path of the ring file.
    package let path: String

    /// Data capacity in bytes (a power of two; an existing file keeps its own).
    package let capacity: UInt64

    /// Opens the ring file at `path`, creating it (and nothing else: its directory
    /// must exist) if needed.
    ///
    /// The file is never trusted: a damaged header is rebuilt from the records, whose
    /// own checksums prove them intact, a truncated or extended file is brought back to
    /// size, and only a file in which nothing can be trusted is set aside.
    /// ``stats()`` says which happened (``Stats/origin``, ``Stats/repairs``) and what it
    /// cost (``Stats/skippedCorrupt``, ``Stats/skippedBytes``).
    ///
    /// - Throws: ``CairnError`` with ``CairnError/locked`` when another handle, in this
    ///   or another process, has the file open; `EINVAL`-style ``CairnError/invalid``
    ///   for options out of range; an `errno` code for a failing system call.
    package init(path: String, options: Options = Options()) throws(CairnError) {
        var opts = cairn_ring_options_t()
        cairn_ring_options_init(&opts)
        guard options.capacity > 0, options.reclaimBytes >= 0, (options.maxRecord ?? 0) >= 0
        else { throw CairnError(CAIRN_EINVAL, function: "cairn_ring_open") }
        opts.capacity = UInt64(options.capacity)
        opts.max_record = UInt32(clamping: options.maxRecord ?? 0)
        opts.reclaim_bytes = UInt32(clamping: options.reclaimBytes)
        var out: OpaquePointer?
        let rc = path.withCString { cairn_ring_open($0, &opts, &out) }
        guard rc == 0, let out else { throw CairnError(rc, function: "cairn_ring_open") }
        self.handle = out
        self.path = path
        var s = cairn_ring_stats_t()
        _ = cairn_ring_stats(out, &s)
        self.capacity = s.capacity
    }

    deinit { cairn_ring_close(handle) }

    /// Appends one record (copied). Never blocks.
    ///
    /// - Throws: ``CairnError/full`` when there is no room, ``CairnError/tooBig`` when
    ///   the record exceeds the maximum; both drops are counted in ``stats()``.
    @inlinable
    package func append(_ bytes: UnsafeRawBufferPointer) throws(CairnError) {
        let rc = cairn_ring_append(rawHandle, bytes.baseAddress, bytes.count)
        if rc != 0 { throw CairnError(rc, function: "cairn_ring_append") }
        if fillAlarmArmed { checkFillAlarm(end: nil) }
    }

    /// Appends one record (copied). Never blocks.
    ///
    /// - Throws: as ``append(_:)-(UnsafeRawBufferPointer)``.
    @inlinable
    package func append(_ bytes: [UInt8]) throws(CairnError) {
        let rc = bytes.withUnsafeBytes { cairn_ring_append(rawHandle, $0.baseAddress, $0.count) }
        if rc != 0 { throw CairnError(rc, function: "cairn_ring_append") }
        if fillAlarmArmed { checkFillAlarm(end: nil) }
    }

    // MARK: Fill alarm

    /// What the fill alarm runs when it goes off (the consumer's wake-up), set once
    /// before the alarm is armed.
    package func onFillAlarm(_ action: @escaping @Sendable () -> Void) {
        let boxed = FillAction(action)
        fillAction.withLock { $0 = boxed }
    }

    /// Arms the fill alarm: the first append that ends at or beyond `position` (an
    /// absolute ring position, such as the read cursor plus a batch's worth of bytes)
    /// disarms it and runs the action given to ``onFillAlarm(_:)``, once, on the
    /// appending thread. A consumer waiting for a batch to fill arms it before it
    /// sleeps, so that a burst wakes it at once instead of at the batch's age; producers
    /// pay one relaxed load while it is not armed.
    ///
    /// - Returns: false, without arming, when the ring's records already reach
    ///   `position` (the consumer should not sleep).
    @discardableResult
    package func armFillAlarm(at position: UInt64) -> Bool {
        fillAlarm.store(position, ordering: .sequentiallyConsistent)
        atomicMemoryFence(ordering: .sequentiallyConsistent)
        // An append that ended before the store above did not see the alarm: look at
        // the ring once more.
        if readPosition + stats().used >= position {
            fillAlarm.store(.max, ordering: .relaxed)
            return false
        }
        return true
    }

    /// Disarms the fill alarm.
    package func disarmFillAlarm() {
        fillAlarm.store(.max, ordering: .relaxed)
    }

    /// Whether the alarm is armed, read by an append after it published its record.
    /// The append's publication and this load, and the consumer's arming and its look
    /// at the ring, are each ordered by a full fence (on x86 the publication's locked
    /// instructions are one already), so that one of the two always sees the other:
    /// an alarm armed as a record is appended is never missed by both.
    @usableFromInline
    var fillAlarmArmed: Bool {
        #if !arch(x86_64)
        atomicMemoryFence(ordering: .sequentiallyConsistent)
        #endif
        return fillAlarm.load(ordering: .relaxed) != .max
    }

    /// Runs the alarm's action when the ring's records end at or beyond its position
    /// (`end`, or the ring's end read from its counters).
    @usableFromInline
    func checkFillAlarm(end: UInt64?) {
        let at = fillAlarm.load(ordering: .sequentiallyConsistent)
        guard at != .max else { return }
        let reached = end ?? (readPosition + stats().used)
        guard reached >= at, fillAlarm.compareExchange(expected: at, desired: .max, ordering: .relaxed).exchanged
        else { return }
        fillAction.withLock { $0 }?.run()
    }

    /// Appends one record of `kind` (copied). Never blocks.
    ///
    /// - Throws: as ``append(_:)-(UnsafeRawBufferPointer)``.
    package func append(_ bytes: [UInt8], kind: Kind) throws(CairnError) {
        let rc = bytes.withUnsafeBytes { cairn_ring_append_kind(handle, kind.rawValue, $0.baseAddress, $0.count) }
        if rc != 0 { throw CairnError(rc, function: "cairn_ring_append_kind") }
        if fillAlarmArmed { checkFillAlarm(end: nil) }
    }

    /// Reserves room for up to `capacity` bytes and lets `body` write the record in
    /// place (no intermediate copy).
    ///
    /// `body` returns how many bytes it wrote, or `nil` to abandon the record; the
    /// reservation is ended either way.
    ///
    /// - Returns: `true` when a record was published, `false` when `body` abandoned it.
    /// - Throws: ``CairnError/full`` or ``CairnError/tooBig`` (counted), or
    ///   ``CairnError/invalid`` when `body` claims more bytes than were reserved (the
    ///   record is then abandoned).
    /// The record is published as `kind` (``Kind/data`` unless told).
    @discardableResult
    package func withReservation(
        capacity: Int, kind: Kind = .data, _ body: (UnsafeMutableRawBufferPointer) -> Int?
    ) throws(CairnError) -> Bool {
        var res = cairn_ring_reservation_t()
        let rc = cairn_ring_reserve(handle, max(capacity, 0), &res)
        guard rc == 0, let base = res.data else { throw CairnError(rc, function: "cairn_ring_reserve") }
        guard let written = body(UnsafeMutableRawBufferPointer(start: base, count: Int(res.capacity))),
              written >= 0
        else {
            cairn_ring_cancel(handle, &res)
            return false
        }
        try cairnCheck("cairn_ring_publish_kind") { cairn_ring_publish_kind(handle, &res, written, kind.rawValue) }
        if fillAlarmArmed { checkFillAlarm(end: res.pos + UInt64(CAIRN_RING_ALIGN) + UInt64(written)) }
        return true
    }

    /// The read cursor: the position of the oldest unconsumed record.
    package var readPosition: UInt64 { cairn_ring_read_pos(handle) }

    /// The ring file's id, fixed when the file was created (`cairn_ring_id`): state
    /// kept elsewhere about positions in this ring names it, so that a later file is
    /// not mistaken for this one.
    package var id: UInt64 { cairn_ring_id(handle) }

    /// Reads published records in order without consuming them.
    ///
    /// - Parameters:
    ///   - from: Where to start: the read cursor (the default) or an earlier run's
    ///     ``Run/next``, to build the next batch while the previous is in flight.
    ///   - maxRecords: At most this many records.
    ///   - maxBytes: Stop before the payload total exceeds this (one oversized record
    ///     is still returned on its own).
    /// An empty run whose ``Run/next`` moved past `from` held only padding: commit it
    /// to free that space. Context records come in the run, in order, with their kind,
    /// and count towards both limits.
    ///
    /// - Throws: ``CairnError/invalid`` when `from` is not the read cursor, the end of
    ///   an earlier run, or the position of a record.
    package func peek(from: UInt64? = nil, maxRecords: Int, maxBytes: Int) throws(CairnError) -> Run {
        var run = Run()
        try peek(from: from, maxRecords: maxRecords, maxBytes: maxBytes, into: &run)
        return run
    }

    /// ``peek(from:maxRecords:maxBytes:)`` into `run`, whose array is emptied and
    /// refilled, keeping its storage: a consumer that peeks batch after batch allocates
    /// its array once instead of at every batch. On a throw, `run` is left empty.
    package func peek(from: UInt64? = nil, maxRecords: Int, maxBytes: Int, into run: inout Run) throws(CairnError) {
        run.records.removeAll(keepingCapacity: true)
        let start = from ?? readPosition
        // A ring never holds more records than capacity / 16; asking for more would
        // only allocate a larger array.
        let limit = min(max(maxRecords, 0), Int(clamping: capacity / UInt64(CAIRN_RING_ALIGN)))
        let maxBytes = max(maxBytes, 0)
        // In chunks through a small buffer on the stack: an array sized for `limit`
        // (thousands of entries for a grown batch) would pass through the heap arena at
        // every batch and keep it at that size.
        let chunk = 256
        run.next = start
        var bytes = 0
        var failure: Int32 = 0
        withUnsafeTemporaryAllocation(of: cairn_ring_record_t.self, capacity: chunk) { buf in
            while run.records.count < limit || limit == 0 {
                let want = min(chunk, limit - run.records.count)
                var after: UInt64 = 0
                let n = cairn_ring_peek(handle, run.next, buf.baseAddress, want, maxBytes - bytes, &after)
                if n < 0 {
                    failure = n
                    return
                }
                for r in buf.prefix(Int(n)) {
                    // Only the run's first record may exceed the byte limit on its own.
                    if !run.records.isEmpty && bytes + Int(r.len) > maxBytes {
                        run.next = r.pos
                        return
                    }
                    run.records.append(Record(bytes: UnsafeRawBufferPointer(start: r.data, count: Int(r.len)),
                                              position: r.pos, kind: Kind(rawValue: r.kind) ?? .data))
                    bytes += Int(r.len)
                }
                run.next = after
                if Int(n) < want || limit == 0 { return }
            }
        }
        if failure < 0 {
            run.records.removeAll(keepingCapacity: true)
            throw CairnError(failure, function: "cairn_ring_peek")
        }
    }

    /// Releases every record before `position` (a ``Run/next``, or a record's
    /// ``Record/position`` to release only those before it), freeing their space.
    ///
    /// - Throws: ``CairnError/invalid`` when `position` is behind the read cursor,
    ///   beyond what has been peeked, or not a record boundary.
    package func commit(upTo position: UInt64) throws(CairnError) {
        try cairnCheck("cairn_ring_commit") { cairn_ring_commit(handle, position) }
    }

    /// Drops the pages wholly inside `from..<to` from this process's memory without
    /// consuming anything (`cairn_ring_release_pages`): for records read and kept
    /// elsewhere until they are safe, such as a batch framed into a request in flight.
    /// The file keeps their contents; reading them again faults them back in.
    ///
    /// - Throws: ``CairnError/invalid`` for a range outside the read cursor and the
    ///   furthest peeked position; an `errno` code when `madvise` fails.
    package func releasePages(from: UInt64, to: UInt64) throws(CairnError) {
        try cairnCheck("cairn_ring_release_pages") { cairn_ring_release_pages(handle, from, to) }
    }

    /// Drops from this process's memory the pages of the backlog that are neither about
    /// to be read nor being written, keeping `keep` bytes mapped past the furthest
    /// peeked position and before the write position (`cairn_ring_release_backlog`):
    /// a backlog is then held by the ring file, not by the process. Nothing is
    /// consumed; reading the records later faults their pages back in.
    ///
    /// - Throws: an `errno` code when `madvise` fails.
    package func releaseBacklog(keeping keep: Int) throws(CairnError) {
        try cairnCheck("cairn_ring_release_backlog") { cairn_ring_release_backlog(handle, UInt64(max(0, keep))) }
    }

    /// Flushes the mapping to disk, for durability across power loss.
    package func sync() throws(CairnError) {
        try cairnCheck("cairn_ring_sync") { cairn_ring_sync(handle) }
    }

    /// The ring's counters.
    package func stats() -> Stats {
        var s = cairn_ring_stats_t()
        _ = cairn_ring_stats(handle, &s)
        return Stats(capacity: s.capacity, used: s.used, highWater: s.high_water,
                     appended: s.appended, droppedFull: s.dropped_full,
                     droppedTooBig: s.dropped_too_big, recovered: s.recovered,
                     skippedCorrupt: s.skipped_corrupt, skippedBytes: s.skipped_bytes,
                     origin: Origin(rawValue: s.origin) ?? .created, maxRecord: s.max_record,
                     repairs: Repairs(rawValue: s.repairs), repairedFields: s.repaired_fields,
                     restoredBytes: s.restored_bytes, cutBytes: s.cut_bytes,
                     dropSlotsRepaired: s.drop_slots_repaired)
    }

    // MARK: The drop table

    /// The drop table slot of `reason`, claimed for it if it is new.
    ///
    /// The drop table keeps, in the ring file, a counter per reason for what the SDK
    /// sheds (sampling, filtering, overload, refusals), so that the next process still
    /// reports what a killed one dropped. Look each reason's slot up once, at start,
    /// and count into it on the hot path with ``countDrops(slot:_:)``; the consumer
    /// reads the table with ``drops()``, sends ``Drop/unreported`` counts along with a
    /// batch, and once that request is acknowledged or stored calls
    /// ``markReported(slot:upTo:)`` with the ``Drop/counted`` value it sent. The ring
    /// itself counts its refusals as `ring_full` and `ring_too_big`.
    ///
    /// ```swift
    /// let sampled = ring.dropSlot("sampled")              // once
    /// if let sampled { ring.countDrops(slot: sampled) }   // per dropped event
    /// ```
    ///
    /// Safe from any thread; concurrent calls with one reason get one slot.
    ///
    /// - Parameter reason: `[a-z0-9_]`, 1 to ``maxDropReasonLength`` bytes.
    /// - Returns: The slot (``otherDropSlot`` once the table is full, and for the
    ///   reason `other`), or `nil` for a reason that is empty, too long or has a byte
    ///   outside `[a-z0-9_]`.
    package func dropSlot(_ reason: String) -> Int32? {
        var reason = reason
        let slot = reason.withUTF8 { utf8 in
            utf8.withMemoryRebound(to: CChar.self) { cairn_ring_drop_slot(handle, $0.baseAddress, $0.count) }
        }
        return slot >= 0 ? slot : nil
    }

    /// Adds `count` drops to `slot`'s counter: one atomic add in the mapped file, no
    /// allocation, no lock; safe from any thread.
    ///
    /// - Returns: `false` when `slot` is not a slot returned by ``dropSlot(_:)``.
    @inlinable
    @discardableResult
    package func countDrops(slot: Int32, _ count: UInt64 = 1) -> Bool {
        cairn_ring_count_drops(rawHandle, slot, count) == 0
    }

    /// The drop table's used slots, in slot order.
    package func drops() -> [Drop] {
        let slots = Int(CAIRN_RING_DROP_SLOTS)
        var raw = [cairn_ring_drop_t](repeating: cairn_ring_drop_t(), count: slots)
        let used = raw.withUnsafeMutableBufferPointer { cairn_ring_read_drops(handle, $0.baseAddress, $0.count) }
        return raw.prefix(max(0, min(Int(used), slots))).map { d in
            let reason = withUnsafeBytes(of: d.reason) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            return Drop(slot: d.slot, reason: reason, counted: d.counted, reported: d.reported,
                        countedAtOpen: d.counted_at_open)
        }
    }

    /// Records that `slot`'s drops up to `reported` (a ``Drop/counted`` value read
    /// earlier) were sent in a request that was acknowledged or stored. Never moves
    /// back: a lower value than the current one is ignored. For the ring's single
    /// consumer.
    ///
    /// - Throws: ``CairnError/invalid`` when `slot` is not a used slot or `reported`
    ///   exceeds its ``Drop/counted``.
    package func markReported(slot: Int32, upTo reported: UInt64) throws(CairnError) {
        try cairnCheck("cairn_ring_mark_reported") { cairn_ring_mark_reported(handle, slot, reported) }
    }

    /// The C handle, for code in this package that calls the core directly.
    @usableFromInline
    package var rawHandle: OpaquePointer { handle }
}
