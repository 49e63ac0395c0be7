import CairnBase
// The two encodings of an OTLP message (docs/FORMATS.md, "OTLP export"): protobuf
// (`http/protobuf`) and the protobuf JSON mapping with OTLP's exceptions (`http/json`).
// The encoder describes each message once, by field number and JSON name; each output
// keeps what its encoding needs.

/// Where the OTLP encoder writes: a message's fields, by number (protobuf) and
/// lowerCamelCase name (JSON). Calls nest: `open…` and `close…` pair up.
protocol OTLPOutput {
    init()
    /// The encoded bytes so far.
    var bytes: OutputBytes { get }
    /// Empties it, keeping its storage.
    mutating func reset()
    /// Gives its storage back (its owner calls it once, when done with it).
    mutating func free()
    /// Where it is, to go back to with ``rewind(to:)``.
    var checkpoint: OTLPCheckpoint { get }
    /// Drops what was written since `checkpoint`.
    mutating func rewind(to checkpoint: OTLPCheckpoint)

    /// A singular message field: its fields follow, then ``close(_:)`` with the token.
    mutating func openMessage(_ field: UInt32, _ name: StaticString) -> Int
    /// Ends the message or element `token` opened.
    mutating func close(_ token: Int)
    /// A repeated message field: ``openElement(_:)`` for each element, then ``closeList()``.
    mutating func openList(_ field: UInt32, _ name: StaticString)
    /// One element of the list being written (closed with ``close(_:)``).
    mutating func openElement(_ field: UInt32) -> Int
    /// An element expected to take 128 bytes or more (a log record, a span): the same
    /// as ``openElement(_:)``, with room for its length made for that size.
    mutating func openRecord(_ field: UInt32) -> Int
    mutating func closeList()
    /// Elements another output of the same kind encoded (with ``openElement(_:)``, at
    /// the top level), appended as they are inside the open list.
    mutating func appendElements(_ encoded: UnsafeRawBufferPointer)

    /// A string field from JSON string text (escaped, without quotes); `plain` when the
    /// reader knows whether it is ASCII without escapes (``JSONScan/lastPlain``). An
    /// empty string is left out of protobuf (proto3's default) unless `always` (a
    /// `oneof` member, whose presence is its value).
    mutating func string(_ field: UInt32, _ name: StaticString, json text: UnsafeRawBufferPointer, plain: Bool?,
                         always: Bool)
    /// A string field from UTF-8 text (empty: as above).
    mutating func string(_ field: UInt32, _ name: StaticString, _ text: String, always: Bool)
    /// A string field from text known when Cairn is built (never empty).
    mutating func string(_ field: UInt32, _ name: StaticString, literal text: StaticString)
    /// A 64-bit field of nanoseconds or a count (`fixed64`; a decimal string in JSON). In
    /// this and the next two, zero is left out of protobuf (proto3's default).
    mutating func fixed64(_ field: UInt32, _ name: StaticString, _ value: UInt64)
    /// A `fixed32` field (a number in JSON).
    mutating func fixed32(_ field: UInt32, _ name: StaticString, _ value: UInt32)
    /// An enum field (an integer in JSON, as OTLP asks).
    mutating func enumValue(_ field: UInt32, _ name: StaticString, _ value: Int32)
    /// An `int64` field (a decimal string in JSON); written when zero too (it is only
    /// used as `AnyValue.int_value`, a `oneof` member).
    mutating func int64(_ field: UInt32, _ name: StaticString, _ value: Int64)
    mutating func bool(_ field: UInt32, _ name: StaticString, _ value: Bool)
    /// A `double` field (only `AnyValue.double_value`: written when zero too); `text` is
    /// its JSON number as read, when there is one.
    mutating func double(_ field: UInt32, _ name: StaticString, _ value: Double, text: UnsafeRawBufferPointer?)
    /// A trace or span id from its lowercase hex (bytes in protobuf, the hex in JSON).
    mutating func id(_ field: UInt32, _ name: StaticString, hex: UnsafeRawBufferPointer)
    /// An `sfixed64` field (a decimal string in JSON); written when zero too (it is only
    /// used as `NumberDataPoint.as_int`, a `oneof` member).
    mutating func sfixed64(_ field: UInt32, _ name: StaticString, _ value: Int64)
    /// A packed `repeated fixed64` field (decimal strings in JSON); left out when empty.
    mutating func fixed64s(_ field: UInt32, _ name: StaticString, _ values: [UInt64])
    /// A packed `repeated double` field (numbers in JSON); left out when empty.
    mutating func doubles(_ field: UInt32, _ name: StaticString, _ values: [Double])
}

