extension String {
    /// The text without its leading and trailing white space (Unicode `White_Space`:
    /// spaces, tabs, line breaks), as Foundation's
    /// `trimmingCharacters(in: .whitespacesAndNewlines)` gives it, without Foundation's
    /// character sets, whose first use costs tens of microseconds (this serves
    /// `Cairn.start` and reading options from the environment).
    package var trimmingWhiteSpace: String {
        let scalars = unicodeScalars
        guard let first = scalars.firstIndex(where: { !$0.properties.isWhitespace }),
              let last = scalars.lastIndex(where: { !$0.properties.isWhitespace }) else { return "" }
        return String(scalars[first...last])
    }
}
