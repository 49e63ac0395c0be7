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
    /// The `random` flag (bit 1, Trace Context Level 2): the trace id is random.
    package var random: Bool

    /// A trace parent from its parts.
    package init(traceID: TraceID, parentID: SpanID, sampled: Bool, random: Bool = false) {
        self.traceID = traceID
        self.parentID = parentID
        self.sampled = sampled
        self.random = random
    }

    /// Parses a `traceparent` value per the W3C spec, or `nil` when it is invalid.
    ///
    /// Spaces and tabs around the value are trimmed. Version `00` must be exactly 55
    /// characters. A later version (`01` to `fe`) is accepted when its first 55 characters
    /// parse as version 00 would and, if it is longer, the 56th is `-` (what follows is
    /// ignored). Version `ff`, uppercase hex, wrong separators and all-zero trace or parent
    /// ids are invalid. The sampled and random flags are kept; other bits are not.
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
                               sampled: flags & 1 == 1, random: flags & 2 == 2)
        }
        guard let parsed else { return nil }
        self = parsed
    }

    /// The header value, always version `00`; the flags `sampled` (`01`) and `random`
    /// (`02`).
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
            buffer[54] = zero + (sampled ? 1 : 0) + (random ? 2 : 0)
            return 55
        }
    }

    @inline(__always)
    private static func isOWS(_ byte: UInt8) -> Bool {
        byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t")
    }
}

/// A W3C `tracestate` header (https://www.w3.org/TR/trace-context/#tracestate-header):
/// the vendors' entries that travel with a trace, carried on unchanged.
///
/// Parsing combines every `tracestate` header of a request (in order, as one list),
/// trims the optional white space around members, drops empty members, and refuses the
/// whole header, as the spec lets a parser do, when a member is invalid: a key that is
/// not `lcalpha 0*255(lcalpha / DIGIT / "_" / "-" / "*" / "/")` nor
/// `tenant@system` (tenant: lowercase letter or digit then up to 240 of those
/// characters; system: a lowercase letter then up to 13), a value that is empty, longer
/// than 256 characters, has a `,` or `=`, a character outside 0x20-0x7E, or ends with a
/// space; the same key twice; more than 32 members.
///
/// ```swift
/// let state = TraceState(headers: ["congo=t61rcWkgMzE", "rojo=00f067aa0ba902b7"])
/// state?.header  // "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
/// ```
public struct TraceState: Sendable, Hashable, CustomStringConvertible {
    /// The members, `key=value` each, in order.
    package let members: [String]

    /// The most members a `tracestate` may have.
    package static let maxMembers = 32

    /// Parses the values of a request's `tracestate` headers, in the order received;
    /// nil when they hold no member, or are invalid (the trace then goes on without).
    public init?(headers: [String]) {
        var members: [String] = []
        var keys = Set<Substring>()
        for header in headers {
            for raw in header.split(separator: ",", omittingEmptySubsequences: false) {
                let member = Self.trimmed(raw)
                if member.isEmpty { continue }
                guard let equals = member.firstIndex(of: "="),
                      Self.isKey(member[..<equals].utf8), Self.isValue(member[member.index(after: equals)...].utf8),
                      keys.insert(member[..<equals]).inserted
                else { return nil }
                members.append(String(member))
            }
        }
        guard !members.isEmpty, members.count <= Self.maxMembers else { return nil }
        self.members = members
    }

    /// The one header.
    public init?(header: String) { self.init(headers: [header]) }

    /// The header to send on: the members joined by `,`.
    public var header: String { members.joined(separator: ",") }

    /// The header.
    public var description: String { header }

    /// The value of `key`, if it has a member.
    public subscript(key: String) -> String? {
        for m in members where m.hasPrefix(key + "=") { return String(m.dropFirst(key.utf8.count + 1)) }
        return nil
    }

    private static func trimmed(_ s: Substring) -> Substring {
        var s = s
        while let c = s.first, c == " " || c == "\t" { s = s.dropFirst() }
        while let c = s.last, c == " " || c == "\t" { s = s.dropLast() }
        return s
    }

    /// `lcalpha / DIGIT / "_" / "-" / "*" / "/"`.
    private static func isKeyByte(_ b: UInt8) -> Bool {
        (b >= 0x61 && b <= 0x7A) || (b >= 0x30 && b <= 0x39) || b == 0x5F || b == 0x2D || b == 0x2A || b == 0x2F
    }

    private static func isKey(_ key: Substring.UTF8View) -> Bool {
        let bytes = Array(key)
        func lcalpha(_ b: UInt8) -> Bool { b >= 0x61 && b <= 0x7A }
        if let at = bytes.firstIndex(of: 0x40) {
            let tenant = bytes[..<at], system = bytes[(at + 1)...]
            guard let t0 = tenant.first, lcalpha(t0) || (t0 >= 0x30 && t0 <= 0x39), tenant.count <= 241,
                  let s0 = system.first, lcalpha(s0), system.count <= 14 else { return false }
            return tenant.allSatisfy(isKeyByte) && system.allSatisfy(isKeyByte)
        }
        guard let first = bytes.first, lcalpha(first), bytes.count <= 256 else { return false }
        return bytes.allSatisfy(isKeyByte)
    }

    /// `0*255(chr) nblk-chr`: chr is 0x20-0x7E but `,` and `=`; the last not a space.
    private static func isValue(_ value: Substring.UTF8View) -> Bool {
        guard let last = value.last, last != 0x20, value.count <= 256 else { return false }
        return value.allSatisfy { $0 >= 0x20 && $0 <= 0x7E && $0 != 0x2C && $0 != 0x3D }
    }
}
