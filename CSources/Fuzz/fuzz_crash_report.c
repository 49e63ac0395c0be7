/* fuzz_crash_report.c: libFuzzer target for the crash report reader. Any input must
 * parse (completely, partially) or be refused, never crash or read out of bounds, and
 * every pointer it returns must lie inside the input. */
#define CAIRN_EXPERIMENTAL_CRASH_API 1 /* the crash writer */
#include "cairn_crash.h"

#include <stdlib.h>

static void inside(const uint8_t *data, size_t size, const unsigned char *p, size_t n)
{
    if (!p) return;
    if (p < data || n > size || p + n > data + size) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cairn_crash_report_t r;
    if (cairn_crash_report_parse(data, size, &r) != 0) return 0;
    inside(data, size, r.registers, (size_t)r.register_count * 8);
    inside(data, size, r.frames, (size_t)r.frame_count * 8);
    inside(data, size, r.modules, r.modules_len);
    inside(data, size, r.context, r.context_len);
    inside(data, size, r.message, r.message_len);
    if (r.thread_name[16] != 0) abort();
    return 0;
}
