// Crashes the service child can have, in functions of its own so that the tests can
// look for their names in the crash event's frames.
import Foundation

/// Three async calls deep, each resumed after a suspension (so that no caller is on
/// the machine stack any more: only the task's async context chain knows them), the
/// innermost writes through a bad pointer.
@inline(never) func asyncLevel1(_ n: Int) async -> Int {
    await Task.yield()
    return await asyncLevel2(n + 1) + 1
}

@inline(never) func asyncLevel2(_ n: Int) async -> Int {
    await Task.yield()
    return await asyncLevel3(n + 1) + 1
}

@inline(never) func asyncLevel3(_ n: Int) async -> Int {
    await Task.yield()
    let bad = UnsafeMutablePointer<Int>(bitPattern: 8 + (n & 0x0))
    bad?.pointee = n
    return n
}

/// Loads the library at `path` now (after `Cairn.start`) and calls its
/// `plugin_handle(int)` through two functions of the service.
@inline(never) func runPlugin(at path: String, value: Int32) -> Int32 {
    guard let library = dlopen(path, RTLD_NOW | RTLD_LOCAL), let symbol = dlsym(library, "plugin_handle") else {
        FileHandle.standardError.write(Data("plugin: \(String(cString: dlerror()))\n".utf8))
        exit(3)
    }
    // Work after the call, so that a release build keeps this frame (no tail call).
    return handOverToPlugin(unsafeBitCast(symbol, to: (@convention(c) (Int32) -> Int32).self), value) &* 2
}

@inline(never) func handOverToPlugin(_ handle: @convention(c) (Int32) -> Int32, _ value: Int32) -> Int32 {
    handle(value) + 1
}

/// Written by every level of `recurse`, so that no build can fold the recursion away.
nonisolated(unsafe) var recursionSink = 0

@inline(never) func touch(_ p: UnsafeMutableRawPointer, _ depth: Int) {
    p.storeBytes(of: depth, as: Int.self)
    recursionSink &+= p.load(as: Int.self)
}

/// Recurses until the thread's stack is exhausted: a stack overflow.
@inline(never) func recurse(_ depth: Int) -> Int {
    var pad = (depth, depth, depth, depth, depth, depth, depth, depth)
    withUnsafeMutableBytes(of: &pad) { touch($0.baseAddress!, depth) }
    return recurse(depth + 1) &+ pad.0 &+ recursionSink
}

/// A stack overflow on a thread started with plain `pthread_create`.
func overflowOnAThread() {
    var thread = pthread_t()
    let rc = pthread_create(&thread, nil, { _ in
        _ = recurse(0)
        return nil
    }, nil)
    guard rc == 0 else { exit(3) }
    pthread_join(thread, nil)
}

/// The Swift runtime's checks failing in the service's own code, by `kind`: `unwrap`
/// (nil), `index` (out of range), `overflow` (arithmetic), `divide` (by zero),
/// `precondition`, `fatal` (fatalError). Values come from `seed` (the kind's length)
/// so that no build can see the failure coming.
@inline(never) func failCheck(_ kind: String) -> Int {
    let seed = kind.count
    switch kind {
    case "unwrap":
        let account: Int? = seed > 0 ? nil : seed
        return account! + 1
    case "index":
        let lines = [seed, seed + 1]
        return lines[seed]
    case "overflow":
        return (Int.max - 3) + seed
    case "divide":
        return 1000 / (seed - 6)
    case "precondition":
        precondition(seed > 40, "an order needs a line")
        return seed
    default:
        fatalError("the ledger is closed")
    }
}
