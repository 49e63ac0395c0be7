import CairnBase
import CairnProcessor
import CairnStore
import FoundationEssentials
import Glibc

/// Builds the `crash` and `session_end` events of a previous run (docs/FORMATS.md,
/// "Crash and session-end events"). Event ids are derived from the run and the report,
/// so an event stored twice (a crash between storing it and deleting the report) has
/// the same `event_id` both times and the collector keeps one.
enum CrashEvent {
    /// The envelope shared by both events: ids, time, the crashed run's identity.
    static func envelope(id: String, type: String, name: String, millis: UInt64, start: RunStart?,
                         sessionID: String?) -> [(String, JSONValue)] {
        let (time, offset) = rfc3339(millis: millis)
        var m: [(String, JSONValue)] = [
            ("event_id", .string(id)), ("type", .string(type)), ("name", .string(name)),
            ("time", .string(time)), ("zone_offset", .int(Int64(offset))),
            ("session_id", sessionID.map(JSONValue.string) ?? .null),
        ]
        if let release = start?.release { m.append(("release", .string(release))) }
        let reserved = Set(m.map(\.0) + ["context", "properties", "sdk"])
        for (k, v) in (start?.attributes ?? [:]).sorted(by: { $0.key < $1.key }) where !reserved.contains(k) {
            m.append((k, .string(v)))
        }
        if let context = start?.context { m.append(("context", context)) }
        return m
    }

    static let sdk: JSONValue = .object([("name", .string("cairn-swift")), ("version", .string(cairnVersion))])

    /// A stable event id: time-ordered (UUIDv7) with its random bits from `key`.
    static func stableID(millis: UInt64, key: [UInt8]) -> String {
        uuidV7(millis: millis, random: (FNV1a.hash(key), FNV1a.hash(key, seed: 0x9e37_79b9_7f4a_7c15)))
    }

    /// The `crash` event for `report` (already read), with frames symbolicated.
    static func crash(report: CrashReport, rawBytes: [UInt8], start: RunStart?, symbolizer: Symbolizer,
                      fallbackMillis: UInt64) -> (id: String, json: JSONValue) {
        let millis = report.timeNanos > 0 ? report.timeNanos / 1_000_000 : fallbackMillis
        let sessionID = start?.sessionID ?? contextField(report.context, "session_id")
        let id = stableID(millis: millis, key: Array("crash:\(sessionID ?? "")".utf8) + rawBytes.prefix(4096))
        var p: [(String, JSONValue)] = []
        let partial = !report.complete || report.unreadable != nil
        p.append(("reason", .string(reason(report))))
        if report.unreadable == nil {
            p.append(("signal", .string(SignalNames.name(report.signal))))
            p.append(("signal_number", .int(Int64(report.signal))))
            if let code = SignalNames.code(report.signal, report.code) { p.append(("code", .string(code))) }
            p.append(("code_number", .int(Int64(report.code))))
            p.append(("fault_address", .string(Hex.address(report.faultAddress))))
        }
        if let message = report.message { p.append(("message", .string(message))) }
        p.append(("partial", .bool(partial)))
        if let why = report.unreadable { p.append(("unreadable", .string(why))) }
        if report.nestedFaults > 0 { p.append(("nested_faults", .int(Int64(report.nestedFaults)))) }
        if report.handlerNanos > 0 { p.append(("handler_ms", .double(Double(report.handlerNanos) / 1e6))) }
        if report.pid != 0 { p.append(("pid", .int(Int64(report.pid)))) }
        if report.tid != 0 {
            p.append(("thread", .object([("id", .int(Int64(report.tid))), ("name", .string(report.threadName)),
                                         ("main", .bool(report.tid == report.pid))])))
        }
        if !report.frames.isEmpty {
            p.append(("unwinder", .string(report.framesMethod == 2 ? "frame_pointers" : "libunwind")))
            p.append(("frames", .array(report.frames.enumerated().map { i, address in
                frame(symbolizer.symbolize(address: address, index: i, modules: report.modules), index: i)
            })))
        }
        if !report.modules.isEmpty {
            p.append(("modules", .array(report.modules.map { m in
                .object([("path", .string(m.path)), ("load_address", .string(Hex.address(m.loadAddress))),
                         ("build_id", .string(Hex.string(m.buildID)))])
            })))
        }
        let names = SignalNames.registers(arch: report.arch)
        if !report.registers.isEmpty && report.registers.count == names.count {
            p.append(("registers", .object(zip(names, report.registers).map { ($0, .string(Hex.address($1))) })))
        }
        if !report.context.isEmpty {
            if let value = jsonValue(report.context) {
                p.append(("context", value))
            } else {
                p.append(("context", .string(String(decoding: report.context, as: UTF8.self))))
            }
        }
        var m = envelope(id: id, type: "crash", name: "crash", millis: millis, start: start, sessionID: sessionID)
        m.append(("properties", .object(p)))
        m.append(("sdk", sdk))
        return (id, .object(m))
    }

