package import CairnBase
import CCairnStoreGuard
import CLMDB
import Glibc

/// The LMDB library this process runs with, and which damage guard the snapshot store
/// uses with it (docs/FORMATS.md, "Snapshot store", "Damage").
///
/// ``LMDBFile`` reads `data.mdb` itself, page by page, with the layout of LMDB 0.9 (the
/// data format every 0.9.x release writes: Debian 12 ships 0.9.24, Debian 13 0.9.31).
/// With any other version (LMDB 1.0 changes the format), that reader could take a sound
/// store for damage, or miss damage: instead LMDB itself reads the whole store in a
/// child process first (``probe(_:writes:timeout:)``), so that a damaged file can crash only
/// the child; a store it cannot read is set aside whole, as a salvage needs the layout.
package enum LMDBVersion {
    /// `mdb_version`'s major, minor and patch numbers.
    package static let version: (major: Int32, minor: Int32, patch: Int32) = {
        var major: Int32 = 0, minor: Int32 = 0, patch: Int32 = 0
        _ = mdb_version(&major, &minor, &patch)
        return (major, minor, patch)
    }()

    /// "0.9.24".
    package static var versionText: String { "\(version.major).\(version.minor).\(version.patch)" }

    /// For tests: act as with an LMDB whose layout is unknown. Also set by
    /// `CAIRN_TEST_LMDB_LAYOUT=unknown` in the environment at first use.
    package static let pretendUnknown = Locked(getenv("CAIRN_TEST_LMDB_LAYOUT").map { String(cString: $0) == "unknown" } ?? false)

    /// Whether ``LMDBFile`` knows the data file's layout: LMDB 0.9.x.
    package static var known: Bool {
        !pretendUnknown.withLock { $0 } && version.major == 0 && version.minor == 9
    }

    /// How LMDB's own read of a store ended.
    package enum ProbeOutcome: Equatable, Sendable {
        /// Every entry was read: LMDB can open it.
        case read
        /// LMDB refused it or failed reading it: its message.
        case refused(String)
        /// LMDB crashed on it (the child ended by this signal).
        case crashed(signal: Int32)
        /// The read did not end in time.
        case timedOut
        /// No child process could be made (errno): nothing was learnt.
        case noChild(Int32)

        /// What was found, for ``StoreDamage/found``.
        package var description: String {
            switch self {
            case .read: "read whole by LMDB"
            case .refused(let message): "LMDB \(LMDBVersion.versionText) refused it: \(message)"
            case .crashed(let signal): "LMDB \(LMDBVersion.versionText) crashed reading it (signal \(signal))"
            case .timedOut: "LMDB \(LMDBVersion.versionText) did not finish reading it"
            case .noChild(let code): "no process to read it in (errno \(code))"
            }
        }
    }

    /// LMDB reads the store in `directory` whole, in a forked child, without its lock
    /// file (`cairn_store_probe`); with `writes` (only by a process about to open the
    /// store, which no other has open), it then commits one write transaction, which
    /// meets damage in the free-page tree that no read does. `timeout` bounds it.
    package static func probe(_ directory: String, writes: Bool, timeout: Duration = .seconds(30)) -> ProbeOutcome {
        var out = cairn_store_probe_t()
        let ms = Int32(clamping: timeout.components.seconds * 1000 + timeout.components.attoseconds / 1_000_000_000_000_000)
        guard cairn_store_probe(directory, writes ? 1 : 0, ms, &out) == 0 else { return .noChild(EINVAL) }
        switch out.outcome {
        case CAIRN_STORE_PROBE_READ: return .read
        case CAIRN_STORE_PROBE_REFUSED:
            return .refused(out.lmdb_error == -1 ? "an error" : String(cString: mdb_strerror(out.lmdb_error)))
        case CAIRN_STORE_PROBE_CRASHED: return .crashed(signal: out.signal)
        case CAIRN_STORE_PROBE_TIMED_OUT: return .timedOut
        default: return .noChild(out.error)
        }
    }
}
