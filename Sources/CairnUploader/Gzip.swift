import CCairnHTTP
import Glibc

/// gzip (RFC 1952) for request bodies (`Content-Encoding: gzip`, which OTLP collectors
/// accept), through the system's zlib, loaded at the first use (``cairn_http_gzip``).
package enum Gzip {
    /// `bytes` as one gzip member at `level` (1 ... 9); nil when zlib cannot be loaded
    /// here, or memory runs out.
    package static func compress(_ bytes: [UInt8], level: Int = 6) -> [UInt8]? {
        var out: UnsafeMutablePointer<UInt8>?
        var count = 0
        let rc = bytes.withUnsafeBytes { cairn_http_gzip($0.baseAddress, $0.count, Int32(level), &out, &count) }
        guard rc == 0, let out else { return nil }
        defer { free(out) }
        return Array(UnsafeBufferPointer(start: out, count: count))
    }
}
