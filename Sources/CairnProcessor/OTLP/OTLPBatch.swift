import CairnBase
import Glibc

/// The OTLP encoding of one batch, in one wire encoding (``OTLPEncoder`` picks it).
/// Records are written as they are added, into the buffers of their group (one per
/// distinct context and session); ``finish()`` puts each group's `Resource` and scope
/// around them.
struct OTLPBatch<Out: OTLPOutput> {
    let settings: OTLPEncoder.Settings

    /// The records of one context and session, encoded.
    struct Group {
        /// What tells it apart: the completion of its bare records, or the context of
        /// its whole ones (with a byte that says which first).
        var key: [UInt8]
        var context: [UInt8]
        var session: [UInt8]
        /// Its records' context is another run's (`"context_recovered":false`); for
        /// whole records each says so itself.
        var recovered = false
        var logs = Out()
        /// Where each log record ends in `logs`.
        var logEnds: [Int] = []
        var spans = Out()
        var spanEnds: [Int] = []
        var metrics = Out()
        var metricEnds: [Int] = []

        /// The records of `signal` and where each ends.
        func records(_ signal: OTLPEncoder.Signal) -> (out: Out, ends: [Int]) {
            switch signal {
            case .logs: (logs, logEnds)
            case .traces: (spans, spanEnds)
            case .metrics: (metrics, metricEnds)
            }
        }
    }

    private var groups: [Group] = []
    /// The resources of the last groups, by context and session: a service's batches
    /// share one, built once.
    private var resourceCache: [(context: [UInt8], session: [UInt8], resource: Resource)] = []

    /// A group's `Resource`: its attributes, and the bytes they take.
    struct Resource {
        let attributes: [(String, ResourceValue)]
        let size: Int
    }

    /// The resource of `group`, from the cache or built (and kept, the 8 latest).
    private mutating func resource(of group: Group) -> Resource {
        if let hit = resourceCache.first(where: { $0.context == group.context && $0.session == group.session }) {
            return hit.resource
        }
        let attributes = resourceAttributes(context: group.context, session: group.session)
        let made = Resource(attributes: attributes, size: Self.resourceSize(attributes))
        if resourceCache.count >= 8 { resourceCache.removeFirst() }
        resourceCache.append((group.context, group.session, made))
        return made
    }
    private var last = -1
    /// Buffers kept between records.
    private var keyScratch: [UInt8] = []
    /// The finished groups' buffers, emptied, for the next batch's groups: a batch's
    /// buffers are reused, not allocated and given back each time (large blocks given
    /// back raise glibc's mmap threshold, and the heap then keeps what they took).
    private var spare: [(logs: Out, spans: Out, metrics: Out)] = []
    /// Where a request is put together before its body is copied out at its size.
    private var assembly = Out()

    init(settings: OTLPEncoder.Settings) { self.settings = settings }

    /// Gives back the storage of the records added and not finished, and the buffers
    /// kept for reuse (the encoder's end).
    mutating func free() {
        for k in groups.indices {
            groups[k].logs.free()
            groups[k].spans.free()
            groups[k].metrics.free()
        }
        groups.removeAll()
        for k in spare.indices {
            spare[k].logs.free()
            spare[k].spans.free()
            spare[k].metrics.free()
        }
        spare.removeAll()
        assembly.free()
    }

    /// The top-level members of the record being read (their JSON text: a string's
    /// escaped text without quotes, a number's digits, an object whole).
    struct Fields {
        var eventID: UnsafeRawBufferPointer?
        var type: UnsafeRawBufferPointer?
        var name: UnsafeRawBufferPointer?
        var level: UnsafeRawBufferPointer?
        var time: UnsafeRawBufferPointer?
        var zoneOffset: UnsafeRawBufferPointer?
        var distinctID: UnsafeRawBufferPointer?
        var accountID: UnsafeRawBufferPointer?
        var sessionID: UnsafeRawBufferPointer?
        var traceID: UnsafeRawBufferPointer?
        var spanID: UnsafeRawBufferPointer?
        var parentSpanID: UnsafeRawBufferPointer?
        var traceFlags: UnsafeRawBufferPointer?
        var traceState: UnsafeRawBufferPointer?
        var spanKind: UnsafeRawBufferPointer?
        var properties: UnsafeRawBufferPointer?
        var context: UnsafeRawBufferPointer?
        var sdk: UnsafeRawBufferPointer?
        var nanos: UInt64 = 0
        /// Its context is another run's (`"context_recovered":false`).
        var recoveredFalse = false
        /// `properties` was taken to run to the record's end, unread (``read(_:openEnded:propertiesLast:into:)``).
        var propertiesToEnd = false
    }

    // MARK: Reading a record

    mutating func add(_ record: UnsafeRawBufferPointer, completion: UnsafeRawBufferPointer?,
                      observedNanos: UInt64) -> Bool {
        var f = Fields()
        guard Self.read(record, openEnded: completion != nil, propertiesLast: completion != nil, into: &f)
        else { return false }
        // Crashes, session ends and spans read their properties before writing them.
        if f.propertiesToEnd, let type = f.type,
           eq(type, "crash") || eq(type, "session") || eq(type, "span") || eq(type, "log") || eq(type, "metric") {
            f = Fields()
            guard Self.read(record, openEnded: true, into: &f) else { return false }
        }
        let empty = UnsafeRawBufferPointer(start: nil, count: 0)
        let session = f.sessionID ?? empty
        let g: Int
        if let completion {
            guard let found = group(kind: 1, key: completion, session: session) else { return false }
            g = found
            f.recoveredFalse = groups[g].recovered
        } else {
            let context = f.context ?? empty
            guard let found = group(kind: 0, key: context, session: session) else { return false }
            g = found
            if let sdk = f.sdk, let recovered = Self.member(sdk, "context_recovered", literal: true) {
                f.recoveredFalse = eq(recovered, "false")
            }
        }
        if let type = f.type, eq(type, "metric") {
            var out = Out()
            swap(&out, &groups[g].metrics)
            defer { swap(&out, &groups[g].metrics) }
            let mark = out.checkpoint
            guard writeMetric(f, into: &out) else {
                out.rewind(to: mark)
                return false
            }
            groups[g].metricEnds.append(out.bytes.count)
        } else if let type = f.type, eq(type, "span"), let trace = f.traceID, let span = f.spanID,
           Self.validID(trace, 32), Self.validID(span, 16) {
            var out = Out()
            swap(&out, &groups[g].spans)
            defer { swap(&out, &groups[g].spans) }
            let mark = out.checkpoint
            guard writeSpan(f, into: &out) else {
                out.rewind(to: mark)
                return false
            }
            groups[g].spanEnds.append(out.bytes.count)
        } else {
            var out = Out()
            swap(&out, &groups[g].logs)
            defer { swap(&out, &groups[g].logs) }
            let mark = out.checkpoint
            if !writeLog(f, observedNanos: observedNanos, into: &out) {
                out.rewind(to: mark)
                // Something after the properties, which were taken to run to the end:
                // read again, whole (in the same group: its session came before them).
                guard f.propertiesToEnd, let c = completion else { return false }
                let recovered = f.recoveredFalse
                f = Fields()
                guard Self.read(record, openEnded: true, into: &f),
                      group(kind: 1, key: c, session: f.sessionID ?? empty) == g else { return false }
                f.recoveredFalse = recovered
                guard writeLog(f, observedNanos: observedNanos, into: &out) else {
                    out.rewind(to: mark)
                    return false
                }
            }
            groups[g].logEnds.append(out.bytes.count)
        }
        return true
    }

