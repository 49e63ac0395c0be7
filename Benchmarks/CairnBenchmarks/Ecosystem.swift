// The Swift server ecosystem's integrations, each built with its package trait (without
// it there are no such figures). First swift-log's `Logger` with Cairn's handler,
// against swift-log's own no-op handler.
import Cairn

#if Logging
import CairnLogging
import Dispatch
import Logging

/// Nanoseconds per `logger.info` call with one metadata item, over `calls` calls in a
/// loop (each call is a few nanoseconds when filtered out: too short to time alone).
func loopedLogCost(_ logger: Logger, calls: Int) -> Double {
    let t0 = DispatchTime.now().uptimeNanoseconds
    for i in 0..<calls { logger.info("order placed", metadata: ["order_id": "\(i)"]) }
    return Double(DispatchTime.now().uptimeNanoseconds - t0) / Double(calls)
}

/// `body` called `calls` times, each call timed on its own as
/// ``benchTrack(calls:threads:)`` times `track()` (the clock's cost subtracted): (p50,
/// p99) in nanoseconds.
func timedCalls(_ calls: Int, _ body: () -> Void) -> (p50: Double, p99: Double) {
    var overhead: [Double] = []
    for _ in 0..<1000 {
        let t0 = now()
        overhead.append(Double(now() - t0))
    }
    let clockCost = percentile(overhead, 0.5)
    var times = [Double](repeating: 0, count: calls)
    for i in 0..<calls {
        let t0 = now()
        body()
        times[i] = max(0, Double(now() - t0) - clockCost)
    }
    return (percentile(times, 0.5), percentile(times, 0.99))
}

/// `logger.info` with 10 metadata items through Cairn's handler (the record is tracked).
func timedLogCalls(_ logger: Logger, calls: Int) -> (p50: Double, p99: Double) {
    let metadata: Logger.Metadata = [
        "plan": "pro", "seats": "12", "ratio": "0.75", "trial": "false", "region": "eu-west-1",
        "path": "/orders/42", "method": "POST", "status": "201", "duration_ms": "12.5", "retry": "false",
    ]
    return timedCalls(calls) { logger.info("checkout completed", metadata: metadata) }
}

/// `track()` of the event `timedLogCalls` makes (the same properties: the metadata,
/// the message and the source fields).
func timedEquivalentTracks(_ cairn: Cairn, calls: Int) -> (p50: Double, p99: Double) {
    let properties: [String: CairnValue] = [
        "plan": "pro", "seats": "12", "ratio": "0.75", "trial": "false", "region": "eu-west-1",
        "path": "/orders/42", "method": "POST", "status": "201", "duration_ms": "12.5", "retry": "false",
        "message": "checkout completed", "log.source": "CairnBenchmarks",
        "code.file.path": "CairnBenchmarks/Logging.swift", "code.function.name": "timedLogCalls(_:calls:)",
        "code.line.number": 34,
    ]
    return timedCalls(calls) { cairn.track("bench", properties: properties) }
}

/// The logging figures, with `cairn` (the track() figures' SDK).
@MainActor func recordLoggingFigures(_ cairn: Cairn?) {
    guard let cairn else { return }
    let noOp = Logger(label: "bench", factory: { _ in SwiftLogNoOpLogHandler() })
    let filtered = Logger(label: "bench", factory: { CairnLogHandler(label: $0, cairn: cairn, logLevel: .warning) })
    let logged = Logger(label: "bench", factory: { CairnLogHandler(label: $0, cairn: cairn, logLevel: .info) })
    let calls = quick ? 2_000_000 : 10_000_000
    // Interleaved rounds, the best of each: the two figures see the same machine.
    var noOpBest = Double.infinity, filteredBest = Double.infinity
    for _ in 0..<3 {
        noOpBest = min(noOpBest, loopedLogCost(noOp, calls: calls))
        filteredBest = min(filteredBest, loopedLogCost(filtered, calls: calls))
    }
    _ = cairn.flush(timeout: .seconds(60))
    _ = timedLogCalls(logged, calls: 10_000)
    // Interleaved with track() of the same event: what the handler adds to it.
    var loggedBest = (p50: Double.infinity, p99: Double.infinity), trackBest = loggedBest
    for _ in 0..<3 {
        _ = cairn.flush(timeout: .seconds(60))
        let t = timedEquivalentTracks(cairn, calls: quick ? 30_000 : 100_000)
        if t.p50 < trackBest.p50 { trackBest = t }
        _ = cairn.flush(timeout: .seconds(60))
        let l = timedLogCalls(logged, calls: quick ? 30_000 : 100_000)
        if l.p50 < loggedBest.p50 { loggedBest = l }
    }
    record("log_noop_ns", "Logger.info, swift-log's no-op handler (level filtered out)", noOpBest, "ns")
    record("log_filtered_ns", "Logger.info below CairnLogHandler's level", filteredBest, "ns",
           goal: "<= no-op + 2", budget: noOpBest + 10)
    record("log_ns_p50", "Logger.info through CairnLogHandler, 10 metadata items, p50 (best of 3)", loggedBest.p50, "ns",
           goal: "<= 2 x track")
    record("log_ns_p99", "Logger.info through CairnLogHandler, p99 (same round)", loggedBest.p99, "ns", goal: "<= 6000")
    record("log_track_ns_p50", "track() of the same event (15 properties), p50 (best of 3)", trackBest.p50, "ns")
}
#else
/// Without the trait "Logging": no logging figures.
@MainActor func recordLoggingFigures(_ cairn: Cairn?) {}
#endif

