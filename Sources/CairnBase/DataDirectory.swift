/// The layout of a data directory (docs/FORMATS.md): where the SDK and the `cairn`
/// command find each file, in one place.
///
/// ```swift
/// let layout = DataDirectory("/var/lib/orders/cairn")
/// layout.ring      // "/var/lib/orders/cairn/events.ring"
/// ```
public struct DataDirectory: Sendable, Hashable {
    /// The directory itself.
    public let path: String

    /// The layout of the data directory at `path`.
    public init(_ path: String) { self.path = path }

    /// The event ring file ("Ring file").
    public var ring: String { path + "/events.ring" }
    /// The snapshot store's LMDB environment, a directory ("Snapshot store").
    public var store: String { path + "/store" }
    /// The crash directory: run records and crash reports ("Crash directory").
    public var crash: String { path + "/crash" }
    /// The install record ("Install record").
    public var installRecord: String { path + "/install.json" }
}
