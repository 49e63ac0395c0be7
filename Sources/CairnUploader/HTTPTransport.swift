import CairnBase
import CCairnHTTP
import CairnStore
import Glibc

/// The default ``Transport``: Cairn's own HTTP/1.1 client (the C target `CCairnHTTP`).
///
/// - HTTP/1.1 over TCP, or TLS through OpenSSL 3, which is loaded (`dlopen`) by the
///   first `https` request only: a service that sends plain `http` maps no TLS library.
/// - TLS peer and host verification are always on; nothing here turns them off. The
///   system trust store is used (it honours `SSL_CERT_FILE` and `SSL_CERT_DIR`), or
///   only the certificates in ``caFile`` when one is given. TLS 1.2 at least.
/// - Proxies come from the environment, read once when the transport is made:
///   `http_proxy` for `http` URLs (the request goes to the proxy in absolute form),
///   `https_proxy` or `HTTPS_PROXY` for `https` URLs (a `CONNECT` tunnel, then TLS to
///   the collector through it), and `no_proxy` or `NO_PROXY` for hosts to reach
///   directly. A lowercase variable wins over its uppercase twin; `HTTP_PROXY` is
///   never read, as in curl (a CGI-style server may set it from a request's `Proxy:`
///   header). docs/FORMATS.md "HTTP transport" has the details.
/// - Redirects are not followed: a 3xx comes back as a response, so the uploader
///   decides what it means instead of the body being re-sent elsewhere.
/// - Each attempt sends the request's headers as given, in order (any
///   `Cairn-Retry-Count` among them is replaced by the attempt's), then
///   `Cairn-Retry-Count: <attempt>`. Only `Host` (unless the request has one) and
///   `Content-Length` are added; a request's own `Content-Length` or
///   `Transfer-Encoding` is not sent, since the transport frames the body itself.
///   No `Expect`, `Accept` or `Content-Type` is added.
///
/// **Connections and reuse.** Each connection is used by one thread at a time. The
/// transport keeps a small pool of idle connections: a call takes one (or makes one),
/// uses it without any lock held, and puts it back. Each of the uploader's sender
/// threads therefore finds an open connection and reuses its socket while the collector
/// keeps it open, and no caller waits for a lock held across a network call.
/// Connections beyond ``maxIdleConnections`` are closed: keep it at the number of
/// requests out at once, or each request past it opens (and TLS-handshakes) anew. A
/// reused connection that the collector closed while it sat idle is noticed, and the
/// request is sent again once on a new one.
///
/// ```swift
/// let transport = HTTPTransport(connectTimeout: .seconds(5))
/// let result = transport.send(request, attempt: 0, timeout: .seconds(30))
/// ```
package final class HTTPTransport: Transport {
    /// The connect timeout used when none is given: 10 seconds.
    package static let defaultConnectTimeout: Duration = .seconds(10)
    /// The response body limit used when none is given: 64 KiB.
    package static let defaultMaxResponseBodyBytes = 64 * 1024

    /// The most an attempt may spend connecting (TCP, proxy tunnel and TLS
    /// handshake); the whole attempt is further bounded by the `timeout` of each call.
    package let connectTimeout: Duration
    /// Response bodies longer than this are cut to this many bytes (up to 1 MiB more
    /// is read and discarded, so the connection stays usable; beyond that the
    /// connection is closed instead) and marked ``TransportResponse/bodyTruncated``.
    package let maxResponseBodyBytes: Int
    /// How many idle connections are kept open for reuse.
    package let maxIdleConnections: Int
    /// A PEM file of the CA certificates trusted for `https`, instead of the system
    /// store; `nil` for the system store.
    package let caFile: String?
    /// Which TLS library `https` requests use.
    package let tlsLibrary: TLSLibrary

    /// The TLS library behind `https` (``CairnUploader/TLSLibrary``).
    package typealias TLSLibrary = CairnUploader.TLSLibrary

    private let client: Client
    private let idle = Locked<[Connection]>([])

    /// Creates a transport.
    ///
    /// - Parameters:
    ///   - connectTimeout: The most an attempt may spend connecting; default 10 s.
    ///   - maxResponseBodyBytes: How much of a response body is kept; default 64 KiB.
    ///     Negative values count as 0.
    ///   - maxIdleConnections: Idle connections kept for reuse; default 8 (one per
    ///     request out at once: `UploaderOptions.maxInFlight`'s default). Negative
    ///     values count as 0, which closes every connection after its request.
    ///   - caFile: A PEM file of trusted CA certificates used instead of the system
    ///     store; default `nil` (the system store).
    ///   - environment: Where the proxy variables are read; `nil` (the default) reads
    ///     the process environment, once, now.
    ///   - tlsLibrary: Which TLS library `https` uses; default ``TLSLibrary/automatic``.
    ///   - clientCertificate: A PEM file with this client's certificate (and any
    ///     intermediates), for a collector that asks for one (mutual TLS); default none.
    ///     Both TLS libraries present it.
    ///   - clientKey: Its unencrypted PEM private key; `nil` when it is in the
    ///     certificate's file.
    package init(connectTimeout: Duration = HTTPTransport.defaultConnectTimeout,
                maxResponseBodyBytes: Int = HTTPTransport.defaultMaxResponseBodyBytes,
                maxIdleConnections: Int = 8, caFile: String? = nil,
                environment: [String: String]? = nil, tlsLibrary: TLSLibrary = .automatic,
                clientCertificate: String? = nil, clientKey: String? = nil) {
        self.connectTimeout = connectTimeout
        self.maxResponseBodyBytes = max(maxResponseBodyBytes, 0)
        self.maxIdleConnections = max(maxIdleConnections, 0)
        self.caFile = caFile
        self.tlsLibrary = tlsLibrary
        client = Client(maxBodyBytes: self.maxResponseBodyBytes, files: [caFile, clientCertificate, clientKey],
                        environment: environment, tlsLibrary: tlsLibrary)
    }

    /// The TLS libraries `https` requests have loaded into this process so far (each is
    /// loaded on its first use, never before, and stays): empty while only `http` was
    /// used.
    package static var loadedTLSLibraries: Set<TLSLibrary> {
        let bits = cairn_http_tls_loaded()
        var loaded: Set<TLSLibrary> = []
        if bits & CAIRN_HTTP_TLS_OPENSSL != 0 { loaded.insert(.openSSL) }
        if bits & CAIRN_HTTP_TLS_MBEDTLS != 0 { loaded.insert(.mbedTLS) }
        return loaded
    }

    /// Unmaps the resident code and read-only data pages of the shared libraries that
    /// define `symbols` (`cairn_http_release_pages_of`: never the executable, a RELRO or
    /// written page, or anything while a debugger is attached). Returns the bytes
    /// unmapped.
    package static func releasePages(ofLibrariesDefining symbols: [String]) -> Int {
        let names = symbols.map { strdup($0) }
        defer { names.forEach { free($0) } }
        let borrowed: [UnsafePointer<CChar>?] = names.map { $0.map { UnsafePointer($0) } }
        return borrowed.withUnsafeBufferPointer { Int(cairn_http_release_pages_of($0.baseAddress, $0.count)) }
    }

    /// Unmaps the resident pages of the TLS libraries Cairn loaded
    /// (`cairn_http_tls_release_pages`: clean code and read-only data only); what runs
    /// again comes back at its first use. Returns the bytes unmapped.
    package static func releaseTLSPages() -> Int { Int(cairn_http_tls_release_pages()) }

    /// The file that holds Cairn's own code and its load bias (`cairn_http_own_object`):
    /// `/proc/self/exe` when Cairn is linked into the executable.
    package static func ownCodeFile() -> (path: String, bias: UInt)? {
        var path = [CChar](repeating: 0, count: 4096)
        var bias: UInt = 0
        guard cairn_http_own_object(&path, path.count, &bias) == 1 else { return nil }
        return (String(nulTerminated: path), bias)
    }

    /// Unmaps the resident pages of Cairn's own code inside `ranges` (process addresses
    /// in ``ownCodeFile()``'s file; `cairn_http_release_own_pages` says what is never
    /// touched). A 64 KiB window that came back since an earlier release gets a mapping
    /// per page first, so that the code that keeps running comes back page by page (as
    /// for every release, `cairn_http_tls_release_pages` says how). Returns the bytes
    /// unmapped.
    package static func releaseOwnPages(_ ranges: [Range<UInt>]) -> Int {
        let bounds = ranges.flatMap { [$0.lowerBound, $0.upperBound] }
        return bounds.withUnsafeBufferPointer { Int(cairn_http_release_own_pages($0.baseAddress, ranges.count)) }
    }

    /// Sends `request` once and waits at most `timeout` for the whole exchange.
    ///
    /// Never traps, whatever the request holds: a URL that is not absolute `http` or
    /// `https`, and a method or header that would break the request line or header
    /// block (line breaks, NUL bytes, characters not allowed in a name), give
    /// ``TransportFailure/Kind/invalidRequest`` without anything being sent.
    ///
    /// - Parameters:
    ///   - request: The request to send, exactly as built.
    ///   - attempt: Sent as `Cairn-Retry-Count`; 0 for the first try.
    ///   - timeout: The total time allowed, connecting included. Values below one
    ///     millisecond count as one millisecond. Resolving the host name is not
    ///     bounded by it.
    /// - Returns: The final response, whatever its status, or the reason none came.
    package func send(_ request: UploadRequest, attempt: Int, timeout: Duration) -> TransportResult {
        guard let connection = checkOut() else {
            return .failure(TransportFailure(.network, "the HTTP client or connection could not be made (out of memory)"))
        }
        let result = connection.send(request, attempt: attempt, timeout: timeout,
                                     connectTimeout: connectTimeout)
        checkIn(connection)
        return result
    }

    /// Loads the TLS library and makes the TLS context for an `https` request
    /// (`cairn_http_client_prepare`), once; nothing for `http`.
    package func prepare(for request: UploadRequest) {
        guard let pointer = client.pointer else { return }
        _ = cairn_http_client_prepare(pointer, request.url)
    }

    /// Why `https` requests to `url` cannot use TLS (no TLS library can be loaded, a CA
    /// or client certificate file cannot be read), or nil when they can or `url` is not
    /// `https`: the TLS library is loaded and the context made now, as the first send
    /// would. For a start that tells the operator at once, not at the first send.
    package func tlsProblem(for url: String) -> String? {
        guard let pointer = client.pointer else { return nil }
        var message = [CChar](repeating: 0, count: 512)
        guard cairn_http_client_check_tls(pointer, url, &message, message.count) != 0 else { return nil }
        let text = String(nulTerminated: message)
        return text.isEmpty ? "TLS is unavailable" : text
    }

    /// Why requests to `url` cannot be sent, or nil when they can: the check every send
    /// makes (an absolute http or https URL with a host, an optional port, no user
    /// credentials, visible ASCII only), made ahead, for checking options.
    /// The variables the transport reads for proxies, as curl reads them (see
    /// ``proxy(for:)``).
    package static let proxyVariableNames = ["http_proxy", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY",
                                            "no_proxy", "NO_PROXY"]

    /// The proxy variables of this process's environment, read now (with getenv: call it
    /// on the thread that owns the environment, before other threads may `setenv`).
    package static func proxyEnvironment() -> [String: String] {
        var out: [String: String] = [:]
        for name in proxyVariableNames {
            if let value = getenv(name) { out[name] = String(cString: value) }
        }
        return out
    }

    /// Where a request to `url` goes: `direct`, or `http://host:port (<variable>)`. A
    /// host listed in `no_proxy` (`*`, the host, a domain it is in, an address or a
    /// CIDR range holding it) goes direct; else the variable of the URL's scheme
    /// (`http_proxy`; `https_proxy`, else `HTTPS_PROXY`), else `all_proxy`. Lowercase
    /// wins, empty is unset, `HTTP_PROXY` is never read. Only `http://` proxies are
    /// spoken.
    ///
    /// - Returns: the route, or the failure every request to `url` gets: the URL is not
    ///   usable, or the variable that applies holds a proxy Cairn cannot use (named).
    package func proxy(for url: String) -> Result<String, TransportFailure> {
        guard let pointer = client.pointer else { return .failure(TransportFailure(.invalidRequest, "out of memory")) }
        var url = url
        var text = [CChar](repeating: 0, count: 512)
        let rc = url.withUTF8 { u in
            u.withMemoryRebound(to: CChar.self) { cairn_http_client_proxy(pointer, $0.baseAddress, $0.count, &text, text.count) }
        }
        let message = String(nulTerminated: text)
        return rc == CAIRN_HTTP_OK ? .success(message) : .failure(TransportFailure(.invalidRequest, message))
    }

    package static func problem(withURL url: String) -> String? {
        var url = url
        return url.withUTF8 { u -> String? in
            var why: UnsafePointer<CChar>?
            guard u.withMemoryRebound(to: CChar.self, { cairn_http_url_check($0.baseAddress, $0.count, &why) }) != 0
            else { return nil }
            return why.map { String(cString: $0) } ?? "the URL cannot be sent"
        }
    }

    // MARK: - Connection pool

    /// An idle connection, the most recently used first (its socket is the likeliest
    /// to be open), or a new one.
    private func checkOut() -> Connection? {
        if let connection = idle.withLock({ $0.popLast() }) {
            return connection
        }
        return Connection(client: self.client)
    }

    private func checkIn(_ connection: Connection) {
        let surplus: Connection? = idle.withLock { pool in
            guard pool.count < maxIdleConnections else { return connection }
            pool.append(connection)
            return nil
        }
        // A surplus connection is closed here, outside the lock.
        _ = surplus
    }

    /// `duration` in whole milliseconds, rounded up, between 1 ms and about 24 days.
    static func milliseconds(_ duration: Duration) -> Int64 {
        let limit = Int64(Int32.max)
        let (seconds, attoseconds) = duration.components
        if seconds < 0 || (seconds == 0 && attoseconds <= 0) { return 1 }
        if seconds >= limit / 1000 { return limit }
        let perMillisecond: Int64 = 1_000_000_000_000_000
        var milliseconds = seconds * 1000 + attoseconds / perMillisecond
        if attoseconds % perMillisecond > 0 { milliseconds += 1 }
        return min(max(milliseconds, 1), limit)
    }
}

