// Forming batches: from the ring, at the size the load calls for, framed once, one
// metadata slot each (the ``Flight``s the rest of the uploader moves).
import CairnBase
import CairnProcessor
import CairnStore
import CCairnCore
import CZstd
import FoundationEssentials
import Glibc

extension Uploader {
    /// One request of a batch, and its way to its destination: attempts, backoff, and
    /// whether it is done (delivered, dropped by the destination's rules, or stored).
    /// A batch has one leg per request it was built into (docs/ARCHITECTURE.md,
    /// "Export destinations"); today one, the native request.
    final class Leg {
        /// What the senders' outcomes name it by.
        let token: Int
        /// The request, as built once.
        let request: UploadRequest
        /// Whether it carries the batch's drop report (``Flight/reported``), marked
        /// reported once it is delivered or stored.
        let reportsDrops: Bool
        /// Attempts made in this process.
        var attempts = 0
        /// When the next attempt may start.
        var due: ContinuousClock.Instant
        /// When the store may be offered it again, after it refused it (full, failing).
        var storeDue: ContinuousClock.Instant?
        var sending = false
        var done = false
        init(token: Int, request: UploadRequest, reportsDrops: Bool, due: ContinuousClock.Instant) {
            self.token = token
            self.request = request
            self.reportsDrops = reportsDrops
            self.due = due
        }
    }

    /// A batch formed from the ring, from its framing until its records are released.
    /// Flights are kept in ring order; their records are released in that order, each
    /// once it and every flight before it is done (every leg delivered, refused or
    /// stored).
    final class Flight {
        let mark: RingBatchMark
        /// The metadata slot its mark is kept in.
        let slot: Int
        let events: Int
        /// The drop counts its requests carry.
        let reported: [DropReport]
        /// Its requests; none for a batch the last process had stored, or with nothing
        /// to send (only its records remain to be released).
        let legs: [Leg]
        /// Whether its mark, and the contexts its records need, are in the snapshot
        /// store (``keepMarks()``); always with no store.
        var marked = false
        /// Counted in ``UploaderStats/unmarkedSends``.
        var unmarkedCounted = false
        /// Every leg done.
        var done: Bool { legs.allSatisfy(\.done) }
        init(mark: RingBatchMark, slot: Int, events: Int, reported: [DropReport], legs: [Leg]) {
            self.mark = mark
            self.slot = slot
            self.events = events
            self.reported = reported
            self.legs = legs
        }
    }

    /// How many batches may be formed and not yet released: the requests out, plus as
    /// many again framed ahead while the collector answers. A batch framed ahead waits
    /// in memory compressed (about a tenth of its size in the ring) instead of in the
    /// ring's pages, which go as soon as it is framed: at 100k events a second and
    /// every slot out for a 50 ms round trip, the ring otherwise holds 2 MiB or more
    /// unframed. While the collector fails, no more than the requests allowed out.
    /// OTLP requests sent uncompressed (the specification's default) are ten times
    /// the size: none is framed ahead.
    var maxFormed: Int {
        anyRouteFailing || otlpUncompressed ? maxInFlight : min(2 * maxInFlight, RingBatchMark.slots)
    }

    /// Whether an OTLP signal is sent uncompressed.
    var otlpUncompressed: Bool {
        [options.otlp?.logs, options.otlp?.traces, options.otlp?.metrics].contains { $0?.compression == OTLPConfiguration.Compression.none }
    }

