/*
 * CCairn.h: the whole C interface of Cairn, as libcairn (`make lib`) exports it, for C
 * programs and SDKs in other languages: the storage core (cairn_core.h: ring, frames,
 * errors, versions) and the crash core (cairn_crash.h: crash handler and reports,
 * alternate signal stacks, termination signals, threads). Define
 * CAIRN_EXPERIMENTAL_CRASH_API before including it to use the crash writer.
 */
#ifndef CCAIRN_H
#define CCAIRN_H

#include "cairn_core.h"
#include "cairn_crash.h"

#endif /* CCAIRN_H */
