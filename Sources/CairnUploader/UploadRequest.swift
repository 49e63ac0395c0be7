import CairnBase
package import CairnStore

/// Where a request goes: the native upload, or an OTLP signal's URL.
package enum UploadDestination: String, Sendable, Equatable, CaseIterable {
    /// The native upload (docs/FORMATS.md, "Upload request").
    case native
    /// OTLP logs (`/v1/logs`).
    case otlpLogs = "otlp-logs"
    /// OTLP traces (`/v1/traces`).
    case otlpTraces = "otlp-traces"
    /// OTLP metrics (`/v1/metrics`).
    case otlpMetrics = "otlp-metrics"

    /// Whether it is an OTLP signal.
    package var isOTLP: Bool { self != .native }

    /// Its place in ``allCases`` (the uploader's state per destination).
    var index: Int {
        switch self {
        case .native: 0
        case .otlpLogs: 1
        case .otlpTraces: 2
        case .otlpMetrics: 3
        }
    }
}

/// One HTTP header, kept in the order it was added.
package struct HTTPHeader: Sendable, Equatable, Hashable {
    /// The header name, as sent.
    package var name: String
    /// The header value, as sent.
    package var value: String

    /// Creates a header.
    package init(_ name: String, _ value: String) {
        self.name = name
        self.value = value
    }
    /// Whether `name` is an HTTP token (RFC 9110 5.6.2), as a header name must be.
    package static func isToken(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.allSatisfy { b in
            (b >= 0x30 && b <= 0x39) || (b | 0x20 >= 0x61 && b | 0x20 <= 0x7A) || "!#$%&'*+-.^_`|~".utf8.contains(b)
        }
    }

    /// Whether `value` holds no control character (which would let it write other
    /// headers).
    package static func isFieldValue(_ value: String) -> Bool {
        value.unicodeScalars.allSatisfy { $0.value >= 0x20 && $0.value != 0x7F }
    }
}

/// An upload request built once: method, URL, headers and the compressed body bytes.
///
/// Every attempt, in this process or after a restart, sends exactly these bytes with
/// the same ``idempotencyKey``; only the attempt number, sent in the
/// `Cairn-Retry-Count` header, changes between attempts.
package struct UploadRequest: Sendable, Equatable {
    /// HTTP method, normally `POST`.
    package var method: String
    /// Absolute URL (`http` or `https`).
    package var url: String
    /// Headers, in order; they include `Content-Encoding`, `Idempotency-Key` and
    /// `User-Agent`.
    package var headers: [HTTPHeader]
    /// The body, exactly as sent: a batch frame for events.
    package var body: [UInt8]
    /// The key a collector uses to drop duplicates; the same on every attempt (empty
    /// for OTLP, which has none).
    package var idempotencyKey: String
    /// Where it goes, which decides the answers' rules and the URL it follows.
    package var destination: UploadDestination
    /// The records (events, or for OTLP log records and spans) its body holds, when
    /// they are not counted from a batch frame.
    package var records: Int?
    /// Whether ``body`` holds the body to send packed (``PackedBody``): the transport
    /// sends its decompression, ``wireBody``.
    package var packed: Bool = false

    /// The body as it goes on the wire: ``body``, unpacked when it is packed; nil for a
    /// packed body that is damaged.
    package var wireBody: [UInt8]? { packed ? PackedBody.unpack(body) : body }

    /// Creates a request.
    package init(method: String = "POST", url: String, headers: [HTTPHeader], body: [UInt8],
                idempotencyKey: String, destination: UploadDestination = .native, records: Int? = nil) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.idempotencyKey = idempotencyKey
        self.destination = destination
        self.records = records
    }

    /// The value of the first header named `name` (compared case-insensitively).
    package func header(_ name: String) -> String? { headers.value(of: name) }

    /// The request for a batch frame as the uploader builds it (docs/FORMATS.md, "Upload
    /// request"): `Content-Type`, `Content-Encoding: zstd`, `Idempotency-Key`,
    /// `User-Agent: cairn-swift/<sdkVersion>` and, with a key, `Authorization: Bearer`.
    package static func batch(url: String, apiKey: String?, sdkVersion: String, body: [UInt8],
                             key: String) -> UploadRequest {
        var headers = [
            HTTPHeader("Content-Type", "application/x-ndjson"),
            HTTPHeader("Content-Encoding", "zstd"),
            HTTPHeader("Idempotency-Key", key),
            HTTPHeader("User-Agent", "cairn-swift/\(sdkVersion)"),
        ]
        if let apiKey { headers.append(HTTPHeader("Authorization", "Bearer \(apiKey)")) }
        return UploadRequest(url: url, headers: headers, body: body, idempotencyKey: key)
    }

    /// The drop counts its `Cairn-Dropped` header reports, by reason (docs/FORMATS.md,
    /// "Upload request"); pairs that do not parse are left out.
    package var reportedDrops: [String: Int] {
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
    package func value(of name: String) -> String? {
        let lower = name.lowercased()
        return first { $0.name.lowercased() == lower }?.value
    }
}

