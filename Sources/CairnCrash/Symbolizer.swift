// Symbolication of a crash report's addresses, on the next start, from the files on disk.
import CairnBase

#if canImport(Glibc)
import Glibc
#endif

/// A module of the crashed process, from the report.
package struct CrashModule: Sendable, Equatable {
    /// The file the module was loaded from.
    package var path: String
    /// The load bias (`dlpi_addr`): an address minus it is an ELF virtual address in the file.
    package var loadAddress: UInt64
    /// Start of the module's executable range (absolute).
    package var start: UInt64
    /// End of the module's executable range (absolute, exclusive).
    package var end: UInt64
    /// The GNU build id the process saw; empty when the module had none.
    package var buildID: [UInt8]

    /// Creates a module record.
    package init(path: String, loadAddress: UInt64, start: UInt64, end: UInt64, buildID: [UInt8]) {
        self.path = path
        self.loadAddress = loadAddress
        self.start = start
        self.end = end
        self.buildID = buildID
    }
}

/// One symbolicated frame.
package struct SymbolizedFrame: Sendable, Equatable {
    /// The address as in the report.
    package var address: UInt64
    /// The module path; nil when no module holds the address.
    package var module: String?
    /// The address minus the module's load address.
    package var moduleOffset: UInt64?
    /// The module's build id in lowercase hex.
    package var buildID: String?
    /// The function, demangled (Swift and C++), or the raw name when it is not mangled.
    package var symbol: String?
    /// The raw symbol-table name, when it differs from `symbol`.
    package var mangledSymbol: String?
    /// The looked-up address minus the symbol's start.
    package var symbolOffset: UInt64?
    /// The source file, from the DWARF line table.
    package var file: String?
    /// The source line.
    package var line: Int?
    /// The source column.
    package var column: Int?
    /// Why something is missing, e.g. "build id differs from file on disk", "module file missing", "no symbol".
    package var note: String?
    /// Whether this is a function the compiler inlined into the next frame (which has
    /// the same address): its code has no frame of its own on the stack, the debug
    /// information names it (``Symbolizer/symbolizeInlined(address:index:modules:)``).
    package var inlined = false
    /// Whether this is an async caller of the frame before it, found through the
    /// task's async context chain rather than on the machine stack: its address is
    /// where the function resumes (``CrashReport/asyncChains``), as the Swift
    /// runtime's backtracer shows `[async]` frames.
    package var isAsync = false

    /// Creates a frame that holds only its address.
    package init(address: UInt64) {
        self.address = address
    }
}

