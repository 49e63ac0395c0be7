// W3C Trace Context (https://www.w3.org/TR/trace-context/): the ids written into events
// (`trace_id`, `span_id`) and the `traceparent` header that carries them between services.
// Parsing follows the spec's rules for the current version and for future ones.

import CairnBase

/// A 128-bit trace id, written as 32 lowercase hex digits.
public struct TraceID: Sendable, Hashable, CustomStringConvertible {
    /// The first 8 bytes (the first 16 hex digits), big-endian.
    package let high: UInt64
    /// The last 8 bytes, big-endian.
    package let low: UInt64

    /// An id from its two halves.
    package init(high: UInt64, low: UInt64) {
        self.high = high
        self.low = low
    }

    /// A random, valid (not all-zero) id from the system's random source.
    package static func random() -> TraceID {
        var generator = SystemRandomNumberGenerator()
        while true {
            let id = TraceID(high: generator.next(), low: generator.next())
            if id.isValid { return id }
        }
    }

    /// Parses exactly 32 lowercase hex digits; anything else (uppercase included, as in
    /// `traceparent`) is `nil`. The all-zero id parses; check ``isValid``.
    public init?(hex: some StringProtocol) {
        let parsed: (UInt64, UInt64)? = withUTF8Bytes(String(hex)) { bytes in
            guard bytes.count == 32, let high = Hex.parse(bytes, from: 0, count: 16),
                  let low = Hex.parse(bytes, from: 16, count: 16) else { return nil }
            return (high, low)
        }
        guard let parsed else { return nil }
        (high, low) = parsed
    }

    /// 32 lowercase hex digits.
    public var description: String {
        String(unsafeUninitializedCapacity: 32) { buffer in
            Hex.write(high, into: buffer, at: 0)
            Hex.write(low, into: buffer, at: 16)
            return 32
        }
    }

    /// `false` for the all-zero id, which the spec reserves as invalid.
    public var isValid: Bool { high != 0 || low != 0 }
}

/// A 64-bit span id (a `traceparent`'s parent id), written as 16 lowercase hex digits.
public struct SpanID: Sendable, Hashable, CustomStringConvertible {
    /// The id; its big-endian bytes are the 16 hex digits.
    package let value: UInt64

    /// An id from its value.
    package init(value: UInt64) {
        self.value = value
    }

    /// A random, valid (non-zero) id from the system's random source.
    package static func random() -> SpanID {
        var generator = SystemRandomNumberGenerator()
        while true {
            let value: UInt64 = generator.next()
            if value != 0 { return SpanID(value: value) }
        }
    }

    /// Parses exactly 16 lowercase hex digits; anything else is `nil`. Zero parses; check
    /// ``isValid``.
    public init?(hex: some StringProtocol) {
        let parsed: UInt64? = withUTF8Bytes(String(hex)) { bytes in
            bytes.count == 16 ? Hex.parse(bytes, from: 0, count: 16) : nil
        }
        guard let parsed else { return nil }
        value = parsed
    }

    /// 16 lowercase hex digits.
    public var description: String {
        String(unsafeUninitializedCapacity: 16) { buffer in
            Hex.write(value, into: buffer, at: 0)
            return 16
        }
    }

    /// `false` for zero, which the spec reserves as invalid.
    public var isValid: Bool { value != 0 }
}

/// A W3C `traceparent` header: `00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>`.
///
/// ```swift
/// let parent = TraceParent(header: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
/// parent?.sampled  // true
/// ```
package struct TraceParent: Sendable, Hashable {
    /// The trace the caller is part of.
    package var traceID: TraceID
    /// The caller's span: the parent of spans started here.
    package var parentID: SpanID
    /// The `sampled` flag (bit 0 of the flags): the caller may have recorded its span.
    package var sampled: Bool

    /// A trace parent from its parts.
    package init(traceID: TraceID, parentID: SpanID, sampled: Bool) {
        self.traceID = traceID
        self.parentID = parentID
        self.sampled = sampled
    }

    /// Parses a `traceparent` value per the W3C spec, or `nil` when it is invalid.
    ///
    /// Spaces and tabs around the value are trimmed. Version `00` must be exactly 55
    /// characters. A later version (`01` to `fe`) is accepted when its first 55 characters
    /// parse as version 00 would and, if it is longer, the 56th is `-` (what follows is
    /// ignored). Version `ff`, uppercase hex, wrong separators and all-zero trace or parent
    /// ids are invalid. Only the sampled flag is kept.
    package init?(header: String) {
        let parsed: TraceParent? = withUTF8Bytes(header) { all in
            var start = 0, end = all.count
            while start < end && Self.isOWS(all[start]) { start += 1 }
            while end > start && Self.isOWS(all[end - 1]) { end -= 1 }
            let bytes = UnsafeBufferPointer(rebasing: all[start..<end])
            guard bytes.count >= 55, let version = Hex.parse(bytes, from: 0, count: 2), version != 0xFF
            else { return nil }
            if version == 0 {
                guard bytes.count == 55 else { return nil }
            } else if bytes.count > 55 {
                guard bytes[55] == UInt8(ascii: "-") else { return nil }
            }
            let dash = UInt8(ascii: "-")
            guard bytes[2] == dash, bytes[35] == dash, bytes[52] == dash,
                  let high = Hex.parse(bytes, from: 3, count: 16),
                  let low = Hex.parse(bytes, from: 19, count: 16),
                  let parent = Hex.parse(bytes, from: 36, count: 16),
                  let flags = Hex.parse(bytes, from: 53, count: 2),
                  high != 0 || low != 0, parent != 0
            else { return nil }
            return TraceParent(traceID: TraceID(high: high, low: low), parentID: SpanID(value: parent),
                               sampled: flags & 1 == 1)
        }
        guard let parsed else { return nil }
        self = parsed
    }

    /// The header value, always version `00`; flags `01` when sampled, else `00`.
    package var header: String {
        String(unsafeUninitializedCapacity: 55) { buffer in
            let dash = UInt8(ascii: "-"), zero = UInt8(ascii: "0")
            buffer[0] = zero
            buffer[1] = zero
            buffer[2] = dash
            Hex.write(traceID.high, into: buffer, at: 3)
            Hex.write(traceID.low, into: buffer, at: 19)
            buffer[35] = dash
            Hex.write(parentID.value, into: buffer, at: 36)
            buffer[52] = dash
            buffer[53] = zero
            buffer[54] = sampled ? UInt8(ascii: "1") : zero
            return 55
        }
    }

    @inline(__always)
    private static func isOWS(_ byte: UInt8) -> Bool {
        byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t")
    }
}
