/* altstack.c: alternate signal stacks, so that a stack overflow is reported on any
 * thread. EXPERIMENTAL, with the crash writer.
 *
 * Design
 * ------
 * A thread that overflows its stack gets SIGSEGV on a stack it has no room left on:
 * unless the thread has an alternate signal stack (sigaltstack), the kernel cannot
 * run the handler and kills the process without a report. Alternate stacks are per
 * thread and a new thread starts without one, so each thread must set up its own.
 *
 * cairn_crash_prepare_thread() does it for the calling thread. Threads the service
 * never sees (libdispatch's workers, which also run the Swift concurrency runtime's
 * tasks, and threads of other libraries) are covered by `pthread_create` below: the
 * C core defines it, so every call in the process (the executable's and every shared
 * library's: the executable's definition comes first in the dynamic linker's lookup)
 * comes here; it starts the thread in a trampoline that gives it an alternate stack,
 * then runs the thread's own function. glibc's pthread_create does the rest (found
 * with dlsym(RTLD_NEXT)). Until the crash writer is installed, and when it is
 * installed with CAIRN_CRASH_NO_THREAD_STACKS, the call goes straight through.
 *
 * Costs: one malloc and free per thread creation; in the new thread mmap, mprotect,
 * sigaltstack and pthread_setspecific (a few microseconds); 68 KiB of address space,
 * not resident until a signal uses it; freed when the thread ends (a thread-specific
 * key's destructor, which runs on pthread_exit and on return).
 *
 * Failure modes: threads created before the crash writer was installed, or with
 * clone() directly, get no stack here (the service can still call
 * cairn_crash_prepare_thread() on them); if the alternate stack cannot be mapped the
 * thread runs without one; a thread that installs its own alternate stack keeps it.
 *
 * Finding the C library's pthread_create (the hook must never break thread creation):
 * dlsym(RTLD_NEXT) first; if it finds nothing (this code in a shared library that comes
 * after the C library in the lookup order), glibc's own definition through its handle
 * (dlopen of libc.so.6 with RTLD_NOLOAD: it is always loaded in a dynamic glibc
 * process). cairn_crash_thread_hook() says which served, and the SDK reports it.
 *
 * Compiled only where that lookup can work: with glibc (a musl build is often fully
 * static, as the Swift static Linux SDK makes it, and there a definition of
 * pthread_create would replace the C library's for good), and not in libcairn
 * (CAIRN_NO_THREAD_HOOK: a C host calls cairn_crash_prepare_thread()) nor in sanitizer
 * builds, whose runtimes define pthread_create themselves. A fully static glibc link
 * must define CAIRN_NO_THREAD_HOOK too (no next definition exists there).
 */
#define _GNU_SOURCE
#define CAIRN_EXPERIMENTAL_CRASH_API 1
#include "crash_internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#define ALT_STACK_SIZE (64 * 1024)

static pthread_key_t stack_key;
static pthread_once_t stack_key_once = PTHREAD_ONCE_INIT;
static int stack_key_ok;

static size_t page_size(void)
{
    long ps = sysconf(_SC_PAGESIZE);
    return ps > 0 ? (size_t)ps : 4096;
}

/* At thread exit: the stack mapped for this thread is unmapped once the thread no
 * longer uses it (it is left mapped if the thread is running on it, or if it cannot be
 * switched off). A thread that put its own stack in its place keeps that one. */
static void release_stack(void *mem)
{
    size_t page = page_size();
    stack_t current;
    if (sigaltstack(NULL, &current) != 0) return;
    if (current.ss_sp == (unsigned char *)mem + page && !(current.ss_flags & SS_DISABLE)) {
        if (current.ss_flags & SS_ONSTACK) return;
        stack_t off = {.ss_sp = NULL, .ss_size = 0, .ss_flags = SS_DISABLE};
        if (sigaltstack(&off, NULL) != 0) return;
    }
    munmap(mem, ALT_STACK_SIZE + page);
}

static void make_stack_key(void)
{
    stack_key_ok = pthread_key_create(&stack_key, release_stack) == 0;
}

