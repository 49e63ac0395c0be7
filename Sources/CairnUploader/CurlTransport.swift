import CCurl
import CCurlShim
import CairnStore

/// The default ``Transport``: libcurl's easy interface.
///
/// - TLS peer and host verification are always on; nothing here turns them off.
/// - Proxies come from the environment (`http_proxy`, `https_proxy`, `no_proxy`), as
///   libcurl reads them by default.
/// - HTTP/2 is used where the server offers it over TLS (`CURL_HTTP_VERSION_2TLS`);
///   plain `http` URLs use HTTP/1.1.
/// - Redirects are not followed: a 3xx comes back as a response, so the uploader
///   decides what it means instead of libcurl re-sending the body elsewhere.
/// - Each attempt sends the request's headers as given (any `Cairn-Retry-Count` among
///   them is replaced by the attempt's) plus `Cairn-Retry-Count: <attempt>`, and
///   nothing libcurl would add on its own: no `Expect: 100-continue`, and no default
///   `Accept` or `Content-Type` unless the request has one. The body is sent from its
///   bytes with their exact length.
///
/// **Handles and connection reuse.** libcurl keeps open connections in the easy handle
/// that made them, and a handle may be used by only one thread at a time. The
/// transport keeps a small pool of idle handles: a call takes one (or makes one), uses
/// it without any lock held, and puts it back. The uploader's single thread therefore
/// always gets the same handle back and reuses its connection, while a second caller
/// (a `flush` from another thread, say) gets its own handle instead of waiting for a
/// lock held across a network call. Handles beyond `maxIdleHandles` are closed.
///
/// ```swift
/// let transport = CurlTransport(connectTimeout: .seconds(5))
/// let result = transport.send(request, attempt: 0, timeout: .seconds(30))
/// ```
public final class CurlTransport: Transport {
    /// The connect timeout used when none is given: 10 seconds.
    public static let defaultConnectTimeout: Duration = .seconds(10)
    /// The response body limit used when none is given: 64 KiB.
    public static let defaultMaxResponseBodyBytes = 64 * 1024

    /// The most an attempt may spend connecting (TCP, proxy and TLS handshakes); the
    /// whole attempt is further bounded by the `timeout` of each call.
    public let connectTimeout: Duration
    /// Response bodies longer than this are cut to this many bytes (the rest is read
    /// and discarded, so the connection stays usable) and marked
    /// ``TransportResponse/bodyTruncated``.
    public let maxResponseBodyBytes: Int
    /// How many idle easy handles, each with its open connections, are kept for reuse.
    public let maxIdleHandles: Int

    private let idle = Locked<[EasyHandle]>([])

    /// Creates a transport.
    ///
    /// - Parameters:
    ///   - connectTimeout: The most an attempt may spend connecting; default 10 s.
    ///   - maxResponseBodyBytes: How much of a response body is kept; default 64 KiB.
    ///     Negative values count as 0.
    ///   - maxIdleHandles: Idle handles kept for connection reuse; default 2 (one per
    ///     thread that sends at the same time). Negative values count as 0, which
    ///     closes every connection after its request.
    public init(connectTimeout: Duration = CurlTransport.defaultConnectTimeout,
                maxResponseBodyBytes: Int = CurlTransport.defaultMaxResponseBodyBytes,
                maxIdleHandles: Int = 2) {
        self.connectTimeout = connectTimeout
        self.maxResponseBodyBytes = max(maxResponseBodyBytes, 0)
        self.maxIdleHandles = max(maxIdleHandles, 0)
    }