/// A value of an attribute that is not a list: what most attributes are.
enum OTLPScalar {
    /// JSON string text, and whether it is plain (``JSONScan/lastPlain``) when known.
    case string(UnsafeRawBufferPointer, plain: Bool?)
    case int(Int64)
    /// A double, and its JSON text when read from one.
    case double(Double, text: UnsafeRawBufferPointer?)
    case bool(Bool)
}

extension OTLPOutput {
    /// One `KeyValue` element of the repeated field `field` whose value is `value`
    /// (`key`: JSON string text).
    mutating func attribute(_ field: UInt32, key: UnsafeRawBufferPointer, keyPlain: Bool?, _ value: OTLPScalar) {
        let kv = openElement(field)
        string(1, "key", json: key, plain: keyPlain, always: false)
        let v = openMessage(2, "value")
        switch value {
        case .string(let text, let plain): string(1, "stringValue", json: text, plain: plain, always: true)
        case .int(let i): int64(3, "intValue", i)
        case .double(let d, let text): double(4, "doubleValue", d, text: text)
        case .bool(let b): bool(2, "boolValue", b)
        }
        close(v)
        close(kv)
    }
}

/// A place in an output: its length, and whether a value came before (JSON's commas).
struct OTLPCheckpoint {
    let count: Int
    let afterValue: Bool
}

extension OTLPOutput {
    /// A string field that is not a `oneof` member.
    mutating func string(_ field: UInt32, _ name: StaticString, json text: UnsafeRawBufferPointer) {
        string(field, name, json: text, plain: nil, always: false)
    }

    /// A string field of JSON string text, ASCII without escapes or not (`plain`).
    mutating func string(_ field: UInt32, _ name: StaticString, json text: UnsafeRawBufferPointer, always: Bool) {
        string(field, name, json: text, plain: nil, always: always)
    }

    /// A string field that is not a `oneof` member.
    mutating func string(_ field: UInt32, _ name: StaticString, _ text: String) {
        string(field, name, text, always: false)
    }
}

// MARK: - Protobuf

/// The protobuf wire format: tags, varints, fixed-width little-endian numbers, and
/// length-delimited fields whose length is written in front once their content is known
/// (one byte reserved; moved along when the length takes more).
struct ProtobufOutput: OTLPOutput {
    private(set) var bytes = OutputBytes()
    /// Escaped strings are read into it first.
    private var scratch: [UInt8] = []

    init() {}

    mutating func reset() { bytes.removeAll() }
    mutating func free() { bytes.free() }
    var checkpoint: OTLPCheckpoint { OTLPCheckpoint(count: bytes.count, afterValue: false) }
    mutating func rewind(to checkpoint: OTLPCheckpoint) { bytes.truncate(to: checkpoint.count) }

    private mutating func varint(_ v: UInt64) {
        header(nil, v)
    }

    private mutating func tag(_ field: UInt32, _ wireType: UInt32) { varint(UInt64(field << 3 | wireType)) }

    /// A tag (when `field` is given, with wire type 2) and a varint, written at once.
    @inline(__always)
    private mutating func header(_ field: UInt32?, _ value: UInt64) {
        bytes.advance(Self.header(field, value, at: bytes.spare(20)))
    }

