/*
 * cairn_crash.h: the public interface of Cairn's crash core (CCairnCrash): the crash
 * handler and its report, alternate signal stacks for every thread, termination
 * signals, and the SDK's thread start. Only crash capture links it: it installs signal
 * handlers, and in a dynamically linked glibc program it defines `pthread_create`
 * (altstack.c explains why, and how it stays safe).
 *
 * It builds on the storage core's header (cairn_core.h: error codes, versions). The
 * conventions are that header's.
 */
#ifndef CAIRN_CRASH_H
#define CAIRN_CRASH_H

#include "cairn_core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------ */
/* Crash capture  (EXPERIMENTAL: define CAIRN_EXPERIMENTAL_CRASH_API to use it)     */
/* ------------------------------------------------------------------------------ */
/* The crash writer's API and its report format may still change in a minor version:
 * a program opts in by defining CAIRN_EXPERIMENTAL_CRASH_API before including this
 * header (the Swift module does). The functions are exported either way. */
#ifdef CAIRN_EXPERIMENTAL_CRASH_API

/** Version of the crash report format written by this library (docs/FORMATS.md). */
#define CAIRN_CRASH_FORMAT_VERSION 1

/** Also capture SIGQUIT (off by default: services use it for thread dumps). */
#define CAIRN_CRASH_SIGQUIT 0x1u
/** Leave libunwind's set-up to cairn_crash_warm_up(), which the caller runs soon after
 *  on another thread, so that installing takes less time on the caller's. */
#define CAIRN_CRASH_DEFER_WARM_UP 0x2u
/** Leave threads created after install without an alternate signal stack: by default
 *  the Swift package's C core gives every new thread one (through its
 *  `pthread_create`), so a stack overflow is reported on any thread, libdispatch's
 *  and the Swift concurrency runtime's included. libcairn has no such hook: a C host
 *  calls cairn_crash_prepare_thread() in its threads. */
#define CAIRN_CRASH_NO_THREAD_STACKS 0x4u
/** cairn_crash_install() flag: no deadline after a crash (see `deadline_seconds`). */
#define CAIRN_CRASH_NO_DEADLINE 0x8u
/** The deadline after a crash when `deadline_seconds` is 0: 30 s. */
#define CAIRN_CRASH_DEFAULT_DEADLINE 30u

/** Options for cairn_crash_install(). */
typedef struct cairn_crash_options {
    /** Directory for reports; must exist. The report of this process is
     *  `<dir>/<report_name>`. */
    const char *report_dir;
    /** CAIRN_CRASH_* flags. */
    uint32_t flags;
    /** Largest context blob (cairn_crash_set_context) kept; 0 means 16 KiB. */
    uint32_t context_capacity;
    /** File name of the report inside `report_dir` (no `/`), for example
     *  `crash-<run id>.report`; NULL means `crash-<pid>.report`. PIDs repeat (a
     *  container's service is often PID 1 on every start), run ids need not. */
    const char *report_name;
    /** A crash always ends the process: once the report is written and the signal
     *  handed on, a process still alive this many seconds later (an earlier handler
     *  hung) is ended by the crash's own signal, and its report says so
     *  (`deadline_seconds` of cairn_crash_report_t). Armed with alarm(2), and only when
     *  SIGALRM has its default action at the crash (a service that uses SIGALRM keeps
     *  it); every thread that hands a crash on then unblocks SIGALRM. 0 means
     *  CAIRN_CRASH_DEFAULT_DEADLINE; CAIRN_CRASH_NO_DEADLINE turns it off. */
    uint32_t deadline_seconds;
} cairn_crash_options_t;

