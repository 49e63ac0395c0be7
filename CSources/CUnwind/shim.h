#define UNW_LOCAL_ONLY
#include <libunwind.h>
