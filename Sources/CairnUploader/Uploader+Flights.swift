// Attempts: what is out, what is stored when it cannot be sent, what came back and what
// it means (delivered, retried, held, split, dropped).
import CairnBase
import CairnProcessor
import CairnStore
import CCairnCore
import FoundationEssentials
import Glibc

extension Uploader {
    /// One attempt handed to a sender thread, and what came of it.
    struct Job: @unchecked Sendable {
        // @unchecked: the start log holds only values.
        let token: Int
        let request: UploadRequest
        let attempt: Int
        let timeout: Duration
        let log: UploadStartLog?
        /// When it was handed over.
        let queued: ContinuousClock.Instant
    }

    struct Outcome: @unchecked Sendable {
        let job: Job
        let result: TransportResult
        let duration: Duration
    }

    /// Starts the attempts that are due, stores what should not wait (out of attempts,
    /// paused, breaker open, store-only), and returns when a waiting attempt is due.
    func advanceFlights() -> ContinuousClock.Instant? {
        var next: ContinuousClock.Instant?
        keepMarks()
        flights: for f in flights where !f.done {
            // Nothing goes out before it and every batch before it is marked, or has
            // waited long enough (then at least once, counted).
            guard f.legs.contains(where: { !$0.done && !$0.sending }) else { continue }
            let now = clock.now
            guard sendable(f) else {
                next = min(next ?? now + .milliseconds(100), now + .milliseconds(100))
                break
            }
            if !f.marked && !f.unmarkedCounted {
                f.unmarkedCounted = true
                state.withLock { $0.stats.unmarkedSends += 1 }
            }
            for leg in f.legs where !leg.done && !leg.sending {
                let now = clock.now
                let r = leg.request.destination.index
                // Its destination paused (a flush waits, or another destination is not),
                // or its breaker open: store now rather than wait (unless the store
                // refused it a moment ago).
                if options.storeOnly || routes[r].paused(at: now) || leg.attempts >= options.attempts
                    || !routes[r].breaker.wouldAllow(at: now) {
                    if let t = leg.storeDue, t > now {
                        next = min(next ?? t, t)
                    } else {
                        store(leg, of: f)
                    }
                    continue
                }
                if leg.due > now {
                    next = min(next ?? leg.due, leg.due)
                    continue
                }
                guard canSendAnother else { break flights }
                // The breaker moved to half-open only by the attempt it lets through.
                guard canSend(to: leg.request.destination), routes[r].breaker.allows(at: now) else { continue }
                leg.sending = true
                dispatch(token: leg.token, leg.request, attempt: leg.attempts)
                leg.attempts += 1
            }
        }
        return next
    }

    /// Whether another attempt may start now: up to ``maxInFlight`` at once; none once
    /// the uploader is stopping (its flush is over: an attempt started now could not be
    /// waited for, and its outcome would not be taken in).
    var canSendAnother: Bool {
        let sending = flights.reduce(0) { n, f in n + f.legs.filter(\.sending).count } + (replaying == nil ? 0 : 1)
        return !state.withLock({ $0.stopping }) && sending < maxInFlight
    }

    /// Whether another attempt to `destination` may start now (with ``canSendAnother``):
    /// several at once while its collector answers, one at a time while it fails (and
    /// while its breaker probes).
    func canSend(to destination: UploadDestination) -> Bool {
        guard routes[destination.index].failing else { return true }
        let out = flights.reduce(0) { n, f in n + f.legs.filter { $0.sending && $0.request.destination == destination }.count }
        return out == 0 && replaying?.request.destination != destination
    }

    /// Keeps a leg's exact request in the store (its flight's records are released in
    /// turn, once every leg is done); without a store, or when the store refuses it
    /// (full), it stays in the ring and is tried again later.
    func store(_ leg: Leg, of f: Flight) {
        guard let store else {
            // No store: the records stay in the ring, which is retried after a pause.
            leg.attempts = 0
            leg.due = clock.now + options.backoff.cap / 10
            return
        }
        keep(leg, of: f, as: [leg.request], in: store) { $0.storedBatches += 1 }
    }

    /// A request the collector found too large (413) goes to the store as two halves
    /// (``UploadRequest/halves(level:)``), its batch's mark with the second: its
    /// records are then released in turn, and the halves are replayed. False when it
    /// cannot be halved (one event) or stored: then it is dropped, or tried again later.
    func storeHalves(of leg: Leg, of f: Flight) -> Bool {
        guard let store, let (first, second) = leg.request.halves(level: options.compressionLevel) else { return false }
        keep(leg, of: f, as: [first, second], in: store) { $0.splitBatches += 1 }
        return true
    }

