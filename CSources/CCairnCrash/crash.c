/* crash.c: the crash handler. EXPERIMENTAL (see cairn_crash.h).
 *
 * Design note: why each call in the handler is safe
 * ---------------------------------------------------
 * A crash handler runs in a process whose heap, locks and stdio may be broken, on a
 * stack that may be exhausted. Everything it needs is prepared at install time: the
 * report path, the module list (already serialised), libunwind (initialised and
 * stepped once so its lazy setup is done), the alternate stack, and the context blob
 * (two buffers swapped by an atomic pointer). In the handler:
 *   - no malloc, stdio, snprintf or locks: integers are encoded by hand into a buffer
 *     on the (alternate) stack;
 *   - system calls only from POSIX's async-signal-safe list (open, write, fsync,
 *     close, clock_gettime, sigaction, getpid, nanosleep, _exit) plus Linux's gettid
 *     and tgkill through syscall(2), and prctl(PR_GET_NAME), which only reads;
 *   - libunwind's local unwinder (UNW_LOCAL_ONLY, unw_init_local2 with
 *     UNW_INIT_SIGNAL_FRAME), with per-thread caching so no global lock is taken;
 *     it finds unwind tables with dl_iterate_phdr, which the handler also calls once
 *     to add libraries loaded since install to the module list (the dynamic
 *     linker's lock is recursive: a crash inside dlopen on this thread does not
 *     deadlock; another thread's dlopen is waited for);
 *   - memory the crash may have damaged (frame pointers past libunwind's last frame,
 *     Swift async contexts) is read with process_vm_readv on the process itself,
 *     which fails with EFAULT instead of faulting;
 *   - one thread wins (compare-and-swap on the winner's thread id) and writes the
 *     report; others crashing at the same time wait until it is committed (bounded:
 *     10 s, for a winner stuck in a damaged process), then pass their own signal on
 *     as the winner does, so every thread meets the earlier handler as it would
 *     without Cairn and the process ends with the status it would have had;
 *   - SA_NODEFER lets a fault inside the handler re-enter it: the second entry writes
 *     a short NESTED section and finishes the report, a third exits at once;
 *   - afterwards the previous handler is restored and called, or the default action
 *     taken: a hardware fault returns and faults again, a sent signal (si_code <= 0)
 *     or SIGABRT is raised again with tgkill; _exit follows in case the signal did
 *     not end the process (PID 1 ignores signals it has no handler for);
 *   - a crash always ends the process: before handing the signal on, the winner arms a
 *     deadline with alarm(2) when SIGALRM has its default action (the service does not
 *     use it), and every thread that hands its crash on unblocks SIGALRM (the
 *     service's threads may block it; an earlier handler may park some threads with
 *     every signal blocked, so the one it keeps busy must take it). An earlier
 *     handler that hangs (the Swift runtime's backtracer can) is interrupted by SIGALRM, whose handler (ours, installed then with sigaction)
 *     rewrites the report's commit as a DEADLINE section plus the commit (open, lseek,
 *     write, fsync), then raises the crash's own signal with its default action, so the
 *     exit status is still the signal's.
 */
#define _GNU_SOURCE
#define UNW_LOCAL_ONLY
#define CAIRN_EXPERIMENTAL_CRASH_API 1 /* the crash writer */
#include "crash_internal.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <libunwind.h>
#include <link.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

enum {
    SEC_SIGNAL = 1,
    SEC_REGISTERS = 2,
    SEC_FRAMES = 3,
    SEC_MODULES = 4,
    SEC_CONTEXT = 5,
    SEC_MESSAGE = 6,
    SEC_NESTED = 7,
    SEC_TIMING = 8,
    SEC_ASYNC = 9,
    SEC_DEADLINE = 10,
    SEC_COMMIT = 0x544D4F43, /* "COMT" */
};

#define MAX_FRAMES 128
#define MAX_MODULES 1024
/* Async context chains: looked for behind the first ASYNC_FRAMES machine frames, each
 * followed for at most ASYNC_DEPTH links. */
#define ASYNC_FRAMES 32
#define ASYNC_DEPTH 64
#define ASYNC_BYTES (4 * 1024) /* room for the section; chains past it are left out */
#define MAX_EXEC_RANGES 1024
#define MODULES_BYTES (96 * 1024)

