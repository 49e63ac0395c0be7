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
        uploadOptions.storeOnly = options.uploadURL == nil
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
        while !background.waitForStop(timeout: max(.milliseconds(1), min(nextWake(), pagesDue - .now))) {
            if let sink = pipeline?.sink, sink.contextPending.load(ordering: .acquiring) { sink.appendContext() }
            pipeline?.writeFoldedSummaries()
            if let due = healthDueIn(), due <= .zero { emitHealth(final: false) }
            let now = ContinuousClock.now
            if now >= pagesDue {
                releaseLibraryPages()
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
    /// after them) and 10 s (the first uploads' work too), then every 5 minutes.
    static let pageReleases: [Duration] = [.milliseconds(2500), .seconds(10)]
    static let pageReleaseInterval: Duration = .seconds(300)

    /// Lets go of the resident pages of the libraries' code that ran once (set-up,
    /// initialisers): the kernel keeps the 64 KiB around every page touched mapped,
    /// 0.5 MiB of an idle service.
    /// What runs again comes back at its first use (a minor fault per 64 KiB).
    /// (`HTTPTransport.releasePages(ofLibrariesDefining:)` says what is never touched.)
    func releaseLibraryPages() {
        let released = HTTPTransport.releasePages(ofLibrariesDefining: Self.dependencySymbols)
        if options.debugLogging && released > 0 {
            writeStandardError("[cairn] released \(released >> 10) KiB of library pages that ran once\n")
        }
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
