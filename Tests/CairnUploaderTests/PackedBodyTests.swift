import CairnProcessor
import CairnStore
import CairnTestSupport
import CairnUploader
import Foundation
import Testing

/// Packed bodies (docs/FORMATS.md, "Snapshot store", `Cairn-Stored-Body`): what is kept
/// is zstd frames that `zstd -d` reads back as the body; what is sent is the body; what
/// is damaged is refused, never sent.
@Suite struct PackedBodyTests {
    /// A body like an OTLP request's (repeated text with varying bytes among it) of
    /// `count` bytes.
    static func body(_ count: Int) -> [UInt8] {
        var bytes: [UInt8] = []
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        while bytes.count < count {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            bytes += Array("\"event_name\":\"checkout_completed\",\"i\":".utf8)
            bytes += withUnsafeBytes(of: state) { Array($0) }
        }
        return Array(bytes.prefix(count))
    }

    /// `bytes` packed from pieces cut at `cuts` (lengths; the rest is the last piece).
    static func pack(_ bytes: [UInt8], cuts: [Int] = []) throws -> [UInt8] {
        try bytes.withUnsafeBytes { all in
            var pieces: [UnsafeRawBufferPointer] = []
            var at = 0
            for n in cuts {
                pieces.append(UnsafeRawBufferPointer(rebasing: all[at..<at + n]))
                at += n
            }
            pieces.append(UnsafeRawBufferPointer(rebasing: all[at...]))
            return try #require(PackedBody.pack(OTLPEncoder.BodyPieces(pieces, signal: .logs), context: ZstdContext()))
        }
    }

    /// Runs the `zstd` tool on `input`; its output and exit status.
    static func zstdTool(_ arguments: [String], _ input: [UInt8]) throws -> (out: [UInt8], status: Int32) {
        let dir = try TemporaryDirectory("cairn-packed")
        let file = dir.path + "/in"
        try Data(input).write(to: URL(fileURLWithPath: file))
        let r = try runToEnd("/usr/bin/zstd", arguments + ["-c", file], environment: [:], timeout: 30)
        return (Array(r.stdout), r.status)
    }

    @Test func packedFromAnyPiecesReadsBackAsTheBody() throws {
        let body = Self.body(200_001)
        let packed = try Self.pack(body, cuts: [1, 7, 40_000, 0, 32_768])
        #expect(packed.count < body.count / 4, "packed: \(packed.count) of \(body.count)")
        let frames = try #require(PackedBody.frames(packed))
        #expect(frames.count == 7 && frames.dropLast().allSatisfy { $0.bodyCount == PackedBody.frameBytes })
        #expect(frames.last?.bodyCount == 200_001 - 6 * PackedBody.frameBytes)
        #expect(PackedBody.unpack(packed) == body)
        #expect(PackedBody.isIntact(packed))
        // A tool that is not Cairn's reads it as one zstd stream, checksums tested.
        let tool = try Self.zstdTool(["-d", "--check"], packed)
        #expect(tool.status == 0 && tool.out == body)

        // Read as the transport reads it: piece after piece, then from 0 again (a send
        // repeated on a fresh connection), then at offsets inside frames.
        let reader = try #require(PackedBody.Reader(packed))
        #expect(reader.count == body.count)
        for _ in 0..<2 {
            var read: [UInt8] = []
            while read.count < reader.count {
                let piece = try #require(reader.piece(at: read.count))
                read += piece
            }
            #expect(read == body)
        }
        for offset in [100_000, 5, 199_999, 32_768, 32_767] {
            let piece = try #require(reader.piece(at: offset))
            #expect(Array(piece) == Array(body[offset..<offset + piece.count]))
            #expect((offset + piece.count) % PackedBody.frameBytes == 0 || offset + piece.count == body.count)
        }
        #expect(reader.piece(at: body.count) == nil && reader.piece(at: -1) == nil)
        // Nothing: no frame.
        let nothing = try Self.pack([])
        #expect(nothing == [] && PackedBody.unpack([]) == [])
    }

    @Test func damagedPackedBodiesAreRefused() throws {
        let body = Self.body(100_000)
        let packed = try Self.pack(body)
        let frames = try #require(PackedBody.frames(packed))
        #expect(frames.count == 4)

        // Cut short, in a frame or at its end; zeroed; garbage; bytes after the last.
        var damaged: [(String, [UInt8])] = [
            ("cut in a frame", Array(packed.prefix(frames[2].at + 10))),
            ("without its last byte", Array(packed.dropLast())),
            ("zeroed", [UInt8](repeating: 0, count: packed.count)),
            ("garbage", (0..<5000).map { UInt8(truncatingIfNeeded: $0 &* 2_654_435_761 >> 7) }),
            ("trailing bytes", packed + [0x28, 0xB5]),
        ]
        // Frames another writer could make that a reader does not take: no content
        // size, or over 1 MiB of content.
        let unsized = try Self.zstdTool(["-q", "--no-content-size"], body)
        try #require(unsized.status == 0)
        damaged.append(("no content size (a file)", unsized.out))
        let streamed = try runToEnd("/bin/sh", ["-c", "head -c 100000 /dev/zero | zstd -q -c"], environment: [:],
                                    timeout: 30)
        damaged.append(("no content size (a stream)", Array(streamed.stdout)))
        let large = try Self.zstdTool(["-q"], [UInt8](repeating: 7, count: PackedBody.maxFrameBytes + 1))
        damaged.append(("over 1 MiB", large.out))
        for (what, bytes) in damaged {
            #expect(PackedBody.frames(bytes) == nil, "\(what)")
            #expect(PackedBody.unpack(bytes) == nil && !PackedBody.isIntact(bytes) && PackedBody.Reader(bytes) == nil,
                    "\(what)")
        }

