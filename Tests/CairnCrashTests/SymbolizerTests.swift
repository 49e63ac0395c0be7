import CairnTestSupport
import CairnCrash
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

// MARK: Probes: functions at known source lines of this file

@_cdecl("cairn_symbolizer_c_probe") func cairnSymbolizerCProbe() -> Int {
    Int(cairnSymbolizerProbe().line)
}

/// Returns the return address of a call made on the line it also returns.
@inline(never) func cairnSymbolizerProbe() -> (returnAddress: UInt64, line: Int) {
    var stack = [UnsafeMutableRawPointer?](repeating: nil, count: 4); let depth = Fixture.backtrace(&stack, 4); let line = #line
    // The first frame outside `backtrace` is inside this function: the return address of
    // the call. (Under AddressSanitizer, `backtrace` is an interceptor that adds its own
    // frame first: skipped by its name, which is all this borrows from the symbolizer.)
    let frames = stack.prefix(max(0, Int(depth))).compactMap { $0 }.map { UInt64(UInt(bitPattern: $0)) }
    let modules = Fixture.currentModules()
    let own = frames.first { address in
        Symbolizer().symbolize(address: address, index: 1, modules: modules).symbol?.contains("backtrace") != true
    }
    return (own ?? 0, line)
}

// MARK: Fixtures

private enum Fixture {
    static var crashChild: String { productsDirectory + "/cairn-crash-child" }

    /// Runs a tool and returns its standard output; throws when it fails.
    static func run(_ argv: [String]) throws -> String {
        let f = try runToEnd("/usr/bin/env", argv)
        guard f.status == 0 else { throw ToolFailed(command: argv.joined(separator: " "), status: f.status) }
        return f.out
    }

    struct ToolFailed: Error {
        var command: String
        var status: Int32
    }

    /// Function symbols of `file` from `nm`: name, address and size.
    static func functions(in file: String, dynamic: Bool = false) throws -> [(name: String, address: UInt64, size: UInt64)] {
        let output = try run(["nm", "-S", "--defined-only"] + (dynamic ? ["-D"] : []) + [file])
        return output.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: " ")
            guard fields.count == 4, ["T", "t"].contains(fields[2]),
                  let address = UInt64(fields[0], radix: 16), let size = UInt64(fields[1], radix: 16) else { return nil }
            return (String(fields[3]), address, size)
        }
    }

    /// The GNU build id of `file`, as `readelf -n` prints it.
    static func buildID(of file: String) throws -> [UInt8] {
        let output = try run(["readelf", "-n", file])
        guard let range = output.range(of: "Build ID: ") else { return [] }
        let hex = output[range.upperBound...].prefix { $0.isHexDigit }
        return stride(from: 0, to: hex.count - 1, by: 2).compactMap { offset in
            let start = hex.index(hex.startIndex, offsetBy: offset)
            return UInt8(hex[start..<hex.index(start, offsetBy: 2)], radix: 16)
        }
    }

    /// A module for a file on disk, as if loaded at address 0 with everything executable.
    static func wholeFile(_ path: String, buildID: [UInt8] = []) -> CrashModule {
        CrashModule(path: path, loadAddress: 0, start: 0, end: UInt64.max, buildID: buildID)
    }

    /// glibc's `backtrace` (execinfo.h is not part of the Glibc module).
    static let backtrace = unsafeBitCast(dlsym(nil, "backtrace"), to: (@convention(c) (
        UnsafeMutablePointer<UnsafeMutableRawPointer?>?, Int32) -> Int32).self)

    /// The modules of this process, built as the crash handler builds them: with glibc's
    /// `dl_iterate_phdr` (link.h is not part of the Glibc module, so `dl_phdr_info` and
    /// `Elf64_Phdr` are read at their x86_64/aarch64 offsets).
    static func currentModules() -> [CrashModule] {
        typealias Iterate = @convention(c) (
            @convention(c) (UnsafeRawPointer?, Int, UnsafeMutableRawPointer?) -> Int32, UnsafeMutableRawPointer?
        ) -> Int32
        let iterate = unsafeBitCast(dlsym(nil, "dl_iterate_phdr"), to: Iterate.self)
        let collector = ModuleCollector()
        withExtendedLifetime(collector) {
            _ = iterate(collectModule, Unmanaged.passUnretained(collector).toOpaque())
        }
        return collector.modules
    }

    static func noteBuildID(_ notes: UnsafeRawBufferPointer) -> [UInt8] {
        var offset = 0
        while offset + 12 <= notes.count {
            let nameSize = Int(notes.loadUnaligned(fromByteOffset: offset, as: UInt32.self))
            let descSize = Int(notes.loadUnaligned(fromByteOffset: offset + 4, as: UInt32.self))
            let type = notes.loadUnaligned(fromByteOffset: offset + 8, as: UInt32.self)
            let desc = offset + 12 + (nameSize + 3) & ~3
            guard desc + descSize <= notes.count else { return [] }
            if type == 3, nameSize == 4 { return Array(notes[desc..<desc + descSize]) }
            offset = desc + (descSize + 3) & ~3
        }
        return []
    }

    /// Offset and size of section `name` in `file`, from `readelf -S`.
    static func section(_ name: String, in file: String) throws -> (offset: Int, size: Int)? {
        let output = try run(["readelf", "-SW", file])
        for line in output.split(separator: "\n") {
            guard let bracket = line.firstIndex(of: "]") else { continue }
            let fields = line[line.index(after: bracket)...].split(separator: " ")
            guard fields.count >= 6, fields[0] == name,
                  let offset = Int(fields[3], radix: 16), let size = Int(fields[4], radix: 16) else { continue }
            return (offset, size)
        }
        return nil
    }
}

