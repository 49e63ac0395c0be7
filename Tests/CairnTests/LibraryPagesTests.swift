import CairnTestSupport
import Foundation
import Testing

/// The code of Cairn's libraries that ran once is not kept resident: a service that
/// tracked a few events and flushed them (zstd framed them into the store) has most of
/// libzstd's code mapped; once its start has settled (2.5 s after it is ready, again
/// at 10 s, then every 5 minutes), Cairn's background thread unmaps those pages, and an
/// idle service does not map them back.
@Suite struct LibraryPagesTests {
    @Test func anIdleServiceDoesNotKeepItsLibrariesCodeResident() throws {
        let directory = try TemporaryDirectory("cairn-pages")
        let env = ["CAIRN_APP_ID": "pages", "CAIRN_DATA_DIR": directory.path, "CAIRN_TEST_PAUSE_MS": "4000"]
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
    }
}
