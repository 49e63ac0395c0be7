import CairnBase
import CairnProcessor
import CairnTestSupport
import Foundation
import Testing

/// The stable hash against published FNV-1a vectors and a second implementation (Python),
/// and the sampler's decisions against the documented rule.
@Suite struct SamplingTests {
    /// The documented hash of each input, computed by Python from the bytes the
    /// documentation specifies (the parts' UTF-8 joined with 0x1F): FNV-1a 64, then
    /// fmix64. A second implementation, so the definition is what the code does.
    static func pythonFNV(_ inputs: [[UInt8]]) throws -> [UInt64] {
        let script = """
        import sys
        for arg in sys.argv[1:]:
            h = 0xcbf29ce484222325
            for b in bytes.fromhex(arg):
                h = ((h ^ b) * 0x100000001b3) & 0xffffffffffffffff
            h ^= h >> 33
            h = (h * 0xff51afd7ed558ccd) & 0xffffffffffffffff
            h ^= h >> 33
            h = (h * 0xc4ceb9fe1a85ec53) & 0xffffffffffffffff
            h ^= h >> 33
            print(h)
        """
        let python = try runToEnd("/usr/bin/env", ["python3", "-c", script]
            + inputs.map { bytes in bytes.map { String(format: "%02x", $0) }.joined() })
        #expect(python.status == 0, "\(python.err)")
        return python.out.split(separator: "\n").compactMap { UInt64($0) }
    }

    /// MurmurHash3's fmix64, written out again here.
    static func fmix64(_ x: UInt64) -> UInt64 {
        let a = (x ^ (x >> 33)) &* 0xff51_afd7_ed55_8ccd
        let b = (a ^ (a >> 33)) &* 0xc4ce_b9fe_1a85_ec53
        return b ^ (b >> 33)
    }

    /// FNV-1a's published test vectors, through the finalizer.
    @Test func publishedVectors() {
        #expect(StableHash.hash64("") == Self.fmix64(0xcbf2_9ce4_8422_2325))
        #expect(StableHash.hash64("a") == Self.fmix64(0xaf63_dc4c_8601_ec8c))
        #expect(StableHash.hash64("foobar") == Self.fmix64(0x8594_4171_f739_67e8))
        #expect(StableHash.hash64(parts: []) == Self.fmix64(0xcbf2_9ce4_8422_2325))
        #expect(Self.fmix64(0) == 0)
    }

    @Test func agreesWithPython() throws {
        let cases: [[String]] = [
            ["user-1", "checkout", "20454"],
            ["", ""],
            ["a"],
            ["ab", "c"],
            ["a", "bc"],
            ["héllo wörld", "😀", "-3"],
            ["x", "", "", "y"],
            [String(repeating: "long text ", count: 50)],
        ]
        let expected = try Self.pythonFNV(cases.map { Array($0.joined(separator: "\u{1F}").utf8) })
        #expect(expected.count == cases.count)
        for (parts, value) in zip(cases, expected) {
            #expect(StableHash.hash64(parts: parts) == value, "\(parts)")
        }
    }

    @Test func separatorsKeepPartsApart() {
        #expect(StableHash.hash64("ab", "c") != StableHash.hash64("a", "bc"))
        #expect(StableHash.hash64("a", "") != StableHash.hash64("a"))
        #expect(StableHash.hash64("a", "b") == StableHash.hash64("a\u{1F}b"))
        #expect(StableHash.hash64("p", "q", "r") == StableHash.hash64(parts: ["p", "q", "r"]))
        #expect(StableHash.hash64("p", "q") == StableHash.hash64("p", "q"))
    }

    /// The documented rule, computed the slow way: join the parts, compare with rate × 2^64.
    static func reference(_ id: String, _ name: String, _ day: Int64, rate: Double) -> Bool {
        if rate >= 1 { return true }
        let limit = UInt64(rate * 18_446_744_073_709_551_616.0)
        return StableHash.hash64(parts: [id, name, String(day)]) < limit
    }

