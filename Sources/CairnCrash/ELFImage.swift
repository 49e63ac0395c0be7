// ELF64 little-endian reader for symbolication: build id, symbols and debug sections of a
// file on disk. Every offset and size comes from a possibly truncated or hostile file, so
// each is checked against the mapping before use and arithmetic on them never traps.
import CZstd
#if canImport(Glibc)
import Glibc
#endif

/// A parse failure of file data: the symbolizer turns it into a missing symbol or line.
struct MalformedData: Error {}

/// Bounds-checked little-endian reads from a byte buffer.
struct ByteCursor {
    let bytes: UnsafeRawBufferPointer
    var offset: Int
    /// Reads stop at this offset (exclusive); it never exceeds `bytes.count`.
    var limit: Int

    init(_ bytes: UnsafeRawBufferPointer, offset: Int = 0, limit: Int? = nil) {
        self.bytes = bytes
        self.offset = max(0, offset)
        self.limit = min(limit ?? bytes.count, bytes.count)
    }

    var isAtEnd: Bool { offset >= limit }

    mutating func skip(_ count: Int) throws {
        guard count >= 0, count <= limit - offset else { throw MalformedData() }
        offset += count
    }

    mutating func skip(_ count: UInt64) throws {
        guard let n = Int(exactly: count) else { throw MalformedData() }
        try skip(n)
    }

    private mutating func load<T: FixedWidthInteger>(_: T.Type) throws -> T {
        let size = MemoryLayout<T>.size
        guard offset >= 0, size <= limit - offset, let base = bytes.baseAddress else { throw MalformedData() }
        let value = T(littleEndian: base.loadUnaligned(fromByteOffset: offset, as: T.self))
        offset += size
        return value
    }

    mutating func u8() throws -> UInt8 {
        // The line-program decoder reads mostly single bytes: skip the generic path.
        guard offset >= 0, offset < limit else { throw MalformedData() }
        defer { offset += 1 }
        return bytes[offset]
    }
    mutating func u16() throws -> UInt16 { try load(UInt16.self) }
    mutating func u32() throws -> UInt32 { try load(UInt32.self) }
    mutating func u64() throws -> UInt64 { try load(UInt64.self) }
    mutating func i8() throws -> Int8 { try load(Int8.self) }

    /// A DWARF offset: 4 or 8 bytes.
    mutating func offset(size: Int) throws -> UInt64 {
        size == 8 ? try u64() : UInt64(try u32())
    }

    mutating func uleb() throws -> UInt64 {
        var result: UInt64 = 0
        var shift: UInt64 = 0
        while true {
            let byte = try u8()
            if shift < 64 { result |= UInt64(byte & 0x7f) << shift }
            shift += 7
            if byte & 0x80 == 0 { return result }
        }
    }

    mutating func sleb() throws -> Int64 {
        var result: Int64 = 0
        var shift: Int64 = 0
        var byte: UInt8
        repeat {
            byte = try u8()
            if shift < 64 { result |= Int64(byte & 0x7f) << shift }
            shift += 7
        } while byte & 0x80 != 0
        if shift < 64, byte & 0x40 != 0 { result |= Int64(-1) << shift }
        return result
    }

    /// Skips a NUL-terminated string and returns the offset where it starts.
    mutating func skipCString() throws -> Int {
        let start = offset
        guard let base = bytes.baseAddress, offset < limit else { throw MalformedData() }
        guard let nul = memchr(base + offset, 0, limit - offset) else { throw MalformedData() }
        offset += UnsafeRawPointer(nul) - (base + offset) + 1
        return start
    }
}

extension UnsafeRawBufferPointer {
    /// The NUL-terminated string at `offset`, or nil when it runs off the buffer.
    func cString(at offset: UInt64) -> String? {
        guard let start = Int(exactly: offset), start < count, let base = baseAddress else { return nil }
        guard let nul = memchr(base + start, 0, count - start) else { return nil }
        let length = UnsafeRawPointer(nul) - (base + start)
        return String(decoding: UnsafeRawBufferPointer(start: base + start, count: length), as: UTF8.self)
    }

