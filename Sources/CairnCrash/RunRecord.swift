import CairnBase
import CairnStore
import CairnProcessor
import FoundationEssentials
import Glibc

/// How a previous run of the service ended, as the next start sees it.
package enum SessionEndReason: String, Sendable, Equatable, CaseIterable {
    /// The run recorded a clean shutdown.
    case clean
    /// The run left a crash report.
    case crashed
    /// No report, no clean shutdown, and the cgroup's OOM-kill counter rose during the run.
    case oomKilled = "oom_killed"
    /// No report and no clean shutdown: SIGKILL, power loss, a hang ended by a watchdog.
    case abnormal
}

/// The start record of a run, the first line of its run file (docs/FORMATS.md, "Run
/// record").
struct RunStart: Equatable {
    var sessionID: String
    var pid: Int32
    var startedAtMillis: UInt64
    var release: String?
    var attributes: [String: String]
    /// The cgroup file holding the OOM-kill counter, and its value at start (written as
    /// a line of its own soon after the start line; in the start line by older versions).
    var oomFile: String?
    var oomKills: UInt64?
    /// The run's common properties (`CrashCapture.recordContext`).
    var context: CairnValue?

    /// The start line (without its line break), written with the processor's JSON
    /// writer: this runs inside `start`, where building `JSONValue` trees would cost the
    /// runtime more type lookups than the line takes to write.
    var line: [UInt8] {
        JSONWriter.bytes { w in
            w.byte(0x7B)
            w.key("format")
            w.int(1)
            w.byte(0x2C)
            writeFields(&w)
            w.byte(0x7D)
        }
    }

    /// The members `session_id`, `pid`, `started_at_ms`, `release` (when set) and
    /// `attributes` (keys sorted), comma-separated: of the start line, and repeated in
    /// the crash handler's context blob.
    func writeFields(_ w: inout JSONWriter) {
        w.key("session_id")
        w.string(sessionID)
        w.byte(0x2C)
        w.key("pid")
        w.int(Int64(pid))
        w.byte(0x2C)
        w.key("started_at_ms")
        w.uint(startedAtMillis)
        if let release {
            w.byte(0x2C)
            w.key("release")
            w.string(release)
        }
        w.byte(0x2C)
        w.key("attributes")
        w.byte(0x7B)
        for (i, key) in attributes.keys.sorted().enumerated() {
            if i > 0 { w.byte(0x2C) }
            w.key(key)
            w.string(attributes[key] ?? "")
        }
        w.byte(0x7D)
    }
}

extension RunStart {
    /// The start read from an object holding ``writeFields(_:)``'s members (the start
    /// line, or the context blob); nil without a `session_id`. Missing members read as
    /// 0 or absent; non-string attributes are ignored.
    init?(fields object: CairnValue) {
        guard let sid = object["session_id"]?.text else { return nil }
        var attributes: [String: String] = [:]
        if case .object(let members)? = object["attributes"] {
            for (k, v) in members { if let t = v.text { attributes[k] = t } }
        }
        self.init(sessionID: sid, pid: object["pid"]?.unsigned.flatMap { Int32(exactly: $0) } ?? 0,
                  startedAtMillis: object["started_at_ms"]?.unsigned ?? 0, release: object["release"]?.text,
                  attributes: attributes)
    }

    /// The start of the run that wrote `report`, from what its context blob repeats of
    /// the start line (see docs/FORMATS.md, "Context blob"; the pid is the report's);
    /// nil when the blob names no session.
    init?(context report: CrashReport) {
        guard let blob = CairnValue(json: report.context), let start = RunStart(fields: blob),
              !start.sessionID.isEmpty
        else { return nil }
        self = start
        pid = report.pid
    }
}

/// Who a run's events were about when it ended: the identity it last recorded (a line
/// `{"identity":{"distinct_id":…,"account_id":…}}` of its run record, and the member
/// `identity` of its context blob; see docs/FORMATS.md, "Run record").
struct RunIdentity: Equatable {
    var distinctID: String
    var accountID: String?

    /// The identity in `value` (`{"distinct_id":…,"account_id":…}`); nil without a
    /// non-empty `distinct_id`.
    init?(_ value: CairnValue?) {
        guard let id = value?["distinct_id"]?.text, !id.isEmpty else { return nil }
        distinctID = id
        accountID = value?["account_id"]?.text.flatMap { $0.isEmpty ? nil : $0 }
    }

    init(distinctID: String, accountID: String?) {
        self.distinctID = distinctID
        self.accountID = accountID
    }

    /// `{"distinct_id":…,"account_id":…}` (`account_id` only when there is one).
    func write(_ w: inout JSONWriter) {
        w.byte(0x7B)
        w.key("distinct_id")
        w.string(distinctID)
        if let accountID {
            w.byte(0x2C)
            w.key("account_id")
            w.string(accountID)
        }
        w.byte(0x7D)
    }
}

/// A run file as read back: its start record and, after a clean shutdown, its end.
struct RunRecord {
    var start: RunStart?
    var cleanEndMillis: UInt64?
    /// The identity the run recorded last, when it recorded one.
    var identity: RunIdentity?

