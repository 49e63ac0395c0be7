import Foundation
import Glibc
import Synchronization

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

    /// stdout as text.
    public var out: String { String(decoding: stdout, as: UTF8.self) }
    /// stderr as text.
    public var err: String { String(decoding: stderr, as: UTF8.self) }
}

/// The tests' one process runner: runs `executable` (a path; `/usr/bin/env` to search
/// `PATH`) with `arguments`, `environment` (this process's when nil), `stdin` and
/// working `directory`, reads stdout and stderr while it runs (so a chatty child never
/// blocks on a full pipe), and kills it with SIGKILL after `timeout` seconds.
public func runToEnd(_ executable: String, _ arguments: [String], environment: [String: String]? = nil,
                     stdin: Data? = nil, directory: String? = nil, timeout: Double = 120) throws -> Finished {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: executable)
    p.arguments = arguments
    if let environment { p.environment = environment }
    if let directory { p.currentDirectoryURL = URL(fileURLWithPath: directory) }
    let out = Pipe(), err = Pipe(), input = Pipe()
    p.standardOutput = out
    p.standardError = err
    p.standardInput = input
    try p.run()
    let collected = Mutex<(Data, Data)>((Data(), Data()))
    let reading = DispatchGroup()
    for (handle, isErr) in [(out.fileHandleForReading, false), (err.fileHandleForReading, true)] {
        DispatchQueue.global().async(group: reading) {
            let data = handle.readDataToEndOfFile()
            collected.withLock { if isErr { $0.1 = data } else { $0.0 = data } }
        }
    }
    if let stdin { try? input.fileHandleForWriting.write(contentsOf: stdin) }
    try? input.fileHandleForWriting.close()
    let deadline = Date().addingTimeInterval(timeout)
    while p.isRunning && Date() < deadline { usleep(2_000) }
    let timedOut = p.isRunning
    if timedOut { kill(p.processIdentifier, SIGKILL) }
    p.waitUntilExit()
    reading.wait()
    let (o, e) = collected.withLock { $0 }
    return Finished(status: p.terminationStatus, signaled: p.terminationReason == .uncaughtSignal, timedOut: timedOut,
                    stdout: o, stderr: e)
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
