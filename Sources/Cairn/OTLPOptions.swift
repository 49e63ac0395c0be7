import CairnBase
import CairnProcessor
import CairnStore
import CairnUploader

/// An OTLP/HTTP destination (docs/FORMATS.md, "OTLP export"): where each signal goes,
/// how it is encoded and compressed, and the service's resource attributes.
///
/// Set ``Cairn/Options/otlp`` to export every event as an OpenTelemetry log record, every
/// span as an OTLP span and every metric report as an OTLP metric, beside the native
/// upload or instead of it:
///
/// ```swift
/// var options = Cairn.Options.fromEnvironment()
/// options.otlp = OTLPOptions(endpoint: "http://otel-collector:4318",
///                            headers: ["x-tenant": "payments"], compression: .gzip)
/// ```
///
/// ``Cairn/Options/fromEnvironment(_:)`` fills it from the standard OpenTelemetry
/// variables (`OTEL_EXPORTER_OTLP_ENDPOINT`, the per-signal `…_ENDPOINT`, `…_HEADERS`,
/// `…_COMPRESSION`, `…_TIMEOUT`, `…_PROTOCOL`, `OTEL_SERVICE_NAME`,
/// `OTEL_RESOURCE_ATTRIBUTES`), as any OpenTelemetry SDK would. The OTLP requests get
/// Cairn's guarantees: built once from the event ring, stored on failure, retried with
/// the same bytes across restarts, under OTLP's rules for answers.
public struct OTLPOptions: Sendable, Equatable {
    /// The wire encoding (`OTEL_EXPORTER_OTLP_PROTOCOL`).
    public enum Encoding: String, Sendable, Equatable {
        /// Binary protobuf, `application/x-protobuf` (`http/protobuf`, the default).
        case protobuf = "http/protobuf"
        /// The OTLP JSON encoding, `application/json` (`http/json`).
        case json = "http/json"
    }

    /// How request bodies are compressed (`OTEL_EXPORTER_OTLP_COMPRESSION`).
    public enum Compression: String, Sendable, Equatable {
        /// As they are (the default, as the specification's).
        case none
        /// gzip, which every collector accepts (zlib is loaded when first needed; without
        /// it, bodies go uncompressed).
        case gzip
        /// zstd, for collectors that accept it (the OpenTelemetry Collector does).
        case zstd
    }

    /// Where and how one signal (logs, traces or metrics) is sent.
    public struct Signal: Sendable, Equatable {
        /// The signal's full URL, used as given (`…/v1/logs`, `…/v1/traces`, `…/v1/metrics`).
        public var url: String
        /// Headers sent with every request (an API key, a tenant). Stored requests are
        /// sent with the headers configured when they go out, so a rotated key rescues
        /// them.
        public var headers: [String: String]
        /// How bodies are compressed.
        public var compression: Compression
        /// How long one request may take; 1 ms ... 10 min, default 10 s.
        public var timeout: Duration
        /// The wire encoding.
        public var encoding: Encoding

        /// A signal sent to `url`.
        public init(url: String, headers: [String: String] = [:], compression: Compression = .none,
                    timeout: Duration = .seconds(10), encoding: Encoding = .protobuf) {
            self.url = url
            self.headers = headers
            self.compression = compression
            self.timeout = timeout
            self.encoding = encoding
        }
    }

    /// Where log records go (events, crashes, hangs, `session_end`, `sdk_health`); nil
    /// sends none.
    public var logs: Signal?
    /// Where spans go; nil sends none.
    public var traces: Signal?
    /// Where metric reports go (swift-metrics' metrics, through `CairnMetrics`); nil
    /// sends none.
    public var metrics: Signal?
    /// `service.name` (`OTEL_SERVICE_NAME`); nil: `service.name` of
    /// ``resourceAttributes``, else the app id.
    public var serviceName: String?
    /// Resource attributes of the service's own (`OTEL_RESOURCE_ATTRIBUTES`), written on
    /// every request's `Resource` beside the ones Cairn sets (docs/FORMATS.md, "OTLP
    /// export", "Resource"); `service.name` and `service.namespace` here win over the app
    /// id.
    public var resourceAttributes: [String: String]
    /// The most one request holds before compression: a batch over it is cut into
    /// several requests of whole records. 64 KiB ... 64 MiB, default 4 MiB (collectors
    /// refuse more than 4 to 64 MiB by default).
    public var maxRequestBytes: Int

