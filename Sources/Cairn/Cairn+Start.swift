// Starting: options checked, the crash handler, the ring, then the background start
// (store, uploader, previous runs, install properties).
import CairnBase
import CairnCrash
import CairnProcessor
import CairnStore
import CairnUploader
import FoundationEssentials
import Dispatch
import Glibc
import Synchronization

extension Cairn {
    /// Starts the SDK (and sets ``Cairn/shared``). On the caller's thread it does only what
    /// must come before the first crash or event: checks the options, installs the crash
    /// handler, builds the processor with the common properties that need no file read,
    /// opens the event ring. This run's record, the rest of the common properties, the
    /// install record, claiming the previous runs, opening the snapshot store,
    /// replaying what is stored, reporting previous runs and uploading happen on a
    /// background thread.
    ///
    /// One instance runs at a time (there is one crash handler per process): once
    /// ``shutdown(timeout:)`` has returned, ``start(_:)`` may be called again, and begins a new
    /// run (a new session) in the data directory it is given. A test suite can so start
    /// a fresh SDK per test, each in a directory of its own. The same directory again
    /// needs the earlier instance released first (its event ring stays open, and locked,
    /// while it lives).
    ///
    /// - Throws: ``CairnStartError``: which option is invalid and why;
    ///   ``CairnStartError/alreadyStarted`` while another instance runs;
    ///   ``CairnStartError/disabled``; ``CairnStartError/storage(_:)`` when the data directory
    ///   cannot be used.
    @discardableResult
    public static func start(_ options: Options) throws(CairnStartError) -> Cairn {
        if options.disabled { throw .disabled }
        var given = options
        // The environment is read here, on the caller's thread, once.
        if given.proxyEnvironment == nil { given.proxyEnvironment = HTTPTransport.proxyEnvironment() }
        try given.validate()
        let options = given.normalized()
        guard startedOnce.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged
        else { throw .alreadyStarted }
        let began = DispatchTime.now().uptimeNanoseconds
        do {
            let cairn = try startOnce(options)
            sharedInstance.withLock { $0 = cairn }
            let took = DispatchTime.now().uptimeNanoseconds &- began
            cairn.state.withLock { $0.startNanos = took }
            return cairn
        } catch {
            startedOnce.store(false, ordering: .releasing)
            throw error
        }
    }

    /// Starts the SDK as ``start(_:)`` does, but never throws: when it cannot start (an
    /// invalid option, a data directory it cannot use, `CAIRN_DISABLED=1`, a second
    /// start) it writes the reason to stderr once and returns a disabled SDK whose
    /// calls do nothing and cost next to nothing. The pattern for services that must
    /// never stop because of their telemetry:
    ///
    /// ```swift
    /// let cairn = Cairn.startOrDisabled(.fromEnvironment())
    /// if let error = cairn.startError { myLogger.warning("telemetry off: \(error)") }
    /// ```
    ///
    /// A disabled SDK is not ``shared``. With ``Options/disabled`` set (by choice), the note is
    /// written only with debug logging on.
    public static func startOrDisabled(_ options: Options) -> Cairn {
        do {
            return try start(options)
        } catch {
            if error != .disabled || options.debugLogging {
                options.notices?("[cairn] not started: \(error); tracking calls do nothing")
            }
            return disabled(options, error)
        }
    }

    /// The default of ``Options/notices``: each line on stderr.
    public static let standardErrorNotices: @Sendable (String) -> Void = { writeStandardError($0 + "\n") }

    /// A disabled SDK: no files, no threads, no handlers.
    private static func disabled(_ options: Options, _ error: CairnStartError) -> Cairn {
        let processor = Processor(options: ProcessorOptions(limits: options.limits, privacy: options.privacy,
                                                            sampling: options.sampling, filter: options.filter),
                                  common: CommonProperties(), sdkVersion: cairnVersion)
        return Cairn(options: options, crash: nil, ring: nil, processor: processor, startError: error)
    }

