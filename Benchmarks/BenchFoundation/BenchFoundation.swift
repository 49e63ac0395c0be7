// BenchFoundation: what the hosts of a service that uses Foundation do with it (see
// BenchHost).
import Foundation

/// What a Swift service typically does with Foundation before any telemetry: JSON in and
/// out, dates and their formatting, URLs, UUIDs, the environment, formatted strings. Its
/// hosts call it once at start, so that the libraries and data it brings in are part of
/// the baseline.
@inline(never)
public func useFoundationLikeAService() -> Int {
    struct Order: Codable {
        var id: UUID
        var placed: Date
        var items: [String]
        var total: Double
        var callback: URL?
    }
    let order = Order(id: UUID(), placed: Date(), items: ["book", "pen"], total: 12.5,
                      callback: URL(string: "https://shop.example/orders?id=42"))
    let encoder = JSONEncoder()
    encoder.dateEncodingStrategy = .iso8601
    let decoder = JSONDecoder()
    decoder.dateDecodingStrategy = .iso8601
    var bytes = 0
    if let data = try? encoder.encode(order), let back = try? decoder.decode(Order.self, from: data) {
        bytes += data.count + back.items.count
    }
    let formatter = ISO8601DateFormatter()
    bytes += formatter.string(from: Date()).count
    bytes += String(format: "%.3f ms", 1.25).count
    bytes += ProcessInfo.processInfo.environment.count + ProcessInfo.processInfo.processIdentifier.bitWidth
    bytes += (try? JSONSerialization.data(withJSONObject: ["k": [1, 2, 3]])).map(\.count) ?? 0
    return bytes
}