    /// Puts `requests` in the store for `leg` of flight `f`, the batch's mark (stored)
    /// in the same transaction as the last when no other leg is left, and the leg is
    /// done; `counting` updates the stats. When the store refuses (full, failing), the
    /// records stay in the ring and this request in memory, tried again later.
    func keep(_ leg: Leg, of f: Flight, as requests: [UploadRequest], in store: SnapshotStore,
              counting: (inout UploaderStats) -> Void) {
        do {
            var mark = f.mark
            mark.stored = true
            let lastLeg = f.legs.allSatisfy { $0 === leg || $0.done }
            for (i, request) in requests.enumerated() {
                // With the last request: the batch's mark, stored, once no other leg is
                // left; else which legs are done, this one with them.
                var metadata: [(String, [UInt8])] = []
                if i == requests.count - 1 {
                    metadata = lastLeg ? [(RingBatchMark.metadataKey(slot: f.slot), mark.encoded())]
                        : legsDone(f, with: leg).map { [$0] } ?? []
                }
                try store.put(request.record, priority: options.priority, attempts: UInt32(leg.attempts),
                              metadata: metadata)
            }
            if leg.reportsDrops { markReported(f.reported) }
            leg.done = true
            progressed = true
            state.withLock { counting(&$0.stats) }
        } catch {
            // The store refused it (a full disk, a failing one): it stays in the ring and
            // in memory, and goes back to the collector, which may be back by then (one
            // more attempt, then the store again), rather than waiting on the store alone.
            state.withLock { $0.stats.storeFailures += 1 }
            let wait = options.backoff.cap / 10
            leg.storeDue = clock.now + wait
            leg.due = clock.now + wait
            leg.attempts = min(leg.attempts, max(0, options.attempts - 1))
        }
    }

    /// The metadata entry saying which legs of flight `f` are done, `leg` with them;
    /// nil for a flight of one leg (its mark says it all).
    func legsDone(_ f: Flight, with leg: Leg? = nil) -> (String, [UInt8])? {
        guard f.legs.count > 1, f.legs.count <= 64 else { return nil }
        var bits: UInt64 = 0
        for (k, l) in f.legs.enumerated() where l.done || l === leg { bits |= 1 << UInt64(k) }
        return (RingBatchLegs.metadataKey(slot: f.slot),
                RingBatchLegs(batchID: f.mark.batchID, count: UInt8(f.legs.count), done: bits).encoded())
    }

    /// Keeps which legs of `f` are done (a leg delivered or dropped), so that a process
    /// killed before the others are rebuilds only them. A failed write is ignored: the
    /// leg is then sent again after a kill (the native one under its key).
    func keepLegsDone(_ f: Flight) {
        guard let store, let (key, value) = legsDone(f) else { return }
        try? store.setMetadata(key, value)
    }

    /// Logs the start of an attempt and hands it to a sender thread. While a flush
    /// waits, the attempt ends by the flush's deadline.
    func dispatch(token: Int, _ stored: UploadRequest, attempt: Int) {
        let request = resolved(stored)
        // Logs decode the batch: only when someone reads them.
        let logging = options.debugLogging || options.observer != nil
        let log = logging ? UploadStartLog(request: request, attempt: attempt) : nil
        if let log {
            options.observer?.uploadWillStart(log)
            if options.debugLogging { writeStandardError((log.description + "\n")) }
        }
        // An OTLP signal's own timeout (`OTEL_EXPORTER_OTLP_TIMEOUT`), else the options'.
        var timeout = options.otlp?.signal(for: request.destination)?.timeout ?? options.requestTimeout
        if let deadline = state.withLock({ $0.flushDeadline }) {
            timeout = max(.milliseconds(100), min(timeout, deadline - clock.now))
        }
        let job = Job(token: token, request: request, attempt: attempt, timeout: timeout, log: log, queued: clock.now)
        senders.lock()
        jobs.append(job)
        senders.signal()
        senders.unlock()
        _ = growSenders()
    }

    /// Takes in what the senders have brought back.
    func collectOutcomes() {
        let arrived = outcomes.withLock { o -> [Outcome] in
            defer { o.removeAll() }
            return o
        }
        for outcome in arrived {
            progressed = true
            let action = classify(outcome)
            if let r = replaying, r.token == outcome.job.token {
                replaying = nil
                finishReplay(r.snapshot, r.request, action)
                continue
            }
            guard let f = flights.first(where: { $0.legs.contains { $0.token == outcome.job.token } }),
                  let leg = f.legs.first(where: { $0.token == outcome.job.token }) else { continue }
            leg.sending = false
            switch action {
            case .delivered:
                if leg.reportsDrops { markReported(f.reported) }
                leg.done = true
                keepLegsDone(f)
                let events = leg.request.records ?? f.events
                state.withLock { $0.stats.deliveredBatches += 1; $0.stats.deliveredEvents += events }
            case .drop(let reason):
                // Too large: stored as two halves, which go on their own.
                if reason == .rejected(status: 413), storeHalves(of: leg, of: f) { continue }
                // Refused: its drop counts were not taken, the next batch reports them.
                leg.done = true
                keepLegsDone(f)
                count(drop: reason, leg.request.records ?? f.events)
            case .pauseAndRetry, .hold:
                store(leg, of: f)
            case .retry:
                let delay = options.backoff.delay(afterAttempt: leg.attempts - 1, random: Double.random(in: 0..<1))
                // A flush that would end before the next attempt wants the batch safe
                // now: stored, it is retried later.
                let flushEnds = state.withLock { $0.flushDeadline }
                if leg.attempts < options.attempts && flushEnds.map({ clock.now + delay < $0 }) ?? true {
                    leg.due = clock.now + delay
                } else {
                    leg.attempts = options.attempts
                    store(leg, of: f)
                }
            }
        }
    }

