package import CairnBase
package import CairnProcessor

/// Options of the ``Uploader``.
package struct UploaderOptions: Sendable {
    /// The collector's batch endpoint.
    package var url: String
    /// Sent as `Authorization: Bearer <key>` (redacted in logs).
    package var apiKey: String?
    /// A batch closes at this many events...
    package var maxBatchEvents: Int
    /// ...or this many bytes of JSON...
    package var maxBatchBytes: Int
    /// ...or when its first event has waited this long.
    package var maxBatchAge: Duration
    /// Attempts in this process before a batch goes to the snapshot store.
    package var attempts: Int
    /// Waits between attempts (and between replays of a stored snapshot).
    package var backoff: Backoff
    /// The longest pause a `Retry-After` can impose.
    package var maxPause: Duration
    /// Waits while the collector refuses the configuration (``DeliveryAction/hold``):
    /// after the n-th refusal in a row, a random time between half and all of
    /// min(cap, base × 2^n) passes before one stored request probes again; 30 s to 10 min
    /// by default.
    package var holdBackoff = Backoff(base: .seconds(30), cap: .seconds(600))
    /// Receives one line (without a newline) whenever delivery changes state: failing
    /// (since when, why, how many requests wait on disk), refused (a configuration fault:
    /// nothing is dropped), recovered. Never one per attempt. nil: nothing is said.
    package var notice: (@Sendable (String) -> Void)?
    /// Opens after repeated failures; probes before closing.
    package var breaker: CircuitBreaker
    /// Status code → action.
    package var policy: StatusPolicy
    /// Total time allowed for one request.
    package var requestTimeout: Duration
    /// Uncritical snapshots are synced to disk at least this often.
    package var syncInterval: Duration
    /// Tier of event batches in the snapshot store.
    package var priority: Tier
    /// zstd level of batch frames.
    package var compressionLevel: Int32
    /// Print start and result logs to stderr.
    package var debugLogging: Bool
    /// Receives every start and result log, unchanged.
    package var observer: (any UploadObserver)?
    /// The SDK version in `User-Agent: cairn-swift/<version>`.
    package var sdkVersion: String
    /// Keep batches in the snapshot store instead of sending them (an SDK without an
    /// upload URL): they wait there, within the store's caps, to be read or sent later.
    package var storeOnly: Bool
    /// Receives the records of every batch formed from the ring, on the uploader's
    /// thread, before it is sent or stored (other destinations of the same events).
    /// Records recovered after a crash may be seen again: at least once.
    package var tap: (@Sendable ([[UInt8]]) -> Void)?
    /// Whether a stored request is sent to the current ``url`` with the current
    /// ``apiKey`` (true, the default), or to the URL and key it was built with. Its body
    /// and `Idempotency-Key` never change either way.
    package var followDestination: Bool = true
    /// How many requests may be out at once while the collector answers (one at a time
    /// while it fails): a distant collector's round trip then bounds throughput less.
    /// Batches are still released from the ring in order. 1 to 16; 8 by default (at
    /// 100k events a second and a 50 ms round trip, 4 left no room for a slow answer).
    package var maxInFlight: Int = 8
    /// How long a sender thread waits with nothing to send before it ends (all but the
    /// last): the senders a backlog needed are not kept for the quiet that follows.
    var senderIdleExit: Duration = .seconds(30)
    /// This process's `"context":{...},"sdk":{...}` fragment, for bare ring records
    /// whose own context was lost (no snapshot store, or its `ring_context` missing or
    /// damaged): they are sent with it, marked `"context_recovered":false` in `sdk`.
    /// nil: an empty context, marked the same way.
    package var currentContext: (@Sendable () -> [UInt8])?
    /// This process's session id: named by `Cairn-Dropped-Sessions` in the requests that
    /// report its drops, and noted in the store so that a later process reports the drops
    /// this one leaves unreported under this session (``DropSessions``). nil: drops are
    /// reported without a session.
    package var sessionID: String?
    /// How long a batch waits for its mark to be kept in the snapshot store before it is
    /// sent without one (docs/FORMATS.md, `ring_batch`): while the store refuses writes
    /// (full, failing), batches wait this long, then delivery goes on at least once.
    /// 10 s by default.
    package var markPatience: Duration = .seconds(10)
    /// An OTLP destination (docs/FORMATS.md, "OTLP export"): each batch is also built into
    /// OTLP logs, traces and metrics requests, each a leg of its own, with OTLP's answers' rules.
    package var otlp: OTLPConfiguration?
    /// What the OTLP encoder adds to the records (service name, resource attributes,
    /// runtime; the host's id, read by the uploader when nil); its encoding is the
    /// signal's.
    package var otlpResource = OTLPEncoder.Settings(encoding: .protobuf)
    /// Whether batches go to ``url`` too (the native upload); false when only an OTLP
    /// destination is configured.
    package var native = true

    /// Creates options with defaults near those of OpenTelemetry's batch processor
    /// and Datadog's SDKs: 500 events, 512 KiB or 1 s per batch; 3 attempts with
    /// full-jitter backoff from 0.5 s; a breaker that opens after 5 failures for 30 s.
    package init(url: String, apiKey: String? = nil, maxBatchEvents: Int = 500,
                maxBatchBytes: Int = 512 * 1024, maxBatchAge: Duration = .seconds(1), attempts: Int = 3,
                backoff: Backoff = Backoff(), maxPause: Duration = .seconds(600),
                breaker: CircuitBreaker = CircuitBreaker(), policy: StatusPolicy = .standard,
                requestTimeout: Duration = .seconds(30), syncInterval: Duration = .seconds(5),
                priority: Tier = .sampled, compressionLevel: Int32 = 1, debugLogging: Bool = false,
                observer: (any UploadObserver)? = nil, sdkVersion: String = cairnVersion, storeOnly: Bool = false,
                tap: (@Sendable ([[UInt8]]) -> Void)? = nil) {
        self.url = url
        self.apiKey = apiKey
        self.maxBatchEvents = max(1, maxBatchEvents)
        self.maxBatchBytes = max(1, maxBatchBytes)
        self.maxBatchAge = maxBatchAge
        self.attempts = max(1, attempts)
        self.backoff = backoff
        self.maxPause = maxPause
        self.breaker = breaker
        self.policy = policy
        self.requestTimeout = requestTimeout
        self.syncInterval = syncInterval
        self.priority = priority
        self.compressionLevel = compressionLevel
        self.debugLogging = debugLogging
        self.observer = observer
        self.sdkVersion = sdkVersion
        self.storeOnly = storeOnly
        self.tap = tap
    }
}

