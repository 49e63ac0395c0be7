// Inline chains from DWARF, checked against the toolchain's llvm-symbolizer on programs
// built here with clang and swiftc; and damaged debug sections, which must never trap.
import CairnTestSupport
import Foundation
import Testing
@testable import CairnCrash

/// Builds fixtures and asks the toolchain about them.
enum InlineFixture {
    /// A tool that exited with a failure status.
    struct ToolFailed: Error, CustomStringConvertible {
        var command: String
        var status: Int32
        var stderr: String
        /// The command, its status and what it wrote to stderr.
        var description: String { "\(command) exited with \(status): \(stderr)" }
    }

    /// One level of an inline chain as llvm-symbolizer prints it.
    struct OracleFrame: CustomStringConvertible {
        /// nil for "??".
        var name: String?
        /// nil for "??".
        var file: String?
        var line: Int
        var column: Int
        /// As llvm-symbolizer prints the level, on one line.
        var description: String { "\(name ?? "??") \(file ?? "??"):\(line):\(column)" }
    }

    /// Runs a tool found on `PATH` (or by path) and returns its standard output; throws when it fails.
    static func run(_ argv: [String], directory: String? = nil) throws -> String {
        let finished = try runToEnd("/usr/bin/env", argv, directory: directory, timeout: 300)
        guard finished.status == 0, !finished.signaled else {
            throw ToolFailed(command: argv.joined(separator: " "), status: finished.status, stderr: finished.err)
        }
        return finished.out
    }

    /// The directory of the toolchain's `swift` (where its clang and llvm-symbolizer live).
    static func toolchain() throws -> String { try toolchainDirectory() }

    /// Function symbols of `file` with a size, from `nm`: name, address, size.
    static func functions(in file: String) throws -> [(name: String, address: UInt64, size: UInt64)] {
        try run(["nm", "-S", "--defined-only", file]).split(separator: "\n").compactMap { line in
            let fields = line.split(separator: " ")
            guard fields.count == 4, ["T", "t"].contains(fields[2]),
                  let address = UInt64(fields[0], radix: 16), let size = UInt64(fields[1], radix: 16),
                  address != 0, size > 0 else { return nil }
            return (String(fields[3]), address, size)
        }
    }

    /// Addresses of the `ud2` instructions (what `__builtin_trap` and Swift's runtime
    /// failures compile to) inside the function starting at `start`, from `objdump`.
    static func traps(in file: String, start: UInt64, size: UInt64) throws -> [UInt64] {
        let output = try run(["objdump", "-d", "--no-show-raw-insn",
                              "--start-address=0x" + String(start, radix: 16),
                              "--stop-address=0x" + String(start + size, radix: 16), file])
        return output.split(separator: "\n").compactMap { line in
            let parts = line.split(separator: ":", maxSplits: 1)
            guard parts.count == 2, parts[1].contains("ud2"),
                  let address = UInt64(parts[0].trimmingCharacters(in: .whitespaces), radix: 16) else { return nil }
            return address
        }
    }

    /// llvm-symbolizer's inline chains (raw names) at `addresses` of `file`.
    static func oracle(_ file: String, _ addresses: [UInt64]) throws -> [[OracleFrame]] {
        let symbolizer = try toolchain() + "/llvm-symbolizer"
        var chains: [[OracleFrame]] = []
        // In batches, to keep command lines short.
        for start in stride(from: 0, to: addresses.count, by: 2000) {
            let batch = addresses[start..<min(addresses.count, start + 2000)]
            let output = try run([symbolizer, "--inlining", "--no-demangle", "--obj=" + file]
                                 + batch.map { "0x" + String($0, radix: 16) })
            let blocks = output.components(separatedBy: "\n\n").filter { !$0.isEmpty }
            for block in blocks {
                let lines = block.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
                var chain: [OracleFrame] = []
                for index in stride(from: 0, to: lines.count - 1, by: 2) {
                    let name = lines[index] == "??" ? nil : lines[index]
                    chain.append(parseLocation(lines[index + 1], name: name))
                }
                chains.append(chain)
            }
        }
        return chains
    }

