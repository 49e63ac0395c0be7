import CairnBase
import CairnStore
import CairnTestSupport
@testable import CairnUploader
import Foundation
import Testing

/// One batch, one key, across a kill: process A is "killed" (its files copied as they
/// are) while a batch is in flight or just stored; process B, on the copies, must send
/// that batch again under the same key, or release its records when it was stored, and
/// report drops with the next new batch. Records written with `withReservation` that
/// reserved more than they wrote (as `Cairn.track` does) leave padding before a batch's
/// first record; both layouts are covered. The transport is a recorder that blocks the
/// in-flight request: a real collector cannot be made to stall one request on cue.
@Suite(.serialized) struct BatchMarkTests {
    final class Recorder: Transport, @unchecked Sendable {
        let lock = NSLock()
        var keys: [String] = []
        var dropped: [String?] = []
        var block: Int
        let gate = DispatchSemaphore(value: 0)
        let reached = DispatchSemaphore(value: 0)
        init(blockAt: Int) { block = blockAt }
        func send(_ request: UploadRequest, attempt: Int, timeout: Duration) -> TransportResult {
            lock.lock()
            keys.append(request.idempotencyKey)
            dropped.append(request.headers.first { $0.name == "Cairn-Dropped" }?.value)
            let n = keys.count
            lock.unlock()
            if n == block {
                reached.signal()
                gate.wait()  // "killed" while this request is in flight
            }
            return .response(TransportResponse(status: 200))
        }
    }

    func copyTree(_ from: String, _ to: String) throws {
        try FileManager.default.createDirectory(atPath: to, withIntermediateDirectories: true)
        for name in try FileManager.default.contentsOfDirectory(atPath: from) {
            try FileManager.default.copyItem(atPath: from + "/" + name, toPath: to + "/" + name)
        }
    }

