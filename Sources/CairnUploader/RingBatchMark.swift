import CairnBase
import CairnStore

/// The batch the uploader is making safe, kept in the snapshot store's metadata under
/// `ring_batch` (docs/FORMATS.md, "Snapshot store"): which ring records it holds, its
/// batch id and its `Idempotency-Key`, and whether it is already stored.
///
/// It is written before a batch's first attempt and, with `stored` set, in the same
/// transaction that stores the batch. A process killed before the ring records were
/// released therefore leaves the next start enough to do the right thing: skip records
/// that are already in the store, or rebuild the same batch under the same key, so a
/// collector that received it drops the copy. No events are ever stored or sent under
/// two keys.
///
/// A batch whose request reports drops keeps them with its mark (version 2): the
/// `Cairn-Dropped` headers as built, and the drop table's counters they report. A batch
/// resumed after a kill is rebuilt with the same headers, and a stored one has its
/// counters marked reported, so a drop count belongs to one `Idempotency-Key` whatever
/// instant a process is killed at, and every attempt of that key carries it.
struct RingBatchMark: Equatable, Sendable {
    /// The metadata key of slot 0.
    static let metadataKey = "ring_batch"
    /// Slots for marks: one per batch out at once (``UploaderOptions/maxInFlight``).
    static let slots = 16
    /// The metadata key of slot `slot`: `ring_batch`, then `ring_batch.1` ... `ring_batch.15`.
    static func metadataKey(slot: Int) -> String { slot == 0 ? metadataKey : "\(metadataKey).\(slot)" }
    /// Version 1 without carried drops (read by every SDK since 0.2.0), 2 with them.
    static let version: UInt8 = 1
    static let versionWithDrops: UInt8 = 2

    /// The ring file's id (`cairn_ring_id`): a mark from another ring is ignored.
    var ringID: UInt64
    /// The read cursor when the batch was formed: its first record, or padding before it.
    var first: UInt64
    /// The position after its last record.
    var next: UInt64
    /// Its records.
    var events: UInt32
    /// The batch id in its frame.
    var batchID: UInt64
    /// Its `Idempotency-Key`.
    var key: String
    /// Whether it is in the snapshot store.
    var stored = false
    /// The drop counts its request carries, if it carries any.
    var drops: CarriedDrops?

    /// Drop counts a request carries: its drop headers, and the counters they report.
    struct CarriedDrops: Equatable, Sendable {
        /// `Cairn-Dropped` and `Cairn-Dropped-Sessions`, as built.
        var headers: [HTTPHeader]
        /// The drop table's counters they report.
        var reported: [DropReport]
    }

    init(ringID: UInt64, first: UInt64, next: UInt64, events: UInt32, batchID: UInt64, key: String,
         stored: Bool = false) {
        self.ringID = ringID
        self.first = first
        self.next = next
        self.events = events
        self.batchID = batchID
        self.key = key
        self.stored = stored
    }

    /// Version 1: u8 version, u8 stored (0/1), u16 key length, u32 events, u64 ring id,
    /// first, next, batch id, then the key's UTF-8 bytes; little-endian. Version 2 (with
    /// carried drops) goes on with u16 counter count, each u32 slot and u64 counted, then
    /// u16 header count, each u16 name length, name, u16 value length, value.
    func encoded() -> [UInt8] {
        var out: [UInt8] = [drops == nil ? Self.version : Self.versionWithDrops, stored ? 1 : 0]
        let keyBytes = Array(key.utf8.prefix(Int(UInt16.max)))
        LittleEndian.append(&out, UInt64(keyBytes.count), bytes: 2)
        LittleEndian.append(&out, UInt64(events), bytes: 4)
        for v in [ringID, first, next, batchID] { LittleEndian.append(&out, v, bytes: 8) }
        out += keyBytes
        guard let drops else { return out }
        LittleEndian.append(&out, UInt64(drops.reported.count), bytes: 2)
        for r in drops.reported {
            LittleEndian.append(&out, UInt64(UInt32(bitPattern: r.slot)), bytes: 4)
            LittleEndian.append(&out, r.counted, bytes: 8)
        }
        LittleEndian.append(&out, UInt64(drops.headers.count), bytes: 2)
        for h in drops.headers {
            for text in [h.name, h.value] {
                let bytes = Array(text.utf8.prefix(Int(UInt16.max)))
                LittleEndian.append(&out, UInt64(bytes.count), bytes: 2)
                out += bytes
            }
        }
        return out
    }

