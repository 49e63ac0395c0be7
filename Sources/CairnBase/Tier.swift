/// How much an event matters; decides sampling, storage and what goes first under
/// overload, and in the snapshot store, what its size cap evicts last.
///
/// Ordered by importance: `critical < important < sampled < debug`, so sorting puts what
/// matters most first.
public enum Tier: String, Sendable, CaseIterable, Comparable {
    /// Must not be lost: crashes, session ends, billing. Never sampled; stored with a
    /// durable sync.
    case critical
    /// Kept unless the service is configured otherwise.
    case important
    /// High-volume events; the tier `SamplingOptions.rate` applies to.
    case sampled
    /// Diagnostics; the first to go.
    case debug

    /// 0 for critical ... 3 for debug: the order, and the byte the snapshot store keeps
    /// (docs/FORMATS.md, "Database `snapshots`").
    @inlinable
    package var storeCode: UInt8 {
        switch self {
        case .critical: 0
        case .important: 1
        case .sampled: 2
        case .debug: 3
        }
    }

    /// The tier of a store byte; nil for a byte no tier has.
    @inlinable
    package init?(storeCode: UInt8) {
        switch storeCode {
        case 0: self = .critical
        case 1: self = .important
        case 2: self = .sampled
        case 3: self = .debug
        default: return nil
        }
    }

    /// `true` when `lhs` is more important than `rhs`.
    @inlinable
    public static func < (lhs: Tier, rhs: Tier) -> Bool { lhs.storeCode < rhs.storeCode }

    /// The same tier. (Declared so that a comparison compiles to one of the cases, not
    /// to the raw value's `String` comparison of `RawRepresentable`.)
    @inlinable
    public static func == (lhs: Tier, rhs: Tier) -> Bool { lhs.storeCode == rhs.storeCode }
}