static const char report_magic[8] = {'C', 'A', 'I', 'R', 'N', 'C', 'R', 'S'};
static const int crash_signals[] = {SIGSEGV, SIGBUS, SIGILL, SIGTRAP, SIGFPE, SIGABRT, SIGSYS, SIGQUIT};
#define SIGNAL_COUNT (sizeof crash_signals / sizeof crash_signals[0])

/* Prepared at install. */
static int installed;
static uint32_t install_flags;
static char report_paths[2][4096];
static int report_current; /* which of report_paths is live; atomic */
static struct sigaction previous[SIGNAL_COUNT];
static unsigned char modules_section[MODULES_BYTES];
static size_t modules_len;
static uint32_t module_count;
static struct { uintptr_t start, end; } exec_ranges[MAX_EXEC_RANGES];
static size_t exec_range_count;
/* Load addresses of the listed modules, to tell a library loaded since. */
static uintptr_t module_bases[MAX_MODULES];
static unsigned char *context_buffers[2];
static uint32_t context_capacity;
static size_t context_lengths[2];
static int context_current = -1; /* which buffer is live, -1 for none; atomic */
/* Where the Swift runtime keeps the text of a fatal error ("Fatal error: Index out of
 * range", with file and line) before it traps: an atomic `const char *`, found at
 * install through swift_getFatalErrorMessageBuffer (exported by libswiftCore on
 * Linux); NULL in processes without the Swift runtime. */
static const char **swift_fatal_message;

/* The Swift runtime's fatal-error message buffer, when the Swift runtime is in the
 * process: a weak reference, bound by the dynamic linker (NULL in a program without
 * Swift), which costs nothing at install, where looking it up by name costs ~10 us. */
extern const char **swift_getFatalErrorMessageBuffer(void) __attribute__((weak));

/* Crash state. */
static int winner_tid;   /* atomic */
static int entries;      /* handler entries by the winner; atomic */
static int report_done;  /* the winner committed the report; atomic */
static int deadline_armed; /* SIGALRM is ours and alarm(2) is set; atomic */
static int first_signal;
static int report_fd = -1;
static uint64_t report_bytes;  /* written to report_fd since it was opened */
static uint64_t commit_at;     /* where the commit section starts; 0 before it is written */
static int report_live;        /* which of report_paths the report went to */
static uint32_t deadline_seconds; /* after the report, the process ends within this; 0: never */

/* ------------------------------------------------------------------------------ */
/* Install time                                                                     */
/* ------------------------------------------------------------------------------ */

static int index_of(int sig)
{
    for (size_t i = 0; i < SIGNAL_COUNT; i++)
        if (crash_signals[i] == sig) return (int)i;
    return -1;
}

/* Appends a little-endian integer or bytes to the module section, bounded. */
static int module_put(const void *p, size_t n)
{
    if (modules_len + n > sizeof modules_section) return 0;
    memcpy(modules_section + modules_len, p, n);
    modules_len += n;
    return 1;
}

static int collect_module(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    (void)arg;
    const char *path = info->dlpi_name;
    char self[4096];
    if (!path || !*path) {
        /* The main program: the absolute path it was started with (no system call:
         * reading /proc/self/exe costs about 20 us), else what that link names. */
        const char *started = (const char *)getauxval(AT_EXECFN);
        if (started && started[0] == '/') {
            path = started;
        } else {
            ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
            self[n > 0 ? n : 0] = 0;
            path = self;
        }
    }
    uint64_t base = info->dlpi_addr, exec_start = 0, exec_end = 0;
    const unsigned char *build_id = NULL;
    uint16_t build_id_len = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
            uint64_t s = base + ph->p_vaddr, e = s + ph->p_memsz;
            if (!exec_start || s < exec_start) exec_start = s;
            if (e > exec_end) exec_end = e;
            if (exec_range_count < MAX_EXEC_RANGES) {
                exec_ranges[exec_range_count].start = (uintptr_t)s;
                exec_ranges[exec_range_count].end = (uintptr_t)e;
                exec_range_count++;
            }
        }
        if (ph->p_type == PT_NOTE && !build_id) {
            const unsigned char *p = (const unsigned char *)(base + ph->p_vaddr);
            const unsigned char *end = p + ph->p_memsz;
            while (p + sizeof(ElfW(Nhdr)) <= end) {
                const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)p;
                const unsigned char *name = p + sizeof *nh;
                const unsigned char *desc = name + ((nh->n_namesz + 3) & ~3u);
                if (desc + nh->n_descsz > end) break;
                if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && memcmp(name, "GNU", 4) == 0) {
                    build_id = desc;
                    build_id_len = (uint16_t)(nh->n_descsz > 64 ? 64 : nh->n_descsz);
                    break;
                }
                p = desc + ((nh->n_descsz + 3) & ~3u);
            }
        }
    }
    uint16_t path_len = (uint16_t)strnlen(path, 1024);
    unsigned char rec[26];
    cairn__put64(rec, base);
    cairn__put64(rec + 8, exec_start);
    cairn__put64(rec + 16, exec_end);
    cairn__put16(rec + 24, build_id_len);
    size_t mark = modules_len;
    unsigned char len2[2];
    cairn__put16(len2, path_len);
    if (module_count < MAX_MODULES && module_put(rec, sizeof rec) && module_put(build_id, build_id_len) &&
        module_put(len2, 2) && module_put(path, path_len)) {
        module_bases[module_count++] = (uintptr_t)base;
    } else {
        modules_len = mark; /* out of room: the module is left out, the rest stays valid */
    }
    return 0;
}

