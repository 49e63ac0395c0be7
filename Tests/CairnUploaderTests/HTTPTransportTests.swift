// HTTPTransport against the real test collector over TCP on 127.0.0.1. Each test runs
// its own collector, so tests can run in parallel. Timeouts are generous and nothing
// here measures time: a busy two-core machine must pass as well as an idle one.
import CairnBase
import CairnTestSupport
import CairnStore
import Foundation
import Testing

@testable import CairnUploader

/// Long enough for any loopback exchange on a loaded machine.
private let generous: Duration = .seconds(60)

/// A batch request as the uploader builds it.
private func batchRequest(_ collector: CollectorProcess, batchID: UInt64, records: [String],
                          key: String) throws -> UploadRequest {
    let body = try FrameEncoder().encode(batchID: batchID, records: records.map { Array($0.utf8) })
    return UploadRequest(url: collector.baseURL + "/v1/batch", headers: [
        HTTPHeader("Content-Type", "application/x-ndjson"),
        HTTPHeader("Content-Encoding", "zstd"),
        HTTPHeader("Idempotency-Key", key),
        HTTPHeader("User-Agent", "cairn-swift/test"),
    ], body: body, idempotencyKey: key)
}

/// The response of a result, failing the test when there is none.
private func response(_ result: TransportResult,
                      sourceLocation: SourceLocation = #_sourceLocation) throws -> TransportResponse {
    switch result {
    case .response(let response):
        return response
    case .failure(let failure):
        Issue.record("expected a response, got \(failure.kind): \(failure.message)",
                     sourceLocation: sourceLocation)
        throw failure
    }
}

/// The failure of a result, or `nil` (recorded as an issue) when a response came.
private func failure(_ result: TransportResult,
                     sourceLocation: SourceLocation = #_sourceLocation) -> TransportFailure? {
    switch result {
    case .response(let response):
        Issue.record("expected a failure, got status \(response.status)", sourceLocation: sourceLocation)
        return nil
    case .failure(let failure):
        return failure
    }
}

