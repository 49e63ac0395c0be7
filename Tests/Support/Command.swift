import Foundation
import Glibc

/// How a child process ended, and what it wrote.
public struct Finished: Sendable {
    /// Its exit status, or the signal that ended it (see ``signaled``).
    public var status: Int32
    /// Whether a signal ended it.
    public var signaled: Bool
    /// Whether it outlived the timeout and was killed.
    public var timedOut: Bool
    /// What it wrote to stdout and stderr.
    public var stdout: Data
    public var stderr: Data
    /// Its process id (which also named its process group).
    public var pid: pid_t = 0

    /// stdout as text.
    public var out: String { String(decoding: stdout, as: UTF8.self) }
    /// stderr as text.
    public var err: String { String(decoding: stderr, as: UTF8.self) }
}

/// The tests' one process runner: runs `executable` (a path; `/usr/bin/env` to search
/// `PATH`) with `arguments`, `environment` (this process's when nil), `stdin` and
/// working `directory`, reads stdout and stderr while it runs (so a chatty child never
/// blocks on a full pipe), and never hangs:
///
/// - the child leads a process group of its own, and the whole group (helpers it
///   started, such as the Swift runtime's `swift-backtrace`) is killed with SIGKILL
///   after `timeout` seconds;
/// - the pipes are read with that deadline, and once the child has ended, for at most
///   `lingering` seconds more: a descendant that keeps them open is killed with the
///   group, and what was read is returned;
/// - the child starts as a service does: every signal at its default action and none
///   blocked (a `Foundation.Process` child inherits the mask of the thread that starts
///   it, and the test runner's threads block most signals);
/// - the Swift runtime's backtracer is off (`SWIFT_BACKTRACE=enable=no`) unless
///   `environment` sets `SWIFT_BACKTRACE` (a test that takes it as its oracle).
///
/// With `signalWhenReady`, that signal is sent to the child once its stdout holds
/// `READY`. ``ChildProcess`` runs one the same way while the test goes on.
public func runToEnd(_ executable: String, _ arguments: [String], environment: [String: String]? = nil,
                     stdin: Data? = nil, directory: String? = nil, timeout: Double = 120,
                     lingering: Double = 5, signalWhenReady: Int32? = nil) throws -> Finished {
    let deadline = ContinuousClock.now + .milliseconds(Int64(timeout * 1000))
    let child = try ChildProcess(executable, arguments, environment: environment, stdin: stdin, directory: directory)
    if let signalWhenReady, child.waitForOutput("READY", until: deadline) { child.signal(signalWhenReady) }
    return child.finish(until: deadline, lingering: lingering)
}

/// A child process started by the tests' runner rules (see ``runToEnd(_:_:environment:stdin:directory:timeout:lingering:signalWhenReady:)``):
/// its own process group, a clean signal mask, the Swift backtracer off unless asked
/// for, its output read as the test waits. Whatever the test does not end is ended
/// with it: the group is killed when the value goes away.
public final class ChildProcess {
    /// Its process id (which also names its process group).
    public let pid: pid_t
    private var open: [Int32]
    private var inputFD: Int32
    private let feed: [UInt8]
    private var fed = 0
    private var collected: [Data] = [Data(), Data()]
    private var status: Int32 = 0
    private var exited = false
    private var chunk = [UInt8](repeating: 0, count: 65536)

