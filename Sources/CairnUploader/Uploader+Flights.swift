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
                let paused = state.withLock { ($0.pausedUntil ?? now) > now }
                // Paused while a flush waits, or the breaker open: store now rather than
                // wait (unless the store refused it a moment ago).
                if options.storeOnly || paused || leg.attempts >= options.attempts || !breaker.allows(at: now) {
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
                if !canSendAnother { break flights }
                leg.sending = true
                dispatch(token: leg.token, leg.request, attempt: leg.attempts)
                leg.attempts += 1
            }
        }
        return next
    }

    /// Whether another attempt may start now: several at once while the collector
    /// answers, one at a time while it fails (and while the breaker probes); none once
    /// the uploader is stopping (its flush is over: an attempt started now could not be
    /// waited for, and its outcome would not be taken in).
    var canSendAnother: Bool {
        let sending = flights.reduce(0) { n, f in n + f.legs.filter(\.sending).count } + (replaying == nil ? 0 : 1)
        let (failing, stopping) = state.withLock { ($0.collectorFailing, $0.stopping) }
        return !stopping && sending < maxInFlight && (sending == 0 || !failing)
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
                let last = i == requests.count - 1 && lastLeg
                try store.put(request.record, priority: options.priority, attempts: UInt32(leg.attempts),
                              metadata: last ? [(RingBatchMark.metadataKey(slot: f.slot), mark.encoded())] : [])
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
        var timeout = request.destination.isOTLP
            ? (request.destination == .otlpLogs ? options.otlp?.logs : options.otlp?.traces)?.timeout ?? options.requestTimeout
            : options.requestTimeout
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
                let events = leg.request.records ?? f.events
                state.withLock { $0.stats.deliveredBatches += 1; $0.stats.deliveredEvents += events }
            case .drop(let reason):
                // Too large: stored as two halves, which go on their own.
                if reason == .rejected(status: 413), storeHalves(of: leg, of: f) { continue }
                // Refused: its drop counts were not taken, the next batch reports them.
                leg.done = true
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

        let now = clock.now
        switch action {
        case .delivered, .drop:
            holds = 0
            breaker.succeeded()
            state.withLock { $0.collectorFailing = false }
        case .hold:
            // Nothing is sent (stored requests wait) until one probe after the wait.
            holds += 1
            let wait = options.holdBackoff.delay(afterAttempt: holds - 1, random: Double.random(in: 0.5..<1))
            heldUntil = SnapshotStore.nowMillis() + milliseconds(wait)
            let before = breaker.openings
            breaker.hold(until: now + wait)
            state.withLock {
                $0.collectorFailing = true
                $0.stats.failedAttempts += 1
                $0.stats.holds += 1
                if breaker.openings > before { $0.stats.breakerOpenings += 1 }
            }
        case .retry, .pauseAndRetry:
            let before = breaker.openings
            breaker.failed(at: now)
            state.withLock {
                $0.collectorFailing = true
                $0.stats.failedAttempts += 1
                if breaker.openings > before { $0.stats.breakerOpenings += 1 }
            }
        }
        noteDeliveryState(action, outcome)
        if let pause {
            let until = now + min(pause, options.maxPause)
            state.withLock { s in
                s.pausedUntil = max(s.pausedUntil ?? until, until)
                s.stats.pauses += 1
            }
        }
        return action
    }

    /// An OTLP collector's partial success: the records it rejected counted as
    /// dropped (`otlp_partial`), its message said once as a notice.
    func notePartialSuccess(_ response: TransportResponse, of request: UploadRequest) {
        let json = request.header("Content-Type") == "application/json"
        guard let partial = OTLPPartialSuccess(body: response.body, json: json) else { return }
        if partial.rejected > 0 { count(drop: .otlpPartial, Int(clamping: partial.rejected)) }
        if !partial.message.isEmpty, partialMessages.insert(partial.message).inserted, partialMessages.count <= 16 {
            options.notice?("[cairn] the OTLP collector at \(DeliveryStatus.display(request.url)) took a request "
                + "in part: \(partial.rejected) rejected: \(partial.message)")
        }
    }

    /// Tells the operator when delivery changes state (``DeliveryStatus``), and keeps the
    /// state in the store for `cairn status`.
    func noteDeliveryState(_ action: DeliveryAction, _ outcome: Outcome) {
        let nowMillis = SnapshotStore.nowMillis()
        guard let line = deliveryStatus.record(action, outcome.result, url: outcome.job.request.url, now: nowMillis,
                                               waiting: { store?.stats.count })
        else { return }
        options.notice?("[cairn] " + line)
        try? store?.setMetadata(DeliveryStatus.metadataKey, deliveryStatus.encoded(now: nowMillis))
    }
}