    /// "path:line:column" (possibly followed by " (discriminator n)"); "??:0:0" when unknown.
    private static func parseLocation(_ text: String, name: String?) -> OracleFrame {
        let location = text.split(separator: " ").first.map(String.init) ?? text
        let parts = location.split(separator: ":", omittingEmptySubsequences: false).map(String.init)
        guard parts.count >= 3 else { return OracleFrame(name: name, file: nil, line: 0, column: 0) }
        let file = parts.dropLast(2).joined(separator: ":")
        return OracleFrame(name: name, file: file == "??" ? nil : file,
                           line: Int(parts[parts.count - 2]) ?? 0, column: Int(parts[parts.count - 1]) ?? 0)
    }

    /// The last path component, the part the comparisons look at.
    static func basename(_ path: String?) -> String? {
        path.flatMap { $0.split(separator: "/").last.map(String.init) }
    }

    /// Our inline information for `file`, as the symbolizer would build it.
    static func inlineInfo(_ file: String) throws -> DWARFInlineInfo {
        let image = try #require(ELFImage(path: file))
        return DWARFInlineInfo(image: image, lineTable: lineTable(image))
    }

    /// The line table of `image`.
    static func lineTable(_ image: ELFImage) -> DWARFLineTable? {
        image.sectionBytes(named: ".debug_line").map {
            DWARFLineTable(lines: $0, lineStrings: image.sectionBytes(named: ".debug_line_str"),
                           strings: image.sectionBytes(named: ".debug_str"))
        }
    }

    /// Where our chain differs from llvm-symbolizer's at `address`; nil when they agree.
    ///
    /// A level is the same when its function name, file basename, line and column are.
    /// Where no unit covers the address (nil), llvm-symbolizer has no line either, but may
    /// name the function and file from the symbol table (an STT_FILE symbol), so only its
    /// line is compared. llvm-symbolizer also names the outermost level from the symbol
    /// table, where we leave that to the symbolizer: compare against a copy of the program
    /// without a symbol table (``dwarfOnlyCopy(of:)``) for names from DWARF alone.
    static func difference(_ ours: [InlineFrame]?, _ oracle: [OracleFrame], at address: UInt64) -> String? {
        let label = "0x\(String(address, radix: 16)): llvm \(oracle), ours \(ours.map { "\($0)" } ?? "nil")"
        guard let ours else {
            return oracle.count == 1 && oracle[0].line == 0 ? nil : label
        }
        guard ours.count == oracle.count else { return label }
        for (level, (mine, theirs)) in zip(ours, oracle).enumerated() {
            if mine.name != theirs.name { return label }
            if basename(mine.file) != basename(theirs.file) || mine.line != theirs.line || mine.column != theirs.column {
                return label
            }
            if mine.isInlined != (level < ours.count - 1) { return label + " (inlined flag)" }
        }
        return nil
    }

    /// A copy of `file` with its debug sections but no symbol table, so that
    /// llvm-symbolizer takes every function name from DWARF, as we do.
    static func dwarfOnlyCopy(of file: String) throws -> String {
        let copy = file + ".dwarf-only"
        _ = try run([try toolchain() + "/llvm-objcopy", "--strip-all", "--keep-section=.debug_*", file, copy])
        return copy
    }

    /// Compares our chains with llvm-symbolizer's at every byte of `functions` (of `file`,
    /// both reading a copy without symbol table); returns the differences, how many
    /// addresses had more than one level, and how many were compared.
    static func compareEveryByte(of file: String, functions: [(name: String, address: UInt64, size: UInt64)])
        throws -> (differences: [String], inlined: Int, compared: Int)
    {
        let addresses = functions.flatMap { function in (0..<function.size).map { function.address + $0 } }
        let copy = try dwarfOnlyCopy(of: file)
        let oracle = try oracle(copy, addresses)
        try #require(oracle.count == addresses.count, "llvm-symbolizer answered \(oracle.count) of \(addresses.count)")
        let info = try inlineInfo(copy)
        var differences: [String] = []
        var inlined = 0
        for (address, expected) in zip(addresses, oracle) {
            let ours = info.frames(for: address)
            if let difference = difference(ours, expected, at: address) { differences.append(difference) }
            if (ours?.count ?? 0) > 1 { inlined += 1 }
        }
        return (differences, inlined, addresses.count)
    }

    /// Copies of the sections the inline reader takes, by name.
    static let sectionNames = [".debug_info", ".debug_abbrev", ".debug_str", ".debug_line_str", ".debug_str_offsets",
                               ".debug_addr", ".debug_ranges", ".debug_rnglists"]

