import CairnTestSupport
import Foundation
import Testing

/// Crashes of a service that uses only the public API (`cairn-service-child`), in the
/// debug build and in the release build (`-O -g`, built by `make bench` before the
/// tests), each turned into a `crash` event by the next start (another real process)
/// and compared with an oracle Cairn did not write: the toolchain's `llvm-symbolizer
/// --inlining` for every frame's function and line, the Swift runtime's own backtracer
/// for async frames.
@Suite struct ServiceCrashTests {
    static let debugChild = productsDirectory + "/cairn-service-child"
    static let releaseChild = URL(fileURLWithPath: productsDirectory + "/../release/cairn-service-child")
        .standardizedFileURL.path
    /// The builds to test: the release one where `make bench` has built it.
    static let builds: [String] = [debugChild] + (FileManager.default.fileExists(atPath: releaseChild) ? [releaseChild] : [])

    struct Crashed {
        var ended: Finished
        /// The next start's `crash` and `session_end` events.
        var crash: [String: Any]
        var sessionEnd: [String: Any]?
        var frames: [[String: Any]] { (crash["properties"] as? [String: Any])?["frames"] as? [[String: Any]] ?? [] }
        var functions: [String] { frames.compactMap { $0["function"] as? String } }
    }

    /// Runs `child` with `args` in a fresh data directory until it ends, then starts it
    /// once more (`run 0`, events printed on stdout): how it ended and the next start's
    /// events.
    static func runThenRestart(_ child: String, _ args: [String], backtracer: Bool = false,
                               env extra: [String: String] = [:]) throws -> (ended: Finished, events: [[String: Any]]) {
        let dir = try TemporaryDirectory("cairn-service-crash")
        var env = ["CAIRN_APP_ID": "orders", "CAIRN_DISTINCT_ID": "host-7", "CAIRN_DATA_DIR": dir.path,
                   "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin",
                   "SWIFT_BACKTRACE": "enable=no"]
        if backtracer {
            // The Swift runtime's backtracer, installed before Cairn: Cairn's handler
            // passes the crash on to it once its report is written.
            env["SWIFT_BACKTRACE"] = "enable=yes,interactive=no,color=no,threads=crashed,registers=none,images=none,output-to=stderr"
        }
        env.merge(extra) { $1 }
        let ended = try runToEnd(child, args, environment: env)
        env["CAIRN_TEST_STDOUT"] = "1"
        let next = try runToEnd(child, ["run", "0"], environment: env)
        #expect(next.status == 0, "\(next.err)")
        let events = next.out.split(separator: "\n").compactMap {
            (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any]
        }
        return (ended, events)
    }

    /// ``runThenRestart(_:_:backtracer:env:)`` for a run that crashes: its `crash` event
    /// (required) and `session_end`.
    static func crash(_ child: String, _ args: [String], backtracer: Bool = false,
                      env extra: [String: String] = [:]) throws -> Crashed {
        let (ended, events) = try runThenRestart(child, args, backtracer: backtracer, env: extra)
        let sessionEnd = events.first { $0["name"] as? String == "session_end" }
        let crash = events.first { $0["type"] as? String == "crash" }
        return Crashed(ended: ended, crash: try #require(crash, "no crash event; session_end \(sessionEnd ?? [:]): \(ended.err)"),
                       sessionEnd: sessionEnd)
    }

