// The `caFile` option (CAIRN_CA_FILE): read trimmed from the environment, checked at
// start like the other options.
import Cairn
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
