/* crc32c.c: CRC32C (Castagnoli), used to check ring records.
 *
 * The hardware path uses the SSE4.2 `crc32` instruction (x86-64) or the ARMv8 CRC
 * extension, chosen at run time with cpuid so the library runs on any x86-64. The
 * table path is the portable fallback. Both are async-signal-safe: no allocation, no
 * locks; the CPU check caches its answer in a relaxed atomic. */
#include "cairn_internal.h"

#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#if defined(__has_include)
#if __has_include(<sys/platform/x86.h>)
#include <sys/platform/x86.h> /* glibc 2.33+: the CPU features it read at load */
#endif
#endif
#endif

static uint32_t crc_table[8][256];
static int table_state; /* 0 = not built, 1 = building, 2 = ready */

static void build_table(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = crc_table[0][n];
        for (int t = 1; t < 8; t++) {
            c = crc_table[0][c & 0xff] ^ (c >> 8);
            crc_table[t][n] = c;
        }
    }
}

static uint32_t crc32c_sw(uint32_t crc, const unsigned char *p, size_t len)
{
    int state = __atomic_load_n(&table_state, __ATOMIC_ACQUIRE);
    if (state != 2) {
        int expected = 0;
        if (__atomic_compare_exchange_n(&table_state, &expected, 1, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE)) {
            build_table();
            __atomic_store_n(&table_state, 2, __ATOMIC_RELEASE);
        } else {
            /* Another thread is building the table: compute bit by bit meanwhile. */
            crc = ~crc;
            while (len--) {
                crc ^= *p++;
                for (int k = 0; k < 8; k++) crc = (crc & 1) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
            }
            return ~crc;
        }
    }
    crc = ~crc;
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= crc;
        crc = crc_table[7][w & 0xff] ^ crc_table[6][(w >> 8) & 0xff] ^
              crc_table[5][(w >> 16) & 0xff] ^ crc_table[4][(w >> 24) & 0xff] ^
              crc_table[3][(w >> 32) & 0xff] ^ crc_table[2][(w >> 40) & 0xff] ^
              crc_table[1][(w >> 48) & 0xff] ^ crc_table[0][w >> 56];
        p += 8;
        len -= 8;
    }
    while (len--) crc = crc_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}

#if defined(__x86_64__)
/* Three independent streams of STREAM bytes each are folded in parallel, hiding the
 * crc32 instruction's 3-cycle latency; their results are then joined with
 * shift(crc, STREAM), the CRC register advanced over STREAM zero bytes. That shift is
 * linear, so a table of 4 x 256 entries, built once with the instruction itself,
 * computes it in four lookups. */
#define STREAM 64
static uint32_t shift_table[4][256];
static int shift_state; /* 0 = not built, 1 = building, 2 = ready */

__attribute__((target("sse4.2")))
static uint32_t crc32c_hw_serial(uint64_t c, const unsigned char *p, size_t len)
{
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = __builtin_ia32_crc32di(c, w);
        p += 8;
        len -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    if (len >= 4) {
        uint32_t w;
        memcpy(&w, p, 4);
        c32 = __builtin_ia32_crc32si(c32, w);
        p += 4;
        len -= 4;
    }
    while (len--) c32 = __builtin_ia32_crc32qi(c32, *p++);
    return c32;
}

__attribute__((target("sse4.2")))
static int shift_ready(void)
{
    int state = __atomic_load_n(&shift_state, __ATOMIC_ACQUIRE);
    if (state == 2) return 1;
    int expected = 0;
    if (state != 0 || !__atomic_compare_exchange_n(&shift_state, &expected, 1, 0, __ATOMIC_ACQ_REL,
                                                   __ATOMIC_ACQUIRE))
        return 0;
    static const unsigned char zeros[STREAM];
    for (int k = 0; k < 4; k++)
        for (uint32_t b = 0; b < 256; b++) shift_table[k][b] = crc32c_hw_serial((uint64_t)b << (8 * k), zeros, STREAM);
    __atomic_store_n(&shift_state, 2, __ATOMIC_RELEASE);
    return 1;
}

