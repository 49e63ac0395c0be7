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
    /// is free; the due ones before it whose destination cannot take them now are put
    /// off (a few in one pass).
    func replayIfDue() {
        for _ in 0..<16 {
            guard replayOldest() else { return }
        }
    }

    /// Sends the oldest stored snapshot that is due; true when it was put off instead
    /// (its destination cannot take it now) and the next may be looked at.
    private func replayOldest() -> Bool {
        guard replaying == nil, !options.storeOnly, let store else { return false }
        if !deliveredUndeleted.isEmpty && clock.now >= undeletedRetry {
            deliveredUndeleted.removeAll { (try? store.delete($0)) != nil }
            undeletedRetry = clock.now + .seconds(1)
        }
        // The destinations first: while every one is down or paused, a pass must not
        // read the store's keys looking for a due request that could not be sent anyway.
        // An empty store is not read: an idle service's passes touch neither LMDB nor
        // the store's code (which then stays out of memory, see Cairn's page releases).
        let now = clock.now
        guard canSendAnother, store.count > 0, destinations.contains(where: { routes[$0.index].available(at: now) }),
              let snapshot = try? store.oldest(limit: deliveredUndeleted.count + parked.count + 1, readyAt: replayReadyAt)
                  .first(where: { !deliveredUndeleted.contains($0.id) && !parked.contains($0.id) })
        else { return false }
        guard let request = UploadRequest(record: snapshot.record) else {
            // Not a request (written by something else, or damaged where no check
            // could see it): one request's worth of events lost, counted.
            try? store.delete(snapshot.id)
            count(drop: .storeCorrupt, 1)
            return false
        }
        // A destination this process does not send to (the native upload without an
        // upload URL): the request waits on disk, looked at again in an hour, for a
        // process configured for it.
        if request.destination == .native && !options.native {
            try? store.recordAttempt(snapshot.id, nextAttemptAt: SnapshotStore.nowMillis() + 3_600_000)
            if parked.count < Self.maxUndeleted { parked.insert(snapshot.id) }
            return false
        }
        // Its destination cannot take it now (paused, its breaker open, or failing with
        // an attempt out): it waits on disk until then, no attempt counted, and the
        // next one is looked at (another destination's requests go on).
        let r = request.destination.index
        guard routes[r].available(at: now), canSend(to: request.destination), routes[r].breaker.allows(at: now) else {
            // (A flush then waits only for what is due: as after a failed attempt.)
            replayAllDue = false
            let wait = max(.seconds(1), (routes[r].availableFrom(now) ?? now) - now)
            guard (try? store.recordAttempt(snapshot.id, nextAttemptAt: SnapshotStore.nowMillis() + milliseconds(wait),
                                            countingAttempt: false)) != nil else { return false }
            progressed = true
            return true
        }
        nextToken += 1
        replaying = Replaying(token: nextToken, snapshot: snapshot, request: request)
        dispatch(token: nextToken, request, attempt: Int(snapshot.attempts))
        return false
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
            try? store.recordAttempt(snapshot.id, nextAttemptAt: routes[request.destination.index].heldUntil)
        case .retry, .pauseAndRetry:
            replayAllDue = false
            // Half to full backoff, so replays of many snapshots do not bunch up.
            let delay = options.backoff.delay(afterAttempt: Int(snapshot.attempts) + 1, random: Double.random(in: 0.5..<1))
            try? store.recordAttempt(snapshot.id, nextAttemptAt: SnapshotStore.nowMillis() + milliseconds(delay))
        }
    }
}