    private static func startOnce(_ options: Options) throws(CairnStartError) -> Cairn {
        let dir = options.dataDirectory
        let layout = DataDirectory(dir)
        let made = SmallFile.makeDirectories(dir)
        if made != 0 { throw .storage("cannot create \(dir): \(String(cString: strerror(made)))") }
        var attributes = ["distinct_id": options.distinctID, "app_id": options.appID]
        if let environment = options.environment { attributes["environment"] = environment }
        let crash: CrashCapture
        do {
            var crashOptions = CrashCapture.Options(directory: layout.crash, release: options.release,
                                                    attributes: attributes, captureSIGQUIT: options.captureSIGQUIT,
                                                    deferSetup: true)
            crashOptions.alternateStacksForNewThreads = options.alternateStacksForNewThreads
            crash = try CrashCapture.start(crashOptions)
        } catch .alreadyStarted {
            throw .alreadyStarted
        } catch {
            throw .storage("crash capture: \(error)")
        }
        let processor = Processor(options: ProcessorOptions(limits: options.limits, privacy: options.privacy,
                                                            sampling: options.sampling, filter: options.filter),
                                  common: options.common(.collectWithoutFiles()), sdkVersion: cairnVersion)
        let ring: Ring
        do {
            ring = try Ring(path: layout.ring, options: .init(capacity: options.ringCapacity))
        } catch {
            throw .storage("event ring: \(error)")
        }
        let cairn = Cairn(options: options, crash: crash, ring: ring, processor: processor)
        // Before any event: this run's bare events take the context in force.
        cairn.pipeline?.sink.appendContext()
        cairn.background.start { [cairn] in cairn.startInBackground(crash: crash, ring: ring) }
        if !options.terminationSignals.isEmpty {
            // The thread that took the signal waits for the shutdown, and a little more.
            TerminationHandler.install(signals: options.terminationSignals,
                                       wait: options.shutdownTimeout + .seconds(1)) { [cairn] in
                cairn.shutdown(timeout: cairn.options.shutdownTimeout)
            }
        }
        return cairn
    }

