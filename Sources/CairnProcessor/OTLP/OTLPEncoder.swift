import CairnBase

/// Encodes a batch of events (docs/FORMATS.md, "Event": each record whole, with its
/// `context`) as OTLP requests, by the mapping of docs/FORMATS.md, "OTLP export": spans
/// as an `ExportTraceServiceRequest`, metric reports as an `ExportMetricsServiceRequest`,
/// every other event as a `LogRecord` of an `ExportLogsServiceRequest`. Each record is read once, in place, and written straight
/// into the request; records are grouped under one `Resource` per distinct context and
/// session.
///
/// ```swift
/// let encoder = OTLPEncoder(settings: .init(encoding: .protobuf))
/// for record in batch { _ = encoder.add(record, observedNanos: now) }
/// let (logs, traces, metrics) = encoder.finish()
/// ```
///
/// Not thread-safe: one encoder per batch-forming thread; its buffers are kept from batch
/// to batch.
package final class OTLPEncoder {
    /// The wire encoding (`OTEL_EXPORTER_OTLP_PROTOCOL`).
    package enum Encoding: Sendable, Equatable {
        /// `http/protobuf`.
        case protobuf
        /// `http/json`.
        case json
    }

    /// An OTLP signal: which `Export…ServiceRequest` a request is.
    package enum Signal: Sendable, Equatable, CaseIterable {
        /// `ExportLogsServiceRequest` (`/v1/logs`).
        case logs
        /// `ExportTraceServiceRequest` (`/v1/traces`).
        case traces
        /// `ExportMetricsServiceRequest` (`/v1/metrics`).
        case metrics

        /// The request's list of resources, its resources' list of scopes, and its
        /// scopes' list of records (fields 1, 2 and 2 in all three), by JSON name.
        var resourceList: StaticString {
            switch self {
            case .logs: "resourceLogs"
            case .traces: "resourceSpans"
            case .metrics: "resourceMetrics"
            }
        }

        var scopeList: StaticString {
            switch self {
            case .logs: "scopeLogs"
            case .traces: "scopeSpans"
            case .metrics: "scopeMetrics"
            }
        }

        var recordList: StaticString {
            switch self {
            case .logs: "logRecords"
            case .traces: "spans"
            case .metrics: "metrics"
            }
        }
    }

    /// What the encoder adds to what the records carry.
    package struct Settings: Sendable {
        /// The wire encoding.
        package var encoding: Encoding
        /// `service.name` over everything else (`OTEL_SERVICE_NAME`).
        package var serviceName: String?
        /// Resource attributes the service configured (`OTEL_RESOURCE_ATTRIBUTES`), in
        /// order: `service.name` and `service.namespace` win over the records' app id;
        /// Cairn's own attributes win for the other keys they set.
        package var resourceAttributes: [(key: String, value: String)]
        /// The host's id (`/etc/machine-id`), as `host.id`.
        package var hostID: String?
        /// The Swift runtime's version, as `process.runtime.version`.
        package var runtimeVersion: String?
        /// The most one request holds, in bytes before compression; a batch over it is
        /// cut into requests of whole records (a single record over it goes alone).
        package var maxRequestBytes: Int

        /// Settings with the encoding, and no attributes of the service's own.
        package init(encoding: Encoding, serviceName: String? = nil,
                     resourceAttributes: [(key: String, value: String)] = [], hostID: String? = nil,
                     runtimeVersion: String? = nil, maxRequestBytes: Int = 4 << 20) {
            self.encoding = encoding
            self.serviceName = serviceName
            self.resourceAttributes = resourceAttributes
            self.hostID = hostID
            self.runtimeVersion = runtimeVersion
            self.maxRequestBytes = maxRequestBytes
        }
    }

    /// One request's body and the number of records (log records, spans or metrics) in it.
    package struct Request: Sendable {
        /// The encoded `Export…ServiceRequest`, uncompressed.
        package var body: [UInt8]
        /// Log records, spans or metrics in it.
        package var records: Int
    }

    /// A request's body where the encoder wrote it: consecutive pieces of its buffers
    /// whose bytes, in order, are the body. Valid only during the call it is passed to
    /// (the buffers are the next batch's).
    package struct BodyPieces {
        /// The pieces, in order (some may be empty).
        package let pieces: [UnsafeRawBufferPointer]
        /// The body's length: the pieces' bytes together.
        package let count: Int
        /// The signal whose request it is.
        package let signal: Signal

        /// The body of `pieces`, a request of `signal`.
        package init(_ pieces: [UnsafeRawBufferPointer], signal: Signal) {
            self.pieces = pieces
            self.signal = signal
            count = pieces.reduce(0) { $0 + $1.count }
        }

        /// The body in one array, allocated once at its size.
        package func joined() -> [UInt8] {
            [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
                guard let to = UnsafeMutableRawPointer(buffer.baseAddress) else { return }
                copy(from: 0, count: count, to: to)
                initialized = count
            }
        }

        /// Copies the `count` bytes from `offset` into `to` (whose room it does not check).
        package func copy(from offset: Int, count: Int, to: UnsafeMutableRawPointer) {
            var skip = offset, at = 0
            for piece in pieces where at < count {
                if skip >= piece.count {
                    skip -= piece.count
                    continue
                }
                let n = min(piece.count - skip, count - at)
                if let from = piece.baseAddress { (to + at).copyMemory(from: from + skip, byteCount: n) }
                at += n
                skip = 0
            }
        }
    }

    package let settings: Settings
    private var protobuf: OTLPBatch<ProtobufOutput>?
    private var json: OTLPBatch<OTLPJSONOutput>?

    /// An encoder for batches, with `settings`.
    package init(settings: Settings) {
        self.settings = settings
        switch settings.encoding {
        case .protobuf: protobuf = OTLPBatch(settings: settings)
        case .json: json = OTLPBatch(settings: settings)
        }
    }

    deinit {
        protobuf?.free()
        json?.free()
    }

    /// Adds one event record (its whole JSON); false when it is not an event the mapping
    /// can read (not JSON, or without `type`, `name` or a valid `time`), which the caller
    /// counts as dropped. `observedNanos` is the `observed_time_unix_nano` of a previous
    /// run's `crash` and `session_end` (now, when they are sent).
    ///
    /// With `completion`, `record` is a bare event as the ring holds it, without its final
    /// `}`, and `completion` what completes it (`,"context":{…},"sdk":{…}}`,
    /// ``EventEnvelope/completion(_:)``): the context is then read once per distinct
    /// completion, not once per record.
    package func add(_ record: UnsafeRawBufferPointer, completion: UnsafeRawBufferPointer? = nil,
                     observedNanos: UInt64) -> Bool {
        if protobuf != nil { return protobuf!.add(record, completion: completion, observedNanos: observedNanos) }
        return json!.add(record, completion: completion, observedNanos: observedNanos)
    }

    /// The array form of ``add(_:completion:observedNanos:)`` for a whole record.
    package func add(_ record: [UInt8], observedNanos: UInt64) -> Bool {
        record.withUnsafeBytes { add($0, observedNanos: observedNanos) }
    }

    /// The requests of the records added since the last call (none for a signal with no
    /// record), each at most ``Settings/maxRequestBytes`` unless one record alone is
    /// larger; the encoder is then empty, its buffers kept.
    package func finish() -> (logs: [Request], traces: [Request], metrics: [Request]) {
        let (logs, traces, metrics) = finish { $0.joined() }
        return (logs.map { Request(body: $0.body, records: $0.records) },
                traces.map { Request(body: $0.body, records: $0.records) },
                metrics.map { Request(body: $0.body, records: $0.records) })
    }

    /// ``finish()`` with each request's body made by `body` from where the encoder wrote
    /// it (compressed there, say, with no uncompressed copy of its own).
    package func finish<Body>(making body: (BodyPieces) -> Body)
        -> (logs: [(body: Body, records: Int)], traces: [(body: Body, records: Int)], metrics: [(body: Body, records: Int)]) {
        if protobuf != nil { return protobuf!.finish(making: body) }
        return json!.finish(making: body)
    }
}

