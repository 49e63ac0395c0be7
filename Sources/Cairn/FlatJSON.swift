import CairnProcessor
import CairnStore
import FoundationEssentials
import Glibc

/// A reader for one flat JSON object of strings, numbers and booleans (the install
/// record): small and without Foundation, for the start path.
enum FlatJSON {
    enum Value: Equatable {
        case string(String)
        case number(Double)
        case bool(Bool)
        case null
    }

    /// The object's members, or nil when `bytes` is not such an object.
    static func parse(_ bytes: [UInt8]) -> [String: Value]? {
        var i = 0
        func skip() { while i < bytes.count, [0x20, 0x0A, 0x0D, 0x09].contains(bytes[i]) { i += 1 } }
        func string() -> String? {
            guard i < bytes.count, bytes[i] == 0x22 else { return nil }
            i += 1
            var out: [UInt8] = []
            while i < bytes.count {
                let b = bytes[i]
                i += 1
                if b == 0x22 { return String(decoding: out, as: UTF8.self) }
                if b != 0x5C { out.append(b); continue }
                guard i < bytes.count else { return nil }
                let e = bytes[i]
                i += 1
                switch e {
                case 0x6E: out.append(0x0A)
                case 0x72: out.append(0x0D)
                case 0x74: out.append(0x09)
                case 0x62: out.append(0x08)
                case 0x66: out.append(0x0C)
                case 0x75:
                    guard i + 4 <= bytes.count, let v = UInt32(String(decoding: bytes[i..<(i + 4)], as: UTF8.self), radix: 16),
                          let scalar = Unicode.Scalar(v) else { return nil }
                    out += Array(String(Character(scalar)).utf8)
                    i += 4
                default: out.append(e)
                }
            }
            return nil
        }
        skip()
        guard i < bytes.count, bytes[i] == 0x7B else { return nil }
        i += 1
        var members: [String: Value] = [:]
        skip()
        if i < bytes.count, bytes[i] == 0x7D { return members }
        while true {
            skip()
            guard let key = string() else { return nil }
            skip()
            guard i < bytes.count, bytes[i] == 0x3A else { return nil }
            i += 1
            skip()
            guard i < bytes.count else { return nil }
            switch bytes[i] {
            case 0x22:
                guard let s = string() else { return nil }
                members[key] = .string(s)
            case 0x74, 0x66, 0x6E:
                let word = bytes[i] == 0x74 ? "true" : bytes[i] == 0x66 ? "false" : "null"
                guard bytes.count - i >= word.utf8.count, Array(bytes[i..<(i + word.utf8.count)]) == Array(word.utf8) else {
                    return nil
                }
                i += word.utf8.count
                members[key] = word == "null" ? .null : .bool(word == "true")
            default:
                let start = i
                while i < bytes.count, "-+.eE0123456789".utf8.contains(bytes[i]) { i += 1 }
                guard let n = Double(String(decoding: bytes[start..<i], as: UTF8.self)) else { return nil }
                members[key] = .number(n)
            }
            skip()
            guard i < bytes.count else { return nil }
            if bytes[i] == 0x2C { i += 1; continue }
            if bytes[i] == 0x7D { return members }
            return nil
        }
    }
}
