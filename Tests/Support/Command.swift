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