/// Symbolicates addresses against ELF files on disk; caches each opened file. Not
/// thread-safe (one instance per thread); releases mapped files in deinit.
///
/// ```swift
/// let symbolizer = Symbolizer()
/// let frames = report.addresses.enumerated().map { index, address in
///     symbolizer.symbolize(address: address, index: index, modules: report.modules)
/// }
/// ```
package final class Symbolizer {
    /// A module file opened once, with what was found for it.
    private final class LoadedFile {
        let image: ELFImage
        /// Separate debug information (`/usr/lib/debug/.build-id/…` or `.gnu_debuglink`).
        let debugImage: ELFImage?
        private var lineTableLoaded = false
        private var cachedLineTable: DWARFLineTable?
        private var inlineInfoLoaded = false
        private var cachedInlineInfo: DWARFInlineInfo?

        init(image: ELFImage, debugImage: ELFImage?) {
            self.image = image
            self.debugImage = debugImage
        }

        /// The file whose symbol table to search: a full `.symtab` wins over `.dynsym`.
        var symbolSource: ELFImage {
            if !image.hasSymtab, let debugImage, debugImage.hasSymtab { return debugImage }
            return image
        }

        /// The line table, parsed on first use.
        var lineTable: DWARFLineTable? {
            if lineTableLoaded { return cachedLineTable }
            lineTableLoaded = true
            let source = image.hasDebugLine ? image : debugImage
            if let source, let lines = source.sectionBytes(named: ".debug_line") {
                cachedLineTable = DWARFLineTable(lines: lines,
                                                 lineStrings: source.sectionBytes(named: ".debug_line_str"),
                                                 strings: source.sectionBytes(named: ".debug_str"))
            }
            return cachedLineTable
        }

        /// The inlined-subroutine information, read on first use from the file that has
        /// the debug information.
        var inlineInfo: DWARFInlineInfo? {
            if inlineInfoLoaded { return cachedInlineInfo }
            inlineInfoLoaded = true
            let source = image.hasDebugLine ? image : debugImage
            if let source, source.sectionBytes(named: ".debug_info") != nil {
                cachedInlineInfo = DWARFInlineInfo(image: source, lineTable: lineTable)
            }
            return cachedInlineInfo
        }
    }

    private enum CacheEntry {
        case loaded(LoadedFile)
        case missing
        case unreadable
    }

    private var files: [String: CacheEntry] = [:]
    private let debugDirectory: String

    /// Creates a symbolizer that looks for separate debug files under `/usr/lib/debug`.
    package convenience init() {
        self.init(debugDirectory: "/usr/lib/debug")
    }

    /// Creates a symbolizer that looks for separate debug files under `debugDirectory`.
    package init(debugDirectory: String) {
        self.debugDirectory = debugDirectory
    }

    /// Symbolicates one frame of a crash report.
    ///
    /// - Parameters:
    ///   - address: The frame's instruction address.
    ///   - index: The frame's position (0 = the faulting instruction, which is looked up as
    ///     is; others are return addresses, looked up at address − 1).
    ///   - modules: The report's module list.
    /// - Returns: What could be found; `note` says why something is missing.
    package func symbolize(address: UInt64, index: Int, modules: [CrashModule]) -> SymbolizedFrame {
        var frame = SymbolizedFrame(address: address)
        // A return address may sit just past the end of its module's code: the call does not.
        let lookup = index == 0 ? address : address &- 1
        guard let module = modules.first(where: { $0.start <= lookup && lookup < $0.end }) else {
            frame.note = "no module contains the address"
            return frame
        }
        frame.module = module.path
        frame.moduleOffset = address &- module.loadAddress
        if !module.buildID.isEmpty { frame.buildID = Hex.string(module.buildID) }

        let loaded: LoadedFile
        switch file(at: module.path) {
        case .missing:
            frame.note = "module file missing"
            return frame
        case .unreadable:
            frame.note = "module file is not a readable ELF64 little-endian file"
            return frame
        case .loaded(let file):
            loaded = file
        }
        if frame.buildID == nil, !loaded.image.buildID.isEmpty { frame.buildID = Hex.string(loaded.image.buildID) }
        if !module.buildID.isEmpty, module.buildID != loaded.image.buildID {
            frame.note = "build id differs from file on disk"
            return frame
        }

        let vaddr = lookup &- module.loadAddress
        if let (versioned, start) = loaded.symbolSource.symbol(containing: vaddr) {
            // Symbol tables of versioned libraries (and their debug files) may name
            // `__libc_start_main@@GLIBC_2.34`: the version is not part of the function.
            let name = versioned.firstIndex(of: "@").map { String(versioned[..<$0]) } ?? versioned
            let demangled = Self.demangle(name)
            frame.symbol = demangled
            frame.mangledSymbol = demangled == name ? nil : name
            frame.symbolOffset = vaddr &- start
        }
        if let location = loaded.lineTable?.location(for: vaddr) {
            frame.file = location.file
            frame.line = location.line == 0 ? nil : location.line
            frame.column = location.column == 0 ? nil : location.column
        }
        if frame.symbol == nil {
            frame.note = "no symbol"
        } else if frame.line == nil {
            frame.note = "no line information"
        }
        return frame
    }

    /// Symbolicates one frame of a crash report and expands it into the functions the
    /// compiler inlined at its address, innermost first, as the Swift runtime's
    /// backtracer and `llvm-symbolizer --inlining` show them: each inlined function is a
    /// frame of its own with the same address, marked ``SymbolizedFrame/inlined``, named
    /// from the debug information and placed at its line; the last frame is the
    /// out-of-line function, placed at the call into them. In a release build a
    /// runtime check's trap is an inlined `Swift runtime failure: …` frame.
    ///
    /// Without inline information (no `.debug_info`, or nothing inlined there), the one
    /// frame ``symbolize(address:index:modules:)`` gives.
    package func symbolizeInlined(address: UInt64, index: Int, modules: [CrashModule]) -> [SymbolizedFrame] {
        let frame = symbolize(address: address, index: index, modules: modules)
        let lookup = index == 0 ? address : address &- 1
        guard frame.module != nil, frame.note != "build id differs from file on disk",
              let path = frame.module, case .loaded(let loaded) = files[path] ?? .missing,
              let module = modules.first(where: { $0.start <= lookup && lookup < $0.end }),
              let chain = loaded.inlineInfo?.frames(for: lookup &- module.loadAddress), chain.count > 1
        else { return [frame] }
        return chain.enumerated().map { i, level in
            var f = frame
            f.file = level.file
            f.line = level.line == 0 ? nil : level.line
            f.column = level.column == 0 ? nil : level.column
            guard i < chain.count - 1 else {
                // The out-of-line function: the symbol table's name stands.
                if f.symbol == nil, let name = level.name { f.symbol = Self.demangle(name) }
                return f
            }
            f.inlined = true
            f.symbolOffset = nil
            f.symbol = level.name.map(Self.demangle)
            f.mangledSymbol = level.name.flatMap { $0 == f.symbol ? nil : $0 }
            f.note = f.symbol == nil ? "no symbol" : (f.line == nil ? "no line information" : nil)
            return f
        }
    }

    private func file(at path: String) -> CacheEntry {
        if let entry = files[path] { return entry }
        let entry: CacheEntry
        if path.isEmpty || access(path, F_OK) != 0 {
            entry = .missing
        } else if let image = ELFImage(path: path) {
            let debugImage = image.hasSymtab && image.hasDebugLine ? nil : separateDebugImage(for: image, path: path)
            entry = .loaded(LoadedFile(image: image, debugImage: debugImage))
        } else {
            entry = .unreadable
        }
        files[path] = entry
        return entry
    }

    /// Finds separate debug information by build id, then by `.gnu_debuglink` next to the
    /// file, in its `.debug` folder and under the debug directory. A candidate must carry
    /// the same build id when the file has one.
    private func separateDebugImage(for image: ELFImage, path: String) -> ELFImage? {
        var candidates: [String] = []
        if image.buildID.count >= 2 {
            let id = Hex.string(image.buildID)
            candidates.append("\(debugDirectory)/.build-id/\(id.prefix(2))/\(id.dropFirst(2)).debug")
        }
        if let link = image.debugLink, !link.contains("/") {
            let directory = path.split(separator: "/", omittingEmptySubsequences: false).dropLast()
                .joined(separator: "/")
            candidates += ["\(directory)/\(link)", "\(directory)/.debug/\(link)", "\(debugDirectory)\(directory)/\(link)"]
        }
        for candidate in candidates where candidate != path {
            guard let debugImage = ELFImage(path: candidate) else { continue }
            if image.buildID.isEmpty || debugImage.buildID == image.buildID { return debugImage }
        }
        return nil
    }

}
