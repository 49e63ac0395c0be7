// Spans and W3C trace context.
import CairnBase
import CairnCrash
import CairnProcessor
import CairnStore
import CairnUploader
import FoundationEssentials
import Dispatch
import Glibc
import Synchronization

extension Cairn {
    /// Runs `operation` inside a new span named `name`: events tracked inside carry its
    /// trace and span ids, and a `span` event with its duration and outcome is tracked
    /// when it ends. A span inside another span continues its trace.
    ///
    /// `traceparent` is the W3C header of the request being served, if it had one: the
    /// span then continues that trace as its server side (its parent is the caller's
    /// span, and the caller's `sampled` flag is passed on by ``traceparent()``), so
    /// sampling, which keeps or drops a trace's events together by its trace id, decides
    /// the same way in every service the trace crosses. `tracestate`, the request's W3C
    /// `tracestate` header, is carried on unchanged (``tracestate()``). An invalid
    /// header is ignored (a new trace starts) and counted (`trace_header_invalid` in
    /// ``changeCounts`` and `sdk_health`). For an HTTP request, prefer
    /// ``withIncomingRequest(method:route:headers:operation:)-3o9v``, which records
    /// its method, route and status.
    ///
    /// ```swift
    /// try cairn.withSpan("GET /orders", traceparent: request.headers["traceparent"]) {
    ///     try handle(request)
    /// }
    /// ```
    public func withSpan<T>(_ name: String, traceparent: String? = nil, tracestate: String? = nil,
                            operation: () throws -> T) rethrows -> T {
        let span = childSpan(continuing: traceparent.map { [$0] } ?? [], tracestate: tracestate.map { [$0] } ?? [])
        let started = DispatchTime.now().uptimeNanoseconds
        do {
            let result = try Self.$currentSpan.withValue(span) { try operation() }
            endSpan(name, span, started: started, error: nil)
            return result
        } catch {
            endSpan(name, span, started: started, error: error)
            throw error
        }
    }

    /// The async form of ``withSpan(_:traceparent:tracestate:operation:)-7jzhj``.
    public func withSpan<T>(_ name: String, traceparent: String? = nil, tracestate: String? = nil,
                            operation: () async throws -> T) async rethrows -> T {
        let span = childSpan(continuing: traceparent.map { [$0] } ?? [], tracestate: tracestate.map { [$0] } ?? [])
        let started = DispatchTime.now().uptimeNanoseconds
        do {
            let result = try await Self.$currentSpan.withValue(span) { try await operation() }
            endSpan(name, span, started: started, error: nil)
            return result
        } catch {
            endSpan(name, span, started: started, error: error)
            throw error
        }
    }

    /// Serves an incoming HTTP request inside its server span: the trace continues from
    /// the request's `traceparent` and `tracestate` headers (found in `headers` by name,
    /// in any case; several `tracestate` headers are one list, two `traceparent`
    /// headers are invalid), events tracked inside carry its ids, and a `span` event
    /// named `<METHOD> <route>` records the method, the route, the status `operation`
    /// returns and the duration. `route` is the route's template (`/orders/:id`), never
    /// the path with its ids: it names the span, and what has the same name is counted
    /// together. A status of 500 or more, or an error thrown (then rethrown), marks the
    /// span failed and keeps it whatever the sampling (Important tier).
    ///
    /// ```swift
    /// let body = try cairn.withIncomingRequest(method: "GET", route: "/orders/:id",
    ///                                          headers: request.headers.map { ($0.name, $0.value) }) {
    ///     (try orders.find(id), status: 200)
    /// }
    /// ```
    public func withIncomingRequest<T>(method: String, route: String, headers: [(name: String, value: String)],
                                       operation: () throws -> (T, status: Int)) rethrows -> T {
        let span = incomingSpan(headers)
        let started = DispatchTime.now().uptimeNanoseconds
        do {
            let (result, status) = try Self.$currentSpan.withValue(span) { try operation() }
            endIncoming(method: method, route: route, span, started: started, status: status, error: nil)
            return result
        } catch {
            endIncoming(method: method, route: route, span, started: started, status: nil, error: error)
            throw error
        }
    }

