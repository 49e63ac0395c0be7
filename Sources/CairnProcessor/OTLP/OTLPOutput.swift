// The two encodings of an OTLP message (docs/FORMATS.md, "OTLP export"): protobuf
// (`http/protobuf`) and the protobuf JSON mapping with OTLP's exceptions (`http/json`).
// The encoder describes each message once, by field number and JSON name; each output
// keeps what its encoding needs.

/// Where the OTLP encoder writes: a message's fields, by number (protobuf) and
/// lowerCamelCase name (JSON). Calls nest: `open…` and `close…` pair up.
protocol OTLPOutput {
    init()
    /// The encoded bytes so far.
    var bytes: [UInt8] { get }
    /// Empties it, keeping its storage.
    mutating func reset()

    /// A singular message field: its fields follow, then ``close(_:)`` with the token.
    mutating func openMessage(_ field: UInt32, _ name: StaticString) -> Int
    /// Ends the message or element `token` opened.
    mutating func close(_ token: Int)
    /// A repeated message field: ``openElement(_:)`` for each element, then ``closeList()``.
    mutating func openList(_ field: UInt32, _ name: StaticString)
    /// One element of the list being written (closed with ``close(_:)``).
    mutating func openElement(_ field: UInt32) -> Int
    mutating func closeList()
    /// Elements another output of the same kind encoded (with ``openElement(_:)``, at
    /// the top level), appended as they are inside the open list.
    mutating func appendElements(_ encoded: UnsafeRawBufferPointer)

    /// A string field from JSON string text (escaped, without quotes). An empty string
    /// is left out of protobuf (proto3's default) unless `always` (a `oneof` member,
    /// whose presence is its value).
    mutating func string(_ field: UInt32, _ name: StaticString, json text: UnsafeRawBufferPointer, always: Bool)
    /// A string field from UTF-8 text (empty: as above).
    mutating func string(_ field: UInt32, _ name: StaticString, _ text: String, always: Bool)
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
}

extension OTLPOutput {
    /// A string field that is not a `oneof` member.
    mutating func string(_ field: UInt32, _ name: StaticString, json text: UnsafeRawBufferPointer) {
        string(field, name, json: text, always: false)
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
    private(set) var bytes: [UInt8] = []

    init() {}

    mutating func reset() { bytes.removeAll(keepingCapacity: true) }

    private mutating func varint(_ v: UInt64) {
        var v = v
        while v >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: v) | 0x80)
            v >>= 7
        }
        bytes.append(UInt8(v))
    }

    private mutating func tag(_ field: UInt32, _ wireType: UInt32) { varint(UInt64(field << 3 | wireType)) }

    private mutating func openLength(_ field: UInt32) -> Int {
        tag(field, 2)
        bytes.append(0)
        return bytes.count
    }

    mutating func close(_ token: Int) {
        let length = bytes.count - token
        if length < 0x80 {
            bytes[token - 1] = UInt8(length)
            return
        }
        var prefix: [UInt8] = []
        var v = UInt64(length)
        while v >= 0x80 {
            prefix.append(UInt8(truncatingIfNeeded: v) | 0x80)
            v >>= 7
        }
        prefix.append(UInt8(v))
        bytes.replaceSubrange((token - 1)..<token, with: prefix)
    }

    mutating func openMessage(_ field: UInt32, _ name: StaticString) -> Int { openLength(field) }
    mutating func openList(_ field: UInt32, _ name: StaticString) {}
    mutating func openElement(_ field: UInt32) -> Int { openLength(field) }
    mutating func closeList() {}
    mutating func appendElements(_ encoded: UnsafeRawBufferPointer) { bytes.append(contentsOf: encoded) }

    mutating func string(_ field: UInt32, _ name: StaticString, json text: UnsafeRawBufferPointer, always: Bool) {
        if text.isEmpty && !always { return }
        if JSONText.isPlain(text) {
            tag(field, 2)
            varint(UInt64(text.count))
            bytes.append(contentsOf: text)
            return
        }
        let token = openLength(field)
        JSONText.unescape(text, into: &bytes)
        close(token)
    }

    mutating func string(_ field: UInt32, _ name: StaticString, _ text: String, always: Bool) {
        if text.isEmpty && !always { return }
        var text = text
        text.withUTF8 { u in
            tag(field, 2)
            varint(UInt64(u.count))
            bytes.append(contentsOf: u)
        }
    }

    // A zero number is proto3's default: left out (none of these is a `oneof` member).
    mutating func fixed64(_ field: UInt32, _ name: StaticString, _ value: UInt64) {
        if value == 0 { return }
        tag(field, 1)
        for k in 0..<8 { bytes.append(UInt8(truncatingIfNeeded: value >> (8 * k))) }
    }

    mutating func fixed32(_ field: UInt32, _ name: StaticString, _ value: UInt32) {
        if value == 0 { return }
        tag(field, 5)
        for k in 0..<4 { bytes.append(UInt8(truncatingIfNeeded: value >> (8 * k))) }
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
        let bits = value.bitPattern
        for k in 0..<8 { bytes.append(UInt8(truncatingIfNeeded: bits >> (8 * k))) }
    }

    mutating func id(_ field: UInt32, _ name: StaticString, hex: UnsafeRawBufferPointer) {
        tag(field, 2)
        varint(UInt64(hex.count / 2))
        var k = 0
        while k + 1 < hex.count {
            bytes.append((JSONText.hexDigit(hex[k]) ?? 0) << 4 | (JSONText.hexDigit(hex[k + 1]) ?? 0))
            k += 2
        }
    }
}

// MARK: - JSON

/// The OTLP JSON encoding: the protobuf JSON mapping, with ids as hex, enums as
/// integers, 64-bit integers as decimal strings, names in lowerCamelCase.
struct OTLPJSONOutput: OTLPOutput {
    private(set) var bytes: [UInt8] = []
    /// A value was written in the open object or array: the next one needs a comma.
    private var needsComma = false
    private var scratch: [UInt8] = []

    init() {}

    mutating func reset() {
        bytes.removeAll(keepingCapacity: true)
        needsComma = false
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

    mutating func string(_ field: UInt32, _ name: StaticString, json text: UnsafeRawBufferPointer, always: Bool) {
        key(name)
        if JSONText.isPlain(text) {
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
        } else if value.isFinite {
            bytes.append(contentsOf: Array(value.description.utf8))
        } else {
            // Not a JSON number: the mapping's string forms.
            ascii(value.isNaN ? "\"NaN\"" : value < 0 ? "\"-Infinity\"" : "\"Infinity\"")
        }
    }

    mutating func id(_ field: UInt32, _ name: StaticString, hex: UnsafeRawBufferPointer) {
        key(name)
        bytes.append(0x22)
        bytes.append(contentsOf: hex)
        bytes.append(0x22)
    }
}
