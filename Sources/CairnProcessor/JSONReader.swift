extension CairnValue {
    /// Deepest nesting ``init(json:)`` reads (deeper input is refused, not recursed into).
    package static let jsonDepthLimit = 64

    /// `bytes` read as one JSON value (RFC 8259), surrounded by optional white space; nil
    /// when they are not JSON, or nest deeper than ``jsonDepthLimit``. Whole numbers that
    /// fit an `Int64` become `.int`, other numbers `.double`; a repeated key keeps its
    /// last value; invalid UTF-8 and lone surrogates in strings become U+FFFD.
    ///
    /// The SDK's one JSON reader (the files it reads back: run records, crash contexts,
    /// the install record, and ``FinishedEvent/object``). Small and without Foundation,
    /// so that reading a file at start costs no framework's first use.
    package init?(json bytes: [UInt8]) {
        let value = bytes.withUnsafeBytes { raw -> CairnValue? in
            var scan = JSONScan(raw)
            guard let value = Self.read(&scan, depth: 0) else { return nil }
            scan.skipSpace()
            // (`CairnValue` takes `nil` as `.null`: the optional is spelled out.)
            return scan.atEnd ? Optional.some(value) : Optional.none
        }
        guard let value else { return nil }
        self = value
    }

    /// The member `key` of an object; nil for other values and absent keys.
    package subscript(key: String) -> CairnValue? {
        guard case .object(let members) = self else { return nil }
        return members[key]
    }

    /// The text of a string; nil for other values.
    package var text: String? {
        if case .string(let s) = self { return s }
        return nil
    }

    /// A whole number that is not negative (`.int`, or a `.double` that is one); nil
    /// otherwise.
    package var unsigned: UInt64? {
        switch self {
        case .int(let i): return UInt64(exactly: i)
        case .double(let d): return d.isFinite ? UInt64(exactly: d) : nil
        default: return nil
        }
    }
}

extension CairnValue {
    /// The value at the cursor, read recursively (the grammar is ``JSONScan``'s).
    private static func read(_ scan: inout JSONScan, depth: Int) -> CairnValue? {
        switch scan.peek() {
        case .object:
            guard depth < jsonDepthLimit, scan.enterObject() else { return nil }
            var members: [String: CairnValue] = [:]
            while let key = scan.member() {
                guard let v = read(&scan, depth: depth + 1) else { return nil }
                members[text(key)] = v
            }
            return scan.failed ? nil : .object(members)
        case .array:
            guard depth < jsonDepthLimit, scan.enterArray() else { return nil }
            var items: [CairnValue] = []
            while scan.element() {
                guard let v = read(&scan, depth: depth + 1) else { return nil }
                items.append(v)
            }
            return scan.failed ? nil : .array(items)
        case .string:
            return scan.string().map { .string(text($0)) }
        case .number:
            guard let n = scan.number() else { return nil }
            let digits = String(decoding: n.text, as: UTF8.self)
            if n.integer, let i = Int64(digits) { return .int(i) }
            guard let d = Double(digits), d.isFinite else { return nil }
            return .double(d)
        case .literal:
            switch scan.literal() {
            case .some(.some(let b)): return .bool(b)
            case .some(.none): return .null
            case .none: return nil
            }
        case .invalid:
            return nil
        }
    }

    /// The string a JSON string's escaped text stands for.
    private static func text(_ escaped: UnsafeRawBufferPointer) -> String {
        if JSONText.isPlain(escaped) { return String(decoding: escaped, as: UTF8.self) }
        var utf8: [UInt8] = []
        JSONText.unescape(escaped, into: &utf8)
        return String(decoding: utf8, as: UTF8.self)
    }
}
