// DWARF inlined-subroutine chains from `.debug_info` (versions 2 to 5, 32- and 64-bit DWARF).
//
// An address of optimized code can lie in several functions at once: the out-of-line
// function (a DW_TAG_subprogram) and the functions inlined into it, nested in the DIE tree
// as DW_TAG_inlined_subroutine. Each inlined level records where it was called from in its
// caller (DW_AT_call_file, _line, _column). This file expands an address to that chain,
// innermost first, as `llvm-symbolizer --inlining` prints it.
//
// Cost is kept to what a report needs. The first lookup reads only each unit's header and
// root DIE, and keeps the unit's address ranges. A lookup in a unit walks the unit's DIE
// tree once, keeping only the address ranges of its out-of-line functions (not of the
// inlined code inside them); later lookups in the unit go straight to the function that
// holds the address and walk just its subtree.
// Every read is bounds-checked; damaged data gives fewer frames or none, never a trap.

/// One level of the inline chain at an address, as `llvm-symbolizer --inlining` prints it.
struct InlineFrame: Equatable {
    /// The function's DW_AT_linkage_name (or DW_AT_MIPS_linkage_name) as stored, so a
    /// mangled name; its DW_AT_name when it has none; nil when DWARF names no function.
    var name: String?
    /// For the innermost level, the source file of the address itself (from the line
    /// table); for every other level, the file of the call into the next inner level.
    var file: String?
    /// The line that goes with `file`; 0 when unknown.
    var line: Int
    /// The column that goes with `file`; 0 when unknown.
    var column: Int
    /// Whether this level was inlined into the next outer one (a DW_TAG_inlined_subroutine).
    /// False for the outermost level, the out-of-line function.
    var isInlined: Bool
}

/// The inlined-subroutine information of one ELF file, read on demand. Not thread-safe.
///
/// ```swift
/// let inline = DWARFInlineInfo(image: image, lineTable: lineTable)
/// for frame in inline.frames(for: vaddr) ?? [] { print(frame.name ?? "??", frame.line) }
/// ```
final class DWARFInlineInfo {
    // MARK: DWARF constants

    /// The DW_TAG values used here.
    private enum Tag {
        static let compileUnit: UInt64 = 0x11
        static let partialUnit: UInt64 = 0x3c
        static let skeletonUnit: UInt64 = 0x4a
        static let subprogram: UInt64 = 0x2e
        static let inlinedSubroutine: UInt64 = 0x1d
    }

    /// The DW_AT values used here.
    private enum Attribute {
        static let name: UInt64 = 0x03
        static let stmtList: UInt64 = 0x10
        static let lowPC: UInt64 = 0x11
        static let highPC: UInt64 = 0x12
        static let compDir: UInt64 = 0x1b
        static let abstractOrigin: UInt64 = 0x31
        static let specification: UInt64 = 0x47
        static let ranges: UInt64 = 0x55
        static let callColumn: UInt64 = 0x57
        static let callFile: UInt64 = 0x58
        static let callLine: UInt64 = 0x59
        static let linkageName: UInt64 = 0x6e
        static let strOffsetsBase: UInt64 = 0x72
        static let addrBase: UInt64 = 0x73
        static let rnglistsBase: UInt64 = 0x74
        static let mipsLinkageName: UInt64 = 0x2007
        static let gnuAddrBase: UInt64 = 0x2133
    }

    /// DW_UT values of the unit types whose root DIE can describe code.
    private enum UnitType {
        static let compile: UInt8 = 0x01
        static let type: UInt8 = 0x02
        static let partial: UInt8 = 0x03
        static let skeleton: UInt8 = 0x04
        static let splitCompile: UInt8 = 0x05
        static let splitType: UInt8 = 0x06
    }

    // MARK: Limits against damaged input

    /// Deepest DIE nesting walked; deeper trees are treated as damaged.
    private static let maxDepth = 256
    /// DIEs visited through DW_AT_abstract_origin / DW_AT_specification for one name.
    private static let maxReferenceHops = 16
    /// Entries read from a unit's range list (a unit of LTO'd code can have very many).
    private static let maxUnitRangeEntries = 1 << 18
    /// Entries read from a function's range list (hot/cold splitting makes a few).
    private static let maxFunctionRangeEntries = 1 << 12
    /// Units whose outermost-function index is kept at once.
    private static let maxCachedUnits = 8
    /// Decoded abbreviation tables kept at once.
    private static let maxCachedAbbrevTables = 16

    // MARK: Decoded data

    /// An attribute value, undecoded as far as it can be without knowing its use.
    private enum Value {
        /// data1-8, udata, flag, sec_offset.
        case constant(UInt64)
        /// sdata, implicit_const.
        case signedConstant(Int64)
        /// addr.
        case address(UInt64)
        /// addrx, addrx1-4, GNU_addr_index: an index into `.debug_addr` from the unit's base.
        case addressIndex(UInt64)
        /// strp: an offset into `.debug_str`.
        case stringOffset(UInt64)
        /// line_strp: an offset into `.debug_line_str`.
        case lineStringOffset(UInt64)
        /// string: the offset in `.debug_info` of a string stored in place.
        case inlineString(UInt64)
        /// strx, strx1-4, GNU_str_index: an index into `.debug_str_offsets` from the unit's base.
        case stringIndex(UInt64)
        /// ref1-8, ref_udata, ref_addr: an offset in `.debug_info` from its start.
        case reference(UInt64)
        /// rnglistx: an index into the unit's `.debug_rnglists` offset table.
        case rangeListIndex(UInt64)
        /// Blocks, expressions, signatures and references into other files: not used here.
        case other

