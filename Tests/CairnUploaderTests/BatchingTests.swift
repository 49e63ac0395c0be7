import CairnBase
import CairnTestSupport
import CairnStore
import CairnUploader
import Foundation
import Testing

/// How batches form under load, against the real collector: a full batch goes at once
/// (the ring's fill alarm wakes the worker) rather than at its age, and batches grow
/// while records wait behind them.
@Suite(.serialized) struct BatchingTests {
    static func event(_ i: Int) -> [UInt8] { Array(#"{"event_id":"b-\#(i)","n":\#(i)}"#.utf8) }

    @Test func theFillAlarmGoesOffOnceWhereItWasSet() throws {
        let box = try UploaderTests.Sandbox()
        let ring = try box.ring()
        let rings = Locked(0)
        ring.onFillAlarm { rings.withLock { $0 += 1 } }
        try ring.append(Self.event(0))  // not armed: nothing happens
        let start = ring.readPosition + ring.stats().used
        #expect(ring.armFillAlarm(at: start + 60))
        try ring.append(Self.event(1))  // a 48-byte record: short of the alarm
        #expect(rings.withLock { $0 } == 0)
        _ = try ring.withReservation(capacity: 200) { buf in
            let e = Self.event(2)
            for (k, c) in e.enumerated() { buf[k] = c }
            return e.count
        }
        #expect(rings.withLock { $0 } == 1, "the append that reached the position set it off")
        try ring.append(Self.event(3))
        #expect(rings.withLock { $0 } == 1, "once")
        #expect(!ring.armFillAlarm(at: start), "a position already reached does not arm it")
        try ring.append(Self.event(4))
        #expect(rings.withLock { $0 } == 1)
    }

    @Test func aFullBatchGoesWithoutWaitingForItsAge() throws {
        let collector = try CollectorProcess()
        let box = try UploaderTests.Sandbox()
        let ring = try box.ring()
        // A batch age no test would wait for: only a full batch can go.
        let options = UploaderOptions(url: collector.baseURL + "/v1/batch", maxBatchEvents: 5,
                                      maxBatchAge: .seconds(3600))
        let uploader = Uploader(ring: ring, store: try box.store(), transport: HTTPTransport(),
                                options: options)
        uploader.start()
        usleep(100_000)  // the worker is asleep on an empty ring
        for i in 0..<5 { try ring.append(Self.event(i)) }
        #expect(try eventually(30) { try collector.events().count == 5 }, "a full batch is sent at once")
        // Three more do not make a batch: they wait for their age (or a flush).
        for i in 5..<8 { try ring.append(Self.event(i)) }
        usleep(300_000)
        #expect(try collector.events().count == 5)
        #expect(uploader.flush(timeout: .seconds(10)))
        #expect(try collector.events().count == 8)
        uploader.shutdown(timeout: .seconds(5))
    }

    @Test func batchesGrowWhileRecordsWaitBehindThem() throws {
        let collector = try CollectorProcess()
        try collector.setDefault(["status": 200, "stall": 0.1])  // a collector far away
        let box = try UploaderTests.Sandbox()
        let ring = try box.ring()
        let options = UploaderOptions(url: collector.baseURL + "/v1/batch", maxBatchEvents: 10,
                                      maxBatchAge: .milliseconds(20))
        let uploader = Uploader(ring: ring, store: try box.store(), transport: HTTPTransport(),
                                options: options)
        for i in 0..<1500 { try ring.append(Self.event(i)) }
        uploader.start()
        #expect(eventually(60) { uploader.stats.deliveredEvents == 1500 })
        let sizes = try collector.requests().compactMap { $0.batch?.record_count }
        // Several requests go out at once: the collector may record them in any order.
        #expect(sizes.contains(10), "the first batch has the options' size: \(sizes)")
        #expect(sizes.contains { $0 > 10 }, "batches grew: \(sizes)")
        #expect(sizes.allSatisfy { $0 <= 10 * Uploader.maxBatchScale }, "and stayed within their cap: \(sizes)")
        #expect(sizes.reduce(0, +) == 1500)
        uploader.shutdown(timeout: .seconds(5))
    }
}
