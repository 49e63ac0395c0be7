/* fuzz_ring.c: libFuzzer target for ring recovery and the ring header check.
 *
 * Each input drives one of two modes:
 *   - raw: the input is a ring header followed by a data area, cursors and all, and
 *     goes through the header check and, where the cursors are plausible, recovery;
 *   - built: the input describes records (lengths and contents) written in the ring
 *     format at some starting position, then damage (byte flips, unpublished
 *     records); recovery runs, and with no damage every record must come back.
 * After recovery, the window must walk cleanly from the read to the write cursor
 * through valid records and padding only (recovery leaves nothing torn behind).
 */
#include "CCairn.h"
#include "cairn_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const uint8_t *p;
    size_t n;
} input_t;

static uint64_t take(input_t *in, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes && in->n; i++, in->p++, in->n--) v |= (uint64_t)in->p[0] << (8 * i);
    return v;
}

/* Walks [read, write) the way a consumer does, checking CRCs; returns the number of
 * data records, or aborts if the window is not clean. */
static uint64_t walk(const cairn__ring_area_t *a, uint64_t read, uint64_t write,
                     uint32_t *lens, uint64_t max_lens)
{
    const unsigned char *data = a->data;
    uint64_t cap = a->capacity, pos = read, n = 0;
    while (pos < write) {
        const unsigned char *h = data + (pos & (cap - 1));
        uint32_t len_kind = cairn__le32(h + 8);
        uint64_t len = len_kind & 0x3FFFFFFF, kind = len_kind >> 30;
        unsigned char hb[12];
        cairn__put64(hb, cairn__ring_publish_word(a, pos));
        cairn__put32(hb + 8, len_kind);
        uint32_t crc = cairn__crc32c(0, hb, 12);
        if (cairn__le64(h) != cairn__ring_publish_word(a, pos)) abort();
        uint64_t total;
        if (kind == 1) {
            total = 16 + len;
        } else if (kind == 0) {
            crc = cairn__crc32c(crc, h + 16, len);
            total = (16 + len + 15) / 16 * 16;
            if (lens && n < max_lens) lens[n] = (uint32_t)len;
            n++;
        } else {
            abort();
        }
        if (crc != cairn__le32(h + 12)) abort();
        if ((pos & (cap - 1)) + total > cap || pos + total > write || total % 16) abort();
        pos += total;
    }
    if (pos != write) abort();
    return n;
}

static void write_record(const cairn__ring_area_t *a, uint64_t pos, uint32_t kind,
                         const uint8_t *payload, uint64_t len, uint64_t total)
{
    unsigned char *h = a->data + (pos & (a->capacity - 1));
    uint32_t len_kind = (uint32_t)(kind == 1 ? total - 16 : len) | (kind << 30);
    unsigned char hb[12];
    cairn__put64(hb, cairn__ring_publish_word(a, pos));
    cairn__put32(hb + 8, len_kind);
    uint32_t crc = cairn__crc32c(0, hb, 12);
    if (kind == 0) {
        memcpy(h + 16, payload, len);
        crc = cairn__crc32c(crc, payload, len);
    }
    memcpy(h, hb, 12);
    cairn__put32(h + 12, crc);
}

static void raw_mode(const uint8_t *data, size_t size)
{
    uint64_t file_size = size;
    if (cairn__ring_check_header(data, size, file_size) != 0) return;
    /* A header that passes: recover its data area as the ring would. */
    cairn__ring_area_t a = {calloc(1, cairn__le64(data + 16)), cairn__le64(data + 16), cairn__le64(data + 24)};
    if (!a.data) return;
    memcpy(a.data, data + CAIRN_RING_HEADER_SIZE, size - CAIRN_RING_HEADER_SIZE);
    uint64_t w = cairn__le64(data + 64), r = cairn__le64(data + 128);
    cairn__recovery_t rec;
    cairn__ring_recover(&a, r, &w, 1, &rec);
    walk(&a, r, w, NULL, 0);
    free(a.data);
}

static void built_mode(input_t in)
{
    uint64_t cap = 1ull << (8 + take(&in, 1) % 8); /* 256 B .. 32 KiB */
    unsigned mode = (unsigned)take(&in, 1);
    cairn__ring_area_t a = {calloc(1, cap), cap, (take(&in, 8) & ~1ull) * (mode & 1)};
    if (!a.data) return;
    unsigned char *area = a.data;
    int after_reboot = (mode >> 1) & 1;
    /* Stale bytes from "earlier laps". */
    for (uint64_t i = 0; i < cap && in.n && i < 64; i++) area[i * 7 % cap] = (unsigned char)take(&in, 1);
    uint64_t read = take(&in, 2) * 16;
    uint64_t pos = read;
    uint32_t written[512];
    uint64_t ends[512]; /* the position after each record: the write cursor's values */
    uint64_t n = 0;
    unsigned records = (unsigned)take(&in, 1);
    for (unsigned i = 0; i < records && n < 512; i++) {
        uint64_t len = take(&in, 1) % (cap / 4);
        uint64_t need = (16 + len + 15) / 16 * 16;
        uint64_t room = cap - (pos & (cap - 1));
        uint64_t start = need <= room ? pos : pos + room;
        if (start + need - read > cap) break;
        if (start != pos) write_record(&a, pos, 1, NULL, 0, room);
        uint8_t payload[64 * 1024];
        for (uint64_t k = 0; k < len; k++) payload[k] = (uint8_t)(in.n ? in.p[k % in.n] : k);
        write_record(&a, start, 0, payload, len, need);
        written[n] = (uint32_t)len;
        pos = start + need;
        ends[n++] = pos;
    }
    uint64_t write = pos;
    /* After a reboot, the header may hold an older write cursor, which missed the
     * last few records. */
    uint64_t hidden = after_reboot ? take(&in, 1) % 4 : 0;
    uint64_t header_write = hidden == 0 ? write : hidden <= n - 1 && n > 1 ? ends[n - 1 - hidden] : read;
    unsigned damage = (unsigned)take(&in, 1) % 8;
    for (unsigned d = 0; d < damage; d++) {
        uint64_t at = take(&in, 2) % cap;
        uint8_t x = (uint8_t)take(&in, 1);
        area[at] ^= x ? x : 1;
    }
    cairn__recovery_t rec;
    uint64_t recovered_write = header_write;
    cairn__ring_recover(&a, read, &recovered_write, after_reboot, &rec);
    if (recovered_write < header_write || recovered_write > read + cap) abort();
    uint32_t lens[512];
    uint64_t got = walk(&a, read, recovered_write, lens, 512);
    if (got != rec.recovered) abort();
    if (damage == 0) {
        /* Undamaged: every record comes back, including those the header missed. */
        if (recovered_write != write || got != n || rec.skipped_regions != 0) abort();
        for (uint64_t i = 0; i < n; i++)
            if (lens[i] != written[i]) abort();
    }
    if (after_reboot) {
        /* No word in the free space may pass for a record at its position. */
        for (uint64_t q = recovered_write; q < read + cap; q += 16)
            if (cairn__le64(area + (q & (cap - 1))) == cairn__ring_publish_word(&a, q)) abort();
    }
    free(area);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    if (data[0] & 1) {
        raw_mode(data + 1, size - 1);
    } else {
        input_t in = {data + 1, size - 1};
        built_mode(in);
    }
    return 0;
}
