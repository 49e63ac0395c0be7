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
    /// span then continues that trace (its parent is the caller's span, and the caller's
    /// `sampled` flag is passed on by ``traceparent()``), so sampling, which keeps or
    /// drops a trace's events together by its trace id, decides the same way in every
    /// service the trace crosses. An invalid header is ignored (a new trace starts).
    ///
    /// ```swift
    /// try cairn.withSpan("GET /orders", traceparent: request.headers["traceparent"]) {
    ///     try handle(request)
    /// }
    /// ```
    public func withSpan<T>(_ name: String, traceparent: String? = nil, operation: () throws -> T) rethrows -> T {
        let span = Self.childSpan(continuing: traceparent)
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

    /// The async form of ``withSpan(_:traceparent:operation:)-414c3``.
    public func withSpan<T>(_ name: String, traceparent: String? = nil,
                            operation: () async throws -> T) async rethrows -> T {
        let span = Self.childSpan(continuing: traceparent)
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

    /// A span context under the caller's span named by a valid `traceparent`, else under
    /// the current span, else in a new trace.
    static func childSpan(continuing traceparent: String? = nil) -> SpanContext {
        if let header = traceparent, let caller = TraceParent(header: header) {
            return SpanContext(traceID: caller.traceID, spanID: .random(), parentSpanID: caller.parentID,
                               sampled: caller.sampled)
        }
        if let parent = currentSpan {
            return SpanContext(traceID: parent.traceID, spanID: .random(), parentSpanID: parent.spanID,
                               sampled: parent.sampled)
        }
        return SpanContext(traceID: .random(), spanID: .random())
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
        return TraceParent(traceID: span.traceID, parentID: span.spanID, sampled: span.sampled).header
    }
}