    /// Owned section bytes holding a copy of `bytes`.
    static func sectionBytes(_ bytes: [UInt8]) -> SectionBytes {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: max(bytes.count, 1), alignment: 8)
        buffer.copyBytes(from: bytes)
        return SectionBytes(owning: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<bytes.count]))
    }

    /// An inline reader over the sections in `sections` (missing names stay nil).
    static func inlineInfo(_ sections: [String: [UInt8]], lineTable: DWARFLineTable?) -> DWARFInlineInfo {
        /// A copy of section `name`, when `sections` has it.
        func bytes(_ name: String) -> SectionBytes? { sections[name].map(sectionBytes) }
        return DWARFInlineInfo(info: bytes(".debug_info"), abbrev: bytes(".debug_abbrev"),
                               strings: bytes(".debug_str"), lineStrings: bytes(".debug_line_str"),
                               stringOffsets: bytes(".debug_str_offsets"), addresses: bytes(".debug_addr"),
                               ranges: bytes(".debug_ranges"), rangeLists: bytes(".debug_rnglists"),
                               lineTable: lineTable)
    }

    /// The C fixture: three always-inline levels inside a noinline function, the
    /// innermost ending in a trap (and, on another path, a store through the pointer).
    static let cSource = """
        volatile int sink;

        static inline __attribute__((always_inline)) void level3(int *p, int v) {
            if (v > 1000)
                sink = v;
            if (v == 7)
                __builtin_trap();
            *p = v;
        }

        static inline __attribute__((always_inline)) void level2(int *p, int v) {
            for (int i = 0; i < v; i++)
                sink += i;
            level3(p, v + 1);
        }

        static inline __attribute__((always_inline)) void level1(int *p, int v) {
            level2(p, v * 2);
            sink = v;
            level2(p, v - 3);
        }

        __attribute__((noinline)) int outer(int *p, int v) {
            level1(p, v);
            return v;
        }

        int main(int argc, char **argv) {
            (void)argv;
            return outer(argc > 5 ? 0 : (int *)&sink, argc);
        }

        """

    /// Builds the C fixture with `flags` into `directory`; returns the program's path.
    static func buildC(in directory: TemporaryDirectory, flags: [String], compiler: String = "clang",
                       source: String = cSource, name: String = "inline") throws -> String {
        let extensionName = compiler == "clang++" ? "cpp" : "c"
        let sourcePath = directory.appending("\(name).\(extensionName)")
        try Data(source.utf8).write(to: URL(fileURLWithPath: sourcePath))
        let program = directory.appending(name)
        _ = try run([try toolchain() + "/" + compiler, "-O2", "-g"] + flags + ["-o", program, sourcePath],
                    directory: directory.path)
        return program
    }

    /// The Swift fixture: an arithmetic overflow and a force unwrap of nil on runtime values.
    static let swiftSource = """
        @inline(never)
        func addBig(_ x: Int) -> Int {
            let y = x + Int.max
            return y
        }

        @inline(never)
        func unwrapTwice(_ x: Int?) -> Int {
            return x! * 3
        }

        @inline(never)
        func scaled(_ values: [Int], by factor: Int) -> [Int] {
            // A local function: its DIE is nested in scaled's, its code lies elsewhere.
            @inline(never) func scale(_ v: Int) -> Int { v &* factor + addBig(v) }
            return values.map { scale($0) + 1 }
        }

        let n = CommandLine.arguments.count
        print(addBig(n))
        print(unwrapTwice(n > 5 ? n : nil))
        print(scaled([n, n + 1], by: n))

        """

    /// Builds the Swift fixture with `swiftc -O -g` and `flags`; returns the program's path.
    static func buildSwift(in directory: TemporaryDirectory, flags: [String]) throws -> String {
        let sourcePath = directory.appending("main.swift")
        try Data(swiftSource.utf8).write(to: URL(fileURLWithPath: sourcePath))
        let program = directory.appending("fixture")
        _ = try run([try toolchain() + "/swiftc", "-O", "-g", "-module-name", "fixture"] + flags
                    + ["-o", program, sourcePath], directory: directory.path)
        return program
    }

    /// Section copies of `file`.
    static func sections(of file: String) throws -> [String: [UInt8]] {
        let image = try #require(ELFImage(path: file))
        var result: [String: [UInt8]] = [:]
        for name in sectionNames {
            if let bytes = image.sectionBytes(named: name) { result[name] = Array(bytes.bytes) }
        }
        return result
    }
}

