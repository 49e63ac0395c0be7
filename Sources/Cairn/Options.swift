import CairnProcessor
import CairnUploader
import Foundation

/// Why `Cairn.start` refused to start: which option, and why.
public enum CairnStartError: Error, Equatable, Sendable, CustomStringConvertible {
    /// An option is invalid.
    case invalidOption(name: String, reason: String)
    /// `Cairn.start` was already called in this process (one SDK, one crash handler).
    case alreadyStarted
    /// The SDK is disabled (`Options.disabled`, `CAIRN_DISABLED=1`).
    case disabled
    /// Something on disk could not be opened: what, and the underlying error.
    case storage(String)

    /// Readable text.
    public var description: String {
        switch self {
        case .invalidOption(let name, let reason): return "Cairn option \(name): \(reason)"
        case .alreadyStarted: return "Cairn is already started in this process"
        case .disabled: return "Cairn is disabled by its options"
        case .storage(let what): return "Cairn storage: \(what)"
        }
    }
}

extension Cairn {
    /// Everything `Cairn.start` needs. Only `appID` and `distinctID` have no default
    /// that fits every service; `fromEnvironment()` reads the rest from `CAIRN_*`.
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
        /// call may override it (`track(..., identity:)`). The SDK never invents a user id.
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
        /// Start nothing: `Cairn.start` throws `.disabled`.
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
        /// Bytes of the event ring on disk (events waiting to be batched).
        public var ringCapacity: Int
        /// Bytes of undelivered requests kept on disk.
        public var storeMaxBytes: Int
        /// The HTTP transport; nil for libcurl.
        public var transport: (any Transport)?
        /// Other places every finished event goes (stdout, the service's own sink, a
        /// test recorder), besides the upload URL.
        public var destinations: [any Destination]
        /// Also capture SIGQUIT as a crash.
        public var captureSIGQUIT: Bool
        /// Properties evaluated for every event; call-site properties win.
        public var dynamicProperties: (@Sendable () -> [String: CairnValue])?
        /// Receives the uploader's start and result logs.
        public var uploadObserver: (any UploadObserver)?
        /// How often the SDK reports on itself with an `sdk_health` event (docs/FORMATS.md,
        /// "SDK health"), plus once at `shutdown`; nil turns it off. Default 60 s;
        /// 100 ms ... 24 h.
        public var healthInterval: Duration? = .seconds(60)

        /// Options with defaults: data in `./.cairn`, privacy on, everything kept.
        public init(appID: String, distinctID: String, release: String? = nil, build: String? = nil,
                    environment: String? = nil, uploadURL: String? = nil, apiKey: String? = nil,
                    dataDirectory: String = ".cairn", debugLogging: Bool = false, disabled: Bool = false,
                    sampling: SamplingOptions = .init(), privacy: PrivacyOptions = .init(),
                    limits: SanitizerLimits = .init(), filter: EventFilterOptions = .init(),
                    dedup: DedupOptions = .init(), maxBatchEvents: Int = 500, maxBatchBytes: Int = 512 * 1024,
                    maxBatchAge: Duration = .seconds(1), ringCapacity: Int = 4 << 20,
                    storeMaxBytes: Int = 32 << 20, transport: (any Transport)? = nil,
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
            self.transport = transport
            self.destinations = destinations
            self.captureSIGQUIT = captureSIGQUIT
            self.dynamicProperties = dynamicProperties
            self.uploadObserver = uploadObserver
        }

        /// Options from the environment, the way services are configured:
        /// `CAIRN_APP_ID`, `CAIRN_DISTINCT_ID` (default: the host name), `CAIRN_RELEASE`,
        /// `CAIRN_BUILD`, `CAIRN_ENVIRONMENT`, `CAIRN_UPLOAD_URL`, `CAIRN_API_KEY`,
        /// `CAIRN_DATA_DIR`, `CAIRN_DEBUG` (1/true), `CAIRN_DISABLED` (1/true),
        /// `CAIRN_SAMPLE_RATE` (0...1, the sampled tier), `CAIRN_PRIVACY` (0/false turns
        /// the privacy rules off), `CAIRN_BATCH_EVENTS`, `CAIRN_BATCH_AGE_MS`,
        /// `CAIRN_HEALTH_INTERVAL_MS` (0 turns `sdk_health` off).
        /// Values that do not parse are reported by `start` (`validate`), not ignored.
        public static func fromEnvironment(_ env: [String: String] = ProcessInfo.processInfo.environment) -> Options {
            func flag(_ key: String) -> Bool { ["1", "true", "yes", "on"].contains(env[key]?.lowercased() ?? "") }
            var o = Options(appID: env["CAIRN_APP_ID"] ?? "",
                            distinctID: env["CAIRN_DISTINCT_ID"] ?? ProcessInfo.processInfo.hostName)
            o.release = env["CAIRN_RELEASE"]
            o.build = env["CAIRN_BUILD"]
            o.environment = env["CAIRN_ENVIRONMENT"]
            o.uploadURL = env["CAIRN_UPLOAD_URL"].flatMap { $0.isEmpty ? nil : $0 }
            o.apiKey = env["CAIRN_API_KEY"]
            if let dir = env["CAIRN_DATA_DIR"], !dir.isEmpty { o.dataDirectory = dir }
            o.debugLogging = flag("CAIRN_DEBUG")
            o.disabled = flag("CAIRN_DISABLED")
            if let rate = env["CAIRN_SAMPLE_RATE"] { o.sampling.rate = Double(rate) ?? .nan }
            if let p = env["CAIRN_PRIVACY"]?.lowercased(), ["0", "false", "no", "off"].contains(p) {
                o.privacy.enabled = false
            }
            if let n = env["CAIRN_BATCH_EVENTS"] { o.maxBatchEvents = Int(n) ?? -1 }
            if let ms = env["CAIRN_BATCH_AGE_MS"] { o.maxBatchAge = .milliseconds(Int(ms) ?? -1) }
            if let ms = env["CAIRN_HEALTH_INTERVAL_MS"] {
                let n = Int(ms) ?? -1
                o.healthInterval = n == 0 ? nil : .milliseconds(n)
            }
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

        /// Checks every option; the error names the first bad one and why.
        public func validate() throws(CairnStartError) {
            func bad(_ name: String, _ why: String) -> CairnStartError { .invalidOption(name: name, reason: why) }
            if appID.isEmpty { throw bad("appID", "is empty (set it, or CAIRN_APP_ID)") }
            if distinctID.isEmpty { throw bad("distinctID", "is empty (a host or instance id suits a service)") }
            if dataDirectory.isEmpty { throw bad("dataDirectory", "is empty") }
            if let url = uploadURL {
                let lower = url.lowercased()
                guard (lower.hasPrefix("http://") || lower.hasPrefix("https://")), URL(string: url)?.host != nil else {
                    throw bad("uploadURL", "\"\(url)\" is not an http or https URL")
                }
            }
            if !(sampling.rate >= 0 && sampling.rate <= 1) {
                throw bad("sampling.rate", "\(sampling.rate) is not between 0 and 1 (CAIRN_SAMPLE_RATE)")
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
        }
    }
}