        /// The value as an unsigned number, for constants.
        var number: UInt64? {
            switch self {
            case .constant(let value): return value
            case .signedConstant(let value): return value >= 0 ? UInt64(value) : nil
            default: return nil
            }
        }
    }

    /// One unit of `.debug_info`, with what its root DIE says for all of its DIEs.
    private struct Unit {
        /// Offset of the unit header (its length field) in `.debug_info`.
        var offset: Int
        /// End of the unit (exclusive).
        var end: Int
        /// Offset of the root DIE.
        var firstDIE: Int
        var version: UInt16
        var unitType: UInt8
        /// 4 for 32-bit DWARF, 8 for 64-bit DWARF.
        var offsetSize: Int
        var addressSize: Int
        var abbrevOffset: UInt64
        var strOffsetsBase: UInt64 = 0
        var addrBase: UInt64 = 0
        var rnglistsBase: UInt64 = 0
        /// The root DIE's DW_AT_low_pc: the base address of range lists.
        var baseAddress: UInt64 = 0
        /// The root DIE's DW_AT_stmt_list: its line-program unit in `.debug_line`.
        var stmtList: UInt64?
        var compDir: Value?
    }

    /// The attributes of one DIE that this file uses.
    private struct DIE {
        var offset: Int
        var tag: UInt64
        /// Index of its unit in `units`.
        var unit: Int
        var name: Value?
        var linkageName: Value?
        var mipsLinkageName: Value?
        var abstractOrigin: UInt64?
        var specification: UInt64?
        var lowPC: Value?
        var highPC: Value?
        var ranges: Value?
        var callFile: UInt64?
        var callLine: UInt64?
        var callColumn: UInt64?
        var stmtList: UInt64?
        var compDir: Value?
        var strOffsetsBase: UInt64?
        var addrBase: UInt64?
        var rnglistsBase: UInt64?
    }

    /// An attribute of an abbreviation: its name, its form and, for implicit_const, its value.
    private struct AttributeSpec {
        var attribute: UInt64
        var form: UInt64
        var implicitConst: Int64
    }

    /// One abbreviation declaration.
    private struct Abbreviation {
        var code: UInt64
        var tag: UInt64
        var hasChildren: Bool
        /// Its attributes in `AbbreviationTable.specs`.
        var specs: Range<Int>
        /// The bytes its attributes take when all their forms have a fixed size, else -1.
        var fixedSize: Int

        /// Whether DIEs of this abbreviation can be a level of an inline chain.
        var isSubroutine: Bool { tag == Tag.subprogram || tag == Tag.inlinedSubroutine }
    }

    /// The abbreviations of one table, for units of one format.
    private final class AbbreviationTable {
        var abbreviations: [Abbreviation] = []
        var specs: [AttributeSpec] = []
        /// Code → index, for tables whose codes are not 1, 2, 3, … in order.
        var sparse: [UInt64: Int] = [:]

        /// The abbreviation with `code`, if the table has it.
        func abbreviation(_ code: UInt64) -> Abbreviation? {
            if code >= 1, code <= UInt64(abbreviations.count), abbreviations[Int(code - 1)].code == code {
                return abbreviations[Int(code - 1)]
            }
            return sparse[code].map { abbreviations[$0] }
        }
    }

    /// What decides the fixed sizes of forms: a table is decoded once per format.
    private struct AbbreviationKey: Hashable {
        var offset: UInt64
        var addressSize: Int
        var offsetSize: Int
        var refAddrSize: Int
    }

    /// Address ranges that map to values, sorted for lookup.
    private struct RangeIndex {
        private var starts: [UInt64] = []
        private var ends: [UInt64] = []
        private var values: [Int] = []
        /// `maxEnd[i]` is the largest end among the first i + 1 ranges: it bounds the
        /// backward search when ranges overlap.
        private var maxEnd: [UInt64] = []

        /// Sorts `ranges` (start, end, value) by start.
        init(_ ranges: [(start: UInt64, end: UInt64, value: Int)]) {
            let sorted = ranges.sorted { $0.start != $1.start ? $0.start < $1.start : $0.value < $1.value }
            starts = sorted.map(\.start)
            ends = sorted.map(\.end)
            values = sorted.map(\.value)
            var largest: UInt64 = 0
            maxEnd = ends.map { end in
                largest = max(largest, end)
                return largest
            }
        }

        /// Whether no range was added.
        var isEmpty: Bool { starts.isEmpty }

        /// The values of all ranges that contain `address`.
        func values(containing address: UInt64) -> [Int] {
            var low = 0, high = starts.count
            while low < high {
                let mid = (low + high) / 2
                if starts[mid] <= address { low = mid + 1 } else { high = mid }
            }
            var found: [Int] = []
            var index = low - 1
            while index >= 0, maxEnd[index] > address {
                if address < ends[index] { found.append(values[index]) }
                index -= 1
            }
            return found
        }
    }

    // MARK: State

    private let info: SectionBytes?
    private let abbrev: SectionBytes?
    private let strings: SectionBytes?
    private let lineStrings: SectionBytes?
    private let stringOffsets: SectionBytes?
    private let addresses: SectionBytes?
    private let ranges: SectionBytes?
    private let rangeLists: SectionBytes?
    private let lineTable: DWARFLineTable?