extension UploadRequest {
    /// The request as the snapshot store keeps it: its record (docs/FORMATS.md,
    /// "Snapshot store", "Request record"), little-endian: the method, the URL and the
    /// idempotency key (each a u32 length, then UTF-8), the header count (u32) and each
    /// header's name and value (the same way), then the body (a u64 length, then the
    /// bytes exactly as sent, or packed: ``packed``).
    package var record: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(40 + url.utf8.count + idempotencyKey.utf8.count + headers.count * 32 + body.count)
        LittleEndian.append(&out, string: method)
        LittleEndian.append(&out, string: url)
        LittleEndian.append(&out, string: idempotencyKey)
        // What the record keeps besides what is sent, as entries after the headers,
        // never sent (docs/FORMATS.md, "Snapshot store", "request record").
        var kept = headers
        if destination != .native { kept.append(HTTPHeader(Self.storedDestination, destination.rawValue)) }
        if let records { kept.append(HTTPHeader(Self.storedRecords, String(records))) }
        if packed { kept.append(HTTPHeader(Self.storedBody, "zstd-frames")) }
        LittleEndian.append(&out, UInt64(UInt32(clamping: kept.count)), bytes: 4)
        for h in kept {
            LittleEndian.append(&out, string: h.name)
            LittleEndian.append(&out, string: h.value)
        }
        LittleEndian.append(&out, UInt64(body.count), bytes: 8)
        out += body
        return out
    }

    /// The request a stored record holds; nil when the record does not decode (it must
    /// end exactly after the body; a packed body must be intact: ``PackedBody/isIntact(_:)``).
    package init?(record: [UInt8]) {
        var r = LittleEndian.Reader(bytes: record)
        guard let method = r.string(), let url = r.string(), let key = r.string(),
              let headerCount = r.u32() else { return nil }
        var headers: [HTTPHeader] = []
        for _ in 0..<headerCount {
            guard let name = r.string(), let value = r.string() else { return nil }
            headers.append(HTTPHeader(name, value))
        }
        guard let bodyLength = r.u64(), let body = r.bytes(bodyLength), r.atEnd else { return nil }
        var destination = UploadDestination.native
        var records: Int?
        if let d = headers.first(where: { $0.name == Self.storedDestination }) {
            guard let known = UploadDestination(rawValue: d.value) else { return nil }
            destination = known
        }
        if let n = headers.first(where: { $0.name == Self.storedRecords }) {
            guard let count = Int(n.value), count >= 0 else { return nil }
            records = count
        }
        var packed = false
        if let b = headers.first(where: { $0.name == Self.storedBody }) {
            // Another packing, or a packed body that is damaged, is not sent.
            guard b.value == "zstd-frames", PackedBody.isIntact(body) else { return nil }
            packed = true
        }
        headers.removeAll { [Self.storedDestination, Self.storedRecords, Self.storedBody].contains($0.name) }
        self.init(method: method, url: url, headers: headers, body: body, idempotencyKey: key,
                  destination: destination, records: records)
        self.packed = packed
    }

    /// The record's entry naming a destination other than the native upload.
    static let storedDestination = "Cairn-Stored-Destination"
    /// The record's entry with ``records``.
    static let storedRecords = "Cairn-Stored-Records"
    /// The record's entry saying its body is packed (``packed``).
    static let storedBody = "Cairn-Stored-Body"

    /// The events its body holds: its batch frame's record count, or 1 for a body that
    /// is not a batch (it was still one request's worth of data).
    package var events: Int {
        records ?? (try? FrameDecoder.info(of: body)).map { Int($0.recordCount) } ?? 1
    }

    /// Whether a stored record read back from a damaged store is one intact request
    /// (for ``SnapshotStore``'s salvage): it decodes, its `Idempotency-Key` header (when
    /// it has one) is its key, and its body is a batch frame whose checksum holds.
    /// `.unverifiable` for a batch that needs a dictionary or is larger than 64 MiB
    /// (kept when its store's tree still reached it).
    package static let recordCheck = SnapshotStore.RecordCheck(name: "cairn-upload-request") { record in
        guard let request = UploadRequest(record: record),
              request.header("Idempotency-Key").map({ $0 == request.idempotencyKey }) ?? true else { return .damaged }
        // A packed body's frames were tested as it decoded; an OTLP body has no
        // checksum of its own to test.
        if request.packed { return .intact }
        if request.destination.isOTLP { return .unverifiable }
        let body = request.body
        // Not a batch frame (its magic is checked here too), or a damaged one.
        guard let info = try? FrameDecoder.info(of: body) else { return .damaged }
        // Without the dictionary (Cairn uploads use none) or beyond the limit, the
        // checksum cannot be tested here.
        let limit = 64 << 20
        guard info.dictionaryID == 0, info.contentSize <= UInt64(limit),
              let decoder = try? FrameDecoder(maxContentSize: limit) else { return .unverifiable }
        return (try? decoder.decode(body)) == nil ? .damaged : .intact
    }
}
