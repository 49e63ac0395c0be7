import CairnBase
import CCairnCrash
import CairnStore
import Glibc

/// Shuts the SDK down when the process is asked to stop (``Cairn/Options/terminationSignals``),
/// then hands the signal on to what was installed before (the C side,
/// `cairn_term_install`, keeps its handler to one `write(2)`).
enum TerminationHandler {
    /// What a caught signal runs, before the signal is handed on.
    private static let action = Locked<(@Sendable () -> Void)?>(nil)

    /// Catches `signals`; `shutdown` runs on a thread of its own when one arrives, while
    /// the thread that took the signal waits (at most `wait`) and then hands the signal
    /// on. A later call replaces the action (a test that starts the SDK again); false
    /// when the signals could not be caught.
    @discardableResult
    static func install(signals: [Int32], wait: Duration, shutdown: @escaping @Sendable () -> Void) -> Bool {
        let c = wait.components
        cairn_term_set_wait(UInt32(clamping: max(0, c.seconds) * 1000 + c.attoseconds / 1_000_000_000_000_000))
        let first = action.withLock { a -> Bool in
            defer { a = shutdown }
            return a == nil
        }
        var fd: Int32 = -1
        let rc = signals.withUnsafeBufferPointer { cairn_term_install($0.baseAddress, $0.count, &fd) }
        guard rc == 0, fd >= 0 else { return false }
        let readEnd = fd
        if first { BackgroundWork().start { watch(readEnd) } }
        return true
    }

    /// Reads caught signals from the pipe, one byte each, for the life of the process.
    private static func watch(_ fd: Int32) {
        var byte: UInt8 = 0
        while true {
            let n = read(fd, &byte, 1)
            if n < 0 && errno == EINTR { continue }
            guard n == 1 else { return }
            action.withLock { $0 }?()
            cairn_term_chain(Int32(byte))
        }
    }
}
