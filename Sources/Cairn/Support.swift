import CairnProcessor
import CairnStore
import FoundationEssentials
import Glibc

/// Drops counted by reason: in memory for `dropCounts` and `sdk_health` (this
/// process), and in the ring's drop table, which survives a `kill -9` until a request
/// has reported them (the `Cairn-Dropped` header). What the sanitising and privacy
/// rules changed is counted apart, in memory only: a changed event was not dropped.
final class DropCounters: Sendable {
    /// In a plain struct, so that creating the counters at start needs no runtime
    /// lookup of `String: Hashable` (as `Locked<[String: Int]>` would).
    private struct Counts {
        /// Per reason: this process's count, and its drop table slot (looked up once).
        var byReason: [String: (count: Int, slot: Int32?)] = [:]
        /// Per rule: what the rules changed in this process.
        var changes: [String: Int] = [:]
    }

    private let counts = Locked(Counts())
    private let ring: Ring?

    /// Counters that also count into `ring`'s drop table (nil: in memory only).
    init(ring: Ring?) { self.ring = ring }

    func add(_ reason: String, _ n: Int) {
        guard n > 0 else { return }
        let slot = counts.withLock { c -> Int32? in
            if let entry = c.byReason[reason] {
                c.byReason[reason] = (entry.count + n, entry.slot)
                return entry.slot
            }
            let slot = ring.map { $0.dropSlot(reason) ?? Ring.otherDropSlot }
            c.byReason[reason] = (n, slot)
            return slot
        }
        if let slot { ring?.countDrops(slot: slot, UInt64(n)) }
    }

    /// Counts what the rules changed (not drops: they stay out of the drop table).
    func addChanges(_ c: RuleCounts) {
        let changed = [("non_finite", c.droppedNonFinite), ("string_truncated", c.truncatedStrings),
                       ("key_truncated", c.truncatedKeys), ("key_dropped", c.droppedKeys),
                       ("too_deep", c.droppedDepth), ("array_truncated", c.truncatedArrays),
                       ("text_repaired", c.repairedUTF8), ("privacy_redacted", c.redactedKeys),
                       ("privacy_masked", c.maskedValues), ("cycle_cut", c.cutCycles)]
        counts.withLock { counts in
            for (rule, n) in changed where n > 0 { counts.changes[rule, default: 0] += n }
        }
    }

    /// This process's drops counted here, by reason.
    func snapshot() -> [String: Int] { counts.withLock { $0.byReason.mapValues(\.count) } }

    /// This process's changes, by rule.
    func changes() -> [String: Int] { counts.withLock { $0.changes } }
}

/// One background thread with a stop flag and a wake-up condition.
final class BackgroundWork: @unchecked Sendable {
    // @unchecked: `stopping` and `signals` are touched with `condition` locked only.
    private let condition = Condition()
    private var stopping = false
    private var signals = 0

    /// Runs `body` on a new detached thread (a plain pthread: a Foundation `Thread`
    /// costs far more to create on the start path). When the system refuses a thread
    /// (its limit reached), says so on stderr: the SDK then never becomes ready and its
    /// events wait in the ring for the next start.
    func start(_ body: @escaping @Sendable () -> Void) {
        if !startThread(name: "cairn", body) {
            writeStandardError("[cairn] background thread not started: the system refused a thread\n")
        }
    }

    /// Wakes `waitForSignal` callers.
    func signal() {
        condition.lock()
        signals += 1
        condition.broadcast()
        condition.unlock()
    }

    func waitForSignal(timeout: Duration) {
        let deadline = ContinuousClock.now + timeout
        condition.lock()
        let seen = signals
        while signals == seen && !stopping && condition.wait(until: deadline) {}
        condition.unlock()
    }

    /// Waits up to `timeout`; true once `stop` was called.
    func waitForStop(timeout: Duration) -> Bool {
        let deadline = ContinuousClock.now + timeout
        condition.lock()
        while !stopping && condition.wait(until: deadline) {}
        let stopped = stopping
        condition.unlock()
        return stopped
    }

    func stop() {
        condition.lock()
        stopping = true
        condition.broadcast()
        condition.unlock()
    }
}

