import CairnBase
import Testing

/// The drop vocabulary: every reason's name reads back as the same reason, and a name
/// this SDK does not know (another SDK's, a later version's) is kept as it is.
@Suite struct DropReasonTests {
    static let all: [DropReason] = [
        .sampled, .filtered, .deduplicated, .overload(tier: "debug"), .overload(tier: "sampled"), .invalidName,
        .invalidIdentity, .ringFull, .ringTooBig, .ringCorrupt, .ringSetAside, .storeCorrupt, .storeUnavailable,
        .storeAge, .storeSize, .runRecordUnavailable, .rejected(status: 400), .rejected(status: 413),
        .invalidRequest, .unframeable, .installProperties, .userAddNotANumber, .otlpRejected, .otlpPartial,
    ]

    @Test func namesReadBackAsTheSameReason() {
        for reason in Self.all {
            #expect(DropReason(name: reason.name) == reason, "\(reason.name)")
            #expect(!reason.name.isEmpty && !reason.name.contains(",") && !reason.name.contains("="))
        }
        #expect(Set(Self.all.map(\.name)).count == Self.all.count, "no two reasons share a name")
        #expect(DropReason.overload(tier: "sampled").name == "overload_sampled")
        #expect(DropReason.rejected(status: 429).name == "rejected_429")
    }

    @Test func unknownNamesAreKept() {
        for name in ["privacy_masked", "rejected_0400", "rejected_", "rejected_abc", "overload_", "other", "x"] {
            #expect(DropReason(name: name) == .named(name), "\(name)")
            #expect(DropReason(name: name).name == name)
        }
        #expect([DropReason.storeSize, .filtered, .rejected(status: 500)].sorted().map(\.name)
            == ["filtered", "rejected_500", "store_size"])
    }
}
