// cairn: reads what Cairn keeps on disk, for operators and for services without an
// upload URL (whose events wait in the local store).
//
//   cairn events [<data dir>]     the stored events, one JSON object per line, oldest first
//   cairn status [<data dir>]     what waits on disk: stored requests, runs, crash reports
//   cairn report <crash report>   a raw crash report as a symbolicated crash event (JSON)
//
// <data dir> defaults to CAIRN_DATA_DIR, then `.cairn` (as Cairn.Options does).
import CairnCrash
import CairnStore
import Foundation

func fail(_ message: String, status: Int32 = 1) -> Never {
    FileHandle.standardError.write(Data("cairn: \(message)\n".utf8))
    exit(status)
}

func out(_ line: String) { FileHandle.standardOutput.write(Data((line + "\n").utf8)) }

let usage = """
    usage: cairn events [<data dir>]
           cairn status [<data dir>]
           cairn report <crash report file>
    """

let args = Array(CommandLine.arguments.dropFirst())
guard let command = args.first else { fail(usage, status: 2) }
let dataDir = args.count > 1 ? args[1] : (ProcessInfo.processInfo.environment["CAIRN_DATA_DIR"] ?? ".cairn")

/// Opens the snapshot store without creating one where there is none.
func openStore() -> SnapshotStore {
    let path = dataDir + "/store"
    guard FileManager.default.fileExists(atPath: path + "/data.mdb") else {
        fail("no snapshot store in \(dataDir) (is it a Cairn data directory?)")
    }
    do {
        return try SnapshotStore(directory: path)
    } catch {
        fail("cannot open \(path): \(error)")
    }
}

switch command {
case "events":
    let store = openStore()
    let decoder: FrameDecoder
    do { decoder = try FrameDecoder(maxContentSize: 256 << 20) } catch { fail("\(error)") }
    // The whole store (at most its size cap, 32 MiB by default), oldest first.
    let snapshots: [Snapshot]
    do { snapshots = try store.oldest(limit: Int.max) } catch { fail("reading the store: \(error)") }
    var count = 0
    for snapshot in snapshots {
        guard let records = try? decoder.decodeRecords(snapshot.request.body).records else {
            FileHandle.standardError.write(Data("cairn: snapshot \(snapshot.id) is not a batch; skipped\n".utf8))
            continue
        }
        for record in records {
            out(String(decoding: record, as: UTF8.self))
            count += 1
        }
    }
    FileHandle.standardError.write(Data("cairn: \(count) events\n".utf8))
case "status":
    let fm = FileManager.default
    let crashDir = dataDir + "/crash"
    let crashFiles = (try? fm.contentsOfDirectory(atPath: crashDir)) ?? []
    let store = openStore()
    let s = store.stats
    out("data directory: \(dataDir)")
    out("stored requests: \(s.count) (\(s.bytes) bytes); evicted by age \(s.evictedAge), by size "
        + "\(s.evictedSize.values.reduce(0, +))")
    if let ring = try? fm.attributesOfItem(atPath: dataDir + "/events.ring")[.size] as? Int {
        out("event ring: \(ring) bytes on disk")
    }
    out("run records: \(crashFiles.filter { $0.hasPrefix("run-") }.count) (this run's, live runs', and runs not yet reported)")
    let reports = crashFiles.filter { $0.hasSuffix(".report") }.sorted()
    out("crash reports waiting: \(reports.count)")
    for name in reports {
        let report = CrashReport(bytes: Array(fm.contents(atPath: crashDir + "/" + name) ?? Data()))
        let what = report.message ?? "signal \(report.signal)"
        out("  \(name): \(what)\(report.complete ? "" : " (partial)")")
    }
case "report":
    guard args.count == 2 else { fail(usage, status: 2) }
    guard let data = FileManager.default.contents(atPath: args[1]) else { fail("cannot read \(args[1])") }
    out(String(decoding: crashEventJSON(reportBytes: Array(data)), as: UTF8.self))
default:
    fail(usage, status: 2)
}