static inline uint32_t shift(uint32_t c)
{
    return shift_table[0][c & 0xff] ^ shift_table[1][(c >> 8) & 0xff] ^
           shift_table[2][(c >> 16) & 0xff] ^ shift_table[3][c >> 24];
}

__attribute__((target("sse4.2")))
static uint32_t crc32c_hw_from(uint64_t c, const unsigned char *p, size_t len)
{
    if (len >= 3 * STREAM && shift_ready()) {
        do {
            uint64_t a = c, b = 0, d = 0;
            for (int i = 0; i < STREAM; i += 8) {
                uint64_t wa, wb, wd;
                memcpy(&wa, p + i, 8);
                memcpy(&wb, p + STREAM + i, 8);
                memcpy(&wd, p + 2 * STREAM + i, 8);
                a = __builtin_ia32_crc32di(a, wa);
                b = __builtin_ia32_crc32di(b, wb);
                d = __builtin_ia32_crc32di(d, wd);
            }
            c = shift(shift((uint32_t)a) ^ (uint32_t)b) ^ (uint32_t)d;
            p += 3 * STREAM;
            len -= 3 * STREAM;
        } while (len >= 3 * STREAM);
    }
    return ~crc32c_hw_serial(c, p, len);
}

__attribute__((target("sse4.2")))
static uint32_t crc32c_hw(uint32_t crc, const unsigned char *p, size_t len)
{
    return crc32c_hw_from(~crc, p, len);
}

__attribute__((target("sse4.2")))
static uint32_t crc32c_hw_after(uint64_t w, uint32_t v, const unsigned char *p, size_t len)
{
    uint64_t c = __builtin_ia32_crc32di(0xFFFFFFFFu, w);
    c = __builtin_ia32_crc32si((uint32_t)c, v);
    return crc32c_hw_from(c, p, len);
}

static int have_hw(void)
{
    static int cached; /* 0 = unknown, 1 = no, 2 = yes */
    int v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (v == 0) {
#if defined(CPU_FEATURE_ACTIVE)
        /* glibc asked the CPU at load; `cpuid` itself traps to the hypervisor in a VM
         * (about 13 us each, on the caller's thread in `cairn_ring_open`). */
        v = CPU_FEATURE_ACTIVE(SSE4_2) ? 2 : 1;
#else
        unsigned a, b, c, d;
        v = (__get_cpuid(1, &a, &b, &c, &d) && (c & bit_SSE4_2)) ? 2 : 1;
#endif
        __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
    }
    return v == 2;
}
#elif defined(__aarch64__) && defined(__ARM_FEATURE_CRC32)
#include <arm_acle.h>
static uint32_t crc32c_hw(uint32_t crc, const unsigned char *p, size_t len)
{
    crc = ~crc;
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        crc = __crc32cd(crc, w);
        p += 8;
        len -= 8;
    }
    while (len--) crc = __crc32cb(crc, *p++);
    return ~crc;
}
static int have_hw(void) { return 1; }
#else
static uint32_t crc32c_hw(uint32_t crc, const unsigned char *p, size_t len) { return crc32c_sw(crc, p, len); }
static int have_hw(void) { return 0; }
#endif

uint32_t cairn__crc32c_after(uint64_t w, uint32_t v, const void *data, size_t len)
{
#if defined(__x86_64__)
    if (have_hw()) return crc32c_hw_after(w, v, data, len);
#endif
    unsigned char prefix[12];
    cairn__put64(prefix, w);
    cairn__put32(prefix + 8, v);
    return cairn__crc32c(cairn__crc32c(0, prefix, sizeof prefix), data, len);
}

uint32_t cairn__crc32c(uint32_t crc, const void *data, size_t len)
{
    const unsigned char *p = data;
    return have_hw() ? crc32c_hw(crc, p, len) : crc32c_sw(crc, p, len);
}
