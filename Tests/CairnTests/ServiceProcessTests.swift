import Cairn
import CairnProcessor
import CairnStore
import CairnUploader
import CairnTestSupport
import Foundation
import Testing

/// The public API in real service processes (`cairn-service-child`), configured from
/// the environment the way services are: sampling agrees across processes, the install
/// time survives into later processes, and without an upload URL events stay on disk.
@Suite(.serialized) struct ServiceProcessTests {
    /// A data directory of its own, removed afterwards.
    typealias DataDir = TemporaryDirectory

    /// Runs a built product with `args`; the environment is this process's without
    /// `CAIRN_*`, plus `env`.
    static func run(_ product: String, _ args: [String],
                    env: [String: String] = [:]) throws -> (status: Int32, out: [String], err: String) {
        let environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("CAIRN_") }.merging(env) { $1 }
        let r = try runCapturing(productsDirectory + "/" + product, args, environment: environment)
        return (r.status, r.out.split(separator: "\n").map(String.init), r.err)
    }

    static func child(_ args: [String], env: [String: String]) throws -> (status: Int32, out: [String], err: String) {
        try run("cairn-service-child", args, env: env)
    }

    /// The service started once more (`run 0`) with `env` and `overrides`, sending to
    /// `collector`; every event the collector has received by then.
    static func nextStart(_ env: [String: String], to collector: CollectorProcess,
                          _ overrides: [String: String] = [:]) throws -> [[String: Any]] {
        var env = env.merging(overrides) { $1 }
        env["CAIRN_UPLOAD_URL"] = collector.baseURL + "/v1/batch"
        let next = try child(["run", "0"], env: env)
        #expect(next.status == 0, "\(next.err)")
        return try LifecycleTests.received(collector)
    }

    static func objects(_ lines: [String]) -> [[String: Any]] {
        lines.compactMap { (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any] }
    }

    /// Everything a service's data directory holds is its user's alone: the directories
    /// Cairn makes are 0700, every file 0600 (ids, events and crash reports are not for
    /// every local user), whatever the umask lets through.
    @Test func theDataDirectoryIsPrivate() throws {
        let parent = try DataDir()
        let dir = parent.appending("var/lib/orders/cairn")
        // The most permissive umask: only Cairn's own modes limit access.
        let env = ["CAIRN_APP_ID": "orders", "CAIRN_DATA_DIR": dir, "CAIRN_TEST_UMASK": "0"]
        let r = try Self.child(["crash"], env: env)
        #expect(r.status != 0, "it crashed")
        let next = try Self.child(["run", "1"], env: env)
        #expect(next.status == 0, "\(next.err)")
        var checked = 0
        let walker = try #require(FileManager.default.enumerator(atPath: parent.path))
        for case let name as String in walker {
            var st = stat()
            #expect(lstat(parent.appending(name), &st) == 0)
            let directory = (st.st_mode & S_IFMT) == S_IFDIR
            #expect(st.st_mode & 0o077 == 0, "\(name) is \(String(st.st_mode & 0o777, radix: 8))")
            #expect(directory || st.st_mode & 0o100 == 0, "\(name) is not executable")
            checked += 1
        }
        #expect(checked >= 8, "the directories, ring, store, run records, install record: \(checked)")
    }

    @Test func samplingDecisionsAgreeAcrossProcesses() throws {
        let a = try Self.child(["sample", "5000"], env: [:])
        let b = try Self.child(["sample", "5000"], env: [:])
        #expect(a.status == 0 && b.status == 0)
        let bits = try #require(a.out.first)
        #expect(bits.count == 5000 && b.out.first == bits, "two processes, the same decisions")
        let sampler = Sampler(options: SamplingOptions(rate: 0.3))
        let here = (0..<5000).map {
            sampler.keep(distinctID: "user-\($0)", eventName: "page_view", tier: .sampled, isError: false, day: 20_000)
                ? "1" : "0"
        }.joined()
        #expect(here == bits, "and this process agrees")
        let kept = Double(bits.filter { $0 == "1" }.count) / 5000
        #expect(abs(kept - 0.3) < 0.03, "rate 0.3 keeps \(kept)")
    }

    /// A service with its defaults (its host name as every event's distinct id) and
    /// `CAIRN_SAMPLE_RATE=0.5` keeps about half of its events, not all or none of them:
    /// outside a span and without a per-call identity, each event is decided on its own,
    /// by the hash of its `event_id` (which the collector can check).
    @Test func aHostAtHalfRateKeepsAboutHalfOfItsEvents() throws {
        let dir = try DataDir()
        let r = try Self.child(["run", "2000"], env: ["CAIRN_APP_ID": "orders", "CAIRN_DATA_DIR": dir.path,
                                                      "CAIRN_SAMPLE_RATE": "0.5", "CAIRN_TEST_STDOUT": "1"])
        #expect(r.status == 0, "\(r.err)")
        let events = Self.objects(r.out).filter { $0["name"] as? String == "child_event" }
        #expect(abs(Double(events.count) / 2000 - 0.5) < 0.05, "kept \(events.count) of 2000")
        #expect(Set(events.compactMap { $0["distinct_id"] as? String }).count == 1, "one host")
        let limit = UInt64(0.5 * 18_446_744_073_709_551_616.0)
        for event in events {
            let id = try #require(event["event_id"] as? String)
            #expect(StableHash.hash64(id) < limit, "\(id) was kept by its hash")
        }
    }

    /// One process starts the SDK, shuts it down and starts it again, three times, each
    /// run in a data directory of its own (as a test suite that starts a fresh SDK per
    /// test does): each run has its own session and its events; a start while a run is
    /// live is refused; the crash handler stays installed and writes the third run's
    /// crash into the third run's directory. The next start in each directory reports
    /// how its run ended: clean, clean, crashed.
    @Test func startShutDownAndStartAgainInOneProcess() throws {
        let dir = try DataDir()
        let r = try Self.child(["restart", "3"], env: ["CAIRN_APP_ID": "orders", "CAIRN_DISTINCT_ID": "host-7",
                                                       "CAIRN_DATA_DIR": dir.path])
        #expect(![0, 1, 3, 4].contains(r.status), "run 3 died of its signal: \(r.status) \(r.err)")
        var sessions: [Int: String] = [:]
        for line in r.out where line.hasPrefix("session ") {
            let parts = line.split(separator: " ")
            if parts.count == 3, let run = Int(parts[1]) { sessions[run] = String(parts[2]) }
        }
        #expect(sessions.count == 3 && Set(sessions.values).count == 3, "\(r.out)")
        #expect(r.out.contains("second start: \(CairnStartError.alreadyStarted)"), "\(r.out)")
        let events = Self.objects(r.out).filter { $0["name"] as? String == "run_event" }
        for run in 1...3 {
            let mine = events.filter { ($0["properties"] as? [String: Any])?["run"] as? Int == run }
            #expect(mine.count == 3, "run \(run)")
            #expect(mine.allSatisfy { $0["session_id"] as? String == sessions[run] }, "run \(run)'s session")
        }
        let reports = { (run: Int) in
            ((try? FileManager.default.contentsOfDirectory(atPath: dir.path + "/run-\(run)/crash")) ?? [])
                .filter { $0.hasSuffix(".report") }
        }
        #expect(reports(1).isEmpty && reports(2).isEmpty)
        #expect(reports(3) == ["crash-\(sessions[3] ?? "").report"], "the handler wrote where run 3 pointed it")

        let collector = try CollectorProcess()
        var received: [[String: Any]] = []
        for run in 1...3 {
            received = try Self.nextStart(["CAIRN_APP_ID": "orders", "CAIRN_DISTINCT_ID": "host-7",
                                           "CAIRN_DATA_DIR": dir.path + "/run-\(run)", "CAIRN_BATCH_AGE_MS": "50"],
                                          to: collector)
        }
        func ended(_ run: Int) -> String? {
            let end = received.first { $0["name"] as? String == "session_end" && $0["session_id"] as? String == sessions[run] }
            return (end?["properties"] as? [String: Any])?["reason"] as? String
        }
        #expect(ended(1) == "clean" && ended(2) == "clean" && ended(3) == "crashed")
        let crashes = received.filter { $0["type"] as? String == "crash" }
        #expect(crashes.count == 1 && crashes.first?["session_id"] as? String == sessions[3])
    }

    /// A service that traps with a message quoting an e-mail address: the next start's
    /// `crash` event carries the message, masked by the privacy rules.
    @Test func aFatalErrorMessageIsMasked() throws {
        let collector = try CollectorProcess()
        let dir = try DataDir()
        let env = ["CAIRN_APP_ID": "orders", "CAIRN_DISTINCT_ID": "host-7", "CAIRN_DATA_DIR": dir.path,
                   "CAIRN_UPLOAD_URL": collector.baseURL + "/v1/batch", "CAIRN_BATCH_AGE_MS": "50"]
        let trapped = try Self.child(["fatal"], env: env)
        #expect(trapped.status != 0, "\(trapped.err)")
        let crash = try #require(try Self.nextStart(env, to: collector).first { $0["type"] as? String == "crash" })
        let props = try #require(crash["properties"] as? [String: Any])
        let message = try #require(props["message"] as? String, "\(props)")
        #expect(message.contains("no account for") && !message.contains("alice@example.com"), "\(message)")
        #expect((props["reason"] as? String)?.contains("alice@example.com") == false)
    }

    /// A Critical event that cannot be delivered is stored at once with Critical
    /// priority: when Sampled requests overflow the store's size cap, they are evicted
    /// and it stays, and the next start with the collector up delivers it. Destinations
    /// see it when it is stored.
    @Test func aCriticalEventOutlivesTheEvictionOfSampledOnes() throws {
        let dir = try DataDir()
        let env = ["CAIRN_APP_ID": "orders", "CAIRN_DISTINCT_ID": "host-7", "CAIRN_DATA_DIR": dir.path,
                   "CAIRN_UPLOAD_URL": "http://127.0.0.1:9/v1/batch", "CAIRN_BATCH_AGE_MS": "20",
                   "CAIRN_TEST_STORE_BYTES": "\(1 << 20)", "CAIRN_TEST_STDOUT": "1"]
        let r = try Self.child(["critical", "6"], env: env)
        #expect(r.status == 0, "\(r.err)")
        #expect(Self.objects(r.out).contains { $0["name"] as? String == "payment_captured" }, "destinations saw it")

        let store = try SnapshotStore(directory: dir.path + "/store", options: .init(maxBytes: 1 << 20))
        let stored = try store.oldest(limit: 10_000)
        let critical = stored.filter { $0.priority == .critical }
        #expect(critical.count == 1, "\(stored.map(\.priority))")
        let first = try #require(critical.first)
        let decoder = try FrameDecoder(maxContentSize: 64 << 20)
        func events(_ s: Snapshot) -> [[UInt8]] { (try? decoder.decodeRecords(UploadRequest(record: s.record)?.body ?? []).records) ?? [] }
        let records = events(first).map { String(decoding: $0, as: UTF8.self) }
        #expect(records.count == 1 && records.first?.contains("\"payment_captured\"") == true)
        let bulkStored = stored.filter { $0.priority == .sampled }.map { events($0).count }.reduce(0, +)
        #expect(bulkStored > 0 && bulkStored < 3000, "Sampled requests were evicted: \(bulkStored) of 3000 stored")

        let received = try Self.nextStart(env, to: try CollectorProcess(), ["CAIRN_SHUTDOWN_TIMEOUT_MS": "15000"])
        #expect(received.filter { $0["name"] as? String == "payment_captured" }.count == 1)
        let bulk = received.filter { $0["name"] as? String == "bulk" }.count
        #expect(bulk > 0 && bulk < 3000, "some bulk events were evicted: \(bulk) of 3000 arrived")
    }

    /// A destination sees every event the collector gets: after a real crash, the next
    /// start's RecordingDestination receives the crashed run's `crash` and
    /// `session_end`, and (its install record being new) the install's `user_setOnce`.
    @Test func aRecordingDestinationSeesCrashSessionEndAndInstall() throws {
        let dir = try DataDir()
        var env = ["CAIRN_APP_ID": "orders", "CAIRN_DISTINCT_ID": "host-7", "CAIRN_DATA_DIR": dir.path]
        let crashed = try Self.child(["crash"], env: env)
        #expect(crashed.status != 0 && crashed.status != 4, "\(crashed.status) \(crashed.err)")
        // As on a machine where the data directory's install record was lost: the next
        // start sends the install properties again.
        try FileManager.default.removeItem(atPath: dir.path + "/install.json")
        env["CAIRN_TEST_RECORDER"] = "1"
        let next = try Self.child(["run", "1"], env: env)
        #expect(next.status == 0, "\(next.err)")
        let recorded = Set(next.out.filter { $0.hasPrefix("recorded ") })
        for line in ["recorded crash crash", "recorded session session_end", "recorded user_setOnce user_properties",
                     "recorded track child_event"] {
            #expect(recorded.contains(line), "\(line) in \(recorded)")
        }
    }

    /// A previous run's events are admitted as every event is: a filter that denies
    /// `session_end` keeps it from the destinations (and the collector), not the crash.
    @Test func filtersApplyToAPreviousRunsEvents() throws {
        let dir = try DataDir()
        var env = ["CAIRN_APP_ID": "orders", "CAIRN_DISTINCT_ID": "host-7", "CAIRN_DATA_DIR": dir.path]
        let crashed = try Self.child(["crash"], env: env)
        #expect(crashed.status != 0, "\(crashed.err)")
        env["CAIRN_TEST_RECORDER"] = "1"
        env["CAIRN_TEST_DENY"] = "session_end"
        let next = try Self.child(["run", "1"], env: env)
        #expect(next.status == 0, "\(next.err)")
        let recorded = Set(next.out.filter { $0.hasPrefix("recorded ") })
        #expect(recorded.contains("recorded crash crash") && !recorded.contains("recorded session session_end"),
                "\(recorded)")
    }

    /// A run killed with events still in its ring: the next start sends those events
    /// before the killed run's `session_end`, so a collector never sees a session end
    /// and then more of its events.
    @Test func anEndedRunsEventsArriveBeforeItsSessionEnd() throws {
        let dir = try DataDir()
        let env = ["CAIRN_APP_ID": "orders", "CAIRN_DISTINCT_ID": "host-7", "CAIRN_DATA_DIR": dir.path,
                   "CAIRN_UPLOAD_URL": "http://127.0.0.1:9/v1/batch", "CAIRN_BATCH_AGE_MS": "600000"]
        let killed = try LifecycleTests.Running(["serve", "20"], env: env)
        #expect(killed.waitUntilReady())
        killed.signal(SIGKILL)
        _ = killed.wait()

        // Batches wait a long time to fill: the recovered events must not wait behind it.
        let received = try Self.nextStart(env, to: try CollectorProcess(), ["CAIRN_BATCH_AGE_MS": "3000"])
        let end = try #require(received.firstIndex { $0["name"] as? String == "session_end" }, "\(received.map { $0["name"] ?? "?" })")
        let events = received.indices.filter { received[$0]["name"] as? String == "child_event" }
        #expect(events.count == 20)
        #expect(events.allSatisfy { $0 < end }, "events at \(events), session_end at \(end)")
    }

    /// The first start records the install; `app_install` tracked without a time uses
    /// that time, in that process and in a later one; the fixed install properties go
    /// once, in their own `user_setOnce` request whose start log shows them.
    @Test func installTimeSurvivesIntoLaterProcesses() throws {
        let collector = try CollectorProcess()
        let dir = try DataDir()
        let env = ["CAIRN_APP_ID": "orders", "CAIRN_DISTINCT_ID": "host-7", "CAIRN_DATA_DIR": dir.path,
                   "CAIRN_UPLOAD_URL": collector.baseURL + "/v1/batch", "CAIRN_TEST_STDOUT": "1", "CAIRN_DEBUG": "1",
                   "CAIRN_RELEASE": "orders@1.0.0", "CAIRN_BATCH_AGE_MS": "50"]
        let first = try Self.child(["install"], env: env)
        #expect(first.status == 0, "\(first.err)")
        let record = try #require(FileManager.default.contents(atPath: dir.path + "/install.json"))
        let installMillis = try #require(((try JSONSerialization.jsonObject(with: record)) as? [String: Any])?["install_time_ms"] as? Int)
        usleep(20_000)
        var env2 = env
        env2["CAIRN_RELEASE"] = "orders@1.1.0"
        let second = try Self.child(["install"], env: env2)
        #expect(second.status == 0, "\(second.err)")
        let parser = ISO8601DateFormatter()
        parser.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        for run in [first, second] {
            let install = try #require(Self.objects(run.out).first { $0["name"] as? String == "app_install" })
            let time = try #require((install["time"] as? String).flatMap { parser.date(from: $0) })
            #expect(Int((time.timeIntervalSince1970 * 1000).rounded()) == installMillis)
        }
        // The fixed properties: one user_setOnce, from the first process only.
        let received = try collector.events().compactMap {
            (try? JSONSerialization.jsonObject(with: Data($0.record.utf8))) as? [String: Any]
        }
        let once = received.filter { $0["type"] as? String == "user_setOnce" }
        #expect(once.count == 1)
        let props = once.first?["properties"] as? [String: Any] ?? [:]
        #expect(props["first_release"] as? String == "orders@1.0.0" && props["install_time_utc"] is String)
        #expect(props["install_time_local"] is String)
        #expect(first.err.contains("upload start") && first.err.contains("install_time_utc"),
                "the start log shows the fixed fields as its params")
        #expect(!second.err.contains("install_time_utc"))
    }

    /// A service crashes; its next start sends the `crash` and `session_end` events of
    /// the crashed run, each with that run's release, identity and whole `context`
    /// (docs/FORMATS.md, "Crash and session-end events"). A breadcrumb holding an e-mail
    /// and a bearer token arrives masked, and was masked on disk too.
    @Test func aCrashedRunIsReportedWithItsContext() throws {
        let collector = try CollectorProcess()
        let dir = try DataDir()
        var env = ["CAIRN_APP_ID": "orders", "CAIRN_DISTINCT_ID": "host-7", "CAIRN_DATA_DIR": dir.path,
                   "CAIRN_UPLOAD_URL": collector.baseURL + "/v1/batch", "CAIRN_RELEASE": "orders@2.0.0",
                   "CAIRN_BATCH_AGE_MS": "50",
                   "CAIRN_TEST_BREADCRUMB": "login alice@example.com with Authorization: Bearer abcDEF123456ghiJKL789"]
        let crashed = try Self.child(["crash"], env: env)
        #expect(crashed.status != 0 && crashed.status != 4, "died of the signal: \(crashed.status) \(crashed.err)")
        let onDisk = try FileManager.default.contentsOfDirectory(atPath: dir.path + "/crash").compactMap {
            FileManager.default.contents(atPath: dir.path + "/crash/" + $0)
        }
        #expect(!onDisk.isEmpty && !onDisk.contains { String(decoding: $0, as: UTF8.self).contains("alice@example.com") })
        env["CAIRN_RELEASE"] = "orders@2.0.1"
        let next = try Self.child(["run", "0"], env: env)
        #expect(next.status == 0, "\(next.err)")
        let received = try collector.events().compactMap {
            (try? JSONSerialization.jsonObject(with: Data($0.record.utf8))) as? [String: Any]
        }
        let crash = try #require(received.first { $0["type"] as? String == "crash" })
        let end = try #require(received.first { $0["name"] as? String == "session_end" })
        let expected = CommonProperties.collect()
        for e in [crash, end] {
            #expect(e["distinct_id"] as? String == "host-7" && e["release"] == nil)
            let context = try #require(e["context"] as? [String: Any], "\(e)")
            #expect((context["app"] as? [String: Any])?["release"] as? String == "orders@2.0.0")
            #expect((context["os"] as? [String: Any])?["name"] as? String == expected.osName)
            #expect(context["cpu_count"] as? Int == expected.cpuCount)
        }
        #expect((end["properties"] as? [String: Any])?["reason"] as? String == "crashed")
        #expect((crash["properties"] as? [String: Any])?["signal"] as? String == "SIGSEGV")
        let reportContext = (crash["properties"] as? [String: Any])?["context"] as? [String: Any]
        let crumbs = try #require(reportContext?["breadcrumbs"] as? [[String: Any]], "\(crash)")
        let message = try #require(crumbs.last?["message"] as? String)
        #expect(message.hasPrefix("login ") && crumbs.last?["category"] as? String == "auth", "\(message)")
        #expect(!message.contains("alice@example.com") && !message.contains("abcDEF123456ghiJKL789"), "\(message)")
    }

    /// `sdk_health` every interval and once at shutdown: counts since the previous one
    /// that add up to what happened (events written, sampled out, delivered), the start
    /// time in the first, `final` in the last.
    @Test func sdkHealthAccountsForWhatTheSDKDid() throws {
        let collector = try CollectorProcess()
        let dir = try DataDir()
        let env = ["CAIRN_APP_ID": "orders", "CAIRN_DISTINCT_ID": "host-7", "CAIRN_DATA_DIR": dir.path,
                   "CAIRN_UPLOAD_URL": collector.baseURL + "/v1/batch", "CAIRN_BATCH_AGE_MS": "20",
                   "CAIRN_HEALTH_INTERVAL_MS": "100", "CAIRN_SAMPLE_RATE": "0", "CAIRN_TEST_PAUSE_MS": "650"]
        let run = try Self.child(["run", "40"], env: env)
        #expect(run.status == 0, "\(run.err)")
        let received = try collector.events().compactMap {
            (try? JSONSerialization.jsonObject(with: Data($0.record.utf8))) as? [String: Any]
        }
        let health = received.filter { $0["name"] as? String == "sdk_health" }
            .sorted { ($0["time"] as? String ?? "") < ($1["time"] as? String ?? "") }
        let props = health.map { $0["properties"] as? [String: Any] ?? [:] }
        #expect(health.count >= 5, "periodic ones and the final one: \(health.count)")
        #expect(health.allSatisfy { $0["type"] as? String == "health" && $0["distinct_id"] as? String == "host-7" })
        func sum(_ key: String) -> Int { props.reduce(0) { $0 + ($1[key] as? Int ?? 0) } }
        let sampled = props.reduce(0) { $0 + (($1["dropped"] as? [String: Any])?["sampled"] as? Int ?? 0) }
        #expect(sampled == 40, "every child_event was sampled out at rate 0")
        #expect(props.allSatisfy { $0["dropped"] is [String: Any] && $0["changed"] is [String: Any] })
        #expect(props.allSatisfy { $0["upload_dropped"] == nil && $0["ring_full_drops"] == nil }, "one `dropped`")
        #expect(sum("events_written") >= health.count - 1, "each health event but the last is written before the next")
        #expect(props.first?["start_ms"] as? Double ?? 0 > 0 && props.dropFirst().allSatisfy { $0["start_ms"] == nil })
        #expect(props.last?["final"] as? Bool == true && props.dropLast().allSatisfy { $0["final"] == nil })
        let periodic = props.dropLast().compactMap { $0["interval_ms"] as? Int }
        #expect(periodic.allSatisfy { $0 >= 90 && $0 < 1000 }, "\(periodic)")
        // What the collector got before the final report was counted as delivered.
        #expect(sum("delivered_events") >= health.count - 1 && sum("delivered_events") <= received.count)
        #expect(props.allSatisfy { ($0["ring_fill"] as? Double).map { $0 >= 0 && $0 <= 1 } ?? false })
    }

    /// No upload URL: nothing is sent, events wait in the snapshot store (read back
    /// with Python's lmdb and zstandard).
    @Test func withoutAnUploadURLEventsStayOnDisk() throws {
        let dir = try DataDir()
        let r = try Self.child(["run", "25"], env: ["CAIRN_APP_ID": "orders", "CAIRN_DATA_DIR": dir.path,
                                                   "CAIRN_BATCH_AGE_MS": "50"])
        #expect(r.status == 0, "\(r.err)")
        let read = try runToEnd("/usr/bin/env", ["python3", repoRoot.path + "/Tests/Tools/read_store.py", dir.path + "/store",
                                                 "--records"])
        #expect(read.status == 0, "\(read.err)")
        let records = Self.objects(read.out.split(separator: "\n").map(String.init))
            .flatMap { ($0["records"] as? [[String: Any]]) ?? [] }
        let events = records.filter { $0["name"] as? String == "child_event" }
        #expect(events.count == 25)
        #expect(Set(events.compactMap { ($0["properties"] as? [String: Any])?["i"] as? Int }) == Set(0..<25))
    }

    /// The collector stalls, so the ring fills: Debug events are shed first (counted),
    /// Important ones still get in until the ring itself is full. 20,000 events of
    /// about 500 bytes are 10 MB, more than half the default 16 MiB ring, where the
    /// Debug tier's shedding begins.
    @Test func overloadShedsTheLowestTierFirst() throws {
        let collector = try CollectorProcess()
        try collector.setDefault(["stall": 30])
        let dir = try DataDir()
        let r = try Self.child(["burst", "20000"], env: ["CAIRN_APP_ID": "orders", "CAIRN_DATA_DIR": dir.path,
                                                       "CAIRN_UPLOAD_URL": collector.baseURL + "/v1/batch"])
        #expect(r.status == 0, "\(r.err)")
        let drops = try #require(Self.objects(r.out).first)
        #expect((drops["overload_debug"] as? Int ?? 0) > 1000, "\(drops)")
        #expect(drops["overload_important"] == nil && drops["overload_sampled"] == nil)
        collector.stop()
    }

    static func cli(_ args: [String]) throws -> (status: Int32, out: [String], err: String) {
        try run("cairn", args)
    }

    /// The `cairn` command reads an embedded SDK's store, says what waits on disk, and
    /// turns a crash report into a symbolicated event.
    @Test func cliReadsStoredEventsStatusAndReports() throws {
        let dir = try DataDir()
        let r = try Self.child(["run", "12"], env: ["CAIRN_APP_ID": "orders", "CAIRN_DATA_DIR": dir.path,
                                                   "CAIRN_BATCH_AGE_MS": "50"])
        #expect(r.status == 0, "\(r.err)")
        let events = try Self.cli(["events", dir.path])
        #expect(events.status == 0 && events.err.contains("cairn: \(events.out.count) events"), "\(events.err)")
        let names = Self.objects(events.out).compactMap { $0["name"] as? String }
        #expect(names.filter { $0 == "child_event" }.count == 12)
        let status = try Self.cli(["status", dir.path])
        #expect(status.status == 0 && status.out.contains { $0.hasPrefix("stored requests: ") })
        #expect(status.out.contains("crash reports waiting: 0"))
        // Without an upload URL every batch was stored: nothing waits in the ring.
        #expect(status.out.contains { $0.hasPrefix("event ring: 0 events waiting (") }, "\(status.out)")
        // A real crash report, from the C crash child.
        try FileManager.default.createDirectory(atPath: dir.path + "/crash", withIntermediateDirectories: true)
        let crash = try runToEnd(productsDirectory + "/cairn-crash-child", [dir.path + "/crash", "segv"], timeout: 60)
        #expect(crash.signaled && crash.status == SIGSEGV)
        let report = dir.path + "/crash/crash-\(crash.pid).report"
        let status2 = try Self.cli(["status", dir.path])
        #expect(status2.out.contains("crash reports waiting: 1"), "\(status2.out)")
        #expect(status2.out.contains { $0.hasSuffix(".report: SIGSEGV (SEGV_MAPERR): bad access at 0x0") },
                "the signal named, with its reason: \(status2.out)")
        // Bytes from a damaged or hostile file never reach the terminal as control codes.
        let hostile = dir.path + "/crash/crash-\u{1b}]0;owned\u{07}\u{1b}[2J.report"
        try Data("\u{1b}[31m not a report".utf8).write(to: URL(fileURLWithPath: hostile))
        let shown = try Self.cli(["status", dir.path])
        #expect(shown.out.contains { $0.contains("crash-\\e]0;owned\\u{7}\\e[2J.report") }, "\(shown.out)")
        let hostileReport = try Self.cli(["report", hostile])
        for text in shown.out + hostileReport.out + [shown.err, hostileReport.err] {
            #expect(!text.unicodeScalars.contains { $0.value < 0x20 && $0 != "\n" && $0 != "\t" || $0.value == 0x7f },
                    "\(text.debugDescription)")
        }
        try FileManager.default.removeItem(atPath: hostile)
        let readable = try Self.cli(["report", report]).out.joined(separator: "\n")
        #expect(readable.hasPrefix("SIGSEGV (SEGV_MAPERR)") && readable.contains("Crashed in crash_here at main.c:"),
                "\(readable)")
        let event = try #require(Self.objects(try Self.cli(["report", "--json", report]).out).first)
        let props = event["properties"] as? [String: Any] ?? [:]
        #expect(event["type"] as? String == "crash" && props["signal"] as? String == "SIGSEGV")
        #expect((props["frames"] as? [[String: Any]])?.first?["symbol"] as? String == "crash_here")
        let missing = try Self.cli(["events", dir.path + "/nowhere"])
        #expect(missing.status == 3 && missing.err.contains("no snapshot store"))
        // A mistyped directory is not a healthy, empty one.
        let mistyped = try Self.cli(["status", dir.path + "/nowhere"])
        #expect(mistyped.status == 3 && mistyped.err.contains("no data directory at"), "\(mistyped.err)")
        let directory = try Self.cli(["report", dir.path])
        #expect(directory.status == 1 && directory.err.contains("Is a directory"), "the right reason: \(directory.err)")
    }

    @Test func badEnvironmentSaysWhichOptionAndWhy() throws {
        let r = try Self.child(["run", "1"], env: ["CAIRN_APP_ID": "orders", "CAIRN_SAMPLE_RATE": "lots"])
        #expect(r.status == 1 && r.err.contains("sampling.rate"), "\(r.err)")
        let off = try Self.child(["run", "1"], env: ["CAIRN_APP_ID": "orders", "CAIRN_DISABLED": "1"])
        #expect(off.status == 1 && off.err.contains("disabled"))
    }

    @Test func optionsValidation() {
        func reason(_ env: [String: String]) -> String? {
            do {
                try Cairn.Options.fromEnvironment(env).validate()
                return nil
            } catch {
                if case .invalidOption(let name, _) = error { return name }
                return "\(error)"
            }
        }
        let base = ["CAIRN_APP_ID": "orders", "CAIRN_DISTINCT_ID": "h"]
        #expect(reason(base) == nil)
        #expect(reason([:].merging(["CAIRN_DISTINCT_ID": "h"]) { $1 }) == "appID")
        #expect(reason(base.merging(["CAIRN_UPLOAD_URL": "ftp://x"]) { $1 }) == "uploadURL")
        #expect(reason(base.merging(["CAIRN_SAMPLE_RATE": "1.5"]) { $1 }) == "sampling.rate")
        #expect(reason(base.merging(["CAIRN_BATCH_EVENTS": "0"]) { $1 }) == "maxBatchEvents")
        #expect(reason(base.merging(["CAIRN_BATCH_AGE_MS": "x"]) { $1 }) == "maxBatchAge")
        // The OpenTelemetry variables, read into `otlp`; bad values named by variable.
        #expect(reason(base.merging(["OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"]) { $1 }) == "otlp")
        #expect(reason(base.merging(["OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
                                     "OTEL_EXPORTER_OTLP_HEADERS": "a b=1"]) { $1 }) == "otlp")
        let otel = Cairn.Options.fromEnvironment(base.merging([
            "OTEL_EXPORTER_OTLP_ENDPOINT": " http://c:4318/ ", "OTEL_EXPORTER_OTLP_HEADERS": "api-key=k1,x=%20y",
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "api-key=k2", "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL": "http/json",
            "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "2500",
            "OTEL_SERVICE_NAME": "svc", "OTEL_RESOURCE_ATTRIBUTES": "team=core"]) { $1 }).otlp
        #expect(otel?.logs == OTLPOptions.Signal(url: "http://c:4318/v1/logs", headers: ["api-key": "k1", "x": " y"],
                                                  compression: .gzip, encoding: .json))
        #expect(otel?.traces == OTLPOptions.Signal(url: "http://c:4318/v1/traces", headers: ["api-key": "k2", "x": " y"],
                                                    compression: .gzip, timeout: .milliseconds(2500)))
        #expect(otel?.serviceName == "svc" && otel?.resourceAttributes == ["team": "core"])
        // Set in code: each bad setting refused with its name.
        func otlpReason(_ otlp: OTLPOptions) -> String? {
            var o = Cairn.Options(appID: "orders", distinctID: "h")
            o.otlp = otlp
            do {
                try o.validate()
                return nil
            } catch {
                if case .invalidOption(let name, _) = error { return name }
                return "\(error)"
            }
        }
        #expect(otlpReason(OTLPOptions(endpoint: " http://c:4318 ")) == nil)
        #expect(otlpReason(OTLPOptions(endpoint: "c:4318")) == "otlp.logs.url")
        #expect(otlpReason(OTLPOptions(logs: nil, traces: .init(url: "https://c/v1/traces", timeout: .zero)))
                == "otlp.traces.timeout")
        #expect(otlpReason(OTLPOptions(endpoint: "http://c", headers: ["x-key": "a\r\nInjected: 1"])) == "otlp.logs.headers")
        #expect(otlpReason(OTLPOptions(endpoint: "http://c", headers: ["bad name": "v"])) == "otlp.logs.headers")
        #expect(otlpReason(OTLPOptions(endpoint: "http://c", maxRequestBytes: 100)) == "otlp.maxRequestBytes")
        #expect(otlpReason(OTLPOptions(endpoint: "http://c", resourceAttributes: [" ": "v"])) == "otlp.resourceAttributes")
        #expect(otlpReason(OTLPOptions(logs: nil, traces: nil)) == "otlp")
        let o = Cairn.Options.fromEnvironment(base.merging(["CAIRN_DEBUG": "true", "CAIRN_PRIVACY": "off",
                                                            "CAIRN_SAMPLE_RATE": "0.25"]) { $1 })
        #expect(o.debugLogging && !o.privacy.enabled && o.sampling.rate == 0.25 && o.distinctID == "h")
    }
}
