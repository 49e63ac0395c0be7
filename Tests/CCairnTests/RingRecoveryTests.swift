import CairnTestSupport
import CCairnCore
import Foundation
import Testing

/// Opening damaged ring files: torn and flipped records are skipped and counted, files
/// with nothing to trust are set aside, and nothing in a file can crash or hang open.
/// (Damaged headers and lengths: RingRepairTests.)
@Suite struct RingRecoveryTests {
    static let headerSize = 4096

    /// Writes `consumed + count` numbered records to a fresh ring at `path`, consumes the
    /// first `consumed`, closes it, and returns every record written.
    static func makeRing(_ path: String, count: Int = 100, consumed: Int = 0) throws -> [[UInt8]] {
        let ring = try CRing(path)
        var records: [[UInt8]] = []
        for i in 0..<(count + consumed) {
            let rec = Array(#"{"n":\#(i),"pad":"\#(String(repeating: "z", count: i % 50))"}"#.utf8)
            #expect(ring.append(rec) == 0)
            records.append(rec)
        }
        // Consume the first `consumed` so the window does not start at 0.
        if consumed > 0 {
            var recs = [cairn_ring_record_t](repeating: cairn_ring_record_t(), count: consumed)
            var next: UInt64 = 0
            #expect(cairn_ring_peek(ring.handle, 0, &recs, consumed, Int.max, &next) == Int32(consumed))
            #expect(cairn_ring_commit(ring.handle, next) == 0)
        }
        return records
    }

    /// File offsets of each unconsumed record's header, read the way FORMATS.md says.
    static func recordOffsets(_ bytes: [UInt8]) -> [Int] {
        func u64(_ o: Int) -> UInt64 { (0..<8).reduce(0) { $0 | UInt64(bytes[o + $1]) << (8 * $1) } }
        let capacity = u64(16), write = u64(64)
        var pos = u64(128)
        var out: [Int] = []
        while pos < write {
            let off = headerSize + Int(pos & (capacity - 1))
            let lenKind = UInt32(truncatingIfNeeded: u64(off + 8))
            let len = Int(lenKind & 0x3FFF_FFFF)
            if lenKind >> 30 == 0 {
                out.append(off)
                pos += UInt64((16 + len + 15) / 16 * 16)
            } else {
                pos += UInt64(16 + len)
            }
        }
        return out
    }

    static func read(_ path: String) -> [UInt8] { Array(FileManager.default.contents(atPath: path) ?? Data()) }
    static func write(_ path: String, _ bytes: [UInt8]) { _ = FileManager.default.createFile(atPath: path, contents: Data(bytes)) }

    static func setAsideFiles(_ dir: TempDir) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: dir.path)) ?? []).filter { $0.contains(".corrupt-") }
    }

    @Test func tornRecordIsSkippedAndLaterRecordsAreFound() throws {
        let dir = TempDir()
        let path = dir.file("r")
        let records = Array(try Self.makeRing(path, consumed: 7).dropFirst(7))
        var bytes = Self.read(path)
        let offsets = Self.recordOffsets(bytes)
        #expect(offsets.count == 100)
        // A producer killed before publishing leaves the header's position word stale.
        for b in 0..<8 { bytes[offsets[10] + b] = 0 }
        // Another one killed halfway through its payload: published word, wrong CRC.
        bytes[offsets[50] + 20] ^= 0x40
        Self.write(path, bytes)

        let ring = try CRing(path)
        let s = ring.stats
        #expect(s.origin == CAIRN_RING_REOPENED.rawValue)
        #expect(s.recovered == 98)
        #expect(s.skipped_corrupt == 2)
        #expect(s.skipped_bytes == UInt64(offsets[11] - offsets[10] + offsets[51] - offsets[50]))
        var expected = records
        expected.remove(at: 50)
        expected.remove(at: 10)
        #expect(ring.drain() == expected)
        #expect(Self.setAsideFiles(dir).isEmpty)
    }

    @Test func tornRegionAtTheEndOfTheWindowIsSkipped() throws {
        let dir = TempDir()
        let path = dir.file("r")
        let records = try Self.makeRing(path, count: 20)
        var bytes = Self.read(path)
        let last = Self.recordOffsets(bytes)[19]
        for b in 0..<8 { bytes[last + b] = 0xFF }
        Self.write(path, bytes)
        let ring = try CRing(path)
        #expect(ring.stats.recovered == 19 && ring.stats.skipped_corrupt == 1)
        #expect(ring.drain() == Array(records.prefix(19)))
        // The ring goes on working after the repair.
        #expect(ring.append("next") == 0)
        #expect(ring.drain() == [Array("next".utf8)])
    }

    /// Files in which nothing can be trusted as a ring: no sound header and no record
    /// whose checksum holds, or a sound header of a newer format.
    enum Unreadable: String, CaseIterable, Sendable {
        case garbage, zeros, tinyGarbage, newerFormat

        func apply(_ b: inout [UInt8]) {
            switch self {
            case .garbage:
                var g = SplitMix(seed: 7)
                for i in b.indices { b[i] = UInt8.random(in: 0...255, using: &g) }
            case .zeros:
                for i in b.indices { b[i] = 0 }
            case .tinyGarbage:
                var g = SplitMix(seed: 8)
                b = (0..<100).map { _ in UInt8.random(in: 0...255, using: &g) }
            case .newerFormat:
                // Flags are covered by the header CRC: rewrite it as a newer writer would.
                b[32] = 1
                var crc = ~UInt32(0)
                for byte in b[0..<36] {
                    crc ^= UInt32(byte)
                    for _ in 0..<8 { crc = crc & 1 != 0 ? (crc >> 1) ^ 0x82F6_3B78 : crc >> 1 }
                }
                crc = ~crc
                for i in 0..<4 { b[36 + i] = UInt8(truncatingIfNeeded: crc >> (8 * i)) }
            }
        }
    }

    @Test(arguments: Unreadable.allCases)
    func fileWithNothingToTrustIsSetAsideAndAFreshRingCreated(damage: Unreadable) throws {
        let name = damage.rawValue
        let dir = TempDir()
        let path = dir.file("r")
        _ = try Self.makeRing(path, count: 30)
        var bytes = Self.read(path)
        damage.apply(&bytes)
        Self.write(path, bytes)

        let ring = try CRing(path)
        #expect(ring.stats.origin == CAIRN_RING_SET_ASIDE.rawValue, "\(name)")
        #expect(ring.drain().isEmpty)
        #expect(ring.append("fresh") == 0)
        #expect(ring.drain() == [Array("fresh".utf8)])
        // Set aside means renamed with its bytes intact, never deleted.
        let aside = Self.setAsideFiles(dir)
        #expect(aside.count == 1, "\(name)")
        if let first = aside.first { #expect(Self.read(dir.file(first)) == bytes, "\(name)") }
    }

    @Test func setAsideNeverReplacesAnEarlierCopy() throws {
        let dir = TempDir()
        let path = dir.file("r")
        for round in 0..<3 {
            Self.write(path, Array(repeating: UInt8(round + 1), count: 5000))
            let ring = try CRing(path)
            #expect(ring.stats.origin == CAIRN_RING_SET_ASIDE.rawValue)
        }
        // Three set-asides within the same second by the same process: three copies.
        let copies = Self.setAsideFiles(dir).map { Self.read(dir.file($0)).first ?? 0 }.sorted()
        #expect(copies == [1, 2, 3])
    }

    @Test func emptyFileBecomesAFreshRing() throws {
        let dir = TempDir()
        let path = dir.file("r")
        Self.write(path, [])
        let ring = try CRing(path)
        #expect(ring.stats.origin == CAIRN_RING_CREATED.rawValue)
        #expect(Self.setAsideFiles(dir).isEmpty)
    }

    /// Random byte flips anywhere in the file, 300 times: open always succeeds, never
    /// sets the file aside, and what comes back is an in-order subset of what was
    /// written (nothing invented).
    @Test func randomFlipsNeverCrashOrInventRecords() throws {
        let dir = TempDir()
        let path = dir.file("r")
        let pristine = dir.file("pristine")
        let records = try Self.makeRing(pristine, count: 150, consumed: 33)
        let original = Self.read(pristine)
        let offsets = Self.recordOffsets(original)
        var rng = SplitMix(seed: 42)
        var partial = 0, repaired = 0
        for round in 0..<300 {
            var bytes = original
            let flips = Int.random(in: 1...8, using: &rng)
            for _ in 0..<flips {
                // In the live window, in the header's fields, or anywhere.
                let at: Int
                switch Int.random(in: 0..<8, using: &rng) {
                case 0..<4: at = Int.random(in: offsets[0]..<(offsets[offsets.count - 1] + 64), using: &rng)
                case 4: at = Int.random(in: 0..<136, using: &rng)
                default: at = Int.random(in: 0..<bytes.count, using: &rng)
                }
                bytes[at] ^= UInt8.random(in: 1...255, using: &rng)
            }
            Self.write(path, bytes)
            let ring = try CRing(path)
            let s = ring.stats
            #expect(s.origin != CAIRN_RING_SET_ASIDE.rawValue, "round \(round): the records were there to trust")
            if s.origin == CAIRN_RING_REPAIRED.rawValue { repaired += 1 }
            if s.skipped_corrupt > 0 { partial += 1 }
            let got = ring.drain()
            // An in-order subsequence of the records written (a flipped read cursor may
            // hand back consumed ones again: at least once, never invented).
            var j = 0
            for rec in got {
                while j < records.count && records[j] != rec { j += 1 }
                #expect(j < records.count, "round \(round): a record that was never written")
                j += 1
            }
            for f in Self.setAsideFiles(dir) { try? FileManager.default.removeItem(atPath: dir.file(f)) }
        }
        #expect(partial > 50, "flips in the window must produce partial recoveries")
        #expect(repaired > 20, "flips in the header must be repaired")
    }

    static func u64(_ b: [UInt8], _ o: Int) -> UInt64 { (0..<8).reduce(0) { $0 | UInt64(b[o + $1]) << (8 * $1) } }
    static func put64(_ b: inout [UInt8], _ o: Int, _ v: UInt64) {
        for i in 0..<8 { b[o + i] = UInt8(truncatingIfNeeded: v >> (8 * i)) }
    }

    /// After a power loss the header can be older than data pages the kernel had
    /// written back: records beyond its write cursor are real (taken in), and words
    /// beyond them that match their own position must not pass for new records.
    @Test func afterARebootRecordsBeyondTheWriteCursorAreTakenInAndStaleOnesCleared() throws {
        let dir = TempDir()
        let path = dir.file("r")
        let records = try Self.makeRing(path, count: 6)
        var bytes = Self.read(path)
        let offsets = Self.recordOffsets(bytes)
        // The header as last written back: nothing appended yet, and another boot.
        Self.put64(&bytes, 64, 0)
        for i in 40..<56 { bytes[i] = 0 }
        // Record 3 never reached the disk; 4 and 5 did.
        bytes[offsets[3] + 20] ^= 0xFF
        Self.write(path, bytes)

        let ring = try CRing(path)
        #expect(ring.stats.origin == CAIRN_RING_REOPENED.rawValue)
        #expect(ring.stats.recovered == 3, "records 0..2 are taken in")
        // Producers now reuse the positions of records 3, 4, 5. Publish one, reserve the
        // next (where stale record 4 was) and leave it open: it must not be read.
        #expect(ring.append(Array(records[3])) == 0)
        var res = cairn_ring_reservation_t()
        #expect(cairn_ring_reserve(ring.handle, records[4].count, &res) == 0)
        #expect(res.pos == UInt64(offsets[4] - Self.headerSize))
        var recs = [cairn_ring_record_t](repeating: cairn_ring_record_t(), count: 16)
        var next: UInt64 = 0
        let n = cairn_ring_peek(ring.handle, 0, &recs, 16, Int.max, &next)
        #expect(n == 4)
        let seen = recs.prefix(Int(max(n, 0))).map { Array(UnsafeRawBufferPointer(start: $0.data, count: Int($0.len))) }
        #expect(seen == Array(records.prefix(4)))
        #expect(next == res.pos)
        cairn_ring_cancel(ring.handle, &res)
    }

    /// A window whose every 16-byte slot looks like a record (right position word,
    /// plausible length) but fails its CRC: recovery stays linear and pads it all.
    @Test func hostileWindowIsRecoveredInBoundedWork() throws {
        let dir = TempDir()
        let path = dir.file("r")
        let capacity = 1 << 20
        do { _ = try CRing(path, capacity: UInt64(capacity)) }
        var bytes = Self.read(path)
        let salt = Self.u64(bytes, 24)
        Self.put64(&bytes, 64, UInt64(capacity)) // a full window
        for pos in stride(from: 0, to: capacity, by: 16) {
            let off = Self.headerSize + pos
            Self.put64(&bytes, off, (UInt64(pos) | 1) ^ salt)
            let len = UInt32(capacity - pos - 16)
            for i in 0..<4 { bytes[off + 8 + i] = UInt8(truncatingIfNeeded: len >> (8 * i)) }
        }
        Self.write(path, bytes)
        let ring = try CRing(path, capacity: UInt64(capacity))
        #expect(ring.stats.recovered == 0 && ring.stats.skipped_corrupt >= 1)
        #expect(ring.drain().isEmpty)
        #expect(ring.append("works") == 0)
        #expect(ring.drain() == [Array("works".utf8)])
    }

    /// The ring file is readable by a reader that is not ours: a Python implementation
    /// of docs/FORMATS.md, with its own CRC32C.
    @Test func pythonReaderReadsTheRingFile() throws {
        let dir = TempDir()
        let path = dir.file("r")
        var records = Array(try Self.makeRing(path, count: 400, consumed: 250).dropFirst(250))
        // Tear one record the way a killed producer would; reopen to repair it.
        var bytes = Self.read(path)
        let torn = Self.recordOffsets(bytes)[5]
        bytes[torn] ^= 1
        Self.write(path, bytes)
        _ = try CRing(path)
        records.remove(at: 5)

        let result = try run(["python3", repoRoot.path + "/Tests/Tools/read_ring.py", path])
        #expect(result.status == 0, "\(String(decoding: result.stderr, as: UTF8.self))")
        let lines = String(decoding: result.stdout, as: UTF8.self).split(separator: "\n").map(String.init)
        #expect(lines == records.map { String(decoding: $0, as: UTF8.self) })
    }
}
