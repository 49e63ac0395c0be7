@testable import Cairn
import CairnCrash
import CCairnCrash
import CCairnHTTP
import CairnTestSupport
import CairnUploader
import Glibc
import Foundation
import Testing

/// The code of Cairn's libraries that ran once is not kept resident: a service that
/// tracked a few events and flushed them (zstd framed them into the store) has most of
/// libzstd's code mapped; once its start has settled (2.5 s after it is ready, again
/// at 3.5 s and 10 s, then every 5 minutes), Cairn's background thread unmaps those
/// pages, and an idle service does not map them back. What came back between two
/// releases gets a mapping per page at the second.
@Suite struct LibraryPagesTests {
    @Test func anIdleServiceDoesNotKeepItsLibrariesCodeResident() throws {
        let directory = try TemporaryDirectory("cairn-pages")
        // 4.5 s: after the release at 3.5 s, with time to spare for a busy machine.
        let env = ["CAIRN_APP_ID": "pages", "CAIRN_DATA_DIR": directory.path, "CAIRN_TEST_PAUSE_MS": "4500"]
        let r = try ServiceProcessTests.child(["pages", "20"], env: env)
        #expect(r.status == 0, "\(r.err)")
        func kb(_ tag: String) -> Int? {
            r.out.first { $0.hasPrefix(tag + " ") }.flatMap { Int($0.dropFirst(tag.count + 1)) }
        }
        let early = try #require(kb("EARLY"), "\(r.out)")
        let late = try #require(kb("LATE"), "\(r.out)")
        // Framing touched a good part of libzstd's code (about 380 KiB of 644 here)...
        #expect(early >= 128, "resident after the flush: \(early) KiB")
        // ...which is let go once the start has settled, and an idle service keeps it so.
        #expect(late * 4 <= early, "resident when idle: \(late) KiB (after the flush: \(early) KiB)")
        // Cairn's own code, in the executable, likewise: the start and the flush ran most
        // of it; what an idle service's passes run comes back (the kernel maps the 64 KiB
        // around each page touched).
        let earlyOwn = try #require(kb("EARLY_OWN"), "\(r.out)")
        let lateOwn = try #require(kb("LATE_OWN"), "\(r.out)")
        // (Here, debug: about 2.6 MiB after the flush, 0.9-1.1 MiB when idle; 1.7-1.9 MiB
        // before what came back was mapped page by page.)
        #expect(lateOwn + 384 <= earlyOwn, "Cairn's code resident when idle: \(lateOwn) KiB (after the flush: \(earlyOwn) KiB)")
        // The code that ran again after the release at 2.5 s (the background thread's own,
        // the idle passes') is split into a mapping per page at 3.5 s: the child waits
        // for that up to 10 s (a busy machine delays the releases).
        let earlyMappings = try #require(kb("EARLY_OWN_MAPPINGS"), "\(r.out)")
        let splitMappings = try #require(kb("SPLIT_OWN_MAPPINGS"), "\(r.out)")
        #expect(splitMappings >= earlyMappings + 16, "\(r.out)")
    }

    /// Which functions are Cairn's own, by their raw symbol names.
    @Test func cairnsOwnFunctionsAreToldByTheirNames() {
        func owner(_ name: String, file: String? = nil) -> CodeOwner {
            Array(name.utf8).withUnsafeBytes { name in
                guard let file else { return Cairn.codeOwner(name, file: nil) }
                return Array(file.utf8).withUnsafeBytes { Cairn.codeOwner(name, file: $0) }
            }
        }
        #expect(owner("$s14CairnProcessor0A5ValueO4jsonACSgSays5UInt8VG_tcfC") == .own)
        #expect(owner("$s5CairnAAC9startOnce33_7A25A25283BA058D39A8491C1F62FFBBLLyA2B7OptionsVAA0A10StartErrorOYKFZ") == .own)
        // The standard library's generic code specialised for a Cairn type is Cairn's.
        #expect(owner("$sSDsSQR_rlE2eeoiySbSDyxq_G_ABtFZSS_14CairnProcessor0B5ValueOTt1g5") == .own)
        // A module whose name merely contains one of Cairn's is not Cairn.
        #expect(owner("$s14CairnBenchHost03runaC06warmUps5NeverOSiyXE_tF") == .other)
        #expect(owner("$s15XCairnUploader1fyyF") == .other)
        #expect(owner("$s10Foundation4DataV5countSivg") == .other)
        // Generic code for the standard library's own types, and a file's static C
        // function, are anyone's.
        #expect(owner("$ss22_ContiguousArrayBufferV20_consumeAndCreateNewAByF") == .shared)
        #expect(owner("$sSa6append10contentsOfyqd___tSTRd__7ElementQyd__AARtzlF") == .shared)
        #expect(owner("read_proxy", file: "client.c") == .shared)
        // A static function of the crash or termination handler is never released.
        #expect(owner("crash_handler", file: "crash.c") == .other)
        #expect(owner("on_signal", file: "termination.c") == .other)
        #expect(owner("main") == .other)
        // The ring, framing and the HTTP client are released with Cairn's code; the
        // crash and termination handlers are never.
        #expect(owner("cairn_ring_append") == .own)
        #expect(owner("cairn_http_conn_send") == .own)
        #expect(owner("cairn_crash_install") == .other)
        #expect(owner("cairn__put64") == .other)
        #expect(owner("cairn_term_chain") == .other)
    }

    /// The ranges read from the symbol table of the file that holds Cairn's code (this
    /// test binary) hold Cairn's functions and not the crash handler's.
    @Test func theRangesOfCairnsCodeAreReadFromTheSymbolTable() throws {
        let file = try #require(HTTPTransport.ownCodeFile())
        let ranges = CodeRanges.functions(inFile: file.path, loadBias: file.bias, owner: Cairn.codeOwner)
        #expect(!ranges.isEmpty)
        #expect(zip(ranges, ranges.dropFirst()).allSatisfy { $0.upperBound <= $1.lowerBound })
        // The ring's code is in them, the crash handler's is not.
        typealias Append = @convention(c) (OpaquePointer?, UnsafeRawPointer?, Int) -> Int32
        let ring = unsafeBitCast(cairn_ring_append as Append, to: UInt.self)
        let ownObject = unsafeBitCast(cairn_http_own_object as @convention(c) (UnsafeMutablePointer<CChar>?, Int,
            UnsafeMutablePointer<UInt>?) -> Int32, to: UInt.self)
        #expect(ranges.contains { $0.contains(ring) })
        #expect(ranges.contains { $0.contains(ownObject) })
        #expect(!ranges.contains { $0.contains(unsafeBitCast(cairn_crash_warm_up as @convention(c) () -> Int32,
                                                             to: UInt.self)) })
        // A file that is not ELF gives none.
        #expect(CodeRanges.functions(inFile: "/proc/self/status", loadBias: 0, owner: Cairn.codeOwner).isEmpty)
    }
}
