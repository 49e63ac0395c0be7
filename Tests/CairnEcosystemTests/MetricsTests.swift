#if Logging && Metrics && ServiceLifecycle
import CairnTestSupport
import Foundation
import Testing

/// swift-metrics with `CairnMetricsFactory`, in a service process (cairn-ecosystem-child
/// `metrics`, which uses swift-metrics' own API only): the `metric` events the collector
/// receives, field by field (docs/FORMATS.md, "Metric reports").
@Suite(.serialized) struct MetricsTests {
    /// The reports, by label and dimensions (`label{k=v,...}`), in the order sent.
    static func reports(_ collector: CollectorProcess) throws -> [String: [[String: Any]]] {
        var out: [String: [[String: Any]]] = [:]
        let events = try Ecosystem.native(collector).filter { $0["type"] as? String == "metric" }
            .sorted { ($0["time"] as? String ?? "") < ($1["time"] as? String ?? "") }
        for e in events {
            let p = Ecosystem.props(e)
            let dims = (p["dimensions"] as? [String: String] ?? [:]).sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
            out[(e["name"] as? String ?? "?") + "{" + dims.joined(separator: ",") + "}", default: []].append(p)
        }
        return out
    }

    /// Every kind of metric, aggregated and reported every interval, then once more at
    /// shutdown: cumulative sums, gauges, histograms with the documented buckets, a
    /// timer in seconds; dimensions in any order are one series; a dimension value
    /// passes the privacy rules; past the series cap, new series go to the label's
    /// overflow series and are counted; a destroyed series is reported once more, then
    /// never again.
    @Test func metricsAreReportedAsMetricEvents() throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        let dir = try TemporaryDirectory("cairn-metrics")
        let r = try runToEnd(Ecosystem.child, ["metrics"],
                             environment: Ecosystem.env(dir.path, collector),
                             timeout: 60)
        #expect(r.status == 0, "\(r.err)")
        let reports = try Self.reports(collector)
        func last(_ series: String) -> [String: Any] { reports[series]?.last ?? [:] }

        let orders = try #require(reports["orders_placed{plan=pro,region=eu}"], "\(reports.keys.sorted())")
        #expect(orders.count >= 4, "reported every interval, then at shutdown: \(orders.count)")
        let o = last("orders_placed{plan=pro,region=eu}")
        #expect(o["kind"] as? String == "sum" && o["monotonic"] as? Bool == true && o["temporality"] as? String == "cumulative")
        #expect(o["value"] as? Int == 7 && (o["start_ms"] as? Int ?? 0) > 1_700_000_000_000)
        #expect(orders.allSatisfy { $0["value"] as? Int == 7 }, "cumulative: the same total in every report")

        #expect(last("revenue{}")["value"] as? Double == 25.0 && last("revenue{}")["kind"] as? String == "sum")
        #expect(last("queue_depth{}")["kind"] as? String == "gauge" && last("queue_depth{}")["value"] as? Double == 9)
        #expect(last("temperature{}")["kind"] as? String == "gauge" && last("temperature{}")["value"] as? Double == 21.5)

        let payload = last("payload_bytes{}")
        #expect(payload["kind"] as? String == "histogram" && payload["count"] as? Int == 4)
        #expect(payload["sum"] as? Double == 20310 && payload["min"] as? Double == 3 && payload["max"] as? Double == 20000)
        let bounds = payload["bounds"] as? [Double] ?? []
        #expect(bounds == [0, 5, 10, 25, 50, 75, 100, 250, 500, 750, 1000, 2500, 5000, 7500, 10000])
        // 3 → (0, 5], 7 → (5, 10], 300 → (250, 500], 20000 → above the last bound.
        var expected = [Int](repeating: 0, count: 16)
        expected[1] = 1; expected[2] = 1; expected[8] = 1; expected[15] = 1
        #expect(payload["counts"] as? [Int] == expected, "\(payload["counts"] ?? "")")

        let query = last("db_query{table=orders}")
        #expect(query["kind"] as? String == "histogram" && query["unit"] as? String == "s" && query["count"] as? Int == 2)
        #expect(abs((query["sum"] as? Double ?? 0) - 0.032) < 1e-9 && query["min"] as? Double == 0.002)
        let timerCounts = query["counts"] as? [Int] ?? []
        #expect(timerCounts.count == 15 && timerCounts[0] == 1 && timerCounts[3] == 1, "2 ms ≤ 5 ms; 30 ms in (25, 50] ms")

        let signups = reports.keys.filter { $0.hasPrefix("signups{") }
        #expect(signups.count == 1 && !signups[0].contains("alice@example.com"), "masked: \(signups)")

        let perUser = reports.keys.filter { $0.hasPrefix("per_user{") }
        let overflow = last("per_user{otel.metric.overflow=true}")
        let kept = perUser.filter { !$0.contains("otel.metric.overflow") }
        #expect(kept.count + (overflow["value"] as? Int ?? 0) == 30, "\(perUser.sorted())")
        #expect(kept.count == 12 && overflow["value"] as? Int == 18, "8 series before them, 20 at most: \(perUser.sorted())")
        let health = try Ecosystem.native(collector).filter { $0["name"] as? String == "sdk_health" }
        let counted = health.compactMap { (Ecosystem.props($0)["changed"] as? [String: Any])?["metric_series_overflow"] as? Int }
        #expect(counted.reduce(0, +) == overflow["value"] as? Int, "each series made past the cap is counted: \(counted)")

        // The same reports as OTLP metrics, decoded with the official definitions.
        let otlp = try Ecosystem.otlpMetrics(collector)
        #expect(!(try Ecosystem.otlp(collector)).contains { ($0["event_name"] as? String) == "orders_placed" },
                "metric reports are not OTLP log records")
        func lastOTLP(_ name: String) -> [String: Any] { otlp.last { $0["name"] as? String == name } ?? [:] }
        let placed = lastOTLP("orders_placed")
        let placedPoint = placed["point"] as? [String: Any] ?? [:]
        #expect(placed["kind"] as? String == "sum" && placedPoint["as_int"] as? String == "7", "\(placed)")
        let placedDims = (placedPoint["attributes"] as? [[String: Any]] ?? []).compactMap { $0["key"] as? String }.sorted()
        #expect(placedDims == ["plan", "region"])
        let queryPoint = lastOTLP("db_query")["point"] as? [String: Any] ?? [:]
        #expect(lastOTLP("db_query")["unit"] as? String == "s" && queryPoint["count"] as? String == "2")
        #expect((queryPoint["bucket_counts"] as? [String])?.count == 15)
        #expect((lastOTLP("queue_depth")["point"] as? [String: Any])?["as_double"] as? Double == 9)
        #expect(otlp.filter { $0["name"] as? String == "orders_placed" }.count == orders.count,
                "each native report is one OTLP metric")

        let shortLived = try #require(reports["short_lived{}"])
        #expect(shortLived.allSatisfy { $0["value"] as? Int == 5 })
        #expect(shortLived.count < orders.count - 2, "no report after the one that followed destroy: \(shortLived.count) of \(orders.count)")
    }
}
#endif
