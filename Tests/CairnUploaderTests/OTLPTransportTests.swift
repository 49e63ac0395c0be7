import CairnBase
import CairnProcessor
import CairnTestSupport
import CairnUploader
import Foundation
import Testing

/// OTLP/HTTP requests as Cairn builds their bodies, sent by the real transport to the
/// test collector, which decodes them with the official definitions after their
/// Content-Encoding; and a collector's partial success read back from its answer.
@Suite struct OTLPTransportTests {
    static func records() -> [[UInt8]] {
        let processor = Processor(common: { var c = CommonProperties(); c.appID = "orders"; return c }(),
                                  sdkVersion: cairnVersion, clock: EventClock(fixedOffsetMinutes: 0))
        return (0..<20).map { k in
            processor.record(Event(name: "order_\(k)", properties: ["total": .double(Double(k) + 0.5), "note": "é😀"],
                                   timeMillis: 1_796_237_584_512, identity: Identity(distinctID: "host-7"),
                                   sessionID: "01938a2b-c000-7123-8456-7890abcdef01"))
        }
    }

    @Test(arguments: [(OTLPEncoder.Encoding.protobuf, "none"), (.protobuf, "gzip"), (.json, "none"), (.json, "gzip")])
    func exportsDecodeAtTheCollector(encoding: OTLPEncoder.Encoding, compression: String) throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        let encoder = OTLPEncoder(settings: .init(encoding: encoding))
        for r in Self.records() { #expect(encoder.add(r, observedNanos: 0)) }
        let request = try #require(encoder.finish().logs.first)
        var headers = [HTTPHeader("Content-Type", encoding == .protobuf ? "application/x-protobuf" : "application/json")]
        var body = request.body
        if compression == "gzip" {
            body = try #require(Gzip.compress(body))
            headers.append(HTTPHeader("Content-Encoding", "gzip"))
        }
        let sent = UploadRequest(url: collector.baseURL + "/v1/logs", headers: headers, body: body, idempotencyKey: "")
        guard case .response(let answer) = HTTPTransport().send(sent, attempt: 0, timeout: .seconds(20)) else {
            Issue.record("no answer")
            return
        }
        #expect(answer.status == 200)
        let attempt = try #require(try collector.rawRequests().first)
        #expect(attempt["error"] is NSNull, "\(attempt["error"] ?? "")")
        #expect(attempt["otlp_signal"] as? String == "logs")
        let message = try #require(attempt["otlp"] as? [String: Any])
        let logs = (message["resource_logs"] as? [[String: Any]])?.first?["scope_logs"] as? [[String: Any]]
        let recordsOut = logs?.first?["log_records"] as? [[String: Any]] ?? []
        #expect(recordsOut.count == 20)
        #expect(Set(recordsOut.compactMap { $0["event_name"] as? String }) == Set((0..<20).map { "order_\($0)" }))
    }

    /// A 200 whose body is a partial success: the answer's body holds it, read whole.
    @Test func partialSuccessComesBack() throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        // ExportLogsServiceResponse { partial_success { rejected_log_records: 2, error_message: "too old" } }
        let answerHex = "0a0b08021207746f6f206f6c64"
        try collector.script([["status": 200, "body_hex": answerHex, "content_type": "application/x-protobuf"]])
        let sent = UploadRequest(url: collector.baseURL + "/v1/logs",
                                 headers: [HTTPHeader("Content-Type", "application/x-protobuf")], body: [],
                                 idempotencyKey: "")
        guard case .response(let answer) = HTTPTransport().send(sent, attempt: 0, timeout: .seconds(20)) else {
            Issue.record("no answer")
            return
        }
        #expect(answer.status == 200 && answer.header("Content-Type") == "application/x-protobuf")
        #expect(OTLPPartialSuccess(body: answer.body, json: false) == OTLPPartialSuccess(rejected: 2, message: "too old"))
    }
}
