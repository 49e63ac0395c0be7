// Tests of the batch frame C API (frame.c), called directly.
import CairnTestSupport
import CCairnCore
import CZstd
import Testing

// MARK: - Helpers

/// Records of JSON events, deterministic for a seed.
private func jsonRecords(_ count: Int, seed: UInt64 = 1) -> [[UInt8]] {
    var rng = SplitMix(seed: seed)
    let plans = ["free", "pro", "team", "enterprise"]
    return (0..<count).map { i in
        let event = #"{"event":"checkout","id":\#(rng.next() % 1_000_000),"seq":\#(i),"#
            + #""plan":"\#(plans[Int(rng.next() % 4)])","ms":\#(rng.next() % 5000),"#
            + #""path":"/api/v2/orders/\#(rng.next() % 100_000)"}"#
        return Array(event.utf8)
    }
}

/// Random bytes that avoid '\n'.
private func randomRecord(_ length: Int, rng: inout SplitMix) -> [UInt8] {
    (0..<length).map { _ in
        let byte = UInt8(truncatingIfNeeded: rng.next())
        return byte == 0x0A ? 0x0B : byte
    }
}


/// A dictionary in zstd's format trained on JSON events.
private func trainDictionary(seed: UInt64 = 7) -> [UInt8] {
    let samples = jsonRecords(2000, seed: seed)
    let flat = samples.flatMap { $0 }
    let sizes = samples.map { $0.count }
    var dict = [UInt8](repeating: 0, count: 8192)
    let written = dict.withUnsafeMutableBytes { dst in
        flat.withUnsafeBytes { src in
            ZDICT_trainFromBuffer(dst.baseAddress, dst.count, src.baseAddress, sizes,
                                  UInt32(sizes.count))
        }
    }
    precondition(ZDICT_isError(written) == 0, "dictionary training failed")
    return Array(dict[0..<written])
}

private let dictionary = trainDictionary()

/// The body a decoder must return for `records`.
private func body(of records: [[UInt8]]) -> [UInt8] {
    records.flatMap { $0 + [0x0A] }
}

/// An owned encoder.
private final class Encoder {
    let handle: OpaquePointer
    init(level: Int32 = CAIRN_FRAME_DEFAULT_LEVEL, dict: [UInt8]? = nil) throws {
        var out: OpaquePointer?
        let rc = (dict ?? []).withUnsafeBytes { d in
            cairn_frame_encoder_new(level, d.baseAddress, d.count, &out)
        }
        guard rc == 0, let out else { throw CodeError(code: rc) }
        handle = out
    }
    deinit { cairn_frame_encoder_free(handle) }

    /// Encodes with a buffer of `capacity` bytes (the bound by default).
    func encode(_ records: [[UInt8]], batchID: UInt64 = 42, capacity: Int? = nil)
        -> (rc: Int32, bytes: [UInt8])
    {
        let joined = records.flatMap { $0 }
        let cap = capacity ?? cairn_frame_bound(joined.count, records.count)
        var out = [UInt8](repeating: 0, count: cap)
        var len = 0
        let rc = joined.withUnsafeBytes { all in
            var offset = 0
            let slices = records.map { r in
                defer { offset += r.count }
                return cairn_slice_t(data: r.isEmpty ? nil : all.baseAddress.map { $0 + offset },
                                     len: r.count)
            }
            return out.withUnsafeMutableBytes { dst in
                cairn_frame_encode(handle, batchID, slices, slices.count,
                                   dst.baseAddress, dst.count, &len)
            }
        }
        return (rc, Array(out[0..<len]))
    }
}

/// An owned decoder.
private final class Decoder {
    let handle: OpaquePointer
    init(maxContent: Int = 64 << 20, dict: [UInt8]? = nil) throws {
        var out: OpaquePointer?
        let rc = (dict ?? []).withUnsafeBytes { d in
            cairn_frame_decoder_new(maxContent, d.baseAddress, d.count, &out)
        }
        guard rc == 0, let out else { throw CodeError(code: rc) }
        handle = out
    }
    deinit { cairn_frame_decoder_free(handle) }

    func decode(_ bytes: [UInt8], capacity: Int? = nil)
        -> (rc: Int32, body: [UInt8], info: cairn_frame_info_t)
    {
        var info = cairn_frame_info_t()
        let cap = capacity ?? (readInfo(bytes).rc == 0 ? Int(readInfo(bytes).info.content_size) : 16)
        var out = [UInt8](repeating: 0, count: cap)
        var len = 0
        let rc = bytes.withUnsafeBytes { src in
            out.withUnsafeMutableBytes { dst in
                cairn_frame_decode(handle, src.baseAddress, src.count, dst.baseAddress, dst.count,
                                   &len, &info)
            }
        }
        return (rc, Array(out[0..<len]), info)
    }
}