    /// Forms batches from the ring while fewer than ``maxFormed`` are formed and not yet
    /// released and one is due (full, old enough, or a flush waits). Returns when to
    /// look again when the next batch is not due yet.
    func formBatches() -> ContinuousClock.Instant? {
        while flights.count < maxFormed {
            let now = clock.now
            let generation = state.withLock { $0.flushGeneration }
            let limits = batchLimits
            let from = flights.last?.mark.next ?? ring.readPosition
            do {
                try ring.peek(from: from, maxRecords: limits.events, maxBytes: limits.bytes, into: &peeked)
            } catch {
                return now + .milliseconds(100)
            }
            let peekedRecords = peeked.records.count
            let peekedBytes = peeked.records.reduce(0) { $0 + $1.bytes.count }
            // The byte limit is on what is sent: bare records completed with their context.
            contexts.fit(&peeked, maxBytes: limits.bytes)
            let run = peeked
            if run.records.isEmpty {
                // Padding only: released now when nothing waits before it, else with the
                // next batch, whose mark starts before it. The context in force goes on
                // past it (the padding ends a lap, its run's records continue at the
                // start): kept first to cover the new cursor, or a process killed now
                // would start without it.
                if flights.isEmpty && run.next != ring.readPosition
                    && contexts.persist(to: store, ring: ring, upTo: run.next) {
                    try? ring.commit(upTo: run.next)
                }
                firstSeen = nil
                if flights.isEmpty {
                    markIdle(generation)
                    releaseBuffersIfDue(now)
                    // Nothing formed and nothing out: no pass until the first record
                    // appended (the alarm wakes the worker), but for the buffers'
                    // release, or padding left (its context could not be kept).
                    guard ring.armFillAlarm(at: run.next + 1) else { return now + .milliseconds(1) }
                    if run.next != ring.readPosition { return now + options.maxBatchAge }
                    return framedSinceRelease > 0 ? lastRelease + Self.bufferReleaseDelay : nil
                }
                // Records are 16 bytes at least: wake early rather than late, and measure.
                let fullAt = run.next + min(UInt64(limits.bytes), UInt64(limits.events) * 16)
                return ring.armFillAlarm(at: fullAt) ? now + options.maxBatchAge : now + .milliseconds(1)
            }
            let first = run.records[0].position
            if firstSeen?.position != first { firstSeen = (first, now) }
            // Full when the limits cut the run short: its count, its size with contexts, or
            // its size, which the next record would take past the limit. (Not merely a
            // record after it: woken by a burst's first record, the worker finds the
            // burst still being appended.)
            let full = run.records.count >= limits.events || run.records.count < peekedRecords
                || ((try? ring.peek(from: run.next, maxRecords: 1, maxBytes: .max).records.first)
                    .map { peekedBytes + $0.bytes.count > limits.bytes } ?? false)
            let due = (firstSeen?.at ?? now) + options.maxBatchAge
            ringBytesPerRecord = max(16, (run.next - first) / UInt64(run.records.count))
            if !full && !flushing && now < due {
                // Wake when the batch would be full, or at its age. Armed too late (the
                // records are there already): look again soon.
                let fullAt = first + min(UInt64(limits.bytes), UInt64(limits.events) * ringBytesPerRecord)
                return ring.armFillAlarm(at: fullAt) ? due : min(due, now + .milliseconds(1))
            }
            // Grow only while requests queue up (half the slots out or more): a full batch
            // alone, with the collector keeping up, is no reason to hold more in memory.
            // Not smaller batches to free ring pages sooner: at 100k events a second, twice
            // the requests grew the senders' heap arenas by more (0.4 MiB) than the ring
            // pages saved (0.2 MiB).
            let out = flights.filter { !$0.done }.count
            if full && out >= max(1, maxInFlight / 2) {
                batchScale = min(batchScale * 2, Self.maxBatchScale)
            } else if !full {
                batchScale = max(1, batchScale / 2)
            }
            // The mark names the run from where this batch was read (padding may come
            // before the first record), which is where the next start finds it.
            let mark = RingBatchMark(ringID: ring.id, first: from, next: run.next,
                                     events: UInt32(run.records.count),
                                     batchID: UInt64.random(in: 1...UInt64.max), key: UUID().uuidString.lowercased())
            startBatch(run, mark: mark, slot: freeSlot())
            firstSeen = nil
            progressed = true
        }
        return nil
    }

    /// Once the uploader is idle after framing batches, at most once a second, lets go
    /// of what framing keeps between batches: the zstd context (about 0.3 MiB resident,
    /// its own mapping, so freeing it returns it to the system) and the reused run and
    /// batch arrays. The next batch makes them again (tens of microseconds).
    ///
    /// Not glibc's `malloc_trim`: it walks and locks every arena, the service's main
    /// arena included; on a fragmented 1 GiB heap it held that lock for 65-70 ms.
    func releaseBuffersIfDue(_ now: ContinuousClock.Instant) {
        guard framedSinceRelease > 0, now - lastRelease >= Self.bufferReleaseDelay else { return }
        encoder = nil
        otlpEncoders.removeAll()
        otlpZstd = nil
        peeked = Ring.Run()
        framing = RingContexts.Batch()
        framedSinceRelease = 0
        lastRelease = now
    }