// swift-metrics with Cairn's factory: what a counter increment, a timer record and
// making a series per call cost the calling thread (built with the trait "Metrics").
#if Metrics
import CairnBase
import CairnMetrics
import CoreMetrics
import Foundation

/// Nanoseconds per call of `body` over `calls` calls in a loop, on `threads` threads at
/// once (each making `calls` calls; the slowest thread's time per call).
func loopedCost(threads: Int = 1, calls: Int, _ body: @escaping @Sendable (Int) -> Void) -> Double {
    let barrier = SpinBarrier(threads)
    let times = Locked<[Double]>([])
    let group = DispatchGroup()
    for _ in 0..<threads {
        group.enter()
        Thread {
            barrier.wait()
            let t0 = DispatchTime.now().uptimeNanoseconds
            for i in 0..<calls { body(i) }
            let per = Double(DispatchTime.now().uptimeNanoseconds - t0) / Double(calls)
            times.withLock { $0.append(per) }
            group.leave()
        }.start()
    }
    group.wait()
    return times.withLock { $0.max() ?? .nan }
}

/// The metrics figures, with `cairn` (best of three rounds each).
@MainActor func recordMetricsFigures(_ cairn: Cairn?) {
    guard let cairn else { return }
    let factory = CairnMetricsFactory(cairn: cairn, options: .init(interval: .seconds(3600)))
    let counter = factory.makeCounter(label: "bench_counter", dimensions: [("route", "/orders")])
    let timer = factory.makeTimer(label: "bench_timer", dimensions: [("route", "/orders")])
    let noOp = NOOPMetricsHandler.instance.makeCounter(label: "bench_counter", dimensions: [])
    let calls = quick ? 2_000_000 : 10_000_000
    func best(_ measure: () -> Double) -> Double { (0..<3).map { _ in measure() }.min() ?? .nan }
    let noOpCost = best { loopedCost(calls: calls) { _ in noOp.increment(by: 1) } }
    let counterCost = best { loopedCost(calls: calls) { _ in counter.increment(by: 1) } }
    let counter2t = best { loopedCost(threads: 2, calls: calls / 2) { _ in counter.increment(by: 1) } }
    let timerCost = best { loopedCost(calls: calls / 4) { i in timer.recordNanoseconds(Int64(i & 0xFFFFF) * 1000) } }
    let makeCost = best {
        loopedCost(calls: calls / 20) { i in
            factory.makeCounter(label: "bench_made", dimensions: [("status", i & 1 == 0 ? "200" : "500")]).increment(by: 1)
        }
    }
    record("metric_noop_counter_ns", "Counter increment, swift-metrics' no-op handler", noOpCost, "ns")
    record("metric_counter_ns", "Counter increment (CairnMetricsFactory)", counterCost, "ns", goal: "<= 20", budget: 200)
    record("metric_counter_2t_ns", "Counter increment, 2 threads on one counter, per call", counter2t, "ns")
    record("metric_timer_ns", "Timer record (histogram, 15 buckets)", timerCost, "ns", goal: "<= 100", budget: 1000)
    record("metric_make_counter_ns", "Counter made per call (label and dimension looked up), then incremented",
           makeCost, "ns", goal: "<= 500")
}
#else
/// Without the trait "Metrics": no metrics figures.
@MainActor func recordMetricsFigures(_ cairn: Cairn?) {}
#endif
