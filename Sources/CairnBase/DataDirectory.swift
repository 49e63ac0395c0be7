/// The layout of a data directory (docs/FORMATS.md): where the SDK and the `cairn`
/// command find each file, in one place.
///
/// ```swift
/// let layout = DataDirectory("/var/lib/orders/cairn")
/// layout.ring      // "/var/lib/orders/cairn/events.ring"
/// ```
package struct DataDirectory: Sendable, Hashable {
    /// The directory itself.
    package let path: String

    /// The layout of the data directory at `path`.
    package init(_ path: String) { self.path = path }

    /// The event ring file ("Ring file").
    package var ring: String { path + "/events.ring" }
    /// The snapshot store's LMDB environment, a directory ("Snapshot store").
    package var store: String { path + "/store" }
    /// The crash directory: run records and crash reports ("Crash directory").
    package var crash: String { path + "/crash" }
    /// The install record ("Install record").
    package var installRecord: String { path + "/install.json" }
}