    /// The bytes in `offset ..< offset + size`, when they lie inside this buffer.
    func slice(offset: UInt64, size: UInt64) -> UnsafeRawBufferPointer? {
        guard let base = baseAddress else { return size == 0 ? UnsafeRawBufferPointer(start: nil, count: 0) : nil }
        let (end, overflow) = offset.addingReportingOverflow(size)
        guard !overflow, end <= UInt64(count) else { return nil }
        return UnsafeRawBufferPointer(start: base + Int(offset), count: Int(size))
    }
}

/// A file mapped read-only; the mapping lives as long as this object.
final class MappedFile {
    let bytes: UnsafeRawBufferPointer

    /// Maps a regular, non-empty file; nil when it cannot be opened or mapped.
    init?(path: String) {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG, info.st_size > 0,
              let size = Int(exactly: info.st_size) else { return nil }
        guard let base = mmap(nil, size, PROT_READ, MAP_PRIVATE, fd, 0), base != MAP_FAILED else { return nil }
        bytes = UnsafeRawBufferPointer(start: base, count: size)
    }

    deinit {
        if let base = bytes.baseAddress { munmap(UnsafeMutableRawPointer(mutating: base), bytes.count) }
    }
}

/// Bytes of one section: a view into the mapped file, or a decompressed copy it owns.
final class SectionBytes {
    let bytes: UnsafeRawBufferPointer
    private let file: MappedFile?
    private let owned: UnsafeMutableRawBufferPointer?

    init(file: MappedFile, bytes: UnsafeRawBufferPointer) {
        self.file = file
        self.bytes = bytes
        owned = nil
    }

    init(owning buffer: UnsafeMutableRawBufferPointer) {
        file = nil
        owned = buffer
        bytes = UnsafeRawBufferPointer(buffer)
    }

    deinit { owned?.deallocate() }
}

/// One ELF section header, with its name resolved.
struct ELFSection {
    var name: String
    var type: UInt32
    var flags: UInt64
    var address: UInt64
    var offset: UInt64
    var size: UInt64
    var link: UInt32

    static let typeSymtab: UInt32 = 2
    static let typeNote: UInt32 = 7
    static let typeNoBits: UInt32 = 8
    static let typeDynsym: UInt32 = 11
    static let flagExecutable: UInt64 = 0x4
    static let flagCompressed: UInt64 = 0x800

    var isExecutable: Bool { flags & Self.flagExecutable != 0 }
}

/// A function symbol; its name is read from the string table only when it is shown.
struct ELFSymbol {
    var start: UInt64
    var size: UInt64
    /// Offset of the name in its string table.
    var nameOffset: UInt32
    /// Index of the section holding the string table.
    var stringTable: UInt32
    /// Lower sorts first among symbols at the same address.
    var rank: UInt8
}

/// An ELF64 little-endian file on disk, mapped read-only.
final class ELFImage {
    let file: MappedFile
    let sections: [ELFSection]
    /// The GNU build id, empty when the file has none.
    let buildID: [UInt8]
    /// The `.gnu_debuglink` file name, when present.
    let debugLink: String?

    private var sortedSymbols: [ELFSymbol]?
    /// Executable sections' address ranges, sorted, for bounding symbols of size 0.
    private var executableRanges: [Range<UInt64>] = []

    /// Opens and validates `path`; nil when it is missing or not an ELF64 little-endian file.
    convenience init?(path: String) {
        guard let file = MappedFile(path: path) else { return nil }
        self.init(file: file)
    }

