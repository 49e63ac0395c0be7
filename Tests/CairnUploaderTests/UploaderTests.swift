import CairnBase
import CairnTestSupport
import CairnStore
import CairnUploader
import Foundation
import Testing

/// The uploader against the real collector over TCP: exact-bytes retries, the snapshot
/// store across processes, Retry-After, drops, the breaker, logs, and the three ways
/// to send.
@Suite(.serialized) struct UploaderTests {
    /// A data directory with a ring and a store, removed afterwards.
    final class Sandbox {
        private let directory: TemporaryDirectory
        var path: String { directory.path }
        init() throws { directory = try TemporaryDirectory("cairn-up") }
        func ring() throws -> Ring { try Ring(path: path + "/events.ring") }
        func store(maxBytes: Int = 32 << 20) throws -> SnapshotStore {
            try SnapshotStore(directory: path + "/store", options: .init(maxBytes: maxBytes))
        }
    }

    /// Records every log the uploader hands to its observer.
    final class Logs: UploadObserver, @unchecked Sendable {
        private let lock = Locked<([UploadStartLog], [UploadResultLog])>(([], []))
        func uploadWillStart(_ log: UploadStartLog) { lock.withLock { $0.0.append(log) } }
        func uploadDidFinish(_ log: UploadResultLog) { lock.withLock { $0.1.append(log) } }
        var starts: [UploadStartLog] { lock.withLock { $0.0 } }
        var results: [UploadResultLog] { lock.withLock { $0.1 } }
    }

    static func options(_ collector: CollectorProcess, attempts: Int = 3, observer: (any UploadObserver)? = nil,
                        breaker: CircuitBreaker = CircuitBreaker(threshold: 1000)) -> UploaderOptions {
        UploaderOptions(url: collector.baseURL + "/v1/batch", apiKey: "secret-key", maxBatchEvents: 100,
                        maxBatchAge: .milliseconds(50), attempts: attempts,
                        backoff: Backoff(base: .milliseconds(50), cap: .milliseconds(200)),
                        breaker: breaker, requestTimeout: .seconds(5), observer: observer)
    }