    /// The group of a completion (`,"context":{…},"sdk":{…}}`): its context and whether
    /// its `sdk` says the context is another run's; nil when it is not one.
    static func completionGroup(_ completion: UnsafeRawBufferPointer, _ session: UnsafeRawBufferPointer) -> Group? {
        guard completion.count >= 2, completion[0] == 0x2C else { return nil }
        var document: [UInt8] = [0x7B]
        document.append(contentsOf: UnsafeRawBufferPointer(rebasing: completion.dropFirst()))
        return document.withUnsafeBytes { d -> Group? in
            var s = JSONScan(d)
            guard s.enterObject() else { return nil }
            var group = Group(key: [], context: [], session: Array(session))
            while let key = s.member() {
                if eq(key, "context"), s.peek() == .object, let v = s.rawValue() {
                    group.context = Array(v)
                } else if eq(key, "sdk"), s.peek() == .object, let v = s.rawValue() {
                    group.recovered = member(v, "context_recovered", literal: true).map { eq($0, "false") } ?? false
                } else {
                    guard s.skipValue() else { return nil }
                }
            }
            s.skipSpace()
            return s.failed || !s.atEnd ? nil : group
        }
    }

    /// The record's members, its JSON checked whole; nil when it is not an event.
    ///
    /// With `propertiesLast` (a bare record: the processor writes `properties` last
    /// there), `properties` is taken to run to the record's end without reading it: the
    /// attributes' writing checks it, and a record where something follows it is read
    /// again without.
    static func read(_ record: UnsafeRawBufferPointer, openEnded: Bool, propertiesLast: Bool = false,
                     into f: inout Fields) -> Bool {
        var s = JSONScan(record, openEnded: openEnded)
        guard s.enterObject() else { return false }
        while let key = s.member() {
            var ok = true
            if propertiesLast, key.count == 10, eq(key, "properties"), s.peek() == .object {
                f.properties = UnsafeRawBufferPointer(rebasing: s.bytes[s.i...])
                f.propertiesToEnd = true
                break
            }
            switch key.count {
            case 4 where eq(key, "type"): if let v = s.string() { f.type = v } else { ok = false }
            case 4 where eq(key, "name"): if let v = s.string() { f.name = v } else { ok = false }
            case 4 where eq(key, "time"): if let v = s.string() { f.time = v } else { ok = false }
            case 5 where eq(key, "level"): if let v = s.string() { f.level = v } else { ok = false }
            case 8 where eq(key, "event_id"): if let v = s.string() { f.eventID = v } else { ok = false }
            case 8 where eq(key, "trace_id"): if let v = s.string() { f.traceID = v } else { ok = false }
            case 7 where eq(key, "span_id"): if let v = s.string() { f.spanID = v } else { ok = false }
            case 11 where eq(key, "zone_offset"):
                if let v = s.number(), v.integer { f.zoneOffset = v.text } else { ok = false }
            case 11 where eq(key, "distinct_id"): if let v = s.string() { f.distinctID = v } else { ok = false }
            case 10 where eq(key, "account_id"): if let v = s.string() { f.accountID = v } else { ok = false }
            case 10 where eq(key, "session_id"): if let v = s.string() { f.sessionID = v } else { ok = false }
            case 14 where eq(key, "parent_span_id"): if let v = s.string() { f.parentSpanID = v } else { ok = false }
            case 11 where eq(key, "trace_flags"): if let v = s.string() { f.traceFlags = v } else { ok = false }
            case 11 where eq(key, "trace_state"): if let v = s.string() { f.traceState = v } else { ok = false }
            case 9 where eq(key, "span_kind"): if let v = s.string() { f.spanKind = v } else { ok = false }
            case 10 where eq(key, "properties"):
                // Only its end is found here; it is checked as it is written.
                if s.peek() == .object, let v = s.rawObject() { f.properties = v } else { ok = false }
            case 7 where eq(key, "context"):
                if s.peek() == .object, let v = s.rawValue() { f.context = v } else { ok = false }
            case 3 where eq(key, "sdk"):
                if s.peek() == .object, let v = s.rawValue() { f.sdk = v } else { ok = false }
            default: ok = s.skipValue()
            }
            guard ok else { return false }
        }
        s.skipSpace()
        guard !s.failed, s.atEnd || f.propertiesToEnd, f.type != nil, let name = f.name, !name.isEmpty,
              let time = f.time, let nanos = rfc3339Nanos(time) else { return false }
        f.nanos = nanos
        return true
    }

    /// Whether `hex` is an id of `digits` lowercase hex digits, not all zero.
    static func validID(_ hex: UnsafeRawBufferPointer, _ digits: Int) -> Bool {
        guard hex.count == digits else { return false }
        var nonZero = false
        for b in hex {
            guard (b >= 0x30 && b <= 0x39) || (b >= 0x61 && b <= 0x66) else { return false }
            if b != 0x30 { nonZero = true }
        }
        return nonZero
    }

    /// The group of `key` (of `kind`: 0 for a context, 1 for a completion) and
    /// `session`, made when new; nil for a completion that is not one.
    private mutating func group(kind: UInt8, key: UnsafeRawBufferPointer, session: UnsafeRawBufferPointer) -> Int? {
        func same(_ g: Group) -> Bool {
            g.key.first == kind && g.key.count == key.count + 1 && bytesEqual(g.session, session)
                && g.key.withUnsafeBytes { k in key.isEmpty || memcmp(k.baseAddress! + 1, key.baseAddress!, key.count) == 0 }
        }
        if last >= 0, same(groups[last]) { return last }
        if let found = groups.firstIndex(where: same) {
            last = found
            return found
        }
        guard var group = kind == 1 ? Self.completionGroup(key, session)
            : Group(key: [], context: Array(key), session: Array(session)) else { return nil }
        group.key = [kind]
        group.key.append(contentsOf: key)
        if let (logs, spans, metrics) = spare.popLast() {
            group.logs = logs
            group.spans = spans
            group.metrics = metrics
        }
        groups.append(group)
        last = groups.count - 1
        return last
    }

