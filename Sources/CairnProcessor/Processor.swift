package import CairnBase
import Synchronization

/// The common properties of a Linux service, collected once at start and written into
/// every event's `context` object (docs/FORMATS.md, "Event").
package struct CommonProperties: Sendable, Equatable {
    /// The application's id.
    package var appID: String?
    /// Its release (for example `orders@1.4.2`).
    package var release: String?
    /// Its build.
    package var build: String?
    /// `production`, `staging`, ...
    package var environment: String?
    /// The host name.
    package var hostName: String?
    /// The distribution's name (`/etc/os-release` `NAME`, e.g. `Debian GNU/Linux`).
    package var osName: String?
    /// The distribution's version (`VERSION_ID`).
    package var osVersion: String?
    /// The kernel release (`uname -r`).
    package var kernel: String?
    /// The machine architecture (`x86_64`, `aarch64`).
    package var arch: String?
    /// Online CPUs.
    package var cpuCount: Int?
    /// The cgroup's memory limit in bytes, when there is one.
    package var memoryLimit: UInt64?
    /// The container's id, when the cgroup path names one.
    package var containerID: String?
    /// The process's name.
    package var processName: String?
    /// The process id.
    package var pid: Int32?
    /// The IANA time zone (`Europe/Berlin`), when known.
    package var timeZone: String?

    /// Empty properties; fill in what is known.
    package init() {}

    /// The `"context":{...},"sdk":{...}` fragment, encoded once.
    package func encodedFragment(sdkVersion: String) -> [UInt8] {
        JSONWriter.bytes { w in
            w.key("context")
            writeContext(into: &w)
            w.byte(0x2C)
            Self.writeSDK(version: sdkVersion, into: &w)
        }
    }

    /// The `"sdk":{"name":"cairn-swift","version":...}` member; `extra`, members already
    /// encoded (from their `,`), goes before its `}`.
    static func writeSDK(version: String, into w: inout JSONWriter, extra: [UInt8] = []) {
        w.key("sdk")
        w.byte(0x7B)
        w.key("name")
        w.ascii("\"cairn-swift\"")
        w.byte(0x2C)
        w.key("version")
        w.string(version)
        if !extra.isEmpty { w.raw(extra) }
        w.byte(0x7D)
    }

    /// The `context` object alone (`{"app":{...},...}`), as the run record keeps it for
    /// the crash and session-end events of this run.
    package func encodedContext() -> [UInt8] {
        JSONWriter.bytes { writeContext(into: &$0) }
    }

    private func writeContext(into w: inout JSONWriter) {
        var first = true
        func member(_ key: StaticString, _ write: (inout JSONWriter) -> Void) {
            if !first { w.byte(0x2C) }
            first = false
            w.key(key)
            write(&w)
        }
        // Fields one by one rather than as arrays of (key, value) tuples, whose metadata the
        // runtime would have to build while `start` runs.
        func group(_ key: StaticString, _ k1: StaticString, _ v1: String?, _ k2: StaticString = "",
                   _ v2: String? = nil, _ k3: StaticString = "", _ v3: String? = nil, _ k4: StaticString = "",
                   _ v4: String? = nil) {
            guard v1 != nil || v2 != nil || v3 != nil || v4 != nil else { return }
            member(key) { w in
                w.byte(0x7B)
                var firstField = true
                func field(_ k: StaticString, _ v: String?) {
                    guard let v else { return }
                    if !firstField { w.byte(0x2C) }
                    firstField = false
                    w.key(k)
                    w.string(v)
                }
                field(k1, v1)
                field(k2, v2)
                field(k3, v3)
                field(k4, v4)
                w.byte(0x7D)
            }
        }
        w.byte(0x7B)
        group("app", "id", appID, "release", release, "build", build, "environment", environment)
        group("host", "name", hostName)
        group("os", "name", osName, "version", osVersion, "kernel", kernel)
        if let arch { member("arch") { $0.string(arch) } }
        if let cpuCount { member("cpu_count") { $0.int(Int64(cpuCount)) } }
        if let memoryLimit { member("memory_limit") { $0.uint(memoryLimit) } }
        if let containerID { member("container_id") { $0.string(containerID) } }
        if processName != nil || pid != nil {
            member("process") { w in
                w.byte(0x7B)
                if let processName {
                    w.key("name")
                    w.string(processName)
                }
                if let pid {
                    if processName != nil { w.byte(0x2C) }
                    w.key("pid")
                    w.int(Int64(pid))
                }
                w.byte(0x7D)
            }
        }
        if let timeZone { member("time_zone") { $0.string(timeZone) } }
        w.byte(0x7D)
    }
}

