// The seams the Swift server ecosystem's integrations use: log records (CairnLogging),
// metric reports and periodic work on the background thread (CairnMetrics).
import CairnBase
import CairnProcessor

extension Cairn {
    /// Tracks a log record as a `log` event named `logger` (the logger's label) with
    /// `properties` (its message, metadata and source: docs/FORMATS.md, "Log records"),
    /// in the current span. Its tier and error flag follow `severity`
    /// (``Severity/tier``); a record at `breadcrumbAt` or above also becomes a
    /// breadcrumb of the crash report (its message, the logger as category). Never
    /// blocks: the record takes the path of any tracked event.
    package func log(_ severity: Severity, logger: String, message: String, properties: [String: CairnValue],
                     breadcrumbAt: Severity?) {
        guard let pipeline else { return }
        if let breadcrumbAt, severity >= breadcrumbAt { breadcrumb(message, category: logger) }
        pipeline.submit(Event(type: .log, name: logger.isEmpty ? "log" : logger, properties: properties,
                              timeMillis: EventClock.nowMillis(), identity: currentIdentity(nil),
                              sessionID: sessionID, span: Self.currentSpan, tier: severity.tier,
                              isError: severity.isError, severity: severity))
    }
}

extension Cairn {
    /// Work an integration runs on the background thread every `interval`, and once
    /// more, with `final` true, when ``shutdown(timeout:)`` begins (before the final
    /// `sdk_health` and the flush, so that what it tracks then is sent). In a disabled
    /// SDK it never runs.
    package func addPeriodic(every interval: Duration, _ work: @escaping @Sendable (_ final: Bool) -> Void) {
        guard isEnabled else { return }
        periodic.withLock { $0.append(PeriodicWork(interval: interval, due: .now + interval, work: work)) }
        background.signal()
    }

    /// Tracks a metric report (`metric` event, docs/FORMATS.md, "Metric reports"): the
    /// Important tier, never sampled; on the calling thread (the background thread,
    /// from periodic work).
    package func reportMetric(_ name: String, properties: [String: CairnValue]) {
        pipeline?.submit(Event(type: .metric, name: name, properties: properties, timeMillis: EventClock.nowMillis(),
                               identity: currentIdentity(nil), sessionID: sessionID, tier: .important))
    }

    /// Counts one change an integration made to what it reports, under `name` (in
    /// ``changeCounts`` and `sdk_health`'s `changed`).
    package func countChange(_ name: String) { drops.addChange(name) }

    /// Runs the periodic work that is due (all of it, when `final`).
    func runPeriodic(final: Bool) {
        let now = ContinuousClock.now
        let due = periodic.withLock { list -> [@Sendable (Bool) -> Void] in
            var out: [@Sendable (Bool) -> Void] = []
            for k in list.indices where final || list[k].due <= now {
                out.append(list[k].work)
                list[k].due = now + list[k].interval
            }
            return out
        }
        for work in due { work(final) }
    }

    /// How long until the next periodic work is due; nil when none is registered.
    func periodicDueIn() -> Duration? {
        let now = ContinuousClock.now
        return periodic.withLock { list in list.map(\.due).min().map { max(.zero, $0 - now) } }
    }
}

/// One integration's periodic work.
struct PeriodicWork {
    let interval: Duration
    var due: ContinuousClock.Instant
    let work: @Sendable (Bool) -> Void
}
