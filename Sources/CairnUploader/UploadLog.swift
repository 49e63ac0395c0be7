import CairnProcessor
import CairnStore
public import FoundationEssentials

/// Receives the uploader's logs, unchanged, so a service can show them in its own
/// tools. Called on the uploader's thread: return quickly.
public protocol UploadObserver: Sendable {
    /// Before each attempt.
    func uploadWillStart(_ log: UploadStartLog)
    /// After each attempt.
    func uploadDidFinish(_ log: UploadResultLog)
}

/// Headers whose values are secrets: shown as `[redacted]` in logs.
let secretHeaderWords = ["authorization", "cookie", "token", "secret", "api-key", "apikey", "password"]

/// Headers as they appear in logs: secrets redacted.
func redacted(_ headers: [HTTPHeader]) -> [HTTPHeader] {
    headers.map { h in
        let lower = h.name.lowercased()
        return secretHeaderWords.contains(where: { lower.contains($0) }) ? HTTPHeader(h.name, "[redacted]") : h
    }
}

/// What is about to be sent: for people who verify data.
public struct UploadStartLog: Sendable {
    /// When the attempt started.
    public let time: Date
    /// The attempt number (0 for the first).
    public let attempt: Int
    /// The method.
    package let method: String
    /// The URL.
    public let url: String
    /// The headers, with secrets redacted.
    package let headers: [HTTPHeader]
    /// The request's idempotency key.
    public let idempotencyKey: String
    /// The events' names, in order (the `name` field of each record), or the
    /// user-property mode for user-property requests (the `type` field).
    public let eventNames: [String]
    /// The body's records as a readable JSON array (the decoded batch), cut at 64 KiB.
    package let params: String

    /// Builds the log of `request`'s attempt `attempt`.
    package init(request: UploadRequest, attempt: Int, time: Date = Date()) {
        self.time = time
        self.attempt = attempt
        method = request.method
        url = request.url
        headers = redacted(request.headers)
        idempotencyKey = request.idempotencyKey
        let records = Self.records(of: request)
        eventNames = EventEnvelope.labels(ofRecords: records)
        var json = "[" + records.map { String(decoding: $0, as: UTF8.self) }.joined(separator: ",") + "]"
        if json.utf8.count > 64 * 1024 { json = String(decoding: json.utf8.prefix(64 * 1024), as: UTF8.self) + "…" }
        params = json
    }

    /// The records in a request's body: a Cairn batch frame is decoded; another body
    /// is shown as one record when it is UTF-8.
    static func records(of request: UploadRequest) -> [[UInt8]] {
        if request.header("Content-Encoding") == "zstd",
           let decoder = try? FrameDecoder(maxContentSize: 64 << 20),
           let decoded = try? decoder.decodeRecords(request.body) {
            return decoded.records
        }
        let body = request.wireBody ?? []
        return String(validating: body, as: UTF8.self) != nil ? [body] : []
    }

    /// One line for humans, then the params.
    public var description: String {
        let names = eventNames.isEmpty ? "-" : eventNames.prefix(20).joined(separator: ",")
            + (eventNames.count > 20 ? ",… (\(eventNames.count))" : "")
        let hs = headers.map { "\($0.name): \($0.value)" }.joined(separator: "; ")
        return "[cairn] upload start \(time.formatted(Date.ISO8601FormatStyle())) attempt \(attempt) "
            + "\(method) \(url) events [\(names)] headers {\(hs)} params \(params)"
    }
}

/// What an attempt returned: for people who verify data.
public struct UploadResultLog: Sendable {
    /// The start log of this attempt (URL, headers, params).
    public let start: UploadStartLog
    /// The HTTP status, or nil when no response came.
    public let status: Int?
    /// The response body as text, cut at 4 KiB (or the failure's message).
    package let response: String
    /// Whether the batch counts as delivered.
    public let success: Bool
    /// How long the attempt took.
    public let duration: Duration

    /// Builds the log of an attempt's result.
    package init(start: UploadStartLog, result: TransportResult, duration: Duration, success: Bool) {
        self.start = start
        self.duration = duration
        self.success = success
        switch result {
        case .response(let r):
            status = r.status
            response = String(decoding: r.body.prefix(4096), as: UTF8.self)
        case .failure(let f):
            status = nil
            response = "\(f.kind.rawValue): \(f.message)"
        }
    }

    /// One line for humans.
    public var description: String {
        let hs = start.headers.map { "\($0.name): \($0.value)" }.joined(separator: "; ")
        return "[cairn] upload result \(start.method) \(start.url) attempt \(start.attempt) status "
            + "\(status.map(String.init) ?? "none") success \(success) in \(duration) headers {\(hs)} "
            + "params \(start.params.prefix(512)) response \(response)"
    }
}
