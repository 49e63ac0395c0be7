import CairnTestSupport
import CairnStore
import Foundation
import Testing

/// The Swift `Ring` wrapper: typed errors, reservations, runs, stats, repairs and the
/// drop table.
@Suite struct RingTests {

    @Test func appendPeekCommitAndStats() throws {
        let dir = Scratch()
        let ring = try Ring(path: dir.path + "/events.ring")
        for i in 0..<10 { try ring.append(Array("event \(i)".utf8)) }
        let run = try ring.peek(maxRecords: 4, maxBytes: 1 << 20)
        #expect(run.records.map { String(decoding: $0.bytes, as: UTF8.self) } == (0..<4).map { "event \($0)" })
        let second = try ring.peek(from: run.next, maxRecords: 100, maxBytes: 1 << 20)
        #expect(second.records.count == 6)
        try ring.commit(upTo: second.next)
        #expect(try ring.peek(maxRecords: 10, maxBytes: 100).records.isEmpty)
        // Asking for more records than a ring can hold is not an error (nor a trap).
        #expect(try ring.peek(maxRecords: Int.max, maxBytes: Int.max).records.isEmpty)
        let stats = ring.stats()
        #expect(stats.appended == 10 && stats.used == 0 && stats.origin == .created)
        #expect(stats.capacity == 1 << 20 && stats.maxRecord == 1 << 18)
    }

    /// Runs longer than the peek's internal chunk end exactly where the limits say: the
    /// record and byte limits across chunk boundaries, and a record that would pass the
    /// byte limit is left for the next run (only a run's first record may exceed it).
    @Test func longRunsKeepBothLimits() throws {
        let dir = Scratch()
        let ring = try Ring(path: dir.path + "/events.ring")
        let records = (0..<1500).map { i in Array("r\(i)-".utf8) + [UInt8](repeating: 0x61, count: i % 37) }
        for r in records { try ring.append(r) }
        func payload(_ range: Range<Int>) -> Int { records[range].reduce(0) { $0 + $1.count } }
        for maxRecords in [1, 255, 256, 257, 700, 1500, 5000] {
            let run = try ring.peek(maxRecords: maxRecords, maxBytes: 1 << 30)
            #expect(run.records.map { Array($0.bytes) } == Array(records.prefix(maxRecords)), "maxRecords \(maxRecords)")
        }
        for count in [1, 255, 256, 257, 300, 513, 1499] {
            // A byte limit that ends exactly after `count` records, and one a byte short.
            for (limit, expected) in [(payload(0..<count), count), (payload(0..<count) - 1, count - 1)] {
                let run = try ring.peek(maxRecords: 5000, maxBytes: limit)
                let want = max(expected, 1)
                #expect(run.records.count == want, "maxBytes \(limit)")
                let rest = try ring.peek(from: run.next, maxRecords: 1, maxBytes: 1 << 20)
                #expect(rest.records.first.map { Array($0.bytes) } == records[want], "the run ends before record \(want)")
            }
        }
        // One record larger than the limit comes alone.
        #expect(try ring.peek(maxRecords: 10, maxBytes: 1).records.count == 1)
    }

