/*
 * CCairnModule.h: the Swift module's view of the C core (module.modulemap): the whole
 * API of CCairn.h, the experimental crash writer included.
 */
#ifndef CCAIRN_MODULE_H
#define CCAIRN_MODULE_H

#ifndef CAIRN_EXPERIMENTAL_CRASH_API
#define CAIRN_EXPERIMENTAL_CRASH_API 1
#endif
#include "CCairn.h"

#endif
