// cairn-ecosystem-child: a service that uses Cairn through the Swift server ecosystem's
// own APIs (swift-log's `Logger`), with only the public API (`import Cairn` and the
// integration products), configured from CAIRN_* and OTEL_* variables.
//
// Usage: cairn-ecosystem-child <mode>
//   log        bootstrap swift-log with CairnLogHandler.bootstrap (console on stderr), make
//              the logger "orders" before Cairn starts, start, then log: trace and debug
//              (filtered out), info with metadata, notice, warning, error, critical,
//              info with handler metadata, info inside the span "checkout" (then print
//              "span <trace id> <span id>" on stdout), and 4 threads × 50 records
//              "threaded" {t, i} on the logger "worker"; flush, shut down
//   log-crash  start, log an error naming an e-mail address, flush, then crash
//              (a write through a bad pointer)
//   idle       start, flush, shut down
//   metrics    start, bootstrap swift-metrics with CairnMetricsFactory (interval
//              CAIRN_TEST_METRICS_INTERVAL_MS, default 200; at most CAIRN_TEST_MAX_SERIES
//              series, default 20), then: Counter "orders_placed" {plan: pro, region: eu}
//              +3 and +4 (the dimensions given in two orders), FloatingPointCounter
//              "revenue" +12.5 twice, Meter "queue_depth" set 7 then +2, Recorder
//              "payload_bytes" 3, 7, 300, 20000, Recorder "temperature" (not aggregated)
//              21.5, Timer "db_query" {table: orders} 2 ms and 30 ms, Counter
//              "signups" {email: alice@example.com} +1, Counter "short_lived" +5, 30
//              Counters "per_user" {user: 0 ... 29} +1 each; after 3 intervals, destroy
//              "short_lived"; after 3 more, shut down
//   lifecycle  start, then run a ServiceGroup (graceful shutdown on SIGTERM) of
//              CairnService and a worker that tracks "work" {i} every 10 ms (printing
//              "ready" after the first) until the group shuts it down, then tracks
//              "worker_stopped" {count}; print "group ended", exit 0 (without calling
//              shutdown: the service does)
//   lifecycle-cancel  the same, but the worker fails after 20 events (the group then
//              cancels CairnService); print "group failed <ms>", the milliseconds from
//              the failure to the group's end
#if Logging && Metrics && ServiceLifecycle
import Cairn
import CairnLogging
import CairnMetrics
import CairnServiceLifecycle
import Glibc
import Logging
import Metrics
import ServiceLifecycle
import Dispatch
import Synchronization

func fail(_ text: String, _ status: Int32) -> Never {
    let line = text + "\n"
    _ = line.withCString { write(2, $0, strlen($0)) }
    exit(status)
}

/// Thread `arg` (an Int) logs 50 records "threaded" {t, i} on the logger "worker".
func worker(_ arg: UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? {
    let t = arg?.assumingMemoryBound(to: Int.self).pointee ?? -1
    let worker = Logger(label: "worker")
    for i in 0..<50 { worker.info("threaded", metadata: ["t": "\(t)", "i": "\(i)"]) }
    return nil
}

/// Tracks "work" every 10 ms until the group shuts it down gracefully (or fails after
/// `failAfter` events), then "worker_stopped".
struct Worker: Service {
    let cairn: Cairn
    let failAfter: Int?
    struct Failed: Error {}

    func run() async throws {
        var i = 0
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            cairn.track("work", properties: ["i": .int(Int64(i))])
            if i == 0 {
                print("ready")
                fflush(nil)
            }
            i += 1
            if let failAfter, i >= failAfter {
                Worker.failedAt.store(DispatchTime.now().uptimeNanoseconds, ordering: .relaxed)
                throw Failed()
            }
            try? await Task.sleep(for: .milliseconds(10))
        }
        cairn.track("worker_stopped", properties: ["count": .int(Int64(i))])
    }

    static let failedAt = Atomic<UInt64>(0)
}

let mode = CommandLine.arguments.dropFirst().first ?? ""
if mode == "log" { CairnLogHandler.bootstrap(logLevel: .info, console: .standardError) }
let logger = Logger(label: "orders")
let cairn = Cairn.startOrDisabled(.fromEnvironment())
guard cairn.isEnabled else {
    fail("start failed: \(cairn.startError.map { "\($0)" } ?? "?")", 4)
}