/// `DWARFInlineInfo` against llvm-symbolizer, and on damaged sections.
@Suite struct DWARFInlineTests {
    /// Every byte of the C fixture's functions, and its trap in particular, as llvm-symbolizer.
    @Test(arguments: [["-gdwarf-4"], ["-gdwarf-5"], ["-gdwarf-4", "-gdwarf64"], ["-gdwarf-5", "-gdwarf64"]])
    func matchesLLVMSymbolizerOnC(flags: [String]) throws {
        let directory = try TemporaryDirectory("cairn-inline")
        let program = try InlineFixture.buildC(in: directory, flags: flags)
        let functions = try InlineFixture.functions(in: program)
        let outer = try #require(functions.first { $0.name == "outer" })

        let traps = try InlineFixture.traps(in: program, start: outer.address, size: outer.size)
        try #require(!traps.isEmpty, "no ud2 in outer")
        let info = try InlineFixture.inlineInfo(program)
        let oracle = try InlineFixture.oracle(program, traps)
        for (trap, expected) in zip(traps, oracle) {
            let ours = info.frames(for: trap)
            #expect(InlineFixture.difference(ours, expected, at: trap) == nil)
            // The oracle itself must show the three inlined levels, so this test tests something.
            #expect(expected.map(\.name) == ["level3", "level2", "level1", "outer"], "\(expected)")
            #expect(ours?.map(\.isInlined) == [true, true, true, false])
        }

        let result = try InlineFixture.compareEveryByte(of: program, functions: functions)
        #expect(result.differences.isEmpty, "\(result.differences.count) of \(result.compared) differ: \(result.differences.prefix(8))")
        #expect(result.inlined >= 10, "only \(result.inlined) addresses inside inlined code")
    }

    /// C++ names: linkage names found through DW_AT_abstract_origin and DW_AT_specification.
    @Test func matchesLLVMSymbolizerOnCxx() throws {
        let directory = try TemporaryDirectory("cairn-inline")
        let source = """
            namespace shop {
            struct Cart {
                int *slots;
                int count;
                inline __attribute__((always_inline)) void put(int v) {
                    if (v == 7)
                        __builtin_trap();
                    slots[count++] = v;
                }
                template <typename T> inline __attribute__((always_inline)) void putAll(T first, T second) {
                    put(int(first));
                    put(int(second));
                }
            };
            }

            __attribute__((noinline)) int fill(shop::Cart &cart, int v) {
                cart.putAll<long>(v, v + 1);
                return cart.count;
            }

            int main(int argc, char **) {
                int slots[4];
                shop::Cart cart{slots, 0};
                return fill(cart, argc);
            }

            """
        for flags in [["-gdwarf-4"], ["-gdwarf-5"]] {
            let program = try InlineFixture.buildC(in: directory, flags: flags, compiler: "clang++", source: source,
                                                   name: "cart\(flags[0].suffix(1))")
            let functions = try InlineFixture.functions(in: program)
            let fill = try #require(functions.first { $0.name.contains("fill") })
            let result = try InlineFixture.compareEveryByte(of: program, functions: [fill])
            #expect(result.differences.isEmpty, "\(flags): \(result.differences.prefix(8))")
            #expect(result.inlined >= 4, "\(flags): only \(result.inlined) addresses inside inlined code")

            let traps = try InlineFixture.traps(in: program, start: fill.address, size: fill.size)
            let trap = try #require(traps.first)
            let chain = try #require(try InlineFixture.inlineInfo(program).frames(for: trap))
            #expect(chain.first?.name?.hasPrefix("_ZN4shop4Cart3put") == true, "\(chain)")
        }
    }

