import CairnTestSupport
import Foundation
import Testing

/// A configuration fault a user makes in their first hour (a wrong API key, a mistyped
/// path, a collector that redirects) through the public API of a real service process
/// (`cairn-service-child`), against the test collector checking keys and paths as a real
/// one does: nothing accepted is lost, the operator is told once on stderr (without
/// debug logging), `cairn status` says why, and fixing the configuration delivers
/// everything that waited on disk.
@Suite(.serialized) struct ConfigurationFaultTests {
    typealias Child = ServiceProcessTests

    /// The `[cairn]` lines a run wrote on stderr.
    static func notices(_ err: String) -> [String] {
        err.split(separator: "\n").map(String.init).filter { $0.hasPrefix("[cairn]") }
    }

    /// `cairn status` of `dir`.
    static func status(_ dir: String) throws -> (status: Int32, out: [String], err: String) {
        try Child.run("cairn", ["status", dir])
    }

    /// A run of `events` events with a faulty `env` (stored, said once), then a run with
    /// `fixed`: every event arrives, each once.
    static func faultThenFix(_ collector: CollectorProcess, events: Int, faulty: [String: String],
                             fixed: [String: String], said: String) throws {
        let dir = try TemporaryDirectory("cairn-fault")
        let base = ["CAIRN_APP_ID": "orders", "CAIRN_DATA_DIR": dir.path]
        let first = try Child.child(["run", "\(events)"], env: base.merging(faulty) { $1 })
        #expect(first.status == 0, "\(first.err)")
        #expect(try collector.events().isEmpty, "nothing was acknowledged")
        let lines = notices(first.err)
        #expect(lines.count == 1, "one line for the whole run: \(lines)")
        #expect(lines.first?.contains(said) == true, "\(lines)")
        #expect(lines.first?.contains("nothing is dropped") == true, "\(lines)")
        let refused = try collector.requests().filter { !$0.acknowledged }
        #expect(!refused.isEmpty && refused.count <= 3, "one probe, not a request per batch: \(refused.count)")

        let shown = try status(dir.path)
        #expect(shown.status == 0, "\(shown.err)")
        let delivery = shown.out.first { $0.hasPrefix("delivery:") } ?? ""
        #expect(delivery.contains("failing since") && delivery.contains(said), "\(shown.out)")
        #expect(shown.out.contains { $0.hasPrefix("stored requests: ") && !$0.hasPrefix("stored requests: 0") },
                "\(shown.out)")

