// swift-service-lifecycle: Cairn as a `Service` of a `ServiceGroup`. Built only with the
// package trait "ServiceLifecycle"; without it this module is empty.
#if ServiceLifecycle
public import Cairn
public import ServiceLifecycle

/// Runs a started Cairn SDK inside a swift-service-lifecycle `ServiceGroup`, which owns
/// the service's signals and shutdown order.
///
/// On the group's graceful shutdown (SIGTERM, say) it calls
/// ``Cairn/Cairn/shutdown(timeout:)``: what was tracked is flushed within
/// `shutdownTimeout` (what is not sent by then stays on disk for the next start) and
/// the run is recorded `clean`. When its task is cancelled instead (another service
/// failed, or a cancellation signal), it stops at once: the SDK shuts down without
/// waiting for the collector, its events safe in the ring and the snapshot store for
/// the next start, and the run is recorded `clean` too (the process ended under its
/// own control).
///
/// Put it **first** in the group's services: a group shuts its services down in reverse
/// order, so Cairn stops last and sends what the others track while they drain.
///
/// ```swift
/// let cairn = Cairn.startOrDisabled(.fromEnvironment())
/// let group = ServiceGroup(services: [CairnService(cairn: cairn), server],
///                          gracefulShutdownSignals: [.sigterm], logger: logger)
/// try await group.run()
/// ```
///
/// It installs no signal handler of its own. Leave Cairn's own
/// ``Cairn/Cairn/Options/terminationSignals`` empty (the default; `CAIRN_HANDLE_TERMINATION`
/// unset) so that the group alone handles SIGTERM; when they are set, the service says
/// so once on stderr (through ``Cairn/Cairn/Options/notices``) as it starts.
public struct CairnService: Service {
    private let cairn: Cairn
    private let shutdownTimeout: Duration

    /// A service that shuts `cairn` down with the group: within `shutdownTimeout`
    /// (default: ``Cairn/Cairn/Options/shutdownTimeout``, 5 s) on graceful shutdown.
    public init(cairn: Cairn, shutdownTimeout: Duration? = nil) {
        self.cairn = cairn
        self.shutdownTimeout = shutdownTimeout ?? cairn.options.shutdownTimeout
    }

    /// Waits for the group's graceful shutdown, then shuts the SDK down (see above).
    public func run() async throws {
        if !cairn.options.terminationSignals.isEmpty {
            cairn.options.notices?("[cairn] terminationSignals is set while Cairn runs as a ServiceGroup service: "
                                   + "the SDK shuts down on those signals itself, before the group's other services "
                                   + "have drained; leave it empty (CAIRN_HANDLE_TERMINATION unset) and let the group "
                                   + "handle them")
        }
        do {
            try await gracefulShutdown()
        } catch {
            // Cancelled: stop at once, everything kept on disk.
            cairn.shutdown(timeout: .zero)
            return
        }
        cairn.shutdown(timeout: shutdownTimeout)
    }
}
#endif