/// The C client: shared options, proxy settings and TLS context.
///
/// `@unchecked Sendable` because the C client is safe to use from any thread (its
/// only mutable state, the TLS context, is made under its own lock) and is freed only
/// when the last connection made from it is gone (each ``Connection`` holds it).
private final class Client: @unchecked Sendable {
    let pointer: OpaquePointer?

    /// `files`: the CA file, the client certificate and the client key, each optional.
    init(maxBodyBytes: Int, files: [String?], environment: [String: String]?, tlsLibrary: HTTPTransport.TLSLibrary) {
        var options = cairn_http_client_options_t()
        options.max_body_bytes = maxBodyBytes
        options.tls_library = tlsLibrary.code
        // "NAME=value" strings, NULL-terminated, for the C client to read once.
        let variables: [UnsafeMutablePointer<CChar>?] =
            environment.map { env in env.map { strdup("\($0.key)=\($0.value)") } + [nil] } ?? []
        defer { variables.forEach { free($0) } }
        pointer = variables.withUnsafeBufferPointer { list in
            list.withMemoryRebound(to: UnsafePointer<CChar>?.self) { rebound in
                options.environment = environment == nil ? nil : rebound.baseAddress
                return Self.make(&options, files: files)
            }
        }
    }

    private static func make(_ options: inout cairn_http_client_options_t, files: [String?]) -> OpaquePointer? {
        // The paths as C strings for the call (the client copies them). A proxy variable
        // that cannot be used still gives a client: the requests it applies to fail.
        let paths = files.map { $0.map { strdup($0) } ?? nil }
        defer { paths.forEach { free($0) } }
        options.ca_file = UnsafePointer(paths[0])
        options.client_cert_file = UnsafePointer(paths[1])
        options.client_key_file = UnsafePointer(paths[2])
        var client: OpaquePointer?
        _ = cairn_http_client_new(&options, &client)
        return client
    }