    /// Sends `request` once and waits at most `timeout` for the whole exchange.
    ///
    /// Never traps, whatever the request holds: a URL that is not absolute `http` or
    /// `https`, or that libcurl cannot parse, and a method or header that would break
    /// the request line or header block (line breaks, NUL bytes), give
    /// ``TransportFailure/Kind/invalidRequest`` without anything being sent.
    ///
    /// - Parameters:
    ///   - request: The request to send, exactly as built.
    ///   - attempt: Sent as `Cairn-Retry-Count`; 0 for the first try.
    ///   - timeout: The total time allowed, connecting included. Values below one
    ///     millisecond count as one millisecond.
    /// - Returns: The final response, whatever its status, or the reason none came.
    public func send(_ request: UploadRequest, attempt: Int, timeout: Duration) -> TransportResult {
        if let problem = Self.validate(request) {
            return .failure(problem)
        }
        let global = CurlGlobal.initResult
        guard global == CURLE_OK else {
            return .failure(Self.failure(global, in: "curl_global_init", detail: ""))
        }
        guard let easy = checkOut() else {
            return .failure(TransportFailure(.network, "curl_easy_init failed (out of memory?)"))
        }
        let result = request.body.withUnsafeBytes { body in
            transfer(request, body: body, attempt: attempt, timeout: timeout, on: easy)
        }
        checkIn(easy)
        return result
    }

    // MARK: - Handle pool

    /// An idle handle, the most recently used first (it holds the warmest connection),
    /// or a new one.
    private func checkOut() -> EasyHandle? {
        if let handle = idle.withLock({ $0.popLast() }) {
            return handle
        }
        return EasyHandle()
    }

    private func checkIn(_ handle: EasyHandle) {
        let surplus: EasyHandle? = idle.withLock { pool in
            guard pool.count < maxIdleHandles else { return handle }
            pool.append(handle)
            return nil
        }
        // A surplus handle is released here, outside the lock: curl_easy_cleanup may
        // close connections, which must not hold up other callers.
        _ = surplus
    }

    // MARK: - One transfer

    private func transfer(_ request: UploadRequest, body: UnsafeRawBufferPointer, attempt: Int,
                          timeout: Duration, on easy: EasyHandle) -> TransportResult {
        let curl = easy.curl
        // Forget the previous request's options; live connections stay in the handle.
        curl_easy_reset(curl)
        easy.clearError()
        let sink = ResponseSink(maxBodyBytes: maxResponseBodyBytes)
        var headerList: UnsafeMutablePointer<curl_slist>?
        defer {
            // The handle keeps these pointers until the next reset; clear them before
            // the list is freed and the sink released.
            _ = cairn_curl_setopt_ptr(curl, CURLOPT_HTTPHEADER, nil)
            _ = cairn_curl_setopt_ptr(curl, CURLOPT_WRITEDATA, nil)
            _ = cairn_curl_setopt_ptr(curl, CURLOPT_HEADERDATA, nil)
            curl_slist_free_all(headerList)
        }
        return withExtendedLifetime(sink) {
            do throws(TransportFailure) {
                headerList = try Self.headerList(for: request, attempt: attempt, body: body)
                try configure(curl, request, body: body, headers: headerList, timeout: timeout,
                              sink: Unmanaged.passUnretained(sink).toOpaque(),
                              errorBuffer: easy.errorBuffer)
            } catch {
                return .failure(error)
            }
            let code = curl_easy_perform(curl)
            guard code == CURLE_OK else {
                return .failure(Self.failure(code, in: "curl_easy_perform",
                                             detail: easy.errorText))
            }
            var status = 0
            let info = cairn_curl_getinfo_long(curl, CURLINFO_RESPONSE_CODE, &status)
            guard info == CURLE_OK, (100...999).contains(status) else {
                return .failure(TransportFailure(
                    .network, "curl_easy_perform: the server sent no HTTP status"))
            }
            return .response(TransportResponse(status: status, headers: sink.headers,
                                               body: sink.body,
                                               bodyTruncated: sink.bodyTruncated))
        }
    }

