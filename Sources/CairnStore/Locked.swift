import Glibc

/// A value guarded by a pthread mutex: the lock Cairn's modules share.
///
/// It plays the role of the standard library's `Synchronization.Mutex`, which on Linux
/// locks with atomics that ThreadSanitizer cannot see, so every test run under TSan
/// reported its critical sections as races. A pthread mutex is understood by TSan
/// (and by any other tool), which keeps the sanitizer runs meaningful.
package final class Locked<Value>: @unchecked Sendable {
    // @unchecked: `value` is only touched while `mutex` is held.
    private var value: Value
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>

    /// Wraps `value`.
    package init(_ value: Value) {
        self.value = value
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    /// Runs `body` with the value while holding the lock.
    package func withLock<T, E: Error>(_ body: (inout Value) throws(E) -> T) throws(E) -> T {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}
