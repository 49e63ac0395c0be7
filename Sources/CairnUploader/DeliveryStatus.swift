import CairnBase

/// Whether delivery works, as the operator is told it: one line when it starts failing,
/// when the reason changes, and when it recovers, never one per attempt
/// (``UploaderOptions/notice``); the state is also kept in the snapshot store's metadata
/// (`delivery_status`, docs/FORMATS.md) for `cairn status`.
///
/// A refusal of the configuration (``DeliveryAction/hold``: a refused key, a wrong path,
/// a redirect) and a TLS failure are said at once; other failures (refused connections,
/// timeouts, 5xx) once ``failuresBeforeNotice`` attempts in a row have failed, so a
/// single lost connection says nothing.
package struct DeliveryStatus {
    /// The snapshot store's metadata key of the native upload's state.
    package static let metadataKey = "delivery_status"

    /// The metadata key of `destination`'s state: `delivery_status`, then
    /// `delivery_status.otlp-logs`, `delivery_status.otlp-traces` and `delivery_status.otlp-metrics`.
    package static func metadataKey(for destination: UploadDestination) -> String {
        destination == .native ? metadataKey : metadataKey + "." + destination.rawValue
    }
    /// Attempts in a row that must fail before a transient failure is said.
    static let failuresBeforeNotice = 3
    /// A change of reason while failing is said at most this often.
    static let reasonNoticeInterval: UInt64 = 60_000

    /// Since when delivery fails (milliseconds since 1970), and why; nil while it works.
    private(set) var failingSince: UInt64?
    private(set) var reason = ""
    /// The class of the reason (`http 401`, `connect`, ...): a new class is a change.
    private var reasonClass = ""
    private var reasonSaidAt: UInt64 = 0
    private var failuresInARow = 0
    /// When delivery last recovered.
    private var recoveredAt: UInt64?

    /// The line to say after an attempt, if its outcome changes the state; `waiting` is
    /// how many requests wait on disk (asked only when a line is said).
    mutating func record(_ action: DeliveryAction, _ result: TransportResult, url: String, otlp: Bool = false,
                         now: UInt64, waiting: () -> Int?) -> String? {
        if action == .delivered {
            failuresInARow = 0
            guard let since = failingSince else { return nil }
            failingSince = nil
            reasonClass = ""
            recoveredAt = now
            let pending = waiting().map { $0 > 0 ? "; \(Self.requests($0)) on disk being sent" : "" } ?? ""
            return "delivery to \(Self.display(url)) recovered (failing since \(Self.time(since)), "
                + "\(Self.duration(now - since)))\(pending)"
        }
        if case .drop = action { return nil }  // the collector answered: a payload fault, counted
        failuresInARow += 1
        let (text, cls) = Self.describe(result)
        let configuration = action == .hold || cls == "tls"
        guard configuration || failuresInARow >= Self.failuresBeforeNotice else { return nil }
        let first = failingSince == nil
        if !first && (cls == reasonClass || now - reasonSaidAt < Self.reasonNoticeInterval) { return nil }
        if first { failingSince = now }
        reason = text
        reasonClass = cls
        reasonSaidAt = now
        let kept = waiting().map { " (\(Self.requests($0)) on disk)" } ?? ""
        if action == .hold {
            let change = otlp ? "the OTLP endpoint or its headers (OTEL_EXPORTER_OTLP_HEADERS) change"
                : "the upload URL or API key changes"
            return "delivery to \(Self.display(url)) refused: \(text); nothing is dropped: requests are kept"
                + " on disk until \(change), and retried\(kept)"
        }
        return "delivery to \(Self.display(url)) failing since \(Self.time(failingSince ?? now)): \(text); "
            + "retried with backoff\(kept)"
    }

    /// The `delivery_status` metadata value: `ok` or `failing`, the time it began, the
    /// time of this record, and the reason (tab-separated, docs/FORMATS.md).
    func encoded(now: UInt64) -> [UInt8] {
        let state = failingSince == nil ? "ok" : "failing"
        let clean = reason.map { $0 == "\t" || $0 == "\n" ? " " : $0 }
        return Array("\(state)\t\(failingSince ?? recoveredAt ?? now)\t\(now)\t\(String(clean))".utf8)
    }

    /// The state as the last process left it (`delivery_status`): a process that finds
    /// delivery failing says so when it recovers.
    package mutating func restore(_ bytes: [UInt8]?) {
        guard let saved = bytes.flatMap(Self.Saved.init), saved.failing else { return }
        failingSince = saved.since
        reason = saved.reason
        reasonClass = "restored"
    }

    /// A `delivery_status` value as read back (docs/FORMATS.md); nil when it is not one.
    package struct Saved: Sendable, Equatable {
        /// Delivery was failing when it was written.
        package var failing: Bool
        /// When the state began (milliseconds since 1970).
        package var since: UInt64
        /// When it was written.
        package var updated: UInt64
        /// Why it failed (the last reason said), or empty.
        package var reason: String

        package init?(_ bytes: [UInt8]) {
            let fields = bytes.split(separator: UInt8(ascii: "\t"), maxSplits: 3, omittingEmptySubsequences: false)
            guard fields.count == 4, let since = UInt64(String(decoding: fields[1], as: UTF8.self)),
                  let updated = UInt64(String(decoding: fields[2], as: UTF8.self)) else { return nil }
            switch String(decoding: fields[0], as: UTF8.self) {
            case "ok": failing = false
            case "failing": failing = true
            default: return nil
            }
            self.since = since
            self.updated = updated
            reason = String(decoding: fields[3], as: UTF8.self)
        }

        /// One line for people: `failing since <time>: <reason>` or `ok since <time>`
        /// (with the reason it recovered from).
        package var description: String {
            failing ? "failing since \(time(since)): \(reason) (as of \(time(updated)))"
                : "ok since \(time(since))" + (reason.isEmpty ? "" : " (last error: \(reason))")
        }
    }

    /// A reason for people, and its class.
    package static func describe(_ result: TransportResult) -> (text: String, cls: String) {
        switch result {
        case .response(let r):
            let s = r.status
            let why: String
            switch s {
            case 300...399:
                let to = r.header("Location").map { " to \($0)" } ?? ""
                why = "a redirect\(to), not followed (the API key must not travel): set the upload URL to where it points"
            case 401: why = "the API key was refused"
            case 403: why = "the API key is not allowed to send here"
            case 404: why = "no such path on the collector: check the upload URL"
            case 407: why = "the proxy asks for credentials"
            case 429: why = "the collector asks to slow down"
            case 500...599: why = "the collector failed"
            default: why = "a status Cairn does not expect"
            }
            return (TerminalText.escaped("HTTP \(s), \(why)"), "http \(s)")
        case .failure(let f):
            return (TerminalText.escaped("\(f.kind.rawValue): \(f.message)"), f.kind.rawValue)
        }
    }

    /// `url` without credentials or query (neither belongs in a log).
    package static func display(_ url: String) -> String {
        var u = Substring(url)
        if let q = u.firstIndex(where: { $0 == "?" || $0 == "#" }) { u = u[..<q] }
        // "://" found by hand: String's firstRange(of:) would map in the
        // _StringProcessing library's pages (about 160 KiB) for this alone.
        let bytes = Array(u.utf8)
        if let colon = bytes.indices.first(where: { bytes[$0...].starts(with: [0x3A, 0x2F, 0x2F]) }) {
            let schemeEnd = u.utf8.index(u.startIndex, offsetBy: colon + 3)
            let rest = u[schemeEnd...]
            let authorityEnd = rest.firstIndex(of: "/") ?? rest.endIndex
            if let at = rest[..<authorityEnd].lastIndex(of: "@") {
                return String(u[..<schemeEnd]) + String(rest[rest.index(after: at)...])
            }
        }
        return String(u)
    }

    static func requests(_ n: Int) -> String { n == 1 ? "1 request" : "\(n) requests" }

    package static func time(_ millis: UInt64) -> String { EventClock(fixedOffsetMinutes: 0).text(millis) }

    static func duration(_ millis: UInt64) -> String {
        let s = millis / 1000
        if s < 60 { return "\(s) s" }
        if s < 3600 { return "\(s / 60) min \(s % 60) s" }
        return "\(s / 3600) h \(s % 3600 / 60) min"
    }
}