        let second = try Child.child(["run", "0"], env: base.merging(fixed) { $1 })
        #expect(second.status == 0, "\(second.err)")
        let recovered = notices(second.err)
        #expect(recovered.count == 1 && recovered.first?.contains("recovered") == true, "\(recovered)")
        let received = try LifecycleTests.received(collector)
        let indexes = LifecycleTests.childIndexes(received)
        #expect(indexes.sorted() == Array(0..<events), "every event, each once: \(indexes.count) of \(events)")
        #expect(received.contains { $0["name"] as? String == "session_end" }, "the faulty run's end too")
        let after = try status(dir.path)
        #expect(after.out.contains { $0.hasPrefix("delivery: ok since") && $0.contains(said) }, "\(after.out)")
        #expect(after.out.contains("stored requests: 0 (0 bytes)"), "\(after.out)")
    }

    @Test func aRefusedKeyKeepsEverythingUntilTheKeyIsRotated() throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        try collector.expect(["api_key": "rotated-key"])
        let url = collector.baseURL + "/v1/batch"
        try Self.faultThenFix(collector, events: 40,
                              faulty: ["CAIRN_UPLOAD_URL": url, "CAIRN_API_KEY": "revoked-key"],
                              fixed: ["CAIRN_UPLOAD_URL": url, "CAIRN_API_KEY": "rotated-key"],
                              said: "HTTP 401, the API key was refused")
    }

    @Test func aWrongPathKeepsEverythingUntilTheURLIsFixed() throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        try collector.expect(["path": "/v1/batch"])
        try Self.faultThenFix(collector, events: 25,
                              faulty: ["CAIRN_UPLOAD_URL": collector.baseURL + "/v1/btach", "CAIRN_API_KEY": "k"],
                              fixed: ["CAIRN_UPLOAD_URL": collector.baseURL + "/v1/batch", "CAIRN_API_KEY": "k"],
                              said: "HTTP 404, no such path on the collector")
    }

    /// A redirect is not followed (the key must not travel to another place), and not
    /// taken for a refusal of the payload either.
    @Test func aRedirectIsNotFollowedAndLosesNothing() throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        let moved = collector.baseURL + "/v2/batch"
        try collector.setDefault(["status": 307, "headers": ["Location": moved]])
        let dir = try TemporaryDirectory("cairn-fault")
        let env = ["CAIRN_APP_ID": "orders", "CAIRN_DATA_DIR": dir.path, "CAIRN_API_KEY": "k",
                   "CAIRN_UPLOAD_URL": collector.baseURL + "/v1/batch"]
        let first = try Child.child(["run", "30"], env: env)
        #expect(first.status == 0, "\(first.err)")
        let lines = Self.notices(first.err)
        #expect(lines.count == 1 && lines.first?.contains("HTTP 307, a redirect to \(moved), not followed") == true,
                "\(lines)")
        #expect(try collector.requests().allSatisfy { $0.path == "/v1/batch" }, "never followed")
        try collector.setDefault(["status": 200])
        let second = try Child.child(["run", "0"], env: env)
        #expect(second.status == 0, "\(second.err)")
        let indexes = LifecycleTests.childIndexes(try LifecycleTests.received(collector))
        #expect(indexes.sorted() == Array(0..<30), "every event, each once: \(indexes.count)")
    }

    /// Proxy variables as curl reads them: one that does not apply to the upload URL is
    /// ignored, even a kind Cairn cannot speak (every event arrives, nothing is said);
    /// one that applies and cannot be used stops the start, naming the variable.
    @Test func proxyVariablesThatDoNotApplyAreIgnoredAndAnUnusableOneIsNamed() throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        let dir = try TemporaryDirectory("cairn-fault")
        let env = ["CAIRN_APP_ID": "orders", "CAIRN_DATA_DIR": dir.path, "CAIRN_API_KEY": "k",
                   "CAIRN_UPLOAD_URL": collector.baseURL + "/v1/batch"]
        let irrelevant = ["https_proxy": "socks5://127.0.0.1:1080", "HTTPS_PROXY": "https://proxy.example:3128",
                          "http_proxy": "socks5h://proxy.example:1080", "NO_PROXY": "localhost, 127.0.0.0/8"]
        let r = try Child.child(["run", "20"], env: env.merging(irrelevant) { $1 })
        #expect(r.status == 0, "\(r.err)")
        #expect(Self.notices(r.err).isEmpty, "\(r.err)")
        #expect(LifecycleTests.childIndexes(try LifecycleTests.received(collector)).sorted() == Array(0..<20))

        let applicable = ["https_proxy": "http://proxy.example:3128", "http_proxy": "socks5://127.0.0.1:1080"]
        let refused = try Child.child(["run", "1"], env: env.merging(applicable) { $1 })
        #expect(refused.status == 1, "a start error")
        #expect(refused.err.contains("http_proxy is not a usable proxy: Cairn speaks no SOCKS"), "\(refused.err)")
        let safe = try Child.child(["run", "1"], env: env.merging(applicable) { $1 }
            .merging(["CAIRN_TEST_SAFE_START": "1"]) { $1 })
        #expect(safe.status == 0 && Self.notices(safe.err).count == 1, "\(safe.err)")
        #expect(Self.notices(safe.err).first?.contains("not started") == true)
    }

    /// A dual-stack collector name whose first address (IPv6) black-holes: the next
    /// address is tried 250 ms later (Happy Eyeballs), so every event arrives and no
    /// failure is ever said. The child sees the name through a hosts file of its own
    /// (a private mount namespace: `unshare -m`, then a bind mount over /etc/hosts).
    @Test func aBlackHoledFirstAddressIsPassedOver() throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        let hole = try BlackHole(ipv6LoopbackPort: collector.port)
        let dir = try TemporaryDirectory("cairn-fault")
        let hosts = dir.appending("hosts")
        try Data("::1 collector.cairn.test\n127.0.0.1 collector.cairn.test\n127.0.0.1 localhost\n".utf8)
            .write(to: URL(fileURLWithPath: hosts))
        var env = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("CAIRN_") }
        env.merge(["CAIRN_APP_ID": "orders", "CAIRN_DATA_DIR": dir.appending("data"), "CAIRN_API_KEY": "k",
                   "CAIRN_UPLOAD_URL": "http://collector.cairn.test:\(collector.port)/v1/batch"]) { $1 }
        let script = "mount --bind \"$1\" /etc/hosts && shift && exec \"$@\""
        let r = try runToEnd("/usr/bin/unshare", ["-m", "sh", "-c", script, "sh", hosts,
                                                  productsDirectory + "/cairn-service-child", "run", "30"],
                             environment: env, timeout: 60)
        #expect(r.status == 0 && !r.signaled, "\(r.err)")
        #expect(Self.notices(r.err).isEmpty, "no failure to say: \(r.err)")
        #expect(LifecycleTests.childIndexes(try LifecycleTests.received(collector)).sorted() == Array(0..<30))
        withExtendedLifetime(hole) {}
    }

    /// A collector that refuses bodies over 24 KiB with 413, answered before it reads the
    /// body: each batch too large is halved (again, until its halves fit), so every event
    /// arrives, each once, nothing is counted as dropped and nothing is said.
    @Test func batchesTooLargeForTheCollectorAreHalvedUntilTheyFit() throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        try collector.expect(["max_body": 24 << 10])
        let dir = try TemporaryDirectory("cairn-fault")
        let r = try Child.child(["run", "1500"], env: ["CAIRN_APP_ID": "orders", "CAIRN_DATA_DIR": dir.path,
                                                       "CAIRN_API_KEY": "k", "CAIRN_TEST_PAD": "300",
                                                       "CAIRN_UPLOAD_URL": collector.baseURL + "/v1/batch"])
        #expect(r.status == 0, "\(r.err)")
        #expect(Self.notices(r.err).isEmpty, "\(r.err)")
        let refused = try collector.requests().filter { $0.response.status == 413 }
        #expect(!refused.isEmpty, "the batches were too large at first")
        let received = try LifecycleTests.received(collector)
        let indexes = LifecycleTests.childIndexes(received)
        #expect(indexes.sorted() == Array(0..<1500), "every event, each once: \(indexes.count)")
        let drops = try collector.requests().filter(\.acknowledged).flatMap { $0.headerValues("Cairn-Dropped") }
        #expect(!drops.contains { $0.contains("rejected_413") }, "\(drops)")
    }

    /// `cairn check` sends one event with this environment's configuration and says each
    /// step: exit 0 only when it was delivered; the step that failed, and why, otherwise.
    @Test func cairnCheckSaysWhatHappenedAtEachStep() throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        try collector.expect(["api_key": "good"])
        func check(_ env: [String: String]) throws -> (status: Int32, out: [String], err: String) {
            try Child.run("cairn", ["check"], env: ["CAIRN_APP_ID": "orders"].merging(env) { $1 })
        }
        let url = collector.baseURL + "/v1/batch"
        let good = try check(["CAIRN_UPLOAD_URL": url, "CAIRN_API_KEY": "good"])
        #expect(good.status == 0, "\(good.out)")
        for line in ["  configuration: ok", "  proxy: direct", "  name resolution: 127.0.0.1: 127.0.0.1",
                     "  connect: ok: 127.0.0.1 port \(collector.port)"] {
            #expect(good.out.contains(line), "\(line) in \(good.out)")
        }
        #expect(good.out.contains { $0.hasPrefix("  HTTP: 200 in ") && $0.contains("delivered") }, "\(good.out)")
        #expect(try LifecycleTests.received(collector).contains { $0["name"] as? String == "cairn_check" })

        let refusedKey = try check(["CAIRN_UPLOAD_URL": url, "CAIRN_API_KEY": "bad"])
        #expect(refusedKey.status == 1)
        #expect(refusedKey.out.last == "  HTTP: HTTP 401, the API key was refused: not delivered", "\(refusedKey.out)")
        let closed = try CollectorProcess.closedPort()
        let down = try check(["CAIRN_UPLOAD_URL": "http://127.0.0.1:\(closed)/v1/batch"])
        #expect(down.status == 1 && down.out.last == "  connect: failed: 127.0.0.1: Connection refused", "\(down.out)")
        #expect(down.out.contains("  API key: not set: requests go without Authorization"))
        let badProxy = try check(["CAIRN_UPLOAD_URL": url, "http_proxy": "socks5://127.0.0.1:1080"])
        #expect(badProxy.status == 2 && badProxy.out.last?.contains("http_proxy is not a usable proxy") == true,
                "\(badProxy.out)")
        let unresolved = try check(["CAIRN_UPLOAD_URL": "http://collector.invalid/v1/batch"])
        #expect(unresolved.status == 1 && unresolved.out.last?.hasPrefix("  name resolution: collector.invalid failed") == true,
                "\(unresolved.out)")
    }

    /// A collector that requires a client certificate (mutual TLS), through the public
    /// API with each TLS library: with `CAIRN_CLIENT_CERT` every event is delivered and
    /// nothing is said; without it, the refusal is said once and nothing is lost.
    @Test(arguments: ["mbedtls", "openssl"])
    func aClientCertificateCollectorThroughThePublicAPI(library: String) throws {
        let dir = try TemporaryDirectory("cairn-mtls")
        try Self.makeCertificates(in: dir, [("server", "DNS:localhost"), ("client", "DNS:orders.internal")])
        let collector = try CollectorProcess(tlsCertificate: dir.appending("server.pem"), clientCA: dir.appending("ca.pem"))
        defer { collector.stop() }
        let env = ["CAIRN_APP_ID": "orders", "CAIRN_DATA_DIR": dir.appending("data"), "CAIRN_API_KEY": "k",
                   "CAIRN_UPLOAD_URL": "https://localhost:\(collector.port)/v1/batch", "CAIRN_TLS_LIBRARY": library,
                   "CAIRN_CA_FILE": dir.appending("ca.pem")]
        let refused = try Child.child(["run", "5"], env: env)
        #expect(refused.status == 0, "\(refused.err)")
        let said = Self.notices(refused.err)
        // mbedTLS (TLS 1.2) fails the handshake; OpenSSL (TLS 1.3) hears the server's
        // "certificate required" alert when it reads the answer: either way a `tls`
        // failure, said once.
        #expect(said.count == 1 && said.first?.contains("failing since") == true && said.first?.contains("tls:") == true,
                "\(said)")
        let ok = try Child.child(["run", "5"], env: env.merging(["CAIRN_CLIENT_CERT": dir.appending("client.crt"),
                                                                "CAIRN_CLIENT_KEY": dir.appending("client.key")]) { $1 })
        #expect(ok.status == 0, "\(ok.err)")
        #expect(Self.notices(ok.err).count == 1 && Self.notices(ok.err).first?.contains("recovered") == true, "\(ok.err)")
        let shown = try Self.status(dir.appending("data"))
        #expect(shown.out.contains("stored requests: 0 (0 bytes)"), "every event delivered: \(shown.out)")
    }

    /// `openssl` in `dir`, which must succeed.
    static func openssl(_ args: [String], in dir: TemporaryDirectory) throws {
        let r = try runToEnd("/usr/bin/env", ["openssl"] + args, directory: dir.path)
        try #require(r.status == 0, "openssl \(args.first ?? ""): \(r.err)")
    }

    /// A test CA (`ca.pem`) in `dir`, and for each (name, subjectAltName) a certificate
    /// it signed (`name.crt`, `name.key`); the first one's certificate and key also
    /// together in `name.pem`, for the collector.
    static func makeCertificates(in dir: TemporaryDirectory, _ names: [(String, String)]) throws {
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        try openssl(["req", "-x509"] + ec + ["-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=Test CA"],
                    in: dir)
        for (name, san) in names {
            try Data("subjectAltName=\(san)\n".utf8).write(to: URL(fileURLWithPath: dir.appending("\(name).ext")))
            try openssl(["req"] + ec + ["-keyout", "\(name).key", "-out", "\(name).csr", "-subj", "/CN=\(name)"], in: dir)
            try openssl(["x509", "-req", "-in", "\(name).csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                         "-out", "\(name).crt", "-days", "2", "-extfile", "\(name).ext"], in: dir)
        }
        if let first = names.first?.0 {
            let pem = try Data(contentsOf: URL(fileURLWithPath: dir.appending("\(first).crt")))
                + Data(contentsOf: URL(fileURLWithPath: dir.appending("\(first).key")))
            try pem.write(to: URL(fileURLWithPath: dir.appending("\(first).pem")))
        }
    }

    /// The same custom CA is trusted the same way by both TLS libraries, through the
    /// public API, whether the collector is named by host or by address: in a file
    /// SSL_CERT_FILE names, or in a directory of
    /// SSL_CERT_DIR under OpenSSL's hashed name (`openssl rehash`); a directory where
    /// it has no hashed name trusts it with neither, and that refusal is said once and
    /// loses nothing.
    @Test func aCustomCAIsTrustedAlikeByBothLibraries() throws {
        let dir = try TemporaryDirectory("cairn-ca")
        try Self.makeCertificates(in: dir, [("server", "DNS:localhost,IP:127.0.0.1")])
        let hashed = dir.appending("hashed"), plain = dir.appending("plain")
        for store in [hashed, plain] {
            try FileManager.default.createDirectory(atPath: store, withIntermediateDirectories: true)
            try FileManager.default.copyItem(atPath: dir.appending("ca.pem"), toPath: store + "/test-ca.pem")
        }
        try Self.openssl(["rehash", hashed], in: dir)
        let collector = try CollectorProcess(tlsCertificate: dir.appending("server.pem"))
        defer { collector.stop() }
        let missing = dir.appending("absent")
        let ways: [(String, String)] = [("mbedtls", "localhost"), ("openssl", "localhost"), ("auto", "127.0.0.1"),
                                        ("openssl", "127.0.0.1")]
        let trusts: [[String: String]] = [["SSL_CERT_FILE": missing, "SSL_CERT_DIR": missing + ":" + hashed],
                                          ["SSL_CERT_FILE": dir.appending("ca.pem")]]
        for (index, (library, host)) in ways.enumerated() {
            let data = dir.appending("data-\(index)")
            let base = ["CAIRN_APP_ID": "orders", "CAIRN_DATA_DIR": data, "CAIRN_API_KEY": "k",
                        "CAIRN_UPLOAD_URL": "https://\(host):\(collector.port)/v1/batch", "CAIRN_TLS_LIBRARY": library]
            let refused = try Child.child(["run", "3"], env: base.merging(["SSL_CERT_FILE": missing,
                                                                           "SSL_CERT_DIR": plain]) { $1 })
            let said = Self.notices(refused.err)
            #expect(refused.status == 0 && said.count == 1 && said.first?.contains("certificate verify failed") == true,
                    "\(library) \(host): \(refused.err)")
            let kept = try Self.status(data).out
            #expect(kept.contains { $0.hasPrefix("stored requests: ") } && !kept.contains("stored requests: 0 (0 bytes)"),
                    "\(library): kept \(kept)")
            for (round, trust) in trusts.enumerated() {
                let ok = try Child.child(["run", "3"], env: base.merging(trust) { $1 })
                let lines = Self.notices(ok.err)
                #expect(ok.status == 0 && lines.count == (round == 0 ? 1 : 0), "\(library) \(host) \(trust): \(ok.err)")
                #expect(round > 0 || lines.first?.contains("recovered") == true, "\(lines)")
                #expect(try Self.status(data).out.contains("stored requests: 0 (0 bytes)"), "\(library) \(trust)")
            }
        }
        // Each run's three events, once each (the collector's control answers over TLS
        // here: asked with Python's client, trusting the test CA).
        let script = "import ssl, sys, urllib.request; context = ssl.create_default_context(cafile=sys.argv[2]); "
            + "print(urllib.request.urlopen(sys.argv[1], context=context).read().decode())"
        let asked = try runToEnd("/usr/bin/env", ["python3", "-c", script,
                                                  "https://localhost:\(collector.port)/_control/events", dir.appending("ca.pem")])
        let records = (try? JSONSerialization.jsonObject(with: Data(asked.out.utf8))) as? [[String: Any]] ?? []
        let events = records.compactMap { ($0["record"] as? String).flatMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) } as? [String: Any] }
        let indexes = LifecycleTests.childIndexes(events)
        #expect(indexes.count == ways.count * 3 * 3 && Set(indexes) == [0, 1, 2], "\(indexes)")
    }

    /// An upload URL without an API key is said at start, once.
    @Test func anUploadURLWithoutAKeyIsSaidOnce() throws {
        let collector = try CollectorProcess()
        defer { collector.stop() }
        let dir = try TemporaryDirectory("cairn-fault")
        let r = try Child.child(["run", "3"], env: ["CAIRN_APP_ID": "orders", "CAIRN_DATA_DIR": dir.path,
                                                    "CAIRN_UPLOAD_URL": collector.baseURL + "/v1/batch"])
        #expect(r.status == 0, "\(r.err)")
        let lines = Self.notices(r.err)
        #expect(lines.count == 1 && lines.first?.contains("without an API key") == true, "\(lines)")
        #expect(LifecycleTests.childIndexes(try LifecycleTests.received(collector)).sorted() == [0, 1, 2])
        let quiet = try Child.child(["run", "1"], env: ["CAIRN_APP_ID": "orders", "CAIRN_DATA_DIR": dir.path,
                                                        "CAIRN_NOTICES": "0",
                                                        "CAIRN_UPLOAD_URL": collector.baseURL + "/v1/batch"])
        #expect(quiet.status == 0 && Self.notices(quiet.err).isEmpty, "CAIRN_NOTICES=0 silences it: \(quiet.err)")
    }
}