/**
 * Installs the crash handler for SIGSEGV, SIGBUS, SIGILL, SIGTRAP, SIGFPE, SIGABRT and
 * SIGSYS (and SIGQUIT with CAIRN_CRASH_SIGQUIT), on an alternate stack, keeping the
 * previous handlers, which are called after the report is written. Everything the
 * handler needs is prepared here: the report path, buffers, the list of loaded modules
 * and libunwind. The calling thread gets an alternate stack (see
 * cairn_crash_prepare_thread()), and in the Swift package's build so does every thread
 * created afterwards, unless CAIRN_CRASH_NO_THREAD_STACKS is given.
 *
 * After a crash the process still dies with the same signal as without Cairn.
 *
 * Other handlers: one installed before (the Swift runtime's backtracer, which
 * installs itself at process start when SWIFT_BACKTRACE allows, or the service's own)
 * is kept and called once the report is written and synced. One installed after
 * replaces Cairn's for its signal unless it calls the handler it replaced.
 *
 * @param opts  Options; `report_dir` is required.
 * @return 0; CAIRN_EINVAL (NULL options or directory, a report name with `/`, path
 *         too long, already installed); CAIRN_ENOMEM; or an errno from sigaction or mmap.
 *
 * Ownership: the options are copied.
 * Thread-safety: call once, early, before other threads crash.
 * Async-signal-safe: no.
 */
CAIRN_API int cairn_crash_install(const cairn_crash_options_t *opts);

/**
 * Points later crash reports at `<report_dir>/<report_name>` (`crash-<pid>.report` when
 * `report_name` is NULL), the handler staying installed: for a process that starts a
 * new run after ending one (an SDK started again after a shutdown, as in a test suite).
 * The path is built in a second buffer and swapped in atomically, so a crash during
 * the call writes to the previous path or the new one, whole.
 *
 * @return 0; CAIRN_EINVAL before cairn_crash_install(), for a NULL directory, a name
 *         with `/` or a path too long (the previous path then stays).
 *
 * Ownership: the strings are copied.
 * Thread-safety: calls must not overlap (one writer); crashes may happen at any time.
 * Async-signal-safe: no.
 */
CAIRN_API int cairn_crash_set_report(const char *report_dir, const char *report_name);

/**
 * Runs libunwind's one-time set-up (per-thread caches, its first unwind) so that the
 * first crash does not: cairn_crash_install() does it unless given
 * CAIRN_CRASH_DEFER_WARM_UP. Unwinding works without it (libunwind's local unwinding
 * is safe in a signal handler and sets itself up on first use); a crash before it has
 * run only takes longer to walk.
 *
 * @return 0; CAIRN_EINVAL when the handler is not installed.
 *
 * Thread-safety: any thread; later calls do nothing.
 * Async-signal-safe: no.
 */
CAIRN_API int cairn_crash_warm_up(void);

/**
 * Gives the calling thread an alternate signal stack of 64 KiB with a guard page,
 * unless it already has one, so a stack overflow on this thread is still reported.
 *
 * @return 0; or an errno from mmap or sigaltstack.
 *
 * Ownership: the stack is unmapped when the thread ends (the main thread's at process
 *            exit).
 * Thread-safety: affects the calling thread only.
 * Async-signal-safe: no.
 */
CAIRN_API int cairn_crash_prepare_thread(void);

/** @name How new threads get their alternate signal stack (cairn_crash_thread_hook())
 *  @{ */
/** No hook: compiled out (libcairn, sanitizer builds, a C library other than glibc,
 *  such as musl in fully static builds, or CAIRN_NO_THREAD_HOOK), or crash capture is
 *  not installed, or was installed with CAIRN_CRASH_NO_THREAD_STACKS. New threads get
 *  no alternate stack; a thread may still call cairn_crash_prepare_thread(). */
#define CAIRN_THREAD_HOOK_OFF 0
/** The hook is on and hands every call to the C library's `pthread_create`, found as
 *  the next definition (dlsym(RTLD_NEXT)). */
#define CAIRN_THREAD_HOOK_ON 1
/** The hook is on, but the next definition could not be found by dlsym(RTLD_NEXT)
 *  (for example when this code is in a shared library loaded after the C library): the
 *  C library's `pthread_create` was found through its own handle instead, and threads
 *  are created as usual. */
#define CAIRN_THREAD_HOOK_FALLBACK 2
/** The hook is on and no `pthread_create` of the C library could be found at all (a
 *  fully static glibc link, which must be built with CAIRN_NO_THREAD_HOOK): thread
 *  creation in the process fails with EAGAIN. */
