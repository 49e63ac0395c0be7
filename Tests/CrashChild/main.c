/* cairn-crash-child: crashes in the way its argument names, with Cairn's crash handler
 * installed, for the crash tests.
 *
 * Usage: cairn-crash-child <report dir> <mode>
 * Prints "FN <address>" (the function that crashes) and "READY" on stdout first.
 * Modes: segv, fpe, abort, bus, raise, wait (sleeps until killed), thread (a
 * background thread crashes while others run), chain (a handler installed before
 * Cairn's must still run), overflow (stack overflow on the main thread),
 * overflow-thread (on a worker thread given an alternate stack with
 * cairn_crash_prepare_thread), many (20 threads crash at the same instant),
 * chain-many (20 threads crash at once under a handler installed before Cairn that
 * takes 4 s, then exits with status 42), jit (x86-64: crash_here is called through
 * generated code that has frame pointers but no unwind information), threads (no
 * crash: prints "ALT <size>" of a new thread's alternate signal stack, then "VM <kB>
 * <kB>": the address space before and after 2000 threads started and ended), corrupt
 * (the handler itself faults: the Swift runtime's fatal-message slot, which the
 * handler reads, holds a wild pointer), hang (a handler installed before Cairn's never
 * returns), hang-many (20 threads crash at once under it), hang-alarm (the same as
 * hang, and the program handles SIGALRM itself), park-many (20 threads that block
 * SIGALRM crash at once under an earlier handler that, like the Swift runtime's
 * backtracer, parks the first thread it enters with every signal blocked and keeps the
 * others waiting). CAIRN_TEST_DEADLINE_S sets the
 * install's deadline_seconds. */
#define _GNU_SOURCE
#define CAIRN_EXPERIMENTAL_CRASH_API 1 /* the crash writer */
#include "cairn_crash.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static volatile int zero;
static const char *mode;

static void announce(void (*fn)(void))
{
    printf("FN %p\nREADY\n", (void *)fn);
    fflush(stdout);
}

__attribute__((noinline)) static void crash_here(void)
{
    if (!strcmp(mode, "segv")) {
        *(volatile int *)(uintptr_t)zero = 1;
    } else if (!strcmp(mode, "fpe")) {
        volatile int x = 1 / zero;
        (void)x;
    } else if (!strcmp(mode, "abort")) {
        abort();
    } else if (!strcmp(mode, "raise")) {
        raise(SIGSEGV);
    } else if (!strcmp(mode, "bus")) {
        char path[] = "/tmp/cairn-bus-XXXXXX";
        int fd = mkstemp(path);
        unlink(path);
        if (ftruncate(fd, 4096) != 0) _exit(3);
        volatile char *p = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (ftruncate(fd, 0) != 0) _exit(3);
        p[100] = 1; /* the file no longer covers this page */
    } else {
        *(volatile int *)(uintptr_t)zero = 2;
    }
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) static int recurse(int depth)
{
    volatile char pad[1024];
    pad[0] = (char)depth;
    return recurse(depth + 1) + pad[0];
}

static void *crashing_thread(void *arg)
{
    (void)arg;
    cairn_crash_prepare_thread();
    usleep(50 * 1000);
    crash_here();
    return NULL;
}

static void *overflowing_thread(void *arg)
{
    (void)arg;
    if (cairn_crash_prepare_thread() != 0) _exit(3);
    recurse(0);
    return NULL;
}

static void *busy_thread(void *arg)
{
    (void)arg;
    for (;;) usleep(1000);
    return NULL;
}

static pthread_barrier_t start_line;
static void *crowd_thread(void *arg)
{
    (void)arg;
    pthread_barrier_wait(&start_line);
    crash_here();
    return NULL;
}

static void earlier_handler(int sig)
{
    static const char msg[] = "EARLIER HANDLER RAN\n";
    if (write(2, msg, sizeof msg - 1) < 0) { /* nothing to do */ }
    signal(sig, SIG_DFL);
}

/* A slow earlier handler that ends the process itself, as some services' do (flush,
 * then exit with their own status). */
static void slow_earlier_handler(int sig)
{
    (void)sig;
    static const char msg[] = "SLOW EARLIER HANDLER RAN\n";
    if (write(2, msg, sizeof msg - 1) < 0) { /* nothing to do */ }
    struct timespec wait = {4, 0};
    while (nanosleep(&wait, &wait) != 0) { /* interrupted: go on sleeping */ }
    _exit(42);
}

/* An earlier handler that never returns, as a crash reporter stuck on a lock or on a
 * helper process does. */
static void hanging_earlier_handler(int sig)
{
    (void)sig;
    static const char msg[] = "HANGING EARLIER HANDLER RAN\n";
    if (write(2, msg, sizeof msg - 1) < 0) { /* nothing to do */ }
    for (;;) pause();
}

/* An earlier handler shaped like the Swift runtime's backtracer under a crowd: the
 * first thread to enter it blocks every signal and waits (as a thread the backtracer
 * parks does); every later one waits with the mask it came with (as the thread waiting
 * on swift-backtrace does). */
static int parked_entries;
static void parking_earlier_handler(int sig)
{
    (void)sig;
    if (__atomic_fetch_add(&parked_entries, 1, __ATOMIC_ACQ_REL) == 0) {
        sigset_t all;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, NULL);
    }
    static const char msg[] = "PARKING EARLIER HANDLER RAN\n";
    if (write(2, msg, sizeof msg - 1) < 0) { /* nothing to do */ }
    for (;;) pause();
}

static void own_alarm_handler(int sig)
{
    (void)sig;
}