@Suite struct HTTPTransportTests {
    @Test func batchArrivesByteIdenticalOnEveryAttempt() throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        let records = [#"{"event":"checkout","plan":"pro"}"#, #"{"event":"ünïcødé ✓"}"#, "{}"]
        let request = try batchRequest(collector, batchID: 42, records: records, key: "key-42")
        try collector.script([["status": 500], ["status": 503]])
        let transport = HTTPTransport()

        let statuses = try (0..<3).map { attempt in
            try response(transport.send(request, attempt: attempt, timeout: generous)).status
        }
        #expect(statuses == [500, 503, 200])

        let expectedSHA = try sha256Hex(request.body)
        let attempts = try collector.requests()
        try #require(attempts.count == 3)
        for (index, attempt) in attempts.enumerated() {
            #expect(attempt.method == "POST")
            #expect(attempt.path == "/v1/batch")
            #expect(attempt.body_length == request.body.count)
            #expect(attempt.body_sha256 == expectedSHA)
            #expect(attempt.body == request.body)
            #expect(attempt.headerValues("Idempotency-Key") == ["key-42"])
            #expect(attempt.headerValues("Cairn-Retry-Count") == ["\(index)"])
            #expect(attempt.headerValues("Content-Encoding") == ["zstd"])
            #expect(attempt.headerValues("Content-Type") == ["application/x-ndjson"])
            #expect(attempt.headerValues("User-Agent") == ["cairn-swift/test"])
            #expect(attempt.headerValues("Expect").isEmpty)
            #expect(attempt.headerValues("Accept").isEmpty)
            // The request's headers in their order, then the retry count.
            let names = attempt.headerNames.filter {
                !["host", "content-length"].contains($0.lowercased())
            }
            #expect(names == ["Content-Type", "Content-Encoding", "Idempotency-Key", "User-Agent",
                              "Cairn-Retry-Count"])
            #expect(attempt.error == nil)
            #expect(attempt.records == records)
            #expect(attempt.batch?.batch_id == 42)
            #expect(attempt.batch?.record_count == 3)
        }
        #expect(collector.stderr.isEmpty)
    }

    @Test func headersAreSentAsGiven() throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        let request = UploadRequest(url: collector.baseURL + "/v1/other", headers: [
            HTTPHeader("X-Tag", "first"),
            HTTPHeader("X-Empty", ""),
            HTTPHeader("Cairn-Retry-Count", "9"),
            HTTPHeader("X-Tag", "second"),
            HTTPHeader("Accept", "application/json"),
        ], body: Array("plain".utf8), idempotencyKey: "k")
        #expect(try response(HTTPTransport().send(request, attempt: 5, timeout: generous)).status == 200)

        let attempt = try #require(try collector.requests().first)
        #expect(attempt.path == "/v1/other")
        #expect(attempt.headerValues("X-Tag") == ["first", "second"])
        #expect(attempt.headerValues("X-Empty") == [""])
        #expect(attempt.headerValues("Cairn-Retry-Count") == ["5"])
        #expect(attempt.headerValues("Accept") == ["application/json"])
        #expect(attempt.headerValues("Content-Type").isEmpty)
        #expect(attempt.body == Array("plain".utf8))
        #expect(attempt.records == nil)  // not zstd-encoded, so not decoded
    }

    @Test func scriptedAnswersComeBackWithStatusHeadersAndBody() throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        let date = "Wed, 21 Oct 2015 07:28:00 GMT"
        try collector.script([
            ["status": 429, "retry_after": "2"],
            ["status": 503, "retry_after": date],
            ["status": 500],
            ["status": 400, "body": "bad"],
            ["status": 202, "headers": ["X-Collector": "yes"]],
        ])
        let request = try batchRequest(collector, batchID: 1, records: ["{}"], key: "k1")
        let transport = HTTPTransport()
        let answers = try (0..<5).map {
            try response(transport.send(request, attempt: $0, timeout: generous))
        }
        #expect(answers.map(\.status) == [429, 503, 500, 400, 202])
        #expect(answers[0].header("Retry-After") == "2")
        #expect(answers[1].header("retry-after") == date)
        #expect(answers[2].header("Retry-After") == nil)
        #expect(answers[3].body == Array("bad".utf8))
        #expect(answers[3].bodyTruncated == false)
        #expect(answers[4].header("X-Collector") == "yes")
        for answer in answers {
            #expect(answer.header("Content-Length") == "\(answer.body.count)")
            #expect(!answer.headers.contains { $0.name.hasPrefix("HTTP/") || $0.name.isEmpty })
        }
    }

    @Test func getRequestsCarryNoBody() throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        let transport = HTTPTransport()
        let list = UploadRequest(method: "GET", url: collector.baseURL + "/_control/requests",
                                 headers: [], body: [], idempotencyKey: "")
        let listed = try response(transport.send(list, attempt: 0, timeout: generous))
        #expect(listed.status == 200)
        #expect(String(decoding: listed.body, as: UTF8.self) == "[]")
        let missing = UploadRequest(method: "GET", url: collector.baseURL + "/nothing",
                                    headers: [], body: [], idempotencyKey: "")
        #expect(try response(transport.send(missing, attempt: 0, timeout: generous)).status == 404)
    }

    @Test func stallLongerThanTheTimeoutIsATimeout() throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        try collector.script([["stall": 30]])
        let request = try batchRequest(collector, batchID: 2, records: ["{}"], key: "k2")
        let transport = HTTPTransport()

        let timedOut = failure(transport.send(request, attempt: 0, timeout: .seconds(1)))
        #expect(timedOut?.kind == .timeout)
        #expect(timedOut?.message.isEmpty == false)
        // The same transport goes on working (on a new connection).
        #expect(try response(transport.send(request, attempt: 1, timeout: generous)).status == 200)
        let attempts = try collector.requests()
        #expect(attempts.map(\.retry_count) == ["0", "1"])
    }

    @Test func droppedConnectionIsANetworkFailure() throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        try collector.script([["drop": true], ["drop": true]])
        let request = try batchRequest(collector, batchID: 3, records: ["{}"], key: "k3")
        // A fresh transport, so the first request goes over a fresh connection: on a
        // reused one, the transport resends once when the server closes it unanswered.
        let dropped = failure(HTTPTransport().send(request, attempt: 0, timeout: generous))
        #expect(dropped?.kind == .network)
        let attempts = try collector.requests()
        #expect(attempts.first?.answered == false)
    }

    @Test func refusedConnectionIsAConnectFailure() throws {
        let port = try CollectorProcess.closedPort()
        let request = UploadRequest(url: "http://127.0.0.1:\(port)/v1/batch", headers: [],
                                    body: [1, 2, 3], idempotencyKey: "k")
        let refused = failure(HTTPTransport().send(request, attempt: 0, timeout: generous))
        #expect(refused?.kind == .connect)
    }

    @Test func untrustedCertificateIsRefused() throws {
        let collector = try CollectorProcess(selfSignedTLS: true)
        defer { collector.stop() }
        let request = UploadRequest(url: collector.baseURL + "/v1/batch", headers: [],
                                    body: [1], idempotencyKey: "k")
        let refused = failure(HTTPTransport().send(request, attempt: 0, timeout: generous))
        #expect(refused?.kind == .tls, "\(refused?.message ?? "")")
    }

    @Test func invalidRequestsAreRefusedWithoutSending() throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        let good = collector.baseURL + "/v1/batch"
        let requests = [
            UploadRequest(url: "", headers: [], body: [], idempotencyKey: "k"),
            UploadRequest(url: "not a url", headers: [], body: [], idempotencyKey: "k"),
            UploadRequest(url: "ftp://127.0.0.1/x", headers: [], body: [], idempotencyKey: "k"),
            UploadRequest(url: "file:///etc/passwd", headers: [], body: [], idempotencyKey: "k"),
            UploadRequest(url: "http://exa mple.com/", headers: [], body: [], idempotencyKey: "k"),
            UploadRequest(url: good + "\0/evil", headers: [], body: [], idempotencyKey: "k"),
            UploadRequest(url: "http://", headers: [], body: [], idempotencyKey: "k"),
            UploadRequest(url: "http://[::1/x", headers: [], body: [], idempotencyKey: "k"),
            UploadRequest(url: "http://127.0.0.1:99999/x", headers: [], body: [], idempotencyKey: "k"),
            UploadRequest(url: good, headers: [HTTPHeader("X-A", "b\r\nX-Injected: 1")],
                          body: [], idempotencyKey: "k"),
            UploadRequest(url: good, headers: [HTTPHeader("X-A", "b\0c")], body: [], idempotencyKey: "k"),
            UploadRequest(url: good, headers: [HTTPHeader("Bad Name", "v")], body: [], idempotencyKey: "k"),
            UploadRequest(url: good, headers: [HTTPHeader("", "v")], body: [], idempotencyKey: "k"),
            UploadRequest(method: "PO ST", url: good, headers: [], body: [], idempotencyKey: "k"),
            UploadRequest(method: "", url: good, headers: [], body: [], idempotencyKey: "k"),
        ]
        let transport = HTTPTransport()
        for request in requests {
            let refused = failure(transport.send(request, attempt: 0, timeout: generous))
            #expect(refused?.kind == .invalidRequest, "\(request.method) \(request.url.debugDescription) \(request.headers)")
        }
        #expect(try collector.requests().isEmpty)
    }

    @Test func bodiesAreBinarySafeAtAnySize() throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        var generator = SystemRandomNumberGenerator()
        var large = (0..<(3 << 20)).map { _ in UInt8.random(in: 0...255, using: &generator) }
        large[0] = 0
        large[large.count - 1] = 0
        let transport = HTTPTransport()
        for body in [large, [], [0], [0, 0x0A, 0x0D, 0]] {
            let request = UploadRequest(url: collector.baseURL + "/v1/blob", headers: [
                HTTPHeader("Content-Type", "application/octet-stream"),
            ], body: body, idempotencyKey: "blob")
            #expect(try response(transport.send(request, attempt: 0, timeout: generous)).status == 200)
        }
        let attempts = try collector.requests()
        try #require(attempts.count == 4)
        #expect(attempts[0].body_length == large.count)
        #expect(attempts[0].body_sha256 == (try sha256Hex(large)))
        #expect(attempts[0].headerValues("Expect").isEmpty)
        #expect(attempts[1].body_length == 0)
        #expect(attempts[1].body == [])
        #expect(attempts[2].body == [0])
        #expect(attempts[3].body == [0, 0x0A, 0x0D, 0])
    }

    @Test func responseBodyIsCappedAndTheConnectionStaysUsable() throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        try collector.script([["status": 200, "body": String(repeating: "x", count: 100_000)]])
        let request = try batchRequest(collector, batchID: 5, records: ["{}"], key: "k5")
        let transport = HTTPTransport(maxResponseBodyBytes: 1000)

        let capped = try response(transport.send(request, attempt: 0, timeout: generous))
        #expect(capped.status == 200)
        #expect(capped.body == Array(repeating: UInt8(ascii: "x"), count: 1000))
        #expect(capped.bodyTruncated)
        let next = try response(transport.send(request, attempt: 1, timeout: generous))
        #expect(next.status == 200)
        #expect(!next.bodyTruncated)
        let attempts = try collector.requests()
        #expect(Set(attempts.map(\.connection_id)).count == 1)
    }

    @Test func hundredSequentialRequestsReuseOneConnection() throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        let transport = HTTPTransport()
        let encoder = try FrameEncoder()
        for index in 0..<100 {
            let body = try encoder.encode(batchID: UInt64(index), records: [Array(#"{"n":\#(index)}"#.utf8)])
            let request = UploadRequest(url: collector.baseURL + "/v1/batch", headers: [
                HTTPHeader("Content-Encoding", "zstd"), HTTPHeader("Idempotency-Key", "k\(index)"),
            ], body: body, idempotencyKey: "k\(index)")
            #expect(try response(transport.send(request, attempt: 0, timeout: generous)).status == 200)
        }
        let attempts = try collector.requests()
        #expect(attempts.count == 100)
        #expect(attempts.map(\.idempotency_key) == (0..<100).map { "k\($0)" })
        #expect(attempts.map { $0.batch?.batch_id } == (0..<100).map { UInt64($0) })
        #expect(Set(attempts.map(\.connection_id)).count == 1)
        #expect(Set(attempts.map(\.client_port)).count == 1)
    }

    @Test func concurrentSendersEachGetTheirOwnConnection() throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        let transport = HTTPTransport()
        let url = collector.baseURL + "/v1/batch"
        let statuses = Locked<[String: Int]>([:])
        DispatchQueue.concurrentPerform(iterations: 4) { sender in
            for index in 0..<10 {
                let key = "s\(sender)-\(index)"
                let request = UploadRequest(url: url, headers: [HTTPHeader("Idempotency-Key", key)],
                                            body: Array(key.utf8), idempotencyKey: key)
                let status: Int
                switch transport.send(request, attempt: 0, timeout: generous) {
                case .response(let response): status = response.status
                case .failure: status = -1
                }
                statuses.withLock { $0[key] = status }
            }
        }
        let all = statuses.withLock { $0 }
        #expect(all.count == 40)
        #expect(all.values.allSatisfy { $0 == 200 })
        let attempts = try collector.requests()
        #expect(attempts.count == 40)
        for attempt in attempts {
            #expect(attempt.body.map { String(decoding: $0, as: UTF8.self) } == attempt.idempotency_key)
        }
    }

    @Test func timeoutsConvertToWholeMilliseconds() {
        #expect(HTTPTransport.milliseconds(.seconds(10)) == 10_000)
        #expect(HTTPTransport.milliseconds(.milliseconds(1500)) == 1500)
        #expect(HTTPTransport.milliseconds(.microseconds(1500)) == 2)
        #expect(HTTPTransport.milliseconds(.zero) == 1)
        #expect(HTTPTransport.milliseconds(.seconds(-5)) == 1)
        #expect(HTTPTransport.milliseconds(.seconds(Int64.max)) == Int64(Int32.max))
    }
}

