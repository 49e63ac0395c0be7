import Glibc

/// Reads small text files (procfs, sysfs, /etc) with plain system calls: the start
/// path reads a handful of them, and Foundation's file APIs cost far more on first use.
package enum SmallFile {
    /// The file's bytes, up to `limit`; nil when it cannot be opened.
    package static func bytes(_ path: String, limit: Int = 64 * 1024) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var out: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while out.count < limit {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, min($0.count, limit - out.count)) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            out += chunk[0..<n]
        }
        return out
    }

    /// The file as UTF-8 text (invalid bytes repaired); nil when it cannot be opened.
    package static func text(_ path: String, limit: Int = 64 * 1024) -> String? {
        bytes(path, limit: limit).map { String(decoding: $0, as: UTF8.self) }
    }
}
