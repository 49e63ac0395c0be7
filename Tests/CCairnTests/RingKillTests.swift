import CairnTestSupport
import CCairn
import Foundation
import Testing

/// A real child process (`cairn-ring-child`) appends to a ring from two reporting
/// producer threads and one silent thread of large records (so kills land inside
/// appends) while a consumer thread drains it, and is sent SIGKILL at a random moment.
/// The child reports every append that returned success, and every record it read
/// before committing it. After each kill the ring is reopened here and must hold every
/// reported append that the child had not consumed, invent nothing, and keep each
/// thread's order.
@Suite struct RingKillTests {
    /// Hands the reader thread's bytes to the test.
    final class Collected: @unchecked Sendable {
        private let done = DispatchSemaphore(value: 0)
        private var data = Data()
        func set(_ d: Data) { data = d; done.signal() }
        func wait() -> Data { done.wait(); return data }
    }

    struct Report { let kind: UInt8; let thread: Int; let seq: Int }

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

    @Test func sigkillAtRandomMomentsLosesNothingInventsNothing() throws {
        let dir = TempDir()
        let ringPath = dir.file("events.ring")
        let child = productsDirectory + "/cairn-ring-child"
        #expect(FileManager.default.isExecutableFile(atPath: child), "build the cairn-ring-child product first")
        var rng = SplitMix(seed: UInt64(Date().timeIntervalSince1970 * 1000))
        var totalRecovered = 0, totalTorn = 0, totalAppended = 0

        for run in 1...20 {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: child)
            p.arguments = [ringPath, String(run), "2", "1"]
            let out = Pipe(), err = Pipe()
            p.standardOutput = out
            p.standardError = err
            try p.run()

            // The first report means the ring is open (killing the child while it creates
            // the file is a different test: the set-aside one). Then read the reports as
            // they come, so the child never blocks on a full pipe.
            let fh = out.fileHandleForReading
            let first = fh.readData(ofLength: 16)
            let collected = Collected()
            let reader = Thread { collected.set(fh.readDataToEndOfFile()) }
            reader.start()
            usleep(UInt32.random(in: 2_000...150_000, using: &rng))
            kill(p.processIdentifier, SIGKILL)
            p.waitUntilExit()
            let data = first + collected.wait()
            let childErr = String(decoding: err.fileHandleForReading.readDataToEndOfFile().prefix(2000), as: UTF8.self)
            #expect(p.terminationReason == .uncaughtSignal && p.terminationStatus == SIGKILL,
                    "run \(run): the child must die of the SIGKILL, not exit on its own (status \(p.terminationStatus)): \(childErr)")

            var appended = [Set<Int>](repeating: [], count: 2)
            var consumed = [Set<Int>](repeating: [], count: 2)
            var i = 0
            while i + 16 <= data.count {
                let kind = data[data.startIndex + i]
                let t = Int(data[data.startIndex + i + 4])
                var seq = 0
                for b in 0..<8 { seq |= Int(data[data.startIndex + i + 8 + b]) << (8 * b) }
                if kind == UInt8(ascii: "A") { appended[t].insert(seq) }
                if kind == UInt8(ascii: "C") { consumed[t].insert(seq) }
                i += 16
            }
            #expect(i == data.count, "reports are whole 16-byte messages")

            let ring = try CRing(ringPath, capacity: UInt64(CAIRN_RING_MIN_CAPACITY))
            let stats = ring.stats
            #expect(stats.origin == CAIRN_RING_REOPENED.rawValue)
            let records = ring.drain()
            #expect(Int(stats.recovered) == records.count)
            totalRecovered += records.count
            totalTorn += Int(stats.skipped_corrupt)

            var recovered = [[Int]](repeating: [], count: 3)
            var invented = 0
            for rec in records {
                guard let (r, t, s) = Self.parse(rec), r == run, t < 3,
                      rec == Self.expectedRecord(run: r, thread: t, seq: s) else {
                    invented += 1
                    continue
                }
                recovered[t].append(s)
            }
            #expect(invented == 0, "run \(run): every recovered record is one the child wrote")
            #expect(recovered[2] == recovered[2].sorted(), "run \(run) silent thread: order")
            for t in 0..<2 {
                totalAppended += appended[t].count
                // Order: each thread's records come back in increasing order.
                #expect(recovered[t] == recovered[t].sorted(), "run \(run) thread \(t): order")
                #expect(Set(recovered[t]).count == recovered[t].count, "run \(run) thread \(t): no duplicates")
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
        #expect(totalAppended > 20 * 50, "the children must have appended for real")
        #expect(totalRecovered > 0, "kills must leave unconsumed records to recover")
        print("ring kill test: \(totalAppended) acknowledged appends, \(totalRecovered) recovered, \(totalTorn) torn regions skipped over 20 kills")
    }
}
