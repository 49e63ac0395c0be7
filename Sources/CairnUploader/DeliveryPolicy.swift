import CairnStore
package import CairnBase
package import FoundationEssentials

/// What the uploader does with a batch after an attempt.
package enum DeliveryAction: Sendable, Equatable {
    /// Delivered: release the records.
    case delivered
    /// Try again later (backoff, then the snapshot store).
    case retry
    /// Try again later, and pause every upload first (rate limiting, overload).
    case pauseAndRetry
    /// The collector refused the batch for good: drop it, counted as `reason`. Only for
    /// what the payload itself makes final (400, 413, 422): nothing else is ever dropped.
    case drop(reason: DropReason)
    /// The configuration was refused (a redirect, a refused key, a wrong path, a proxy
    /// asking for credentials, a status nobody expected, a request that cannot be sent as
    /// configured): keep the request stored, wait long (``UploaderOptions/holdBackoff``),
    /// and probe again with one request. A process whose URL or key differs tries every
    /// stored request at once, so fixing the configuration rescues what waits on disk.
    case hold
}

/// The table from HTTP status codes to actions: data, not scattered `if`s, so that
/// remote configuration can change it.
///
/// The default (docs/FORMATS.md, "Status codes"): 2xx delivered; 408 and 5xx retried;
/// 429 and 503 pause the uploader and are retried; 400, 413 and 422, which say the
/// payload itself is bad, dropped as `rejected_<status>` (counted); every other status
/// (3xx, 401, 403, 404, 407, anything unknown) held: kept on disk until the URL or the
/// credentials change. Redirects are never followed (the API key must not travel).
package struct StatusPolicy: Sendable, Equatable {
    /// One row: statuses in `range` map to `action`.
    package struct Rule: Sendable, Equatable {
        /// The statuses the rule covers.
        package var range: ClosedRange<Int>
        /// What to do with them.
        package var action: DeliveryAction
        /// Creates a rule.
        package init(_ range: ClosedRange<Int>, _ action: DeliveryAction) {
            self.range = range
            self.action = action
        }
    }

    /// Rules, first match wins.
    package var rules: [Rule]

    /// Creates a policy from rules; unmatched statuses are held (``DeliveryAction/hold``).
    package init(rules: [Rule]) { self.rules = rules }

    /// The default table.
    package static let standard = StatusPolicy(rules: [
        Rule(200...299, .delivered),
        Rule(429...429, .pauseAndRetry),
        Rule(503...503, .pauseAndRetry),
        Rule(408...408, .retry),
        Rule(500...599, .retry),
        Rule(400...400, .drop(reason: .rejected(status: 400))),
        Rule(413...413, .drop(reason: .rejected(status: 413))),
        Rule(422...422, .drop(reason: .rejected(status: 422))),
    ])

    /// The OTLP exporter's table (docs/FORMATS.md, "OTLP export", "Answers", after the
    /// specification): 2xx delivered; 429 and 503 pause and are retried (with their
    /// `Retry-After`), 502 and 504 retried; 401 and 403 held (new credentials rescue
    /// what waits); every other status dropped as `otlp_rejected`.
    package static let otlp = StatusPolicy(rules: [
        Rule(200...299, .delivered),
        Rule(429...429, .pauseAndRetry),
        Rule(503...503, .pauseAndRetry),
        Rule(502...502, .retry),
        Rule(504...504, .retry),
        Rule(401...401, .hold),
        Rule(403...403, .hold),
        Rule(100...599, .drop(reason: .otlpRejected)),
    ])

    /// The action for `status`.
    package func action(for status: Int) -> DeliveryAction {
        rules.first { $0.range.contains(status) }?.action ?? .hold
    }
}

/// Exponential backoff with full jitter: attempt *n* waits a uniformly random time in
/// [0, min(cap, base × 2^n)].
package struct Backoff: Sendable, Equatable {
    /// The first ceiling.
    package var base: Duration
    /// The largest ceiling.
    package var cap: Duration

    /// Creates a backoff.
    package init(base: Duration = .milliseconds(500), cap: Duration = .seconds(30)) {
        self.base = base
        self.cap = cap
    }

    /// The wait before attempt `attempt + 1`, given a uniform random value in [0, 1).
    package func delay(afterAttempt attempt: Int, random: Double) -> Duration {
        let ceiling = min(cap, base * Double(1 << min(max(attempt, 0), 30)))
        return ceiling * min(max(random, 0), 1)
    }
}