    /// Writes a tag (when `field` is given, with wire type 2) and a varint at `p` (room
    /// for 20 bytes); returns how many bytes it wrote.
    @inline(__always)
    static func header(_ field: UInt32?, _ value: UInt64, at p: UnsafeMutableRawPointer) -> Int {
        var n = 0
        @inline(__always) func put(_ v: UInt64) {
            var v = v
            while v >= 0x80 {
                p.storeBytes(of: UInt8(truncatingIfNeeded: v) | 0x80, toByteOffset: n, as: UInt8.self)
                n += 1
                v >>= 7
            }
            p.storeBytes(of: UInt8(v), toByteOffset: n, as: UInt8.self)
            n += 1
        }
        if let field { put(UInt64(field << 3 | 2)) }
        put(value)
        return n
    }

    private mutating func openLength(_ field: UInt32) -> Int {
        header(field, 0)
        return bytes.count
    }

    /// Set in a token whose length has two bytes reserved (``openRecord(_:)``).
    private static let wide = 1 << 62

    mutating func openRecord(_ field: UInt32) -> Int {
        header(field, 0x80)  // two bytes, filled in by `close`
        return bytes.count | Self.wide
    }

    mutating func close(_ token: Int) {
        if token & Self.wide != 0 {
            let start = token & ~Self.wide
            let length = bytes.count - start
            if length >= 0x80 && length < 0x4000 {
                bytes[start - 2] = UInt8(truncatingIfNeeded: length) | 0x80
                bytes[start - 1] = UInt8(length >> 7)
                return
            }
            if length < 0x80 {
                // Smaller than expected: one byte of length, the content moved back.
                bytes.close(gap: 1, at: start)
                bytes[start - 2] = UInt8(length)
                return
            }
            // 16 KiB or more: as a token with one byte reserved, a byte further on.
            bytes.close(gap: 1, at: start)
            close(start - 1)
            return
        }
        let length = bytes.count - token
        if length < 0x80 {
            bytes[token - 1] = UInt8(length)
            return
        }
        // The length takes more than the byte reserved: the content moves along.
        let size = Self.varintSize(UInt64(length))
        bytes.open(gap: size - 1, at: token)
        var v = length
        for k in 0..<size {
            bytes[token - 1 + k] = UInt8(truncatingIfNeeded: v) | (k < size - 1 ? 0x80 : 0)
            v >>= 7
        }
    }

    mutating func openMessage(_ field: UInt32, _ name: StaticString) -> Int { openLength(field) }
    mutating func openList(_ field: UInt32, _ name: StaticString) {}

    /// The same as the protocol's, with the lengths known before the bytes when the key
    /// and a string value are plain: written once, nothing moved.
    mutating func attribute(_ field: UInt32, key: UnsafeRawBufferPointer, keyPlain: Bool?, _ value: OTLPScalar) {
        guard keyPlain ?? JSONText.isPlain(key) else {
            let kv = openElement(field)
            string(1, "key", json: key, plain: false, always: false)
            let v = openMessage(2, "value")
            scalar(value)
            close(v)
            close(kv)
            return
        }
        // The AnyValue's length.
        let valueLength: Int
        switch value {
        case .string(let text, let plain):
            guard plain ?? JSONText.isPlain(text) else {
                let kv = openElement(field)
                if !key.isEmpty { header(1, UInt64(key.count)); bytes.append(contentsOf: key) }
                let v = openMessage(2, "value")
                scalar(value)
                close(v)
                close(kv)
                return
            }
            valueLength = 1 + Self.varintSize(UInt64(text.count)) + text.count
        case .int(let i): valueLength = 1 + Self.varintSize(UInt64(bitPattern: i))
        case .double: valueLength = 9
        case .bool: valueLength = 2
        }
        let keyLength = key.isEmpty ? 0 : 1 + Self.varintSize(UInt64(key.count)) + key.count
        header(field, UInt64(keyLength + 1 + Self.varintSize(UInt64(valueLength)) + valueLength))
        if !key.isEmpty {
            header(1, UInt64(key.count))
            bytes.append(contentsOf: key)
        }
        header(2, UInt64(valueLength))
        scalar(value)
    }