    private func configure(_ curl: UnsafeMutableRawPointer, _ request: UploadRequest,
                           body: UnsafeRawBufferPointer, headers: UnsafeMutablePointer<curl_slist>?,
                           timeout: Duration, sink: UnsafeMutableRawPointer,
                           errorBuffer: UnsafeMutablePointer<CChar>) throws(TransportFailure) {
        try Self.check(cairn_curl_setopt_ptr(curl, CURLOPT_ERRORBUFFER, errorBuffer),
                       "CURLOPT_ERRORBUFFER")
        // No signals from libcurl in a multi-threaded host: no SIGALRM for DNS timeouts
        // (this libcurl resolves in a thread). libcurl then leaves SIGPIPE alone, which
        // is safe because it sends with MSG_NOSIGNAL, TLS included (its OpenSSL backend
        // writes through libcurl's own socket calls).
        try Self.check(cairn_curl_setopt_long(curl, CURLOPT_NOSIGNAL, 1), "CURLOPT_NOSIGNAL")
        try Self.check(cairn_curl_setopt_str(curl, CURLOPT_URL, request.url), "CURLOPT_URL")
        try Self.check(cairn_curl_setopt_str(curl, CURLOPT_PROTOCOLS_STR, "http,https"),
                       "CURLOPT_PROTOCOLS_STR")
        try Self.check(cairn_curl_setopt_long(curl, CURLOPT_SSL_VERIFYPEER, 1),
                       "CURLOPT_SSL_VERIFYPEER")
        try Self.check(cairn_curl_setopt_long(curl, CURLOPT_SSL_VERIFYHOST, 2),
                       "CURLOPT_SSL_VERIFYHOST")
        // A libcurl built without HTTP/2 refuses this option; it then speaks HTTP/1.1,
        // which is all a collector needs, so the refusal is not an error.
        _ = cairn_curl_setopt_long(curl, CURLOPT_HTTP_VERSION, Int(CURL_HTTP_VERSION_2TLS))
        try Self.check(cairn_curl_setopt_long(curl, CURLOPT_CONNECTTIMEOUT_MS,
                                              Self.milliseconds(connectTimeout)),
                       "CURLOPT_CONNECTTIMEOUT_MS")
        try Self.check(cairn_curl_setopt_long(curl, CURLOPT_TIMEOUT_MS, Self.milliseconds(timeout)),
                       "CURLOPT_TIMEOUT_MS")
        // Notices a collector that vanished while the connection sat idle between batches.
        try Self.check(cairn_curl_setopt_long(curl, CURLOPT_TCP_KEEPALIVE, 1),
                       "CURLOPT_TCP_KEEPALIVE")
        try Self.check(cairn_curl_setopt_long(curl, CURLOPT_SUPPRESS_CONNECT_HEADERS, 1),
                       "CURLOPT_SUPPRESS_CONNECT_HEADERS")

        try setMethodAndBody(curl, request.method, body: body)
        try Self.check(cairn_curl_setopt_ptr(curl, CURLOPT_HTTPHEADER, headers), "CURLOPT_HTTPHEADER")

        try Self.check(cairn_curl_setopt_writefn(curl) { data, size, count, context in
            ResponseSink.receive(data, size, count, context) { $0.receiveBody($1) }
        }, "CURLOPT_WRITEFUNCTION")
        try Self.check(cairn_curl_setopt_ptr(curl, CURLOPT_WRITEDATA, sink), "CURLOPT_WRITEDATA")
        try Self.check(cairn_curl_setopt_headerfn(curl) { data, size, count, context in
            ResponseSink.receive(data, size, count, context) { $0.receiveHeaderLine($1) }
        }, "CURLOPT_HEADERFUNCTION")
        try Self.check(cairn_curl_setopt_ptr(curl, CURLOPT_HEADERDATA, sink), "CURLOPT_HEADERDATA")
    }

