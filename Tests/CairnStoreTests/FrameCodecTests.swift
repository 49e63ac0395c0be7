// Tests of the Swift wrapper of the batch frame codec.
import CCairnCore
import CZstd
import CairnStore
import Testing

/// JSON events of varied content, deterministic.
func sampleEvents(_ count: Int, seed: UInt64 = 1) -> [[UInt8]] {
    var state = seed
    func next() -> UInt64 {
        state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
        return state >> 33
    }
    let names = ["checkout", "page_view", "search", "login", "api_call"]
    let plans = ["free", "pro", "team"]
    return (0..<count).map { i in
        let event = #"{"event":"\#(names[Int(next() % 5)])","event_id":"0190a1b2-\#(next() % 10000)-7abc-8def-\#(next())","#
            + #""time":\#(1_764_680_000_000 + UInt64(i) * 37),"distinct_id":"host-\#(next() % 16)","#
            + #""properties":{"plan":"\#(plans[Int(next() % 3)])","amount":\#(next() % 100_000)"#
            + #","currency":"EUR","items":\#(next() % 12),"region":"eu-west-\#(next() % 3)","#
            + #""user_agent":"orders-service/1.\#(next() % 30).\#(next() % 10) (linux; x86_64)","#
            + #""latency_ms":\#(next() % 2000),"retry":\#(next() % 2 == 0),"#
            + #""path":"/api/v2/orders/\#(next() % 1_000_000)/items/\#(next() % 50)"}}"#
        return Array(event.utf8)
    }
}

/// The body a decoder returns for `records`.
func joinedBody(_ records: [[UInt8]]) -> [UInt8] {
    records.flatMap { $0 + [UInt8(ascii: "\n")] }
}

/// Expects `body` to throw a ``CairnError`` with `code`.
func expectCairnError<T>(_ code: Int32, _ function: String,
                         sourceLocation: SourceLocation = #_sourceLocation,
                         _ body: () throws -> T) {
    do {
        _ = try body()
        Issue.record("expected \(function) to fail with \(code)", sourceLocation: sourceLocation)
    } catch let error as CairnError {
        #expect(error.code == code, "\(error)", sourceLocation: sourceLocation)
        #expect(error.function == function, sourceLocation: sourceLocation)
    } catch {
        Issue.record("not a CairnError: \(error)", sourceLocation: sourceLocation)
    }
}

@Test(arguments: [Int32(1), 3, 12, -3])
func wrapperRoundTrip(level: Int32) throws {
    let records = sampleEvents(300) + [[], Array("plain text".utf8)]
    let encoder = try FrameEncoder(level: level)
    let batch = try encoder.encode(batchID: 9, records: records)
    let decoder = try FrameDecoder(maxContentSize: 1 << 20)
    let (info, body) = try decoder.decode(batch)
    #expect(body == joinedBody(records))
    #expect(FrameDecoder.records(in: body) == records)
    #expect(try decoder.decodeRecords(batch).records == records)
    #expect(info.version == 1 && info.flags == 0 && info.batchID == 9 && info.dictionaryID == 0)
    #expect(info.recordCount == UInt32(records.count))
    #expect(info.contentSize == UInt64(body.count) && info.frameSize == UInt64(batch.count))
    #expect(try FrameDecoder.info(of: batch) == info)
}

@Test func wrapperRoundTripOfEdgeShapes() throws {
    let encoder = try FrameEncoder()
    let decoder = try FrameDecoder(maxContentSize: 4 << 20)
    let large = [UInt8](repeating: UInt8(ascii: "x"), count: 2 << 20)
    for records in [[[]], [[], []], [Array("a".utf8)], [large], [large, [], Array("b".utf8)]] as [[[UInt8]]] {
        let (_, body) = try decoder.decode(try encoder.encode(batchID: 1, records: records))
        #expect(FrameDecoder.records(in: body) == records)
    }
}

@Test func wrapperEncodesFromRawSlices() throws {
    let records = sampleEvents(20)
    let encoder = try FrameEncoder()
    let joined = records.flatMap { $0 }
    let batch = try joined.withUnsafeBytes { all in
        var offset = 0
        let slices = records.map { record in
            defer { offset += record.count }
            return cairn_slice_t(data: all.baseAddress.map { $0 + offset }, len: record.count)
        }
        return try slices.withUnsafeBufferPointer { try encoder.encode(batchID: 3, slices: $0) }
    }
    #expect(batch == (try encoder.encode(batchID: 3, records: records)))
    #expect(batch.count <= FrameEncoder.bound(payloadBytes: joined.count, recordCount: 20))
    #expect(FrameEncoder.bound(payloadBytes: Int.max, recordCount: 1) == Int.max)
}

