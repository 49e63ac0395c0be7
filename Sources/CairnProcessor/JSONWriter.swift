package import CairnBase

extension JSONWriter {
    /// Appends a property value.
    package mutating func value(_ value: CairnValue) {
        switch value {
        case .null: ascii("null")
        case .bool(let b): bool(b)
        case .int(let i): int(i)
        case .double(let d): double(d)
        case .string(let s): string(s)
        case .array(let items):
            byte(0x5B)
            for (i, item) in items.enumerated() {
                if i > 0 { byte(0x2C) }
                self.value(item)
            }
            byte(0x5D)
        case .object(let members):
            object(members)
        }
    }

    /// Appends an object of property values.
    package mutating func object(_ members: [String: CairnValue]) {
        byte(0x7B)
        var first = true
        for (k, v) in members {
            if !first { byte(0x2C) }
            first = false
            key(k)
            value(v)
        }
        byte(0x7D)
    }

    /// Appends a value with every object's keys in sorted order (byte order of their
    /// UTF-8): for events that must come out the same byte for byte when rebuilt. Not for
    /// hot paths (it sorts).
    package mutating func sortedValue(_ value: CairnValue) {
        switch value {
        case .array(let items):
            byte(0x5B)
            for (i, item) in items.enumerated() {
                if i > 0 { byte(0x2C) }
                sortedValue(item)
            }
            byte(0x5D)
        case .object(let members):
            byte(0x7B)
            for (i, k) in members.keys.sorted(by: { $0.utf8.lexicographicallyPrecedes($1.utf8) }).enumerated() {
                if i > 0 { byte(0x2C) }
                key(k)
                sortedValue(members[k] ?? .null)
            }
            byte(0x7D)
        default:
            self.value(value)
        }
    }
}