    private func setMethodAndBody(_ curl: UnsafeMutableRawPointer, _ method: String,
                                  body: UnsafeRawBufferPointer) throws(TransportFailure) {
        if body.isEmpty && method == "GET" {
            try Self.check(cairn_curl_setopt_long(curl, CURLOPT_HTTPGET, 1), "CURLOPT_HTTPGET")
            return
        }
        if body.isEmpty && method == "HEAD" {
            try Self.check(cairn_curl_setopt_long(curl, CURLOPT_NOBODY, 1), "CURLOPT_NOBODY")
            return
        }
        // The size first, so libcurl never measures the body with strlen: it is binary.
        try Self.check(cairn_curl_setopt_off(curl, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(body.count)),
                       "CURLOPT_POSTFIELDSIZE_LARGE")
        if let base = body.baseAddress, !body.isEmpty {
            // libcurl only reads the body; it stays valid until the transfer ends.
            try Self.check(cairn_curl_setopt_ptr(curl, CURLOPT_POSTFIELDS, UnsafeMutableRawPointer(mutating: base)),
                           "CURLOPT_POSTFIELDS")
        } else {
            // An empty body still needs a data pointer, or libcurl would read the
            // request body from stdin; COPYPOSTFIELDS copies these zero bytes.
            try Self.check(cairn_curl_setopt_str(curl, CURLOPT_COPYPOSTFIELDS, ""),
                           "CURLOPT_COPYPOSTFIELDS")
        }
        if method != "POST" {
            try Self.check(cairn_curl_setopt_str(curl, CURLOPT_CUSTOMREQUEST, method),
                           "CURLOPT_CUSTOMREQUEST")
        }
    }

    // MARK: - Request checks and headers

    /// Why `request` cannot be sent as built, or `nil` when it can.
    private static func validate(_ request: UploadRequest) -> TransportFailure? {
        let url = request.url.utf8
        let lower = request.url.prefix(8).lowercased()
        guard lower.hasPrefix("http://") || lower.hasPrefix("https://") else {
            return TransportFailure(.invalidRequest, "the URL is not an absolute http or https URL")
        }
        // Control bytes and spaces would be cut (NUL) or rejected by libcurl
        // (whitespace); catching them here gives a clearer message.
        if url.contains(where: { $0 <= 0x20 || $0 == 0x7F }) {
            return TransportFailure(.invalidRequest, "the URL contains a space or control character")
        }
        guard !request.method.isEmpty, request.method.utf8.count <= 64,
              request.method.utf8.allSatisfy(isTokenByte) else {
            return TransportFailure(.invalidRequest, "the method is not an HTTP token")
        }
        for header in request.headers {
            guard !header.name.isEmpty, header.name.utf8.allSatisfy(isTokenByte) else {
                return TransportFailure(.invalidRequest, "a header name is not an HTTP token")
            }
            // CR or LF would start a new header line; NUL would cut the C string.
            if header.value.utf8.contains(where: { $0 == 0x0D || $0 == 0x0A || $0 == 0 }) {
                return TransportFailure(.invalidRequest,
                                        "the value of header \(header.name) contains CR, LF or NUL")
            }
        }
        return nil
    }

