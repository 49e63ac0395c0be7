/// One HTTP header, kept in the order it was added.
public struct HTTPHeader: Sendable, Equatable, Hashable {
    /// The header name, as sent.
    public var name: String
    /// The header value, as sent.
    public var value: String

    /// Creates a header.
    public init(_ name: String, _ value: String) {
        self.name = name
        self.value = value
    }
}

/// An upload request built once: method, URL, headers and the compressed body bytes.
///
/// Every attempt, in this process or after a restart, sends exactly these bytes with
/// the same ``idempotencyKey``; only the attempt number, sent in the
/// `Cairn-Retry-Count` header, changes between attempts.
public struct UploadRequest: Sendable, Equatable {
    /// HTTP method, normally `POST`.
    public var method: String
    /// Absolute URL (`http` or `https`).
    public var url: String
    /// Headers, in order; they include `Content-Encoding`, `Idempotency-Key` and
    /// `User-Agent`.
    public var headers: [HTTPHeader]
    /// The body, exactly as sent: a batch frame for events.
    public var body: [UInt8]
    /// The key a collector uses to drop duplicates; the same on every attempt.
    public var idempotencyKey: String

    /// Creates a request.
    public init(method: String = "POST", url: String, headers: [HTTPHeader], body: [UInt8],
                idempotencyKey: String) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.idempotencyKey = idempotencyKey
    }

    /// The value of the first header named `name` (compared case-insensitively).
    public func header(_ name: String) -> String? { headers.value(of: name) }

    /// The drop counts its `Cairn-Dropped` header reports, by reason (docs/FORMATS.md,
    /// "Upload request"); pairs that do not parse are left out.
    public var reportedDrops: [String: Int] {
        var out: [String: Int] = [:]
        for pair in (header("Cairn-Dropped") ?? "").split(separator: ",") {
            let parts = pair.split(separator: "=")
            guard parts.count == 2, let n = Int(parts[1]), n > 0 else { continue }
            out[String(parts[0]), default: 0] += n
        }
        return out
    }
}

extension Array where Element == HTTPHeader {
    /// The value of the first header named `name`, compared case-insensitively (as
    /// HTTP header names are).
    public func value(of name: String) -> String? {
        let lower = name.lowercased()
        return first { $0.name.lowercased() == lower }?.value
    }
}
