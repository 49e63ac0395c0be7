// Tracking: the public calls, which make events and hand them to the event pipeline
// (Pipeline/): admission, enrichment, then the sink (the ring, or for Critical events the store).
import CairnBase
import CairnCrash
import CairnProcessor
public import FoundationEssentials

extension Cairn {
    /// Tracks an event. `time` defaults to now (for `app_install`, to the install time);
    /// `identity` overrides the default distinct and account ids for this event only.
    /// Returns at once; a dropped event (sampled, filtered, ring full) is counted and,
    /// with debug logging, logged.
    public func track(_ name: String, properties: [String: CairnValue] = [:], time: Date? = nil,
                      identity: Identity? = nil) {
        let millis: UInt64
        if let time {
            millis = UInt64(max(0, time.timeIntervalSince1970 * 1000))
        } else if name == "app_install" {
            millis = install.timeMillis
        } else {
            millis = EventClock.nowMillis()
        }
        submit(Event(type: .track, name: name, properties: properties, timeMillis: millis,
                     identity: currentIdentity(identity), sessionID: sessionID, span: Self.currentSpan,
                     identityGiven: identity != nil))
    }

    /// Tracks a typed event, with its tier. A ``Tier/critical`` event (a payment, an
    /// audit record) is not sampled or shed, and is made durable before this returns:
    /// once the SDK's background start has opened the snapshot store, it is stored
    /// there at once, in a request of its own with Critical priority (which the store's
    /// size and age caps evict last), and synced; before that, it is written to the
    /// event ring and synced. That costs a disk sync on the calling thread (about a
    /// millisecond): keep the tier for events that must not be lost.
    public func track(_ event: some CairnEvent, time: Date? = nil, identity: Identity? = nil) {
        let millis = time.map { UInt64(max(0, $0.timeIntervalSince1970 * 1000)) } ?? EventClock.nowMillis()
        submit(Event(type: .track, name: event.name, properties: event.properties, timeMillis: millis,
                     identity: currentIdentity(identity), sessionID: sessionID, span: Self.currentSpan,
                     tier: event.tier, isError: event.isError, identityGiven: identity != nil))
    }

    /// Changes the default distinct id of later events.
    public func identify(distinctID: String) {
        guard !distinctID.isEmpty else {
            drops.add(.invalidIdentity, 1)
            return
        }
        let identity = state.withLock { s -> Identity in
            s.identity.distinctID = distinctID
            return s.identity
        }
        crash?.setIdentity(distinctID: identity.distinctID, accountID: identity.accountID)
    }

    /// Sets the account of later events and user-property requests (nil clears it).
    /// The first time an account id is set in this process, it is also sent once as
    /// the `user_setOnce` property `account_id`.
    public func setAccountID(_ accountID: String?) {
        let (identity, sendOnce) = state.withLock { s -> (Identity, Bool) in
            s.identity.accountID = accountID
            guard let accountID, s.accountSent.insert(accountID).inserted else { return (s.identity, false) }
            return (s.identity, true)
        }
        crash?.setIdentity(distinctID: identity.distinctID, accountID: identity.accountID)
        if sendOnce, let accountID {
            submit(Event(type: .userSetOnce, name: "user_properties", properties: ["account_id": .string(accountID)],
                         timeMillis: EventClock.nowMillis(), identity: identity, sessionID: sessionID,
                         tier: .important))
        }
    }

    /// Updates the user's properties on the collector, as `mode` says.
    public func setUserProperties(_ properties: [String: CairnValue], mode: UserPropertyMode = .set,
                                  identity: Identity? = nil) {
        var props = properties
        switch mode {
        case .unset:
            props = Dictionary(uniqueKeysWithValues: properties.keys.map { ($0, CairnValue.null) })
        case .add:
            props = properties.filter { _, v in
                if case .int = v { return true }
                if case .double(let d) = v, d.isFinite { return true }
                return false
            }
            if props.count < properties.count { drops.add(.userAddNotANumber, properties.count - props.count) }
        case .set, .setOnce:
            break
        }
        guard !props.isEmpty else { return }
        submit(Event(type: mode.eventType, name: "user_properties", properties: props,
                     timeMillis: EventClock.nowMillis(), identity: currentIdentity(identity), sessionID: sessionID,
                     tier: .important, identityGiven: identity != nil))
    }

    /// Leaves a breadcrumb: the last ones travel with a crash report. The privacy rules
    /// mask the message and the category first (an e-mail, a bearer token, …), so what
    /// the crash report keeps on disk, and later sends, is already masked.
    public func breadcrumb(_ message: String, category: String? = nil) {
        guard let crash else { return }
        crash.addBreadcrumb(processor.maskText(message), category: category.map(processor.maskText))
    }

    func currentIdentity(_ override: Identity?) -> Identity {
        if let override { return override }
        return state.withLock { $0.identity }
    }

    /// The hot path: the event pipeline (admit, enrich, clean, encode, keep).
    func submit(_ event: consuming Event) {
        pipeline?.submit(event)
    }
}
