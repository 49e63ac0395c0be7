/* thread_hook_probe: the crash core's pthread_create hook (CSources/CCairnCrash/altstack.c)
 * alone, built by ThreadHookTests with the toolchain's clang, optionally with the
 * C library's pthread_create made impossible to find (CAIRN_TEST_NO_RTLD_NEXT,
 * CAIRN_TEST_NO_LIBC_HANDLE). Turns the hook on as an install does, creates 8 threads
 * and prints:
 *   STATE <cairn_crash_thread_hook()>
 *   CREATED <threads created> FAILED <first error, 0 if none>
 *   STACKS <threads that ran with an alternate signal stack> */
#define _GNU_SOURCE
#define CAIRN_EXPERIMENTAL_CRASH_API 1
#include "crash_internal.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>

static int with_stack;

static void *body(void *arg)
{
    (void)arg;
    stack_t ss;
    if (sigaltstack(NULL, &ss) == 0 && !(ss.ss_flags & SS_DISABLE) && ss.ss_size > 0)
        __atomic_add_fetch(&with_stack, 1, __ATOMIC_ACQ_REL);
    return NULL;
}

int main(void)
{
    cairn__thread_stacks(1);
    pthread_t t[8];
    int created = 0, failed = 0;
    for (int i = 0; i < 8; i++) {
        int rc = pthread_create(&t[created], NULL, body, NULL);
        if (rc == 0) created++;
        else if (!failed) failed = rc;
    }
    for (int i = 0; i < created; i++) pthread_join(t[i], NULL);
    printf("STATE %d\nCREATED %d FAILED %d\nSTACKS %d\n", cairn_crash_thread_hook(), created, failed, with_stack);
    return 0;
}
