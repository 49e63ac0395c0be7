import CairnProcessor
import CairnStore
import CairnUploader
public import FoundationEssentials
import Glibc

/// An environment variable whose value did not parse: ``Cairn/Options/validate()`` reports it.
struct EnvironmentProblem: Sendable {
    /// The option it sets.
    var option: String
    /// The variable.
    var variable: String
    /// The value as it was in the environment.
    var raw: String
    /// What was expected, as a phrase ("an integer").
    var expected: String
}

/// Why ``Cairn/start(_:)`` refused to start: which option, and why.
public enum CairnStartError: Error, Equatable, Sendable, CustomStringConvertible {
    /// An option is invalid.
    case invalidOption(name: String, reason: String)
    /// Another instance runs in this process (one SDK, one crash handler, at a time):
    /// shut it down first.
    case alreadyStarted
    /// The SDK is disabled (``Cairn/Options/disabled``, `CAIRN_DISABLED=1`).
    case disabled
    /// Something on disk could not be opened: what, and the underlying error.
    case storage(String)

    /// Readable text.
    public var description: String {
        switch self {
        case .invalidOption(let name, let reason): return "Cairn option \(name): \(reason)"
        case .alreadyStarted: return "Cairn is already started in this process (shut it down first)"
        case .disabled: return "Cairn is disabled by its options"
        case .storage(let what): return "Cairn storage: \(what)"
        }
    }
}