/// Seconds since 1970 of an HTTP date (RFC 9110, 5.6.7) in any of its three forms:
/// `Sun, 06 Nov 1994 08:49:37 GMT` (the one to send), `Sunday, 06-Nov-94 08:49:37 GMT`
/// and `Sun Nov  6 08:49:37 1994`; nil for anything else. The weekday is not checked.
func httpDateSeconds(_ text: String) -> Int? {
    let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
    func number(_ s: Substring, digits: ClosedRange<Int>) -> Int? {
        guard digits.contains(s.count), s.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        return Int(s)
    }
    func clock(_ s: Substring) -> (Int, Int, Int)? {
        let p = s.split(separator: ":", omittingEmptySubsequences: false)
        guard p.count == 3, let h = number(p[0], digits: 2...2), let m = number(p[1], digits: 2...2),
              let sec = number(p[2], digits: 2...2), h < 24, m < 60, sec < 61 else { return nil }
        return (h, m, sec)
    }
    let words = text.split(separator: " ")
    var day: Int?, month: Int?, year: Int?, time: (Int, Int, Int)?
    if words.count == 6, words[0].hasSuffix(","), words[5] == "GMT" {
        // IMF-fixdate: Sun, 06 Nov 1994 08:49:37 GMT
        day = number(words[1], digits: 2...2)
        month = months.firstIndex { $0 == words[2] }
        year = number(words[3], digits: 4...4)
        time = clock(words[4])
    } else if words.count == 4, words[0].hasSuffix(","), words[3] == "GMT" {
        // Obsolete RFC 850: Sunday, 06-Nov-94 08:49:37 GMT (two-digit years: 1970-2069)
        let d = words[1].split(separator: "-", omittingEmptySubsequences: false)
        if d.count == 3, let yy = number(d[2], digits: 2...2) {
            day = number(d[0], digits: 2...2)
            month = months.firstIndex { $0 == d[1] }
            year = yy < 70 ? 2000 + yy : 1900 + yy
        }
        time = clock(words[2])
    } else if words.count == 5 {
        // asctime: Sun Nov  6 08:49:37 1994
        month = months.firstIndex { $0 == words[1] }
        day = number(words[2], digits: 1...2)
        time = clock(words[3])
        year = number(words[4], digits: 4...4)
    }
    guard let day, let month, let year, let (h, m, s) = time, (1...31).contains(day) else { return nil }
    // Days from the civil date (proleptic Gregorian), Howard Hinnant's algorithm.
    let y = month < 2 ? year - 1 : year
    let era = (y >= 0 ? y : y - 399) / 400
    let yoe = y - era * 400
    let mp = (month + 10) % 12  // March first; `month` counts from 0
    let doy = (153 * mp + 2) / 5 + day - 1
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
    let days = era * 146_097 + doe - 719_468
    return days * 86_400 + h * 3_600 + m * 60 + s
}

/// A circuit breaker: after `threshold` consecutive failures it opens, and sends
/// nothing until `probeAfter` has passed; then one probe is let through (half-open):
/// a success closes it, a failure opens it again.
package struct CircuitBreaker: Sendable, Equatable {
    /// The breaker's state.
    package enum State: Sendable, Equatable {
        /// Sending normally.
        case closed
        /// Not sending until the instant (a monotonic time).
        case open(until: ContinuousClock.Instant)
        /// One probe is in flight.
        case halfOpen
    }

    /// Consecutive failures that open the breaker.
    package var threshold: Int
    /// How long it stays open before a probe.
    package var probeAfter: Duration
    /// The current state.
    package private(set) var state: State = .closed
    /// Consecutive failures so far.
    package private(set) var failures = 0
    /// How many times it has opened.
    package private(set) var openings = 0

    /// Creates a closed breaker.
    package init(threshold: Int = 5, probeAfter: Duration = .seconds(30)) {
        self.threshold = max(1, threshold)
        self.probeAfter = probeAfter
    }

    /// Whether ``allows(at:)`` would let an attempt through at `now`, without moving
    /// the breaker: for looking before the work of preparing one.
    package func wouldAllow(at now: ContinuousClock.Instant) -> Bool {
        switch state {
        case .closed: return true
        case .halfOpen: return false
        case .open(let until): return now >= until
        }
    }

    /// Whether an attempt may be made at `now`; moves an open breaker whose time is up
    /// to half-open (the attempt is the probe).
    package mutating func allows(at now: ContinuousClock.Instant) -> Bool {
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
    package mutating func succeeded() {
        failures = 0
        state = .closed
    }

    /// Opens the breaker until `until`, whatever the count: the collector refused the
    /// configuration, and only a probe after that tells whether it still does.
    package mutating func hold(until: ContinuousClock.Instant) {
        if case .open = state {} else { openings += 1 }
        failures = max(failures, threshold)
        state = .open(until: until)
    }

    /// Records a failed attempt at `now`.
    package mutating func failed(at now: ContinuousClock.Instant) {
        failures += 1
        if state == .halfOpen || failures >= threshold {
            openings += 1
            state = .open(until: now + probeAfter)
        }
    }
}

extension StatusPolicy {
    /// Parses a `Retry-After` value: delay-seconds or an HTTP date, relative to `now`.
    /// Returns `nil` when the value is neither.
    package static func parseRetryAfter(_ value: String, now: Date = Date()) -> Duration? {
        let trimmed = value.trimmingWhiteSpace
        if let seconds = Int(trimmed), seconds >= 0 { return .seconds(seconds) }
        guard let epoch = httpDateSeconds(trimmed) else { return nil }
        let interval = max(0, Double(epoch) - now.timeIntervalSince1970)
        return .milliseconds(Int64(interval * 1000))
    }
}