    deinit {
        cairn_http_client_free(pointer)
    }
}

/// One connection slot with its socket and buffers.
///
/// `@unchecked Sendable` because it moves between threads through the transport's
/// pool but is never used by two at once: it is either idle in the pool, reached only
/// under the pool's lock, or checked out by exactly one `send` call, which alone uses
/// it until it puts it back.
private final class Connection: @unchecked Sendable {
    private let client: Client
    private let pointer: OpaquePointer

    init?(client: Client) {
        guard let clientPointer = client.pointer, let pointer = cairn_http_conn_new(clientPointer) else {
            return nil
        }
        self.client = client
        self.pointer = pointer
    }

    deinit {
        cairn_http_conn_free(pointer)
    }

    func send(_ request: UploadRequest, attempt: Int, timeout: Duration,
              connectTimeout: Duration) -> TransportResult {
        // Every string's bytes in one buffer, so the C request can point into it.
        let retryCount = UploadRequest.retryCountHeaderName.lowercased()
        var fields: [(name: String, value: String)] = request.headers
            .filter { $0.name.lowercased() != retryCount }
            .map { ($0.name, $0.value) }
        fields.append((UploadRequest.retryCountHeaderName, String(attempt)))
        var storage: [UInt8] = []
        func place(_ text: String) -> Range<Int> {
            let start = storage.count
            storage.append(contentsOf: text.utf8)
            return start..<storage.count
        }
        let method = place(request.method)
        let url = place(request.url)
        let ranges = fields.map { (place($0.name), place($0.value)) }

        // A packed body is sent as it is read, one frame at a time.
        var reader: PackedBody.Reader?
        if request.packed {
            guard let r = PackedBody.Reader(request.body) else {
                return .failure(TransportFailure(.invalidRequest, "the packed body is damaged"))
            }
            reader = r
        }

        // The fields always include the retry count, so the storage is never empty.
        var response = cairn_http_response_t()
        let code: Int32 = storage.withUnsafeBufferPointer { bytes in
            bytes.withMemoryRebound(to: CChar.self) { text in
                guard let base = text.baseAddress else { return CAIRN_HTTP_ENOMEM }
                var headers = ranges.map { name, value in
                    cairn_http_header_t(name: base + name.lowerBound, name_len: name.count,
                                        value: base + value.lowerBound, value_len: value.count)
                }
                return headers.withUnsafeMutableBufferPointer { headerBuffer in
                    request.body.withUnsafeBytes { body in
                        var c = cairn_http_request_t()
                        c.method = base + method.lowerBound
                        c.method_len = method.count
                        c.url = base + url.lowerBound
                        c.url_len = url.count
                        c.headers = UnsafePointer(headerBuffer.baseAddress)
                        c.header_count = headerBuffer.count
                        c.body = body.baseAddress
                        c.body_len = body.count
                        if let reader {
                            c.body = nil
                            c.body_len = reader.count
                            c.body_context = Unmanaged.passUnretained(reader).toOpaque()
                            c.body_piece = { context, offset, piece in
                                guard let context, let piece else { return 0 }
                                let reader = Unmanaged<PackedBody.Reader>.fromOpaque(context).takeUnretainedValue()
                                guard let bytes = reader.piece(at: offset) else { return 0 }
                                piece.pointee = bytes.baseAddress
                                return bytes.count
                            }
                        }
                        c.connect_timeout_ms = HTTPTransport.milliseconds(connectTimeout)
                        c.timeout_ms = HTTPTransport.milliseconds(timeout)
                        return cairn_http_conn_send(pointer, &c, &response)
                    }
                }
            }
        }
        withExtendedLifetime(reader) {}
        guard code == CAIRN_HTTP_OK else {
            let message = String(cString: cairn_http_conn_error(pointer))
            return .failure(TransportFailure(Self.kind(of: code), message))
        }
        return .response(TransportResponse(status: Int(response.status), headers: Self.headers(of: response),
                                           body: Self.body(of: response),
                                           bodyTruncated: response.body_truncated != 0))
    }