extension Cairn {
    /// Everything ``Cairn/start(_:)`` needs. Only ``Cairn/Options/appID`` and
    /// ``Cairn/Options/distinctID`` have no default that fits every service;
    /// ``Cairn/Options/fromEnvironment(_:)`` reads the rest from `CAIRN_*`.
    public struct Options: Sendable {
        /// The application's id (required).
        public var appID: String
        /// The release, for example `orders@1.4.2`.
        public var release: String?
        /// The build.
        public var build: String?
        /// `production`, `staging`, ...
        public var environment: String?
        /// The default identity of events: a host or instance id suits a service. Each
        /// call may override it (``Cairn/track(_:properties:time:identity:)``). The SDK never invents a user id.
        public var distinctID: String
        /// Where batches are sent (HTTP POST); nil keeps events in the local store, up to
        /// its caps, and sends nothing.
        public var uploadURL: String?
        /// Sent as `Authorization: Bearer <key>`.
        public var apiKey: String?
        /// Where the ring, the snapshot store, run records and crash reports live.
        public var dataDirectory: String
        /// Print upload logs and notes to stderr.
        public var debugLogging: Bool
        /// Start nothing: ``Cairn/start(_:)`` throws ``CairnStartError/disabled``.
        public var disabled: Bool
        /// Sampling rates by tier and event.
        public var sampling: SamplingOptions
        /// Privacy rules (on by default).
        public var privacy: PrivacyOptions
        /// Sanitiser limits.
        public var limits: SanitizerLimits
        /// Allow and deny lists.
        public var filter: EventFilterOptions
        /// Error deduplication window.
        public var dedup: DedupOptions
        /// Events per batch.
        public var maxBatchEvents: Int
        /// Bytes per batch (uncompressed).
        public var maxBatchBytes: Int
        /// Age after which a partial batch is sent.
        public var maxBatchAge: Duration
        /// Bytes of the event ring on disk (16 MiB by default): events waiting to be
        /// batched, and those in batches not yet delivered or stored. Only the part not
        /// yet batched stays in memory; the rest is headroom for bursts and for a
        /// collector far away (at 100k events a second, 16 MiB holds about 340 ms; with
        /// 8 MiB, a 50 ms collector and two cores shared with another busy process, a
        /// run in three shed a few hundred events).
        public var ringCapacity: Int
        /// Bytes of undelivered requests kept on disk.
        public var storeMaxBytes: Int
        /// The HTTP transport; nil for `HTTPTransport` (Cairn's own HTTP/1.1 client,
        /// with ``caFile`` and the proxy variables of the environment). For the package's
        /// own tests, which inject faults a real collector cannot produce on demand.
        package var transport: (any Transport)?
        /// A PEM file of the CA certificates trusted for an `https` upload URL, used
        /// instead of the system store (`CAIRN_CA_FILE`); nil for the system store, which
        /// honours `SSL_CERT_FILE` and `SSL_CERT_DIR`. Verification is never turned off.
        /// Used by the default transport only.
        public var caFile: String?
        /// The TLS library of an `https` upload URL (`CAIRN_TLS_LIBRARY`: `auto`,
        /// `openssl` or `mbedtls`): by default mbedTLS (about 1.4 MiB in the process
        /// where OpenSSL takes about 6 MiB), OpenSSL when mbedTLS is not installed. Used
        /// by the default transport only.
        public var tlsLibrary: TLSLibrary = .automatic
        /// A PEM file with this service's client certificate (and any intermediates),
        /// presented to a collector that asks for one (mutual TLS; `CAIRN_CLIENT_CERT`);
        /// nil for none. Used by the default transport only, with either TLS library.
        public var clientCertificateFile: String?
        /// Its unencrypted PEM private key (`CAIRN_CLIENT_KEY`); nil when it is in
        /// ``clientCertificateFile``.
        public var clientKeyFile: String?
        /// Other places every finished event goes (stdout, the service's own sink, a
        /// test recorder), besides the upload URL.
        public var destinations: [any Destination]
        /// Also capture SIGQUIT as a crash.
        public var captureSIGQUIT: Bool
        /// Give every thread created after `start` an alternate signal stack, so that a
        /// stack overflow on it is reported (threads of libdispatch and of the Swift
        /// concurrency runtime included): 68 KiB of address space per thread, not
        /// resident until used, and a few microseconds per thread creation. On by
        /// default (CairnCrash's `CrashCapture.Options.alternateStacksForNewThreads`).
        public var alternateStacksForNewThreads = true
        /// Properties evaluated for every event; call-site properties win.
        public var dynamicProperties: (@Sendable () -> [String: CairnValue])?
        /// Receives the uploader's start and result logs.
        public var uploadObserver: (any UploadObserver)?
        /// Where the SDK tells the service's operator what needs their attention, debug
        /// logging or not: delivery failing (since when, why, how many requests wait on
        /// disk), refused by the collector (a wrong key or URL, a redirect: nothing is
        /// dropped, requests wait on disk until the configuration changes), recovered; an
        /// upload URL without an API key; a snapshot store that cannot be opened; an SDK
        /// that did not start. One line each (`[cairn] …`, without a newline), when the
        /// state changes, never one per attempt. Default: stderr
        /// (``Cairn/standardErrorNotices``). Give a function to route them to the
        /// service's own log, or nil (`CAIRN_NOTICES=0`) to silence them.
        ///
        /// ```swift
        /// options.notices = { line in logger.warning("\(line)") }
        /// ```
        public var notices: (@Sendable (String) -> Void)? = Cairn.standardErrorNotices
        /// How often the SDK reports on itself with an `sdk_health` event (docs/FORMATS.md,
        /// "SDK health"), plus once at ``Cairn/shutdown(timeout:)``; nil turns it off. Default 60 s;
        /// 100 ms ... 24 h.
        public var healthInterval: Duration? = .seconds(60)
        /// An OTLP/HTTP destination (docs/FORMATS.md, "OTLP export"): events as
        /// OpenTelemetry log records, spans as OTLP spans, with the same guarantees as the
        /// native upload (stored on failure, retried with the same bytes). Beside
        /// ``uploadURL`` (one ring, two destinations) or instead of it. Nil by default;
        /// ``fromEnvironment(_:)`` sets it from `OTEL_EXPORTER_OTLP_ENDPOINT` and the other
        /// standard OpenTelemetry variables.
        public var otlp: OTLPOptions?
        /// Signals on which the SDK shuts itself down before the process ends: it flushes
        /// within ``shutdownTimeout``, records the run as ended `clean`, then hands the
        /// signal on to what was installed before it (the service's own handler, or the
        /// default action, which ends the process as the signal would have). Empty by
        /// default; `[SIGTERM, SIGINT]` (`CAIRN_HANDLE_TERMINATION=1`) suits services
        /// stopped by systemd, Kubernetes or a deploy. Services with their own lifecycle
        /// code call ``Cairn/shutdown(timeout:)`` from it instead.
        public var terminationSignals: [Int32] = []
        /// The deadline of the shutdown a termination signal starts. Default 5 s
        /// (`CAIRN_SHUTDOWN_TIMEOUT_MS`); 0 ... 10 min.
        public var shutdownTimeout: Duration = .seconds(5)
        /// Whether stored requests go where the options say now, rather than where they
        /// were first meant to go. True by default: a stored batch keeps its bytes and its
        /// `Idempotency-Key`, but is sent to the current upload URL with the current API
        /// key, so fixing a wrong URL or rotating a key rescues what waits on disk, and
        /// what was stored while no URL was set is sent once one is. False pins every
        /// request to the URL and key it was built with.
        public var storedRequestsFollowDestination: Bool = true
        /// The proxy variables (`HTTPTransport.proxyVariableNames`) as
        /// ``fromEnvironment(_:)`` found them; nil: read from the process at start, on its
        /// caller's thread (never later, from a background thread racing `setenv`).
        var proxyEnvironment: [String: String]?
        /// `CAIRN_*` values that did not parse, reported by ``validate()``.
        var environmentProblems: [EnvironmentProblem] = []

