// CairnBenchmarks: Cairn's figures, each measured side by side with its baseline in the
// same run (see the anchors in the design notes): the ring's append against a raw
// fetch_add + memcpy into the same kind of mapping, and batch framing against a raw
// ZSTD_compress of the same bytes.
//
//   swift run -c release CairnBenchmarks [--json] [--quick]
//
// Prints a table (or, with --json, one JSON object) and exits 1 when a figure is over
// its budget.
import CairnBase
import Cairn
import CairnCrash
import CairnProcessor
import CairnStore
import CairnUploader
import CCairnCrash
import CLMDB
import CZstd
import Foundation
import Synchronization

let arguments = Set(CommandLine.arguments.dropFirst())
let jsonOutput = arguments.contains("--json")
let quick = arguments.contains("--quick")

// MARK: - Measurement

/// Monotonic nanoseconds.
@inline(__always) func now() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
}

func percentile(_ values: [Double], _ p: Double) -> Double {
    guard !values.isEmpty else { return .nan }
    let sorted = values.sorted()
    return sorted[min(sorted.count - 1, Int(Double(sorted.count - 1) * p + 0.5))]
}

/// A reusable barrier for a fixed number of threads (spinning: blocks are short).
final class SpinBarrier: @unchecked Sendable {
    private let parties: Int
    private let arrived = Atomic<Int>(0)
    private let generation = Atomic<Int>(0)
    init(_ parties: Int) { self.parties = parties }
    func wait() {
        let gen = generation.load(ordering: .acquiring)
        if arrived.wrappingAdd(1, ordering: .acquiringAndReleasing).newValue == parties {
            arrived.store(0, ordering: .relaxed)
            generation.wrappingAdd(1, ordering: .releasing)
        } else {
            while generation.load(ordering: .acquiring) == gen { sched_yield() }
        }
    }
}

/// Runs `body(thread, block)` on `threads` threads for `blocks` blocks; each block
/// starts on all threads together, and `between` (on thread 0, untimed) runs after
/// every block. Returns the wall time of each block in nanoseconds.
func timedBlocks(threads: Int, blocks: Int, between: @escaping @Sendable () -> Void,
                 _ body: @escaping @Sendable (Int) -> Void) -> [Double] {
    let barrier = SpinBarrier(threads)
    final class Times: @unchecked Sendable { var values: [Double] = [] }
    let times = Times()
    let done = DispatchGroup()
    for t in 0..<threads {
        done.enter()
        let thread = Thread {
            for _ in 0..<blocks {
                barrier.wait()
                let start = now()
                body(t)
                barrier.wait()
                if t == 0 {
                    times.values.append(Double(now() - start))
                    between()
                }
            }
            done.leave()
        }
        thread.stackSize = 1 << 20
        thread.start()
    }
    done.wait()
    return times.values
}

// MARK: - Data

struct Rng {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    mutating func pick<T>(_ xs: [T]) -> T { xs[Int(next() % UInt64(xs.count))] }
    mutating func hex(_ n: Int) -> String {
        String((0..<n).map { _ in "0123456789abcdef".randomElement(using: &self)! })
    }
}
extension Rng: RandomNumberGenerator {}

/// Realistic service events: about 400 bytes of JSON, 15 fields, shaped like the events
/// Cairn's processor writes: a UUIDv7 event id (time-ordered prefix, random tail), one
/// session per process, trace ids shared by the few events of one request, users from a
/// large population, and the enumerations and numbers services track.
func realisticEvents(_ count: Int, seed: UInt64) -> [[UInt8]] {
    var rng = Rng(state: seed)
    let names = ["checkout", "login", "search", "add_to_cart", "view_item", "api_request", "job_done"]
    let plans = ["free", "pro", "team", "enterprise"]
    let routes = ["/v1/orders", "/v1/users/{id}", "/v1/search", "/v2/cart/items", "/health"]
    let regions = ["eu-west-1", "us-east-1", "ap-south-1"]
    let session = rng.hex(32)
    var ms: UInt64 = 1_764_690_000_000
    var trace = rng.hex(32), traceLeft = 0
    return (0..<count).map { i in
        ms += rng.next() % 3
        if traceLeft == 0 { trace = rng.hex(32); traceLeft = 1 + Int(rng.next() % 8) }
        traceLeft -= 1
        let stamp = String(ms, radix: 16)
        let padded = String(repeating: "0", count: max(0, 12 - stamp.count)) + stamp
        let eventID = "\(padded.prefix(8))-\(padded.suffix(4))-7\(rng.hex(3))-\(rng.hex(4))-\(rng.hex(12))"
        let sec = ms / 1000
        let time = String(format: "2026-12-02T%02d:%02d:%02d.%03dZ", Int(sec / 3600 % 24), Int(sec / 60 % 60),
                          Int(sec % 60), Int(ms % 1000))
        let json = """
        {"event_id":"\(eventID)","type":"track","name":"\(rng.pick(names))","time":"\(time)",\
        "distinct_id":"user-\(rng.next() % 5000)","session_id":"\(session)","trace_id":"\(trace)",\
        "properties":{"plan":"\(rng.pick(plans))","seats":\(rng.next() % 200),"route":"\(rng.pick(routes))",\
        "status":\(rng.pick([200, 200, 200, 201, 404, 500])),"duration_ms":\(Double(rng.next() % 100_000) / 100),\
        "region":"\(rng.pick(regions))","retry":\(rng.next() % 5 == 0)},"seq":\(i)}
        """
        return Array(json.utf8)
    }
}

let scratch = URL(fileURLWithPath: NSTemporaryDirectory()).standardizedFileURL.path
    + "/cairn-bench-\(getpid())"
try? FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)