    @Test(arguments: [0.0, 0.25, 0.5, 0.999])
    func decisionFollowsDocumentedRule(rate: Double) {
        let sampler = Sampler(options: SamplingOptions(rate: rate))
        for i in 0..<2_000 {
            let day: Int64 = [0, 7, 20_454, -1, -20_000, Int64.max, Int64.min][i % 7]
            let id = "id-\(i)", name = i % 2 == 0 ? "view" : "événement"
            #expect(sampler.keep(distinctID: id, eventName: name, tier: .sampled, isError: false, day: day)
                == Self.reference(id, name, day, rate: rate), "\(id) \(day)")
        }
    }

    static func keptFraction(_ sampler: Sampler, tier: Tier = .sampled, name: String = "view",
                             isError: Bool = false, day: Int64 = 20_454, count: Int = 100_000) -> Double {
        var kept = 0
        for i in 0..<count where sampler.keep(distinctID: "user-\(i)", eventName: name, tier: tier,
                                              isError: isError, day: day) {
            kept += 1
        }
        return Double(kept) / Double(count)
    }

    @Test(arguments: [0.0, 0.25, 1.0])
    func keptFractionMatchesRate(rate: Double) {
        let fraction = Self.keptFraction(Sampler(options: SamplingOptions(rate: rate)))
        #expect(abs(fraction - rate) <= 0.015, "kept \(fraction) at rate \(rate)")
    }

    @Test func sameInputsSameDecision() {
        let a = Sampler(options: SamplingOptions(rate: 0.5))
        let b = Sampler(options: SamplingOptions(rate: 0.5))
        for i in 0..<1_000 {
            let first = a.keep(distinctID: "u\(i)", eventName: "e", tier: .sampled, isError: false, day: 1)
            #expect(a.keep(distinctID: "u\(i)", eventName: "e", tier: .sampled, isError: false, day: 1) == first)
            #expect(b.keep(distinctID: "u\(i)", eventName: "e", tier: .sampled, isError: false, day: 1) == first)
        }
    }

    @Test func eventRateWinsOverTierRate() {
        let sampler = Sampler(options: SamplingOptions(
            rate: 0, tierRates: [.important: 0, .debug: 1], eventRates: ["checkout": 1, "noise": 0]))
        #expect(Self.keptFraction(sampler, name: "checkout") == 1)
        #expect(Self.keptFraction(sampler, tier: .important, name: "checkout") == 1)
        #expect(Self.keptFraction(sampler, tier: .debug, name: "noise") == 0)
        #expect(Self.keptFraction(sampler, name: "other") == 0)
        #expect(sampler.rate(eventName: "checkout", tier: .sampled) == 1)
        #expect(sampler.rate(eventName: "other", tier: .important) == 0)
    }

    /// Many per-event rates are kept in a table rather than a short list; same answers.
    @Test func manyEventRates() {
        var rates: [String: Double] = [:]
        for i in 0..<40 { rates["event_\(i)"] = Double(i) / 40 }
        let sampler = Sampler(options: SamplingOptions(rate: 0.9, eventRates: rates))
        for i in 0..<40 {
            #expect(sampler.rate(eventName: "event_\(i)", tier: .sampled) == Double(i) / 40)
        }
        #expect(sampler.rate(eventName: "event_40", tier: .sampled) == 0.9)
        #expect(Self.keptFraction(sampler, name: "event_0", count: 1_000) == 0)
    }

    @Test func errorsAreKeptUnlessTurnedOff() {
        let keeping = Sampler(options: SamplingOptions(rate: 0, eventRates: ["failure": 0]))
        #expect(Self.keptFraction(keeping, name: "failure", isError: true, count: 1_000) == 1)
        let dropping = Sampler(options: SamplingOptions(rate: 0, eventRates: ["failure": 0], keepErrors: false))
        #expect(Self.keptFraction(dropping, name: "failure", isError: true, count: 1_000) == 0)
    }

    @Test func criticalIsNeverSampled() {
        let sampler = Sampler(options: SamplingOptions(
            rate: 0, tierRates: [.critical: 0, .important: 0, .sampled: 0, .debug: 0],
            eventRates: ["crash": 0], keepErrors: false))
        #expect(Self.keptFraction(sampler, tier: .critical, name: "crash", count: 1_000) == 1)
        #expect(sampler.rate(eventName: "crash", tier: .critical) == 1)
        #expect(Self.keptFraction(sampler, tier: .important, name: "crash", count: 1_000) == 0)
    }

    @Test func differentDaysResample() {
        let sampler = Sampler(options: SamplingOptions(rate: 0.5))
        var differ = 0
        let count = 10_000
        for i in 0..<count {
            let monday = sampler.keep(distinctID: "u\(i)", eventName: "e", tier: .sampled, isError: false, day: 20_454)
            let tuesday = sampler.keep(distinctID: "u\(i)", eventName: "e", tier: .sampled, isError: false, day: 20_455)
            if monday != tuesday { differ += 1 }
        }
        // Independent decisions at rate 0.5 differ half the time.
        #expect(abs(Double(differ) / Double(count) - 0.5) < 0.03, "\(differ) of \(count) differ")
    }

    @Test func ratesAreClampedAndCombined() {
        let sampler = Sampler(options: SamplingOptions(
            rate: 0.5, tierRates: [.sampled: 0.2, .important: 7, .debug: -1],
            eventRates: ["nan": .nan, "neg": -0.5, "big": .infinity]))
        #expect(sampler.rate(eventName: "x", tier: .sampled) == 0.2)
        #expect(sampler.rate(eventName: "x", tier: .important) == 1)
        #expect(sampler.rate(eventName: "x", tier: .debug) == 0)
        #expect(sampler.rate(eventName: "nan", tier: .debug) == 1)
        #expect(sampler.rate(eventName: "neg", tier: .important) == 0)
        #expect(sampler.rate(eventName: "big", tier: .debug) == 1)
        let rateOnly = Sampler(options: SamplingOptions(rate: 0.3))
        #expect(rateOnly.rate(eventName: "x", tier: .sampled) == 0.3)
        #expect(rateOnly.rate(eventName: "x", tier: .debug) == 1)
        let missingTier = Sampler(options: SamplingOptions(tierRates: [:]))
        #expect(missingTier.rate(eventName: "x", tier: .debug) == 1)
    }

    // MARK: What the decision is keyed on

    static func limit(_ rate: Double) -> UInt64 { UInt64(rate * 18_446_744_073_709_551_616.0) }

    /// Keyed on the event: the documented bytes are the `event_id` text, so a collector
    /// can check a decision from what it receives.
    @Test(arguments: [0.0, 0.3, 0.5, 0.999])
    func eventKeyedDecisionIsTheHashOfTheEventID(rate: Double) {
        let sampler = Sampler(options: SamplingOptions(rate: rate))
        let ids = EventIDGenerator()
        for i in 0..<2_000 {
            let id = ids.next(millis: 1_764_000_000_000 + UInt64(i))
            let text = EventIDGenerator.text(id)
            #expect(sampler.keep(eventID: id, eventName: "view", tier: .sampled, isError: false)
                == (rate > 0 && StableHash.hash64(text) < Self.limit(rate)), "\(text)")
        }
    }

    /// Keyed on the trace: the hash of its 32 hex digits, the same in every service.
    @Test(arguments: [0.0, 0.3, 0.5, 0.999])
    func traceKeyedDecisionIsTheHashOfTheTraceID(rate: Double) {
        let sampler = Sampler(options: SamplingOptions(rate: rate))
        for _ in 0..<2_000 {
            let trace = TraceID.random()
            #expect(sampler.keep(traceID: trace, eventName: "view", tier: .sampled, isError: false)
                == (rate > 0 && StableHash.hash64(trace.description) < Self.limit(rate)), "\(trace)")
        }
    }

    static func hostEvent(_ i: Int, span: SpanContext? = nil, identityGiven: Bool = false,
                          distinctID: String = "host-1") -> Event {
        Event(name: "request_handled", properties: ["i": .int(Int64(i))], timeMillis: 1_764_000_000_000 + UInt64(i),
              identity: Identity(distinctID: distinctID), span: span, identityGiven: identityGiven)
    }

    /// One host, its name as every event's distinct id (a service's default), rate 0.5:
    /// about half of its events are kept, not all or nothing; each kept event's
    /// `event_id` is the one the decision hashed.
    @Test func oneHostAtHalfRateKeepsAboutHalf() throws {
        let processor = Processor(options: ProcessorOptions(sampling: SamplingOptions(rate: 0.5)))
        var kept = 0
        for i in 0..<4_000 {
            var event = Self.hostEvent(i)
            guard processor.admit(&event) == nil else {
                #expect(event.id != nil, "the id the decision was made on")
                continue
            }
            kept += 1
            let record = processor.record(event)
            let object = try #require(try JSONSerialization.jsonObject(with: Data(record)) as? [String: Any])
            let eventID = try #require(object["event_id"] as? String)
            #expect(eventID == EventIDGenerator.text(try #require(event.id)))
            #expect(StableHash.hash64(eventID) < Self.limit(0.5))
        }
        #expect(abs(Double(kept) / 4_000 - 0.5) < 0.04, "kept \(kept) of 4000")
    }

    /// Inside a span, a trace's events go together: each trace is kept or dropped whole,
    /// and about half of the traces are kept.
    @Test func tracesAreKeptOrDroppedWhole() {
        let processor = Processor(options: ProcessorOptions(sampling: SamplingOptions(rate: 0.5)))
        var keptTraces = 0
        for _ in 0..<1_000 {
            let trace = TraceID.random()
            let decisions = (0..<5).map { i in
                var event = Self.hostEvent(i, span: SpanContext(traceID: trace, spanID: .random()))
                return processor.admit(&event) == nil
            }
            #expect(Set(decisions).count == 1, "a trace is kept or dropped whole")
            if decisions[0] { keptTraces += 1 }
        }
        #expect(abs(Double(keptTraces) / 1_000 - 0.5) < 0.06, "kept \(keptTraces) of 1000 traces")
    }

    /// An identity given with the call keeps the user rule: (distinct id, name, day).
    @Test func aGivenIdentityKeysOnTheUserAndDay() {
        let processor = Processor(options: ProcessorOptions(sampling: SamplingOptions(rate: 0.5)))
        let sampler = Sampler(options: SamplingOptions(rate: 0.5))
        for u in 0..<500 {
            var event = Self.hostEvent(0, identityGiven: true, distinctID: "user-\(u)")
            let expected = sampler.keep(distinctID: "user-\(u)", eventName: "request_handled", tier: .sampled,
                                        isError: false, day: Int64(event.timeMillis / 86_400_000))
            #expect((processor.admit(&event) == nil) == expected)
            #expect(event.id == nil, "no id is drawn for it")
        }
    }

    @Test func tiersOrderByImportance() {
        #expect(Tier.critical < .important && Tier.important < .sampled && Tier.sampled < .debug)
        #expect([Tier.debug, .critical, .sampled, .important].sorted() == Tier.allCases)
        #expect(Tier(rawValue: "sampled") == .sampled)
    }
}