/// The encoded common properties, replaceable once while other threads encode events:
/// readers load one pointer; no block is freed before the processor is.
final class CommonFragment: @unchecked Sendable {
    // @unchecked: the blocks are immutable once published; the pointer to the
    // replacement is atomic.
    /// Each block: its length (an `Int`), then the bytes.
    private let first: UnsafeMutableRawPointer
    private let second = Atomic<UnsafeMutableRawPointer?>(nil)

    init(_ bytes: [UInt8]) {
        first = Self.block(bytes)
    }

    deinit {
        first.deallocate()
        second.load(ordering: .acquiring)?.deallocate()
    }

    private static func block(_ bytes: [UInt8]) -> UnsafeMutableRawPointer {
        let p = UnsafeMutableRawPointer.allocate(byteCount: MemoryLayout<Int>.size + bytes.count,
                                                 alignment: MemoryLayout<Int>.alignment)
        p.storeBytes(of: bytes.count, as: Int.self)
        bytes.withUnsafeBytes { src in
            if let base = src.baseAddress { (p + MemoryLayout<Int>.size).copyMemory(from: base, byteCount: src.count) }
        }
        return p
    }

    /// The current fragment.
    var bytes: UnsafeRawBufferPointer {
        let p = UnsafeRawPointer(second.load(ordering: .acquiring) ?? first)
        return UnsafeRawBufferPointer(start: p + MemoryLayout<Int>.size, count: p.load(as: Int.self))
    }

    /// Publishes `bytes` unless a replacement was published already.
    func replace(_ bytes: [UInt8]) {
        guard second.load(ordering: .acquiring) == nil else { return }
        let p = Self.block(bytes)
        if !second.compareExchange(expected: nil, desired: p, ordering: .acquiringAndReleasing).exchanged {
            p.deallocate()
        }
    }
}

/// Options of the processor.
package struct ProcessorOptions: Sendable, Equatable {
    /// Limits of the sanitiser.
    package var limits: SanitizerLimits
    /// Privacy rules (on by default).
    package var privacy: PrivacyOptions
    /// Sampling rates.
    package var sampling: SamplingOptions
    /// Allow and deny lists.
    package var filter: EventFilterOptions
    /// The property whose string value the path patterns of `filter` match.
    package var pathProperty: String

    /// Options; every rule at its documented default.
    package init(limits: SanitizerLimits = .init(), privacy: PrivacyOptions = .init(),
                sampling: SamplingOptions = .init(), filter: EventFilterOptions = .init(),
                pathProperty: String = "path") {
        self.limits = limits
        self.privacy = privacy
        self.sampling = sampling
        self.filter = filter
        self.pathProperty = pathProperty
    }
}

