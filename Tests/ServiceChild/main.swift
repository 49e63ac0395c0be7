// cairn-service-child: a service using the public Cairn API, configured from CAIRN_*
// variables, for the end-to-end and cross-process tests.
//
// Usage: cairn-service-child <mode> [<n>]
//   run <n>       start, track n events named "child_event", flush, shut down
//   install       start, track "app_install" without a time, flush, shut down
//   sample <n>    print sampling decisions (0/1) for user-0 ... user-(n-1) at rate 0.3
//   start         print the milliseconds `Cairn.start` took on this thread, shut down
//   restart       three runs in this one process, each in its own data directory
//                 ($CAIRN_DATA_DIR/run-1, run-2, run-3): start, track n "run_event" {"run": k},
//                 print "session <k> <session id>"; runs 1 and 2 shut down (and run 2
//                 first tries a second start while it runs: prints "second start:
//                 <error>"); run 3 writes through a bad pointer
//   burst <n>     track n Debug-tier events, then n Important-tier ones, as fast as it
//                 can; print the drop counts as JSON; exit without flushing
//   crash         flush (the SDK is then ready), then write through a bad pointer
//   fatal         flush, then fatalError("no account for alice@example.com")
//   async         flush, then crash in a Task three async calls deep (Crashes.swift)
//   plugin <path> flush, then dlopen the library at path and crash in its
//                 plugin_handle(int) (Crashes.swift)
//   check <kind>  flush, then fail a runtime check in failCheck(_:) (Crashes.swift):
//                 unwrap, index, overflow, divide, precondition or fatal
//   overflow-task flush, then overflow the stack in a Task
//   overflow-thread  flush, then overflow the stack of a pthread_create thread
//                 (CAIRN_TEST_NO_ALT_STACKS=1 turns alternateStacksForNewThreads off)
//   critical <n>  flush (ready), track one Critical "payment_captured", then n rounds of
//                 500 Sampled "bulk" events of 2 KB of random hex each, flushing after
//                 each round; shut down
//   serve <n>     track n events, flush for CAIRN_TEST_FLUSH_MS (if set), track
//                 CAIRN_TEST_MORE more (if set; "i" counting on), print "ready", then wait
//                 to be stopped by a signal (SIGTERM with CAIRN_HANDLE_TERMINATION)
//   shutdown <n>  track n events, then print the milliseconds shutdown(timeout:
//                 CAIRN_SHUTDOWN_TIMEOUT_MS) took and what it returned
//   pages <n>     track n events, flush, print "EARLY <KiB>" (libzstd's resident code),
//                 "EARLY_OWN <KiB>" (the executable's, where Cairn's code is) and
//                 "EARLY_OWN_MAPPINGS <n>" (how many mappings that code has), wait
//                 CAIRN_TEST_PAUSE_MS (4000 if unset), print "LATE <KiB>" and "LATE_OWN
//                 <KiB>": the resident KiB of each code mapping each time (-1 when it is
//                 not mapped); then "SPLIT_OWN_MAPPINGS <n>", the mappings of the
//                 executable's code once they are 16 more than after the flush, or after
//                 10 s
//   flood <n>     n threads each track "flood" events {"t": thread, "i": 0, 1, 2, ...} as
//                 fast as they can until the process is killed; after each call returns,
//                 thread t stores i + 1 in its slot of CAIRN_TEST_ACK_FILE (below)
// CAIRN_TEST_PAD=<n> adds n random hex digits to each event of run.
// CAIRN_TEST_EVENT_NAME names the events of run, serve and shutdown (default
// "child_event"); CAIRN_TEST_STDOUT=1 adds the stdout destination (one JSON line per event);
// CAIRN_TEST_PAUSE_MS waits that long before shutting down; CAIRN_TEST_SAFE_START=1
// starts with Cairn.startOrDisabled (a start error leaves a disabled SDK);
// CAIRN_TEST_IGNORE_SIGTERM=1 ignores SIGTERM before starting; CAIRN_TEST_UMASK=<octal>
// sets the umask first.
// trace-parent calls trace-callee (a second process) inside a server span, with the
// trace headers (see below). CAIRN_TEST_OTLP_IN_CODE sets options.otlp (see below). CAIRN_TEST_STORE_BYTES sets the snapshot store's size cap. CAIRN_TEST_DENY=a,b denies
// those event names (the filter's deny list). CAIRN_TEST_RECORDER=1 adds a
// RecordingDestination, whose events are printed after the final shutdown, one line
// each: "recorded <type> <name>". CAIRN_TEST_BREADCRUMB is
// left as a breadcrumb before crash crashes.
//
// The ack file of flood (created or truncated by the child, mapped MAP_SHARED, so that
// every store is in the page cache at once and survives kill -9): bytes 0..<64 are the
// run's session id in ASCII, padded with zeros, written before any thread starts; then
// one little-endian UInt64 per thread at 64 + 8 × t, the number of track calls thread t
// has seen return.
import Cairn
import CairnProcessor
import CairnTestKit
import Foundation

