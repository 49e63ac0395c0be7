import CairnBase
import CairnProcessor

extension Processor {
    /// `admit(_:)` on a copy of `event`, for tests that do not look at the id it may draw.
    func admit(_ event: Event) -> DropReason? {
        var copy = event
        return admit(&copy)
    }
}
