/// Little-endian integers written into and read back from byte arrays: the layouts of
/// the snapshot store's values, the uploader's stored requests and batch marks (docs/FORMATS.md).
package enum LittleEndian {
    /// Appends the low `bytes` bytes of `value`, least significant first.
    package static func append(_ out: inout [UInt8], _ value: UInt64, bytes: Int) {
        for i in 0..<bytes { out.append(UInt8(truncatingIfNeeded: value >> (8 * i))) }
    }

    /// Appends a u32 length, then the string's UTF-8 bytes.
    package static func append(_ out: inout [UInt8], string: String) {
        append(&out, UInt64(UInt32(clamping: string.utf8.count)), bytes: 4)
        out += Array(string.utf8)
    }

    /// Bounds-checked reads from the front of a byte array: nil past the end.
    package struct Reader {
        package let bytes: [UInt8]
        package var at = 0

        package init(bytes: [UInt8]) { self.bytes = bytes }

        package var atEnd: Bool { at == bytes.count }

        package mutating func skip(_ n: Int) -> Bool {
            guard bytes.count - at >= n else { return false }
            at += n
            return true
        }
        package mutating func u8() -> UInt8? { integer(1).map { UInt8($0) } }
        package mutating func u16() -> UInt16? { integer(2).map { UInt16($0) } }
        package mutating func u32() -> UInt32? { integer(4).map { UInt32($0) } }
        package mutating func u64() -> UInt64? { integer(8) }

        package mutating func bytes(_ n: UInt64) -> [UInt8]? {
            guard n <= UInt64(bytes.count - at) else { return nil }
            defer { at += Int(n) }
            return Array(bytes[at..<(at + Int(n))])
        }
        /// A u32 length, then that many bytes of UTF-8.
        package mutating func string() -> String? {
            guard let n = u32(), let b = bytes(UInt64(n)) else { return nil }
            return String(decoding: b, as: UTF8.self)
        }

        private mutating func integer(_ size: Int) -> UInt64? {
            guard bytes.count - at >= size else { return nil }
            defer { at += size }
            return (0..<size).reduce(UInt64(0)) { $0 | UInt64(bytes[at + $1]) << (8 * $1) }
        }
    }
}