private struct CodeError: Error { let code: Int32 }

private func readInfo(_ bytes: [UInt8]) -> (rc: Int32, info: cairn_frame_info_t) {
    var info = cairn_frame_info_t()
    let rc = bytes.withUnsafeBytes { cairn_frame_read_info($0.baseAddress, $0.count, &info) }
    return (rc, info)
}

private func le32(_ bytes: [UInt8], _ at: Int) -> UInt32 {
    (0..<4).reduce(0) { $0 | UInt32(bytes[at + $1]) << (8 * $1) }
}

private func putLE32(_ bytes: inout [UInt8], _ at: Int, _ value: UInt32) {
    for i in 0..<4 { bytes[at + i] = UInt8(truncatingIfNeeded: value >> (8 * i)) }
}

private func putLE64(_ bytes: inout [UInt8], _ at: Int, _ value: UInt64) {
    for i in 0..<8 { bytes[at + i] = UInt8(truncatingIfNeeded: value >> (8 * i)) }
}

/// Offsets in a batch: the metadata starts after the 8-byte skippable header.
private enum Offset {
    static let version = 8 + 4
    static let flags = 8 + 6
    static let batchID = 8 + 8
    static let recordCount = 8 + 16
    static let dictID = 8 + 20
    static let contentSize = 8 + 24
}

/// A batch assembled by hand from Cairn metadata and a zstd frame made by zstd itself,
/// to reach checks our encoder never trips.
private func handMadeBatch(body: [UInt8], recordCount: UInt32, checksum: Bool = true,
                           pledge: Bool = true) -> [UInt8] {
    guard let cctx = ZSTD_createCCtx() else { return [] }
    defer { ZSTD_freeCCtx(cctx) }
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, checksum ? 1 : 0)
    var frame = [UInt8](repeating: 0, count: ZSTD_compressBound(body.count))
    var size = 0
    frame.withUnsafeMutableBytes { dst in
        body.withUnsafeBytes { src in
            if pledge {
                size = ZSTD_compress2(cctx, dst.baseAddress, dst.count, src.baseAddress, src.count)
            } else {
                // Streaming without a pledged size leaves the content size out.
                var output = ZSTD_outBuffer(dst: dst.baseAddress, size: dst.count, pos: 0)
                var input = ZSTD_inBuffer(src: src.baseAddress, size: src.count, pos: 0)
                _ = ZSTD_compressStream2(cctx, &output, &input, ZSTD_e_continue)
                while ZSTD_compressStream2(cctx, &output, &input, ZSTD_e_end) != 0 {}
                size = output.pos
            }
        }
    }
    var batch = [UInt8](repeating: 0, count: 40)
    putLE32(&batch, 0, CAIRN_FRAME_SKIPPABLE_MAGIC)
    putLE32(&batch, 4, 32)
    batch[8...11] = [0x43, 0x52, 0x4E, 0x42]  // "CRNB"
    batch[Offset.version] = 1
    putLE32(&batch, Offset.recordCount, recordCount)
    putLE64(&batch, Offset.contentSize, UInt64(body.count))
    return batch + frame[0..<size]
}

// MARK: - Round trips

enum FrameShape: String, CaseIterable, Sendable {
    case one, thousand, allEmpty, someEmpty, large, beyondStage, random

