// cairn-swift-crash-child: a Swift program that traps with Cairn's crash handler
// installed, for the crash tests.
//
// Usage: cairn-swift-crash-child <report dir> fatal|index|unwrap|overflow|divide|precondition
//
// Built in debug for the tests and in release (-O -g) by `make bench`: in a release
// build the runtime's checks trap without a message, which only the debug information
// names (an inlined `Swift runtime failure: …` frame).
import CCairnCrash
import Foundation

let args = CommandLine.arguments
guard args.count == 3 else { exit(2) }
let rc = args[1].withCString { dir -> Int32 in
    var opts = cairn_crash_options_t(report_dir: dir, flags: 0, context_capacity: 0, report_name: nil, deadline_seconds: 0)
    return cairn_crash_install(&opts)
}
guard rc == 0 else { exit(1) }
FileHandle.standardOutput.write(Data("READY\n".utf8))

@inline(never) func trap(_ mode: String) -> Int {
    switch mode {
    case "fatal":
        fatalError("the service gave up: \(mode)")
    case "index":
        let items = [1, 2, 3]
        return items[Int(mode.count) + 10]
    case "overflow":
        // Values the optimiser cannot know: the mode's length (8).
        let big = Int.max - mode.count + 5
        return big + mode.count
    case "divide":
        let zero = mode.count - 6
        return 100 / zero
    case "precondition":
        precondition(mode.count > 100, "the order has no lines")
        return 0
    default:
        let missing: Int? = mode == "unwrap" ? nil : 1
        return missing!
    }
}
print(trap(args[2]))