        // A byte changed inside the third frame's data: the frames still parse, but its
        // checksum (or its decoding) fails where it is read, and only there.
        var flipped = packed
        flipped[frames[2].at + frames[2].count / 2] ^= 0x40
        #expect(PackedBody.frames(flipped) == frames)
        #expect(PackedBody.unpack(flipped) == nil && !PackedBody.isIntact(flipped))
        let reader = try #require(PackedBody.Reader(flipped))
        #expect(reader.piece(at: 0).map(Array.init) == Array(body[0..<PackedBody.frameBytes]))
        #expect(reader.piece(at: frames[2].bodyAt) == nil)
        #expect(reader.piece(at: frames[3].bodyAt).map(Array.init) == Array(body[frames[3].bodyAt...]))
    }

    static func request(_ body: [UInt8], packed: Bool) -> UploadRequest {
        var r = UploadRequest(url: "http://127.0.0.1:1/v1/logs", headers: [HTTPHeader("Content-Type", "application/x-protobuf")],
                              body: body, idempotencyKey: "", destination: .otlpLogs, records: 12)
        r.packed = packed
        return r
    }

    @Test func storedPackedRequestsReadBackOrAreRefused() throws {
        let body = Self.body(70_000)
        let request = Self.request(try Self.pack(body), packed: true)
        let record = request.record
        let back = try #require(UploadRequest(record: record))
        #expect(back == request && back.packed && back.wireBody == body)
        #expect(back.headers == request.headers, "the entry is kept, never sent")
        #expect(UploadRequest.recordCheck.verdict(record) == .intact)
        // Not packed: the same record without the entry.
        let plain = Self.request(body, packed: false)
        #expect(UploadRequest(record: plain.record)?.packed == false && UploadRequest.recordCheck.verdict(plain.record) == .unverifiable)

        // Its body damaged, or another packing named: it does not decode.
        var damaged = record
        damaged[damaged.count - 300] ^= 0x01
        #expect(UploadRequest(record: damaged) == nil)
        #expect(UploadRequest.recordCheck.verdict(damaged) == .damaged)
        let entry = Array("zstd-frames".utf8)
        let at = try #require(record.indices.first { record[$0..<min($0 + entry.count, record.count)].elementsEqual(entry) })
        var other = record
        other[at] = UInt8(ascii: "x")
        #expect(UploadRequest(record: other) == nil)
    }

    @Test func packedRequestsGoOutAsTheirBodyAndDamagedOnesNotAtAll() throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        let body = Self.body(150_000)
        var request = Self.request(try Self.pack(body), packed: true)
        request.url = collector.baseURL + "/v1/raw"
        // Taken; then sent on a kept-alive connection the collector drops unanswered, so
        // it is sent again, from its first byte, on a new one.
        try collector.script([["status": 200], ["drop": true], ["status": 201]])
        let transport = HTTPTransport()
        for (attempt, status) in [(0, 200), (1, 201)] {
            guard case .response(let answer) = transport.send(request, attempt: attempt, timeout: .seconds(20)) else {
                Issue.record("no answer")
                return
            }
            #expect(answer.status == status)
        }
        let attempts = try collector.requests()
        let sha = try sha256Hex(body)
        try #require(attempts.count == 3)
        for attempt in attempts {
            #expect(attempt.body_length == body.count)
            #expect(attempt.body_sha256 == sha)
            #expect(attempt.headerValues("Content-Length") == ["\(body.count)"])
            #expect(attempt.headerValues("Content-Encoding").isEmpty)
        }
        #expect(attempts[1].connection_id != attempts[2].connection_id)

        // A packed body whose frames do not parse is not sent at all; one with a frame
        // that fails its checksum is cut off there: the collector never has it whole.
        var damaged = request
        damaged.body[damaged.body.count / 2] ^= 0x10
        let cut = { var r = request; r.body = Array(r.body.prefix(100)); return r }()
        for broken in [cut, damaged] {
            guard case .failure(let failure) = transport.send(broken, attempt: 0, timeout: .seconds(20)) else {
                Issue.record("a damaged packed body was answered")
                continue
            }
            #expect(failure.kind == .invalidRequest, "\(failure)")
        }
        // The collector notes the cut request once it sees the connection close.
        var seen = try collector.rawRequests()
        let deadline = Date().addingTimeInterval(10)
        while seen.count < 4 && Date() < deadline {
            usleep(20_000)
            seen = try collector.rawRequests()
        }
        #expect(seen.count == 4, "the first was never sent, the second only in part")
        #expect((seen.last?["error"] as? String)?.contains("body ended after") == true, "\(seen.last ?? [:])")
        // And the connection still carries the next request whole.
        try collector.script([["status": 200]])
        guard case .response(let answer) = transport.send(request, attempt: 2, timeout: .seconds(20)) else {
            Issue.record("no answer")
            return
        }
        let last = try collector.requests().last?.body_sha256
        #expect(answer.status == 200 && last == sha)
    }
}
