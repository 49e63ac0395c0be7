import Foundation

/// A directory of its own under the system's temporary directory, made now and removed
/// with everything in it when the value is released: the one scratch directory helper
/// of the tests.
///
/// ```swift
/// let dir = try TemporaryDirectory("cairn-up")
/// let ring = try Ring(path: dir.path + "/events.ring")
/// ```
public final class TemporaryDirectory: @unchecked Sendable {
    // @unchecked: `path` never changes.
    /// Its absolute path, without symbolic links (`/tmp/<prefix>-<pid>-<random>`).
    public let path: String

    /// Makes `<temporary directory>/<prefix>-<pid>-<8 random hex digits>`.
    public init(_ prefix: String = "cairn") throws {
        path = URL(fileURLWithPath: NSTemporaryDirectory()).standardizedFileURL.path
            + "/\(prefix)-\(getpid())-\(UUID().uuidString.prefix(8).lowercased())"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    deinit { try? FileManager.default.removeItem(atPath: path) }

    /// `path` with `/` and `name` appended.
    public func appending(_ name: String) -> String { path + "/" + name }
}

/// Polls `condition` every 20 ms for up to `seconds`; true as soon as it holds, else
/// what it says at the end.
public func eventually(_ seconds: Double, _ condition: () throws -> Bool) rethrows -> Bool {
    let end = Date().addingTimeInterval(seconds)
    while Date() < end {
        if try condition() { return true }
        usleep(20_000)
    }
    return try condition()
}
