// fuzz_dwarf: libFuzzer target for the Swift DWARF readers of CairnCrash
// (DWARFInlineInfo.swift, DWARFLineTable.swift), built by `make fuzzers` with
// `swiftc -sanitize=fuzzer,address` from those sources.
//
// Input: nine little-endian u32 lengths, for .debug_info, .debug_abbrev, .debug_str,
// .debug_line_str, .debug_str_offsets, .debug_addr, .debug_ranges, .debug_rnglists and
// .debug_line; then the sections' bytes in that order (cut short where the input ends);
// then up to 16 little-endian u64 addresses to look up. `dwarf_seed.py` makes seeds from
// real objects. Besides never trapping, every chain found must be well formed: inlined
// levels first, the out-of-line function last.

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzDWARF(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let input = UnsafeBufferPointer(start: data, count: size)
    var at = 0
    func u32() -> Int {
        guard size - at >= 4 else { at = size; return 0 }
        defer { at += 4 }
        return (0..<4).reduce(0) { $0 | Int(input[at + $1]) << (8 * $1) }
    }
    let lengths = (0..<9).map { _ in u32() }
    let sections: [SectionBytes?] = lengths.map { length in
        let n = min(length, size - at)
        guard n > 0 else { return nil }
        let copy = UnsafeMutableRawBufferPointer.allocate(byteCount: n, alignment: 16)
        copy.copyMemory(from: UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(input)[at..<(at + n)]))
        at += n
        return SectionBytes(owning: copy)
    }
    var addresses: [UInt64] = []
    while size - at >= 8 && addresses.count < 16 {
        addresses.append((0..<8).reduce(UInt64(0)) { $0 | UInt64(input[at + $1]) << (8 * UInt64($1)) })
        at += 8
    }
    let lineTable = sections[8].map { DWARFLineTable(lines: $0, lineStrings: sections[3], strings: sections[2]) }
    for address in addresses { _ = lineTable?.location(for: address) }
    let inline = DWARFInlineInfo(info: sections[0], abbrev: sections[1], strings: sections[2],
                                 lineStrings: sections[3], stringOffsets: sections[4], addresses: sections[5],
                                 ranges: sections[6], rangeLists: sections[7], lineTable: lineTable)
    for address in addresses {
        guard let chain = inline.frames(for: address) else { continue }
        if chain.isEmpty || chain.last?.isInlined != false || chain.dropLast().contains(where: { !$0.isInlined }) {
            fatalError("malformed chain at \(address): \(chain)")
        }
    }
    return 0
}
