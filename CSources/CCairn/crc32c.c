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
__attribute__((target("sse4.2")))
static uint32_t crc32c_hw(uint32_t crc, const unsigned char *p, size_t len)
{
    uint64_t c = ~crc;
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = __builtin_ia32_crc32di(c, w);
        p += 8;
        len -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (len--) c32 = __builtin_ia32_crc32qi(c32, *p++);
    return ~c32;
}

static int have_hw(void)
{
    static int cached; /* 0 = unknown, 1 = no, 2 = yes */
    int v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (v == 0) {
        unsigned a, b, c, d;
        v = (__get_cpuid(1, &a, &b, &c, &d) && (c & bit_SSE4_2)) ? 2 : 1;
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

uint32_t cairn__crc32c(uint32_t crc, const void *data, size_t len)
{
    const unsigned char *p = data;
    return have_hw() ? crc32c_hw(crc, p, len) : crc32c_sw(crc, p, len);
}