/// Connection reuse, framing and the failures a collector (or something pretending to
/// be one) can cause, each checked through what the collector saw.
@Suite struct HTTPTransportConnectionTests {
    private func post(_ collector: CollectorProcess, _ key: String) -> UploadRequest {
        UploadRequest(url: collector.baseURL + "/v1/batch", headers: [HTTPHeader("Idempotency-Key", key)],
                      body: Array(key.utf8), idempotencyKey: key)
    }

    @Test func keptAliveConnectionCarriesChunkedAndPlainResponses() throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        let text = #"{"ok":true,"note":"a chunked body longer than one chunk"}"#
        try collector.script([
            ["chunked": true, "body": text, "retry_after": "7"],
            ["status": 202],
            ["chunked": true, "body": ""],
            ["status": 200, "body": "last"],
        ])
        let transport = HTTPTransport()
        let answers = try (0..<4).map { try response(transport.send(post(collector, "k\($0)"), attempt: 0, timeout: generous)) }
        #expect(answers.map(\.status) == [200, 202, 200, 200])
        #expect(answers[0].body == Array(text.utf8))
        #expect(answers[0].header("Transfer-Encoding") == "chunked")
        #expect(answers[0].header("Retry-After") == "7")
        #expect(answers[0].header("X-Trailer") == nil)  // trailers are read, not kept
        #expect(answers[2].body.isEmpty)
        #expect(answers[3].body == Array("last".utf8))
        let attempts = try collector.requests()
        #expect(attempts.map(\.idempotency_key) == ["k0", "k1", "k2", "k3"])
        #expect(Set(attempts.map(\.connection_id)).count == 1)
    }

    @Test func connectionCloseStartsANewConnection() throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        try collector.script([["close": true], ["status": 200], ["status": 200]])
        let transport = HTTPTransport()
        for index in 0..<3 {
            #expect(try response(transport.send(post(collector, "k\(index)"), attempt: 0, timeout: generous)).status == 200)
        }
        let ids = try collector.requests().map(\.connection_id)
        #expect(ids.count == 3)
        #expect(ids[0] != ids[1])
        #expect(ids[1] == ids[2])
    }

    @Test func serverClosingAnIdleConnectionIsTransparent() throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        try collector.script([["close_after": true], ["status": 200]])
        let transport = HTTPTransport()
        for index in 0..<2 {
            #expect(try response(transport.send(post(collector, "k\(index)"), attempt: 0, timeout: generous)).status == 200)
        }
        let attempts = try collector.requests()
        #expect(attempts.map(\.idempotency_key) == ["k0", "k1"])
        #expect(attempts[0].connection_id != attempts[1].connection_id)
    }

    @Test func reusedConnectionDroppedUnansweredIsRetriedOnceOnANewOne() throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        try collector.script([["status": 200], ["drop": true], ["status": 201]])
        let transport = HTTPTransport()
        #expect(try response(transport.send(post(collector, "first"), attempt: 0, timeout: generous)).status == 200)
        #expect(try response(transport.send(post(collector, "second"), attempt: 3, timeout: generous)).status == 201)
        let attempts = try collector.requests()
        #expect(attempts.map(\.idempotency_key) == ["first", "second", "second"])
        #expect(attempts.map(\.retry_count) == ["0", "3", "3"])
        #expect(attempts[0].connection_id == attempts[1].connection_id)
        #expect(attempts[1].connection_id != attempts[2].connection_id)

        // Only once: a second drop on the new connection is the caller's failure.
        try collector.script([["drop": true], ["drop": true]])
        let failed = failure(transport.send(post(collector, "third"), attempt: 0, timeout: generous))
        #expect(failed?.kind == .network)
        #expect(try collector.requests().count == 5)
    }

    @Test func malformedOrCutShortRepliesAreNetworkFailures() throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        let replies = [
            "SSH-2.0-OpenSSH_9.2\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc",
            "HTTP/1.1 2x0 OK\r\n\r\n",
            "HTTP/1.1 200 OK\r\nBad Header\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
            "",
        ]
        try collector.script(replies.map { ["raw": $0] })
        for (index, reply) in replies.enumerated() {
            let failed = failure(HTTPTransport().send(post(collector, "k\(index)"), attempt: 0, timeout: generous))
            #expect(failed?.kind == .network, "\(reply.debugDescription): \(failed?.message ?? "")")
            #expect(failed?.message.isEmpty == false)
        }
    }

    @Test func bodyDelimitedByTheCloseIsAResponse() throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        try collector.script([
            ["raw": "HTTP/1.0 200 OK\r\nX-A: 1\r\n\r\nuntil the close"],
            ["raw": "HTTP/1.1 100 Continue\r\nX-Interim: yes\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n"],
        ])
        let transport = HTTPTransport()
        let first = try response(transport.send(post(collector, "a"), attempt: 0, timeout: generous))
        #expect(first.status == 200)
        #expect(first.headers == [HTTPHeader("X-A", "1")])
        #expect(first.body == Array("until the close".utf8))
        let second = try response(transport.send(post(collector, "b"), attempt: 0, timeout: generous))
        #expect(second.status == 204)
        #expect(second.headers.isEmpty)  // the interim response's headers are not kept
    }

    @Test func bodyFarOverTheLimitClosesTheConnectionInsteadOfDraining() throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        try collector.script([["status": 200, "body": String(repeating: "y", count: 3 << 20)]])
        let transport = HTTPTransport(maxResponseBodyBytes: 10)
        let capped = try response(transport.send(post(collector, "big"), attempt: 0, timeout: generous))
        #expect(capped.body == Array(repeating: UInt8(ascii: "y"), count: 10))
        #expect(capped.bodyTruncated)
        #expect(try response(transport.send(post(collector, "next"), attempt: 0, timeout: generous)).status == 200)
        let ids = try collector.requests().map(\.connection_id)
        #expect(ids.count == 2)
        #expect(Set(ids).count == 2)
    }

    @Test func ipv6LiteralsAndHostNamesAreConnectedTo() throws {
        let port = try CollectorProcess.closedPort()
        // Nothing listens there (or IPv6 is off): a connect failure, not a refused URL.
        for url in ["http://[::1]:\(port)/v1/batch", "http://localhost:\(port)/v1/batch?x=1#frag"] {
            let request = UploadRequest(url: url, headers: [], body: [1], idempotencyKey: "k")
            let refused = failure(HTTPTransport().send(request, attempt: 0, timeout: generous))
            #expect(refused?.kind == .connect, "\(url): \(refused?.message ?? "")")
        }
        let collector = try CollectorProcess()
        defer { collector.stop() }
        let byName = UploadRequest(url: "HTTP://LocalHost:\(collector.port)?q=1#not-sent", headers: [],
                                   body: [1], idempotencyKey: "k")
        #expect(try response(HTTPTransport().send(byName, attempt: 0, timeout: generous)).status == 200)
        let attempt = try #require(try collector.requests().first)
        #expect(attempt.path == "/?q=1")
        #expect(attempt.headerValues("Host") == ["localhost:\(collector.port)"])
    }

    @Test func unusableProxySettingRefusesRequests() throws {
        let transport = HTTPTransport(environment: ["http_proxy": "socks5://127.0.0.1:1080"])
        let request = UploadRequest(url: "http://127.0.0.1:9/v1/batch", headers: [], body: [1],
                                    idempotencyKey: "k")
        let refused = failure(transport.send(request, attempt: 0, timeout: generous))
        #expect(refused?.kind == .invalidRequest)
        #expect(refused?.message.contains("http_proxy") == true)
    }

    @Test func plainHTTPLoadsNoTLSLibrary() throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        let output = try runChild("cairn-http-child", [collector.baseURL + "/v1/batch"])
        #expect(output.contains("STATUS 200"), "\(output)")
        #expect(output.contains("LIBSSL no"), "\(output)")
        #expect(output.contains("LIBMBEDTLS no"), "\(output)")
        #expect(try collector.requests().count == 1)
    }
}

/// Runs a child process from the products directory and returns its stdout.
func runChild(_ name: String, _ arguments: [String], environment: [String: String]? = nil) throws -> String {
    try runToEnd(productsDirectory + "/" + name, arguments, environment: environment).out
}