@Test func recordsInPiecesFrameAsTheWholeRecordsWould() throws {
    // Each record cut in three pieces (the last may be empty), as the uploader completes
    // a bare event from the ring with its context.
    let records = sampleEvents(50) + [Array("{}".utf8), []]
    var pieces: [[UInt8]] = [], ends: [Bool] = []
    for r in records {
        let a = r.count / 3, b = 2 * r.count / 3
        pieces += [Array(r[0..<a]), Array(r[a..<b]), Array(r[b...])]
        ends += [false, false, true]
    }
    let joined = pieces.flatMap { $0 }
    let encoder = try FrameEncoder()
    func encode(_ ends: [Bool]) throws -> [UInt8] {
        try joined.withUnsafeBytes { all in
            var offset = 0
            let slices = pieces.map { p in
                defer { offset += p.count }
                return cairn_slice_t(data: p.isEmpty ? nil : all.baseAddress.map { $0 + offset }, len: p.count)
            }
            return try slices.withUnsafeBufferPointer { try encoder.encode(batchID: 4, pieces: $0, ends: ends) }
        }
    }
    let batch = try encode(ends)
    #expect(batch == (try encoder.encode(batchID: 4, records: records)))
    #expect(try FrameDecoder.info(of: batch).recordCount == UInt32(records.count))
    // The last piece must end a record; `ends` must match the pieces.
    expectCairnError(CAIRN_EINVAL, "cairn_frame_encode") { try encode(Array(ends.dropLast()) + [false]) }
    expectCairnError(CAIRN_EINVAL, "cairn_frame_encode_parts") { try encode(Array(ends.dropLast())) }
}

@Test func wrapperErrorsAreTypedAndCarryTheCode() throws {
    let encoder = try FrameEncoder()
    expectCairnError(CAIRN_EINVAL, "cairn_frame_encode") {
        try encoder.encode(batchID: 1, records: [Array("two\nlines".utf8)])
    }
    expectCairnError(CAIRN_EINVAL, "cairn_frame_encode") {
        try encoder.encode(batchID: 1, records: [])
    }
    expectCairnError(CAIRN_EINVAL, "cairn_frame_encoder_new") { try FrameEncoder(level: 30) }
    expectCairnError(CAIRN_EINVAL, "cairn_frame_encoder_new") {
        try FrameEncoder(dictionary: Array("raw content is not a zstd dictionary".utf8))
    }
    expectCairnError(CAIRN_EINVAL, "cairn_frame_decoder_new") {
        try FrameDecoder(maxContentSize: 0)
    }

    let records = sampleEvents(50)
    let batch = try encoder.encode(batchID: 2, records: records)
    let content = joinedBody(records).count
    let decoder = try FrameDecoder(maxContentSize: 1 << 20)
    expectCairnError(CAIRN_ETRUNCATED, "cairn_frame_read_info") {
        try decoder.decode(Array(batch.dropLast()))
    }
    expectCairnError(CAIRN_ETRUNCATED, "cairn_frame_read_info") { try FrameDecoder.info(of: []) }
    expectCairnError(CAIRN_ECORRUPT, "cairn_frame_decode") { try decoder.decode(batch + [0]) }
    var damaged = batch
    damaged[batch.count - 10] ^= 0x20
    expectCairnError(CAIRN_ECORRUPT, "cairn_frame_decode") { try decoder.decode(damaged) }
    var future = batch
    future[12] = 2
    expectCairnError(CAIRN_EVERSION, "cairn_frame_read_info") { try decoder.decode(future) }
    expectCairnError(CAIRN_ELIMIT, "cairn_frame_decode") {
        try FrameDecoder(maxContentSize: content - 1).decode(batch)
    }
    #expect(try FrameDecoder(maxContentSize: content).decode(batch).body.count == content)

    do {
        _ = try decoder.decode(damaged)
    } catch {
        // Typed throws: `error` is a CairnError, no cast needed.
        #expect(error.code == CairnError.corrupt)
        #expect(error.description.hasPrefix("cairn_frame_decode: data is corrupt"))
    }
}

@Test func wrapperSplitsBodies() {
    #expect(FrameDecoder.records(in: []) == [])
    #expect(FrameDecoder.records(in: Array("\n".utf8)) == [[]])
    #expect(FrameDecoder.records(in: Array("a\n\nbc\n".utf8)) == [Array("a".utf8), [], Array("bc".utf8)])
    #expect(FrameDecoder.records(in: Array("a\nb".utf8)) == [Array("a".utf8), Array("b".utf8)])
}

@Test func wrapperDictionaryMustBePresentAndMatch() throws {
    let dictionary = try #require(trainedDictionary())
    let records = sampleEvents(10, seed: 77)
    let encoder = try FrameEncoder(dictionary: dictionary)
    let batch = try encoder.encode(batchID: 4, records: records)
    let plain = try FrameEncoder().encode(batchID: 4, records: records)
    #expect(batch.count < plain.count)

    let info = try FrameDecoder.info(of: batch)
    #expect(info.dictionaryID != 0)
    let (decodedInfo, body) = try FrameDecoder(maxContentSize: 1 << 20, dictionary: dictionary)
        .decode(batch)
    #expect(decodedInfo == info)
    #expect(body == joinedBody(records))
    expectCairnError(CAIRN_EDICT, "cairn_frame_decode") {
        try FrameDecoder(maxContentSize: 1 << 20).decode(batch)
    }
}

/// A dictionary trained by zstd on sample events.
private func trainedDictionary() -> [UInt8]? {
    let samples = sampleEvents(1000, seed: 5)
    let flat = samples.flatMap { $0 }
    let sizes = samples.map { $0.count }
    var dict = [UInt8](repeating: 0, count: 4096)
    let written = dict.withUnsafeMutableBytes { dst in
        flat.withUnsafeBytes { src in
            ZDICT_trainFromBuffer(dst.baseAddress, dst.count, src.baseAddress, sizes,
                                  UInt32(sizes.count))
        }
    }
    return ZDICT_isError(written) == 0 ? Array(dict[0..<written]) : nil
}