        /// Options with defaults: data in `./.cairn`, privacy on, everything kept.
        public init(appID: String, distinctID: String, release: String? = nil, build: String? = nil,
                    environment: String? = nil, uploadURL: String? = nil, apiKey: String? = nil,
                    dataDirectory: String = ".cairn", debugLogging: Bool = false, disabled: Bool = false,
                    sampling: SamplingOptions = .init(), privacy: PrivacyOptions = .init(),
                    limits: SanitizerLimits = .init(), filter: EventFilterOptions = .init(),
                    dedup: DedupOptions = .init(), maxBatchEvents: Int = 500, maxBatchBytes: Int = 512 * 1024,
                    maxBatchAge: Duration = .seconds(1), ringCapacity: Int = 16 << 20,
                    storeMaxBytes: Int = 32 << 20,
                    destinations: [any Destination] = [], captureSIGQUIT: Bool = false,
                    dynamicProperties: (@Sendable () -> [String: CairnValue])? = nil,
                    uploadObserver: (any UploadObserver)? = nil) {
            self.appID = appID
            self.distinctID = distinctID
            self.release = release
            self.build = build
            self.environment = environment
            self.uploadURL = uploadURL
            self.apiKey = apiKey
            self.dataDirectory = dataDirectory
            self.debugLogging = debugLogging
            self.disabled = disabled
            self.sampling = sampling
            self.privacy = privacy
            self.limits = limits
            self.filter = filter
            self.dedup = dedup
            self.maxBatchEvents = maxBatchEvents
            self.maxBatchBytes = maxBatchBytes
            self.maxBatchAge = maxBatchAge
            self.ringCapacity = ringCapacity
            self.storeMaxBytes = storeMaxBytes
            self.destinations = destinations
            self.captureSIGQUIT = captureSIGQUIT
            self.dynamicProperties = dynamicProperties
            self.uploadObserver = uploadObserver
        }

