import CairnTestSupport
import Foundation

/// What the ecosystem's tests share (they run with every integration's trait enabled, as `make
/// test` builds: the service process needs them all): the service process that uses the integrations
/// (cairn-ecosystem-child) and what the test collector received from it.
enum Ecosystem {
    static let child = productsDirectory + "/cairn-ecosystem-child"

    static func env(_ dir: String, _ collector: CollectorProcess, _ extra: [String: String] = [:]) -> [String: String] {
        var env = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("CAIRN_") && !$0.key.hasPrefix("OTEL_") }
        env["CAIRN_APP_ID"] = "orders"
        env["CAIRN_DISTINCT_ID"] = "host-7"
        env["CAIRN_DATA_DIR"] = dir
        env["CAIRN_BATCH_AGE_MS"] = "50"
        env["CAIRN_UPLOAD_URL"] = collector.baseURL + "/v1/batch"
        env["OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"] = collector.baseURL + "/v1/logs"
        env["OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"] = collector.baseURL + "/v1/metrics"
        return env.merging(extra) { $1 }
    }

    /// The native events the collector took, parsed.
    static func native(_ collector: CollectorProcess) throws -> [[String: Any]] {
        try collector.events().compactMap { try JSONSerialization.jsonObject(with: Data($0.record.utf8)) as? [String: Any] }
    }

    /// The OTLP metrics the collector decoded, each with its one data point as "point"
    /// and its kind ("sum", "gauge", "histogram") as "kind".
    static func otlpMetrics(_ collector: CollectorProcess) throws -> [[String: Any]] {
        var out: [[String: Any]] = []
        let metrics = try collector.rawRequests().filter { $0["path"] as? String == "/v1/metrics" }
            .compactMap { $0["otlp"] as? [String: Any] }
            .flatMap { ($0["resource_metrics"] as? [[String: Any]]) ?? [] }
            .flatMap { ($0["scope_metrics"] as? [[String: Any]]) ?? [] }
            .flatMap { ($0["metrics"] as? [[String: Any]]) ?? [] }
        for var metric in metrics {
            for kind in ["sum", "gauge", "histogram"] {
                guard let data = metric[kind] as? [String: Any] else { continue }
                metric["kind"] = kind
                metric["point"] = (data["data_points"] as? [[String: Any]])?.first
            }
            out.append(metric)
        }
        return out
    }

    /// The OTLP log records the collector decoded (with the official definitions).
    static func otlp(_ collector: CollectorProcess) throws -> [[String: Any]] {
        try collector.rawRequests().filter { $0["path"] as? String == "/v1/logs" }
            .compactMap { $0["otlp"] as? [String: Any] }
            .flatMap { ($0["resource_logs"] as? [[String: Any]]) ?? [] }
            .flatMap { ($0["scope_logs"] as? [[String: Any]]) ?? [] }
            .flatMap { ($0["log_records"] as? [[String: Any]]) ?? [] }
    }

    /// An OTLP record's attributes, each as its value's one member (`string_value`, ...).
    static func attributes(_ record: [String: Any]) -> [String: Any] {
        (record["attributes"] as? [[String: Any]] ?? []).reduce(into: [:]) { out, kv in
            out[kv["key"] as? String ?? ""] = (kv["value"] as? [String: Any])?.values.first
        }
    }

    static func props(_ e: [String: Any]) -> [String: Any] { e["properties"] as? [String: Any] ?? [:] }
}