#define CAIRN_THREAD_HOOK_MISSING 3
/** @} */

/**
 * How threads created from now on get an alternate signal stack: one of the
 * CAIRN_THREAD_HOOK_* values. The C library's `pthread_create` is looked up at the first
 * thread creation after install (CAIRN_THREAD_HOOK_ON before any).
 *
 * Thread-safety: any thread.
 * Async-signal-safe: yes.
 */
CAIRN_API int cairn_crash_thread_hook(void);

/**
 * Sets the context written into a crash report (session id, release, breadcrumbs),
 * already serialised by the caller (JSON by convention). Kept in one of two buffers
 * and swapped in atomically, so a crash during the call sees the previous context.
 *
 * @param data  The bytes, or NULL with `len` 0 to clear.
 * @param len   At most the installed `context_capacity`; longer is cut.
 * @return 0; CAIRN_EINVAL before cairn_crash_install().
 *
 * Ownership: the bytes are copied.
 * Thread-safety: calls must not overlap (one writer); crashes may happen at any time.
 * Async-signal-safe: no.
 */
CAIRN_API int cairn_crash_set_context(const void *data, size_t len);

/** A crash report read by cairn_crash_report_parse(). Pointers point into the
 *  caller's buffer. */
typedef struct cairn_crash_report {
    uint32_t version;        /**< format version */
    int complete;            /**< 1 when the commit marker was found */
    int signal;              /**< signal number */
    int code;                /**< si_code */
    uint64_t fault_address;  /**< si_addr */
    int32_t pid;             /**< crashed process */
    int32_t tid;             /**< crashed thread */
    char thread_name[17];    /**< its name, NUL-terminated */
    uint64_t time_ns;        /**< CLOCK_REALTIME at the crash, ns */
    uint64_t handler_ns;     /**< time spent in the handler until the commit, ns */
    uint32_t arch;           /**< 1 x86-64, 2 aarch64 */
    uint32_t register_count; /**< registers in `registers` (arch order) */
    const unsigned char *registers; /**< register_count little-endian u64 */
    uint32_t frame_count;    /**< frames in `frames` */
    const unsigned char *frames; /**< frame_count little-endian u64 instruction pointers, innermost first */
    uint32_t frames_method;  /**< 1 libunwind, 2 frame pointers, 3 libunwind then frame pointers */
    uint32_t module_count;   /**< modules in `modules` */
    const unsigned char *modules; /**< module records (docs/FORMATS.md) */
    size_t modules_len;      /**< bytes at `modules` */
    const unsigned char *context; /**< the context blob */
    size_t context_len;      /**< its length */
    const unsigned char *message; /**< a fatal-error message, if any */
    size_t message_len;      /**< its length */
    uint32_t nested;         /**< signals that hit while the handler ran */
    const unsigned char *async_chains; /**< async context chains behind machine frames (docs/FORMATS.md), or NULL */
    size_t async_chains_len; /**< bytes at `async_chains` */
    uint32_t deadline_seconds; /**< non-zero: the process outlived the report this many
                                    seconds (an earlier handler hung) and Cairn's deadline
                                    ended it */
} cairn_crash_report_t;

/**
 * Parses a crash report, tolerating truncation at any byte: what is complete is
 * returned and `complete` says whether the whole report was written.
 *
 * @param data  The file's bytes.
 * @param len   Their length.
 * @param out   Receives the report.
 * @return 0 (complete or partial); CAIRN_EINVAL for NULL arguments; CAIRN_ECORRUPT when
 *         the bytes are not a Cairn crash report; CAIRN_EVERSION for an unknown version.
 *
 * Ownership: `out` points into `data`, which must outlive it.
 * Thread-safety: safe from any thread.
 * Async-signal-safe: yes.
 */
CAIRN_API int cairn_crash_report_parse(const void *data, size_t len, cairn_crash_report_t *out);