    /// Logs, traces and metrics sent to `endpoint` with `/v1/logs`, `/v1/traces` and
    /// `/v1/metrics` appended, with the same headers and settings (as
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` does).
    public init(endpoint: String, headers: [String: String] = [:], compression: Compression = .none,
                timeout: Duration = .seconds(10), encoding: Encoding = .protobuf, serviceName: String? = nil,
                resourceAttributes: [String: String] = [:], maxRequestBytes: Int = 4 << 20) {
        let trimmed = endpoint.trimmingWhiteSpace
        let base = trimmed.hasSuffix("/") ? String(trimmed.dropLast()) : trimmed
        func signal(_ path: String) -> Signal {
            Signal(url: base + path, headers: headers, compression: compression, timeout: timeout, encoding: encoding)
        }
        self.init(logs: signal("/v1/logs"), traces: signal("/v1/traces"), metrics: signal("/v1/metrics"),
                  serviceName: serviceName, resourceAttributes: resourceAttributes, maxRequestBytes: maxRequestBytes)
    }

    /// Each signal configured on its own; a nil signal is not exported.
    public init(logs: Signal?, traces: Signal?, metrics: Signal? = nil, serviceName: String? = nil,
                resourceAttributes: [String: String] = [:], maxRequestBytes: Int = 4 << 20) {
        self.logs = logs
        self.traces = traces
        self.metrics = metrics
        self.serviceName = serviceName
        self.resourceAttributes = resourceAttributes
        self.maxRequestBytes = maxRequestBytes
    }

    /// The options the environment's configuration describes.
    init(_ c: OTLPConfiguration) {
        func signal(_ s: OTLPConfiguration.Signal?) -> Signal? {
            guard let s else { return nil }
            return Signal(url: s.url, headers: Dictionary(s.headers.map { ($0.name, $0.value) }) { $1 },
                          compression: Compression(rawValue: s.compression.rawValue) ?? .none, timeout: s.timeout,
                          encoding: s.encoding == .json ? .json : .protobuf)
        }
        self.init(logs: signal(c.logs), traces: signal(c.traces), metrics: signal(c.metrics), serviceName: c.serviceName,
                  resourceAttributes: Dictionary(c.resourceAttributes.map { ($0.key, $0.value) }) { $1 })
    }

    /// The uploader's configuration: URLs and header values without the white space
    /// around them, headers and attributes in name order (the same request bytes in
    /// every process).
    var configuration: OTLPConfiguration {
        func signal(_ s: Signal?) -> OTLPConfiguration.Signal? {
            guard let s else { return nil }
            return OTLPConfiguration.Signal(
                url: s.url.trimmingWhiteSpace,
                headers: s.headers.sorted { $0.key < $1.key }.map { HTTPHeader($0.key.trimmingWhiteSpace, $0.value.trimmingWhiteSpace) },
                compression: OTLPConfiguration.Compression(rawValue: s.compression.rawValue) ?? .none,
                timeout: s.timeout, encoding: s.encoding == .json ? .json : .protobuf)
        }
        return OTLPConfiguration(logs: signal(logs), traces: signal(traces), metrics: signal(metrics),
                                 serviceName: serviceName.map(\.trimmingWhiteSpace).flatMap { $0.isEmpty ? nil : $0 },
                                 resourceAttributes: resourceAttributes.sorted { $0.key < $1.key }
                                     .map { OTLPConfiguration.Attribute(key: $0.key, value: $0.value) })
    }

    /// The first setting that cannot be used: its name under `Options.otlp`, and why.
    func problem() -> (option: String, reason: String)? {
        if logs == nil && traces == nil && metrics == nil {
            return ("otlp", "has neither logs, traces nor metrics (set nil to export no OTLP)")
        }
        if !(64 << 10 ... 64 << 20).contains(maxRequestBytes) {
            return ("otlp.maxRequestBytes", "\(maxRequestBytes) is outside 64 KiB ... 64 MiB")
        }
        for key in resourceAttributes.keys where key.trimmingWhiteSpace.isEmpty {
            return ("otlp.resourceAttributes", "holds an empty key")
        }
        for (name, signal) in [("logs", logs), ("traces", traces), ("metrics", metrics)] {
            guard let signal else { continue }
            let url = signal.url.trimmingWhiteSpace
            if let why = HTTPTransport.problem(withURL: url) {
                return ("otlp.\(name).url", "\(url.debugDescription) cannot be used: \(why)")
            }
            if signal.timeout < .milliseconds(1) || signal.timeout > .seconds(600) {
                return ("otlp.\(name).timeout", "\(signal.timeout) is outside 1 ms ... 10 min")
            }
            for (key, value) in signal.headers {
                guard HTTPHeader.isToken(key.trimmingWhiteSpace), HTTPHeader.isFieldValue(value) else {
                    return ("otlp.\(name).headers", "\(key.debugDescription) is not an HTTP header name, or its value "
                            + "holds a control character")
                }
            }
        }
        return nil
    }
}
