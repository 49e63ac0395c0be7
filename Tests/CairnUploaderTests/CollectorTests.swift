// The test collector itself: it must decode batches independently and correctly,
// survive malformed input, and report only 2xx-answered records as events.
import CairnTestSupport
import CairnStore
import Foundation
import Testing

@testable import CairnUploader

@Suite struct CollectorTests {
    private let generous: Duration = .seconds(60)

    @Test func decodesRecordsAndMetadataAndSurvivesMalformedBodies() throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        let transport = HTTPTransport()
        let url = collector.baseURL + "/v1/batch"
        func send(_ body: [UInt8], key: String) -> Int? {
            let request = UploadRequest(url: url, headers: [
                HTTPHeader("Content-Encoding", "zstd"), HTTPHeader("Idempotency-Key", key),
            ], body: body, idempotencyKey: key)
            if case .response(let response) = transport.send(request, attempt: 0, timeout: generous) {
                return response.status
            }
            return nil
        }

        let first = [#"{"event":"a"}"#, #"{"event":"b","n":1}"#]
        let second = [#"{"event":"c"}"#, "", #"{"text":"tab\tand \"quotes\""}"#]
        let encoder = try FrameEncoder()
        let firstBatch = try encoder.encode(batchID: 7, records: first.map { Array($0.utf8) })
        let secondBatch = try encoder.encode(batchID: UInt64.max, records: second.map { Array($0.utf8) })
        try collector.script([["status": 500]])
        #expect(send(firstBatch, key: "first") == 500)
        #expect(send(secondBatch, key: "second") == 200)
        #expect(send(Array("not zstd at all".utf8), key: "garbage") == 200)
        #expect(send(Array(secondBatch.dropLast(5)), key: "truncated") == 200)
        #expect(send(firstBatch, key: "first") == 200)

        let attempts = try collector.requests()
        try #require(attempts.count == 5)
        #expect(attempts[0].records == first)
        #expect(attempts[0].batch?.batch_id == 7)
        #expect(attempts[0].batch?.record_count == 2)
        #expect(attempts[0].batch?.tag == "CRNB")
        #expect(attempts[0].batch?.version == 1)
        #expect(attempts[0].error == nil)
        #expect(attempts[1].records == second)
        #expect(attempts[1].batch?.batch_id == UInt64.max)
        #expect(attempts[1].batch?.content_size == second.reduce(0) { $0 + $1.utf8.count + 1 })
        #expect(attempts[2].error != nil)
        #expect(attempts[2].records == nil)
        #expect(attempts[3].error != nil)
        #expect(attempts.map(\.seq) == [0, 1, 2, 3, 4])

        // Events: records of 2xx answers only, duplicates kept, each with its key.
        let events = try collector.events()
        let expected = second.map { CollectedEvent(idempotency_key: "second", batch_id: UInt64.max, record: $0) }
            + first.map { CollectedEvent(idempotency_key: "first", batch_id: 7, record: $0) }
        #expect(events.filter { $0.idempotency_key != "truncated" } == expected)

        try collector.reset()
        #expect(try collector.requests().isEmpty)
        #expect(try collector.events().isEmpty)
    }

    @Test func defaultResponseAndScriptOrder() throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        let transport = HTTPTransport()
        let request = UploadRequest(url: collector.baseURL + "/v1/batch", headers: [],
                                    body: [1], idempotencyKey: "k")
        func status() throws -> Int {
            guard case .response(let response) = transport.send(request, attempt: 0, timeout: generous) else {
                throw CollectorError.control("no response")
            }
            return response.status
        }
        try collector.setDefault(["status": 503])
        try collector.script([["status": 201], ["status": 202]])
        #expect(try [status(), status(), status()] == [201, 202, 503])
        try collector.reset()
        #expect(try status() == 200)
    }

    /// As docs/FORMATS.md asks of a collector: a key it answered 2xx is answered 2xx
    /// again (its answer was lost, the sender asks again), whatever the script says; a
    /// key it refused is not accepted.
    @Test func aKeyAnsweredTwoXXIsAnsweredTwoXXAgain() throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        let transport = HTTPTransport()
        func status(_ key: String) throws -> Int {
            let request = UploadRequest(url: collector.baseURL + "/v1/batch", headers: [HTTPHeader("Idempotency-Key", key)],
                                        body: [1], idempotencyKey: key)
            guard case .response(let response) = transport.send(request, attempt: 0, timeout: generous) else {
                throw CollectorError.control("no response")
            }
            return response.status
        }
        try collector.script([["status": 200], ["status": 400], ["status": 201]])
        #expect(try [status("a"), status("a"), status("b"), status("b"), status("a")] == [200, 200, 400, 201, 200])
        let replayed = try collector.requests().map { $0.response.replayed == true }
        #expect(replayed == [false, true, false, false, true])
        try collector.reset()
        try collector.script([["status": 400]])
        #expect(try status("a") == 400, "reset forgets the keys")
    }

    @Test func refusesBadControlInputAndBadFraming() throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        for script in [#"{"status":200}"#, #"[{"status":99}]"#, #"[{"stall":-1}]"#,
                       #"[{"bogus":1}]"#, #"[1]"#, "not json"] {
            let (status, _) = try CollectorProcess.exchange(
                port: collector.port, method: "POST", path: "/_control/script", body: Array(script.utf8))
            #expect(status == 400, "\(script)")
        }
        // A data request whose Content-Length is not a number is recorded with an error
        // and answered 400; the collector keeps serving.
        let fd = try CollectorProcess.connectLoopback(port: collector.port)
        let bad = Array("POST /v1/batch HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n".utf8)
        _ = bad.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        var buffer = [UInt8](repeating: 0, count: 4096)
        _ = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        close(fd)
        #expect(String(decoding: buffer, as: UTF8.self).hasPrefix("HTTP/1.1 400"))
        let attempts = try collector.requests()
        #expect(attempts.count == 1)
        #expect(attempts.first?.error?.contains("Content-Length") == true)
        #expect(collector.stderr.isEmpty)
    }
}
