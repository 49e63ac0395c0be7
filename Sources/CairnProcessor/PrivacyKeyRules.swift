// Sensitive keys: the patterns that decide which keys are redacted, and the table of
// per-key rules.

import CairnBase

struct KeyPatterns: Sendable {
    /// The column of each byte: 1... for the bytes that occur in some pattern (an ASCII
    /// capital shares its lowercase letter's), 0 for every other byte, `skip` for the
    /// bytes that normalising removes.
    private var column = [UInt8](repeating: 0, count: 256)
    private var columns = 1
    /// `table[state * columns + column]`: the next state's row (`state * columns`), with
    /// `accept` set when a pattern ends there. Empty when there are no patterns.
    private var table: [UInt32] = []
    private static let skip: UInt8 = 0xFF
    private static let accept: UInt32 = 1 << 31

    init(_ keys: [String]) {
        // Flat arrays of plain integers only: this runs inside `Cairn.start`, where each
        // new generic type costs the runtime a metadata lookup.
        var bytes: [UInt8] = []   // the normalised patterns, back to back
        var ends: [Int] = []      // where each ends in `bytes`
        bytes.reserveCapacity(keys.reduce(0) { $0 + $1.utf8.count })
        ends.reserveCapacity(keys.count)
        for key in keys {
            let before = bytes.count
            for c in key.utf8 { if let n = normalise(c) { bytes.append(n) } }
            if bytes.count > before { ends.append(bytes.count) }
        }
        guard !ends.isEmpty else { return }
        for c in [Byte.dash, Byte.underscore, Byte.space] { column[Int(c)] = Self.skip }
        for c in bytes where column[Int(c)] == 0 {
            column[Int(c)] = UInt8(columns)  // at most 227 distinct normalised bytes
            columns += 1
        }
        for c in UInt8(ascii: "A")...UInt8(ascii: "Z") { column[Int(c)] = column[Int(lowercaseASCII(c))] }
        // The trie, one row of `columns` entries per state, built in the table itself:
        // an entry is the child state, 0 for none (the root is no one's child). One
        // array of 32-bit entries, room for every state (this runs on the caller's
        // thread in `Cairn.start`: 12 KiB for the default keys).
        var next = [UInt32](repeating: 0, count: (bytes.count + 1) * columns)
        var final = [Bool](repeating: false, count: bytes.count + 1)
        var states = 1
        var start = 0
        for end in ends {
            var state = 0
            for i in start..<end {
                let slot = state * columns + Int(column[Int(bytes[i])])
                if next[slot] == 0 {
                    next[slot] = UInt32(states)
                    states += 1
                }
                state = Int(next[slot])
            }
            final[state] = true
            start = end
        }
        next.removeLast(next.count - states * columns)
        final.removeLast(final.count - states)
        // Breadth first, so a state's failure state is complete before the state itself.
        // In place: a row not yet visited holds only trie children (nonzero), and a
        // missing child becomes where the failure state goes. Through unsafe buffers (the
        // trie's indices are in range by construction): this runs inside `Cairn.start`.
        let cols = columns, accept = Self.accept
        next.withUnsafeMutableBufferPointer { next in
            final.withUnsafeMutableBufferPointer { final in
                // Each state's failure state, then the queue: one scratch allocation.
                let fail = UnsafeMutablePointer<Int32>.allocate(capacity: 2 * states)
                defer { fail.deallocate() }
                fail.initialize(repeating: 0, count: 2 * states)
                let queue = fail + states
                var tail = 0
                for col in 0..<cols where next[col] != 0 {
                    queue[tail] = Int32(next[col])
                    tail &+= 1
                }
                var head = 0
                while head < tail {
                    let state = Int(queue[head])
                    head &+= 1
                    let f = Int(fail[state])
                    if final[f] { final[state] = true }
                    let row = state &* cols, failRow = f &* cols
                    for col in 0..<cols {
                        let via = next[failRow &+ col]
                        let child = next[row &+ col]
                        if child != 0 {
                            fail[Int(child)] = Int32(via)
                            queue[tail] = Int32(child)
                            tail &+= 1
                        } else {
                            next[row &+ col] = via
                        }
                    }
                }
                // Entries hold the next state's row offset, so a step is one add and one load.
                for i in 0..<next.count {
                    let n = Int(next[i])
                    next[i] = UInt32(n &* cols) | (final[n] ? accept : 0)
                }
            }
        }
        table = next
    }

    /// Whether the normalised key contains one of the patterns.
    func matches(_ key: UnsafeBufferPointer<UInt8>) -> Bool {
        guard !table.isEmpty else { return false }
        return column.withUnsafeBufferPointer { column in
            table.withUnsafeBufferPointer { table in
                var row = 0
                for b in key {
                    let col = column[Int(b)]
                    if col == Self.skip { continue }
                    let n = table[row &+ Int(col)]
                    if n & Self.accept != 0 { return true }
                    row = Int(n)
                }
                return false
            }
        }
    }

    private static let extraQueryNames: [[UInt8]] = ["code", "sig", "signature", "key", "accesstoken",
                                                      "refreshtoken", "idtoken", "auth"].map { Array($0.utf8) }

    /// Whether the normalised query parameter name is one of the extra names.
    static func isExtraQueryName(_ name: UnsafeBufferPointer<UInt8>) -> Bool {
        extraQueryNames.contains { extra in
            var k = 0
            for c in name {
                guard let folded = normalise(c) else { continue }
                guard k < extra.count, extra[k] == folded else { return false }
                k += 1
            }
            return k == extra.count
        }
    }
}

/// ``PrivacyOptions/keyRules`` by a hash of the ASCII-lowercased key, so a lookup needs
/// no lowercased copy of the key.
struct KeyRuleTable: Sendable {
    private struct Rule: Sendable {
        var key: [UInt8]
        var action: KeyAction
    }

    private var table: [UInt64: [Rule]] = [:]

    init(_ rules: [String: KeyAction]) {
        guard !rules.isEmpty else { return }
        // Sorted, so of two rules differing only in case the first in order wins, always.
        for (key, action) in rules.sorted(by: { $0.key < $1.key }) {
            let folded = key.utf8.map(lowercaseASCII)
            let hash = Self.hash(folded.withUnsafeBufferPointer { $0 })
            if table[hash]?.contains(where: { $0.key == folded }) == true { continue }
            table[hash, default: []].append(Rule(key: folded, action: action))
        }
    }

    func action(for key: UnsafeBufferPointer<UInt8>) -> KeyAction? {
        guard !table.isEmpty, let candidates = table[Self.hash(key)] else { return nil }
        for rule in candidates where rule.key.count == key.count {
            if zip(rule.key, key).allSatisfy({ $0 == lowercaseASCII($1) }) { return rule.action }
        }
        return nil
    }

    /// FNV-1a over the ASCII-lowercased bytes.
    private static func hash(_ bytes: UnsafeBufferPointer<UInt8>) -> UInt64 {
        var h = FNV1a()
        for c in bytes { h.feed(lowercaseASCII(c)) }
        return h.value
    }
}