    private var indexed = false
    /// All units that parsed, in section order.
    private var units: [Unit] = []
    /// The address ranges of compile, partial and skeleton units → unit index.
    private var unitRanges = RangeIndex([])
    /// Per unit: the ranges of its out-of-line functions → their DIE offsets.
    private var functionRanges: [Int: RangeIndex] = [:]
    /// Units in `functionRanges`, oldest first.
    private var functionRangesOrder: [Int] = []
    private var abbreviationTables: [AbbreviationKey: AbbreviationTable] = [:]

    /// Reads inline information from the given sections of one ELF file (nil when the file
    /// lacks them); `lineTable` is the same file's line table, which gives the innermost
    /// level's position and the names of call files. Nothing is parsed until the first lookup.
    init(info: SectionBytes?, abbrev: SectionBytes?, strings: SectionBytes?, lineStrings: SectionBytes?,
         stringOffsets: SectionBytes?, addresses: SectionBytes?, ranges: SectionBytes?,
         rangeLists: SectionBytes?, lineTable: DWARFLineTable?) {
        self.info = info
        self.abbrev = abbrev
        self.strings = strings
        self.lineStrings = lineStrings
        self.stringOffsets = stringOffsets
        self.addresses = addresses
        self.ranges = ranges
        self.rangeLists = rangeLists
        self.lineTable = lineTable
    }

    /// Reads inline information from the debug sections of `image`; `lineTable` is its line table.
    convenience init(image: ELFImage, lineTable: DWARFLineTable?) {
        self.init(info: image.sectionBytes(named: ".debug_info"),
                  abbrev: image.sectionBytes(named: ".debug_abbrev"),
                  strings: image.sectionBytes(named: ".debug_str"),
                  lineStrings: image.sectionBytes(named: ".debug_line_str"),
                  stringOffsets: image.sectionBytes(named: ".debug_str_offsets"),
                  addresses: image.sectionBytes(named: ".debug_addr"),
                  ranges: image.sectionBytes(named: ".debug_ranges"),
                  rangeLists: image.sectionBytes(named: ".debug_rnglists"),
                  lineTable: lineTable)
    }

    // MARK: Lookup

    /// The inline chain at `address` (an ELF virtual address), innermost level first and
    /// the out-of-line function last; nil when no compile unit covers the address.
    ///
    /// The innermost level's file, line and column are filled here from the line table
    /// given at init (as `DWARFLineTable.location(for:)` finds them); each outer level's
    /// are the call site of the level inside it. Relative paths are joined to the unit's
    /// DW_AT_comp_dir. When the unit covers the address but no function DIE does, the
    /// result is one unnamed level with the line table's position.
    func frames(for address: UInt64) -> [InlineFrame]? {
        if !indexed {
            indexed = true
            indexUnits()
        }
        // Of several units claiming the address, the first in the section wins (as LLVM's).
        guard let unitIndex = unitRanges.values(containing: address).min() else { return nil }
        let unit = units[unitIndex]
        let compDir = unit.compDir.flatMap { string($0, in: unit) }
        let location = lineTable?.location(for: address)
        var innermost = InlineFrame(name: nil, file: location?.file.map { join(compDir, $0) },
                                    line: location?.line ?? 0, column: location?.column ?? 0, isInlined: false)
        let chain = inlineChain(in: unitIndex, at: address)
        guard !chain.isEmpty else { return [innermost] }

        var frames: [InlineFrame] = []
        frames.reserveCapacity(chain.count)
        for (level, die) in chain.enumerated() {
            let isInlined = die.tag == Tag.inlinedSubroutine
            if level == 0 {
                innermost.name = name(of: die)
                innermost.isInlined = isInlined
                frames.append(innermost)
                continue
            }
            let callee = chain[level - 1]
            var file: String?
            if let index = callee.callFile, let stmtList = unit.stmtList {
                file = lineTable?.path(ofFile: index, inUnitAt: stmtList).map { join(compDir, $0) }
            }
            frames.append(InlineFrame(name: name(of: die), file: file,
                                      line: Self.clamped(callee.callLine), column: Self.clamped(callee.callColumn),
                                      isInlined: isInlined))
        }
        // The chain ends with the first function that was not inlined; in damaged (or
        // unusual) DWARF whose outermost level is an inlined subroutine with no function
        // around it, that level stands for the out-of-line code.
        if let outOfLine = frames.firstIndex(where: { !$0.isInlined }) { frames.removeSubrange((outOfLine + 1)...) }
        frames[frames.count - 1].isInlined = false
        return frames
    }

    /// A line or column number as an `Int`: 0 when missing or absurd.
    private static func clamped(_ value: UInt64?) -> Int {
        guard let value, value <= UInt64(Int32.max) else { return 0 }
        return Int(value)
    }

    /// `path` joined to `directory` when relative.
    private func join(_ directory: String?, _ path: String) -> String {
        guard let directory, !directory.isEmpty, !path.hasPrefix("/") else { return path }
        return directory.hasSuffix("/") ? directory + path : directory + "/" + path
    }

