// cairn: reads what Cairn keeps on disk, for operators and for services without an
// upload URL (whose events wait in the local store).
//
//   cairn events [<data dir>]     the stored events, one JSON object per line, oldest first
//   cairn status [<data dir>]     what waits on disk: stored requests, runs, crash reports
//   cairn report [--json] <crash report>
//                                 a raw crash report, symbolicated: readable (the reason,
//                                 where it crashed, then the frames), or the crash event (JSON)
//   cairn check                   one test event, sent with this environment's configuration
//                                 (CAIRN_*, proxies), each step said; exit 0 only if delivered
//   cairn --help                  this usage
//
// <data dir> defaults to CAIRN_DATA_DIR, then `.cairn` (as Cairn.Options does).
//
// `events` and `status` only read: the store is read with SnapshotStore.inspect and the
// event ring with Ring.inspect, which write nothing (no lock, no rename, no repair),
// work on a read-only directory and beside a running service. They print what is
// intact; damage goes to stderr. Both count the events still waiting in the ring.
//
// Exit status:
//   0  done
//   1  another error (a crash report that cannot be read, an output error)
//   2  usage
//   3  `events`: no snapshot store in the data directory (no store/ or no store/data.mdb);
//      `status`: no data directory there
//   4  the store or the event ring cannot be read (permissions or another I/O error;
//      the errno text is quoted)
//   5  the store or the event ring is damaged: what is intact was printed, what is
//      wrong is on stderr
import CairnBase
import CairnProcessor
import CairnCrash
import CairnStore
import CairnUploader
import Foundation

// Everything printed for people passes TerminalText: a damaged report or store must not
// send control sequences to the operator's terminal.
func fail(_ message: String, status: Int32 = 1) -> Never {
    note(message)
    exit(status)
}

/// A line on stderr.
func note(_ message: String) {
    FileHandle.standardError.write(Data("cairn: \(TerminalText.escaped(message, keepingNewlines: true))\n".utf8))
}

func out(_ line: String) {
    FileHandle.standardOutput.write(Data((TerminalText.escaped(line, keepingNewlines: true) + "\n").utf8))
}

let usage = """
    usage: cairn events [<data dir>]      the stored events, one JSON object per line
           cairn status [<data dir>]      what waits on disk
           cairn report [--json] <crash report file>
                                          a crash report, symbolicated, for people (or as JSON)
           cairn check                    send one test event with this environment's
                                          configuration and say what happened at each step
    <data dir> defaults to CAIRN_DATA_DIR, then .cairn
    """

let args = Array(CommandLine.arguments.dropFirst())
guard let command = args.first else { fail(usage, status: 2) }
if ["--help", "-h", "help"].contains(command) {
    out(usage)
    exit(0)
}
if command == "check" { check() }
let dataDir = args.count > 1 ? args[1] : (ProcessInfo.processInfo.environment["CAIRN_DATA_DIR"] ?? ".cairn")

/// Reads the snapshot store without writing to it; exits 3 or 4 when there is none
/// or it cannot be read (with `optional`, returns nil when there is none).
func inspectStore(optional: Bool = false) -> StoreInspection? {
    let path = DataDirectory(dataDir).store
    do {
        return try SnapshotStore.inspect(directory: path, recordCheck: UploadRequest.recordCheck)
    } catch where error.code == ENOENT {
        if optional { return nil }
        fail("no snapshot store in \(dataDir): \(error.path ?? path) does not exist", status: 3)
    } catch {
        fail("cannot read the snapshot store: \(error)", status: 4)
    }
}

/// Says on stderr what was wrong with the store or the ring, and exits 5 (damage) or
/// 4 (the ring cannot be read); returns when both were intact.
func reportDamage(_ inspection: StoreInspection?, ring: RingLook) {
    if let damage = inspection?.damage { fail("the snapshot store in \(dataDir) is damaged: \(damage)", status: 5) }
    switch ring {
    case .unreadable(let why): fail("cannot read the event ring: \(why)", status: 4)
    case .damaged(let why): fail("the event ring in \(dataDir) is damaged: \(why)", status: 5)
    case .absent, .read: return
    }
}

/// The event ring, as read without opening it (`Ring.inspect`).
enum RingLook {
    case absent
    case read(Ring.Inspection)
    case unreadable(String)
    case damaged(String)

    init(_ path: String) {
        do {
            self = .read(try Ring.inspect(path: path))
        } catch where error.code == ENOENT {
            self = .absent
        } catch where error.code == CairnError.corrupt {
            self = .damaged("\(path) is not a ring file; the service's next start sets it aside (its events are lost)")
        } catch where error.code == CairnError.version {
            self = .damaged("\(path) was written by a newer Cairn")
        } catch {
            self = .unreadable("\(error)")
        }
    }

    /// Events waiting in the ring (0 when there is none or it cannot be read).
    var events: UInt64 {
        if case .read(let i) = self { return i.events }
        return 0
    }

