import CairnBase
import CairnStore

/// Halving a batch the collector refused as too large (413): each half is a request of
/// its own, with a key derived from the batch's (the same halves, under the same keys,
/// whenever the batch is split again, so a collector drops a second copy), the other
/// headers as built, and the batch's drop headers on the first half only (its counts
/// are reported once). docs/FORMATS.md, "Status codes".
extension UploadRequest {
    /// The two halves of this batch, in order; nil when it holds fewer than two events
    /// or is not a batch frame that decodes.
    func halves(level: Int32) -> (UploadRequest, UploadRequest)? {
        guard let info = try? FrameDecoder.info(of: body), info.recordCount >= 2, info.dictionaryID == 0,
              let decoder = try? FrameDecoder(maxContentSize: Int(clamping: info.contentSize) + 1),
              let records = try? decoder.decodeRecords(body).records, records.count >= 2,
              let encoder = try? FrameEncoder(level: level) else { return nil }
        let middle = records.count / 2
        var out: [UploadRequest] = []
        for (i, part) in [Array(records[..<middle]), Array(records[middle...])].enumerated() {
            let key = Self.derivedKey(idempotencyKey, half: i)
            let batchID = FNV1a.hash(Array(key.utf8))
            guard let framed = try? encoder.encode(batchID: batchID, records: part) else { return nil }
            var headers = headers.filter {
                let name = $0.name.lowercased()
                return name != "idempotency-key" && (i == 0 || !name.hasPrefix("cairn-dropped"))
            }
            headers.append(HTTPHeader("Idempotency-Key", key))
            out.append(UploadRequest(method: method, url: url, headers: headers, body: framed, idempotencyKey: key))
        }
        return (out[0], out[1])
    }

    /// A UUID-shaped key (version 8, RFC 9562) derived from `key` and the half.
    static func derivedKey(_ key: String, half: Int) -> String {
        let seed = Array("\(key)/\(half)".utf8)
        var bytes: [UInt8] = []
        for v in [FNV1a.hash(seed), FNV1a.hash(seed + [0x2f])] {
            for shift in stride(from: 56, through: 0, by: -8) { bytes.append(UInt8(truncatingIfNeeded: v >> UInt64(shift))) }
        }
        bytes[6] = (bytes[6] & 0x0f) | 0x80
        bytes[8] = (bytes[8] & 0x3f) | 0x80
        let hex = Hex.string(bytes)
        let parts = [0..<8, 8..<12, 12..<16, 16..<20, 20..<32].map { r in
            String(hex[hex.index(hex.startIndex, offsetBy: r.lowerBound)..<hex.index(hex.startIndex, offsetBy: r.upperBound)])
        }
        return parts.joined(separator: "-")
    }
}