    // MARK: Log records

    /// Writes the log record of `f`; false when its properties are not JSON.
    private mutating func writeLog(_ f: borrowing Fields, observedNanos: UInt64, into out: inout Out) -> Bool {
        let type = f.type!
        let crash = eq(type, "crash")
        let previousRun = crash || eq(type, "session")
        let t = out.openRecord(2)
        out.fixed64(1, "timeUnixNano", f.nanos)
        var crashProperties: CairnValue?
        if crash, let p = f.properties { crashProperties = CairnValue(json: Array(p)) }
        // A log record (swift-log's): its level is its severity, its message its body,
        // its logger's label an attribute; it is not an event (no event name).
        let log = eq(type, "log")
        let severity: (Int32, StaticString)
        if crash {
            severity = (21, "FATAL")
        } else if log, let level = f.level, let s = Self.logSeverity(level) {
            severity = s
        } else if has(f.level, "error") {
            severity = (17, "ERROR")
        } else if has(f.name, "session_end"), let properties = f.properties,
                  let reason = Self.member(properties, "reason"), !eq(reason, "clean") {
            severity = (13, "WARN")
        } else {
            severity = (9, "INFO")
        }
        out.enumValue(2, "severityNumber", severity.0)
        out.string(3, "severityText", literal: severity.1)
        if let headline = crashProperties?["headline"]?.text {
            let b = out.openMessage(5, "body")
            out.string(1, "stringValue", headline, always: true)
            out.close(b)
        }
        let body = log ? f.properties.flatMap { Self.member($0, "message") } : nil
        if let message = body {
            let b = out.openMessage(5, "body")
            out.string(1, "stringValue", json: message, always: true)
            out.close(b)
        }
        out.openList(6, "attributes")
        if let p = f.properties,
           !writeAttributes(p, field: 6, reserved: otlpLogReserved, skip: body != nil ? ["message"] : [], into: &out) {
            return false
        }
        if let crashProperties { Self.writeException(crashProperties, into: &out) }
        if log {
            let kv = out.openElement(6)
            out.string(1, "key", literal: "cairn.logger")
            let v = out.openMessage(2, "value")
            out.string(1, "stringValue", json: f.name!, always: true)
            out.close(v)
            out.close(kv)
        }
        envelopeAttributes(f, field: 6, uid: "log.record.uid", into: &out)
        out.closeList()
        if let hex = f.traceFlags, let flags = Self.flags(hex) { out.fixed32(8, "flags", flags) }
        if let trace = f.traceID, Self.validID(trace, 32) {
            out.id(9, "traceId", hex: trace)
            if let span = f.spanID, Self.validID(span, 16) { out.id(10, "spanId", hex: span) }
        }
        out.fixed64(11, "observedTimeUnixNano", previousRun ? max(observedNanos, f.nanos) : f.nanos)
        if !log { out.string(12, "eventName", json: f.name!) }
        out.close(t)
        return true
    }

    // MARK: Metrics

    /// Writes the `Metric` of the metric report `f` (docs/FORMATS.md, "Metric reports"),
    /// with its one data point; false when its properties are not a report.
    private mutating func writeMetric(_ f: borrowing Fields, into out: inout Out) -> Bool {
        guard let raw = f.properties, let p = CairnValue(json: Array(raw)), let kind = p["kind"]?.text else { return false }
        func int(_ v: CairnValue?) -> Int64? { if case .int(let i)? = v { i } else { nil } }
        func double(_ v: CairnValue?) -> Double? {
            switch v {
            case .double(let d)?: d
            case .int(let i)?: Double(i)
            default: nil
            }
        }
        let start = UInt64(clamping: max(0, int(p["start_ms"]) ?? 0)) &* 1_000_000
        let temporality: Int32 = p["temporality"]?.text == "delta" ? 1 : 2
        var dimensions: [(String, String)] = []
        if case .object(let d)? = p["dimensions"] {
            dimensions = d.compactMap { k, v in v.text.map { (k, $0) } }.sorted { $0.0 < $1.0 }
        }
        func attributes(_ field: UInt32) {
            guard !dimensions.isEmpty else { return }
            out.openList(field, "attributes")
            for (key, value) in dimensions { Self.stringAttribute(field, key, value, into: &out) }
            out.closeList()
        }
        let mark = out.checkpoint
        let m = out.openRecord(2)
        out.string(1, "name", json: f.name!)
        if let unit = p["unit"]?.text { out.string(3, "unit", unit) }
        switch kind {
        case "sum", "gauge":
            let sum = kind == "sum"
            let data = out.openMessage(sum ? 7 : 5, sum ? "sum" : "gauge")
            out.openList(1, "dataPoints")
            let point = out.openElement(1)
            if sum { out.fixed64(2, "startTimeUnixNano", start) }
            out.fixed64(3, "timeUnixNano", f.nanos)
            if case .int(let i)? = p["value"] {
                out.sfixed64(6, "asInt", i)
            } else if let d = double(p["value"]) {
                out.double(4, "asDouble", d, text: nil)
            } else {
                out.rewind(to: mark)
                return false
            }
            attributes(7)
            out.close(point)
            out.closeList()
            if sum {
                out.enumValue(2, "aggregationTemporality", temporality)
                if case .bool(true)? = p["monotonic"] { out.bool(3, "isMonotonic", true) }
            }
            out.close(data)
        case "histogram":
            guard case .array(let boundValues)? = p["bounds"], case .array(let countValues)? = p["counts"],
                  countValues.count == boundValues.count + 1 else {
                out.rewind(to: mark)
                return false
            }
            let bounds = boundValues.compactMap(double), counts = countValues.compactMap(int)
            guard bounds.count == boundValues.count, counts.count == countValues.count else {
                out.rewind(to: mark)
                return false
            }
            let data = out.openMessage(9, "histogram")
            out.openList(1, "dataPoints")
            let point = out.openElement(1)
            out.fixed64(2, "startTimeUnixNano", start)
            out.fixed64(3, "timeUnixNano", f.nanos)
            out.fixed64(4, "count", UInt64(clamping: max(0, int(p["count"]) ?? 0)))
            out.double(5, "sum", double(p["sum"]) ?? 0, text: nil)
            out.fixed64s(6, "bucketCounts", counts.map { UInt64(clamping: max(0, $0)) })
            out.doubles(7, "explicitBounds", bounds)
            attributes(9)
            if let min = double(p["min"]) { out.double(11, "min", min, text: nil) }
            if let max = double(p["max"]) { out.double(12, "max", max, text: nil) }
            out.close(point)
            out.closeList()
            out.enumValue(2, "aggregationTemporality", temporality)
            out.close(data)
        default:
            out.rewind(to: mark)
            return false
        }
        out.close(m)
        return true
    }