    private static func kind(of code: Int32) -> TransportFailure.Kind {
        switch code {
        case CAIRN_HTTP_ECONNECT: return .connect
        case CAIRN_HTTP_ETIMEOUT: return .timeout
        case CAIRN_HTTP_ETLS: return .tls
        case CAIRN_HTTP_EINVALID: return .invalidRequest
        default: return .network
        }
    }

    /// The "name\0value\0" pairs of the response, in order.
    private static func headers(of response: cairn_http_response_t) -> [HTTPHeader] {
        guard let start = response.headers, response.headers_len > 0 else { return [] }
        let block = UnsafeRawBufferPointer(start: start, count: response.headers_len)
        let parts = block.split(separator: 0, omittingEmptySubsequences: false)
        var headers: [HTTPHeader] = []
        headers.reserveCapacity(Int(response.header_count))
        var index = parts.startIndex
        while index + 1 < parts.endIndex {
            headers.append(HTTPHeader(String(decoding: parts[index], as: UTF8.self),
                                      String(decoding: parts[index + 1], as: UTF8.self)))
            index += 2
        }
        return headers
    }

    private static func body(of response: cairn_http_response_t) -> [UInt8] {
        guard let start = response.body, response.body_len > 0 else { return [] }
        return Array(UnsafeBufferPointer(start: start, count: response.body_len))
    }
}

/// The TLS library behind `https`, loaded on the first `https` request (never for
/// `http`). Whichever is used, the certificate chain and the host name are verified
/// and TLS 1.2 is the least accepted.
public enum TLSLibrary: Sendable, Hashable {
    /// mbedTLS 2.28 (`libmbedtls14`), for collectors named by host name or by IP
    /// address: a fraction of OpenSSL's memory in the process. OpenSSL 3 (`libssl3`)
    /// whenever mbedTLS is not installed.
    case automatic
    /// OpenSSL 3 only: TLS 1.3, or a FIPS-validated setup.
    case openSSL
    /// mbedTLS 2.28 only (TLS 1.2).
    case mbedTLS

    package var code: Int32 {
        switch self {
        case .automatic: CAIRN_HTTP_TLS_AUTO
        case .openSSL: CAIRN_HTTP_TLS_OPENSSL
        case .mbedTLS: CAIRN_HTTP_TLS_MBEDTLS
        }
    }
}