static void *report_alt_stack(void *arg)
{
    (void)arg;
    stack_t ss;
    sigaltstack(NULL, &ss);
    printf("ALT %zu\n", (ss.ss_flags & SS_DISABLE) ? (size_t)0 : ss.ss_size);
    return NULL;
}

static void *nothing(void *arg)
{
    return arg;
}

/* VmSize of this process, kB. */
static long address_space(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmSize: %ld kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s <report dir> <mode>\n", argv[0]);
        return 2;
    }
    mode = argv[2];
    if (!strcmp(mode, "chain")) signal(SIGSEGV, earlier_handler);
    if (!strcmp(mode, "chain-many")) signal(SIGSEGV, slow_earlier_handler);
    if (!strncmp(mode, "hang", 4)) signal(SIGSEGV, hanging_earlier_handler);
    if (!strcmp(mode, "park-many")) {
        /* Every thread blocks SIGALRM, as libdispatch's workers do, or every thread of
           a process spawned from one of them. */
        signal(SIGSEGV, parking_earlier_handler);
        sigset_t alarm_only;
        sigemptyset(&alarm_only);
        sigaddset(&alarm_only, SIGALRM);
        pthread_sigmask(SIG_BLOCK, &alarm_only, NULL);
    }
    if (!strcmp(mode, "hang-alarm")) signal(SIGALRM, own_alarm_handler);
    if (!strcmp(mode, "nomem")) {
        /* An install that fails (its context buffers cannot be allocated under a 1 GiB
           address-space limit) must leave nothing behind: no handler replaced. */
        struct rlimit limit = {.rlim_cur = 1UL << 30, .rlim_max = 1UL << 30};
        setrlimit(RLIMIT_AS, &limit);
        cairn_crash_options_t big = {.report_dir = argv[1], .flags = 0, .context_capacity = 0xFFFFFFF0u};
        struct sigaction before, after;
        sigaction(SIGSEGV, NULL, &before);
        int first = cairn_crash_install(&big);
        sigaction(SIGSEGV, NULL, &after);
        fprintf(stderr, "first install: %s; SIGSEGV handler: %s\n", cairn_strerror(first),
                after.sa_sigaction == before.sa_sigaction ? "unchanged" : "replaced");
        mode = "segv";
    }
    cairn_crash_options_t opts = {.report_dir = argv[1], .flags = 0, .context_capacity = 0};
    const char *deadline = getenv("CAIRN_TEST_DEADLINE_S");
    if (deadline) opts.deadline_seconds = (uint32_t)atoi(deadline);
    int rc = cairn_crash_install(&opts);
    if (rc != 0) {
        fprintf(stderr, "install: %s\n", cairn_strerror(rc));
        return 1;
    }
    char ctx[64];
    int n = snprintf(ctx, sizeof ctx, "{\"mode\":\"%s\"}", mode);
    cairn_crash_set_context(ctx, (size_t)n);
    announce(crash_here);
    if (!strcmp(mode, "wait")) {
        for (;;) pause();
    } else if (!strcmp(mode, "overflow")) {
        return recurse(0);
    } else if (!strcmp(mode, "overflow-thread")) {
        pthread_t t;
        pthread_create(&t, NULL, overflowing_thread, NULL);
        pthread_join(t, NULL);
    } else if (!strcmp(mode, "thread")) {
        pthread_t busy[3], crasher;
        for (int i = 0; i < 3; i++) pthread_create(&busy[i], NULL, busy_thread, NULL);
        mode = "segv";
        pthread_create(&crasher, NULL, crashing_thread, NULL);
        pthread_join(crasher, NULL);
    } else if (!strcmp(mode, "many") || !strcmp(mode, "chain-many") || !strcmp(mode, "hang-many") ||
               !strcmp(mode, "park-many")) {
        mode = "segv";
        pthread_barrier_init(&start_line, NULL, 20);
        pthread_t t[20];
        for (int i = 0; i < 20; i++) pthread_create(&t[i], NULL, crowd_thread, NULL);
        for (int i = 0; i < 20; i++) pthread_join(t[i], NULL);
    } else if (!strcmp(mode, "threads")) {
        pthread_t t;
        pthread_create(&t, NULL, report_alt_stack, NULL);
        pthread_join(t, NULL);
        long before = address_space();
        for (int i = 0; i < 2000; i++) {
            if (pthread_create(&t, NULL, nothing, NULL) != 0) _exit(3);
            pthread_join(t, NULL);
        }
        printf("VM %ld %ld\n", before, address_space());
        return 0;
    } else if (!strcmp(mode, "jit")) {
#if defined(__x86_64__)
        /* push %rbp; mov %rsp,%rbp; call *%rdi; pop %rbp; ret */
        static const unsigned char code[] = {0x55, 0x48, 0x89, 0xe5, 0xff, 0xd7, 0x5d, 0xc3};
        unsigned char *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (page == MAP_FAILED) _exit(3);
        memcpy(page, code, sizeof code);
        if (mprotect(page, 4096, PROT_READ | PROT_EXEC) != 0) _exit(3);
        mode = "segv";
        ((void (*)(void (*)(void)))(void *)page)(crash_here);
#else
        _exit(3);
#endif
    } else if (!strcmp(mode, "corrupt")) {
        const char **(*slot)(void) = (const char **(*)(void))dlsym(RTLD_DEFAULT, "swift_getFatalErrorMessageBuffer");
        if (!slot) _exit(3);
        *slot() = (const char *)(uintptr_t)0x10;
        mode = "segv";
        crash_here();
    } else {
        if (!strcmp(mode, "chain") || !strncmp(mode, "hang", 4)) mode = "segv";
        crash_here();
    }
    return 0;
}