    /// The OTLP severity of a log record's `level` (swift-log's levels: `notice` is
    /// INFO2, `critical` FATAL); nil for a level it does not know.
    static func logSeverity(_ level: UnsafeRawBufferPointer) -> (Int32, StaticString)? {
        if eq(level, "trace") { return (1, "TRACE") }
        if eq(level, "debug") { return (5, "DEBUG") }
        if eq(level, "info") { return (9, "INFO") }
        if eq(level, "notice") { return (10, "INFO2") }
        if eq(level, "warning") { return (13, "WARN") }
        if eq(level, "error") { return (17, "ERROR") }
        if eq(level, "critical") { return (21, "FATAL") }
        return nil
    }

    /// `exception.type`, `exception.message` and `exception.stacktrace` of a crash.
    static func writeException(_ p: CairnValue, into out: inout Out) {
        let type = p["message"] != nil ? "Swift runtime failure" : p["signal"]?.text ?? "crash"
        stringAttribute(6, "exception.type", type, into: &out)
        if let reason = p["reason"]?.text { stringAttribute(6, "exception.message", reason, into: &out) }
        guard case .array(let frames)? = p["frames"] else { return }
        var lines: [String] = []
        for frame in frames {
            let index = frame["index"].flatMap { if case .int(let i) = $0 { i } else { nil } } ?? Int64(lines.count)
            var line = "#\(index) " + (frame["function"]?.text ?? frame["symbol"]?.text ?? "???")
            if let module = frame["module"]?.text {
                let base = module.split(separator: "/").last.map(String.init) ?? module
                line += " (\(base)+\(frame["offset"]?.text ?? "?"))"
            } else if let address = frame["address"]?.text {
                line += " (\(address))"
            }
            if let file = frame["file"]?.text {
                line += " at \(file)"
                if case .int(let l)? = frame["line"] { line += ":\(l)" }
                if case .int(let c)? = frame["column"] { line += ":\(c)" }
            }
            lines.append(line)
        }
        stringAttribute(6, "exception.stacktrace", lines.joined(separator: "\n"), into: &out)
    }

    // MARK: Spans

    /// Writes the span of `f`; false when its properties are not JSON.
    private mutating func writeSpan(_ f: borrowing Fields, into out: inout Out) -> Bool {
        // What the span's properties say of it, read first.
        var durationMs = 0.0
        var statusCode: Int64?
        var failed = has(f.level, "error")
        var error: UnsafeRawBufferPointer?
        if let p = f.properties {
            var s = JSONScan(p)
            _ = s.enterObject()
            while let key = s.member() {
                if eq(key, "duration_ms"), let n = s.number() {
                    durationMs = Self.double(n.text)
                } else if eq(key, "status"), s.peek() == .number, let n = s.number() {
                    statusCode = n.integer ? Self.int64(n.text) : nil
                } else if eq(key, "status"), let v = s.string() {
                    if eq(v, "error") { failed = true }
                } else if eq(key, "outcome"), let v = s.string() {
                    if eq(v, "error") { failed = true }
                } else if eq(key, "error"), let v = s.string() {
                    error = v
                    failed = true
                } else {
                    _ = s.skipValue()
                }
            }
        }
        let client = f.spanKind == nil ? has(f.name, "http.client") : has(f.spanKind, "client")
        let server = has(f.spanKind, "server")
        let t = out.openRecord(2)
        out.id(1, "traceId", hex: f.traceID!)
        out.id(2, "spanId", hex: f.spanID!)
        if let state = f.traceState, !state.isEmpty { out.string(3, "traceState", json: state) }
        if let parent = f.parentSpanID, Self.validID(parent, 16) { out.id(4, "parentSpanId", hex: parent) }
        out.string(5, "name", json: f.name!)
        out.enumValue(6, "kind", server ? 2 : client ? 3 : 1)
        let duration = durationMs.isFinite && durationMs > 0 ? UInt64(min(durationMs * 1e6, Double(f.nanos))) : 0
        out.fixed64(7, "startTimeUnixNano", f.nanos - duration)
        out.fixed64(8, "endTimeUnixNano", f.nanos)
        out.openList(9, "attributes")
        if let p = f.properties {
            guard writeAttributes(p, field: 9, reserved: otlpSpanReserved,
                                  skip: client ? otlpClientSpanSkipped : otlpSpanSkipped,
                                  renames: client ? otlpClientSpanRenames : server ? otlpServerSpanRenames : [],
                                  into: &out) else { return false }
        }
        if let statusCode {
            let kv = out.openElement(9)
            out.string(1, "key", literal: "http.response.status_code")
            let v = out.openMessage(2, "value")
            out.int64(3, "intValue", statusCode)
            out.close(v)
            out.close(kv)
        }
        envelopeAttributes(f, field: 9, uid: "cairn.event_id", into: &out)
        out.closeList()
        if let error {
            out.openList(11, "events")
            let e = out.openElement(11)
            out.fixed64(1, "timeUnixNano", f.nanos)
            out.string(2, "name", literal: "exception")
            out.openList(3, "attributes")
            let kv = out.openElement(3)
            out.string(1, "key", literal: "exception.message")
            let v = out.openMessage(2, "value")
            out.string(1, "stringValue", json: error, always: true)
            out.close(v)
            out.close(kv)
            out.closeList()
            out.close(e)
            out.closeList()
        }
        if failed {
            let st = out.openMessage(15, "status")
            if let error {
                out.string(2, "message", json: error)
            } else if let statusCode {
                out.string(2, "message", "HTTP \(statusCode)")
            }
            out.enumValue(3, "code", 2)
            out.close(st)
        }
        if let hex = f.traceFlags, let flags = Self.flags(hex) {
            // Bit 8: whether the parent is remote is known; bit 9: it is (a server span
            // continued the caller's).
            var remote = false
            if server, f.parentSpanID != nil { remote = true }
            out.fixed32(16, "flags", flags | 0x100 | (remote ? 0x200 : 0))
        }
        out.close(t)
        return true
    }

    // MARK: Attributes