    /// Decodes a mark; nil for anything that is not a whole version-1 or version-2 mark.
    init?(_ b: [UInt8]) {
        var r = LittleEndian.Reader(bytes: b)
        guard let version = r.u8(), version == Self.version || version == Self.versionWithDrops,
              let stored = r.u8(), stored <= 1, let keyLength = r.u16(),
              let events = r.u32(), let ringID = r.u64(), let first = r.u64(), let next = r.u64(),
              let batchID = r.u64(), let key = r.bytes(UInt64(keyLength)), first < next else { return nil }
        self.init(ringID: ringID, first: first, next: next, events: events, batchID: batchID,
                  key: String(decoding: key, as: UTF8.self), stored: stored == 1)
        if version == Self.versionWithDrops {
            guard let counters = r.u16() else { return nil }
            var reported: [DropReport] = []
            for _ in 0..<counters {
                guard let slot = r.u32(), let counted = r.u64() else { return nil }
                reported.append(DropReport(slot: Int32(bitPattern: slot), counted: counted))
            }
            guard let count = r.u16() else { return nil }
            var headers: [HTTPHeader] = []
            for _ in 0..<count {
                guard let n = r.u16(), let name = r.bytes(UInt64(n)), let v = r.u16(), let value = r.bytes(UInt64(v))
                else { return nil }
                headers.append(HTTPHeader(String(decoding: name, as: UTF8.self), String(decoding: value, as: UTF8.self)))
            }
            drops = CarriedDrops(headers: headers, reported: reported)
        }
        guard r.atEnd else { return nil }
    }
}

/// A drop table slot's counter as reported by a request: once the request is
/// acknowledged or stored, the slot is reported up to `counted`.
struct DropReport: Equatable, Sendable {
    var slot: Int32
    var counted: UInt64
}

/// Which requests (legs) of a marked batch with more than one are done (delivered,
/// dropped by their destination's rules, or stored), kept in the snapshot store's
/// metadata beside the batch's mark under `ring_batch_legs` (slot 0), `ring_batch_legs.1`
/// ... (docs/FORMATS.md, "Snapshot store"), so a process killed between two legs rebuilds
/// only the others. A separate key, not a new mark version: a reader that does not know
/// it rebuilds every leg, as before.
struct RingBatchLegs: Equatable, Sendable {
    static let version: UInt8 = 1
    /// The metadata key of slot `slot`.
    static func metadataKey(slot: Int) -> String { slot == 0 ? "ring_batch_legs" : "ring_batch_legs.\(slot)" }

    /// The batch id of the mark it belongs to (another batch's in the slot: ignored).
    var batchID: UInt64
    /// How many legs the batch was built into (the same again, or the bits are ignored).
    var count: UInt8
    /// Bit k: leg k (native first, then the OTLP logs requests, then the traces ones).
    var done: UInt64

    /// u8 version, u8 count, u64 batch id, u64 done bits; little-endian.
    func encoded() -> [UInt8] {
        var out: [UInt8] = [Self.version, count]
        LittleEndian.append(&out, batchID, bytes: 8)
        LittleEndian.append(&out, done, bytes: 8)
        return out
    }

    init(batchID: UInt64, count: UInt8, done: UInt64) {
        self.batchID = batchID
        self.count = count
        self.done = done
    }

    /// Decodes one; nil for anything that is not a whole version-1 value.
    init?(_ b: [UInt8]) {
        var r = LittleEndian.Reader(bytes: b)
        guard let version = r.u8(), version == Self.version, let count = r.u8(), count <= 64,
              let batchID = r.u64(), let done = r.u64(), r.atEnd else { return nil }
        self.init(batchID: batchID, count: count, done: done)
    }
}