/// The event processor: values in, bytes out. Decides whether an event is kept (name
/// and identity, filter, then sampling), cleans its name, ids and properties (privacy
/// rules, then sanitiser), and encodes it as one JSON object (docs/FORMATS.md, "Event").
/// No files, no threads, no clock reads except through `EventClock`'s cached time zone
/// offset.
package final class Processor: Sendable {
    /// The options it was made with.
    package let options: ProcessorOptions
    private let sanitizer: Sanitizer
    private let masker: PrivacyMasker
    private let sampler: Sampler
    private let filter: EventFilter
    /// Whether `admit` reads the name or `distinct_id` at all (name lists, per-event
    /// rates, a tier sampled below 1); when not, it need not check them.
    private let admitReadsNames: Bool
    private let common: CommonFragment
    private let sdkVersion: String
    /// Formats event times.
    package let clock: EventClock
    /// Makes event ids.
    package let ids: EventIDGenerator

    /// A processor writing `common` into every event, with times in `clock`'s zone.
    package init(options: ProcessorOptions = .init(), common: CommonProperties = .init(),
                sdkVersion: String = cairnVersion, clock: EventClock = EventClock()) {
        self.options = options
        sanitizer = Sanitizer(limits: options.limits)
        masker = PrivacyMasker(options: options.privacy)
        sampler = Sampler(options: options.sampling)
        filter = EventFilter(options: options.filter)
        let sampling = options.sampling
        admitReadsNames = !options.filter.allowNames.isEmpty || !options.filter.denyNames.isEmpty
            || !sampling.eventRates.isEmpty || !(sampling.rate >= 1) || sampling.tierRates.values.contains { !($0 >= 1) }
        self.common = CommonFragment(common.encodedFragment(sdkVersion: sdkVersion))
        self.sdkVersion = sdkVersion
        self.clock = clock
        ids = EventIDGenerator()
    }

    /// Replaces the common properties, once: `start` builds the processor with what it
    /// can read at once and hands it the rest, collected on the background thread, this
    /// way. Events encoded before carry the first set. Later calls do nothing.
    package func updateCommon(_ common: CommonProperties) {
        self.common.replace(common.encodedFragment(sdkVersion: sdkVersion))
    }

    /// The `"context":{...},"sdk":{...}` fragment that ends every event encoded with its
    /// context now (a copy): what the SDK writes to the ring as a context record, for
    /// the events it encodes without it (docs/FORMATS.md, "Ring file").
    package var contextFragment: [UInt8] { Array(common.bytes) }

    /// `text` with what the privacy rules find in it masked (e-mails, phone numbers,
    /// cards, tokens, URL query secrets, as switched on), or as it is when privacy is
    /// off: for free text that is not an event property, such as a breadcrumb.
    package func maskText(_ text: String) -> String {
        options.privacy.enabled ? masker.mask(text) : text
    }

    /// `url` with the values of sensitive query parameters masked (when privacy is on).
    package func maskURL(_ url: String) -> String {
        options.privacy.enabled ? masker.maskURL(url) : url
    }

    /// Whether to keep `event`: nil to keep it, else why not. An empty name or
    /// `distinct_id` is refused; filters and sampling see the name and `distinct_id` as
    /// `clean(_:counts:)` (the event form) will write them. Sampling keys on
    /// ``Event/samplingKey(ids:)``; when that is the event itself, its id is drawn here
    /// (into `event.id`) and is the one it is encoded with.
    package func admit(_ event: inout Event) -> DropReason? {
        if event.name.isEmpty { return .invalidName }
        if event.identity.distinctID.isEmpty { return .invalidIdentity }
        guard !admitReadsNames || (sanitizer.leavesUnchanged(name: event.name)
                                   && sanitizer.leavesUnchanged(name: event.identity.distinctID))
        else { return decideCleaned(&event) }
        return decide(&event)
    }

    /// `decide` for an event whose name or `distinct_id` the rules change.
    @inline(never)
    private func decideCleaned(_ event: inout Event) -> DropReason? {
        var written = event
        written.name = sanitizer.cleaned(name: event.name)
        written.identity.distinctID = sanitizer.cleaned(name: event.identity.distinctID)
        defer { event.id = written.id }
        return decide(&written)
    }

    /// Filters, then sampling, on a name and `distinct_id` the rules leave as they are.
    private func decide(_ event: inout Event) -> DropReason? {
        var path: String?
        if filter.filtersPaths, case .string(let p)? = event.properties[options.pathProperty] { path = p }
        if !filter.allows(name: event.name, path: path) { return .filtered }
        // Most events are kept whole by their rate: the key (and an id drawn for it) only
        // when the rate is strictly between 0 and 1.
        if event.tier != .critical, !sampler.keepsAll(eventName: event.name, tier: event.tier, isError: event.isError),
           !sampler.keep(event.samplingKey(ids: ids), eventName: event.name, tier: event.tier, isError: event.isError) {
            return .sampled
        }
        return nil
    }

    /// Cleans everything of `event` the call site gave: its name, `distinct_id` and
    /// `account_id` (``Sanitizer/sanitize(name:counts:)``; an empty account id is left
    /// out) and its properties (`clean(_:counts:)`, the properties form), adding
    /// what changed to `counts`.
    package func clean(_ event: inout Event, counts: inout RuleCounts) {
        event.name = sanitizer.sanitize(name: event.name, counts: &counts)
        event.identity.distinctID = sanitizer.sanitize(name: event.identity.distinctID, counts: &counts)
        if let account = event.identity.accountID {
            if account.isEmpty {
                event.identity.accountID = nil
                counts.droppedKeys += 1
            } else {
                event.identity.accountID = sanitizer.sanitize(name: account, counts: &counts)
            }
        }
        event.properties = clean(event.properties, counts: &counts)
    }

    /// The properties to encode: the privacy rules run first (on whole strings, so no
    /// cut can leave half a card number), then the sanitiser (so the limits hold for
    /// what is written); what they change is added to `counts`. Containers deeper than
    /// the sanitiser's depth limit are not looked into: it replaces them.
    package func clean(_ properties: [String: CairnValue], counts: inout RuleCounts) -> [String: CairnValue] {
        let masked = options.privacy.enabled
            ? masker.apply(properties, maxDepth: sanitizer.maxDepth, counts: &counts) : properties
        return sanitizer.sanitize(masked, counts: &counts)
    }

    /// A size that is enough for `event` unless its strings need escaping (then
    /// `encode` overflows and the caller retries with the exact size it reports).
    /// Containers deeper than the sanitiser's depth limit count as the `null` that
    /// replaces them, so a hostile nesting costs no more than the limit allows. Without
    /// `context`, for an event encoded without its context.
    package func estimate(_ event: Event, context: Bool = true) -> Int {
        // 200: the envelope's fixed part (181 bytes with a 36-byte session id counted
        // apart, a `track` type and a two-digit zone offset), with room for the longest
        // type (`user_setOnce`) and offset (`-720`).
        var n = 200 + (context ? common.bytes.count : 0) + event.name.utf8.count + event.identity.distinctID.utf8.count
            + (event.identity.accountID?.utf8.count ?? 0) + (event.sessionID?.utf8.count ?? 0)
            + (event.severity != nil || event.isError ? 20 : 0) + (event.span.map { spanEstimate($0, event.type) } ?? 0)
        for (k, v) in event.properties { n += k.utf8.count + 4 + estimate(v, level: 2) }
        return n
    }

    /// The bytes of a span's fields in the envelope: `trace_id` and `span_id` (46 and
    /// 29 with their commas), `parent_span_id` (36), and for a `span` event its
    /// `trace_flags` (19), `span_kind` (21) and `trace_state` (17 and the state).
    private func spanEstimate(_ span: SpanContext, _ type: EventType) -> Int {
        var n = 75 + (span.parentSpanID == nil ? 0 : 36)
        if type == .span { n += 40 + (span.traceState.map { 17 + $0.header.utf8.count } ?? 0) }
        return n
    }

    private func estimate(_ v: CairnValue, level: Int) -> Int {
        switch v {
        case .null, .bool: return 5
        case .int: return 20
        case .double: return 26
        case .string(let s): return s.utf8.count + 2
        case .array(let items):
            guard level <= sanitizer.maxDepth else { return 5 }
            return items.reduce(2) { $0 + estimate($1, level: level + 1) + 1 }
        case .object(let m):
            guard level <= sanitizer.maxDepth else { return 5 }
            return m.reduce(2) { $0 + $1.key.utf8.count + 4 + estimate($1.value, level: level + 1) }
        }
    }

    /// Encodes `event` (properties already cleaned) with its id (``Event/id``, or a new one); returns the id.
    /// Without `context`, the event ends after its properties: no `context` and `sdk`
    /// fields (the ring's bare records, completed from a context record before they
    /// are sent).
    @discardableResult
    package func encode(_ event: Event, into w: inout JSONWriter, context: Bool = true) -> (UInt64, UInt64) {
        let id = event.id ?? ids.next(millis: event.timeMillis)
        encode(event, id: id, into: &w, context: context)
        return id
    }

    /// Encodes `event` with the given id. Its name and ids are written as
    /// `clean(_:counts:)` (the event form) leaves them even when it did not run (uncounted
    /// then); its properties are written as they are. Without `context`, as
    /// `encode(_:into:context:)`.
    package func encode(_ event: Event, id: (UInt64, UInt64), into w: inout JSONWriter, context: Bool = true) {
        writeCleanedHead(event, id: id, into: &w)
        w.object(event.properties)
        writeTail(into: &w, context: context)
    }

    /// The single-pass hot path: encodes `event` straight from the call site's name, ids
    /// and properties (plus its id, or a new one) when neither the privacy rules nor the sanitiser
    /// would change any of them, checking each as it is written. The bytes are then
    /// exactly those of `clean` followed by `encode`. Returns nil when some rule applies
    /// (the writer's content is then meaningless): the caller runs `clean` and `encode`
    /// instead. Without `context`, as `encode(_:into:context:)`.
    package func encodeIfClean(_ event: Event, into w: inout JSONWriter, context: Bool = true) -> (UInt64, UInt64)? {
        let id = event.id ?? ids.next(millis: event.timeMillis)
        return encodeIfClean(event, id: id, into: &w, context: context) ? id : nil
    }

    /// `encodeIfClean` with the given id; false when some rule applies.
    package func encodeIfClean(_ event: Event, id: (UInt64, UInt64), into w: inout JSONWriter,
                              context: Bool = true) -> Bool {
        if let account = event.identity.accountID, account.isEmpty { return false }
        guard writeHead(event, name: event.name, distinctID: event.identity.distinctID,
                        accountID: event.identity.accountID, checked: true, id: id, into: &w),
              writeChecked(event.properties, level: 1, privacy: masker.rootScope, into: &w) else { return false }
        writeTail(into: &w, context: context)
        return true
    }

    /// Writes `object` as `w.object` would, unless a rule of `clean` would change it.
    /// Mirrors `Sanitizer.cleanObject` and `PrivacyMasker.applyObject` check for check.
    private func writeChecked(_ object: [String: CairnValue], level: Int, privacy: PrivacyScope,
                              into w: inout JSONWriter) -> Bool {
        guard object.count <= sanitizer.maxProperties else { return false }
        w.byte(0x7B)
        var first = true
        for (key, value) in object {
            if !first { w.byte(0x2C) }
            first = false
            let scope = withUTF8Bytes(key) { k -> PrivacyScope? in
                guard sanitizer.leavesUnchanged(key: k) else { return nil }
                w.string(utf8: k)
                w.byte(0x3A)
                return masker.scope(forKey: k, inherited: privacy)
            }
            guard let scope, writeChecked(value, level: level + 1, privacy: scope, into: &w) else { return false }
        }
        w.byte(0x7D)
        return true
    }

    private func writeChecked(_ value: CairnValue, level: Int, privacy: PrivacyScope,
                              into w: inout JSONWriter) -> Bool {
        switch value {
        case .null, .bool, .int:
            w.value(value)
        case .double(let d):
            guard d.isFinite else { return false }
            w.double(d)
        case .string(let s):
            return withUTF8Bytes(s) { b in
                guard sanitizer.leavesUnchanged(string: b) else { return false }
                if case .mask(let kinds) = privacy, !masker.leavesUnchanged(b, kinds: kinds) { return false }
                w.string(utf8: b)
                return true
            }
        case .array(let items):
            guard level <= sanitizer.maxDepth, items.count <= sanitizer.maxArrayLength else { return false }
            w.byte(0x5B)
            for (i, item) in items.enumerated() {
                if i > 0 { w.byte(0x2C) }
                guard writeChecked(item, level: level + 1, privacy: privacy, into: &w) else { return false }
            }
            w.byte(0x5D)
        case .object(let members):
            guard level <= sanitizer.maxDepth else { return false }
            return writeChecked(members, level: level, privacy: privacy, into: &w)
        }
        return true
    }

    /// Writes the envelope up to `"properties":` with the name and ids as the name rules
    /// leave them (an empty account id left out).
    private func writeCleanedHead(_ event: Event, id: (UInt64, UInt64), into w: inout JSONWriter) {
        let account = event.identity.accountID.flatMap { $0.isEmpty ? nil : sanitizer.cleaned(name: $0) }
        _ = writeHead(event, name: sanitizer.cleaned(name: event.name),
                      distinctID: sanitizer.cleaned(name: event.identity.distinctID), accountID: account,
                      checked: false, id: id, into: &w)
    }

    /// Writes the envelope up to `"properties":`. When `checked`, returns false as soon
    /// as the name rules would change the name or an id (the single-pass check, on the
    /// bytes being written); else always true.
    private func writeHead(_ event: Event, name: String, distinctID: String, accountID: String?, checked: Bool,
                           id: (UInt64, UInt64), into w: inout JSONWriter) -> Bool {
        w.byte(0x7B)
        w.key("event_id")
        EventIDGenerator.write(id, into: &w)
        w.byte(0x2C)
        w.key("type")
        w.byte(0x22)
        var type = event.type.rawValue
        type.withUTF8 { w.raw(UnsafeRawBufferPointer($0)) }
        w.byte(0x22)
        w.byte(0x2C)
        w.key("name")
        guard write(name, checked: checked, into: &w) else { return false }
        if let severity = event.severity {
            w.byte(0x2C)
            w.key("level")
            w.byte(0x22)
            w.ascii(severity.name)
            w.byte(0x22)
        } else if event.isError {
            w.byte(0x2C)
            w.key("level")
            w.byte(0x22)
            w.ascii("error")
            w.byte(0x22)
        }
        w.byte(0x2C)
        w.key("time")
        let offset = clock.write(event.timeMillis, into: &w)
        w.byte(0x2C)
        w.key("zone_offset")
        w.int(Int64(offset))
        w.byte(0x2C)
        w.key("distinct_id")
        guard write(distinctID, checked: checked, into: &w) else { return false }
        if let account = accountID {
            w.byte(0x2C)
            w.key("account_id")
            guard write(account, checked: checked, into: &w) else { return false }
        }
        if let session = event.sessionID {
            w.byte(0x2C)
            w.key("session_id")
            w.string(session)
        }
        if let span = event.span {
            w.byte(0x2C)
            w.key("trace_id")
            w.string(span.traceID.description)
            w.byte(0x2C)
            w.key("span_id")
            w.string(span.spanID.description)
            if let parent = span.parentSpanID {
                w.byte(0x2C)
                w.key("parent_span_id")
                w.string(parent.description)
            }
            if event.type == .span {
                // What an OTLP span needs beyond the ids: its flags, kind and the
                // caller's trace state.
                w.byte(0x2C)
                w.key("trace_flags")
                w.byte(0x22)
                let hex: StaticString = "0123456789abcdef"
                w.byte(hex.utf8Start[Int(span.flags >> 4)])
                w.byte(hex.utf8Start[Int(span.flags & 15)])
                w.byte(0x22)
                if span.kind != .internal {
                    w.byte(0x2C)
                    w.key("span_kind")
                    w.byte(0x22)
                    w.ascii(span.kind == .server ? "server" : "client")
                    w.byte(0x22)
                }
                if let state = span.traceState {
                    w.byte(0x2C)
                    w.key("trace_state")
                    w.string(state.header)
                }
            }
        }
        w.byte(0x2C)
        w.key("properties")
        return true
    }

    /// Writes a name or id as a JSON string; when `checked`, only if the name rules keep
    /// it as it is.
    private func write(_ text: String, checked: Bool, into w: inout JSONWriter) -> Bool {
        withUTF8Bytes(text) { bytes in
            if checked && !sanitizer.leavesUnchanged(name: bytes) { return false }
            w.string(utf8: bytes)
            return true
        }
    }

    private func writeTail(into w: inout JSONWriter, context: Bool) {
        if context {
            w.byte(0x2C)
            w.raw(common.bytes)
        }
        w.byte(0x7D)
    }

    /// The whole record for `event` as bytes (for tests and cold paths; the hot path
    /// encodes into the ring's reservation).
    package func record(_ event: Event, id: (UInt64, UInt64)? = nil) -> [UInt8] {
        let id = id ?? event.id ?? ids.next(millis: event.timeMillis)
        return JSONWriter.bytes { encode(event, id: id, into: &$0) }
    }

    /// The record of an event the SDK builds from what an ended run left (its `crash`
    /// and `session_end`; docs/FORMATS.md, "Crash and session-end events"): the envelope
    /// of every event, with the ended run's identity and session in `event`, and as
    /// `context` the ended run's own common properties (`{}` when it left none) instead
    /// of this run's. Object keys are written sorted, so rebuilding the event from the
    /// same files gives the same bytes. The sanitiser's limits apply to the properties
    /// (what they change is added to `counts`); the privacy rules' value scan does not:
    /// frames, registers and module paths are the SDK's own (an address can look like a
    /// card number), and the texts the service wrote (the runtime's message, its
    /// breadcrumbs) are masked before they get here.
    package func record(endedRun event: Event, context: CairnValue?, counts: inout RuleCounts) -> [UInt8] {
        var event = event
        event.properties = sanitizer.sanitize(event.properties, counts: &counts)
        let id = event.id ?? ids.next(millis: event.timeMillis)
        return JSONWriter.bytes { w in
            writeCleanedHead(event, id: id, into: &w)
            w.sortedValue(.object(event.properties))
            w.byte(0x2C)
            w.key("context")
            w.sortedValue(context ?? .object([:]))
            w.byte(0x2C)
            CommonProperties.writeSDK(version: sdkVersion, into: &w)
            w.byte(0x7D)
        }
    }
}