/// Receives `dl_iterate_phdr`'s modules.
private final class ModuleCollector {
    var modules: [CrashModule] = []
}

/// A `dl_iterate_phdr` callback: appends one module to the `ModuleCollector` at `context`.
private func collectModule(_ info: UnsafeRawPointer?, _ size: Int, _ context: UnsafeMutableRawPointer?) -> Int32 {
    guard let info, let context else { return 0 }
    let collector = Unmanaged<ModuleCollector>.fromOpaque(context).takeUnretainedValue()
    let base = info.load(fromByteOffset: 0, as: UInt64.self)
    var name = info.load(fromByteOffset: 8, as: UnsafePointer<CChar>?.self).map { String(cString: $0) } ?? ""
    if name.isEmpty { name = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? "" }
    guard let headers = info.load(fromByteOffset: 16, as: UnsafeRawPointer?.self) else { return 0 }
    let count = Int(info.load(fromByteOffset: 24, as: UInt16.self))
    var start = UInt64.max, end: UInt64 = 0
    var buildID: [UInt8] = []
    for index in 0..<count {
        let header = headers + index * 56
        let type = header.load(as: UInt32.self), flags = header.load(fromByteOffset: 4, as: UInt32.self)
        let address = base &+ header.load(fromByteOffset: 16, as: UInt64.self)
        let memorySize = header.load(fromByteOffset: 40, as: UInt64.self)
        if type == 1, flags & 1 != 0 {  // PT_LOAD, PF_X
            start = min(start, address)
            end = max(end, address &+ memorySize)
        } else if type == 4, buildID.isEmpty, let notes = UnsafeRawPointer(bitPattern: UInt(address)) {
            buildID = Fixture.noteBuildID(UnsafeRawBufferPointer(start: notes, count: Int(memorySize)))
        }
    }
    if start < end {
        collector.modules.append(CrashModule(path: name, loadAddress: base, start: start, end: end, buildID: buildID))
    }
    return 0
}

// MARK: Tests