    /// An `AnyValue`'s fields for `value`.
    private mutating func scalar(_ value: OTLPScalar) {
        switch value {
        case .string(let text, let plain): string(1, "stringValue", json: text, plain: plain, always: true)
        case .int(let i): int64(3, "intValue", i)
        case .double(let d, let text): double(4, "doubleValue", d, text: text)
        case .bool(let b): bool(2, "boolValue", b)
        }
    }

    /// The bytes of `v` as a varint.
    @inline(__always)
    static func varintSize(_ v: UInt64) -> Int { v == 0 ? 1 : (64 - v.leadingZeroBitCount + 6) / 7 }
    mutating func openElement(_ field: UInt32) -> Int { openLength(field) }
    mutating func closeList() {}
    mutating func appendElements(_ encoded: UnsafeRawBufferPointer) { bytes.append(contentsOf: encoded) }

    mutating func string(_ field: UInt32, _ name: StaticString, json text: UnsafeRawBufferPointer, plain: Bool?,
                         always: Bool) {
        if text.isEmpty && !always { return }
        if plain ?? JSONText.isPlain(text) {
            header(field, UInt64(text.count))
            bytes.append(contentsOf: text)
            return
        }
        scratch.removeAll(keepingCapacity: true)
        JSONText.unescape(text, into: &scratch)
        header(field, UInt64(scratch.count))
        bytes.append(contentsOf: scratch)
    }

    mutating func string(_ field: UInt32, _ name: StaticString, _ text: String, always: Bool) {
        if text.isEmpty && !always { return }
        var text = text
        text.withUTF8 { u in
            header(field, UInt64(u.count))
            bytes.append(contentsOf: UnsafeRawBufferPointer(u))
        }
    }

    // A zero number is proto3's default: left out (none of these is a `oneof` member).
    mutating func string(_ field: UInt32, _ name: StaticString, literal text: StaticString) {
        header(field, UInt64(text.utf8CodeUnitCount))
        bytes.append(contentsOf: UnsafeRawBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }

    mutating func fixed64(_ field: UInt32, _ name: StaticString, _ value: UInt64) {
        if value == 0 { return }
        tag(field, 1)
        withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
    }

    mutating func fixed32(_ field: UInt32, _ name: StaticString, _ value: UInt32) {
        if value == 0 { return }
        tag(field, 5)
        withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
    }

    mutating func enumValue(_ field: UInt32, _ name: StaticString, _ value: Int32) {
        if value == 0 { return }
        tag(field, 0)
        varint(UInt64(bitPattern: Int64(value)))
    }

    mutating func int64(_ field: UInt32, _ name: StaticString, _ value: Int64) {
        tag(field, 0)
        varint(UInt64(bitPattern: value))
    }

    mutating func bool(_ field: UInt32, _ name: StaticString, _ value: Bool) {
        tag(field, 0)
        bytes.append(value ? 1 : 0)
    }

    mutating func double(_ field: UInt32, _ name: StaticString, _ value: Double, text: UnsafeRawBufferPointer?) {
        tag(field, 1)
        withUnsafeBytes(of: value.bitPattern.littleEndian) { bytes.append(contentsOf: $0) }
    }

    mutating func sfixed64(_ field: UInt32, _ name: StaticString, _ value: Int64) {
        tag(field, 1)
        withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
    }

    mutating func fixed64s(_ field: UInt32, _ name: StaticString, _ values: [UInt64]) {
        guard !values.isEmpty else { return }
        header(field, UInt64(values.count * 8))
        for v in values { withUnsafeBytes(of: v.littleEndian) { bytes.append(contentsOf: $0) } }
    }

    mutating func doubles(_ field: UInt32, _ name: StaticString, _ values: [Double]) {
        guard !values.isEmpty else { return }
        header(field, UInt64(values.count * 8))
        for v in values { withUnsafeBytes(of: v.bitPattern.littleEndian) { bytes.append(contentsOf: $0) } }
    }

    mutating func id(_ field: UInt32, _ name: StaticString, hex: UnsafeRawBufferPointer) {
        let count = min(hex.count / 2, 16)
        header(field, UInt64(count))
        var raw: (UInt64, UInt64) = (0, 0)
        withUnsafeMutableBytes(of: &raw) { b in
            for k in 0..<count {
                b[k] = (Hex.value(hex[2 * k]) ?? 0) << 4 | (Hex.value(hex[2 * k + 1]) ?? 0)
            }
            bytes.append(contentsOf: UnsafeRawBufferPointer(rebasing: b[0..<count]))
        }
    }
}

// MARK: - JSON

/// The OTLP JSON encoding: the protobuf JSON mapping, with ids as hex, enums as
/// integers, 64-bit integers as decimal strings, names in lowerCamelCase.
struct OTLPJSONOutput: OTLPOutput {
    private(set) var bytes = OutputBytes()
    /// A value was written in the open object or array: the next one needs a comma.
    private var needsComma = false
    private var scratch: [UInt8] = []