#endif /* CAIRN_EXPERIMENTAL_CRASH_API */

/* ------------------------------------------------------------------------------ */
/* Termination signals                                                              */
/* ------------------------------------------------------------------------------ */

/**
 * Catches `signals` (SIGTERM, SIGINT, ...) so that the SDK can shut down before the
 * process ends: the handler writes each caught signal's number as one byte to a pipe
 * whose read end is returned; a thread reading it shuts the SDK down and then calls
 * cairn_term_chain() with that number. Meanwhile the thread that took the signal waits
 * in the handler (at most cairn_term_set_wait()'s time), as it would have been stopped
 * there without Cairn: a service's main thread blocked in sleep, read or a condition
 * wait does not return early and exit on its own; once the SDK is done (or the wait is
 * over) that thread hands the signal on, so the process ends with the signal's status,
 * or the service's own handler runs on it. A second signal before that chains at once;
 * so does a signal caught in a child forked without exec. Signals already installed
 * by an earlier call, and signals that are ignored (SIG_IGN), are left as they are.
 *
 * @param signals  Signal numbers (not SIGKILL or SIGSTOP).
 * @param count    How many.
 * @param read_fd  Receives the pipe's read end (close-on-exec; owned by the library).
 * @return 0; CAIRN_EINVAL for a bad argument; an errno value when a pipe cannot be made
 *         or sigaction fails (then no signal is left changed).
 *
 * Ownership: the pipe lives for the life of the process.
 * Thread-safety: not with itself or with cairn_term_chain(); call it once, at start.
 * Async-signal-safe: no.
 */
CAIRN_API int cairn_term_install(const int *signals, size_t count, int *read_fd);

/**
 * Hands `signo` on: puts back the action that was in place before
 * cairn_term_install() and raises the signal again on the calling thread, unblocked
 * there for the purpose. The default
 * action ends the process as the signal would have; a service's own handler runs; an
 * ignored signal stays ignored. Later signals of this number no longer reach Cairn.
 *
 * @param signo  A signal number read from the pipe.
 *
 * Thread-safety: any thread.
 * Async-signal-safe: yes.
 */
CAIRN_API void cairn_term_chain(int signo);

/**
 * How long the thread that took a caught signal waits in the handler for
 * cairn_term_chain() before it hands the signal on itself: the SDK's shutdown deadline
 * and a margin. 10 s by default.
 *
 * @param milliseconds  The wait; 0 hands the signal on at once (the SDK's thread then
 *                      chains it when it is done, as before Cairn 0.2.1).
 *
 * Thread-safety: any thread.
 * Async-signal-safe: yes.
 */
CAIRN_API void cairn_term_set_wait(uint32_t milliseconds);

/* ------------------------------------------------------------------------------ */
/* Threads                                                                          */
/* ------------------------------------------------------------------------------ */

/**
 * Starts a detached thread running `body(arg)`, with the process-directed signals a
 * service handles (SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, SIGCHLD,
 * SIGPIPE, SIGWINCH) blocked, so that the kernel delivers them to the service's own
 * threads, never to the SDK's; placed on another CPU than the calling
 * thread's when the caller may run on several; the new thread then takes the caller's
 * whole CPU affinity back before `body` runs. Under the default policy a new thread is
 * often placed on its creator's CPU and runs first, so that pthread_create returns only
 * when the new thread yields: an SDK starting its background thread from the service's
 * thread would keep that thread waiting for the background work.
 *
 * @param body  What the thread runs; its return value is ignored.
 * @param arg   Passed to `body`.
 * @return 0; CAIRN_EINVAL without `body`; CAIRN_ENOMEM; or pthread_create's error (for
 *         example EAGAIN at the system's thread limit), and then `body` never runs.
 *
 * Ownership: `arg` is the caller's to keep alive until `body` no longer needs it.
 * Thread-safety: any thread.
 * Async-signal-safe: no.
 */
CAIRN_API int cairn_thread_start(void *(*body)(void *), void *arg);

#ifdef __cplusplus
}
#endif

#endif /* CAIRN_CRASH_H */
