import CairnTestSupport
import Foundation
import Testing

/// Starting, stopping and reconfiguring a real service process (`cairn-service-child`)
/// the way operators do: a start that cannot take the service down, SIGTERM at deploy
/// time, a URL fixed or set after events were stored, sloppy environment values, a
/// collector that is down or stalls, and `kill -9` while a batch is being made safe.
@Suite(.serialized) struct LifecycleTests {
    typealias Child = ServiceProcessTests

    /// A service child running in the background, for signals (by the tests' runner
    /// rules: its own process group, ended with the test).
    final class Running {
        let child: ChildProcess

        init(_ args: [String], env: [String: String]) throws {
            child = try ChildProcess(productsDirectory + "/cairn-service-child", args,
                                     environment: ProcessInfo.processInfo.environment
                                        .filter { !$0.key.hasPrefix("CAIRN_") }.merging(env) { $1 })
        }

        /// Its process id.
        var pid: pid_t { child.pid }

        /// Whether it is still running.
        var isRunning: Bool { !child.hasEnded }

        /// Waits (at most 60 s) for the child's "ready" line; false if it ended first.
        func waitUntilReady() -> Bool { child.waitForOutput("ready\n", timeout: 60) }

        func signal(_ signo: Int32) { child.signal(signo) }

        /// Waits for the exit (killing the child's group after `timeout` seconds: a test
        /// never hangs on it); the termination reason and status.
        func wait(timeout: Double = 60) -> (reason: Process.TerminationReason, status: Int32, err: String) {
            let end = child.finish(timeout: timeout)
            return (end.signaled ? .uncaughtSignal : .exit, end.status, end.err)
        }
    }

    static func received(_ collector: CollectorProcess) throws -> [[String: Any]] {
        try collector.events().compactMap {
            (try? JSONSerialization.jsonObject(with: Data($0.record.utf8))) as? [String: Any]
        }
    }

    static func childIndexes(_ events: [[String: Any]]) -> [Int] {
        events.filter { $0["name"] as? String == "child_event" }
            .compactMap { ($0["properties"] as? [String: Any])?["i"] as? Int }
    }

    /// SIGTERM, as systemd, Kubernetes and deploys send it, to a service that asked the
    /// SDK to handle it: every accepted event is delivered, the process still dies of
    /// SIGTERM, and the next start reports the run as ended `clean`.
    @Test func sigtermEndsTheSessionCleanAndDeliversEverything() throws {
        let collector = try CollectorProcess()
        let dir = try Child.DataDir()
        let env = ["CAIRN_APP_ID": "orders", "CAIRN_DATA_DIR": dir.path, "CAIRN_HANDLE_TERMINATION": "1",
                   "CAIRN_UPLOAD_URL": collector.baseURL + "/v1/batch", "CAIRN_BATCH_AGE_MS": "60000"]
        let child = try Running(["serve", "300"], env: env)
        #expect(child.waitUntilReady())
        child.signal(SIGTERM)
        let end = child.wait()
        #expect(end.reason == .uncaughtSignal && end.status == SIGTERM, "\(end)")
        #expect(Set(Self.childIndexes(try Self.received(collector))) == Set(0..<300),
                "delivered at SIGTERM, although the batch age was a minute")

