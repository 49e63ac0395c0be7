// CodeRanges: where a loaded ELF file's own functions lie, read from its symbol table
// (for Cairn's release of its own code pages that ran once).
import Glibc

/// Whose a function is, for ``CodeRanges``.
package enum CodeOwner {
    /// One's own: its range is wanted.
    case own
    /// Anyone's (the standard library's generic code specialised, a file's static
    /// function): between two of one's own, it is taken as one's own.
    case shared
    /// Someone else's: a range never runs across it.
    case other
}

extension ELFImage {
    /// The ELF address ranges of the sized function symbols of `.symtab` that `owner`
    /// says are one's own, sorted; two are one range when only ``CodeOwner/shared``
    /// functions or padding lie between them, and a range in which someone else's
    /// function starts (an alias) is left out. `owner` is given the raw name (without
    /// its NUL) and, for a local symbol, the name of the source file it comes from (the
    /// `STT_FILE` symbol before it; nil for a global one). Empty when the file has no
    /// `.symtab` (it was stripped).
    func functionRanges(owner: (_ name: UnsafeRawBufferPointer, _ file: UnsafeRawBufferPointer?) -> CodeOwner)
        -> [Range<UInt64>] {
        // First one's own functions; then the starts of others' that fall inside the
        // ranges one's own would make, to cut them there. Only those are kept: a large
        // binary's hundreds of thousands of other functions are not.
        var own: [Range<UInt64>] = []
        forEachFunction { range, name, source in
            if owner(name, source) == .own { own.append(range) }
        }
        guard !own.isEmpty else { return [] }
        own.sort { $0.lowerBound < $1.lowerBound }
        var spans: [Range<UInt64>] = []  // own ranges merged across anything
        for range in own {
            if let last = spans.last, range.lowerBound <= last.upperBound &+ Self.spanGap {
                spans[spans.count - 1] = last.lowerBound..<max(last.upperBound, range.upperBound)
            } else {
                spans.append(range)
            }
        }
        var cuts: [UInt64] = []
        forEachFunction { range, name, source in
            let start = range.lowerBound
            var low = 0, high = spans.count
            while low < high {
                let mid = (low + high) / 2
                if spans[mid].upperBound <= start { low = mid + 1 } else { high = mid }
            }
            if low < spans.count && spans[low].contains(start) && owner(name, source) == .other { cuts.append(start) }
        }
        cuts.sort()
        /// Whether someone else's function starts in `range`.
        func holdsOther(_ range: Range<UInt64>) -> Bool {
            var low = 0, high = cuts.count
            while low < high {
                let mid = (low + high) / 2
                if cuts[mid] < range.lowerBound { low = mid + 1 } else { high = mid }
            }
            return low < cuts.count && cuts[low] < range.upperBound
        }
        var merged: [Range<UInt64>] = []
        for range in own where !holdsOther(range) {
            if let last = merged.last, range.lowerBound <= last.upperBound &+ Self.spanGap,
               !holdsOther(last.upperBound..<max(last.upperBound, range.lowerBound)) {
                merged[merged.count - 1] = last.lowerBound..<max(last.upperBound, range.upperBound)
            } else {
                merged.append(range)
            }
        }
        return merged
    }

    /// Own ranges further apart than this are never one range: what lies between is
    /// taken for someone else's code without looking.
    private static let spanGap: UInt64 = 1 << 20

    /// Entries read between two lettings go of the file's mapped pages.
    private static let entriesResident = 8192

    /// Calls `body` with each sized function symbol of `.symtab` in an executable
    /// section: its address range, raw name and, for a local symbol, the name of its
    /// `STT_FILE`. Every ``entriesResident`` entries the pages of the file read so far are
    /// let go (they stay in the page cache), so that the walk keeps about that many
    /// entries and their names resident, however large the table.
    private func forEachFunction(_ body: (Range<UInt64>, UnsafeRawBufferPointer, UnsafeRawBufferPointer?) -> Void) {
        let mapped = file.bytes
        defer { Self.letGo(mapped) }
        for table in sections where table.type == ELFSection.typeSymtab {
            guard Int(table.link) < sections.count,
                  let entries = mapped.slice(offset: table.offset, size: table.size),
                  let strings = mapped.slice(offset: sections[Int(table.link)].offset,
                                             size: sections[Int(table.link)].size),
                  let stringBase = strings.baseAddress else { continue }
            var source: UnsafeRawBufferPointer?  // the STT_FILE the local symbols that follow come from
            for (index, entry) in stride(from: 0, to: entries.count / 24 * 24, by: 24).enumerated() {
                if index > 0 && index % Self.entriesResident == 0 { Self.letGo(mapped) }
                // Elf64_Sym: st_name u32, st_info u8, st_other u8, st_shndx u16, st_value u64, st_size u64.
                let name = Int(UInt32(littleEndian: entries.loadUnaligned(fromByteOffset: entry, as: UInt32.self)))
                let info = entries[entry + 4]
                let sectionIndex = Int(UInt16(littleEndian: entries.loadUnaligned(fromByteOffset: entry + 6,
                                                                                  as: UInt16.self)))
                let value = UInt64(littleEndian: entries.loadUnaligned(fromByteOffset: entry + 8, as: UInt64.self))
                let size = UInt64(littleEndian: entries.loadUnaligned(fromByteOffset: entry + 16, as: UInt64.self))
                func text() -> UnsafeRawBufferPointer? {
                    guard name > 0, name < strings.count,
                          let nul = memchr(stringBase + name, 0, strings.count - name) else { return nil }
                    return UnsafeRawBufferPointer(start: stringBase + name,
                                                  count: UnsafeRawPointer(nul) - (stringBase + name))
                }
                if info & 0xf == 4 {  // STT_FILE
                    source = text()
                    continue
                }
                guard info & 0xf == 2, size > 0, sectionIndex < sections.count, sections[sectionIndex].isExecutable,
                      case (let end, false) = value.addingReportingOverflow(size), let text = text() else { continue }
                // (A page let go is read again at its next use: `text` and `source` stay valid.)
                body(value..<end, text, info >> 4 == 0 ? source : nil)
            }
        }
    }

    /// Lets go of the resident pages of the mapped file (a minor fault brings back one
    /// read again).
    private static func letGo(_ mapped: UnsafeRawBufferPointer) {
        guard let base = mapped.baseAddress, mapped.count > 0 else { return }
        _ = madvise(UnsafeMutableRawPointer(mutating: base), mapped.count, MADV_DONTNEED)
    }
}

/// Where a loaded file's own functions lie, read from its symbol table.
package enum CodeRanges {
    /// The process address ranges of the functions of `path` (an ELF file loaded with
    /// `bias`) that `owner` says are one's own (``ELFImage/functionRanges(owner:)``);
    /// empty when the file cannot be read or has no `.symtab`. The file is mapped only
    /// for the call.
    package static func functions(inFile path: String, loadBias bias: UInt,
                                  owner: (_ name: UnsafeRawBufferPointer, _ file: UnsafeRawBufferPointer?) -> CodeOwner)
        -> [Range<UInt>] {
        guard let image = ELFImage(path: path) else { return [] }
        return image.functionRanges(owner: owner).compactMap { range in
            let (low, lowOverflow) = UInt(range.lowerBound).addingReportingOverflow(bias)
            let (high, highOverflow) = UInt(range.upperBound).addingReportingOverflow(bias)
            return lowOverflow || highOverflow ? nil : low..<high
        }
    }
}
