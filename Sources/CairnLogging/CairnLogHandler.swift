// swift-log's backend: log records become Cairn `log` events (docs/FORMATS.md, "Log
// records"). Built only with the package trait "Logging"; without it this module is
// empty, and a package that depends on Cairn alone never resolves swift-log.
#if Logging
public import Cairn
import CairnBase
import CairnProcessor
public import Logging

/// A swift-log `LogHandler` that tracks each record as a Cairn `log` event: the same
/// path as ``Cairn/Cairn/track(_:properties:time:identity:)`` (sampling, privacy rules,
/// the ring, the native upload and OTLP), in the current span, and never blocking the
/// logging thread.
///
/// The event is named after the logger's label and carries the record's level as its
/// `level`. Its properties are the metadata (the handler's, the metadata provider's,
/// then the call's, each winning over the one before), then `message`, `log.source`,
/// `code.file.path`, `code.function.name` and `code.line.number`, which win over
/// metadata of the same name. Levels map to tiers: `trace` and `debug` are
/// ``Cairn/Tier/debug``, `info` and `notice` ``Cairn/Tier/sampled``, `warning` and
/// above ``Cairn/Tier/important`` (kept whole by sampling); `error` and `critical`
/// records are error events (repeats within the deduplication window are folded) and,
/// by default, breadcrumbs of the crash report.
///
/// ```swift
/// LoggingSystem.bootstrap { label in CairnLogHandler(label: label) }
/// ```
///
/// or ``bootstrap(logLevel:console:cairn:)``, which also keeps a console handler.
public struct CairnLogHandler: LogHandler {
    /// The logger's label: the name of its events.
    public let label: String
    /// The lowest level logged (default `.info`, swift-log's own default); `Logger`
    /// checks it before a record is even built.
    public var logLevel: Logger.Level
    /// The handler's metadata, on every record it logs.
    public var metadata: Logger.Metadata = [:]
    /// Metadata added to every record when it is logged (for example ``Logging/Logger/MetadataProvider/cairn``).
    public var metadataProvider: Logger.MetadataProvider?
    /// Records at this level or above also become breadcrumbs of the crash report (their
    /// message, the label as category); nil for none. Default `.error`.
    public var breadcrumbLevel: Logger.Level?
    /// The SDK the records go to; nil for the started one (``Cairn/Cairn/shared``, looked
    /// up at each record, so that loggers made before `Cairn.start` log once it has run).
    private let cairn: Cairn?

    /// A handler for the logger `label`, logging to `cairn` (nil: the SDK started by
    /// then, ``Cairn/Cairn/shared``; records logged while none is started are dropped).
    public init(label: String, cairn: Cairn? = nil, logLevel: Logger.Level = .info,
                metadataProvider: Logger.MetadataProvider? = nil, breadcrumbLevel: Logger.Level? = .error) {
        self.label = label
        self.cairn = cairn
        self.logLevel = logLevel
        self.metadataProvider = metadataProvider
        self.breadcrumbLevel = breadcrumbLevel
    }

    /// The metadata value for `metadataKey`.
    public subscript(metadataKey metadataKey: String) -> Logger.Metadata.Value? {
        get { metadata[metadataKey] }
        set { metadata[metadataKey] = newValue }
    }

    /// Tracks the record (swift-log calls this for a record at ``logLevel`` or above).
    public func log(level: Logger.Level, message: Logger.Message, metadata: Logger.Metadata?, source: String,
                    file: String, function: String, line: UInt) {
        guard let cairn = cairn ?? Cairn.shared, cairn.isEnabled else { return }
        let provided = metadataProvider?.get() ?? [:]
        var properties: [String: CairnValue] = [:]
        properties.reserveCapacity(self.metadata.count + provided.count + (metadata?.count ?? 0) + 5)
        for (key, value) in self.metadata { properties[key] = CairnValue(value) }
        if !provided.isEmpty {
            // The current span's ids are the event's own (`trace_id`, `span_id` in the
            // envelope): a provider's copies of them are not repeated as properties.
            let span = Cairn.currentSpan
            for (key, value) in provided {
                if let span, Self.repeatsSpan(key, value, span) { continue }
                properties[key] = CairnValue(value)
            }
        }
        if let metadata {
            for (key, value) in metadata { properties[key] = CairnValue(value) }
        }
        let text = message.description
        properties["message"] = .string(text)
        properties["log.source"] = .string(source)
        properties["code.file.path"] = .string(file)
        properties["code.function.name"] = .string(function)
        properties["code.line.number"] = .int(Int64(clamping: line))
        cairn.log(Severity(level), logger: label, message: text, properties: properties,
                  breadcrumbAt: breadcrumbLevel.map(Severity.init))
    }

