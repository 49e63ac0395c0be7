import CairnBase
import CairnProcessor
import Foundation
import Testing

@Suite struct CairnValueTests {
    @Test func literalsReadNaturally() {
        let props: [String: CairnValue] = ["plan": "pro", "seats": 3, "ratio": 0.5, "trial": false, "tags": ["a", 1],
                                           "nested": ["k": nil]]
        #expect(props["plan"] == .string("pro") && props["seats"] == .int(3) && props["ratio"] == .double(0.5))
        #expect(props["trial"] == .bool(false) && props["tags"] == .array([.string("a"), .int(1)]))
        #expect(props["nested"] == .object(["k": .null]))
    }

    @Test func sanitizingInitConvertsUntypedValues() throws {
        let json = #"{"a":1,"b":1.5,"c":true,"d":null,"e":["x",{"y":2}],"f":"s"}"#
        let any = try JSONSerialization.jsonObject(with: Data(json.utf8))
        let v = CairnValue(sanitizing: any)
        #expect(v == .object(["a": .int(1), "b": .double(1.5), "c": .bool(true), "d": .null,
                              "e": .array([.string("x"), .object(["y": .int(2)])]), "f": .string("s")]))
        let missing: Int? = nil
        #expect(CairnValue(sanitizing: missing as Any) == .null)
        #expect(CairnValue(sanitizing: Optional(Optional(5)) as Any) == .int(5))
        #expect(CairnValue(sanitizing: UInt64.max) == .double(Double(UInt64.max)))
        struct Custom { var x = 1 }
        #expect(CairnValue(sanitizing: Custom()) == .string("Custom(x: 1)"))
        // Deep nesting stops at 32 levels instead of recursing without bound.
        var deep: Any = 1
        for _ in 0..<100 { deep = [deep] }
        var v2 = CairnValue(sanitizing: deep), depth = 0
        while case .array(let items) = v2, let first = items.first { v2 = first; depth += 1 }
        #expect(depth == 32 && v2 == .null)
    }

    // MARK: Hostile shapes: cycles, depth, sharing

    /// A `[CairnValue]` chain's length: how many single-element arrays or objects lead
    /// to the value returned with it.
    static func chain(_ value: CairnValue) -> (levels: Int, end: CairnValue) {
        var v = value, levels = 0
        while true {
            switch v {
            case .array(let items) where items.count == 1: v = items[0]
            case .object(let members) where members.count == 1:
                guard let only = members.values.first else { return (levels, v) }
                v = only
            default: return (levels, v)
            }
            levels += 1
        }
    }

    /// Frees a Swift chain one level at a time: releasing a 100,000-level value whole
    /// recurses once per level in deinit, on the test's own stack. Stops at the first
    /// Foundation container (those are torn down with `tearDown`).
    static func release(_ chain: inout Any?) {
        while let current = chain {
            let type = type(of: current)
            if type is NSArray.Type || type is NSDictionary.Type { break }
            if let items = current as? [Any] {
                chain = items.first
            } else if let members = current as? [String: Any] {
                chain = members.values.first
            } else {
                break
            }
        }
        chain = nil
    }

    /// Empties Foundation containers so they are freed one by one (and cycles leak nothing).
    static func tearDown(_ containers: [AnyObject]) {
        for c in containers {
            (c as? NSMutableArray)?.removeAllObjects()
            (c as? NSMutableDictionary)?.removeAllObjects()
        }
    }

    @Test func aContainerInsideItselfBecomesTheCycleMarker() {
        let array = NSMutableArray()
        array.add(1)
        array.add(array)
        let dictionary = NSMutableDictionary()
        dictionary["n"] = 2
        dictionary["self"] = dictionary
        defer { Self.tearDown([array, dictionary]) }

        var counts = RuleCounts()
        #expect(CairnValue(sanitizing: array, counts: &counts) == .array([.int(1), .string(CairnValue.cycleMarker)]))
        #expect(counts.cutCycles == 1)
        counts = RuleCounts()
        #expect(CairnValue(sanitizing: dictionary, counts: &counts)
                == .object(["n": .int(2), "self": .string(CairnValue.cycleMarker)]))
        #expect(counts.cutCycles == 1)
        // Inside Swift containers too.
        counts = RuleCounts()
        let wrapped: [String: Any] = ["a": array, "list": [dictionary, "x"]]
        #expect(CairnValue(sanitizing: wrapped, counts: &counts)
                == .object(["a": .array([.int(1), .string(CairnValue.cycleMarker)]),
                            "list": .array([.object(["n": .int(2), "self": .string(CairnValue.cycleMarker)]),
                                            .string("x")])]))
        #expect(counts.cutCycles == 2)
    }

    @Test func mutualCyclesAreCutWhereTheyClose() {
        let a = NSMutableArray(), d = NSMutableDictionary()
        a.add(d)
        d["back"] = a
        defer { Self.tearDown([a, d]) }
        var counts = RuleCounts()
        #expect(CairnValue(sanitizing: a, counts: &counts)
                == .array([.object(["back": .string(CairnValue.cycleMarker)])]))
        #expect(counts.cutCycles == 1)
        counts = RuleCounts()
        #expect(CairnValue(sanitizing: d, counts: &counts)
                == .object(["back": .array([.string(CairnValue.cycleMarker)])]))
        #expect(counts.cutCycles == 1)
    }

    @Test func aCycleDeepInsideIsCutAndTheRestKept() {
        // 20 arrays, each holding a number and the next; the last holds the 6th again.
        let levels = (0..<20).map { _ in NSMutableArray() }
        for (i, level) in levels.enumerated() {
            level.add(i)
            if i + 1 < levels.count { level.add(levels[i + 1]) }
        }
        levels[19].add(levels[5])
        defer { Self.tearDown(levels) }
        var counts = RuleCounts()
        let value = CairnValue(sanitizing: ["top": levels[0]] as [String: Any], counts: &counts)
        #expect(counts.cutCycles == 1 && counts.droppedDepth == 0)
        var v = value, seen = 0
        if case .object(let top) = v, let first = top["top"] { v = first }
        while case .array(let items) = v, items.count >= 2, items[0] == .int(Int64(seen)) {
            seen += 1
            v = items[1]
        }
        #expect(seen == 20 && v == .string(CairnValue.cycleMarker))
    }

    @Test func theSameContainerTwiceIsNotACycle() {
        let shared = NSMutableArray(array: [1, 2])
        let parent = NSMutableArray(array: [shared, shared])
        defer { Self.tearDown([shared, parent]) }
        var counts = RuleCounts()
        #expect(CairnValue(sanitizing: parent, counts: &counts) == [[1, 2], [1, 2]])
        #expect(counts.isEmpty)
    }

    /// 100,000 levels of every kind of container: converted down to the depth limit,
    /// without recursion (the thread's stack would not hold 100,000 frames).
    @Test(arguments: ["[Any]", "[String: Any]", "NSArray", "NSDictionary", "mixed"])
    func deepNestingStopsAtTheDepthLimit(_ kind: String) {
        let depth = 100_000
        var chain: Any = 0
        var foundation: [AnyObject] = []
        for i in 0..<depth {
            let inner = chain
            // "mixed": Foundation containers below, Swift ones for the top ten levels
            // (Foundation bridges a Swift container stored in it, so that order is the
            // only one that exists).
            let pick = kind == "mixed" ? (i < depth - 10 ? ["NSArray", "NSDictionary"][i % 2]
                                                        : ["[Any]", "[String: Any]"][i % 2]) : kind
            switch pick {
            case "[Any]": chain = [inner]
            case "[String: Any]": chain = ["k": inner]
            case "NSArray":
                let a = NSMutableArray()
                a.add(inner)
                foundation.append(a)
                chain = a
            default:
                let d = NSMutableDictionary()
                d["k"] = inner
                foundation.append(d)
                chain = d
            }
        }
        var counts = RuleCounts()
        let value = CairnValue(sanitizing: chain, counts: &counts)
        let (levels, end) = Self.chain(value)
        #expect(levels == CairnValue.conversionDepthLimit && end == .null, "\(kind): \(levels) levels")
        #expect(counts.droppedDepth == 1)
        var owned: Any? = chain
        chain = 0
        Self.release(&owned)
        Self.tearDown(foundation)
    }

    /// A typed value nested 100,000 deep reaches the processor as it is: the privacy
    /// rules, the size estimate and the one-pass check look no deeper than the depth
    /// limit, and cleaning cuts it there.
    @Test func deepTypedValuesAreCutByTheProcessor() throws {
        var deep: CairnValue = "password=hunter2"
        for i in 0..<100_000 { deep = i % 2 == 0 ? .array([deep]) : .object(["k": deep]) }
        let p = Processor()
        var counts = RuleCounts()
        var cleaned = Event(name: "e", properties: ["deep": deep], timeMillis: 1_764_000_000_000,
                            identity: Identity(distinctID: "u"))
        #expect(p.estimate(cleaned) < 2_000)
        var measure = JSONWriter()
        #expect(!p.encodeIfClean(cleaned, id: (1, 2), into: &measure))
        cleaned.properties = p.clean(cleaned.properties, counts: &counts)
        let (levels, end) = Self.chain(cleaned.properties["deep"] ?? .null)
        #expect(levels == SanitizerLimits().maxDepth - 1 && end == .null)
        #expect(counts.droppedDepth == 1 && counts.redactedKeys == 0)
        _ = try JSONSerialization.jsonObject(with: Data(p.record(cleaned)))
        while true {
            switch deep {
            case .array(let items) where !items.isEmpty: deep = items[0]
            case .object(let members) where members["k"] != nil: deep = members["k"] ?? .null
            default: return
            }
        }
    }

    /// A container shared by both halves of its parent, thirty levels down, stands for
    /// 2^30 values: conversion stops at the value limit instead of expanding them all.
    @Test(arguments: [false, true])
    func sharingStopsAtTheValueLimit(_ foundation: Bool) {
        var levels: [NSMutableArray] = []
        var value: Any = 1
        for _ in 0..<30 {
            if foundation {
                let a = NSMutableArray(array: [value, value])
                levels.append(a)
                value = a
            } else {
                value = [value, value]
            }
        }
        defer { Self.tearDown(levels) }
        var counts = RuleCounts()
        let converted = CairnValue(sanitizing: value, counts: &counts)
        func size(_ v: CairnValue) -> Int {
            if case .array(let items) = v { return items.reduce(1) { $0 + size($1) } }
            return 1
        }
        #expect(size(converted) == CairnValue.conversionValueLimit)
        #expect(counts.truncatedArrays > 0 && counts.truncatedArrays <= 30)
    }

    /// Foundation containers are read without bridging; their contents still convert
    /// as Swift values would.
    @Test func foundationContainersKeepTheirContents() {
        struct Custom { var x = 1 }
        let inner = NSMutableDictionary()
        inner["d"] = Date(timeIntervalSince1970: 0)
        inner["u"] = URL(string: "https://example.com/a")
        inner["nil"] = NSNull()
        let array = NSMutableArray()
        array.addObjects(from: ["s", 3, 1.5, true, -0.0, Custom(), inner])
        defer { Self.tearDown([array, inner]) }
        var counts = RuleCounts()
        let v = CairnValue(sanitizing: array, counts: &counts)
        #expect(v == .array([.string("s"), .int(3), .double(1.5), .bool(true), .double(-0.0), .string("Custom(x: 1)"),
                             .object(["d": .string("1970-01-01T00:00:00.000Z"), "u": .string("https://example.com/a"),
                                      "nil": .null])]))
        if case .array(let items) = v, case .double(let zero) = items[4] { #expect(zero.sign == .minus) }
        #expect(counts.isEmpty)
    }

    @Test func keysThatAreNotTextAreWrittenAsTextOrDropped() {
        let d = NSMutableDictionary()
        d[NSNumber(value: 7)] = "seven"
        d["7"] = "also seven"
        d[NSArray(array: [1])] = "array key"
        defer { Self.tearDown([d]) }
        var counts = RuleCounts()
        let v = CairnValue(sanitizing: d, counts: &counts)
        guard case .object(let members) = v else {
            Issue.record("\(v) is not an object")
            return
        }
        #expect(Array(members.keys) == ["7"] && counts.droppedKeys == 2)
        counts = RuleCounts()
        let swift: [AnyHashable: Any] = [1: "one", true: "yes", 2.5: "half", "s": "text"]
        #expect(CairnValue(sanitizing: swift, counts: &counts)
                == .object(["1": "one", "true": "yes", "2.5": "half", "s": "text"]))
        #expect(counts.isEmpty)
    }
}
