/// Why events were dropped: the one vocabulary of the `Cairn-Dropped` header, of
/// `sdk_health`'s `dropped`, of `Cairn.dropCounts` and of the ring file's drop table
/// (docs/FORMATS.md, "Upload request"). ``name`` is how a reason is written there.
///
/// What the privacy and sanitising rules change in a kept event is not a drop and has no
/// reason here (see `Cairn.changeCounts`).
///
/// ```swift
/// DropReason.overload(tier: "sampled").name   // "overload_sampled"
/// DropReason(name: "rejected_413")            // .rejected(status: 413)
/// ```
package enum DropReason: Hashable, Comparable, Sendable, CustomStringConvertible {
    /// Left out by sampling.
    case sampled
    /// Refused by an allow or deny list.
    case filtered
    /// Folded into an earlier error event of the same fingerprint.
    case deduplicated
    /// Shed under load: the ring was fuller than the tier's threshold.
    case overload(tier: String)
    /// An empty event name.
    case invalidName
    /// An empty `distinct_id`.
    case invalidIdentity
    /// The ring had no room for the record.
    case ringFull
    /// The record was larger than the ring can hold.
    case ringTooBig
    /// Damaged regions of the ring skipped when it was opened (counted in regions).
    case ringCorrupt
    /// A ring file in which nothing could be trusted, set aside (counted once).
    case ringSetAside
    /// Requests a damaged snapshot store held that its salvage could not prove intact.
    case storeCorrupt
    /// No snapshot store could be opened.
    case storeUnavailable
    /// Events in stored requests evicted by the age cap.
    case storeAge
    /// Events in stored requests evicted by the size cap.
    case storeSize
    /// This run's record could not be written (its end cannot be reported).
    case runRecordUnavailable
    /// Events in a batch the collector refused for good with this status.
    case rejected(status: Int)
    /// Events in a request the transport refused to send (malformed).
    case invalidRequest
    /// Records that cannot be framed (a newline inside one).
    case unframeable
    /// The install's user properties could not be stored.
    case installProperties
    /// `user_add` values that are not numbers.
    case userAddNotANumber
    /// Log records or spans an OTLP collector refused for good (400, or another final
    /// status; docs/FORMATS.md, "OTLP export", "Answers").
    case otlpRejected
    /// Log records or spans an OTLP collector's partial success says it rejected.
    case otlpPartial
    /// A reason of another SDK or version, kept by its name.
    case named(String)

    /// The reason as written in the header, the drop table and `sdk_health`.
    package var name: String {
        switch self {
        case .sampled: "sampled"
        case .filtered: "filtered"
        case .deduplicated: "deduplicated"
        case .overload(let tier): "overload_" + tier
        case .invalidName: "invalid_name"
        case .invalidIdentity: "invalid_identity"
        case .ringFull: "ring_full"
        case .ringTooBig: "ring_too_big"
        case .ringCorrupt: "ring_corrupt"
        case .ringSetAside: "ring_set_aside"
        case .storeCorrupt: "store_corrupt"
        case .storeUnavailable: "store_unavailable"
        case .storeAge: "store_age"
        case .storeSize: "store_size"
        case .runRecordUnavailable: "run_record_unavailable"
        case .rejected(let status): "rejected_\(status)"
        case .invalidRequest: "invalid_request"
        case .unframeable: "unframeable"
        case .installProperties: "install_properties"
        case .userAddNotANumber: "user_add_not_a_number"
        case .otlpRejected: "otlp_rejected"
        case .otlpPartial: "otlp_partial"
        case .named(let name): name
        }
    }

    /// The reason written as `name`; a name this SDK does not know is kept as
    /// ``named(_:)``.
    package init(name: String) {
        switch name {
        case "sampled": self = .sampled
        case "filtered": self = .filtered
        case "deduplicated": self = .deduplicated
        case "invalid_name": self = .invalidName
        case "invalid_identity": self = .invalidIdentity
        case "ring_full": self = .ringFull
        case "ring_too_big": self = .ringTooBig
        case "ring_corrupt": self = .ringCorrupt
        case "ring_set_aside": self = .ringSetAside
        case "store_corrupt": self = .storeCorrupt
        case "store_unavailable": self = .storeUnavailable
        case "store_age": self = .storeAge
        case "store_size": self = .storeSize
        case "run_record_unavailable": self = .runRecordUnavailable
        case "invalid_request": self = .invalidRequest
        case "unframeable": self = .unframeable
        case "install_properties": self = .installProperties
        case "user_add_not_a_number": self = .userAddNotANumber
        case "otlp_rejected": self = .otlpRejected
        case "otlp_partial": self = .otlpPartial
        default:
            if name.hasPrefix("overload_"), name.count > 9 {
                self = .overload(tier: String(name.dropFirst(9)))
            } else if name.hasPrefix("rejected_"), let status = Int(name.dropFirst(9)), String(status) == name.dropFirst(9) {
                self = .rejected(status: status)
            } else {
                self = .named(name)
            }
        }
    }

    /// ``name``.
    package var description: String { name }

    /// Ordered by ``name``, as the header lists them.
    package static func < (lhs: DropReason, rhs: DropReason) -> Bool { lhs.name < rhs.name }
}
