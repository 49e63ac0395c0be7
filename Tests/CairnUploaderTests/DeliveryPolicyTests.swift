import CairnUploader
import Foundation
import Testing

/// The pure parts of delivery: the status table, backoff, Retry-After, the breaker.
@Suite struct DeliveryPolicyTests {
    @Test func standardStatusTable() {
        let p = StatusPolicy.standard
        #expect(p.action(for: 200) == .delivered && p.action(for: 204) == .delivered)
        #expect(p.action(for: 500) == .retry && p.action(for: 502) == .retry && p.action(for: 408) == .retry)
        #expect(p.action(for: 429) == .pauseAndRetry && p.action(for: 503) == .pauseAndRetry)
        #expect(p.action(for: 400) == .drop(reason: "rejected_400"))
        #expect(p.action(for: 413) == .drop(reason: "rejected_413"))
        #expect(p.action(for: 301) == .drop(reason: "rejected_301"))
        // The table is data: a collector that wants 409 treated as delivered says so.
        let custom = StatusPolicy(rules: [.init(409...409, .delivered)] + StatusPolicy.standard.rules)
        #expect(custom.action(for: 409) == .delivered)
    }

    @Test func backoffIsExponentialWithFullJitterAndCapped() {
        let b = Backoff(base: .milliseconds(100), cap: .seconds(2))
        #expect(b.delay(afterAttempt: 0, random: 0.999) <= .milliseconds(100))
        #expect(b.delay(afterAttempt: 3, random: 0.999) > .milliseconds(700))
        #expect(b.delay(afterAttempt: 3, random: 0.999) <= .milliseconds(800))
        #expect(b.delay(afterAttempt: 40, random: 0.999) <= .seconds(2))
        #expect(b.delay(afterAttempt: 5, random: 0) == .zero, "full jitter reaches zero")
    }

    @Test func retryAfterSecondsAndHTTPDate() {
        #expect(parseRetryAfter("120") == .seconds(120))
        #expect(parseRetryAfter(" 0 ") == .zero)
        let now = Date(timeIntervalSince1970: 1_764_690_000)
        let later = "Tue, 02 Dec 2025 15:40:30 GMT" // 30 s after `now`
        #expect(parseRetryAfter(later, now: now) == .seconds(30))
        #expect(parseRetryAfter("Tue, 02 Dec 2025 15:39:00 GMT", now: now) == .zero, "a past date means now")
        #expect(parseRetryAfter("soon") == nil)
        #expect(parseRetryAfter("-5") == nil)
    }

    @Test func breakerOpensProbesAndCloses() {
        let clock = ContinuousClock()
        let t0 = clock.now
        var b = CircuitBreaker(threshold: 3, probeAfter: .seconds(10))
        var allowed = b.allows(at: t0)
        #expect(allowed)
        b.failed(at: t0)
        b.failed(at: t0)
        #expect(b.state == .closed)
        b.failed(at: t0)
        #expect(b.state == .open(until: t0 + .seconds(10)) && b.openings == 1)
        allowed = b.allows(at: t0 + .seconds(9))
        #expect(!allowed)
        allowed = b.allows(at: t0 + .seconds(10))
        #expect(allowed, "the probe")
        allowed = b.allows(at: t0 + .seconds(10))
        #expect(b.state == .halfOpen && !allowed, "one probe at a time")
        b.failed(at: t0 + .seconds(11))
        #expect(b.state == .open(until: t0 + .seconds(21)) && b.openings == 2)
        allowed = b.allows(at: t0 + .seconds(21))
        #expect(allowed)
        b.succeeded()
        #expect(b.state == .closed && b.failures == 0)
    }
}
