import Glibc

/// Reads small text files (procfs, sysfs, /etc) with plain system calls: the start
/// path reads a handful of them, and Foundation's file APIs cost far more on first use.
package enum SmallFile {
    /// The file's bytes, up to `limit`; nil when it cannot be opened.
    package static func bytes(_ path: String, limit: Int = 64 * 1024) -> [UInt8]? {
        try? read(path, limit: limit).get()
    }

    /// The errno of a failed read, as an error.
    package struct Failure: Error, Equatable {
        /// The errno value.
        package var code: Int32
    }

    /// The file's bytes, up to `limit`, or the errno of the call that failed (`EISDIR`
    /// for a directory, which `open` accepts and `read` refuses).
    package static func read(_ path: String, limit: Int = 64 * 1024) -> Result<[UInt8], Failure> {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return .failure(Failure(code: errno)) }
        defer { close(fd) }
        var out: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while out.count < limit {
            let n = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, min($0.count, limit - out.count)) }
            if n < 0 && errno == EINTR { continue }
            if n < 0 { return .failure(Failure(code: errno)) }
            if n == 0 { break }
            out += chunk[0..<n]
        }
        return .success(out)
    }

    /// The file as UTF-8 text (invalid bytes repaired); nil when it cannot be opened.
    package static func text(_ path: String, limit: Int = 64 * 1024) -> String? {
        bytes(path, limit: limit).map { String(decoding: $0, as: UTF8.self) }
    }
}

extension SmallFile {
    /// Creates `path` and its missing parents, mode 0700 (what Cairn keeps, ids included,
    /// is for the service's user alone; a directory that exists keeps its mode); errno of
    /// the first failure, or 0.
    package static func makeDirectories(_ path: String) -> Int32 {
        var st = stat()
        if stat(path, &st) == 0 { return (st.st_mode & S_IFMT) == S_IFDIR ? 0 : ENOTDIR }
        var parent = ""
        if let slash = path.utf8.lastIndex(of: UInt8(ascii: "/")) { parent = String(path[..<slash]) }
        if !parent.isEmpty && parent != path {
            let rc = makeDirectories(parent)
            if rc != 0 { return rc }
        }
        if mkdir(path, 0o700) != 0 && errno != EEXIST { return errno }
        return 0
    }

    /// The names in a directory (without `.` and `..`); empty when it cannot be read.
    package static func names(in directory: String) -> [String] {
        guard let dir = opendir(directory) else { return [] }
        defer { closedir(dir) }
        var out: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name != "." && name != ".." { out.append(name) }
        }
        return out
    }

    /// The target of a symbolic link, or nil.
    package static func linkTarget(_ path: String) -> String? {
        var buf = [CChar](repeating: 0, count: 4096)
        let n = readlink(path, &buf, buf.count - 1)
        guard n > 0 else { return nil }
        return String(decoding: buf[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
