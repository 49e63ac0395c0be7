// BenchHost: the part of the whole-process benchmark's host programs that is the same in
// all of them: a paced producer thread, the reading of the process's own memory figures,
// the baseline program, and a service's use of FoundationEssentials. `cairn-bench-host`
// adds Cairn to a service that uses Foundation (BenchFoundation), `cairn-bench-baseline`
// does not; `cairn-bench-host-essentials` and `cairn-bench-baseline-essentials` are the
// same pair for a service on FoundationEssentials alone. The difference within a pair is
// what Cairn costs that service.
import FoundationEssentials
import Glibc

/// The process's own memory figures, in KiB.
public struct MemoryFigures: Sendable {
    /// `VmRSS` of `/proc/self/status`: resident pages, anonymous, file and shared.
    public var rss = 0
    /// `VmHWM`: the peak of `VmRSS`.
    public var peak = 0
    /// `RssAnon`, `RssFile`, `RssShmem`.
    public var anon = 0, file = 0, shmem = 0
    /// `Private_Dirty` of `/proc/self/smaps_rollup`: pages only this process has
    /// written (its heap, stacks, written data of its libraries and mappings).
    public var privateDirty = 0
    /// `Threads`: how many threads the process has.
    public var threads = 0
    /// How many mappings the process has (lines of `/proc/self/maps`); each costs the
    /// kernel about 0.2 KiB outside the RSS.
    public var mappings = 0

    /// Reads them now.
    public static func now() -> MemoryFigures {
        var m = MemoryFigures()
        for (key, kb) in fields("/proc/self/status") {
            switch key {
            case "VmRSS": m.rss = kb
            case "VmHWM": m.peak = kb
            case "RssAnon": m.anon = kb
            case "RssFile": m.file = kb
            case "RssShmem": m.shmem = kb
            case "Threads": m.threads = kb
            default: break
            }
        }
        m.privateDirty = fields("/proc/self/smaps_rollup").first { $0.0 == "Private_Dirty" }?.1 ?? 0
        chunks(of: "/proc/self/maps") { chunk in
            m.mappings += chunk.reduce(0) { $1 == UInt8(ascii: "\n") ? $0 + 1 : $0 }
        }
        // CAIRN_BENCH_MALLOC_INFO=<path>: glibc's malloc_info (its arenas, what is in
        // use and what is free) when the figures were read.
        if let path = getenv("CAIRN_BENCH_MALLOC_INFO"), let symbol = dlsym(nil, "malloc_info"),
           let to = fopen(path, "w") {
            typealias MallocInfo = @convention(c) (Int32, UnsafeMutablePointer<FILE>?) -> Int32
            _ = unsafeBitCast(symbol, to: MallocInfo.self)(0, to)
            fclose(to)
        }
        // CAIRN_BENCH_SMAPS=<path>: keep a copy of /proc/self/smaps as it was when read,
        // to see which mappings make up the figures.
        if let path = getenv("CAIRN_BENCH_SMAPS"), let to = fopen(path, "w") {
            chunks(of: "/proc/self/smaps") { chunk in
                _ = chunk.withUnsafeBytes { fwrite($0.baseAddress, 1, $0.count, to) }
            }
            fclose(to)
        }
        return m
    }

    /// Calls `body` with the bytes of file `path`, read to its end in chunks (a /proc
    /// file reports a size of 0); nothing when it cannot be opened.
    private static func chunks(of path: String, _ body: (ArraySlice<UInt8>) -> Void) {
        guard let file = fopen(path, "r") else { return }
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = fread(&buffer, 1, buffer.count, file)
            if n <= 0 { break }
            body(buffer[0..<n])
        }
        fclose(file)
    }

    /// `Key:   123 kB` lines of a proc file.
    private static func fields(_ path: String) -> [(String, Int)] {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { line in
            let parts = line.split(separator: ":", maxSplits: 1)
            guard parts.count == 2 else { return nil }
            let number = parts[1].split(whereSeparator: { $0 == " " || $0 == "\t" }).first.flatMap { Int($0) }
            return number.map { (String(parts[0]), $0) }
        }
    }

    /// One JSON object, the line a host prints for the benchmark to read.
    public func json(extra: [String: Int] = [:]) -> String {
        var all = ["rss_kb": rss, "peak_kb": peak, "anon_kb": anon, "file_kb": file, "shmem_kb": shmem,
                   "private_dirty_kb": privateDirty, "threads": threads, "mappings": mappings]
        all.merge(extra) { $1 }
        return "{" + all.sorted { $0.key < $1.key }.map { "\"\($0.key)\": \($0.value)" }.joined(separator: ", ") + "}"
    }
}

