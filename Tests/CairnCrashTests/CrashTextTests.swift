import CairnCrash
import CairnTestSupport
import Foundation
import Testing

/// `cairn report`: a crash report from a real crashed child, as a person reads it.
@Suite struct CrashTextTests {
    @Test func shortNames() {
        let cases = [
            ("orders.OrderService.checkout(order: Swift.Int) -> Swift.Int", "checkout(order:)"),
            ("cairn_swift_crash_child.trap(Swift.String) -> Swift.Int", "trap(_:)"),
            ("Swift._assertionFailure(_: Swift.StaticString, _: Swift.String, file: Swift.StaticString, line: Swift.UInt, flags: Swift.UInt32) -> Swift.Never",
             "_assertionFailure(_:_:file:line:flags:)"),
            ("closure #1 (Swift.Int) -> () in orders.OrderService.run() -> ()", "closure #1 in run()"),
            ("generic specialization <Swift.Int> of orders.Box.put(_: A) -> ()", "put(_:)"),
            ("orders.Cache<A>.get(key: Swift.Dictionary<Swift.String, A>) -> A?", "get(key:)"),
            ("crash_here", "crash_here"),
            ("main", "main"),
            ("Swift.Array.subscript.getter : (Swift.Int) -> A", "subscript.getter"),
            ("partial apply forwarder for closure #1 () throws -> A in Cairn.Cairn.withSpan<A>(_: Swift.String, traceparent: Swift.Optional<Swift.String>, operation: () throws -> A) throws -> A",
             "closure #1 in withSpan(_:traceparent:operation:)"),
            ("orders.Service.run() async throws -> ()", "run()"),
        ]
        // Type sugar, as swift-demangle prints it (the runtime's demangler does not).
        let sugar = [
            ("f(Swift.Optional<Swift.Int>) -> Swift.Array<Swift.String>", "f(Swift.Int?) -> [Swift.String]"),
            ("g(Swift.Dictionary<Swift.String, Swift.Optional<Swift.Array<Swift.Int>>>)", "g([Swift.String : [Swift.Int]?])"),
            ("h(Swift.Optional<() -> ()>)", "h((() -> ())?)"),
            ("k(Swift.Optional<(Swift.Int) -> Swift.Optional<Swift.Int>>)", "k(((Swift.Int) -> Swift.Int?)?)"),
            ("MySwift.Optional<Swift.Int>", "MySwift.Optional<Swift.Int>"),
            ("broken(Swift.Optional<Swift.Int", "broken(Swift.Optional<Swift.Int"),
        ]
        for (plain, sugared) in sugar { #expect(Symbolizer.sugared(plain) == sugared, "\(plain)") }
        // Standard library code, however it is specialised: not the service's own frame.
        for library in ["generic specialization <Swift.Int> of Swift.Array._checkSubscript(_: Swift.Int, wasNativeTypeChecked: Swift.Bool) -> Swift._DependenceToken",
                        "static Swift.String.== infix(Swift.String, Swift.String) -> Swift.Bool",
                        "Swift._stringCompare(_: Swift._StringGuts, _: Swift._StringGuts, expecting: Swift._StringComparisonResult) -> Swift.Bool",
                        "(extension in Swift):Swift.Collection.first.getter : A.Element?",
                        "_Concurrency.Task.init(priority: Swift.TaskPriority?, operation: () async -> A) -> _Concurrency.Task<A, Swift.Never>"] {
            #expect(Symbolizer.isStandardLibrary(library), "\(library)")
        }
        for service in ["cairn_swift_crash_child.trap(Swift.String) -> Swift.Int", "static orders.Order.== infix(orders.Order, orders.Order) -> Swift.Bool",
                        "generic specialization <Swift.Int> of orders.Box.put(_: A) -> ()", "(extension in orders):Swift.Array.total.getter : Swift.Int",
                        "crash_here", "main"] {
            #expect(!Symbolizer.isStandardLibrary(service), "\(service)")
        }
        for (symbol, short) in cases { #expect(Symbolizer.shortName(symbol) == short, "\(symbol)") }
    }

    /// Which frames' async context chains lead to their callers: async functions and
    /// their resume parts (names as the runtime's `swift_demangle` gives them), not a
    /// synchronous function that merely takes an async closure.
    @Test func asyncFunctions() {
        let async = [
            ("orders.asyncLevel3(Swift.Int) async -> Swift.Int", "asyncLevel3(_:)"),
            ("(1) await resume partial function for orders.asyncLevel2(Swift.Int) async -> Swift.Int", "asyncLevel2(_:)"),
            ("(2) suspend resume partial function for orders.Shop.load(id: Swift.String) async throws -> ()", "load(id:)"),
            ("orders.fetch() async throws(orders.FetchError) -> Swift.Int", "fetch()"),
            ("closure #1 () async -> () in orders.main() -> ()", "closure #1 in main()"),
        ]
        for (symbol, short) in async {
            #expect(Symbolizer.isAsyncFunction(symbol), "\(symbol)")
            #expect(Symbolizer.shortName(symbol) == short, "\(symbol)")
        }
        for symbol in ["orders.run(_: () async -> ()) -> ()", "orders.asyncLevel(Swift.Int) -> Swift.Int", "crash_here",
                       "(1) orders.partial()", "swift_job_run"] {
            #expect(!Symbolizer.isAsyncFunction(symbol), "\(symbol)")
        }
    }

    /// From the crash matrix: the runtime's message, the crashing function's short name
    /// and its file:line in the first five lines of `cairn report`; `--json` gives the
    /// event.
    @Test(arguments: [("cairn-swift-crash-child", "fatal", "Fatal error: the service gave up: fatal", "trap(_:)"),
                      ("cairn-swift-crash-child", "index", "Fatal error: Index out of range", "trap(_:)"),
                      ("cairn-swift-crash-child", "unwrap", "Unexpectedly found nil while unwrapping", "trap(_:)"),
                      ("cairn-crash-child", "segv", "SIGSEGV (SEGV_MAPERR): bad access at 0x0", "crash_here")])
    func reportIsReadable(child: String, mode: String, message: String, function: String) throws {
        let dir = try TemporaryDirectory("cairn-report")
        _ = try runToEnd(productsDirectory + "/" + child, [dir.path, mode], environment: ["SWIFT_BACKTRACE": "enable=no"])
        let report = try #require(try FileManager.default.contentsOfDirectory(atPath: dir.path).first { $0.hasSuffix(".report") })
        let text = try runToEnd(productsDirectory + "/cairn", ["report", dir.appending(report)])
        #expect(text.status == 0, "\(text.err)")
        let head = text.out.split(separator: "\n").prefix(5).joined(separator: "\n")
        #expect(head.contains(message), "\(head)")
        let source = child == "cairn-crash-child" ? "main.c:" : "main.swift:"
        #expect(head.contains("Crashed in \(function) at \(source)"), "\(head)")
        let json = try runToEnd(productsDirectory + "/cairn", ["report", "--json", dir.appending(report)])
        let event = try JSONSerialization.jsonObject(with: json.stdout) as? [String: Any]
        #expect(event?["type"] as? String == "crash")
        // The event's one-line headline: the reason, the function, its file:line.
        let headline = (event?["properties"] as? [String: Any])?["headline"] as? String ?? ""
        #expect(headline.contains(message) && headline.contains(" in \(function) at \(source)"), "\(headline)")
        #expect(!headline.contains("\n"))
    }

    @Test func helpAndDamage() throws {
        let help = try runToEnd(productsDirectory + "/cairn", ["--help"])
        #expect(help.status == 0 && help.out.contains("cairn report"))
        let dir = try TemporaryDirectory("cairn-report")
        try Data("not a report".utf8).write(to: URL(fileURLWithPath: dir.appending("x.report")))
        let damaged = try runToEnd(productsDirectory + "/cairn", ["report", dir.appending("x.report")])
        #expect(damaged.status == 1 && damaged.err.contains("not a readable crash report"), "\(damaged.err)")
        let missing = try runToEnd(productsDirectory + "/cairn", ["report", dir.appending("none.report")])
        #expect(missing.status == 1 && missing.err.contains("No such file"), "\(missing.err)")
    }
}
