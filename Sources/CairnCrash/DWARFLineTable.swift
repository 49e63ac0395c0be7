// The DWARF `.debug_line` line-number program (versions 2 to 5, 32- and 64-bit DWARF).
//
// A first pass runs every unit's program once and keeps only where each sequence starts
// and ends (in addresses and in program bytes). A lookup then decodes just the sequence
// that holds the address, and keeps its rows. This keeps memory to a few words per
// sequence instead of one row per instruction boundary of the whole binary.

/// A source position found in a line table.
struct SourceLocation {
    var file: String?
    /// 0 when the compiler attributed the code to no line.
    var line: Int
    /// 0 when unknown.
    var column: Int
}

/// The line table of one ELF file, decoded on demand.
final class DWARFLineTable {
    /// Where a string of the line table lives.
    private struct StringRef {
        enum Section: UInt8 { case debugLine, debugLineStr, debugStr }
        var section: Section
        var offset: UInt64
    }

    private struct FileEntry {
        var path: StringRef
        var directory: UInt64
    }

    private struct UnitHeader {
        var version: UInt16
        var minInstructionLength: UInt8
        var maxOpsPerInstruction: UInt8
        var lineBase: Int8
        var lineRange: UInt8
        var opcodeBase: UInt8
        var standardOpcodeLengths: [UInt8]
        var directories: [StringRef]
        var files: [FileEntry]
        var programEnd: Int
        /// Offset of the unit in `.debug_line` (what a compile unit's DW_AT_stmt_list holds).
        var offset: Int = 0
    }

    private struct Sequence {
        var start: UInt64
        var end: UInt64
        var unit: Int
        /// Offset in `.debug_line` of the sequence's first opcode.
        var programOffset: Int
    }

    private struct Row {
        var address: UInt64
        var file: UInt32
        var line: UInt32
        var column: UInt32
    }

    private let lines: SectionBytes
    private let lineStrings: SectionBytes?
    private let strings: SectionBytes?
    private var units: [UnitHeader] = []
    /// Sorted by start address.
    private var sequences: [Sequence] = []
    /// `maxEnd[i]` is the largest end among `sequences[0...i]`: it bounds a backward search
    /// when sequences overlap (code of discarded functions is often left at address 0).
    private var maxEnd: [UInt64] = []
    private var decodedRows: [Int: [Row]] = [:]

    /// Indexes the line programs of `lines` (the `.debug_line` section); `lineStrings` and
    /// `strings` are `.debug_line_str` and `.debug_str`, which DWARF 5 file tables refer to.
    init(lines: SectionBytes, lineStrings: SectionBytes?, strings: SectionBytes?) {
        self.lines = lines
        self.lineStrings = lineStrings
        self.strings = strings
        indexUnits()
    }

    /// The source position of the instruction at `address` (an ELF virtual address).
    func location(for address: UInt64) -> SourceLocation? {
        var low = 0, high = sequences.count
        while low < high {
            let mid = (low + high) / 2
            if sequences[mid].start <= address { low = mid + 1 } else { high = mid }
        }
        var index = low - 1
        while index >= 0, maxEnd[index] > address {
            let sequence = sequences[index]
            if address < sequence.end, let row = row(in: index, for: address) {
                let unit = units[sequence.unit]
                return SourceLocation(file: path(ofFile: row.file, in: unit), line: Int(row.line),
                                      column: Int(row.column))
            }
            index -= 1
        }
        return nil
    }

    private func row(in sequenceIndex: Int, for address: UInt64) -> Row? {
        let rows: [Row]
        if let cached = decodedRows[sequenceIndex] {
            rows = cached
        } else {
            let sequence = sequences[sequenceIndex]
            var collected: [Row] = []
            try? execute(units[sequence.unit], from: sequence.programOffset, singleSequence: true,
                         row: { collected.append($0) }, sequenceEnd: { _, _ in }, defineFile: nil)
            decodedRows[sequenceIndex] = collected
            rows = collected
        }
        // The last row at or before the address: with several rows at one address, the last
        // one describes the instruction (as binutils and LLVM choose).
        var low = 0, high = rows.count
        while low < high {
            let mid = (low + high) / 2
            if rows[mid].address <= address { low = mid + 1 } else { high = mid }
        }
        return low > 0 ? rows[low - 1] : nil
    }

    // MARK: Indexing