/// What a Swift service on FoundationEssentials alone typically does before any
/// telemetry: JSON in and out, dates and their ISO 8601 text, URLs, UUIDs, the
/// environment. Its hosts call it once at start, so that what it brings in is part of
/// the baseline.
@inline(never)
public func useEssentialsLikeAService() -> Int {
    struct Order: Codable {
        var id: UUID
        var placed: Date
        var items: [String]
        var total: Double
        var callback: URL?
    }
    let order = Order(id: UUID(), placed: Date(), items: ["book", "pen"], total: 12.5,
                      callback: URL(string: "https://shop.example/orders?id=42"))
    var bytes = 0
    if let data = try? JSONEncoder().encode(order), let back = try? JSONDecoder().decode(Order.self, from: data) {
        bytes += data.count + back.items.count
    }
    bytes += Date().formatted(Date.ISO8601FormatStyle()).count
    bytes += ProcessInfo.processInfo.environment.count + ProcessInfo.processInfo.processIdentifier.bitWidth
    return bytes
}

/// The baseline host: `warmUp` (the service's own use of its libraries), then `mode`
/// as ``HostArguments`` describes, without Cairn; prints the memory figures.
public func runBaselineHost(warmUp: () -> Int) -> Never {
    guard let args = HostArguments() else { exit(2) }
    if args.mode == "exit" { exit(0) }
    _ = warmUp()
    switch args.mode {
    case "linked":
        settle(0.5)
    case "idle", "first-upload":
        settle(idleSettle)
    case "rate":
        let sink = UnsafeMutablePointer<Int>.allocate(capacity: 1)
        let run = produceReadingHalfway(rate: args.rate, seconds: args.seconds) { sink.pointee &+= $0 }
        emit(MemoryFigures.now().json(extra: ["anon_kb_halfway": run.anonHalfway]))
        exit(0)
    default:
        exit(2)
    }
    emit(MemoryFigures.now().json())
    exit(0)
}

/// Calls `body(i)` `rate` times a second, i = 0, 1, 2, ..., on the calling thread, for
/// `seconds`; a `rate` of 0 calls it as fast as it can. Ticks are 1 ms apart on an
/// absolute clock, so a slow call delays the next tick's calls but not the rate.
/// Returns the number of calls made.
public func produce(rate: Int, seconds: Double, _ body: (Int) -> Void) -> Int {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    let start = Int64(ts.tv_sec) * 1_000_000_000 + Int64(ts.tv_nsec)
    let end = start + Int64(seconds * 1e9)
    var made = 0
    var tick: Int64 = 0
    while true {
        clock_gettime(CLOCK_MONOTONIC, &ts)
        let now = Int64(ts.tv_sec) * 1_000_000_000 + Int64(ts.tv_nsec)
        if now >= end { break }
        if rate == 0 {
            for _ in 0..<256 { body(made); made += 1 }
            continue
        }
        tick += 1
        // Calls due by the end of this tick.
        let due = Int(Double(rate) * Double(tick) / 1000)
        while made < due { body(made); made += 1 }
        let next = start + tick * 1_000_000
        var wake = timespec(tv_sec: Int(next / 1_000_000_000), tv_nsec: Int(next % 1_000_000_000))
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &wake, nil)
    }
    return made
}

/// ``produce(rate:seconds:_:)``, reading `RssAnon` once halfway through: what grows
/// between then and the end grows with the events (0 when `rate` is 0).
public func produceReadingHalfway(rate: Int, seconds: Double, _ body: (Int) -> Void) -> (made: Int, anonHalfway: Int) {
    let half = rate > 0 ? Int(Double(rate) * seconds / 2) : -1
    var anonHalfway = 0
    let made = produce(rate: rate, seconds: seconds) { i in
        if i == half { anonHalfway = MemoryFigures.now().anon }
        body(i)
    }
    return (made, anonHalfway)
}

/// How long the idle states settle before they are read: 4.5 s, past the SDK's first
/// two releases of the code pages that ran once (2.5 s and 3.5 s after its start), as a
/// service that idles for hours is. (Read at 1.5 s, the idle state was 0.5 MiB higher.)
public let idleSettle = 4.5

/// Sleeps `seconds` (settling: background threads finish their start).
public func settle(_ seconds: Double) {
    usleep(UInt32(seconds * 1e6))
}

/// The host's command line: `<mode> [rate] [seconds]`.
public struct HostArguments: Sendable {
    /// `exit` (return at once: the process start alone), `linked` (measure after using
    /// Foundation), `idle` (start, settle, measure), `rate` (produce, measure).
    public var mode: String
    /// Events a second for `rate` (0: as fast as possible).
    public var rate: Int
    /// How long `rate` produces.
    public var seconds: Double

    /// Parses `CommandLine.arguments`; nil when they make no sense.
    public init?() {
        let a = CommandLine.arguments
        guard a.count >= 2 else { return nil }
        mode = a[1]
        rate = a.count > 2 ? Int(a[2]) ?? 0 : 0
        seconds = a.count > 3 ? Double(a[3]) ?? 1 : 1
    }
}

/// Writes `line` and a newline to stdout, unbuffered.
public func emit(_ line: String) {
    var text = line + "\n"
    text.withUTF8 { bytes in
        var done = 0
        while done < bytes.count {
            let n = write(1, bytes.baseAddress.map { $0 + done }, bytes.count - done)
            if n <= 0 { return }
            done += n
        }
    }
}
