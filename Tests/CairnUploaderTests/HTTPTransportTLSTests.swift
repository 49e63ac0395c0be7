// HTTPTransport over TLS and through proxies, against the real collector serving HTTPS
// with certificates made here by the `openssl` command, and a real forward proxy
// (Tests/Collector/proxy.py) that records what it was asked.
import CairnStore
import CairnTestSupport
import Foundation
import Testing

@testable import CairnUploader

/// A CA and server certificates made for one test in a scratch directory.
private final class Certificates {
    let directory: URL
    /// The CA's certificate, the one `caFile` names.
    var caFile: String { directory.appendingPathComponent("ca.pem").path }

    init() throws {
        directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("cairn-tls-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        try openssl(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                     "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=Cairn Test CA"])
    }

    deinit { try? FileManager.default.removeItem(at: directory) }

    /// A PEM file with a server certificate (signed by the CA) and its key, for the
    /// names in `subjectAltName` (such as "DNS:localhost,IP:127.0.0.1"); `days` -1
    /// makes one that has expired.
    func server(_ name: String, subjectAltName: String, days: Int = 2) throws -> String {
        try Data("subjectAltName=\(subjectAltName)\n".utf8)
            .write(to: directory.appendingPathComponent("\(name).ext"))
        try openssl(["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                     "-keyout", "\(name).key", "-out", "\(name).csr", "-subj", "/CN=\(name)"])
        try openssl(["x509", "-req", "-in", "\(name).csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                     "-CAcreateserial", "-out", "\(name).crt", "-days", "\(days)",
                     "-extfile", "\(name).ext"])
        let pem = directory.appendingPathComponent("\(name).pem")
        let chain = try Data(contentsOf: directory.appendingPathComponent("\(name).crt"))
            + Data(contentsOf: directory.appendingPathComponent("\(name).key"))
        try chain.write(to: pem)
        return pem.path
    }

    /// An intermediate CA the CA signed (`intermediate.pem`), and a server certificate
    /// for `subjectAltName` it signed: the PEM file with the leaf alone and its key, and
    /// the one with the leaf, the intermediate and the key (as servers send chains).
    func chained(subjectAltName: String) throws -> (leafOnly: String, withIntermediate: String) {
        try Data("basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n".utf8)
            .write(to: directory.appendingPathComponent("intermediate.ext"))
        try openssl(["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                     "-keyout", "intermediate.key", "-out", "intermediate.csr", "-subj", "/CN=Cairn Test Intermediate"])
        try openssl(["x509", "-req", "-in", "intermediate.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                     "-out", "intermediate.pem", "-days", "2", "-extfile", "intermediate.ext"])
        try Data("subjectAltName=\(subjectAltName)\n".utf8).write(to: directory.appendingPathComponent("leaf.ext"))
        try openssl(["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                     "-keyout", "leaf.key", "-out", "leaf.csr", "-subj", "/CN=leaf"])
        try openssl(["x509", "-req", "-in", "leaf.csr", "-CA", "intermediate.pem", "-CAkey", "intermediate.key",
                     "-CAcreateserial", "-out", "leaf.crt", "-days", "2", "-extfile", "leaf.ext"])
        func file(_ name: String) throws -> Data { try Data(contentsOf: directory.appendingPathComponent(name)) }
        let leafOnly = directory.appendingPathComponent("leaf-only.pem")
        let withIntermediate = directory.appendingPathComponent("leaf-chain.pem")
        try (file("leaf.crt") + file("leaf.key")).write(to: leafOnly)
        try (file("leaf.crt") + file("intermediate.pem") + file("leaf.key")).write(to: withIntermediate)
        return (leafOnly.path, withIntermediate.path)
    }

    /// `directory`'s certificates under OpenSSL's hashed names (`openssl rehash`).
    func rehash(_ directory: URL) throws {
        try openssl(["rehash", directory.path])
    }

    private func openssl(_ arguments: [String]) throws {
        let made = try runToEnd("/usr/bin/env", ["openssl"] + arguments, directory: directory.path)
        try #require(made.status == 0 && !made.signaled,
                     "openssl \(arguments.first ?? "") failed (`make deps` installs openssl)")
    }
}

/// Tests/Collector/proxy.py as a child process on 127.0.0.1.
private final class ProxyProcess {
    let port: Int
    private let process = Process()
    private let stdinPipe = Pipe()

    /// "http://127.0.0.1:<port>".
    var url: String { "http://127.0.0.1:\(port)" }

    init() throws {
        let output = Pipe()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", repoRoot.appendingPathComponent("Tests/Collector/proxy.py").path]
        process.standardInput = stdinPipe
        process.standardOutput = output
        try process.run()
        try? output.fileHandleForWriting.close()
        var line: [UInt8] = []
        while let byte = try output.fileHandleForReading.read(upToCount: 1)?.first, byte != 0x0A {
            line.append(byte)
        }
        let text = String(decoding: line, as: UTF8.self)
        guard text.hasPrefix("PORT "), let port = Int(text.dropFirst(5)) else {
            process.terminate()
            process.waitUntilExit()
            throw CollectorError.startFailed("proxy.py printed \(text.debugDescription)")
        }
        self.port = port
    }

    deinit {
        try? stdinPipe.fileHandleForWriting.close()
        if process.isRunning { process.terminate() }
        process.waitUntilExit()
    }

    /// One request the proxy was asked to carry.
    struct Seen: Decodable {
        var method: String
        var target: String
        var headers: [[String]]

        func header(_ name: String) -> String? {
            headers.first { $0.count == 2 && $0[0].lowercased() == name.lowercased() }?[1]
        }
    }

    /// What the proxy was asked, oldest first.
    func seen() throws -> [Seen] {
        let (status, body) = try CollectorProcess.exchange(port: port, method: "GET", path: "/_proxy/seen", body: [])
        try #require(status == 200)
        return try JSONDecoder().decode([Seen].self, from: Data(body))
    }
}

private let generous: Duration = .seconds(60)

private func request(_ url: String) -> UploadRequest {
    UploadRequest(url: url + "/v1/batch", headers: [HTTPHeader("Idempotency-Key", "tls")],
                  body: Array(#"{"event":"tls"}"#.utf8), idempotencyKey: "tls")
}

private func status(_ result: TransportResult) -> Int? {
    if case .response(let response) = result { return response.status }
    Issue.record("expected a response, got \(result)")
    return nil
}

private func failure(_ result: TransportResult) -> TransportFailure? {
    if case .failure(let failure) = result { return failure }
    Issue.record("expected a failure, got \(result)")
    return nil
}

/// Both TLS libraries, each chosen alone: the same checks hold whichever serves.
private let libraries: [HTTPTransport.TLSLibrary] = [.openSSL, .mbedTLS]

@Suite struct HTTPTransportTLSTests {
    @Test(arguments: libraries) func trustedCertificateForTheName(_ library: HTTPTransport.TLSLibrary) throws {
        let certificates = try Certificates()
        let pem = try certificates.server("server", subjectAltName: "DNS:localhost,IP:127.0.0.1")
        let collector = try CollectorProcess(tlsCertificate: pem)
        defer { collector.stop() }
        let transport = HTTPTransport(caFile: certificates.caFile, tlsLibrary: library)
        let byName = "https://localhost:\(collector.port)"
        for _ in 0..<3 {
            #expect(status(transport.send(request(byName), attempt: 0, timeout: generous)) == 200)
        }
        #expect(HTTPTransport.loadedTLSLibraries.contains(library))
    }

    /// A collector named by address: either library (and the automatic choice) checks
    /// the address against the certificate's iPAddress entries, and refuses a
    /// certificate that has none for it, even one whose names would match.
    @Test func trustedCertificateForTheAddress() throws {
        let certificates = try Certificates()
        let pem = try certificates.server("server", subjectAltName: "DNS:localhost,IP:127.0.0.1")
        let named = try certificates.server("named", subjectAltName: "DNS:localhost,DNS:127.0.0.1,IP:127.0.0.2")
        let collector = try CollectorProcess(tlsCertificate: pem)
        defer { collector.stop() }
        let wrong = try CollectorProcess(tlsCertificate: named)
        defer { wrong.stop() }
        for library in [HTTPTransport.TLSLibrary.openSSL, .mbedTLS, .automatic] {
            let transport = HTTPTransport(caFile: certificates.caFile, tlsLibrary: library)
            #expect(status(transport.send(request(collector.baseURL), attempt: 0, timeout: generous)) == 200,
                    "\(library)")
            let refused = failure(transport.send(request(wrong.baseURL), attempt: 0, timeout: generous))
            #expect(refused?.kind == .tls && refused?.message.contains("IP address mismatch") == true,
                    "\(library): \(refused?.message ?? "accepted")")
        }
    }

    @Test(arguments: libraries) func systemStoreDoesNotTrustATestCA(_ library: HTTPTransport.TLSLibrary) throws {
        let certificates = try Certificates()
        let pem = try certificates.server("server", subjectAltName: "DNS:localhost,IP:127.0.0.1")
        let collector = try CollectorProcess(tlsCertificate: pem)
        defer { collector.stop() }
        let refused = failure(HTTPTransport(tlsLibrary: library)
            .send(request("https://localhost:\(collector.port)"), attempt: 0, timeout: generous))
        #expect(refused?.kind == .tls)
        #expect(refused?.message.contains("certificate verify failed") == true, "\(refused?.message ?? "")")
    }

    @Test(arguments: libraries) func certificateForAnotherNameIsRefused(_ library: HTTPTransport.TLSLibrary) throws {
        let certificates = try Certificates()
        let pem = try certificates.server("other", subjectAltName: "DNS:collector.example")
        let collector = try CollectorProcess(tlsCertificate: pem)
        defer { collector.stop() }
        let transport = HTTPTransport(caFile: certificates.caFile, tlsLibrary: library)
        for url in [collector.baseURL, "https://localhost:\(collector.port)"] {
            let refused = failure(transport.send(request(url), attempt: 0, timeout: generous))
            #expect(refused?.kind == .tls, "\(url)")
            #expect(refused?.message.contains("mismatch") == true, "\(refused?.message ?? "")")
        }
    }

    @Test(arguments: libraries) func expiredCertificateIsRefused(_ library: HTTPTransport.TLSLibrary) throws {
        let certificates = try Certificates()
        let pem = try certificates.server("expired", subjectAltName: "DNS:localhost,IP:127.0.0.1", days: -1)
        let collector = try CollectorProcess(tlsCertificate: pem)
        defer { collector.stop() }
        let refused = failure(HTTPTransport(caFile: certificates.caFile, tlsLibrary: library)
            .send(request("https://localhost:\(collector.port)"), attempt: 0, timeout: generous))
        #expect(refused?.kind == .tls)
        #expect(refused?.message.contains("expired") == true, "\(refused?.message ?? "")")
    }

    @Test(arguments: libraries) func missingCAFileIsATLSFailure(_ library: HTTPTransport.TLSLibrary) throws {
        let certificates = try Certificates()
        let pem = try certificates.server("server", subjectAltName: "DNS:localhost,IP:127.0.0.1")
        let collector = try CollectorProcess(tlsCertificate: pem)
        defer { collector.stop() }
        let missing = certificates.directory.appendingPathComponent("absent.pem").path
        let refused = failure(HTTPTransport(caFile: missing, tlsLibrary: library)
            .send(request("https://localhost:\(collector.port)"), attempt: 0, timeout: generous))
        #expect(refused?.kind == .tls)
        #expect(refused?.message.contains("absent.pem") == true, "\(refused?.message ?? "")")
    }

    /// A CA file that is not PEM at all fails the same way, naming the file.
    @Test(arguments: libraries) func garbageCAFileIsATLSFailure(_ library: HTTPTransport.TLSLibrary) throws {
        let certificates = try Certificates()
        let pem = try certificates.server("server", subjectAltName: "DNS:localhost,IP:127.0.0.1")
        let collector = try CollectorProcess(tlsCertificate: pem)
        defer { collector.stop() }
        let garbage = certificates.directory.appendingPathComponent("garbage.pem")
        try Data((0..<4096).map { UInt8(truncatingIfNeeded: $0 &* 131 &+ 7) }).write(to: garbage)
        let refused = failure(HTTPTransport(caFile: garbage.path, tlsLibrary: library)
            .send(request("https://localhost:\(collector.port)"), attempt: 0, timeout: generous))
        #expect(refused?.kind == .tls)
        #expect(refused?.message.contains("garbage.pem") == true, "\(refused?.message ?? "")")
    }

    /// The system store as OpenSSL reads it, with either library: a file SSL_CERT_FILE
    /// names that cannot be read is skipped, and each directory of SSL_CERT_DIR (a `:`
    /// list, one of them missing here) is searched by OpenSSL's hashed names; a
    /// certificate there without one is not found by either. In a child, whose
    /// environment is its own.
    @Test(arguments: ["mbedtls", "openssl"]) func theSystemStoreVariablesAreReadAlike(library: String) throws {
        let certificates = try Certificates()
        let pem = try certificates.server("server", subjectAltName: "DNS:localhost")
        let collector = try CollectorProcess(tlsCertificate: pem)
        defer { collector.stop() }
        let store = certificates.directory.appendingPathComponent("store")
        try FileManager.default.createDirectory(at: store, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: certificates.caFile, toPath: store.appendingPathComponent("test-ca.pem").path)
        let url = "https://localhost:\(collector.port)/v1/batch"
        let missing = certificates.directory.appendingPathComponent("absent").path
        let environment = ["SSL_CERT_FILE": missing + ".pem", "SSL_CERT_DIR": missing + ":" + store.path,
                           "CAIRN_TLS_LIBRARY": library]
        let unhashed = try runChild("cairn-http-child", [url], environment: environment)
        #expect(unhashed.contains("FAILURE tls") && unhashed.contains("certificate verify failed"), "\(unhashed)")
        try certificates.rehash(store)
        let trusted = try runChild("cairn-http-child", [url], environment: environment)
        #expect(trusted.contains("STATUS 200"), "\(trusted)")
        #expect(trusted.contains(library == "mbedtls" ? "LIBMBEDTLS yes" : "LIBSSL yes"), "\(trusted)")
        // Without the directory, the test CA is trusted nowhere.
        let refused = try runChild("cairn-http-child", [url], environment: ["SSL_CERT_DIR": missing,
                                                                            "CAIRN_TLS_LIBRARY": library])
        #expect(refused.contains("FAILURE tls") && refused.contains("certificate verify failed"), "\(refused)")
    }

    /// A chain through an intermediate CA, with either library: sent by the server with
    /// the root alone trusted (as most public collectors are), or with the leaf alone
    /// when the trusted file holds the intermediate and the root; refused when the
    /// server sends the leaf alone and only the root is trusted (neither library
    /// fetches a missing intermediate).
    @Test(arguments: libraries) func aChainThroughAnIntermediate(_ library: HTTPTransport.TLSLibrary) throws {
        let certificates = try Certificates()
        let chain = try certificates.chained(subjectAltName: "DNS:localhost")
        let both = certificates.directory.appendingPathComponent("intermediate-and-root.pem")
        try (Data(contentsOf: URL(fileURLWithPath: certificates.directory.appendingPathComponent("intermediate.pem").path))
            + Data(contentsOf: URL(fileURLWithPath: certificates.caFile))).write(to: both)
        for (served, trusted, accepted) in [(chain.withIntermediate, certificates.caFile, true),
                                            (chain.leafOnly, both.path, true),
                                            (chain.leafOnly, certificates.caFile, false)] {
            let collector = try CollectorProcess(tlsCertificate: served)
            defer { collector.stop() }
            let result = HTTPTransport(caFile: trusted, tlsLibrary: library)
                .send(request("https://localhost:\(collector.port)"), attempt: 0, timeout: generous)
            if accepted {
                #expect(status(result) == 200, "\(library) \(served) \(trusted): \(String(describing: failure(result)))")
            } else {
                #expect(failure(result)?.kind == .tls && failure(result)?.message.contains("certificate verify failed") == true,
                        "\(library): \(String(describing: failure(result)))")
            }
        }
    }

    /// Builds, in `dir`, a fake `libmbedtls.so.14` (a fault no real library here
    /// produces) that has every function Cairn resolves and reports every feature; its
    /// structures are the real ones plus `sslExtra` bytes of `mbedtls_ssl_context`, and
    /// its version `version` (nil: the headers' own). It comes first through
    /// LD_LIBRARY_PATH.
    static func fakeMbedTLS(in dir: String, sslExtra: Int, version: String?) throws {
        let clang = try toolchainDirectory() + "/clang"
        // The real sizes and version, from the headers.
        try Data("""
            #include <stdio.h>
            #include <mbedtls/ctr_drbg.h>
            #include <mbedtls/entropy.h>
            #include <mbedtls/pk.h>
            #include <mbedtls/ssl.h>
            #include <mbedtls/version.h>
            #include <mbedtls/x509_crt.h>
            int main(void) {
                printf("-DSSL=%zu -DCONFIG=%zu -DCRT=%zu -DPK=%zu -DDRBG=%zu -DENTROPY=%zu -DVERSION=%uu",
                       sizeof(mbedtls_ssl_context), sizeof(mbedtls_ssl_config), sizeof(mbedtls_x509_crt),
                       sizeof(mbedtls_pk_context), sizeof(mbedtls_ctr_drbg_context), sizeof(mbedtls_entropy_context),
                       (unsigned)MBEDTLS_VERSION_NUMBER);
                return 0;
            }
            """.utf8).write(to: URL(fileURLWithPath: dir + "/sizes.c"))
        let built = try runToEnd(clang, ["-o", dir + "/sizes", dir + "/sizes.c"])
        try #require(built.status == 0, "\(built.err)")
        var sizes = try runToEnd(dir + "/sizes", []).out.split(separator: " ").map(String.init)
        if let version { sizes = sizes.filter { !$0.hasPrefix("-DVERSION=") } + ["-DVERSION=\(version)"] }
        let stubs = ["ssl_free", "ssl_setup", "ssl_set_hostname", "ssl_set_bio", "ssl_handshake", "ssl_read", "ssl_write",
                     "ssl_get_verify_result", "ssl_config_defaults", "ssl_config_free", "ssl_conf_authmode",
                     "ssl_conf_rng", "ssl_conf_min_version", "x509_crt_free", "x509_crt_parse", "x509_crt_parse_der",
                     "x509_crt_parse_file", "x509_crt_verify_with_profile", "ssl_get_peer_cert", "x509_crt_verify_info",
                     "pk_free", "pk_parse_keyfile", "pk_check_pair", "ssl_conf_own_cert", "entropy_free", "entropy_func",
                     "ctr_drbg_free", "ctr_drbg_seed", "ctr_drbg_random", "strerror"]
        let fake = """
            #include <string.h>
            #define CLEAR(name, size) void mbedtls_##name(void *p) { memset(p, 0, size); }
            CLEAR(ssl_init, SSL + \(sslExtra))
            CLEAR(ssl_config_init, CONFIG)
            CLEAR(x509_crt_init, CRT)
            CLEAR(pk_init, PK)
            CLEAR(ctr_drbg_init, DRBG)
            CLEAR(entropy_init, ENTROPY)
            unsigned mbedtls_version_get_number(void) { return VERSION; }
            int mbedtls_version_check_feature(const char *feature) { (void)feature; return 0; }

            """ + stubs.map { "int mbedtls_\($0)(void) { return -1; }\n" }.joined()
        try Data(fake.utf8).write(to: URL(fileURLWithPath: dir + "/fake.c"))
        let shared = try runToEnd(clang, ["-shared", "-fPIC"] + sizes + ["-o", dir + "/libmbedtls.so.14", dir + "/fake.c"])
        try #require(shared.status == 0, "\(shared.err)")
    }

    /// An mbedTLS whose structures have other sizes than the headers Cairn was built
    /// against (another build of 2.28), or of another version (whose layouts Cairn does
    /// not know: 3.6 here), is never driven: its load fails, naming the structure or the
    /// version, and the automatic choice serves the request through OpenSSL.
    @Test(arguments: [(64, nil, "another size of mbedtls_ssl_context"),
                      (0, "0x03060000u", "is version 3.6, built against 2.28")])
    func anMbedTLSOfAnotherLayoutIsNotUsed(sslExtra: Int, version: String?, said: String) throws {
        let certificates = try Certificates()
        let pem = try certificates.server("server", subjectAltName: "DNS:localhost")
        let collector = try CollectorProcess(tlsCertificate: pem)
        defer { collector.stop() }
        let dir = certificates.directory.path
        try Self.fakeMbedTLS(in: dir, sslExtra: sslExtra, version: version)
        let url = "https://localhost:\(collector.port)/v1/batch"
        let refused = try runChild("cairn-http-child", [url, certificates.caFile],
                                   environment: ["LD_LIBRARY_PATH": dir, "CAIRN_TLS_LIBRARY": "mbedtls"])
        #expect(refused.contains("FAILURE tls") && refused.contains(said), "\(refused)")
        let served = try runChild("cairn-http-child", [url, certificates.caFile], environment: ["LD_LIBRARY_PATH": dir])
        #expect(served.contains("STATUS 200") && served.contains("LIBSSL yes"), "\(served)")
    }

    /// In a process of its own: by default a host name and an IP literal both load
    /// mbedTLS and not libssl; OpenSSL, asked for, loads libssl alone.
    @Test func httpsLoadsOneTLSLibraryInTheChild() throws {
        let certificates = try Certificates()
        let pem = try certificates.server("server", subjectAltName: "DNS:localhost,IP:127.0.0.1")
        let collector = try CollectorProcess(tlsCertificate: pem)
        defer { collector.stop() }
        let byName = try runChild("cairn-http-child", ["https://localhost:\(collector.port)/v1/batch",
                                                       certificates.caFile])
        #expect(byName.contains("STATUS 200"), "\(byName)")
        #expect(byName.contains("LIBMBEDTLS yes"), "\(byName)")
        #expect(byName.contains("LIBSSL no"), "\(byName)")
        let byAddress = try runChild("cairn-http-child", [collector.baseURL + "/v1/batch", certificates.caFile])
        #expect(byAddress.contains("STATUS 200"), "\(byAddress)")
        #expect(byAddress.contains("LIBMBEDTLS yes") && byAddress.contains("LIBSSL no"), "\(byAddress)")
        let asked = try runChild("cairn-http-child", [collector.baseURL + "/v1/batch", certificates.caFile],
                                 environment: ["CAIRN_TLS_LIBRARY": "openssl"])
        #expect(asked.contains("STATUS 200"), "\(asked)")
        #expect(asked.contains("LIBSSL yes") && asked.contains("LIBMBEDTLS no"), "\(asked)")
    }
}

/// The pages of a TLS library's code that ran once (its load, its first context, the
/// handshakes) are unmapped after the exchange (CCairnHTTP's pages.c), for each library
/// in a process of its own: nearly all of the crypto library's code is resident after a
/// handshake, and would stay so. A library the service loaded itself is left alone, and
/// a page written since it was loaded (as a debugger's breakpoint or a uprobe is
/// written) keeps its change.
@Suite struct HTTPTransportTLSPagesTests {
    /// Resident and mapped KiB of the code of the library whose file starts with
    /// `prefix`, from the child's `CODE` lines.
    private func code(_ output: String, _ prefix: String) -> (resident: Int, size: Int) {
        var total = (resident: 0, size: 0)
        for line in output.split(separator: "\n") where line.hasPrefix("CODE " + prefix) {
            let fields = line.split(separator: " ")
            if fields.count == 4, let resident = Int(fields[2]), let size = Int(fields[3]) {
                total = (total.resident + resident, total.size + size)
            }
        }
        return total
    }

    @Test(arguments: [("openssl", "libcrypto", "libssl.so.3"), ("mbedtls", "libmbedcrypto", "libmbedtls.so.14")])
    func theCodeATLSSetUpRanIsNotKeptResident(library: String, crypto: String, soname: String) throws {
        let certificates = try Certificates()
        let pem = try certificates.server("server", subjectAltName: "DNS:localhost")
        let collector = try CollectorProcess(tlsCertificate: pem)
        defer { collector.stop() }
        let arguments = ["https://localhost:\(collector.port)/v1/batch", certificates.caFile]
        // Loaded by the client: after the exchange, almost none of it stays resident.
        let own = try runChild("cairn-http-child", arguments, environment: ["CAIRN_TLS_LIBRARY": library])
        #expect(own.contains("STATUS 200"), "\(own)")
        let released = code(own, crypto)
        #expect(released.size > 0 && released.resident * 4 < released.size, "\(own)")
        // Loaded by the service before: left as it is, all of it resident after the handshake.
        let services = try runChild("cairn-http-child", arguments,
                                    environment: ["CAIRN_TLS_LIBRARY": library, "CAIRN_CHILD_PRELOAD": soname])
        #expect(services.contains("STATUS 200"), "\(services)")
        let kept = code(services, crypto)
        #expect(kept.size > 0 && kept.resident * 2 > kept.size, "\(services)")
        // A written page is the process's own copy, and stays one; the rest goes.
        let written = try runChild("cairn-http-child", arguments,
                                   environment: ["CAIRN_TLS_LIBRARY": library, "CAIRN_CHILD_WRITE_CODE": crypto])
        #expect(written.contains("WRITTEN kept"), "\(written)")
        let count = written.split(separator: "\n").first { $0.hasPrefix("RELEASED ") }?
            .split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? 0
        #expect(count > 64 * 1024, "\(written)")
        let after = code(written, crypto)
        #expect(after.resident * 4 < after.size, "\(written)")
    }

    /// The code the sends of a kept-alive connection run comes back after the release,
    /// in whole 64 KiB windows (the kernel's fault-around); the release that follows 2 s
    /// later gives those windows a mapping per page, and the same sends then bring back
    /// only the pages they run.
    @Test(arguments: [("openssl", "libcrypto"), ("mbedtls", "libmbedcrypto")])
    func theCodeThatKeepsRunningComesBackPageByPage(library: String, crypto: String) throws {
        let certificates = try Certificates()
        let pem = try certificates.server("server", subjectAltName: "DNS:localhost")
        let collector = try CollectorProcess(tlsCertificate: pem)
        defer { collector.stop() }
        let out = try runChild("cairn-http-child", ["https://localhost:\(collector.port)/v1/batch", certificates.caFile],
                               environment: ["CAIRN_TLS_LIBRARY": library, "CAIRN_CHILD_AGAIN": crypto])
        #expect(out.split(separator: "\n").filter { $0 == "STATUS 200" }.count == 4, "\(out)")
        func figures(_ tag: String) -> (mappings: Int, resident: Int)? {
            let fields = out.split(separator: "\n").first { $0.hasPrefix(tag + " ") }?.split(separator: " ")
            guard let fields, fields.count == 3, let m = Int(fields[1]), let r = Int(fields[2]) else { return nil }
            return (m, r)
        }
        let back = try #require(figures("BACK"), "\(out)")
        let again = try #require(figures("AGAIN"), "\(out)")
        // (Here: OpenSSL 692 KiB in 1 mapping, then 172 KiB in 172; mbedTLS 240 in 1,
        // then 72 in 49.)
        #expect(back.resident > 0 && again.resident > 0, "\(out)")
        #expect(again.mappings >= back.mappings + 16, "\(out)")
        #expect(again.resident * 2 <= back.resident, "\(out)")
    }
}

/// Mutual TLS: a collector that requires a client certificate signed by its CA gets
/// one from either TLS library (the certificate and key in one PEM file, or the key
/// apart); without one, or with one its CA did not sign, the handshake fails as a `tls`
/// failure; a key that is not the certificate's is refused before any connection.
@Suite struct HTTPTransportClientCertificateTests {
    @Test(arguments: libraries)
    func aCollectorThatAsksForAClientCertificateGetsOne(library: HTTPTransport.TLSLibrary) throws {
        let certificates = try Certificates()
        let pem = try certificates.server("server", subjectAltName: "DNS:localhost,IP:127.0.0.1")
        let clientPEM = try certificates.server("client", subjectAltName: "DNS:orders.internal")
        let collector = try CollectorProcess(tlsCertificate: pem, clientCA: certificates.caFile)
        defer { collector.stop() }
        let url = "https://localhost:\(collector.port)"
        // The certificate and key in one file, then apart.
        let together = HTTPTransport(caFile: certificates.caFile, tlsLibrary: library, clientCertificate: clientPEM)
        #expect(status(together.send(request(url), attempt: 0, timeout: generous)) == 200, "\(library)")
        let crt = certificates.directory.appendingPathComponent("client.crt").path
        let key = certificates.directory.appendingPathComponent("client.key").path
        let apart = HTTPTransport(caFile: certificates.caFile, tlsLibrary: library, clientCertificate: crt, clientKey: key)
        #expect(status(apart.send(request(url), attempt: 0, timeout: generous)) == 200, "\(library)")

        // None, or one from another CA: refused as a `tls` failure, in the handshake
        // (TLS 1.2) or by the server's alert after it (TLS 1.3, OpenSSL).
        let none = HTTPTransport(caFile: certificates.caFile, tlsLibrary: library)
        let withoutOne = failure(none.send(request(url), attempt: 0, timeout: generous))
        #expect(withoutOne?.kind == .tls, "\(library): \(String(describing: withoutOne))")
        let other = try Certificates()
        let stranger = try other.server("stranger", subjectAltName: "DNS:orders.internal")
        let refused = HTTPTransport(caFile: certificates.caFile, tlsLibrary: library, clientCertificate: stranger)
        let withAStranger = failure(refused.send(request(url), attempt: 0, timeout: generous))
        #expect(withAStranger?.kind == .tls, "\(library): \(String(describing: withAStranger))")
        // The control API speaks TLS here too: asked through a transport it admits.
        let seen = together.send(UploadRequest(method: "GET", url: url + "/_control/requests", headers: [], body: [],
                                               idempotencyKey: "control"), attempt: 0, timeout: generous)
        if case .response(let r) = seen {
            let attempts = try JSONSerialization.jsonObject(with: Data(r.body)) as? [Any]
            #expect(attempts?.count == 2, "only the requests with the right certificate arrived")
        } else {
            Issue.record("the control API did not answer: \(seen)")
        }

        // A key that is not the certificate's: said before any byte is sent.
        let mismatched = HTTPTransport(caFile: certificates.caFile, tlsLibrary: library, clientCertificate: crt,
                                       clientKey: certificates.directory.appendingPathComponent("server.key").path)
        let said = failure(mismatched.send(request(url), attempt: 0, timeout: generous))
        #expect(said?.kind == .tls && said?.message.contains("client") == true, "\(said?.message ?? "")")
    }
}

@Suite struct HTTPTransportEarlyAnswerTests {
    /// A server that answers before it has read the body (a 413 for a body over its
    /// limit, a 401 for a wrong key) and reads no more: the answer is taken while the
    /// body is still being sent (a client that only reads after sending would wait for
    /// its deadline), over plain TCP and, for each TLS library, over TLS.
    @Test(arguments: [nil, HTTPTransport.TLSLibrary.openSSL, .mbedTLS])
    func anAnswerBeforeTheBodyIsSentIsTaken(library: HTTPTransport.TLSLibrary?) throws {
        let certificates = try Certificates()
        let pem = library == nil ? nil : try certificates.server("server", subjectAltName: "DNS:localhost,IP:127.0.0.1")
        let collector = try CollectorProcess(tlsCertificate: pem)
        defer { collector.stop() }
        let transport = library.map { HTTPTransport(caFile: certificates.caFile, tlsLibrary: $0) } ?? HTTPTransport()
        let url = library == nil ? collector.baseURL : "https://localhost:\(collector.port)"
        // The control API speaks what the collector speaks: scripted through the transport.
        let script = try JSONSerialization.data(withJSONObject: [["status": 413, "early": true, "stall": 20],
                                                                 ["status": 401, "early": true, "stall": 20]])
        let control = UploadRequest(url: url + "/_control/script", headers: [HTTPHeader("Content-Type", "application/json")],
                                    body: Array(script), idempotencyKey: "control")
        #expect(status(transport.send(control, attempt: 0, timeout: generous)) == 200)
        // 16 MiB: far more than the socket buffers hold, so sending blocks on a server
        // that reads nothing.
        var body = [UInt8](repeating: 0, count: 16 << 20)
        for i in stride(from: 0, to: body.count, by: 4096) { body[i] = UInt8(truncatingIfNeeded: i >> 12) }
        for code in [413, 401] {
            let request = UploadRequest(url: url + "/v1/batch", headers: [], body: body, idempotencyKey: "big-\(code)")
            let answer = transport.send(request, attempt: 0, timeout: .seconds(10))
            #expect(status(answer) == code, "\(library.map { "\($0)" } ?? "plain"): \(answer)")
        }
        if library == nil { #expect(try collector.requests().count == 2) }
    }
}

@Suite struct HTTPTransportProxyTests {
    @Test func httpGoesThroughTheProxyInAbsoluteForm() throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        let proxy = try ProxyProcess()
        let proxyURL = "http://cairn:p%40ss@127.0.0.1:\(proxy.port)"
        let transport = HTTPTransport(environment: ["http_proxy": proxyURL, "no_proxy": "example.com"])
        #expect(status(transport.send(request(collector.baseURL), attempt: 0, timeout: generous)) == 200)

        let seen = try proxy.seen()
        try #require(seen.count == 1)
        #expect(seen[0].method == "POST")
        #expect(seen[0].target == collector.baseURL + "/v1/batch")
        #expect(seen[0].header("Proxy-Authorization") == "Basic " + Data("cairn:p@ss".utf8).base64EncodedString())
        let attempts = try collector.requests()
        #expect(attempts.count == 1)
        #expect(attempts.first?.path == "/v1/batch")
        #expect(attempts.first?.body == Array(#"{"event":"tls"}"#.utf8))
        #expect(attempts.first?.headerValues("Proxy-Authorization").isEmpty == true)
    }

    @Test func httpsGoesThroughAConnectTunnel() throws {
        let certificates = try Certificates()
        let pem = try certificates.server("server", subjectAltName: "DNS:localhost,IP:127.0.0.1")
        let collector = try CollectorProcess(tlsCertificate: pem)
        defer { collector.stop() }
        let proxy = try ProxyProcess()
        // The uppercase variable loses to the lowercase one.
        let transport = HTTPTransport(caFile: certificates.caFile,
                                      environment: ["https_proxy": proxy.url, "HTTPS_PROXY": "http://127.0.0.1:9"])
        let url = "https://localhost:\(collector.port)"
        #expect(status(transport.send(request(url), attempt: 0, timeout: generous)) == 200)
        #expect(status(transport.send(request(url), attempt: 1, timeout: generous)) == 200)

        let seen = try proxy.seen()
        // One tunnel carried both requests.
        #expect(seen.map(\.method) == ["CONNECT"])
        #expect(seen.first?.target == "localhost:\(collector.port)")
    }

    @Test func noProxyAndUppercaseHTTPProxyGoDirect() throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        let proxy = try ProxyProcess()
        let environments: [[String: String]] = [
            ["http_proxy": proxy.url, "no_proxy": "example.com, 127.0.0.1"],
            ["http_proxy": proxy.url, "NO_PROXY": "*"],
            ["http_proxy": proxy.url, "no_proxy": ".0.0.1"],  // no suffix match for addresses
            ["HTTP_PROXY": proxy.url],
        ]
        let expectDirect = [true, true, false, true]
        for (environment, direct) in zip(environments, expectDirect) {
            let before = try proxy.seen().count
            let transport = HTTPTransport(environment: environment)
            #expect(status(transport.send(request(collector.baseURL), attempt: 0, timeout: generous)) == 200)
            #expect(try proxy.seen().count == before + (direct ? 0 : 1), "\(environment)")
        }
        #expect(try collector.requests().count == 4)
    }

    /// curl's rules: the variable of the URL's scheme after no_proxy (addresses, CIDR
    /// ranges, `*`), then all_proxy; a variable that does not apply is ignored, even one
    /// Cairn could not use; one that applies and cannot be used fails the request and
    /// names the variable.
    @Test func proxyVariablesAsCurlReadsThem() throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        let proxy = try ProxyProcess()
        let url = collector.baseURL
        let cases: [(env: [String: String], route: String, viaProxy: Bool)] = [
            // Irrelevant unusable values: another scheme's, or the host bypasses them.
            (["https_proxy": "socks5://127.0.0.1:1080", "HTTPS_PROXY": "https://p.example"], "direct", false),
            (["http_proxy": "socks5h://127.0.0.1:1080", "NO_PROXY": "localhost,127.0.0.1"], "direct", false),
            (["all_proxy": "socks5://127.0.0.1:1080", "no_proxy": "127.0.0.0/8"], "direct", false),
            (["http_proxy": proxy.url, "no_proxy": "10.0.0.0/8, ::1/128"], "http://127.0.0.1:\(proxy.port) (http_proxy)", true),
            (["ALL_PROXY": proxy.url], "http://127.0.0.1:\(proxy.port) (ALL_PROXY)", true),
            (["all_proxy": proxy.url, "http_proxy": ""], "http://127.0.0.1:\(proxy.port) (all_proxy)", true),
        ]
        for c in cases {
            let before = try proxy.seen().count
            let transport = HTTPTransport(environment: c.env)
            #expect((try? transport.proxy(for: url).get()) == c.route, "\(c.env)")
            #expect(status(transport.send(request(url), attempt: 0, timeout: generous)) == 200, "\(c.env)")
            #expect(try proxy.seen().count == before + (c.viaProxy ? 1 : 0), "\(c.env)")
        }
        for (env, variable) in [(["http_proxy": "socks5://127.0.0.1:1080"], "http_proxy"),
                                (["ALL_PROXY": "https://proxy.example:3128"], "ALL_PROXY"),
                                (["https_proxy": "socks4://x", "http_proxy": ""], nil)] as [([String: String], String?)] {
            let transport = HTTPTransport(environment: env)
            guard let variable else {
                // An empty variable is unset, and https_proxy is for https.
                #expect(status(transport.send(request(url), attempt: 0, timeout: generous)) == 200, "\(env)")
                continue
            }
            let refused = failure(transport.send(request(url), attempt: 0, timeout: generous))
            #expect(refused?.kind == .invalidRequest && refused?.message.contains(variable) == true,
                    "\(refused?.message ?? "delivered")")
            if case .failure(let why) = transport.proxy(for: url) {
                #expect(why.message.hasPrefix("\(variable) is not a usable proxy"), "\(why.message)")
            } else {
                Issue.record("\(env): the route should be refused")
            }
        }
    }

    @Test func proxyThatCannotBeReachedIsAConnectFailure() throws {
        let port = try CollectorProcess.closedPort()
        let transport = HTTPTransport(environment: ["https_proxy": "http://127.0.0.1:\(port)"])
        let refused = failure(transport.send(request("https://127.0.0.1:9"), attempt: 0, timeout: generous))
        #expect(refused?.kind == .connect)
        #expect(refused?.message.contains("proxy") == true, "\(refused?.message ?? "")")
    }
}
