// cairn-bench-baseline: the benchmark's host service without Cairn (see BenchHost): the
// same program as cairn-bench-host, with every Cairn call left out, so that the
// difference between the two is what Cairn costs.
//
// Usage: cairn-bench-baseline <mode> [rate] [seconds]   (modes as cairn-bench-host's)
import BenchHost
import Foundation

guard let args = HostArguments() else { exit(2) }
if args.mode == "exit" { exit(0) }
_ = useFoundationLikeAService()
switch args.mode {
case "linked":
    settle(0.5)
case "idle":
    settle(1.5)
case "rate":
    let sink = UnsafeMutablePointer<Int>.allocate(capacity: 1)
    _ = produce(rate: args.rate, seconds: args.seconds) { sink.pointee &+= $0 }
default:
    exit(2)
}
emit(MemoryFigures.now().json())
