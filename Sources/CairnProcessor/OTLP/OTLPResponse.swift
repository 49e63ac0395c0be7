/// What an OTLP collector's successful answer says (docs/FORMATS.md, "OTLP export",
/// "Answers"): an `Export…ServiceResponse` whose `partial_success` counts the records it
/// rejected (`rejected_log_records` or `rejected_spans`, field 1) and says why
/// (`error_message`, field 2).
package struct OTLPPartialSuccess: Sendable, Equatable {
    /// Records the collector did not accept.
    package var rejected: Int64
    /// Its reason, at most ``maxMessageBytes`` bytes of it (empty when none).
    package var message: String

    /// The most of `error_message` that is kept.
    package static let maxMessageBytes = 200

    /// A partial success from its parts.
    package init(rejected: Int64, message: String) {
        self.rejected = rejected
        self.message = message
    }

    /// Reads a response body, protobuf (`json` false) or JSON; nil when it holds no
    /// partial success, or one that rejected nothing and says nothing (the collector
    /// then took everything), and when it cannot be read (an answer is 2xx either way:
    /// what was sent is delivered).
    package init?(body: [UInt8], json: Bool) {
        let parsed = json ? Self.fromJSON(body) : Self.fromProtobuf(body)
        guard let parsed, parsed.rejected > 0 || !parsed.message.isEmpty else { return nil }
        self = parsed
    }

    private static func fromProtobuf(_ body: [UInt8]) -> OTLPPartialSuccess? {
        var reader = ProtobufReader(body)
        var result: OTLPPartialSuccess?
        while let (field, wire) = reader.tag() {
            if field == 1 && wire == 2 {
                guard let inner = reader.lengthDelimited() else { return nil }
                var r = ProtobufReader(Array(inner))
                var found = OTLPPartialSuccess(rejected: 0, message: "")
                while let (f, w) = r.tag() {
                    switch (f, w) {
                    case (1, 0):
                        guard let v = r.varint() else { return nil }
                        found.rejected = Int64(bitPattern: v)
                    case (2, 2):
                        guard let text = r.lengthDelimited() else { return nil }
                        found.message = Self.cut(String(decoding: text, as: UTF8.self))
                    default:
                        guard r.skip(wire: w) else { return nil }
                    }
                }
                guard !r.failed else { return nil }
                result = found
            } else {
                guard reader.skip(wire: wire) else { return nil }
            }
        }
        return reader.failed ? nil : result
    }

    private static func fromJSON(_ body: [UInt8]) -> OTLPPartialSuccess? {
        guard let document = CairnValue(json: body), case .object(let top) = document else { return nil }
        guard let partial = top["partialSuccess"] ?? top["partial_success"], case .object(let p) = partial else {
            return nil
        }
        var rejected: Int64 = 0
        for key in ["rejectedLogRecords", "rejected_log_records", "rejectedSpans", "rejected_spans",
                    "rejectedDataPoints", "rejected_data_points"] {
            switch p[key] {
            case .int(let i)?: rejected = i
            case .string(let s)?: rejected = Int64(s) ?? 0
            default: continue
            }
        }
        let message = (p["errorMessage"] ?? p["error_message"])?.text ?? ""
        return OTLPPartialSuccess(rejected: rejected, message: cut(message))
    }

    /// `text` cut to ``maxMessageBytes`` bytes, at a character's end.
    private static func cut(_ text: String) -> String {
        let utf8 = Array(text.utf8)
        guard utf8.count > maxMessageBytes else { return text }
        var end = maxMessageBytes
        while end > 0, utf8[end] & 0xC0 == 0x80 { end -= 1 }
        return String(decoding: utf8[..<end], as: UTF8.self)
    }
}

/// Reads protobuf's wire format: tags, varints, length-delimited fields, and skips
/// what it does not know; stops (``failed``) at anything truncated or malformed.
struct ProtobufReader {
    let bytes: [UInt8]
    var i = 0
    var failed = false

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    /// The next field's number and wire type; nil at the end (or on a bad tag).
    mutating func tag() -> (UInt64, UInt64)? {
        guard i < bytes.count else { return nil }
        guard let t = varint(), t >> 3 != 0 else {
            failed = true
            return nil
        }
        return (t >> 3, t & 7)
    }

    mutating func varint() -> UInt64? {
        var v: UInt64 = 0
        for shift in stride(from: 0, to: 70, by: 7) {
            guard i < bytes.count, shift < 64 else { failed = true; return nil }
            let b = bytes[i]
            i += 1
            v |= UInt64(b & 0x7F) << UInt64(shift)
            if b < 0x80 { return v }
        }
        failed = true
        return nil
    }

    mutating func lengthDelimited() -> ArraySlice<UInt8>? {
        guard let n = varint(), n <= UInt64(bytes.count - i) else { failed = true; return nil }
        defer { i += Int(n) }
        return bytes[i..<(i + Int(n))]
    }

    /// Steps over a field of wire type `wire`; false for an unknown or truncated one.
    mutating func skip(wire: UInt64) -> Bool {
        switch wire {
        case 0: return varint() != nil
        case 1: guard bytes.count - i >= 8 else { failed = true; return false }; i += 8; return true
        case 2: return lengthDelimited() != nil
        case 5: guard bytes.count - i >= 4 else { failed = true; return false }; i += 4; return true
        default: failed = true; return false
        }
    }
}