    /// The envelope's attributes of a log record or span (after its properties).
    private mutating func envelopeAttributes(_ f: borrowing Fields, field: UInt32, uid: StaticString, into out: inout Out) {
        if let id = f.eventID { Self.jsonAttribute(field, uid, id, into: &out) }
        if let session = f.sessionID { Self.jsonAttribute(field, "session.id", session, into: &out) }
        if let user = f.distinctID { Self.jsonAttribute(field, "user.id", user, into: &out) }
        if let account = f.accountID { Self.jsonAttribute(field, "cairn.account_id", account, into: &out) }
        if field == 6 {
            Self.jsonAttribute(field, "cairn.event.type", f.type!, into: &out)
            if let offset = f.zoneOffset, let minutes = Self.int64(offset) {
                let kv = out.openElement(field)
                out.string(1, "key", literal: "cairn.zone_offset")
                let v = out.openMessage(2, "value")
                out.int64(3, "intValue", minutes)
                out.close(v)
                out.close(kv)
            }
        }
        if f.recoveredFalse {
            let kv = out.openElement(field)
            out.string(1, "key", literal: "cairn.context_recovered")
            let v = out.openMessage(2, "value")
            out.bool(2, "boolValue", false)
            out.close(v)
            out.close(kv)
        }
    }

    static func jsonAttribute(_ field: UInt32, _ key: StaticString, _ text: UnsafeRawBufferPointer,
                              into out: inout Out) {
        out.attribute(field, key: UnsafeRawBufferPointer(start: key.utf8Start, count: key.utf8CodeUnitCount),
                      keyPlain: true, .string(text, plain: nil))
    }

    static func stringAttribute(_ field: UInt32, _ key: String, _ text: String, into out: inout Out) {
        let kv = out.openElement(field)
        out.string(1, "key", key)
        let v = out.openMessage(2, "value")
        out.string(1, "stringValue", text, always: true)
        out.close(v)
        out.close(kv)
    }

    /// The members of the object `properties` as `KeyValue`s of the repeated field
    /// `field`: `null` members left out, `skip` members left out, `renames` applied, and
    /// a key in `reserved` kept as `cairn.property.<key>`. The JSON is checked as it is
    /// read (the record's first reading only found its end): false when it is not JSON,
    /// what was written is then to be dropped.
    private mutating func writeAttributes(_ properties: UnsafeRawBufferPointer, field: UInt32,
                                          reserved: [StaticString], skip: [StaticString] = [],
                                          renames: [(StaticString, StaticString)] = [], into out: inout Out) -> Bool {
        var s = JSONScan(properties)
        guard s.enterObject() else { return false }
        while let key = s.member() {
            let keyPlain = s.lastPlain
            if s.peek() == .literal, s.bytes[s.i] == 0x6E {
                guard s.literal() != nil else { return false }
                continue
            }
            if skip.contains(where: { eq(key, $0) }) {
                guard s.skipValue() else { return false }
                continue
            }
            // The common case first: a key kept as it is, a value that is not a list.
            if renames.isEmpty || !renames.contains(where: { eq(key, $0.0) }),
               !Self.mayBeReserved(key) || !reserved.contains(where: { eq(key, $0) }) {
                let scalar: OTLPScalar?
                switch s.peek() {
                case .string:
                    guard let text = s.string() else { return false }
                    scalar = .string(text, plain: s.lastPlain)
                case .number:
                    guard let n = s.number() else { return false }
                    if n.integer, let v = Self.int64(n.text) {
                        scalar = .int(v)
                    } else {
                        scalar = .double(Self.double(n.text), text: n.text)
                    }
                case .literal:
                    switch s.literal() {
                    case .some(.some(let b)): scalar = .bool(b)
                    default: return false
                    }
                default: scalar = nil
                }
                if let scalar {
                    out.attribute(field, key: key, keyPlain: keyPlain, scalar)
                    continue
                }
            }
            let kv = out.openElement(field)
            if let renamed = renames.first(where: { eq(key, $0.0) }) {
                out.string(1, "key", literal: renamed.1)
            } else if reserved.contains(where: { eq(key, $0) }) {
                keyScratch.removeAll(keepingCapacity: true)
                keyScratch.append(contentsOf: "cairn.property.".utf8)
                keyScratch.append(contentsOf: key)
                keyScratch.withUnsafeBytes { out.string(1, "key", json: $0) }
            } else {
                out.string(1, "key", json: key, plain: keyPlain, always: false)
            }
            let v = out.openMessage(2, "value")
            guard Self.anyValue(&s, depth: CairnValue.jsonDepthLimit, into: &out) else { return false }
            out.close(v)
            out.close(kv)
        }
        s.skipSpace()
        return !s.failed && s.atEnd
    }

    /// Whether `key` can be one of the envelope's attribute names (they all begin with
    /// `c`, `e`, `l`, `s` or `u`): most keys are told apart by their first byte.
    @inline(__always)
    static func mayBeReserved(_ key: UnsafeRawBufferPointer) -> Bool {
        switch key.first {
        case 0x63, 0x65, 0x6C, 0x73, 0x75, 0x68: return true
        default: return false
        }
    }

    /// The JSON value at the cursor as the fields of an `AnyValue`; false when it is not
    /// JSON, or nests deeper than `depth`.
    static func anyValue(_ s: inout JSONScan, depth: Int, into out: inout Out) -> Bool {
        switch s.peek() {
        case .string:
            guard let text = s.string() else { return false }
            out.string(1, "stringValue", json: text, plain: s.lastPlain, always: true)
        case .number:
            guard let n = s.number() else { return false }
            if n.integer, let v = int64(n.text) {
                out.int64(3, "intValue", v)
            } else {
                out.double(4, "doubleValue", double(n.text), text: n.text)
            }
        case .literal:
            switch s.literal() {
            case .some(.some(let b)): out.bool(2, "boolValue", b)
            case .some(.none): break
            case .none: return false
            }
        case .object:
            guard depth > 0, s.enterObject() else { return false }
            let m = out.openMessage(6, "kvlistValue")
            out.openList(1, "values")
            while let key = s.member() {
                let keyPlain = s.lastPlain
                if s.peek() == .literal, s.bytes[s.i] == 0x6E {
                    guard s.literal() != nil else { return false }
                    continue
                }
                let kv = out.openElement(1)
                out.string(1, "key", json: key, plain: keyPlain, always: false)
                let v = out.openMessage(2, "value")
                guard anyValue(&s, depth: depth - 1, into: &out) else { return false }
                out.close(v)
                out.close(kv)
            }
            guard !s.failed else { return false }
            out.closeList()
            out.close(m)
        case .array:
            guard depth > 0, s.enterArray() else { return false }
            let m = out.openMessage(5, "arrayValue")
            out.openList(1, "values")
            while s.element() {
                let e = out.openElement(1)
                guard anyValue(&s, depth: depth - 1, into: &out) else { return false }
                out.close(e)
            }
            guard !s.failed else { return false }
            out.closeList()
            out.close(m)
        case .invalid:
            return false
        }
        return true
    }

