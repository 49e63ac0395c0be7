// The test collector (Tests/Collector/collector.py) as a child process, and a tiny
// HTTP/1.0 client for its control API that does not go through HTTPTransport, so the
// transport under test never checks itself. The collector fails the test, never skips
// it, when python3 or the zstandard module is missing: `make deps` installs them.
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The repository root, found from this file's path (Tests/Support/<file>).
public let repoRoot = URL(fileURLWithPath: #filePath)
    .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

/// The directory of the package's built products (beside the test bundle: on Linux the
/// test binary is <products>/<Package>PackageTests.xctest), where the child processes
/// the tests run are.
public let productsDirectory: String = {
    let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
    var url = URL(fileURLWithPath: exe).deletingLastPathComponent()
    if url.lastPathComponent.hasSuffix(".xctest") { url.deleteLastPathComponent() }
    return url.path
}()

public enum CollectorError: Error, CustomStringConvertible {
    case startFailed(String)
    case control(String)

    public var description: String {
        switch self {
        case .startFailed(let message): "collector did not start: \(message)"
        case .control(let message): "collector control call failed: \(message)"
        }
    }
}

/// One attempt as the collector recorded it (see collector.py).
public struct RecordedAttempt: Decodable {
    public struct Batch: Decodable {
        public var tag: String
        public var version: Int
        public var flags: Int
        public var batch_id: UInt64
        public var record_count: Int
        public var dict_id: Int
        public var content_size: Int
    }

    /// A scripted response as the collector recorded it.
    public struct Response: Decodable {
        /// The status (200 when the script did not say).
        public var status: Int?
        /// The connection was closed without an answer.
        public var drop: Bool?
        /// Seconds the collector waited before answering.
        public var stall: Double?
        /// An attempt of a key answered 2xx before: answered 200 again, the script unused.
        public var replayed: Bool?
    }

    public var seq: Int
    public var client_port: Int
    public var connection_id: Int
    public var method: String
    public var path: String
    public var headers: [[String]]
    public var idempotency_key: String?
    public var retry_count: String?
    public var content_encoding: String?
    public var body_length: Int
    public var body_sha256: String?
    public var body_base64: String?
    public var batch: Batch?
    public var records: [String]?
    public var error: String?
    /// The scripted response the attempt got (or was to get: see ``answered``).
    public var response: Response
    /// Whether the response was written back (false for a dropped connection, and
    /// while a stall lasts).
    public var answered: Bool
    /// When the collector received the attempt (its monotonic clock, seconds).
    public var monotonic: Double

    /// Whether the collector answered with a 2xx status: it has the batch (what
    /// ``CollectorProcess/events()`` lists).
    public var acknowledged: Bool {
        answered && response.drop != true && (200...299).contains(response.status ?? 200)
    }

    /// Every value of the header `name`, compared case-insensitively.
    public func headerValues(_ name: String) -> [String] {
        headers.filter { $0.count == 2 && $0[0].lowercased() == name.lowercased() }.map { $0[1] }
    }

    /// The header names, in the order received.
    public var headerNames: [String] { headers.compactMap(\.first) }

    /// The body as received, when the collector kept it (up to 1 MiB).
    public var body: [UInt8]? {
        body_base64.flatMap { Data(base64Encoded: $0) }.map { [UInt8]($0) }
    }
}

/// One record from `GET /_control/events`.
public struct CollectedEvent: Decodable, Equatable {
    public var idempotency_key: String?
    public var batch_id: UInt64?
    public var record: String

    /// An event as the collector reports it.
    public init(idempotency_key: String?, batch_id: UInt64?, record: String) {
        self.idempotency_key = idempotency_key
        self.batch_id = batch_id
        self.record = record
    }
}

/// A running collector on 127.0.0.1; stopped by ``stop()`` or when released.
public final class CollectorProcess {
    public let port: Int
    private let process: Process
    private let stdinPipe: Pipe
    private let stderrURL: URL
    private let scheme: String
    private var stopped = false

    /// The base URL of the collector, such as `http://127.0.0.1:40123`.
    public var baseURL: String { "\(scheme)://127.0.0.1:\(port)" }

    /// Starts `python3 Tests/Collector/collector.py` and waits for its `PORT` line.
    ///
    /// - Parameters:
    ///   - selfSignedTLS: Serve HTTPS with Tests/Collector/selfsigned.pem, a
    ///     certificate no client trusts. The control API then speaks TLS too, so only
    ///     data requests can be made.
    ///   - tlsCertificate: Serve HTTPS with this PEM file (certificate chain and key),
    ///     with the same limit; it wins over `selfSignedTLS`.
    ///   - clientCA: With TLS, require each client to present a certificate signed by
    ///     the CA in this PEM file (mutual TLS).
    public init(selfSignedTLS: Bool = false, tlsCertificate: String? = nil, clientCA: String? = nil) throws {
        let script = repoRoot.appendingPathComponent("Tests/Collector/collector.py").path
        let certificate = tlsCertificate
            ?? repoRoot.appendingPathComponent("Tests/Collector/selfsigned.pem").path
        let tls = selfSignedTLS || tlsCertificate != nil
        scheme = tls ? "https" : "http"
        stderrURL = FileManager.default.temporaryDirectory
            .appendingPathComponent("cairn-collector-\(UUID().uuidString).stderr")
        try Data().write(to: stderrURL)
        let stderrHandle = try FileHandle(forWritingTo: stderrURL)
        defer { try? stderrHandle.close() }

        let stdoutPipe = Pipe()
        stdinPipe = Pipe()
        process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", script] + (tls ? ["--tls", certificate] : [])
            + (tls ? clientCA.map { ["--client-ca", $0] } ?? [] : [])
        process.standardInput = stdinPipe
        process.standardOutput = stdoutPipe
        process.standardError = stderrHandle
        do {
            try process.run()
        } catch {
            throw CollectorError.startFailed("cannot run /usr/bin/env python3: \(error)")
        }
        try? stdoutPipe.fileHandleForWriting.close()

        let line = Self.readLine(stdoutPipe.fileHandleForReading.fileDescriptor,
                                 deadline: ContinuousClock.now + .seconds(60))
        try? stdoutPipe.fileHandleForReading.close()
        guard let line, line.hasPrefix("PORT "), let port = Int(line.dropFirst(5)), port > 0 else {
            process.terminate()
            process.waitUntilExit()
            let stderr = (try? String(contentsOf: stderrURL, encoding: .utf8)) ?? ""
            try? FileManager.default.removeItem(at: stderrURL)
            var hint = ""
            if process.terminationStatus == 127 {
                hint = "python3 is not installed or not on PATH (`make deps` installs it). "
            } else if process.terminationStatus == 3 {
                hint = "the Python module zstandard is missing (`make deps` installs it). "
            }
            throw CollectorError.startFailed(
                "\(hint)first line \(line.map { "\"\($0)\"" } ?? "(none)"), exit status "
                + "\(process.terminationStatus), stderr: \(stderr)")
        }
        self.port = port
    }

    deinit { stop() }

    /// Stops the collector: closes its stdin, sends SIGTERM, and waits for it to exit.
    public func stop() {
        guard !stopped else { return }
        stopped = true
        try? stdinPipe.fileHandleForWriting.close()
        if process.isRunning { process.terminate() }
        process.waitUntilExit()
        try? FileManager.default.removeItem(at: stderrURL)
    }

    /// What the collector wrote to stderr so far (tracebacks, if any).
    public var stderr: String { (try? String(contentsOf: stderrURL, encoding: .utf8)) ?? "" }

    // MARK: Control API

    /// Sets the responses for the next data requests, e.g. `[["status": 500]]`.
    public func script(_ responses: [[String: Any]]) throws {
        try post("/_control/script", json: responses)
    }

    /// Sets the response used when the script is empty.
    public func setDefault(_ response: [String: Any]) throws {
        try post("/_control/default", json: response)
    }

    /// What the collector checks first, as a real one does: `["api_key": "k"]` answers 401
    /// to requests without `Authorization: Bearer k`, `["path": "/v1/batch"]` 404 to
    /// requests for another path, `["max_body": n]` 413 to bodies over n bytes (before
    /// reading them).
    public func expect(_ checks: [String: Any]) throws {
        try post("/_control/expect", json: checks)
    }

    /// Forgets all attempts and the script.
    public func reset() throws {
        try post("/_control/reset", json: [String: Any]())
    }

    /// Every attempt recorded so far, oldest first.
    public func requests() throws -> [RecordedAttempt] {
        try JSONDecoder().decode([RecordedAttempt].self, from: Data(get("/_control/requests")))
    }

    /// Every attempt recorded so far, oldest first, as the collector's JSON (with what
    /// the typed form leaves out, such as an OTLP export's decoded `otlp` message).
    public func rawRequests() throws -> [[String: Any]] {
        try JSONSerialization.jsonObject(with: Data(get("/_control/requests"))) as? [[String: Any]] ?? []
    }

    /// The records of the attempts answered 2xx.
    public func events() throws -> [CollectedEvent] {
        try JSONDecoder().decode([CollectedEvent].self, from: Data(get("/_control/events")))
    }

    private func post(_ path: String, json: Any) throws {
        let body = try JSONSerialization.data(withJSONObject: json)
        let (status, reply) = try Self.exchange(port: port, method: "POST", path: path,
                                                body: [UInt8](body))
        guard status == 200 else {
            throw CollectorError.control("POST \(path) answered \(status): "
                                         + String(decoding: reply, as: UTF8.self))
        }
    }

    private func get(_ path: String) throws -> [UInt8] {
        let (status, reply) = try Self.exchange(port: port, method: "GET", path: path, body: [])
        guard status == 200 else {
            throw CollectorError.control("GET \(path) answered \(status)")
        }
        return reply
    }

    // MARK: Plain sockets

    /// One HTTP/1.0 exchange over a fresh connection: the server closes it after the
    /// response, so the response is everything read until end of file.
    public static func exchange(port: Int, method: String, path: String, body: [UInt8]) throws
        -> (status: Int, body: [UInt8])
    {
        let fd = try connectLoopback(port: port)
        defer { close(fd) }
        var timeout = timeval(tv_sec: 60, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))

        let head = "\(method) \(path) HTTP/1.0\r\nHost: 127.0.0.1:\(port)\r\n"
            + "Content-Type: application/json\r\nContent-Length: \(body.count)\r\n\r\n"
        let request = Array(head.utf8) + body
        var sent = 0
        while sent < request.count {
            let n = request[sent...].withUnsafeBytes {
                Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
            }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { throw CollectorError.control("send: errno \(errno)") }
            sent += n
        }
        var response: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n < 0 && errno == EINTR { continue }
            guard n >= 0 else { throw CollectorError.control("recv: errno \(errno)") }
            if n == 0 { break }
            response.append(contentsOf: buffer[..<n])
        }
        let separator: [UInt8] = [13, 10, 13, 10]
        guard let end = (0...max(response.count - 4, 0)).first(where: {
            response.count >= $0 + 4 && Array(response[$0..<$0 + 4]) == separator
        }) else {
            throw CollectorError.control("no complete response to \(method) \(path)")
        }
        let statusLine = String(decoding: response[..<end], as: UTF8.self)
            .split(separator: "\r\n").first ?? ""
        let parts = statusLine.split(separator: " ")
        guard parts.count >= 2, let status = Int(parts[1]) else {
            throw CollectorError.control("bad status line \(statusLine)")
        }
        return (status, Array(response[(end + 4)...]))
    }

    /// A TCP socket connected to 127.0.0.1:`port`.
    public static func connectLoopback(port: Int) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw CollectorError.control("socket: errno \(errno)") }
        var address = loopback(port: port)
        let rc = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard rc == 0 else {
            let error = errno
            close(fd)
            throw CollectorError.control("connect to port \(port): errno \(error)")
        }
        return fd
    }

    /// A loopback port with nothing listening on it: bound, never listened on, closed.
    public static func closedPort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw CollectorError.control("socket: errno \(errno)") }
        defer { close(fd) }
        var address = loopback(port: 0)
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let rc = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, length) == 0 ? getsockname(fd, $0, &length) : -1
            }
        }
        guard rc == 0 else { throw CollectorError.control("bind: errno \(errno)") }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    private static func loopback(port: Int) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        return address
    }

    /// Reads one line from `fd`, waiting until `deadline`; `nil` on end of file or timeout.
    private static func readLine(_ fd: Int32, deadline: ContinuousClock.Instant) -> String? {
        var line: [UInt8] = []
        var byte: UInt8 = 0
        while true {
            let left = ContinuousClock.now.duration(to: deadline)
            guard left > .zero else { return nil }
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&poller, 1, Int32(left.components.seconds * 1000 + 1))
            if ready < 0 && errno == EINTR { continue }
            guard ready > 0 else { return nil }
            let n = read(fd, &byte, 1)
            if n < 0 && errno == EINTR { continue }
            guard n == 1 else { return line.isEmpty ? nil : String(decoding: line, as: UTF8.self) }
            if byte == 0x0A { return String(decoding: line, as: UTF8.self) }
            line.append(byte)
        }
    }
}

/// The SHA-256 of `bytes` in hex, computed by coreutils' `sha256sum`, a tool that is
/// neither ours nor the collector's.
public func sha256Hex(_ bytes: [UInt8]) throws -> String {
    let file = FileManager.default.temporaryDirectory
        .appendingPathComponent("cairn-sha-\(UUID().uuidString)")
    try Data(bytes).write(to: file)
    defer { try? FileManager.default.removeItem(at: file) }
    let output = Pipe()
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = ["sha256sum", file.path]
    process.standardOutput = output
    try process.run()
    let data = output.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    try #require(process.terminationStatus == 0, "sha256sum failed (coreutils)")
    return String(decoding: data, as: UTF8.self).split(separator: " ").first.map(String.init) ?? ""
}
