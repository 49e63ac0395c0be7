// BenchFoundation: what the hosts of a service that uses Foundation do with it (see
// BenchHost).
import BenchHost
import Foundation

/// What a Swift service typically does with Foundation before any telemetry: what
/// ``useEssentialsLikeAService()`` does (JSON, dates, URLs, UUIDs, the environment),
/// then dates through a formatter, formatted strings and `JSONSerialization`, which are
/// Foundation's own. Its hosts call it once at start, so that the libraries and data it
/// brings in are part of the baseline.
@inline(never)
public func useFoundationLikeAService() -> Int {
    var bytes = useEssentialsLikeAService()
    bytes += ISO8601DateFormatter().string(from: Date()).count
    bytes += String(format: "%.3f ms", 1.25).count
    bytes += (try? JSONSerialization.data(withJSONObject: ["k": [1, 2, 3]])).map(\.count) ?? 0
    return bytes
}
