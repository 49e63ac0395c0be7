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
}