    private func indexUnits() {
        let bytes = lines.bytes
        var offset = 0
        while offset < bytes.count {
            let unitOffset = offset
            var c = ByteCursor(bytes, offset: offset)
            guard var length = try? UInt64(c.u32()) else { break }
            var offsetSize = 4
            if length == 0xffff_ffff {
                guard let length64 = try? c.u64() else { break }
                length = length64
                offsetSize = 8
            } else if length >= 0xffff_fff0 {
                break
            }
            let unitStart = c.offset
            let unitEnd = length > UInt64(bytes.count - unitStart) ? bytes.count : unitStart + Int(length)
            offset = unitEnd
            guard var unit = try? readHeader(&c, unitEnd: unitEnd, offsetSize: offsetSize) else { continue }
            unit.offset = unitOffset
            let unitIndex = units.count
            units.append(unit)
            var lowest = UInt64.max
            try? execute(unit, from: c.offset, singleSequence: false,
                         row: { lowest = min(lowest, $0.address) },
                         sequenceEnd: { programOffset, end in
                             if lowest < end {
                                 self.sequences.append(Sequence(start: lowest, end: end, unit: unitIndex,
                                                                programOffset: programOffset))
                             }
                             lowest = UInt64.max
                         },
                         defineFile: { self.units[unitIndex].files.append($0) })
        }
        sequences.sort { $0.start < $1.start }
        maxEnd.reserveCapacity(sequences.count)
        var largest: UInt64 = 0
        for sequence in sequences {
            largest = max(largest, sequence.end)
            maxEnd.append(largest)
        }
    }

    /// Reads a unit header after its length; leaves `c` at the first opcode.
    private func readHeader(_ c: inout ByteCursor, unitEnd: Int, offsetSize: Int) throws -> UnitHeader {
        c.limit = unitEnd
        let version = try c.u16()
        guard (2...5).contains(version) else { throw MalformedData() }
        if version >= 5 {
            _ = try c.u8()  // address_size
            _ = try c.u8()  // segment_selector_size
        }
        let headerLength = try c.offset(size: offsetSize)
        guard headerLength <= UInt64(unitEnd - c.offset) else { throw MalformedData() }
        let programStart = c.offset + Int(headerLength)
        let minInstructionLength = try c.u8()
        let maxOps = version >= 4 ? try c.u8() : 1
        _ = try c.u8()  // default_is_stmt: rows are not filtered by is_stmt
        let lineBase = try c.i8()
        let lineRange = try c.u8()
        let opcodeBase = try c.u8()
        guard lineRange != 0, opcodeBase != 0 else { throw MalformedData() }
        var standardOpcodeLengths: [UInt8] = []
        for _ in 1..<opcodeBase { standardOpcodeLengths.append(try c.u8()) }

        var directories: [StringRef] = []
        var files: [FileEntry] = []
        if version >= 5 {
            directories = try readEntries(&c, offsetSize: offsetSize).map(\.path)
            files = try readEntries(&c, offsetSize: offsetSize)
        } else {
            while try c.u8() != 0 {
                c.offset -= 1
                directories.append(StringRef(section: .debugLine, offset: UInt64(try c.skipCString())))
            }
            while try c.u8() != 0 {
                c.offset -= 1
                files.append(try readFileEntryV4(&c))
            }
        }
        c.offset = programStart
        return UnitHeader(version: version, minInstructionLength: minInstructionLength,
                          maxOpsPerInstruction: max(maxOps, 1), lineBase: lineBase,
                          lineRange: lineRange, opcodeBase: opcodeBase,
                          standardOpcodeLengths: standardOpcodeLengths, directories: directories, files: files,
                          programEnd: unitEnd)
    }

    /// A DWARF 2-4 file entry (also the operand of DW_LNE_define_file).
    private func readFileEntryV4(_ c: inout ByteCursor) throws -> FileEntry {
        let name = try c.skipCString()
        let directory = try c.uleb()
        _ = try c.uleb()  // modification time
        _ = try c.uleb()  // length
        return FileEntry(path: StringRef(section: .debugLine, offset: UInt64(name)), directory: directory)
    }

