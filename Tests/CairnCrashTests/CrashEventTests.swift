@testable import CairnCrash
import CairnProcessor
import CairnTestSupport
import Foundation
import Testing

/// Crash reports from a real crashed C process (`cairn-crash-child`), whole, cut short
/// and damaged, turned into `crash` events: every one is valid JSON, a cut report is
/// marked partial, and nothing traps.
@Suite struct CrashEventTests {
    /// A complete report of a SIGSEGV in `crash_here`, written by the real handler.
    static let report: [UInt8] = {
        guard let dir = try? PreviousRunTests.Dirs() else { return [] }
        try? FileManager.default.createDirectory(atPath: dir.crash, withIntermediateDirectories: true)
        let ended = try? PreviousRunTests.run([productsDirectory + "/cairn-crash-child", dir.crash, "segv"])
        guard ended?.signaled == true, let name = dir.files().first(where: { $0.hasSuffix(".report") }) else { return [] }
        return Array(FileManager.default.contents(atPath: dir.crash + "/" + name) ?? Data())
    }()

    /// Offsets where a section starts (after the 16-byte header), and the end.
    static func sectionBoundaries(_ bytes: [UInt8]) -> [Int] {
        var out: [Int] = [], at = 16
        while at + 8 <= bytes.count {
            out.append(at)
            let n = Int(bytes[at + 4]) | Int(bytes[at + 5]) << 8 | Int(bytes[at + 6]) << 16 | Int(bytes[at + 7]) << 24
            at += 8 + n
        }
        return out
    }

    static func event(_ bytes: [UInt8], symbolizer: Symbolizer) throws -> [String: Any] {
        let crash = CrashEvent.crash(report: CrashReport(bytes: bytes), rawBytes: bytes, start: nil, identity: nil,
                                     symbolizer: symbolizer, fallbackMillis: 1_700_000_000_000).event
        var changed = RuleCounts()
        let json = Processor().record(endedRun: crash.event, context: crash.context, counts: &changed)
        let object = try JSONSerialization.jsonObject(with: Data(json)) as? [String: Any]
        return try #require(object, "valid JSON object: \(String(decoding: json, as: UTF8.self))")
    }

    @Test func wholeReportIsCompleteAndSymbolicated() throws {
        #expect(!Self.report.isEmpty, "the crash child wrote a report")
        let e = try Self.event(Self.report, symbolizer: Symbolizer())
        let p = e["properties"] as? [String: Any] ?? [:]
        #expect(p["partial"] as? Bool == false && p["signal"] as? String == "SIGSEGV")
        let frames = p["frames"] as? [[String: Any]] ?? []
        #expect(frames.first?["symbol"] as? String == "crash_here", "\(frames.first ?? [:])")
        #expect((frames.first?["file"] as? String)?.hasSuffix("Tests/CrashChild/main.c") == true)
        #expect(frames.contains { $0["symbol"] as? String == "main" })
        #expect(frames.count >= 3 && (p["modules"] as? [Any])?.count ?? 0 >= 2)
        #expect((p["registers"] as? [String: Any])?.count ?? 0 >= 17)
        #expect((p["context"] as? [String: Any])?["mode"] as? String == "segv")
    }

    /// Cut at every section boundary and at 300 random bytes: a partial event that says
    /// so, keeping what was complete.
    @Test func truncatedReportsGivePartialEvents() throws {
        let full = Self.report
        #expect(full.count > 100)
        var cuts = Self.sectionBoundaries(full) + [0, 1, 8, 15, 16]
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<300 { cuts.append(Int.random(in: 0..<full.count, using: &rng)) }
        let symbolizer = Symbolizer()
        var withSignal = 0
        for cut in cuts {
            let e = try Self.event(Array(full.prefix(cut)), symbolizer: symbolizer)
            let p = e["properties"] as? [String: Any] ?? [:]
            #expect(p["partial"] as? Bool == true, "cut at \(cut) of \(full.count)")
            #expect(e["type"] as? String == "crash" && (p["reason"] as? String)?.isEmpty == false)
            if p["signal"] as? String == "SIGSEGV" { withSignal += 1 }
        }
        #expect(withSignal > cuts.count / 2, "most cuts keep the signal section")
    }

    /// Random damage (a fixed seed, 500 variants) and garbage: valid JSON every time.
    @Test func damagedReportsNeverTrap() throws {
        let full = Self.report
        #expect(!full.isEmpty)
        var state: UInt64 = 0x5EED
        func next() -> Int {
            state = state &* 6364136223846793005 &+ 1442695040888963407
            return Int(truncatingIfNeeded: state >> 33)
        }
        let symbolizer = Symbolizer()
        for _ in 0..<500 {
            var bytes = full
            for _ in 0..<(1 + next() % 8) { bytes[next() % bytes.count] = UInt8(truncatingIfNeeded: next()) }
            _ = try Self.event(bytes, symbolizer: symbolizer)
        }
        let garbage = try Self.event(Array("not a crash report at all".utf8), symbolizer: symbolizer)
        let p = garbage["properties"] as? [String: Any] ?? [:]
        #expect(p["partial"] as? Bool == true && p["unreadable"] != nil)
    }

    @Test func eventIDsAreTimeOrderedUUIDv7() {
        let a = uuidV7(millis: 1_700_000_000_000), b = uuidV7(millis: 1_700_000_000_001)
        #expect(a < b && a.count == 36)
        let chars = Array(a)
        #expect(chars[14] == "7" && "89ab".contains(chars[19]))
        #expect(rfc3339(millis: 1_700_000_000_123).text.contains(".123"))
    }
}