    /// Each frame in a module of the service (its binary or a library it loaded), and
    /// the functions inlined at it, compared with llvm-symbolizer's inline chain at the
    /// same address: the same functions (linkage names), files and lines.
    /// An async frame's address is where its function resumes, looked up as is.
    static func expectFramesMatchTheSymbolizer(_ c: Crashed, modules: [String], atLeast: Int = 3,
                                               atMost: Int = 64) throws {
        let toolchain = try SymbolizerTests.toolchain()
        // A machine frame with the functions inlined at it: frames of one index and address.
        var groups: [[[String: Any]]] = []
        for f in c.frames {
            if let last = groups.last?.last, last["index"] as? Int == f["index"] as? Int,
               last["address"] as? String == f["address"] as? String {
                groups[groups.count - 1].append(f)
            } else {
                groups.append([f])
            }
        }
        var compared = 0
        for group in groups where compared < atMost {
            guard let index = group.last?["index"] as? Int, let module = group.last?["module"] as? String,
                  modules.contains(module), let offsetText = group.last?["offset"] as? String,
                  let offset = UInt64(offsetText.dropFirst(2), radix: 16)
            else { continue }
            let lookup = index == 0 || group.last?["async"] as? Bool == true ? offset : offset - 1
            let oracle = try runToEnd(toolchain + "/llvm-symbolizer", ["--inlining", "--no-demangle", "--obj=" + module,
                                                                      "0x" + String(lookup, radix: 16)])
            let lines = oracle.out.split(separator: "\n").map(String.init)
            let theirs = stride(from: 0, to: lines.count - 1, by: 2).map { i -> String in
                let place = lines[i + 1].split(separator: ":")
                let file = place.first.map { $0.split(separator: "/").last.map(String.init) ?? "" } ?? ""
                let line = place.count > 1 ? String(place[1]) : "0"
                // Line 0: no line (llvm-symbolizer then names the unit's object file).
                return lines[i] + " " + (line == "0" ? "??" : file) + ":" + line
            }
            let ours = group.map { f -> String in
                let name = (f["mangled"] as? String) ?? (f["symbol"] as? String) ?? "??"
                guard let line = f["line"] as? Int, let path = f["file"] as? String else { return name + " ??:0" }
                return name + " " + (path.split(separator: "/").last.map(String.init) ?? path) + ":\(line)"
            }
            #expect(ours == theirs, "frame \(index) at \(offsetText) in \(module)")
            compared += 1
        }
        #expect(compared >= atLeast, "frames in \(modules): \(c.functions)")
    }

    /// A crash inside a Task, three async calls deep, each resumed after a suspension:
    /// only the task's async context chain still knows the callers. The event names all
    /// three (the two callers as `async` frames, where they resume), and its async
    /// frames are the Swift runtime backtracer's `[async]` frames, address for address.
    @Test(arguments: builds)
    func aCrashThreeAsyncCallsDeepNamesAllThree(child: String) throws {
        let c = try Self.crash(child, ["async", "1"], backtracer: true)
        #expect(c.ended.signaled && c.ended.status == SIGSEGV, "\(c.ended.status) \(c.ended.err)")
        #expect((c.sessionEnd?["properties"] as? [String: Any])?["reason"] as? String == "crashed")
        let functions = c.functions
        let level3 = try #require(functions.firstIndex(of: "asyncLevel3(_:)"), "\(functions)")
        let level2 = try #require(functions.firstIndex(of: "asyncLevel2(_:)"), "\(functions)")
        let level1 = try #require(functions.firstIndex(of: "asyncLevel1(_:)"), "\(functions)")
        #expect(level3 < level2 && level2 < level1)
        #expect(c.frames[level2]["async"] as? Bool == true && c.frames[level1]["async"] as? Bool == true)
        #expect((c.frames[level2]["file"] as? String)?.hasSuffix("Tests/ServiceChild/Crashes.swift") == true)

        // The oracle: the backtracer's `[async]` lines, `  1 [async]  0x… asyncLevel2(_:) in …`.
        let theirs = c.ended.err.split(separator: "\n").filter { $0.contains("[async]") }.compactMap { line in
            line.split(separator: " ").first { $0.hasPrefix("0x") }.flatMap { UInt64($0.dropFirst(2), radix: 16) }
        }
        let ours = c.frames.filter { $0["async"] as? Bool == true && $0["inlined"] as? Bool != true }.compactMap {
            ($0["address"] as? String).flatMap { UInt64($0.dropFirst(2), radix: 16) }
        }
        #expect(!theirs.isEmpty && ours == theirs, "ours \(ours), the backtracer's \(theirs): \(c.ended.err)")
        try Self.expectFramesMatchTheSymbolizer(c, modules: [child])
    }