    /// Starts `executable` with `arguments`; `environment` is this process's when nil.
    public init(_ executable: String, _ arguments: [String], environment: [String: String]? = nil,
                stdin: Data? = nil, directory: String? = nil) throws {
        var env = environment ?? ProcessInfo.processInfo.environment
        if env["SWIFT_BACKTRACE"] == nil { env["SWIFT_BACKTRACE"] = "enable=no" }
        var out: [Int32] = [-1, -1], err: [Int32] = [-1, -1], input: [Int32] = [-1, -1]
        guard pipe(&out) == 0, pipe(&err) == 0, pipe(&input) == 0 else { throw SpawnError(function: "pipe", code: errno) }
        // Not inherited by other children the test process starts meanwhile (the spawned
        // child gets them through dup2, which clears the flag).
        for fd in out + err + input { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, input[0], 0)
        posix_spawn_file_actions_adddup2(&actions, out[1], 1)
        posix_spawn_file_actions_adddup2(&actions, err[1], 2)
        if let directory {
            typealias AddChdir = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, UnsafePointer<CChar>) -> Int32
            guard let symbol = dlsym(nil, "posix_spawn_file_actions_addchdir_np") else {  // RTLD_DEFAULT
                throw SpawnError(function: "posix_spawn_file_actions_addchdir_np", code: ENOSYS)
            }
            _ = unsafeBitCast(symbol, to: AddChdir.self)(&actions, directory)
        }
        // A group of its own, every signal at its default action and none blocked, as a
        // service starts (the test runner's threads may block some).
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var all = sigset_t(), none = sigset_t()
        sigfillset(&all)
        sigemptyset(&none)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setpgroup(&attributes, 0)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK))
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = env.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, executable, &actions, &attributes, argv, envp)
        for fd in [input[0], out[1], err[1]] { close(fd) }
        guard rc == 0 else {
            for fd in [input[1], out[0], err[0]] { close(fd) }
            throw SpawnError(function: "posix_spawn \(executable)", code: rc)
        }
        self.pid = pid
        open = [out[0], err[0]]
        // stdin is written as the child reads it, in the same loop that reads its
        // output: written all at once first, a child that answers as it reads would fill
        // its output pipe and wait on us while we wait on it.
        feed = [UInt8](stdin ?? Data())
        inputFD = input[1]
        _ = fcntl(inputFD, F_SETFL, fcntl(inputFD, F_GETFL) | O_NONBLOCK)
        if feed.isEmpty {
            close(inputFD)
            inputFD = -1
        }
    }

    deinit {
        if !exited { endGroup() }
        for fd in open where fd >= 0 { close(fd) }
        if inputFD >= 0 { close(inputFD) }
    }

    /// Whether the child has ended (looked at now).
    public var hasEnded: Bool {
        if !exited && waitpid(pid, &status, WNOHANG) == pid { exited = true }
        return exited
    }

    /// What it has written to stdout so far, as bytes.
    public var stdout: Data { collected[0] }

    /// What it has written to stdout so far.
    public var out: String { String(decoding: collected[0], as: UTF8.self) }

    /// Sends `signal` to the child (not its group).
    public func signal(_ signal: Int32) {
        if !exited { kill(pid, signal) }
    }

    /// Reads its output until stdout holds `text` (true), or the child has ended and
    /// closed its pipes, or `timeout` seconds have passed (false).
    @discardableResult
    public func waitForOutput(_ text: String, timeout: Double) -> Bool {
        waitForOutput(text, until: ContinuousClock.now + .milliseconds(Int64(timeout * 1000)))
    }

    func waitForOutput(_ text: String, until deadline: ContinuousClock.Instant) -> Bool {
        waitForStdout(until: deadline) { String(decoding: $0, as: UTF8.self).contains(text) }
    }

    /// Reads its output until what it wrote to stdout satisfies `condition` (true), or
    /// the child has ended and closed its pipes, or `timeout` seconds have passed.
    @discardableResult
    public func waitForStdout(timeout: Double, _ condition: (Data) -> Bool) -> Bool {
        waitForStdout(until: ContinuousClock.now + .milliseconds(Int64(timeout * 1000)), condition)
    }

    func waitForStdout(until deadline: ContinuousClock.Instant, _ condition: (Data) -> Bool) -> Bool {
        pump(until: deadline) { condition(self.collected[0]) }
        return condition(collected[0])
    }

    /// Reads its output for `seconds` (less if it ends and closes its pipes first), so
    /// a child the test lets run never blocks on a full pipe.
    public func keepReading(for seconds: Double) {
        pump(until: ContinuousClock.now + .milliseconds(Int64(seconds * 1000))) { false }
    }

    /// Waits for the child to end (killing its group at `timeout`), reads what is left
    /// of its output (for at most `lingering` seconds after it ended), and returns how
    /// it ended.
    public func finish(timeout: Double = 120, lingering: Double = 5) -> Finished {
        finish(until: ContinuousClock.now + .milliseconds(Int64(timeout * 1000)), lingering: lingering)
    }

    func finish(until deadline: ContinuousClock.Instant, lingering: Double) -> Finished {
        pump(until: deadline) { self.exited }
        let timedOut = !exited
        if exited { pump(until: min(deadline, ContinuousClock.now + .milliseconds(Int64(lingering * 1000)))) { false } }
        // Out of time: the child (still running, then it timed out) or a descendant
        // holding the pipes; the whole group goes.
        if timedOut || open.contains(where: { $0 >= 0 }) { endGroup() }
        let signaled = status & 0x7f != 0
        return Finished(status: signaled ? status & 0x7f : (status >> 8) & 0xff, signaled: signaled, timedOut: timedOut,
                        stdout: collected[0], stderr: collected[1], pid: pid)
    }

    /// Kills the group and reaps the child.
    private func endGroup() {
        kill(-pid, SIGKILL)
        kill(pid, SIGKILL)
        if !exited {
            while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
            exited = true
        }
    }

    /// Feeds stdin and reads stdout and stderr until `stopWhen` holds, the child has
    /// ended with its pipes closed, or `deadline` passes.
    private func pump(until deadline: ContinuousClock.Instant, stopWhen: () -> Bool) {
        while true {
            if !exited && waitpid(pid, &status, WNOHANG) == pid { exited = true }
            if (exited && open.allSatisfy { $0 < 0 }) || stopWhen() || ContinuousClock.now >= deadline { return }
            var fds = open.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
            fds.append(pollfd(fd: inputFD, events: Int16(POLLOUT), revents: 0))
            let left = deadline - ContinuousClock.now
            _ = poll(&fds, nfds_t(fds.count), Int32(min(20, max(1, left.components.attoseconds / 1_000_000_000_000_000))))
            if inputFD >= 0 && fds[2].revents != 0 {
                let n = feed.withUnsafeBytes { write(inputFD, $0.baseAddress! + fed, feed.count - fed) }
                if n > 0 { fed += n }
                if fed == feed.count || (n < 0 && errno != EAGAIN && errno != EINTR)
                    || fds[2].revents & Int16(POLLERR | POLLHUP) != 0 {
                    close(inputFD)
                    inputFD = -1
                }
            }
            for i in 0..<2 where open[i] >= 0 && fds[i].revents != 0 {
                let n = chunk.withUnsafeMutableBytes { read(open[i], $0.baseAddress, $0.count) }
                if n > 0 {
                    collected[i].append(contentsOf: chunk[0..<n])
                } else if n == 0 || (errno != EINTR && errno != EAGAIN) {
                    close(open[i])
                    open[i] = -1
                }
            }
        }
    }
}

