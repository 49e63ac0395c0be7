import CCairnCrash
import Glibc

/// A raw crash report (docs/FORMATS.md, "Crash report") read with the C core's reader:
/// whatever part of it was written. Never traps on any input.
package struct CrashReport: Sendable {
    /// Whether the handler finished the report (its commit section is present).
    package var complete: Bool
    /// Signal number, 0 when the signal section is missing.
    package var signal: Int32
    /// `si_code`.
    package var code: Int32
    /// `si_addr`.
    package var faultAddress: UInt64
    /// The crashed process and thread.
    package var pid: Int32
    /// The crashed thread's id.
    package var tid: Int32
    /// The crashed thread's name.
    package var threadName: String
    /// CLOCK_REALTIME at the crash, nanoseconds.
    package var timeNanos: UInt64
    /// Time the handler spent until its commit, nanoseconds (0 when unknown).
    package var handlerNanos: UInt64
    /// 1 x86-64, 2 aarch64, 0 unknown.
    package var arch: UInt32
    /// Register values in the architecture's order.
    package var registers: [UInt64]
    /// Instruction addresses, innermost first.
    package var frames: [UInt64]
    /// 1 libunwind, 2 frame pointers, 3 libunwind then frame pointers.
    package var framesMethod: UInt32
    /// Swift async context chains the handler found behind machine frames: for the
    /// machine frame at index `frame`, the addresses where its async callers resume,
    /// innermost first. Whether that frame was an async function is decided from its
    /// symbol (see ``CrashReport/symbolicated(reportBytes:)``).
    package var asyncChains: [(frame: Int, resumes: [UInt64])]
    /// Modules loaded at install time.
    package var modules: [CrashModule]
    /// The context blob set by the crashed run.
    package var context: [UInt8]
    /// The Swift runtime's fatal-error message, if the process trapped with one.
    package var message: String?
    /// Signals that hit while the handler ran.
    package var nestedFaults: Int
    /// Non-zero when the process was still alive this many seconds after its report (an
    /// earlier handler it was handed on to hung) and Cairn's deadline ended it.
    package var endedByDeadlineSeconds: Int = 0
    /// Why the report could not be read at all, when it could not.
    package var unreadable: String?

    /// Reads `bytes`; a report that is not a Cairn report, or of an unknown version, is
    /// returned with `unreadable` set and nothing else.
    package init(bytes: [UInt8]) {
        complete = false
        signal = 0
        code = 0
        faultAddress = 0
        pid = 0
        tid = 0
        threadName = ""
        timeNanos = 0
        handlerNanos = 0
        arch = 0
        registers = []
        frames = []
        framesMethod = 0
        asyncChains = []
        modules = []
        context = []
        nestedFaults = 0
        var r = cairn_crash_report_t()
        let rc = bytes.withUnsafeBytes { cairn_crash_report_parse($0.baseAddress, $0.count, &r) }
        guard rc == 0 else {
            unreadable = bytes.isEmpty ? "empty report" : String(cString: cairn_strerror(rc))
            return
        }
        complete = r.complete != 0
        signal = r.signal
        code = r.code
        faultAddress = r.fault_address
        pid = r.pid
        tid = r.tid
        threadName = withUnsafeBytes(of: r.thread_name) { raw in
            String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
        }
        timeNanos = r.time_ns
        handlerNanos = r.handler_ns
        arch = r.arch
        registers = Self.words(r.registers, Int(r.register_count))
        frames = Self.words(r.frames, Int(r.frame_count))
        framesMethod = r.frames_method
        if let a = r.async_chains {
            asyncChains = Self.chains(UnsafeBufferPointer(start: a, count: r.async_chains_len))
        }
        if let m = r.modules {
            modules = Self.modules(UnsafeBufferPointer(start: m, count: r.modules_len), count: Int(r.module_count))
        }
        if let c = r.context { context = Array(UnsafeBufferPointer(start: c, count: r.context_len)) }
        if let m = r.message, r.message_len > 0 {
            message = String(decoding: UnsafeBufferPointer(start: m, count: r.message_len), as: UTF8.self)
        }
        nestedFaults = Int(r.nested)
        endedByDeadlineSeconds = Int(r.deadline_seconds)
    }

    private static func words(_ p: UnsafePointer<UInt8>?, _ count: Int) -> [UInt64] {
        guard let p, count > 0 else { return [] }
        return (0..<count).map { i in (0..<8).reduce(UInt64(0)) { $0 | UInt64(p[i * 8 + $1]) << (8 * $1) } }
    }

    /// Async chain records: u32 frame index, u32 count, count × u64. A record cut short
    /// ends the list.
    private static func chains(_ b: UnsafeBufferPointer<UInt8>) -> [(frame: Int, resumes: [UInt64])] {
        var out: [(frame: Int, resumes: [UInt64])] = []
        var at = 0
        func u32(_ i: Int) -> Int { (0..<4).reduce(0) { $0 | Int(b[i + $1]) << (8 * $1) } }
        while b.count - at >= 8 {
            let frame = u32(at), count = u32(at + 4)
            guard count <= (b.count - at - 8) / 8 else { break }
            out.append((frame, words(b.baseAddress.map { $0 + at + 8 }, count)))
            at += 8 + 8 * count
        }
        return out
    }

    /// Module records: u64 load, u64 start, u64 end, u16 + build id, u16 + path. A record
    /// cut short ends the list.
    private static func modules(_ b: UnsafeBufferPointer<UInt8>, count: Int) -> [CrashModule] {
        var out: [CrashModule] = []
        var at = 0
        func u64() -> UInt64? {
            guard b.count - at >= 8 else { return nil }
            defer { at += 8 }
            return (0..<8).reduce(UInt64(0)) { $0 | UInt64(b[at + $1]) << (8 * $1) }
        }
        func bytes() -> [UInt8]? {
            guard b.count - at >= 2 else { return nil }
            let n = Int(b[at]) | Int(b[at + 1]) << 8
            guard b.count - at - 2 >= n else { return nil }
            defer { at += 2 + n }
            return Array(b[(at + 2)..<(at + 2 + n)])
        }
        for _ in 0..<min(count, 65536) {
            guard let load = u64(), let start = u64(), let end = u64(), let id = bytes(), let path = bytes() else { break }
            out.append(CrashModule(path: String(decoding: path, as: UTF8.self), loadAddress: load, start: start,
                                   end: end, buildID: id))
        }
        return out
    }
}

