// The `caFile` option (CAIRN_CA_FILE): read trimmed from the environment, checked at
// start like the other options.
import Cairn
import CairnUploader  // HTTPTransport.TLSLibrary
import Foundation
import Testing

@Suite struct CAFileOptionTests {
    @Test func caFileIsReadTrimmedAndMustBeReadable() throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("cairn-ca-\(UUID().uuidString).pem")
        try Data("not checked here: only readable\n".utf8).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let base = ["CAIRN_APP_ID": "orders", "CAIRN_DISTINCT_ID": "host-1"]

        let good = Cairn.Options.fromEnvironment(base.merging(["CAIRN_CA_FILE": " \(file.path)\n"]) { $1 })
        #expect(good.caFile == file.path)
        #expect(throws: Never.self) { try good.validate() }

        #expect(Cairn.Options.fromEnvironment(base.merging(["CAIRN_CA_FILE": "  "]) { $1 }).caFile == nil)

        let missing = file.path + ".absent"
        let bad = Cairn.Options.fromEnvironment(base.merging(["CAIRN_CA_FILE": missing]) { $1 })
        #expect(throws: CairnStartError.invalidOption(
            name: "caFile", reason: "\(missing.debugDescription) is not a readable file (CAIRN_CA_FILE)")) {
            try bad.validate()
        }
        var set = Cairn.Options(appID: "orders", distinctID: "host-1")
        set.caFile = " \(missing) "
        #expect(throws: CairnStartError.self) { try set.validate() }
    }
}

/// The `tlsLibrary` option (CAIRN_TLS_LIBRARY): any case, trimmed; anything else is
/// reported by `validate`, not ignored.
@Suite struct TLSLibraryOptionTests {
    @Test func tlsLibraryIsReadInAnyCaseAndGarbageIsRefused() throws {
        let base = ["CAIRN_APP_ID": "orders", "CAIRN_DISTINCT_ID": "host-1"]
        func read(_ value: String) -> Cairn.Options {
            Cairn.Options.fromEnvironment(base.merging(["CAIRN_TLS_LIBRARY": value]) { $1 })
        }
        #expect(Cairn.Options.fromEnvironment(base).tlsLibrary == .automatic)
        #expect(read(" MbedTLS\n").tlsLibrary == .mbedTLS)
        #expect(read("openssl").tlsLibrary == .openSSL)
        #expect(read("AUTO").tlsLibrary == .automatic)
        #expect(read("   ").tlsLibrary == .automatic)
        #expect(throws: Never.self) { try read("openssl").validate() }
        #expect(throws: CairnStartError.self) { try read("gnutls").validate() }
    }
}
