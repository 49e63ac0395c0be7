import CairnBase
@testable import CairnCrash
import CairnProcessor
import CairnStore
import Foundation
import Testing

/// The `crash` and `session_end` events byte for byte (docs/FORMATS.md, "Crash and
/// session-end events"), from a report and a run record fixed here, so that any change
/// to their format is a deliberate one. The module's file does not exist, so the frames
/// say so instead of depending on this machine's files.
@Suite struct CrashEventGoldenTests {
    static let start: RunStart = {
        var s = RunStart(sessionID: "01a23801-aef7-725d-be3a-aa8a862a0f72", pid: 4242,
                         startedAtMillis: 1_796_236_564_000, release: "orders@1.4.2",
                         attributes: ["app_id": "orders", "distinct_id": "host-7", "release": "ignored"])
        s.context = CairnValue(json: Array(#"{"app":{"id":"orders","release":"orders@1.4.2"},"arch":"x86_64","cpu_count":2,"os":{"name":"Debian GNU/Linux","version":"12"}}"#.utf8))
        return s
    }()

    static let report: CrashReport = {
        var r = CrashReport(bytes: [])
        r.unreadable = nil
        r.complete = true
        r.signal = 11
        r.code = 1
        r.faultAddress = 8
        r.pid = 4242
        r.tid = 4242
        r.threadName = "orders"
        r.timeNanos = 1_796_236_564_153_000_000
        r.handlerNanos = 117_000
        r.frames = [0x55ce_c5e7_1466, 0x55ce_c5e7_2000]
        r.framesMethod = 1
        r.modules = [CrashModule(path: "/nonexistent/orders", loadAddress: 0x55ce_c5db_f000, start: 0x55ce_c5dc_0000,
                                 end: 0x55ce_c5f0_0000, buildID: [0x54, 0xcd, 0x58, 0x32])]
        r.context = Array(#"{"session_id":"01a23801-aef7-725d-be3a-aa8a862a0f72","breadcrumbs":[]}"#.utf8)
        return r
    }()

    static let crashGolden = #"{"event_id":"01a2380a-d6b9-758f-a116-3f050671c17f","type":"crash","name":"crash","time":"2026-12-02T18:36:04.153+00:00","zone_offset":0,"distinct_id":"host-7","account_id":"acct-9","session_id":"01a23801-aef7-725d-be3a-aa8a862a0f72","properties":{"code":"SEGV_MAPERR","code_number":1,"context":{"breadcrumbs":[],"session_id":"01a23801-aef7-725d-be3a-aa8a862a0f72"},"fault_address":"0x8","frames":[{"address":"0x55cec5e71466","index":0,"module":"/nonexistent/orders","note":"module file missing","offset":"0xb2466"},{"address":"0x55cec5e72000","index":1,"module":"/nonexistent/orders","note":"module file missing","offset":"0xb3000"}],"handler_ms":0.117,"headline":"SIGSEGV (SEGV_MAPERR): bad access at 0x8 in 0x55cec5e71466 (orders)","modules":[{"build_id":"54cd5832","load_address":"0x55cec5dbf000","path":"/nonexistent/orders"}],"partial":false,"pid":4242,"reason":"SIGSEGV (SEGV_MAPERR): bad access at 0x8","signal":"SIGSEGV","signal_number":11,"thread":{"id":4242,"main":true,"name":"orders"},"unwinder":"libunwind"},"context":{"app":{"id":"orders","release":"orders@1.4.2"},"arch":"x86_64","cpu_count":2,"os":{"name":"Debian GNU/Linux","version":"12"}},"sdk":{"name":"cairn-swift","version":"\#(cairnVersion)"}}"#

    static let sessionEndGolden = #"{"event_id":"01a2380a-d6b9-7c80-993b-58106946b530","type":"session","name":"session_end","time":"2026-12-02T18:36:04.153+00:00","zone_offset":0,"distinct_id":"host-7","account_id":"acct-9","session_id":"01a23801-aef7-725d-be3a-aa8a862a0f72","properties":{"crash_event_id":"01a2380a-d6b9-758f-a116-3f050671c17f","duration_ms":153,"ended_at":"2026-12-02T18:36:04.153+00:00","pid":4242,"reason":"crashed","started_at":"2026-12-02T18:36:04.000+00:00"},"context":{"app":{"id":"orders","release":"orders@1.4.2"},"arch":"x86_64","cpu_count":2,"os":{"name":"Debian GNU/Linux","version":"12"}},"sdk":{"name":"cairn-swift","version":"\#(cairnVersion)"}}"#

    /// The run record's start line (docs/FORMATS.md, "Run record") byte for byte, and
    /// read back with the other lines a run appends.
    @Test func runRecordLinesRoundTrip() {
        var start = Self.start
        start.context = nil
        let line = String(decoding: start.line, as: UTF8.self)
        #expect(line == #"{"format":1,"session_id":"01a23801-aef7-725d-be3a-aa8a862a0f72","pid":4242,"started_at_ms":1796236564000,"release":"orders@1.4.2","attributes":{"app_id":"orders","distinct_id":"host-7","release":"ignored"}}"#)
        let file = line + "\n" + #"{"oom":{"file":"/sys/fs/cgroup/memory.events","oom_kill":3}}"# + "\n"
            + #"{"context":{"arch":"x86_64","app":{"id":"orders","release":"orders@1.4.2"},"cpu_count":2,"os":{"name":"Debian GNU/Linux","version":"12"}}}"#
            + "\n" + #"{"end":"clean","ended_at_ms":1796236565000}"# + "\n"
        let record = RunRecord(bytes: Array(file.utf8))
        var expected = Self.start
        expected.oomFile = "/sys/fs/cgroup/memory.events"
        expected.oomKills = 3
        #expect(record.start == expected)
        #expect(record.cleanEndMillis == 1_796_236_565_000)
    }

    static let processor = Processor(clock: EventClock(fixedOffsetMinutes: 0))

    @Test func crashEvent() {
        let crash = CrashEvent.crash(report: Self.report, rawBytes: Array("fixed".utf8), start: Self.start,
                                     identity: RunIdentity(distinctID: "host-7", accountID: "acct-9"),
                                     symbolizer: Symbolizer(), fallbackMillis: 0).event
        var changed = RuleCounts()
        let text = String(decoding: Self.processor.record(endedRun: crash.event, context: crash.context, counts: &changed),
                          as: UTF8.self)
        #expect(text == Self.crashGolden)
        #expect(changed.isEmpty)
    }

    @Test func sessionEndEvent() {
        let ended = CrashEvent.sessionEnd(start: Self.start, identity: RunIdentity(distinctID: "host-7", accountID: "acct-9"),
                                          sessionID: Self.start.sessionID, reason: .crashed,
                                          endedAt: 1_796_236_564_153, crashEventID: "01a2380a-d6b9-758f-a116-3f050671c17f",
                                          detectedAt: 1_796_236_600_000)
        var changed = RuleCounts()
        let text = String(decoding: Self.processor.record(endedRun: ended.event, context: ended.context, counts: &changed),
                          as: UTF8.self)
        #expect(text == Self.sessionEndGolden)
    }
}
