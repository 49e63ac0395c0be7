import CairnTestSupport
import CairnUploader
import Foundation
import Testing

/// gzip bodies read back by tools that are not ours: Python's `gzip` module and the
/// `gzip` command.
@Suite struct GzipTests {
    @Test func pythonAndGzipReadItBack() throws {
        var rng = SplitMix(seed: 21)
        let text = Array((0..<200_000).map { _ in UInt8(ascii: "a") + UInt8(rng.next() % 6) })
        for input in [[], Array("{\"resourceLogs\":[]}".utf8), text, (0..<70_000).map { _ in UInt8(truncatingIfNeeded: rng.next()) }] {
            for level in [1, 6, 9, 42] {
                let gz = try #require(Gzip.compress(input, level: level))
                #expect(gz.count >= 18 && gz[0] == 0x1F && gz[1] == 0x8B, "a gzip header")
                let dir = try TemporaryDirectory()
                let path = dir.path + "/body.gz"
                try Data(gz).write(to: URL(fileURLWithPath: path))
                let py = try runToEnd("/usr/bin/env", ["python3", "-c",
                                                       "import gzip,sys; sys.stdout.buffer.write(gzip.decompress(open(sys.argv[1],'rb').read()))",
                                                       path])
                #expect(py.status == 0 && Array(py.stdout) == input, "\(py.err)")
                let gunzip = try runToEnd("/usr/bin/env", ["gzip", "-dc", path])
                #expect(gunzip.status == 0 && Array(gunzip.stdout) == input)
            }
        }
        // Text compresses: the OTLP bodies it is for are repetitive.
        #expect(try #require(Gzip.compress(text)).count < text.count / 2)
    }
}
