import CCairn
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A mutex with a condition variable on the monotonic clock: what Foundation's
/// `NSCondition` offers, without Foundation (a service that does not use Foundation
/// should not load it for Cairn: about 7 MiB of memory and 4 ms of process start).
package final class Condition: @unchecked Sendable {
    // @unchecked: the pthread objects synchronise themselves.
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let cond: UnsafeMutablePointer<pthread_cond_t>

    package init() {
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
        cond = .allocate(capacity: 1)
        cond.initialize(to: pthread_cond_t())
        var attr = pthread_condattr_t()
        pthread_condattr_init(&attr)
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC)
        pthread_cond_init(cond, &attr)
        pthread_condattr_destroy(&attr)
    }

    deinit {
        pthread_cond_destroy(cond)
        pthread_mutex_destroy(mutex)
        cond.deallocate()
        mutex.deallocate()
    }

    /// Takes the mutex.
    package func lock() { pthread_mutex_lock(mutex) }
    /// Releases the mutex.
    package func unlock() { pthread_mutex_unlock(mutex) }
    /// Wakes one waiter.
    package func signal() { pthread_cond_signal(cond) }
    /// Wakes every waiter.
    package func broadcast() { pthread_cond_broadcast(cond) }
    /// Waits for a signal, the mutex held.
    package func wait() { pthread_cond_wait(cond, mutex) }

    /// Waits for a signal or `deadline`, the mutex held. Returns false once the deadline
    /// has passed (a signal may still have come), true otherwise.
    package func wait(until deadline: ContinuousClock.Instant) -> Bool {
        let remaining = deadline - ContinuousClock.now
        guard remaining > .zero else { return false }
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        let c = remaining.components
        var sec = now.tv_sec + Int(c.seconds)
        var nsec = now.tv_nsec + Int(c.attoseconds / 1_000_000_000)
        if nsec >= 1_000_000_000 {
            sec += 1
            nsec -= 1_000_000_000
        }
        var until = timespec(tv_sec: sec, tv_nsec: nsec)
        return pthread_cond_timedwait(cond, mutex, &until) != ETIMEDOUT
    }
}

/// Runs `body` on a new detached thread named `name` (at most 15 bytes show), a plain
/// pthread placed off the caller's CPU (`cairn_thread_start`): a Foundation `Thread`
/// needs Foundation and costs more to create. Returns
/// false when the system refuses a thread (its thread limit), and `body` never runs.
@discardableResult
package func startThread(name: String, _ body: @escaping @Sendable () -> Void) -> Bool {
    final class Box: @unchecked Sendable {
        let body: @Sendable () -> Void
        let name: String
        init(_ body: @escaping @Sendable () -> Void, _ name: String) {
            self.body = body
            self.name = name
        }
    }
    let box = Unmanaged.passRetained(Box(body, name)).toOpaque()
    // Off the caller's CPU (see cairn_thread_start): placed beside it, the new thread
    // often runs first and keeps the caller waiting (`Cairn.start`, for milliseconds).
    let rc = cairn_thread_start({ arg in
        guard let arg else { return nil }
        let box = Unmanaged<Box>.fromOpaque(arg).takeRetainedValue()
        setThreadName(box.name)
        box.body()
        return nil
    }, box)
    if rc != 0 {
        Unmanaged<Box>.fromOpaque(box).release()
        return false
    }
    return true
}

/// glibc's `pthread_setname_np`, which the Glibc module does not declare (it needs
/// `_GNU_SOURCE`): found once at run time.
private let setNameFunction: (@convention(c) (pthread_t, UnsafePointer<CChar>) -> Int32)? = {
    guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "pthread_setname_np") else { return nil }
    return unsafeBitCast(symbol, to: (@convention(c) (pthread_t, UnsafePointer<CChar>) -> Int32).self)
}()

/// Names the calling thread (what `top -H` and debuggers show), cut to 15 bytes.
private func setThreadName(_ name: String) {
    guard let set = setNameFunction else { return }
    _ = String(decoding: name.utf8.prefix(15), as: UTF8.self).withCString { set(pthread_self(), $0) }
}

/// Writes all of `bytes` to `fd`, again after a signal interrupts it; stops at the
/// first error (a closed pipe, a full disk): diagnostics and output lines, which are
/// never worth more than the service.
package func writeAll(_ bytes: UnsafeRawBufferPointer, to fd: Int32) {
    var done = 0
    while done < bytes.count {
        let n = write(fd, bytes.baseAddress.map { $0 + done }, bytes.count - done)
        if n < 0 && errno == EINTR { continue }
        if n <= 0 { return }
        done += n
    }
}

/// Writes `text` to the standard error as it is (diagnostics; not for hot paths).
package func writeStandardError(_ text: String) {
    var text = text
    text.withUTF8 { writeAll(UnsafeRawBufferPointer($0), to: 2) }
}