    /// Parses the lines of a run file; unreadable lines are ignored (a run killed while
    /// writing its start line leaves a partial one).
    init(bytes: [UInt8]) {
        var oomFile: String?, oomKills: UInt64?, context: CairnValue?
        for line in bytes.split(separator: UInt8(ascii: "\n")) {
            guard let object = CairnValue(json: Array(line)), case .object = object else { continue }
            if let oom = object["oom"] {
                oomFile = oom["file"]?.text
                oomKills = oom["oom_kill"]?.unsigned
            }
            if let c = object["context"], case .object = c {
                context = c
            }
            if let identity = RunIdentity(object["identity"]) {
                self.identity = identity
            }
            if object["end"]?.text == "clean" {
                cleanEndMillis = object["ended_at_ms"]?.unsigned ?? 0
            } else if let fields = RunStart(fields: object) {
                start = fields
            }
        }
        if let oomFile, let oomKills {
            start?.oomFile = oomFile
            start?.oomKills = oomKills
        }
        start?.context = context
    }
}

/// Finds and reads the OOM-kill counter of the cgroup this process runs in: cgroup v2's
/// `memory.events` or v1's `memory.oom_control`, both with an `oom_kill <n>` line.
enum OOMCounter {
    /// The counter file for this process and its value, or nil when none is readable.
    static func locate() -> (file: String, kills: UInt64)? {
        for file in MemoryCgroup.current().files(v2: "memory.events", v1: "memory.oom_control") {
            if let kills = read(file) { return (file, kills) }
        }
        return nil
    }

    /// The `oom_kill` value in `file`, or nil.
    static func read(_ file: String) -> UInt64? {
        guard let text = SmallFile.text(file) else { return nil }
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: " ")
            if parts.count == 2 && parts[0] == "oom_kill" { return UInt64(parts[1]) }
        }
        return nil
    }
}

/// An open file locked with `flock`, checked to still be the file at its path (another
/// process may have processed and deleted it between our open and our lock).
final class LockedFile {
    /// Where the file is (it changes when ``create(_:line:spare:)`` renames the spare).
    private(set) var path: String
    let fd: Int32

    private init(path: String, fd: Int32) {
        self.path = path
        self.fd = fd
    }

    deinit { close(fd) }

    /// Opens and locks `path` without waiting; nil when another process holds the lock
    /// (a live run), the file is gone or replaced, or, with `empty`, it holds bytes.
    static func claim(_ path: String, empty: Bool = false) -> LockedFile? {
        let fd = open(path, O_RDWR | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        var rc: Int32
        repeat { rc = flock(fd, LOCK_EX | LOCK_NB) } while rc != 0 && errno == EINTR
        var held = stat(), named = stat()
        guard rc == 0, fstat(fd, &held) == 0, stat(path, &named) == 0,
              held.st_dev == named.st_dev, held.st_ino == named.st_ino, !empty || held.st_size == 0 else {
            close(fd)
            return nil
        }
        return LockedFile(path: path, fd: fd)
    }

    /// Creates `path` holding `line` and a newline, locked from before it appears under
    /// its name (written under another name, locked, then renamed), so no other process
    /// can mistake it for a dead run's. It takes the empty file at `spare` when there is
    /// one (see ``makeSpare(_:)``): creating a file costs about 50 us on ext4, renaming
    /// one about 10, and this runs on the thread that calls `start`. Otherwise it
    /// creates `<path>.tmp`.
    static func create(_ path: String, line: [UInt8], spare: String? = nil) throws(CrashCaptureError) -> LockedFile {
        // The spare is taken when it can be claimed (not being taken by another process,
        // which would hold its lock or have renamed it already) and is empty.
        if let spare, let taken = claim(spare, empty: true) {
            if (try? taken.append(line)) != nil, rename(spare, path) == 0 {
                taken.path = path
                return taken
            }
            // Not taken after all: leave it empty for the next start, and create.
            _ = ftruncate(taken.fd, 0)
        }
        let tmp = path + ".tmp"
        let fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw .io("open \(tmp)", errno) }
        guard flock(fd, LOCK_EX) == 0 else {
            let e = errno
            close(fd)
            throw .io("flock \(tmp)", e)
        }
        let file = LockedFile(path: path, fd: fd)
        do throws(CrashCaptureError) {
            try file.append(line)
            guard rename(tmp, path) == 0 else { throw .io("rename \(tmp)", errno) }
        } catch {
            // A start that failed (a full disk) leaves no record behind: it would be
            // reported later as a run that ended abnormally, and no such run happened.
            unlink(tmp)
            throw error
        }
        return file
    }

    /// Leaves an empty file at `spare` for the next `create` to take, unless one is
    /// there. Best effort: without it, the next start creates its record itself.
    static func makeSpare(_ spare: String) {
        let fd = open(spare, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        if fd >= 0 { close(fd) }
    }


    /// Appends `line` and a newline.
    func append(_ line: [UInt8]) throws(CrashCaptureError) {
        let bytes = line + [UInt8(ascii: "\n")]
        var done = 0
        while done < bytes.count {
            let n = bytes[done...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { throw .io("write \(path)", errno) }
            done += n
        }
    }

    /// The whole file.
    func contents() -> [UInt8] {
        var out: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 64 * 1024)
        var offset: off_t = 0
        while true {
            let n = buf.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, offset) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            out += buf[0..<n]
            offset += off_t(n)
        }
        return out
    }
}