// `--only memory-idle`: the whole-process memory of the linked and idle states alone
// (what the gate's own test runs); `--only process`: every whole-process figure;
// `--only memory`: every whole-process memory state alone; `--only flat`: its two
// flat-out states alone; `--only throughput`: the
// default-options throughput runs alone; `--only start`: the
// start figures alone; `--only otlp`: the OTLP encoding figures alone; `--only logging`: swift-log's
// `Logger` with Cairn's handler against its no-op handler, and swift-metrics' metrics.
// `--fill-store DIR`: fills DIR's snapshot store as the store-full state does, and exits
// (to look at that state by hand).
if let i = CommandLine.arguments.firstIndex(of: "--fill-store"), i + 1 < CommandLine.arguments.count {
    fillStore(CommandLine.arguments[i + 1])
    exit(0)
}
let onlyTrack = CommandLine.arguments.firstIndex(of: "--only").map {
    $0 + 1 < CommandLine.arguments.count && CommandLine.arguments[$0 + 1] == "track"
} ?? false
if !onlyTrack, let i = CommandLine.arguments.firstIndex(of: "--only"), i + 1 < CommandLine.arguments.count {
    switch CommandLine.arguments[i + 1] {
    case "memory-idle":
        benchWholeProcess(full: false)
    case "process":
        benchWholeProcess(full: true)
        benchDefaultThroughput()
    case "memory":
        benchWholeProcess(full: true)
    case "flat":
        let sink = Sink()
        benchFlatOut(sink: sink, seconds: quick ? "4" : "10")
        sink.stop()
    case "throughput":
        benchDefaultThroughput()
    case "start":
        recordStart()
    case "otlp":
        recordOTLPFigures()
    case "logging":
        // `benchSDK` is declared below: this run starts its own, as that one is.
        var o = Cairn.Options(appID: "bench", distinctID: "bench-host", release: "bench@1", dataDirectory: scratch + "/sdk")
        o.ringCapacity = 256 << 20
        let cairn = try? Cairn.start(o)
        recordLoggingFigures(cairn)
        recordMetricsFigures(cairn)
        _ = cairn?.shutdown(timeout: .seconds(10))
    default:
        FileHandle.standardError.write(Data("unknown --only \(CommandLine.arguments[i + 1])\n".utf8))
        exit(2)
    }
    try? FileManager.default.removeItem(atPath: scratch)
    finish()
}

// MARK: - Ring append vs raw fetch_add + memcpy

let recordSize = 200
let payload = [UInt8](repeating: 0x61, count: recordSize)

/// One shape of the append measurement. One producer: blocks of 1000 appends into the
/// default 1 MiB ring. Two producers: blocks long enough that the threads truly run
/// at the same time (16k appends each), so a 16 MiB ring holds a whole block.
struct AppendCase: Sendable {
    let threads: Int
    let capacity: UInt64
    let perBlock: Int
    let blocks: Int
}
let oneThread = AppendCase(threads: 1, capacity: 1 << 20, perBlock: 1000, blocks: quick ? 300 : 2000)
let twoThreads = AppendCase(threads: 2, capacity: 16 << 20, perBlock: 32_000, blocks: quick ? 20 : 100)

/// A warm MAP_SHARED file mapping of `bytes`, like the ring's.
func sharedMapping(_ path: String, bytes: Int) -> UnsafeMutableRawPointer? {
    let fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0o600)
    guard fd >= 0, posix_fallocate(fd, 0, off_t(bytes)) == 0 else { return nil }
    let p = mmap(nil, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
    close(fd)
    guard let p, p != MAP_FAILED else { return nil }
    memset(p, 0, bytes)
    return p
}

/// The baseline: one shared counter, fetch_add a 224-byte slot (the ring's footprint for
/// a 200-byte record), memcpy the payload. No header, no checks, no consumer.
final class RawRing: @unchecked Sendable {
    let base: UnsafeMutableRawPointer
    let mask: UInt64
    let counter = Atomic<UInt64>(0)
    init(_ base: UnsafeMutableRawPointer, capacity: UInt64) { self.base = base; mask = capacity - 1 }
    @inline(__always) func append(_ src: UnsafeRawPointer, _ len: Int) {
        let slot = counter.wrappingAdd(224, ordering: .relaxed).oldValue
        let off = Int(slot & mask)
        (base + (off + 224 <= Int(mask + 1) ? off : 0)).copyMemory(from: src, byteCount: len)
    }
}

/// Drains and commits everything in the ring (the untimed consumer between blocks).
func drainAll(_ ring: OpaquePointer) {
    var recs = [cairn_ring_record_t](repeating: cairn_ring_record_t(), count: 4096)
    var from = cairn_ring_read_pos(ring)
    while true {
        var next: UInt64 = 0
        let n = recs.withUnsafeMutableBufferPointer {
            cairn_ring_peek(ring, from, $0.baseAddress, 4096, Int.max, &next)
        }
        if n < 0 || next == from { break }
        from = next
    }
    _ = cairn_ring_commit(ring, from)
}

func openRing(_ name: String, capacity: UInt64, reclaim: UInt32) -> OpaquePointer? {
    var opts = cairn_ring_options_t()
    cairn_ring_options_init(&opts)
    opts.capacity = capacity
    opts.reclaim_bytes = reclaim
    var ring: OpaquePointer?
    let path = scratch + "/" + name
    unlink(path)
    return cairn_ring_open(path, &opts, &ring) == 0 ? ring : nil
}

struct Shared<T>: @unchecked Sendable { let value: T }

func benchRing(_ c: AppendCase, reclaim: UInt32) -> Double {
    guard let ring = openRing("ring-\(c.threads)-\(reclaim)", capacity: c.capacity, reclaim: reclaim) else {
        FileHandle.standardError.write("cannot open a ring in \(scratch)\n".data(using: .utf8)!)
        exit(2)
    }
    defer { cairn_ring_close(ring) }
    let h = Shared(value: ring)
    let per = c.perBlock / c.threads
    let failures = Atomic<Int>(0)
    let times = timedBlocks(threads: c.threads, blocks: c.blocks, between: { drainAll(h.value) }) { _ in
        payload.withUnsafeBytes { p in
            for _ in 0..<per where cairn_ring_append(h.value, p.baseAddress, recordSize) != 0 {
                failures.wrappingAdd(1, ordering: .relaxed)
            }
        }
    }
    if failures.load(ordering: .relaxed) != 0 {
        FileHandle.standardError.write("ring appends failed during the benchmark\n".data(using: .utf8)!)
        exit(2)
    }
    return percentile(times.map { $0 / Double(per * c.threads) }, 0.5)
}

