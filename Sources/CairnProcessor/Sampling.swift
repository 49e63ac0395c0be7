// Tiers and sampling: decided on the caller's thread inside `track()`, so a decision hashes
// a few short strings in place and allocates nothing. The hash and the decision rule are
// specified in docs/FORMATS.md, "Sampling, filtering and deduplication", so that every SDK
// variant keeps exactly the same events.

public import CairnBase

/// A stable 64-bit hash, identical in every process and every SDK variant.
///
/// FNV-1a, 64 bits (offset basis `0xcbf29ce484222325`, prime `0x100000001b3`), over the
/// UTF-8 bytes of the parts with one `0x1F` byte (unit separator) between consecutive
/// parts, none before the first or after the last; then MurmurHash3's 64-bit finalizer
/// (`fmix64`):
///
/// ```swift
/// StableHash.hash64("user-1", "checkout", "20000")
/// // fmix64(FNV-1a of "user-1" 0x1F "checkout" 0x1F "20000")
/// ```
///
/// The finalizer is there because sampling compares the hash with a threshold, which
/// reads its high bits, and FNV-1a alone barely changes them when only the last bytes
/// differ (the day of one user's event). It is a bijection, so it adds no collisions.
///
/// A part that itself contains `0x1F` hashes like two parts; callers that must tell those
/// apart do not put `0x1F` in their parts.
package enum StableHash {
    /// The hash of `parts`, joined with `0x1F`.
    package static func hash64(_ parts: String...) -> UInt64 {
        hash64(parts: parts)
    }

    /// The hash of `parts`, joined with `0x1F`; an empty list hashes no bytes
    /// (`fmix64` of the offset basis).
    package static func hash64(parts: [String]) -> UInt64 {
        var hasher = Hasher()
        for (index, part) in parts.enumerated() {
            if index > 0 { hasher.separator() }
            hasher.feed(part)
        }
        return hasher.finalized
    }

    /// FNV-1a fed incrementally, so callers hash their parts without joining them.
    struct Hasher {
        static var offsetBasis: UInt64 { FNV1a.offsetBasis }
        static var prime: UInt64 { FNV1a.prime }
        static let separatorByte: UInt8 = 0x1F

        /// The FNV-1a state: the bytes fed so far.
        private(set) var state: UInt64 = offsetBasis

        /// The hash of the bytes fed so far: the FNV-1a state through `fmix64`.
        var finalized: UInt64 {
            var k = state
            k ^= k >> 33
            k &*= 0xff51_afd7_ed55_8ccd
            k ^= k >> 33
            k &*= 0xc4ce_b9fe_1a85_ec53
            k ^= k >> 33
            return k
        }

        @inline(__always)
        mutating func feed(_ byte: UInt8) {
            state = (state ^ UInt64(byte)) &* Self.prime
        }

        @inline(__always)
        mutating func feed(_ text: String) {
            // Works on a local copy of the state: a closure that mutates `self` is not
            // optimised into a plain loop.
            var h = state
            let done: Void? = text.utf8.withContiguousStorageIfAvailable { bytes in
                for byte in bytes { h = (h ^ UInt64(byte)) &* Self.prime }
            }
            if done == nil {
                for byte in text.utf8 { h = (h ^ UInt64(byte)) &* Self.prime }
            }
            state = h
        }

        @inline(__always)
        mutating func separator() {
            feed(Self.separatorByte)
        }

        /// Feeds `count` hex digits of `value` (lowercase, most significant first),
        /// a `-` before the digits at the offsets in `dashes`.
        @inline(__always)
        mutating func feedHex(_ value: UInt64, count: Int = 16, dashesBefore dashes: (Int, Int) = (-1, -1)) {
            var h = state
            for n in 0..<count {
                if n == dashes.0 || n == dashes.1 { h = (h ^ 0x2D) &* Self.prime }
                let nibble = UInt8(truncatingIfNeeded: (value >> UInt64(4 * (count - 1 - n))) & 0xF)
                h = (h ^ UInt64(Hex.digit(nibble))) &* Self.prime
            }
            state = h
        }

        /// Feeds the decimal text of `number` (`String(number)`: ASCII digits, most
        /// significant first, a leading `-` when negative, no leading zeros).
        mutating func feedDecimal(_ number: Int64) {
            if number < 0 { feed(UInt8(ascii: "-")) }
            var magnitude = number.magnitude
            // Digits least significant first, into a stack buffer (Int64 has at most 19).
            var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)
            let count = withUnsafeMutableBytes(of: &digits) { buffer in
                var count = 0
                repeat {
                    buffer[count] = UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: magnitude % 10)
                    magnitude /= 10
                    count += 1
                } while magnitude > 0
                return count
            }
            var h = state
            withUnsafeBytes(of: &digits) { buffer in
                for index in stride(from: count - 1, through: 0, by: -1) {
                    h = (h ^ UInt64(buffer[index])) &* Self.prime
                }
            }
            state = h
        }
    }
}

