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
    /// The metadata key.
    static let metadataKey = "ring_batch"
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
        Self.append(&out, UInt64(keyBytes.count), bytes: 2)
        Self.append(&out, UInt64(events), bytes: 4)
        for v in [ringID, first, next, batchID] { Self.append(&out, v, bytes: 8) }
        return out + keyBytes
    }

    /// Decodes a mark; nil for anything that is not a whole version-1 mark.
    init?(_ b: [UInt8]) {
        func read(_ at: Int, _ n: Int) -> UInt64 {
            (0..<n).reduce(UInt64(0)) { $0 | UInt64(b[at + $1]) << (8 * $1) }
        }
        guard b.count >= 40, b[0] == Self.version, b[1] <= 1 else { return nil }
        let keyLength = Int(read(2, 2))
        guard b.count == 40 + keyLength else { return nil }
        let (first, next) = (read(16, 8), read(24, 8))
        guard first < next else { return nil }
        self.init(ringID: read(8, 8), first: first, next: next, events: UInt32(read(4, 4)), batchID: read(32, 8),
                  key: String(decoding: b[40...], as: UTF8.self), stored: b[1] == 1)
    }

    private static func append(_ out: inout [UInt8], _ v: UInt64, bytes: Int) {
        for i in 0..<bytes { out.append(UInt8(truncatingIfNeeded: v >> (8 * i))) }
    }
}
