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
        var own: [Range<UInt64>] = []
        var others: [UInt64] = []
        for table in sections where table.type == ELFSection.typeSymtab {
            guard Int(table.link) < sections.count,
                  let entries = file.bytes.slice(offset: table.offset, size: table.size),
                  let strings = file.bytes.slice(offset: sections[Int(table.link)].offset,
                                                 size: sections[Int(table.link)].size),
                  let stringBase = strings.baseAddress else { continue }
            var file: UnsafeRawBufferPointer?  // the STT_FILE the local symbols that follow come from
            for entry in stride(from: 0, to: entries.count / 24 * 24, by: 24) {
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
                    file = text()
                    continue
                }
                guard info & 0xf == 2, size > 0, sectionIndex < sections.count, sections[sectionIndex].isExecutable,
                      case (let end, false) = value.addingReportingOverflow(size), let text = text() else { continue }
                switch owner(text, info >> 4 == 0 ? file : nil) {
                case .own: own.append(value..<end)
                case .shared: break
                case .other: others.append(value)
                }
            }
        }
        own.sort { $0.lowerBound < $1.lowerBound }
        others.sort()
        /// Whether someone else's function starts in `range`.
        func holdsOther(_ range: Range<UInt64>) -> Bool {
            var low = 0, high = others.count
            while low < high {
                let mid = (low + high) / 2
                if others[mid] < range.lowerBound { low = mid + 1 } else { high = mid }
            }
            return low < others.count && others[low] < range.upperBound
        }
        var merged: [Range<UInt64>] = []
        for range in own where !holdsOther(range) {
            if let last = merged.last, !holdsOther(last.upperBound..<max(last.upperBound, range.lowerBound)) {
                merged[merged.count - 1] = last.lowerBound..<max(last.upperBound, range.upperBound)
            } else {
                merged.append(range)
            }
        }
        return merged
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