    @Test func pagesOfRecordsInFlightLeaveMemoryAndComeBack() throws {
        let dir = Scratch()
        let path = dir.path + "/events.ring"
        let ring = try Ring(path: path)
        let records = (0..<2000).map { i in Array("record \(i) ".utf8) + [UInt8](repeating: UInt8(ascii: "x"), count: 200) }
        for r in records { try ring.append(r) }
        let run = try ring.peek(maxRecords: 2000, maxBytes: 1 << 20)
        let before = try #require(residentKB(ofMapping: path))
        try ring.releasePages(from: ring.readPosition, to: run.next)
        let after = try #require(residentKB(ofMapping: path))
        #expect(after + 300 < before, "about 440 KiB of records left memory: \(before) KiB -> \(after) KiB")
        // Nothing was consumed, and the records read back intact from the file.
        let again = try ring.peek(maxRecords: 2000, maxBytes: 1 << 20)
        #expect(again.records.map { Array($0.bytes) } == records)
        #expect(ring.stats().used > 0)
        // Only what a peek has reached, from the read cursor on.
        #expect(throws: CairnError(CairnError.invalid, function: "cairn_ring_release_pages")) {
            try ring.releasePages(from: ring.readPosition, to: run.next + 4096)
        }
        #expect(throws: CairnError(CairnError.invalid, function: "cairn_ring_release_pages")) {
            try ring.releasePages(from: run.next, to: ring.readPosition)
        }
        try ring.commit(upTo: again.next)
        #expect(ring.stats().used == 0)
    }

    /// A backlog not yet read leaves memory but for the pages near the two cursors, while
    /// a producer thread goes on writing; every record then reads back intact.
    @Test func aBacklogWaitsInTheFileNotInMemory() throws {
        let dir = Scratch()
        let path = dir.path + "/events.ring"
        let ring = try Ring(path: path, options: .init(capacity: 4 << 20))
        let records = (0..<12_000).map { i in Array("record \(i) ".utf8) + [UInt8](repeating: UInt8(ascii: "x"), count: 200) }
        for r in records.prefix(8000) { try ring.append(r) }
        // What a consumer has read so far: the first 100 records.
        let first = try ring.peek(maxRecords: 100, maxBytes: 1 << 20)
        let before = try #require(residentKB(ofMapping: path))
        // A producer writes the rest meanwhile.
        let producer = Thread { for r in records.suffix(4000) { try? ring.append(r) } }
        producer.start()
        try ring.releaseBacklog(keeping: 64 * 1024)
        while !producer.isFinished { usleep(1000) }
        try ring.releaseBacklog(keeping: 64 * 1024)
        let after = try #require(residentKB(ofMapping: path))
        // About 1.7 MiB of backlog was mapped; about 2 x 64 KiB of it stays (and up to a
        // few pages more at the edges).
        #expect(before > 1500 && after < 400, "\(before) KiB -> \(after) KiB")
        // Nothing was consumed, and every record reads back intact, in order.
        let again = try ring.peek(maxRecords: 20_000, maxBytes: 1 << 30)
        #expect(again.records.map { Array($0.bytes) } == records)
        #expect(first.records.count == 100 && ring.stats().appended == 12_000)
        // A small backlog is left as it is.
        try ring.commit(upTo: again.next)
        try ring.append(records[0])
        let small = try #require(residentKB(ofMapping: path))
        try ring.releaseBacklog(keeping: 64 * 1024)
        #expect(try #require(residentKB(ofMapping: path)) == small)
    }

    @Test func errorsAreTypedAndCarryTheCoreMessage() throws {
        let dir = Scratch()
        let ring = try Ring(path: dir.path + "/r", options: .init(capacity: 1 << 16, maxRecord: 100))
        #expect(throws: CairnError(CairnError.tooBig, function: "cairn_ring_append")) {
            try ring.append([UInt8](repeating: 0, count: 101))
        }
        do {
            _ = try Ring(path: dir.path + "/r")
            Issue.record("a second open of the same file must fail")
        } catch {
            #expect(error.code == CairnError.locked)
            #expect(error.description == "cairn_ring_open: ring file is owned by another handle (-4)")
        }
        #expect(throws: CairnError.self) { try Ring(path: dir.path + "/no/such/dir/r") }
        #expect(throws: CairnError.self) { try Ring(path: dir.path + "/x", options: .init(capacity: 10)) }
        #expect(throws: CairnError.self) { try ring.commit(upTo: 12345) }
        var filled = 0
        while true {
            do { try ring.append([UInt8](repeating: 1, count: 100)) } catch { #expect(error.code == CairnError.full); break }
            filled += 1
        }
        #expect(ring.stats().droppedFull == 1 && ring.stats().droppedTooBig == 1 && filled > 0)
    }

    @Test func reservationsWriteInPlace() throws {
        let dir = Scratch()
        let ring = try Ring(path: dir.path + "/r")
        let published = try ring.withReservation(capacity: 64) { buf in
            let text = Array(#"{"encoded":"in place"}"#.utf8)
            buf.copyBytes(from: text)
            return text.count
        }
        #expect(published)
        let abandoned = try ring.withReservation(capacity: 64) { _ in nil }
        #expect(!abandoned)
        #expect(throws: CairnError.self) { try ring.withReservation(capacity: 8) { $0.count + 1 } }
        let run = try ring.peek(maxRecords: 10, maxBytes: 1 << 20)
        #expect(run.records.map { String(decoding: $0.bytes, as: UTF8.self) } == [#"{"encoded":"in place"}"#])
        #expect(ring.stats().appended == 1)
    }

    @Test func reopenRecoversAndReportsOrigin() throws {
        let dir = Scratch()
        let path = dir.path + "/r"
        do {
            let ring = try Ring(path: path)
            for i in 0..<5 { try ring.append(Array("kept \(i)".utf8)) }
            try ring.sync()
        }
        let ring = try Ring(path: path)
        #expect(ring.stats().origin == .reopened && ring.stats().recovered == 5)
        #expect(try ring.peek(maxRecords: 10, maxBytes: 1 << 20).records.count == 5)
        // A file that is not a ring is set aside, and the wrapper says so.
        let other = dir.path + "/garbage"
        _ = FileManager.default.createFile(atPath: other, contents: Data(repeating: 0x5A, count: 70_000))
        #expect(try Ring(path: other).stats().origin == .setAside)
    }

    /// The pipeline's first half: records appended to the ring, read as a run, framed in
    /// place, decoded back to exactly those records, then released.
    @Test func runsAreFramedInPlaceAndDecodeToTheSameRecords() throws {
        let dir = Scratch()
        let ring = try Ring(path: dir.path + "/r")
        let events = (0..<300).map { Array(#"{"name":"e\#($0)","n":\#($0)}"#.utf8) }
        for e in events { try ring.append(e) }
        let encoder = try FrameEncoder()
        let decoder = try FrameDecoder(maxContentSize: 1 << 20)
        var received: [[UInt8]] = []
        var batchID: UInt64 = 0
        while true {
            let run = try ring.peek(maxRecords: 128, maxBytes: 4096)
            if run.records.isEmpty { break }
            batchID += 1
            let batch = try encoder.encode(batchID: batchID, run: run)
            let (info, body) = try decoder.decode(batch)
            #expect(info.batchID == batchID && Int(info.recordCount) == run.records.count)
            received += FrameDecoder.records(in: body)
            try ring.commit(upTo: run.next)
        }
        #expect(received == events)
        #expect(batchID > 2, "maxBytes must split the records into several batches")
        #expect(throws: CairnError(CairnError.invalid, function: "cairn_frame_encode")) {
            try encoder.encode(batchID: 0, run: try ring.peek(maxRecords: 1, maxBytes: 1))
        }
    }

    @Test func concurrentAppendsFromTasks() async throws {
        let dir = Scratch()
        let ring = try Ring(path: dir.path + "/r", options: .init(capacity: 4 << 20))
        await withTaskGroup(of: Void.self) { group in
            for t in 0..<4 {
                group.addTask {
                    for i in 0..<2000 { try? ring.append(Array("\(t):\(i)".utf8)) }
                }
            }
        }
        var perTask = [[Int]](repeating: [], count: 4)
        let run = try ring.peek(maxRecords: 10_000, maxBytes: Int.max)
        for r in run.records {
            let parts = String(decoding: r.bytes, as: UTF8.self).split(separator: ":").compactMap { Int($0) }
            perTask[parts[0]].append(parts[1])
        }
        #expect(perTask.allSatisfy { $0 == Array(0..<2000) })
    }

    @Test func aRepairedRingSaysWhatWasRepaired() throws {
        let dir = Scratch()
        let path = dir.path + "/r"
        do {
            let ring = try Ring(path: path, options: .init(capacity: 1 << 16))
            for i in 0..<50 { try ring.append(Array("kept \(i)".utf8)) }
        }
        // The header's checksummed part lost (zeros): magic, sizes, salt, checksum.
        let handle = try #require(FileHandle(forUpdatingAtPath: path))
        try handle.seek(toOffset: 0)
        try handle.write(contentsOf: Data(count: 40))
        try handle.close()

        let ring = try Ring(path: path)
        let stats = ring.stats()
        #expect(stats.origin == .repaired)
        #expect(stats.repairs.isSuperset(of: [.magic, .version, .headerSize, .capacity, .salt, .headerChecksum]))
        #expect(!stats.repairs.contains(.windowInferred), "the cursors were intact")
        #expect(stats.repairedFields == 6 && stats.recovered == 50 && ring.capacity == 1 << 16)
        let run = try ring.peek(maxRecords: 100, maxBytes: 1 << 20)
        #expect(run.records.map { String(decoding: $0.bytes, as: UTF8.self) } == (0..<50).map { "kept \($0)" })
    }

    @Test func dropCountsPersistAndAreMarkedReported() throws {
        let dir = Scratch()
        let path = dir.path + "/r"
        do {
            let ring = try Ring(path: path)
            let sampled = try #require(ring.dropSlot("sampled"))
            #expect((ring.dropSlot("sampled") ?? -1) == sampled)
            for bad in ["", "Sampled", "sampled!", String(repeating: "s", count: Ring.maxDropReasonLength + 1)] {
                #expect(ring.dropSlot(bad) == nil, "\(bad)")
            }
            for _ in 0..<10 { ring.countDrops(slot: sampled) }
            #expect(ring.countDrops(slot: sampled, 5))
            #expect(!ring.countDrops(slot: 40), "an unclaimed slot")
            #expect(ring.drops() == [Ring.Drop(slot: sampled, reason: "sampled", counted: 15, reported: 0)])
            try ring.markReported(slot: sampled, upTo: 12)
            #expect(throws: CairnError(CairnError.invalid, function: "cairn_ring_mark_reported")) {
                try ring.markReported(slot: sampled, upTo: 16)
            }
            #expect((ring.dropSlot("other") ?? -1) == Ring.otherDropSlot)
        }
        let ring = try Ring(path: path)
        let sampled = ring.drops().first { $0.reason == "sampled" }
        #expect(sampled?.counted == 15 && sampled?.reported == 12 && sampled?.unreported == 3)
        #expect(ring.drops().map(\.reason) == ["sampled", "other"])
    }

    @Test func dropsCountedFromManyTasksAddUp() async throws {
        let dir = Scratch()
        let ring = try Ring(path: dir.path + "/r")
        await withTaskGroup(of: Void.self) { group in
            for t in 0..<4 {
                group.addTask {
                    guard let mine = ring.dropSlot("task_\(t)"), let all = ring.dropSlot("all") else { return }
                    for _ in 0..<5000 {
                        ring.countDrops(slot: mine)
                        ring.countDrops(slot: all)
                    }
                }
            }
        }
        let counted = Dictionary(uniqueKeysWithValues: ring.drops().map { ($0.reason, $0.counted) })
        #expect(counted == ["task_0": 5000, "task_1": 5000, "task_2": 5000, "task_3": 5000, "all": 20_000])
    }
}