/// The install record of a data directory (docs/FORMATS.md, "Install record"): when it
/// was first used and in which time zone, kept in `install.json`.
package final class InstallRecord: Sendable {
    /// Unix milliseconds of the first start.
    package let timeMillis: UInt64
    /// The UTC offset then, minutes east.
    package let zoneOffsetMinutes: Int
    /// The IANA time zone then, when known.
    package let timeZone: String?
    /// The release of the first start.
    package let firstRelease: String?
    /// Whether this start created the record.
    package let isFirstStart: Bool
    private let sent: Locked<Bool>

    /// Whether the fixed user properties were already sent.
    package var propertiesSent: Bool { sent.withLock { $0 } }

    init(timeMillis: UInt64, zoneOffsetMinutes: Int, timeZone: String?, firstRelease: String?, isFirstStart: Bool,
         propertiesSent: Bool) {
        self.timeMillis = timeMillis
        self.zoneOffsetMinutes = zoneOffsetMinutes
        self.timeZone = timeZone
        self.firstRelease = firstRelease
        self.isFirstStart = isFirstStart
        sent = Locked(propertiesSent)
    }

    /// Reads `<directory>/install.json`, creating it on the first start. Runs on the
    /// caller's thread in `start`, so it reads and writes the small file by hand rather
    /// than through Foundation's JSON (whose first use costs milliseconds).
    static func load(directory: String, release: String?) -> InstallRecord {
        let path = directory + "/install.json"
        if let o = FlatJSON.parse(Self.read(path)), case .number(let t)? = o["install_time_ms"], t >= 0 {
            var zone = 0, sent = false
            var tz: String?, first: String?
            if case .number(let z)? = o["zone_offset"] { zone = Int(z) }
            if case .bool(let b)? = o["properties_sent"] { sent = b }
            if case .string(let s)? = o["time_zone"] { tz = s }
            if case .string(let s)? = o["first_release"] { first = s }
            return InstallRecord(timeMillis: UInt64(t), zoneOffsetMinutes: zone, timeZone: tz, firstRelease: first,
                                 isFirstStart: false, propertiesSent: sent)
        }
        let now = EventClock.nowMillis()
        let record = InstallRecord(timeMillis: now, zoneOffsetMinutes: EventClock().offsetMinutes(at: now),
                                   timeZone: CommonProperties.timeZoneName(), firstRelease: release,
                                   isFirstStart: true, propertiesSent: false)
        record.save(directory: directory)
        return record
    }

    /// A record of now that is never saved: what a disabled SDK reports.
    static func unsaved(release: String?) -> InstallRecord {
        let now = EventClock.nowMillis()
        return InstallRecord(timeMillis: now, zoneOffsetMinutes: EventClock().offsetMinutes(at: now), timeZone: nil,
                             firstRelease: release, isFirstStart: false, propertiesSent: true)
    }

    private static func read(_ path: String) -> [UInt8] {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return [] }
        defer { close(fd) }
        var out = [UInt8](repeating: 0, count: 4096)
        let n = out.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
        return n > 0 ? Array(out[0..<n]) : []
    }

    /// Writes the record (a temporary file renamed over the old one).
    func save(directory: String) {
        let bytes = JSONWriter.bytes { w in
            write(into: &w)
            w.byte(0x0A)
        }
        let path = directory + "/install.json"
        let tmp = path + ".tmp"
        let fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else { return }
        let ok = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) } == bytes.count
        close(fd)
        if ok { rename(tmp, path) } else { unlink(tmp) }
    }

    private func write(into w: inout JSONWriter) {
        w.byte(0x7B)
        w.key("format")
        w.int(1)
        w.byte(0x2C)
        w.key("install_time_ms")
        w.uint(timeMillis)
        w.byte(0x2C)
        w.key("zone_offset")
        w.int(Int64(zoneOffsetMinutes))
        if let timeZone {
            w.byte(0x2C)
            w.key("time_zone")
            w.string(timeZone)
        }
        if let firstRelease {
            w.byte(0x2C)
            w.key("first_release")
            w.string(firstRelease)
        }
        w.byte(0x2C)
        w.key("properties_sent")
        w.bool(propertiesSent)
        w.byte(0x7D)
    }

    func markPropertiesSent(directory: String) {
        sent.withLock { $0 = true }
        save(directory: directory)
    }

    /// The fixed user properties of the install: time in UTC and local, zone, first
    /// release.
    func userProperties(clock: EventClock) -> [String: CairnValue] {
        var p: [String: CairnValue] = [
            "install_time_utc": .string(Self.utcText(timeMillis)),
            "install_time_local": .string(clock.text(timeMillis)),
        ]
        if let timeZone { p["install_time_zone"] = .string(timeZone) }
        if let firstRelease { p["first_release"] = .string(firstRelease) }
        return p
    }

    static func utcText(_ millis: UInt64) -> String {
        EventClock(fixedOffsetMinutes: 0).text(millis)
    }
}