    /// What an attempt's result means: logs it, classifies it, updates the breaker and
    /// pauses.
    func classify(_ outcome: Outcome) -> DeliveryAction {
        let action: DeliveryAction
        var pause: Duration?
        let otlp = outcome.job.request.destination.isOTLP
        switch outcome.result {
        case .response(let response):
            action = (otlp ? StatusPolicy.otlp : options.policy).action(for: response.status)
            if otlp, action == .delivered { notePartialSuccess(response, of: outcome.job.request) }
            if action == .pauseAndRetry {
                pause = response.header("Retry-After").flatMap { StatusPolicy.parseRetryAfter($0) } ?? options.backoff.base
            }
        case .failure(let failure):
            // A request that cannot be sent as configured (the URL, a proxy variable)
            // is a configuration fault: kept, never dropped.
            action = failure.kind == .invalidRequest ? .hold : .retry
        }
        if let log = outcome.job.log {
            let finished = UploadResultLog(start: log, result: outcome.result, duration: outcome.duration,
                                           success: action == .delivered)
            options.observer?.uploadDidFinish(finished)
            if options.debugLogging { writeStandardError((finished.description + "\n")) }
        }

        // What it means for its destination alone.
        let now = clock.now
        let r = outcome.job.request.destination.index
        switch action {
        case .delivered, .drop:
            routes[r].holds = 0
            routes[r].breaker.succeeded()
        case .hold:
            // Nothing is sent to it (its stored requests wait) until one probe after the wait.
            routes[r].holds += 1
            let wait = options.holdBackoff.delay(afterAttempt: routes[r].holds - 1, random: Double.random(in: 0.5..<1))
            routes[r].heldUntil = SnapshotStore.nowMillis() + milliseconds(wait)
            let before = routes[r].breaker.openings
            routes[r].breaker.hold(until: now + wait)
            let opened = routes[r].breaker.openings > before
            state.withLock {
                $0.stats.failedAttempts += 1
                $0.stats.holds += 1
                if opened { $0.stats.breakerOpenings += 1 }
            }
        case .retry, .pauseAndRetry:
            let before = routes[r].breaker.openings
            routes[r].breaker.failed(at: now)
            let opened = routes[r].breaker.openings > before
            state.withLock {
                $0.stats.failedAttempts += 1
                if opened { $0.stats.breakerOpenings += 1 }
            }
        }
        noteDeliveryState(action, outcome)
        if let pause {
            let until = now + min(pause, options.maxPause)
            routes[r].pausedUntil = max(routes[r].pausedUntil ?? until, until)
            state.withLock { $0.stats.pauses += 1 }
        }
        return action
    }

    /// An OTLP collector's partial success: the records it rejected counted as
    /// dropped (`otlp_partial`), its message said once as a notice.
    func notePartialSuccess(_ response: TransportResponse, of request: UploadRequest) {
        let json = request.header("Content-Type") == "application/json"
        guard let partial = OTLPPartialSuccess(body: response.body, json: json) else { return }
        if partial.rejected > 0 { count(drop: .otlpPartial, Int(clamping: partial.rejected)) }
        if !partial.message.isEmpty {
            let message = String(decoding: partial.message.utf8.prefix(200), as: UTF8.self)
            state.withLock {
                $0.stats.otlpMessages += 1
                $0.stats.lastOTLPMessage = message
            }
        }
        if !partial.message.isEmpty, partialMessages.insert(partial.message).inserted, partialMessages.count <= 16 {
            options.notice?("[cairn] the OTLP collector at \(DeliveryStatus.display(request.url)) took a request "
                + "in part: \(partial.rejected) rejected: \(partial.message)")
        }
    }

    /// Tells the operator when delivery changes state (``DeliveryStatus``), and keeps the
    /// state in the store for `cairn status`.
    func noteDeliveryState(_ action: DeliveryAction, _ outcome: Outcome) {
        let nowMillis = SnapshotStore.nowMillis()
        let destination = outcome.job.request.destination
        guard let line = routes[destination.index].status.record(action, outcome.result, url: outcome.job.request.url,
                                                                 otlp: destination.isOTLP, now: nowMillis,
                                                                 waiting: { store?.stats.count })
        else { return }
        options.notice?("[cairn] " + line)
        try? store?.setMetadata(DeliveryStatus.metadataKey(for: destination),
                                routes[destination.index].status.encoded(now: nowMillis))
    }
}
