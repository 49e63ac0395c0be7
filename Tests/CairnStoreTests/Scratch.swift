import CairnTestSupport

/// A fresh directory for one test, removed afterwards, with where its store lives.
final class Scratch {
    private let directory = try? TemporaryDirectory("cairn-store-test")
    var path: String { directory?.path ?? "/nonexistent" }
    /// Where a snapshot store lives inside it.
    var store: String { path + "/store" }
}