    func run(padded: Bool, blockAt: Int = 2, filteredBefore: UInt64 = 0) throws
        -> (a: [String], b: [String], aDropped: [String?], bDropped: [String?]) {
        let scratch = try TemporaryDirectory("cairn-mark")
        let base = scratch.path
        let a = base + "/a", b = base + "/b"
        try FileManager.default.createDirectory(atPath: a, withIntermediateDirectories: true)
        let ring = try Ring(path: a + "/events.ring")
        let store = try SnapshotStore(directory: a + "/store")
        for i in 0..<6 {
            let bytes = Array(#"{"event_id":"e-\#(i)"}"#.utf8)
            if padded {
                try ring.withReservation(capacity: 200) { buf in
                    for (k, c) in bytes.enumerated() { buf[k] = c }
                    return bytes.count
                }
            } else {
                try ring.append(bytes)
            }
        }
        if filteredBefore > 0 { ring.countDrops(slot: try #require(ring.dropSlot("filtered")), filteredBefore) }
        let ta = Recorder(blockAt: blockAt)
        var opts = UploaderOptions(url: "http://127.0.0.1:9/v1/batch", maxBatchEvents: 3, maxBatchAge: .milliseconds(10))
        opts.breaker = CircuitBreaker(threshold: 1000)
        // One request at a time, so that "the second request" is the second batch (with
        // several out, the collector may see them in either order; the kill loop covers
        // several batches out at a kill).
        opts.maxInFlight = 1
        let up = Uploader(ring: ring, store: store, transport: ta, options: opts)
        up.start()
        ta.reached.wait()
        // Process A is "killed" now: its files as they are.
        let sampled = try #require(ring.dropSlot("sampled"))
        ring.countDrops(slot: sampled, 5)  // counted after batch 2 was built
        try ring.sync()
        try store.sync()
        try FileManager.default.createDirectory(atPath: b, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: a + "/events.ring", toPath: b + "/events.ring")
        try copyTree(a + "/store", b + "/store")
        let ring2 = try Ring(path: b + "/events.ring")
        let store2 = try SnapshotStore(directory: b + "/store")
        let tb = Recorder(blockAt: -1)
        let up2 = Uploader(ring: ring2, store: store2, transport: tb, options: opts)
        up2.start()
        _ = up2.flush(timeout: .seconds(5))
        try ring2.append(Array(#"{"event_id":"e-new"}"#.utf8))
        _ = up2.flush(timeout: .seconds(5))
        up2.shutdown(timeout: .seconds(2))
        ta.gate.signal()
        up.shutdown(timeout: .seconds(2))
        return (ta.keys, tb.keys, ta.dropped, tb.dropped)
    }

    @Test(arguments: [false, true]) func inFlightBatchIsSentAgainUnderItsKey(padded: Bool) throws {
        let r = try run(padded: padded)
        #expect(r.a.count == 2 && r.b.count == 2, "A: \(r.a), B: \(r.b)")
        #expect(r.b.first == r.a.last, "the resumed batch keeps its key")
        #expect(r.bDropped.first == .some(nil), "the resumed copy carries no drops: its first attempt carried none")
        #expect(r.bDropped.last == "sampled=5", "drops counted since ride with the next new batch")
    }

    /// The batch in flight at the kill carried drops: its copy carries the same, under
    /// its key (a collector that holds the first attempt drops the copy, one that does
    /// not takes the counts from it), and no later request reports them again.
    @Test(arguments: [false, true]) func dropsStayWithTheirKeyAcrossAKill(padded: Bool) throws {
        let r = try run(padded: padded, blockAt: 1, filteredBefore: 4)
        #expect(r.b.count == 3, "A: \(r.a), B: \(r.b) \(r.bDropped)")
        #expect(r.b.first == r.a.first, "the resumed batch keeps its key")
        #expect(r.aDropped.first == "filtered=4")
        #expect(r.bDropped.first == "filtered=4", "and its drop header")
        #expect(r.bDropped.dropFirst().allSatisfy { $0 == nil || $0 == "sampled=5" }, "\(r.bDropped)")
        #expect(r.bDropped.filter { $0 == "sampled=5" }.count == 1, "the later drops once: \(r.bDropped)")
    }
}

@Suite(.serialized) struct StoredBatchMarkTests {
    /// A process killed between storing a batch (mark state 1) and releasing its ring
    /// records: the next start should release them, not send them again.
    @Test func storedMarkReleasesRecords() throws {
        let scratch = try TemporaryDirectory("cairn-mark")
        let base = scratch.path
        try FileManager.default.createDirectory(atPath: base, withIntermediateDirectories: true)
        do {
            let ring = try Ring(path: base + "/events.ring")
            let store = try SnapshotStore(directory: base + "/store")
            for i in 0..<3 { try ring.append(Array(#"{"event_id":"s-\#(i)"}"#.utf8)) }
            let run = try ring.peek(maxRecords: 3, maxBytes: 1 << 20)
            let mark = RingBatchMark(ringID: ring.id, first: run.records[0].position, next: run.next, events: 3,
                                     batchID: 7, key: "stored-key", stored: true)
            #expect(mark.first == ring.readPosition)
            let req = UploadRequest(url: "http://x/v1/batch", headers: [], body: [1, 2, 3], idempotencyKey: "stored-key")
            try store.put(req.record, priority: .sampled, metadata: [(RingBatchMark.metadataKey, mark.encoded())])
            try store.sync()
            // killed here, before ring.commit
        }
        let ring = try Ring(path: base + "/events.ring")
        let store = try SnapshotStore(directory: base + "/store")
        let t = BatchMarkTests.Recorder(blockAt: -1)
        var opts = UploaderOptions(url: "http://127.0.0.1:9/v1/batch", maxBatchEvents: 3, maxBatchAge: .milliseconds(10))
        opts.breaker = CircuitBreaker(threshold: 1000)
        let up = Uploader(ring: ring, store: store, transport: t, options: opts)
        up.start()
        _ = up.flush(timeout: .seconds(5))
        up.shutdown(timeout: .seconds(2))
        #expect(t.keys.filter { $0 != "stored-key" }.isEmpty, "the stored batch's records were sent again under another key")
    }
}

/// While every request slot is out, the next batch is framed ahead (its ring pages can
/// go; it waits in memory compressed), one batch per slot at most. The tap sees each
/// batch as it is framed. The transport is a recorder that holds the first request: a
/// real collector cannot be made to stall one request on cue.
@Suite(.serialized) struct FrameAheadTests {
    @Test func oneBatchPerSlotIsFramedAheadWhileTheSlotsAreOut() throws {
        let scratch = try TemporaryDirectory("cairn-ahead")
        let base = scratch.path
        try FileManager.default.createDirectory(atPath: base, withIntermediateDirectories: true)
        let ring = try Ring(path: base + "/events.ring")
        for i in 0..<12 { try ring.append(Array(#"{"event_id":"a-\#(i)"}"#.utf8)) }
        let transport = BatchMarkTests.Recorder(blockAt: 1)
        let framed = Locked(0)
        var opts = UploaderOptions(url: "http://127.0.0.1:9/v1/batch", maxBatchEvents: 3, maxBatchAge: .milliseconds(10))
        opts.maxInFlight = 1
        opts.tap = { records in framed.withLock { $0 += records.count } }
        let up = Uploader(ring: ring, store: nil, transport: transport, options: opts)
        up.start()
        transport.reached.wait()
        // Time for the worker to frame what it may (it would go on past the limit).
        let deadline = ContinuousClock.now + .seconds(2)
        while framed.withLock({ $0 }) < 6 && ContinuousClock.now < deadline { usleep(5_000) }
        usleep(200_000)
        #expect(framed.withLock { $0 } == 6, "the batch out and one framed ahead, no more")
        #expect(transport.lock.withLock { transport.keys.count } == 1)
        transport.gate.signal()
        #expect(up.flush(timeout: .seconds(5)))
        // The rest, in batches grown while the slot was out.
        let sent = transport.lock.withLock { transport.keys.count }
        #expect(framed.withLock { $0 } == 12 && sent >= 3, "framed \(framed.withLock { $0 }), sent \(sent)")
        #expect(ring.stats().used == 0, "all released")
        up.shutdown(timeout: .seconds(2))
    }
}

/// A batch built into two requests (the native upload and OTLP logs), one done and the
/// other in flight when the process is "killed" (its files copied as they are): the
/// next process sends only the one that was not done, the native one under its key. The
/// transport blocks one destination's request: a real collector cannot be made to
/// stall one request on cue.
@Suite(.serialized) struct BatchLegsAcrossAKillTests {
    final class Recorder: Transport, @unchecked Sendable {
        let lock = NSLock()
        var sent: [(destination: UploadDestination, key: String, body: [UInt8])] = []
        let blocking: UploadDestination?
        let gate = DispatchSemaphore(value: 0)
        let reached = DispatchSemaphore(value: 0)
        init(blocking: UploadDestination?) { self.blocking = blocking }
        func send(_ request: UploadRequest, attempt: Int, timeout: Duration) -> TransportResult {
            lock.lock()
            sent.append((request.destination, request.idempotencyKey, request.body))
            lock.unlock()
            if request.destination == blocking {
                reached.signal()
                gate.wait()
            }
            return .response(TransportResponse(status: 200))
        }
    }

    func options() -> UploaderOptions {
        var opts = UploaderOptions(url: "http://127.0.0.1:9/v1/batch", maxBatchEvents: 10, maxBatchAge: .milliseconds(10))
        opts.otlp = OTLPConfiguration(
            logs: .init(url: "http://127.0.0.1:9/v1/logs", headers: [], compression: .none, timeout: .seconds(5),
                        encoding: .protobuf),
            traces: nil, serviceName: nil, resourceAttributes: [])
        opts.breaker = CircuitBreaker(threshold: 1000)
        return opts
    }

    func run(blocking: UploadDestination) throws -> (a: Recorder, b: Recorder) {
        let scratch = try TemporaryDirectory("cairn-legs")
        let a = scratch.path + "/a", b = scratch.path + "/b"
        try FileManager.default.createDirectory(atPath: a, withIntermediateDirectories: true)
        let ring = try Ring(path: a + "/events.ring")
        let store = try SnapshotStore(directory: a + "/store")
        for r in OTLPTransportTests.records().prefix(5) { try ring.append(r) }
        let ta = Recorder(blocking: blocking)
        let up = Uploader(ring: ring, store: store, transport: ta, options: options())
        up.start()
        ta.reached.wait()
        // The other leg done and kept: then the process is "killed".
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline {
            if let bytes = try store.metadata(RingBatchLegs.metadataKey(slot: 0)), let legs = RingBatchLegs(bytes),
               legs.done != 0 { break }
            usleep(10_000)
        }
        try ring.sync()
        try store.sync()
        try FileManager.default.createDirectory(atPath: b, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: a + "/events.ring", toPath: b + "/events.ring")
        try BatchMarkTests().copyTree(a + "/store", b + "/store")
        let tb = Recorder(blocking: nil)
        let up2 = Uploader(ring: try Ring(path: b + "/events.ring"), store: try SnapshotStore(directory: b + "/store"),
                           transport: tb, options: options())
        up2.start()
        #expect(up2.flush(timeout: .seconds(5)))
        #expect(up2.stats.legsResumedDone == 1)
        up2.shutdown(timeout: .seconds(2))
        ta.gate.signal()
        up.shutdown(timeout: .seconds(2))
        return (ta, tb)
    }

    @Test func theNativeLegInFlightIsSentAloneUnderItsKey() throws {
        let (a, b) = try run(blocking: .native)
        let aNative = a.sent.filter { $0.destination == .native }
        #expect(a.sent.count == 2 && aNative.count == 1)
        #expect(b.sent.count == 1 && b.sent.first?.destination == .native, "\(b.sent.map(\.destination))")
        #expect(b.sent.first?.key == aNative.first?.key && b.sent.first?.body == aNative.first?.body,
                "the same request under the same key")
    }

    @Test func theOTLPLegInFlightIsSentAloneWithTheSameBytes() throws {
        let (a, b) = try run(blocking: .otlpLogs)
        let aLogs = a.sent.filter { $0.destination == .otlpLogs }
        #expect(a.sent.count == 2 && aLogs.count == 1)
        #expect(b.sent.count == 1 && b.sent.first?.destination == .otlpLogs, "the native request is not sent again")
        #expect(b.sent.first?.body == aLogs.first?.body, "rebuilt with the same bytes")
    }
}
