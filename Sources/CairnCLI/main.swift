// cairn: reads what Cairn keeps on disk, for operators and for services without an
// upload URL (whose events wait in the local store).
//
//   cairn events [<data dir>]     the stored events, one JSON object per line, oldest first
//   cairn status [<data dir>]     what waits on disk: stored requests, runs, crash reports
//   cairn report [--json] <crash report>
//                                 a raw crash report, symbolicated: readable (the reason,
//                                 where it crashed, then the frames), or the crash event (JSON)
//   cairn --help                  this usage
//
// <data dir> defaults to CAIRN_DATA_DIR, then `.cairn` (as Cairn.Options does).
//
// `events` and `status` only read: the store is read with SnapshotStore.inspect, which
// writes nothing (no lock file, no rename, no repair), works on a read-only directory
// and beside a running service. They print what is intact; damage goes to stderr.
//
// Exit status:
//   0  done
//   1  another error (a crash report that cannot be read, an output error)
//   2  usage
//   3  no snapshot store in the data directory (no store/ or no store/data.mdb)
//   4  the store cannot be read (permissions or another I/O error; the errno text is quoted)
//   5  the store is damaged: what is intact was printed, what is wrong is on stderr
import CairnBase
import CairnProcessor
import CairnCrash
import CairnStore
import CairnUploader
import Foundation

func fail(_ message: String, status: Int32 = 1) -> Never {
    FileHandle.standardError.write(Data("cairn: \(message)\n".utf8))
    exit(status)
}

func out(_ line: String) { FileHandle.standardOutput.write(Data((line + "\n").utf8)) }

let usage = """
    usage: cairn events [<data dir>]      the stored events, one JSON object per line
           cairn status [<data dir>]      what waits on disk
           cairn report [--json] <crash report file>
                                          a crash report, symbolicated, for people (or as JSON)
    <data dir> defaults to CAIRN_DATA_DIR, then .cairn
    """

let args = Array(CommandLine.arguments.dropFirst())
guard let command = args.first else { fail(usage, status: 2) }
if ["--help", "-h", "help"].contains(command) {
    out(usage)
    exit(0)
}
let dataDir = args.count > 1 ? args[1] : (ProcessInfo.processInfo.environment["CAIRN_DATA_DIR"] ?? ".cairn")

/// Reads the snapshot store without writing to it; exits 3 or 4 when there is none
/// or it cannot be read.
func inspectStore() -> StoreInspection {
    let path = DataDirectory(dataDir).store
    do {
        return try SnapshotStore.inspect(directory: path, recordCheck: UploadRequest.recordCheck)
    } catch where error.code == ENOENT {
        fail("no snapshot store in \(dataDir): \(error.path ?? path) does not exist", status: 3)
    } catch {
        fail("cannot read the snapshot store: \(error)", status: 4)
    }
}

/// Says on stderr what was wrong with the store, and exits 5; returns when it was intact.
func reportDamage(_ inspection: StoreInspection) {
    guard let damage = inspection.damage else { return }
    fail("the snapshot store in \(dataDir) is damaged: \(damage)", status: 5)
}

switch command {
case "events":
    let inspection = inspectStore()
    let decoder: FrameDecoder
    do { decoder = try FrameDecoder(maxContentSize: 256 << 20) } catch { fail("\(error)") }
    // The whole store (at most its size cap, 32 MiB by default), oldest first.
    var count = 0
    for snapshot in inspection.snapshots {
        guard let request = UploadRequest(record: snapshot.record),
              let records = try? decoder.decodeRecords(request.body).records else {
            FileHandle.standardError.write(Data("cairn: snapshot \(snapshot.id) is not a stored batch; skipped\n".utf8))
            continue
        }
        for record in records {
            out(String(decoding: record, as: UTF8.self))
            count += 1
        }
    }
    FileHandle.standardError.write(Data("cairn: \(count) events\n".utf8))
    reportDamage(inspection)
case "status":
    let fm = FileManager.default
    let crashDir = DataDirectory(dataDir).crash
    let crashFiles = (try? fm.contentsOfDirectory(atPath: crashDir)) ?? []
    let inspection = inspectStore()
    out("data directory: \(dataDir)")
    out("stored requests: \(inspection.snapshots.count) (\(inspection.bytes) bytes)"
        + (inspection.otherVersions > 0 ? ", and \(inspection.otherVersions) of another format version" : ""))
    if let ring = try? fm.attributesOfItem(atPath: DataDirectory(dataDir).ring)[.size] as? Int {
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
    reportDamage(inspection)
case "report":
    let json = args.contains("--json")
    let files = args.dropFirst().filter { $0 != "--json" }
    guard files.count == 1, let file = files.first else { fail(usage, status: 2) }
    guard let data = FileManager.default.contents(atPath: file) else {
        fail("cannot read \(file): \(String(cString: strerror(errno)))")
    }
    let crash = CrashReport.symbolicated(reportBytes: Array(data))
    if json {
        var changed = RuleCounts()
        out(String(decoding: Processor().record(endedRun: crash.event.event, context: crash.event.context, counts: &changed),
                   as: UTF8.self))
    } else {
        FileHandle.standardOutput.write(Data(CrashReport.text(report: crash.report, frames: crash.frames,
                                                              event: crash.event.event).utf8))
    }
    if let why = crash.report.unreadable { fail("\(file) is not a readable crash report: \(why)") }
default:
    fail(usage, status: 2)
}