/* In the handler: a module the list does not have yet (a library loaded after
 * install) is added to it; the others are left as they are. */
static int collect_late_module(struct dl_phdr_info *info, size_t size, void *arg)
{
    for (uint32_t i = 0; i < module_count; i++)
        if (module_bases[i] == (uintptr_t)info->dlpi_addr) return 0;
    return collect_module(info, size, arg);
}

static void collect_modules(void)
{
    modules_len = 4; /* the count goes first */
    module_count = 0;
    exec_range_count = 0;
    dl_iterate_phdr(collect_module, NULL);
    cairn__put32(modules_section, module_count);
}

/* Runs libunwind once, so that its lazy initialisation happens now, not in the
 * handler; and asks for per-thread caches (no global lock). */
static void warm_up_unwinder(void)
{
    static int warmed;
    if (__atomic_exchange_n(&warmed, 1, __ATOMIC_ACQ_REL)) return;
    unw_set_caching_policy(unw_local_addr_space, UNW_CACHE_PER_THREAD);
    unw_context_t ctx;
    unw_cursor_t cursor;
    if (unw_getcontext(&ctx) == 0 && unw_init_local(&cursor, &ctx) == 0) unw_step(&cursor);
}

static void crash_handler(int sig, siginfo_t *info, void *uctx);

/* `<dir>/<name>`, or `<dir>/crash-<pid>.report` without a name, into `out`. */
static int format_report_path(char *out, const char *dir, const char *name)
{
    int n;
    if (name) {
        if (!*name || strchr(name, '/')) return CAIRN_EINVAL;
        n = snprintf(out, sizeof report_paths[0], "%s/%s", dir, name);
    } else {
        n = snprintf(out, sizeof report_paths[0], "%s/crash-%d.report", dir, (int)getpid());
    }
    if (n < 0 || (size_t)n >= sizeof report_paths[0]) return CAIRN_EINVAL;
    return 0;
}

int cairn_crash_install(const cairn_crash_options_t *opts)
{
    if (!opts || !opts->report_dir || installed) return CAIRN_EINVAL;
    int rc = format_report_path(report_paths[0], opts->report_dir, opts->report_name);
    if (rc != 0) return rc;
    __atomic_store_n(&report_current, 0, __ATOMIC_RELEASE);
    install_flags = opts->flags;
    deadline_seconds = install_flags & CAIRN_CRASH_NO_DEADLINE ? 0
                       : opts->deadline_seconds ? opts->deadline_seconds : CAIRN_CRASH_DEFAULT_DEADLINE;
    context_capacity = opts->context_capacity ? opts->context_capacity : 16 * 1024;
    /* All or nothing: a failure below leaves no handler replaced and no buffer held. */
    for (int i = 0; i < 2; i++) {
        context_buffers[i] = malloc(context_capacity);
        if (!context_buffers[i]) {
            rc = CAIRN_ENOMEM;
            goto undo_buffers;
        }
    }
    collect_modules();
    if (!(install_flags & CAIRN_CRASH_DEFER_WARM_UP)) warm_up_unwinder();
    if (swift_getFatalErrorMessageBuffer) swift_fatal_message = swift_getFatalErrorMessageBuffer();
    rc = cairn_crash_prepare_thread();
    if (rc != 0) goto undo_buffers;
    size_t replaced = 0;
    for (; replaced < SIGNAL_COUNT; replaced++) {
        if (crash_signals[replaced] == SIGQUIT && !(install_flags & CAIRN_CRASH_SIGQUIT)) continue;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = crash_handler;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
        sigemptyset(&sa.sa_mask);
        if (sigaction(crash_signals[replaced], &sa, &previous[replaced]) != 0) {
            rc = errno;
            goto undo_signals;
        }
    }
    installed = 1;
    /* Threads created from now on get an alternate stack of their own (altstack.c). */
    cairn__thread_stacks(!(install_flags & CAIRN_CRASH_NO_THREAD_STACKS));
    return 0;

undo_signals:
    while (replaced-- > 0) {
        if (crash_signals[replaced] == SIGQUIT && !(install_flags & CAIRN_CRASH_SIGQUIT)) continue;
        sigaction(crash_signals[replaced], &previous[replaced], NULL);
    }
undo_buffers:
    for (int i = 0; i < 2; i++) {
        free(context_buffers[i]);
        context_buffers[i] = NULL;
    }
    return rc;
}

