import CairnTestSupport
import CCairnCore
import Foundation
import Testing

extension CRing {
    /// Opens `path` again after a handle on it was closed. A process that a test
    /// running in parallel is spawning shares this process's descriptors until it
    /// calls exec, and with them the ring's lock: wait that moment out.
    static func reopen(_ path: String, maxRecord: UInt32 = 0) throws -> CRing {
        for _ in 0..<1000 {
            do {
                return try CRing(path, maxRecord: maxRecord)
            } catch RingTestError.open(let rc) where rc == CAIRN_ELOCKED {
                usleep(1000)
            }
        }
        return try CRing(path, maxRecord: maxRecord)
    }
}

/// Opening ring files whose header is damaged or whose length is wrong: the header is
/// rebuilt from the records (whose checksums need neither the salt nor the position),
/// every intact unconsumed record comes back byte-identical, nothing is invented, and
/// the repair is reported.
@Suite struct RingRepairTests {
    static let headerSize = 4096
    static let capacity = Int(CAIRN_RING_MIN_CAPACITY)

    /// A ring file that has wrapped twice, most of its records consumed, its unconsumed
    /// window crossing the end of the data area (so a reader that lost the header must
    /// tell two laps apart), with every record written, in order.
    struct Pristine: Sendable {
        let bytes: [UInt8]
        let all: [[UInt8]]
        let consumed: Int
        var unconsumed: ArraySlice<[UInt8]> { all[consumed...] }
    }

