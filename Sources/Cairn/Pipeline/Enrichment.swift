import CairnProcessor

/// The second stage: what the SDK adds to an event. Dynamic properties
/// (``Cairn/Options/dynamicProperties``) fill the keys a tracked event's call site did not set;
/// they describe events, not users, so user-property requests go as they were set.
/// (Identity, session and trace are given to the event where it is made; its time and
/// the common properties when it is encoded.)
struct Enrichment: Sendable {
    let dynamicProperties: (@Sendable () -> [String: CairnValue])?

    func enrich(_ event: inout Event) {
        guard event.type == .track, let dynamic = dynamicProperties?(), !dynamic.isEmpty else { return }
        for (k, v) in dynamic where event.properties[k] == nil { event.properties[k] = v }
    }
}
