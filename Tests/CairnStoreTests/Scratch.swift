import Foundation

/// A fresh directory for one test, removed afterwards.
final class Scratch {
    let path = URL(fileURLWithPath: NSTemporaryDirectory()).standardizedFileURL.path
        + "/cairn-store-test-\(getpid())-\(UUID().uuidString.prefix(8))"
    init() { try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true) }
    deinit { try? FileManager.default.removeItem(atPath: path) }
    /// Where a snapshot store lives inside it.
    var store: String { path + "/store" }
}
