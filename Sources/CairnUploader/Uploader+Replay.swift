// Replay: stored requests sent again, oldest first, with their own bytes and
// idempotency key; delivered ones deleted.
import CairnBase
import CairnStore
import CCairnCore
import FoundationEssentials
import Glibc

extension Uploader {
    /// A stored request being replayed.
    struct Replaying {
        let token: Int
        let snapshot: Snapshot
        /// The request its record holds.
        let request: UploadRequest
    }

    static let maxUndeleted = 64

    /// Stored requests whose next attempt is due by this time are replayed now.
    var replayReadyAt: UInt64 { replayAllDue ? .max : SnapshotStore.nowMillis() }

    /// Sends the oldest stored snapshot that is due, when no replay is out and a sender
    /// is free.
    func replayIfDue() {
        guard replaying == nil, !options.storeOnly, let store,
              !state.withLock({ ($0.pausedUntil ?? clock.now) > clock.now }) else { return }
        if !deliveredUndeleted.isEmpty && clock.now >= undeletedRetry {
            deliveredUndeleted.removeAll { (try? store.delete($0)) != nil }
            undeletedRetry = clock.now + .seconds(1)
        }
        // The breaker first: while the collector is down, a pass must not read the
        // store's keys looking for a due request that could not be sent anyway.
        // An empty store is not read: an idle service's passes touch neither LMDB nor
        // the store's code (which then stays out of memory, see Cairn's page releases).
        guard canSendAnother, store.count > 0, breaker.wouldAllow(at: clock.now),
              let snapshot = try? store.oldest(limit: deliveredUndeleted.count + parked.count + 1, readyAt: replayReadyAt)
                  .first(where: { !deliveredUndeleted.contains($0.id) && !parked.contains($0.id) }),
              breaker.allows(at: clock.now) else { return }
        guard let request = UploadRequest(record: snapshot.record) else {
            // Not a request (written by something else, or damaged where no check
            // could see it): one request's worth of events lost, counted.
            try? store.delete(snapshot.id)
            count(drop: .storeCorrupt, 1)
            return
        }
        // A destination this process does not send to (the native upload without an
        // upload URL): the request waits on disk, looked at again in an hour, for a
        // process configured for it.
        if request.destination == .native && !options.native {
            try? store.recordAttempt(snapshot.id, nextAttemptAt: SnapshotStore.nowMillis() + 3_600_000)
            if parked.count < Self.maxUndeleted { parked.insert(snapshot.id) }
            return
        }
        nextToken += 1
        replaying = Replaying(token: nextToken, snapshot: snapshot, request: request)
        dispatch(token: nextToken, request, attempt: Int(snapshot.attempts))
    }

    /// What one replay's outcome means for the stored request.
    func finishReplay(_ snapshot: Snapshot, _ request: UploadRequest, _ action: DeliveryAction) {
        guard let store else { return }
        switch action {
        case .delivered:
            do {
                try store.delete(snapshot.id)
            } catch {
                // Delivered, but still stored (the disk is full): not sent again.
                if deliveredUndeleted.count < Self.maxUndeleted { deliveredUndeleted.append(snapshot.id) }
            }
            let events = (try? FrameDecoder.info(of: request.body)).map { Int($0.recordCount) } ?? 0
            state.withLock {
                $0.stats.replayedBatches += 1
                $0.stats.deliveredBatches += 1
                $0.stats.deliveredEvents += events
            }
        case .drop(let reason):
            if reason == .rejected(status: 413), let (first, second) = request.halves(level: options.compressionLevel) {
                // Too large: replaced by its halves (a kill in between leaves it to be
                // split again, into the same halves under the same keys).
                do {
                    try store.put(first.record, priority: snapshot.priority, attempts: snapshot.attempts)
                    try store.put(second.record, priority: snapshot.priority, attempts: snapshot.attempts)
                    try store.delete(snapshot.id)
                    state.withLock { $0.stats.splitBatches += 1 }
                } catch {
                    state.withLock { $0.stats.storeFailures += 1 }
                }
                return
            }
            try? store.delete(snapshot.id)
            count(drop: reason, request.events)
            // The drops it reported were never taken: count them again for the next batch.
            for (r, n) in request.reportedDrops { count(drop: DropReason(name: r), n, inStats: false) }
        case .hold:
            replayAllDue = false
            try? store.recordAttempt(snapshot.id, nextAttemptAt: heldUntil)
        case .retry, .pauseAndRetry:
            replayAllDue = false
            // Half to full backoff, so replays of many snapshots do not bunch up.
            let delay = options.backoff.delay(afterAttempt: Int(snapshot.attempts) + 1, random: Double.random(in: 0.5..<1))
            try? store.recordAttempt(snapshot.id, nextAttemptAt: SnapshotStore.nowMillis() + milliseconds(delay))
        }
    }
}
