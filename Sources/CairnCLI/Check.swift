// `cairn check`: one test event, sent the way a service started in this environment
// would send it (its CAIRN_* and proxy variables), each step said as it goes: the
// configuration as `Cairn.start` checks it, the route (direct or which proxy), name
// resolution, the TCP connection, then the request itself (TLS and the HTTP answer).
// Exit 0 only when the collector acknowledged the event; 1 when a step failed; 2 when
// the configuration is refused (as `Cairn.start` would refuse it).
import Cairn
import CairnBase
import CairnProcessor
import CairnStore
import CairnUploader
import Foundation
import Glibc

/// Runs the check and exits with its status.
func check() -> Never {
    let options = Cairn.Options.fromEnvironment()
    out("cairn check: one test event, sent as a service started with this environment would send it")
    do {
        try options.validate()
    } catch {
        step("configuration", "refused: \(error)")
        exit(2)
    }
    guard let url = options.uploadURL?.trimmingWhiteSpace, !url.isEmpty else {
        step("configuration", "no upload URL (CAIRN_UPLOAD_URL): events stay on disk, nothing is sent")
        exit(2)
    }
    let key = options.apiKey?.trimmingWhiteSpace
    step("configuration", "ok")
    step("upload URL", DeliveryStatus.display(url))
    step("API key", key.map { "set (\($0.count) characters)" } ?? "not set: requests go without Authorization")
    let https = url.lowercased().hasPrefix("https://")
    if https {
        step("trust", options.caFile.map { "the CA file \($0) (CAIRN_CA_FILE)" } ?? "the system store")
    }

    if https, let cert = options.clientCertificateFile?.trimmingWhiteSpace {
        step("client certificate", cert + (options.clientKeyFile.map { ", key \($0)" } ?? ""))
    }
    let transport = HTTPTransport(caFile: options.caFile?.trimmingWhiteSpace, environment: HTTPTransport.proxyEnvironment(),
                                  tlsLibrary: options.tlsLibrary,
                                  clientCertificate: options.clientCertificateFile?.trimmingWhiteSpace,
                                  clientKey: options.clientKeyFile?.trimmingWhiteSpace)
    let route: String
    switch transport.proxy(for: url) {
    case .success(let r): route = r
    case .failure(let why):
        step("proxy", "refused: \(why.message)")
        exit(1)
    }
    step("proxy", route)

    // Where the TCP connection goes: the collector, or the proxy.
    let (host, port) = route == "direct" ? hostAndPort(url) : hostAndPort(String(route.prefix { $0 != " " }))
    guard let host else {
        step("name resolution", "no host in \(route == "direct" ? url : route)")
        exit(1)
    }
    let addresses: [ResolvedAddress]
    switch resolve(host, port: port) {
    case .success(let found): addresses = found
    case .failure(let why):
        step("name resolution", "\(host) failed: \(why)")
        exit(1)
    }
    step("name resolution", "\(host): \(addresses.map(\.text).joined(separator: ", "))")
    let reached = connectAny(addresses, port: port)
    step("connect", reached)
    guard reached.hasPrefix("ok") else { exit(1) }

    // The event, framed and sent as the uploader sends a batch.
    let now = SnapshotStore.nowMillis()
    let event = Event(name: "cairn_check", properties: ["host": .string(ProcessInfo.processInfo.hostName)],
                      timeMillis: now, identity: Identity(distinctID: options.distinctID), tier: .important)
    let record = Processor().record(event)
    let requestKey = UUID().uuidString.lowercased()
    guard let body = try? FrameEncoder().encode(batchID: UInt64.random(in: 1...UInt64.max), records: [record]) else {
        step("request", "the batch could not be framed")
        exit(1)
    }
    let request = UploadRequest.batch(url: url, apiKey: key, sdkVersion: cairnVersion, body: body, key: requestKey)
    let started = ContinuousClock.now
    let result = transport.send(request, attempt: 0, timeout: .seconds(30))
    let took = ContinuousClock.now - started
    let tls = https ? " over TLS (\(HTTPTransport.loadedTLSLibraries.map { "\($0)" }.sorted().joined(separator: ", ")))" : ""
    switch result {
    case .response(let response) where (200...299).contains(response.status):
        if https { step("TLS", "ok\(tls)") }
        step("HTTP", "\(response.status) in \(Int(took / .milliseconds(1))) ms: delivered (Idempotency-Key \(requestKey))")
        exit(0)
    case .response:
        if https { step("TLS", "ok\(tls)") }
        step("HTTP", DeliveryStatus.describe(result).text + ": not delivered")
        exit(1)
    case .failure(let failure):
        let where_ = failure.kind == .tls ? "TLS" : failure.kind == .invalidRequest ? "request" : "HTTP"
        step(where_, "failed: " + DeliveryStatus.describe(result).text)
        exit(1)
    }
}

