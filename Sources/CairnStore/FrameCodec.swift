package import CCairnCore

/// The metadata of one batch frame, read from its skippable zstd frame.
///
/// See "Batch frame (version 1)" in `docs/FORMATS.md` for the layout.
package struct FrameInfo: Sendable, Equatable {
    /// Metadata format version (1).
    package var version: UInt16
    /// Reserved flags; 0 in version 1.
    package var flags: UInt16
    /// Number of records in the body.
    package var recordCount: UInt32
    /// The identifier the encoder was given for this batch.
    package var batchID: UInt64
    /// The id of the zstd dictionary the body was compressed with, or 0 for none.
    package var dictionaryID: UInt32
    /// Length of the decompressed body in bytes (records plus one `\n` each).
    package var contentSize: UInt64
    /// Length of the whole batch in bytes: the metadata frame and the zstd frame.
    package var frameSize: UInt64

    init(_ info: cairn_frame_info_t) {
        version = info.version
        flags = info.flags
        recordCount = info.record_count
        batchID = info.batch_id
        dictionaryID = info.dict_id
        contentSize = info.content_size
        frameSize = info.frame_size
    }
}

/// Turns batches of records into batch frames: Cairn's metadata in a skippable zstd
/// frame, then one standard zstd frame holding the records as newline-delimited lines.
///
/// An encoder keeps one zstd compression context (a 64 KiB window: about 0.5 MiB) and
/// a scratch buffer, so once warm a batch costs only the returned array, of the batch's
/// own size (and, from arrays of records, one copy of them). It is not `Sendable`: use it from one
/// task or thread at a time, as the batcher does.
///
/// ```swift
/// let encoder = try FrameEncoder()
/// let batch = try encoder.encode(batchID: 7, records: [Array(#"{"event":"start"}"#.utf8)])
/// // `zstd -d` turns `batch` into the line {"event":"start"}
/// ```
package final class FrameEncoder {
    private let handle: OpaquePointer
    /// Where batches are compressed, grown to the largest needed and used again; not
    /// initialised, so only what zstd has written is in memory.
    private var scratch = UnsafeMutableRawBufferPointer(start: nil, count: 0)
    /// Reused copy of the records given as arrays.
    private var joined: [UInt8] = []

    /// Creates an encoder.
    ///
    /// - Parameters:
    ///   - level: zstd compression level, 1...19 or one of zstd's negative fast levels.
    ///   - dictionary: A dictionary in zstd's format (from `zstd --train` or
    ///     `ZDICT_trainFromBuffer`), or `nil`. Decoders need the same dictionary.
    /// - Throws: ``CairnError`` with code `CAIRN_EINVAL` for a level out of range or a
    ///   dictionary that is not in zstd's format, `CAIRN_ENOMEM`, or `CAIRN_EZSTD`.
    package init(level: Int32 = CAIRN_FRAME_DEFAULT_LEVEL, dictionary: [UInt8]? = nil)
        throws(CairnError)
    {
        var encoder: OpaquePointer?
        let rc = withOptionalBytes(dictionary) { dict, len in
            cairn_frame_encoder_new(level, dict, len, &encoder)
        }
        guard rc == 0, let encoder else {
            throw CairnError(rc == 0 ? CAIRN_ENOMEM : rc, function: "cairn_frame_encoder_new")
        }
        handle = encoder
    }

    deinit {
        cairn_frame_encoder_free(handle)
        scratch.deallocate()
    }

    /// The largest batch that `recordCount` records totalling `payloadBytes` bytes can
    /// produce, or `Int.max` when such a batch is too large to encode.
    package static func bound(payloadBytes: Int, recordCount: Int) -> Int {
        // size_t arrives as Int; the C core's SIZE_MAX ("too large") reads as -1.
        let bound = cairn_frame_bound(max(payloadBytes, 0), max(recordCount, 0))
        return bound < 0 ? Int.max : bound
    }

    /// Encodes `records` as one batch.
    ///
    /// - Parameters:
    ///   - batchID: Stored in the metadata; the uploader uses it as the batch's key.
    ///   - records: At least one record; none may contain a `\n` byte (0x0A).
    /// - Returns: The batch bytes.
    /// - Throws: ``CairnError`` with code `CAIRN_EINVAL` (no records, or a record
    ///   containing `\n`), `CAIRN_ENOMEM` or `CAIRN_EZSTD`.
    package func encode(batchID: UInt64, records: [[UInt8]]) throws(CairnError) -> [UInt8] {
        // The C encoder needs every record's address at once, which nested
        // withUnsafeBufferPointer calls cannot give for an array of arrays; so the
        // records are copied into one reused buffer first.
        joined.removeAll(keepingCapacity: true)
        for record in records { joined.append(contentsOf: record) }
        // Array's withUnsafe* methods rethrow untyped errors, hence the Result.
        let result = joined.withUnsafeBytes { all -> Result<[UInt8], CairnError> in
            var offset = 0
            let slices = records.map { record in
                defer { offset += record.count }
                let start = record.isEmpty ? nil : all.baseAddress.map { $0 + offset }
                return cairn_slice_t(data: start, len: record.count)
            }
            return slices.withUnsafeBufferPointer { buffer in
                Result { () throws(CairnError) in try encode(batchID: batchID, slices: buffer) }
            }
        }
        return try result.get()
    }

    /// Encodes the records described by `slices` as one batch, without copying them
    /// first: the records can point straight into the ring buffer's mapping.
    ///
    /// - Parameters:
    ///   - batchID: Stored in the metadata.
    ///   - slices: At least one record; each `data` must stay valid for the call and
    ///     may be `nil` only when its `len` is 0. No record may contain `\n`.
    /// - Returns: The batch bytes.
    /// - Throws: ``CairnError``, as ``encode(batchID:records:)``.
    package func encode(batchID: UInt64, slices: UnsafeBufferPointer<cairn_slice_t>)
        throws(CairnError) -> [UInt8]
    {
        try sized(slices, records: slices.count) { dst, count, written in
            cairn_frame_encode(handle, batchID, slices.baseAddress, slices.count, dst, count, &written)
        }
    }

    /// Encodes a batch of records given in pieces, without copying them first: a record
    /// is the pieces up to and including one whose `ends` entry is true (the last must
    /// be), so an event in the ring can be completed with bytes kept elsewhere.
    ///
    /// - Throws: ``CairnError``, as ``encode(batchID:records:)``; `CAIRN_EINVAL` also when
    ///   `ends` does not match `pieces` or the last piece does not end a record.
    package func encode(batchID: UInt64, pieces: UnsafeBufferPointer<cairn_slice_t>, ends: [Bool])
        throws(CairnError) -> [UInt8]
    {
        guard ends.count == pieces.count else { throw CairnError(CAIRN_EINVAL, function: "cairn_frame_encode_parts") }
        let flags = ends.map { UInt8($0 ? 1 : 0) }
        let records = ends.reduce(0) { $0 + ($1 ? 1 : 0) }
        return try flags.withUnsafeBufferPointer { (f) throws(CairnError) -> [UInt8] in
            try sized(pieces, records: records) { dst, count, written in
                cairn_frame_encode_parts(handle, batchID, pieces.baseAddress, f.baseAddress, pieces.count,
                                         dst, count, &written)
            }
        }
    }

    /// Runs `encode` into the scratch buffer, sized for `pieces` of `records` records: a
    /// quarter of the bound first (event JSON compresses 5 to 20 times), the whole bound
    /// when that was too small; returns the batch as an array of its own size.
    private func sized(_ pieces: UnsafeBufferPointer<cairn_slice_t>, records: Int,
                       _ encode: (UnsafeMutableRawPointer?, Int, inout Int) -> Int32) throws(CairnError) -> [UInt8] {
        var payload = 0
        for piece in pieces {
            let (sum, overflow) = payload.addingReportingOverflow(piece.len)
            if overflow { throw CairnError(CAIRN_EINVAL, function: "cairn_frame_encode") }
            payload = sum
        }
        let bound = FrameEncoder.bound(payloadBytes: payload, recordCount: records)
        if bound == Int.max { throw CairnError(CAIRN_EINVAL, function: "cairn_frame_encode") }
        var capacity = min(bound, FrameEncoder.bound(payloadBytes: payload / 4, recordCount: records))
        while true {
            if scratch.count < capacity {
                scratch.deallocate()
                scratch = .allocate(byteCount: capacity, alignment: 16)
            }
            var written = 0
            let rc = encode(scratch.baseAddress, capacity, &written)
            if rc == CAIRN_EBUFSIZE && capacity < bound {
                capacity = bound
                continue
            }
            if rc != 0 { throw CairnError(rc, function: "cairn_frame_encode") }
            // The batch is a copy of its size, not a bound's (bodies are held while their
            // requests are out), and the scratch buffer is used again. Its storage is
            // rounded up to 4 KiB: bodies of about the same size are freed out of order as
            // answers come, and a hole left by one then fits the next, where exact sizes
            // left holes a few bytes short and the heap arena crept upwards.
            var body = [UInt8]()
            body.reserveCapacity((written + 4095) & ~4095)
            body.append(contentsOf: UnsafeRawBufferPointer(start: scratch.baseAddress, count: written))
            return body
        }
    }

    /// Encodes a run of ring records as one batch, reading them in place in the ring's
    /// mapping: call it before committing the run. Payloads go as they are, whatever
    /// their kind: for runs of data records (the uploader completes bare records from
    /// their context first, and frames them with ``encode(batchID:pieces:ends:)``).
    ///
    /// ```swift
    /// let run = try ring.peek(maxRecords: 500, maxBytes: 512 * 1024)
    /// let batch = try encoder.encode(batchID: id, run: run)
    /// ```
    ///
    /// - Throws: ``CairnError``, as ``encode(batchID:records:)`` (an empty run is
    ///   ``CairnError/invalid``).
    package func encode(batchID: UInt64, run: Ring.Run) throws(CairnError) -> [UInt8] {
        let slices = run.records.map { cairn_slice_t(data: $0.bytes.baseAddress, len: $0.bytes.count) }
        return try slices.withUnsafeBufferPointer { (buffer) throws(CairnError) -> [UInt8] in
            try encode(batchID: batchID, slices: buffer)
        }
    }
}