extension CommonProperties {
    /// Collects what the process and the machine say about themselves: host, OS and
    /// kernel, architecture, CPUs, cgroup memory limit, container id, process, time zone.
    /// A few small files read once at start.
    public static func collect() -> CommonProperties {
        var p = collectWithoutFiles()
        p.cpuCount = Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))  // glibc reads /sys for it
        if let text = SmallFile.bytes("/etc/os-release", limit: 16 << 10) {
            forEachLine(text) { line in
                guard let eq = line.firstIndex(of: UInt8(ascii: "=")) else { return }
                let key = line[..<eq]
                let value = trimmed(line[(eq + 1)...], also: [UInt8(ascii: "\""), UInt8(ascii: "'")])
                if key.elementsEqual("NAME".utf8) { p.osName = value }
                if key.elementsEqual("VERSION_ID".utf8) { p.osVersion = value }
            }
        }
        if let comm = SmallFile.bytes("/proc/self/comm", limit: 256) { p.processName = trimmed(comm[...]) }
        let cgroup = SmallFile.text("/proc/self/cgroup") ?? ""
        p.memoryLimit = memoryLimit(cgroup: cgroup)
        p.containerID = containerID(cgroup: cgroup)
        p.timeZone = timeZoneName()
        return p
    }

    /// What `collect` reads without opening a file: host name, kernel and architecture
    /// (`uname`) and the pid. `start` puts these into the first events and
    /// the rest into later ones once the background thread has read it.
    public static func collectWithoutFiles() -> CommonProperties {
        var p = CommonProperties()
        var u = utsname()
        if uname(&u) == 0 {
            p.kernel = withUnsafeBytes(of: u.release) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            p.arch = withUnsafeBytes(of: u.machine) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            p.hostName = withUnsafeBytes(of: u.nodename) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        }
        p.pid = getpid()
        return p
    }

    /// The memory limit of this process's cgroup (v2 `memory.max`, v1
    /// `memory.limit_in_bytes`); nil when unlimited or unknown.
    static func memoryLimit(cgroup: String) -> UInt64? {
        let files = MemoryCgroup(procCgroup: cgroup).files(v2: "memory.max", v1: "memory.limit_in_bytes")
        for file in files {
            guard let bytes = SmallFile.bytes(file, limit: 64) else { continue }
            let value = trimmed(bytes[...])
            if value == "max" { return nil }
            if let n = UInt64(value) { return n >= 1 << 60 ? nil : n }
        }
        return nil
    }

    /// A 64-hex-digit container id in the cgroup path (Docker, containerd, CRI-O).
    static func containerID(cgroup: String) -> String? {
        let bytes = Array(cgroup.utf8)
        var run = 0
        for (i, c) in bytes.enumerated() {
            let hex = (c >= 0x30 && c <= 0x39) || (c | 0x20 >= 0x61 && c | 0x20 <= 0x66)
            if hex {
                run += 1
                continue
            }
            // A part ends at '/', '-', '.', ':' or a line break; other bytes spoil it.
            if run == 64 && [0x2F, 0x2D, 0x2E, 0x3A, 0x0A].contains(c) {
                return String(decoding: bytes[(i - 64)..<i], as: UTF8.self)
            }
            run = [0x2F, 0x2D, 0x2E, 0x3A, 0x0A].contains(c) ? 0 : -Int.max / 2
        }
        return run == 64 ? String(decoding: bytes[(bytes.count - 64)...], as: UTF8.self) : nil
    }

    /// The IANA name of the local time zone: `TZ`, else /etc/timezone, else the target
    /// of /etc/localtime.
    public static func timeZoneName() -> String? {
        if let raw = getenv("TZ"), case let tz = String(cString: raw), !tz.isEmpty {
            return tz.hasPrefix(":") ? String(tz.dropFirst()) : tz
        }
        if let bytes = SmallFile.bytes("/etc/timezone", limit: 256) {
            let name = trimmed(bytes[...])
            if !name.isEmpty { return name }
        }
        if let target = SmallFile.linkTarget("/etc/localtime") {
            let marker = Array("zoneinfo/".utf8), bytes = Array(target.utf8)
            if bytes.count > marker.count,
               let at = (0...(bytes.count - marker.count)).first(where: { bytes[$0..<$0 + marker.count].elementsEqual(marker) }) {
                return String(decoding: bytes[(at + marker.count)...], as: UTF8.self)
            }
        }
        return nil
    }

    /// Calls `body` with each line of `text` (without its line break).
    private static func forEachLine(_ text: [UInt8], _ body: (ArraySlice<UInt8>) -> Void) {
        var start = 0
        while start < text.count {
            let end = text[start...].firstIndex(of: 0x0A) ?? text.count
            body(text[start..<end])
            start = end + 1
        }
    }

    /// `bytes` as text without the ASCII white space (and `also`) at either end; the
    /// start path reads small files this way rather than through Foundation, whose first
    /// use costs more than the whole start.
    static func trimmed(_ bytes: ArraySlice<UInt8>, also: [UInt8] = []) -> String {
        func drop(_ c: UInt8) -> Bool { c == 0x20 || (c >= 0x09 && c <= 0x0D) || also.contains(c) }
        var s = bytes.startIndex, e = bytes.endIndex
        while s < e && drop(bytes[s]) { s += 1 }
        while e > s && drop(bytes[e - 1]) { e -= 1 }
        return String(decoding: bytes[s..<e], as: UTF8.self)
    }
}