    /// The subroutine DIEs containing `address` in unit `unitIndex`, innermost first, up to
    /// and including the first DW_TAG_subprogram; empty when none contains it.
    private func inlineChain(in unitIndex: Int, at address: UInt64) -> [DIE] {
        guard let functions = functionIndex(of: unitIndex),
              let table = abbreviationTable(for: units[unitIndex]) else { return [] }
        // Of overlapping functions the last in the tree wins, as in LLVM's address map.
        guard let top = functions.values(containing: address).max() else { return [] }
        let path = deepestSubroutines(from: top, in: unitIndex, table: table, containing: address)
        var chain: [DIE] = []
        for die in path.reversed() {
            chain.append(die)
            if die.tag == Tag.subprogram { break }
        }
        return chain
    }

    /// Walks the subtree of the DIE at `start`; returns the subroutine DIEs on the path to
    /// the last DIE (in tree order) that contains `address`, outermost first.
    private func deepestSubroutines(from start: Int, in unitIndex: Int, table: AbbreviationTable,
                                    containing address: UInt64) -> [DIE] {
        guard let info else { return [] }
        let unit = units[unitIndex]
        var c = ByteCursor(info.bytes, offset: start, limit: unit.end)
        // One entry per open DIE with children: the DIE when it is a subroutine.
        var open: [DIE?] = []
        var best: [DIE] = []
        do {
            repeat {
                let offset = c.offset
                let code = try c.uleb()
                if code == 0 {
                    guard !open.isEmpty else { break }
                    open.removeLast()
                    continue
                }
                guard let abbreviation = table.abbreviation(code) else { break }
                var subroutine: DIE?
                if abbreviation.isSubroutine {
                    let die = try readDIE(&c, at: offset, abbreviation, table: table, unitIndex: unitIndex)
                    if contains(die, address) { best = open.compactMap { $0 } + [die] }
                    subroutine = die
                } else {
                    try skipAttributes(&c, abbreviation, table: table, unit: unit)
                }
                if abbreviation.hasChildren {
                    guard open.count < Self.maxDepth else { break }
                    open.append(subroutine)
                }
            } while !open.isEmpty
        } catch {
            // Damaged data: keep what was found before it.
        }
        return best
    }

    /// Whether one of `die`'s address ranges contains `address`.
    private func contains(_ die: DIE, _ address: UInt64) -> Bool {
        var found = false
        forEachRange(of: die, in: units[die.unit]) { low, high in
            if low <= address && address < high { found = true }
            return !found
        }
        return found
    }

    // MARK: Names

    /// The name of a function DIE as llvm-symbolizer chooses it: a linkage name from the
    /// DIE or a DIE it refers to by DW_AT_abstract_origin or DW_AT_specification, else a
    /// DW_AT_name found the same way.
    private func name(of die: DIE) -> String? {
        var visited: [DIE] = []
        var pending = [die]
        var seen: Set<Int> = [die.offset]
        while let next = pending.popLast(), visited.count < Self.maxReferenceHops {
            visited.append(next)
            for reference in [next.abstractOrigin, next.specification] {
                guard let reference, let offset = Int(exactly: reference), seen.insert(offset).inserted,
                      let target = readDIE(atSectionOffset: offset) else { continue }
                pending.append(target)
            }
        }
        for candidate in visited {
            let unit = units[candidate.unit]
            for value in [candidate.linkageName, candidate.mipsLinkageName] {
                if let value, let name = string(value, in: unit), !name.isEmpty { return name }
            }
        }
        for candidate in visited {
            if let value = candidate.name, let name = string(value, in: units[candidate.unit]), !name.isEmpty {
                return name
            }
        }
        return nil
    }

    /// The DIE at `offset` in `.debug_info`, in whichever unit holds it.
    private func readDIE(atSectionOffset offset: Int) -> DIE? {
        guard let info else { return nil }
        var low = 0, high = units.count
        while low < high {
            let mid = (low + high) / 2
            if units[mid].offset <= offset { low = mid + 1 } else { high = mid }
        }
        guard low > 0 else { return nil }
        let unitIndex = low - 1
        let unit = units[unitIndex]
        guard offset >= unit.firstDIE, offset < unit.end, let table = abbreviationTable(for: unit) else { return nil }
        var c = ByteCursor(info.bytes, offset: offset, limit: unit.end)
        guard let code = try? c.uleb(), let abbreviation = table.abbreviation(code) else { return nil }
        return try? readDIE(&c, at: offset, abbreviation, table: table, unitIndex: unitIndex)
    }

    /// A string attribute's text.
    private func string(_ value: Value, in unit: Unit) -> String? {
        switch value {
        case .stringOffset(let offset):
            return strings?.bytes.cString(at: offset)
        case .lineStringOffset(let offset):
            return lineStrings?.bytes.cString(at: offset)
        case .inlineString(let offset):
            return info?.bytes.cString(at: offset)
        case .stringIndex(let index):
            guard let offsets = stringOffsets,
                  let entry = Self.tableEntry(offsets, base: unit.strOffsetsBase, index: index, size: unit.offsetSize) else {
                return nil
            }
            return strings?.bytes.cString(at: entry)
        default:
            return nil
        }
    }

    /// Entry `index` of a table of `size`-byte little-endian values at `base` in `section`.
    private static func tableEntry(_ section: SectionBytes, base: UInt64, index: UInt64, size: Int) -> UInt64? {
        let (scaled, overflow) = index.multipliedReportingOverflow(by: UInt64(size))
        let (position, overflow2) = base.addingReportingOverflow(scaled)
        guard !overflow, !overflow2, let entry = section.bytes.slice(offset: position, size: UInt64(size)) else {
            return nil
        }
        var c = ByteCursor(entry)
        return try? c.sized(size)
    }

    // MARK: Address ranges

