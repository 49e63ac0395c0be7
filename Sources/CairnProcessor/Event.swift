package import CairnBase
import Synchronization

/// The kinds of event (docs/FORMATS.md, "Event").
package enum EventType: String, Sendable, CaseIterable {
    /// Something the service tracked.
    case track
    /// User properties set.
    case userSet = "user_set"
    /// User properties set only if not set before.
    case userSetOnce = "user_setOnce"
    /// Numbers added to user properties.
    case userAdd = "user_add"
    /// User properties removed.
    case userUnset = "user_unset"
    /// A crash of a previous run.
    case crash
    /// A session boundary (`session_end`).
    case session
    /// A finished span.
    case span
    /// The SDK's own health (`sdk_health`).
    case health
    /// A log record (swift-log's `Logger`, through `CairnLogging`): its `level` is a
    /// ``Severity``.
    case log
    /// A metric's report (swift-metrics, through `CairnMetrics`): its value or
    /// histogram, cumulative since its start.
    case metric
}

/// How severe a log record is: swift-log's levels, which the envelope's `level` names
/// and OTLP maps to its severity numbers (docs/FORMATS.md, "Log records").
package enum Severity: UInt8, Sendable, CaseIterable, Comparable {
    case trace, debug, info, notice, warning, error, critical

    /// The envelope's `level` value.
    package var name: StaticString {
        switch self {
        case .trace: "trace"
        case .debug: "debug"
        case .info: "info"
        case .notice: "notice"
        case .warning: "warning"
        case .error: "error"
        case .critical: "critical"
        }
    }

    /// The tier of a record of this severity: `trace` and `debug` are Debug, `info` and
    /// `notice` Sampled, `warning` and above Important (kept whole by sampling; never
    /// Critical, whose durable sync would block the logging thread).
    package var tier: Tier {
        switch self {
        case .trace, .debug: .debug
        case .info, .notice: .sampled
        case .warning, .error, .critical: .important
        }
    }

    /// `error` and `critical` records are error events (kept by sampling, folded by
    /// deduplication).
    package var isError: Bool { self >= .error }

    package static func < (lhs: Severity, rhs: Severity) -> Bool { lhs.rawValue < rhs.rawValue }
}

/// Who an event is about.
public struct Identity: Sendable, Hashable {
    /// The integrator's id of the user, host or tenant the event is about.
    public var distinctID: String
    /// The account, when known.
    public var accountID: String?

    /// An identity.
    public init(distinctID: String, accountID: String? = nil) {
        self.distinctID = distinctID
        self.accountID = accountID
    }
}

/// The trace context an event belongs to.
public struct SpanContext: Sendable, Hashable {
    /// The trace.
    public var traceID: TraceID
    /// The span (for `span` events, the span itself).
    public var spanID: SpanID
    /// The enclosing span, if any (for a trace continued from a `traceparent`, the
    /// caller's span).
    public var parentSpanID: SpanID?
    /// The W3C `sampled` flag passed on in outgoing `traceparent` headers: the one
    /// received when the trace was continued from another service, else `true`.
    public var sampled: Bool
    /// The W3C `random` flag (Trace Context Level 2): the trace id's last 7 bytes are
    /// random. Set for the traces Cairn starts (their ids are random), and passed on
    /// as received for a continued one.
    public var random: Bool
    /// The W3C `tracestate` received with the trace, carried on unchanged to the calls
    /// made inside it (nil when there was none, or it was invalid).
    public var traceState: TraceState?
    /// What the span is (OTLP's span kind): the server side of an incoming request, the
    /// client side of an outbound call, or internal.
    public var kind: SpanKind

    /// A span context.
    package init(traceID: TraceID, spanID: SpanID, parentSpanID: SpanID? = nil, sampled: Bool = true,
                 random: Bool = true, traceState: TraceState? = nil, kind: SpanKind = .internal) {
        self.traceID = traceID
        self.spanID = spanID
        self.parentSpanID = parentSpanID
        self.sampled = sampled
        self.random = random
        self.traceState = traceState
        self.kind = kind
    }

    /// The W3C trace flags: `sampled` (bit 0) and `random` (bit 1).
    package var flags: UInt8 { (sampled ? 1 : 0) | (random ? 2 : 0) }
}

/// What a span is, from where it stands in a call (OpenTelemetry's span kinds).
public enum SpanKind: String, Sendable, Hashable {
    /// Serving a request that came in (a span that continued the caller's trace).
    case server
    /// A call to another service (``Cairn/beginOutbound()``).
    case client
    /// Work inside the service.
    case `internal`
}

/// One event on its way through the processor: what the call site said, plus what the
/// SDK filled in (time, identity, session, trace).
package struct Event: Sendable {
    /// Its kind.
    package var type: EventType
    /// Its name.
    package var name: String
    /// The call site's properties.
    package var properties: [String: CairnValue]
    /// Unix milliseconds.
    package var timeMillis: UInt64
    /// Who it is about.
    package var identity: Identity
    /// The process run.
    package var sessionID: String?
    /// The span it happened in.
    package var span: SpanContext?
    /// How much it matters.
    package var tier: Tier
    /// An error event: always kept by sampling, folded by deduplication.
    package var isError: Bool
    /// ``identity`` was given with this call (not the SDK's default identity): sampling
    /// then keys on it (``SamplingKey/identity(distinctID:day:)``).
    package var identityGiven: Bool
    /// A log record's severity (written as `level`); nil for other events, whose
    /// `level` is `error` when ``isError``.
    package var severity: Severity?
    /// Its event id, once drawn: the processor draws it when sampling keys on the event
    /// itself (``SamplingKey/event(high:low:)``), and encodes it; `nil` until then (a new
    /// one is drawn when the event is encoded).
    package var id: (UInt64, UInt64)?

    /// An event.
    package init(type: EventType = .track, name: String, properties: [String: CairnValue] = [:], timeMillis: UInt64,
                identity: Identity, sessionID: String? = nil, span: SpanContext? = nil, tier: Tier = .sampled,
                isError: Bool = false, identityGiven: Bool = false, severity: Severity? = nil) {
        self.type = type
        self.severity = severity
        self.name = name
        self.properties = properties
        self.timeMillis = timeMillis
        self.identity = identity
        self.sessionID = sessionID
        self.span = span
        self.tier = tier
        self.isError = isError
        self.identityGiven = identityGiven
    }

    /// What sampling keys this event on: its trace inside a span, else the identity given
    /// with the call, else the event itself (its ``id``, drawn now if it has none yet).
    package mutating func samplingKey(ids: EventIDGenerator) -> SamplingKey {
        if let span { return .trace(span.traceID) }
        if identityGiven {
            return .identity(distinctID: identity.distinctID, day: Int64(timeMillis / 86_400_000))
        }
        let drawn = id ?? ids.next(millis: timeMillis)
        id = drawn
        return .event(high: drawn.0, low: drawn.1)
    }
}