    /// The `session_end` event of a previous run.
    static func sessionEnd(start: RunStart?, sessionID: String, reason: SessionEndReason, endedAt: UInt64?,
                           crashEventID: String?, detectedAt: UInt64) -> JSONValue {
        let millis = endedAt ?? start?.startedAtMillis ?? detectedAt
        let id = stableID(millis: millis, key: Array("session_end:\(sessionID)".utf8))
        var p: [(String, JSONValue)] = [("reason", .string(reason.rawValue))]
        if let s = start {
            p.append(("started_at", .string(rfc3339(millis: s.startedAtMillis).text)))
            p.append(("pid", .int(Int64(s.pid))))
        }
        if let endedAt {
            p.append(("ended_at", .string(rfc3339(millis: endedAt).text)))
            if let s = start, endedAt >= s.startedAtMillis {
                p.append(("duration_ms", .uint(endedAt - s.startedAtMillis)))
            }
        }
        if let crashEventID { p.append(("crash_event_id", .string(crashEventID))) }
        var m = envelope(id: id, type: "session", name: "session_end", millis: millis, start: start,
                         sessionID: sessionID)
        m.append(("properties", .object(p)))
        m.append(("sdk", sdk))
        return .object(m)
    }

    /// One line an operator reads first: the runtime's message, or the signal explained.
    static func reason(_ r: CrashReport) -> String {
        if let why = r.unreadable { return "unreadable crash report: \(why)" }
        if let message = r.message?.trimmingWhiteSpace, !message.isEmpty {
            return message
        }
        if r.signal == 0 { return "crash report cut short before its signal section" }
        let name = SignalNames.name(r.signal)
        let code = SignalNames.code(r.signal, r.code)
        if r.code <= 0 { return "\(name) sent by \(r.code == -6 || r.code == -1 ? "the process itself" : "another process")" + (code.map { " (\($0))" } ?? "") }
        switch r.signal {
        case SIGSEGV, SIGBUS: return "\(name) (\(code ?? String(r.code))): bad access at \(Hex.address(r.faultAddress))"
        default: return "\(name) (\(code ?? String(r.code))) at \(Hex.address(r.faultAddress))"
        }
    }

    static func frame(_ f: SymbolizedFrame, index: Int) -> JSONValue {
        var m: [(String, JSONValue)] = [("index", .int(Int64(index))), ("address", .string(Hex.address(f.address)))]
        if let module = f.module { m.append(("module", .string(module))) }
        if let offset = f.moduleOffset { m.append(("offset", .string(Hex.address(offset)))) }
        if let symbol = f.symbol { m.append(("symbol", .string(symbol))) }
        if let mangled = f.mangledSymbol { m.append(("mangled", .string(mangled))) }
        if let offset = f.symbolOffset { m.append(("symbol_offset", .uint(offset))) }
        if let file = f.file { m.append(("file", .string(file))) }
        if let line = f.line { m.append(("line", .int(Int64(line)))) }
        if let column = f.column, column > 0 { m.append(("column", .int(Int64(column)))) }
        if let note = f.note { m.append(("note", .string(note))) }
        return .object(m)
    }

    /// A JSON object or array read back into a `JSONValue`, keys sorted; nil when `bytes`
    /// is not JSON.
    static func jsonValue(_ bytes: [UInt8]) -> JSONValue? {
        JSONValue.parse(bytes)
    }

    /// The processor's value as an ordered JSON value (object keys sorted).
    static func jsonValue(_ value: CairnValue) -> JSONValue {
        switch value {
        case .null: return .null
        case .bool(let b): return .bool(b)
        case .int(let i): return .int(i)
        case .double(let d): return .double(d)
        case .string(let s): return .string(s)
        case .array(let items): return .array(items.map(jsonValue))
        case .object(let m): return .object(m.keys.sorted().map { ($0, jsonValue(m[$0] ?? .null)) })
        }
    }

    /// A string field of the context blob (JSON object), if there is one.
    static func contextField(_ context: [UInt8], _ key: String) -> String? {
        JSONValue.parse(context)?[key]?.text
    }
}

extension CrashReport {
    /// The `crash` event (docs/FORMATS.md, "Crash and session-end events") of a raw
    /// crash report, symbolicated from the files on this machine: for tools such as
    /// `cairn report`. A report that cannot be read gives an event marked partial.
    public static func eventJSON(reportBytes: [UInt8]) -> [UInt8] {
        CrashEvent.crash(report: CrashReport(bytes: reportBytes), rawBytes: reportBytes, start: nil,
                         symbolizer: Symbolizer(), fallbackMillis: nowMillis()).json.bytes
    }
}