/// One step's line: `<step>: <what happened>`.
private func step(_ name: String, _ what: String) { out("  \(name): \(what)") }

/// The host and port of an `http(s)://` URL (default ports by scheme).
private func hostAndPort(_ url: String) -> (String?, Int) {
    guard let parsed = URLComponents(string: url), let host = parsed.host else { return (nil, 0) }
    let https = parsed.scheme?.lowercased() == "https"
    return (host.trimmingCharacters(in: CharacterSet(charactersIn: "[]")), parsed.port ?? (https ? 443 : 80))
}

private struct ResolvedAddress {
    var family: Int32
    var storage: sockaddr_storage
    var length: socklen_t
    var text: String
}

/// getaddrinfo, as the transport calls it.
private func resolve(_ host: String, port: Int) -> Result<[ResolvedAddress], ResolveError> {
    var hints = addrinfo()
    hints.ai_family = AF_UNSPEC
    hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
    hints.ai_flags = AI_NUMERICSERV
    var list: UnsafeMutablePointer<addrinfo>?
    let rc = getaddrinfo(host, String(port), &hints, &list)
    guard rc == 0 else { return .failure(ResolveError(text: String(cString: gai_strerror(rc)))) }
    defer { freeaddrinfo(list) }
    var out: [ResolvedAddress] = []
    var cursor = list
    while let a = cursor?.pointee {
        var storage = sockaddr_storage()
        withUnsafeMutableBytes(of: &storage) { dst in
            dst.copyMemory(from: UnsafeRawBufferPointer(start: a.ai_addr, count: Int(a.ai_addrlen)))
        }
        var text = [CChar](repeating: 0, count: Int(NI_MAXHOST))
        getnameinfo(a.ai_addr, a.ai_addrlen, &text, socklen_t(text.count), nil, 0, NI_NUMERICHOST)
        out.append(ResolvedAddress(family: a.ai_family, storage: storage, length: a.ai_addrlen,
                                   text: String(nulTerminated: text)))
        cursor = a.ai_next
    }
    return .success(out)
}

private struct ResolveError: Error, CustomStringConvertible {
    var text: String
    var description: String { text }
}

/// Tries each resolved address in turn (3 s each): `ok: <address> port <p>` for the
/// first that connects, else what each said.
private func connectAny(_ addresses: [ResolvedAddress], port: Int) -> String {
    var said: [String] = []
    for var a in addresses {
        let fd = socket(a.family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard fd >= 0 else { continue }
        defer { close(fd) }
        let rc = withUnsafePointer(to: &a.storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, a.length) }
        }
        var error: Int32 = rc == 0 ? 0 : errno
        if rc != 0 && error == EINPROGRESS {
            var poller = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
            if poll(&poller, 1, 3000) == 1 {
                var size = socklen_t(MemoryLayout<Int32>.size)
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size)
            } else {
                error = ETIMEDOUT
            }
        }
        if error == 0 { return "ok: \(a.text) port \(port)" + (said.isEmpty ? "" : " (after \(said.joined(separator: "; ")))") }
        said.append("\(a.text): \(String(cString: strerror(error)))")
    }
    return "failed: " + said.joined(separator: "; ")
}
