import CCairnCore
import CairnStore
import CairnTestSupport
import Foundation
import Testing

/// Record kinds in the ring (docs/FORMATS.md, "Ring file", "Records"): context and bare
/// records next to data, in order, through reservations, wraps, reopening, torn
/// records, a version 1 file, and the independent Python reader.
@Suite struct RingKindTests {
    static func text(_ r: Ring.Record) -> String { String(decoding: r.bytes, as: UTF8.self) }

    /// The kind and text of every unconsumed record, read from the cursor on.
    static func all(_ ring: Ring) throws -> [(Ring.Kind, String)] {
        try ring.peek(maxRecords: 1 << 16, maxBytes: Int.max).records.map { ($0.kind, text($0)) }
    }

    @Test func kindsComeBackInOrderAndCountTowardsTheLimits() throws {
        let dir = Scratch()
        let ring = try Ring(path: dir.path + "/r")
        try ring.append(Array("old".utf8))
        try ring.append(Array(#""context":{"a":1}"#.utf8), kind: .context)
        try ring.append(Array("bare-1".utf8), kind: .bare)
        #expect(try ring.withReservation(capacity: 64, kind: .bare) { buf in
            buf.copyBytes(from: Array("bare-2".utf8))
            return 6
        })
        try ring.append(Array(#""context":{"a":2}"#.utf8), kind: .context)
        try ring.append(Array("bare-3".utf8), kind: .bare)
        let got = try Self.all(ring)
        #expect(got.map(\.0) == [.data, .context, .bare, .bare, .context, .bare])
        #expect(got.map(\.1) == ["old", #""context":{"a":1}"#, "bare-1", "bare-2", #""context":{"a":2}"#, "bare-3"])
        // A context record is a record: it counts towards maxRecords, and a run can end
        // right after it.
        let first = try ring.peek(maxRecords: 2, maxBytes: 1 << 20)
        #expect(first.records.map(\.kind) == [.data, .context])
        let rest = try ring.peek(from: first.next, maxRecords: 10, maxBytes: 1 << 20)
        #expect(rest.records.map(\.kind) == [.bare, .bare, .context, .bare])
        // A run cut before its third record ends where that record starts.
        var cut = rest
        cut.truncate(to: 2)
        #expect(cut.records.count == 2 && cut.next == rest.records[2].position)
        try ring.commit(upTo: cut.next)
        #expect(try Self.all(ring).map(\.0) == [.context, .bare])
        #expect(ring.stats().appended == 6)
    }

    @Test func paddingIsNotAKindAWriterMayAppend() throws {
        let dir = Scratch()
        let path = dir.path + "/r"
        let ring = try Ring(path: path)
        // The C core refuses padding and unknown kinds, and a refused publish ends the
        // reservation (the ring does not stall).
        #expect(cairn_ring_append_kind(ring.rawHandle, CAIRN_RING_KIND_PADDING, nil, 0) == CAIRN_EINVAL)
        #expect(cairn_ring_append_kind(ring.rawHandle, 4, nil, 0) == CAIRN_EINVAL)
        var res = cairn_ring_reservation_t()
        #expect(cairn_ring_reserve(ring.rawHandle, 8, &res) == 0)
        #expect(cairn_ring_publish_kind(ring.rawHandle, &res, 0, CAIRN_RING_KIND_PADDING) == CAIRN_EINVAL)
        try ring.append(Array("after".utf8), kind: .bare)
        #expect(try Self.all(ring).map(\.1) == ["after"])
    }

    @Test func kindsSurviveWrapsAndReopening() throws {
        let dir = Scratch()
        let path = dir.path + "/r"
        var expected: [(Ring.Kind, String)] = []
        do {
            let ring = try Ring(path: path, options: .init(capacity: 1 << 16))
            // Several laps: records of every kind cross the end of the data area many times.
            var n = 0
            for lap in 0..<6 {
                for i in 0..<300 {
                    let kind: Ring.Kind = i % 50 == 0 ? .context : (i % 7 == 0 ? .data : .bare)
                    let body = "\(lap)-\(i)-" + String(repeating: "x", count: (i * 37) % 150)
                    try ring.append(Array(body.utf8), kind: kind)
                    expected.append((kind, body))
                    n += 1
                }
                // Consume all but the last lap's records.
                if lap < 5 {
                    let run = try ring.peek(maxRecords: 1 << 16, maxBytes: Int.max)
                    #expect(run.records.count == expected.count)
                    for (r, e) in zip(run.records, expected) { #expect(r.kind == e.0 && Self.text(r) == e.1) }
                    try ring.commit(upTo: run.next)
                    expected.removeAll()
                }
            }
            #expect(n == 1800)
        }
        // Another test's child process, forked at the instant the ring was open, holds a
        // copy of its descriptor (and so the lock) until it execs: wait for that.
        var opened = try? Ring(path: path)
        for _ in 0..<200 where opened == nil {
            usleep(10_000)
            opened = try? Ring(path: path)
        }
        let reopened = try #require(opened, "the ring stays locked after its handle closed")
        #expect(reopened.stats().origin == .reopened && reopened.stats().recovered == UInt64(expected.count))
        let got = try Self.all(reopened)
        #expect(got.map(\.0) == expected.map(\.0) && got.map(\.1) == expected.map(\.1))
    }

    /// A context record torn by a writer killed mid-write (its publish word never
    /// stored) or damaged later (a payload byte flipped) is skipped at open like a data
    /// record; the records around it are kept, kinds and all.
    @Test func tornContextRecordsAreSkippedAtOpen() throws {
        let dir = Scratch()
        let path = dir.path + "/r"
        var positions: [UInt64] = []
        do {
            let ring = try Ring(path: path, options: .init(capacity: 1 << 16))
            try ring.append(Array(#""context":{"run":1}"#.utf8), kind: .context)
            try ring.append(Array("a".utf8), kind: .bare)
            try ring.append(Array(#""context":{"run":2}"#.utf8), kind: .context)
            try ring.append(Array("b".utf8), kind: .bare)
            try ring.append(Array(#""context":{"run":3}"#.utf8), kind: .context)
            try ring.append(Array("c".utf8), kind: .bare)
            positions = try ring.peek(maxRecords: 10, maxBytes: Int.max).records.map(\.position)
        }
        let file = try FileHandle(forUpdating: URL(fileURLWithPath: path))
        // Record 2 (the second context) loses a payload byte; record 4 its publish word.
        try file.seek(toOffset: 4096 + positions[2] % (1 << 16) + 16 + 3)
        try file.write(contentsOf: Data([0x58]))
        try file.seek(toOffset: 4096 + positions[4] % (1 << 16))
        try file.write(contentsOf: Data(repeating: 0, count: 8))
        try file.close()

        let ring = try Ring(path: path)
        let stats = ring.stats()
        #expect(stats.skippedCorrupt == 2 && stats.recovered == 4)
        let got = try Self.all(ring)
        #expect(got.map(\.0) == [.context, .bare, .bare, .bare])
        #expect(got.map(\.1) == [#""context":{"run":1}"#, "a", "b", "c"])
    }

    /// A ring written before context records existed (version 1: data and padding only)
    /// opens as it is, without a repair, delivers its records, and is version 2 after.
    @Test func aVersion1FileIsReadAndBecomesVersion2() throws {
        let dir = Scratch()
        let path = dir.path + "/r"
        do {
            let ring = try Ring(path: path, options: .init(capacity: 1 << 16))
            for i in 0..<5 { try ring.append(Array("v1-\(i)".utf8)) }
        }
        var header = try Self.header(path)
        #expect(header[8] == 2, "new files are version 2")
        header[8] = 1
        Self.putCRC(&header)
        try Self.writeHeader(path, header)

        let ring = try Ring(path: path)
        let stats = ring.stats()
        #expect(stats.origin == .reopened && stats.repairs.isEmpty && stats.recovered == 5)
        #expect(try Self.all(ring).map(\.1) == (0..<5).map { "v1-\($0)" })
        #expect(try Self.all(ring).allSatisfy { $0.0 == .data })
        let after = try Self.header(path)
        #expect(after[8] == 2 && Self.crc32c(after[0..<36]) == UInt32(after[36]) | UInt32(after[37]) << 8
                | UInt32(after[38]) << 16 | UInt32(after[39]) << 24)
    }

    /// A header of a version after 2 (checking out) is a newer writer's: set aside.
    @Test func aVersion3FileIsSetAside() throws {
        let dir = Scratch()
        let path = dir.path + "/r"
        do { try Ring(path: path).append(Array("x".utf8)) }
        var header = try Self.header(path)
        header[8] = 3
        Self.putCRC(&header)
        try Self.writeHeader(path, header)
        #expect(try Ring(path: path).stats().origin == .setAside)
    }

    /// `read_ring.py`, written from docs/FORMATS.md alone, reads every kind: events
    /// completed with the context in force, and the records as they are.
    @Test func pythonReaderReadsEveryKind() throws {
        let dir = Scratch()
        let path = dir.path + "/r"
        do {
            let ring = try Ring(path: path, options: .init(capacity: 1 << 16))
            try ring.append(Array(#"{"n":0}"#.utf8), kind: .bare)  // no context before it in the window
            try ring.append(Array(#"{"n":1,"context":{},"sdk":{}}"#.utf8))
            try ring.append(Array(#""context":{"p":1},"sdk":{"v":"1"}"#.utf8), kind: .context)
            try ring.append(Array(#"{"n":2}"#.utf8), kind: .bare)
            try ring.append(Array("{}".utf8), kind: .bare)
            try ring.append(Array(#""context":{"p":2},"sdk":{"v":"1"}"#.utf8), kind: .context)
            try ring.append(Array(#"{"n":3}"#.utf8), kind: .bare)
        }
        let reader = repoRoot.path + "/Tests/Tools/read_ring.py"
        let events = try Self.python([reader, path])
        #expect(events.status == 0)
        #expect(events.lines == [#"{"n":0}"#, #"{"n":1,"context":{},"sdk":{}}"#,
                                 #"{"n":2,"context":{"p":1},"sdk":{"v":"1"}}"#, #"{"context":{"p":1},"sdk":{"v":"1"}}"#,
                                 #"{"n":3,"context":{"p":2},"sdk":{"v":"1"}}"#])
        let records = try Self.python([reader, "--records", path])
        #expect(records.status == 0)
        #expect(records.lines.map { $0.split(separator: " ").first.map(String.init) ?? "" }
                == ["bare", "data", "context", "bare", "bare", "context", "bare"])
    }

    // MARK: Helpers

    static func python(_ args: [String]) throws -> (status: Int32, lines: [String]) {
        let r = try runToEnd("/usr/bin/env", ["python3"] + args)
        return (r.status, r.out.split(separator: "\n").map(String.init))
    }

    static func header(_ path: String) throws -> [UInt8] {
        let file = try FileHandle(forReadingFrom: URL(fileURLWithPath: path))
        defer { try? file.close() }
        return [UInt8](try file.read(upToCount: 4096) ?? Data())
    }

    static func writeHeader(_ path: String, _ header: [UInt8]) throws {
        let file = try FileHandle(forUpdating: URL(fileURLWithPath: path))
        try file.write(contentsOf: Data(header))
        try file.close()
    }

    /// Rewrites the header CRC (bytes 36..39) over bytes 0..35.
    static func putCRC(_ h: inout [UInt8]) {
        let c = crc32c(h[0..<36])
        for i in 0..<4 { h[36 + i] = UInt8(truncatingIfNeeded: c >> (8 * UInt32(i))) }
    }

    /// CRC32C (Castagnoli), bit by bit, as docs/FORMATS.md describes it.
    static func crc32c(_ bytes: ArraySlice<UInt8>) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for b in bytes {
            crc ^= UInt32(b)
            for _ in 0..<8 { crc = crc & 1 != 0 ? (crc >> 1) ^ 0x82F6_3B78 : crc >> 1 }
        }
        return crc ^ 0xFFFF_FFFF
    }
}
