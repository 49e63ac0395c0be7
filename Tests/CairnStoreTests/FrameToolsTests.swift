// Batches written by Cairn must be readable by tools that are not ours: the zstd CLI
// and Python's `zstandard` (docs/FORMATS.md). These tests fail, never skip, when a
// tool is missing: `make deps` installs them.
import CairnTestSupport
import CairnStore
import Foundation
import Testing

/// The repository root, found from this file's path (Tests/CairnStoreTests/<file>).
/// A fresh temporary directory, removed by the caller.
private func makeTempDirectory() throws -> URL {
    let url = FileManager.default.temporaryDirectory
        .appendingPathComponent("cairn-frame-tools-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    return url
}

/// What a finished tool run left behind.
private struct ToolRun {
    var status: Int32
    var stdout: Data
    var stderr: String
}

/// Runs `arguments` through `/usr/bin/env` (so PATH is searched) in `directory`, by the
/// tests' runner rules (output read as it comes, so it never blocks on a full pipe).
private func run(_ arguments: [String], in directory: URL) throws -> ToolRun {
    let r = try runToEnd("/usr/bin/env", arguments, directory: directory.path)
    return ToolRun(status: r.status, stdout: r.stdout, stderr: r.err)
}

/// Fails the test, naming the missing tool, when `run` shows env could not find it.
private func requireToolFound(_ run: ToolRun, _ tool: String,
                              sourceLocation: SourceLocation = #_sourceLocation) throws {
    try #require(run.status != 127,
                 "\(tool) is not installed or not on PATH (`make deps` installs it): \(run.stderr)",
                 sourceLocation: sourceLocation)
}

/// Expects `output` to be exactly `expected`, describing a difference briefly (the
/// bodies are too large to print).
private func expectSameBytes(_ output: Data, _ expected: [UInt8], _ what: String,
                             sourceLocation: SourceLocation = #_sourceLocation) {
    let actual = [UInt8](output)
    let same = actual == expected
    let common = min(actual.count, expected.count)
    let firstDifference = (0..<common).first { actual[$0] != expected[$0] } ?? common
    #expect(same, "\(what): \(actual.count) bytes, expected \(expected.count); first difference at byte \(firstDifference)",
            sourceLocation: sourceLocation)
}

@Test func zstdCLIReadsABatchAsNDJSON() throws {
    let dir = try makeTempDirectory()
    defer { try? FileManager.default.removeItem(at: dir) }
    let records = sampleEvents(500)
    let average = records.reduce(0) { $0 + $1.count } / records.count
    #expect((300...500).contains(average), "events should be realistic, ~400 B: \(average)")

    let batch = try FrameEncoder().encode(batchID: 1_764_680_000, records: records)
    let batchURL = dir.appendingPathComponent("batch.zst")
    try Data(batch).write(to: batchURL)

    let result = try run(["zstd", "-d", "-c", batchURL.path], in: dir)
    try requireToolFound(result, "zstd")
    #expect(result.status == 0, "zstd -d failed: \(result.stderr)")
    expectSameBytes(result.stdout, joinedBody(records), "zstd -d output")
}

@Test func pythonZstandardChecksABatch() throws {
    let dir = try makeTempDirectory()
    defer { try? FileManager.default.removeItem(at: dir) }
    let records = sampleEvents(500, seed: 2)
    let batch = try FrameEncoder(level: 3).encode(batchID: 77, records: records)
    let batchURL = dir.appendingPathComponent("batch.zst")
    let expectedURL = dir.appendingPathComponent("expected.ndjson")
    try Data(batch).write(to: batchURL)
    try Data(joinedBody(records)).write(to: expectedURL)

    let script = repoRoot.appendingPathComponent("Tests/Tools/check_frame.py").path
    let result = try run(["python3", script, batchURL.path, expectedURL.path, "--batch-id", "77"],
                         in: dir)
    try requireToolFound(result, "python3")
    #expect(result.status == 0, "check_frame.py failed (\(result.status)): \(result.stderr)")
}

@Test func toolsReadABatchMadeWithADictionaryTheyTrained() throws {
    let dir = try makeTempDirectory()
    defer { try? FileManager.default.removeItem(at: dir) }
    // The zstd CLI trains the dictionary from sample events cut into 400-byte blocks.
    let samplesURL = dir.appendingPathComponent("samples.ndjson")
    try Data(joinedBody(sampleEvents(2000, seed: 3))).write(to: samplesURL)
    let dictURL = dir.appendingPathComponent("events.dict")
    let train = try run(["zstd", "-q", "--train", "-B400", "--maxdict=8192", samplesURL.path,
                         "-o", dictURL.path], in: dir)
    try requireToolFound(train, "zstd")
    #expect(train.status == 0, "zstd --train failed: \(train.stderr)")
    let dictionary = [UInt8](try Data(contentsOf: dictURL))

    let records = sampleEvents(40, seed: 4)
    let batch = try FrameEncoder(dictionary: dictionary).encode(batchID: 5, records: records)
    #expect(try FrameDecoder.info(of: batch).dictionaryID != 0)
    let batchURL = dir.appendingPathComponent("batch.zst")
    let expectedURL = dir.appendingPathComponent("expected.ndjson")
    try Data(batch).write(to: batchURL)
    try Data(joinedBody(records)).write(to: expectedURL)

    let cli = try run(["zstd", "-d", "-c", "-D", dictURL.path, batchURL.path], in: dir)
    #expect(cli.status == 0, "zstd -d -D failed: \(cli.stderr)")
    expectSameBytes(cli.stdout, joinedBody(records), "zstd -d -D output")

    let script = repoRoot.appendingPathComponent("Tests/Tools/check_frame.py").path
    let python = try run(["python3", script, batchURL.path, expectedURL.path,
                          "--dict", dictURL.path, "--batch-id", "5"], in: dir)
    try requireToolFound(python, "python3")
    #expect(python.status == 0, "check_frame.py failed (\(python.status)): \(python.stderr)")
}

@Test func checkFrameScriptRejectsADamagedBatch() throws {
    // The checker must be able to fail, or its passing means nothing.
    let dir = try makeTempDirectory()
    defer { try? FileManager.default.removeItem(at: dir) }
    let records = sampleEvents(20, seed: 6)
    var batch = try FrameEncoder().encode(batchID: 1, records: records)
    batch[24] ^= 1  // record count
    let batchURL = dir.appendingPathComponent("batch.zst")
    let expectedURL = dir.appendingPathComponent("expected.ndjson")
    try Data(batch).write(to: batchURL)
    try Data(joinedBody(records)).write(to: expectedURL)
    let script = repoRoot.appendingPathComponent("Tests/Tools/check_frame.py").path
    let result = try run(["python3", script, batchURL.path, expectedURL.path], in: dir)
    try requireToolFound(result, "python3")
    #expect(result.status == 1, "check_frame.py should report the wrong record count: \(result.stderr)")
    #expect(result.stderr.contains("records"), "\(result.stderr)")
}