    /// An address attribute's value: direct, or read from `.debug_addr`.
    private func address(_ value: Value, in unit: Unit) -> UInt64? {
        switch value {
        case .address(let address): return address
        case .addressIndex(let index):
            guard let addresses else { return nil }
            return Self.tableEntry(addresses, base: unit.addrBase, index: index, size: unit.addressSize)
        default: return nil
        }
    }

    /// Calls `body` with each non-empty address range [low, high) of `die`, from
    /// DW_AT_low_pc/DW_AT_high_pc or else DW_AT_ranges, until `body` returns false. A
    /// range list is read up to `limit` entries (more for root DIEs than for functions).
    private func forEachRange(of die: DIE, in unit: Unit, _ body: (UInt64, UInt64) -> Bool) {
        let limit = die.offset == unit.firstDIE ? Self.maxUnitRangeEntries : Self.maxFunctionRangeEntries
        let tombstone = unit.addressSize == 4 ? UInt64(UInt32.max) : UInt64.max
        if let lowValue = die.lowPC, let highValue = die.highPC, let low = address(lowValue, in: unit) {
            guard low != tombstone else { return }
            var high: UInt64?
            switch highValue {
            case .address, .addressIndex: high = address(highValue, in: unit)
            default: high = highValue.number.map { low &+ $0 }
            }
            if let high, low < high { _ = body(low, high) }
            return
        }
        guard let rangesValue = die.ranges else { return }
        if unit.version >= 5 {
            guard let rangeLists else { return }
            var offset: UInt64
            switch rangesValue {
            case .rangeListIndex(let index):
                guard let entry = Self.tableEntry(rangeLists, base: unit.rnglistsBase, index: index,
                                                  size: unit.offsetSize) else { return }
                let (sum, overflow) = unit.rnglistsBase.addingReportingOverflow(entry)
                guard !overflow else { return }
                offset = sum
            default:
                guard let number = rangesValue.number else { return }
                offset = number
            }
            try? readRangeList(rangeLists, at: offset, unit: unit, tombstone: tombstone, limit: limit, body)
        } else {
            guard let ranges, let offset = rangesValue.number else { return }
            try? readRanges(ranges, at: offset, unit: unit, tombstone: tombstone, limit: limit, body)
        }
    }

    /// A DWARF 2-4 `.debug_ranges` list: address pairs, base address selections, (0, 0).
    private func readRanges(_ section: SectionBytes, at offset: UInt64, unit: Unit, tombstone: UInt64, limit: Int,
                            _ body: (UInt64, UInt64) -> Bool) throws {
        guard let start = Int(exactly: offset) else { return }
        var c = ByteCursor(section.bytes, offset: start)
        var base = unit.baseAddress
        for _ in 0..<limit {
            let begin = try c.sized(unit.addressSize)
            let end = try c.sized(unit.addressSize)
            if begin == 0 && end == 0 { return }
            if begin == tombstone {
                base = end
                continue
            }
            let low = base &+ begin, high = base &+ end
            if low < high, !body(low, high) { return }
        }
    }

    /// A DWARF 5 `.debug_rnglists` list (DW_RLE_* entries up to DW_RLE_end_of_list).
    private func readRangeList(_ section: SectionBytes, at offset: UInt64, unit: Unit, tombstone: UInt64, limit: Int,
                               _ body: (UInt64, UInt64) -> Bool) throws {
        guard let start = Int(exactly: offset) else { return }
        var c = ByteCursor(section.bytes, offset: start)
        var base = unit.baseAddress
        /// Entry `index` of the unit's `.debug_addr` table.
        func indexed(_ index: UInt64) throws -> UInt64 {
            guard let value = address(.addressIndex(index), in: unit) else { throw MalformedData() }
            return value
        }
        for _ in 0..<limit {
            let low: UInt64, high: UInt64
            switch try c.u8() {
            case 0x00:  // DW_RLE_end_of_list
                return
            case 0x01:  // DW_RLE_base_addressx
                base = try indexed(try c.uleb())
                continue
            case 0x02:  // DW_RLE_startx_endx
                low = try indexed(try c.uleb())
                high = try indexed(try c.uleb())
            case 0x03:  // DW_RLE_startx_length
                low = try indexed(try c.uleb())
                high = low &+ (try c.uleb())
            case 0x04:  // DW_RLE_offset_pair
                low = base &+ (try c.uleb())
                high = base &+ (try c.uleb())
            case 0x05:  // DW_RLE_base_address
                base = try c.sized(unit.addressSize)
                continue
            case 0x06:  // DW_RLE_start_end
                low = try c.sized(unit.addressSize)
                high = try c.sized(unit.addressSize)
            case 0x07:  // DW_RLE_start_length
                low = try c.sized(unit.addressSize)
                high = low &+ (try c.uleb())
            default:
                throw MalformedData()
            }
            if low != tombstone, low < high, !body(low, high) { return }
        }
    }

    // MARK: Indexing

