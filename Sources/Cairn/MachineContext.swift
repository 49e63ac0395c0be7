import CairnBase
import CairnProcessor
import CairnStore
import FoundationEssentials
import Glibc

extension CommonProperties {
    /// Collects what the process and the machine say about themselves: host, OS and
    /// kernel, architecture, CPUs, cgroup memory limit, container id, process, time zone.
    /// A few small files read once at start.
    package static func collect() -> CommonProperties {
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

    /// What ``collect()`` reads without opening a file: host name, kernel and architecture
    /// (`uname`) and the pid. ``Cairn/start(_:)`` puts these into the first events and
    /// the rest into later ones once the background thread has read it.
    package static func collectWithoutFiles() -> CommonProperties {
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
    package static func timeZoneName() -> String? {
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