func benchRaw(_ c: AppendCase) -> Double {
    guard let base = sharedMapping(scratch + "/raw-\(c.threads)", bytes: Int(c.capacity)) else { exit(2) }
    defer { munmap(base, Int(c.capacity)) }
    let raw = RawRing(base, capacity: c.capacity)
    let per = c.perBlock / c.threads
    let times = timedBlocks(threads: c.threads, blocks: c.blocks, between: {}) { _ in
        payload.withUnsafeBytes { p in
            for _ in 0..<per { raw.append(p.baseAddress!, recordSize) }
        }
    }
    return percentile(times.map { $0 / Double(per * c.threads) }, 0.5)
}

// Warm up caches, page tables and CPU frequency before measuring.
_ = benchRaw(oneThread)
_ = benchRing(oneThread, reclaim: 0)

let raw1 = benchRaw(oneThread)
let ring1 = benchRing(oneThread, reclaim: 0)
let ring1Reclaim = benchRing(oneThread, reclaim: 64 * 1024)
let raw2 = benchRaw(twoThreads)
let ring2 = benchRing(twoThreads, reclaim: 0)

record("raw_append_ns_p50", "raw fetch_add + memcpy, 200 B, 1 thread", raw1, "ns")
record("ring_append_ns_p50", "ring append, 200 B, 1 producer", ring1, "ns")
record("ring_append_ratio", "ring / raw, 1 producer", ring1 / raw1, "x", goal: "<= 2")
record("ring_append_reclaim_ns_p50", "ring append, pages reclaimed (default)", ring1Reclaim, "ns")
record("raw_append_2t_ns_p50", "raw, 2 threads, per record in total", raw2, "ns")
record("ring_append_2t_ns_p50", "ring append, 2 producers, per record in total", ring2, "ns")
record("ring_append_2t_ratio", "ring / raw, 2 producers", ring2 / raw2, "x")

// MARK: - Resident memory of the ring at steady load

/// Resident kilobytes of this process's mapping of `path` (from /proc/self/smaps).
func residentKB(of path: String) -> Double {
    guard let fh = FileHandle(forReadingAtPath: "/proc/self/smaps"), let data = try? fh.readToEnd() else { return .nan }
    var inRing = false
    for line in String(decoding: data, as: UTF8.self).split(separator: "\n") {
        if line.first?.isHexDigit == true && line.contains("-") && line.contains(" ") {
            inRing = line.hasSuffix(path)
        } else if inRing && line.hasPrefix("Rss:") {
            return Double(line.split(separator: " ", omittingEmptySubsequences: true)[1]) ?? .nan
        }
    }
    return .nan
}

/// A default ring (1 MiB) fed 100k records of 200 bytes in bursts of 500, drained after
/// each burst, as the uploader would: what stays resident is the SDK's memory cost.
func benchResident() -> Double {
    let path = scratch + "/resident.ring"
    var ring: OpaquePointer?
    guard cairn_ring_open(path, nil, &ring) == 0, let ring else { exit(2) }
    defer { cairn_ring_close(ring) }
    payload.withUnsafeBytes { p in
        for _ in 0..<200 {
            for _ in 0..<500 { _ = cairn_ring_append(ring, p.baseAddress, recordSize) }
            drainAll(ring)
        }
    }
    return residentKB(of: path)
}
record("ring_rss_kb", "ring resident memory, default options, steady load", benchResident(), "KiB",
       goal: "<= 1024", budget: 5 * 1024)

// MARK: - Frame encoding vs raw ZSTD_compress

let events = realisticEvents(quick ? 20_000 : 100_000, seed: 42)
let avgEvent = Double(events.reduce(0) { $0 + $1.count }) / Double(events.count)
/// Batches of about 64 KiB of JSON, as the uploader forms them.
var batches: [[[UInt8]]] = []
do {
    var current: [[UInt8]] = [], bytes = 0
    for e in events {
        current.append(e)
        bytes += e.count + 1
        if bytes >= 64 * 1024 { batches.append(current); current = []; bytes = 0 }
    }
}
let inputBytes = batches.reduce(0) { $0 + $1.reduce(0) { $0 + $1.count + 1 } }
let repeats = quick ? 2 : 5

/// Encodes each of `batches` as one frame (batch ids 0, 1, ...) with `enc` into `out`;
/// returns the frame bytes in all.
func encodeFrames(_ batches: [[[UInt8]]], with enc: OpaquePointer, into out: inout [UInt8]) -> Int {
    var wire = 0
    for (i, batch) in batches.enumerated() {
        let slices = batch.map { $0.withUnsafeBytes { cairn_slice_t(data: $0.baseAddress, len: $0.count) } }
        var len = 0
        let rc = out.withUnsafeMutableBytes {
            cairn_frame_encode(enc, UInt64(i), slices, slices.count, $0.baseAddress, $0.count, &len)
        }
        if rc != 0 { exit(2) }
        wire += len
    }
    return wire
}

/// A frame encoder at the default level, for `body`.
func withFrameEncoder<T>(_ body: (OpaquePointer) -> T) -> T {
    var enc: OpaquePointer?
    guard cairn_frame_encoder_new(CAIRN_FRAME_DEFAULT_LEVEL, nil, 0, &enc) == 0, let enc else { exit(2) }
    defer { cairn_frame_encoder_free(enc) }
    return body(enc)
}

@MainActor func benchFrames() -> (mbPerS: Double, wire: Int) {
    withFrameEncoder { enc in
        var out = [UInt8](repeating: 0, count: cairn_frame_bound(256 * 1024, 4096))
        var best = Double.infinity, wire = 0
        for _ in 0..<repeats {
            let start = now()
            wire = encodeFrames(batches, with: enc, into: &out)
            best = min(best, Double(now() - start))
        }
        return (Double(inputBytes) / best * 1e3, wire)
    }
}

@MainActor func benchRawZstd() -> (mbPerS: Double, wire: Int) {
    // The same bytes, already concatenated (the encoder gets them as separate records).
    let joined: [[UInt8]] = batches.map { b in b.flatMap { $0 + [0x0A] } }
    guard let cctx = ZSTD_createCCtx() else { exit(2) }
    defer { ZSTD_freeCCtx(cctx) }
    var out = [UInt8](repeating: 0, count: ZSTD_compressBound(256 * 1024))
    var best = Double.infinity, wire = 0
    for _ in 0..<repeats {
        wire = 0
        let start = now()
        for input in joined {
            let n = out.withUnsafeMutableBytes { o in
                input.withUnsafeBytes { i in
                    ZSTD_compressCCtx(cctx, o.baseAddress, o.count, i.baseAddress, i.count, CAIRN_FRAME_DEFAULT_LEVEL)
                }
            }
            if ZSTD_isError(n) != 0 { exit(2) }
            wire += n
        }
        best = min(best, Double(now() - start))
    }
    return (Double(inputBytes) / best * 1e3, wire)
}