int cairn_crash_set_report(const char *report_dir, const char *report_name)
{
    if (!installed || !report_dir) return CAIRN_EINVAL;
    int live = __atomic_load_n(&report_current, __ATOMIC_ACQUIRE);
    int next = live == 0 ? 1 : 0;
    int rc = format_report_path(report_paths[next], report_dir, report_name);
    if (rc != 0) return rc;
    __atomic_store_n(&report_current, next, __ATOMIC_RELEASE);
    return 0;
}

int cairn_crash_warm_up(void)
{
    if (!installed) return CAIRN_EINVAL;
    warm_up_unwinder();
    return 0;
}

int cairn_crash_set_context(const void *data, size_t len)
{
    if (!installed || (!data && len)) return CAIRN_EINVAL;
    int live = __atomic_load_n(&context_current, __ATOMIC_ACQUIRE);
    int next = live == 0 ? 1 : 0;
    if (len > context_capacity) len = context_capacity;
    if (len) memcpy(context_buffers[next], data, len);
    context_lengths[next] = len;
    __atomic_store_n(&context_current, next, __ATOMIC_RELEASE);
    return 0;
}

/* ------------------------------------------------------------------------------ */
/* In the handler: async-signal-safe code only                                      */
/* ------------------------------------------------------------------------------ */

