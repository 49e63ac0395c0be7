#if Logging && Metrics && ServiceLifecycle
import CairnTestSupport
import Foundation
import Glibc
import Testing

/// `CairnService` in a swift-service-lifecycle `ServiceGroup` (cairn-ecosystem-child
/// `lifecycle`): SIGTERM through the group drains the other services first, then flushes
/// what they tracked and records the run `clean`; cancellation stops Cairn at once.
@Suite(.serialized) struct LifecycleServiceTests {
    /// SIGTERM to the group: the worker stops and tracks its last event, then Cairn
    /// (first in the group, so shut down last) sends everything and records the run
    /// clean, which the next start reports. The group's handler is the only one: the
    /// process exits 0 from its own code, not from the signal.
    @Test func sigtermThroughTheGroupEndsTheRunClean() throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        let dir = try TemporaryDirectory("cairn-lifecycle")
        let env = Ecosystem.env(dir.path, collector)
        let child = try ChildProcess(Ecosystem.child, ["lifecycle"], environment: env)
        #expect(child.waitForOutput("ready", timeout: 30))
        usleep(200_000)
        child.signal(SIGTERM)
        let ended = child.finish(timeout: 60)
        #expect(ended.status == 0 && ended.out.contains("group ended"), "\(ended.status) \(ended.out) \(ended.err)")
        let events = try Ecosystem.native(collector)
        let stopped = try #require(events.first { $0["name"] as? String == "worker_stopped" },
                                   "the event tracked while the group drained was sent before the process ended")
        let count = try #require(Ecosystem.props(stopped)["count"] as? Int)
        let work = Set(events.filter { $0["name"] as? String == "work" }.compactMap { Ecosystem.props($0)["i"] as? Int })
        #expect(work == Set(0..<count), "every event the worker tracked arrived: \(work.count) of \(count)")

        let next = try runToEnd(Ecosystem.child, ["idle"], environment: env, timeout: 60)
        #expect(next.status == 0, "\(next.err)")
        let end = try #require(try Ecosystem.native(collector).first { $0["name"] as? String == "session_end" })
        #expect(Ecosystem.props(end)["reason"] as? String == "clean", "\(end)")
    }

    /// A failing service cancels the group: Cairn stops at once, even with a collector
    /// that does not answer (a graceful shutdown would wait up to its timeout), and what
    /// was tracked stays on disk: the next start sends it, with the run reported clean.
    @Test func cancellationStopsAtOnceAndLosesNothing() throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        try collector.setDefault(["stall": 30])
        let dir = try TemporaryDirectory("cairn-lifecycle")
        var env = Ecosystem.env(dir.path, collector)
        env["CAIRN_SHUTDOWN_TIMEOUT_MS"] = "20000"
        let r = try runToEnd(Ecosystem.child, ["lifecycle-cancel"], environment: env, timeout: 60)
        #expect(r.status == 0, "\(r.err)")
        let line = try #require(r.out.split(separator: "\n").first { $0.hasPrefix("group failed ") }, "\(r.out)")
        let ms = try #require(Int(line.split(separator: " ").last ?? ""))
        #expect(ms < 5000, "stopped at once, not after the 20 s shutdown timeout: \(ms) ms")

        try collector.setDefault(["status": 200])
        let next = try runToEnd(Ecosystem.child, ["idle"], environment: env, timeout: 60)
        #expect(next.status == 0, "\(next.err)")
        let events = try Ecosystem.native(collector)
        let work = Set(events.filter { $0["name"] as? String == "work" }.compactMap { Ecosystem.props($0)["i"] as? Int })
        #expect(work == Set(0..<20), "\(work.sorted())")
        let end = try #require(events.first { $0["name"] as? String == "session_end" })
        #expect(Ecosystem.props(end)["reason"] as? String == "clean", "\(end)")
    }
}
#endif
