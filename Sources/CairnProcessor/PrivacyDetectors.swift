// The value detectors of the privacy rules: URL query secrets and passwords, bearer
// tokens, JWTs, e-mail addresses, card numbers (Luhn-checked) and phone numbers, each a
// walk over UTF-8 bytes that records the ranges to mask.

extension PrivacyMasker {
    func findQueryValues(_ b: UnsafeBufferPointer<UInt8>, into found: inout Matches) {
        let n = b.count
        var i = 0
        while i < n {
            guard b[i] == Byte.question || b[i] == Byte.hash else { i += 1; continue }
            // Parameters run to a terminator; '?', '#', '&' and ';' each start a new one, so
            // a URL nested in a value ("?next=/x?token=abc") has its own parameters checked.
            var j = i + 1
            while j < n && !isQueryTerminator(b[j]) {
                let nameStart = j
                while j < n && !isQueryTerminator(b[j]) && !isParameterSeparator(b[j]) && b[j] != Byte.equals { j += 1 }
                let nameEnd = j
                guard j < n, b[j] == Byte.equals else {
                    if j < n && isParameterSeparator(b[j]) { j += 1; continue }
                    break
                }
                j += 1
                let valueStart = j
                while j < n && !isQueryTerminator(b[j]) && !isParameterSeparator(b[j]) { j += 1 }
                if j > valueStart && nameEnd > nameStart
                    && isSensitiveParameter(UnsafeBufferPointer(rebasing: b[nameStart..<nameEnd]))
                    && !equals(b, valueStart..<j, Self.redacted) {
                    found.add(valueStart, j, .redacted)
                }
                if j < n && isParameterSeparator(b[j]) { j += 1 }
            }
            i = j
        }
    }

    private func isSensitiveParameter(_ name: UnsafeBufferPointer<UInt8>) -> Bool {
        if let rule = rules.action(for: name) { return rule != .keep }
        return patterns.matches(name) || KeyPatterns.isExtraQueryName(name)
    }

    /// `scheme://user:password@host`: the password becomes `[redacted]`.
    func findURLPasswords(_ b: UnsafeBufferPointer<UInt8>, into found: inout Matches) {
        let n = b.count
        var i = 0
        while i + 3 <= n {
            guard b[i] == Byte.colon, i + 2 < n, b[i + 1] == Byte.slash, b[i + 2] == Byte.slash else { i += 1; continue }
            let start = i + 3
            var j = start
            var colon = -1
            var at = -1
            while j < n {
                let c = b[j]
                if c == Byte.slash || c == Byte.question || c == Byte.hash || isQueryTerminator(c) { break }
                if c == Byte.at { at = j } else if c == Byte.colon && colon < 0 && at < 0 { colon = j }
                j += 1
            }
            if at > 0, colon >= 0, colon < at, colon + 1 < at, !equals(b, (colon + 1)..<at, Self.redacted) {
                found.add(colon + 1, at, .redacted)
                found.claimedAt.append(at)
            }
            i = j
        }
    }

    func findBearerTokens(_ b: UnsafeBufferPointer<UInt8>, into found: inout Matches) {
        let n = b.count
        var i = 0
        while i + 6 < n {
            guard b[i] | 0x20 == UInt8(ascii: "b"), startsWithBearer(b, at: i),
                  i == 0 || !isAlnum(b[i - 1]) else { i += 1; continue }
            var j = i + 6
            guard b[j] == Byte.space || b[j] == Byte.tab else { i += 1; continue }
            while j < n && (b[j] == Byte.space || b[j] == Byte.tab) { j += 1 }
            let start = j
            while j < n && isTokenByte(b[j]) { j += 1 }
            if j - start >= 8 { found.add(start, j, .token) }
            i = max(j, i + 1)
        }
    }

    func findJWTs(_ b: UnsafeBufferPointer<UInt8>, into found: inout Matches) {
        let n = b.count
        var i = 0
        while i + 3 <= n {
            guard b[i] == UInt8(ascii: "e"), b[i + 1] == UInt8(ascii: "y"), b[i + 2] == UInt8(ascii: "J"),
                  i == 0 || !(isBase64URL(b[i - 1]) || b[i - 1] == Byte.dot) else { i += 1; continue }
            var j = i
            while j < n && isBase64URL(b[j]) { j += 1 }
            guard j - i >= 10, j < n, b[j] == Byte.dot else { i = j; continue }
            j += 1
            let payload = j
            while j < n && isBase64URL(b[j]) { j += 1 }
            guard j > payload, j < n, b[j] == Byte.dot else { i = j; continue }
            j += 1
            while j < n && isBase64URL(b[j]) { j += 1 }  // the signature; empty for "alg":"none"
            // Encrypted tokens (JWE) have five segments.
            while j + 1 < n && b[j] == Byte.dot && isBase64URL(b[j + 1]) {
                j += 1
                while j < n && isBase64URL(b[j]) { j += 1 }
            }
            found.add(i, j, .jwt)
            i = j
        }
    }