@Suite struct SymbolizerTests {
    @Test func symbolizesProbesInThisTestBinary() throws {
        let modules = Fixture.currentModules()
        let symbolizer = Symbolizer()

        let probe = cairnSymbolizerProbe()
        let frame = symbolizer.symbolize(address: probe.returnAddress, index: 1, modules: modules)
        #expect(frame.symbol?.contains("cairnSymbolizerProbe") == true, "\(frame)")
        #expect(frame.mangledSymbol?.hasPrefix("$s") == true, "\(frame)")
        #expect(frame.file?.hasSuffix("/SymbolizerTests.swift") == true, "\(frame)")
        #expect(frame.line == probe.line, "\(frame)")
        #expect(frame.buildID != nil && frame.note == nil, "\(frame)")

        let cProbe: @convention(c) () -> Int = cairnSymbolizerCProbe
        let entry = UInt64(UInt(bitPattern: unsafeBitCast(cProbe, to: UnsafeRawPointer.self)))
        let entryFrame = symbolizer.symbolize(address: entry, index: 0, modules: modules)
        #expect(entryFrame.symbol == "cairn_symbolizer_c_probe", "\(entryFrame)")
        #expect(entryFrame.symbolOffset == 0, "\(entryFrame)")

        let module = try #require(modules.first { $0.start <= entry && entry < $0.end })
        #expect(entryFrame.module == module.path)
        #expect(entryFrame.moduleOffset == entry - module.loadAddress)
    }

