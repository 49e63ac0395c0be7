import CairnTestSupport
import CairnStore
import CairnUploader
import Foundation
import Testing

/// `kill -9` of a tracking and uploading child process at random moments, 50 times,
/// while the collector randomly fails, stalls or drops connections. Then a last child
/// drains what is left. Every event whose append was acknowledged to the child must
/// have arrived at least once; a duplicate is the same event (same id, same bytes);
/// nothing arrives that no child wrote.
@Suite struct UploadKillTests {
    @Test func sigkillFiftyTimesWithAFlakyCollectorLosesNothing() throws {
        let collector = try CollectorProcess()
        let scratch = try TemporaryDirectory("cairn-kill")
        let dir = scratch.path
        let child = productsDirectory + "/cairn-upload-child"
        let url = collector.baseURL + "/v1/batch"
        var rng = SystemRandomNumberGenerator()
        let flaky: [[String: Any]] = [["status": 200], ["status": 500], ["status": 503, "retry_after": "0"],
                                      ["drop": true], ["stall": 0.3], ["status": 200], ["status": 200]]
        var acknowledged = Set<String>()
        for run in 1...50 {
            try collector.script((0..<8).map { _ in flaky.randomElement(using: &rng) ?? ["status": 200] })
            let p = try ChildProcess(child, [dir, url, "r\(run)", "track"])
            p.keepReading(for: Double(Int.random(in: 50...400, using: &rng)) / 1000)
            p.signal(SIGKILL)
            let ended = p.finish(timeout: 60)
            #expect(ended.signaled, "run \(run) ended on its own: \(ended.err)")
            for line in ended.out.split(separator: "\n") where line.hasPrefix("A ") {
                acknowledged.insert(String(line.dropFirst(2)))
            }
        }
        #expect(acknowledged.count > 50 * 20, "the children must have tracked for real")

        // The collector recovers; a last process drains the ring and the store.
        try collector.script([])
        try collector.setDefault(["status": 200])
        let drain = try runToEnd(child, [dir, url, "drain", "drain"])
        #expect(drain.status == 0 && !drain.signaled && drain.out.contains("DRAINED"), "\(drain.err)")

        var delivered: [String: String] = [:]
        var conflicting = 0, invented = 0
        for event in try collector.events() {
            guard let object = try? JSONSerialization.jsonObject(with: Data(event.record.utf8)) as? [String: Any],
                  let id = object["event_id"] as? String else {
                invented += 1
                continue
            }
            if let earlier = delivered[id], earlier != event.record { conflicting += 1 }
            delivered[id] = event.record
        }
        let lost = acknowledged.subtracting(delivered.keys)
        #expect(invented == 0)
        #expect(conflicting == 0, "a duplicate must be the same event")
        #expect(lost.isEmpty, "\(lost.count) acknowledged events never arrived, e.g. \(lost.sorted().prefix(5))")
        let unknown = Set(delivered.keys).filter { id in
            guard let dash = id.lastIndex(of: "-"), id.hasPrefix("r"), Int(id[id.index(after: dash)...]) != nil
            else { return true }
            return false
        }
        #expect(unknown.isEmpty, "events no child wrote: \(unknown.prefix(5))")
        print("upload kill test: \(acknowledged.count) acknowledged events, \(delivered.count) distinct delivered over 50 kills")
    }
}
