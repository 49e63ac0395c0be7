/* thread.c: starts the SDK's threads off their creator's CPU.
 *
 * Design
 * ------
 * Under the default scheduling policy, a new thread is often placed on the CPU of the
 * thread that creates it and runs first there: pthread_create then returns only once
 * the new thread blocks or its time slice ends. The SDK's background thread starts
 * with work of its own (run record, store, previous runs), so the service's thread
 * that called start would wait for milliseconds, while another CPU sat idle. So the
 * thread is created with an affinity that leaves out the creator's current CPU (when
 * the creator may run on others), and first thing, the new thread takes back the
 * creator's whole affinity: it is placed elsewhere at once, and then may run anywhere
 * its creator may.
 */
#define _GNU_SOURCE /* CPU_* macros, pthread_attr_setaffinity_np, sched_getcpu */
#include "cairn_crash.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>

struct start {
    void *(*body)(void *);
    void *arg;
    cpu_set_t affinity; /* the creator's, to take back */
    int placed;         /* created with a narrower affinity */
};

static void *trampoline(void *p)
{
    struct start s = *(struct start *)p;
    free(p);
    if (s.placed) pthread_setaffinity_np(pthread_self(), sizeof s.affinity, &s.affinity);
    return s.body(s.arg);
}

int cairn_thread_start(void *(*body)(void *), void *arg)
{
    if (!body) return CAIRN_EINVAL;
    struct start *s = calloc(1, sizeof *s);
    if (!s) return CAIRN_ENOMEM;
    s->body = body;
    s->arg = arg;
    pthread_attr_t attr;
    int rc = pthread_attr_init(&attr);
    if (rc != 0) {
        free(s);
        return rc;
    }
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    /* The service's signals go to the service's threads. */
    sigset_t mask;
    pthread_sigmask(SIG_BLOCK, NULL, &mask);
    static const int service_signals[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1,
                                          SIGUSR2, SIGALRM, SIGCHLD, SIGPIPE, SIGWINCH};
    for (size_t i = 0; i < sizeof service_signals / sizeof service_signals[0]; i++)
        sigaddset(&mask, service_signals[i]);
    pthread_attr_setsigmask_np(&attr, &mask);
    int cpu = sched_getcpu();
    /* More CPUs than a cpu_set_t holds: sched_getaffinity fails, and the thread is
     * placed as the system places it. */
    if (cpu >= 0 && cpu < CPU_SETSIZE && sched_getaffinity(0, sizeof s->affinity, &s->affinity) == 0) {
        cpu_set_t elsewhere = s->affinity;
        CPU_CLR(cpu, &elsewhere);
        if (CPU_COUNT(&elsewhere) > 0 && pthread_attr_setaffinity_np(&attr, sizeof elsewhere, &elsewhere) == 0)
            s->placed = 1;
    }
    pthread_t thread;
    rc = pthread_create(&thread, &attr, trampoline, s);
    if (rc == EINVAL && s->placed) {
        /* The narrower set was refused (a CPU went offline meanwhile): the creator's. */
        s->placed = 0;
        pthread_attr_setaffinity_np(&attr, sizeof s->affinity, &s->affinity);
        rc = pthread_create(&thread, &attr, trampoline, s);
    }
    pthread_attr_destroy(&attr);
    if (rc != 0) free(s);
    return rc;
}