    static let pristine: Pristine = {
        let dir = TempDir()
        let path = dir.file("r")
        guard let ring = try? CRing(path) else { return Pristine(bytes: [], all: [], consumed: 0) }
        var all: [[UInt8]] = [], consumed = 0
        var written: UInt64 = 0
        var rng = SplitMix(seed: 2024)
        func crossesTheEnd() -> Bool {
            var s = cairn_ring_stats_t()
            _ = cairn_ring_stats(ring.handle, &s)
            let read = cairn_ring_read_pos(ring.handle)
            return s.used > 0 && read / UInt64(capacity) != (read + s.used - 1) / UInt64(capacity)
        }
        while written < 2 * UInt64(capacity) || !crossesTheEnd() {
            let rec = Array(#"{"n":\#(all.count),"pad":"\#(String(repeating: "p", count: Int.random(in: 0...300, using: &rng)))"}"#.utf8)
            if ring.append(rec) != 0 { break }
            all.append(rec)
            written += UInt64((16 + rec.count + 15) / 16 * 16)
            // Keep about a third of the capacity unconsumed.
            var s = cairn_ring_stats_t()
            _ = cairn_ring_stats(ring.handle, &s)
            if s.used > UInt64(capacity / 3) { consumed += consume(ring, Int.random(in: 1...20, using: &rng)) }
        }
        return Pristine(bytes: Array(FileManager.default.contents(atPath: path) ?? Data()), all: all, consumed: consumed)
    }()

    /// Consumes up to `count` records; returns how many.
    static func consume(_ ring: CRing, _ count: Int) -> Int {
        var recs = [cairn_ring_record_t](repeating: cairn_ring_record_t(), count: count)
        var next: UInt64 = 0
        let n = cairn_ring_peek(ring.handle, cairn_ring_read_pos(ring.handle), &recs, count, Int.max, &next)
        if n > 0 { _ = cairn_ring_commit(ring.handle, next) }
        return Int(max(n, 0))
    }

    static func u64(_ b: [UInt8], _ o: Int) -> UInt64 { (0..<8).reduce(0) { $0 | UInt64(b[o + $1]) << (8 * $1) } }
    /// CRC32C as docs/FORMATS.md defines it, computed here without the core.
    static func crc32c(_ bytes: [UInt8]) -> UInt32 {
        var crc = ~UInt32(0)
        for byte in bytes {
            crc ^= UInt32(byte)
            for _ in 0..<8 { crc = crc & 1 != 0 ? (crc >> 1) ^ 0x82F6_3B78 : crc >> 1 }
        }
        return ~crc
    }
    static func put64(_ b: inout [UInt8], _ o: Int, _ v: UInt64) {
        for i in 0..<8 { b[o + i] = UInt8(truncatingIfNeeded: v >> (8 * i)) }
    }

    /// Checks what a repaired ring delivered: an in-order subsequence of the records
    /// written, each once (nothing invented), ending with every unconsumed record
    /// (none lost) unless `kept` names the ones that were still in the file. Returns
    /// how many consumed records came back.
    @discardableResult
    static func checkDelivered(_ got: [[UInt8]], _ p: Pristine, kept: Set<Int>? = nil, _ label: String) -> Int {
        var index: [[UInt8]: Int] = [:]
        for (i, r) in p.all.enumerated() { index[r] = i }
        var last = -1, again = 0
        var seen = Set<Int>()
        for rec in got {
            guard let i = index[rec] else {
                Issue.record("\(label): a record that was never written")
                continue
            }
            #expect(i > last, "\(label): out of order or twice")
            last = i
            seen.insert(i)
            if i < p.consumed { again += 1 }
        }
        let wanted = kept ?? Set(p.consumed..<p.all.count)
        let lost = wanted.subtracting(seen)
        #expect(lost.isEmpty, "\(label): lost \(lost.sorted().prefix(8))")
        return again
    }

    /// Ways a header can be damaged.
    enum HeaderDamage: Sendable, CustomTestStringConvertible {
        case flip(byte: Int, mask: UInt8)
        case zeroed, zeroedFixedPart, randomSalt, garbageCursors, garbageHeader

        var testDescription: String {
            switch self {
            case .flip(let byte, let mask): "byte \(byte) ^ \(String(mask, radix: 16))"
            default: "\(self)"
            }
        }

        func apply(_ b: inout [UInt8]) {
            var g = SplitMix(seed: 99)
            switch self {
            case .flip(let byte, let mask): b[byte] ^= mask
            case .zeroed: for i in 0..<4096 { b[i] = 0 }
            case .zeroedFixedPart: for i in 0..<40 { b[i] = 0 }
            case .randomSalt: RingRepairTests.put64(&b, 24, g.next())
            case .garbageCursors:
                for o in [64, 128, 136] { RingRepairTests.put64(&b, o, g.next()) }
            case .garbageHeader: for i in 0..<4096 { b[i] = UInt8.random(in: 0...255, using: &g) }
            }
        }

        /// The repair bit naming the field hit, for a flip in the checksummed part.
        var field: UInt32? {
            guard case .flip(let byte, _) = self, byte < 40 else { return nil }
            switch byte {
            case 0..<8: return CAIRN_RING_REPAIR_MAGIC
            case 8..<12: return CAIRN_RING_REPAIR_VERSION
            case 12..<16: return CAIRN_RING_REPAIR_HEADER_SIZE
            case 16..<24: return CAIRN_RING_REPAIR_CAPACITY
            case 24..<32: return CAIRN_RING_REPAIR_SALT
            case 32..<36: return CAIRN_RING_REPAIR_FLAGS
            default: return CAIRN_RING_REPAIR_HEADER_CRC
            }
        }
    }

    /// Every byte of the checksummed part and of the cursors (write, read, read check),
    /// flipped three ways; then whole-header damage.
    static let headerDamages: [HeaderDamage] =
        (Array(0..<40) + Array(64..<72) + Array(128..<144)).flatMap { byte in
            [0x01, 0x10, 0xFF].map { HeaderDamage.flip(byte: byte, mask: $0) }
        } + [.zeroed, .zeroedFixedPart, .randomSalt, .garbageCursors, .garbageHeader]

    @Test(arguments: headerDamages)
    func damagedHeaderIsRebuiltAndKeepsEveryUnconsumedRecord(damage: HeaderDamage) throws {
        let p = Self.pristine
        #expect(p.all.count > 300 && p.unconsumed.count > 20)
        let label = damage.testDescription
        let dir = TempDir()
        let path = dir.file("r")
        var bytes = p.bytes
        damage.apply(&bytes)
        _ = FileManager.default.createFile(atPath: path, contents: Data(bytes))

        let ring = try CRing(path)
        do {
            let s = ring.stats
            #expect(s.origin == CAIRN_RING_REPAIRED.rawValue || (s.origin == CAIRN_RING_REOPENED.rawValue && s.skipped_corrupt > 0),
                    "\(label): the damage is reported (origin \(s.origin))")
            if let field = damage.field {
                #expect(s.repairs & field != 0, "\(label): repairs \(String(s.repairs, radix: 16))")
                #expect(s.repaired_fields >= 1)
            }
            let got = ring.drain()
            let again = Self.checkDelivered(got, p, label)
            // Records already consumed come back only when the read cursor was lost.
            if again > 0 {
                #expect(s.repairs & (CAIRN_RING_REPAIR_WINDOW_INFERRED | CAIRN_RING_REPAIR_READ_POS) != 0, "\(label)")
            }
            #expect(ring.append("after") == 0)
            #expect(ring.drain() == [Array("after".utf8)], "\(label): the ring works on")
        }
        // The repair was written: the header is sound by docs/FORMATS.md.
        let header = Array(FileManager.default.contents(atPath: path)?.prefix(4096) ?? Data())
        #expect(Array(header.prefix(8)) == Array("CAIRNRNG".utf8) && Self.u64(header, 16) == UInt64(Self.capacity))
        #expect(UInt32(truncatingIfNeeded: Self.u64(header, 36)) == Self.crc32c(Array(header[0..<36])))
        #expect(Self.u64(header, 136) == ~Self.u64(header, 128), "the read check")
        #expect(Self.setAsideFiles(dir).isEmpty)
    }

