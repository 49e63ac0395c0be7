import CairnTestSupport
import CCairnCore
import Foundation
import Testing

/// The ring buffer's C API, exercised directly: ordering, wrap-around, limits,
/// reservations, locking and reopening.
@Suite struct RingCoreTests {
    @Test func appendPeekCommitAcrossManyWrapArounds() throws {
        let dir = TempDir()
        let ring = try CRing(dir.file("r"))
        var rng = SplitMix(seed: 1)
        var expected: [[UInt8]] = []
        var seen: [[UInt8]] = []
        var seq = 0, bytesWritten: UInt64 = 0
        // 64 KiB ring, ~2.5 MB written: about 40 laps with every alignment of the lap end.
        for _ in 0..<400 {
            let burst = Int.random(in: 1...60, using: &rng)
            for _ in 0..<burst {
                let len = Int.random(in: 0...400, using: &rng)
                let rec = Array("\(seq):".utf8) + (0..<len).map { UInt8(truncatingIfNeeded: $0 &+ seq) }
                let rc = ring.append(rec)
                if rc == CAIRN_EFULL { break }
                #expect(rc == 0)
                expected.append(rec)
                bytesWritten += UInt64((16 + rec.count + 15) / 16 * 16)
                seq += 1
            }
            seen += ring.drain(batch: Int.random(in: 1...100, using: &rng))
        }
        seen += ring.drain()
        #expect(seen.count == expected.count)
        #expect(seen == expected)
        let s = ring.stats
        #expect(s.appended == UInt64(expected.count))
        #expect(s.used == 0)
        #expect(bytesWritten > 30 * s.capacity, "the test must wrap many times")
    }

    @Test func peekDoesNotConsumeAndContinuesFromNext() throws {
        let dir = TempDir()
        let ring = try CRing(dir.file("r"))
        for i in 0..<10 { ring.append("event-\(i)") }
        var recs = [cairn_ring_record_t](repeating: cairn_ring_record_t(), count: 4)
        var next1: UInt64 = 0, next2: UInt64 = 0
        let start = cairn_ring_read_pos(ring.handle)
        let n1 = cairn_ring_peek(ring.handle, start, &recs, 4, Int.max, &next1)
        #expect(n1 == 4)
        // Peeking again from the read cursor returns the same records.
        let again = cairn_ring_peek(ring.handle, start, &recs, 4, Int.max, &next2)
        #expect(again == 4 && next2 == next1)
        // The next run starts after the first, before anything is committed.
        let n2 = cairn_ring_peek(ring.handle, next1, &recs, 4, Int.max, &next2)
        #expect(n2 == 4)
        #expect(String(decoding: UnsafeRawBufferPointer(start: recs[0].data, count: Int(recs[0].len)), as: UTF8.self) == "event-4")
        #expect(cairn_ring_commit(ring.handle, next2) == 0)
        #expect(ring.drain().map { String(decoding: $0, as: UTF8.self) } == ["event-8", "event-9"])
        // Committing behind the cursor or beyond what was peeked is refused.
        #expect(cairn_ring_commit(ring.handle, start) == CAIRN_EINVAL)
        #expect(cairn_ring_commit(ring.handle, cairn_ring_read_pos(ring.handle) + 4096) == CAIRN_EINVAL)
        #expect(cairn_ring_peek(ring.handle, start, &recs, 4, Int.max, &next1) == CAIRN_EINVAL)
        // Positions inside a record are not boundaries: refused, so a consumer can
        // never commit half a record and lose its place.
        for i in 0..<4 { ring.append("more-\(i)-\(String(repeating: "m", count: 40))") }
        let here = cairn_ring_read_pos(ring.handle)
        #expect(cairn_ring_peek(ring.handle, here, &recs, 4, Int.max, &next1) == 4)
        #expect(cairn_ring_peek(ring.handle, here + 16, &recs, 4, Int.max, &next2) == CAIRN_EINVAL)
        #expect(cairn_ring_commit(ring.handle, here + 32) == CAIRN_EINVAL)
        #expect(cairn_ring_commit(ring.handle, recs[1].pos) == 0, "a record's start is a boundary")
        #expect(ring.drain().count == 3)
    }

