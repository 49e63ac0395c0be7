import CairnBase
import CairnProcessor
import CairnStore
import FoundationEssentials
import Glibc

/// One background thread with a stop flag and a wake-up condition.
final class BackgroundWork: @unchecked Sendable {
    // @unchecked: `stopping` and `signals` are touched with `condition` locked only.
    private let condition = Condition()
    private var stopping = false
    private var signals = 0

    /// Runs `body` on a new detached thread (a plain pthread: a Foundation `Thread`
    /// costs far more to create on the start path). When the system refuses a thread
    /// (its limit reached), says so on stderr: the SDK then never becomes ready and its
    /// events wait in the ring for the next start.
    func start(_ body: @escaping @Sendable () -> Void) {
        if !startThread(name: "cairn", body) {
            writeStandardError("[cairn] background thread not started: the system refused a thread\n")
        }
    }

    /// Wakes `waitForSignal` callers.
    func signal() {
        condition.lock()
        signals += 1
        condition.broadcast()
        condition.unlock()
    }

    func waitForSignal(timeout: Duration) {
        let deadline = ContinuousClock.now + timeout
        condition.lock()
        let seen = signals
        while signals == seen && !stopping && condition.wait(until: deadline) {}
        condition.unlock()
    }

    /// Waits up to `timeout`; true once `stop` was called.
    func waitForStop(timeout: Duration) -> Bool {
        let deadline = ContinuousClock.now + timeout
        condition.lock()
        while !stopping && condition.wait(until: deadline) {}
        let stopped = stopping
        condition.unlock()
        return stopped
    }

    func stop() {
        condition.lock()
        stopping = true
        condition.broadcast()
        condition.unlock()
    }
}