    @Test(arguments: [100, 4095, 4096, 4096 + 1000, 4096 + capacity / 3, 4096 + capacity / 2, 4096 + capacity - 1])
    func truncatedFileIsExtendedAndKeepsTheRecordsItStillHolds(size: Int) throws {
        let p = Self.pristine
        let dir = TempDir()
        let path = dir.file("r")
        _ = FileManager.default.createFile(atPath: path, contents: Data(p.bytes.prefix(size)))
        // The unconsumed records lying wholly in what remains.
        let offsets = RingRecoveryTests.recordOffsets(p.bytes)
        #expect(offsets.count == p.unconsumed.count)
        var kept = Set<Int>()
        for (k, off) in offsets.enumerated() where off + 16 + p.all[p.consumed + k].count <= size {
            kept.insert(p.consumed + k)
        }

        let ring = try CRing(path)
        let s = ring.stats
        #expect(s.origin == CAIRN_RING_REPAIRED.rawValue && s.repairs & CAIRN_RING_REPAIR_FILE_SIZE != 0)
        #expect(s.restored_bytes == UInt64(p.bytes.count - size))
        #expect(Self.fileSize(path) == p.bytes.count, "extended back to its size")
        Self.checkDelivered(ring.drain(), p, kept: kept, "truncated to \(size)")
        if size > 4096 + Self.capacity / 3 { #expect(!kept.isEmpty, "the case must keep records") }
        #expect(ring.append("after") == 0)
        #expect(ring.drain() == [Array("after".utf8)])
    }

    @Test(arguments: [1, 17, 4096])
    func longerFileIsCutAndKeepsEveryRecord(extra: Int) throws {
        let p = Self.pristine
        let dir = TempDir()
        let path = dir.file("r")
        var g = SplitMix(seed: UInt64(extra))
        _ = FileManager.default.createFile(atPath: path, contents: Data(p.bytes + (0..<extra).map { _ in UInt8.random(in: 0...255, using: &g) }))
        let ring = try CRing(path)
        let s = ring.stats
        #expect(s.origin == CAIRN_RING_REPAIRED.rawValue && s.repairs == CAIRN_RING_REPAIR_FILE_SIZE)
        #expect(s.cut_bytes == UInt64(extra) && s.repaired_fields == 0)
        #expect(Self.fileSize(path) == p.bytes.count)
        #expect(ring.drain() == Array(p.unconsumed))
    }

    /// A sparse copy of a sound ring (its all-zero pages left as holes, as `cp
    /// --sparse` or a restore may leave it) opens as it is, with every block allocated
    /// again, so a write through the mapping cannot fail for want of disk space.
    @Test func sparseFileIsAllocatedAgain() throws {
        let dir = TempDir()
        let records = (0..<20).map { i in Array("record \(i) ".utf8) + [UInt8](repeating: UInt8(i), count: 300) }
        do {
            let ring = try CRing(dir.file("original"))
            for r in records { try #require(ring.append(r) == 0) }
        }
        let bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: dir.file("original"))))
        let path = dir.file("r")
        let fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0o644)
        try #require(fd >= 0 && ftruncate(fd, off_t(bytes.count)) == 0)
        for page in stride(from: 0, to: bytes.count, by: 4096) {
            let chunk = bytes[page..<min(page + 4096, bytes.count)]
            if chunk.allSatisfy({ $0 == 0 }) { continue }
            _ = chunk.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, off_t(page)) }
        }
        close(fd)
        func allocatedBytes() -> Int {
            var st = stat()
            return stat(path, &st) == 0 ? Int(st.st_blocks) * 512 : -1
        }
        try #require(allocatedBytes() < bytes.count, "the copy has holes")
        let ring = try CRing(path)
        #expect(ring.stats.origin == CAIRN_RING_REOPENED.rawValue && ring.stats.repairs == 0)
        #expect(allocatedBytes() >= bytes.count)
        #expect(ring.drain() == records)
    }

    /// Both at once: no header, and the file cut in the middle of the data area.
    @Test func zeroedHeaderAndTruncatedFile() throws {
        let p = Self.pristine
        let dir = TempDir()
        let path = dir.file("r")
        let size = 4096 + Self.capacity * 3 / 4
        var bytes = Array(p.bytes.prefix(size))
        for i in 0..<4096 { bytes[i] = 0 }
        _ = FileManager.default.createFile(atPath: path, contents: Data(bytes))
        let offsets = RingRecoveryTests.recordOffsets(p.bytes)
        var kept = Set<Int>()
        for (k, off) in offsets.enumerated() where off + 16 + p.all[p.consumed + k].count <= size {
            kept.insert(p.consumed + k)
        }
        let ring = try CRing(path)
        let s = ring.stats
        #expect(s.origin == CAIRN_RING_REPAIRED.rawValue)
        #expect(s.repairs & CAIRN_RING_REPAIR_WINDOW_INFERRED != 0 && s.repairs & CAIRN_RING_REPAIR_FILE_SIZE != 0)
        #expect(!kept.isEmpty)
        Self.checkDelivered(ring.drain(), p, kept: kept, "zeroed and truncated")
    }

    /// A repaired file is a valid ring by docs/FORMATS.md: the Python reader, which
    /// shares no code with the core, reads it, and finds what the ring delivers.
    @Test func repairedFileReadsWithTheIndependentReader() throws {
        let p = Self.pristine
        let dir = TempDir()
        let path = dir.file("r")
        var bytes = p.bytes
        HeaderDamage.zeroed.apply(&bytes)
        _ = FileManager.default.createFile(atPath: path, contents: Data(bytes))
        do { _ = try CRing(path) } // repairs, delivers nothing
        let result = try run(["python3", repoRoot.path + "/Tests/Tools/read_ring.py", path])
        #expect(result.status == 0, "\(String(decoding: result.stderr, as: UTF8.self))")
        let lines = String(decoding: result.stdout, as: UTF8.self).split(separator: "\n").map { Array($0.utf8) }
        let ring = try CRing.reopen(path)
        let got = ring.drain()
        #expect(lines == got)
        Self.checkDelivered(got, p, "python")
    }

    /// Without the read cursor's check copy (a file of an older writer), open still
    /// works: the check is absent, not wrong.
    @Test func fileWithoutTheReadCheckOpensAsItIs() throws {
        let p = Self.pristine
        let dir = TempDir()
        let path = dir.file("r")
        var bytes = p.bytes
        Self.put64(&bytes, 136, 0)
        _ = FileManager.default.createFile(atPath: path, contents: Data(bytes))
        let ring = try CRing(path)
        #expect(ring.stats.origin == CAIRN_RING_REOPENED.rawValue && ring.stats.repairs == 0)
        #expect(ring.drain() == Array(p.unconsumed))
        // The check is written from now on.
        #expect(Self.u64(Array(FileManager.default.contents(atPath: path) ?? Data()), 136) == ~cairn_ring_read_pos(ring.handle))
    }

    static func fileSize(_ path: String) -> Int {
        ((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? Int) ?? -1
    }

    static func setAsideFiles(_ dir: TempDir) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: dir.path)) ?? []).filter { $0.contains(".corrupt-") }
    }
}
