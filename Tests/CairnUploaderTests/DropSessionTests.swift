import CairnBase
import CairnStore
import CairnTestSupport
@testable import CairnUploader
import Foundation
import Testing

/// `Cairn-Dropped-Sessions`: each request that reports drops says which session counted
/// them, across processes that share a ring file (a real ring closed and opened again, a
/// real store, the real collector).
@Suite(.serialized) struct DropSessionTests {
    static func options(_ collector: CollectorProcess, session: String) -> UploaderOptions {
        var o = UploaderTests.options(collector)
        o.sessionID = session
        return o
    }

    /// Session A counts 7 drops and ends before any request reports them (no events to
    /// send); session B counts 3 of its own and sends 250 events: its first request
    /// reports both, each under its session; drops B counts later go in a later request.
    @Test func dropsAreReportedWithTheSessionThatCountedThem() throws {
        let collector = try CollectorProcess()
        let box = try UploaderTests.Sandbox()
        do {
            let ring = try box.ring()
            let sampled = try #require(ring.dropSlot("sampled"))
            ring.countDrops(slot: sampled, 5)
            let a = Uploader(ring: ring, store: try box.store(), transport: HTTPTransport(),
                             options: Self.options(collector, session: "session-a"))
            a.start()
            ring.countDrops(slot: sampled, 2)
            #expect(a.flush(timeout: .seconds(10)))
            a.shutdown(timeout: .seconds(5))
            #expect(try collector.requests().isEmpty, "A had nothing to send")
        }
        let ring = try box.ring()
        let sampled = try #require(ring.dropSlot("sampled"))
        let filtered = try #require(ring.dropSlot("filtered"))
        #expect(ring.drops().first { $0.reason == "sampled" }?.countedAtOpen == 7)
        ring.countDrops(slot: sampled, 3)
        let options = Self.options(collector, session: "session-b")
        let b = Uploader(ring: ring, store: try box.store(), transport: HTTPTransport(),
                         options: options)
        for i in 0..<250 { try ring.append(UploaderTests.event(i)) }
        b.start()
        #expect(b.flush(timeout: .seconds(20)))
        ring.countDrops(slot: filtered, 4)
        // One more batch, after the first reports are taken.
        for i in 250..<260 { try ring.append(UploaderTests.event(i)) }
        #expect(b.flush(timeout: .seconds(20)))
        b.shutdown(timeout: .seconds(5))
        let reporting = try collector.requests().filter { !$0.headerValues("Cairn-Dropped").isEmpty }
            .sorted { $0.seq < $1.seq }
        #expect(reporting.map { $0.headerValues("Cairn-Dropped") } == [["sampled=10"], ["filtered=4"]])
        #expect(reporting.map { $0.headerValues("Cairn-Dropped-Sessions") }
                == [["session-a sampled=7;session-b sampled=3"], ["session-b filtered=4"]])
        #expect(ring.drops().allSatisfy { $0.unreported == 0 })
    }

    /// The chain as the store keeps it: read back, extended, pruned of sessions whose
    /// drops are all reported; forgotten when damaged or when the table's counters stand
    /// below it (a new ring file).
    @Test func chainIsKeptPrunedAndForgottenWhenItDoesNotFit() {
        func drop(_ reason: String, _ slot: Int32, counted: UInt64, reported: UInt64, atOpen: UInt64) -> Ring.Drop {
            Ring.Drop(slot: slot, reason: reason, counted: counted, reported: reported, countedAtOpen: atOpen)
        }
        let saved = Array("s1 sampled=2\ns2 filtered=1,sampled=5\n".utf8)
        // s1 counted sampled 2..5 and filtered 0..1, s2 sampled 5..9 and filtered 1..3;
        // s3 (now) from 9 and 3.
        var drops = [drop("sampled", 0, counted: 12, reported: 0, atOpen: 9), drop("filtered", 1, counted: 3, reported: 0, atOpen: 3)]
        let chain = DropSessions(saved: saved, session: "s3", drops: drops)
        #expect(chain.entries.map(\.session) == ["s1", "s2", "s3"])
        var shares = chain.unreported(drops)
        #expect(shares.map(\.session) == ["s1", "s2", "s3"])
        #expect(shares.map { $0.counts.map(\.count) } == [[5, 1], [4, 2], [3]], "s1 takes what came before it too")
        #expect(shares.map { $0.counts.map(\.upTo) } == [[5, 1], [9, 3], [12]])
        #expect(DropSessions.header(shares) == "s1 filtered=1,sampled=5;s2 filtered=2,sampled=4;s3 sampled=3")
        drops[0].reported = 9
        drops[1].reported = 3
        shares = chain.unreported(drops)
        #expect(shares.map(\.session) == ["s3"] && shares.first?.counts.map(\.count) == [3])
        var pruned = chain
        pruned.prune(drops)
        #expect(pruned.entries.map(\.session) == ["s3"])
        #expect(DropSessions.parse(pruned.text) == pruned.entries)

        // Damaged text, or counters below the chain (a new ring file): only this session.
        for bad in ["s1 sampled=x\n", "no-space-here\n", "s1 sampled=2 extra\n"] {
            #expect(DropSessions(saved: Array(bad.utf8), session: "s3", drops: drops).entries.map(\.session) == ["s3"])
        }
        let fresh = [drop("sampled", 0, counted: 1, reported: 0, atOpen: 1)]
        let forgotten = DropSessions(saved: saved, session: "s3", drops: fresh)
        #expect(forgotten.entries.map(\.session) == ["s3"])
        #expect(forgotten.unreported(fresh).map(\.session) == ["s3"])
    }
}