    func findEmails(_ b: UnsafeBufferPointer<UInt8>, into found: inout Matches) {
        let n = b.count
        for at in 0..<n where b[at] == Byte.at && !found.claimedAt.contains(at) {
            var start = at
            while start > 0 && isEmailLocal(b[start - 1]) { start -= 1 }
            while start < at && b[start] == Byte.dot { start += 1 }
            guard start < at, b[at - 1] != Byte.dot else { continue }
            var end = at + 1
            while end < n && isDomainByte(b[end]) { end += 1 }
            while end > at + 1 && (b[end - 1] == Byte.dot || b[end - 1] == Byte.dash) { end -= 1 }
            if isEmailDomain(b, (at + 1)..<end) { found.add(start, end, .email) }
        }
    }

    /// Labels of letters, digits and '-', at least two of them, the last (the TLD) two
    /// or more letters.
    private func isEmailDomain(_ b: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) -> Bool {
        guard !range.isEmpty else { return false }
        var labels = 0
        var labelStart = range.lowerBound
        for i in range.lowerBound...range.upperBound {
            if i == range.upperBound || b[i] == Byte.dot {
                let length = i - labelStart
                guard length > 0 && length <= 63 else { return false }
                labels += 1
                labelStart = i + 1
            }
        }
        guard labels >= 2 else { return false }
        var tld = range.upperBound
        while tld > range.lowerBound && b[tld - 1] != Byte.dot { tld -= 1 }
        guard range.upperBound - tld >= 2 else { return false }
        for i in tld..<range.upperBound where !isAlpha(b[i]) { return false }
        return true
    }

    func findCards(_ b: UnsafeBufferPointer<UInt8>, into found: inout Matches) {
        let n = b.count
        var i = 0
        while i < n {
            guard isDigit(b[i]), i == 0 || !isWordByte(b[i - 1]) else { i += 1; continue }
            // A run of digit groups joined by single spaces or dashes; most runs (dates,
            // times, ids) are too short to hold a card and are skipped without collecting.
            var j = i
            var digits = 0
            while true {
                let start = j
                while j < n && isDigit(b[j]) { j += 1 }
                digits += j - start
                guard j + 1 < n, b[j] == Byte.space || b[j] == Byte.dash, isDigit(b[j + 1]) else { break }
                j += 1
            }
            let runEnd = j
            guard digits >= 13 else { i = runEnd; continue }
            var groups: [Range<Int>] = []
            j = i
            while j < runEnd {
                let start = j
                while j < runEnd && isDigit(b[j]) { j += 1 }
                groups.append(start..<j)
                j += 1
            }
            let endOK = runEnd == n || !(isWordByte(b[runEnd]) || (b[runEnd] == Byte.dot && runEnd + 1 < n && isDigit(b[runEnd + 1])))
            matchCards(b, groups, lastGroupEndsWord: endOK, into: &found)
            i = runEnd
        }
    }

    /// Within a run of digit groups: one unseparated group of 13–19 digits, or consecutive
    /// groups shaped like a printed card (4-4-4-4 with a last group of 1–4 digits, or 4-6-4 / 4-6-5): Luhn-valid and
    /// starting with 2–6 (the card networks' ranges), so epoch milliseconds and snowflake
    /// ids starting with 1 are left alone.
    private func matchCards(_ b: UnsafeBufferPointer<UInt8>, _ groups: [Range<Int>], lastGroupEndsWord: Bool,
                            into found: inout Matches) {
        var first = 0
        while first < groups.count {
            var matched = -1
            var last = first
            var digits = 0
            while last < groups.count && digits + groups[last].count <= 19 {
                digits += groups[last].count
                let window = groups[first...last]
                let bounded = last < groups.count - 1 || lastGroupEndsWord
                let shaped = last == first ? digits >= 13 : digits >= 13 && isCardShape(window)
                if bounded && shaped && isCardNumber(b, window) { matched = last }
                last += 1
            }
            if matched >= 0 {
                found.add(groups[first].lowerBound, groups[matched].upperBound, .card)
                first = matched + 1
            } else {
                first += 1
            }
        }
    }

    private func isCardShape(_ groups: ArraySlice<Range<Int>>) -> Bool {
        let sizes = groups.map(\.count)
        if sizes.count == 3 && sizes[sizes.startIndex] == 4 && sizes[sizes.startIndex + 1] == 6 {
            return sizes[sizes.startIndex + 2] == 4 || sizes[sizes.startIndex + 2] == 5
        }
        return sizes.dropLast().allSatisfy { $0 == 4 } && (1...4).contains(sizes.last ?? 0)
    }

    private func isCardNumber(_ b: UnsafeBufferPointer<UInt8>, _ groups: ArraySlice<Range<Int>>) -> Bool {
        guard let firstGroup = groups.first, (UInt8(ascii: "2")...UInt8(ascii: "6")).contains(b[firstGroup.lowerBound]) else {
            return false
        }
        var sum = 0
        var double = false
        for group in groups.reversed() {
            for i in group.reversed() {
                var d = Int(b[i] - Byte.zero)
                if double {
                    d *= 2
                    if d > 9 { d -= 9 }
                }
                sum += d
                double.toggle()
            }
        }
        return sum % 10 == 0
    }

