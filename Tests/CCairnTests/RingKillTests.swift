import CairnTestSupport
import CCairnCore
import Foundation
import Testing

/// A real child process (`cairn-ring-child`) works on a ring and is sent SIGKILL at a
/// random moment; the ring is then reopened here and checked against what the child
/// reported before it died.
///
/// In the record tests, two reporting producer threads and one silent thread of large
/// records (so kills land inside appends) append while a consumer thread drains. The
/// child reports every append that returned success, and every record it read before
/// committing it. After each kill the ring must hold every reported append that the
/// child had not consumed, invent nothing, and keep each thread's order. In the drop
/// test, threads count drops and report their totals: the counts must survive.
@Suite struct RingKillTests {
    /// One 16-byte report: a kind letter, a 32-bit field (thread or slot), a 64-bit one.
    struct Report { let kind: UInt8; let a: Int; let b: Int }

    /// Must match `make_record` in Tests/RingChild/main.c.
    static func expectedRecord(run: Int, thread: Int, seq: Int) -> [UInt8] {
        let fill = (seq * 37 + thread * 11) % (thread < 2 ? 300 : 4000)
        var s = Array(#"{"r":\#(run),"t":\#(thread),"s":\#(seq),"x":""#.utf8)
        for i in 0..<fill { s.append(UInt8(ascii: "a") + UInt8((seq + i) % 26)) }
        s += Array(#""}"#.utf8)
        return s
    }

    static func parse(_ record: [UInt8]) -> (run: Int, thread: Int, seq: Int)? {
        let text = String(decoding: record.prefix(80), as: UTF8.self)
        let scanner = Scanner(string: text)
        guard scanner.scanString(#"{"r":"#) != nil, let r = scanner.scanInt(),
              scanner.scanString(#","t":"#) != nil, let t = scanner.scanInt(),
              scanner.scanString(#","s":"#) != nil, let s = scanner.scanInt() else { return nil }
        return (r, t, s)
    }

    /// Runs the child with `arguments`, kills it with SIGKILL at a random moment after
    /// its first report (`killWithin` microseconds), and returns its reports.
    static func runAndKill(_ arguments: [String], rng: inout SplitMix, label: String,
                           killWithin: ClosedRange<UInt32> = 2_000...150_000) throws -> [Report] {
        let child = productsDirectory + "/cairn-ring-child"
        #expect(FileManager.default.isExecutableFile(atPath: child), "build the cairn-ring-child product first")
        let p = try ChildProcess(child, arguments)

        // The first report means the ring is open (killing the child while it creates
        // the file is a different test: the set-aside one). Then the reports are read as
        // they come, so the child never blocks on a full pipe.
        p.waitForStdout(timeout: 60) { $0.count >= 16 }
        p.keepReading(for: Double(UInt32.random(in: killWithin, using: &rng)) / 1_000_000)
        p.signal(SIGKILL)
        let ended = p.finish(timeout: 60)
        let data = ended.stdout
        let childErr = String(ended.err.prefix(2000))
        #expect(ended.signaled && ended.status == SIGKILL,
                "\(label): the child must die of the SIGKILL, not exit on its own (status \(ended.status)): \(childErr)")
        #expect(data.count % 16 == 0, "\(label): reports are whole 16-byte messages")
        return stride(from: 0, to: data.count - data.count % 16, by: 16).map { i in
            let base = data.startIndex + i
            var a = 0, b = 0
            for k in 0..<4 { a |= Int(data[base + 4 + k]) << (8 * k) }
            for k in 0..<8 { b |= Int(data[base + 8 + k]) << (8 * k) }
            return Report(kind: data[base], a: a, b: b)
        }
    }

    /// Totals of the record tests, over all runs.
    struct Totals { var appended = 0, recovered = 0, torn = 0, duplicates = 0 }

    /// One record-test run: the child appends and consumes until killed; `damage` may
    /// then spoil the file before it is reopened. Returns what was appended, recovered
    /// and skipped. With `consumedMayReturn` (the read cursor was lost with the
    /// header), records the child had consumed may come back, once each, in order.
    static func killAndRecover(run: Int, ringPath: String, rng: inout SplitMix, totals: inout Totals,
                               consumedMayReturn: Bool = false, killWithin: ClosedRange<UInt32> = 2_000...150_000,
                               damage: (inout [UInt8]) -> Void = { _ in }) throws {
        let reports = try runAndKill([ringPath, String(run), "2", "1"], rng: &rng, label: "run \(run)",
                                     killWithin: killWithin)
        var appended = [Set<Int>](repeating: [], count: 2)
        var consumed = [Set<Int>](repeating: [], count: 2)
        for r in reports where r.a < 2 {
            if r.kind == UInt8(ascii: "A") { appended[r.a].insert(r.b) }
            if r.kind == UInt8(ascii: "C") { consumed[r.a].insert(r.b) }
        }
        var bytes = Array(FileManager.default.contents(atPath: ringPath) ?? Data())
        damage(&bytes)
        _ = FileManager.default.createFile(atPath: ringPath, contents: Data(bytes))

        let ring = try CRing.reopen(ringPath)
        let stats = ring.stats
        if consumedMayReturn {
            #expect(stats.origin == CAIRN_RING_REPAIRED.rawValue, "run \(run)")
        } else {
            // A consumer killed between storing the read cursor's check copy and the
            // cursor itself leaves them apart: the one repair a kill can cause.
            #expect(stats.origin == CAIRN_RING_REOPENED.rawValue ||
                    (stats.origin == CAIRN_RING_REPAIRED.rawValue && stats.repairs == CAIRN_RING_REPAIR_READ_POS),
                    "run \(run): origin \(stats.origin), repairs \(stats.repairs)")
        }
        let records = ring.drain()
        #expect(Int(stats.recovered) == records.count)
        totals.recovered += records.count
        totals.torn += Int(stats.skipped_corrupt)

        var recovered = [[Int]](repeating: [], count: 3)
        var invented = 0
        // With the read cursor lost, the window is rebuilt as the capacity below the
        // newest record: when this run's child was killed before it wrote a whole lap,
        // records of earlier runs (consumed then) are in it and come back, intact and
        // before all of this run's. Anything else is invented.
        var earlier = 0, lastEarlier = -1, firstCurrent = records.count
        for (index, rec) in records.enumerated() {
            guard let (r, t, s) = parse(rec), r <= run, t < 3,
                  rec == expectedRecord(run: r, thread: t, seq: s) else {
                invented += 1
                continue
            }
            if r < run {
                earlier += 1
                lastEarlier = index
                continue
            }
            firstCurrent = min(firstCurrent, index)
            recovered[t].append(s)
        }
        #expect(invented == 0, "run \(run): every recovered record is one a child wrote")
        #expect(earlier == 0 || consumedMayReturn, "run \(run): \(earlier) records of earlier runs came back")
        #expect(lastEarlier < firstCurrent, "run \(run): records of earlier runs come back before this run's")
        totals.duplicates += earlier
        #expect(recovered[2] == recovered[2].sorted(), "run \(run) silent thread: order")
        for t in 0..<2 {
            totals.appended += appended[t].count
            // Order: each thread's records come back in increasing order, once each.
            #expect(recovered[t] == recovered[t].sorted(), "run \(run) thread \(t): order")
            #expect(Set(recovered[t]).count == recovered[t].count, "run \(run) thread \(t): no duplicates")
            // The child reports a record as consumed before committing it, so a kill
            // can bring a few back in any run; with the read cursor lost, many.
            totals.duplicates += consumed[t].intersection(recovered[t]).count
            // Nothing lost: every acknowledged append was consumed or recovered.
            let lost = appended[t].subtracting(consumed[t]).subtracting(recovered[t])
            #expect(lost.isEmpty, "run \(run) thread \(t): lost \(lost.sorted().prefix(10))")
            // No gap: what was consumed or recovered is one unbroken run from 0.
            let all = consumed[t].union(recovered[t])
            if let maxSeq = all.max() {
                #expect(all.count == maxSeq + 1, "run \(run) thread \(t): a gap in 0...\(maxSeq)")
            }
        }
    }

    @Test func sigkillAtRandomMomentsLosesNothingInventsNothing() throws {
        let dir = TempDir()
        let ringPath = dir.file("events.ring")
        var rng = SplitMix(seed: UInt64(Date().timeIntervalSince1970 * 1000))
        var totals = Totals()
        for run in 1...20 {
            try Self.killAndRecover(run: run, ringPath: ringPath, rng: &rng, totals: &totals)
        }
        #expect(totals.appended > 20 * 50, "the children must have appended for real")
        #expect(totals.recovered > 0, "kills must leave unconsumed records to recover")
        print("ring kill test: \(totals.appended) acknowledged appends, \(totals.recovered) recovered, \(totals.torn) torn regions skipped over 20 kills")
    }

    /// The same, and then the header is zeroed (its salt and both cursors gone) before
    /// the ring is reopened: the records, torn ones and all, still say where the window
    /// is. The read cursor is lost, so consumed records may come back, once each: this
    /// run's, and after an early kill those of earlier runs still within the last lap.
    @Test func sigkillThenAZeroedHeaderLosesNothingInventsNothing() throws {
        let dir = TempDir()
        let ringPath = dir.file("events.ring")
        var rng = SplitMix(seed: UInt64(Date().timeIntervalSince1970 * 1000) ^ 0x5A5A)
        var totals = Totals()
        for run in 1...8 {
            // Every other child is killed within 1.5 ms, before it writes a whole lap.
            try Self.killAndRecover(run: run, ringPath: ringPath, rng: &rng, totals: &totals, consumedMayReturn: true,
                                    killWithin: run % 2 == 0 ? 0...1_500 : 2_000...150_000) { bytes in
                for i in 0..<min(bytes.count, 4096) { bytes[i] = 0 }
            }
        }
        #expect(totals.appended > 8 * 50, "the children must have appended for real")
        print("ring kill test, zeroed header: \(totals.appended) acknowledged appends, \(totals.recovered) recovered (\(totals.duplicates) consumed ones again)")
    }

    /// Threads count drops into the drop table and race to claim the same reasons
    /// until the child is killed: every count a thread had reported is in the file,
    /// and every reason has exactly one slot, in every run.
    @Test func dropCountsSurviveSigkill() throws {
        let dir = TempDir()
        let ringPath = dir.file("events.ring")
        var rng = SplitMix(seed: UInt64(Date().timeIntervalSince1970 * 1000) ^ 0xD7)
        let threads = 4
        var confirmedSum = [Int](repeating: 0, count: threads)
        var claimed: [Int: Set<Int>] = [:] // reason c<n> -> the slots threads got, over all runs
        for run in 1...6 {
            let reports = try Self.runAndKill([ringPath, "drops", String(threads)], rng: &rng, label: "run \(run)")
            var confirmed = [Int](repeating: 0, count: threads)
            for r in reports {
                if r.kind == UInt8(ascii: "D"), r.a < threads { confirmed[r.a] = max(confirmed[r.a], r.b) }
                if r.kind == UInt8(ascii: "N") { claimed[r.b, default: []].insert(r.a) }
            }
            for (c, slots) in claimed { #expect(slots.count == 1, "run \(run): c\(c) got slots \(slots.sorted())") }

            let ring = try CRing.reopen(ringPath)
            var table = [cairn_ring_drop_t](repeating: cairn_ring_drop_t(), count: Int(CAIRN_RING_DROP_SLOTS))
            let used = cairn_ring_read_drops(ring.handle, &table, table.count)
            #expect(used > 0)
            var counted: [String: UInt64] = [:]
            for d in table.prefix(Int(max(used, 0))) {
                let name = withUnsafeBytes(of: d.reason) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
                #expect(!counted.keys.contains(name), "run \(run): \(name) has two slots")
                counted[name] = d.counted
            }
            // Counts are cumulative over the runs. A thread reports every 64 counts, so
            // at most 64 per run can be counted and not yet reported.
            for t in 0..<threads {
                confirmedSum[t] += confirmed[t]
                let have = counted["t\(t)", default: 0]
                #expect(have >= UInt64(confirmedSum[t]) && have <= UInt64(confirmedSum[t] + 64 * run),
                        "run \(run) thread \(t): counted \(have), confirmed \(confirmedSum[t])")
            }
            let all = confirmedSum.reduce(0, +)
            let shared = counted["shared", default: 0]
            #expect(shared >= UInt64(all) && shared <= UInt64(all + 64 * threads * run), "run \(run): shared \(shared) vs \(all)")
        }
        #expect(confirmedSum.reduce(0, +) > 6 * 64, "the children must have counted for real")
    }
}