    /// With LTO, an inlined function's abstract DIE lies in another unit (DW_FORM_ref_addr).
    @Test func followsReferencesAcrossUnits() throws {
        let directory = try TemporaryDirectory("cairn-inline")
        let toolchain = try InlineFixture.toolchain()
        try Data("""
            __attribute__((always_inline)) void helper(int *p, int v) {
                if (v == 7)
                    __builtin_trap();
                *p = v;
            }

            """.utf8).write(to: URL(fileURLWithPath: directory.appending("a.c")))
        try Data("""
            void helper(int *p, int v);
            int slot;

            __attribute__((noinline)) int caller(int *p, int v) {
                helper(p, v + 1);
                return v;
            }

            int main(int argc, char **argv) {
                (void)argv;
                return caller(argc > 5 ? 0 : &slot, argc);
            }

            """.utf8).write(to: URL(fileURLWithPath: directory.appending("b.c")))
        let program = directory.appending("lto")
        _ = try InlineFixture.run([toolchain + "/clang", "-O2", "-g", "-flto", "-fuse-ld=lld", "-o", program,
                                   directory.appending("a.c"), directory.appending("b.c")], directory: directory.path)
        // The reference really crosses units (else this test would test nothing new).
        let dump = try InlineFixture.run(["readelf", "--debug-dump=info", program])
        #expect(dump.components(separatedBy: "Compilation Unit @").count - 1 >= 2)
        #expect(try InlineFixture.run(["readelf", "--debug-dump=abbrev", program]).contains("DW_FORM_ref_addr"))

        let functions = try InlineFixture.functions(in: program)
        let caller = try #require(functions.first { $0.name == "caller" })
        let result = try InlineFixture.compareEveryByte(of: program, functions: [caller])
        #expect(result.differences.isEmpty, "\(result.differences.prefix(8))")
        let trap = try #require(try InlineFixture.traps(in: program, start: caller.address, size: caller.size).first)
        let chain = try #require(try InlineFixture.inlineInfo(program).frames(for: trap))
        #expect(chain.map(\.name) == ["helper", "caller"], "\(chain)")
    }

