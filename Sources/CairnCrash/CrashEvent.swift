package import CairnProcessor
import CairnBase
import CairnStore
import FoundationEssentials
import Glibc

/// One event of an ended run, built by ``CrashCapture/processPreviousRuns(mask:store:)``
/// for the processor to encode (`Processor.record(endedRun:context:counts:)`): a `crash`
/// or `session_end` with the ended run's identity, session and time, and the ended
/// run's own common properties as its context.
package struct EndedRunEvent: Sendable {
    /// The event: type `.crash` or `.session`, tier Critical, its id set (derived from
    /// the run and the report, so rebuilding it gives the same `event_id`). Its
    /// `distinct_id` is empty when the ended run left none (an orphan report of a C
    /// program): the SDK then gives it its own default identity.
    package var event: Event
    /// The ended run's common properties (the `context` its own events carried), or,
    /// when it ended before recording them, what its start line says (`app`: id,
    /// release, environment); nil when nothing is known.
    package var context: CairnValue?
}

/// Builds the `crash` and `session_end` events of a previous run (docs/FORMATS.md,
/// "Crash and session-end events"). Event ids are derived from the run and the report,
/// so an event stored twice (a crash between storing it and deleting the report) has
/// the same `event_id` both times and the collector keeps one.
package enum CrashEvent {
    /// A stable event id: time-ordered (UUIDv7) with its random bits from `key`.
    static func stableID(millis: UInt64, key: [UInt8]) -> (UInt64, UInt64) {
        EventIDGenerator.id(millis: millis, random: (FNV1a.hash(key), FNV1a.hash(key, seed: 0x9e37_79b9_7f4a_7c15)))
    }

    /// The ended run's event: its identity (the last the run recorded, else its start's
    /// `distinct_id` attribute), session and context.
    static func event(type: EventType, name: String, id: (UInt64, UInt64), millis: UInt64, start: RunStart?,
                      identity: RunIdentity?, sessionID: String?, properties: [String: CairnValue]) -> EndedRunEvent {
        let distinctID = identity?.distinctID ?? start?.attributes["distinct_id"] ?? ""
        var event = Event(type: type, name: name, properties: properties, timeMillis: millis,
                          identity: Identity(distinctID: distinctID, accountID: identity?.accountID),
                          sessionID: sessionID, tier: .critical)
        event.id = id
        return EndedRunEvent(event: event, context: start.flatMap(context))
    }

    /// The ended run's recorded context, else the `app` group its start line allows.
    static func context(_ start: RunStart) -> CairnValue? {
        if let context = start.context { return context }
        var app: [String: CairnValue] = [:]
        if let id = start.attributes["app_id"] { app["id"] = .string(id) }
        if let release = start.release { app["release"] = .string(release) }
        if let environment = start.attributes["environment"] { app["environment"] = .string(environment) }
        return app.isEmpty ? nil : .object(["app": .object(app)])
    }

    /// The `crash` event for `report` (already read), with its frames symbolicated.
    static func crash(report raw: CrashReport, rawBytes: [UInt8], start: RunStart?, identity: RunIdentity?,
                      symbolizer: Symbolizer, fallbackMillis: UInt64) -> (event: EndedRunEvent, frames: [SymbolizedFrame]) {
        // Each machine frame with the functions inlined at its address; `machine` keeps
        // which machine frame each belongs to.
        var frames: [SymbolizedFrame] = []
        var machine: [Int] = []
        let chains = Dictionary(raw.asyncChains.map { ($0.frame, $0.resumes) }) { first, _ in first }
        var followedChain = false
        for (i, address) in raw.frames.enumerated() {
            let expanded = symbolizer.symbolizeInlined(address: address, index: i, modules: raw.modules)
            frames += expanded
            machine += Array(repeating: i, count: expanded.count)
            // The innermost async function's callers: where each resumes, looked up as
            // is (a resume address is a function's entry, not a return address).
            guard !followedChain, let resumes = chains[i], let symbol = expanded.last?.symbol,
                  Symbolizer.isAsyncFunction(symbol) else { continue }
            followedChain = true
            for resume in resumes {
                let callers = symbolizer.symbolizeInlined(address: resume, index: 0, modules: raw.modules).map {
                    var f = $0
                    f.isAsync = true
                    return f
                }
                frames += callers
                machine += Array(repeating: i, count: callers.count)
            }
        }
        let report = withRuntimeFailure(raw, frames: frames)
        let millis = report.timeNanos > 0 ? report.timeNanos / 1_000_000 : fallbackMillis
        let blob = CairnValue(json: report.context)
        let sessionID = start?.sessionID ?? blob?["session_id"]?.text
        let id = stableID(millis: millis, key: Array("crash:\(sessionID ?? "")".utf8) + rawBytes.prefix(4096))
        var p: [String: CairnValue] = [:]
        p["reason"] = .string(reason(report))
        if report.unreadable == nil {
            p["signal"] = .string(SignalNames.name(report.signal))
            p["signal_number"] = .int(Int64(report.signal))
            if let code = SignalNames.code(report.signal, report.code) { p["code"] = .string(code) }
            p["code_number"] = .int(Int64(report.code))
            p["fault_address"] = .string(Hex.address(report.faultAddress))
        }
        if let message = report.message { p["message"] = .string(message) }
        p["partial"] = .bool(!report.complete || report.unreadable != nil)
        if let why = report.unreadable { p["unreadable"] = .string(why) }
        if report.nestedFaults > 0 { p["nested_faults"] = .int(Int64(report.nestedFaults)) }
        if report.endedByDeadlineSeconds > 0 { p["ended_by_deadline_s"] = .int(Int64(report.endedByDeadlineSeconds)) }
        if report.handlerNanos > 0 { p["handler_ms"] = .double(Double(report.handlerNanos) / 1e6) }
        if report.pid != 0 { p["pid"] = .int(Int64(report.pid)) }
        if report.tid != 0 {
            p["thread"] = ["id": .int(Int64(report.tid)), "name": .string(report.threadName),
                           "main": .bool(report.tid == report.pid)]
        }
        if !report.frames.isEmpty {
            switch report.framesMethod {
            case 2: p["unwinder"] = "frame_pointers"
            case 3: p["unwinder"] = "libunwind+frame_pointers"
            default: p["unwinder"] = "libunwind"
            }
            p["frames"] = .array(zip(frames, machine).map { frame($0, index: $1) })
        }
        p["headline"] = .string(CrashReport.headline(report: report, frames: frames))
        if !report.modules.isEmpty {
            p["modules"] = .array(report.modules.map { m in
                ["path": .string(m.path), "load_address": .string(Hex.address(m.loadAddress)),
                 "build_id": .string(Hex.string(m.buildID))]
            })
        }
        let names = SignalNames.registers(arch: report.arch)
        if !report.registers.isEmpty && report.registers.count == names.count {
            p["registers"] = .object(Dictionary(zip(names, report.registers.map { .string(Hex.address($0)) })) { a, _ in a })
        }
        if !report.context.isEmpty {
            p["context"] = blob ?? .string(String(decoding: report.context, as: UTF8.self))
        }
        // The identity the run had when it crashed: the context blob's, else its record's.
        let crashedAs = RunIdentity(blob?["identity"]) ?? identity
        return (event(type: .crash, name: "crash", id: id, millis: millis, start: start, identity: crashedAs,
                      sessionID: sessionID, properties: p), frames)
    }

    /// The `session_end` event of a previous run.
    static func sessionEnd(start: RunStart?, identity: RunIdentity?, sessionID: String, reason: SessionEndReason,
                           endedAt: UInt64?, crashEventID: String?, detectedAt: UInt64) -> EndedRunEvent {
        let millis = endedAt ?? start?.startedAtMillis ?? detectedAt
        let id = stableID(millis: millis, key: Array("session_end:\(sessionID)".utf8))
        var p: [String: CairnValue] = ["reason": .string(reason.rawValue)]
        if let s = start {
            p["started_at"] = .string(rfc3339(millis: s.startedAtMillis).text)
            p["pid"] = .int(Int64(s.pid))
        }
        if let endedAt {
            p["ended_at"] = .string(rfc3339(millis: endedAt).text)
            if let s = start, endedAt >= s.startedAtMillis {
                p["duration_ms"] = .int(Int64(clamping: endedAt - s.startedAtMillis))
            }
        }
        if let crashEventID { p["crash_event_id"] = .string(crashEventID) }
        return event(type: .session, name: "session_end", id: id, millis: millis, start: start, identity: identity,
                     sessionID: sessionID, properties: p)
    }

    /// One line an operator reads first: the runtime's message, or the signal explained.
    package static func reason(_ r: CrashReport) -> String {
        if let why = r.unreadable { return "unreadable crash report: \(why)" }
        if let message = r.message?.trimmingWhiteSpace, !message.isEmpty {
            return message
        }
        if r.signal == 0 { return "crash report cut short before its signal section" }
        let name = SignalNames.name(r.signal)
        let code = SignalNames.code(r.signal, r.code)
        if r.code <= 0 { return "\(name) sent by \(r.code == -6 || r.code == -1 ? "the process itself" : "another process")" + (code.map { " (\($0))" } ?? "") }
        switch r.signal {
        case SIGSEGV where isStackOverflow(r):
            return "\(name) (\(code ?? String(r.code))): stack overflow, bad access at \(Hex.address(r.faultAddress))"
        case SIGSEGV, SIGBUS: return "\(name) (\(code ?? String(r.code))): bad access at \(Hex.address(r.faultAddress))"
        default: return "\(name) (\(code ?? String(r.code))) at \(Hex.address(r.faultAddress))"
        }
    }

    /// A fault just below the crashed thread's stack pointer (within 64 KiB under it, or
    /// at most a page above): the thread ran into the guard page under its stack.
    static func isStackOverflow(_ r: CrashReport) -> Bool {
        let names = SignalNames.registers(arch: r.arch)
        guard r.faultAddress != 0, r.registers.count == names.count,
              let at = names.firstIndex(of: r.arch == 1 ? "rsp" : "sp") else { return false }
        let sp = r.registers[at]
        return sp >= 64 * 1024 && r.faultAddress >= sp - 64 * 1024 && r.faultAddress <= sp &+ 4096
    }

    /// `report` with the message of a runtime check that trapped without one (release
    /// builds): the name of the inlined `Swift runtime failure: …` frame at the crash.
    static func withRuntimeFailure(_ report: CrashReport, frames: [SymbolizedFrame]) -> CrashReport {
        guard report.message == nil, let first = report.frames.first else { return report }
        var report = report
        report.message = frames.prefix { $0.address == first }
            .first { $0.inlined && $0.symbol?.hasPrefix("Swift runtime failure: ") == true }?.symbol
        return report
    }

    static func frame(_ f: SymbolizedFrame, index: Int) -> CairnValue {
        var m: [String: CairnValue] = ["index": .int(Int64(index)), "address": .string(Hex.address(f.address))]
        if let module = f.module { m["module"] = .string(module) }
        if let offset = f.moduleOffset { m["offset"] = .string(Hex.address(offset)) }
        if let symbol = f.symbol {
            m["symbol"] = .string(symbol)
            m["function"] = .string(Symbolizer.shortName(symbol))
        }
        if let mangled = f.mangledSymbol { m["mangled"] = .string(mangled) }
        if let offset = f.symbolOffset { m["symbol_offset"] = .int(Int64(clamping: offset)) }
        if let file = f.file { m["file"] = .string(file) }
        if let line = f.line { m["line"] = .int(Int64(line)) }
        if let column = f.column, column > 0 { m["column"] = .int(Int64(column)) }
        if let note = f.note { m["note"] = .string(note) }
        if f.inlined { m["inlined"] = .bool(true) }
        if f.isAsync { m["async"] = .bool(true) }
        return .object(m)
    }
}

extension CrashReport {
    /// The `crash` event (docs/FORMATS.md, "Crash and session-end events") of a raw
    /// crash report, symbolicated from the files on this machine, for the processor to
    /// encode: for tools such as `cairn report`. A report that cannot be read gives an
    /// event marked partial.
    package static func event(reportBytes: [UInt8]) -> EndedRunEvent {
        let report = CrashReport(bytes: reportBytes)
        return CrashEvent.crash(report: report, rawBytes: reportBytes, start: RunStart(context: report),
                                identity: nil, symbolizer: Symbolizer(), fallbackMillis: nowMillis()).event
    }
}

/// Formats times in the host's zone, as every other event does.
private let eventClock = EventClock()

/// The time `millis` (Unix ms) as RFC 3339 with milliseconds and the local offset.
func rfc3339(millis: UInt64) -> (text: String, offsetMinutes: Int) {
    (eventClock.text(millis), eventClock.offsetMinutes(at: millis))
}

/// Unix time in milliseconds.
func nowMillis() -> UInt64 { EventClock.nowMillis() }

/// A UUIDv7 (RFC 9562) as lowercase text.
func uuidV7(millis: UInt64) -> String {
    EventIDGenerator.text(EventIDGenerator().next(millis: millis))
}