/// Reads batch frames back into their records, checking every bound on the way:
/// metadata, sizes, the zstd checksum and the record count.
///
/// A decoder keeps one zstd decompression context. It is not `Sendable`: use it from
/// one task or thread at a time.
///
/// ```swift
/// let decoder = try FrameDecoder(maxContentSize: 8 << 20)
/// let (info, body) = try decoder.decode(batch)
/// let records = FrameDecoder.records(in: body)   // info.recordCount of them
/// ```
package final class FrameDecoder {
    private let handle: OpaquePointer

    /// The largest decompressed body this decoder accepts, in bytes.
    package let maxContentSize: Int

    /// Creates a decoder.
    ///
    /// - Parameters:
    ///   - maxContentSize: Largest decompressed body accepted, in bytes (at least 1);
    ///     larger batches fail with `CAIRN_ELIMIT` before anything is decompressed.
    ///   - dictionary: The dictionary the encoder used, or `nil`. Batches compressed
    ///     without a dictionary are read either way.
    /// - Throws: ``CairnError`` with code `CAIRN_EINVAL` (a limit below 1, or a
    ///   dictionary not in zstd's format), `CAIRN_ENOMEM` or `CAIRN_EZSTD`.
    package init(maxContentSize: Int, dictionary: [UInt8]? = nil) throws(CairnError) {
        guard maxContentSize > 0 else {
            throw CairnError(CAIRN_EINVAL, function: "cairn_frame_decoder_new")
        }
        var decoder: OpaquePointer?
        let rc = withOptionalBytes(dictionary) { dict, len in
            cairn_frame_decoder_new(maxContentSize, dict, len, &decoder)
        }
        guard rc == 0, let decoder else {
            throw CairnError(rc == 0 ? CAIRN_ENOMEM : rc, function: "cairn_frame_decoder_new")
        }
        handle = decoder
        self.maxContentSize = maxContentSize
    }

    deinit {
        cairn_frame_decoder_free(handle)
    }

    /// Reads the metadata of the batch at the start of `bytes` without decompressing it.
    ///
    /// - Throws: ``CairnError`` with code `CAIRN_ETRUNCATED`, `CAIRN_ECORRUPT` (not a
    ///   Cairn batch, or a damaged zstd frame header) or `CAIRN_EVERSION`.
    package static func info(of bytes: [UInt8]) throws(CairnError) -> FrameInfo {
        var info = cairn_frame_info_t()
        let rc = bytes.withUnsafeBytes { src in
            cairn_frame_read_info(src.baseAddress, src.count, &info)
        }
        if rc != 0 { throw CairnError(rc, function: "cairn_frame_read_info") }
        return FrameInfo(info)
    }

    /// Decodes a batch that occupies all of `bytes`.
    ///
    /// - Returns: The metadata and the body: the records, each followed by `\n`.
    /// - Throws: ``CairnError`` with code `CAIRN_ETRUNCATED`, `CAIRN_ECORRUPT` (bad
    ///   metadata, checksum, trailing bytes or record count), `CAIRN_EVERSION`,
    ///   `CAIRN_ELIMIT` (body over ``maxContentSize``), `CAIRN_EDICT` (dictionary
    ///   missing or different) or `CAIRN_EZSTD`.
    package func decode(_ bytes: [UInt8]) throws(CairnError) -> (info: FrameInfo, body: [UInt8]) {
        // Sized from the metadata but never beyond the limit, so a lying header cannot
        // make this allocate more than maxContentSize; the C decoder re-checks both.
        let announced = try FrameDecoder.info(of: bytes).contentSize
        let capacity = Int(min(announced, UInt64(maxContentSize)))
        var info = cairn_frame_info_t()
        var rc: Int32 = 0
        let handle = self.handle
        let body = bytes.withUnsafeBytes { src in
            [UInt8](unsafeUninitializedCapacity: capacity) { dst, count in
                var written = 0
                rc = cairn_frame_decode(handle, src.baseAddress, src.count,
                                        dst.baseAddress, dst.count, &written, &info)
                count = rc == 0 ? written : 0
            }
        }
        if rc != 0 { throw CairnError(rc, function: "cairn_frame_decode") }
        return (FrameInfo(info), body)
    }

    /// Decodes a batch that occupies all of `bytes` and splits its body into records.
    ///
    /// - Throws: ``CairnError``, as ``decode(_:)``.
    package func decodeRecords(_ bytes: [UInt8]) throws(CairnError)
        -> (info: FrameInfo, records: [[UInt8]])
    {
        let (info, body) = try decode(bytes)
        return (info, FrameDecoder.records(in: body))
    }

    /// Splits a decoded body into its records (the `\n` terminators removed). A body
    /// not ending in `\n` has a last, unterminated record.
    package static func records(in body: [UInt8]) -> [[UInt8]] {
        var records: [[UInt8]] = []
        var start = body.startIndex
        for index in body.indices where body[index] == UInt8(ascii: "\n") {
            records.append(Array(body[start..<index]))
            start = index + 1
        }
        if start < body.endIndex { records.append(Array(body[start...])) }
        return records
    }
}

/// Calls `body` with the address and length of `bytes`, or with `nil` and 0.
private func withOptionalBytes<R>(_ bytes: [UInt8]?,
                                  _ body: (UnsafeRawPointer?, Int) -> R) -> R {
    guard let bytes, !bytes.isEmpty else { return body(nil, 0) }
    return bytes.withUnsafeBytes { body($0.baseAddress, $0.count) }
}