let frame = benchFrames()
let rawZstd = benchRawZstd()
record("event_bytes_avg", "realistic event JSON, average size", avgEvent, "B")
record("zstd_raw_mb_s", "raw ZSTD_compress level 1, 64 KiB batches", rawZstd.mbPerS, "MB/s")
record("frame_encode_mb_s", "Cairn frame encode, 64 KiB batches", frame.mbPerS, "MB/s")
record("frame_encode_vs_raw", "frame / raw zstd throughput", frame.mbPerS / rawZstd.mbPerS, "x")
record("wire_ratio", "JSON bytes / frame bytes", Double(inputBytes) / Double(frame.wire), "x", goal: ">= 8")
record("zstd_raw_ratio", "JSON bytes / raw zstd bytes", Double(inputBytes) / Double(rawZstd.wire), "x")

// MARK: - The context on the wire: with every event, or once per batch

/// Frame bytes per event of the batches above with a service's context: completed into
/// every event, as Cairn sends them (`EventEnvelope`), or once per batch as a first
/// line of its own (as OTLP sends its Resource).
/// A service's context fragment, as the processor writes it once per run.
func serviceContextFragment() -> [UInt8] {
    var common = CommonProperties()
    common.appID = "orders"
    common.release = "orders@1.4.2"
    common.environment = "production"
    common.hostName = "orders-7f9c6d5b8-x2k4q"
    common.osName = "Debian GNU/Linux"
    common.osVersion = "12"
    common.kernel = "6.1.0-28-cloud-amd64"
    common.arch = "x86_64"
    common.cpuCount = 2
    common.memoryLimit = 536_870_912
    common.containerID = "3f1e9c0a7b2d4e6f8a1b3c5d7e9f0a2b4c6d8e0f1a3b5c7d9e1f3a5b7c9d1e3f"
    common.processName = "orders-service"
    common.pid = 1
    common.timeZone = "Etc/UTC"
    return common.encodedFragment(sdkVersion: cairnVersion)
}
let contextFragment = serviceContextFragment()
/// The batches above completed with that context, as the uploader sends them.
let completedBatches: [[[UInt8]]] = {
    let completion = EventEnvelope.completion(contextFragment)
    return batches.map { batch in batch.map { Array($0.dropLast()) + completion } }
}()

@MainActor func wirePerEvent(contextOnce: Bool) -> Double {
    let framed = contextOnce
        ? batches.map { [[UInt8(ascii: "{")] + contextFragment + [UInt8(ascii: "}")]] + $0 } : completedBatches
    var out = [UInt8](repeating: 0, count: cairn_frame_bound(1 << 20, 8192))
    let wire = withFrameEncoder { encodeFrames(framed, with: $0, into: &out) }
    return Double(wire) / Double(batches.reduce(0) { $0 + $1.count })
}
let wireEach = wirePerEvent(contextOnce: false), wireOnce = wirePerEvent(contextOnce: true)
record("wire_bytes_per_event_context_each", "frame bytes per event, the context in every event (as sent)", wireEach, "B")
record("wire_bytes_per_event_context_once", "frame bytes per event, the context once per batch (for comparison)",
       wireOnce, "B")

// MARK: - OTLP encoding vs the native frame

