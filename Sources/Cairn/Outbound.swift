import CairnBase
import CairnProcessor
import FoundationEssentials
import Dispatch

extension Cairn {
    /// A call the service makes to another service: its span, and the `traceparent`
    /// header to send with it so the callee continues the trace.
    public struct OutboundCall: Sendable {
        /// The call's span (a child of the current span, or a new trace).
        public let span: SpanContext
        /// The W3C `traceparent` header value for the request.
        public var traceparent: String {
            TraceParent(traceID: span.traceID, parentID: span.spanID, sampled: span.sampled, random: span.random).header
        }
        /// The W3C `tracestate` header value for the request: the trace's, as it came
        /// in; nil when it has none (send no header).
        public var tracestate: String? { span.traceState?.header }
        /// The headers to add to the request: `traceparent`, and `tracestate` when the
        /// trace has one.
        public var headers: [(name: String, value: String)] {
            [("traceparent", traceparent)] + (tracestate.map { [("tracestate", $0)] } ?? [])
        }
        let started: UInt64
    }

    /// Calls at least this slow are always kept, whatever the sampling rate.
    public static let slowOutboundCall: Duration = .seconds(1)

    /// Begins an outbound call: inject its ``OutboundCall/traceparent`` into the request,
    /// then end it with ``endOutbound(_:method:url:status:error:)``.
    public func beginOutbound() -> OutboundCall {
        OutboundCall(span: Self.childSpan(kind: .client), started: DispatchTime.now().uptimeNanoseconds)
    }

    /// Records an outbound HTTP call as a `span` event named `http.client`: method, URL
    /// (sensitive query values masked), status, duration and error. Errors (an error,
    /// or a status of 500 and above) and slow calls are always kept (Important tier);
    /// the rest are sampled like other events.
    public func endOutbound(_ call: OutboundCall, method: String, url: String, status: Int?,
                            error: (any Error)? = nil) {
        let nanos = DispatchTime.now().uptimeNanoseconds &- call.started
        var props: [String: CairnValue] = [
            "method": .string(method.uppercased()), "url": .string(processor.maskURL(url)),
            "duration_ms": .double(Double(nanos) / 1e6),
        ]
        if let status { props["status"] = .int(Int64(status)) }
        if let error { props["error"] = .string(String(describing: error)) }
        let failed = error != nil || (status ?? 0) >= 500
        let slow = nanos >= UInt64(Self.slowOutboundCall.components.seconds) * 1_000_000_000
        props["outcome"] = .string(failed ? "error" : "ok")
        // What deduplication folds by: the same endpoint failing the same way.
        let endpoint = String(props["url"].flatMap { if case .string(let u) = $0 { u } else { nil } }?
            .split(separator: "?", maxSplits: 1).first ?? "")
        props["message"] = .string("\(method.uppercased()) \(endpoint) " + (status.map(String.init) ?? "failed"))
        submit(Event(type: .span, name: "http.client", properties: props, timeMillis: EventClock.nowMillis(),
                     identity: currentIdentity(nil), sessionID: sessionID, span: call.span,
                     tier: failed || slow ? .important : .sampled, isError: failed))
    }

    /// Runs an outbound call: `body` gets the headers to add to the request
    /// (``OutboundCall/headers``: `traceparent`, and `tracestate` when the trace has
    /// one) and returns its result and the HTTP status; the call is recorded as with
    /// ``endOutbound(_:method:url:status:error:)`` (a thrown error is recorded, then
    /// rethrown).
    ///
    /// ```swift
    /// let quote = try cairn.withOutbound(method: "GET", url: url) { headers in
    ///     let response = try client.get(url, headers: headers)
    ///     return (response.body, status: response.status)
    /// }
    /// ```
    public func withOutbound<T>(method: String, url: String,
                                _ body: (_ headers: [(name: String, value: String)]) throws -> (T, status: Int?))
        rethrows -> T {
        let call = beginOutbound()
        do {
            let (value, status) = try body(call.headers)
            endOutbound(call, method: method, url: url, status: status)
            return value
        } catch {
            endOutbound(call, method: method, url: url, status: nil, error: error)
            throw error
        }
    }
}