    /// The background half of ``Cairn/start(_:)``: store, uploader, previous runs, install
    /// properties; then upkeep (deduplication summaries) until shutdown.
    private func startInBackground(crash: CrashCapture, ring: Ring) {
        crash.finishSetup()  // first: the run record, and the OOM-kill baseline as early as it can
        if let url = options.uploadURL, options.apiKey == nil {
            options.notices?("[cairn] an upload URL (\(DeliveryStatus.display(url))) is set without an API key "
                + "(CAIRN_API_KEY): requests are sent without Authorization")
        }
        if let error = crash.runRecordError {
            // Crashes are still reported; how the run ended otherwise is not.
            drops.add(.runRecordUnavailable, 1)
            if options.debugLogging { writeStandardError("[cairn] run record: \(error)\n") }
        }
        let common = options.common(.collect())
        processor.updateCommon(common)
        // Events tracked meanwhile may land on either side of the new context record:
        // both are this run's, and the new one holds everything the first did.
        pipeline?.sink.appendContext()
        crash.recordContext(common.encodedContext())
        _ = install
        var store: SnapshotStore?
        do {
            store = try SnapshotStore(directory: DataDirectory(options.dataDirectory).store,
                                      options: .init(maxBytes: options.storeMaxBytes, recordCheck: UploadRequest.recordCheck))
        } catch {
            // Events still flow: undelivered batches wait in the ring instead.
            drops.add(.storeUnavailable, 1)
            options.notices?("[cairn] snapshot store unavailable: \(error); undelivered batches wait in the event ring")
        }
        let destinations = options.destinations
        var tap: (@Sendable ([[UInt8]]) -> Void)?
        if !destinations.isEmpty {
            tap = { (records: [[UInt8]]) -> Void in EventSink.deliver(records, to: destinations) }
        }
        var uploadOptions = UploaderOptions(url: options.uploadURL ?? "", apiKey: options.apiKey,
                                            maxBatchEvents: options.maxBatchEvents,
                                            maxBatchBytes: options.maxBatchBytes, maxBatchAge: options.maxBatchAge)
        uploadOptions.debugLogging = options.debugLogging
        uploadOptions.observer = options.uploadObserver
        uploadOptions.notice = options.notices
        let otlp = options.otlp?.configuration
        uploadOptions.storeOnly = options.uploadURL == nil && otlp == nil
        uploadOptions.native = options.uploadURL != nil || otlp == nil
        if let otlp {
            uploadOptions.otlp = otlp
            uploadOptions.otlpResource = OTLPEncoder.Settings(
                encoding: .protobuf, serviceName: otlp.serviceName,
                resourceAttributes: otlp.resourceAttributes.map { ($0.key, $0.value) },
                runtimeVersion: swiftCompilerVersion, maxRequestBytes: options.otlp?.maxRequestBytes ?? 4 << 20)
        }
        uploadOptions.followDestination = options.storedRequestsFollowDestination
        uploadOptions.tap = tap
        uploadOptions.currentContext = { [processor] in processor.contextFragment }
        uploadOptions.sessionID = sessionID
        // One idle connection kept for each request the uploader may have out: fewer, and
        // every burst past them pays a new connection (and a TLS handshake) per request.
        let transport = options.transport
            ?? HTTPTransport(maxIdleConnections: uploadOptions.maxInFlight, caFile: options.caFile,
                             environment: options.proxyEnvironment ?? [:], tlsLibrary: options.tlsLibrary,
                             clientCertificate: options.clientCertificateFile, clientKey: options.clientKeyFile)
        // https without a usable TLS library (or CA, client certificate): said now, not at
        // the first send; events are kept (in the ring, then stored) until a start can send.
        let urls = [options.uploadURL, otlp?.logs?.url, otlp?.traces?.url, otlp?.metrics?.url].compactMap { $0 }
        for url in Set(urls).sorted() where options.transport == nil {
            if let problem = (transport as? HTTPTransport)?.tlsProblem(for: url) {
                options.notices?("[cairn] https uploads to \(DeliveryStatus.display(url)) cannot work: \(problem); "
                    + "events are kept on disk until a start can send them")
            }
        }
        let uploader = Uploader(ring: ring, store: store, transport: transport, options: uploadOptions)
        // A shutdown that gave up waiting for this start must not find an uploader
        // started behind its back.
        let started = state.withLock { s -> Bool in
            s.store = store
            guard !s.startAbandoned else { return false }
            pipeline?.sink.uploader.withLock { $0 = uploader }
            return true
        }
        guard started else {
            state.withLock { $0.ready = true }
            background.signal()
            return
        }
        uploader.start()
        // The ended runs' own events, recovered from the ring, are made safe (delivered,
        // or stored, which replays oldest first) before their crash and session_end are
        // stored: a collector sees a run's events before its end. Bounded: past the
        // limit, the previous runs are reported anyway.
        if ring.stats().recovered > 0 { _ = uploader.flush(timeout: Self.recoveredEventsFirstLimit) }
        reportPreviousRuns(uploader)
        sendInstallProperties(uploader)
        state.withLock { $0.ready = true }
        background.signal()
        let ready = ContinuousClock.now
        var releases = 0
        var pagesDue = ready + Self.pageReleases[0]
        var ownCode: [Range<UInt>]?  // read from the symbol table at the first release
        while !background.waitForStop(timeout: max(.milliseconds(1), min(nextWake(), pagesDue - .now))) {
            if let sink = pipeline?.sink, sink.contextPending.load(ordering: .acquiring) { sink.appendContext() }
            pipeline?.writeFoldedSummaries()
            if let due = healthDueIn(), due <= .zero { emitHealth(final: false) }
            runPeriodic(final: false)
            let now = ContinuousClock.now
            if now >= pagesDue {
                releasePagesThatRanOnce(ownCode: &ownCode)
                releases += 1
                // The next one counts from now: a thread held up does not catch up in a burst.
                pagesDue = releases < Self.pageReleases.count
                    ? max(now + .seconds(1), ready + Self.pageReleases[releases]) : now + Self.pageReleaseInterval
            }
        }
        pipeline?.writeFoldedSummaries()
    }

