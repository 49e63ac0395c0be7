// swift-metrics' backend: counters, meters, recorders and timers aggregated in memory and
// reported on an interval as `metric` events (docs/FORMATS.md, "Metric reports"). Built
// only with the package trait "Metrics"; without it this module is empty.
#if Metrics
public import Cairn
import CairnBase
import CairnProcessor
public import CoreMetrics
import Dispatch
import Synchronization

/// A swift-metrics `MetricsFactory` whose metrics aggregate in memory (an atomic add or
/// store per counter, meter and gauge update; a short per-series lock per histogram
/// observation) and are reported by Cairn's background thread every
/// ``Options/interval`` as `metric` events, and once more when the SDK shuts down.
///
/// ```swift
/// MetricsSystem.bootstrap(CairnMetricsFactory(cairn: cairn))
/// Counter(label: "orders_placed", dimensions: [("plan", "pro")]).increment()
/// ```
///
/// What each kind of metric becomes:
///
/// | swift-metrics | report (`kind`) | value |
/// |---|---|---|
/// | `Counter`, `FloatingPointCounter` | `sum`, monotonic | the total since the series began (cumulative) |
/// | `Meter`, `Recorder(aggregate: false)`, `Gauge` | `gauge` | the last value set |
/// | `Recorder` (aggregate, the default) | `histogram` | count, sum, min, max and bucket counts over ``Options/bounds``, cumulative |
/// | `Timer` | `histogram`, unit `s` | the same over ``Options/timerBounds``, in seconds |
///
/// A series is a label and a set of dimensions (their order does not matter). At most
/// ``Options/maxSeries`` exist at once: past that, a new series is recorded into its
/// label's overflow series (dimension `otel.metric.overflow` = `true`), and each such
/// series made is counted (`metric_series_overflow` in `sdk_health`'s `changed`).
/// `destroy` ends a series: it is reported once more, then no longer.
public final class CairnMetricsFactory: MetricsFactory, Sendable {
    /// How metrics are aggregated and reported.
    public struct Options: Sendable {
        /// How often every series is reported (default 60 s).
        public var interval: Duration
        /// How many series may exist at once (default 2,000).
        public var maxSeries: Int
        /// The upper bounds of the buckets of a `Recorder`'s histogram, ascending
        /// (default OpenTelemetry's: 0, 5, 10, 25, 50, 75, 100, 250, 500, 750, 1000,
        /// 2500, 5000, 7500, 10000); a value equal to a bound counts in its bucket, and
        /// one more bucket counts what is above the last.
        public var bounds: [Double]
        /// The same for a `Timer`'s histogram, in seconds (default 0.005, 0.01, 0.025,
        /// 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10).
        public var timerBounds: [Double]

        /// Options; bounds that are not finite, not ascending or more than 64 are
        /// replaced by the defaults.
        public init(interval: Duration = .seconds(60), maxSeries: Int = 2000,
                    bounds: [Double] = Options.defaultBounds, timerBounds: [Double] = Options.defaultTimerBounds) {
            self.interval = max(interval, .milliseconds(100))
            self.maxSeries = max(1, maxSeries)
            self.bounds = Self.valid(bounds) ? bounds : Self.defaultBounds
            self.timerBounds = Self.valid(timerBounds) ? timerBounds : Self.defaultTimerBounds
        }

        /// OpenTelemetry's default explicit bucket bounds.
        public static let defaultBounds: [Double] = [0, 5, 10, 25, 50, 75, 100, 250, 500, 750, 1000, 2500, 5000, 7500, 10000]
        /// Bounds for durations in seconds, from 5 ms to 10 s.
        public static let defaultTimerBounds: [Double] = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5,
                                                          7.5, 10]

