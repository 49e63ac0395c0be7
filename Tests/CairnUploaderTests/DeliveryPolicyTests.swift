@testable import CairnUploader
import CairnBase
import Foundation
import Testing

/// The pure parts of delivery: the status table, backoff, Retry-After, the breaker.
@Suite struct DeliveryPolicyTests {
    @Test func standardStatusTable() {
        let p = StatusPolicy.standard
        #expect(p.action(for: 200) == .delivered && p.action(for: 204) == .delivered)
        #expect(p.action(for: 500) == .retry && p.action(for: 502) == .retry && p.action(for: 408) == .retry)
        #expect(p.action(for: 429) == .pauseAndRetry && p.action(for: 503) == .pauseAndRetry)
        #expect(p.action(for: 400) == .drop(reason: .rejected(status: 400)))
        #expect(p.action(for: 413) == .drop(reason: .rejected(status: 413)))
        #expect(p.action(for: 422) == .drop(reason: .rejected(status: 422)))
        // A configuration fault (or a status nobody expected) never deletes data: held.
        for status in [301, 302, 307, 308, 401, 403, 404, 405, 407, 409, 410, 418, 499, 600, 0, 100] {
            #expect(p.action(for: status) == .hold, "\(status)")
        }
        // The table is data: a collector that wants 409 treated as delivered says so.
        let custom = StatusPolicy(rules: [.init(409...409, .delivered)] + StatusPolicy.standard.rules)
        #expect(custom.action(for: 409) == .delivered)
    }

    @Test func holdOpensTheBreakerUntilItsTimeWhateverTheCount() {
        var b = CircuitBreaker(threshold: 5, probeAfter: .seconds(30))
        let now = ContinuousClock.now
        b.hold(until: now + .seconds(600))
        #expect(b.openings == 1 && !b.allows(at: now + .seconds(599)))
        b.hold(until: now + .seconds(900))
        #expect(b.openings == 1, "a hold while open is the same opening")
        #expect(b.allows(at: now + .seconds(900)) && b.state == .halfOpen, "then one probe")
        b.succeeded()
        #expect(b.state == .closed && b.failures == 0)
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
        #expect(StatusPolicy.parseRetryAfter("120") == .seconds(120))
        #expect(StatusPolicy.parseRetryAfter(" 0 ") == .zero)
        let now = Date(timeIntervalSince1970: 1_764_690_000)
        let later = "Tue, 02 Dec 2025 15:40:30 GMT" // 30 s after `now`
        #expect(StatusPolicy.parseRetryAfter(later, now: now) == .seconds(30))
        #expect(StatusPolicy.parseRetryAfter("Tue, 02 Dec 2025 15:39:00 GMT", now: now) == .zero, "a past date means now")
        #expect(StatusPolicy.parseRetryAfter("soon") == nil)
        #expect(StatusPolicy.parseRetryAfter("-5") == nil)
        // The two obsolete forms a recipient must also accept.
        #expect(StatusPolicy.parseRetryAfter("Tuesday, 02-Dec-25 15:40:30 GMT", now: now) == .seconds(30))
        #expect(StatusPolicy.parseRetryAfter("Tue Dec  2 15:40:30 2025", now: now) == .seconds(30))
        // Garbage in the shape of a date.
        for bad in ["Tue, 32 Dec 2025 15:40:30 GMT", "Tue, 02 Dek 2025 15:40:30 GMT", "Tue, 02 Dec 2025 25:40:30 GMT",
                    "Tue, 02 Dec 2025 15:40:30 UTC", "Tue, 2 Dec 2025 15:40:30 GMT", "Tue, 02 Dec 2025 15:40 GMT"] {
            #expect(StatusPolicy.parseRetryAfter(bad, now: now) == nil, "\(bad)")
        }
    }

    /// Against the C library's own calendar arithmetic (timegm), over four centuries.
    @Test func httpDatesAgreeWithTimegm() {
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<2000 {
            var t = tm()
            t.tm_year = Int32.random(in: 0...430, using: &rng)  // 1900 ... 2330
            t.tm_mon = Int32.random(in: 0...11, using: &rng)
            t.tm_mday = Int32.random(in: 1...28, using: &rng)
            t.tm_hour = Int32.random(in: 0...23, using: &rng)
            t.tm_min = Int32.random(in: 0...59, using: &rng)
            t.tm_sec = Int32.random(in: 0...59, using: &rng)
            var copy = t
            let expected = timegm(&copy)
            func two(_ v: Int32) -> String { v < 10 ? "0\(v)" : "\(v)" }
            let text = "Mon, \(two(t.tm_mday)) \(months[Int(t.tm_mon)]) \(1900 + Int(t.tm_year)) "
                + "\(two(t.tm_hour)):\(two(t.tm_min)):\(two(t.tm_sec)) GMT"
            #expect(httpDateSeconds(text) == expected, "\(text)")
        }
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