/// Background-thread cost per event of turning batches of ring records into request
/// bodies: the native frame (each bare record completed with its context, zstd at the
/// default level), and OTLP (`http/protobuf` and `http/json`, uncompressed, the OTLP
/// default), from the same bare records and their completion, as the uploader holds
/// them; best of `repeats`. Also the OTLP body's bytes per event, as sent and with zstd.
func benchOTLP(_ encoding: OTLPEncoder.Encoding?, packed: Bool = false, repeats: Int)
    -> (nsPerEvent: Double, bytes: Double, zstdBytes: Double) {
    let completion = EventEnvelope.completion(serviceContextFragment())
    // Batches of about 64 KiB as sent, as the uploader forms them by default.
    var bareBatches: [[[UInt8]]] = [[]]
    var batchBytes = 0
    let seq = Array(#","seq":"#.utf8)
    for e in realisticEvents(quick ? 20_000 : 100_000, seed: 42) {
        // Bare as the processor writes them: `properties` last (the events' `seq`,
        // which follows it, left out).
        let cut = (0...(e.count - seq.count)).last { e[$0..<($0 + seq.count)].elementsEqual(seq) } ?? (e.count - 1)
        bareBatches[bareBatches.count - 1].append(Array(e[..<cut]))
        batchBytes += e.count + completion.count
        if batchBytes >= 64 << 10 {
            bareBatches.append([])
            batchBytes = 0
        }
    }
    let count = Double(bareBatches.reduce(0) { $0 + $1.count })
    guard let encoding else {
        let completed = bareBatches.map { $0.map { $0 + completion } }
        return withFrameEncoder { enc in
            var out = [UInt8](repeating: 0, count: cairn_frame_bound(1 << 20, 8192))
            var best = Double.infinity, wire = 0
            for _ in 0..<repeats {
                let start = now()
                wire = encodeFrames(completed, with: enc, into: &out)
                best = min(best, Double(now() - start))
            }
            return (best / count, Double(wire) / count, Double(wire) / count)
        }
    }
    let encoder = OTLPEncoder(settings: .init(encoding: encoding))
    let context = ZstdContext()
    var best = Double.infinity
    var bodies: [[UInt8]] = []
    completion.withUnsafeBytes { c in
        for _ in 0..<repeats {
            bodies.removeAll(keepingCapacity: true)
            let start = now()
            for batch in bareBatches {
                for r in batch {
                    guard r.withUnsafeBytes({ encoder.add($0, completion: c, observedNanos: 0) }) else { exit(2) }
                }
                if packed {
                    // As the uploader keeps an uncompressed body while it is out.
                    bodies += encoder.finish { PackedBody.pack($0, context: context) ?? [] }.logs.map(\.body)
                } else {
                    bodies += encoder.finish().logs.map(\.body)
                }
            }
            best = min(best, Double(now() - start))
        }
    }
    let bytes = bodies.reduce(0) { $0 + $1.count }
    var out = [UInt8](repeating: 0, count: ZSTD_compressBound(8 << 20))
    let zstd = bodies.reduce(0) { total, body in
        total + out.withUnsafeMutableBytes { o in
            body.withUnsafeBytes { ZSTD_compress(o.baseAddress, o.count, $0.baseAddress, $0.count, CAIRN_FRAME_DEFAULT_LEVEL) }
        }
    }
    return (best / count, Double(bytes) / count, Double(zstd) / count)
}

@MainActor func recordOTLPFigures() {
    let repeats = quick ? 2 : 5
    let native = benchOTLP(nil, repeats: repeats)
    let protobuf = benchOTLP(.protobuf, repeats: repeats)
    let json = benchOTLP(.json, repeats: repeats)
    let packed = benchOTLP(.protobuf, packed: true, repeats: repeats)
    record("native_encode_ns", "native frame (zstd) per event, context in each", native.nsPerEvent, "ns")
    record("otlp_encode_ns", "OTLP http/protobuf body per event", protobuf.nsPerEvent, "ns")
    record("otlp_json_encode_ns", "OTLP http/json body per event", json.nsPerEvent, "ns")
    record("otlp_encode_ratio", "OTLP protobuf / native frame, per event", protobuf.nsPerEvent / native.nsPerEvent,
           "x", goal: "<= 1.5")
    // The default path's own cost: an uncompressed body is also packed while it is out
    // (docs/FORMATS.md, "packed body"); the ratio above is the encoding alone.
    record("otlp_packed_encode_ratio", "OTLP protobuf packed as kept / native frame, per event",
           packed.nsPerEvent / native.nsPerEvent, "x")
    record("otlp_wire_bytes_protobuf", "OTLP protobuf bytes per event, uncompressed", protobuf.bytes, "B")
    record("otlp_packed_bytes_protobuf", "OTLP protobuf bytes per event, packed in memory", packed.bytes, "B")
    record("otlp_wire_bytes_protobuf_zstd", "OTLP protobuf bytes per event, zstd", protobuf.zstdBytes, "B")
    record("otlp_wire_bytes_json", "OTLP JSON bytes per event, uncompressed", json.bytes, "B")
    record("otlp_wire_bytes_json_zstd", "OTLP JSON bytes per event, zstd", json.zstdBytes, "B")
}
recordOTLPFigures()

// MARK: - Snapshot store put vs raw mdb_put

/// A 64 KiB batch request, as the uploader stores it.
let storedRequest = UploadRequest(url: "http://127.0.0.1:1/v1/batch",
                                  headers: [HTTPHeader("Content-Encoding", "zstd"), HTTPHeader("Idempotency-Key", "k")],
                                  body: (0..<65_536).map { UInt8(truncatingIfNeeded: $0 &* 131) }, idempotencyKey: "k")
let putRounds = quick ? 200 : 1000

func benchStorePut() -> Double {
    let dir = scratch + "/store-bench"
    guard let store = try? SnapshotStore(directory: dir, options: .init(maxBytes: 1 << 30)) else { exit(2) }
    var times: [Double] = []
    for _ in 0..<putRounds {
        let start = now()
        guard let id = try? store.put(storedRequest.record, priority: .sampled) else { exit(2) }
        times.append(Double(now() - start))
        try? store.delete(id)
    }
    return percentile(times, 0.5)
}

/// The same bytes (the encoded value: about 64 KiB) with a bare mdb_put, one put per
/// transaction, in an environment opened like the store's (MDB_NOSYNC).
func benchRawPut() -> Double {
    let dir = scratch + "/raw-lmdb"
    mkdir(dir, 0o700)
    var env: OpaquePointer?
    mdb_env_create(&env)
    mdb_env_set_mapsize(env, 1 << 30)
    guard mdb_env_open(env, dir, UInt32(MDB_NOSYNC | MDB_NOTLS), 0o600) == 0 else { exit(2) }
    defer { mdb_env_close(env) }
    var value = storedRequest.body + [UInt8](repeating: 0, count: 200)
    var key = [UInt8](repeating: 1, count: 16)
    var dbi = MDB_dbi()
    var times: [Double] = []
    for _ in 0..<putRounds {
        let start = now()
        var txn: OpaquePointer?
        mdb_txn_begin(env, nil, 0, &txn)
        mdb_dbi_open(txn, nil, 0, &dbi)
        key.withUnsafeMutableBytes { k in
            value.withUnsafeMutableBytes { v in
                var mk = MDB_val(mv_size: k.count, mv_data: k.baseAddress)
                var mv = MDB_val(mv_size: v.count, mv_data: v.baseAddress)
                _ = mdb_put(txn, dbi, &mk, &mv, 0)
            }
        }
        mdb_txn_commit(txn)
        times.append(Double(now() - start))
        mdb_txn_begin(env, nil, 0, &txn)
        key.withUnsafeMutableBytes { k in
            var mk = MDB_val(mv_size: k.count, mv_data: k.baseAddress)
            _ = mdb_del(txn, dbi, &mk, nil)
        }
        mdb_txn_commit(txn)
    }
    return percentile(times, 0.5)
}

let storePut = benchStorePut()
let rawPut = benchRawPut()
record("store_put_us_p50", "snapshot store put, 64 KiB request", storePut / 1000, "us")
record("raw_mdb_put_us_p50", "raw mdb_put of the same bytes, one per txn", rawPut / 1000, "us")
record("store_put_ratio", "store put / raw mdb_put", storePut / rawPut, "x")

// MARK: - End to end: ring append to acknowledged upload on loopback

/// A minimal HTTP/1.1 sink on 127.0.0.1: reads each request, answers 200 (after
/// `delay`, to stand for a collector far away), keeps the connection, and counts the
/// events of the batches it receives. The benchmark's collector must not be the
/// bottleneck; the tests use the independent Python collector instead.
final class Sink: @unchecked Sendable {
    let port: Int
    private let listener: Int32
    private let delay: UInt32
    /// Events in the batches received (from their frames' metadata).
    let received = Atomic<Int>(0)
    init(delayMilliseconds: Int = 0) {
        delay = UInt32(delayMilliseconds * 1000)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = 0
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, len) } }
        listen(fd, 16)
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } }
        listener = fd
        port = Int(UInt16(bigEndian: addr.sin_port))
        Thread {
            while true {
                let c = accept(fd, nil, nil)
                if c < 0 { return }
                Thread { self.serve(c) }.start()
            }
        }.start()
    }
    /// Stops accepting connections.
    func stop() {
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }
    func serve(_ c: Int32) {
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        var have = 0
        let ok = Array("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n".utf8)
        while true {
            // Headers end at CRLF CRLF; the body length is in Content-Length.
            var headerEnd = -1
            while headerEnd < 0 {
                if have >= 4 {
                    for i in 0...(have - 4) where buffer[i] == 13 && buffer[i + 1] == 10 && buffer[i + 2] == 13 && buffer[i + 3] == 10 {
                        headerEnd = i + 4
                        break
                    }
                }
                if headerEnd >= 0 { break }
                let n = buffer.withUnsafeMutableBytes { read(c, $0.baseAddress! + have, $0.count - have) }
                if n <= 0 { close(c); return }
                have += n
            }
            let head = String(decoding: buffer[0..<headerEnd], as: UTF8.self).lowercased()
            let length = head.split(separator: "\r\n").first { $0.hasPrefix("content-length:") }
                .flatMap { Int($0.dropFirst(15).trimmingCharacters(in: .whitespaces)) } ?? 0
            var need = headerEnd + length
            while have < need {
                if need > buffer.count { buffer += [UInt8](repeating: 0, count: need - buffer.count) }
                let n = buffer.withUnsafeMutableBytes { read(c, $0.baseAddress! + have, need - have) }
                if n <= 0 { close(c); return }
                have += n
            }
            // An OTLP export (uncompressed protobuf): its log records or spans.
            let target = head.split(separator: " ").dropFirst().first ?? ""
            let otlp = head.hasPrefix("post ") && (target.hasSuffix("/v1/logs") || target.hasSuffix("/v1/traces"))
            let events = otlp ? Self.otlpRecords(buffer[headerEnd..<need])
                : (try? FrameDecoder.info(of: Array(buffer[headerEnd..<need])).recordCount).map(Int.init) ?? 0
            received.wrappingAdd(events, ordering: .relaxed)
            if delay > 0 { usleep(delay) }
            _ = ok.withUnsafeBytes { write(c, $0.baseAddress, $0.count) }
            buffer.replaceSubrange(0..<need, with: [])
            buffer += [UInt8](repeating: 0, count: need)
            have -= need
            need = 0
        }
    }
}

