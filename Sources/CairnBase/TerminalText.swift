/// Text for a person's terminal from bytes Cairn did not write itself (a damaged crash
/// report, a collector's header, an error message): control characters become visible
/// escapes, so none reaches the terminal as a command (an escape sequence could move the
/// cursor, rewrite earlier lines or set the window title).
///
/// ```swift
/// TerminalText.escaped("ok\u{1b}[2Jgone")          // "ok\\e[2Jgone"
/// TerminalText.escaped("a\nb", keepingNewlines: true)  // "a\nb"
/// ```
package enum TerminalText {
    /// `text` with C0 controls (but tab, and newline when `keepingNewlines`), DEL and the
    /// C1 controls written as `\e`, `\r`, `\t`-style or `\u{XX}` escapes; a backslash
    /// stays as it is.
    package static func escaped(_ text: String, keepingNewlines: Bool = false) -> String {
        guard text.unicodeScalars.contains(where: { needsEscape($0, keepingNewlines) }) else { return text }
        var out = ""
        out.reserveCapacity(text.utf8.count + 8)
        for scalar in text.unicodeScalars {
            guard needsEscape(scalar, keepingNewlines) else {
                out.unicodeScalars.append(scalar)
                continue
            }
            switch scalar {
            case "\u{1b}": out += "\\e"
            case "\r": out += "\\r"
            case "\n": out += "\\n"
            case "\0": out += "\\0"
            default: out += "\\u{" + String(scalar.value, radix: 16) + "}"
            }
        }
        return out
    }

    private static func needsEscape(_ s: Unicode.Scalar, _ keepingNewlines: Bool) -> Bool {
        switch s.value {
        case 0x09: return false
        case 0x0A: return !keepingNewlines
        case 0x00...0x1F, 0x7F...0x9F: return true
        default: return false
        }
    }
}

extension String {
    /// The text of a NUL-terminated C buffer, up to its first NUL (all of it without
    /// one), as UTF-8 with invalid bytes replaced: what C functions write into a
    /// `[CChar]` the caller gives them (messages, host names, paths).
    package init(nulTerminated buffer: [CChar]) {
        self.init(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