    func records() -> [[UInt8]] {
        var rng = SplitMix(seed: 99)
        switch self {
        case .one: return [Array(#"{"event":"start"}"#.utf8)]
        case .thousand: return jsonRecords(1000)
        case .allEmpty: return [[], [], []]
        case .someEmpty: return [[], Array("a".utf8), [], Array("bc".utf8), []]
        case .large: return [randomRecord(1 << 20, rng: &rng)]
        case .beyondStage:
            // Records around the encoder's 16 KiB staging buffer, mixed with small ones.
            return [16383, 5, 16384, 16385, 0, 40000, 1, 16382].map { randomRecord($0, rng: &rng) }
        case .random: return (0..<300).map { _ in randomRecord(Int(rng.next() % 700), rng: &rng) }
        }
    }
}

@Test(arguments: FrameShape.allCases, [Int32(1), 3, 19, -5])
func roundTripWithoutDictionary(shape: FrameShape, level: Int32) throws {
    let records = shape.records()
    let encoder = try Encoder(level: level)
    let (rc, batch) = encoder.encode(records, batchID: 77)
    #expect(rc == 0)
    let (drc, decoded, info) = try Decoder().decode(batch)
    #expect(drc == 0)
    #expect(decoded == body(of: records))
    #expect(info.record_count == UInt32(records.count))
    #expect(info.batch_id == 77)
    #expect(info.dict_id == 0)
}

@Test(arguments: FrameShape.allCases, [Int32(1), 9])
func roundTripWithDictionary(shape: FrameShape, level: Int32) throws {
    let records = shape.records()
    let (rc, batch) = try Encoder(level: level, dict: dictionary).encode(records)
    #expect(rc == 0)
    let (drc, decoded, info) = try Decoder(dict: dictionary).decode(batch)
    #expect(drc == 0)
    #expect(decoded == body(of: records))
    let id = dictionary.withUnsafeBytes { ZSTD_getDictID_fromDict($0.baseAddress, $0.count) }
    #expect(id != 0)
    #expect(info.dict_id == id)
}

@Test func dictionaryShrinksSmallBatches() throws {
    let records = jsonRecords(5, seed: 1234)
    let plain = try Encoder().encode(records).bytes
    let withDict = try Encoder(dict: dictionary).encode(records).bytes
    #expect(withDict.count < plain.count)
}

@Test func encoderIsReusableAndDeterministic() throws {
    let encoder = try Encoder()
    let records = jsonRecords(200)
    let first = encoder.encode(records).bytes
    // A failed call in between must leave no state behind.
    #expect(encoder.encode(records, capacity: 100).rc == CAIRN_EBUFSIZE)
    #expect(encoder.encode([Array("x".utf8)]).rc == 0)
    #expect(encoder.encode(records).bytes == first)
    #expect(try Encoder().encode(records).bytes == first)
}

// MARK: - Metadata

@Test func metadataIsReadBackAndLaidOutAsSpecified() throws {
    let records = jsonRecords(10)
    let batch = try Encoder(dict: dictionary).encode(records, batchID: 0x0102_0304_0506_0708).bytes
    let (rc, info) = readInfo(batch)
    #expect(rc == 0)
    #expect(info.version == 1 && info.flags == 0)
    #expect(info.batch_id == 0x0102_0304_0506_0708)
    #expect(info.record_count == 10)
    #expect(info.content_size == UInt64(body(of: records).count))
    #expect(info.frame_size == UInt64(batch.count))
    #expect(info.dict_id != 0)

    #expect(le32(batch, 0) == 0x184D_2A5C)
    #expect(le32(batch, 4) == 32)
    #expect(Array(batch[8..<12]) == Array("CRNB".utf8))
    #expect(Array(batch[Offset.batchID..<Offset.batchID + 8]) == [8, 7, 6, 5, 4, 3, 2, 1])
    #expect(le32(batch, Offset.dictID) == info.dict_id)
    #expect(le32(batch, 40) == 0xFD2F_B528)  // the zstd frame follows at once
    let zstd = Array(batch[40...])
    let contentSize = zstd.withUnsafeBytes { ZSTD_getFrameContentSize($0.baseAddress, $0.count) }
    #expect(contentSize == info.content_size)
    let frameDict = zstd.withUnsafeBytes { ZSTD_getDictID_fromFrame($0.baseAddress, $0.count) }
    #expect(frameDict == info.dict_id)
    #expect(zstd[4] & 0x04 != 0, "checksum flag")
}

@Test func readInfoFindsTheFirstOfConcatenatedBatches() throws {
    let encoder = try Encoder()
    let first = encoder.encode(jsonRecords(3)).bytes
    let second = encoder.encode(jsonRecords(4)).bytes
    let (rc, info) = readInfo(first + second)
    #expect(rc == 0)
    #expect(info.frame_size == UInt64(first.count))
    #expect(info.record_count == 3)
}

@Test func largerMetadataFromAFutureWriterIsAccepted() throws {
    let records = jsonRecords(3)
    var batch = try Encoder().encode(records).bytes
    batch.insert(contentsOf: [UInt8](repeating: 0xEE, count: 16), at: 40)
    putLE32(&batch, 4, 48)
    let (rc, decoded, info) = try Decoder().decode(batch)
    #expect(rc == 0)
    #expect(decoded == body(of: records))
    #expect(info.frame_size == UInt64(batch.count))
}

// MARK: - Encoder errors

@Test func encodeRefusesBuffersThatAreTooSmall() throws {
    let encoder = try Encoder()
    let records = jsonRecords(50)
    let exact = encoder.encode(records).bytes
    for capacity in [0, 1, 39, 40, 41, exact.count / 2, exact.count - 1] {
        // Sentinels past `capacity` show any write beyond it.
        let joined = records.flatMap { $0 }
        var out = [UInt8](repeating: 0xA5, count: capacity + 64)
        var len = 7
        let rc = joined.withUnsafeBytes { all in
            var offset = 0
            let slices = records.map { r in
                defer { offset += r.count }
                return cairn_slice_t(data: all.baseAddress.map { $0 + offset }, len: r.count)
            }
            return out.withUnsafeMutableBytes { dst in
                cairn_frame_encode(encoder.handle, 1, slices, slices.count, dst.baseAddress,
                                   capacity, &len)
            }
        }
        #expect(rc == CAIRN_EBUFSIZE, "capacity \(capacity)")
        #expect(len == 0)
        #expect(out[capacity...].allSatisfy { $0 == 0xA5 }, "wrote past capacity \(capacity)")
    }
    #expect(encoder.encode(records, capacity: exact.count).bytes == exact)
}

@Test func encodeRefusesInvalidInput() throws {
    let encoder = try Encoder()
    #expect(encoder.encode([Array("a\nb".utf8)]).rc == CAIRN_EINVAL)
    #expect(encoder.encode([Array("ok".utf8), Array("\n".utf8)]).rc == CAIRN_EINVAL)
    #expect(encoder.encode([]).rc == CAIRN_EINVAL)

    var len = 0
    var out = [UInt8](repeating: 0, count: 128)
    let slice = [cairn_slice_t(data: nil, len: 3)]  // NULL data with a length
    #expect(cairn_frame_encode(encoder.handle, 1, slice, 1, &out, out.count, &len) == CAIRN_EINVAL)
    #expect(cairn_frame_encode(nil, 1, slice, 1, &out, out.count, &len) == CAIRN_EINVAL)
    #expect(cairn_frame_encode(encoder.handle, 1, nil, 1, &out, out.count, &len) == CAIRN_EINVAL)
    let empty = [cairn_slice_t(data: nil, len: 0)]
    #expect(cairn_frame_encode(encoder.handle, 1, empty, 1, &out, out.count, nil) == CAIRN_EINVAL)
    #expect(cairn_frame_encode(encoder.handle, 1, empty, 1, nil, 10, &len) == CAIRN_EINVAL)
    #expect(cairn_frame_encode(encoder.handle, 1, empty, 1, &out, out.count, &len) == 0)
}

@Test func constructorsValidateArguments() throws {
    var enc: OpaquePointer?
    var dec: OpaquePointer?
    for level: Int32 in [0, 20, 22, ZSTD_minCLevel() - 1] {
        #expect(cairn_frame_encoder_new(level, nil, 0, &enc) == CAIRN_EINVAL, "level \(level)")
        #expect(enc == nil)
    }
    #expect(cairn_frame_encoder_new(1, nil, 0, nil) == CAIRN_EINVAL)
    #expect(cairn_frame_encoder_new(1, nil, 5, &enc) == CAIRN_EINVAL)
    #expect(cairn_frame_decoder_new(0, nil, 0, &dec) == CAIRN_EINVAL)
    #expect(cairn_frame_decoder_new(1, nil, 5, &dec) == CAIRN_EINVAL)
    #expect(cairn_frame_decoder_new(1, nil, 0, nil) == CAIRN_EINVAL)

    // Raw-content dictionaries have no id, so a missing one could not be detected.
    let raw = Array(String(repeating: #"{"event":"checkout"}"#, count: 50).utf8)
    #expect(raw.withUnsafeBytes { cairn_frame_encoder_new(1, $0.baseAddress, $0.count, &enc) }
        == CAIRN_EINVAL)
    #expect(raw.withUnsafeBytes { cairn_frame_decoder_new(100, $0.baseAddress, $0.count, &dec) }
        == CAIRN_EINVAL)
    // The dictionary magic with damaged tables: zstd refuses it.
    var broken = dictionary
    for i in 8..<min(200, broken.count) { broken[i] = 0xFF }
    #expect(broken.withUnsafeBytes { cairn_frame_encoder_new(1, $0.baseAddress, $0.count, &enc) }
        == CAIRN_EZSTD)
    #expect(enc == nil)
}

@Test func boundCoversTheWorstCaseAndGuardsOverflow() throws {
    #expect(cairn_frame_bound(0, 1) > Int(CAIRN_FRAME_PREFIX_SIZE))
    #expect(cairn_frame_bound(Int.max, 1) == -1)  // SIZE_MAX
    #expect(cairn_frame_bound(1, Int.max) == -1)
    var rng = SplitMix(seed: 5)
    let incompressible = (0..<20).map { _ in randomRecord(5000, rng: &rng) }
    let bound = cairn_frame_bound(100_000, 20)
    let (rc, batch) = try Encoder(level: 19).encode(incompressible, capacity: bound)
    #expect(rc == 0)
    #expect(batch.count <= bound)
}

// MARK: - Decoder errors

@Test func everyTruncationIsReportedAsTruncated() throws {
    let batch = try Encoder().encode([Array("{\"a\":1}".utf8), [], Array("zz".utf8)]).bytes
    let decoder = try Decoder()
    for length in 0..<batch.count {
        let prefix = Array(batch[0..<length])
        #expect(readInfo(prefix).rc == CAIRN_ETRUNCATED, "read_info, length \(length)")
        #expect(decoder.decode(prefix, capacity: 64).rc == CAIRN_ETRUNCATED, "length \(length)")
    }
    #expect(decoder.decode(batch).rc == 0)
}

@Test(arguments: [false, true])
func everyByteFlipFailsOrYieldsTheOriginalRecords(withDictionary: Bool) throws {
    let records = [Array(#"{"event":"checkout","plan":"pro"}"#.utf8), [], Array("xyz".utf8)]
    let dict = withDictionary ? dictionary : nil
    let batch = try Encoder(dict: dict).encode(records, batchID: 5).bytes
    let decoder = try Decoder(dict: dict)
    let original = body(of: records)
    let batchIDBytes = Offset.batchID..<Offset.batchID + 8
    var accepted = 0
    for position in batch.indices {
        for mask: UInt8 in [0xFF, 0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80] {
            var damaged = batch
            damaged[position] ^= mask
            let (rc, decoded, info) = decoder.decode(damaged, capacity: 4096)
            if batchIDBytes.contains(position) {
                // The batch id is the caller's label; nothing can check it.
                #expect(rc == 0 && decoded == original && info.batch_id != 5)
            } else if rc == 0 {
                // Only bits zstd is told to ignore may change without an error; the
                // checksum covers the content, so the records must be intact.
                accepted += 1
                #expect(decoded == original, "flip \(mask) at \(position) changed the body")
                #expect(position >= 40, "flip \(mask) at \(position) of the metadata accepted")
            } else {
                #expect(rc < 0 && rc != CAIRN_EZSTD, "flip \(mask) at \(position): \(rc)")
            }
        }
    }
    #expect(accepted <= 8, "too many damaged batches accepted: \(accepted)")
}

@Test func trailingBytesAreCorrupt() throws {
    let encoder = try Encoder()
    let batch = encoder.encode(jsonRecords(3)).bytes
    let decoder = try Decoder()
    #expect(decoder.decode(batch + [0]).rc == CAIRN_ECORRUPT)
    #expect(decoder.decode(batch + batch).rc == CAIRN_ECORRUPT)
}

@Test func otherVersionsAndFlagsAreRefused() throws {
    let batch = try Encoder().encode(jsonRecords(3)).bytes
    for version: UInt8 in [0, 2, 0xFF] {
        var other = batch
        other[Offset.version] = version
        #expect(readInfo(other).rc == CAIRN_EVERSION)
        #expect(try Decoder().decode(other, capacity: 4096).rc == CAIRN_EVERSION)
    }
    var flagged = batch
    flagged[Offset.flags] = 1
    #expect(readInfo(flagged).rc == CAIRN_EVERSION)
}

@Test func notABatchIsCorrupt() throws {
    let body = Array("{\"a\":1}\n".utf8)
    // A plain zstd frame, with no Cairn metadata in front.
    let plain = handMadeBatch(body: body, recordCount: 1)[40...]
    #expect(readInfo(Array(plain)).rc == CAIRN_ECORRUPT)
    var batch = handMadeBatch(body: body, recordCount: 1)
    #expect(readInfo(batch).rc == 0)
    batch[9] = 0x58  // "CXNB"
    #expect(readInfo(batch).rc == CAIRN_ECORRUPT)
    var small = handMadeBatch(body: body, recordCount: 1)
    putLE32(&small, 4, 31)  // metadata shorter than version 1's
    #expect(readInfo(small).rc == CAIRN_ECORRUPT)
    // A second skippable frame where the zstd frame belongs.
    let twoSkippable = Array(handMadeBatch(body: body, recordCount: 1)[0..<40])
        + Array(handMadeBatch(body: body, recordCount: 1)[0..<40])
    #expect(readInfo(twoSkippable).rc == CAIRN_ECORRUPT)
}

@Test func inconsistentBatchesAreCorrupt() throws {
    let decoder = try Decoder()
    let body = Array("a\nb\nc\n".utf8)
    #expect(decoder.decode(handMadeBatch(body: body, recordCount: 3)).rc == 0)
    // Record count disagrees with the body.
    #expect(decoder.decode(handMadeBatch(body: body, recordCount: 2)).rc == CAIRN_ECORRUPT)
    #expect(decoder.decode(handMadeBatch(body: body, recordCount: 4)).rc == CAIRN_ECORRUPT)
    #expect(decoder.decode(handMadeBatch(body: body, recordCount: 0), capacity: 64).rc
        == CAIRN_ECORRUPT)
    // The last record is not terminated.
    #expect(decoder.decode(handMadeBatch(body: Array("a\nb".utf8), recordCount: 1)).rc
        == CAIRN_ECORRUPT)
    // No checksum, or no content size in the zstd frame.
    #expect(readInfo(handMadeBatch(body: body, recordCount: 3, checksum: false)).rc
        == CAIRN_ECORRUPT)
    #expect(readInfo(handMadeBatch(body: body, recordCount: 3, pledge: false)).rc
        == CAIRN_ECORRUPT)
    // Metadata and zstd header disagree on the content size or the dictionary.
    var size = handMadeBatch(body: body, recordCount: 3)
    putLE64(&size, Offset.contentSize, 7)
    #expect(readInfo(size).rc == CAIRN_ECORRUPT)
    var dictID = handMadeBatch(body: body, recordCount: 3)
    putLE32(&dictID, Offset.dictID, 1234)
    #expect(readInfo(dictID).rc == CAIRN_ECORRUPT)
}