    /// How long after a release the framing buffers (the zstd context among them) may
    /// be released again, once batches were framed since.
    static let bufferReleaseDelay: Duration = .seconds(1)

    /// A metadata slot no flight holds.
    func freeSlot() -> Int {
        var slot = 0
        while flights.contains(where: { $0.slot == slot }) { slot += 1 }
        return slot
    }

    /// The limits of the next batch: the options' times ``batchScale``.
    var batchLimits: (events: Int, bytes: Int) {
        let bytes = min(options.maxBatchBytes.multipliedReportingOverflow(by: batchScale).partialValue,
                        max(options.maxBatchBytes, min(Self.maxGrownBatchBytes, Int(clamping: ring.capacity / 8))))
        return (options.maxBatchEvents * batchScale, bytes)
    }

    /// Frames `run` as the batch `mark` describes and adds it to the flights, with its
    /// mark kept in metadata slot `slot` (``keepMarks()``): a process killed before the
    /// batch is safe rebuilds exactly this batch, with this key, at its next start
    /// (``resumeMarkedBatches()``).
    func startBatch(_ run: Ring.Run, mark: RingBatchMark, slot: Int, resumed: Bool = false) {
        // Bare records completed with their context; context records are not sent, but
        // the ones the next start may need are kept before any record is released.
        contexts.complete(run, into: &framing)
        if framing.fallbacks > 0 && options.debugLogging {
            let note = "[cairn] \(framing.fallbacks) events without the context of the run that tracked them "
                + "(lost with the snapshot store's ring_context): sent with this process's, marked "
                + "\"context_recovered\":false (\(contexts.fallbacks) since start)\n"
            writeStandardError(note)
        }
        // Nothing to send (context records only, or records that cannot be framed): its
        // records are released in turn. Its mark says so (as for a stored batch), so
        // that a process killed before then goes on past it to the batches after.
        var nothingToSend = mark
        nothingToSend.stored = true
        guard framing.events > 0 else {
            add(Flight(mark: nothingToSend, slot: slot, events: 0, reported: [], legs: []))
            return
        }
        do {
            var legs: [Leg] = []
            var mark = mark
            var reported: [DropReport] = []
            if options.native {
                let encoder = try self.encoder ?? FrameEncoder(level: options.compressionLevel)
                self.encoder = encoder
                let body = try framing.withSlices { (slices, ends) throws(CairnError) in
                    try encoder.encode(batchID: mark.batchID, pieces: slices, ends: ends)
                }
                // Drops ride with one request at a time, so that no count is reported
                // twice; the mark keeps them, so a batch resumed after a kill (which the
                // collector may already hold) is rebuilt with the same drop headers
                // under its key.
                var built: (request: UploadRequest, reported: [DropReport])
                if resumed {
                    built = makeRequest(body: body, key: mark.key, reportingDrops: false)
                    if let carried = mark.drops {
                        built.request.headers += carried.headers
                        built.reported = carried.reported
                    }
                } else {
                    let carrying = flights.contains { !$0.done && !$0.reported.isEmpty }
                    built = makeRequest(body: body, key: mark.key, reportingDrops: !carrying)
                    if !built.reported.isEmpty {
                        let names = ["cairn-dropped", "cairn-dropped-sessions"]
                        mark.drops = .init(headers: built.request.headers.filter { names.contains($0.name.lowercased()) },
                                           reported: built.reported)
                    }
                }
                nextToken += 1
                legs.append(Leg(token: nextToken, request: built.request, reportsDrops: true, due: clock.now))
                reported = built.reported
            }
            if let otlp = options.otlp {
                for request in otlpRequests(otlp) {
                    nextToken += 1
                    legs.append(Leg(token: nextToken, request: request, reportsDrops: false, due: clock.now))
                }
            }
            if let tap = options.tap { tap(framing.records()) }
            framedSinceRelease += 1
            // The requests hold the batch now: its ring pages need not stay in memory
            // while they are out (the ring file keeps them until they are released).
            try? ring.releasePages(from: mark.first, to: run.next)
            // And a backlog behind it (see the main loop), at each batch: a pass that
            // stores many batches (a slow collector, a full store) takes a while.
            try? ring.releaseBacklog(keeping: Self.backlogKeptMapped)
            guard !legs.isEmpty else {
                add(Flight(mark: nothingToSend, slot: slot, events: 0, reported: [], legs: []))
                return
            }
            // Resumed: the legs the last process had done are not sent again (when the
            // batch was built into the same legs).
            if resumed, legs.count > 1, let store,
               let bytes = try? store.metadata(RingBatchLegs.metadataKey(slot: slot)), let done = RingBatchLegs(bytes),
               done.batchID == mark.batchID, Int(done.count) == legs.count {
                for (k, leg) in legs.enumerated() where done.done & (1 << UInt64(k)) != 0 {
                    leg.done = true
                    if leg.reportsDrops { markReported(reported) }
                }
                state.withLock { $0.stats.legsResumedDone += legs.filter(\.done).count }
            }
            add(Flight(mark: mark, slot: slot, events: framing.events, reported: reported, legs: legs))
        } catch {
            // Records that cannot be framed (a newline inside one): drop them, counted,
            // rather than block the ring.
            count(drop: .unframeable, framing.events)
            add(Flight(mark: nothingToSend, slot: slot, events: 0, reported: [], legs: []))
        }
    }