extension Sink {
    /// The log records (or spans) of an OTLP export request in protobuf: the third level
    /// of length-delimited fields (resource_logs 1 > scope_logs 2 > log_records 2, or
    /// resource_spans 1 > scope_spans 2 > spans 2). Read here without Cairn's code.
    static func otlpRecords(_ body: ArraySlice<UInt8>) -> Int {
        /// The length-delimited fields numbered `field` of a message: their byte ranges.
        func fields(_ m: ArraySlice<UInt8>, _ field: UInt64) -> [ArraySlice<UInt8>] {
            var out: [ArraySlice<UInt8>] = []
            var i = m.startIndex
            func varint() -> UInt64? {
                var v: UInt64 = 0, shift: UInt64 = 0
                while i < m.endIndex, shift < 64 {
                    let b = m[i]
                    i += 1
                    v |= UInt64(b & 0x7F) << shift
                    if b < 0x80 { return v }
                    shift += 7
                }
                return nil
            }
            while i < m.endIndex, let key = varint() {
                switch key & 7 {
                case 0: guard varint() != nil else { return out }
                case 1: i += 8
                case 5: i += 4
                case 2:
                    guard let n = varint(), i + Int(n) <= m.endIndex else { return out }
                    if key >> 3 == field { out.append(m[i..<(i + Int(n))]) }
                    i += Int(n)
                default: return out
                }
            }
            return out
        }
        return fields(body, 1).flatMap { fields($0, 2) }.reduce(0) { $0 + fields($1, 2).count }
    }
}

/// Appends `count` realistic events as fast as the ring takes them while the uploader
/// delivers to the sink; the figure is events per second until the last is acknowledged.
func benchEndToEnd(count: Int) -> Double {
    let sink = Sink()
    let dir = scratch + "/e2e"
    try? FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    guard let ring = try? Ring(path: dir + "/events.ring", options: .init(capacity: 8 << 20)),
          let store = try? SnapshotStore(directory: dir + "/store") else { exit(2) }
    let uploader = Uploader(ring: ring, store: store, transport: HTTPTransport(),
                            options: UploaderOptions(url: "http://127.0.0.1:\(sink.port)/v1/batch",
                                                     maxBatchEvents: 2000, maxBatchBytes: 1 << 20,
                                                     maxBatchAge: .milliseconds(5)))
    uploader.start()
    let start = now()
    for i in 0..<count {
        let e = events[i % events.count]
        while (try? ring.append(e)) == nil { sched_yield() }
    }
    while uploader.stats.deliveredEvents < count {
        if Double(now() - start) > 120e9 { break }
        usleep(500)
    }
    let elapsed = Double(now() - start) / 1e9
    uploader.shutdown(timeout: .seconds(5))
    return Double(uploader.stats.deliveredEvents) / elapsed
}

record("e2e_events_per_s", "track to acknowledged upload, loopback, 2 cores", benchEndToEnd(count: quick ? 200_000 : 1_000_000),
       "ev/s", goal: ">= 300k")

// MARK: - Crash handler