    /// RFC 9110 `tchar`: the bytes allowed in methods and header names.
    private static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
             UInt8(ascii: "0")...UInt8(ascii: "9"):
            return true
        default:
            return "!#$%&'*+-.^_`|~".utf8.contains(byte)
        }
    }

    /// The header lines for libcurl: the request's headers, the retry count, and empty
    /// `Name:` entries, which tell libcurl not to send a header it would add itself.
    private static func headerList(for request: UploadRequest, attempt: Int,
                                   body: UnsafeRawBufferPointer) throws(TransportFailure)
        -> UnsafeMutablePointer<curl_slist>?
    {
        let retryCount = retryCountHeaderName.lowercased()
        var lines: [String] = []
        for header in request.headers where header.name.lowercased() != retryCount {
            // "Name:" with nothing after it would remove the header; "Name;" is
            // libcurl's way to send it with an empty value.
            lines.append(header.value.isEmpty ? "\(header.name);" : "\(header.name): \(header.value)")
        }
        lines.append("\(retryCountHeaderName): \(attempt)")
        let given = Set(request.headers.map { $0.name.lowercased() })
        for suppressed in ["Expect", "Accept", "Content-Type"] where !given.contains(suppressed.lowercased()) {
            lines.append("\(suppressed):")
        }

        var list: UnsafeMutablePointer<curl_slist>?
        for line in lines {
            guard let appended = curl_slist_append(list, line) else {
                curl_slist_free_all(list)
                throw TransportFailure(.network, "curl_slist_append failed (out of memory)")
            }
            list = appended
        }
        return list
    }

    // MARK: - Errors and units

    private static func check(_ code: CURLcode, _ option: StaticString) throws(TransportFailure) {
        guard code == CURLE_OK else {
            throw failure(code, in: "curl_easy_setopt(\(option))", detail: "")
        }
    }

    /// A failure of `function` with libcurl's code, its text and the error buffer's detail.
    private static func failure(_ code: CURLcode, in function: String, detail: String) -> TransportFailure {
        let text = curl_easy_strerror(code).map { String(cString: $0) } ?? "unknown error"
        var message = "\(function): \(text) (CURLcode \(code.rawValue))"
        if !detail.isEmpty && detail != text {
            message += ": \(detail)"
        }
        return TransportFailure(kind(of: code), message)
    }

    /// How the uploader should read a libcurl error.
    private static func kind(of code: CURLcode) -> TransportFailure.Kind {
        switch code {
        case CURLE_COULDNT_CONNECT, CURLE_COULDNT_RESOLVE_HOST, CURLE_COULDNT_RESOLVE_PROXY,
             CURLE_PROXY:
            return .connect
        case CURLE_OPERATION_TIMEDOUT:
            return .timeout
        case CURLE_SSL_CONNECT_ERROR, CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CERTPROBLEM,
             CURLE_SSL_CIPHER, CURLE_SSL_CACERT_BADFILE, CURLE_SSL_CRL_BADFILE,
             CURLE_SSL_ISSUER_ERROR, CURLE_SSL_PINNEDPUBKEYNOTMATCH, CURLE_SSL_INVALIDCERTSTATUS,
             CURLE_SSL_SHUTDOWN_FAILED, CURLE_SSL_CLIENTCERT, CURLE_USE_SSL_FAILED,
             CURLE_SSL_ENGINE_NOTFOUND, CURLE_SSL_ENGINE_SETFAILED, CURLE_SSL_ENGINE_INITFAILED:
            return .tls
        case CURLE_URL_MALFORMAT, CURLE_UNSUPPORTED_PROTOCOL, CURLE_BAD_FUNCTION_ARGUMENT:
            return .invalidRequest
        default:
            return .network
        }
    }

    /// `duration` in whole milliseconds, rounded up, between 1 ms and about 24 days
    /// (libcurl reads 0 as "no timeout", and adds timeouts to clock readings).
    static func milliseconds(_ duration: Duration) -> Int {
        let limit = Int(Int32.max)
        let (seconds, attoseconds) = duration.components
        if seconds < 0 || (seconds == 0 && attoseconds <= 0) { return 1 }
        if seconds >= Int64(limit / 1000) { return limit }
        let perMillisecond: Int64 = 1_000_000_000_000_000
        var milliseconds = seconds * 1000 + attoseconds / perMillisecond
        if attoseconds % perMillisecond > 0 { milliseconds += 1 }
        return Int(min(max(milliseconds, 1), Int64(limit)))
    }
}

/// libcurl's process-wide setup, done once before the first handle. A static `let` is
/// initialised exactly once, thread-safely, on first use. It is never torn down:
/// handles may live until the process exits.
private enum CurlGlobal {
    static let initResult: CURLcode = curl_global_init(Int(CURL_GLOBAL_DEFAULT))
}

/// One libcurl easy handle, with its open connections, and its error buffer.
///
/// `@unchecked Sendable` because it moves between threads through the transport's
/// pool but is never used by two at once: it is either idle in the pool, reached only
/// under the pool's lock, or checked out by exactly one `send` call, which alone uses
/// it until it puts it back. libcurl allows a handle to move between threads as long as
/// calls on it never overlap.
private final class EasyHandle: @unchecked Sendable {
    let curl: UnsafeMutableRawPointer
    /// libcurl writes a detailed message here when a call fails (CURLOPT_ERRORBUFFER).
    let errorBuffer: UnsafeMutablePointer<CChar>