    /// A DWARF 5 directory or file name table: entry formats, then entries.
    private func readEntries(_ c: inout ByteCursor, offsetSize: Int) throws -> [FileEntry] {
        let formatCount = try c.u8()
        var formats: [(content: UInt64, form: UInt64)] = []
        for _ in 0..<formatCount { formats.append((try c.uleb(), try c.uleb())) }
        let count = try c.uleb()
        // Every entry takes at least one byte, so a larger count is corrupt.
        guard count == 0 || (!formats.isEmpty && count <= UInt64(c.limit - c.offset)) else {
            throw MalformedData()
        }
        var entries: [FileEntry] = []
        entries.reserveCapacity(Int(count))
        for _ in 0..<count {
            var entry = FileEntry(path: StringRef(section: .debugLine, offset: UInt64.max), directory: 0)
            for (content, form) in formats {
                let value = try readForm(&c, form: form, offsetSize: offsetSize)
                switch (content, value) {
                case (1, .string(let ref)): entry.path = ref  // DW_LNCT_path
                case (2, .number(let index)): entry.directory = index  // DW_LNCT_directory_index
                default: break
                }
            }
            entries.append(entry)
        }
        return entries
    }

    private enum FormValue {
        case string(StringRef)
        case number(UInt64)
        case other
    }

    private func readForm(_ c: inout ByteCursor, form: UInt64, offsetSize: Int) throws -> FormValue {
        switch form {
        case 0x08: return .string(StringRef(section: .debugLine, offset: UInt64(try c.skipCString())))  // string
        case 0x1f: return .string(StringRef(section: .debugLineStr, offset: try c.offset(size: offsetSize)))  // line_strp
        case 0x0e: return .string(StringRef(section: .debugStr, offset: try c.offset(size: offsetSize)))  // strp
        case 0x0f: return .number(try c.uleb())  // udata
        case 0x0d: return .number(UInt64(bitPattern: try c.sleb()))  // sdata
        case 0x0b: return .number(UInt64(try c.u8()))  // data1
        case 0x05: return .number(UInt64(try c.u16()))  // data2
        case 0x06: return .number(UInt64(try c.u32()))  // data4
        case 0x07: return .number(try c.u64())  // data8
        case 0x17: return .number(try c.offset(size: offsetSize))  // sec_offset
        case 0x1e: try c.skip(16)  // data16 (MD5)
        case 0x09: try c.skip(try c.uleb())  // block
        case 0x0a: try c.skip(Int(try c.u8()))  // block1
        case 0x03: try c.skip(Int(try c.u16()))  // block2
        case 0x04: try c.skip(Int(try c.u32()))  // block4
        default: throw MalformedData()  // strx and others need .debug_info context
        }
        return .other
    }

    // MARK: The line-number state machine

