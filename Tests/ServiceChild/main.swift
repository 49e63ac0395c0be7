// cairn-service-child: a service using the public Cairn API, configured from CAIRN_*
// variables, for the end-to-end and cross-process tests.
//
// Usage: cairn-service-child <mode> [<n>]
//   run <n>       start, track n events named "child_event", flush, shut down
//   install       start, track "app_install" without a time, flush, shut down
//   sample <n>    print sampling decisions (0/1) for user-0 ... user-(n-1) at rate 0.3
//   start         print the milliseconds `Cairn.start` took on this thread, shut down
//   burst <n>     track n Debug-tier events, then n Important-tier ones, as fast as it
//                 can; print the drop counts as JSON; exit without flushing
//   crash         flush (the SDK is then ready), then write through a bad pointer
// CAIRN_TEST_STDOUT=1 adds the stdout destination (one JSON line per event);
// CAIRN_TEST_PAUSE_MS waits that long before shutting down.
import Cairn
import CairnProcessor
import Foundation

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

var options = Cairn.Options.fromEnvironment()
if ProcessInfo.processInfo.environment["CAIRN_TEST_STDOUT"] == "1" { options.destinations = [StdoutDestination()] }
let cairn: Cairn
let startedAt = DispatchTime.now().uptimeNanoseconds
do {
    cairn = try Cairn.start(options)
} catch {
    FileHandle.standardError.write(Data("start: \(error)\n".utf8))
    exit(1)
}
switch mode {
case "run":
    for i in 0..<n { cairn.track("child_event", properties: ["i": .int(Int64(i))]) }
case "install":
    cairn.track("app_install")
case "crash":
    _ = cairn.flush(timeout: .seconds(10))
    let bad = UnsafeMutablePointer<Int>(bitPattern: n == 0 ? 8 : 16)
    bad?.pointee = n
    exit(4)
case "burst":
    struct Tiered: CairnEvent {
        var name: String
        var tier: Tier
        var properties: [String: CairnValue] { ["padding": .string(String(repeating: "x", count: 400))] }
    }
    for _ in 0..<n { cairn.track(Tiered(name: "debug_detail", tier: .debug)) }
    for _ in 0..<n { cairn.track(Tiered(name: "important_fact", tier: .important)) }
    let drops = cairn.dropCounts.sorted { $0.key < $1.key }.map { "\"\($0.key)\":\($0.value)" }
    print("{" + drops.joined(separator: ",") + "}")
    exit(0)
case "start":
    print(String(format: "%.3f", Double(DispatchTime.now().uptimeNanoseconds - startedAt) / 1e6))
default:
    exit(2)
}
if let ms = ProcessInfo.processInfo.environment["CAIRN_TEST_PAUSE_MS"].flatMap({ UInt32($0) }) {
    usleep(ms * 1000)  // idle before shutting down (periodic sdk_health)
}
let ok = cairn.shutdown(timeout: .seconds(20))
exit(ok ? 0 : 3)