// A service starts with no signal blocked (systemd, a shell, Kubernetes); a child of the
// test process would inherit the mask of the thread that spawned it.
var noSignals = sigset_t()
sigemptyset(&noSignals)
sigprocmask(SIG_SETMASK, &noSignals, nil)

let args = CommandLine.arguments
guard args.count >= 2 else { exit(2) }
let mode = args[1]
let n = args.count > 2 ? Int(args[2]) ?? 0 : 0

if mode == "sample" {
    let sampler = Sampler(options: SamplingOptions(rate: 0.3))
    let bits = (0..<n).map { i in
        sampler.keep(distinctID: "user-\(i)", eventName: "page_view", tier: .sampled, isError: false, day: 20_000)
            ? "1" : "0"
    }
    print(bits.joined())
    exit(0)
}

if mode == "restart" {
    var options = Cairn.Options.fromEnvironment()
    options.destinations = [StdoutDestination()]
    let base = options.dataDirectory
    for run in 1...3 {
        options.dataDirectory = base + "/run-\(run)"
        let cairn: Cairn
        do {
            cairn = try Cairn.start(options)
        } catch {
            print("run \(run): start: \(error)")
            exit(1)
        }
        print("session \(run) \(cairn.sessionID)")
        for i in 0..<n { cairn.track("run_event", properties: ["run": .int(Int64(run)), "i": .int(Int64(i))]) }
        if run == 2 {
            do {
                _ = try Cairn.start(options)
                print("second start: started")
            } catch {
                print("second start: \(error)")
            }
        }
        if run == 3 {
            _ = cairn.flush(timeout: .seconds(10))
            fflush(nil)  // every stream: what print wrote is out before the crash
            let bad = UnsafeMutablePointer<Int>(bitPattern: 8)
            bad?.pointee = run
            exit(4)
        }
        guard cairn.shutdown(timeout: .seconds(10)) else { exit(3) }
    }
    exit(0)
}

