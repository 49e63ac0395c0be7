/*
 * CCairnCrashModule.h: the Swift module's view of the crash core (module.modulemap):
 * the whole API of cairn_crash.h, the experimental crash writer included.
 */
#ifndef CCAIRN_CRASH_MODULE_H
#define CCAIRN_CRASH_MODULE_H

#ifndef CAIRN_EXPERIMENTAL_CRASH_API
#define CAIRN_EXPERIMENTAL_CRASH_API 1
#endif
#include "cairn_crash.h"

#endif