@Test func limitsAreEnforcedBeforeDecompressing() throws {
    let records = jsonRecords(100)
    let content = body(of: records).count
    let batch = try Encoder().encode(records).bytes
    #expect(try Decoder(maxContent: content - 1).decode(batch, capacity: content).rc == CAIRN_ELIMIT)
    #expect(try Decoder(maxContent: content).decode(batch, capacity: content).rc == 0)
    #expect(try Decoder().decode(batch, capacity: content - 1).rc == CAIRN_EBUFSIZE)
    #expect(try Decoder().decode(batch, capacity: 0).rc == CAIRN_EBUFSIZE)

    let decoder = try Decoder()
    var len = 0
    #expect(cairn_frame_decode(decoder.handle, batch, batch.count, nil, 0, &len, nil)
        == CAIRN_EBUFSIZE)
    #expect(cairn_frame_decode(decoder.handle, batch, batch.count, nil, 10, &len, nil)
        == CAIRN_EINVAL)
    #expect(cairn_frame_decode(nil, batch, batch.count, nil, 0, &len, nil) == CAIRN_EINVAL)
    #expect(cairn_frame_decode(decoder.handle, nil, 5, nil, 0, &len, nil) == CAIRN_EINVAL)
    #expect(cairn_frame_decode(decoder.handle, nil, 0, nil, 0, &len, nil) == CAIRN_ETRUNCATED)
    #expect(cairn_frame_read_info(batch, batch.count, nil) == CAIRN_EINVAL)
}

@Test func dictionaryMustBePresentAndMatch() throws {
    let records = jsonRecords(20)
    let batch = try Encoder(dict: dictionary).encode(records).bytes
    #expect(try Decoder().decode(batch).rc == CAIRN_EDICT)
    let other = trainDictionary(seed: 8)
    #expect(try Decoder(dict: other).decode(batch).rc == CAIRN_EDICT)
    #expect(try Decoder(dict: dictionary).decode(batch).rc == 0)
    // A decoder with a dictionary still reads batches made without one.
    let plain = try Encoder().encode(records).bytes
    let (rc, decoded, _) = try Decoder(dict: dictionary).decode(plain)
    #expect(rc == 0 && decoded == body(of: records))
}
