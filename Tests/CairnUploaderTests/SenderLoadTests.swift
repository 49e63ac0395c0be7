// SenderLoad: the share of the sender threads' time spent in sends, from which the
// uploader decides whether another sender would carry more (Little's law).
import Testing

@testable import CairnUploader

@Suite struct SenderLoadTests {
    let t0 = ContinuousClock().now
    func at(_ ms: Int) -> ContinuousClock.Instant { t0 + .milliseconds(ms) }

    /// A first send that takes long (a TLS handshake) is not senders busy all the time;
    /// one that keeps on (a distant collector under load) is, within 50 ms or so.
    @Test func aLongFirstSendIsNotALoad() {
        var load = SenderLoad(now: t0)
        load.began(at: at(1))
        #expect(load.utilization(senders: 1, at: at(40)) < 0.5)
        #expect(load.utilization(senders: 1, at: at(60)) >= 0.5)
    }

    @Test func noSendsIsNoLoad() {
        var load = SenderLoad(now: t0)
        #expect(load.utilization(senders: 1, at: at(100)) == 0)
        #expect(load.utilization(senders: 0, at: at(0)) == 0)
    }

    /// A send still running counts from its start: a sender stuck in one long send is busy.
    @Test func aRunningSendCountsAsBusy() {
        var load = SenderLoad(now: t0)
        load.began(at: at(0))
        // A new load has 50 ms of idle time behind it: 100 ms busy of 50 + 100.
        #expect(abs(load.utilization(senders: 1, at: at(100)) - 100.0 / 150) < 1e-9)
        #expect(abs(load.utilization(senders: 1, at: at(600)) - 1) < 1e-9)
        // Across window rolls too, and two senders of which one is stuck are half busy.
        #expect(abs(load.utilization(senders: 2, at: at(900)) - 0.5) < 1e-9)
        load.ended(startedAt: at(0), at: at(1000))
        #expect(abs(load.utilization(senders: 1, at: at(1000)) - 1) < 1e-9)
    }

    /// Short sends at a steady pace: the load is their duration over the interval.
    @Test func steadyShortSendsAreALightLoad() {
        var load = SenderLoad(now: t0)
        for k in 0..<40 {
            load.began(at: at(k * 20))
            load.ended(startedAt: at(k * 20), at: at(k * 20 + 2))
        }
        let u = load.utilization(senders: 1, at: at(800))
        #expect(u > 0.08 && u < 0.12, "\(u)")
    }

    /// After a quiet spell a saturated sender shows as busy within a window, not
    /// diluted by the spell's length.
    @Test func aQuietSpellDoesNotHideTheLoadAfterIt() {
        var load = SenderLoad(now: t0)
        _ = load.utilization(senders: 1, at: at(10_000))  // ten quiet seconds
        load.began(at: at(10_000))
        // 100 ms busy over the quiet spell kept as one 250 ms window and 100 ms of this
        // one (over the ten seconds, it would read 0.01).
        let u = load.utilization(senders: 1, at: at(10_100))
        #expect(abs(u - 100.0 / 350) < 1e-9, "\(u)")
        #expect(load.utilization(senders: 1, at: at(10_300)) >= 0.5)
    }

    /// Instants are read before the senders' lock is taken, so one may come from before
    /// the window another thread just started: it counts from the window's start, and
    /// nothing reads as negative.
    @Test func anInstantFromBeforeTheWindowCountsFromItsStart() {
        var load = SenderLoad(now: t0)
        load.began(at: at(0))
        _ = load.utilization(senders: 1, at: at(300))  // a new window from 300
        load.ended(startedAt: at(0), at: at(290))      // read before the roll
        let u = load.utilization(senders: 1, at: at(280))
        #expect(u >= 0 && u <= 1, "\(u)")
        load.began(at: at(295))
        load.ended(startedAt: at(295), at: at(299))
        #expect(load.utilization(senders: 1, at: at(300)) >= 0)
    }

    /// Sends that started before a window are counted from its start, not twice.
    @Test func sendsSpanningAWindowAreCountedOnce() {
        var load = SenderLoad(now: t0)
        load.began(at: at(0))
        load.began(at: at(100))
        load.ended(startedAt: at(0), at: at(300))  // rolls at 300: 0..300 busy 300 + 200
        load.ended(startedAt: at(100), at: at(400))
        // Windows: 0..300 (500 ms of sends, kept as a 250 ms window at the same mean),
        // then 300..400 (the second send's last 100 ms; the first ended at its start).
        let u = load.utilization(senders: 2, at: at(400))
        let expected = (500.0 * 250 / 300 + 100) / (2 * (250 + 100))
        #expect(abs(u - expected) < 1e-9, "\(u)")
    }
}