/// A reader for one flat JSON object of strings, numbers and booleans (the install
/// record): small and without Foundation, for the start path.
enum FlatJSON {
    enum Value: Equatable {
        case string(String)
        case number(Double)
        case bool(Bool)
        case null
    }

    /// The object's members, or nil when `bytes` is not such an object.
    static func parse(_ bytes: [UInt8]) -> [String: Value]? {
        var i = 0
        func skip() { while i < bytes.count, [0x20, 0x0A, 0x0D, 0x09].contains(bytes[i]) { i += 1 } }
        func string() -> String? {
            guard i < bytes.count, bytes[i] == 0x22 else { return nil }
            i += 1
            var out: [UInt8] = []
            while i < bytes.count {
                let b = bytes[i]
                i += 1
                if b == 0x22 { return String(decoding: out, as: UTF8.self) }
                if b != 0x5C { out.append(b); continue }
                guard i < bytes.count else { return nil }
                let e = bytes[i]
                i += 1
                switch e {
                case 0x6E: out.append(0x0A)
                case 0x72: out.append(0x0D)
                case 0x74: out.append(0x09)
                case 0x62: out.append(0x08)
                case 0x66: out.append(0x0C)
                case 0x75:
                    guard i + 4 <= bytes.count, let v = UInt32(String(decoding: bytes[i..<(i + 4)], as: UTF8.self), radix: 16),
                          let scalar = Unicode.Scalar(v) else { return nil }
                    out += Array(String(Character(scalar)).utf8)
                    i += 4
                default: out.append(e)
                }
            }
            return nil
        }
        skip()
        guard i < bytes.count, bytes[i] == 0x7B else { return nil }
        i += 1
        var members: [String: Value] = [:]
        skip()
        if i < bytes.count, bytes[i] == 0x7D { return members }
        while true {
            skip()
            guard let key = string() else { return nil }
            skip()
            guard i < bytes.count, bytes[i] == 0x3A else { return nil }
            i += 1
            skip()
            guard i < bytes.count else { return nil }
            switch bytes[i] {
            case 0x22:
                guard let s = string() else { return nil }
                members[key] = .string(s)
            case 0x74, 0x66, 0x6E:
                let word = bytes[i] == 0x74 ? "true" : bytes[i] == 0x66 ? "false" : "null"
                guard bytes.count - i >= word.utf8.count, Array(bytes[i..<(i + word.utf8.count)]) == Array(word.utf8) else {
                    return nil
                }
                i += word.utf8.count
                members[key] = word == "null" ? .null : .bool(word == "true")
            default:
                let start = i
                while i < bytes.count, "-+.eE0123456789".utf8.contains(bytes[i]) { i += 1 }
                guard let n = Double(String(decoding: bytes[start..<i], as: UTF8.self)) else { return nil }
                members[key] = .number(n)
            }
            skip()
            guard i < bytes.count else { return nil }
            if bytes[i] == 0x2C { i += 1; continue }
            if bytes[i] == 0x7D { return members }
            return nil
        }
    }
}
