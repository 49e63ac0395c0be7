import CairnBase
import CairnProcessor
import CairnStore
import FoundationEssentials
import Glibc

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
    /// caller's thread in ``Cairn/start(_:)``, so it reads the small file with the SDK's own reader
    /// and writes it by hand rather than through Foundation's JSON (whose first use
    /// costs milliseconds).
    static func load(directory: String, release: String?) -> InstallRecord {
        let path = DataDirectory(directory).installRecord
        if let o = CairnValue(json: Self.read(path)), let t = o["install_time_ms"]?.unsigned {
            var zone = 0, sent = false
            switch o["zone_offset"] {
            case .int(let z)?: zone = Int(clamping: z)
            case .double(let z)? where z.isFinite && abs(z) < 100_000: zone = Int(z)
            default: break
            }
            if case .bool(let b)? = o["properties_sent"] { sent = b }
            return InstallRecord(timeMillis: t, zoneOffsetMinutes: zone, timeZone: o["time_zone"]?.text,
                                 firstRelease: o["first_release"]?.text, isFirstStart: false, propertiesSent: sent)
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
        let path = DataDirectory(directory).installRecord
        let tmp = path + ".tmp"
        let fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
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
