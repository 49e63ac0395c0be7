import CairnBase
import CairnCrash
import CairnProcessor
import CairnStore
import CairnUploader
import FoundationEssentials
import Dispatch
import Glibc
import Synchronization

/// How ``Cairn/setUserProperties(_:mode:identity:)`` changes the user's properties on the collector.
public enum UserPropertyMode: String, Sendable, CaseIterable {
    /// Set the values (type `user_set`).
    case set
    /// Set the values only where none is set yet (type `user_setOnce`).
    case setOnce
    /// Add the numbers to the current values (type `user_add`); values that are not
    /// numbers are dropped and counted.
    case add
    /// Remove the properties named by the keys; the values are ignored (type
    /// `user_unset`).
    case unset

    var eventType: EventType {
        switch self {
        case .set: return .userSet
        case .setOnce: return .userSetOnce
        case .add: return .userAdd
        case .unset: return .userUnset
        }
    }
}

/// A typed event: services declare an enum of what can happen and track its cases.
///
/// ```swift
/// enum OrderEvent: CairnEvent {
///     case placed(total: Double), failed(reason: String)
///     var name: String { switch self { case .placed: "order_placed"; case .failed: "order_failed" } }
///     var properties: [String: CairnValue] {
///         switch self { case .placed(let t): ["total": .double(t)]; case .failed(let r): ["reason": .string(r)] }
///     }
///     var isError: Bool { if case .failed = self { true } else { false } }
/// }
/// cairn.track(OrderEvent.placed(total: 42))
/// ```
public protocol CairnEvent: Sendable {
    /// The event's name.
    var name: String { get }
    /// Its properties (default: none).
    var properties: [String: CairnValue] { get }
    /// How much it matters (default: ``Tier/sampled``).
    var tier: Tier { get }
    /// Whether it reports an error: errors are always kept by sampling and folded by
    /// deduplication (default: false).
    var isError: Bool { get }
}

extension CairnEvent {
    /// No properties.
    public var properties: [String: CairnValue] { [:] }
    /// The sampled tier.
    public var tier: Tier { .sampled }
    /// Not an error.
    public var isError: Bool { false }
}

/// The Cairn SDK: start it once, early, then track what happens.
///
/// ```swift
/// let cairn = try Cairn.start(.fromEnvironment())
/// cairn.track("order_placed", properties: ["plan": "pro", "seats": 3])
/// ```
///
/// Tracking calls return in about a microsecond: the event is encoded on the caller's
/// thread straight into a memory-mapped ring on disk (it survives a crash or
/// `kill -9` from then on) and one background thread batches, compresses and uploads.
/// Nothing here blocks on the network, and bad input is counted and dropped, never
/// thrown at the caller.
public final class Cairn: @unchecked Sendable {
    // @unchecked: mutable state lives in `state` (a lock) and atomics.

    /// The started SDK, or nil before ``start(_:)`` (and after ``shutdown(timeout:)``).
    public static var shared: Cairn? { sharedInstance.withLock { $0 } }
    static let sharedInstance = Locked<Cairn?>(nil)
    // One instance at a time: set by a compare-and-exchange on the thread that calls
    // `start`, cleared when that instance's `shutdown` is over.
    static let startedOnce = Atomic<Bool>(false)

    /// The options it started with.
    public let options: Options
    /// This process run's session id (UUIDv7).
    public let sessionID: String
    /// The processor every event goes through.
    package let processor: Processor
    /// When this data directory was first used (Unix ms) and in which time zone: read
    /// (at the first start, written) by the background thread at start; an access before
    /// that reads it at once.
    package var install: InstallRecord {
        installSlot.withLock { slot in
            if let record = slot.record { return record }
            let record = isEnabled ? InstallRecord.load(directory: options.dataDirectory, release: options.release)
                : InstallRecord.unsaved(release: options.release)
            slot.record = record
            return record
        }
    }

    /// The install record, read on first use: by the background thread at start, or
    /// by an `app_install` tracked before that.
    private let installSlot = Locked(InstallSlot())

    struct InstallSlot {
        var record: InstallRecord?
    }

    /// nil in a disabled SDK (``startOrDisabled(_:)`` after a failed start).
    let ring: Ring?
    /// The path every event takes; nil in a disabled SDK.
    let pipeline: EventPipeline?
    /// nil in a disabled SDK.
    let crash: CrashCapture?
    /// Why this SDK is disabled (every call a no-op), or nil when it runs.
    public let startError: CairnStartError?
    /// Whether this SDK runs; false for the disabled SDK ``startOrDisabled(_:)`` returns when
    /// ``start(_:)`` failed, on which every call is a cheap no-op.
    public var isEnabled: Bool { ring != nil }
    let drops: DropCounters
    let state: Locked<State>
    let background: BackgroundWork

    struct State {
        var identity: Identity
        var accountSent: Set<String> = []
        var store: SnapshotStore?
        var ready = false
        var stopped = false
        /// ``Cairn/shutdown(timeout:)`` stopped waiting for the background start: it must not start the
        /// uploader after that.
        var startAbandoned = false
        /// What the first ``Cairn/shutdown(timeout:)`` returned, once it has finished.
        var shutdownResult: Bool?
        /// How long ``Cairn/start(_:)`` took on the caller's thread, for the first `sdk_health`.
        var startNanos: UInt64 = 0
    }

    /// The task-local span: events tracked inside
    /// ``withSpan(_:traceparent:tracestate:operation:)-7jzhj`` carry its trace and span ids.
    @TaskLocal public static var currentSpan: SpanContext?

    init(options: Options, crash: CrashCapture?, ring: Ring?, processor: Processor,
                 startError: CairnStartError? = nil) {
        self.options = options
        self.crash = crash
        sessionID = crash?.sessionID ?? ""
        self.ring = ring
        let drops = DropCounters(ring: ring)
        self.drops = drops
        self.startError = startError
        let stats = ring?.stats()
        self.processor = processor
        pipeline = ring.map { EventPipeline(ring: $0, processor: processor, drops: drops, options: options) }
        state = Locked(State(identity: Identity(distinctID: options.distinctID)))
        health = Locked(HealthState(baseline: HealthBaseline(at: DispatchTime.now().uptimeNanoseconds, ring: stats)))
        background = BackgroundWork()
    }

    /// The uploader, once the background start has made it.
    var uploader: Uploader? { pipeline?.sink.uploader.withLock { $0 } }

    /// Where the next `sdk_health` counts from; held while one is built and tracked, so
    /// the periodic one and the final one at ``shutdown(timeout:)`` never interleave.
    let health: Locked<HealthState>
    /// The integrations' periodic work (``addPeriodic(every:_:)``).
    let periodic = Locked<[PeriodicWork]>([])
}