    /// Whether `key: value` is the current span's `trace_id` or `span_id`.
    private static func repeatsSpan(_ key: String, _ value: Logger.Metadata.Value, _ span: SpanContext) -> Bool {
        guard key == "trace_id" || key == "span_id", case .string(let text) = value else { return false }
        return key == "trace_id" ? text == span.traceID.description : text == span.spanID.description
    }
}

extension Severity {
    /// swift-log's level, as Cairn's severity.
    init(_ level: Logger.Level) {
        switch level {
        case .trace: self = .trace
        case .debug: self = .debug
        case .info: self = .info
        case .notice: self = .notice
        case .warning: self = .warning
        case .error: self = .error
        case .critical: self = .critical
        }
    }
}

extension CairnValue {
    /// A metadata value as a property: strings as they are, a `stringConvertible` as its
    /// description, dictionaries and arrays as objects and arrays.
    init(_ value: Logger.Metadata.Value) {
        switch value {
        case .string(let s): self = .string(s)
        case .stringConvertible(let c): self = .string(c.description)
        case .dictionary(let d): self = .object(d.mapValues(CairnValue.init))
        case .array(let a): self = .array(a.map(CairnValue.init))
        }
    }
}

extension Logger.MetadataProvider {
    /// `trace_id` and `span_id` of the current Cairn span (``Cairn/Cairn/currentSpan``),
    /// as 32 and 16 lowercase hex digits; nothing outside a span. Give it to the console
    /// handler, so that its lines can be matched with Cairn's traces:
    ///
    /// ```swift
    /// LoggingSystem.bootstrap(StreamLogHandler.standardError, metadataProvider: .cairn)
    /// ```
    public static let cairn = Logger.MetadataProvider {
        guard let span = Cairn.currentSpan else { return [:] }
        return ["trace_id": .string(span.traceID.description), "span_id": .string(span.spanID.description)]
    }
}

extension CairnLogHandler {
    /// Where ``bootstrap(logLevel:console:cairn:)`` also writes each record, as swift-log's
    /// `StreamLogHandler` does.
    public enum Console: Sendable {
        /// Standard error (swift-log's default handler).
        case standardError
        /// Standard output.
        case standardOutput
    }

    /// Makes Cairn the backend of every `Logger` (`LoggingSystem.bootstrap`, which may be
    /// called once per process, early in `main`): records at `logLevel` and above go to
    /// Cairn and, unless `console` is nil, to a `StreamLogHandler` there as well, through
    /// a `MultiplexLogHandler`. Both get the ``Logging/Logger/MetadataProvider/cairn``
    /// metadata provider, so console lines inside a span show its ids. `cairn` nil
    /// logs to the SDK started by then (see ``init(label:cairn:logLevel:metadataProvider:breadcrumbLevel:)``).
    public static func bootstrap(logLevel: Logger.Level = .info, console: Console? = .standardError,
                                 cairn: Cairn? = nil) {
        LoggingSystem.bootstrap({ label, provider in
            let handler = CairnLogHandler(label: label, cairn: cairn, logLevel: logLevel, metadataProvider: provider)
            guard let console else { return handler }
            var stream = console == .standardError ? StreamLogHandler.standardError(label: label, metadataProvider: provider)
                : StreamLogHandler.standardOutput(label: label, metadataProvider: provider)
            stream.logLevel = logLevel
            return MultiplexLogHandler([stream, handler])
        }, metadataProvider: .cairn)
    }
}
#endif