    /// Runs `unit`'s program from `offset`: `row` gets each row, `sequenceEnd` the program
    /// offset where each sequence began and its end address; `defineFile` gets files that
    /// DW_LNE_define_file adds. Stops at the end of the unit, or of the first sequence.
    private func execute(_ unit: UnitHeader, from offset: Int, singleSequence: Bool, row: (Row) -> Void,
                         sequenceEnd: (Int, UInt64) -> Void, defineFile: ((FileEntry) -> Void)?) throws {
        var c = ByteCursor(lines.bytes, offset: offset, limit: unit.programEnd)
        var address: UInt64 = 0
        var opIndex: UInt64 = 0
        var file: UInt64 = 1
        var line: Int64 = 1
        var column: UInt64 = 0
        var sequenceStart = offset
        let maxOps = UInt64(unit.maxOpsPerInstruction)
        let minLength = UInt64(unit.minInstructionLength)

        func advance(_ operationAdvance: UInt64) {
            if maxOps == 1 {
                address = address &+ minLength &* operationAdvance
            } else {
                let total = opIndex &+ operationAdvance
                address = address &+ minLength &* (total / maxOps)
                opIndex = total % maxOps
            }
        }
        func emit() {
            let clampedLine = line >= 0 && line <= Int64(UInt32.max) ? UInt32(line) : 0
            row(Row(address: address, file: UInt32(truncatingIfNeeded: file), line: clampedLine,
                    column: UInt32(truncatingIfNeeded: column)))
        }

        while !c.isAtEnd {
            let opcode = try c.u8()
            if opcode >= unit.opcodeBase {
                let adjusted = opcode - unit.opcodeBase
                advance(UInt64(adjusted / unit.lineRange))
                line = line &+ Int64(unit.lineBase) &+ Int64(adjusted % unit.lineRange)
                emit()
                continue
            }
            switch opcode {
            case 0:  // extended
                let length = try c.uleb()
                let start = c.offset
                guard length > 0 else { continue }
                guard length <= UInt64(c.limit - start) else { throw MalformedData() }
                let end = start + Int(length)
                switch try c.u8() {
                case 1:  // DW_LNE_end_sequence
                    emit()
                    sequenceEnd(sequenceStart, address)
                    if singleSequence { return }
                    address = 0
                    opIndex = 0
                    file = 1
                    line = 1
                    column = 0
                    sequenceStart = end
                case 2:  // DW_LNE_set_address
                    switch length - 1 {
                    case 8: address = try c.u64()
                    case 4: address = UInt64(try c.u32())
                    default: break
                    }
                    opIndex = 0
                case 3:  // DW_LNE_define_file
                    let entry = try readFileEntryV4(&c)
                    defineFile?(entry)
                default:
                    break
                }
                c.offset = end
            case 1:  // DW_LNS_copy
                emit()
            case 2:  // DW_LNS_advance_pc
                advance(try c.uleb())
            case 3:  // DW_LNS_advance_line
                line = line &+ (try c.sleb())
            case 4:  // DW_LNS_set_file
                file = try c.uleb()
            case 5:  // DW_LNS_set_column
                column = try c.uleb()
            case 8:  // DW_LNS_const_add_pc
                advance(UInt64((255 - unit.opcodeBase) / unit.lineRange))
            case 9:  // DW_LNS_fixed_advance_pc
                address = address &+ UInt64(try c.u16())
                opIndex = 0
            case 6, 7, 10, 11:  // negate_stmt, basic_block, prologue_end, epilogue_begin
                break
            default:  // set_isa and unknown standard opcodes: skip their ULEB operands
                let index = Int(opcode) - 1
                let operands = index < unit.standardOpcodeLengths.count ? unit.standardOpcodeLengths[index] : 0
                for _ in 0..<operands { _ = try c.uleb() }
            }
        }
    }

    // MARK: File names

    /// The path of file `index` (numbered as DW_AT_call_file and DW_AT_decl_file number
    /// files) of the line-program unit at `offset` in `.debug_line` (a compile unit's
    /// DW_AT_stmt_list); nil when no unit starts there or it has no such file.
    func path(ofFile index: UInt64, inUnitAt offset: UInt64) -> String? {
        guard index <= UInt64(UInt32.max), let target = Int(exactly: offset) else { return nil }
        var low = 0, high = units.count
        while low < high {
            let mid = (low + high) / 2
            if units[mid].offset < target { low = mid + 1 } else { high = mid }
        }
        guard low < units.count, units[low].offset == target else { return nil }
        return path(ofFile: UInt32(index), in: units[low])
    }

    private func string(_ ref: StringRef) -> String? {
        switch ref.section {
        case .debugLine: return lines.bytes.cString(at: ref.offset)
        case .debugLineStr: return lineStrings?.bytes.cString(at: ref.offset)
        case .debugStr: return strings?.bytes.cString(at: ref.offset)
        }
    }

    /// The path of file `index` of `unit`, joined with its directory when relative. DWARF 5
    /// counts files from 0; earlier versions from 1, and their directory 0 is the unit's
    /// compilation directory, which only `.debug_info` knows (such paths stay relative).
    private func path(ofFile index: UInt32, in unit: UnitHeader) -> String? {
        let fileIndex = unit.version >= 5 ? Int(index) : Int(index) - 1
        guard fileIndex >= 0, fileIndex < unit.files.count,
              let name = string(unit.files[fileIndex].path), !name.isEmpty else { return nil }
        if name.hasPrefix("/") { return name }
        var parts: [String] = []
        let directory = unit.files[fileIndex].directory
        if unit.version >= 5 {
            if directory < UInt64(unit.directories.count), let dir = string(unit.directories[Int(directory)]) {
                if directory != 0, !dir.hasPrefix("/"), let compDir = unit.directories.first.flatMap(string) {
                    parts.append(compDir)
                }
                parts.append(dir)
            }
        } else if directory > 0, directory <= UInt64(unit.directories.count),
                  let dir = string(unit.directories[Int(directory) - 1]) {
            parts.append(dir)
        }
        parts.append(name)
        return parts.filter { !$0.isEmpty }.reduce("") { path, part in
            path.isEmpty || path.hasSuffix("/") ? path + part : path + "/" + part
        }
    }
}
