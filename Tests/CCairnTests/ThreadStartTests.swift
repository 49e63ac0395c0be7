import CCairn
import Foundation
import Testing

/// `cairn_thread_start`: the body runs with its argument, on a thread that has taken
/// back its creator's whole CPU affinity (it is created with the creator's current CPU
/// left out, so that it does not run first beside it; where the kernel then places it
/// is the scheduler's choice, not checked here).
@Suite struct ThreadStartTests {
    /// What the body saw, filled in on the new thread.
    final class Seen: @unchecked Sendable {
        let done = DispatchSemaphore(value: 0)
        var allowed = ""
        var thread = pthread_self()
    }

    /// The `Cpus_allowed_list` line of the calling thread's status, as the kernel reports it.
    static func allowedCPUs() -> String {
        let status = (try? String(contentsOfFile: "/proc/thread-self/status", encoding: .utf8)) ?? ""
        return status.split(separator: "\n").first { $0.hasPrefix("Cpus_allowed_list:") }.map(String.init) ?? ""
    }

    @Test func bodyRunsWithItsArgumentAndTheCreatorsAffinity() {
        let seen = Seen()
        let arg = Unmanaged.passRetained(seen).toOpaque()
        let rc = cairn_thread_start({ raw in
            guard let raw else { return nil }
            let seen = Unmanaged<Seen>.fromOpaque(raw).takeRetainedValue()
            seen.thread = pthread_self()
            seen.allowed = ThreadStartTests.allowedCPUs()
            seen.done.signal()
            return nil
        }, arg)
        #expect(rc == 0)
        #expect(seen.done.wait(timeout: .now() + 10) == .success, "the body ran")
        #expect(pthread_equal(seen.thread, pthread_self()) == 0, "on a thread of its own")
        let mine = Self.allowedCPUs()
        #expect(!mine.isEmpty && seen.allowed == mine, "\(seen.allowed) vs \(mine)")
    }

    @Test func noBodyIsRefused() {
        #expect(cairn_thread_start(nil, nil) == CAIRN_EINVAL)
    }
}