/// Time spent inside the crash handler, as measured by the handler itself and written
/// into the report: a null write three async calls deep in a Task of the release
/// `cairn-service-child` (public API, default options, ~25 modules), so the handler
/// unwinds an executor thread and follows the async context chains. Median of several
/// crashes.
func benchCrashHandler(runs: Int) -> Double {
    let child = productsDirectory() + "/cairn-service-child"
    guard FileManager.default.isExecutableFile(atPath: child) else { return .nan }
    var times: [Double] = []
    for run in 0..<runs {
        let dir = scratch + "/crashes-\(run)"
        try? FileManager.default.removeItem(atPath: dir)
        let p = Process()
        p.executableURL = URL(fileURLWithPath: child)
        p.arguments = ["async", "1"]
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        var env = ProcessInfo.processInfo.environment
        env["SWIFT_BACKTRACE"] = "enable=no" // time Cairn's handler alone
        env["CAIRN_APP_ID"] = "bench"
        env["CAIRN_DATA_DIR"] = dir
        p.environment = env
        guard (try? p.run()) != nil else { return .nan }
        p.waitUntilExit()
        let reports = (try? FileManager.default.contentsOfDirectory(atPath: dir + "/crash")) ?? []
        guard let name = reports.first(where: { $0.hasSuffix(".report") }) else { return .nan }
        let bytes = Array(FileManager.default.contents(atPath: dir + "/crash/" + name) ?? Data())
        var report = cairn_crash_report_t()
        let rc = bytes.withUnsafeBytes { cairn_crash_report_parse($0.baseAddress, $0.count, &report) }
        // Not a figure unless the handler followed the async chain.
        guard rc == 0, report.complete == 1, report.async_chains_len > 0 else { return .nan }
        times.append(Double(report.handler_ns) / 1e6)
        try? FileManager.default.removeItem(atPath: dir)
    }
    return percentile(times, 0.5)
}
record("crash_handler_ms", "crash handler: report of an async crash, service", benchCrashHandler(runs: quick ? 5 : 15),
       "ms", goal: "<= 5")

/// The next start's work for one crash: read a real report (an index out of range in
/// the release build of the Swift `cairn-swift-crash-child`, about 20 modules), and
/// symbolicate every frame from the files on disk with a fresh `Symbolizer` into the
/// `crash` event (ELF symbols, demangling, DWARF lines, and the inlined functions of
/// `.debug_info`: the trap is an inlined `Swift runtime failure`). Median over several
/// runs; the files are in the page cache after the first.
func benchSymbolicate(runs: Int) -> Double {
    let child = productsDirectory() + "/cairn-swift-crash-child"
    guard FileManager.default.isExecutableFile(atPath: child) else { return .nan }
    let dir = scratch + "/symbolicate"
    try? FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    let p = Process()
    p.executableURL = URL(fileURLWithPath: child)
    p.arguments = [dir, "index"]
    p.standardOutput = FileHandle.nullDevice
    p.standardError = FileHandle.nullDevice
    p.environment = ProcessInfo.processInfo.environment.merging(["SWIFT_BACKTRACE": "enable=no"]) { $1 }
    guard (try? p.run()) != nil else { return .nan }
    p.waitUntilExit()
    let bytes = Array(FileManager.default.contents(atPath: dir + "/crash-\(p.processIdentifier).report") ?? Data())
    var times: [Double] = []
    for _ in 0..<runs {
        let t0 = now()
        let crash = CrashReport.symbolicated(reportBytes: bytes)
        times.append(Double(now() - t0) / 1e6)
        // Not a figure unless it did the whole work: names, and the inlined chain.
        if !crash.frames.contains(where: { $0.symbol != nil }) || !crash.frames.contains(where: \.inlined) { return .nan }
    }
    return percentile(times, 0.5)
}
record("crash_symbolicate_ms", "next start: symbolicate a crash report, inlines too",
       benchSymbolicate(runs: quick ? 3 : 9),
       "ms", goal: "<= 50")

// MARK: - Idle cost

/// CPU time the process uses per second while a started SDK has nothing to do, in two
/// windows. The start phase runs from just after the first event is flushed until 4 s
/// after start: it holds the one-time work of a new SDK (the first drain, the page
/// releases at 2.5 s and 3.5 s). Steady idle is the window after it, where the
/// background threads must sleep, not poll. Times are from the SDK's start (the first
/// use of `benchSDK`).
func benchIdleCPU(steadySeconds: Double) -> (startPhase: Double, steady: Double) {
    let started = now()
    guard let cairn = benchSDK else { return (.nan, .nan) }
    cairn.track("warm_up")
    _ = cairn.flush(timeout: .seconds(5))
    func cpuMillis() -> Double {
        var u = rusage()
        getrusage(RUSAGE_SELF.rawValue, &u)
        return Double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1000
            + Double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1000
    }
    func sleep(until secondsAfterStart: Double) {
        let elapsed = Double(now() - started) / 1e9
        if elapsed < secondsAfterStart { usleep(UInt32((secondsAfterStart - elapsed) * 1_000_000)) }
    }
    let phaseStart = (cpu: cpuMillis(), at: now())
    sleep(until: 4)
    let steadyStart = (cpu: cpuMillis(), at: now())
    usleep(UInt32(steadySeconds * 1_000_000))
    let end = (cpu: cpuMillis(), at: now())
    return ((steadyStart.cpu - phaseStart.cpu) / (Double(steadyStart.at - phaseStart.at) / 1e9),
            (end.cpu - steadyStart.cpu) / (Double(end.at - steadyStart.at) / 1e9))
}
/// The SDK of the idle and track() figures (one per process: it owns the crash handler).
let benchSDK: Cairn? = {
    var o = Cairn.Options(appID: "bench", distinctID: "bench-host", release: "bench@1", dataDirectory: scratch + "/sdk")
    o.ringCapacity = 256 << 20
    return try? Cairn.start(o)
}()
let idleCPU = benchIdleCPU(steadySeconds: quick ? 1 : 3)
record("idle_start_phase_cpu_ms_per_s", "CPU per second, first 4 s after start (one-time)",
       idleCPU.startPhase, "ms/s", goal: "<= 5", budget: 40)
record("idle_cpu_ms_per_s", "CPU per second, idle after the first 4 s",
       idleCPU.steady, "ms/s", goal: "<= 1", budget: 20)

// MARK: - track() and start()