    @Test func maxBytesLimitsARunButAlwaysReturnsOneRecord() throws {
        let dir = TempDir()
        let ring = try CRing(dir.file("r"))
        ring.append([UInt8](repeating: 1, count: 1000))
        ring.append([UInt8](repeating: 2, count: 10))
        var recs = [cairn_ring_record_t](repeating: cairn_ring_record_t(), count: 8)
        var next: UInt64 = 0
        #expect(cairn_ring_peek(ring.handle, cairn_ring_read_pos(ring.handle), &recs, 8, 100, &next) == 1)
        #expect(recs[0].len == 1000)
        #expect(cairn_ring_peek(ring.handle, next, &recs, 8, 100, &next) == 1)
        #expect(recs[0].len == 10)
    }

    @Test func fullRingRefusesAtOnceCountsAndRecovers() throws {
        let dir = TempDir()
        let ring = try CRing(dir.file("r"))
        let rec = [UInt8](repeating: 0x61, count: 200)
        var accepted = 0
        while ring.append(rec) == 0 { accepted += 1 }
        #expect(ring.append(rec) == CAIRN_EFULL)
        var s = ring.stats
        #expect(s.dropped_full == 2)
        #expect(s.appended == UInt64(accepted))
        #expect(accepted == Int(s.capacity) / 224, "200-byte records take 224 bytes each")
        #expect(s.high_water <= s.capacity && s.high_water > s.capacity - 224)
        // Nothing accepted was overwritten, and draining makes room again.
        #expect(ring.drain().count == accepted)
        #expect(ring.append(rec) == 0)
        s = ring.stats
        #expect(s.dropped_full == 2)
    }

    @Test func oversizeRecordIsRefusedAndCounted() throws {
        let dir = TempDir()
        let ring = try CRing(dir.file("r"), maxRecord: 1000)
        #expect(ring.append([UInt8](repeating: 0, count: 1001)) == CAIRN_ETOOBIG)
        #expect(ring.append([UInt8](repeating: 0, count: 1000)) == 0)
        let s = ring.stats
        #expect(s.dropped_too_big == 1 && s.appended == 1 && s.max_record == 1000)
        // The limit can never exceed a quarter of the capacity.
        let big = try CRing(dir.file("big"), maxRecord: 1 << 30)
        #expect(big.stats.max_record == CAIRN_RING_MIN_CAPACITY / 4)
        #expect(big.append([UInt8](repeating: 0, count: Int(CAIRN_RING_MIN_CAPACITY / 4) + 1)) == CAIRN_ETOOBIG)
    }