        static func valid(_ bounds: [Double]) -> Bool {
            !bounds.isEmpty && bounds.count <= 64 && bounds.allSatisfy(\.isFinite) && zip(bounds, bounds.dropFirst()).allSatisfy { $0 < $1 }
        }
    }

    /// The options it aggregates and reports with.
    public let options: Options
    private let cairn: Cairn
    private let registry = Mutex(Registry())

    struct Registry {
        var series: [SeriesKey: Series] = [:]
        /// Destroyed series, reported once more at the next report.
        var retired: [Series] = []
        /// Series made past ``Options/maxSeries`` (their labels' overflow series).
        var overflowSeries = 0
    }

    /// A factory reporting to `cairn` (a disabled SDK reports nothing; the metrics
    /// still work, at the same cost).
    public init(cairn: Cairn, options: Options = Options()) {
        self.cairn = cairn
        self.options = options
        cairn.addPeriodic(every: options.interval) { [weak self] _ in self?.report() }
    }

    /// Makes a factory for `cairn` and bootstraps swift-metrics with it
    /// (`MetricsSystem.bootstrap`, which may be called once per process).
    @discardableResult
    public static func bootstrap(cairn: Cairn, options: Options = Options()) -> CairnMetricsFactory {
        let factory = CairnMetricsFactory(cairn: cairn, options: options)
        MetricsSystem.bootstrap(factory)
        return factory
    }

    // MARK: MetricsFactory

    /// A counter: a cumulative monotonic sum.
    public func makeCounter(label: String, dimensions: [(String, String)]) -> CounterHandler {
        series(.counter, label, dimensions) { CounterSeries(label: $0, dimensions: $1) }
    }

    /// A floating-point counter: a cumulative monotonic sum.
    public func makeFloatingPointCounter(label: String, dimensions: [(String, String)]) -> FloatingPointCounterHandler {
        series(.floatingCounter, label, dimensions) { FloatingCounterSeries(label: $0, dimensions: $1) }
    }

    /// A meter: a gauge.
    public func makeMeter(label: String, dimensions: [(String, String)]) -> MeterHandler {
        series(.gauge, label, dimensions) { GaugeSeries(label: $0, dimensions: $1) }
    }

    /// A recorder: a histogram over ``Options/bounds`` when `aggregate`, else a gauge.
    public func makeRecorder(label: String, dimensions: [(String, String)], aggregate: Bool) -> RecorderHandler {
        if !aggregate { return series(.gauge, label, dimensions) { GaugeSeries(label: $0, dimensions: $1) } }
        let bounds = options.bounds
        return series(.histogram, label, dimensions) { HistogramSeries(label: $0, dimensions: $1, bounds: bounds, unit: nil) }
    }

    /// A timer: a histogram of seconds over ``Options/timerBounds``.
    public func makeTimer(label: String, dimensions: [(String, String)]) -> TimerHandler {
        let bounds = options.timerBounds
        return series(.timer, label, dimensions) { HistogramSeries(label: $0, dimensions: $1, bounds: bounds, unit: "s") }
    }

    /// Ends the counter's series.
    public func destroyCounter(_ handler: CounterHandler) { retire(handler) }
    /// Ends the floating-point counter's series.
    public func destroyFloatingPointCounter(_ handler: FloatingPointCounterHandler) { retire(handler) }
    /// Ends the meter's series.
    public func destroyMeter(_ handler: MeterHandler) { retire(handler) }
    /// Ends the recorder's series.
    public func destroyRecorder(_ handler: RecorderHandler) { retire(handler) }
    /// Ends the timer's series.
    public func destroyTimer(_ handler: TimerHandler) { retire(handler) }

    // MARK: Series

    /// The series of `label` and `dimensions`, made by `make` when new (or, past the
    /// cap, the label's overflow series).
    private func series<S: Series>(_ kind: SeriesKind, _ label: String, _ dimensions: [(String, String)],
                                   _ make: (String, [(String, String)]) -> S) -> S {
        let key = SeriesKey(kind: kind, label: label, dimensions: dimensions)
        let (found, overflowed) = registry.withLock { r -> (Series, Bool) in
            if let existing = r.series[key] { return (existing, false) }
            if r.series.count - r.overflowSeries < options.maxSeries {
                let made = make(label, key.sortedDimensions)
                r.series[key] = made
                return (made, false)
            }
            let overflowKey = SeriesKey(kind: kind, label: label, dimensions: [(Self.overflowDimension, "true")])
            if let existing = r.series[overflowKey] { return (existing, true) }
            let made = make(label, overflowKey.sortedDimensions)
            r.series[overflowKey] = made
            r.overflowSeries += 1
            return (made, true)
        }
        if overflowed { cairn.countChange("metric_series_overflow") }
        // A key's kind decides the class `make` returns, so the cast holds; were it not
        // to, the caller would still get a working (unreported) handler.
        return found as? S ?? make(label, key.sortedDimensions)
    }

    /// The dimension that marks a label's overflow series (OpenTelemetry's name).
    static let overflowDimension = "otel.metric.overflow"

    private func retire(_ handler: AnyObject) {
        guard let series = handler as? Series else { return }
        registry.withLock { r in
            guard let key = r.series.first(where: { $0.value === series })?.key else { return }
            r.series[key] = nil
            r.retired.append(series)
        }
    }

    /// Reports every series (on Cairn's background thread, or at its shutdown).
    func report() {
        let (live, retired) = registry.withLock { r -> ([Series], [Series]) in
            defer { r.retired.removeAll() }
            return (Array(r.series.values), r.retired)
        }
        let nowMillis = EventClock.nowMillis()
        for series in live + retired {
            guard var properties = series.report(nowMillis: nowMillis) else { continue }
            if !series.dimensions.isEmpty {
                properties["dimensions"] = .object(Dictionary(series.dimensions, uniquingKeysWith: { $1 }).mapValues { .string($0) })
            }
            cairn.reportMetric(series.label, properties: properties)
        }
    }
}

