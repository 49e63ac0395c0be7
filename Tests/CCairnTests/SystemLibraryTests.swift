import CLMDB
import CUnwind
import CZstd
import Foundation
import Testing

/// The system libraries declared as SwiftPM systemLibrary targets (pkg-config, Debian
/// packages) resolve, link and work.
@Suite struct SystemLibraryTests {
    @Test func zstdRoundTrips() {
        let input = Array(repeating: Array(#"{"name":"x"}"#.utf8), count: 100).flatMap { $0 }
        var compressed = [UInt8](repeating: 0, count: ZSTD_compressBound(input.count))
        let n = ZSTD_compress(&compressed, compressed.count, input, input.count, 1)
        #expect(ZSTD_isError(n) == 0 && n < input.count / 10)
        var output = [UInt8](repeating: 0, count: input.count)
        #expect(ZSTD_decompress(&output, output.count, compressed, n) == input.count)
        #expect(output == input)
    }

    @Test func lmdbOpensAnEnvironmentAndCommits() throws {
        let dir = TempDir()
        var env: OpaquePointer?
        #expect(mdb_env_create(&env) == 0)
        defer { mdb_env_close(env) }
        #expect(mdb_env_open(env, dir.path, 0, 0o600) == 0)
        var txn: OpaquePointer?
        var dbi = MDB_dbi()
        #expect(mdb_txn_begin(env, nil, 0, &txn) == 0)
        #expect(mdb_dbi_open(txn, nil, 0, &dbi) == 0)
        var keyBytes = Array("k".utf8), valueBytes = Array("v".utf8)
        let rc = keyBytes.withUnsafeMutableBytes { k in
            valueBytes.withUnsafeMutableBytes { v in
                var key = MDB_val(mv_size: k.count, mv_data: k.baseAddress)
                var value = MDB_val(mv_size: v.count, mv_data: v.baseAddress)
                return mdb_put(txn, dbi, &key, &value, 0)
            }
        }
        #expect(rc == 0)
        #expect(mdb_txn_commit(txn) == 0)
        #expect(FileManager.default.fileExists(atPath: dir.file("data.mdb")))
    }

    /// libunwind's entry points are macros over architecture-specific names, which
    /// Swift does not import; the C crash writer calls them. Here: the header resolves
    /// through pkg-config and its constants are the documented ones.
    @Test func libunwindHeaderResolves() {
        #expect(UNW_ESUCCESS.rawValue == 0)
        #expect(UNW_EBADFRAME.rawValue > 0)
    }
}
