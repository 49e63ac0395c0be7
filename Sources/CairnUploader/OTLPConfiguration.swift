import CairnBase
import CairnStore
package import CairnProcessor

/// An OTLP/HTTP destination as the standard OpenTelemetry environment configures it
/// (docs/FORMATS.md, "OTLP export", "Configuration"): a URL, headers, compression,
/// timeout and encoding per signal, the service's name and resource attributes.
package struct OTLPConfiguration: Sendable, Equatable {
    /// How request bodies are compressed (`OTEL_EXPORTER_OTLP_COMPRESSION`).
    package enum Compression: String, Sendable, Equatable {
        case none, gzip, zstd
    }

    /// Where and how one signal (logs, traces, metrics) is sent.
    package struct Signal: Sendable, Equatable {
        /// The signal's URL, used as given.
        package var url: String
        /// Headers sent with every request (`…_HEADERS`), in order.
        package var headers: [HTTPHeader]
        package var compression: Compression
        /// For one request (`…_TIMEOUT`).
        package var timeout: Duration
        package var encoding: OTLPEncoder.Encoding

        package init(url: String, headers: [HTTPHeader], compression: Compression, timeout: Duration,
                     encoding: OTLPEncoder.Encoding) {
            self.url = url
            self.headers = headers
            self.compression = compression
            self.timeout = timeout
            self.encoding = encoding
        }
    }

    /// One `key=value` of `OTEL_RESOURCE_ATTRIBUTES`.
    package struct Attribute: Sendable, Equatable {
        package var key: String
        package var value: String

        package init(key: String, value: String) {
            self.key = key
            self.value = value
        }
    }

    /// A variable whose value cannot be used.
    package struct Problem: Sendable, Equatable {
        package var variable: String
        package var raw: String
        package var expected: String
    }

    /// The logs destination; nil when no URL is configured for logs.
    package var logs: Signal?
    /// The traces destination; nil when no URL is configured for traces.
    package var traces: Signal?
    /// The metrics destination; nil when no URL is configured for metrics.
    package var metrics: Signal?
    /// `OTEL_SERVICE_NAME`.
    package var serviceName: String?
    /// `OTEL_RESOURCE_ATTRIBUTES`, in order.
    package var resourceAttributes: [Attribute]

    package init(logs: Signal?, traces: Signal?, metrics: Signal? = nil, serviceName: String?,
                 resourceAttributes: [Attribute]) {
        self.logs = logs
        self.traces = traces
        self.metrics = metrics
        self.serviceName = serviceName
        self.resourceAttributes = resourceAttributes
    }

    /// The signal `destination` names; nil for the native upload, or a signal not
    /// configured.
    package func signal(for destination: UploadDestination) -> Signal? {
        switch destination {
        case .native: nil
        case .otlpLogs: logs
        case .otlpTraces: traces
        case .otlpMetrics: metrics
        }
    }

    /// The signal the encoder's `signal` requests go to; nil when not configured.
    package func signal(_ signal: OTLPEncoder.Signal) -> Signal? {
        switch signal {
        case .logs: logs
        case .traces: traces
        case .metrics: metrics
        }
    }

    /// The configured signals.
    package var signals: [Signal] { [logs, traces, metrics].compactMap { $0 } }

    /// The default timeout of a request, 10 s (the specification's).
    package static let defaultTimeout: Duration = .seconds(10)

    /// What the environment configures: the destination (nil when it names no OTLP
    /// endpoint), whether `OTEL_SDK_DISABLED` turns the SDK off, and the values that
    /// cannot be used (each refused at start with its variable named).
    package static func fromEnvironment(_ env: [String: String])
        -> (configuration: OTLPConfiguration?, disabled: Bool, problems: [Problem])
    {
        var problems: [Problem] = []
        func value(_ key: String) -> String? {
            guard let raw = env[key] else { return nil }
            let v = raw.trimmingWhiteSpace
            return v.isEmpty ? nil : v
        }
        func refuse(_ key: String, _ expected: String) { problems.append(Problem(variable: key, raw: env[key] ?? "",
                                                                                  expected: expected)) }

        var disabled = false
        if let v = value("OTEL_SDK_DISABLED") {
            switch v.lowercased() {
            case "true": disabled = true
            case "false": break
            default: refuse("OTEL_SDK_DISABLED", "true or false")
            }
        }
        var resourceAttributes: [Attribute] = []
        if let v = value("OTEL_RESOURCE_ATTRIBUTES") {
            if let list = keyValueList(v) {
                resourceAttributes = list.map { Attribute(key: $0.key, value: $0.value) }
            } else {
                refuse("OTEL_RESOURCE_ATTRIBUTES", "a list of key=value, separated by commas, percent-encoded")
            }
        }

        let base = value("OTEL_EXPORTER_OTLP_ENDPOINT")
        func signal(_ name: String, path: String) -> Signal? {
            let prefix = "OTEL_EXPORTER_OTLP_" + name + "_"
            let urlVariable = value(prefix + "ENDPOINT") != nil ? prefix + "ENDPOINT" : "OTEL_EXPORTER_OTLP_ENDPOINT"
            var url: String
            if let own = value(prefix + "ENDPOINT") {
                url = own
            } else if let base {
                url = base.hasSuffix("/") ? String(base.dropLast()) + path : base + path
            } else {
                return nil
            }
            if let why = HTTPTransport.problem(withURL: url) {
                refuse(urlVariable, "an http or https URL (\(why))")
                url = ""
            }
            // The signal's own variable, else the common one.
            func setting(_ suffix: String) -> (variable: String, value: String)? {
                if let v = value(prefix + suffix) { return (prefix + suffix, v) }
                if let v = value("OTEL_EXPORTER_OTLP_" + suffix) { return ("OTEL_EXPORTER_OTLP_" + suffix, v) }
                return nil
            }
            var compression = Compression.none
            if let (variable, v) = setting("COMPRESSION") {
                if let c = Compression(rawValue: v.lowercased()) { compression = c } else {
                    refuse(variable, "gzip, zstd or none")
                }
            }
            var timeout = Self.defaultTimeout
            if let (variable, v) = setting("TIMEOUT") {
                if let ms = Int(v), (1...600_000).contains(ms) { timeout = .milliseconds(ms) } else {
                    refuse(variable, "a whole number of milliseconds in 1 ... 600000")
                }
            }
            var encoding = OTLPEncoder.Encoding.protobuf
            if let (variable, v) = setting("PROTOCOL") {
                switch v.lowercased() {
                case "http/protobuf": encoding = .protobuf
                case "http/json": encoding = .json
                case "grpc": refuse(variable, "http/protobuf or http/json (Cairn does not speak gRPC)")
                default: refuse(variable, "http/protobuf or http/json")
                }
            }
            // The common headers, then the signal's, which win for a name both give.
            var headers: [HTTPHeader] = []
            for variable in ["OTEL_EXPORTER_OTLP_HEADERS", prefix + "HEADERS"] {
                guard let v = value(variable) else { continue }
                guard let list = keyValueList(v, headerNames: true) else {
                    refuse(variable, "a list of name=value, separated by commas, percent-encoded, "
                           + "with names that are HTTP tokens and no control characters")
                    continue
                }
                for (k, val) in list {
                    headers.removeAll { $0.name.lowercased() == k.lowercased() }
                    headers.append(HTTPHeader(k, val))
                }
            }
            return Signal(url: url, headers: headers, compression: compression, timeout: timeout, encoding: encoding)
        }
        let logs = signal("LOGS", path: "/v1/logs")
        let traces = signal("TRACES", path: "/v1/traces")
        let metrics = signal("METRICS", path: "/v1/metrics")
        guard logs != nil || traces != nil || metrics != nil else { return (nil, disabled, problems) }
        return (OTLPConfiguration(logs: logs, traces: traces, metrics: metrics, serviceName: value("OTEL_SERVICE_NAME"),
                                  resourceAttributes: resourceAttributes), disabled, problems)
    }

    /// `key=value,key2=value2` as the W3C Baggage header writes it (which the
    /// specification takes for its header and attribute lists): white space around
    /// entries, keys and values trimmed, empty entries skipped, keys and values
    /// percent-decoded. Nil when an entry has no `=`, an empty key, a `%` that is not
    /// followed by two hex digits, or text that is not UTF-8; with `headerNames`, also
    /// when a name is not an HTTP token or a value holds a control character (which would
    /// let it write other headers).
    package static func keyValueList(_ text: String, headerNames: Bool = false) -> [(key: String, value: String)]? {
        var out: [(key: String, value: String)] = []
        for entry in text.split(separator: ",", omittingEmptySubsequences: false) {
            let trimmed = String(entry).trimmingWhiteSpace
            if trimmed.isEmpty { continue }
            guard let equals = trimmed.firstIndex(of: "="),
                  let key = percentDecoded(String(trimmed[..<equals]).trimmingWhiteSpace),
                  let value = percentDecoded(String(trimmed[trimmed.index(after: equals)...]).trimmingWhiteSpace),
                  !key.isEmpty
            else { return nil }
            if headerNames {
                guard HTTPHeader.isToken(key), HTTPHeader.isFieldValue(value) else { return nil }
            }
            out.append((key, value))
        }
        return out
    }

    /// `text` with each `%XX` replaced by its byte; nil for a `%` not followed by two hex
    /// digits, or bytes that are not UTF-8.
    static func percentDecoded(_ text: String) -> String? {
        guard text.contains("%") else { return text }
        var bytes: [UInt8] = []
        var it = Array(text.utf8)[...]
        while let b = it.popFirst() {
            guard b == 0x25 else {
                bytes.append(b)
                continue
            }
            guard let h = it.popFirst().flatMap(Hex.value), let l = it.popFirst().flatMap(Hex.value) else { return nil }
            bytes.append(h << 4 | l)
        }
        return String(validating: bytes, as: UTF8.self)
    }
}
