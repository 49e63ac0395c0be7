// The sender pool: threads that make the attempts, started as the collector's pace
// needs them (``SenderLoad``) and ended when idle.
import CairnBase
import CairnStore
import CCairnCore
import FoundationEssentials
import Glibc

extension Uploader {
    /// How long an attempt waits for a busy sender before another sender may start.
    /// Senders start as the collector's pace needs them, not one per attempt handed
    /// over while the others are busy: a collector that answers in a millisecond keeps
    /// one busy, and each sender thread costs its stack and a heap arena of its own
    /// (glibc keeps the arena for the next thread), and its connection stays pooled.
    static let senderGrowthDelay: Duration = .milliseconds(2)

    /// How busy the senders must have been (``SenderLoad``) for another to start: half
    /// their time in sends. Senders all busy read as N/(N+1) once another has started,
    /// so a pool whose senders are all busy can double before the figure catches up.
    static let senderGrowthLoad = 0.5

    /// How often the load is looked at again while an attempt waits for senders that
    /// were not busy enough: a send that hangs makes them busy within a window.
    static let senderLoadRecheck: Duration = .milliseconds(25)

    /// Starts a sender when none is idle, fewer than ``UploaderOptions/maxInFlight``
    /// run, and there are none yet, or the oldest attempt waiting has waited
    /// ``senderGrowthDelay`` while the senders were busy ``senderGrowthLoad`` of their
    /// time. Returns when to look again while one waits.
    func growSenders() -> ContinuousClock.Instant? {
        let now = clock.now
        senders.lock()
        guard let oldest = jobs.first?.queued, idleSenders == 0, senderCount < maxInFlight else {
            senders.unlock()
            return nil
        }
        let waited = now - oldest >= Self.senderGrowthDelay
        let spawn = senderCount == 0
            || (waited && senderLoad.utilization(senders: senderCount, at: now) >= Self.senderGrowthLoad)
        if spawn { senderCount += 1 }
        senders.unlock()
        // Senders not busy enough: the attempt waits for one of them (its end wakes the
        // worker); the load is looked at again in a while, for a send that hangs.
        guard spawn else { return waited ? now + Self.senderLoadRecheck : oldest + Self.senderGrowthDelay }
        let started = startThread(name: "cairn-sender", { [self] in self.sendLoop() })
        senders.lock()
        if started {
            mostSenders = max(mostSenders, senderCount)
        } else {
            senderCount -= 1
        }
        senders.unlock()
        if !started {
            // Thread limit reached: the senders there are (or the next spawn) take it.
            if options.debugLogging { writeStandardError("[cairn] sender not started: the system refused a thread\n") }
            return now + .milliseconds(100)
        }
        return nil
    }

    /// A sender thread: sends the attempts it is handed, one at a time, and hands back
    /// what came of them. Sender threads are started as attempts need them, up to
    /// ``UploaderOptions/maxInFlight``, and end when the uploader stops or after
    /// ``UploaderOptions/senderIdleExit`` with nothing to send (all but the last).
    func sendLoop() {
        while true {
            senders.lock()
            var idleSince = clock.now
            while jobs.isEmpty && !sendersStopped {
                idleSenders += 1
                let signalled = senders.wait(until: idleSince + max(options.senderIdleExit, .milliseconds(10)))
                idleSenders -= 1
                if !signalled && jobs.isEmpty && !sendersStopped {
                    if senderCount > 1 { break }
                    idleSince = clock.now
                }
            }
            if jobs.isEmpty {
                senderCount -= 1
                senders.unlock()
                return
            }
            let job = jobs.removeFirst()
            senders.unlock()
            // The transport's one-time set-up (loading the TLS library) is not the
            // collector's time: a first send must not look like a slow collector and
            // start another sender.
            transport.prepare(for: job.request)
            senders.lock()
            let started = clock.now
            senderLoad.began(at: started)
            senders.unlock()
            let result = transport.send(job.request, attempt: job.attempt, timeout: job.timeout)
            let ended = clock.now
            senders.lock()
            senderLoad.ended(startedAt: started, at: ended)
            senders.unlock()
            outcomes.withLock { $0.append(Outcome(job: job, result: result, duration: ended - started)) }
            signal()
        }
    }

    func stopSenders() {
        senders.lock()
        sendersStopped = true
        senders.broadcast()
        senders.unlock()
    }

    var pendingOutcomes: Bool { !outcomes.withLock { $0.isEmpty } }
}
