import CairnBase
import CairnProcessor
import CairnStore
import CCairnCore
import FoundationEssentials

/// The contexts of the ring's bare events, on the uploader's side (docs/FORMATS.md,
/// "Ring file", "Records", and "Snapshot store", `ring_context`).
///
/// The SDK writes its context fragment once per run as a context record, and each event
/// after it bare (``EventEnvelope``, which owns those bytes: the uploader knows records
/// as bytes only). A bare record takes the context of the last context record before it
/// in ring order. The uploader completes each one through ``EventEnvelope`` as it forms
/// a batch, so what is sent, stored and tapped is the event exactly as the processor
/// encodes it whole. Context records are never sent; complete (data) records go as
/// they are.
///
/// Once the read cursor has passed a context record it is no longer in the ring, yet
/// the bare events after the cursor still need it. So before a batch's records can be
/// released, the contexts that may be in force at the read cursor then are kept in the
/// snapshot store's metadata under `ring_context` (``RingContextMark``), and a new
/// process restores the one in force at its read cursor. Without a store, or when that
/// value is missing, damaged or from another ring, bare records before the first
/// context record in the ring get this process's context, marked as recovered
/// (``EventEnvelope/recoveredFragment(current:sdkVersion:)``), and are counted.
///
/// Worker-only: used from the uploader's thread.
final class RingContexts {
    /// A context record: where it is in the ring and its fragment (empty when its
    /// payload is not a fragment: the bare records after it get the fallback).
    struct Entry: Equatable {
        var position: UInt64
        var fragment: [UInt8]
    }

    /// The records of a run as they are sent, in pieces that point into the ring (the
    /// events) and into ``pool`` (the fragments completing them), so that a batch is
    /// framed without a copy of its records: a bare record is its bytes without the
    /// final `}`, then `,`, the fragment and `}`.
    struct Batch {
        /// Where a piece's bytes are.
        enum Source {
            case ring(UnsafeRawBufferPointer)
            case pool(offset: Int, count: Int)
        }
        /// Each fragment the batch uses, once, as `,<fragment>}`: a bare record is its
        /// bytes without the final `}`, then that (from its `,` on, or after it for an
        /// empty object).
        var pool: [UInt8] = []
        /// The pieces, in order, and whether each ends a record.
        var pieces: [(source: Source, ends: Bool)] = []
        /// The number of records (events).
        var events = 0
        /// Bare records completed with this process's context, marked.
        var fallbacks = 0
        /// Where in ``pool`` each fragment used so far is, by its context record's
        /// position (`UInt64.max`: the fallback).
        var fragments: [UInt64: (offset: Int, count: Int)] = [:]
        /// ``withSlices(_:)``'s arrays, kept with their storage for the next batch.
        private var slices: [cairn_slice_t] = []
        private var ends: [Bool] = []

        /// Empties it for the next batch, keeping the storage of its arrays: a batch
        /// reused this way allocates nothing once its arrays have grown to the batch
        /// size, where a new one each time passes hundreds of KiB through the heap
        /// arena per batch, which glibc then keeps.
        mutating func reset() {
            pool.removeAll(keepingCapacity: true)
            pieces.removeAll(keepingCapacity: true)
            fragments.removeAll(keepingCapacity: true)
            events = 0
            fallbacks = 0
        }

        /// The pieces as slices, and where records end; valid inside `body` only (the
        /// ring records must stay uncommitted meanwhile).
        mutating func withSlices<R>(_ body: (UnsafeBufferPointer<cairn_slice_t>, [Bool]) throws(CairnError) -> R)
            throws(CairnError) -> R
        {
            slices.removeAll(keepingCapacity: true)
            ends.removeAll(keepingCapacity: true)
            slices.reserveCapacity(pieces.count)
            ends.reserveCapacity(pieces.count)
            let result = pool.withUnsafeBytes { p -> Result<R, CairnError> in
                for piece in pieces {
                    switch piece.source {
                    case .ring(let bytes): slices.append(cairn_slice_t(data: bytes.baseAddress, len: bytes.count))
                    case .pool(let offset, let count):
                        slices.append(cairn_slice_t(data: p.baseAddress.map { $0 + offset }, len: count))
                    }
                    ends.append(piece.ends)
                }
                return slices.withUnsafeBufferPointer { s in
                    Result { () throws(CairnError) in try body(s, ends) }
                }
            }
            return try result.get()
        }

        /// Each record: a bare one with its completion (`,"context":…}`), or a whole
        /// one with nil; valid inside `body` only (the ring records must stay
        /// uncommitted meanwhile).
        func forEachRecord(_ body: (UnsafeRawBufferPointer, UnsafeRawBufferPointer?) -> Void) {
            pool.withUnsafeBytes { p in
                func bytes(_ source: Source) -> UnsafeRawBufferPointer {
                    switch source {
                    case .ring(let r): return r
                    case .pool(let offset, let count): return UnsafeRawBufferPointer(rebasing: p[offset..<(offset + count)])
                    }
                }
                var k = 0
                while k < pieces.count {
                    if !pieces[k].ends, k + 1 < pieces.count {
                        body(bytes(pieces[k].source), bytes(pieces[k + 1].source))
                        k += 2
                    } else {
                        body(bytes(pieces[k].source), nil)
                        k += 1
                    }
                }
            }
        }