    /// Functions of the libraries whose pages are released, one each: libzstd, liblmdb
    /// and liblzma (libunwind's dependency, which Cairn never calls). Not libunwind: the
    /// crash handler runs its code, and its pages (about 60 KiB) stay as its set-up left
    /// them, so that a crash under memory pressure needs no read from the disk.
    static let dependencySymbols = ["ZSTD_versionNumber", "mdb_version", "lzma_version_number"]
    /// When the pages of those libraries are released, after the SDK is ready: at 2.5 s
    /// (the start's own work done, and the zstd context of its first batches freed 1 s
    /// after them), 3.5 s (what came back since is code that keeps running: its windows
    /// get a mapping per page, see `HTTPTransport.releaseOwnPages(_:)`) and 10 s (the
    /// first uploads' work too), then every 5 minutes.
    static let pageReleases: [Duration] = [.milliseconds(2500), .milliseconds(3500), .seconds(10)]
    static let pageReleaseInterval: Duration = .seconds(300)

    /// Lets go of the resident pages of Cairn's code and its libraries' code that ran
    /// once (its start, set-up, initialisers): the kernel keeps the 64 KiB around every
    /// page touched mapped, about 1.9 MiB of an idle service (1.4 MiB of Cairn's own
    /// code, 0.5 MiB of its libraries'). What runs again comes back at its first use (a
    /// minor fault per 64 KiB). Cairn's own functions are found in the symbol table of the
    /// file that holds them, once (`ownCode`); a stripped file has none, and its pages
    /// stay. (`HTTPTransport.releasePages(ofLibrariesDefining:)` and
    /// `releaseOwnPages(_:)` say what is never touched.)
    func releasePagesThatRanOnce(ownCode: inout [Range<UInt>]?) {
        // The TLS library a start with an https URL loaded to check it (see
        // `tlsProblem`) keeps its loading code until a send's release otherwise.
        var released = HTTPTransport.releasePages(ofLibrariesDefining: Self.dependencySymbols)
            + HTTPTransport.releaseTLSPages()
        if ownCode == nil {
            ownCode = HTTPTransport.ownCodeFile().map {
                CodeRanges.functions(inFile: $0.path, loadBias: $0.bias, owner: Self.codeOwner)
            } ?? []
        }
        if let ownCode, !ownCode.isEmpty { released += HTTPTransport.releaseOwnPages(ownCode) }
        if options.debugLogging && released > 0 {
            writeStandardError("[cairn] released \(released >> 10) KiB of code pages that ran once\n")
        }
    }

    /// The Swift modules whose functions are Cairn's own code, as their names appear in
    /// mangled symbols (length, then name).
    static let ownModules: [[UInt8]] = ["Cairn", "CairnBase", "CairnCrash", "CairnProcessor", "CairnStore",
                                        "CairnUploader"].map { Array("\($0.utf8.count)\($0)".utf8) }
    /// The C functions that are Cairn's own code and released with it: the ring, framing
    /// and HTTP client. Not the crash and termination handlers (crash.c, altstack.c,
    /// termination.c): they run in a signal handler, and a crash under memory pressure
    /// must not read their code from the disk (as libunwind's, they stay resident).
    static let ownCPrefixes: [[UInt8]] = ["cairn_ring", "cairn__ring", "cairn_frame", "cairn_http"].map { Array($0.utf8) }
    /// Other C functions of Cairn's: never inside a range released.
    static let keptCPrefix = Array("cairn".utf8)
    /// The C files whose static functions run in a signal handler: never released.
    static let handlerFiles: [[UInt8]] = ["crash.c", "altstack.c", "termination.c"].map { Array($0.utf8) }