    /// Reads every unit header and root DIE; keeps the units and the address ranges of
    /// those that can hold code.
    private func indexUnits() {
        guard let info else { return }
        let bytes = info.bytes
        var offset = 0
        var covered: [(start: UInt64, end: UInt64, value: Int)] = []
        while offset < bytes.count {
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
            let unitStart = offset
            let contentStart = c.offset
            let end = length > UInt64(bytes.count - contentStart) ? bytes.count : contentStart + Int(length)
            offset = end
            guard length > 0, var unit = readUnitHeader(&c, start: unitStart, end: end, offsetSize: offsetSize) else {
                continue
            }
            let unitIndex = units.count
            let root = readRootDIE(of: &unit, unitIndex: unitIndex)
            units.append(unit)
            guard let root, [Tag.compileUnit, Tag.partialUnit, Tag.skeletonUnit].contains(root.tag),
                  [UnitType.compile, UnitType.partial, UnitType.skeleton].contains(unit.unitType) else { continue }
            forEachRange(of: root, in: unit) { low, high in
                covered.append((low, high, unitIndex))
                return covered.count < Self.maxUnitRangeEntries * 4
            }
        }
        unitRanges = RangeIndex(covered)
    }

    /// Reads a unit header after its length field; nil for versions or sizes not handled.
    private func readUnitHeader(_ c: inout ByteCursor, start: Int, end: Int, offsetSize: Int) -> Unit? {
        c.limit = end
        guard let version = try? c.u16(), (2...5).contains(version) else { return nil }
        var unitType = UnitType.compile
        let abbrevOffset: UInt64
        let addressSize: UInt8
        do {
            if version >= 5 {
                unitType = try c.u8()
                addressSize = try c.u8()
                abbrevOffset = try c.offset(size: offsetSize)
                switch unitType {
                case UnitType.skeleton, UnitType.splitCompile: try c.skip(8)  // dwo_id
                case UnitType.type, UnitType.splitType: try c.skip(8 + offsetSize)  // signature, type_offset
                default: break
                }
            } else {
                abbrevOffset = try c.offset(size: offsetSize)
                addressSize = try c.u8()
            }
        } catch {
            return nil
        }
        guard addressSize == 4 || addressSize == 8, c.offset < end else { return nil }
        return Unit(offset: start, end: end, firstDIE: c.offset, version: version, unitType: unitType,
                    offsetSize: offsetSize, addressSize: Int(addressSize), abbrevOffset: abbrevOffset)
    }

    /// Reads the root DIE of `unit` and stores what it says for the whole unit (bases,
    /// base address, line program, compilation directory).
    private func readRootDIE(of unit: inout Unit, unitIndex: Int) -> DIE? {
        guard let info else { return nil }
        var c = ByteCursor(info.bytes, offset: unit.firstDIE, limit: unit.end)
        guard let code = try? c.uleb() else { return nil }
        // Root DIEs nearly always use the table's first declaration: decode only that one,
        // unless it is another.
        var table = decodeAbbreviations(for: unit, limitToFirst: true)
        if table?.abbreviation(code) == nil { table = abbreviationTable(for: unit) }
        guard let table, let abbreviation = table.abbreviation(code),
              let root = try? readDIE(&c, at: unit.firstDIE, abbreviation, table: table, unitIndex: unitIndex,
                                      unitOverride: unit) else { return nil }
        // DWARF 5 places the bases after each table's header when no attribute says so.
        let header: UInt64 = unit.offsetSize == 8 ? 16 : 8
        unit.strOffsetsBase = root.strOffsetsBase ?? (unit.version >= 5 ? header : 0)
        unit.addrBase = root.addrBase ?? (unit.version >= 5 ? header : 0)
        unit.rnglistsBase = root.rnglistsBase ?? (unit.version >= 5 ? header + 4 : 0)
        unit.stmtList = root.stmtList
        unit.compDir = root.compDir
        if let low = root.lowPC { unit.baseAddress = address(low, in: unit) ?? 0 }
        return root
    }

    /// The ranges of the functions of unit `unitIndex`, built on first use: every
    /// DW_TAG_subprogram (Swift nests closures' and local functions' DIEs inside their
    /// parent's, at addresses of their own), and DW_TAG_inlined_subroutine only outside
    /// any function with a range (inside one, they lie within its range).
    private func functionIndex(of unitIndex: Int) -> RangeIndex? {
        if let cached = functionRanges[unitIndex] { return cached }
        guard let info, let table = abbreviationTable(for: units[unitIndex]) else { return nil }
        let unit = units[unitIndex]
        var found: [(start: UInt64, end: UInt64, value: Int)] = []
        var c = ByteCursor(info.bytes, offset: unit.firstDIE, limit: unit.end)
        // One entry per open DIE with children: whether its parent lies inside a function.
        var open: [Bool] = []
        var insideFunction = false
        do {
            repeat {
                let offset = c.offset
                let code = try c.uleb()
                if code == 0 {
                    guard let outer = open.popLast() else { break }
                    insideFunction = outer
                    continue
                }
                guard let abbreviation = table.abbreviation(code) else { break }
                var hasRange = false
                if abbreviation.tag == Tag.subprogram || (!insideFunction && abbreviation.isSubroutine) {
                    let die = try readDIE(&c, at: offset, abbreviation, table: table, unitIndex: unitIndex)
                    forEachRange(of: die, in: unit) { low, high in
                        found.append((low, high, offset))
                        hasRange = true
                        return true
                    }
                } else {
                    try skipAttributes(&c, abbreviation, table: table, unit: unit)
                }
                if abbreviation.hasChildren {
                    guard open.count < Self.maxDepth else { break }
                    open.append(insideFunction)
                    insideFunction = insideFunction || hasRange
                }
            } while !open.isEmpty
        } catch {
            // Damaged data: keep the functions found before it.
        }
        let index = RangeIndex(found)
        functionRanges[unitIndex] = index
        functionRangesOrder.append(unitIndex)
        if functionRangesOrder.count > Self.maxCachedUnits {
            functionRanges[functionRangesOrder.removeFirst()] = nil
        }
        return index
    }