    /// Symbolizes function starts and middles of `file` (up to `limit` functions, spread
    /// over the symbol table) and compares file names and lines with addr2line's.
    private func compareWithAddr2line(_ file: String, limit: Int) throws -> Int {
        let functions = try Fixture.functions(in: file).filter { $0.address != 0 }
        var addresses: [UInt64] = []
        for function in stride(from: 0, to: functions.count, by: max(1, functions.count / limit)).map({ functions[$0] }) {
            addresses.append(function.address)
            if function.size > 2 { addresses.append(function.address + function.size / 2) }
        }
        let output = try Fixture.run(["addr2line", "-f", "-C", "-e", file] + addresses.map { String($0, radix: 16) })
        let lines = output.split(separator: "\n", omittingEmptySubsequences: false)
        try #require(lines.count >= addresses.count * 2)

        let symbolizer = Symbolizer()
        let modules = [Fixture.wholeFile(file, buildID: try Fixture.buildID(of: file))]
        // binutils' addr2line names the unit's main file instead of an inlined header for
        // some DWARF 5 units (the sanitizer runtime's, in sanitizer builds); where it
        // differs from us, the toolchain's llvm-symbolizer (also not ours) decides.
        let toolchain = try Fixture.run(["sh", "-c", "dirname \"$(readlink -f \"$(command -v swift)\")\""])
            .trimmingCharacters(in: .whitespacesAndNewlines)
        let llvm = try Fixture.run([toolchain + "/llvm-symbolizer", "--no-inlines", "--obj=" + file]
                                   + addresses.map { "0x" + String($0, radix: 16) })
            .split(separator: "\n\n", omittingEmptySubsequences: false)
            .map { $0.split(separator: "\n").dropFirst().first.map(String.init) ?? "" }
        var compared = 0
        for (index, address) in addresses.enumerated() {
            let frame = symbolizer.symbolize(address: address, index: 0, modules: modules)
            #expect(frame.symbol != nil, "no symbol at 0x\(String(address, radix: 16))")
            // "path:line" or "path:line (discriminator n)"; "??:0" or "path:?" when unknown.
            let location = lines[index * 2 + 1].split(separator: " ")[0]
            guard let colon = location.lastIndex(of: ":"), let line = Int(location[location.index(after: colon)...]),
                  line > 0 else { continue }
            var basename = location[..<colon].split(separator: "/").last.map(String.init)
            let ours = frame.file.flatMap { $0.split(separator: "/").last.map(String.init) }
            if ours != basename, index < llvm.count, let llvmFile = llvm[index].split(separator: ":").first {
                basename = llvmFile.split(separator: "/").last.map(String.init)
            }
            #expect(ours == basename,
                    "0x\(String(address, radix: 16)): addr2line \(location), ours \(frame)")
            #expect(frame.line == line, "0x\(String(address, radix: 16)): addr2line \(location), ours \(frame)")
            compared += 1
        }
        return compared
    }

    @Test func agreesWithAddr2lineOnTheTestBinary() throws {
        let exe = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        // Most small functions of a Swift binary are compiler-generated thunks without lines;
        // sample widely so that well over a hundred addresses do have one.
        let compared = try compareWithAddr2line(exe, limit: 600)
        #expect(compared >= 150, "only \(compared) addresses with a line")
    }

    @Test func agreesWithAddr2lineOnTheCrashChild() throws {
        let child = Fixture.crashChild
        let compared = try compareWithAddr2line(child, limit: 100)
        #expect(compared >= 50, "only \(compared) addresses with a line")

        let symbolizer = Symbolizer()
        let modules = [Fixture.wholeFile(child)]
        let crashHere = try #require(try Fixture.functions(in: child).first { $0.name == "crash_here" })
        let frame = symbolizer.symbolize(address: crashHere.address + 4, index: 1, modules: modules)
        #expect(frame.symbol == "crash_here")
        #expect(frame.mangledSymbol == nil)
        #expect(frame.symbolOffset == 3)
        #expect(frame.file?.hasSuffix("CrashChild/main.c") == true, "\(frame)")
        #expect(frame.line != nil)
    }

    @Test(arguments: [["-gdwarf-2"], ["-gdwarf-3"], ["-gdwarf-4"], ["-gdwarf-5"],
                      ["-gdwarf-4", "-gdwarf64"], ["-gdwarf-5", "-gdwarf64"]])
    func readsEachDWARFVersion(flags: [String]) throws {
        let directoryScratch = try TemporaryDirectory("cairn-symbolizer")
        let directory = URL(fileURLWithPath: directoryScratch.path)
        let source = directory.appendingPathComponent("versions.c")
        try Data("""
            static int twice(int x) {
                return x * 2;
            }
            int main(int argc, char **argv) {
                (void)argv;
                return twice(argc);
            }

            """.utf8).write(to: source)
        let program = directory.appendingPathComponent("versions").path
        _ = try Fixture.run(["/opt/swift/usr/bin/clang", "-O0"] + flags + ["-o", program, source.path])

        // Every byte of both functions, against addr2line.
        let functions = try Fixture.functions(in: program).filter { ["twice", "main"].contains($0.name) }
        #expect(functions.count == 2)
        let addresses = functions.flatMap { function in (0..<function.size).map { function.address + $0 } }
        let output = try Fixture.run(["addr2line", "-e", program] + addresses.map { String($0, radix: 16) })
        let expected = output.split(separator: "\n").map { Int($0.split(separator: ":").last ?? "") }
        try #require(expected.count == addresses.count)
        let symbolizer = Symbolizer()
        for (address, line) in zip(addresses, expected) where line != nil && line != 0 {
            let frame = symbolizer.symbolize(address: address, index: 0, modules: [Fixture.wholeFile(program)])
            #expect(frame.line == line && frame.file?.hasSuffix("versions.c") == true,
                    "0x\(String(address, radix: 16)): addr2line \(line ?? 0), ours \(frame)")
        }
        let body = try #require(functions.first { $0.name == "twice" })
        let frame = symbolizer.symbolize(address: body.address + body.size / 2, index: 0,
                                         modules: [Fixture.wholeFile(program)])
        #expect(frame.symbol == "twice" && frame.line == 2)
    }

    @Test func explainsWhatIsMissing() throws {
        let child = Fixture.crashChild
        let crashHere = try #require(try Fixture.functions(in: child).first { $0.name == "crash_here" })
        let symbolizer = Symbolizer()

        let mismatched = Fixture.wholeFile(child, buildID: [0xde, 0xad, 0xbe, 0xef])
        let wrongBuild = symbolizer.symbolize(address: crashHere.address, index: 0, modules: [mismatched])
        #expect(wrongBuild.symbol == nil && wrongBuild.file == nil)
        #expect(wrongBuild.note == "build id differs from file on disk")
        #expect(wrongBuild.buildID == "deadbeef")
        #expect(wrongBuild.module == child)

        let matching = Fixture.wholeFile(child, buildID: try Fixture.buildID(of: child))
        #expect(symbolizer.symbolize(address: crashHere.address, index: 0, modules: [matching]).symbol == "crash_here")

        let gone = Fixture.wholeFile("/nonexistent/cairn/\(UUID().uuidString)")
        let missing = symbolizer.symbolize(address: 0x1234, index: 0, modules: [gone])
        #expect(missing.note == "module file missing" && missing.symbol == nil && missing.module == gone.path)
        #expect(missing.moduleOffset == 0x1234)

        let elsewhere = CrashModule(path: child, loadAddress: 0x1000, start: 0x2000, end: 0x3000, buildID: [])
        let outside = symbolizer.symbolize(address: 0x5000, index: 0, modules: [elsewhere])
        #expect(outside.module == nil && outside.moduleOffset == nil && outside.symbol == nil)
        #expect(outside.note != nil)

        // A return address just past the module's code still belongs to it.
        let edge = symbolizer.symbolize(address: 0x3000, index: 1, modules: [elsewhere])
        #expect(edge.module == child && edge.moduleOffset == 0x2000)

        let notELFScratch = try TemporaryDirectory("cairn-symbolizer")
        let notELF = URL(fileURLWithPath: notELFScratch.path)
        let text = notELF.appendingPathComponent("text").path
        try Data("not an ELF file".utf8).write(to: URL(fileURLWithPath: text))
        let unreadable = symbolizer.symbolize(address: 10, index: 0, modules: [Fixture.wholeFile(text)])
        #expect(unreadable.symbol == nil && unreadable.note != nil && unreadable.note != "module file missing")
    }

    @Test func strippedFilesFallBackToDynsymOrNothing() throws {
        let directoryScratch = try TemporaryDirectory("cairn-symbolizer")
        let directory = URL(fileURLWithPath: directoryScratch.path)
        let child = Fixture.crashChild
        let stripped = directory.appendingPathComponent("stripped").path
        _ = try Fixture.run(["objcopy", "--strip-all", child, stripped])
        let crashHere = try #require(try Fixture.functions(in: child).first { $0.name == "crash_here" })
        let frame = Symbolizer().symbolize(address: crashHere.address, index: 0, modules: [Fixture.wholeFile(stripped)])
        #expect(frame.symbol != "crash_here" && frame.file == nil && frame.line == nil)
        #expect(frame.note != nil)

        // A shared library installed stripped: only .dynsym names its exported functions.
        let library = try strippedLibraryCopy(in: directory)
        let exported = try Fixture.functions(in: library, dynamic: true).filter { $0.size > 8 }.prefix(20)
        #expect(exported.count >= 10)
        let symbolizer = Symbolizer()
        for function in exported {
            let frame = symbolizer.symbolize(address: function.address + 8, index: 1,
                                             modules: [Fixture.wholeFile(library)])
            #expect(frame.symbol == function.name, "\(function.name): \(frame)")
            #expect(frame.symbolOffset == 7)
        }
    }

    /// A stripped copy of libzstd (a shared library with exported functions).
    private func strippedLibraryCopy(in directory: URL) throws -> String {
        let copy = directory.appendingPathComponent("libzstd.so").path
        _ = try Fixture.run(["objcopy", "--strip-all", "/lib/x86_64-linux-gnu/libzstd.so.1", copy])
        return copy
    }

    @Test func findsSeparateDebugFilesByBuildID() throws {
        let directoryScratch = try TemporaryDirectory("cairn-symbolizer")
        let directory = URL(fileURLWithPath: directoryScratch.path)
        let child = Fixture.crashChild
        let id = try Fixture.buildID(of: child).map { String(format: "%02x", $0) }.joined()
        let debugFolder = directory.appendingPathComponent("debug/.build-id/\(id.prefix(2))")
        try FileManager.default.createDirectory(at: debugFolder, withIntermediateDirectories: true)
        _ = try Fixture.run(["objcopy", "--only-keep-debug", child,
                             debugFolder.appendingPathComponent("\(id.dropFirst(2)).debug").path])
        let stripped = directory.appendingPathComponent("stripped").path
        _ = try Fixture.run(["objcopy", "--strip-all", child, stripped])

        let crashHere = try #require(try Fixture.functions(in: child).first { $0.name == "crash_here" })
        let expected = Symbolizer().symbolize(address: crashHere.address + 9, index: 0, modules: [Fixture.wholeFile(child)])
        let symbolizer = Symbolizer(debugDirectory: directory.appendingPathComponent("debug").path)
        let frame = symbolizer.symbolize(address: crashHere.address + 9, index: 0, modules: [Fixture.wholeFile(stripped)])
        #expect(frame.symbol == "crash_here")
        #expect(frame.file == expected.file && frame.line == expected.line && frame.line != nil)
    }

    @Test func readsZstdCompressedDebugSections() throws {
        let directoryScratch = try TemporaryDirectory("cairn-symbolizer")
        let directory = URL(fileURLWithPath: directoryScratch.path)
        let child = Fixture.crashChild
        let zstd = directory.appendingPathComponent("zstd").path
        _ = try Fixture.run(["objcopy", "--compress-debug-sections=zstd", child, zstd])
        let zlib = directory.appendingPathComponent("zlib").path
        _ = try Fixture.run(["objcopy", "--compress-debug-sections=zlib", child, zlib])
        // Check the tool really compressed the line table (flag C in readelf's listing).
        #expect(try Fixture.run(["readelf", "-SW", zstd]).split(separator: "\n")
            .contains { $0.contains(".debug_line ") && $0.contains(" C ") })

        let plain = Symbolizer()
        let compressed = Symbolizer()
        var compared = 0
        for function in try Fixture.functions(in: child) {
            let expected = plain.symbolize(address: function.address, index: 0, modules: [Fixture.wholeFile(child)])
            let frame = compressed.symbolize(address: function.address, index: 0, modules: [Fixture.wholeFile(zstd)])
            #expect(frame.file == expected.file && frame.line == expected.line && frame.symbol == expected.symbol)
            if expected.line != nil { compared += 1 }
        }
        #expect(compared >= 20)

        // zlib is not available: symbols still work, lines are reported missing.
        let function = try #require(try Fixture.functions(in: child).first { $0.name == "crash_here" })
        let frame = Symbolizer().symbolize(address: function.address, index: 0, modules: [Fixture.wholeFile(zlib)])
        #expect(frame.symbol == "crash_here" && frame.line == nil && frame.note == "no line information")
    }

    @Test func survivesTruncatedAndCorruptedFiles() throws {
        let directoryScratch = try TemporaryDirectory("cairn-symbolizer")
        let directory = URL(fileURLWithPath: directoryScratch.path)
        let child = Fixture.crashChild
        let original = try [UInt8](Data(contentsOf: URL(fileURLWithPath: child)))
        let probes = try Fixture.functions(in: child).prefix(8).map { $0.address + 1 }
        let sectionHeaders = Int(original[0x28..<0x30].reversed().reduce(UInt64(0)) { $0 << 8 | UInt64($1) })
        let debugLine = try #require(try Fixture.section(".debug_line", in: child))
        let symtab = try #require(try Fixture.section(".symtab", in: child))

        var variants: [[UInt8]] = []
        var cuts = Array(stride(from: 0, to: original.count, by: max(1, original.count / 40)))
        cuts += [1, 4, 16, 63, 64, 65, sectionHeaders, original.count - 1, original.count - 64]
        cuts += stride(from: sectionHeaders + 1, to: original.count, by: 97)
        cuts += stride(from: debugLine.offset, to: debugLine.offset + debugLine.size, by: max(1, debugLine.size / 24))
        cuts += stride(from: symtab.offset, to: symtab.offset + symtab.size, by: max(1, symtab.size / 8))
        for cut in cuts where cut >= 0 && cut < original.count { variants.append(Array(original[..<cut])) }

        // Corruptions aimed where parsers look: the headers, section table, symbols, line table.
        var random = SplitMix(seed: 0xCA12_5EED)
        let regions = [0..<64, sectionHeaders..<original.count, symtab.offset..<symtab.offset + symtab.size,
                       debugLine.offset..<debugLine.offset + debugLine.size, 0..<original.count]
        for variant in 0..<200 {
            var bytes = original
            let region = regions[variant % regions.count]
            for _ in 0..<Int.random(in: 1...16, using: &random) {
                let offset = Int.random(in: region, using: &random)
                if variant % 3 == 0 {
                    bytes[offset] = [0x00, 0xff, 0x7f, 0x80][Int.random(in: 0..<4, using: &random)]
                } else {
                    bytes[offset] ^= UInt8.random(in: 1...255, using: &random)
                }
            }
            variants.append(bytes)
        }
        #expect(variants.count >= 250)

        var symbolized = 0
        for (index, bytes) in variants.enumerated() {
            let path = directory.appendingPathComponent("variant-\(index)").path
            try Data(bytes).write(to: URL(fileURLWithPath: path))
            let symbolizer = Symbolizer()
            for (frameIndex, address) in probes.enumerated() {
                let frame = symbolizer.symbolize(address: address, index: frameIndex % 2,
                                                 modules: [Fixture.wholeFile(path)])
                if frame.symbol != nil { symbolized += 1 }
                #expect(frame.module == path)
            }
            try FileManager.default.removeItem(atPath: path)
        }
        // Many corruptions leave the symbol table intact: those copies must still work.
        #expect(symbolized > 0)
    }

    @Test func demanglesSwiftAndCxxNames() throws {
        #expect(Symbolizer.demangle("$sSi") == "Swift.Int")
        #expect(Symbolizer.demangle("_ZN3foo3barEi") == "foo::bar(int)")
        #expect(Symbolizer.demangle("main") == "main")
        #expect(Symbolizer.demangle("crash_here") == "crash_here")
        for garbage in ["$s", "$sZZZ!!", "_Z", "_Zgarbage(", "_T0", ""] {
            #expect(Symbolizer.demangle(garbage) == garbage)
        }

        // A real name from this binary, checked against the toolchain's swift-demangle.
        let frame = Symbolizer().symbolize(address: cairnSymbolizerProbe().returnAddress, index: 1,
                                           modules: Fixture.currentModules())
        let mangled = try #require(frame.mangledSymbol)
        let expected = try Fixture.run([Self.toolchain() + "/swift-demangle", mangled])
        #expect(expected.hasSuffix("\(Symbolizer.demangle(mangled))\n"))
        #expect(Symbolizer.demangle(mangled) != mangled && frame.symbol == Symbolizer.demangle(mangled))
    }

    /// The toolchain's directory (where `swift`, `swift-demangle` and `llvm-symbolizer` are).
    static func toolchain() throws -> String { try InlineFixture.toolchain() }

    /// Every Swift function name of this test binary whose demangling has type sugar
    /// (`T?`, `[T]`, `[K : V]`), and a sample of the others, demangled by us and by the
    /// toolchain's `swift-demangle`: the same text.
    @Test func demangledNamesMatchSwiftDemangleWithTypeSugar() throws {
        let binary = try #require(try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"))
        let names = try Fixture.functions(in: binary).map(\.name).filter { $0.hasPrefix("$s") }
        #expect(names.count > 1000, "the test binary has Swift functions")
        let theirs = try runToEnd(Self.toolchain() + "/swift-demangle", [],
                                  stdin: Data(names.joined(separator: "\n").utf8 + [10]))
        let lines = theirs.out.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        try #require(lines.count >= names.count)
        var sugared = 0, compared = 0
        var differ: [String] = []
        for (i, name) in names.enumerated() {
            let expected = lines[i]
            let hasSugar = expected.contains("?") || expected.contains("[")
            guard hasSugar || i % 20 == 0 else { continue }
            compared += 1
            if hasSugar { sugared += 1 }
            if Symbolizer.demangle(name) != expected { differ.append("\(name): ours \(Symbolizer.demangle(name)) | swift-demangle \(expected)") }
        }
        #expect(sugared > 100, "names with sugar: \(sugared)")
        #expect(differ.isEmpty, "\(differ.count) of \(compared) differ, e.g. \(differ.prefix(3))")
    }
}