        let next = try Child.child(["run", "0"], env: env)
        #expect(next.status == 0, "\(next.err)")
        let ends = try Self.received(collector).filter { $0["name"] as? String == "session_end" }
        #expect(ends.count == 1)
        #expect((ends.first?["properties"] as? [String: Any])?["reason"] as? String == "clean", "\(ends)")
    }

    /// SIGTERM while the service's main thread is blocked, in sleep(3), in read(2) on a
    /// pipe nobody writes, or in a condition wait: that thread waits in the handler while
    /// the SDK shuts down, then the signal goes on, so the process dies of SIGTERM as it
    /// would without Cairn (the blocked call does not return early and let main exit 0),
    /// with every event delivered and the run ended `clean`.
    @Test(arguments: ["sleep", "read", "cond"])
    func sigtermLeavesABlockedMainThreadAsItWouldBe(block: String) throws {
        let collector = try CollectorProcess()
        let dir = try Child.DataDir()
        let env = ["CAIRN_APP_ID": "orders", "CAIRN_DATA_DIR": dir.path, "CAIRN_HANDLE_TERMINATION": "1",
                   "CAIRN_UPLOAD_URL": collector.baseURL + "/v1/batch", "CAIRN_BATCH_AGE_MS": "60000",
                   "CAIRN_TEST_BLOCK": block]
        let child = try Running(["serve", "200"], env: env)
        #expect(child.waitUntilReady())
        // The child sends SIGTERM to its own main thread (CAIRN_TEST_BLOCK).
        let end = child.wait()
        #expect(end.reason == .uncaughtSignal && end.status == SIGTERM, "\(block): \(end)")
        let said = child.child.out
        #expect(!said.contains("returned"), "the blocked call did not return: \(said)")
        #expect(Set(Self.childIndexes(try Self.received(collector))) == Set(0..<200))
        let next = try Child.child(["run", "0"], env: env)
        #expect(next.status == 0, "\(next.err)")
        let ends = try Self.received(collector).filter { $0["name"] as? String == "session_end" }
        #expect((ends.first?["properties"] as? [String: Any])?["reason"] as? String == "clean", "\(ends)")
    }

    /// A service killed (SIGKILL) before it reported its drops: the next start reports
    /// them under the killed run's session, and its own under its session.
    @Test func dropsOfAKilledRunAreReportedUnderItsSession() throws {
        let collector = try CollectorProcess()
        let dir = try Child.DataDir()
        let env = ["CAIRN_APP_ID": "orders", "CAIRN_DATA_DIR": dir.path, "CAIRN_SAMPLE_RATE": "0",
                   "CAIRN_UPLOAD_URL": collector.baseURL + "/v1/batch", "CAIRN_BATCH_AGE_MS": "20"]
        // No sdk_health, so no batch: the 30 drops stay unreported when it is killed.
        let child = try Running(["serve", "30"], env: env.merging(["CAIRN_HEALTH_INTERVAL_MS": "0",
                                                                   "CAIRN_TEST_FLUSH_MS": "3000"]) { $1 })
        #expect(child.waitUntilReady())
        child.signal(SIGKILL)
        _ = child.wait()
        let next = try Child.child(["run", "5"], env: env)
        #expect(next.status == 0, "\(next.err)")
        let ends = try Self.received(collector).filter { $0["name"] as? String == "session_end" }
        func session(_ reason: String) -> String? {
            ends.first { ($0["properties"] as? [String: Any])?["reason"] as? String == reason }?["session_id"] as? String
        }
        let killed = try #require(session("abnormal"))
        let second = try #require(try Self.received(collector).first { $0["name"] as? String == "sdk_health" }?["session_id"] as? String)
        let reporting = try collector.requests().filter { !$0.headerValues("Cairn-Dropped").isEmpty }
        #expect(reporting.map { $0.headerValues("Cairn-Dropped") } == [["sampled=35"]])
        #expect(reporting.map { $0.headerValues("Cairn-Dropped-Sessions") } == [["\(killed) sampled=30;\(second) sampled=5"]])
    }

    /// Without the option, SIGTERM ends the process as it always did (the run is then
    /// `abnormal`, as the SDK cannot tell it from any other sudden end).
    @Test func withoutTheOptionSigtermIsLeftToTheService() throws {
        let dir = try Child.DataDir()
        let child = try Running(["serve", "1"], env: ["CAIRN_APP_ID": "orders", "CAIRN_DATA_DIR": dir.path])
        #expect(child.waitUntilReady())
        child.signal(SIGTERM)
        let end = child.wait()
        #expect(end.reason == .uncaughtSignal && end.status == SIGTERM)
    }

    /// A service that ignores SIGTERM keeps ignoring it with the option on: the SDK
    /// leaves ignored signals alone and keeps running (it did not shut itself down: the
    /// run, killed later, is reported `abnormal`, not `clean`).
    @Test func anIgnoredSigtermStaysIgnored() throws {
        let collector = try CollectorProcess()
        let dir = try Child.DataDir()
        let env = ["CAIRN_APP_ID": "orders", "CAIRN_DATA_DIR": dir.path, "CAIRN_HANDLE_TERMINATION": "1",
                   "CAIRN_UPLOAD_URL": collector.baseURL + "/v1/batch"]
        let child = try Running(["serve", "1"], env: env.merging(["CAIRN_TEST_IGNORE_SIGTERM": "1"]) { $1 })
        #expect(child.waitUntilReady())
        child.signal(SIGTERM)
        usleep(300_000)
        #expect(child.isRunning, "SIGTERM was ignored before the SDK started")
        child.signal(SIGKILL)
        _ = child.wait()
        let next = try Child.child(["run", "0"], env: env)
        #expect(next.status == 0, "\(next.err)")
        let ends = try Self.received(collector).filter { $0["name"] as? String == "session_end" }
        #expect(ends.compactMap { ($0["properties"] as? [String: Any])?["reason"] as? String } == ["abnormal"])
    }

    /// Events tracked while no upload URL was set wait in the store; the first start
    /// with a URL sends them all.
    @Test func eventsStoredWithoutAURLAreSentOnceOneIsSet() throws {
        let dir = try Child.DataDir()
        var env = ["CAIRN_APP_ID": "orders", "CAIRN_DATA_DIR": dir.path, "CAIRN_BATCH_AGE_MS": "50"]
        let embedded = try Child.child(["run", "120"], env: env)
        #expect(embedded.status == 0, "\(embedded.err)")
        let collector = try CollectorProcess()
        env["CAIRN_UPLOAD_URL"] = collector.baseURL + "/v1/batch"
        let online = try Child.child(["run", "0"], env: env)
        #expect(online.status == 0, "\(online.err)")
        let indexes = Self.childIndexes(try Self.received(collector))
        #expect(indexes.count == 120 && Set(indexes) == Set(0..<120))
    }

    /// Requests stored while the URL pointed nowhere, with a key since rotated, go to
    /// the corrected URL with the new key, with their bytes and idempotency keys.
    @Test func storedRequestsFollowACorrectedURLAndARotatedKey() throws {
        let dir = try Child.DataDir()
        // A port nothing listens on: a collector started and stopped.
        let gone = try CollectorProcess()
        let deadURL = gone.baseURL + "/v1/batch"
        gone.stop()
        var env = ["CAIRN_APP_ID": "orders", "CAIRN_DATA_DIR": dir.path, "CAIRN_BATCH_AGE_MS": "50",
                   "CAIRN_UPLOAD_URL": deadURL, "CAIRN_API_KEY": "old-key", "CAIRN_SHUTDOWN_TIMEOUT_MS": "8000"]
        let stored = try Child.child(["run", "40"], env: env)
        #expect(stored.status == 0, "shutdown's flush is true once the batches are stored: \(stored.err)")
        let collector = try CollectorProcess()
        env["CAIRN_UPLOAD_URL"] = collector.baseURL + "/v1/batch"
        env["CAIRN_API_KEY"] = "new-key"
        let fixed = try Child.child(["run", "0"], env: env)
        #expect(fixed.status == 0, "\(fixed.err)")
        #expect(Set(Self.childIndexes(try Self.received(collector))) == Set(0..<40))
        let attempts = try collector.requests()
        #expect(!attempts.isEmpty && attempts.allSatisfy { $0.headerValues("Authorization") == ["Bearer new-key"] })
    }

    /// A trailing newline or CR LF (a value pasted from a secrets file) in the URL and
    /// the key is harmless; garbage is refused at start, naming the variable and
    /// quoting the value as typed.
    @Test func sloppyEnvironmentValuesWorkOrFailAtStart() throws {
        let collector = try CollectorProcess()
        let dir = try Child.DataDir()
        let base = ["CAIRN_APP_ID": " orders\n", "CAIRN_DATA_DIR": dir.path, "CAIRN_BATCH_AGE_MS": " 50 "]
        let ok = try Child.child(["run", "5"], env: base.merging([
            "CAIRN_UPLOAD_URL": collector.baseURL + "/v1/batch\n", "CAIRN_API_KEY": "k-1\r\n", "CAIRN_DEBUG": "FALSE",
        ]) { $1 })
        #expect(ok.status == 0, "\(ok.err)")
        #expect(Set(Self.childIndexes(try Self.received(collector))) == Set(0..<5))
        #expect(try collector.requests().allSatisfy { $0.headerValues("Authorization") == ["Bearer k-1"] })

        let cases: [(String, String, String)] = [
            ("CAIRN_SAMPLE_RATE", "50%", "sampling.rate"),
            ("CAIRN_DEBUG", "verbose", "debugLogging"),
            ("CAIRN_PRIVACY", "maybe", "privacy.enabled"),
            ("CAIRN_BATCH_EVENTS", "5e2", "maxBatchEvents"),
            ("CAIRN_UPLOAD_URL", "http://collector .example/v1", "uploadURL"),
            // Refused by the transport at every send, so refused at start.
            ("CAIRN_UPLOAD_URL", "https://user:secret@collector.example/v1", "uploadURL"),
            ("CAIRN_UPLOAD_URL", "http://[::1/v1", "uploadURL"),
            ("CAIRN_API_KEY", "a\nb", "apiKey"),
            ("CAIRN_HEALTH_INTERVAL_MS", "-5", "healthInterval"),
        ]
        for (variable, value, option) in cases {
            let r = try Child.child(["run", "1"], env: base.merging([variable: value]) { $1 })
            #expect(r.status == 1 && r.err.contains(option), "\(variable)=\(value): \(r.err)")
            if variable != "CAIRN_API_KEY" {
                #expect(r.err.contains(value.debugDescription) || r.err.contains(value), "quotes the value: \(r.err)")
            }
        }
    }

    /// The failure-safe start: a bad option or `CAIRN_DISABLED=1` gives a disabled SDK
    /// whose calls do nothing; the service runs on and exits normally.
    @Test func startOrDisabledNeverStopsTheService() throws {
        let dir = try Child.DataDir()
        let bad = try Child.child(["run", "10"], env: ["CAIRN_APP_ID": "orders", "CAIRN_DATA_DIR": dir.path,
                                                      "CAIRN_SAMPLE_RATE": "lots", "CAIRN_TEST_SAFE_START": "1"])
        #expect(bad.status == 0 && bad.err.contains("not started") && bad.err.contains("sampling.rate"), "\(bad.err)")
        let off = try Child.child(["run", "10"], env: ["CAIRN_APP_ID": "orders", "CAIRN_DATA_DIR": dir.path,
                                                      "CAIRN_DISABLED": "1", "CAIRN_TEST_SAFE_START": "1"])
        #expect(off.status == 0 && off.err.isEmpty, "\(off.err)")
        #expect((try FileManager.default.contentsOfDirectory(atPath: dir.path)).isEmpty, "a disabled SDK writes nothing")
    }

    /// A start on a full disk fails with an error (or, failure-safe, a disabled SDK) and
    /// leaves nothing behind that a later start would report as a run that ended
    /// abnormally. (Mounts a small tmpfs: needs root, as on CI.)
    @Test func aStartOnAFullDiskLeavesNoRunBehind() throws {
        let mount = try Child.DataDir()
        try FileManager.default.createDirectory(atPath: mount.path, withIntermediateDirectories: true)
        try #require(runQuietly(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", mount.path]) == 0,
                     "mounting a tmpfs needs root")
        defer { _ = runQuietly(["umount", "-l", mount.path]) }
        let dir = mount.path + "/data"
        try FileManager.default.createDirectory(atPath: dir + "/crash", withIntermediateDirectories: true)
        // Fill the disk.
        _ = FileManager.default.createFile(atPath: mount.path + "/filler", contents: nil)
        let filler = try FileHandle(forWritingTo: URL(fileURLWithPath: mount.path + "/filler"))
        while (try? filler.write(contentsOf: Data(count: 4096))) != nil {}
        try? filler.close()
        let env = ["CAIRN_APP_ID": "orders", "CAIRN_DATA_DIR": dir]
        let failed = try Child.child(["run", "1"], env: env)
        #expect(failed.status == 1 && failed.err.contains("storage"), "\(failed.err)")
        let safe = try Child.child(["run", "1"], env: env.merging(["CAIRN_TEST_SAFE_START": "1"]) { $1 })
        #expect(safe.status == 0 && safe.err.contains("not started"), "\(safe.err)")
        let left = (try? FileManager.default.contentsOfDirectory(atPath: dir + "/crash")) ?? []
        #expect(left.filter { $0.hasPrefix("run-") }.isEmpty, "no run record left: \(left)")
    }

    /// `shutdown(timeout:)` returns by its deadline with a collector that never
    /// answers, and what it could not send stays on disk for the next start.
    @Test func shutdownEndsByItsDeadlineWhenTheCollectorStalls() throws {
        let collector = try CollectorProcess()
        try collector.setDefault(["stall": 60])
        let dir = try Child.DataDir()
        var env = ["CAIRN_APP_ID": "orders", "CAIRN_DATA_DIR": dir.path, "CAIRN_BATCH_AGE_MS": "50",
                   "CAIRN_UPLOAD_URL": collector.baseURL + "/v1/batch", "CAIRN_SHUTDOWN_TIMEOUT_MS": "2000"]
        let r = try Child.child(["shutdown", "30"], env: env)
        #expect(r.status == 0, "\(r.err)")
        let took = Double(r.out.first?.split(separator: " ").first ?? "") ?? .infinity
        // The bound is the deadline plus scheduling slack on a loaded machine; before,
        // it took twice the deadline or more.
        #expect(took < 3500, "shutdown(2 s) took \(took) ms")
        try collector.setDefault(["status": 200])
        try collector.reset()
        env["CAIRN_SHUTDOWN_TIMEOUT_MS"] = "10000"
        let next = try Child.child(["run", "0"], env: env)
        #expect(next.status == 0, "\(next.err)")
        #expect(Set(Self.childIndexes(try Self.received(collector))) == Set(0..<30))
    }

    /// One batch, one key: with a collector answering 503, a service that tracks and
    /// flushes is killed at random moments, again and again; then a clean run drains
    /// everything. No event ever arrives under two different idempotency keys, and
    /// every event arrives.
    @Test func killedWhileMakingABatchSafeNeverUsesTwoKeys() throws {
        let collector = try CollectorProcess()
        try collector.setDefault(["status": 503, "retry_after": "0"])
        let dir = try Child.DataDir()
        // Batches of 3 are cut by count, so the padding `track` leaves comes before a
        // batch's first record.
        var env = ["CAIRN_APP_ID": "orders", "CAIRN_DATA_DIR": dir.path, "CAIRN_BATCH_AGE_MS": "20",
                   "CAIRN_BATCH_EVENTS": "3",
                   "CAIRN_UPLOAD_URL": collector.baseURL + "/v1/batch", "CAIRN_TEST_FLUSH_MS": "15000",
                   "CAIRN_HEALTH_INTERVAL_MS": "0"]
        var generator = SystemRandomNumberGenerator()
        let rounds = 12
        for _ in 0..<rounds {
            let child = try Running(["serve", "10"], env: env)
            usleep(UInt32.random(in: 0..<400_000, using: &generator))
            child.signal(SIGKILL)
            _ = child.wait()
        }
        try collector.setDefault(["status": 200])
        env["CAIRN_TEST_FLUSH_MS"] = nil
        let drain = try Child.child(["run", "0"], env: env)
        #expect(drain.status == 0, "\(drain.err)")
        var keysByEvent: [String: Set<String>] = [:]
        for attempt in try collector.requests() {
            for record in attempt.records ?? [] {
                guard let e = (try? JSONSerialization.jsonObject(with: Data(record.utf8))) as? [String: Any],
                      e["name"] as? String == "child_event", let id = e["event_id"] as? String else { continue }
                keysByEvent[id, default: []].insert(attempt.idempotency_key ?? "")
            }
        }
        let twoKeys = keysByEvent.filter { $0.value.count > 1 }
        #expect(twoKeys.isEmpty, "events under two keys: \(twoKeys.prefix(3))")
        let delivered = Self.childIndexes(try Self.received(collector))
        #expect(delivered.count >= 10, "the killed runs' events arrive (at least the last ones tracked)")
    }
}
