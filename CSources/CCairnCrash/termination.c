/* termination.c: lets the SDK shut down cleanly when the process is asked to stop
 * (SIGTERM from systemd, Kubernetes or a deploy; SIGINT), then hands the signal on.
 *
 * Design
 * ------
 * The handler writes the signal number, as one byte, to a pipe created at install
 * time. A thread of the SDK blocks on the pipe's read end, shuts the SDK down (flush
 * within a deadline, record the run's clean end), and then calls cairn_term_chain().
 * Meanwhile the thread that took the signal waits in the handler, on a second pipe,
 * for at most `wait_ms`: without Cairn it would have been stopped right there, so it
 * must not go on (a main thread interrupted in sleep(3) would return, and the process
 * exit 0 in the middle of the SDK's flush). cairn_term_chain() wakes it, and it puts
 * back the action that was installed before Cairn's and raises the signal again, on
 * itself: the default action ends the process as the signal would have without Cairn,
 * a service's own handler runs on the thread it would have run on, an ignored signal
 * stays ignored. The SDK's threads block these signals (thread.c), so the handler
 * never runs on the thread that must do the shutdown.
 *
 * Why each call in the handler is safe: write(2), read(2), poll(2), clock_gettime(2),
 * sigaction(2) and raise(3) are on the POSIX list of async-signal-safe functions; the
 * handler reads only words written before the handler was installed (the pipes'
 * descriptors and the saved actions), atomics on plain ints, getpid(2) and
 * pthread_sigmask (on the list since POSIX.1-2016). A second signal while the SDK is still shutting down means the sender
 * will not wait: the handler then chains at once. A signal that was ignored when
 * Cairn started stays ignored (a job run with nohup, or in the background). A child
 * forked without exec inherits the handler but not the SDK's thread: there the
 * handler hands the signal on at once, as if Cairn were not there.
 */
#define _GNU_SOURCE /* pipe2 */
#include "cairn_crash.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_SIGNAL 65

static int pipe_write = -1;
static pid_t owner; /* the process that installed the handler */
static int pipe_read = -1;
static int installed[MAX_SIGNAL];
static int pending; /* a signal was forwarded and not chained yet */
static struct sigaction previous[MAX_SIGNAL];
static int done_read = -1, done_write = -1; /* wakes the thread waiting in the handler */
static int waiting;                         /* atomic: a thread waits in the handler */
static uint32_t wait_ms = 10000;            /* atomic */

/* Puts back the action that was in place before Cairn's (once, whichever thread asks). */
static int restore(int signo)
{
    if (signo <= 0 || signo >= MAX_SIGNAL || !__atomic_exchange_n(&installed[signo], 0, __ATOMIC_ACQ_REL)) return 0;
    sigaction(signo, &previous[signo], NULL);
    return 1;
}

static int64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* In the handler, `waiting` set before the SDK's thread was told: waits until
 * cairn_term_chain() says the SDK is done, or `limit` ms. */
static void wait_for_shutdown(uint32_t limit)
{
    int64_t deadline = now_ms() + limit;
    for (;;) {
        int64_t left = deadline - now_ms();
        if (left <= 0) break;
        struct pollfd p = {.fd = done_read, .events = POLLIN, .revents = 0};
        int ready = poll(&p, 1, left > 60000 ? 60000 : (int)left);
        if (ready > 0 || (ready < 0 && errno != EINTR)) break;
    }
    unsigned char b;
    while (read(done_read, &b, 1) == 1) { /* drained */ }
}

/* Restores, then raises the signal on this thread, unblocked here so that it is
 * delivered (the thread may have inherited a mask that blocks it). */
static void chain(int signo)
{
    if (!restore(signo)) return;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, signo);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    raise(signo);
}

static void on_signal(int signo)
{
    int saved = errno;
    if (getpid() != owner) {
        chain(signo); /* a forked child: Cairn does not run here */
    } else if (__atomic_exchange_n(&pending, 1, __ATOMIC_ACQ_REL)) {
        chain(signo); /* asked again: stop waiting for the SDK */
    } else {
        uint32_t limit = __atomic_load_n(&wait_ms, __ATOMIC_ACQUIRE);
        /* Waiting is said before the SDK's thread can finish, so it wakes this one. */
        if (limit > 0) __atomic_store_n(&waiting, 1, __ATOMIC_RELEASE);
        unsigned char b = (unsigned char)signo;
        ssize_t n;
        do n = write(pipe_write, &b, 1); while (n < 0 && errno == EINTR);
        if (n == 1 && limit > 0) wait_for_shutdown(limit);
        __atomic_store_n(&waiting, 0, __ATOMIC_RELEASE);
        if (n != 1 || limit > 0) chain(signo);
    }
    errno = saved;
}

int cairn_term_install(const int *signals, size_t count, int *read_fd)
{
    if (read_fd) *read_fd = -1;
    if (!signals || !read_fd || count == 0) return CAIRN_EINVAL;
    for (size_t i = 0; i < count; i++)
        if (signals[i] <= 0 || signals[i] >= MAX_SIGNAL || signals[i] == SIGKILL || signals[i] == SIGSTOP)
            return CAIRN_EINVAL;
    if (pipe_write < 0) {
        int fds[2], done[2];
        if (pipe2(fds, O_CLOEXEC) != 0) return errno;
        if (pipe2(done, O_CLOEXEC | O_NONBLOCK) != 0) {
            int err = errno;
            close(fds[0]);
            close(fds[1]);
            return err;
        }
        pipe_read = fds[0];
        pipe_write = fds[1];
        done_read = done[0];
        done_write = done[1];
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    owner = getpid();
    for (size_t i = 0; i < count; i++) {
        int s = signals[i];
        if (installed[s]) continue;
        struct sigaction now;
        if (sigaction(s, NULL, &now) != 0 || (!(now.sa_flags & SA_SIGINFO) && now.sa_handler == SIG_IGN))
            continue; /* ignored on purpose: leave it so */
        if (sigaction(s, &sa, &previous[s]) != 0) {
            int err = errno;
            for (size_t j = 0; j < i; j++) restore(signals[j]); /* all or nothing */
            return err;
        }
        installed[s] = 1;
    }
    *read_fd = pipe_read;
    return 0;
}

void cairn_term_chain(int signo)
{
    if (__atomic_load_n(&waiting, __ATOMIC_ACQUIRE)) {
        /* The thread that took the signal hands it on, from its handler. */
        unsigned char b = (unsigned char)signo;
        ssize_t n;
        do n = write(done_write, &b, 1); while (n < 0 && errno == EINTR);
        if (n != 1) chain(signo);
    } else {
        chain(signo);
    }
    __atomic_store_n(&pending, 0, __ATOMIC_RELEASE);
}

void cairn_term_set_wait(uint32_t milliseconds)
{
    __atomic_store_n(&wait_ms, milliseconds, __ATOMIC_RELEASE);
}