    /// A NULL write in a library loaded with dlopen after `Cairn.start`: the library
    /// joins the module list in the handler, so its frames are kept and symbolicated, and
    /// the unwinding goes on through the service's callers down to `main`.
    @Test(arguments: builds)
    func aCrashInALibraryLoadedAfterStartNamesItAndItsCallers(child: String) throws {
        let dir = try TemporaryDirectory("cairn-plugin")
        let source = dir.appending("plugin.c"), library = dir.appending("libplugin.so")
        try """
        #include <stddef.h>
        __attribute__((noinline)) int plugin_store(int *slot, int value) { *slot = value; return value; }
        __attribute__((noinline)) int plugin_handle(int value) { return plugin_store((int *)(size_t)(value & 0), value) + 1; }
        """.write(toFile: source, atomically: true, encoding: .utf8)
        let cc = try runToEnd(try SymbolizerTests.toolchain() + "/clang", ["-g", "-O0", "-fPIC", "-shared", source, "-o", library])
        #expect(cc.status == 0, "\(cc.err)")
        let c = try Self.crash(child, ["plugin", library])
        #expect(c.ended.signaled && c.ended.status == SIGSEGV, "\(c.ended.status) \(c.ended.err)")
        let functions = c.functions
        let want = ["plugin_store", "plugin_handle", "handOverToPlugin(_:_:)", "runPlugin(at:value:)"]
        let found = want.compactMap { functions.firstIndex(of: $0) }
        #expect(found.count == want.count && found == found.sorted(), "\(want) in order among \(functions)")
        #expect(functions.contains { $0.hasPrefix("cairn_service_child_main") || $0 == "main" }, "\(functions)")
        let first = try #require(c.frames.first)
        #expect(first["module"] as? String == library && (first["file"] as? String)?.hasSuffix("plugin.c") == true)
        let modules = (c.crash["properties"] as? [String: Any])?["modules"] as? [[String: Any]] ?? []
        #expect(modules.contains { $0["path"] as? String == library }, "the library is in the module list")
        try Self.expectFramesMatchTheSymbolizer(c, modules: [child, library])
    }

    struct Overflow: CustomStringConvertible, Sendable {
        var child: String
        var mode: String
        var description: String { mode + (child == ServiceCrashTests.releaseChild ? " (release)" : "") }
    }
    static let overflows = builds.flatMap { child in ["overflow-task", "overflow-thread"].map { Overflow(child: child, mode: $0) } }

    /// A stack overflow inside a Task (a libdispatch worker of the Swift concurrency
    /// runtime's pool) and on a thread of plain `pthread_create`, neither of which the
    /// service could prepare: every thread created after `Cairn.start` has an alternate
    /// signal stack, so the handler runs and the next start reports a `crash` in
    /// `recurse(_:)` and `session_end crashed`.
    @Test(arguments: overflows)
    func aStackOverflowOnAnyThreadIsReported(_ o: Overflow) throws {
        let c = try Self.crash(o.child, [o.mode])
        #expect(c.ended.signaled && c.ended.status == SIGSEGV, "\(c.ended.status) \(c.ended.err)")
        #expect((c.sessionEnd?["properties"] as? [String: Any])?["reason"] as? String == "crashed")
        let props = c.crash["properties"] as? [String: Any] ?? [:]
        #expect(props["signal"] as? String == "SIGSEGV" && (props["thread"] as? [String: Any])?["main"] as? Bool == false)
        #expect((props["reason"] as? String)?.contains("stack overflow") == true, "\(props["reason"] ?? "")")
        #expect(c.functions.filter { $0 == "recurse(_:)" }.count > 10, "\(c.functions.prefix(20))")
        try Self.expectFramesMatchTheSymbolizer(c, modules: [o.child], atMost: 8)
    }