/// Counters of an uploader since it started.
package struct UploaderStats: Sendable, Equatable {
    /// Batches the collector acknowledged, including replayed ones.
    package var deliveredBatches = 0
    /// Events in them (for replayed requests, as counted by their batch frame).
    package var deliveredEvents = 0
    /// Attempts that failed and will be retried.
    package var failedAttempts = 0
    /// Batches put in the snapshot store after their in-process attempts.
    package var storedBatches = 0
    /// Stored snapshots delivered by replay (also counted in ``deliveredBatches``).
    package var replayedBatches = 0
    /// Events (or stored requests) dropped, by reason (`.rejected(status: 400)`,
    /// `.storeSize`, ...).
    package var dropped: [DropReason: Int] = [:]
    /// Partial successes with a message from an OTLP collector, and the latest message
    /// (its first 200 bytes).
    package var otlpMessages = 0
    package var lastOTLPMessage = ""
    /// Legs of batches resumed after a kill that the last process had done (not sent
    /// again).
    package var legsResumedDone = 0
    /// Times the circuit breaker opened.
    package var breakerOpenings = 0
    /// Attempts whose answer refused the configuration (``DeliveryAction/hold``): their
    /// requests were kept.
    package var holds = 0
    /// Batches the collector found too large (413), stored as two halves instead.
    package var splitBatches = 0
    /// Times a `Retry-After` or 429/503 paused the uploader.
    package var pauses = 0
    /// Times a batch could not be put in the snapshot store (full disk, over the cap);
    /// its records stayed in the ring and it was tried again later.
    package var storeFailures = 0
    /// Times a batch's mark (or the contexts its records need) could not be kept in the
    /// snapshot store: the batch waited, and was tried again at the next pass.
    package var markFailures = 0
    /// Batches sent although their mark could not be kept for
    /// ``UploaderOptions/markPatience``: a process killed before they are safe sends their
    /// events again under another `Idempotency-Key` (with the same event ids).
    package var unmarkedSends = 0
    /// Sender threads running now (a gauge, not a count since start). They start as the
    /// collector's pace needs them, up to ``UploaderOptions/maxInFlight``, and end after
    /// 30 s with nothing to send (all but one).
    package var senderThreads = 0
    /// The most sender threads that ran at once.
    package var mostSenderThreads = 0

    /// All counts zero.
    package init() {}
}
