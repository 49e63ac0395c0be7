import CairnTestSupport
import Foundation
import Testing

/// A service whose machine has neither TLS library (libmbedtls14, libssl3) and an https
/// upload URL: the start says so at once, on stderr, naming both libraries; every event
/// is kept; a later start that can send delivers them all. "Neither" is made real
/// in a mount namespace of the child's own, where both libraries' files read as empty
/// (so it needs root and unshare: skipped without).
@Suite struct TLSUnavailableTests {
    static let libraries = ["/usr/lib/x86_64-linux-gnu/libssl.so.3", "/usr/lib/x86_64-linux-gnu/libmbedtls.so.14",
                            "/usr/lib/aarch64-linux-gnu/libssl.so.3", "/usr/lib/aarch64-linux-gnu/libmbedtls.so.14"]
        .filter { FileManager.default.fileExists(atPath: $0) }
    static let canHide = getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/unshare")
        && libraries.count == 2

    @Test(.enabled(if: canHide, "needs root, unshare and both TLS libraries installed"))
    func withNeitherTLSLibraryTheStartSaysSoAndNothingIsLost() throws {
        // A plain collector, asked for https: nothing can get past the missing TLS library
        // (and the test collector answers its control calls only in plain HTTP). The next
        // start sends to it in plain http, and stored requests follow the destination.
        let collector = try CollectorProcess()
        defer { collector.stop() }
        let dir = try ServiceProcessTests.DataDir()
        let url = collector.baseURL.replacingOccurrences(of: "http://", with: "https://") + "/v1/batch"
        let env = ["CAIRN_APP_ID": "orders", "CAIRN_DATA_DIR": dir.path, "CAIRN_UPLOAD_URL": url, "CAIRN_API_KEY": "k",
                   "CAIRN_BATCH_AGE_MS": "50"]
        // Both libraries' files (symbolic links resolved) read as empty in the child's
        // mount namespace.
        let hide = Self.libraries.map { "mount --bind /dev/null \"$(readlink -f \($0))\"" }.joined(separator: " && ")
        let child = productsDirectory + "/cairn-service-child"
        let without = try runToEnd("/usr/bin/unshare", ["--mount", "/bin/sh", "-c", "\(hide) && exec \"\(child)\" run 20"],
                                   environment: ProcessInfo.processInfo.environment
                                       .filter { !$0.key.hasPrefix("CAIRN_") }.merging(env) { $1 }, timeout: 60)
        #expect(without.status == 0 && !without.signaled, "\(without.err)")
        let said = without.err.split(separator: "\n").filter { $0.contains("cannot work") }
        #expect(said.count == 1, "said once, at start: \(without.err)")
        #expect(said.first.map { $0.contains("libmbedtls") && $0.contains("libssl") } == true,
                "both libraries named: \(said)")
        #expect(try collector.requests().isEmpty, "nothing could be sent")

        // The same service, started again with a URL it can use: everything arrives.
        let received = try ServiceProcessTests.nextStart(env, to: collector)
        #expect(Set(LifecycleTests.childIndexes(received)) == Set(0..<20), "nothing lost")
    }
}