/// Names for signals and their `si_code`s, as operators know them.
enum SignalNames {
    static func name(_ sig: Int32) -> String {
        switch sig {
        case SIGSEGV: return "SIGSEGV"
        case SIGBUS: return "SIGBUS"
        case SIGILL: return "SIGILL"
        case SIGTRAP: return "SIGTRAP"
        case SIGFPE: return "SIGFPE"
        case SIGABRT: return "SIGABRT"
        case SIGSYS: return "SIGSYS"
        case SIGQUIT: return "SIGQUIT"
        case SIGKILL: return "SIGKILL"
        case SIGTERM: return "SIGTERM"
        case SIGINT: return "SIGINT"
        case SIGHUP: return "SIGHUP"
        case SIGPIPE: return "SIGPIPE"
        case SIGALRM: return "SIGALRM"
        case SIGUSR1: return "SIGUSR1"
        case SIGUSR2: return "SIGUSR2"
        case SIGXCPU: return "SIGXCPU"
        case SIGXFSZ: return "SIGXFSZ"
        default: return "signal \(sig)"
        }
    }

    static func code(_ sig: Int32, _ code: Int32) -> String? {
        switch code {
        case 0: return "SI_USER"
        case 0x80: return "SI_KERNEL"
        case -1: return "SI_QUEUE"
        case -6: return "SI_TKILL"
        case ..<0: return nil
        default: break
        }
        let names: [String]
        switch sig {
        case SIGSEGV: names = ["SEGV_MAPERR", "SEGV_ACCERR", "SEGV_BNDERR", "SEGV_PKUERR"]
        case SIGBUS: names = ["BUS_ADRALN", "BUS_ADRERR", "BUS_OBJERR", "BUS_MCEERR_AR", "BUS_MCEERR_AO"]
        case SIGFPE: names = ["FPE_INTDIV", "FPE_INTOVF", "FPE_FLTDIV", "FPE_FLTOVF", "FPE_FLTUND", "FPE_FLTRES",
                              "FPE_FLTINV", "FPE_FLTSUB"]
        case SIGILL: names = ["ILL_ILLOPC", "ILL_ILLOPN", "ILL_ILLADR", "ILL_ILLTRP", "ILL_PRVOPC", "ILL_PRVREG",
                              "ILL_COPROC", "ILL_BADSTK"]
        case SIGTRAP: names = ["TRAP_BRKPT", "TRAP_TRACE", "TRAP_BRANCH", "TRAP_HWBKPT"]
        case SIGSYS: names = ["SYS_SECCOMP"]
        default: names = []
        }
        return code >= 1 && Int(code) <= names.count ? names[Int(code) - 1] : nil
    }

    /// Register names in the report's order for `arch`.
    static func registers(arch: UInt32) -> [String] {
        switch arch {
        case 1: return ["r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "rdi", "rsi", "rbp", "rbx", "rdx",
                        "rax", "rcx", "rsp", "rip", "eflags", "csgsfs", "err", "trapno", "oldmask", "cr2"]
        case 2: return (0...30).map { "x\($0)" } + ["sp", "pc"]
        default: return []
        }
    }
}