    // MARK: Abbreviations

    /// The decoded abbreviation table of `unit`, cached.
    private func abbreviationTable(for unit: Unit) -> AbbreviationTable? {
        let key = Self.key(for: unit)
        if let table = abbreviationTables[key] { return table }
        guard let table = decodeAbbreviations(for: unit, limitToFirst: false) else { return nil }
        if abbreviationTables.count >= Self.maxCachedAbbrevTables { abbreviationTables.removeAll() }
        abbreviationTables[key] = table
        return table
    }

    /// The cache key of `unit`'s abbreviation table.
    private static func key(for unit: Unit) -> AbbreviationKey {
        AbbreviationKey(offset: unit.abbrevOffset, addressSize: unit.addressSize, offsetSize: unit.offsetSize,
                        refAddrSize: unit.version <= 2 ? unit.addressSize : unit.offsetSize)
    }

    /// Decodes the abbreviation table of `unit`: all of it, or only its first declaration
    /// when `limitToFirst` (root DIEs nearly always use it). Nil when it cannot be read.
    private func decodeAbbreviations(for unit: Unit, limitToFirst: Bool) -> AbbreviationTable? {
        guard let abbrev, let start = Int(exactly: unit.abbrevOffset), start < abbrev.bytes.count else { return nil }
        let key = Self.key(for: unit)
        let table = AbbreviationTable()
        var c = ByteCursor(abbrev.bytes, offset: start)
        do {
            while true {
                let code = try c.uleb()
                if code == 0 { break }
                let tag = try c.uleb()
                let hasChildren = try c.u8() != 0
                let first = table.specs.count
                var fixedSize = 0
                while true {
                    let attribute = try c.uleb()
                    let form = try c.uleb()
                    if attribute == 0 && form == 0 { break }
                    let implicitConst = form == 0x21 ? try c.sleb() : 0
                    table.specs.append(AttributeSpec(attribute: attribute, form: form, implicitConst: implicitConst))
                    if fixedSize >= 0, let size = Self.fixedSize(of: form, key) {
                        fixedSize += size
                    } else {
                        fixedSize = -1
                    }
                }
                let index = table.abbreviations.count
                table.abbreviations.append(Abbreviation(code: code, tag: tag, hasChildren: hasChildren,
                                                        specs: first..<table.specs.count, fixedSize: fixedSize))
                if code != UInt64(index + 1) { table.sparse[code] = index }
                if limitToFirst { break }
            }
        } catch {
            // A table cut short keeps the declarations read so far.
        }
        return table.abbreviations.isEmpty ? nil : table
    }

    /// The size of a form's value when it does not depend on the data, else nil.
    private static func fixedSize(of form: UInt64, _ key: AbbreviationKey) -> Int? {
        switch form {
        case 0x01: return key.addressSize  // addr
        case 0x0b, 0x0c, 0x11, 0x25, 0x29: return 1  // data1, flag, ref1, strx1, addrx1
        case 0x05, 0x12, 0x26, 0x2a: return 2  // data2, ref2, strx2, addrx2
        case 0x27, 0x2b: return 3  // strx3, addrx3
        case 0x06, 0x13, 0x1c, 0x28, 0x2c: return 4  // data4, ref4, ref_sup4, strx4, addrx4
        case 0x07, 0x14, 0x20, 0x24: return 8  // data8, ref8, ref_sig8, ref_sup8
        case 0x1e: return 16  // data16
        case 0x0e, 0x17, 0x1d, 0x1f, 0x1f20, 0x1f21: return key.offsetSize  // strp, sec_offset, strp_sup, line_strp, GNU alt
        case 0x10: return key.refAddrSize  // ref_addr
        case 0x19, 0x21: return 0  // flag_present, implicit_const
        default: return nil
        }
    }

    // MARK: DIEs

    /// Reads the attributes of the DIE at `offset` (its code already read) and keeps those
    /// this file uses. `unitOverride` stands for the unit while its root DIE is being read.
    private func readDIE(_ c: inout ByteCursor, at offset: Int, _ abbreviation: Abbreviation,
                         table: AbbreviationTable, unitIndex: Int, unitOverride: Unit? = nil) throws -> DIE {
        let unit = unitOverride ?? units[unitIndex]
        var die = DIE(offset: offset, tag: abbreviation.tag, unit: unitIndex)
        for spec in table.specs[abbreviation.specs] {
            let value = try readValue(&c, form: spec.form, implicitConst: spec.implicitConst, unit: unit)
            switch spec.attribute {
            case Attribute.name: die.name = value
            case Attribute.linkageName: die.linkageName = value
            case Attribute.mipsLinkageName: die.mipsLinkageName = value
            case Attribute.abstractOrigin: if case .reference(let target) = value { die.abstractOrigin = target }
            case Attribute.specification: if case .reference(let target) = value { die.specification = target }
            case Attribute.lowPC: die.lowPC = value
            case Attribute.highPC: die.highPC = value
            case Attribute.ranges: die.ranges = value
            case Attribute.callFile: die.callFile = value.number
            case Attribute.callLine: die.callLine = value.number
            case Attribute.callColumn: die.callColumn = value.number
            case Attribute.stmtList: die.stmtList = value.number
            case Attribute.compDir: die.compDir = value
            case Attribute.strOffsetsBase: die.strOffsetsBase = value.number
            case Attribute.addrBase, Attribute.gnuAddrBase: die.addrBase = value.number
            case Attribute.rnglistsBase: die.rnglistsBase = value.number
            default: break
            }
        }
        return die
    }

