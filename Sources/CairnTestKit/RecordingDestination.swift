public import Cairn
import Foundation
import Glibc

/// A destination that keeps every event in memory, for integrators' own tests:
///
/// ```swift
/// let recorder = RecordingDestination()
/// var options = Cairn.Options(appID: "orders", distinctID: "test-host")
/// options.destinations = [recorder]
/// let cairn = try Cairn.start(options)
/// cairn.track("order_placed")
/// let events = recorder.wait(forCount: 1, timeout: .seconds(5))
/// ```
public final class RecordingDestination: Destination, @unchecked Sendable {
    // @unchecked: `received` is touched under `mutex` only.
    private var mutex = pthread_mutex_t()
    private var received: [FinishedEvent] = []

    /// An empty recorder.
    public init() { pthread_mutex_init(&mutex, nil) }

    deinit { pthread_mutex_destroy(&mutex) }

    /// Keeps the events.
    public func receive(_ events: [FinishedEvent]) {
        pthread_mutex_lock(&mutex)
        received += events
        pthread_mutex_unlock(&mutex)
    }

    /// Every event so far, in order.
    public var events: [FinishedEvent] {
        pthread_mutex_lock(&mutex)
        defer { pthread_mutex_unlock(&mutex) }
        return received
    }

    /// The events named `name`.
    public func events(named name: String) -> [FinishedEvent] { events.filter { $0.name == name } }

    /// Waits until at least `count` events arrived or `timeout` passed; returns them.
    public func wait(forCount count: Int, timeout: Duration) -> [FinishedEvent] {
        let deadline = ContinuousClock.now + timeout
        while events.count < count && ContinuousClock.now < deadline { usleep(2000) }
        return events
    }

    /// Forgets everything received.
    public func reset() {
        pthread_mutex_lock(&mutex)
        received.removeAll()
        pthread_mutex_unlock(&mutex)
    }
}
