import CairnBase
import CairnStore

/// Which session the ring's drop counts belong to (docs/FORMATS.md, "Upload request",
/// `Cairn-Dropped-Sessions`). The drop table counts for every process that opens the
/// ring file, one after another (the file is locked while open), and a count does not
/// say who made it. So each process notes, when it starts uploading, where each reason's
/// counter stood when it opened the ring (``Ring/Drop/countedAtOpen``): drops counted
/// from there on are its own. The notes of earlier processes whose drops are not all
/// reported yet are kept in the snapshot store's metadata, oldest first; a request
/// reports each session's counts apart.
struct DropSessions: Equatable {
    /// A session and where each reason's counter stood when it opened the ring; a
    /// reason it does not name stood at 0.
    struct Entry: Equatable {
        var session: String
        var from: [String: UInt64]
    }

    /// Oldest first; the last is this process's.
    private(set) var entries: [Entry]

    /// The store metadata key.
    static let metadataKey = "drop_sessions"
    /// Most sessions remembered: beyond, the oldest's counts go with the next one.
    static let maxEntries = 64

    /// One session's share of the table.
    struct Share {
        var session: String
        /// Per reason with something to report: its slot, the count to report, and the
        /// counter value to mark reported once the request is taken.
        var counts: [(slot: Int32, reason: String, count: UInt64, upTo: UInt64)]
    }

    /// This session alone (no store to remember earlier ones): the drops counted before
    /// it opened the ring are reported with it.
    init(session: String, drops: [Ring.Drop]) {
        entries = [Entry(session: session, from: Self.openedAt(drops))]
    }

    /// The chain read from `saved` (the metadata's text) with this session appended;
    /// sessions whose drops are all reported are left out. A chain that does not fit
    /// the table (unreadable, or counters below what it says: a new ring file) is
    /// forgotten.
    init(saved: [UInt8]?, session: String, drops: [Ring.Drop]) {
        let now = Entry(session: session, from: Self.openedAt(drops))
        var chain = saved.flatMap(Self.parse) ?? []
        chain.removeAll { $0.session == session }
        let counted = Dictionary(drops.map { ($0.reason, $0.counted) }) { a, b in max(a, b) }
        let fits = zip(chain, chain.dropFirst() + [now]).allSatisfy { earlier, later in
            earlier.from.allSatisfy { reason, at in at <= (later.from[reason] ?? 0) }
        } && now.from.allSatisfy { reason, at in at <= (counted[reason] ?? 0) }
        entries = (fits ? chain : []) + [now]
        prune(drops)
    }

    /// Leaves out the oldest sessions whose drops are all reported, and any beyond
    /// ``maxEntries``.
    mutating func prune(_ drops: [Ring.Drop]) {
        while entries.count > 1 {
            let next = entries[1]
            let done = drops.allSatisfy { $0.reported >= (next.from[$0.reason] ?? 0) }
            guard done || entries.count > Self.maxEntries else { break }
            entries.removeFirst()
        }
    }

    /// Each session with drops not yet reported, oldest first, and its counts: per
    /// reason, what it counted (from where its counter stood at its open to where it
    /// stood at the next session's open, or now) that no request has reported. The
    /// oldest session known also takes what was counted before it.
    func unreported(_ drops: [Ring.Drop]) -> [Share] {
        var shares: [Share] = []
        for (k, entry) in entries.enumerated() {
            var counts: [(slot: Int32, reason: String, count: UInt64, upTo: UInt64)] = []
            for d in drops {
                let lower = k == 0 ? 0 : entry.from[d.reason] ?? 0
                let upper = k + 1 < entries.count ? entries[k + 1].from[d.reason] ?? 0 : d.counted
                let from = max(d.reported, lower), to = min(d.counted, upper)
                if to > from { counts.append((d.slot, d.reason, to - from, to)) }
            }
            if !counts.isEmpty { shares.append(Share(session: entry.session, counts: counts)) }
        }
        return shares
    }

    /// The `Cairn-Dropped-Sessions` value for `shares`: `<session> <reason>=<count>,...`
    /// per session, oldest first, separated by `;` (reasons sorted, one entry each).
    static func header(_ shares: [Share]) -> String {
        shares.map { share in
            var counts: [String: UInt64] = [:]
            for c in share.counts { counts[c.reason, default: 0] += c.count }
            return share.session + " " + counts.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
                .joined(separator: ",")
        }.joined(separator: ";")
    }

    /// The chain as the metadata keeps it: a line per session, oldest first,
    /// `<session id> <reason>=<count>,...` (reasons sorted; none after the space when
    /// the table was empty).
    var text: [UInt8] {
        var out = ""
        for e in entries {
            out += e.session + " " + e.from.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
                .joined(separator: ",") + "\n"
        }
        return Array(out.utf8)
    }

    /// The chain in `bytes`; nil when any line is damaged.
    static func parse(_ bytes: [UInt8]) -> [Entry]? {
        var out: [Entry] = []
        for line in String(decoding: bytes, as: UTF8.self).split(separator: "\n") {
            let parts = line.split(separator: " ", omittingEmptySubsequences: false)
            guard parts.count == 2, !parts[0].isEmpty, parts[0].utf8.count <= 64 else { return nil }
            var from: [String: UInt64] = [:]
            for pair in parts[1].split(separator: ",") {
                let kv = pair.split(separator: "=")
                guard kv.count == 2, let n = UInt64(kv[1]), !kv[0].isEmpty else { return nil }
                from[String(kv[0])] = n
            }
            out.append(Entry(session: String(parts[0]), from: from))
        }
        return out
    }

    private static func openedAt(_ drops: [Ring.Drop]) -> [String: UInt64] {
        var from: [String: UInt64] = [:]
        for d in drops where d.countedAtOpen > 0 { from[d.reason] = max(from[d.reason] ?? 0, d.countedAtOpen) }
        return from
    }
}