    /// Whose a function is, by its raw symbol name and, for a local symbol, its source
    /// file: Cairn's own for a C function of ``ownCPrefixes`` or a Swift symbol (`$s…`)
    /// that names one of ``ownModules`` (its functions and closures, and generic code
    /// specialised for its types, wherever it was emitted: a service's own
    /// specialisations for Cairn's types may count, and come back at their next use);
    /// shared for the standard library's generic code specialised for its own types
    /// (`$ss…`, `$sS…`) and a file's static C function (these sit between Cairn's own
    /// when its modules emitted them); anyone else's otherwise, and Cairn's crash and
    /// termination handlers, global or static (``handlerFiles``).
    static func codeOwner(_ name: UnsafeRawBufferPointer, file: UnsafeRawBufferPointer?) -> CodeOwner {
        if ownCPrefixes.contains(where: { name.starts(with: $0) }) { return .own }
        guard name.count > 2, name[0] == UInt8(ascii: "$"), name[1] == UInt8(ascii: "s") else {
            guard let file, !name.starts(with: keptCPrefix) else { return .other }
            return handlerFiles.contains { file.elementsEqual($0) } ? .other : .shared
        }
        for module in ownModules where name.count >= module.count {
            var at = 1
            while at + module.count <= name.count {
                // A length that is not part of a longer number ("15CairnX" is not "5Cairn").
                if name[at] == module[0], !(UInt8(ascii: "0")...UInt8(ascii: "9")).contains(name[at - 1]),
                   name[at..<(at + module.count)].elementsEqual(module) {
                    return .own
                }
                at += 1
            }
        }
        return name[2] == UInt8(ascii: "s") || name[2] == UInt8(ascii: "S") ? .shared : .other
    }

    /// How long the background start waits for recovered events to be safe before it
    /// reports the previous runs.
    static let recoveredEventsFirstLimit: Duration = .seconds(5)

    func reportPreviousRuns(_ uploader: Uploader) {
        guard let crash else { return }
        let identity = currentIdentity(nil)
        guard let pipeline else { return }
        let result = crash.processPreviousRuns(mask: processor.maskText) { events in
            var changed = RuleCounts()
            var records: [[UInt8]] = []
            for ended in events {
                var event = ended.event
                // An orphan report of a C program names nobody: it happened on this install.
                if event.identity.distinctID.isEmpty { event.identity = identity }
                // Admitted as every event is (the filters may refuse it; being Critical,
                // it is never sampled or shed); encoded with the ended run's context.
                guard case .keep = pipeline.admission.admit(&event) else { continue }
                records.append(processor.record(endedRun: event, context: ended.context, counts: &changed))
            }
            if !records.isEmpty { try pipeline.sink.storeNow(records, tier: .critical, in: uploader) }
            drops.addChanges(changed)
        }
        if options.debugLogging {
            for run in result.runs {
                let note = "[cairn] previous run \(run.sessionID ?? "?") ended: \(run.reason.rawValue)"
                    + (run.stored ? "" : " (not stored: \(run.error ?? "?"))")
                writeStandardError((note + "\n"))
            }
        }
    }

    /// The fixed user properties of the install, sent once per data directory with
    /// `user_setOnce`, in a request of their own.
    func sendInstallProperties(_ uploader: Uploader) {
        guard !install.propertiesSent, let pipeline else { return }
        var event = Event(type: .userSetOnce, name: "user_properties", properties: install.userProperties(clock: processor.clock),
                          timeMillis: install.timeMillis, identity: currentIdentity(nil), sessionID: sessionID,
                          tier: .important)
        do {
            // Admitted as every event is; refused (and counted), it is not offered again.
            if case .keep = pipeline.admission.admit(&event) {
                var changed = RuleCounts()
                processor.clean(&event, counts: &changed)
                drops.addChanges(changed)
                try pipeline.sink.storeNow([processor.record(event)], tier: event.tier, in: uploader)
            }
            install.markPropertiesSent(directory: options.dataDirectory)
        } catch {
            drops.add(.installProperties, 1)
        }
    }
}
