// Byte classes and comparisons over UTF-8 bytes, for the privacy rules' detectors.

enum Byte {
    static let tab = UInt8(ascii: "\t"), space = UInt8(ascii: " "), plus = UInt8(ascii: "+")
    static let dash = UInt8(ascii: "-"), dot = UInt8(ascii: "."), slash = UInt8(ascii: "/")
    static let colon = UInt8(ascii: ":"), equals = UInt8(ascii: "="), question = UInt8(ascii: "?")
    static let hash = UInt8(ascii: "#"), at = UInt8(ascii: "@"), underscore = UInt8(ascii: "_")
    static let openParen = UInt8(ascii: "("), closeParen = UInt8(ascii: ")")
    static let zero = UInt8(ascii: "0"), nine = UInt8(ascii: "9")
}

@inline(__always) func lowercaseASCII(_ c: UInt8) -> UInt8 {
    c &- UInt8(ascii: "A") < 26 ? c | 0x20 : c
}

/// The key-matching normalisation: ASCII lowercase; nil for the ignored '-', '_', ' '.
@inline(__always) func normalise(_ c: UInt8) -> UInt8? {
    c == Byte.dash || c == Byte.underscore || c == Byte.space ? nil : lowercaseASCII(c)
}

@inline(__always) func isDigit(_ c: UInt8) -> Bool { c &- Byte.zero < 10 }
@inline(__always) func isAlpha(_ c: UInt8) -> Bool { (c | 0x20) &- UInt8(ascii: "a") < 26 }
@inline(__always) func isAlnum(_ c: UInt8) -> Bool { isDigit(c) || isAlpha(c) }
@inline(__always) func isWordByte(_ c: UInt8) -> Bool { isAlnum(c) || c == Byte.underscore }
@inline(__always) func isBase64URL(_ c: UInt8) -> Bool { isAlnum(c) || c == Byte.dash || c == Byte.underscore }

/// RFC 6750 b64token: letters, digits and `-._~+/=`.
@inline(__always) func isTokenByte(_ c: UInt8) -> Bool {
    isAlnum(c) || c == Byte.dash || c == Byte.dot || c == Byte.underscore || c == UInt8(ascii: "~")
        || c == Byte.plus || c == Byte.slash || c == Byte.equals
}

@inline(__always) func isEmailLocal(_ c: UInt8) -> Bool {
    isAlnum(c) || c == Byte.dot || c == Byte.underscore || c == UInt8(ascii: "%") || c == Byte.plus || c == Byte.dash
}

@inline(__always) func isDomainByte(_ c: UInt8) -> Bool { isAlnum(c) || c == Byte.dot || c == Byte.dash }

@inline(__always) func isPhoneSeparator(_ c: UInt8) -> Bool {
    c == Byte.space || c == Byte.dash || c == Byte.dot || c == Byte.openParen || c == Byte.closeParen
}

/// Ends a URL query in free text: whitespace, quotes, angle brackets, backtick.
@inline(__always) func isQueryTerminator(_ c: UInt8) -> Bool {
    c <= Byte.space || c == UInt8(ascii: "\"") || c == UInt8(ascii: "'") || c == UInt8(ascii: "<")
        || c == UInt8(ascii: ">") || c == UInt8(ascii: "`") || c == 0x7F
}

@inline(__always) func isParameterSeparator(_ c: UInt8) -> Bool {
    c == UInt8(ascii: "&") || c == UInt8(ascii: ";") || c == Byte.question || c == Byte.hash
}

/// Case-insensitive "bearer" at `i`.
@inline(__always) func startsWithBearer(_ b: UnsafeBufferPointer<UInt8>, at i: Int) -> Bool {
    guard i + 6 <= b.count else { return false }
    return b[i] | 0x20 == UInt8(ascii: "b") && b[i + 1] | 0x20 == UInt8(ascii: "e") && b[i + 2] | 0x20 == UInt8(ascii: "a")
        && b[i + 3] | 0x20 == UInt8(ascii: "r") && b[i + 4] | 0x20 == UInt8(ascii: "e") && b[i + 5] | 0x20 == UInt8(ascii: "r")
}

func equals(_ b: UnsafeBufferPointer<UInt8>, _ range: Range<Int>, _ text: String) -> Bool {
    range.count == text.utf8.count && zip(b[range], text.utf8).allSatisfy { $0 == $1 }
}