    static func event(_ i: Int, name: String = "checkout") -> [UInt8] {
        Array(#"{"event_id":"e-\#(i)","name":"\#(name)","n":\#(i)}"#.utf8)
    }

    @Test func failsTwiceThenDeliversTheSameBytesWithTheSameKey() throws {
        let collector = try CollectorProcess()
        try collector.script([["status": 500], ["status": 503, "retry_after": "0"], ["status": 200]])
        let box = try Sandbox()
        let ring = try box.ring()
        let uploader = Uploader(ring: ring, store: try box.store(), transport: HTTPTransport(),
                                options: Self.options(collector))
        for i in 0..<10 { try ring.append(Self.event(i)) }
        uploader.start()
        // The 503 stores the batch (the collector is failing: stored is safe, and the
        // flush may end there); the stored request is then replayed as the third attempt.
        #expect(uploader.flush(timeout: .seconds(20)))
        #expect(eventually(20) { uploader.stats.deliveredBatches == 1 })
        uploader.shutdown(timeout: .seconds(5))

        let attempts = try collector.requests()
        #expect(attempts.count == 3)
        #expect(Set(attempts.compactMap(\.body_sha256)).count == 1, "identical body bytes on every attempt")
        #expect(Set(attempts.compactMap(\.idempotency_key)).count == 1, "the same idempotency key")
        #expect(attempts.map { $0.retry_count ?? "" } == ["0", "1", "2"])
        #expect(attempts.last?.records == (0..<10).map { String(decoding: Self.event($0), as: UTF8.self) })
        #expect(attempts[0].headerValues("User-Agent") == ["cairn-swift/\(cairnVersion)"])
        #expect(attempts[0].headerValues("Content-Encoding") == ["zstd"])
        #expect(uploader.stats.deliveredBatches == 1 && uploader.stats.deliveredEvents == 10)
        #expect(ring.stats().used == 0)
    }

    /// The collector is down: the batch is stored; the process ends; a new process
    /// (the child, in drain mode) replays it with the same bytes and key once the
    /// collector is up.
    /// A batch goes out only once its mark is kept (docs/FORMATS.md, `ring_batch`), so
    /// that a process killed meanwhile rebuilds it under the same key: while the store
    /// refuses writes the batch waits, counted; once the store takes writes it is sent
    /// under the key its mark names. A store that keeps failing delays delivery by
    /// `markPatience` only, then the batch goes out unmarked, counted. The failing
    /// writes are injected (`failingWrites`): a real store cannot fail on demand.
    @Test func aBatchWaitsForItsMarkThenGoesOutUnderIt() throws {
        let collector = try CollectorProcess()
        let box = try Sandbox()
        let ring = try box.ring()
        let store = try box.store()
        var options = Self.options(collector)
        options.markPatience = .seconds(3)
        let uploader = Uploader(ring: ring, store: store, transport: HTTPTransport(), options: options)
        store.failingWrites.withLock { $0 = true }
        for i in 0..<10 { try ring.append(Self.event(i)) }
        uploader.start()
        #expect(eventually(5) { uploader.stats.markFailures >= 3 })
        #expect(try collector.requests().isEmpty, "a batch went out before its mark was kept")

        store.failingWrites.withLock { $0 = false }
        #expect(eventually(10) { uploader.stats.deliveredBatches == 1 })
        let first = try collector.requests()
        #expect(first.count == 1 && first.first?.records?.count == 10)
        let mark = try #require(try store.metadata("ring_batch"))
        #expect(String(decoding: mark.dropFirst(40), as: UTF8.self) == first.first?.idempotency_key)
        #expect(uploader.stats.unmarkedSends == 0)

        // The store fails for good: the next batch waits its patience, then goes out.
        store.failingWrites.withLock { $0 = true }
        for i in 10..<20 { try ring.append(Self.event(i)) }
        usleep(1_000_000)
        #expect(try collector.requests().count == 1, "sent before its patience ran out")
        #expect(eventually(10) { uploader.stats.deliveredBatches == 2 })
        #expect(uploader.stats.unmarkedSends == 1)
        store.failingWrites.withLock { $0 = false }
        uploader.shutdown(timeout: .seconds(5))
        #expect(try collector.requests().flatMap { $0.records ?? [] }.count == 20)
    }

    @Test func storedWhileDownReplayedByTheNextProcess() throws {
        let collector = try CollectorProcess()
        try collector.setDefault(["status": 500])
        let box = try Sandbox()
        do {
            let ring = try box.ring()
            let store = try box.store()
            let uploader = Uploader(ring: ring, store: store, transport: HTTPTransport(),
                                    options: Self.options(collector, attempts: 2))
            for i in 0..<25 { try ring.append(Self.event(i)) }
            uploader.start()
            uploader.flush(timeout: .seconds(10))
            uploader.shutdown(timeout: .seconds(5))
            #expect(uploader.stats.storedBatches == 1)
            #expect(store.stats.count == 1)
            #expect(ring.stats().used == 0, "stored means released from the ring")
        }
        let failed = try collector.requests()
        #expect(failed.count >= 2)
        try collector.setDefault(["status": 200])

        let child = productsDirectory + "/cairn-upload-child"
        let drained = try runToEnd(child, [box.path, collector.baseURL + "/v1/batch", "replay", "drain"])
        #expect(drained.status == 0 && !drained.signaled && drained.out.contains("DRAINED"), "\(drained.err)")

        let all = try collector.requests()
        let delivered = all.filter { $0.answered && $0.seq > failed.map(\.seq).max() ?? 0 }
        #expect(delivered.count == 1)
        #expect(delivered.first?.body_sha256 == failed.first?.body_sha256)
        #expect(delivered.first?.idempotency_key == failed.first?.idempotency_key)
        #expect(delivered.first?.records?.count == 25)
        #expect(Int(delivered.first?.retry_count ?? "0") ?? 0 >= 2, "the attempt count carries over")
    }

    @Test func retryAfterPausesEveryUpload() throws {
        let collector = try CollectorProcess()
        try collector.script([["status": 429, "retry_after": "2"]])
        let box = try Sandbox()
        let ring = try box.ring()
        let uploader = Uploader(ring: ring, store: try box.store(), transport: HTTPTransport(),
                                options: Self.options(collector))
        try ring.append(Self.event(1))
        uploader.start()
        // Paused, the batch is stored: the flush is done once it is safe on disk...
        #expect(uploader.flush(timeout: .seconds(20)))
        #expect(uploader.stats.storedBatches == 1)
        // ...and it is sent again once the pause is over, not before.
        let deadline = ContinuousClock.now + .seconds(15)
        while uploader.stats.deliveredBatches == 0 && ContinuousClock.now < deadline { usleep(20_000) }
        uploader.shutdown(timeout: .seconds(5))
        let attempts = try collector.requests()
        #expect(attempts.count == 2)
        if attempts.count == 2 {
            let gap = attempts[1].monotonic - attempts[0].monotonic
            #expect(gap >= 1.95, "no request before Retry-After elapsed (gap \(gap) s)")
        }
        #expect(uploader.stats.pauses == 1 && uploader.stats.deliveredBatches == 1)
    }

    @Test func rejectedBatchIsDroppedCountedAndReported() throws {
        let collector = try CollectorProcess()
        try collector.script([["status": 400, "body": "bad batch"]])
        let box = try Sandbox()
        let ring = try box.ring()
        let uploader = Uploader(ring: ring, store: try box.store(), transport: HTTPTransport(),
                                options: Self.options(collector))
        for i in 0..<7 { try ring.append(Self.event(i)) }
        uploader.start()
        #expect(uploader.flush(timeout: .seconds(10)))
        #expect(uploader.stats.dropped[.rejected(status: 400)] == 7)
        #expect(ring.stats().used == 0)
        // The next batch tells the collector what was lost, and why.
        try ring.append(Self.event(100))
        #expect(uploader.flush(timeout: .seconds(10)))
        uploader.shutdown(timeout: .seconds(5))
        let attempts = try collector.requests()
        #expect(attempts.count == 2)
        #expect(attempts.last?.headerValues("Cairn-Dropped") == ["rejected_400=7"])
    }

    @Test func breakerOpensThenRecoversAndReplaysEverything() throws {
        let collector = try CollectorProcess()
        try collector.setDefault(["status": 500])
        let box = try Sandbox()
        let ring = try box.ring()
        let store = try box.store()
        let uploader = Uploader(ring: ring, store: store, transport: HTTPTransport(),
                                options: Self.options(collector, attempts: 1,
                                                      breaker: CircuitBreaker(threshold: 2, probeAfter: .seconds(5))))
        uploader.start()
        for batch in 0..<5 {
            for i in 0..<10 { try ring.append(Self.event(batch * 10 + i)) }
            uploader.flush(timeout: .milliseconds(300))
        }
        #expect(uploader.stats.breakerOpenings == 1)
        let whileOpen = try collector.requests().count
        #expect(whileOpen == 2, "after two failures the open breaker stops attempts (saw \(whileOpen))")
        // How the 50 events split into batches depends on timing; every batch went to
        // the store, either after its failed attempt or at once while the breaker was open.
        #expect(uploader.stats.storedBatches >= 3 && store.stats.count == uploader.stats.storedBatches,
                "every batch went to the store: \(uploader.stats)")
        #expect(ring.stats().used == 0)
        try collector.setDefault(["status": 200])
        // After the probe interval, replay delivers every stored batch.
        let deadline = Date().addingTimeInterval(20)
        while store.stats.count > 0 && Date() < deadline { usleep(50_000) }
        uploader.shutdown(timeout: .seconds(5))
        #expect(store.stats.count == 0)
        let delivered = Set(try collector.events().map(\.record))
        #expect(delivered == Set((0..<50).map { String(decoding: Self.event($0), as: UTF8.self) }))
    }

