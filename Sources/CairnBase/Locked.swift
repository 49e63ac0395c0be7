public import Glibc

/// A value guarded by a pthread mutex: the lock Cairn's modules share. Copies share the
/// value and the lock (it behaves as a reference).
///
/// It plays the role of the standard library's `Synchronization.Mutex`, which on Linux
/// locks with atomics that ThreadSanitizer cannot see, so every test run under TSan
/// reported its critical sections as races. A pthread mutex is understood by TSan
/// (and by any other tool), which keeps the sanitizer runs meaningful.
///
/// A generic struct over one non-generic class, with inlinable methods: each use is
/// specialised where it is written, and making one costs no generic class metadata,
/// which the runtime would instantiate (demangling its name) the first time each
/// `Locked<Value>` is made: about 5 us apiece inside `Cairn.start`.
package struct Locked<Value>: @unchecked Sendable {
    // @unchecked: the value is only touched while the box's mutex is held.
    @usableFromInline let box: LockedBox

    /// Wraps `value`.
    @inlinable package init(_ value: Value) {
        let storage = UnsafeMutablePointer<Value>.allocate(capacity: 1)
        storage.initialize(to: value)
        box = LockedBox(storage: UnsafeMutableRawPointer(storage)) { raw in
            raw.assumingMemoryBound(to: Value.self).deinitialize(count: 1)
        }
    }

    /// Runs `body` with the value while holding the lock.
    @inlinable package func withLock<T, E: Error>(_ body: (inout Value) throws(E) -> T) throws(E) -> T {
        pthread_mutex_lock(box.mutex)
        defer { pthread_mutex_unlock(box.mutex) }
        return try body(&box.storage.assumingMemoryBound(to: Value.self).pointee)
    }
}

/// The storage of a ``Locked`` value: a mutex and the value's memory, with the function
/// that deinitialises the value.
@usableFromInline package final class LockedBox {
    @usableFromInline let mutex: UnsafeMutablePointer<pthread_mutex_t>
    @usableFromInline let storage: UnsafeMutableRawPointer
    private let destroy: (UnsafeMutableRawPointer) -> Void

    @usableFromInline init(storage: UnsafeMutableRawPointer, destroy: @escaping (UnsafeMutableRawPointer) -> Void) {
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
        self.storage = storage
        self.destroy = destroy
    }

    deinit {
        destroy(storage)
        storage.deallocate()
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }
}
