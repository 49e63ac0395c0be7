import CairnStore

/// Sends one attempt of an ``UploadRequest`` and reports what happened.
///
/// The uploader calls ``send(_:attempt:timeout:)`` synchronously from its own background
/// thread; an implementation may block for up to `timeout`. ``HTTPTransport`` is the
/// default; tests and integrators can inject their own.
///
/// ```swift
/// let transport: any Transport = HTTPTransport()
/// switch transport.send(request, attempt: 0, timeout: .seconds(30)) {
/// case .response(let response): print(response.status)
/// case .failure(let failure): print(failure.kind, failure.message)
/// }
/// ```
package protocol Transport: Sendable {
    /// Sends `request` once, exactly as built, and waits for the answer.
    ///
    /// - Parameters:
    ///   - request: The request, sent byte-identically on every attempt: its method,
    ///     URL, headers and body.
    ///   - attempt: 0 for the first try, then 1, 2, ...; sent as the
    ///     `Cairn-Retry-Count` header, the only thing that changes between attempts.
    ///   - timeout: The most the whole attempt may take, connecting included.
    /// - Returns: The collector's response, whatever its status, or why none came.
    func send(_ request: UploadRequest, attempt: Int, timeout: Duration) -> TransportResult

    /// Does the one-time set-up that a first send of `request` would do (for HTTPS,
    /// loading the TLS library), before the send starts: the uploader calls it before
    /// each send, outside the time it counts as the transport's, so that set-up is not
    /// taken for a slow collector. Returns at once when there is nothing to do.
    func prepare(for request: UploadRequest)
}

extension Transport {
    /// Nothing to set up.
    package func prepare(for request: UploadRequest) {}
}

extension UploadRequest {
    /// The name of the header that carries the attempt number (0 for the first try).
    package static let retryCountHeaderName = "Cairn-Retry-Count"
}

/// An HTTP response, whatever its status.
package struct TransportResponse: Sendable, Equatable {
    /// The HTTP status code of the final response, such as 200, 429 or 503.
    package var status: Int
    /// The final response's headers, in the order received. Interim (1xx) responses'
    /// headers are not included.
    package var headers: [HTTPHeader]
    /// The response body, up to the transport's limit (``HTTPTransport`` keeps 64 KiB
    /// by default).
    package var body: [UInt8]
    /// Whether the body was longer than the limit and ``body`` holds only its start.
    package var bodyTruncated: Bool

    /// Creates a response.
    package init(status: Int, headers: [HTTPHeader] = [], body: [UInt8] = [],
                bodyTruncated: Bool = false) {
        self.status = status
        self.headers = headers
        self.body = body
        self.bodyTruncated = bodyTruncated
    }

    /// The value of the first header named `name` (compared case-insensitively).
    package func header(_ name: String) -> String? { headers.value(of: name) }
}

/// Why an attempt got no HTTP response.
package struct TransportFailure: Error, Sendable, Equatable {
    /// The broad reason, which decides what the uploader does next.
    package enum Kind: String, Sendable, Equatable {
        /// No connection could be made: refused, unreachable, or the host (or proxy)
        /// name did not resolve. Retryable.
        case connect
        /// The attempt took longer than its timeout (or the connect timeout). Retryable.
        case timeout
        /// The TLS handshake failed or the peer's certificate did not verify. Usually a
        /// configuration problem; verification is never turned off.
        case tls
        /// The connection broke or the server answered something that is not HTTP:
        /// closed without a response, reset, a malformed reply. Retryable.
        case network
        /// The request cannot be sent as built: a malformed or non-HTTP(S) URL, a
        /// header with a line break, an unusable method. Retrying cannot help.
        case invalidRequest
    }

    /// The broad reason.
    package var kind: Kind
    /// A readable description for logs: what failed, with the system's, OpenSSL's or
    /// the certificate check's own text.
    package var message: String

    /// Creates a failure.
    package init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }
}

/// The outcome of one attempt: a response (any status) or a failure to get one.
package enum TransportResult: Sendable, Equatable {
    /// The collector answered; the status may still be an error such as 500.
    case response(TransportResponse)
    /// No response came.
    case failure(TransportFailure)
}