    @Test func logsShowWhatIsSentWithSecretsRedacted() throws {
        let collector = try CollectorProcess()
        try collector.script([["status": 500, "body": "try later"], ["status": 200, "body": "ok"]])
        let logs = Logs()
        let box = try Sandbox()
        let ring = try box.ring()
        let uploader = Uploader(ring: ring, store: try box.store(), transport: HTTPTransport(),
                                options: Self.options(collector, observer: logs))
        try ring.append(Self.event(1, name: "signup"))
        try ring.append(Self.event(2, name: "checkout"))
        uploader.start()
        #expect(uploader.flush(timeout: .seconds(10)))
        uploader.shutdown(timeout: .seconds(5))
        let starts = logs.starts, results = logs.results
        #expect(starts.count == 2 && results.count == 2)
        #expect(starts.first?.eventNames == ["signup", "checkout"])
        #expect(starts.first?.url == collector.baseURL + "/v1/batch")
        #expect(starts.first?.headers.contains(HTTPHeader("Authorization", "[redacted]")) == true)
        #expect(starts.first?.params.contains(#""name":"signup""#) == true)
        #expect(results.map(\.status) == [500, 200])
        #expect(results.map(\.success) == [false, true])
        #expect(results.first?.response == "try later")
        // What the collector saw carried the real key.
        #expect(try collector.requests().first?.headerValues("Authorization") == ["Bearer secret-key"])
    }

