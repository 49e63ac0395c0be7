import CCairnCrash
import CairnBase
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
        var blocked = ""
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

    /// The Swift layers' `startThread` (CairnBase, no C) starts its thread the same way:
    /// the body runs on a thread of its own, named, with the creator's whole affinity
    /// back, and the service's signals blocked.
    @Test func swiftStartThreadDoesTheSame() {
        let seen = Seen()
        let started = startThread(name: "cairn-probe") {
            seen.thread = pthread_self()
            seen.allowed = ThreadStartTests.allowedCPUs()
            let status = (try? String(contentsOfFile: "/proc/thread-self/status", encoding: .utf8)) ?? ""
            seen.blocked = status.split(separator: "\n").first { $0.hasPrefix("SigBlk:") }.map(String.init) ?? ""
            seen.done.signal()
        }
        #expect(started)
        #expect(seen.done.wait(timeout: .now() + 10) == .success, "the body ran")
        #expect(pthread_equal(seen.thread, pthread_self()) == 0, "on a thread of its own")
        let mine = Self.allowedCPUs()
        #expect(!mine.isEmpty && seen.allowed == mine, "\(seen.allowed) vs \(mine)")
        let blocked = seen.blocked
        let mask = UInt64(blocked.split(separator: "\t").last.map(String.init) ?? "", radix: 16) ?? 0
        for signal in [SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGALRM, SIGPIPE] {
            #expect(mask & (UInt64(1) << UInt64(signal - 1)) != 0, "signal \(signal) blocked: \(blocked)")
        }
    }
}