/// Sampling rates. Every rate is clamped to `0...1`; NaN counts as 1.
///
/// The rate that applies to an event is, in order:
/// 1. 1 for ``Tier/critical`` events, whatever is configured (critical is never sampled);
/// 2. `eventRates[name]` when the event's name has an entry;
/// 3. for ``Tier/sampled`` events, the lower of ``rate`` and `tierRates[.sampled]`;
/// 4. otherwise `tierRates[tier]`, or 1 when the tier has no entry.
///
/// Events flagged as errors are kept whatever their rate while ``keepErrors`` is set.
public struct SamplingOptions: Sendable, Equatable {
    /// The rate of the ``Tier/sampled`` tier; server configuration usually sets this one.
    public var rate: Double
    /// Rates by tier; the entry for ``Tier/critical`` is ignored (forced to 1).
    public var tierRates: [Tier: Double]
    /// Rates by event name; they win over the tier's rate (but not over critical or errors).
    public var eventRates: [String: Double]
    /// Events flagged as errors are always kept.
    public var keepErrors: Bool

    /// Options that keep everything unless told otherwise.
    public init(
        rate: Double = 1.0,
        tierRates: [Tier: Double] = [.critical: 1, .important: 1, .sampled: 1, .debug: 1],
        eventRates: [String: Double] = [:],
        keepErrors: Bool = true
    ) {
        self.rate = rate
        self.tierRates = tierRates
        self.eventRates = eventRates
        self.keepErrors = keepErrors
    }
}

