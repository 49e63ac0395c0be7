import CairnBase
import CairnProcessor
import CairnStore
import CairnTestSupport
@testable import CairnUploader
import Foundation
import Testing

/// Context once per run in the ring (docs/FORMATS.md, "Ring file", "Records"): events
/// go into the ring bare, after a context record, and leave the uploader exactly as the
/// processor encodes them whole; recovered events keep the context of the run that
/// tracked them, across processes and `kill -9`.
@Suite(.serialized) struct RingContextTests {
    /// A data directory, removed afterwards.
    final class Box {
        let path = URL(fileURLWithPath: NSTemporaryDirectory()).standardizedFileURL.path
            + "/cairn-ctx-\(getpid())-\(UUID().uuidString.prefix(8))"
        init() { try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true) }
        deinit { try? FileManager.default.removeItem(atPath: path) }
        func ring() throws -> Ring { try Ring(path: path + "/events.ring") }
        func store() throws -> SnapshotStore { try SnapshotStore(directory: path + "/store") }
    }

    static func processor(pid: Int32, host: String = "orders-7") -> Processor {
        var common = CommonProperties()
        common.appID = "orders"
        common.release = "orders@1.4.2"
        common.hostName = host
        common.osName = "Debian GNU/Linux"
        common.kernel = "6.1.0"
        common.arch = "x86_64"
        common.cpuCount = 2
        common.processName = "orders"
        common.pid = pid
        common.timeZone = "Europe/Berlin"
        return Processor(common: common)
    }

    /// Events of every shape the envelope has: a span, an account, a session, nested and
    /// escaped properties, none.
    static func events() -> [Event] {
        let span = SpanContext(traceID: TraceID(high: 0x4bf9_2f35_77b3_4da6, low: 0xa3ce_929d_0e0e_4736),
                               spanID: SpanID(value: 0x00f0_67aa_0ba9_02b7), parentSpanID: SpanID(value: 0x1234))
        return [
            Event(name: "checkout", properties: ["total": .double(12.5), "items": .array([.int(1), .string("a\"b\\c\n")])],
                  timeMillis: 1_796_236_564_254, identity: Identity(distinctID: "user-1", accountID: "acct-9"),
                  sessionID: "01a23801-af5e-78c6-85a8-2bec71befae7"),
            Event(name: "plain", timeMillis: 1_796_236_564_255, identity: Identity(distinctID: "user-2")),
            Event(type: .span, name: "db.query", properties: ["nested": .object(["deep": .object(["x": .null])])],
                  timeMillis: 1_796_236_564_256, identity: Identity(distinctID: "ü-3"), span: span),
        ]
    }

    static func options(_ collector: CollectorProcess, current: [UInt8]? = nil,
                        tap: (@Sendable ([[UInt8]]) -> Void)? = nil) -> UploaderOptions {
        var o = UploaderOptions(url: collector.baseURL + "/v1/batch", maxBatchEvents: 100,
                                maxBatchAge: .milliseconds(20), attempts: 1,
                                backoff: Backoff(base: .milliseconds(20), cap: .milliseconds(100)), tap: tap)
        if let current { o.currentContext = { current } }
        return o
    }

    /// The records every acknowledged request carried, in order.
    static func delivered(_ collector: CollectorProcess) throws -> [String] {
        try collector.requests().filter(\.acknowledged).flatMap { $0.records ?? [] }
    }

    final class Tapped: @unchecked Sendable {
        let records = Locked<[[UInt8]]>([])
    }

    /// The acceptance check of the format: what the collector (and a tap) receives for
    /// bare records is byte for byte what the processor's whole encoding gives, field
    /// order included; a record written whole (an older ring) goes as it is, with one
    /// context; context records are never sent.
    @Test func bareEventsLeaveExactlyAsTheWholeEncoding() throws {
        let collector = try CollectorProcess()
        let box = Box()
        let processor = Self.processor(pid: 4242)
        let ring = try box.ring()
        var expected: [String] = []
        // An event of an older ring, whole, before any context record.
        let old = processor.record(Self.events()[1], id: (1, 2))
        try ring.append(old)
        expected.append(String(decoding: old, as: UTF8.self))
        try ring.append(processor.contextFragment, kind: .context)
        for (n, e) in Self.events().enumerated() {
            let id: (UInt64, UInt64) = (UInt64(100 + n), UInt64(7 * n + 1))
            let bare = JSONWriter.bytes { processor.encode(e, id: id, into: &$0, context: false) }
            #expect(bare.count + processor.contextFragment.count + 1 == processor.record(e, id: id).count)
            try ring.append(bare, kind: .bare)
            expected.append(String(decoding: processor.record(e, id: id), as: UTF8.self))
        }
        let tapped = Tapped()
        let uploader = Uploader(ring: ring, store: try box.store(), transport: HTTPTransport(),
                                options: Self.options(collector, tap: { r in tapped.records.withLock { $0 += r } }))
        uploader.start()
        #expect(uploader.flush(timeout: .seconds(20)))
        uploader.shutdown(timeout: .seconds(5))
        #expect(try Self.delivered(collector) == expected)
        #expect(tapped.records.withLock { $0 }.map { String(decoding: $0, as: UTF8.self) } == expected)
        #expect(uploader.stats.deliveredEvents == expected.count)
        #expect(ring.stats().used == 0)
    }

    /// The collector is down: the stored snapshot holds whole events too.
    @Test func storedSnapshotsHoldWholeEvents() throws {
        let collector = try CollectorProcess()
        try collector.setDefault(["status": 500])
        let box = Box()
        let processor = Self.processor(pid: 77)
        let ring = try box.ring()
        let store = try box.store()
        try ring.append(processor.contextFragment, kind: .context)
        let e = Self.events()[0]
        try ring.append(JSONWriter.bytes { processor.encode(e, id: (5, 6), into: &$0, context: false) }, kind: .bare)
        let uploader = Uploader(ring: ring, store: store, transport: HTTPTransport(), options: Self.options(collector))
        uploader.start()
        #expect(uploader.flush(timeout: .seconds(20)))
        uploader.shutdown(timeout: .seconds(5))
        let snapshot = try #require(try store.oldest(limit: 1).first)
        let records = try FrameDecoder(maxContentSize: 1 << 20).decodeRecords(try #require(UploadRequest(record: snapshot.record)).body).records
        #expect(records == [processor.record(e, id: (5, 6))])
    }

    /// How the next process finds the ring: the uploader of the first released the
    /// context record along with the first events; more bare events wait behind it.
    static func leaveBareEventsBehindTheirContext(_ box: Box, _ collector: CollectorProcess,
                                                  _ first: Processor) throws -> [String] {
        let ring = try box.ring()
        let store = try box.store()
        try ring.append(first.contextFragment, kind: .context)
        for i in 0..<3 {
            try ring.append(JSONWriter.bytes { first.encode(Self.event(i), id: (1, UInt64(i)), into: &$0, context: false) },
                            kind: .bare)
        }
        let uploader = Uploader(ring: ring, store: store, transport: HTTPTransport(), options: Self.options(collector))
        uploader.start()
        #expect(uploader.flush(timeout: .seconds(20)))
        uploader.shutdown(timeout: .seconds(5))
        #expect(ring.stats().used == 0, "the context record was released")
        var later: [String] = []
        for i in 3..<6 {
            try ring.append(JSONWriter.bytes { first.encode(Self.event(i), id: (1, UInt64(i)), into: &$0, context: false) },
                            kind: .bare)
            later.append(String(decoding: first.record(Self.event(i), id: (1, UInt64(i))), as: UTF8.self))
        }
        return later
    }

    static func event(_ i: Int) -> Event {
        Event(name: "e", properties: ["i": .int(Int64(i))], timeMillis: 1_796_236_564_000 + UInt64(i),
              identity: Identity(distinctID: "u"))
    }

    /// The next uploader (another ring and store handle, as a new process has) sends
    /// those events with the first run's context, kept in the store's `ring_context`.
    @Test func theNextUploaderRestoresTheContextFromTheStore() throws {
        let collector = try CollectorProcess()
        let box = Box()
        let later = try Self.leaveBareEventsBehindTheirContext(box, collector, Self.processor(pid: 1001))
        try collector.reset()
        let second = Self.processor(pid: 2002)
        let ring = try box.ring()
        try ring.append(second.contextFragment, kind: .context)
        try ring.append(JSONWriter.bytes { second.encode(Self.event(9), id: (2, 9), into: &$0, context: false) }, kind: .bare)
        let uploader = Uploader(ring: ring, store: try box.store(), transport: HTTPTransport(),
                                options: Self.options(collector, current: second.contextFragment))
        uploader.start()
        #expect(uploader.flush(timeout: .seconds(20)))
        uploader.shutdown(timeout: .seconds(5))
        #expect(try Self.delivered(collector)
                == later + [String(decoding: second.record(Self.event(9), id: (2, 9)), as: UTF8.self)])
    }

    /// Without the store's value (no store, the store removed, the value damaged or of
    /// another ring), those events get this process's context, marked, and nothing is
    /// dropped or sent twice.
    @Test(arguments: ["no store", "store removed", "value damaged", "other ring"])
    func lostContextFallsBackToThisProcessMarked(_ how: String) throws {
        let collector = try CollectorProcess()
        let box = Box()
        let later = try Self.leaveBareEventsBehindTheirContext(box, collector, Self.processor(pid: 1001))
        try collector.reset()
        switch how {
        case "store removed":
            try FileManager.default.removeItem(atPath: box.path + "/store")
        case "value damaged":
            let store = try box.store()
            var value = try #require(try store.metadata(RingContextMark.metadataKey))
            value[value.count - 1] ^= 0x7F  // the fragment no longer ends its object
            try store.setMetadata(RingContextMark.metadataKey, value)
        case "other ring":
            let store = try box.store()
            var mark = try #require(try store.metadata(RingContextMark.metadataKey).flatMap(RingContextMark.init))
            mark.ringID ^= 2
            try store.setMetadata(RingContextMark.metadataKey, mark.encoded())
        default:
            break
        }
        let second = Self.processor(pid: 2002)
        let ring = try box.ring()
        let uploader = Uploader(ring: ring, store: how == "no store" ? nil : try box.store(), transport: HTTPTransport(),
                                options: Self.options(collector, current: second.contextFragment))
        uploader.start()
        #expect(uploader.flush(timeout: .seconds(20)))
        uploader.shutdown(timeout: .seconds(5))
        let marked = Array(second.contextFragment.dropLast()) + Array(#","context_recovered":false}"#.utf8)
        let expected = (3..<6).map { i in
            String(decoding: JSONWriter.bytes { second.encode(Self.event(i), id: (1, UInt64(i)), into: &$0, context: false) }
                .dropLast() + Array(",".utf8) + marked + Array("}".utf8), as: UTF8.self)
        }
        #expect(later.count == expected.count)
        #expect(try Self.delivered(collector) == expected)
        for record in expected {
            let object = try #require(try JSONSerialization.jsonObject(with: Data(record.utf8)) as? [String: Any])
            #expect(((object["context"] as? [String: Any])?["process"] as? [String: Any])?["pid"] as? Int == 2002)
            #expect((object["sdk"] as? [String: Any])?["context_recovered"] as? Bool == false)
        }
    }

    @Test func contextMarksAreCheckedBeforeUse() {
        let fragment = Array(#""context":{"a":1},"sdk":{"name":"cairn-swift","version":"0.1.0"}"#.utf8)
        let mark = RingContextMark(ringID: 9, upto: 480, entries: [.init(position: 16, fragment: fragment),
                                                                   .init(position: 160, fragment: [])])
        let bytes = mark.encoded()
        #expect(RingContextMark(bytes) == mark)
        for cut in [0, 1, 8, 24, bytes.count - 1] { #expect(RingContextMark(Array(bytes.prefix(cut))) == nil) }
        #expect(RingContextMark(bytes + [0]) == nil, "bytes after the last entry")
        var version = bytes
        version[0] = 2
        #expect(RingContextMark(version) == nil)
        // Entries out of order, at or past `upto`, or not fragments.
        #expect(RingContextMark(RingContextMark(ringID: 9, upto: 480, entries: [.init(position: 160, fragment: fragment),
                                                                                .init(position: 16, fragment: fragment)])
                                    .encoded()) == nil)
        #expect(RingContextMark(RingContextMark(ringID: 9, upto: 16, entries: [.init(position: 16, fragment: fragment)])
                                    .encoded()) == nil)
        #expect(RingContextMark(RingContextMark(ringID: 9, upto: 480, entries: [.init(position: 16,
                                                                                      fragment: Array("{}".utf8))])
                                    .encoded()) == nil)
        var huge = bytes
        huge[4] = 0xFF
        huge[5] = 0xFF
        huge[6] = 0xFF
        #expect(RingContextMark(huge) == nil, "an entry count no value can hold")
    }

    // MARK: In real processes

    /// A service tracks events; its uploader releases the first ones (and its context
    /// records); more wait in the ring when it is killed (`kill -9`). The next process,
    /// another pid, delivers them with the killed process's `context.process.pid`, and
    /// its own with its own.
    @Test func killedRunsEventsKeepTheirPid() throws {
        let collector = try CollectorProcess()
        let dir = try ServiceProcessTests.DataDir()
        let env = ["CAIRN_APP_ID": "orders", "CAIRN_DISTINCT_ID": "host-7", "CAIRN_DATA_DIR": dir.path,
                   "CAIRN_UPLOAD_URL": collector.baseURL + "/v1/batch"]
        let killed = try LifecycleTests.Running(["serve", "4"], env: env.merging([
            "CAIRN_TEST_FLUSH_MS": "15000", "CAIRN_TEST_MORE": "6", "CAIRN_BATCH_AGE_MS": "600000",
        ]) { $1 })
        #expect(killed.waitUntilReady())
        let killedPid = Int(killed.pid)
        killed.signal(SIGKILL)
        _ = killed.wait()

        let next = try runToEnd(productsDirectory + "/cairn-service-child", ["run", "3"],
                                environment: ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("CAIRN_") }
                                    .merging(env.merging(["CAIRN_BATCH_AGE_MS": "20",
                                                          "CAIRN_TEST_EVENT_NAME": "next_event"]) { $1 }) { $1 })
        let nextPid = Int(next.pid)
        #expect(next.status == 0 && !next.signaled, "\(next.err)")
        #expect(killedPid != nextPid)

        let received = try LifecycleTests.received(collector)
        func pids(_ name: String) -> [Int: Int] {
            var out: [Int: Int] = [:]
            for e in received where e["name"] as? String == name {
                guard let i = (e["properties"] as? [String: Any])?["i"] as? Int else { continue }
                out[i] = ((e["context"] as? [String: Any])?["process"] as? [String: Any])?["pid"] as? Int ?? -1
                #expect((e["sdk"] as? [String: Any])?["context_recovered"] == nil)
            }
            return out
        }
        #expect(pids("child_event") == Dictionary(uniqueKeysWithValues: (0..<10).map { ($0, killedPid) }),
                "the killed run's events, each once, with its pid")
        #expect(pids("next_event") == Dictionary(uniqueKeysWithValues: (0..<3).map { ($0, nextPid) }))
    }

    /// The same with the snapshot store lost after the kill: the killed run's events still
    /// arrive, once each, with the next process's context, marked.
    @Test func killedRunsEventsWithoutTheStoreAreMarked() throws {
        let collector = try CollectorProcess()
        let dir = try ServiceProcessTests.DataDir()
        let env = ["CAIRN_APP_ID": "orders", "CAIRN_DISTINCT_ID": "host-7", "CAIRN_DATA_DIR": dir.path,
                   "CAIRN_UPLOAD_URL": collector.baseURL + "/v1/batch"]
        let killed = try LifecycleTests.Running(["serve", "2"], env: env.merging([
            "CAIRN_TEST_FLUSH_MS": "15000", "CAIRN_TEST_MORE": "5", "CAIRN_BATCH_AGE_MS": "600000",
        ]) { $1 })
        #expect(killed.waitUntilReady())
        killed.signal(SIGKILL)
        _ = killed.wait()
        try FileManager.default.removeItem(atPath: dir.path + "/store")

        let next = try ServiceProcessTests.child(["run", "0"], env: env.merging(["CAIRN_BATCH_AGE_MS": "20"]) { $1 })
        #expect(next.status == 0, "\(next.err)")
        let received = try LifecycleTests.received(collector).filter { $0["name"] as? String == "child_event" }
        let late = received.filter { (($0["properties"] as? [String: Any])?["i"] as? Int ?? 0) >= 2 }
        #expect(late.count == 5)
        for e in late {
            #expect((e["sdk"] as? [String: Any])?["context_recovered"] as? Bool == false)
            #expect((e["context"] as? [String: Any])?["app"] != nil, "this process's context, not an empty one")
        }
    }
}
