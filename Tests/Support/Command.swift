import Foundation

/// Runs a system command (`mount`, `umount`, ...) found on `PATH`, with its output
/// discarded; its exit status, or -1 when it could not be started.
public func runQuietly(_ argv: [String]) -> Int32 {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    p.arguments = argv
    p.standardOutput = FileHandle.nullDevice
    p.standardError = FileHandle.nullDevice
    do { try p.run() } catch { return -1 }
    p.waitUntilExit()
    return p.terminationStatus
}

/// Runs `executable` with `arguments` (and `environment`, or this process's when nil),
/// waits for it, and returns its exit status with what it wrote to stdout and stderr.
public func runCapturing(_ executable: String, _ arguments: [String],
                         environment: [String: String]? = nil) throws -> (status: Int32, out: String, err: String) {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: executable)
    p.arguments = arguments
    if let environment { p.environment = environment }
    let out = Pipe(), err = Pipe()
    p.standardOutput = out
    p.standardError = err
    try p.run()
    let o = out.fileHandleForReading.readDataToEndOfFile()
    let e = err.fileHandleForReading.readDataToEndOfFile()
    p.waitUntilExit()
    return (p.terminationStatus, String(decoding: o, as: UTF8.self), String(decoding: e, as: UTF8.self))
}