static void put_bytes(const void *p, size_t n)
{
    const unsigned char *b = p;
    while (n > 0 && report_fd >= 0) {
        ssize_t w = write(report_fd, b, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        b += w;
        n -= (size_t)w;
        report_bytes += (uint64_t)w;
    }
}

static void put_section(uint32_t type, const void *payload, uint32_t len)
{
    unsigned char h[8];
    cairn__put32(h, type);
    cairn__put32(h + 4, len);
    put_bytes(h, sizeof h);
    if (len) put_bytes(payload, len);
}

static uint64_t now_ns(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int valid_ip(uintptr_t ip)
{
    for (size_t i = 0; i < exec_range_count; i++)
        if (ip >= exec_ranges[i].start && ip < exec_ranges[i].end) return 1;
    return 0;
}

/* Registers of the crashed context, in the architecture's order; returns the count. */
static uint32_t registers_of(const ucontext_t *uc, uint64_t *regs, uint32_t *arch,
                             uintptr_t *pc, uintptr_t *sp, uintptr_t *fp)
{
#if defined(__x86_64__)
    *arch = 1;
    for (int i = 0; i < NGREG; i++) regs[i] = (uint64_t)uc->uc_mcontext.gregs[i];
    *pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
    *sp = (uintptr_t)uc->uc_mcontext.gregs[REG_RSP];
    *fp = (uintptr_t)uc->uc_mcontext.gregs[REG_RBP];
    return NGREG;
#elif defined(__aarch64__)
    *arch = 2;
    for (int i = 0; i < 31; i++) regs[i] = uc->uc_mcontext.regs[i];
    regs[31] = uc->uc_mcontext.sp;
    regs[32] = uc->uc_mcontext.pc;
    *pc = (uintptr_t)uc->uc_mcontext.pc;
    *sp = (uintptr_t)uc->uc_mcontext.sp;
    *fp = (uintptr_t)uc->uc_mcontext.regs[29];
    return 33;
#else
    (void)uc; (void)regs;
    *arch = 0;
    *pc = *sp = *fp = 0;
    return 0;
#endif
}

/* Reads one word at `addr` if the process can read it: process_vm_readv on itself
 * fails with EFAULT instead of faulting. Where that call is refused (a seccomp
 * filter), the word is read directly when it lies in the crashed thread's stack
 * window, else not at all. */
static int read_word(uintptr_t addr, uintptr_t sp, uintptr_t *out)
{
    static int direct_only; /* the call was refused once: do not ask again */
    if (addr == 0 || (addr & (sizeof(uintptr_t) - 1)) != 0) return 0;
    if (!direct_only) {
        struct iovec local = {out, sizeof *out}, remote = {(void *)addr, sizeof *out};
        ssize_t n = syscall(SYS_process_vm_readv, getpid(), &local, 1UL, &remote, 1UL, 0UL);
        if (n == (ssize_t)sizeof *out) return 1;
        if (n < 0 && errno != ENOSYS && errno != EPERM) return 0;
        direct_only = 1;
    }
    if (addr < sp || addr >= sp + (8u << 20)) return 0;
    *out = *(const uintptr_t *)addr;
    return 1;
}

/* Frame pointers from `fp`: each frame's saved frame pointer lies above the last,
 * within 8 MiB of the stack pointer, and its return address inside a module. */
static void walk_frame_pointers(uint64_t *ips, uint32_t *n, uintptr_t fp, uintptr_t sp)
{
    while (*n < MAX_FRAMES && fp >= sp && fp < sp + (8u << 20)) {
        uintptr_t ret, next;
        if (!read_word(fp + sizeof(uintptr_t), sp, &ret) || !read_word(fp, sp, &next)) break;
        if (!valid_ip(ret)) break;
        ips[(*n)++] = (uint64_t)ret;
        if (next <= fp) break;
        fp = next;
    }
}

/* A Swift async function keeps its async context at [fp - 8] (on x86-64 and arm64
 * alike). A context starts with its parent's context and the address where the
 * parent resumes. For each of the first machine frames, the chain behind [fp - 8] is
 * recorded while every link is readable and every resume address lies in a module:
 * whether the frame was an async function is decided on the next start, from its
 * symbol, so nothing here needs a symbol table. */
static void write_async_chains(const uint64_t *fps, uint32_t n, uintptr_t sp)
{
    unsigned char buf[ASYNC_BYTES];
    uint32_t len = 0, chains = 0;
    for (uint32_t i = 0; i < n && i < ASYNC_FRAMES; i++) {
        uintptr_t ctx;
        if (fps[i] < 8 || !read_word((uintptr_t)fps[i] - 8, sp, &ctx)) continue;
        uint32_t head = len, depth = 0;
        if (len + 8 > sizeof buf) break;
        len += 8;
        for (uintptr_t at = ctx; at && depth < ASYNC_DEPTH && len + 8 <= sizeof buf; depth++) {
            uintptr_t parent, resume;
            if (!read_word(at, sp, &parent) || !read_word(at + sizeof(uintptr_t), sp, &resume) || !valid_ip(resume))
                break;
            cairn__put64(buf + len, (uint64_t)resume);
            len += 8;
            at = parent;
        }
        if (depth == 0) {
            len = head;
            continue;
        }
        cairn__put32(buf + head, i);
        cairn__put32(buf + head + 4, depth);
        chains++;
    }
    if (chains) put_section(SEC_ASYNC, buf, len);
}

static void write_frames(ucontext_t *uc, uintptr_t pc, uintptr_t sp, uintptr_t fp)
{
    uint64_t ips[MAX_FRAMES], fps[MAX_FRAMES];
    uint32_t n = 0, unwound = 0, method = 1;
    unw_cursor_t cursor;
    if (unw_init_local2(&cursor, (unw_context_t *)uc, UNW_INIT_SIGNAL_FRAME) == 0) {
        for (;;) {
            unw_word_t ip = 0, frame = 0, at_sp = 0;
            if (unw_get_reg(&cursor, UNW_REG_IP, &ip) != 0 || ip == 0) break;
#if defined(__x86_64__)
            unw_get_reg(&cursor, UNW_X86_64_RBP, &frame);
#elif defined(__aarch64__)
            unw_get_reg(&cursor, UNW_AARCH64_X29, &frame);
#endif
            unw_get_reg(&cursor, UNW_REG_SP, &at_sp);
            fps[n] = (uint64_t)frame;
            ips[n++] = (uint64_t)ip;
            /* The first frame may be outside any module (a jump to garbage). Past it, an
             * address no module holds (code without unwind information, such as
             * generated code), or a step libunwind cannot take, ends what libunwind can
             * do: the frame pointers go on from that frame. */
            int step = n < MAX_FRAMES && (n == 1 || valid_ip((uintptr_t)ip)) ? unw_step(&cursor) : -1;
            if (step > 0) continue;
            if (step < 0 && n > 1 && n < MAX_FRAMES) {
                unwound = n;
                walk_frame_pointers(ips, &n, (uintptr_t)frame, (uintptr_t)at_sp);
                if (n > unwound) method = 3;
            }
            break;
        }
    }
    if (!unwound) unwound = n;
    if (n < 2) {
        /* libunwind found no caller: frame pointers from the signal frame. */
        method = 2;
        n = 0;
        fps[0] = fp;
        ips[n++] = (uint64_t)pc;
        unwound = 1;
        walk_frame_pointers(ips, &n, fp, sp);
    }
    unsigned char buf[8 + 8 * MAX_FRAMES];
    cairn__put32(buf, method);
    cairn__put32(buf + 4, n);
    for (uint32_t i = 0; i < n; i++) cairn__put64(buf + 8 + 8 * i, ips[i]);
    put_section(SEC_FRAMES, buf, 8 + 8 * n);
    write_async_chains(fps, unwound, sp);
}

/* Hands `sig` on as if Cairn's handler had not been there: to the handler installed
 * before it, else to the default action. */
static void pass_on(int sig, siginfo_t *info, void *uctx, int tid)
{
    int i = index_of(sig);
    if (i >= 0) {
        sigaction(sig, &previous[i], NULL);
        if ((previous[i].sa_flags & SA_SIGINFO) && previous[i].sa_sigaction)
            previous[i].sa_sigaction(sig, info, uctx);
        else if (previous[i].sa_handler != SIG_DFL && previous[i].sa_handler != SIG_IGN)
            previous[i].sa_handler(sig);
    }
    /* The previous handler returned (or there was none): take the default action. */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    if (info && info->si_code > 0 && sig != SIGABRT && sig != SIGQUIT) return; /* the fault repeats */
    syscall(SYS_tgkill, getpid(), tid, sig);
    _exit(128 + sig);
}

/* SIGALRM after a crash: the signal handed on did not end the process in time. The
 * report says so (its commit becomes a DEADLINE section and the commit), and the crash's
 * own signal ends the process with its default action. */
static void deadline_handler(int sig, siginfo_t *info, void *uctx)
{
    (void)sig;
    (void)info;
    (void)uctx;
    int fd = commit_at ? open(report_paths[report_live], O_WRONLY | O_CLOEXEC) : -1;
    if (fd >= 0) {
        unsigned char b[20];
        cairn__put32(b, SEC_DEADLINE);
        cairn__put32(b + 4, 4);
        cairn__put32(b + 8, deadline_seconds);
        cairn__put32(b + 12, SEC_COMMIT);
        cairn__put32(b + 16, 0);
        if (lseek(fd, (off_t)commit_at, SEEK_SET) == (off_t)commit_at) {
            size_t done = 0;
            while (done < sizeof b) {
                ssize_t w = write(fd, b + done, sizeof b - done);
                if (w < 0 && errno == EINTR) continue;
                if (w <= 0) break;
                done += (size_t)w;
            }
            fsync(fd);
        }
        close(fd);
    }
    int crash = first_signal;
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(crash, &dfl, NULL);
    sigset_t unblock;
    sigemptyset(&unblock);
    sigaddset(&unblock, crash);
    sigprocmask(SIG_UNBLOCK, &unblock, NULL);
    syscall(SYS_tgkill, getpid(), (int)syscall(SYS_gettid), crash);
    _exit(128 + crash);
}

/* Lets the calling thread take SIGALRM once the deadline is armed. alarm(2) signals
 * the process, and the kernel hands the signal to a thread that does not block it. A
 * service's threads may all block it (libdispatch's workers do, and a child inherits
 * the mask of the thread that spawned it), and an earlier handler may block every
 * signal in the threads it parks (the Swift runtime's backtracer suspends the other
 * threads in a handler that does). So every thread that hands its crash on accepts
 * SIGALRM: whichever of them the earlier handler keeps waiting, the deadline reaches. */
static void accept_deadline(void)
{
    if (!__atomic_load_n(&deadline_armed, __ATOMIC_ACQUIRE)) return;
    sigset_t unblock;
    sigemptyset(&unblock);
    sigaddset(&unblock, SIGALRM);
    sigprocmask(SIG_UNBLOCK, &unblock, NULL);
}

/* Arms the deadline: SIGALRM in `deadline_seconds`, when the service leaves SIGALRM to
 * its default action (then nothing of the service's is displaced). Called before the
 * threads waiting on the report are let go, so they see it armed. */
static void arm_deadline(void)
{
    struct sigaction current;
    if (!deadline_seconds || sigaction(SIGALRM, NULL, &current) != 0) return;
    if ((current.sa_flags & SA_SIGINFO) || current.sa_handler != SIG_DFL) return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = deadline_handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigfillset(&sa.sa_mask);
    if (sigaction(SIGALRM, &sa, NULL) != 0) return;
    alarm(deadline_seconds);
    __atomic_store_n(&deadline_armed, 1, __ATOMIC_RELEASE);
    accept_deadline();
}

/* Finishes the report and ends the process the way it would have ended without Cairn. */
static void finish(int sig, siginfo_t *info, void *uctx, uint64_t started, int tid)
{
    unsigned char t[8];
    cairn__put64(t, now_ns(CLOCK_MONOTONIC) - started);
    put_section(SEC_TIMING, t, 8);
    if (report_fd >= 0) commit_at = report_bytes;
    put_section(SEC_COMMIT, NULL, 0);
    if (report_fd >= 0) {
        fsync(report_fd);
        close(report_fd);
        report_fd = -1;
    }
    arm_deadline();
    __atomic_store_n(&report_done, 1, __ATOMIC_RELEASE);
    pass_on(sig, info, uctx, tid);
}

static void crash_handler(int sig, siginfo_t *info, void *uctx)
{
    int saved_errno = errno;
    uint64_t started = now_ns(CLOCK_MONOTONIC);
    int tid = (int)syscall(SYS_gettid);
    int expected = 0;
    if (!__atomic_compare_exchange_n(&winner_tid, &expected, tid, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        if (expected == tid) {
            /* A fault inside the handler. */
            int entry = __atomic_add_fetch(&entries, 1, __ATOMIC_ACQ_REL);
            if (entry > 2) _exit(128 + first_signal);
            unsigned char b[4];
            cairn__put32(b, (uint32_t)sig);
            put_section(SEC_NESTED, b, 4);
            finish(first_signal, NULL, uctx, started, tid);
            _exit(128 + first_signal);
        }
        /* Another thread is writing the report: once it is committed, this thread's
         * signal goes on as it would without Cairn (to the earlier handler, which may
         * still be running on the winner's thread, or to the default action). */
        struct timespec wait = {0, 10 * 1000 * 1000};
        for (int i = 0; i < 1000 && !__atomic_load_n(&report_done, __ATOMIC_ACQUIRE); i++) nanosleep(&wait, NULL);
        accept_deadline();
        errno = saved_errno;
        pass_on(sig, info, uctx, tid);
        return;
    }
    __atomic_store_n(&entries, 1, __ATOMIC_RELEASE);
    first_signal = sig;

    report_live = __atomic_load_n(&report_current, __ATOMIC_ACQUIRE);
    report_bytes = 0;
    report_fd = open(report_paths[report_live], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    unsigned char head[16];
    memcpy(head, report_magic, 8);
    cairn__put32(head + 8, CAIRN_CRASH_FORMAT_VERSION);
    cairn__put32(head + 12, 0);
    put_bytes(head, sizeof head);

    unsigned char s[48];
    memset(s, 0, sizeof s);
    cairn__put32(s, (uint32_t)sig);
    cairn__put32(s + 4, (uint32_t)(info ? info->si_code : 0));
    cairn__put64(s + 8, (uint64_t)(uintptr_t)(info ? info->si_addr : 0));
    cairn__put32(s + 16, (uint32_t)getpid());
    cairn__put32(s + 20, (uint32_t)tid);
    cairn__put64(s + 24, now_ns(CLOCK_REALTIME));
    prctl(PR_GET_NAME, (unsigned long)(s + 32), 0, 0, 0);
    put_section(SEC_SIGNAL, s, sizeof s);

    uint64_t regs[64];
    uint32_t arch;
    uintptr_t pc, sp, fp;
    uint32_t count = registers_of((const ucontext_t *)uctx, regs, &arch, &pc, &sp, &fp);
    unsigned char rb[8 + 8 * 64];
    cairn__put32(rb, arch);
    cairn__put32(rb + 4, count);
    for (uint32_t i = 0; i < count; i++) cairn__put64(rb + 8 + 8 * i, regs[i]);
    put_section(SEC_REGISTERS, rb, 8 + 8 * count);

    /* Libraries loaded since install join the module list first, so their frames are
     * kept and can be symbolicated (dl_iterate_phdr is what libunwind itself calls
     * for every step below). */
    dl_iterate_phdr(collect_late_module, NULL);
    cairn__put32(modules_section, module_count);
    write_frames((ucontext_t *)uctx, pc, sp, fp);
    put_section(SEC_MODULES, modules_section, (uint32_t)modules_len);
    int live = __atomic_load_n(&context_current, __ATOMIC_ACQUIRE);
    if (live >= 0) put_section(SEC_CONTEXT, context_buffers[live], (uint32_t)context_lengths[live]);
    const char *message = swift_fatal_message ? __atomic_load_n(swift_fatal_message, __ATOMIC_ACQUIRE) : NULL;
    if (message) {
        uint32_t n = 0;
        while (n < 4096 && message[n]) n++;
        put_section(SEC_MESSAGE, message, n);
    }

    finish(sig, info, uctx, started, tid);
    errno = saved_errno;
}

/* ------------------------------------------------------------------------------ */
/* Reader                                                                           */
/* ------------------------------------------------------------------------------ */

int cairn_crash_report_parse(const void *data, size_t len, cairn_crash_report_t *out)
{
    if (!data || !out) return CAIRN_EINVAL;
    memset(out, 0, sizeof *out);
    const unsigned char *p = data;
    if (len < 16 || memcmp(p, report_magic, 8) != 0) return CAIRN_ECORRUPT;
    out->version = cairn__le32(p + 8);
    if (out->version != CAIRN_CRASH_FORMAT_VERSION) return CAIRN_EVERSION;
    size_t at = 16;
    while (len - at >= 8) {
        uint32_t type = cairn__le32(p + at), n = cairn__le32(p + at + 4);
        if (n > len - at - 8) break; /* truncated section: what came before stands */
        const unsigned char *s = p + at + 8;
        switch (type) {
        case SEC_SIGNAL:
            if (n >= 48) {
                out->signal = (int)cairn__le32(s);
                out->code = (int)cairn__le32(s + 4);
                out->fault_address = cairn__le64(s + 8);
                out->pid = (int32_t)cairn__le32(s + 16);
                out->tid = (int32_t)cairn__le32(s + 20);
                out->time_ns = cairn__le64(s + 24);
                memcpy(out->thread_name, s + 32, 16);
                out->thread_name[16] = 0;
            }
            break;
        case SEC_REGISTERS:
            if (n >= 8 && (uint64_t)cairn__le32(s + 4) * 8 <= n - 8) {
                out->arch = cairn__le32(s);
                out->register_count = cairn__le32(s + 4);
                out->registers = s + 8;
            }
            break;
        case SEC_FRAMES:
            if (n >= 8 && (uint64_t)cairn__le32(s + 4) * 8 <= n - 8) {
                out->frames_method = cairn__le32(s);
                out->frame_count = cairn__le32(s + 4);
                out->frames = s + 8;
            }
            break;
        case SEC_MODULES:
            if (n >= 4) {
                out->module_count = cairn__le32(s);
                out->modules = s + 4;
                out->modules_len = n - 4;
            }
            break;
        case SEC_CONTEXT:
            out->context = s;
            out->context_len = n;
            break;
        case SEC_MESSAGE:
            out->message = s;
            out->message_len = n;
            break;
        case SEC_NESTED:
            out->nested++;
            break;
        case SEC_TIMING:
            if (n >= 8) out->handler_ns = cairn__le64(s);
            break;
        case SEC_ASYNC:
            out->async_chains = s;
            out->async_chains_len = n;
            break;
        case SEC_DEADLINE:
            if (n >= 4) out->deadline_seconds = cairn__le32(s);
            break;
        case SEC_COMMIT:
            out->complete = 1;
            break;
        default:
            break; /* a section from a newer writer: skipped */
        }
        at += 8 + (size_t)n;
        if (out->complete) break;
    }
    return 0;
}