        /// Options from the environment, the way services are configured:
        /// `CAIRN_APP_ID`, `CAIRN_DISTINCT_ID` (default: the host name), `CAIRN_RELEASE`,
        /// `CAIRN_BUILD`, `CAIRN_ENVIRONMENT`, `CAIRN_UPLOAD_URL`, `CAIRN_API_KEY`,
        /// `CAIRN_DATA_DIR`, `CAIRN_DEBUG`, `CAIRN_NOTICES` (0 silences ``notices``), `CAIRN_DISABLED`, `CAIRN_PRIVACY` (false turns
        /// the privacy rules off), `CAIRN_HANDLE_TERMINATION` (see
        /// ``terminationSignals``), `CAIRN_SAMPLE_RATE` (0...1, the sampled tier),
        /// `CAIRN_BATCH_EVENTS`, `CAIRN_BATCH_AGE_MS`, `CAIRN_HEALTH_INTERVAL_MS` (0 turns
        /// `sdk_health` off), `CAIRN_SHUTDOWN_TIMEOUT_MS`, `CAIRN_CA_FILE`,
        /// `CAIRN_TLS_LIBRARY` (`auto`, `openssl`, `mbedtls`), `CAIRN_CLIENT_CERT`,
        /// `CAIRN_CLIENT_KEY`.
        ///
        /// Every value is read without the white space around it (a trailing newline from
        /// a secrets file is harmless); an empty value counts as unset. Booleans are
        /// `1`/`true`/`yes`/`on` or `0`/`false`/`no`/`off`, in any case. A value that does
        /// not parse is not ignored: ``validate()`` (and so ``Cairn/start(_:)``) reports it with the
        /// variable and the value as typed.
        public static func fromEnvironment(_ env: [String: String] = ProcessInfo.processInfo.environment) -> Options {
            var problems: [EnvironmentProblem] = []
            func value(_ key: String) -> String? {
                guard let raw = env[key] else { return nil }
                let v = raw.trimmingWhiteSpace
                return v.isEmpty ? nil : v
            }
            func flag(_ key: String, option: String) -> Bool? {
                guard let v = value(key) else { return nil }
                switch v.lowercased() {
                case "1", "true", "yes", "on": return true
                case "0", "false", "no", "off": return false
                default:
                    problems.append(.init(option: option, variable: key, raw: env[key] ?? "",
                                          expected: "a boolean (1/true/yes/on or 0/false/no/off)"))
                    return nil
                }
            }
            func integer(_ key: String, option: String, _ range: ClosedRange<Int>, zero: Bool = false) -> Int? {
                guard let v = value(key) else { return nil }
                guard let n = Int(v), range.contains(n) || (zero && n == 0) else {
                    let within = "an integer in \(range.lowerBound) ... \(range.upperBound)" + (zero ? " or 0" : "")
                    problems.append(.init(option: option, variable: key, raw: env[key] ?? "", expected: within))
                    return nil
                }
                return n
            }
            var o = Options(appID: value("CAIRN_APP_ID") ?? "",
                            distinctID: value("CAIRN_DISTINCT_ID") ?? ProcessInfo.processInfo.hostName)
            o.release = value("CAIRN_RELEASE")
            o.build = value("CAIRN_BUILD")
            o.environment = value("CAIRN_ENVIRONMENT")
            o.uploadURL = value("CAIRN_UPLOAD_URL")
            o.apiKey = value("CAIRN_API_KEY")
            o.caFile = value("CAIRN_CA_FILE")
            o.clientCertificateFile = value("CAIRN_CLIENT_CERT")
            o.clientKeyFile = value("CAIRN_CLIENT_KEY")
            o.proxyEnvironment = env.filter { HTTPTransport.proxyVariableNames.contains($0.key) }
            if let v = value("CAIRN_TLS_LIBRARY") {
                switch v.lowercased() {
                case "auto": o.tlsLibrary = .automatic
                case "openssl": o.tlsLibrary = .openSSL
                case "mbedtls": o.tlsLibrary = .mbedTLS
                default:
                    problems.append(.init(option: "tlsLibrary", variable: "CAIRN_TLS_LIBRARY",
                                          raw: env["CAIRN_TLS_LIBRARY"] ?? "", expected: "auto, openssl or mbedtls"))
                }
            }
            if let dir = value("CAIRN_DATA_DIR") { o.dataDirectory = dir }
            if let b = flag("CAIRN_DEBUG", option: "debugLogging") { o.debugLogging = b }
            if flag("CAIRN_NOTICES", option: "notices") == false { o.notices = nil }
            if let b = flag("CAIRN_DISABLED", option: "disabled") { o.disabled = b }
            if let b = flag("CAIRN_PRIVACY", option: "privacy.enabled") { o.privacy.enabled = b }
            if flag("CAIRN_HANDLE_TERMINATION", option: "terminationSignals") == true {
                o.terminationSignals = [SIGTERM, SIGINT]
            }
            if let v = value("CAIRN_SAMPLE_RATE") {
                if let rate = Double(v), rate >= 0, rate <= 1 {
                    o.sampling.rate = rate
                } else {
                    problems.append(.init(option: "sampling.rate", variable: "CAIRN_SAMPLE_RATE",
                                          raw: env["CAIRN_SAMPLE_RATE"] ?? "", expected: "a number between 0 and 1"))
                }
            }
            if let n = integer("CAIRN_BATCH_EVENTS", option: "maxBatchEvents", 1...10_000) { o.maxBatchEvents = n }
            if let ms = integer("CAIRN_BATCH_AGE_MS", option: "maxBatchAge", 1...3_600_000) {
                o.maxBatchAge = .milliseconds(ms)
            }
            if let ms = integer("CAIRN_HEALTH_INTERVAL_MS", option: "healthInterval", 100...86_400_000, zero: true) {
                o.healthInterval = ms == 0 ? nil : .milliseconds(ms)
            }
            if let ms = integer("CAIRN_SHUTDOWN_TIMEOUT_MS", option: "shutdownTimeout", 0...600_000) {
                o.shutdownTimeout = .milliseconds(ms)
            }
            // The standard OpenTelemetry variables: an OTLP destination, beside or
            // instead of the upload URL.
            let otel = OTLPConfiguration.fromEnvironment(env)
            o.otlp = otel.configuration.map(OTLPOptions.init)
            if otel.disabled { o.disabled = true }
            // Without CAIRN_APP_ID, the service's name as OpenTelemetry knows it, as an
            // OpenTelemetry SDK would: OTEL_SERVICE_NAME, `service.name` in
            // OTEL_RESOURCE_ATTRIBUTES, else (with an OTLP destination)
            // `unknown_service:<process name>`.
            if o.appID.isEmpty, let otlp = otel.configuration {
                o.appID = otlp.serviceName ?? otlp.resourceAttributes.last(where: { $0.key == "service.name" })?.value
                    ?? "unknown_service:" + ProcessInfo.processInfo.processName
            }
            problems += otel.problems.map {
                EnvironmentProblem(option: "otlp", variable: $0.variable, raw: $0.raw, expected: $0.expected)
            }
            o.environmentProblems = problems
            return o
        }