    @Test func reservationsPublishShorterCancelAndRejectOverrun() throws {
        let dir = TempDir()
        let ring = try CRing(dir.file("r"))
        var res = cairn_ring_reservation_t()
        #expect(cairn_ring_reserve(ring.handle, 100, &res) == 0)
        #expect(res.capacity >= 100)
        let text = Array("short".utf8)
        text.withUnsafeBytes { res.data.copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
        #expect(cairn_ring_publish(ring.handle, &res, text.count) == 0)

        #expect(cairn_ring_reserve(ring.handle, 50, &res) == 0)
        cairn_ring_cancel(ring.handle, &res)

        #expect(cairn_ring_reserve(ring.handle, 10, &res) == 0)
        #expect(cairn_ring_publish(ring.handle, &res, Int(res.capacity) + 1) == CAIRN_EINVAL)

        ring.append("after")
        #expect(ring.drain().map { String(decoding: $0, as: UTF8.self) } == ["short", "after"])
        #expect(ring.stats.appended == 2)
    }

    /// A fresh file is all zeros: the header of the record at position 0 must not pass
    /// for published before its producer publishes it.
    @Test func openReservationIsNotReadEvenAtPositionZero() throws {
        let dir = TempDir()
        let ring = try CRing(dir.file("r"))
        var res = cairn_ring_reservation_t()
        #expect(cairn_ring_reserve(ring.handle, 9, &res) == 0)
        #expect(res.pos == 0)
        var recs = [cairn_ring_record_t](repeating: cairn_ring_record_t(), count: 4)
        var next: UInt64 = 0
        #expect(cairn_ring_peek(ring.handle, 0, &recs, 4, Int.max, &next) == 0)
        #expect(next == 0)
        res.data.storeBytes(of: 0x41, as: UInt8.self)
        #expect(cairn_ring_publish(ring.handle, &res, 1) == 0)
        #expect(cairn_ring_peek(ring.handle, 0, &recs, 4, Int.max, &next) == 1)
        #expect(recs[0].len == 1)
    }

    @Test func oneOwnerAtATime() throws {
        let dir = TempDir()
        let path = dir.file("r")
        var first: CRing? = try CRing(path)
        var out: OpaquePointer?
        #expect(cairn_ring_open(path, nil, &out) == CAIRN_ELOCKED)
        #expect(out == nil)
        #expect(String(cString: cairn_strerror(CAIRN_ELOCKED)).contains("another"))
        first?.append("kept")
        first = nil
        let second = try CRing(path)
        #expect(second.drain().map { String(decoding: $0, as: UTF8.self) } == ["kept"])
    }

    @Test func reopenKeepsUnconsumedRecordsAndCapacity() throws {
        let dir = TempDir()
        let path = dir.file("r")
        do {
            let ring = try CRing(path, capacity: 200_000)
            #expect(ring.stats.capacity == 262_144, "rounded up to a power of two")
            #expect(ring.stats.origin == CAIRN_RING_CREATED.rawValue)
            for i in 0..<300 { ring.append("a\(i)") }
            _ = ring.drain() // consume the first 300
            for i in 0..<50 { ring.append("b\(i)") }
        }
        let ring = try CRing(path, capacity: UInt64(CAIRN_RING_MIN_CAPACITY))
        let s = ring.stats
        #expect(s.origin == CAIRN_RING_REOPENED.rawValue)
        #expect(s.capacity == 262_144, "an existing ring keeps its capacity")
        #expect(s.recovered == 50 && s.skipped_corrupt == 0)
        #expect(ring.drain().map { String(decoding: $0, as: UTF8.self) } == (0..<50).map { "b\($0)" })
    }

    @Test func invalidArgumentsAreRefused() throws {
        let dir = TempDir()
        var out: OpaquePointer?
        var opts = cairn_ring_options_t()
        cairn_ring_options_init(&opts)
        opts.capacity = 1000
        #expect(cairn_ring_open(dir.file("r"), &opts, &out) == CAIRN_EINVAL)
        opts.capacity = UInt64(CAIRN_RING_MAX_CAPACITY) + 1
        #expect(cairn_ring_open(dir.file("r"), &opts, &out) == CAIRN_EINVAL)
        #expect(cairn_ring_open(nil, nil, &out) == CAIRN_EINVAL)
        #expect(cairn_ring_open(dir.file("missing-dir/r"), nil, &out) == ENOENT)
        #expect(cairn_ring_append(nil, nil, 0) == CAIRN_EINVAL)
        let ring = try CRing(dir.file("r2"))
        #expect(cairn_ring_append(ring.handle, nil, 5) == CAIRN_EINVAL)
        #expect(ring.append([]) == 0, "an empty record is a record")
        #expect(ring.drain() == [[]])
    }

    /// 4 producer threads × 250k records while one consumer drains: every record is
    /// delivered exactly once and each thread's records arrive in order.
    @Test func fourProducersOneConsumerExactlyOnceInOrder() throws {
        let dir = TempDir()
        let ring = try CRing(dir.file("r"), capacity: 1 << 20)
        let producers = 4, perThread = 250_000
        let handle = ring.handle
        let done = UnsafeMutablePointer<Int>.allocate(capacity: 1)
        done.initialize(to: 0)
        defer { done.deallocate() }
        let fullRetries = UnsafeMutablePointer<UInt64>.allocate(capacity: producers)
        fullRetries.initialize(repeating: 0, count: producers)
        defer { fullRetries.deallocate() }

        var threads: [Thread] = []
        let shared = Unchecked((handle, fullRetries))
        for t in 0..<producers {
            let th = Thread {
                let (handle, fullRetries) = shared.value
                var buf = [UInt8](repeating: 0, count: 16)
                for i in 0..<perThread {
                    var v = UInt64(t) << 56 | UInt64(i)
                    withUnsafeBytes(of: &v) { buf.replaceSubrange(0..<8, with: $0) }
                    buf[8] = UInt8(truncatingIfNeeded: i &* 31 &+ t)
                    let len = 9 + i % 7
                    while buf.withUnsafeBytes({ cairn_ring_append(handle, $0.baseAddress, len) }) == CAIRN_EFULL {
                        fullRetries[t] += 1
                        sched_yield()
                    }
                }
            }
            th.start()
            threads.append(th)
        }
        var nextSeq = [Int](repeating: 0, count: producers)
        var received = 0, mismatches = 0
        var recs = [cairn_ring_record_t](repeating: cairn_ring_record_t(), count: 256)
        let deadline = Date().addingTimeInterval(120)
        while received < producers * perThread && Date() < deadline {
            var next: UInt64 = 0
            let n = recs.withUnsafeMutableBufferPointer {
                cairn_ring_peek(handle, cairn_ring_read_pos(handle), $0.baseAddress, 256, Int.max, &next)
            }
            if n <= 0 { sched_yield(); continue }
            for r in recs.prefix(Int(n)) {
                let p = UnsafeRawBufferPointer(start: r.data, count: Int(r.len))
                let v = p.loadUnaligned(as: UInt64.self)
                let t = Int(v >> 56), i = Int(v & 0xFF_FFFF_FFFF)
                if t >= producers || i != nextSeq[t] || Int(r.len) != 9 + i % 7
                    || p[8] != UInt8(truncatingIfNeeded: i &* 31 &+ t) {
                    mismatches += 1
                } else {
                    nextSeq[t] += 1
                }
                received += 1
            }
            #expect(cairn_ring_commit(handle, next) == 0)
        }
        #expect(mismatches == 0)
        #expect(received == producers * perThread)
        #expect(nextSeq == [Int](repeating: perThread, count: producers))
        let s = ring.stats
        #expect(s.appended == UInt64(producers * perThread))
        #expect(s.used == 0)
        // The producers retried on EFULL; every refusal was counted as a drop.
        #expect(s.dropped_full == (0..<producers).reduce(0) { $0 + fullRetries[$1] })
        _ = threads
    }
}

/// Resident memory of the ring follows the live window, not the capacity.
@Suite struct RingMemoryTests {
    /// Streams 8× the capacity through a 4 MiB ring, 500 records of 200 bytes at a time.
    static func cycle(_ ring: CRing) {
        let rec = [UInt8](repeating: 0x62, count: 200)
        for _ in 0..<(8 * 4 * 1024 * 1024 / (224 * 500)) {
            for _ in 0..<500 { #expect(ring.append(rec) == 0) }
            _ = ring.drain(batch: 500)
        }
    }

    @Test func consumedPagesLeaveMemory() throws {
        let dir = TempDir()
        let path = dir.file("reclaimed")
        let ring = try CRing(path, capacity: 4 << 20)
        Self.cycle(ring)
        let rss = try #require(residentKB(ofMapping: path))
        // Live window ≈ 110 KiB, up to 64 KiB consumed but not yet reclaimed, and a
        // runway prefaulted ahead of the producers (twice the 112 KiB written between
        // commits, 256 KiB at most).
        print("ring resident memory with reclaim: \(rss) KiB of 4096")
        #expect(rss < 640, "resident \(rss) KiB of a 4 MiB ring")
    }

    /// A producer that writes little gets a short runway: the pages prefaulted ahead of
    /// it follow what it wrote since the last commit (16 KiB at least), not 256 KiB.
    @Test func aSlowProducerGetsAShortRunway() throws {
        let dir = TempDir()
        let path = dir.file("slow")
        let ring = try CRing(path, capacity: 4 << 20)
        let rec = [UInt8](repeating: 0x62, count: 200)
        for _ in 0..<5 {
            for _ in 0..<10 { #expect(ring.append(rec) == 0) }
            #expect(ring.drain(batch: 500).count == 10)
        }
        let rss = try #require(residentKB(ofMapping: path))
        // The header page, the pages the 50 records are on and a 16 KiB runway, mapped
        // by the kernel in 64 KiB windows.
        #expect(rss < 128, "resident \(rss) KiB of a 4 MiB ring (260 with a fixed 256 KiB runway)")
        // Flat out, the runway grows again (twice the 112 KiB written between commits).
        Self.cycle(ring)
        let busy = try #require(residentKB(ofMapping: path))
        #expect(busy > 96 && busy < 640, "resident \(busy) KiB")
    }

    @Test func withoutReclaimEveryTouchedPageStays() throws {
        let dir = TempDir()
        let path = dir.file("resident")
        let ring = try CRing(path, capacity: 4 << 20, reclaim: 0)
        Self.cycle(ring)
        let rss = try #require(residentKB(ofMapping: path))
        #expect(rss > 3 * 1024, "resident \(rss) KiB: the control case must show the difference")
    }
}
