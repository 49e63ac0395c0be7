// cairn-run-child: a Swift service that starts crash capture in <dir>, then ends the way
// its mode says, for the crash and session tests. Prints "SESSION <id>" first.
//
// Usage: cairn-run-child <dir> <mode> [<store dir>]
// CAIRN_TEST_MAX_PENDING_RUNS sets Options.maxPendingRuns. CAIRN_TEST_DEFER_SETUP=1 starts
// with Options.deferSetup and runs finishSetup on another thread, as Cairn.start does;
// CAIRN_TEST_DEFER_SETUP=never starts with it and never runs finishSetup (the run ends
// before its record is written).
// Modes:
//   clean   records a clean shutdown and exits 0
//   fatal   fatalError in OrderService.checkout (SIGILL on x86-64, SIGTRAP on arm64)
//   segv    writes through a bad pointer in OrderService.checkout
//   wait    prints READY and sleeps until killed (SIGKILL: an abnormal end)
//   oom     allocates and touches memory until the OOM killer ends it
//   next    the next start: processes previous runs into the snapshot store at
//           <store dir> through the uploader's durable path (nothing is sent), prints
//           one JSON line per previous run, then shuts down cleanly
//   next-fail  the same, but storing fails, so the previous runs must stay on disk
import CairnCrash
import CairnProcessor
import CairnStore
import CairnUploader
import Foundation

let args = CommandLine.arguments
guard args.count >= 3 else {
    FileHandle.standardError.write(Data("usage: cairn-run-child <dir> <mode> [<store dir>]\n".utf8))
    exit(2)
}
let dir = args[1], mode = args[2]

func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

let capture: CrashCapture
do {
    let environment = ProcessInfo.processInfo.environment
    let pending = environment["CAIRN_TEST_MAX_PENDING_RUNS"].flatMap { Int($0) } ?? 16
    capture = try CrashCapture.start(.init(directory: dir, release: "orders@1.4.2",
                                           attributes: ["distinct_id": "host-7", "app_id": "orders"],
                                           maxPendingRuns: pending,
                                           deferSetup: environment["CAIRN_TEST_DEFER_SETUP"] != nil))
} catch {
    FileHandle.standardError.write(Data("start: \(error)\n".utf8))
    exit(1)
}
let finishes = ProcessInfo.processInfo.environment["CAIRN_TEST_DEFER_SETUP"] != "never"
if capture.options.deferSetup && finishes && mode != "next" && mode != "next-fail" {
    let done = DispatchSemaphore(value: 0)
    Thread {
        capture.finishSetup()
        done.signal()
    }.start()
    done.wait()
}
// "distinct/account": who the run's events are about from here on.
if let identity = ProcessInfo.processInfo.environment["CAIRN_TEST_IDENTITY"]?.split(separator: "/").map(String.init),
   identity.count == 2 {
    capture.setIdentity(distinctID: identity[0], accountID: identity[1])
}
say("SESSION \(capture.sessionID)")
capture.addBreadcrumb("GET /orders/42", category: "http")
capture.addBreadcrumb("checkout started for order 42", category: "orders")

struct OrderService {
    var mode: String

    @inline(never) func checkout(order: Int) -> Int {
        if mode == "fatal" { fatalError("order \(order) has no line items") }
        let bad = UnsafeMutablePointer<Int>(bitPattern: order == 42 ? 8 : 16)
        bad?.pointee = order
        return order
    }
}

struct StoreRefused: Error {}

switch mode {
case "clean":
    do { try capture.endSession() } catch {
        FileHandle.standardError.write(Data("end: \(error)\n".utf8))
        exit(1)
    }
case "fatal", "segv":
    say("READY")
    print(OrderService(mode: mode).checkout(order: 42))
case "wait":
    say("READY")
    while true { sleep(60) }
case "oom":
    say("READY")
    var chunks: [UnsafeMutableRawPointer] = []
    while true {
        guard let p = malloc(16 << 20) else { continue }
        memset(p, 1, 16 << 20)
        chunks.append(p)
    }
case "next", "next-fail":
    guard args.count == 4 else { exit(2) }
    let uploader: Uploader
    do {
        let ring = try Ring(path: args[3] + "/events.ring")
        let store = try SnapshotStore(directory: args[3] + "/store")
        uploader = Uploader(ring: ring, store: store, transport: HTTPTransport(),
                            options: UploaderOptions(url: "http://127.0.0.1:9/v1/batch"))
    } catch {
        FileHandle.standardError.write(Data("store: \(error)\n".utf8))
        exit(1)
    }
    let encoder = try FrameEncoder()
    let processor = Processor()
    var changed = RuleCounts()
    let result = capture.processPreviousRuns { events in
        if mode == "next-fail" { throw StoreRefused() }
        let records = events.map { processor.record(endedRun: $0.event, context: $0.context, counts: &changed) }
        let body = try encoder.encode(batchID: UInt64.random(in: 1...UInt64.max), records: records)
        try uploader.sendPrebuilt(body: body, priority: .critical)
    }
    for run in result.runs {
        // Encoded again: the same bytes (fixed ids, sorted keys) as those stored.
        let records = run.events.map { processor.record(endedRun: $0.event, context: $0.context, counts: &changed) }
        let events = records.map { String(decoding: $0, as: UTF8.self) }.joined(separator: ",")
        say(#"{"session_id":"\#(run.sessionID ?? "")","reason":"\#(run.reason.rawValue)","stored":\#(run.stored),"events":[\#(events)]}"#)
    }
    say(#"{"dropped":\#(result.dropped),"live":\#(result.live)}"#)
    try capture.endSession()
default:
    exit(2)
}