        /// These options as ``Cairn/start(_:)`` uses them: the upload URL, the API key and the CA file
        /// without the white space around them (an empty one is unset).
        func normalized() -> Options {
            var o = self
            func trim(_ s: String?) -> String? {
                guard let t = s?.trimmingWhiteSpace, !t.isEmpty else { return nil }
                return t
            }
            o.uploadURL = trim(uploadURL)
            o.apiKey = trim(apiKey)
            o.caFile = trim(caFile)
            o.clientCertificateFile = trim(clientCertificateFile)
            o.clientKeyFile = trim(clientKeyFile)
            return o
        }

        /// `machine` with this service's app id, release, build and environment.
        func common(_ machine: CommonProperties) -> CommonProperties {
            var common = machine
            common.appID = appID
            common.release = release
            common.build = build
            common.environment = environment
            return common
        }

        /// Checks every option; the error names the first bad one and why, quoting the
        /// value as it was given. The upload URL, the API key and the CA file are checked
        /// as ``Cairn/start(_:)`` uses them: without surrounding white space.
        public func validate() throws(CairnStartError) {
            func bad(_ name: String, _ why: String) -> CairnStartError { .invalidOption(name: name, reason: why) }
            if let p = environmentProblems.first {
                throw bad(p.option, "\(p.variable)=\(p.raw.debugDescription) is not \(p.expected)")
            }
            let o = normalized()
            if appID.isEmpty { throw bad("appID", "is empty (set it, or CAIRN_APP_ID)") }
            if distinctID.isEmpty { throw bad("distinctID", "is empty (a host or instance id suits a service)") }
            if dataDirectory.isEmpty { throw bad("dataDirectory", "is empty") }
            if let url = o.uploadURL, let why = HTTPTransport.problem(withURL: url) {
                throw bad("uploadURL", "\(url.debugDescription) cannot be used: \(why) (CAIRN_UPLOAD_URL)")
            }
            if let otlp, let (option, reason) = otlp.problem() { throw bad(option, reason) }
            // A proxy variable that applies to the upload URL or an OTLP endpoint and cannot
            // be used would hold every request: said now, naming the variable. Others are
            // ignored.
            if transport == nil {
                let proxies = HTTPTransport(environment: proxyEnvironment ?? HTTPTransport.proxyEnvironment())
                let urls = [("uploadURL", o.uploadURL), ("otlp", otlp?.logs?.url.trimmingWhiteSpace),
                            ("otlp", otlp?.traces?.url.trimmingWhiteSpace), ("otlp", otlp?.metrics?.url.trimmingWhiteSpace)]
                for case let (option, url?) in urls {
                    if case .failure(let why) = proxies.proxy(for: url) {
                        throw bad(option, "\(url.debugDescription) cannot be reached: \(why.message)")
                    }
                }
            }
            if let key = o.apiKey, !key.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value < 0x7F }) {
                throw bad("apiKey", "holds a control or non-ASCII character, which an HTTP header cannot carry "
                          + "(CAIRN_API_KEY)")
            }
            if let file = o.caFile, !FileManager.default.isReadableFile(atPath: file) {
                throw bad("caFile", "\(file.debugDescription) is not a readable file (CAIRN_CA_FILE)")
            }
            if let file = o.clientCertificateFile, !FileManager.default.isReadableFile(atPath: file) {
                throw bad("clientCertificateFile", "\(file.debugDescription) is not a readable file (CAIRN_CLIENT_CERT)")
            }
            if let file = o.clientKeyFile {
                guard o.clientCertificateFile != nil else {
                    throw bad("clientKeyFile", "is set without a client certificate (CAIRN_CLIENT_CERT)")
                }
                if !FileManager.default.isReadableFile(atPath: file) {
                    throw bad("clientKeyFile", "\(file.debugDescription) is not a readable file (CAIRN_CLIENT_KEY)")
                }
            }
            if !(sampling.rate >= 0 && sampling.rate <= 1) {
                throw bad("sampling.rate", "\(sampling.rate) is not between 0 and 1")
            }
            for (tier, rate) in sampling.tierRates where !(rate >= 0 && rate <= 1) {
                throw bad("sampling.tierRates[\(tier)]", "\(rate) is not between 0 and 1")
            }
            for (name, rate) in sampling.eventRates where !(rate >= 0 && rate <= 1) {
                throw bad("sampling.eventRates[\(name)]", "\(rate) is not between 0 and 1")
            }
            if privacy.sensitiveKeyBytes > PrivacyOptions.maxSensitiveKeyBytes {
                throw bad("privacy.sensitiveKeys", "hold \(privacy.sensitiveKeyBytes) bytes; at most "
                          + "\(PrivacyOptions.maxSensitiveKeyBytes) are accepted")
            }
            if !(1...10_000).contains(maxBatchEvents) {
                throw bad("maxBatchEvents", "\(maxBatchEvents) is outside 1 ... 10000 (CAIRN_BATCH_EVENTS)")
            }
            if !(1024...(64 << 20)).contains(maxBatchBytes) {
                throw bad("maxBatchBytes", "\(maxBatchBytes) is outside 1 KiB ... 64 MiB")
            }
            if maxBatchAge <= .zero || maxBatchAge > .seconds(3600) {
                throw bad("maxBatchAge", "\(maxBatchAge) is outside (0, 1 h] (CAIRN_BATCH_AGE_MS)")
            }
            if let h = healthInterval, h < .milliseconds(100) || h > .seconds(86_400) {
                throw bad("healthInterval", "\(h) is outside 100 ms ... 24 h (CAIRN_HEALTH_INTERVAL_MS, 0 turns it off)")
            }
            if !((64 << 10)...(1 << 30)).contains(ringCapacity) {
                throw bad("ringCapacity", "\(ringCapacity) is outside 64 KiB ... 1 GiB")
            }
            if !((1 << 20)...(1 << 34)).contains(storeMaxBytes) {
                throw bad("storeMaxBytes", "\(storeMaxBytes) is outside 1 MiB ... 16 GiB")
            }
            if shutdownTimeout < .zero || shutdownTimeout > .seconds(600) {
                throw bad("shutdownTimeout", "\(shutdownTimeout) is outside 0 ... 10 min (CAIRN_SHUTDOWN_TIMEOUT_MS)")
            }
            for signal in terminationSignals where ![SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2].contains(signal) {
                throw bad("terminationSignals", "signal \(signal) is not one a service is asked to stop with "
                          + "(SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2)")
            }
        }
    }
}