    /// Moves past a DIE's attributes without keeping them.
    private func skipAttributes(_ c: inout ByteCursor, _ abbreviation: Abbreviation, table: AbbreviationTable,
                                unit: Unit) throws {
        if abbreviation.fixedSize >= 0 {
            try c.skip(abbreviation.fixedSize)
            return
        }
        for spec in table.specs[abbreviation.specs] {
            _ = try readValue(&c, form: spec.form, implicitConst: spec.implicitConst, unit: unit)
        }
    }

    /// Reads one attribute value of `form`.
    private func readValue(_ c: inout ByteCursor, form: UInt64, implicitConst: Int64, unit: Unit) throws -> Value {
        var form = form
        // DW_FORM_indirect names the form in the data; a chain of them is damage.
        for _ in 0..<4 {
            switch form {
            case 0x01: return .address(try c.sized(unit.addressSize))  // addr
            case 0x03: try c.skip(Int(try c.u16()))  // block2
            case 0x04: try c.skip(Int(try c.u32()))  // block4
            case 0x05: return .constant(UInt64(try c.u16()))  // data2
            case 0x06: return .constant(UInt64(try c.u32()))  // data4
            case 0x07: return .constant(try c.u64())  // data8
            case 0x08:  // string
                return .inlineString(UInt64(try c.skipCString()))
            case 0x09, 0x18: try c.skip(try c.uleb())  // block, exprloc
            case 0x0a: try c.skip(Int(try c.u8()))  // block1
            case 0x0b, 0x0c: return .constant(UInt64(try c.u8()))  // data1, flag
            case 0x0d: return .signedConstant(try c.sleb())  // sdata
            case 0x0e: return .stringOffset(try c.offset(size: unit.offsetSize))  // strp
            case 0x0f: return .constant(try c.uleb())  // udata
            case 0x10:  // ref_addr
                return .reference(try c.sized(unit.version <= 2 ? unit.addressSize : unit.offsetSize))
            case 0x11: return unitReference(UInt64(try c.u8()), unit)  // ref1
            case 0x12: return unitReference(UInt64(try c.u16()), unit)  // ref2
            case 0x13: return unitReference(UInt64(try c.u32()), unit)  // ref4
            case 0x14: return unitReference(try c.u64(), unit)  // ref8
            case 0x15: return unitReference(try c.uleb(), unit)  // ref_udata
            case 0x16:  // indirect
                form = try c.uleb()
                continue
            case 0x17: return .constant(try c.offset(size: unit.offsetSize))  // sec_offset
            case 0x19: return .constant(1)  // flag_present
            case 0x1a, 0x1f02: return .stringIndex(try c.uleb())  // strx, GNU_str_index
            case 0x1b, 0x1f01: return .addressIndex(try c.uleb())  // addrx, GNU_addr_index
            case 0x1c: try c.skip(4)  // ref_sup4
            case 0x1d, 0x1f20, 0x1f21: try c.skip(unit.offsetSize)  // strp_sup, GNU_ref_alt, GNU_strp_alt
            case 0x1e: try c.skip(16)  // data16
            case 0x1f: return .lineStringOffset(try c.offset(size: unit.offsetSize))  // line_strp
            case 0x20, 0x24: try c.skip(8)  // ref_sig8, ref_sup8
            case 0x21: return .signedConstant(implicitConst)  // implicit_const
            case 0x22: _ = try c.uleb()  // loclistx
            case 0x23: return .rangeListIndex(try c.uleb())  // rnglistx
            case 0x25: return .stringIndex(UInt64(try c.u8()))  // strx1
            case 0x26: return .stringIndex(UInt64(try c.u16()))  // strx2
            case 0x27: return .stringIndex(try c.sized(3))  // strx3
            case 0x28: return .stringIndex(UInt64(try c.u32()))  // strx4
            case 0x29: return .addressIndex(UInt64(try c.u8()))  // addrx1
            case 0x2a: return .addressIndex(UInt64(try c.u16()))  // addrx2
            case 0x2b: return .addressIndex(try c.sized(3))  // addrx3
            case 0x2c: return .addressIndex(UInt64(try c.u32()))  // addrx4
            default: throw MalformedData()
            }
            return .other
        }
        throw MalformedData()
    }

    /// A unit-relative reference as an offset in `.debug_info`.
    private func unitReference(_ value: UInt64, _ unit: Unit) -> Value {
        let (target, overflow) = UInt64(unit.offset).addingReportingOverflow(value)
        return overflow ? .other : .reference(target)
    }
}

/// Reads of odd-sized values (DW_FORM_strx3, addresses of either size).
extension ByteCursor {
    /// A little-endian unsigned value of `size` bytes (1 to 8).
    mutating func sized(_ size: Int) throws -> UInt64 {
        switch size {
        case 8: return try u64()
        case 4: return UInt64(try u32())
        case 2: return UInt64(try u16())
        case 1: return UInt64(try u8())
        case 3...7:
            var value: UInt64 = 0
            for index in 0..<size { value |= UInt64(try u8()) << (8 * UInt64(index)) }
            return value
        default: throw MalformedData()
        }
    }
}