    /// The async form of ``withIncomingRequest(method:route:headers:operation:)-3o9v``.
    public func withIncomingRequest<T>(method: String, route: String, headers: [(name: String, value: String)],
                                       operation: () async throws -> (T, status: Int)) async rethrows -> T {
        let span = incomingSpan(headers)
        let started = DispatchTime.now().uptimeNanoseconds
        do {
            let (result, status) = try await Self.$currentSpan.withValue(span) { try await operation() }
            endIncoming(method: method, route: route, span, started: started, status: status, error: nil)
            return result
        } catch {
            endIncoming(method: method, route: route, span, started: started, status: nil, error: error)
            throw error
        }
    }

    /// The server span of a request with `headers`.
    private func incomingSpan(_ headers: [(name: String, value: String)]) -> SpanContext {
        var parents: [String] = [], states: [String] = []
        for (name, value) in headers {
            if name.utf8.count == 11, name.lowercased() == "traceparent" { parents.append(value) }
            if name.utf8.count == 10, name.lowercased() == "tracestate" { states.append(value) }
        }
        var span = childSpan(continuing: parents, tracestate: states)
        span.kind = .server
        return span
    }

    private func endIncoming(method: String, route: String, _ span: SpanContext, started: UInt64, status: Int?,
                             error: (any Error)?) {
        let ms = Double(DispatchTime.now().uptimeNanoseconds &- started) / 1e6
        let method = method.uppercased()
        let failed = error != nil || (status ?? 0) >= 500
        var props: [String: CairnValue] = ["method": .string(method), "route": .string(route),
                                           "duration_ms": .double(ms), "status": status.map { .int(Int64($0)) } ?? "error"]
        if let error { props["error"] = .string(String(describing: error)) }
        submit(Event(type: .span, name: "\(method) \(route)", properties: props, timeMillis: EventClock.nowMillis(),
                     identity: currentIdentity(nil), sessionID: sessionID, span: span,
                     tier: failed ? .important : .sampled, isError: failed))
    }

    /// A span context under the caller's span named by the `traceparent` header values
    /// (one valid one: a server span continuing its trace, with the `tracestate` values'
    /// state), else under the current span, else in a new trace. A header that cannot
    /// be used (invalid, or more than one) is counted.
    func childSpan(continuing traceparent: [String] = [], tracestate: [String] = []) -> SpanContext {
        if !traceparent.isEmpty {
            if traceparent.count == 1, let caller = TraceParent(header: traceparent[0]) {
                return SpanContext(traceID: caller.traceID, spanID: .random(), parentSpanID: caller.parentID,
                                   sampled: caller.sampled, random: caller.random,
                                   traceState: tracestate.isEmpty ? nil : TraceState(headers: tracestate), kind: .server)
            }
            drops.addChange("trace_header_invalid")
        }
        return Self.childSpan()
    }

    /// A span context under the current span, else in a new trace (random: its ids are).
    static func childSpan(kind: SpanKind = .internal) -> SpanContext {
        if let parent = currentSpan {
            return SpanContext(traceID: parent.traceID, spanID: .random(), parentSpanID: parent.spanID,
                               sampled: parent.sampled, random: parent.random, traceState: parent.traceState, kind: kind)
        }
        return SpanContext(traceID: .random(), spanID: .random(), kind: kind)
    }

    private func endSpan(_ name: String, _ span: SpanContext, started: UInt64, error: (any Error)?) {
        let ms = Double(DispatchTime.now().uptimeNanoseconds &- started) / 1e6
        var props: [String: CairnValue] = ["duration_ms": .double(ms), "status": .string(error == nil ? "ok" : "error")]
        if let error { props["error"] = .string(String(describing: error)) }
        submit(Event(type: .span, name: name, properties: props, timeMillis: EventClock.nowMillis(),
                     identity: currentIdentity(nil), sessionID: sessionID, span: span, isError: error != nil))
    }

    /// The `traceparent` header to send on an outbound request from the current span
    /// (a new sampled trace outside any span), with the `sampled` flag of the trace as
    /// this service received it.
    public static func traceparent() -> String {
        let span = currentSpan ?? SpanContext(traceID: .random(), spanID: .random())
        return TraceParent(traceID: span.traceID, parentID: span.spanID, sampled: span.sampled, random: span.random).header
    }

    /// The `tracestate` header to send on an outbound request from the current span: the
    /// one its trace came in with, unchanged; nil when there is none (send no header).
    public static func tracestate() -> String? { currentSpan?.traceState?.header }
}