    // MARK: Finishing

    mutating func finish<Body>(making make: (OTLPEncoder.BodyPieces) -> Body)
        -> (logs: [(body: Body, records: Int)], traces: [(body: Body, records: Int)],
            metrics: [(body: Body, records: Int)]) {
        defer {
            // The groups' buffers kept for the next batch (a few: a batch rarely has more
            // than one group, the service's current run).
            for k in groups.indices {
                if spare.count < 4 {
                    groups[k].logs.reset()
                    groups[k].spans.reset()
                    groups[k].metrics.reset()
                    spare.append((groups[k].logs, groups[k].spans, groups[k].metrics))
                } else {
                    groups[k].logs.free()
                    groups[k].spans.free()
                    groups[k].metrics.free()
                }
            }
            groups.removeAll(keepingCapacity: true)
            last = -1
        }
        var resources: [Resource] = []
        for group in groups { resources.append(resource(of: group)) }
        return (requests(.logs, resources: resources, make), requests(.traces, resources: resources, make),
                requests(.metrics, resources: resources, make))
    }

    /// The requests of one signal: the groups' records, cut where a request would pass
    /// the size limit.
    private mutating func requests<Body>(_ signal: OTLPEncoder.Signal, resources: [Resource],
                                         _ make: (OTLPEncoder.BodyPieces) -> Body) -> [(body: Body, records: Int)] {
        var result: [(body: Body, records: Int)] = []
        // The pieces of the request being formed: group, and its records from..<to.
        var pieces: [(group: Int, from: Int, to: Int)] = []
        var size = 0
        func flush() {
            guard !pieces.isEmpty else { return }
            result.append(request(signal, pieces: pieces, resources: resources, make))
            pieces.removeAll()
            size = 0
        }
        for (g, group) in groups.enumerated() {
            let ends = group.records(signal).ends
            guard !ends.isEmpty else { continue }
            // Its resource and scope, once in each request it is in.
            let resourceBytes = resources[g].size + 128
            var from = 0
            size += resourceBytes
            for k in ends.indices {
                let recordBytes = ends[k] - (k == 0 ? 0 : ends[k - 1]) + 8
                if size + recordBytes > settings.maxRequestBytes {
                    if k > from {
                        pieces.append((g, from, k))
                        from = k
                    }
                    if !pieces.isEmpty {
                        flush()
                        size = resourceBytes
                    }
                }
                size += recordBytes
            }
            pieces.append((g, from, ends.count))
        }
        flush()
        return result
    }

    private mutating func request<Body>(_ signal: OTLPEncoder.Signal, pieces: [(group: Int, from: Int, to: Int)],
                                        resources: [Resource], _ make: (OTLPEncoder.BodyPieces) -> Body)
        -> (body: Body, records: Int) {
        if Out.self == ProtobufOutput.self {
            return protobufRequest(signal, pieces: pieces, resources: resources, make)
        }
        var out = assembly
        assembly = Out()  // (the one storage is not shared while it is written)
        out.reset()
        defer { assembly = out }
        var records = 0
        out.openList(1, signal.resourceList)
        for piece in pieces {
            let (written, ends) = groups[piece.group].records(signal)
            let e = out.openElement(1)
            Self.writeResource(resources[piece.group].attributes, into: &out)
            out.openList(2, signal.scopeList)
            let sc = out.openElement(2)
            let scope = out.openMessage(1, "scope")
            out.string(1, "name", literal: "cairn")
            out.string(2, "version", cairnVersion)
            out.close(scope)
            out.openList(2, signal.recordList)
            let start = piece.from == 0 ? 0 : ends[piece.from - 1]
            let end = ends[piece.to - 1]
            written.bytes.withUnsafeBytes {
                out.appendElements(UnsafeRawBufferPointer(rebasing: $0[start..<end]))
            }
            records += piece.to - piece.from
            out.closeList()
            out.close(sc)
            out.closeList()
            out.close(e)
        }
        out.closeList()
        // The message, in braces for JSON.
        let braces: [UInt8] = [0x7B, 0x7D]
        let json = Out.self == OTLPJSONOutput.self
        let body = braces.withUnsafeBytes { b in
            out.bytes.withUnsafeBytes {
                make(OTLPEncoder.BodyPieces(json ? [UnsafeRawBufferPointer(rebasing: b[0..<1]), $0,
                                                    UnsafeRawBufferPointer(rebasing: b[1..<2])] : [$0], signal: signal))
            }
        }
        return (body, records)
    }

    static func writeResource(_ attributes: [(String, ResourceValue)], into out: inout Out) {
        let r = out.openMessage(1, "resource")
        out.openList(1, "attributes")
        for (key, value) in attributes {
            let kv = out.openElement(1)
            out.string(1, "key", key)
            let v = out.openMessage(2, "value")
            switch value {
            case .string(let s): out.string(1, "stringValue", s, always: true)
            case .int(let i): out.int64(3, "intValue", i)
            case .double(let d): out.double(4, "doubleValue", d, text: nil)
            case .bool(let b): out.bool(2, "boolValue", b)
            }
            out.close(v)
            out.close(kv)
        }
        out.closeList()
        out.close(r)
    }

    /// The bytes ``writeResource(_:into:)`` writes for `attributes`.
    static func resourceSize(_ attributes: [(String, ResourceValue)]) -> Int {
        var out = Out()
        defer { out.free() }
        writeResource(attributes, into: &out)
        return out.bytes.count
    }