    /// The control: with `alternateStacksForNewThreads` off, the same overflow on a new
    /// thread leaves no report (the kernel cannot run a handler on a full stack), and
    /// the run ends `abnormal`.
    @Test func withoutAlternateStacksAnOverflowOnANewThreadIsNotReported() throws {
        let (ended, events) = try Self.runThenRestart(Self.debugChild, ["overflow-thread"],
                                                      env: ["CAIRN_TEST_NO_ALT_STACKS": "1"])
        #expect(ended.signaled && ended.status == SIGSEGV)
        #expect(!events.contains { $0["type"] as? String == "crash" })
        let end = events.first { $0["name"] as? String == "session_end" }
        #expect((end?["properties"] as? [String: Any])?["reason"] as? String == "abnormal", "\(events)")
    }

    /// Threads created after install get an alternate stack of 64 KiB, and give it back
    /// when they end: 2000 threads started and joined leave the address space as it was
    /// (unreleased, they would hold 136 MB of it).
    @Test func newThreadsGetAnAlternateStackAndGiveItBack() throws {
        let dir = try TemporaryDirectory("cairn-threads")
        let ended = try runToEnd(productsDirectory + "/cairn-crash-child", [dir.path, "threads"])
        #expect(ended.status == 0 && !ended.signaled, "\(ended.err)")
        let lines = ended.out.split(separator: "\n")
        #expect(lines.contains("ALT 65536"), "\(ended.out)")
        let vm = try #require(lines.first { $0.hasPrefix("VM ") }).split(separator: " ").compactMap { Int($0) }
        #expect(vm.count == 2 && vm[1] - vm[0] < 16 * 1024, "address space before and after, kB: \(vm)")
    }

    struct Check: CustomStringConvertible, Sendable {
        var child: String
        var kind: String
        var description: String { kind + (child == ServiceCrashTests.releaseChild ? " (release)" : "") }
    }
    static let checks = builds.flatMap { child in
        ["unwrap", "index", "overflow", "divide", "precondition", "fatal"].map { Check(child: child, kind: $0) }
    }

    #if arch(x86_64)
    static let trap = SIGILL
    #else
    static let trap = SIGTRAP
    #endif

    /// A runtime check failing in the service's own code, in the debug and the release
    /// build: the event's message is the runtime's own (`Fatal error: …`), or where it
    /// left none (release builds, arithmetic overflow in any build) the name of the
    /// inlined `Swift runtime failure: …` function llvm-symbolizer finds at the trap;
    /// every frame in the service's module has llvm-symbolizer's functions and lines;
    /// the headline names `failCheck(_:)` at its file:line.
    @Test(arguments: checks)
    func aFailedRuntimeCheckNamesTheFailureTheFunctionAndTheLine(_ k: Check) throws {
        let c = try Self.crash(k.child, ["check", k.kind])
        #expect(c.ended.signaled && c.ended.status == Self.trap, "\(c.ended.status) \(c.ended.err)")
        let props = c.crash["properties"] as? [String: Any] ?? [:]
        let first = try #require(c.frames.first)
        let module = try #require(first["module"] as? String)
        let offset = try #require((first["offset"] as? String).flatMap { UInt64($0.dropFirst(2), radix: 16) })
        let oracle = try runToEnd(try SymbolizerTests.toolchain() + "/llvm-symbolizer",
                                  ["--inlining", "--no-demangle", "--obj=" + module, "0x" + String(offset, radix: 16)])
        let innermost = oracle.out.split(separator: "\n").first.map(String.init) ?? ""
        let message = props["message"] as? String ?? ""
        if innermost.hasPrefix("Swift runtime failure: ") {
            #expect(message == innermost, "\(k): message \(message), llvm-symbolizer \(innermost)")
        } else {
            // `Swift/ContiguousArrayBuffer.swift:692: Fatal error: Index out of range`.
            #expect(message.contains(": Fatal error: ") || message.contains(": Precondition failed: "),
                    "\(k): \(message), llvm-symbolizer \(innermost)")
        }
        try Self.expectFramesMatchTheSymbolizer(c, modules: [k.child], atLeast: 2)
        let headline = props["headline"] as? String ?? ""
        let reason = message.split(separator: "\n").first.map(String.init) ?? ""
        #expect(headline.hasPrefix(reason) && headline.contains(" in failCheck(_:) at Crashes.swift:"), "\(k): \(headline)")
    }
}
