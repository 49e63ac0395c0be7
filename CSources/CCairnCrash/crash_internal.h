/* crash_internal.h: declarations shared between the crash core's files. Not installed,
 * not part of the ABI. */
#ifndef CAIRN_CRASH_INTERNAL_H
#define CAIRN_CRASH_INTERNAL_H

#include "../CCairnCore/cairn_internal.h"
#include "cairn_crash.h"

/* Gives the calling thread an alternate signal stack unless it has one; with
 * `release_at_exit`, the stack is unmapped when the thread ends (altstack.c). */
int cairn__prepare_thread(int release_at_exit);

/* Whether threads created from now on get an alternate signal stack (altstack.c). */
void cairn__thread_stacks(int on);

#endif
