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
/// pthread (a Foundation `Thread` needs Foundation and costs more to create). Returns
/// false when the system refuses a thread (its thread limit), and `body` never runs.
///
/// The thread is the SDK's, and starts as the C core's `cairn_thread_start` starts one:
/// - the process-directed signals a service handles are blocked in it (SIGTERM, SIGINT,
///   SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, SIGCHLD, SIGPIPE, SIGWINCH), so the
///   kernel delivers them to the service's own threads;
/// - it is created with an affinity that leaves out the caller's current CPU (when the
///   caller may run on others), then takes back the caller's whole affinity first thing.
///   Under the default policy a new thread is often placed on its creator's CPU and runs
///   first there, so `pthread_create` returns only once it blocks: `Cairn.start` would
///   wait milliseconds for the background thread's own work while another CPU idles.
@discardableResult
package func startThread(name: String, _ body: @escaping @Sendable () -> Void) -> Bool {
    final class Start: @unchecked Sendable {
        let body: @Sendable () -> Void
        let name: String
        /// The caller's affinity, taken back by the new thread when it was narrowed.
        var affinity = CPUSet()
        var placed = false
        init(_ body: @escaping @Sendable () -> Void, _ name: String) {
            self.body = body
            self.name = name
        }
    }
    let start = Start(body, name)
    var attributes = pthread_attr_t()
    guard pthread_attr_init(&attributes) == 0 else { return false }
    defer { pthread_attr_destroy(&attributes) }
    pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
    var mask = sigset_t()
    pthread_sigmask(SIG_BLOCK, nil, &mask)
    addServiceSignals(to: &mask)
    if let setMask = GNUThreads.attrSetSigmask { _ = setMask(&attributes, &mask) }
    // More CPUs than a set holds: the affinity cannot be read, and the thread is placed
    // as the system places it.
    if let current = GNUThreads.currentCPU, let getAffinity = GNUThreads.getAffinity,
       let setAttrAffinity = GNUThreads.attrSetAffinity {
        let cpu = Int(current())
        if cpu >= 0 && cpu < CPUSet.capacity
            && start.affinity.withBytes({ getAffinity(0, CPUSet.bytes, $0) }) == 0 {
            var elsewhere = start.affinity
            elsewhere.remove(cpu)
            if elsewhere.count > 0 && elsewhere.withBytes({ setAttrAffinity(&attributes, CPUSet.bytes, $0) }) == 0 {
                start.placed = true
            }
        }
    }
    let context = Unmanaged.passRetained(start).toOpaque()
    let trampoline: @convention(c) (UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? = { arg in
        guard let arg else { return nil }
        let start = Unmanaged<Start>.fromOpaque(arg).takeRetainedValue()
        // Again from inside: the attribute closes the window from the thread's first
        // instruction, but an interposed pthread_create (a sanitizer's) may drop it.
        var block = sigset_t()
        sigemptyset(&block)
        addServiceSignals(to: &block)
        pthread_sigmask(SIG_BLOCK, &block, nil)
        if start.placed, let setAffinity = GNUThreads.setAffinity {
            _ = start.affinity.withBytes { setAffinity(pthread_self(), CPUSet.bytes, $0) }
        }
        setThreadName(start.name)
        start.body()
        return nil
    }
    var thread = pthread_t()
    var rc = pthread_create(&thread, &attributes, trampoline, context)
    if rc == EINVAL && start.placed, let setAttrAffinity = GNUThreads.attrSetAffinity {
        // The narrower set was refused (a CPU went offline meanwhile): the caller's.
        start.placed = false
        _ = start.affinity.withBytes { setAttrAffinity(&attributes, CPUSet.bytes, $0) }
        rc = pthread_create(&thread, &attributes, trampoline, context)
    }
    if rc != 0 {
        Unmanaged<Start>.fromOpaque(context).release()
        return false
    }
    return true
}

/// Adds the process-directed signals a service handles, blocked in the SDK's threads.
private func addServiceSignals(to set: inout sigset_t) {
    for signal in [SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, SIGCHLD, SIGPIPE, SIGWINCH] {
        sigaddset(&set, signal)
    }
}

/// A CPU set as glibc's `cpu_set_t` lays it out (1024 bits), which the Glibc module
/// does not declare (it needs `_GNU_SOURCE`).
private struct CPUSet {
    static let capacity = 1024
    static let bytes = capacity / 8
    private var words = [UInt64](repeating: 0, count: capacity / 64)

    mutating func remove(_ cpu: Int) { words[cpu / 64] &= ~(UInt64(1) << UInt64(cpu % 64)) }
    var count: Int { words.reduce(0) { $0 + $1.nonzeroBitCount } }

    /// Calls `body` with the set's bytes (which it may fill).
    mutating func withBytes<R>(_ body: (UnsafeMutableRawPointer) -> R) -> R {
        words.withUnsafeMutableBytes { body($0.baseAddress!) }
    }
}

/// glibc's thread placement functions, which the Glibc module does not declare (they
/// need `_GNU_SOURCE`): found once at run time; nil where the C library lacks one
/// (the thread is then started without it).
private enum GNUThreads {
    static let currentCPU: (@convention(c) () -> Int32)? = lookUp("sched_getcpu")
    static let getAffinity: (@convention(c) (pid_t, Int, UnsafeMutableRawPointer) -> Int32)? = lookUp("sched_getaffinity")
    static let attrSetAffinity: (@convention(c) (UnsafeMutablePointer<pthread_attr_t>, Int, UnsafeRawPointer) -> Int32)?
        = lookUp("pthread_attr_setaffinity_np")
    static let setAffinity: (@convention(c) (pthread_t, Int, UnsafeRawPointer) -> Int32)? = lookUp("pthread_setaffinity_np")
    static let attrSetSigmask: (@convention(c) (UnsafeMutablePointer<pthread_attr_t>, UnsafePointer<sigset_t>) -> Int32)?
        = lookUp("pthread_attr_setsigmask_np")

    private static func lookUp<F>(_ name: String) -> F? {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), name) else { return nil }  // RTLD_DEFAULT
        return unsafeBitCast(symbol, to: F.self)
    }
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