/// A process could not be started.
public struct SpawnError: Error, CustomStringConvertible {
    /// What failed.
    public var function: String
    /// Its errno.
    public var code: Int32
    public var description: String { "\(function): \(String(cString: strerror(code)))" }
}

/// Runs a system command (`mount`, `umount`, ...) found on `PATH`, with its output
/// discarded; its exit status, or -1 when it could not be started.
public func runQuietly(_ argv: [String]) -> Int32 {
    (try? runToEnd("/usr/bin/env", argv))?.status ?? -1
}

/// Runs `executable` with `arguments` (and `environment`, or this process's when nil),
/// waits for it, and returns its exit status with what it wrote to stdout and stderr.
public func runCapturing(_ executable: String, _ arguments: [String],
                         environment: [String: String]? = nil) throws -> (status: Int32, out: String, err: String) {
    let f = try runToEnd(executable, arguments, environment: environment)
    return (f.status, f.out, f.err)
}

/// The directory of the toolchain's `swift` (where its clang, llvm-symbolizer and
/// llvm-objcopy live), for tests that build or read native code with them.
public func toolchainDirectory() throws -> String {
    let found = try runToEnd("/bin/sh", ["-c", "dirname \"$(readlink -f \"$(command -v swift)\")\""])
    return found.out.trimmingCharacters(in: .whitespacesAndNewlines)
}