/// What kind of series a key names (one label may have a series of each kind).
enum SeriesKind: UInt8 {
    case counter, floatingCounter, gauge, histogram, timer
}

/// A series' identity: its kind, label and dimensions (sorted by name, then value).
struct SeriesKey: Hashable {
    let kind: SeriesKind
    let label: String
    let flat: [String]

    init(kind: SeriesKind, label: String, dimensions: [(String, String)]) {
        self.kind = kind
        self.label = label
        flat = dimensions.sorted { $0.0 != $1.0 ? $0.0 < $1.0 : $0.1 < $1.1 }.flatMap { [$0.0, $0.1] }
    }

    var sortedDimensions: [(String, String)] {
        stride(from: 0, to: flat.count, by: 2).map { (flat[$0], flat[$0 + 1]) }
    }
}

/// One series: what it reports.
class Series: @unchecked Sendable {
    // @unchecked: subclasses keep their state in atomics or a Mutex.
    let label: String
    let dimensions: [(String, String)]
    /// When the cumulative value began (Unix ms): made, or reset.
    let startMillis = Atomic<UInt64>(EventClock.nowMillis())

    init(label: String, dimensions: [(String, String)]) {
        self.label = label
        self.dimensions = dimensions
    }

    /// The report's properties; nil when there is nothing to report yet.
    func report(nowMillis: UInt64) -> [String: CairnValue]? { nil }
}

final class CounterSeries: Series, CounterHandler, @unchecked Sendable {
    private let total = Atomic<Int64>(0)

    func increment(by amount: Int64) {
        guard amount > 0 else { return }
        total.wrappingAdd(amount, ordering: .relaxed)
    }

    func reset() {
        total.store(0, ordering: .relaxed)
        startMillis.store(EventClock.nowMillis(), ordering: .relaxed)
    }

    override func report(nowMillis: UInt64) -> [String: CairnValue]? {
        ["kind": "sum", "monotonic": true, "temporality": "cumulative", "value": .int(total.load(ordering: .relaxed)),
         "start_ms": .int(Int64(clamping: startMillis.load(ordering: .relaxed)))]
    }
}

/// A `Double` kept in an atomic as its bits.
struct AtomicDouble: ~Copyable {
    let bits: Atomic<UInt64>

    init(_ value: Double) { bits = Atomic(value.bitPattern) }

    func load() -> Double { Double(bitPattern: bits.load(ordering: .relaxed)) }

    func store(_ value: Double) { bits.store(value.bitPattern, ordering: .relaxed) }