/// Decides which events to keep, deterministically, in every process and SDK variant:
/// the same key always gives the same answer. What the key is depends on what the event
/// belongs to (``SamplingKey``): its trace (a trace's events are kept or dropped
/// together, in every service that samples at the same rate), the identity given with
/// the call (a user's events of one name, for a whole UTC day), or the event itself.
///
/// ```swift
/// let sampler = Sampler(options: SamplingOptions(rate: 0.1))
/// if sampler.keep(distinctID: "user-1", eventName: "page_view", tier: .sampled,
///                 isError: false, day: 20_454) { … }
/// ```
package struct Sampler: Sendable {
    /// A rate turned into the comparison the decision makes.
    private struct Threshold: Sendable {
        let rate: Double
        /// Keep when the hash is below this (unused when `keepAll`).
        let limit: UInt64
        let keepAll: Bool

        init(_ configured: Double) {
            rate = configured.isNaN ? 1 : min(max(configured, 0), 1)
            keepAll = rate >= 1
            // rate < 1 here, so rate * 2^64 < 2^64 and the conversion cannot trap.
            limit = keepAll ? .max : UInt64(rate * 18_446_744_073_709_551_616.0)
        }
    }

    /// Rates by event name. A few names (the common case) are compared one by one, which
    /// is several times faster than hashing the name for a dictionary lookup.
    private enum EventThresholds: Sendable {
        case few([(name: String, threshold: Threshold)])
        case many([String: Threshold])

        static let fewLimit = 8

        init(_ rates: [String: Double]) {
            if rates.count <= Self.fewLimit {
                self = .few(rates.map { ($0.key, Threshold($0.value)) })
            } else {
                self = .many(rates.mapValues(Threshold.init))
            }
        }

        @inline(__always)
        func threshold(for name: String) -> Threshold? {
            switch self {
            case .few(let entries):
                for entry in entries where entry.name == name { return entry.threshold }
                return nil
            case .many(let table):
                return table[name]
            }
        }
    }

    private let tierThresholds: [Threshold]
    private let eventThresholds: EventThresholds
    private let keepErrors: Bool

    /// A sampler for `options`; rates are clamped and converted once, here.
    package init(options: SamplingOptions) {
        tierThresholds = Tier.allCases.map { tier in
            switch tier {
            case .critical: Threshold(1)
            case .sampled: Threshold(min(Threshold(options.rate).rate, Threshold(options.tierRates[.sampled] ?? 1).rate))
            default: Threshold(options.tierRates[tier] ?? 1)
            }
        }
        eventThresholds = EventThresholds(options.eventRates)
        keepErrors = options.keepErrors
    }

    /// Keep or drop: deterministic for (distinctID, eventName, day). `day` = days since
    /// the Unix epoch in UTC (passed in; the sampler does not read the clock).
    ///
    /// Keeps when the event is critical, or an error while `keepErrors` is set, or when
    /// `StableHash.hash64(distinctID, eventName, String(day)) < UInt64(rate × 2^64)`
    /// (rate 1 keeps everything, rate 0 nothing).
    package func keep(distinctID: String, eventName: String, tier: Tier, isError: Bool, day: Int64) -> Bool {
        decide(eventName: eventName, tier: tier, isError: isError) { hasher in
            hasher.feed(distinctID)
            hasher.separator()
            hasher.feed(eventName)
            hasher.separator()
            hasher.feedDecimal(day)
        }
    }

    /// Keep or drop an event of trace `traceID`: deterministic for the trace, so all of
    /// its events of a rate are kept or dropped together. Keeps as
    /// ``keep(distinctID:eventName:tier:isError:day:)`` does, with
    /// `StableHash.hash64(traceID.description)` (its 32 lowercase hex digits) as the hash.
    package func keep(traceID: TraceID, eventName: String, tier: Tier, isError: Bool) -> Bool {
        decide(eventName: eventName, tier: tier, isError: isError) { hasher in
            hasher.feedHex(traceID.high)
            hasher.feedHex(traceID.low)
        }
    }

    /// Keep or drop one event on its own: deterministic for its event id (`id`, the two
    /// words ``EventIDGenerator`` makes), so the decision can be checked from the
    /// `event_id` the collector receives. Keeps as
    /// ``keep(distinctID:eventName:tier:isError:day:)`` does, with
    /// `StableHash.hash64(event_id)` (its 36-character text) as the hash.
    package func keep(eventID id: (UInt64, UInt64), eventName: String, tier: Tier, isError: Bool) -> Bool {
        decide(eventName: eventName, tier: tier, isError: isError) { hasher in
            hasher.feedHex(id.0, dashesBefore: (8, 12))
            hasher.feedHex(id.1, dashesBefore: (0, 4))
        }
    }

    /// Whether events of this name and tier are all kept whatever their key (critical,
    /// an error kept by ``SamplingOptions/keepErrors``, or a rate of 1).
    @inline(__always)
    package func keepsAll(eventName: String, tier: Tier, isError: Bool) -> Bool {
        tier == .critical || (isError && keepErrors) || threshold(eventName: eventName, tier: tier).keepAll
    }

    /// Keep or drop by `key`: ``SamplingKey`` says which of the three rules applies.
    package func keep(_ key: SamplingKey, eventName: String, tier: Tier, isError: Bool) -> Bool {
        switch key {
        case .trace(let trace): keep(traceID: trace, eventName: eventName, tier: tier, isError: isError)
        case .identity(let distinctID, let day):
            keep(distinctID: distinctID, eventName: eventName, tier: tier, isError: isError, day: day)
        case .event(let high, let low): keep(eventID: (high, low), eventName: eventName, tier: tier, isError: isError)
        }
    }

    /// The decision once the key's bytes are fed by `feed`, which runs only when the
    /// rate is strictly between 0 and 1.
    @inline(__always)
    private func decide(eventName: String, tier: Tier, isError: Bool,
                        feed: (inout StableHash.Hasher) -> Void) -> Bool {
        if tier == .critical || (isError && keepErrors) { return true }
        let threshold = self.threshold(eventName: eventName, tier: tier)
        if threshold.keepAll { return true }
        if threshold.limit == 0 { return false }
        var hasher = StableHash.Hasher()
        feed(&hasher)
        return hasher.finalized < threshold.limit
    }

    /// The rate that applies to events of this name and tier (for reporting), after
    /// clamping; errors kept by `keepErrors` are not reflected.
    package func rate(eventName: String, tier: Tier) -> Double {
        threshold(eventName: eventName, tier: tier).rate
    }

    @inline(__always)
    private func threshold(eventName: String, tier: Tier) -> Threshold {
        if tier != .critical, let byName = eventThresholds.threshold(for: eventName) { return byName }
        return tierThresholds[tierIndex(tier)]
    }

    @inline(__always)
    private func tierIndex(_ tier: Tier) -> Int {
        switch tier {
        case .critical: 0
        case .important: 1
        case .sampled: 2
        case .debug: 3
        }
    }
}

/// What a sampling decision is keyed on (docs/FORMATS.md, "Sampling"): the processor
/// picks the first that applies to an event.
package enum SamplingKey: Sendable, Hashable {
    /// The event happened inside a span: its trace. A trace is kept or dropped whole, in
    /// every service that samples at the same rate.
    case trace(TraceID)
    /// An identity was given with the call: that distinct id, for the event's UTC day
    /// (days since 1970-01-01). One user's events of one name go together for a day.
    case identity(distinctID: String, day: Int64)
    /// Otherwise, the event itself: its event id's two words. Each event is decided on
    /// its own, so a service whose events all carry its host as the distinct id keeps
    /// the configured share of them.
    case event(high: UInt64, low: UInt64)
}
