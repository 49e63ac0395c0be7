import CairnTestSupport
import CCairnCore
import Foundation
import Testing

extension RingCoreTests {
    /// The drop table in the ring header: named counters, claimed and counted without a
    /// lock from any thread, that outlive the process and survive any damage to the
    /// table. (The SIGKILL test is in RingKillTests.)
    @Suite struct DropTable {
        struct Entry: Equatable { let reason: String; let slot: Int32; let counted: UInt64; let reported: UInt64 }

        static func table(_ ring: CRing) -> [Entry] {
            var raw = [cairn_ring_drop_t](repeating: cairn_ring_drop_t(), count: Int(CAIRN_RING_DROP_SLOTS))
            let used = cairn_ring_read_drops(ring.handle, &raw, raw.count)
            return raw.prefix(Int(max(used, 0))).map { d in
                let reason = withUnsafeBytes(of: d.reason) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
                return Entry(reason: reason, slot: d.slot, counted: d.counted, reported: d.reported)
            }
        }

        static func slot(_ ring: CRing, _ reason: String) -> Int32 {
            cairn_ring_drop_slot(ring.handle, reason, reason.utf8.count)
        }

        @Test func claimCountReportAndReopen() throws {
            let dir = TempDir()
            let path = dir.file("r")
            do {
                let ring = try CRing(path)
                #expect(Self.table(ring).isEmpty, "a fresh ring has an empty table")
                let sampled = Self.slot(ring, "sampled"), filtered = Self.slot(ring, "filtered")
                #expect(sampled >= 0 && filtered >= 0 && sampled != filtered)
                #expect(Self.slot(ring, "sampled") == sampled, "the same reason, the same slot")
                #expect(cairn_ring_count_drops(ring.handle, sampled, 5) == 0)
                #expect(cairn_ring_count_drops(ring.handle, filtered, 1) == 0)
                #expect(cairn_ring_mark_reported(ring.handle, sampled, 3) == 0)
                #expect(cairn_ring_mark_reported(ring.handle, sampled, 2) == 0, "lower: ignored, not an error")
                #expect(cairn_ring_mark_reported(ring.handle, sampled, 6) == CAIRN_EINVAL, "more than counted")
                #expect(Self.table(ring) == [Entry(reason: "sampled", slot: sampled, counted: 5, reported: 3),
                                             Entry(reason: "filtered", slot: filtered, counted: 1, reported: 0)])
            }
            let ring = try CRing.reopen(path)
            #expect(ring.stats.drop_slots_repaired == 0)
            #expect(Self.table(ring).map(\.counted) == [5, 1] && Self.table(ring).map(\.reported) == [3, 0])
            #expect(Self.slot(ring, "filtered") == Self.table(ring)[1].slot)
            // What earlier opens counted, and what this one counts after it.
            #expect(cairn_ring_count_drops(ring.handle, Self.slot(ring, "filtered"), 2) == 0)
            #expect(Self.slot(ring, "deduplicated") >= 0)
            #expect(cairn_ring_count_drops(ring.handle, Self.slot(ring, "deduplicated"), 4) == 0)
            #expect(Self.countedAtOpen(ring) == ["sampled": 5, "filtered": 1, "deduplicated": 0])
        }

        static func countedAtOpen(_ ring: CRing) -> [String: UInt64] {
            var raw = [cairn_ring_drop_t](repeating: cairn_ring_drop_t(), count: Int(CAIRN_RING_DROP_SLOTS))
            let used = cairn_ring_read_drops(ring.handle, &raw, raw.count)
            return Dictionary(uniqueKeysWithValues: raw.prefix(Int(max(used, 0))).map { d in
                (withUnsafeBytes(of: d.reason) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }, d.counted_at_open)
            })
        }

        @Test func invalidReasonsAndSlotsAreRefused() throws {
            let dir = TempDir()
            let ring = try CRing(dir.file("r"))
            for bad in ["", "Sampled", "a-b", "with space", "é", String(repeating: "x", count: 24)] {
                #expect(Self.slot(ring, bad) == CAIRN_EINVAL, "\(bad)")
            }
            #expect(cairn_ring_drop_slot(ring.handle, nil, 3) == CAIRN_EINVAL)
            #expect(cairn_ring_drop_slot(nil, "x", 1) == CAIRN_EINVAL)
            #expect(Self.slot(ring, String(repeating: "x", count: 23)) >= 0, "23 bytes is the longest")
            for slot: Int32 in [-1, 5, CAIRN_RING_DROP_SLOTS] {
                #expect(cairn_ring_count_drops(ring.handle, slot, 1) == CAIRN_EINVAL, "unclaimed or out of range: \(slot)")
                #expect(cairn_ring_mark_reported(ring.handle, slot, 0) == CAIRN_EINVAL)
            }
            #expect(cairn_ring_read_drops(ring.handle, nil, 4) == CAIRN_EINVAL)
            #expect(cairn_ring_read_drops(ring.handle, nil, 0) == 1, "counting without copying")
        }

        @Test func aFullTableCountsIntoOther() throws {
            let dir = TempDir()
            let ring = try CRing(dir.file("r"))
            let slots = (0..<Int(CAIRN_RING_DROP_OTHER)).map { Self.slot(ring, "reason_\($0)") }
            #expect(Set(slots) == Set(0..<CAIRN_RING_DROP_OTHER), "each reason its own slot")
            #expect(Self.slot(ring, "one_too_many") == CAIRN_RING_DROP_OTHER)
            #expect(Self.slot(ring, "another") == CAIRN_RING_DROP_OTHER)
            #expect(Self.slot(ring, "other") == CAIRN_RING_DROP_OTHER)
            #expect(cairn_ring_count_drops(ring.handle, CAIRN_RING_DROP_OTHER, 2) == 0)
            #expect(Self.slot(ring, "reason_7") == slots[7], "known reasons still find their slot")
            let table = Self.table(ring)
            #expect(table.count == Int(CAIRN_RING_DROP_SLOTS))
            #expect(table.last.map { $0 == Entry(reason: "other", slot: CAIRN_RING_DROP_OTHER, counted: 2, reported: 0) } ?? false)
        }

        /// The ring's own refusals are counted persistently as well as per open.
        @Test func ringRefusalsAreCountedPersistently() throws {
            let dir = TempDir()
            let path = dir.file("r")
            do {
                let ring = try CRing(path, maxRecord: 100)
                #expect(ring.append([UInt8](repeating: 1, count: 101)) == CAIRN_ETOOBIG)
                while ring.append([UInt8](repeating: 2, count: 100)) == 0 {}
                #expect(ring.append([UInt8](repeating: 2, count: 100)) == CAIRN_EFULL)
                #expect(ring.stats.dropped_full == 2 && ring.stats.dropped_too_big == 1)
                let table = Dictionary(uniqueKeysWithValues: Self.table(ring).map { ($0.reason, $0.counted) })
                #expect(table == ["ring_too_big": 1, "ring_full": 2])
            }
            let ring = try CRing.reopen(path, maxRecord: 100)
            #expect(ring.stats.dropped_full == 0, "the stats count this open")
            #expect(ring.append([UInt8](repeating: 3, count: 101)) == CAIRN_ETOOBIG)
            let table = Dictionary(uniqueKeysWithValues: Self.table(ring).map { ($0.reason, $0.counted) })
            #expect(table == ["ring_too_big": 2, "ring_full": 2], "the table counts since the file was created")
        }

        @Test func concurrentCountsAddUpExactly() throws {
            let dir = TempDir()
            let ring = try CRing(dir.file("r"))
            let threads = 8, perThread = 100_000
            let shared = Self.slot(ring, "shared")
            let own = (0..<threads).map { Self.slot(ring, "t\($0)") }
            let handle = Unchecked(ring.handle)
            DispatchQueue.concurrentPerform(iterations: threads) { t in
                for i in 0..<perThread {
                    _ = cairn_ring_count_drops(handle.value, shared, 1)
                    _ = cairn_ring_count_drops(handle.value, own[t], UInt64(i % 3))
                }
            }
            let table = Dictionary(uniqueKeysWithValues: Self.table(ring).map { ($0.reason, $0.counted) })
            #expect(table["shared", default: 0] == UInt64(threads * perThread))
            let perOwn = UInt64((0..<perThread).reduce(0) { $0 + $1 % 3 })
            for t in 0..<threads { #expect(table["t\(t)", default: 0] == perOwn) }
        }

        /// Many threads claim the same reasons at once, each in its own order: every
        /// thread gets the same slot for a reason, and no reason gets two.
        @Test func racingClaimsGiveEachReasonOneSlot() throws {
            for round in 0..<20 {
                let dir = TempDir()
                let ring = try CRing(dir.file("r"))
                let threads = 12, reasons = 40
                let handle = Unchecked(ring.handle)
                let got = UnsafeMutablePointer<Int32>.allocate(capacity: threads * reasons)
                got.initialize(repeating: -100, count: threads * reasons)
                defer { got.deallocate() }
                let out = Unchecked(got)
                DispatchQueue.concurrentPerform(iterations: threads) { t in
                    for k in 0..<reasons {
                        // A different order per thread: rotated, and reversed for odd ones.
                        let r = ((t % 2 == 0 ? k : reasons - 1 - k) + t * 7 + round) % reasons
                        let name = "reason_\(r)"
                        out.value[t * reasons + r] = cairn_ring_drop_slot(handle.value, name, name.utf8.count)
                    }
                }
                for r in 0..<reasons {
                    let slots = Set((0..<threads).map { got[$0 * reasons + r] })
                    #expect(slots.count == 1 && slots.first.map { $0 >= 0 } == true, "round \(round) reason_\(r): \(slots)")
                }
                let table = Self.table(ring)
                #expect(table.count == reasons, "round \(round): one slot per reason")
                #expect(Set(table.map(\.reason)).count == reasons)
            }
        }

        /// Slot layout, from docs/FORMATS.md: 64 slots of 48 bytes from header offset
        /// 1024: counted, reported, claim word (state, length, CRC32C of the name), name.
        static func slotOffset(_ i: Int) -> Int { 1024 + 48 * i }
        static func writeSlot(_ b: inout [UInt8], _ i: Int, name: String, state: UInt64, counted: UInt64,
                              reported: UInt64, nameBytes: Int? = nil) {
            let o = slotOffset(i), utf8 = Array(name.utf8)
            RingRepairTests.put64(&b, o, counted)
            RingRepairTests.put64(&b, o + 8, reported)
            RingRepairTests.put64(&b, o + 16, UInt64(RingRepairTests.crc32c(utf8)) << 32 | UInt64(utf8.count) << 8 | state)
            for k in 0..<24 { b[o + 24 + k] = k < (nameBytes ?? utf8.count) && k < utf8.count ? utf8[k] : 0 }
        }

        /// Every way a slot can be left wrong, as open finds it: each is put right,
        /// counts kept, and the table is then sound.
        @Test func damagedTableIsRepairedAtOpen() throws {
            let dir = TempDir()
            let path = dir.file("r")
            do { _ = try CRing(path) }
            var b = Array(FileManager.default.contents(atPath: path) ?? Data())
            // 0: sound. 1: claimed, name complete, process killed before NAMED.
            Self.writeSlot(&b, 0, name: "sampled", state: 2, counted: 10, reported: 4)
            Self.writeSlot(&b, 1, name: "filtered", state: 1, counted: 0, reported: 0)
            // 2: claimed, name half written: counts kept as `unknown`. 3: same, no counts.
            Self.writeSlot(&b, 2, name: "overload_sampled", state: 1, counted: 7, reported: 0, nameBytes: 5)
            Self.writeSlot(&b, 3, name: "rejected_400", state: 1, counted: 0, reported: 0, nameBytes: 3)
            // 4: reported beyond counted. 5: a duplicate of 0. 6: `other` outside its slot.
            Self.writeSlot(&b, 4, name: "ring_full", state: 2, counted: 3, reported: 9)
            Self.writeSlot(&b, 5, name: "sampled", state: 2, counted: 5, reported: 1)
            Self.writeSlot(&b, 6, name: "other", state: 2, counted: 2, reported: 0)
            // 7: a bad name byte. 8: counts in a free slot. 9: an unknown state.
            Self.writeSlot(&b, 7, name: "Bad", state: 2, counted: 1, reported: 0)
            RingRepairTests.put64(&b, Self.slotOffset(8), 11)
            Self.writeSlot(&b, 9, name: "x", state: 7, counted: 0, reported: 0)
            // 63, the catch-all, named something else.
            Self.writeSlot(&b, 63, name: "misc", state: 2, counted: 4, reported: 0)
            _ = FileManager.default.createFile(atPath: path, contents: Data(b))

            let table: [Entry]
            do {
                let ring = try CRing(path)
                #expect(ring.stats.origin == CAIRN_RING_REOPENED.rawValue, "the table never fails open")
                #expect(ring.stats.drop_slots_repaired >= 9)
                table = Self.table(ring)
                let byName = Dictionary(grouping: table, by: \.reason)
                #expect(byName.values.allSatisfy { $0.count == 1 }, "one slot per name")
                let sampled = byName["sampled"]?.first
                #expect(sampled?.counted == 15 && sampled?.reported == 5, "duplicates merge")
                #expect((byName["filtered"]?.first?.slot ?? -1) == 1, "a complete claim is finished")
                #expect((byName["unknown"]?.first?.counted ?? 0) == 7 + 1 + 11, "counts without a name are kept")
                #expect(byName["ring_full"]?.first.map { $0.reported == $0.counted } ?? false, "reported clamped")
                let other = byName["other"]?.first
                #expect(other?.slot == CAIRN_RING_DROP_OTHER && other?.counted == 2 + 4)
                #expect(byName["rejected_400"] == nil && byName["misc"] == nil && byName["x"] == nil)
                #expect(Self.slot(ring, "filtered") == 1 && Self.slot(ring, "sampled") == 0)
            }
            // What open wrote is sound: the next open changes nothing.
            let ring = try CRing.reopen(path)
            #expect(ring.stats.drop_slots_repaired == 0 && Self.table(ring) == table)
            #expect(Self.slot(ring, "new_reason") == 3, "the first freed slot is claimed")
        }

        /// Random bytes in the table, 200 times: open succeeds, the records are intact,
        /// and the table it leaves is sound and stays so.
        @Test func garbageInTheTableNeverBreaksOpen() throws {
            let dir = TempDir()
            let path = dir.file("r")
            do {
                let ring = try CRing(path)
                for i in 0..<20 { ring.append("event \(i)") }
            }
            let pristine = Array(FileManager.default.contents(atPath: path) ?? Data())
            var g = SplitMix(seed: 31)
            for round in 0..<200 {
                var b = pristine
                let slots = Int.random(in: 1...64, using: &g)
                for _ in 0..<slots {
                    let o = Self.slotOffset(Int.random(in: 0..<64, using: &g))
                    switch Int.random(in: 0..<3, using: &g) {
                    case 0: for k in 0..<48 { b[o + k] = UInt8.random(in: 0...255, using: &g) }
                    case 1: b[o + Int.random(in: 0..<48, using: &g)] ^= UInt8.random(in: 1...255, using: &g)
                    default:
                        let name = ["sampled", "other", "unknown", "ring_full", "z"][Int.random(in: 0..<5, using: &g)]
                        Self.writeSlot(&b, (o - 1024) / 48, name: name, state: UInt64.random(in: 0...3, using: &g),
                                       counted: UInt64.random(in: 0...9, using: &g), reported: UInt64.random(in: 0...9, using: &g))
                    }
                }
                _ = FileManager.default.createFile(atPath: path, contents: Data(b))
                let ring = try CRing(path)
                #expect(ring.stats.origin == CAIRN_RING_REOPENED.rawValue, "round \(round)")
                #expect(ring.drain(commit: false).count == 20, "round \(round)")
                let table = Self.table(ring)
                #expect(Set(table.map(\.reason)).count == table.count, "round \(round): unique names")
                for e in table {
                    #expect(e.reported <= e.counted && !e.reason.isEmpty && e.reason.count <= 23)
                    #expect(e.reason.utf8.allSatisfy { ($0 >= 97 && $0 <= 122) || ($0 >= 48 && $0 <= 57) || $0 == 95 })
                    #expect((e.reason == "other") == (e.slot == CAIRN_RING_DROP_OTHER), "round \(round)")
                }
                #expect(Self.slot(ring, "after_damage") >= 0)
            }
        }

        /// A file written before the table existed has zeros there: an empty table.
        @Test func zerosAreAnEmptyTable() throws {
            let dir = TempDir()
            let path = dir.file("r")
            do {
                let ring = try CRing(path)
                _ = Self.slot(ring, "sampled")
            }
            var b = Array(FileManager.default.contents(atPath: path) ?? Data())
            for i in 1024..<4096 { b[i] = 0 }
            _ = FileManager.default.createFile(atPath: path, contents: Data(b))
            let ring = try CRing(path)
            #expect(ring.stats.origin == CAIRN_RING_REOPENED.rawValue && ring.stats.drop_slots_repaired == 0)
            #expect(Self.table(ring).isEmpty)
        }

        /// The table is readable by the Python reader of docs/FORMATS.md.
        @Test func pythonReaderReadsTheDropTable() throws {
            let dir = TempDir()
            let path = dir.file("r")
            do {
                let ring = try CRing(path)
                let a = Self.slot(ring, "sampled"), b = Self.slot(ring, "filtered")
                _ = cairn_ring_count_drops(ring.handle, a, 41)
                _ = cairn_ring_count_drops(ring.handle, b, 2)
                _ = cairn_ring_mark_reported(ring.handle, a, 40)
            }
            let result = try run(["python3", repoRoot.path + "/Tests/Tools/read_ring.py", "--drops", path])
            #expect(result.status == 0, "\(String(decoding: result.stderr, as: UTF8.self))")
            #expect(String(decoding: result.stdout, as: UTF8.self) == "sampled 41 40\nfiltered 2 0\n")
        }
    }
}