    func add(_ amount: Double) {
        var old = bits.load(ordering: .relaxed)
        while true {
            let (done, seen) = bits.compareExchange(expected: old, desired: (Double(bitPattern: old) + amount).bitPattern,
                                                    ordering: .relaxed)
            if done { return }
            old = seen
        }
    }
}

final class FloatingCounterSeries: Series, FloatingPointCounterHandler, @unchecked Sendable {
    private let total = AtomicDouble(0)

    func increment(by amount: Double) {
        guard amount > 0, amount.isFinite else { return }
        total.add(amount)
    }

    func reset() {
        total.store(0)
        startMillis.store(EventClock.nowMillis(), ordering: .relaxed)
    }

    override func report(nowMillis: UInt64) -> [String: CairnValue]? {
        ["kind": "sum", "monotonic": true, "temporality": "cumulative", "value": .double(total.load()),
         "start_ms": .int(Int64(clamping: startMillis.load(ordering: .relaxed)))]
    }
}

/// A meter, or a recorder that does not aggregate: the last value.
final class GaugeSeries: Series, MeterHandler, RecorderHandler, @unchecked Sendable {
    private let value = AtomicDouble(0)
    private let hasValue = Atomic<Bool>(false)

    func set(_ value: Int64) { set(Double(value)) }

    func set(_ value: Double) {
        guard value.isFinite else { return }
        self.value.store(value)
        hasValue.store(true, ordering: .relaxed)
    }

    func increment(by amount: Double) {
        guard amount.isFinite else { return }
        value.add(amount)
        hasValue.store(true, ordering: .relaxed)
    }

    func decrement(by amount: Double) { increment(by: -amount) }

    func record(_ value: Int64) { set(Double(value)) }

    func record(_ value: Double) { set(value) }

    override func report(nowMillis: UInt64) -> [String: CairnValue]? {
        guard hasValue.load(ordering: .relaxed) else { return nil }
        return ["kind": "gauge", "value": .double(value.load())]
    }
}

/// A recorder that aggregates, or a timer (values in nanoseconds, reported in seconds).
final class HistogramSeries: Series, RecorderHandler, TimerHandler, @unchecked Sendable {
    private let bounds: [Double]
    private let unit: String?
    private let state: Mutex<State>

    struct State {
        var counts: [UInt64]
        var count: UInt64 = 0
        var sum: Double = 0
        var min: Double = .infinity
        var max: Double = -.infinity
    }

    init(label: String, dimensions: [(String, String)], bounds: [Double], unit: String?) {
        self.bounds = bounds
        self.unit = unit
        state = Mutex(State(counts: [UInt64](repeating: 0, count: bounds.count + 1)))
        super.init(label: label, dimensions: dimensions)
    }

    func record(_ value: Int64) { record(Double(value)) }

    func record(_ value: Double) {
        guard value.isFinite else { return }
        // The first bucket whose bound is at or above the value (binary search).
        var low = 0, high = bounds.count
        while low < high {
            let mid = (low + high) / 2
            if bounds[mid] < value { low = mid + 1 } else { high = mid }
        }
        state.withLock { s in
            s.counts[low] &+= 1
            s.count &+= 1
            s.sum += value
            if value < s.min { s.min = value }
            if value > s.max { s.max = value }
        }
    }

    func recordNanoseconds(_ duration: Int64) { record(Double(duration) / 1e9) }

    override func report(nowMillis: UInt64) -> [String: CairnValue]? {
        let s = state.withLock { $0 }
        var p: [String: CairnValue] = [
            "kind": "histogram", "temporality": "cumulative", "count": .int(Int64(clamping: s.count)), "sum": .double(s.sum),
            "bounds": .array(bounds.map { .double($0) }), "counts": .array(s.counts.map { .int(Int64(clamping: $0)) }),
            "start_ms": .int(Int64(clamping: startMillis.load(ordering: .relaxed))),
        ]
        if s.count > 0 {
            p["min"] = .double(s.min)
            p["max"] = .double(s.max)
        }
        if let unit { p["unit"] = .string(unit) }
        return p
    }
}
#endif
