/// How busy the sender threads have been lately: the share of their time spent in
/// sends over the last 250 to 500 ms, sends still running included (a send that hangs
/// counts as busy from its start).
///
/// An attempt that waits for a sender is not reason enough for another one: on a busy
/// machine a sender that has nothing to do can still take milliseconds to be scheduled,
/// and another thread would not be scheduled sooner. What says that more senders would
/// carry more is Little's law: senders busy most of the time (the arrival rate times
/// the time a send takes, over the senders there are). Kept under the senders' lock.
struct SenderLoad {
    /// The length of a measuring window; the figure covers the last full one and the
    /// current one.
    static let window: Duration = .milliseconds(250)

    private var windowStart: ContinuousClock.Instant
    /// Send time in the last full window, and that window's length.
    private var previousBusy: Duration = .zero
    private var previousLength: Duration = .zero
    /// Send time of the sends that ended in the current window (from its start at most).
    private var endedBusy: Duration = .zero
    /// Sends running, and the sum of their starts as offsets into the current window
    /// (0 for a send that started before it).
    private var running = 0
    private var runningOffsets: Duration = .zero

    /// The idle time a new load assumes before it, 50 ms: a first send that takes long
    /// (a TLS handshake: 20 to 40 ms on a near collector) is not read as senders busy
    /// all the time, and a collector that keeps the first sender busy from the start (a
    /// distant one under load) shows within 50 ms. With a whole window of it, senders
    /// grew so slowly at 100k events a second to a 50 ms collector that the ring filled.
    static let prior: Duration = .milliseconds(50)

    /// A load measuring from `now`, with ``prior`` idle time before it.
    init(now: ContinuousClock.Instant) {
        windowStart = now
        previousLength = Self.prior
    }

    /// A send started at `start` (now, or just before). Instants are read outside the
    /// senders' lock: one from before the current window counts as its start.
    mutating func began(at start: ContinuousClock.Instant) {
        roll(start)
        running += 1
        runningOffsets += max(start, windowStart) - windowStart
    }

    /// The send that started at `start` ended at `end`.
    mutating func ended(startedAt start: ContinuousClock.Instant, at end: ContinuousClock.Instant) {
        roll(end)
        let from = max(start, windowStart)
        guard running > 0 else { return }
        running -= 1
        runningOffsets -= from - windowStart
        endedBusy += max(end, from) - from
    }

    /// The share of `senders` threads' time spent in sends over the last full window and
    /// the current one, 0 to 1: busy time over the senders there are now, so less than
    /// the real share just after a sender started, and possibly more than 1 after some
    /// ended.
    mutating func utilization(senders: Int, at instant: ContinuousClock.Instant) -> Double {
        roll(instant)
        let now = max(instant, windowStart)
        let elapsed = now - windowStart
        let busy = previousBusy + busyInWindow(at: now)
        let total = (previousLength + elapsed) * max(1, senders)
        guard total > .zero else { return 0 }
        return busy / total
    }

    /// Send time in the current window up to `now`.
    private func busyInWindow(at now: ContinuousClock.Instant) -> Duration {
        endedBusy + (now - windowStart) * running - runningOffsets
    }

    /// Starts a new window once the current one is `window` long. A longer one (a quiet
    /// spell) is kept as one window's worth at its mean, so that the load after it
    /// shows within a window.
    private mutating func roll(_ now: ContinuousClock.Instant) {
        let length = now - windowStart
        guard length >= Self.window else { return }
        previousBusy = busyInWindow(at: now) * (Self.window / length)
        previousLength = Self.window
        windowStart = now
        endedBusy = .zero
        runningOffsets = .zero
    }
}