    init?() {
        guard let curl = curl_easy_init() else { return nil }
        self.curl = curl
        errorBuffer = .allocate(capacity: Int(CURL_ERROR_SIZE))
        errorBuffer.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE))
    }

    deinit {
        curl_easy_cleanup(curl)
        errorBuffer.deallocate()
    }

    func clearError() {
        errorBuffer[0] = 0
    }

    /// The error buffer's text, without its trailing newline.
    var errorText: String {
        errorBuffer[Int(CURL_ERROR_SIZE) - 1] = 0
        var text = String(cString: errorBuffer)
        while text.last == "\n" { text.removeLast() }
        return text
    }
}

/// Collects one response from libcurl's callbacks: the final response's headers and
/// the start of its body. Used by one transfer on one thread.
private final class ResponseSink {
    /// The body of libcurl's write and header callbacks: finds the sink behind
    /// `context` and hands it the bytes. Returns the count consumed (0 aborts).
    static func receive(_ data: UnsafeMutablePointer<CChar>?, _ size: Int, _ count: Int,
                        _ context: UnsafeMutableRawPointer?,
                        _ deliver: (ResponseSink, UnsafeRawBufferPointer) -> Void) -> Int {
        let total = size &* count
        guard let context else { return 0 }
        deliver(Unmanaged<ResponseSink>.fromOpaque(context).takeUnretainedValue(),
                UnsafeRawBufferPointer(start: data, count: data == nil ? 0 : total))
        return total
    }

    /// Header bytes kept per response; more are read and dropped.
    static let maxHeaderBytes = 64 * 1024

    let maxBodyBytes: Int
    private(set) var body: [UInt8] = []
    private(set) var bodyTruncated = false
    private(set) var headers: [HTTPHeader] = []
    private var headerBytes = 0

    init(maxBodyBytes: Int) {
        self.maxBodyBytes = maxBodyBytes
    }

    func receiveBody(_ bytes: UnsafeRawBufferPointer) {
        let room = maxBodyBytes - body.count
        if bytes.count > room { bodyTruncated = true }
        body.append(contentsOf: bytes.prefix(max(room, 0)))
    }

    /// Takes one header line, CRLF included. A status line starts a new response: the
    /// headers of interim (1xx) responses are dropped, so only the final one's remain.
    func receiveHeaderLine(_ raw: UnsafeRawBufferPointer) {
        var line = raw[...]
        while let last = line.last, last == 0x0A || last == 0x0D { line = line.dropLast() }
        if line.starts(with: "HTTP/".utf8) {
            headers.removeAll()
            headerBytes = 0
            return
        }
        guard !line.isEmpty else { return }
        headerBytes += line.count
        guard headerBytes <= Self.maxHeaderBytes else { return }
        if let first = line.first, first == 0x20 || first == 0x09, !headers.isEmpty {
            // An obsolete folded continuation of the previous header's value.
            headers[headers.count - 1].value += " " + Self.text(Self.trimmed(line))
            return
        }
        guard let colon = line.firstIndex(of: UInt8(ascii: ":")) else { return }
        let name = Self.text(line[..<colon])
        let value = Self.text(Self.trimmed(line[line.index(after: colon)...]))
        headers.append(HTTPHeader(name, value))
    }

    private static func trimmed(_ bytes: Slice<UnsafeRawBufferPointer>) -> Slice<UnsafeRawBufferPointer> {
        var bytes = bytes
        while let first = bytes.first, first == 0x20 || first == 0x09 { bytes = bytes.dropFirst() }
        while let last = bytes.last, last == 0x20 || last == 0x09 { bytes = bytes.dropLast() }
        return bytes
    }

    private static func text(_ bytes: Slice<UnsafeRawBufferPointer>) -> String {
        String(decoding: bytes, as: UTF8.self)
    }
}
