/// How much an event matters: decides sampling, shedding under load, and where and how
/// long it is kept (the snapshot store's priority, which its caps evict lowest first).
///
/// Ordered by importance: `critical < important < sampled < debug`, so sorting puts what
/// matters most first.
public enum Tier: String, Sendable, CaseIterable, Comparable {
    /// Must not be lost: crashes, session ends, billing. Never sampled or shed; stored
    /// with a durable sync.
    case critical
    /// Kept unless the service is configured otherwise.
    case important
    /// High-volume events; the tier `SamplingOptions.rate` applies to.
    case sampled
    /// Diagnostics; the first to go.
    case debug

    /// The tier as one byte on disk (the snapshot store's priority byte): 0 critical,
    /// 1 important, 2 sampled, 3 debug.
    public var code: UInt8 {
        switch self {
        case .critical: 0
        case .important: 1
        case .sampled: 2
        case .debug: 3
        }
    }

    /// The tier stored as `code`, or nil for a byte that names none.
    public init?(code: UInt8) {
        switch code {
        case 0: self = .critical
        case 1: self = .important
        case 2: self = .sampled
        case 3: self = .debug
        default: return nil
        }
    }

    /// `true` when `lhs` is more important than `rhs`.
    public static func < (lhs: Tier, rhs: Tier) -> Bool { lhs.code < rhs.code }
}