    /// The OTLP requests of the batch being framed: its records encoded once per
    /// encoding the signals use (docs/FORMATS.md, "OTLP export"), each request
    /// compressed as its signal asks. Records that are not events are counted
    /// (`unframeable`).
    func otlpRequests(_ otlp: OTLPConfiguration) -> [UploadRequest] {
        // A context for the signals' zstd, and for packing uncompressed bodies.
        if otlpZstd == nil { otlpZstd = ZstdContext() }
        let built = Self.otlpRequests(otlp, settings: otlpSettings, sdkVersion: options.sdkVersion, zstd: otlpZstd,
                                      encoders: &otlpEncoders, records: { framing.forEachRecord($0) })
        if built.refused > 0 { count(drop: .unframeable, built.refused) }
        return built.requests
    }

    /// The OTLP requests of the records `records` hands over (a bare record with its
    /// completion, or a whole one), encoded once per encoding the signals use, by the
    /// one of `encoders` for it (made with `settings` and kept there when missing); and
    /// how many records were not events. With `zstd`, an uncompressed body of more than
    /// one frame is kept packed (``PackedBody``).
    static func otlpRequests(_ otlp: OTLPConfiguration, settings: OTLPEncoder.Settings, sdkVersion: String,
                             zstd: ZstdContext? = nil, encoders: inout [OTLPEncoder],
                             records: ((UnsafeRawBufferPointer, UnsafeRawBufferPointer?) -> Void) -> Void)
        -> (requests: [UploadRequest], refused: Int)
    {
        var out: [UploadRequest] = []
        let observed = EventClock.nowMillis() &* 1_000_000
        var encodings: [OTLPEncoder.Encoding] = []
        for signal in otlp.signals where !encodings.contains(signal.encoding) { encodings.append(signal.encoding) }
        var refusedFirst = 0
        for (k, encoding) in encodings.enumerated() {
            let encoder = encoders.first { $0.settings.encoding == encoding } ?? {
                var s = settings
                s.encoding = encoding
                encoders.append(OTLPEncoder(settings: s))
                return encoders[encoders.count - 1]
            }()
            var refused = 0
            records { record, completion in
                if !encoder.add(record, completion: completion, observedNanos: observed) { refused += 1 }
            }
            if k == 0 { refusedFirst = refused }
            // Each body made where the encoder wrote it, for its signal (none for a
            // signal sent in the other encoding, or not at all).
            let (logs, traces, metrics) = encoder.finish { pieces -> OTLPBody? in
                guard let signal = otlp.signal(pieces.signal), signal.encoding == encoding else { return nil }
                return otlpBody(pieces, signal.compression, zstd: zstd)
            }
            for (requests, signal, destination) in [(logs, otlp.logs, UploadDestination.otlpLogs),
                                                    (traces, otlp.traces, .otlpTraces),
                                                    (metrics, otlp.metrics, .otlpMetrics)] {
                guard let signal else { continue }
                for r in requests {
                    if let body = r.body { out.append(otlpRequest(body, records: r.records, signal, destination, sdkVersion: sdkVersion)) }
                }
            }
        }
        return (out, refusedFirst)
    }