/// `track()` with 10 properties on the caller's thread, through the whole hot path
/// (filter, sampling, sanitiser, privacy rules, JSON written into the ring), each call
/// timed on its own (the clock's cost subtracted). The SDK keeps events on disk (no
/// upload URL); its background thread drains the ring meanwhile.
func benchTrack(calls: Int, threads: Int) -> (p50: Double, p99: Double) {
    guard let cairn = benchSDK else { return (.nan, .nan) }
    // Start each round with a drained ring, so that no call is shed as overload (a shed
    // call costs a fraction of a tracked one and would flatter the figure); a round in
    // which anything was dropped anyway does not count.
    _ = cairn.flush(timeout: .seconds(60))
    let droppedBefore = cairn.dropCounts.values.reduce(0, +)
    defer { if cairn.dropCounts.values.reduce(0, +) != droppedBefore { roundsWithDrops += 1 } }
    let props: [String: CairnValue] = [
        "plan": "pro", "seats": 12, "ratio": 0.75, "trial": false, "region": "eu-west-1",
        "path": "/orders/42", "method": "POST", "status": 201, "duration_ms": 12.5, "retry": false,
    ]
    var overhead: [Double] = []
    for _ in 0..<1000 {
        let t0 = now()
        overhead.append(Double(now() - t0))
    }
    let clockCost = percentile(overhead, 0.5)
    let all = Locked<[Double]>([])
    let barrier = SpinBarrier(threads)
    let group = DispatchGroup()
    for _ in 0..<threads {
        group.enter()
        Thread {
            var times = [Double](repeating: 0, count: calls)
            barrier.wait()
            for i in 0..<calls {
                let t0 = now()
                cairn.track("checkout_completed", properties: props)
                times[i] = max(0, Double(now() - t0) - clockCost)
            }
            all.withLock { $0 += times }
            group.leave()
        }.start()
    }
    group.wait()
    let times = all.withLock { $0 }
    return (percentile(times, 0.5), percentile(times, 0.99))
}

/// Rounds of `benchTrack` in which some call was dropped.
nonisolated(unsafe) var roundsWithDrops = 0

/// The round with the lowest p50 of `rounds` in which nothing was dropped: on a shared
/// machine, other tenants only ever add time, so the quietest round is the closest to
/// what the code costs.
func bestRound(_ rounds: Int, _ measure: () -> (p50: Double, p99: Double)) -> (p50: Double, p99: Double) {
    var results: [(p50: Double, p99: Double)] = []
    for _ in 0..<rounds {
        let drops = roundsWithDrops
        let r = measure()
        if roundsWithDrops == drops { results.append(r) }
    }
    return results.min { $0.p50 < $1.p50 } ?? (.nan, .nan)
}

// Warm up (first-touch of ring pages, caches), then measure.
_ = benchTrack(calls: 20_000, threads: 1)
if onlyTrack {
    // `--only track`: track() alone, to compare two builds; each of five rounds' figures.
    for _ in 0..<5 {
        let r = benchTrack(calls: 100_000, threads: 1)
        print(String(format: "track() p50 %.0f ns, p99 %.0f ns", r.p50, r.p99))
    }
    _ = benchSDK?.shutdown(timeout: .seconds(10))
    exit(0)
}
let track1 = bestRound(3) { benchTrack(calls: quick ? 30_000 : 100_000, threads: 1) }
let track2 = bestRound(3) { benchTrack(calls: quick ? 15_000 : 50_000, threads: 2) }
record("track_ns_p50", "track(), 10 properties, p50 (best of 3 rounds)", track1.p50, "ns",
       goal: "<= 1000")
record("track_ns_p99", "track(), 10 properties, p99 (same round)", track1.p99, "ns",
       goal: "<= 5000")
record("track_2t_ns_p50", "track(), 2 threads, p50 per call (best of 3)", track2.p50, "ns")
recordLoggingFigures(benchSDK)
recordMetricsFigures(benchSDK)
_ = benchSDK?.shutdown(timeout: .seconds(10))

/// `Cairn.start` on the caller's thread in fresh processes (`cairn-service-child start`,
/// built beside this executable): `runs` restarts of a service whose data directory
/// exists (the common case: every start but the first), or, with `fresh`, each with a
/// new data directory (the first start, which also creates directories and the ring).
func benchStart(runs: Int, fresh: Bool) -> (p50: Double, p99: Double) {
    let child = productsDirectory() + "/cairn-service-child"
    guard FileManager.default.isExecutableFile(atPath: child) else { return (.nan, .nan) }
    func startOnce(_ dir: String) -> Double? {
        let environment = ["CAIRN_APP_ID=bench", "CAIRN_DISTINCT_ID=bench-host", "CAIRN_DATA_DIR=\(dir)",
                           "PATH=/usr/bin:/bin"]
        guard let run = spawnAndReap(child, ["start"], environment: environment, capture: true) else { return nil }
        return Double(run.output.trimmingCharacters(in: .whitespacesAndNewlines))
    }
    var times: [Double] = []
    if !fresh { _ = startOnce(scratch + "/restart") }  // the first start, not counted
    for i in 0..<runs {
        if let ms = startOnce(fresh ? scratch + "/start-\(i)" : scratch + "/restart") { times.append(ms) }
    }
    return times.count == runs ? (percentile(times, 0.5), percentile(times, 0.99)) : (.nan, .nan)
}
/// The start figures: restarts, then first starts.
@MainActor func recordStart() {
    let start = benchStart(runs: quick ? 10 : 60, fresh: false)
    record("start_ms_p50", "Cairn.start on the caller's thread, restart, p50", start.p50, "ms", goal: "<= 0.5",
           budget: 20)
    record("start_ms_p99", "Cairn.start on the caller's thread, restart, p99", start.p99, "ms", budget: 20)
    let firstStart = benchStart(runs: quick ? 5 : 15, fresh: true)
    record("first_start_ms_p50", "Cairn.start, first start in a new data directory, p50", firstStart.p50, "ms",
           budget: 20)
}
recordStart()

// MARK: - The whole process

benchWholeProcess(full: true)
benchDefaultThroughput()

// MARK: - Output

try? FileManager.default.removeItem(atPath: scratch)
finish(note: "(append figures: median over blocks of \(oneThread.perBlock) appends (1 producer) or "
    + "\(twoThreads.perBlock) (2 producers); \(ProcessInfo.processInfo.activeProcessorCount) cores)")
