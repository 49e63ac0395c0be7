import CairnTestSupport
import CCairnCrash
import Foundation

/// A fresh temporary directory, removed when the value is deinitialised.
final class TempDir {
    private let directory = try? TemporaryDirectory("cairn-test")
    var path: String { directory?.path ?? "/nonexistent" }
    func file(_ name: String) -> String { path + "/" + name }
}

/// An open C ring, closed on deinit.
final class CRing {
    let handle: OpaquePointer
    init(_ path: String, capacity: UInt64 = UInt64(CAIRN_RING_MIN_CAPACITY), maxRecord: UInt32 = 0,
         reclaim: UInt32 = 64 * 1024) throws {
        var opts = cairn_ring_options_t()
        cairn_ring_options_init(&opts)
        opts.capacity = capacity
        opts.max_record = maxRecord
        opts.reclaim_bytes = reclaim
        var out: OpaquePointer?
        let rc = cairn_ring_open(path, &opts, &out)
        guard rc == 0, let out else { throw RingTestError.open(rc) }
        handle = out
    }
    deinit { cairn_ring_close(handle) }

    @discardableResult
    func append(_ bytes: [UInt8]) -> Int32 {
        bytes.withUnsafeBytes { cairn_ring_append(handle, $0.baseAddress, $0.count) }
    }
    @discardableResult
    func append(_ s: String) -> Int32 { append(Array(s.utf8)) }

    /// Reads every published record from the read cursor on, commits them, returns copies.
    func drain(batch: Int = 64, commit: Bool = true) -> [[UInt8]] {
        var out: [[UInt8]] = []
        var from = cairn_ring_read_pos(handle)
        var recs = [cairn_ring_record_t](repeating: cairn_ring_record_t(), count: batch)
        while true {
            var next: UInt64 = 0
            let n = recs.withUnsafeMutableBufferPointer {
                cairn_ring_peek(handle, from, $0.baseAddress, batch, Int.max, &next)
            }
            // A run of padding alone returns no record but still moves `next`.
            if n < 0 || next == from { break }
            for r in recs.prefix(Int(n)) {
                out.append(Array(UnsafeRawBufferPointer(start: r.data, count: Int(r.len))))
            }
            from = next
        }
        if commit { _ = cairn_ring_commit(handle, from) }
        return out
    }

    var stats: cairn_ring_stats_t {
        var s = cairn_ring_stats_t()
        _ = cairn_ring_stats(handle, &s)
        return s
    }
}

enum RingTestError: Error { case open(Int32) }

/// Carries a C handle or pointer into a thread's closure. Tests that use it synchronise
/// through the C core (the ring's own atomics), which is what they test.
struct Unchecked<T>: @unchecked Sendable {
    let value: T
    init(_ value: T) { self.value = value }
}


/// Runs a command to completion, returning its exit status and standard output.
func run(_ argv: [String], stdin: Data? = nil) throws -> (status: Int32, stdout: Data, stderr: Data) {
    let f = try runToEnd("/usr/bin/env", argv, stdin: stdin)
    return (f.status, f.stdout, f.stderr)
}