    /// An OTLP request's body as it is kept: its bytes, its `Content-Encoding`, and
    /// whether the bytes are packed.
    struct OTLPBody {
        var bytes: [UInt8]
        var contentEncoding: String?
        var packed = false
    }

    /// The body of `pieces` compressed as its signal asks; uncompressed, packed when it
    /// is more than one frame and `zstd` is given.
    static func otlpBody(_ pieces: OTLPEncoder.BodyPieces, _ compression: OTLPConfiguration.Compression,
                         zstd context: ZstdContext?) -> OTLPBody {
        switch compression {
        case .gzip:
            // Without zlib here, the body goes as it is (valid, only larger).
            if let gzipped = Gzip.compress(pieces.joined()) { return OTLPBody(bytes: gzipped, contentEncoding: "gzip") }
        case .zstd:
            if let compressed = Self.zstd(pieces.joined(), context: context) {
                return OTLPBody(bytes: compressed, contentEncoding: "zstd")
            }
        case .none:
            if pieces.count > PackedBody.frameBytes, let context, let packed = PackedBody.pack(pieces, context: context) {
                return OTLPBody(bytes: packed, packed: true)
            }
        }
        return OTLPBody(bytes: pieces.joined())
    }

    /// One OTLP request (docs/FORMATS.md, "OTLP export", "Requests").
    static func otlpRequest(_ body: OTLPBody, records: Int, _ signal: OTLPConfiguration.Signal,
                            _ destination: UploadDestination, sdkVersion: String) -> UploadRequest {
        var headers = [HTTPHeader("Content-Type", signal.encoding == .protobuf ? "application/x-protobuf" : "application/json"),
                       HTTPHeader("User-Agent", "cairn-swift/\(sdkVersion)")]
        if let encoding = body.contentEncoding { headers.append(HTTPHeader("Content-Encoding", encoding)) }
        headers += signal.headers
        var request = UploadRequest(url: signal.url, headers: headers, body: body.bytes, idempotencyKey: "",
                                    destination: destination, records: records)
        request.packed = body.packed
        return request
    }

    /// `bytes` as one zstd frame (level 3), or nil when zstd fails; with `context`
    /// (kept between batches, its tables not allocated for each), else a context of
    /// its own.
    static func zstd(_ bytes: [UInt8], context: ZstdContext? = nil) -> [UInt8]? {
        var out = [UInt8](repeating: 0, count: ZSTD_compressBound(bytes.count))
        let n = out.withUnsafeMutableBytes { o in
            bytes.withUnsafeBytes { b in
                if let cctx = context?.cctx {
                    return ZSTD_compressCCtx(cctx, o.baseAddress, o.count, b.baseAddress, b.count, 3)
                }
                return ZSTD_compress(o.baseAddress, o.count, b.baseAddress, b.count, 3)
            }
        }
        guard ZSTD_isError(n) == 0 else { return nil }
        // At its size: the request keeps it while it is out (the bound is the input's size).
        return Array(out[..<n])
    }

    func add(_ f: Flight) {
        flights.append(f)
        keepMarks()
    }
}

/// A zstd compression context, kept while batches are framed (its tables are a
/// megabyte or more: allocated once, not for each request).
package final class ZstdContext {
    let cctx: OpaquePointer?
    /// A context; its tables are allocated by its first compression.
    package init() { cctx = ZSTD_createCCtx() }
    deinit { ZSTD_freeCCtx(cctx) }
}
