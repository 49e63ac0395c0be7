import CairnTestSupport
import Foundation
import Testing

/// The memory budget gates `make test`: the benchmark exits non-zero and names the
/// figure when one is over its budget. Shown here by lowering a budget far below what
/// any process can meet (and raising it far above), on the whole-process memory of the
/// linked and idle states; `make test` runs the same gate with the real budgets on a
/// release build.
@Suite(.serialized) struct BenchmarkGateTests {
    func runBenchmark(_ arguments: [String]) throws -> (status: Int32, out: String, err: String) {
        try runCapturing(productsDirectory + "/CairnBenchmarks", arguments)
    }

    @Test func aFigureOverItsBudgetFailsTheRun() throws {
        let over = try runBenchmark(["--only", "memory-idle", "--json", "--budget", "rss_delta_kb_idle=1",
                                     // (a debug build's own figure may be over the real budget)
                                     "--budget", "rss_delta_kb_idle_essentials=10000000"])
        #expect(over.status == 1, "\(over.out) \(over.err)")
        #expect(over.err.contains("over budget: rss_delta_kb_idle"), "\(over.err)")
        #expect(over.out.contains(#""over_budget": ["rss_delta_kb_idle"]"#), "\(over.out)")
        // The figure was measured (a number, not null): the hosts ran.
        let json = try #require(try JSONSerialization.jsonObject(with: Data(over.out.utf8)) as? [String: Any])
        let idle = try #require(json["rss_delta_kb_idle"] as? Double)
        #expect(idle > 1)

        let within = try runBenchmark(["--only", "memory-idle", "--json", "--budget", "rss_delta_kb_idle=10000000",
                                       "--budget", "rss_delta_kb_linked=10000000",
                                       "--budget", "rss_delta_kb_idle_essentials=10000000"])
        #expect(within.status == 0, "\(within.out) \(within.err)")
        #expect(within.out.contains(#""over_budget": []"#), "\(within.out)")
    }
}
