// Log records: the seam the swift-log integration (CairnLogging) tracks through.
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