    func findPhones(_ b: UnsafeBufferPointer<UInt8>, into found: inout Matches) {
        let n = b.count
        var i = 0
        while i < n {
            let c = b[i]
            let before: UInt8 = i > 0 ? b[i - 1] : Byte.space
            if c == Byte.plus, i + 1 < n, isDigit(b[i + 1]), !isWordByte(before), before != Byte.plus {
                if let end = internationalPhoneEnd(b, from: i + 1) {
                    found.add(i, end, .phone)
                    i = end
                    continue
                }
            } else if (isDigit(c) || (c == Byte.openParen && i + 1 < n && isDigit(b[i + 1]))) && !isWordByte(before)
                        && before != Byte.dot && before != Byte.dash && before != Byte.slash
                        && before != Byte.colon && before != Byte.plus {
                if let end = nationalPhoneEnd(b, from: i) {
                    found.add(i, end, .phone)
                    i = end
                    continue
                }
            }
            i += 1
        }
    }

    /// After "+": 8–15 digits, separated by at most two of space, '-', '.', '(' and ')';
    /// neither a group past the 15th digit nor one after a group of 6+ digits is part of it.
    private func internationalPhoneEnd(_ b: UnsafeBufferPointer<UInt8>, from start: Int) -> Int? {
        let n = b.count
        var j = start
        var digits = 0
        var end = start
        var endDigits = 0
        while j < n {
            let group = j
            while j < n && isDigit(b[j]) { j += 1 }
            guard digits + (j - group) <= 15 else {
                // A number running on past 15 digits: the phone number ends at the group
                // before, if there was one; one unbroken run that long is no phone number.
                if group == start { return nil }
                break
            }
            digits += j - group
            end = j
            endDigits = digits
            // A long group is a number written compactly ("+14155552671"); digits after a
            // space belong to something else.
            if j - group >= 6 { break }
            var k = j
            while k < n && k - j < 2 && isPhoneSeparator(b[k]) { k += 1 }
            guard k > j, k < n, isDigit(b[k]) else { break }
            j = k
        }
        guard endDigits >= 8, isPhoneEnd(b, end) else { return nil }
        return end
    }

    /// Without "+": 10–15 digits in at least two groups, the first of 1–4 digits (or 2–4
    /// in parentheses), the others 2–4, joined by one kind of separator (space, '-', or
    /// '.' only in the 3-3-4 form), not continuing a number written in the same style, so
    /// dates, times, versions, IPv4 addresses, UUIDs and card-like runs are not phone numbers.
    private func nationalPhoneEnd(_ b: UnsafeBufferPointer<UInt8>, from start: Int) -> Int? {
        let n = b.count
        var j = start
        var groups = 0
        var digits = 0
        var threeThreeFour = true  // the groups so far are 3, 3, 4 digits long
        func readGroup() -> Int {
            let g = j
            while j < n && isDigit(b[j]) { j += 1 }
            return j - g
        }
        if b[j] == Byte.openParen {
            j += 1
            let area = readGroup()
            guard (2...4).contains(area), j < n, b[j] == Byte.closeParen else { return nil }
            j += 1
            if j < n && b[j] == Byte.space { j += 1 }
            // "(555) 123-4567": the group after the parenthesis has no separator before it.
            let next = readGroup()
            guard (2...4).contains(next) else { return nil }
            groups = 2
            digits = area + next
            threeThreeFour = false
        } else {
            let first = readGroup()
            guard first <= 4 else { return nil }
            groups = 1
            digits = first
            threeThreeFour = first == 3
        }
        var end = j
        var separator: UInt8 = 0
        while j + 1 < n, b[j] == Byte.space || b[j] == Byte.dash || b[j] == Byte.dot, isDigit(b[j + 1]) {
            let sep = b[j]
            if separator != 0 && sep != separator { break }
            j += 1
            let size = readGroup()
            // More than 15 digits in one style is a longer sequence (a card, an id), not a phone.
            if digits + size > 15 { return nil }
            guard (2...4).contains(size) else { break }
            separator = sep
            groups += 1
            digits += size
            if size != (groups == 2 ? 3 : 4) || groups > 3 { threeThreeFour = false }
            end = j
        }
        guard groups >= 2, (10...15).contains(digits) else { return nil }
        // "1234 5678 9012 3456" holds no phone number starting at "5678": a group that
        // continues a number in the same style is not a start.
        if start >= 2 && b[start - 1] == separator && isDigit(b[start - 2]) { return nil }
        if separator == Byte.dot && !(threeThreeFour && groups == 3) { return nil }
        guard isPhoneEnd(b, end) else { return nil }
        return end
    }

    private func isPhoneEnd(_ b: UnsafeBufferPointer<UInt8>, _ end: Int) -> Bool {
        guard end < b.count else { return true }
        let c = b[end]
        if isWordByte(c) { return false }
        if c == Byte.dot || c == Byte.dash || c == Byte.colon || c == Byte.slash {
            return !(end + 1 < b.count && isAlnum(b[end + 1]))
        }
        return true
    }
}
