import CairnProcessor
import CairnStore

/// The one path every event takes: ``Admission`` (rules, shedding, folding) →
/// ``Enrichment`` → ``EventSink`` (clean, encode, ring or store, destinations). The
/// facade (``Cairn``) makes events from its calls and hands them here.
final class EventPipeline: Sendable {
    let admission: Admission
    let enrichment: Enrichment
    let sink: EventSink
    let folding: ErrorFolding

    init(ring: Ring, processor: Processor, drops: DropCounters, options: Cairn.Options) {
        folding = ErrorFolding(options: options.dedup)
        admission = Admission(processor: processor, ring: ring, folding: folding, drops: drops)
        enrichment = Enrichment(dynamicProperties: options.dynamicProperties)
        sink = EventSink(ring: ring, processor: processor, drops: drops, destinations: options.destinations,
                         debugLogging: options.debugLogging)
    }

    /// The hot path: admit, enrich, then clean, encode and keep.
    func submit(_ event: consuming Event) {
        var event = event
        guard case .keep(let fingerprint) = admission.admit(&event) else { return }
        enrichment.enrich(&event)
        sink.accept(&event)
        if let fingerprint { folding.remember(event, fingerprint) }
    }

    /// Writes the summaries of closed folding windows (the background thread's beat).
    func writeFoldedSummaries() {
        for var summary in folding.closedSummaries() { sink.write(&summary, cleaned: true) }
    }
}
