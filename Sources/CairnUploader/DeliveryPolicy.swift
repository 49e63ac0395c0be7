import Foundation

/// What the uploader does with a batch after an attempt.
public enum DeliveryAction: Sendable, Equatable {
    /// Delivered: release the records.
    case delivered
    /// Try again later (backoff, then the snapshot store).
    case retry
    /// Try again later, and pause every upload first (rate limiting, overload).
    case pauseAndRetry
    /// The collector refused the batch for good: drop it, counted as `reason`.
    case drop(reason: String)
}

/// The table from HTTP status codes to actions: data, not scattered `if`s, so that
/// remote configuration can change it.
///
/// The default: 2xx delivered; 408 and 5xx retried; 429 and 503 pause the uploader and
/// are retried; every other status dropped as `rejected_<status>`.
public struct StatusPolicy: Sendable, Equatable {
    /// One row: statuses in `range` map to `action`.
    public struct Rule: Sendable, Equatable {
        /// The statuses the rule covers.
        public var range: ClosedRange<Int>
        /// What to do with them.
        public var action: DeliveryAction
        /// Creates a rule.
        public init(_ range: ClosedRange<Int>, _ action: DeliveryAction) {
            self.range = range
            self.action = action
        }
    }

    /// Rules, first match wins.
    public var rules: [Rule]

    /// Creates a policy from rules; unmatched statuses are dropped.
    public init(rules: [Rule]) { self.rules = rules }

    /// The default table.
    public static let standard = StatusPolicy(rules: [
        Rule(200...299, .delivered),
        Rule(429...429, .pauseAndRetry),
        Rule(503...503, .pauseAndRetry),
        Rule(408...408, .retry),
        Rule(500...599, .retry),
    ])

    /// The action for `status`.
    public func action(for status: Int) -> DeliveryAction {
        rules.first { $0.range.contains(status) }?.action ?? .drop(reason: "rejected_\(status)")
    }
}

/// Exponential backoff with full jitter: attempt *n* waits a uniformly random time in
/// [0, min(cap, base × 2^n)].
public struct Backoff: Sendable, Equatable {
    /// The first ceiling.
    public var base: Duration
    /// The largest ceiling.
    public var cap: Duration

    /// Creates a backoff.
    public init(base: Duration = .milliseconds(500), cap: Duration = .seconds(30)) {
        self.base = base
        self.cap = cap
    }

    /// The wait before attempt `attempt + 1`, given a uniform random value in [0, 1).
    public func delay(afterAttempt attempt: Int, random: Double) -> Duration {
        let ceiling = min(cap, base * Double(1 << min(max(attempt, 0), 30)))
        return ceiling * min(max(random, 0), 1)
    }
}

/// Parses a `Retry-After` value: delay-seconds or an HTTP date, relative to `now`.
/// Returns `nil` when the value is neither.
public func parseRetryAfter(_ value: String, now: Date = Date()) -> Duration? {
    let trimmed = value.trimmingCharacters(in: .whitespaces)
    if let seconds = Int(trimmed), seconds >= 0 { return .seconds(seconds) }
    let f = DateFormatter()
    f.locale = Locale(identifier: "en_US_POSIX")
    f.timeZone = TimeZone(identifier: "GMT")
    for format in ["EEE, dd MMM yyyy HH:mm:ss zzz", "EEEE, dd-MMM-yy HH:mm:ss zzz", "EEE MMM d HH:mm:ss yyyy"] {
        f.dateFormat = format
        if let date = f.date(from: trimmed) {
            let interval = max(0, date.timeIntervalSince(now))
            return .milliseconds(Int64(interval * 1000))
        }
    }
    return nil
}

/// A circuit breaker: after `threshold` consecutive failures it opens, and sends
/// nothing until `probeAfter` has passed; then one probe is let through (half-open):
/// a success closes it, a failure opens it again.
public struct CircuitBreaker: Sendable, Equatable {
    /// The breaker's state.
    public enum State: Sendable, Equatable {
        /// Sending normally.
        case closed
        /// Not sending until the instant (a monotonic time).
        case open(until: ContinuousClock.Instant)
        /// One probe is in flight.
        case halfOpen
    }

    /// Consecutive failures that open the breaker.
    public var threshold: Int
    /// How long it stays open before a probe.
    public var probeAfter: Duration
    /// The current state.
    public private(set) var state: State = .closed
    /// Consecutive failures so far.
    public private(set) var failures = 0
    /// How many times it has opened.
    public private(set) var openings = 0

    /// Creates a closed breaker.
    public init(threshold: Int = 5, probeAfter: Duration = .seconds(30)) {
        self.threshold = max(1, threshold)
        self.probeAfter = probeAfter
    }

    /// Whether an attempt may be made at `now`; moves an open breaker whose time is up
    /// to half-open (the attempt is the probe).
    public mutating func allows(at now: ContinuousClock.Instant) -> Bool {
        switch state {
        case .closed: return true
        case .halfOpen: return false
        case .open(let until):
            guard now >= until else { return false }
            state = .halfOpen
            return true
        }
    }

    /// Records a delivered attempt: closes the breaker.
    public mutating func succeeded() {
        failures = 0
        state = .closed
    }

    /// Records a failed attempt at `now`.
    public mutating func failed(at now: ContinuousClock.Instant) {
        failures += 1
        if state == .halfOpen || failures >= threshold {
            openings += 1
            state = .open(until: now + probeAfter)
        }
    }
}