        /// Each record as its own array (for a tap).
        func records() -> [[UInt8]] {
            var out: [[UInt8]] = []
            out.reserveCapacity(events)
            forEachRecord { record, completion in out.append(Array(record) + (completion.map { Array($0) } ?? [])) }
            return out
        }
    }

    /// The largest fragment accepted from the ring or the store.

    /// Context records known, in ring order: the one in force at the read cursor (when
    /// known), then those read since.
    private(set) var entries: [Entry] = []
    /// What `ring_context` in the store holds now: the positions it lists and where it
    /// is complete up to.
    private var persisted: (positions: [UInt64], upto: UInt64)?
    /// Bare records completed with the fallback, since start.
    private(set) var fallbacks = 0
    private let sdkVersion: String
    private let current: (@Sendable () -> [UInt8])?

    /// - Parameters:
    ///   - sdkVersion: For the fallback when `current` gives no fragment.
    ///   - current: This process's context fragment, for bare records whose own
    ///     context is lost.
    init(sdkVersion: String, current: (@Sendable () -> [UInt8])?) {
        self.sdkVersion = sdkVersion
        self.current = current
    }

    // MARK: Restoring and keeping

    /// Restores the context in force at the ring's read cursor from `store`, when its
    /// `ring_context` is whole, names this ring and covers the cursor. Returns whether it
    /// did.
    @discardableResult
    func restore(from store: SnapshotStore?, ring: Ring) -> Bool {
        guard let bytes = try? store?.metadata(RingContextMark.metadataKey),
              let mark = RingContextMark(bytes) else { return false }
        guard mark.ringID == ring.id else { return false }
        persisted = (mark.entries.map(\.position), mark.upto)
        let read = ring.readPosition
        guard read <= mark.upto,
              let inForce = mark.entries.last(where: { $0.position < read }) else { return false }
        entries = [inForce]
        return true
    }

    /// Keeps in `store` the contexts in force anywhere from the read cursor to `upto`
    /// (the end of a batch about to be formed or released), unless it holds them
    /// already: the context in force at the cursor, and every context record after it
    /// below `upto`. Call before releasing any record below `upto`. A failed write is
    /// tried again with the next batch; meanwhile the stored value does not cover the
    /// later cursor, and a new process falls back rather than use a stale context.
    /// Returns whether the store holds them.
    @discardableResult
    func persist(to store: SnapshotStore?, ring: Ring, upTo upto: UInt64) -> Bool {
        guard let store else { return true }
        let read = ring.readPosition
        prune(before: read)
        // Records whose context record was not a fragment keep their entry (empty), so
        // that a later process falls back for them too rather than take the one before.
        let needed = entries.filter { $0.position < upto }
        guard !needed.isEmpty else { return true }
        let positions = needed.map(\.position)
        if let p = persisted, p.positions == positions, p.upto >= upto { return true }
        let mark = RingContextMark(ringID: ring.id, upto: upto, entries: needed)
        guard (try? store.setMetadata(RingContextMark.metadataKey, mark.encoded())) != nil else { return false }
        persisted = (positions, upto)
        return true
    }

    /// Forgets context records that can no longer be in force: all before `read` but
    /// the last.
    private func prune(before read: UInt64) {
        guard let last = entries.lastIndex(where: { $0.position < read }), last > 0 else { return }
        entries.removeFirst(last)
    }

    /// Learns the context records of `run` (read in ring order, after every run
    /// before it).
    func observe(_ run: Ring.Run) {
        for r in run.records where r.kind == .context { learn(r) }
    }

    private func learn(_ r: Ring.Record) {
        let fragment = EventEnvelope.isFragment(r.bytes) ? Array(r.bytes) : []
        if let i = entries.firstIndex(where: { $0.position == r.position }) {
            entries[i].fragment = fragment
        } else if entries.last.map({ $0.position < r.position }) ?? true {
            entries.append(Entry(position: r.position, fragment: fragment))
        }
    }

    /// The context record in force just before `position`, or nil when unknown or not a
    /// fragment.
    private func inForceEntry(before position: UInt64) -> Entry? {
        guard let e = entries.last(where: { $0.position < position }), !e.fragment.isEmpty else { return nil }
        return e
    }

    // MARK: Completing records

    /// Cuts `run` in place so that its records, completed, total at most `maxBytes` (the
    /// batch limit is on what is sent), keeping at least one event.
    func fit(_ run: inout Ring.Run, maxBytes: Int) {
        var context = inForceEntry(before: run.records.first?.position ?? 0)?.fragment
        var total = 0
        var events = 0
        var cut: Int?
        records: for (i, r) in run.records.enumerated() {
            switch r.kind {
            case .context:
                context = EventEnvelope.isFragment(r.bytes) ? Array(r.bytes) : nil
            case .data, .bare:
                let size = r.bytes.count + (r.kind == .bare ? 1 + (context?.count ?? EventEnvelope.recoveredBound) : 0)
                if events > 0 && total + size > maxBytes {
                    cut = i
                    break records
                }
                total += size
                events += 1
            }
        }
        // Cut once the loop is over: the loop's iterator holds the array, and truncating
        // inside it copied the whole array (64 KiB at 4k records) at every cut batch.
        if let cut { run.truncate(to: cut) }
    }

