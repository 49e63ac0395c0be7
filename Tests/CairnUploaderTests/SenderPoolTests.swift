// The sender threads against the real collector: as many as the collector's pace
// needs (Little's law), not one more for every attempt that waited, and back to one
// after a backlog.
import CairnBase
import CairnStore
import CairnTestSupport
@testable import CairnUploader
import Foundation
import Testing

@Suite(.serialized) struct SenderPoolTests {
    func options(_ collector: CollectorProcess, maxBatchEvents: Int, maxBatchAge: Duration) -> UploaderOptions {
        var options = UploaderOptions(url: collector.baseURL + "/v1/batch", apiKey: "k",
                                      maxBatchEvents: maxBatchEvents, maxBatchAge: maxBatchAge,
                                      breaker: CircuitBreaker(threshold: 1000), requestTimeout: .seconds(10))
        options.maxInFlight = 8
        return options
    }

    func event(_ i: Int) -> [UInt8] { Array(#"{"event_id":"e-\#(i)","n":\#(i)}"#.utf8) }

    /// An uploader over a new ring and store in `directory`.
    func uploader(_ directory: TemporaryDirectory, transport: any Transport = HTTPTransport(),
                  options: UploaderOptions) throws -> (Uploader, Ring) {
        let ring = try Ring(path: directory.path + "/events.ring")
        return (Uploader(ring: ring, store: try SnapshotStore(directory: directory.path + "/store"),
                         transport: transport, options: options), ring)
    }

    func deliveredIDs(_ collector: CollectorProcess) throws -> Set<String> {
        Set(try collector.events().compactMap { e -> String? in
            guard let range = e.record.range(of: #""event_id":"[^"]*""#, options: .regularExpression) else { return nil }
            return String(e.record[range].dropFirst(12).dropLast())
        })
    }

    /// A collector that takes 100 ms an answer and a backlog of 2,000 events (about 30
    /// requests: batches grow under load): the senders grow, because each one is busy
    /// all the time. Once the backlog is gone they end after `senderIdleExit` with
    /// nothing to send, all but one, which still sends.
    @Test func aSlowCollectorGetsMoreSendersAndTheyEndOnceIdle() throws {
        let collector = try CollectorProcess()
        try collector.setDefault(["stall": 0.1])
        let directory = try TemporaryDirectory("cairn-senders")
        var options = options(collector, maxBatchEvents: 5, maxBatchAge: .milliseconds(20))
        options.senderIdleExit = .milliseconds(300)
        let (uploader, ring) = try uploader(directory, options: options)
        let backlog = 2000
        for i in 0..<backlog { try ring.append(event(i)) }
        uploader.start()
        #expect(uploader.flush(timeout: .seconds(60)))
        let grown = uploader.stats.mostSenderThreads
        #expect(grown >= 3, "senders busy all the time should grow (\(grown))")
        let deadline = ContinuousClock.now + .seconds(10)
        while uploader.stats.senderThreads > 1 && ContinuousClock.now < deadline { usleep(20_000) }
        #expect(uploader.stats.senderThreads == 1, "idle senders end, all but one")
        try collector.setDefault(["status": 200])
        try ring.append(event(backlog))
        #expect(uploader.flush(timeout: .seconds(10)))
        uploader.shutdown(timeout: .seconds(5))
        #expect(try deliveredIDs(collector) == Set((0...backlog).map { "e-\($0)" }))
    }

    /// A steady trickle (a request every 40 ms) to a fast collector, one answer in
    /// sixteen taking 60 ms: attempts wait for the one sender now and then, but it is
    /// busy a quarter of its time at most (a normal answer would have to take 12 ms to
    /// reach half), and a second sender would not carry more. One sender throughout.
    @Test func anOccasionalSlowAnswerAddsNoSender() throws {
        let collector = try CollectorProcess()
        try collector.script((0..<200).map { $0 % 16 == 3 ? ["stall": 0.06] : ["status": 200] })
        let directory = try TemporaryDirectory("cairn-senders")
        let (uploader, ring) = try uploader(directory, options: options(collector, maxBatchEvents: 100,
                                                                        maxBatchAge: .milliseconds(40)))
        uploader.start()
        let count = 320
        for i in 0..<count {
            try ring.append(event(i))
            usleep(5_000)
        }
        #expect(uploader.flush(timeout: .seconds(10)))
        uploader.shutdown(timeout: .seconds(5))
        let attempts = try collector.requests().count
        // A request about every 40 ms, fewer on a loaded machine (batches then take in
        // more events): enough that the slow fourth answer was served with more behind it.
        #expect(attempts >= 8, "requests: \(attempts)")
        #expect(uploader.stats.mostSenderThreads == 1)
        #expect(try deliveredIDs(collector) == Set((0..<count).map { "e-\($0)" }))
    }

    /// A transport whose one-time set-up takes 300 ms (as loading a TLS library and
    /// reading a trust store can on a loaded machine), then sends through the real
    /// HTTP client. The fake only stretches the set-up, which a real part cannot be made
    /// to do on demand.
    final class SlowSetUp: Transport, @unchecked Sendable {
        let inner = HTTPTransport()
        let lock = NSLock()
        var prepared = false
        func prepare(for request: UploadRequest) {
            lock.lock()
            defer { lock.unlock() }
            if !prepared {
                usleep(300_000)
                prepared = true
            }
        }
        func send(_ request: UploadRequest, attempt: Int, timeout: Duration) -> TransportResult {
            prepare(for: request)  // a transport that was not prepared sets up in its send
            return inner.send(request, attempt: attempt, timeout: timeout)
        }
    }

    /// Requests queued behind a first send whose set-up is slow: the set-up is not the
    /// collector's time, so the one sender is not seen as busy and none is added (a
    /// sender counted busy for those 300 ms would have started a second, and a second
    /// TLS connection with it).
    @Test func aSlowOneTimeSetUpAddsNoSender() throws {
        let collector = try CollectorProcess()
        let directory = try TemporaryDirectory("cairn-senders")
        let (uploader, ring) = try uploader(directory, transport: SlowSetUp(),
                                            options: options(collector, maxBatchEvents: 5, maxBatchAge: .milliseconds(5)))
        for i in 0..<40 { try ring.append(event(i)) }
        uploader.start()
        #expect(uploader.flush(timeout: .seconds(20)))
        #expect(uploader.stats.mostSenderThreads == 1, "senders: \(uploader.stats.mostSenderThreads)")
        uploader.shutdown(timeout: .seconds(5))
        #expect(try deliveredIDs(collector) == Set((0..<40).map { "e-\($0)" }))
    }

    /// An idle worker sleeps: once what was appended is delivered, it makes no pass
    /// (no read of the ring or the store, no sync) until something changes; the first
    /// record appended after a long idle wakes it (the ring's fill alarm), and it is
    /// delivered at the batch's age, without a flush.
    @Test func anIdleWorkerSleepsUntilARecordIsAppended() throws {
        let collector = try CollectorProcess()
        let directory = try TemporaryDirectory("cairn-idle")
        let (uploader, ring) = try uploader(directory, options: options(collector, maxBatchEvents: 100,
                                                                        maxBatchAge: .milliseconds(50)))
        uploader.start()
        try ring.append(event(0))
        #expect(uploader.flush(timeout: .seconds(10)))
        usleep(300_000)  // the last pass after the flush (its buffers' release is due 1 s after)
        let before = uploader.workerPasses
        usleep(2_500_000)
        let passes = uploader.workerPasses - before
        // The framing buffers' release (1 s after the last framing) takes one or two.
        #expect(passes <= 3, "passes while idle: \(passes)")
        try ring.append(event(1))
        let deadline = ContinuousClock.now + .seconds(5)
        while try deliveredIDs(collector) != ["e-0", "e-1"] && ContinuousClock.now < deadline { usleep(20_000) }
        #expect(try deliveredIDs(collector) == ["e-0", "e-1"], "a record appended after an idle is delivered unflushed")
        uploader.shutdown(timeout: .seconds(5))
    }

    /// A worker with a send out (the collector takes 1.5 s to answer) looks again at the
    /// batch age, no more: about 20 passes in a second at 50 ms, not a busy loop.
    @Test func aWorkerWaitingForAnAnswerDoesNotSpin() throws {
        let collector = try CollectorProcess()
        try collector.setDefault(["stall": 1.5])
        let directory = try TemporaryDirectory("cairn-idle")
        let (uploader, ring) = try uploader(directory, options: options(collector, maxBatchEvents: 100,
                                                                        maxBatchAge: .milliseconds(50)))
        uploader.start()
        try ring.append(event(0))
        usleep(200_000)  // the batch is formed and out
        let before = uploader.workerPasses
        usleep(1_000_000)
        let passes = uploader.workerPasses - before
        #expect(passes <= 60, "passes in a second with a send out: \(passes)")
        #expect(uploader.flush(timeout: .seconds(10)))
        uploader.shutdown(timeout: .seconds(5))
        #expect(try deliveredIDs(collector) == ["e-0"])
    }
}
