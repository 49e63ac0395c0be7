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
struct RingBatchMark: Equatable, Sendable {
    /// The metadata key of slot 0.
    static let metadataKey = "ring_batch"
    /// Slots for marks: one per batch out at once (``UploaderOptions/maxInFlight``).
    static let slots = 16
    /// The metadata key of slot `slot`: `ring_batch`, then `ring_batch.1` ... `ring_batch.15`.
    static func metadataKey(slot: Int) -> String { slot == 0 ? metadataKey : "\(metadataKey).\(slot)" }
    static let version: UInt8 = 1

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
    /// first, next, batch id, then the key's UTF-8 bytes; little-endian.
    func encoded() -> [UInt8] {
        var out: [UInt8] = [Self.version, stored ? 1 : 0]
        let keyBytes = Array(key.utf8.prefix(Int(UInt16.max)))
        LittleEndian.append(&out, UInt64(keyBytes.count), bytes: 2)
        LittleEndian.append(&out, UInt64(events), bytes: 4)
        for v in [ringID, first, next, batchID] { LittleEndian.append(&out, v, bytes: 8) }
        return out + keyBytes
    }

    /// Decodes a mark; nil for anything that is not a whole version-1 mark.
    init?(_ b: [UInt8]) {
        var r = LittleEndian.Reader(bytes: b)
        guard r.u8() == Self.version, let stored = r.u8(), stored <= 1, let keyLength = r.u16(),
              let events = r.u32(), let ringID = r.u64(), let first = r.u64(), let next = r.u64(),
              let batchID = r.u64(), let key = r.bytes(UInt64(keyLength)), r.atEnd, first < next else { return nil }
        self.init(ringID: ringID, first: first, next: next, events: events, batchID: batchID,
                  key: String(decoding: key, as: UTF8.self), stored: stored == 1)
    }
}