    init() {}

    mutating func reset() {
        bytes.removeAll()
        needsComma = false
    }

    mutating func free() { bytes.free() }

    var checkpoint: OTLPCheckpoint { OTLPCheckpoint(count: bytes.count, afterValue: needsComma) }

    mutating func rewind(to checkpoint: OTLPCheckpoint) {
        bytes.truncate(to: checkpoint.count)
        needsComma = checkpoint.afterValue
    }

    private mutating func ascii(_ s: StaticString) {
        bytes.append(contentsOf: UnsafeRawBufferPointer(start: s.utf8Start, count: s.utf8CodeUnitCount))
    }

    private mutating func key(_ name: StaticString) {
        if needsComma { bytes.append(0x2C) }
        bytes.append(0x22)
        ascii(name)
        bytes.append(0x22)
        bytes.append(0x3A)
        needsComma = true
    }

    mutating func openMessage(_ field: UInt32, _ name: StaticString) -> Int {
        key(name)
        bytes.append(0x7B)
        needsComma = false
        return 0
    }

    mutating func close(_ token: Int) {
        bytes.append(0x7D)
        needsComma = true
    }

    mutating func openList(_ field: UInt32, _ name: StaticString) {
        key(name)
        bytes.append(0x5B)
        needsComma = false
    }

    mutating func openRecord(_ field: UInt32) -> Int { openElement(field) }

    mutating func openElement(_ field: UInt32) -> Int {
        if needsComma { bytes.append(0x2C) }
        bytes.append(0x7B)
        needsComma = false
        return 0
    }

    mutating func closeList() {
        bytes.append(0x5D)
        needsComma = true
    }

    mutating func appendElements(_ encoded: UnsafeRawBufferPointer) {
        // A run cut from the middle of a list starts with the comma after the element
        // before it.
        let encoded = encoded.first == 0x2C ? UnsafeRawBufferPointer(rebasing: encoded.dropFirst()) : encoded
        guard !encoded.isEmpty else { return }
        if needsComma { bytes.append(0x2C) }
        bytes.append(contentsOf: encoded)
        needsComma = true
    }

    mutating func string(_ field: UInt32, _ name: StaticString, json text: UnsafeRawBufferPointer, plain: Bool?,
                         always: Bool) {
        key(name)
        if plain ?? JSONText.isPlain(text) {
            bytes.append(0x22)
            bytes.append(contentsOf: text)
            bytes.append(0x22)
            return
        }
        // Escapes or non-ASCII text: read and written again, so that what is sent is
        // valid UTF-8 and no lone surrogate (which the official parsers refuse).
        scratch.removeAll(keepingCapacity: true)
        JSONText.unescape(text, into: &scratch)
        quoted(scratch)
    }

    mutating func string(_ field: UInt32, _ name: StaticString, _ text: String, always: Bool) {
        key(name)
        quoted(Array(text.utf8))
    }