switch mode {
case "log":
    logger.trace("not logged: trace")
    logger.debug("not logged: debug")
    logger.info("order placed", metadata: ["order_id": "42", "customer": "alice@example.com", "password": "hunter2",
                                            "items": ["a", "b"], "shipping": ["city": "Lyon"], "attempt": "\(3)"])
    logger.notice("stock low")
    logger.warning("slow payment provider")
    logger.error("payment failed")
    logger.critical("ledger unavailable")
    var tagged = logger
    tagged[metadataKey: "request"] = "r-1"
    tagged.info("with handler metadata", metadata: ["request": "r-2", "extra": "yes"])
    cairn.withSpan("checkout") {
        logger.info("in span")
        if let span = Cairn.currentSpan { print("span \(span.traceID) \(span.spanID)") }
    }
    var threads: [pthread_t] = []
    for t in 0..<4 {
        var thread = pthread_t()
        let box = UnsafeMutablePointer<Int>.allocate(capacity: 1)
        box.pointee = t
        pthread_create(&thread, nil, worker, box)
        threads.append(thread)
    }
    for thread in threads { pthread_join(thread, nil) }
case "log-crash":
    Logger(label: "auth", factory: { CairnLogHandler(label: $0) }).error("no account for bob@example.com")
    _ = cairn.flush(timeout: .seconds(5))
    UnsafeMutablePointer<Int>(bitPattern: 8)!.pointee = 1
case "idle":
    break
case "lifecycle", "lifecycle-cancel":
    let cancel = mode == "lifecycle-cancel"
    let group = ServiceGroup(services: [CairnService(cairn: cairn), Worker(cairn: cairn, failAfter: cancel ? 20 : nil)],
                             gracefulShutdownSignals: [.sigterm],
                             logger: Logger(label: "group", factory: { _ in SwiftLogNoOpLogHandler() }))
    do {
        try await group.run()
        print("group ended")
    } catch {
        let ms = (DispatchTime.now().uptimeNanoseconds - Worker.failedAt.load(ordering: .relaxed)) / 1_000_000
        print("group failed \(ms)")
    }
    exit(0)
case "metrics":
    func setting(_ name: String, _ fallback: Int) -> Int {
        getenv(name).flatMap { Int(String(cString: $0)) } ?? fallback
    }
    let interval = setting("CAIRN_TEST_METRICS_INTERVAL_MS", 200)
    CairnMetricsFactory.bootstrap(cairn: cairn, options: .init(interval: .milliseconds(interval),
                                                                maxSeries: setting("CAIRN_TEST_MAX_SERIES", 20)))
    Counter(label: "orders_placed", dimensions: [("plan", "pro"), ("region", "eu")]).increment(by: 3)
    Counter(label: "orders_placed", dimensions: [("region", "eu"), ("plan", "pro")]).increment(by: 4)
    let revenue = FloatingPointCounter(label: "revenue")
    revenue.increment(by: 12.5)
    revenue.increment(by: 12.5)
    let depth = Meter(label: "queue_depth")
    depth.set(7)
    depth.increment(by: 2)
    let payload = Recorder(label: "payload_bytes")
    for value in [3, 7, 300, 20000] { payload.record(value) }
    Recorder(label: "temperature", aggregate: false).record(21.5)
    let query = Timer(label: "db_query", dimensions: [("table", "orders")])
    query.recordNanoseconds(2_000_000)
    query.recordMilliseconds(30)
    Counter(label: "signups", dimensions: [("email", "alice@example.com")]).increment()
    let shortLived = Counter(label: "short_lived")
    shortLived.increment(by: 5)
    for user in 0..<30 { Counter(label: "per_user", dimensions: [("user", "\(user)")]).increment() }
    usleep(UInt32(interval * 3 * 1000))
    shortLived.destroy()
    usleep(UInt32(interval * 3 * 1000))
default:
    fail("unknown mode \(mode)", 2)
}
_ = cairn.flush(timeout: .seconds(10))
_ = cairn.shutdown(timeout: .seconds(5))
#else
print("cairn-ecosystem-child: built without the package traits of the ecosystem")
#endif