    /// A protobuf request handed to `make` as pieces of the buffers it lies in: the
    /// messages around the records are small, written in the assembly buffer, and their
    /// lengths follow from the records' (the same bytes as the general path writes:
    /// fields in number order, each length a canonical varint); the records are not
    /// copied.
    private mutating func protobufRequest<Body>(_ signal: OTLPEncoder.Signal, pieces: [(group: Int, from: Int, to: Int)],
                                                resources: [Resource], _ make: (OTLPEncoder.BodyPieces) -> Body)
        -> (body: Body, records: Int) {
        func tagged(_ length: Int) -> Int { 1 + ProtobufOutput.varintSize(UInt64(length)) + length }
        // `resource` (field 1 of ResourceLogs/ResourceSpans) and `scope` (field 1 of
        // ScopeLogs/ScopeSpans), as the general path writes them, in the assembly buffer.
        var head = assembly
        assembly = Out()  // (the one storage is not shared while it is written)
        head.reset()
        defer { assembly = head }
        var parts: [(resourceEnd: Int, scopeEnd: Int, records: UnsafeRawBufferPointer, scopeLogs: Int, resourceLogs: Int)] = []
        var records = 0
        for piece in pieces {
            let (recordsOut, ends) = groups[piece.group].records(signal)
            Self.writeResource(resources[piece.group].attributes, into: &head)
            let resourceEnd = head.bytes.count
            let scope = head.openMessage(1, "scope")
            head.string(1, "name", literal: "cairn")
            head.string(2, "version", cairnVersion)
            head.close(scope)
            let start = piece.from == 0 ? 0 : ends[piece.from - 1]
            let slice = recordsOut.bytes.withUnsafeBytes {
                UnsafeRawBufferPointer(rebasing: $0[start..<ends[piece.to - 1]])
            }
            let scopeLogs = (head.bytes.count - resourceEnd) + slice.count
            let resourceLogs = (resourceEnd - (parts.last?.scopeEnd ?? 0)) + tagged(scopeLogs)
            parts.append((resourceEnd, head.bytes.count, slice, scopeLogs, resourceLogs))
            records += piece.to - piece.from
        }
        // Each part's two tags and lengths (at most 11 bytes each), then the pieces.
        var tags = [UInt8](repeating: 0, count: parts.count * 22)
        var tagEnds: [(Int, Int)] = []
        tags.withUnsafeMutableBytes { t in
            guard let base = t.baseAddress else { return }
            var at = 0
            for part in parts {
                at += ProtobufOutput.header(1, UInt64(part.resourceLogs), at: base + at)
                let first = at
                at += ProtobufOutput.header(2, UInt64(part.scopeLogs), at: base + at)
                tagEnds.append((first, at))
            }
        }
        let body = tags.withUnsafeBytes { t in
            head.bytes.withUnsafeBytes { h in
                var list: [UnsafeRawBufferPointer] = []
                list.reserveCapacity(parts.count * 5)
                var headAt = 0, tagAt = 0
                for (part, (first, second)) in zip(parts, tagEnds) {
                    list.append(UnsafeRawBufferPointer(rebasing: t[tagAt..<first]))
                    list.append(UnsafeRawBufferPointer(rebasing: h[headAt..<part.resourceEnd]))
                    list.append(UnsafeRawBufferPointer(rebasing: t[first..<second]))
                    list.append(UnsafeRawBufferPointer(rebasing: h[part.resourceEnd..<part.scopeEnd]))
                    list.append(part.records)
                    headAt = part.scopeEnd
                    tagAt = second
                }
                return make(OTLPEncoder.BodyPieces(list, signal: signal))
            }
        }
        return (body, records)
    }

    // MARK: Resource

    enum ResourceValue {
        case string(String), int(Int64), double(Double), bool(Bool)
    }

    /// The `Resource` of a group (docs/FORMATS.md, "Resource and scope").
    func resourceAttributes(context: [UInt8], session: [UInt8]) -> [(String, ResourceValue)] {
        let ctx = context.isEmpty ? CairnValue.object([:]) : CairnValue(json: context) ?? .object([:])
        var attributes: [(String, ResourceValue)] = []
        var keys = Set<String>()
        func add(_ key: String, _ value: ResourceValue?) {
            guard let value, !keys.contains(key) else { return }
            keys.insert(key)
            attributes.append((key, value))
        }
        func text(_ v: CairnValue?) -> ResourceValue? { v?.text.map(ResourceValue.string) }
        let configured = settings.resourceAttributes
        func configuredValue(_ key: String) -> String? { configured.last(where: { $0.key == key })?.value }
        let processName = ctx["process"]?["name"]?.text
        add("service.name", .string(settings.serviceName ?? configuredValue("service.name") ?? ctx["app"]?["id"]?.text
                ?? "unknown_service:\(processName ?? "swift")"))
        add("service.namespace", configuredValue("service.namespace").map(ResourceValue.string))
        add("service.version", text(ctx["app"]?["release"]))
        var sessionText: [UInt8] = []
        session.withUnsafeBytes { JSONText.unescape($0, into: &sessionText) }
        let sessionID = String(decoding: sessionText, as: UTF8.self)
        if !sessionID.isEmpty { add("service.instance.id", .string(sessionID)) }
        add("deployment.environment.name", text(ctx["app"]?["environment"]))
        add("host.name", text(ctx["host"]?["name"]))
        add("host.id", settings.hostID.map(ResourceValue.string))
        if let arch = ctx["arch"]?.text { add("host.arch", .string(Self.semconvArch(arch))) }
        add("os.type", .string("linux"))
        let osName = ctx["os"]?["name"]?.text
        let osVersion = ctx["os"]?["version"]?.text
        if osName != nil || osVersion != nil {
            add("os.description", .string([osName, osVersion].compactMap { $0 }.joined(separator: " ")))
        }
        add("os.version", text(ctx["os"]?["kernel"]))
        if case .int(let pid)? = ctx["process"]?["pid"] { add("process.pid", .int(pid)) }
        if let millis = Self.uuid7Millis(sessionID) { add("process.creation.time", .string(EventClock(fixedOffsetMinutes: 0).text(millis))) }
        add("process.executable.name", processName.map(ResourceValue.string))
        add("process.runtime.name", .string("swift"))
        add("process.runtime.version", settings.runtimeVersion.map(ResourceValue.string))
        add("container.id", text(ctx["container_id"]))
        add("telemetry.sdk.name", .string("cairn"))
        add("telemetry.sdk.language", .string("swift"))
        add("telemetry.sdk.version", .string(cairnVersion))
        // The rest of the context, under `cairn.`, by its path.
        let known: Set<String> = ["app.id", "app.release", "app.environment", "host.name", "arch", "os.name",
                                  "os.version", "os.kernel", "process.pid", "process.name", "container_id"]
        func flatten(_ v: CairnValue, _ path: String) {
            switch v {
            case .object(let members):
                for (key, value) in members.sorted(by: { $0.key < $1.key }) {
                    flatten(value, path.isEmpty ? key : path + "." + key)
                }
            case .string(let s): if !known.contains(path) { add("cairn." + path, .string(s)) }
            case .int(let i): if !known.contains(path) { add("cairn." + path, .int(i)) }
            case .double(let d): if !known.contains(path) { add("cairn." + path, .double(d)) }
            case .bool(let b): if !known.contains(path) { add("cairn." + path, .bool(b)) }
            case .null, .array: break
            }
        }
        flatten(ctx, "")
        for (key, value) in configured { add(key, .string(value)) }
        return attributes
    }