    /// (Cairn's own text: nothing in it needs escaping.)
    mutating func string(_ field: UInt32, _ name: StaticString, literal text: StaticString) {
        key(name)
        bytes.append(0x22)
        ascii(text)
        bytes.append(0x22)
    }

    private mutating func quoted(_ utf8: [UInt8]) {
        bytes.append(0x22)
        for b in utf8 {
            switch b {
            case 0x22: bytes.append(0x5C); bytes.append(0x22)
            case 0x5C: bytes.append(0x5C); bytes.append(0x5C)
            case 0..<0x20:
                let hex: [UInt8] = Array("0123456789abcdef".utf8)
                bytes.append(contentsOf: [0x5C, 0x75, 0x30, 0x30, hex[Int(b >> 4)], hex[Int(b & 15)]])
            default: bytes.append(b)
            }
        }
        bytes.append(0x22)
    }

    private mutating func decimal(_ v: UInt64, negative: Bool = false) {
        if negative { bytes.append(0x2D) }
        var digits: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8,
                     UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) =
            (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        var n = 0
        var v = v
        withUnsafeMutableBytes(of: &digits) { d in
            repeat {
                d[n] = UInt8(v % 10) + 0x30
                v /= 10
                n += 1
            } while v > 0
            for k in stride(from: n - 1, through: 0, by: -1) { bytes.append(d[k]) }
        }
    }

    mutating func fixed64(_ field: UInt32, _ name: StaticString, _ value: UInt64) {
        key(name)
        bytes.append(0x22)
        decimal(value)
        bytes.append(0x22)
    }

    mutating func fixed32(_ field: UInt32, _ name: StaticString, _ value: UInt32) {
        key(name)
        decimal(UInt64(value))
    }

    mutating func enumValue(_ field: UInt32, _ name: StaticString, _ value: Int32) {
        key(name)
        decimal(UInt64(value.magnitude), negative: value < 0)
    }

    mutating func int64(_ field: UInt32, _ name: StaticString, _ value: Int64) {
        key(name)
        bytes.append(0x22)
        decimal(value.magnitude, negative: value < 0)
        bytes.append(0x22)
    }

    mutating func bool(_ field: UInt32, _ name: StaticString, _ value: Bool) {
        key(name)
        ascii(value ? "true" : "false")
    }

    mutating func double(_ field: UInt32, _ name: StaticString, _ value: Double, text: UnsafeRawBufferPointer?) {
        key(name)
        if let text {
            bytes.append(contentsOf: text)
        } else {
            number(value)
        }
    }

    mutating func id(_ field: UInt32, _ name: StaticString, hex: UnsafeRawBufferPointer) {
        key(name)
        bytes.append(0x22)
        bytes.append(contentsOf: hex)
        bytes.append(0x22)
    }

    mutating func sfixed64(_ field: UInt32, _ name: StaticString, _ value: Int64) { int64(field, name, value) }

    mutating func fixed64s(_ field: UInt32, _ name: StaticString, _ values: [UInt64]) {
        array(name, values) { out, v in
            out.bytes.append(0x22)
            out.decimal(v)
            out.bytes.append(0x22)
        }
    }

    mutating func doubles(_ field: UInt32, _ name: StaticString, _ values: [Double]) {
        array(name, values) { out, v in out.number(v) }
    }

    /// A JSON array of `values`, each written by `write`; nothing when empty.
    private mutating func array<T>(_ name: StaticString, _ values: [T], _ write: (inout Self, T) -> Void) {
        guard !values.isEmpty else { return }
        key(name)
        bytes.append(0x5B)
        for (k, v) in values.enumerated() {
            if k > 0 { bytes.append(0x2C) }
            write(&self, v)
        }
        bytes.append(0x5D)
    }

    /// A double as a JSON number (the mapping's strings for what is not finite).
    private mutating func number(_ value: Double) {
        if value.isFinite {
            bytes.append(contentsOf: Array(value.description.utf8))
        } else {
            ascii(value.isNaN ? "\"NaN\"" : value < 0 ? "\"-Infinity\"" : "\"Infinity\"")
        }
    }
}
