/* termination.c: lets the SDK shut down cleanly when the process is asked to stop
 * (SIGTERM from systemd, Kubernetes or a deploy; SIGINT), then hands the signal on.
 *
 * Design
 * ------
 * The handler does one thing: it writes the signal number, as one byte, to a pipe
 * created at install time. A thread of the SDK blocks on the pipe's read end, shuts
 * the SDK down (flush within a deadline, record the run's clean end), and then calls
 * cairn_term_chain(), which puts back the action that was installed before Cairn's and
 * raises the signal again: the default action ends the process as the signal would
 * have without Cairn, a service's own handler runs, an ignored signal stays ignored.
 *
 * Why each call in the handler is safe: write(2), sigaction(2) and raise(3) are on the
 * POSIX list of async-signal-safe functions; the handler reads only words written
 * before the handler was installed (the pipe's descriptor and the saved actions), and
 * an atomic exchange on a plain int, getpid(2) and pthread_sigmask (on the list since
 * POSIX.1-2016). A second signal while the SDK is still shutting down means the sender
 * will not wait: the handler then chains at once. A signal that was ignored when
 * Cairn started stays ignored (a job run with nohup, or in the background). A child
 * forked without exec inherits the handler but not the SDK's thread: there the
 * handler hands the signal on at once, as if Cairn were not there.
 */
#define _GNU_SOURCE /* pipe2 */
#include "CCairn.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#define MAX_SIGNAL 65

static int pipe_write = -1;
static pid_t owner; /* the process that installed the handler */
static int pipe_read = -1;
static int installed[MAX_SIGNAL];
static int pending; /* a signal was forwarded and not chained yet */
static struct sigaction previous[MAX_SIGNAL];

/* Puts back the action that was in place before Cairn's. */
static int restore(int signo)
{
    if (signo <= 0 || signo >= MAX_SIGNAL || !installed[signo]) return 0;
    installed[signo] = 0;
    sigaction(signo, &previous[signo], NULL);
    return 1;
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
        unsigned char b = (unsigned char)signo;
        ssize_t n;
        do n = write(pipe_write, &b, 1); while (n < 0 && errno == EINTR);
        if (n != 1) chain(signo);
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
        int fds[2];
        if (pipe2(fds, O_CLOEXEC) != 0) return errno;
        pipe_read = fds[0];
        pipe_write = fds[1];
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
    chain(signo);
    __atomic_store_n(&pending, 0, __ATOMIC_RELEASE);
}