    /// Swift's runtime failures are inlined pseudo-functions: the trap's innermost level
    /// names the failure, the next is the user's function with the failing line.
    @Test(arguments: [[String](), ["-dwarf-version=5"]])
    func namesSwiftRuntimeFailures(flags: [String]) throws {
        let directory = try TemporaryDirectory("cairn-inline")
        let program = try InlineFixture.buildSwift(in: directory, flags: flags)
        let functions = try InlineFixture.functions(in: program)
        let info = try InlineFixture.inlineInfo(program)
        var failures: Set<String> = []
        for needle in ["6addBig", "11unwrapTwice"] {
            let function = try #require(functions.first { $0.name.contains(needle) }, "no \(needle)")
            let traps = try InlineFixture.traps(in: program, start: function.address, size: function.size)
            try #require(!traps.isEmpty, "no ud2 in \(function.name)")
            let oracle = try InlineFixture.oracle(program, traps)
            for (trap, expected) in zip(traps, oracle) {
                let ours = try #require(info.frames(for: trap), "nothing at 0x\(String(trap, radix: 16))")
                try #require(ours.count >= 2 && expected.count >= 2, "\(ours) vs \(expected)")
                #expect(ours[0].name == expected[0].name, "\(ours) vs \(expected)")
                #expect(ours[0].name?.hasPrefix("Swift runtime failure: ") == true, "\(ours)")
                #expect(ours[0].isInlined)
                #expect(ours[1].name == function.name && expected[1].name == function.name, "\(ours) vs \(expected)")
                #expect(InlineFixture.basename(ours[1].file) == InlineFixture.basename(expected[1].file)
                        && InlineFixture.basename(ours[1].file) == "main.swift", "\(ours) vs \(expected)")
                #expect(ours[1].line == expected[1].line && ours[1].column == expected[1].column,
                        "\(ours) vs \(expected)")
                #expect(InlineFixture.difference(ours, expected, at: trap) == nil)
                if let name = ours[0].name { failures.insert(name) }
            }
        }
        #expect(failures.contains("Swift runtime failure: arithmetic overflow"), "\(failures)")
        #expect(failures.contains("Swift runtime failure: Unexpectedly found nil while unwrapping an Optional value"),
                "\(failures)")

        // And every byte of every function of the program.
        let result = try InlineFixture.compareEveryByte(of: program, functions: functions)
        #expect(result.differences.isEmpty, "\(result.differences.count) of \(result.compared) differ: \(result.differences.prefix(8))")
        #expect(result.inlined >= 4)

        // The local function, whose DIE sits inside its parent's, is found by its own range.
        let local = try #require(functions.first { $0.name.contains("5scaleL_") }, "no local function scale")
        let chain = try #require(info.frames(for: local.address + local.size / 2))
        #expect(chain.last?.name == local.name && chain.last?.isInlined == false, "\(chain)")
    }

    /// Addresses outside any unit give nil; a reader without sections gives nil.
    @Test func answersNilWithoutCoveringUnit() throws {
        let directory = try TemporaryDirectory("cairn-inline")
        let program = try InlineFixture.buildC(in: directory, flags: ["-gdwarf-5"])
        let info = try InlineFixture.inlineInfo(program)
        #expect(info.frames(for: 0) == nil)
        #expect(info.frames(for: UInt64.max) == nil)
        let empty = DWARFInlineInfo(info: nil, abbrev: nil, strings: nil, lineStrings: nil, stringOffsets: nil,
                                    addresses: nil, ranges: nil, rangeLists: nil, lineTable: nil)
        let outer = try #require(try InlineFixture.functions(in: program).first { $0.name == "outer" })
        #expect(empty.frames(for: outer.address) == nil)
        #expect(info.frames(for: outer.address) != nil)
    }

    /// Truncated and corrupted debug sections: no trap, and nil or a chain at every address.
    @Test(arguments: ["c-dwarf5", "c-dwarf4-64", "swift"])
    func survivesDamagedSections(fixture: String) throws {
        let directory = try TemporaryDirectory("cairn-inline")
        let program: String
        switch fixture {
        case "c-dwarf5": program = try InlineFixture.buildC(in: directory, flags: ["-gdwarf-5"])
        case "c-dwarf4-64": program = try InlineFixture.buildC(in: directory, flags: ["-gdwarf-4", "-gdwarf64"])
        default: program = try InlineFixture.buildSwift(in: directory, flags: [])
        }
        let image = try #require(ELFImage(path: program))
        let lineTable = InlineFixture.lineTable(image)
        let original = try InlineFixture.sections(of: program)
        let info = try #require(original[".debug_info"])
        let abbrev = try #require(original[".debug_abbrev"])

        // Probes: up to 160 addresses spread over the fixture's own functions (so that
        // each damaged copy is asked about several units' and functions' DIEs), and some
        // addresses that no unit covers.
        let functions = try InlineFixture.functions(in: program)
            .filter { ["outer", "main"].contains($0.name) || $0.name.hasPrefix("$s7fixture") }
        let bytes = functions.flatMap { function in (0..<function.size).map { function.address + $0 } }
        var probes = stride(from: 0, to: bytes.count, by: max(1, bytes.count / 160)).map { bytes[$0] }
        probes += [0, 1, UInt64.max, UInt64.max - 1, 0x8000_0000_0000_0000]
        let undamaged = InlineFixture.inlineInfo(original, lineTable: lineTable)
        let deepest = probes.compactMap { undamaged.frames(for: $0)?.count }.max() ?? 0
        #expect(deepest >= 2, "the undamaged fixture has no inlined code to damage")

        var variants: [[String: [UInt8]]] = []
        // Truncations of .debug_info and .debug_abbrev: everywhere at first, then spread out.
        for (name, bytes) in [(".debug_info", info), (".debug_abbrev", abbrev)] {
            var cuts = Array(0..<min(bytes.count, 48))
            cuts += stride(from: 48, to: bytes.count, by: max(1, bytes.count / 150))
            for cut in cuts {
                var sections = original
                sections[name] = Array(bytes[..<cut])
                variants.append(sections)
            }
        }
        // Random corruptions, mostly of .debug_info and .debug_abbrev, also of the tables they index.
        var random = SplitMix(seed: 0xD1E_1A5E)
        let targets = [".debug_info", ".debug_info", ".debug_info", ".debug_abbrev", ".debug_abbrev",
                       ".debug_str_offsets", ".debug_addr", ".debug_rnglists", ".debug_ranges"]
        for variant in 0..<300 {
            let name = targets[variant % targets.count]
            guard var bytes = original[name], !bytes.isEmpty else { continue }
            for _ in 0..<Int.random(in: 1...12, using: &random) {
                let offset = Int.random(in: 0..<bytes.count, using: &random)
                if variant % 3 == 0 {
                    bytes[offset] = [0x00, 0xff, 0x7f, 0x80, 0x01][Int.random(in: 0..<5, using: &random)]
                } else {
                    bytes[offset] ^= UInt8.random(in: 1...255, using: &random)
                }
            }
            var sections = original
            sections[name] = bytes
            variants.append(sections)
        }
        #expect(variants.count >= 300)

        var chains = 0
        for sections in variants {
            let damaged = InlineFixture.inlineInfo(sections, lineTable: lineTable)
            for probe in probes {
                guard let frames = damaged.frames(for: probe) else { continue }
                #expect(!frames.isEmpty && frames.count <= 257)
                #expect(frames.dropLast().allSatisfy { $0.isInlined })
                if frames.count > 1 { chains += 1 }
            }
        }
        // Many damaged copies still describe some inlined code.
        #expect(chains > 0)
    }
}