    /// `arch` (`uname -m`) in the semantic conventions' values.
    static func semconvArch(_ arch: String) -> String {
        switch arch {
        case "x86_64", "amd64": return "amd64"
        case "aarch64", "arm64": return "arm64"
        case "i386", "i486", "i586", "i686": return "x86"
        case "armv7l", "armv6l", "arm": return "arm32"
        case "ppc64le", "ppc64": return "ppc64"
        case "ppc": return "ppc32"
        case "s390x": return "s390x"
        default: return arch
        }
    }

    /// The milliseconds of a UUIDv7 (its first 48 bits); nil for other text.
    static func uuid7Millis(_ id: String) -> UInt64? {
        let u = Array(id.utf8)
        guard u.count == 36, u[8] == 0x2D, u[14] == 0x37 else { return nil }
        var v: UInt64 = 0
        for k in [0, 1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12] {
            guard let d = Hex.value(u[k]) else { return nil }
            v = v << 4 | UInt64(d)
        }
        return v
    }

    // MARK: Numbers and members

    /// The W3C flags from their two hex digits.
    static func flags(_ hex: UnsafeRawBufferPointer) -> UInt32? {
        guard hex.count == 2, let hi = Hex.value(hex[0]), let lo = Hex.value(hex[1]) else { return nil }
        return UInt32(hi << 4 | lo)
    }

    static func int64(_ text: UnsafeRawBufferPointer) -> Int64? {
        var i = 0
        let negative = text.first == 0x2D
        if negative { i = 1 }
        guard i < text.count else { return nil }
        var v: UInt64 = 0
        while i < text.count {
            let d = text[i] &- 0x30
            guard d < 10 else { return nil }
            let (m, o1) = v.multipliedReportingOverflow(by: 10)
            let (a, o2) = m.addingReportingOverflow(UInt64(d))
            guard !o1, !o2 else { return nil }
            v = a
            i += 1
        }
        if negative { return v <= UInt64(Int64.max) + 1 ? Int64(truncatingIfNeeded: 0 &- v) : nil }
        return v <= UInt64(Int64.max) ? Int64(v) : nil
    }

    static func double(_ text: UnsafeRawBufferPointer) -> Double {
        // The common form, `-?digits.digits` with at most 15 digits: the digits as an
        // integer and a power of ten are both exact doubles, so one division rounds
        // correctly (as strtod does).
        var i = text.first == 0x2D ? 1 : 0
        var mantissa: UInt64 = 0
        var digits = 0
        var fraction = -1
        while i < text.count {
            let b = text[i]
            if b == 0x2E, fraction < 0 {
                fraction = 0
            } else if b &- 0x30 < 10, digits < 15 {
                mantissa = mantissa * 10 + UInt64(b - 0x30)
                digits += 1
                if fraction >= 0 { fraction += 1 }
            } else {
                break
            }
            i += 1
        }
        if i == text.count, digits > 0, fraction != 0 {
            let value = Double(mantissa) / otlpPowersOfTen[max(0, fraction)]
            return text.first == 0x2D ? -value : value
        }
        return withUnsafeTemporaryAllocation(of: CChar.self, capacity: text.count + 1) { buf in
            for k in 0..<text.count { buf[k] = CChar(bitPattern: text[k]) }
            buf[text.count] = 0
            return strtod(buf.baseAddress!, nil)
        }
    }

    /// The escaped text of the string member `key` of the object `json` (or, with
    /// `literal`, the text of a `true`/`false`/`null` member); nil when absent.
    static func member(_ json: UnsafeRawBufferPointer, _ key: StaticString, literal: Bool = false)
        -> UnsafeRawBufferPointer?
    {
        var s = JSONScan(json)
        guard s.enterObject() else { return nil }
        while let k = s.member() {
            if eq(k, key) {
                if literal {
                    s.skipSpace()
                    let start = s.i
                    guard s.literal() != nil else { return nil }
                    return UnsafeRawBufferPointer(rebasing: s.bytes[start..<s.i])
                }
                return s.string()
            }
            guard s.skipValue() else { return nil }
        }
        return nil
    }
}

/// 10^0 ... 10^15, each an exact double (``OTLPBatch/double(_:)``).
let otlpPowersOfTen: [Double] = [1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15]

/// Keys of the attributes the envelope adds to a log record: a property with one of
/// these names is kept as `cairn.property.<name>`.
let otlpLogReserved: [StaticString] = [
    "log.record.uid", "session.id", "user.id", "cairn.account_id", "cairn.event.type", "cairn.zone_offset",
    "cairn.context_recovered", "exception.type", "exception.message", "exception.stacktrace", "cairn.logger",
]
/// The same for a span's attributes.
let otlpSpanReserved: [StaticString] = [
    "session.id", "user.id", "cairn.account_id", "cairn.event_id", "cairn.context_recovered",
    "http.response.status_code",
]
/// A span's properties that are its fields (duration, outcome), not attributes.
let otlpSpanSkipped: [StaticString] = ["duration_ms", "status", "error"]
/// The same for an outbound call (`http.client`), whose `outcome` and `message` repeat
/// its status.
let otlpClientSpanSkipped: [StaticString] = ["duration_ms", "status", "error", "outcome", "message"]
/// An incoming request's properties (``Cairn/withIncomingRequest``) under the HTTP
/// conventions' names.
let otlpServerSpanRenames: [(StaticString, StaticString)] = [("method", "http.request.method"), ("route", "http.route")]
/// An outbound call's properties under the HTTP conventions' names.
let otlpClientSpanRenames: [(StaticString, StaticString)] = [("method", "http.request.method"), ("url", "url.full")]

/// Whether the bytes are those of `s`.
@inline(__always)
func eq(_ a: UnsafeRawBufferPointer, _ s: StaticString) -> Bool {
    let n = s.utf8CodeUnitCount
    guard a.count == n else { return false }
    return n == 0 || memcmp(a.baseAddress!, s.utf8Start, n) == 0
}

/// Whether `a` is there and holds the bytes of `s`.
@inline(__always)
func has(_ a: UnsafeRawBufferPointer?, _ s: StaticString) -> Bool {
    guard let a else { return false }
    return eq(a, s)
}

/// Whether `a` holds the bytes of `b`.
func bytesEqual(_ a: [UInt8], _ b: UnsafeRawBufferPointer) -> Bool {
    guard a.count == b.count else { return false }
    if a.isEmpty { return true }
    return a.withUnsafeBytes { memcmp($0.baseAddress!, b.baseAddress!, a.count) == 0 }
}