/// Nanoseconds since 1970 of an RFC 3339 time as events carry it
/// (`2026-12-02T19:03:04.512+01:00`, or with `Z`; any number of fraction digits, of
/// which nine are read); nil when it is not one, or before 1970.
package func rfc3339Nanos(_ t: UnsafeRawBufferPointer) -> UInt64? {
    func num(_ from: Int, _ count: Int) -> Int? {
        guard from + count <= t.count else { return nil }
        var v = 0
        for k in from..<(from + count) {
            guard t[k] >= 0x30 && t[k] <= 0x39 else { return nil }
            v = v * 10 + Int(t[k] - 0x30)
        }
        return v
    }
    guard t.count >= 20, let year = num(0, 4), t[4] == 0x2D, let month = num(5, 2), t[7] == 0x2D,
          let day = num(8, 2), t[10] == 0x54 || t[10] == 0x74, let hour = num(11, 2), t[13] == 0x3A,
          let minute = num(14, 2), t[16] == 0x3A, let second = num(17, 2),
          (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second < 61
    else { return nil }
    var i = 19
    var nanos = 0
    if t[i] == 0x2E {
        i += 1
        var digits = 0
        while i < t.count, t[i] >= 0x30 && t[i] <= 0x39 {
            if digits < 9 { nanos = nanos * 10 + Int(t[i] - 0x30); digits += 1 }
            i += 1
        }
        guard digits > 0 else { return nil }
        for _ in digits..<9 { nanos *= 10 }
    }
    guard i < t.count else { return nil }
    var offset = 0
    if t[i] == 0x5A || t[i] == 0x7A {
        i += 1
    } else {
        guard t[i] == 0x2B || t[i] == 0x2D, let oh = num(i + 1, 2), t.count > i + 3, t[i + 3] == 0x3A,
              let om = num(i + 4, 2) else { return nil }
        offset = (oh * 60 + om) * (t[i] == 0x2D ? -1 : 1)
        i += 6
    }
    guard i == t.count else { return nil }
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = month <= 2 ? year - 1 : year
    let era = (y >= 0 ? y : y - 399) / 400
    let yoe = y - era * 400
    let mp = (month + 9) % 12
    let doy = (153 * mp + 2) / 5 + day - 1
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
    let days = era * 146_097 + doe - 719_468
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset * 60
    guard seconds >= 0 else { return nil }
    return UInt64(seconds) * 1_000_000_000 + UInt64(nanos)
}