    init?(file: MappedFile) {
        let data = file.bytes
        guard data.count >= 64, let base = data.baseAddress,
              base.load(as: UInt32.self) == 0x464c_457f,  // "\u{7f}ELF"
              data[4] == 2, data[5] == 1 else { return nil }  // ELFCLASS64, ELFDATA2LSB
        self.file = file
        var header = ByteCursor(data, offset: 0x20)
        guard let phoff = try? header.u64(), let shoff = try? header.u64() else { return nil }
        header.offset = 0x36
        guard let phentsize = try? header.u16(), let phnum = try? header.u16(),
              let shentsize = try? header.u16(), let shnum = try? header.u16(),
              let shstrndx = try? header.u16() else { return nil }
        let rawSections = ELFImage.readSectionHeaders(data, offset: shoff, entrySize: shentsize,
                                                      count: shnum, nameIndex: shstrndx)
        sections = rawSections
        var id = ELFImage.buildIDFromSegments(data, offset: phoff, entrySize: phentsize, count: phnum)
        if id.isEmpty {
            for section in rawSections where section.type == ELFSection.typeNote {
                if let notes = data.slice(offset: section.offset, size: section.size) {
                    id = ELFImage.buildID(inNotes: notes)
                    if !id.isEmpty { break }
                }
            }
        }
        buildID = id
        if let link = rawSections.first(where: { $0.name == ".gnu_debuglink" }),
           let bytes = data.slice(offset: link.offset, size: link.size) {
            debugLink = bytes.cString(at: 0).flatMap { $0.isEmpty ? nil : $0 }
        } else {
            debugLink = nil
        }
    }

    /// Whether the file has a full symbol table (not only `.dynsym`).
    var hasSymtab: Bool { sections.contains { $0.type == ELFSection.typeSymtab } }

    /// Whether the file carries a line table.
    var hasDebugLine: Bool {
        sections.contains { $0.name == ".debug_line" && $0.type != ELFSection.typeNoBits && $0.size > 0 }
    }

    /// The contents of the section called `name`, decompressed when needed; nil when it is
    /// missing, lies outside the file or is compressed in a format we cannot read (zlib).
    func sectionBytes(named name: String) -> SectionBytes? {
        guard let section = sections.first(where: { $0.name == name }),
              section.type != ELFSection.typeNoBits,
              let raw = file.bytes.slice(offset: section.offset, size: section.size) else { return nil }
        guard section.flags & ELFSection.flagCompressed != 0 else { return SectionBytes(file: file, bytes: raw) }
        return ELFImage.decompress(raw)
    }

    /// The largest section we inflate; a larger claimed size is treated as corrupt.
    private static let maxDecompressedSize: UInt64 = 1 << 30