var options = Cairn.Options.fromEnvironment()
if ProcessInfo.processInfo.environment["CAIRN_TEST_NO_ALT_STACKS"] == "1" { options.alternateStacksForNewThreads = false }
if ProcessInfo.processInfo.environment["CAIRN_TEST_STDOUT"] == "1" { options.destinations = [StdoutDestination()] }
let env = ProcessInfo.processInfo.environment
if let mask = env["CAIRN_TEST_UMASK"].flatMap({ mode_t($0, radix: 8) }) { umask(mask) }
if env["CAIRN_TEST_IGNORE_SIGTERM"] == "1" { signal(SIGTERM, SIG_IGN) }  // as nohup'd jobs are
if let bytes = env["CAIRN_TEST_STORE_BYTES"].flatMap({ Int($0) }) { options.storeMaxBytes = bytes }
let recorder = RecordingDestination()
if env["CAIRN_TEST_RECORDER"] == "1" { options.destinations.append(recorder) }
// CAIRN_TEST_OTLP_IN_CODE=<endpoint>: the OTLP destination set in code (JSON, zstd, a
// header and a resource attribute), not by the OpenTelemetry variables.
if let endpoint = env["CAIRN_TEST_OTLP_IN_CODE"] {
    options.otlp = OTLPOptions(endpoint: endpoint, headers: ["x-tenant": "payments"], compression: .zstd,
                               encoding: .json, serviceName: "orders-in-code", resourceAttributes: ["team": "core"])
}
if let deny = env["CAIRN_TEST_DENY"] { options.filter.denyNames = deny.split(separator: ",").map(String.init) }
let cairn: Cairn
let startedAt = DispatchTime.now().uptimeNanoseconds
if env["CAIRN_TEST_SAFE_START"] == "1" {
    cairn = Cairn.startOrDisabled(options)
} else {
    do {
        cairn = try Cairn.start(options)
    } catch {
        FileHandle.standardError.write(Data("start: \(error)\n".utf8))
        exit(1)
    }
}
let eventName = env["CAIRN_TEST_EVENT_NAME"] ?? "child_event"
func say(_ line: String) { FileHandle.standardOutput.write(Data((line + "\n").utf8)) }
switch mode {
case "run":
    // CAIRN_TEST_PAD=<n>: each event also carries n random hex digits (hardly compressible).
    let pad = env["CAIRN_TEST_PAD"].flatMap { Int($0) } ?? 0
    for i in 0..<n {
        var properties: [String: CairnValue] = ["i": .int(Int64(i))]
        if pad > 0 { properties["pad"] = .string(String((0..<pad).map { _ in "0123456789abcdef".randomElement()! })) }
        cairn.track(eventName, properties: properties)
    }
case "trace-parent":
    // A service serving a request that came with CAIRN_TEST_TRACEPARENT/TRACESTATE,
    // which calls another service (this program as "trace-callee", with its own data
    // directory and service name) with the headers withOutbound gives.
    let incoming = [("traceparent", env["CAIRN_TEST_TRACEPARENT"] ?? ""), ("tracestate", env["CAIRN_TEST_TRACESTATE"] ?? "")]
    cairn.withIncomingRequest(method: "GET", route: "/checkout/:id", headers: incoming.filter { !$0.1.isEmpty }) {
        cairn.track("checkout_started")
        let status = cairn.withOutbound(method: "POST", url: "http://payments.internal/pay") { headers in
            let callee = Process()
            callee.executableURL = URL(fileURLWithPath: "/proc/self/exe")
            callee.arguments = ["trace-callee"]
            var calleeEnv = env
            calleeEnv["CAIRN_DATA_DIR"] = (env["CAIRN_DATA_DIR"] ?? ".cairn") + "/callee"
            calleeEnv["OTEL_SERVICE_NAME"] = "payments"
            calleeEnv["CAIRN_APP_ID"] = "payments"
            calleeEnv["CAIRN_TEST_HEADERS"] = headers.map { "\($0.name)=\($0.value)" }.joined(separator: "\n")
            callee.environment = calleeEnv
            do {
                try callee.run()
                callee.waitUntilExit()
            } catch {
                return (0, status: nil)
            }
            let answered = callee.terminationStatus == 0 ? 201 : 502
            return (answered, status: answered)
        }
        say("callee \(status)")
        return ((), status: 200)
    }
case "trace-callee":
    // The called service: serves POST /pay with the headers the caller sent.
    let headers = (env["CAIRN_TEST_HEADERS"] ?? "").split(separator: "\n").compactMap { line -> (name: String, value: String)? in
        let parts = line.split(separator: "=", maxSplits: 1)
        return parts.count == 2 ? (String(parts[0]), String(parts[1])) : nil
    }
    cairn.withIncomingRequest(method: "POST", route: "/pay", headers: headers) {
        cairn.track("payment_taken")
        return ((), status: 201)
    }
case "install":
    cairn.track("app_install")
case "crash":
    if let crumb = env["CAIRN_TEST_BREADCRUMB"] { cairn.breadcrumb(crumb, category: "auth") }
    _ = cairn.flush(timeout: .seconds(10))
    let bad = UnsafeMutablePointer<Int>(bitPattern: n == 0 ? 8 : 16)
    bad?.pointee = n
    exit(4)
case "async":
    _ = cairn.flush(timeout: .seconds(10))
    let finished = DispatchSemaphore(value: 0)
    Task.detached {
        _ = await asyncLevel1(n)
        finished.signal()
    }
    finished.wait()
    exit(4)
case "plugin":
    _ = cairn.flush(timeout: .seconds(10))
    _ = runPlugin(at: args.count > 2 ? args[2] : "", value: 7)
    exit(4)
case "check":
    _ = cairn.flush(timeout: .seconds(10))
    print(failCheck(args.count > 2 ? args[2] : ""))
    exit(4)
case "overflow-task":
    _ = cairn.flush(timeout: .seconds(10))
    let finished = DispatchSemaphore(value: 0)
    Task.detached {
        _ = recurse(0)
        finished.signal()
    }
    finished.wait()
    exit(4)
case "overflow-thread":
    _ = cairn.flush(timeout: .seconds(10))
    overflowOnAThread()
    exit(4)
case "fatal":
    _ = cairn.flush(timeout: .seconds(10))
    fatalError("no account for alice@example.com")
case "critical":
    struct Payment: CairnEvent {
        var name: String { "payment_captured" }
        var tier: Tier { .critical }
        var properties: [String: CairnValue] { ["amount": 4200, "currency": "EUR"] }
    }
    _ = cairn.flush(timeout: .seconds(10))
    cairn.track(Payment())
    var generator = SystemRandomNumberGenerator()
    for round in 0..<n {
        for i in 0..<500 {
            let padding = (0..<128).map { _ in String(generator.next() as UInt64, radix: 16) }.joined()
            cairn.track("bulk", properties: ["round": .int(Int64(round)), "i": .int(Int64(i)), "padding": .string(padding)])
        }
        _ = cairn.flush(timeout: .seconds(10))
    }
case "burst":
    struct Tiered: CairnEvent {
        var name: String
        var tier: Tier
        var properties: [String: CairnValue] { ["padding": .string(String(repeating: "x", count: 400))] }
    }
    for _ in 0..<n { cairn.track(Tiered(name: "debug_detail", tier: .debug)) }
    for _ in 0..<n { cairn.track(Tiered(name: "important_fact", tier: .important)) }
    let drops = cairn.dropCounts.map { ($0.key, $0.value) }.sorted { $0.0 < $1.0 }.map { "\"\($0.0)\":\($0.1)" }
    print("{" + drops.joined(separator: ",") + "}")
    exit(0)
case "serve":
    for i in 0..<n { cairn.track(eventName, properties: ["i": .int(Int64(i))]) }
    if let ms = env["CAIRN_TEST_FLUSH_MS"].flatMap({ Int($0) }) { _ = cairn.flush(timeout: .milliseconds(ms)) }
    let more = env["CAIRN_TEST_MORE"].flatMap { Int($0) } ?? 0
    for i in n..<n + more { cairn.track(eventName, properties: ["i": .int(Int64(i))]) }
    // Ready once the background start has written this run's record: a process killed
    // before then leaves no run to report (its events still wait in the ring).
    let record = options.dataDirectory + "/crash/run-\(cairn.sessionID).json"
    for _ in 0..<1000 where !FileManager.default.fileExists(atPath: record) { usleep(5_000) }
    say("ready")
    // CAIRN_TEST_BLOCK: the main thread blocks in sleep(3), read(2) on a pipe nobody
    // writes, or a condition wait, as a service's main thread does; "returned" if it
    // ever comes back. A SIGTERM sent to the process may be taken by any thread that
    // does not block it; with CAIRN_TEST_BLOCK, a thread of this program sends it to the
    // main thread itself 200 ms after "ready" (as the kernel may choose to).
    if env["CAIRN_TEST_BLOCK"] != nil {
        let main = pthread_self()
        var sender = pthread_t()
        pthread_create(&sender, nil, { arg in
            usleep(200_000)
            pthread_kill(pthread_t(bitPattern: Int(bitPattern: arg)), SIGTERM)
            return nil
        }, UnsafeMutableRawPointer(bitPattern: Int(bitPattern: main)))
    }
    switch env["CAIRN_TEST_BLOCK"] {
    case "sleep":
        sleep(120)
    case "read":
        var fds: [Int32] = [0, 0]
        if pipe(&fds) == 0 {
            var byte: UInt8 = 0
            _ = read(fds[0], &byte, 1)
        }
    case "cond":
        var mutex = pthread_mutex_t()
        var cond = pthread_cond_t()
        pthread_mutex_init(&mutex, nil)
        pthread_cond_init(&cond, nil)
        pthread_mutex_lock(&mutex)
        pthread_cond_wait(&cond, &mutex)
        pthread_mutex_unlock(&mutex)
    default:
        while true { pause() }
    }
    say("returned")
    exit(0)
case "shutdown":
    for i in 0..<n { cairn.track(eventName, properties: ["i": .int(Int64(i))]) }
    let began = DispatchTime.now().uptimeNanoseconds
    let flushed = cairn.shutdown(timeout: options.shutdownTimeout)
    say(String(format: "%.0f %@", Double(DispatchTime.now().uptimeNanoseconds - began) / 1e6, flushed ? "true" : "false"))
    exit(0)
case "flood":
    guard n > 0, let path = env["CAIRN_TEST_ACK_FILE"] else { exit(2) }
    let size = 64 + 8 * n
    let fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0o600)
    guard fd >= 0, ftruncate(fd, off_t(size)) == 0,
          let map = mmap(nil, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0), map != MAP_FAILED else {
        FileHandle.standardError.write(Data("flood: cannot map \(path): errno \(errno)\n".utf8))
        exit(1)
    }
    let session = Array(cairn.sessionID.utf8.prefix(63))
    map.copyMemory(from: session, byteCount: session.count)
    let slots = (map + 64).bindMemory(to: UInt64.self, capacity: n)
    for t in 0..<n {
        nonisolated(unsafe) let slot = slots + t  // thread t alone writes it
        Thread {
            var i: Int64 = 0
            while true {
                cairn.track("flood", properties: ["t": .int(Int64(t)), "i": .int(i)])
                i += 1
                slot.pointee = UInt64(i).littleEndian
            }
        }.start()
    }
    while true { pause() }