    @Test func buildOnlyAndSendPrebuilt() throws {
        let collector = try CollectorProcess()
        let box = try Sandbox()
        let ring = try box.ring()
        let store = try box.store()
        let uploader = Uploader(ring: ring, store: store, transport: HTTPTransport(), options: Self.options(collector))
        // Build-only: the exact request, for the integrator to send.
        let built = try uploader.buildRequest(records: [Self.event(1), Self.event(2)])
        #expect(built.url == collector.baseURL + "/v1/batch" && built.header("Idempotency-Key") == built.idempotencyKey)
        let decoded = try FrameDecoder(maxContentSize: 1 << 20).decodeRecords(built.body)
        #expect(decoded.records == [Self.event(1), Self.event(2)])
        #expect(try collector.requests().isEmpty, "build-only sends nothing")
        // Send-prebuilt: a payload built elsewhere gets the store-and-retry treatment.
        try collector.script([["status": 500]])
        let body = try FrameEncoder().encode(batchID: 42, records: [Self.event(9)])
        let sent = try uploader.sendPrebuilt(body: body)
        uploader.start()
        let deadline = Date().addingTimeInterval(15)
        while store.stats.count > 0 && Date() < deadline { usleep(50_000) }
        uploader.shutdown(timeout: .seconds(5))
        let attempts = try collector.requests()
        #expect(attempts.count == 2)
        #expect(attempts.allSatisfy { $0.idempotency_key == sent.idempotencyKey && $0.batch?.batch_id == 42 })
        #expect(Set(attempts.compactMap(\.body_sha256)).count == 1)
    }
}

/// The uploader's hooks for the public API: store-only mode (no upload URL), the tap
/// feeding other destinations, and drops counted in the ring's drop table (by the SDK,
/// or by a process since killed) riding in `Cairn-Dropped` once.
@Suite(.serialized) struct UploaderHookTests {
    @Test func storeOnlyKeepsBatchesWithoutSending() throws {
        let collector = try CollectorProcess()
        let box = try UploaderTests.Sandbox()
        let ring = try box.ring()
        let store = try box.store()
        var options = UploaderTests.options(collector)
        options.storeOnly = true
        let uploader = Uploader(ring: ring, store: store, transport: HTTPTransport(), options: options)
        for i in 0..<25 { try ring.append(UploaderTests.event(i)) }
        uploader.start()
        #expect(uploader.flush(timeout: .seconds(10)))
        uploader.shutdown(timeout: .seconds(5))
        #expect(try collector.requests().isEmpty, "nothing is sent")
        let stored = try store.oldest(limit: 10)
        #expect(stored.count == 1 && ring.stats().used == 0)
        let records = try FrameDecoder(maxContentSize: 1 << 20).decodeRecords(try #require(UploadRequest(record: stored[0].record)).body).records
        #expect(records == (0..<25).map { UploaderTests.event($0) })
    }

    /// The store keeps opaque records: one that is not a request (another writer's, or
    /// damaged where no check could see it) is not sent; it is deleted and counted.
    @Test func aStoredRecordThatIsNotARequestIsDroppedAndCounted() throws {
        let collector = try CollectorProcess()
        let box = try UploaderTests.Sandbox()
        let ring = try box.ring()
        let store = try box.store()
        try store.put(Array("not a request".utf8), priority: .sampled)
        let uploader = Uploader(ring: ring, store: store, transport: HTTPTransport(),
                                options: UploaderTests.options(collector))
        uploader.start()
        #expect(eventually(10) { uploader.stats.dropped[.storeCorrupt] == 1 })
        #expect(uploader.flush(timeout: .seconds(10)))
        uploader.shutdown(timeout: .seconds(5))
        #expect(try store.oldest(limit: 10).isEmpty && (try collector.requests()).isEmpty)
        #expect(ring.drops().first { $0.reason == "store_corrupt" }?.counted == 1)
    }

    @Test func tapSeesEveryRecordAndTableDropsAreReportedOnce() throws {
        let collector = try CollectorProcess()
        let box = try UploaderTests.Sandbox()
        let ring = try box.ring()
        let seen = Locked<[[UInt8]]>([])
        var options = UploaderTests.options(collector)
        options.tap = { records in seen.withLock { $0 += records } }
        // Drops an earlier process counted and never reported.
        let sampled = try #require(ring.dropSlot("sampled"))
        ring.countDrops(slot: sampled, 7)
        _ = ring.dropSlot("filtered")
        let uploader = Uploader(ring: ring, store: try box.store(), transport: HTTPTransport(), options: options)
        for i in 0..<250 { try ring.append(UploaderTests.event(i)) }
        uploader.start()
        #expect(uploader.flush(timeout: .seconds(20)))
        uploader.shutdown(timeout: .seconds(5))
        #expect(seen.withLock { $0 } == (0..<250).map { UploaderTests.event($0) }, "in order, each once")
        let attempts = try collector.requests()
        #expect(attempts.count >= 2)
        // Requests go out several at once, so the collector may record them in any order.
        let reporting = attempts.filter { !$0.headerValues("Cairn-Dropped").isEmpty }
        #expect(reporting.count == 1, "reported once")
        #expect(reporting.first?.headerValues("Cairn-Dropped") == ["sampled=7"])
        #expect(ring.drops().first { $0.reason == "sampled" }.map { $0.reported == 7 && $0.unreported == 0 } == true)
    }
}
