// CairnBenchHost: the host program with Cairn, configured from CAIRN_* variables with
// default options otherwise (see BenchHost). Its executables differ only in what the
// service does with its libraries before Cairn starts.
//
// Modes (`<mode> [rate] [seconds]`):
//   exit              return at once (the process start with Cairn linked)
//   linked            warm up, settle, print the memory figures (Cairn not started)
//   idle              also start Cairn, track 10 events, settle, print the figures
//   first-upload      start Cairn, track 10 events, flush them (delivered), settle,
//                     print the figures
//   rate <n> <secs>   start Cairn, track n events a second (0: flat out) for secs, print
//                     the figures as production ends, then flush (60 s at most) and print
//                     a second line with what was tracked, dropped and the elapsed time
import BenchHost
import Cairn
import Dispatch
import Glibc

/// Runs the host with Cairn: `warmUp` first (the service's own use of its libraries).
public func runCairnHost(warmUp: () -> Int) -> Never {
    guard let args = HostArguments() else { exit(2) }
    if args.mode == "exit" { exit(0) }
    _ = warmUp()
    if args.mode == "linked" {
        settle(0.5)
        emit(MemoryFigures.now().json())
        exit(0)
    }
    let cairn: Cairn
    do {
        cairn = try Cairn.start(Cairn.Options.fromEnvironment())
    } catch {
        emit("start: \(error)")
        exit(1)
    }
    let properties: [String: CairnValue] = [
        "plan": "pro", "seats": 12, "ratio": 0.75, "trial": false, "region": "eu-west-1",
        "path": "/orders/42", "method": "POST", "status": 201, "duration_ms": 12.5, "retry": false,
    ]
    switch args.mode {
    case "idle":
        for _ in 0..<10 { cairn.track("checkout_completed", properties: properties) }
        settle(idleSettle)
        emit(MemoryFigures.now().json())
    case "first-upload":
        for _ in 0..<10 { cairn.track("checkout_completed", properties: properties) }
        let flushed = cairn.flush(timeout: .seconds(10))
        settle(idleSettle)
        emit(MemoryFigures.now().json(extra: ["flushed": flushed ? 1 : 0]))
    case "rate":
        let began = DispatchTime.now().uptimeNanoseconds
        let run = produceReadingHalfway(rate: args.rate, seconds: args.seconds) { _ in
            cairn.track("checkout_completed", properties: properties)
        }
        let tracked = run.made
        emit(MemoryFigures.now().json(extra: ["anon_kb_halfway": run.anonHalfway]))
        let flushed = cairn.flush(timeout: .seconds(60))
        let elapsed = Int((DispatchTime.now().uptimeNanoseconds - began) / 1_000_000)
        let drops = cairn.dropCounts.filter { $0.value > 0 }
        let text = drops.sorted { $0.key < $1.key }.map { "\"\($0.key)\": \($0.value)" }.joined(separator: ", ")
        emit("{\"tracked\": \(tracked), \"dropped\": \(drops.values.reduce(0, +)), \"flushed\": \(flushed ? 1 : 0), "
            + "\"elapsed_ms\": \(elapsed), \"drops\": {\(text)}}")
    default:
        exit(2)
    }
    _ = cairn.shutdown(timeout: .seconds(10))
    exit(0)
}
