import CairnStore
import CairnTestSupport
import Foundation
import Testing

/// `Ring.inspect` (`cairn_ring_inspect`): what waits in a ring file, counted without
/// opening it as a ring. It must agree with what an open then finds, beside a process
/// that has the ring open, on damaged and truncated files, and never change a byte.
@Suite struct RingInspectTests {
    static func bytes(_ path: String) -> Data { FileManager.default.contents(atPath: path) ?? Data() }

    @Test func countsWhatWaitsBesideTheOpenRing() throws {
        let dir = Scratch()
        let path = dir.path + "/r"
        let ring = try Ring(path: path, options: .init(capacity: 1 << 16))
        try ring.append(Array(#""context":{"run":1}"#.utf8), kind: .context)
        for i in 0..<30 { try ring.append(Array("event \(i)".utf8), kind: i % 2 == 0 ? .data : .bare) }
        // Ten released by the consumer: they no longer wait.
        let first = try ring.peek(maxRecords: 11, maxBytes: Int.max)
        try ring.commit(upTo: first.next)
        try ring.append(Array(#""context":{"run":2}"#.utf8), kind: .context)

        let before = Self.bytes(path)
        let seen = try Ring.inspect(path: path)
        #expect(seen.events == 20 && seen.contexts == 1, "\(seen)")
        #expect(seen.capacity == 1 << 16 && seen.used == ring.stats().used)
        #expect(seen.tornRegions == 0 && seen.repairs.isEmpty)
        #expect(Self.bytes(path) == before, "inspecting changed the file")
        // The open ring still works: inspecting took no lock.
        try ring.append(Array("after".utf8))
        #expect(try Ring.inspect(path: path).events == 21)
    }

    /// A damaged header: counted as the next open repairs it, the file left as it was,
    /// and the open then recovers exactly what the inspection counted.
    @Test func aDamagedHeaderIsReadAsTheOpenRepairsIt() throws {
        let dir = Scratch()
        let path = dir.path + "/r"
        do {
            let ring = try Ring(path: path, options: .init(capacity: 1 << 16))
            for i in 0..<40 { try ring.append(Array("kept \(i)".utf8)) }
        }
        let handle = try #require(FileHandle(forUpdatingAtPath: path))
        try handle.seek(toOffset: 0)
        try handle.write(contentsOf: Data(count: 40))
        try handle.close()

        let before = Self.bytes(path)
        let seen = try Ring.inspect(path: path)
        #expect(Self.bytes(path) == before, "inspecting repaired the file")
        #expect(seen.repairs.contains(.headerChecksum) && seen.events == 40, "\(seen)")
        let ring = try Ring(path: path)
        #expect(ring.stats().recovered == seen.events && ring.stats().repairs == seen.repairs)
    }

    /// Torn records and a truncated file: what the inspection counts is what the open
    /// recovers, and the torn regions are the ones it skips.
    @Test func tornAndTruncatedFilesCountWhatTheOpenRecovers() throws {
        let dir = Scratch()
        let path = dir.path + "/r"
        var positions: [UInt64] = []
        do {
            let ring = try Ring(path: path, options: .init(capacity: 1 << 16))
            for i in 0..<400 { try ring.append(Array("record number \(i), padded to some length".utf8)) }
            positions = try ring.peek(maxRecords: 400, maxBytes: Int.max).records.map(\.position)
        }
        let handle = try #require(FileHandle(forUpdatingAtPath: path))
        for victim in [5, 6, 100] {
            try handle.seek(toOffset: 4096 + positions[victim] % (1 << 16) + 20)
            try handle.write(contentsOf: Data([0xFF]))
        }
        // The last quarter of the data area cut off.
        try handle.truncate(atOffset: 4096 + (3 << 14))
        try handle.close()

        let seen = try Ring.inspect(path: path)
        let wholeBeforeCut = positions.filter { $0 % (1 << 16) + 64 <= 3 << 14 }.count
        #expect(seen.events == UInt64(wholeBeforeCut - 3) && seen.tornRegions >= 2, "\(seen)")
        #expect(seen.repairs.contains(.fileSize))
        let ring = try Ring(path: path)
        #expect(ring.stats().recovered == seen.events && ring.stats().skippedCorrupt == seen.tornRegions)
    }

    @Test func filesThatAreNotRingsAreRefusedWithTheirReason() throws {
        let dir = Scratch()
        #expect(throws: CairnError.self) { try Ring.inspect(path: dir.path + "/none") }
        do {
            _ = try Ring.inspect(path: dir.path + "/none")
        } catch {
            #expect(error.code == ENOENT)
        }
        let garbage = dir.path + "/garbage"
        _ = FileManager.default.createFile(atPath: garbage, contents: Data((0..<20000).map { UInt8(truncatingIfNeeded: $0 &* 7919) }))
        do {
            _ = try Ring.inspect(path: garbage)
            Issue.record("garbage read as a ring")
        } catch {
            #expect(error.code == CairnError.corrupt)
        }
        do {
            _ = try Ring.inspect(path: dir.path)
            Issue.record("a directory read as a ring")
        } catch {
            #expect(error.code == CairnError.invalid)
        }
        let empty = dir.path + "/empty"
        _ = FileManager.default.createFile(atPath: empty, contents: Data())
        #expect(try Ring.inspect(path: empty).events == 0)
    }
}