    /// The records of `run` as they are sent: bare ones completed with the context in
    /// force, data ones as they are; context records are learnt, not sent.
    /// They go into `batch`, emptied first and its storage reused.
    func complete(_ run: Ring.Run, into batch: inout Batch) {
        batch.reset()
        batch.pieces.reserveCapacity(2 * run.records.count)
        var context = inForceEntry(before: run.records.first?.position ?? 0)
        for r in run.records {
            switch r.kind {
            case .context:
                learn(r)
                context = inForceEntry(before: r.position + 1)
            case .data:
                batch.pieces.append((.ring(r.bytes), true))
                batch.events += 1
            case .bare:
                batch.events += 1
                guard let (head, comma) = EventEnvelope.bareHead(r.bytes) else {
                    // Cannot be completed: it goes as it is.
                    batch.pieces.append((.ring(r.bytes), true))
                    continue
                }
                let key = context?.position ?? .max
                if batch.fragments[key] == nil {
                    let completion = EventEnvelope.completion(context?.fragment ?? recoveredFragment())
                    batch.fragments[key] = (batch.pool.count, completion.count)
                    batch.pool.append(contentsOf: completion)
                }
                if context == nil { batch.fallbacks += 1 }
                let f = batch.fragments[key] ?? (0, 0)
                batch.pieces.append((.ring(UnsafeRawBufferPointer(rebasing: r.bytes[0..<head])), false))
                batch.pieces.append((.pool(offset: comma ? f.offset : f.offset + 1, count: comma ? f.count : f.count - 1),
                                     true))
            }
        }
        fallbacks += batch.fallbacks
    }

    /// This process's fragment, marked as recovered: for bare records whose own context
    /// is lost.
    private func recoveredFragment() -> [UInt8] {
        EventEnvelope.recoveredFragment(current: current?(), sdkVersion: sdkVersion)
    }
}

/// The contexts in force over part of a ring, kept in the snapshot store's metadata
/// under `ring_context` (docs/FORMATS.md, "Snapshot store"): the context record in
/// force at the read cursor when it was written and every one after it up to `upto`,
/// so that the context in force at any read cursor up to `upto` is known.
struct RingContextMark: Equatable, Sendable {
    /// The metadata key.
    static let metadataKey = "ring_context"
    static let version: UInt8 = 1
    /// Most entries a value holds (a ring rarely has more than two per run in its window).
    static let maxEntries = 4096

    /// The ring file's id (`cairn_ring_id`).
    var ringID: UInt64
    /// Every context record below this position, from the first entry on, is listed.
    var upto: UInt64
    /// The context records, in ring order, at least one.
    var entries: [RingContexts.Entry]

    /// Version 1: u8 version, u8 0, u16 0, u32 entry count, u64 ring id, u64 upto; then
    /// per entry u64 position, u32 length, the fragment; little-endian.
    func encoded() -> [UInt8] {
        var out: [UInt8] = [Self.version, 0, 0, 0]
        LittleEndian.append(&out, UInt64(entries.count), bytes: 4)
        LittleEndian.append(&out, ringID, bytes: 8)
        LittleEndian.append(&out, upto, bytes: 8)
        for e in entries {
            LittleEndian.append(&out, e.position, bytes: 8)
            LittleEndian.append(&out, UInt64(e.fragment.count), bytes: 4)
            out += e.fragment
        }
        return out
    }

    /// Decodes a value; nil for anything that is not a whole, well-formed version-1
    /// value (entries in ring order below `upto`, each a fragment or empty: a context
    /// record that held no fragment).
    init?(_ b: [UInt8]) {
        var r = LittleEndian.Reader(bytes: b)
        guard r.u8() == Self.version, r.u8() == 0, r.u16() == 0, let count = r.u32(),
              count >= 1, count <= Self.maxEntries, let ringID = r.u64(), let upto = r.u64() else { return nil }
        var entries: [RingContexts.Entry] = []
        for _ in 0..<count {
            guard let position = r.u64(), let length = r.u32(), length <= EventEnvelope.maxFragment,
                  let fragment = r.bytes(UInt64(length)), fragment.isEmpty || EventEnvelope.isFragment(fragment),
                  position < upto, entries.last.map({ $0.position < position }) ?? true else { return nil }
            entries.append(RingContexts.Entry(position: position, fragment: fragment))
        }
        guard r.atEnd else { return nil }
        self.init(ringID: ringID, upto: upto, entries: entries)
    }

    init(ringID: UInt64, upto: UInt64, entries: [RingContexts.Entry]) {
        self.ringID = ringID
        self.upto = upto
        self.entries = entries
    }
}
