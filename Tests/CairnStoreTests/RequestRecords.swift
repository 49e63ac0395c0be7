import CairnBase
import CairnStore
import CairnUploader

// The store keeps opaque records; these tests store requests in them, as the uploader
// does (UploadRequest.record), and salvage with the uploader's check.

extension SnapshotStore.Options {
    /// Default limits, with the uploader's record check.
    static var requests: Self { .init(recordCheck: UploadRequest.recordCheck) }
}

extension SnapshotStore {
    /// Stores `request`'s record.
    @discardableResult
    func put(_ request: UploadRequest, priority: Tier, durable: Bool? = nil, attempts: UInt32 = 0,
             now: UInt64 = SnapshotStore.nowMillis()) throws(StoreError) -> SnapshotID {
        try put(request.record, priority: priority, durable: durable, attempts: attempts, now: now)
    }
}

extension Snapshot {
    /// The request its record holds; one that matches no stored request when it does
    /// not decode (so that a comparison fails and says so).
    var request: UploadRequest {
        UploadRequest(record: record)
            ?? UploadRequest(method: "UNDECODABLE", url: "", headers: [], body: [], idempotencyKey: "")
    }
}