int cairn__prepare_thread(int release_at_exit)
{
    stack_t current;
    if (sigaltstack(NULL, &current) == 0 && !(current.ss_flags & SS_DISABLE) && current.ss_size >= ALT_STACK_SIZE)
        return 0; /* the thread has one already: never replace it */
    size_t page = page_size();
    unsigned char *mem = mmap(NULL, ALT_STACK_SIZE + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) return errno;
    mprotect(mem, page, PROT_NONE); /* guard page below the stack */
    stack_t ss = {.ss_sp = mem + page, .ss_size = ALT_STACK_SIZE, .ss_flags = 0};
    if (sigaltstack(&ss, NULL) != 0) {
        int err = errno;
        munmap(mem, ALT_STACK_SIZE + page);
        return err;
    }
    if (release_at_exit) {
        pthread_once(&stack_key_once, make_stack_key);
        if (stack_key_ok) pthread_setspecific(stack_key, mem);
    }
    return 0;
}

int cairn_crash_prepare_thread(void)
{
    /* The main thread's stack lives as long as the process; another's is released when
     * the thread ends. */
    return cairn__prepare_thread(getpid() != gettid());
}

static int thread_stacks; /* atomic: new threads get an alternate stack */

void cairn__thread_stacks(int on)
{
    __atomic_store_n(&thread_stacks, on, __ATOMIC_RELEASE);
}

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define CAIRN_NO_THREAD_HOOK 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CAIRN_NO_THREAD_HOOK 1
#endif
#if !defined(__GLIBC__)
#define CAIRN_NO_THREAD_HOOK 1
#endif

#ifndef CAIRN_NO_THREAD_HOOK
static int hook_state = CAIRN_THREAD_HOOK_ON; /* atomic; how `real` below was found */
#endif

int cairn_crash_thread_hook(void)
{
#ifdef CAIRN_NO_THREAD_HOOK
    return CAIRN_THREAD_HOOK_OFF;
#else
    if (!__atomic_load_n(&thread_stacks, __ATOMIC_ACQUIRE)) return CAIRN_THREAD_HOOK_OFF;
    return __atomic_load_n(&hook_state, __ATOMIC_ACQUIRE);
#endif
}

#ifndef CAIRN_NO_THREAD_HOOK
typedef int (*create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);

struct hooked_start {
    void *(*body)(void *);
    void *arg;
};

/* The C library's pthread_create: the next definition, else glibc's own through its
 * handle. CAIRN_TEST_NO_RTLD_NEXT (a test build) makes the first lookup fail, and
 * CAIRN_TEST_NO_LIBC_HANDLE the second. */
static create_fn find_next(void)
{
    create_fn next = NULL;
#ifndef CAIRN_TEST_NO_RTLD_NEXT
    next = (create_fn)dlsym(RTLD_NEXT, "pthread_create");
#endif
    if (next) return next;
#ifndef CAIRN_TEST_NO_LIBC_HANDLE
    void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
    if (libc) {
        next = (create_fn)dlsym(libc, "pthread_create");
        dlclose(libc); /* RTLD_NOLOAD took a reference; the library stays loaded */
    }
#endif
    __atomic_store_n(&hook_state, next ? CAIRN_THREAD_HOOK_FALLBACK : CAIRN_THREAD_HOOK_MISSING, __ATOMIC_RELEASE);
    static int said; /* atomic: the operator is told once */
    if (!next && !__atomic_exchange_n(&said, 1, __ATOMIC_ACQ_REL)) {
        static const char msg[] = "cairn: the C library's pthread_create cannot be found (a fully static build? "
                                  "build it with CAIRN_NO_THREAD_HOOK): no thread can be created\n";
        if (write(2, msg, sizeof msg - 1) < 0) { /* nothing more to do */ }
    }
    return next;
}

static void *with_alt_stack(void *p)
{
    struct hooked_start s = *(struct hooked_start *)p;
    free(p);
    cairn__prepare_thread(1);
    return s.body(s.arg);
}

/* Every pthread_create of the process (see the design note). */
int pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*body)(void *), void *arg)
{
    static create_fn real; /* atomic */
    create_fn next = __atomic_load_n(&real, __ATOMIC_ACQUIRE);
    if (!next) {
        next = find_next();
        if (!next) return EAGAIN;
        __atomic_store_n(&real, next, __ATOMIC_RELEASE);
    }
    if (!__atomic_load_n(&thread_stacks, __ATOMIC_ACQUIRE)) return next(thread, attr, body, arg);
    struct hooked_start *s = malloc(sizeof *s);
    if (!s) return next(thread, attr, body, arg);
    s->body = body;
    s->arg = arg;
    int rc = next(thread, attr, with_alt_stack, s);
    if (rc != 0) free(s);
    return rc;
}
#endif