case "start":
    print(String(format: "%.3f", Double(DispatchTime.now().uptimeNanoseconds - startedAt) / 1e6))
case "pages":
    /// Resident KiB of the executable mappings of the file whose name starts with
    /// `prefix` (-1 when it has none), and how many there are.
    func residentCode(_ prefix: String) -> (kb: Int, mappings: Int) {
        guard let file = FileHandle(forReadingAtPath: "/proc/self/smaps"), let data = try? file.readToEnd() else {
            return (-1, 0)
        }
        var inCode = false, total = -1, mappings = 0
        for line in String(decoding: data, as: UTF8.self).split(separator: "\n") {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            if fields.count >= 6 && fields[0].contains("-") && fields[1].count == 4 {
                inCode = fields[1] == "r-xp" && (fields.last?.split(separator: "/").last?.hasPrefix(prefix) ?? false)
                if inCode { mappings += 1 }
            } else if inCode && line.hasPrefix("Rss:"), fields.count >= 2, let kb = Int(fields[1]) {
                total = max(total, 0) + kb
            }
        }
        return (total, mappings)
    }
    for i in 0..<n { cairn.track(eventName, properties: ["i": .int(Int64(i))]) }
    _ = cairn.flush(timeout: .seconds(10))
    say("EARLY \(residentCode("libzstd").kb)")
    let early = residentCode("cairn-service-child")
    say("EARLY_OWN \(early.kb)")
    say("EARLY_OWN_MAPPINGS \(early.mappings)")
    usleep((env["CAIRN_TEST_PAUSE_MS"].flatMap { UInt32($0) } ?? 4000) * 1000)
    say("LATE \(residentCode("libzstd").kb)")
    let late = residentCode("cairn-service-child")
    say("LATE_OWN \(late.kb)")
    // Then, for up to 10 s, until that code has 16 mappings more than after the flush.
    var split = late.mappings
    for _ in 0..<100 where split < early.mappings + 16 {
        usleep(100_000)
        split = residentCode("cairn-service-child").mappings
    }
    say("SPLIT_OWN_MAPPINGS \(split)")
    _ = cairn.shutdown(timeout: .seconds(10))
    exit(0)
default:
    exit(2)
}
if let ms = env["CAIRN_TEST_PAUSE_MS"].flatMap({ UInt32($0) }) {
    usleep(ms * 1000)  // idle before shutting down (periodic sdk_health)
}
let ok = cairn.shutdown(timeout: .seconds(20))
if env["CAIRN_TEST_PRINT_DROPS"] == "1" {
    for (reason, n) in cairn.dropCounts.sorted(by: { $0.key < $1.key }) where n > 0 { print("dropped \(reason) \(n)") }
}
for event in recorder.events {
    print("recorded \(event.object?["type"] as? String ?? "?") \(event.name ?? "?")")
}
exit(ok ? 0 : 3)