    /// Inflates an `Elf64_Chdr`-prefixed section; only ELFCOMPRESS_ZSTD is supported.
    private static func decompress(_ raw: UnsafeRawBufferPointer) -> SectionBytes? {
        var cursor = ByteCursor(raw)
        guard let type = try? cursor.u32(), (try? cursor.u32()) != nil, let size = try? cursor.u64(),
              (try? cursor.u64()) != nil, type == 2,  // ELFCOMPRESS_ZSTD
              size > 0, size <= maxDecompressedSize, let base = raw.baseAddress else { return nil }
        let compressed = UnsafeRawBufferPointer(start: base + 24, count: raw.count - 24)
        let frameSize = ZSTD_getFrameContentSize(compressed.baseAddress, compressed.count)
        // ZSTD_CONTENTSIZE_UNKNOWN and _ERROR are the two largest values; both are rejected.
        if frameSize < UInt64.max - 1 && frameSize != size { return nil }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: Int(size), alignment: 8)
        let written = ZSTD_decompress(buffer.baseAddress, buffer.count, compressed.baseAddress, compressed.count)
        guard ZSTD_isError(written) == 0, written == buffer.count else {
            buffer.deallocate()
            return nil
        }
        return SectionBytes(owning: buffer)
    }

    private static func readSectionHeaders(_ data: UnsafeRawBufferPointer, offset: UInt64, entrySize: UInt16,
                                           count: UInt16, nameIndex: UInt16) -> [ELFSection] {
        guard offset != 0, entrySize >= 64 else { return [] }
        func header(_ index: UInt64) -> (section: ELFSection, nameOffset: UInt32)? {
            let (start, overflow) = (index &* UInt64(entrySize)).addingReportingOverflow(offset)
            guard !overflow, let bytes = data.slice(offset: start, size: 64) else { return nil }
            var c = ByteCursor(bytes)
            guard let nameOffset = try? c.u32(), let type = try? c.u32(), let flags = try? c.u64(),
                  let address = try? c.u64(), let fileOffset = try? c.u64(), let size = try? c.u64(),
                  let link = try? c.u32() else { return nil }
            let section = ELFSection(name: "", type: type, flags: flags, address: address,
                                     offset: fileOffset, size: size, link: link)
            return (section, nameOffset)
        }
        // Extended numbering: with 0xff00 or more sections, the real counts live in section 0.
        var total = UInt64(count)
        var names = UInt64(nameIndex)
        if count == 0 || nameIndex == 0xffff {
            guard let first = header(0)?.section else { return [] }
            if count == 0 { total = first.size }
            if nameIndex == 0xffff { names = UInt64(first.link) }
        }
        // Each header is 64 bytes, so a count beyond the file size is corrupt.
        guard total <= UInt64(data.count / 64) else { return [] }
        var result: [ELFSection] = []
        var nameOffsets: [UInt32] = []
        result.reserveCapacity(Int(total))
        nameOffsets.reserveCapacity(Int(total))
        for index in 0..<total {
            guard let (section, nameOffset) = header(index) else { return [] }
            result.append(section)
            nameOffsets.append(nameOffset)
        }
        guard names < total,
              let nameTable = data.slice(offset: result[Int(names)].offset, size: result[Int(names)].size) else {
            return result
        }
        for index in result.indices {
            result[index].name = nameTable.cString(at: UInt64(nameOffsets[index])) ?? ""
        }
        return result
    }

    private static func buildIDFromSegments(_ data: UnsafeRawBufferPointer, offset: UInt64, entrySize: UInt16,
                                            count: UInt16) -> [UInt8] {
        guard offset != 0, entrySize >= 56 else { return [] }
        for index in 0..<UInt64(count) {
            let (start, overflow) = (index &* UInt64(entrySize)).addingReportingOverflow(offset)
            guard !overflow, let bytes = data.slice(offset: start, size: 56) else { return [] }
            var c = ByteCursor(bytes)
            guard let type = try? c.u32(), type == 4 else { continue }  // PT_NOTE
            c.offset = 8
            guard let fileOffset = try? c.u64() else { continue }
            c.offset = 32
            guard let size = try? c.u64(), let notes = data.slice(offset: fileOffset, size: size) else { continue }
            let id = buildID(inNotes: notes)
            if !id.isEmpty { return id }
        }
        return []
    }

    /// The descriptor of the NT_GNU_BUILD_ID note named "GNU" among `notes`.
    static func buildID(inNotes notes: UnsafeRawBufferPointer) -> [UInt8] {
        var c = ByteCursor(notes)
        while !c.isAtEnd {
            guard let nameSize = try? c.u32(), let descSize = try? c.u32(), let type = try? c.u32() else { return [] }
            let nameStart = c.offset
            guard (try? c.skip((Int(nameSize) + 3) & ~3)) != nil else { return [] }
            let descStart = c.offset
            guard (try? c.skip((Int(descSize) + 3) & ~3)) != nil else {
                return []
            }
            if type == 3, nameSize == 4, let base = notes.baseAddress,
               memcmp(base + nameStart, "GNU", 4) == 0 {
                return Array(UnsafeRawBufferPointer(start: base + descStart, count: Int(descSize)))
            }
        }
        return []
    }

    // MARK: Symbols

    /// The function symbol containing `address` (an ELF virtual address): its raw name and start.
    func symbol(containing address: UInt64) -> (name: String, start: UInt64)? {
        let symbols = loadSymbols()
        var low = 0, high = symbols.count
        while low < high {
            let mid = (low + high) / 2
            if symbols[mid].start <= address { low = mid + 1 } else { high = mid }
        }
        guard low > 0 else { return nil }
        let symbol = symbols[low - 1]
        if symbol.size > 0 {
            guard address &- symbol.start < symbol.size else { return nil }
        } else {
            // Unsized: it runs to the next symbol (guaranteed by the search), but not past
            // the end of its executable section.
            guard executableRanges.contains(where: { $0.contains(symbol.start) && $0.contains(address) }) else {
                return nil
            }
        }
        guard Int(symbol.stringTable) < sections.count else { return nil }
        let table = sections[Int(symbol.stringTable)]
        guard let strings = file.bytes.slice(offset: table.offset, size: table.size),
              let name = strings.cString(at: UInt64(symbol.nameOffset)), !name.isEmpty else { return nil }
        return (name, symbol.start)
    }

    private func loadSymbols() -> [ELFSymbol] {
        if let sortedSymbols { return sortedSymbols }
        executableRanges = sections.compactMap { section in
            guard section.isExecutable, section.size > 0 else { return nil }
            let (end, overflow) = section.address.addingReportingOverflow(section.size)
            return overflow ? nil : section.address..<end
        }
        var symbols: [ELFSymbol] = []
        // .symtab first: at equal rank it wins over the same symbol in .dynsym.
        for wanted in [ELFSection.typeSymtab, ELFSection.typeDynsym] {
            for section in sections where section.type == wanted {
                appendSymbols(of: section, to: &symbols)
            }
        }
        symbols.sort { $0.start != $1.start ? $0.start < $1.start : $0.rank < $1.rank }
        var unique: [ELFSymbol] = []
        unique.reserveCapacity(symbols.count)
        for symbol in symbols where unique.last?.start != symbol.start {
            unique.append(symbol)
        }
        sortedSymbols = unique
        return unique
    }

    private func appendSymbols(of table: ELFSection, to symbols: inout [ELFSymbol]) {
        guard Int(table.link) < sections.count,
              let entries = file.bytes.slice(offset: table.offset, size: table.size) else { return }
        let count = entries.count / 24
        symbols.reserveCapacity(symbols.count + count)
        // Elf64_Sym: st_name u32, st_info u8, st_other u8, st_shndx u16, st_value u64, st_size u64.
        for index in 0..<count {
            let entry = index * 24
            let name = UInt32(littleEndian: entries.loadUnaligned(fromByteOffset: entry, as: UInt32.self))
            let info = entries[entry + 4]
            let sectionIndex = UInt16(littleEndian: entries.loadUnaligned(fromByteOffset: entry + 6, as: UInt16.self))
            let value = UInt64(littleEndian: entries.loadUnaligned(fromByteOffset: entry + 8, as: UInt64.self))
            let size = UInt64(littleEndian: entries.loadUnaligned(fromByteOffset: entry + 16, as: UInt64.self))
            let type = info & 0xf, binding = info >> 4
            guard name != 0, value != 0, sectionIndex != 0, sectionIndex < 0xff00 else { continue }
            let inExecutable = Int(sectionIndex) < sections.count && sections[Int(sectionIndex)].isExecutable
            switch type {
            case 2:  // STT_FUNC
                break
            case 0, 10:  // STT_NOTYPE, STT_GNU_IFUNC
                guard size > 0, inExecutable else { continue }
            default:
                continue
            }
            // Prefer sized functions, then global names over local aliases.
            var rank: UInt8 = 0
            if size == 0 { rank += 4 }
            if type != 2 { rank += 2 }
            if binding == 0 { rank += 1 }  // STB_LOCAL
            symbols.append(ELFSymbol(start: value, size: size, nameOffset: name, stringTable: table.link, rank: rank))
        }
    }
}