    /// Says what the next start will repair or skip, on stderr.
    func noteRepairs(_ path: String) {
        guard case .read(let i) = self else { return }
        if i.tornRegions > 0 {
            note("\(path): \(i.tornRegions) torn regions (\(i.tornBytes) bytes); "
                + "skipped and counted as ring_corrupt at the next start, or a record being written now")
        }
        if !i.repairs.isEmpty {
            note("\(path): header damaged; repaired at the next start")
        }
    }
}

switch command {
case "events":
    guard let inspection = inspectStore() else { fail("no snapshot store") }
    let decoder: FrameDecoder
    do { decoder = try FrameDecoder(maxContentSize: 256 << 20) } catch { fail("\(error)") }
    // The whole store (at most its size cap, 32 MiB by default), oldest first.
    var count = 0
    for snapshot in inspection.snapshots {
        guard let request = UploadRequest(record: snapshot.record),
              let records = try? decoder.decodeRecords(request.body).records else {
            note("snapshot \(snapshot.id) is not a stored batch; skipped")
            continue
        }
        for record in records {
            out(String(decoding: record, as: UTF8.self))
            count += 1
        }
    }
    let ringPath = DataDirectory(dataDir).ring
    let ring = RingLook(ringPath)
    note("\(count) events stored"
        + (ring.events > 0 ? "; \(ring.events) more wait in the event ring (not printed: sent or stored by the service)" : ""))
    ring.noteRepairs(ringPath)
    reportDamage(inspection, ring: ring)
case "status":
    let fm = FileManager.default
    var isDirectory: ObjCBool = false
    guard fm.fileExists(atPath: dataDir, isDirectory: &isDirectory) else {
        fail("no data directory at \(dataDir) (a mistyped path, or CAIRN_DATA_DIR of another service?)", status: 3)
    }
    guard isDirectory.boolValue else { fail("\(dataDir) is not a directory", status: 3) }
    let crashDir = DataDirectory(dataDir).crash
    let crashFiles = (try? fm.contentsOfDirectory(atPath: crashDir)) ?? []
    let inspection = inspectStore(optional: true)
    out("data directory: \(dataDir)")
    if let inspection {
        out("stored requests: \(inspection.snapshots.count) (\(inspection.bytes) bytes)"
            + (inspection.otherVersions > 0 ? ", and \(inspection.otherVersions) of another format version" : ""))
    } else {
        out("stored requests: none (no snapshot store)")
    }
    // One state per destination: the native upload's, then each OTLP signal's.
    var saidDelivery = false
    for destination in UploadDestination.allCases {
        guard let saved = inspection?.metadata.first(where: { $0.key == DeliveryStatus.metadataKey(for: destination) })
            .flatMap({ DeliveryStatus.Saved($0.value) }) else { continue }
        out("delivery\(destination == .native ? "" : " (\(destination.rawValue))"): \(saved.description)")
        saidDelivery = true
    }
    if !saidDelivery { out("delivery: no failure recorded") }
    let ringPath = DataDirectory(dataDir).ring
    let ring = RingLook(ringPath)
    switch ring {
    case .absent: out("event ring: none")
    case .read(let i): out("event ring: \(i.events) events waiting (\(i.used) of \(i.capacity) bytes used)")
    case .unreadable: out("event ring: unreadable (see below)")
    case .damaged: out("event ring: damaged (see below)")
    }
    ring.noteRepairs(ringPath)
    out("run records: \(crashFiles.filter { $0.hasPrefix("run-") }.count) (this run's, live runs', and runs not yet reported)")
    let reports = crashFiles.filter { $0.hasSuffix(".report") }.sorted()
    out("crash reports waiting: \(reports.count)")
    for name in reports {
        let report = CrashReport(bytes: Array(fm.contents(atPath: crashDir + "/" + name) ?? Data()))
        let what = CrashEvent.reason(report).split(separator: "\n").first.map(String.init) ?? ""
        out("  \(name): \(what)\(report.complete ? "" : " (partial)")")
    }
    reportDamage(inspection, ring: ring)
case "report":
    let json = args.contains("--json")
    let files = args.dropFirst().filter { $0 != "--json" }
    guard files.count == 1, let file = files.first else { fail(usage, status: 2) }
    let data: [UInt8]
    // Reports are small; 64 MiB bounds a file that is not one.
    switch SmallFile.read(file, limit: 64 << 20) {
    case .success(let bytes): data = bytes
    case .failure(let failure): fail("cannot read \(file): \(String(cString: strerror(failure.code)))")
    }
    let crash = CrashReport.symbolicated(reportBytes: data)
    if json {
        var changed = RuleCounts()
        out(String(decoding: Processor().record(endedRun: crash.event.event, context: crash.event.context, counts: &changed),
                   as: UTF8.self))
    } else {
        let text = CrashReport.text(report: crash.report, frames: crash.frames, event: crash.event.event)
        FileHandle.standardOutput.write(Data(TerminalText.escaped(text, keepingNewlines: true).utf8))
    }
    if let why = crash.report.unreadable { fail("\(file) is not a readable crash report: \(why)") }
default:
    fail(usage, status: 2)
}
