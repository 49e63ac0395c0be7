/* fuzz_ring.c: libFuzzer target for ring recovery, header repair and the drop table.
 *
 * The first input byte picks a mode:
 *   - raw: a header and a data area taken from the input (its bytes repeated to the
 *     file size the input names) are planned as cairn_ring_open plans them and, when
 *     the plan keeps the file, restored;
 *   - built: records (kinds, lengths and contents) written in the ring format at some
 *     starting position, then damage (byte flips, unpublished records); recovery runs,
 *     and with no damage every record must come back, with its kind;
 *   - repair: a ring file of one to three laps as producers and a consumer leave it
 *     (lap-end padding, unused reserved room, the last reservations torn by dying
 *     producers), then damage to its header (bytes flipped, zeroed, random salt or
 *     cursors, random bytes) or to its length (truncated, extended). Planning and
 *     restoring run as in cairn_ring_open. Every record recovered must be one that was
 *     written, delivered once (nothing invented), the unconsumed ones in order, and
 *     consumed ones only when the read cursor was found damaged; after damage to the
 *     header alone every intact unconsumed record must come back, and after a
 *     truncation every one that lies wholly in what remains;
 *   - drops: random drop table bytes are checked; the table must then hold only
 *     well-formed names, each once, with reported <= counted, and a second check must
 *     change nothing.
 * After a restore, the header must be sound, the window must walk cleanly from the read
 * to the write cursor through valid records and padding only, (after a reboot or a
 * repair) no word in the free space may read as a record header of any lap, and
 * cairn_ring_inspect() of the same bytes must plan as the open planned, count what
 * the restore recovered, and change nothing.
 * Offsets below are docs/FORMATS.md's, written out here on purpose.
 */
#include "cairn_core.h"
#include "cairn_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { F_CAPACITY = 16, F_SALT = 24, F_CRC = 36, F_WRITE = 64, F_READ = 128, F_READ_CHECK = 136, F_DROPS = 1024 };

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

static uint64_t mix(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A record with a payload (data, context or bare) seen by walk(). */
typedef struct {
    uint64_t pos;
    uint32_t len;
    uint32_t kind;
    const unsigned char *payload;
} seen_t;

/* Walks [read, write) the way a consumer does, checking CRCs; returns the number of
 * records with a payload, every kind but padding (storing up to `max` of them), or
 * aborts if the window is not clean. */
static uint64_t walk(const cairn__ring_area_t *a, uint64_t read, uint64_t write, seen_t *seen, uint64_t max)
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
        } else {
            crc = cairn__crc32c(crc, h + 16, len);
            total = (16 + len + 15) / 16 * 16;
            if (seen && n < max) seen[n] = (seen_t){pos, (uint32_t)len, (uint32_t)kind, h + 16};
            n++;
        }
        if (crc != cairn__le32(h + 12)) abort();
        if ((pos & (cap - 1)) + total > cap || pos + total > write || total % 16) abort();
        pos += total;
    }
    if (pos != write) abort();
    return n;
}

/* No word in the free space may read as a record header of its offset, in any lap. */
static void check_free_space(const cairn__ring_area_t *a, uint64_t read, uint64_t write)
{
    for (uint64_t q = write; q < read + a->capacity; q += 16) {
        uint64_t w = cairn__le64(a->data + (q & (a->capacity - 1)));
        if (((w ^ a->salt ^ 1) & (a->capacity - 1)) == (q & (a->capacity - 1))) abort();
    }
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
    if (kind != 1) {
        memcpy(h + 16, payload, len);
        crc = cairn__crc32c(crc, payload, len);
    }
    memcpy(h, hb, 12);
    cairn__put32(h + 12, crc);
}

/* A restored ring in memory: its data area (owned), salt and cursors. */
typedef struct {
    cairn__ring_area_t area;
    uint64_t read, write;
    uint32_t repairs;
    cairn__recovery_t rec;
} restored_t;

/* Restores `plan` over a copy of the file as cairn_ring_open does, checks the header
 * and the window, and returns the data area (NULL for a capacity too large to fuzz). */
static int restore(const unsigned char *hdr, const unsigned char *data, uint64_t avail,
                   const cairn__ring_plan_t *plan, int after_reboot, restored_t *out)
{
    uint64_t cap = plan->capacity;
    if (cap < CAIRN_RING_MIN_CAPACITY || cap > CAIRN_RING_MAX_CAPACITY || (cap & (cap - 1))) abort();
    const uint64_t r = plan->read_pos, w = plan->write_pos;
    if (r % 16 || w % 16 || r > w || w - r > cap || w > (1ull << 62)) abort();
    if (cap > 4 * (uint64_t)CAIRN_RING_MIN_CAPACITY) return 0;
    unsigned char *area = calloc(1, cap);
    if (!area) return 0;
    if (data) memcpy(area, data, avail < cap ? avail : cap);
    unsigned char h[CAIRN_RING_HEADER_SIZE];
    memcpy(h, hdr, sizeof h);
    out->repairs = cairn__ring_restore(h, area, plan, after_reboot, &out->rec);
    out->area = (cairn__ring_area_t){area, cap, cairn__le64(h + F_SALT)};
    out->read = cairn__le64(h + F_READ);
    out->write = cairn__le64(h + F_WRITE);
    if (cairn__crc32c(0, h, F_CRC) != cairn__le32(h + F_CRC) || cairn__le64(h + F_CAPACITY) != cap) abort();
    if (out->read != r || out->write < w || out->write > r + cap) abort();
    if (cairn__le64(h + F_READ_CHECK) != ~out->read) abort();
    if (out->area.salt != plan->salt || (out->repairs & plan->repairs) != plan->repairs) abort();
    if (walk(&out->area, out->read, out->write, NULL, 0) != out->rec.recovered) abort();
    if (after_reboot || plan->repairs) check_free_space(&out->area, out->read, out->write);
    return 1;
}

/* cairn_ring_inspect() over the same file must count what the restore recovered,
 * plan as the open planned, and leave the bytes as they were. */
static void check_inspection(const unsigned char *hdr, uint64_t file_size, const unsigned char *data,
                             uint64_t avail, const cairn__ring_plan_t *plan, const restored_t *r)
{
    const uint32_t before = data ? cairn__crc32c(0, data, avail) : 0;
    cairn_ring_inspection_t in;
    if (cairn__ring_inspect_bytes(hdr, file_size, data, avail, &in) != 0) abort();
    if (in.capacity != plan->capacity || in.read_pos != plan->read_pos || in.repairs != plan->repairs) abort();
    if (in.events + in.contexts != r->rec.recovered || in.contexts != r->rec.contexts) abort();
    if (in.torn_regions != r->rec.skipped_regions || in.torn_bytes != r->rec.skipped_bytes) abort();
    if (in.write_pos != r->write) abort();
    if (data && cairn__crc32c(0, data, avail) != before) abort();
}

static void raw_mode(input_t in)
{
    uint64_t file_size = take(&in, 3) % (CAIRN_RING_HEADER_SIZE + 4 * (uint64_t)CAIRN_RING_MIN_CAPACITY + 64);
    int after_reboot = (int)(take(&in, 1) & 1);
    unsigned char hdr[CAIRN_RING_HEADER_SIZE];
    memset(hdr, 0, sizeof hdr);
    size_t h = in.n < sizeof hdr ? in.n : sizeof hdr;
    memcpy(hdr, in.p, h < file_size ? h : (size_t)file_size);
    in.p += h;
    in.n -= h;
    uint64_t avail = file_size > CAIRN_RING_HEADER_SIZE ? file_size - CAIRN_RING_HEADER_SIZE : 0;
    unsigned char *data = avail ? malloc(avail) : NULL;
    if (avail && !data) return;
    for (uint64_t i = 0; i < avail; i++) data[i] = in.n ? in.p[i % in.n] : 0;
    cairn__ring_plan_t plan;
    restored_t r;
    if (cairn__ring_plan(hdr, file_size, data, avail, &plan) == 0 && restore(hdr, data, avail, &plan, after_reboot, &r)) {
        check_inspection(hdr, file_size, data, avail, &plan, &r);
        free(r.area.data);
    }
    free(data);
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
    uint32_t written[512], kinds[512];
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
        static const uint32_t payload_kinds[] = {CAIRN_RING_KIND_DATA, CAIRN_RING_KIND_CONTEXT, CAIRN_RING_KIND_BARE,
                                                 CAIRN_RING_KIND_BARE};
        uint32_t kind = payload_kinds[len % 4];
        write_record(&a, start, kind, payload, len, need);
        kinds[n] = kind;
        written[n] = (uint32_t)len;
        pos = start + need;
        ends[n++] = pos;
    }
    uint64_t write = pos;
    /* The header may hold an older write cursor, which missed the last few records. */
    uint64_t hidden = take(&in, 1) % 4;
    uint64_t header_write = hidden == 0 ? write : hidden <= n - 1 && n > 1 ? ends[n - 1 - hidden] : read;
    unsigned damage = (unsigned)take(&in, 1) % 8;
    for (unsigned d = 0; d < damage; d++) {
        uint64_t at = take(&in, 2) % cap;
        uint8_t x = (uint8_t)take(&in, 1);
        area[at] ^= x ? x : 1;
    }
    cairn__recovery_t rec;
    uint64_t recovered_write = header_write;
    cairn__ring_recover(&a, read, &recovered_write, after_reboot ? CAIRN__RECOVER_CLEAR_STALE : 0, &rec);
    if (recovered_write < header_write || recovered_write > read + cap) abort();
    seen_t seen[512];
    uint64_t got = walk(&a, read, recovered_write, seen, 512);
    if (got != rec.recovered) abort();
    if (damage == 0) {
        /* Undamaged: every record comes back, with its kind, including those the header
         * missed. */
        if (recovered_write != write || got != n || rec.skipped_regions != 0) abort();
        for (uint64_t i = 0; i < n; i++)
            if (seen[i].len != written[i] || seen[i].kind != kinds[i]) abort();
    }
    if (after_reboot) check_free_space(&a, read, recovered_write);
    free(area);
}

/* ---- repair mode -------------------------------------------------------------- */

#define MAX_RECORDS 4096

typedef struct {
    uint64_t pos;
    uint32_t len;
    int torn;
} record_t;

/* Payloads name their record, so a recovered record can be traced to one written. */
static void fill_payload(unsigned char *p, uint32_t id, uint32_t len)
{
    cairn__put32(p, id);
    for (uint32_t k = 4; k < len; k++) p[k] = (unsigned char)(id * 131u + k * 7u + (id >> 8));
}

static int payload_is(const seen_t *s, const record_t *recs, uint64_t n, uint32_t *id)
{
    if (s->len < 4) return 0;
    *id = cairn__le32(s->payload);
    if (*id >= n || recs[*id].torn || recs[*id].len != s->len) return 0;
    unsigned char want[1024];
    fill_payload(want, *id, s->len);
    return memcmp(want, s->payload, s->len) == 0;
}

static void repair_mode(input_t in)
{
    const uint64_t cap = CAIRN_RING_MIN_CAPACITY, extra_room = 4096;
    uint64_t rng = take(&in, 8);
    const uint64_t salt = take(&in, 8) & ~1ull;
    const unsigned shape = (unsigned)take(&in, 1);
    const unsigned damage = (unsigned)take(&in, 1) % 9;
    const uint64_t start = (take(&in, 3) << 16) | (take(&in, 2) & 0xFFF0);
    /* What the damage hits, decided before the records use up the input. */
    uint64_t hit = take(&in, 8);
    unsigned char *file = calloc(1, CAIRN_RING_HEADER_SIZE + cap + extra_room);
    record_t *recs = calloc(MAX_RECORDS, sizeof *recs);
    if (!file || !recs) goto done;
    unsigned char *data = file + CAIRN_RING_HEADER_SIZE;
    cairn__ring_area_t a = {data, cap, salt};
    /* A file reused from an earlier life holds old bytes; a fresh one, zeros. */
    if (shape & 1)
        for (uint64_t i = 0; i < cap; i += 8) cairn__put64(data + i, mix(&rng));

    /* Producers and a consumer, one lap to three: records named by their index. */
    const uint64_t target = cap * (1 + (shape >> 1) % 3);
    uint64_t write = start, read = start, oldest = 0, n = 0;
    unsigned char payload[1024];
    while (write - start < target && n < MAX_RECORDS) {
        uint32_t len = 4 + (uint32_t)((in.n ? take(&in, 1) * 3 : mix(&rng)) % 700);
        uint64_t slack = mix(&rng) % 4 == 0 ? 16 * (mix(&rng) % 3 + 1) : 0;
        uint64_t used = (16 + len + 15) / 16 * 16, need = used + slack;
        uint64_t room = cap - (write & (cap - 1));
        uint64_t at = need <= room ? write : write + room;
        while (at + need - read > cap) read = ++oldest < n ? recs[oldest].pos : at;
        if (at != write) write_record(&a, write, 1, NULL, 0, room);
        fill_payload(payload, (uint32_t)n, len);
        write_record(&a, at, 0, payload, len, used);
        if (slack) write_record(&a, at + used, 1, NULL, 0, slack);
        recs[n++] = (record_t){at, len, 0};
        write = at + need;
    }
    /* The consumer took some more, never past a record not yet published. */
    const uint64_t torn = (shape >> 3) & 3;
    uint64_t consumable = n - oldest > torn ? n - oldest - torn : 0;
    uint64_t more = consumable ? mix(&hit) % (consumable + 1) : 0;
    oldest += more;
    read = oldest < n ? recs[oldest].pos : write;
    /* The last reservations were torn: producers killed before publishing them. */
    for (uint64_t i = n > torn ? n - torn : 0; i < n; i++) {
        if (recs[i].pos < read) continue;
        recs[i].torn = 1;
        cairn__put64(data + (recs[i].pos & (cap - 1)), mix(&rng));
    }
    const int has_check = !(shape & 4);
    memcpy(file, "CAIRNRNG", 8);
    cairn__put32(file + 8, 1 + ((shape >> 5) & 1)); /* version 1 files are read as they are */
    cairn__put32(file + 12, CAIRN_RING_HEADER_SIZE);
    cairn__put64(file + F_CAPACITY, cap);
    cairn__put64(file + F_SALT, salt);
    cairn__put32(file + F_CRC, cairn__crc32c(0, file, F_CRC));
    cairn__put64(file + F_WRITE, write);
    cairn__put64(file + F_READ, read);
    cairn__put64(file + F_READ_CHECK, has_check ? ~read : 0);

    /* Damage. */
    uint64_t file_size = CAIRN_RING_HEADER_SIZE + cap;
    int header_only = 1, lost_read = 0;
    switch (damage) {
    case 0:
    case 8:
        for (uint64_t f = mix(&hit) % 3 + 1; f > 0; f--) {
            uint8_t x = (uint8_t)mix(&hit);
            file[mix(&hit) % 64] ^= x ? x : 0x10;
        }
        if (damage == 8) {
            file_size = mix(&hit) % file_size;
            header_only = 0;
        }
        break;
    case 1: memset(file, 0, CAIRN_RING_HEADER_SIZE); break;
    case 2: cairn__put64(file + F_SALT, mix(&rng)); break;
    case 3:
        cairn__put64(file + F_WRITE, mix(&rng));
        cairn__put64(file + F_READ, mix(&rng));
        cairn__put64(file + F_READ_CHECK, mix(&rng));
        break;
    case 4: {
        static const int cursor_bytes[] = {64, 65, 66, 67, 68, 69, 70, 71, 128, 129, 130, 131, 132,
                                           133, 134, 135, 136, 137, 138, 139, 140, 141, 142, 143};
        int at = cursor_bytes[mix(&hit) % 24];
        uint8_t x = (uint8_t)mix(&hit);
        file[at] ^= x ? x : 0x10;
        /* Without its check copy, a read cursor damaged into another plausible value
         * cannot be told from a real one. */
        lost_read = !has_check && at >= 128 && at < 136;
        break;
    }
    case 5:
        file_size = mix(&hit) % file_size;
        header_only = 0;
        break;
    case 6:
        file_size += mix(&hit) % extra_room + 1;
        for (uint64_t i = CAIRN_RING_HEADER_SIZE + cap; i < file_size; i++) file[i] = (unsigned char)mix(&rng);
        break;
    default:
        for (uint64_t i = 0; i < CAIRN_RING_HEADER_SIZE; i += 8) cairn__put64(file + i, mix(&rng));
        break;
    }
    if (file_size < CAIRN_RING_HEADER_SIZE) memset(file + file_size, 0, CAIRN_RING_HEADER_SIZE - file_size);
    const uint64_t avail = file_size > CAIRN_RING_HEADER_SIZE ? file_size - CAIRN_RING_HEADER_SIZE : 0;

    cairn__ring_plan_t plan;
    int rc = cairn__ring_plan(file, file_size, avail ? data : NULL, avail, &plan);
    /* A newer version needs a header that checks out; nothing can be trusted only when
     * no record survives, and header damage leaves the records. */
    if (rc == CAIRN_EVERSION || (rc != 0 && header_only && n > 0)) abort();
    restored_t r;
    if (rc != 0 || !restore(file, data, avail, &plan, (int)(mix(&hit) & 1), &r)) goto done;
    if (damage == 6 && !(plan.repairs & CAIRN_RING_REPAIR_FILE_SIZE)) abort();
    check_inspection(file, file_size, avail ? data : NULL, avail, &plan, &r);

    seen_t seen[MAX_RECORDS];
    uint64_t got = walk(&r.area, r.read, r.write, seen, MAX_RECORDS);
    char *found = calloc(n ? n : 1, 1);
    if (!found) goto freed;
    uint32_t id;
    int64_t last = -1;
    for (uint64_t i = 0; i < got && i < MAX_RECORDS; i++) {
        /* Nothing invented, nothing twice, the unconsumed in order. (With the read
         * cursor lost, consumed records may come back, and a stale one can pass for
         * the newest when the newest were torn.) */
        if (!payload_is(&seen[i], recs, n, &id) || found[id]) abort();
        found[id] = 1;
        if (recs[id].pos < read) {
            if (!lost_read && !(plan.repairs & (CAIRN_RING_REPAIR_WINDOW_INFERRED | CAIRN_RING_REPAIR_READ_POS)))
                abort();
            continue;
        }
        if ((int64_t)id <= last) abort();
        last = id;
    }
    for (uint64_t i = 0; i < n; i++) {
        if (recs[i].torn || recs[i].pos < read || lost_read) continue;
        uint64_t off = recs[i].pos & (cap - 1);
        int whole = off + 16 + recs[i].len <= avail;
        if ((header_only || (damage == 5 && whole)) && !found[i]) abort();
    }
    free(found);
freed:
    free(r.area.data);
done:
    free(recs);
    free(file);
}

/* ---- drops mode --------------------------------------------------------------- */

static void drops_mode(input_t in)
{
    unsigned char hdr[CAIRN_RING_HEADER_SIZE];
    memset(hdr, 0, sizeof hdr);
    /* Slots are either random bytes or near-valid ones: a name, a claim word whose
     * state, length or CRC may be off, counts in any order. */
    for (int i = 0; i < CAIRN_RING_DROP_SLOTS && in.n; i++) {
        unsigned char *s = hdr + F_DROPS + 48 * i;
        unsigned how = (unsigned)take(&in, 1);
        if (how % 4 == 0) {
            for (int k = 0; k < 48; k++) s[k] = (unsigned char)take(&in, 1);
            continue;
        }
        if (how % 4 == 1) continue;
        static const char *names[] = {"sampled", "filtered", "ring_full", "other", "unknown", "x"};
        const char *name = names[(how >> 2) % 6];
        size_t len = strlen(name);
        memcpy(s + 24, name, len);
        uint64_t claim = (uint64_t)cairn__crc32c(0, name, len) << 32 | (uint64_t)len << 8 | (1 + (how >> 5) % 2);
        claim ^= (how & 0x80) ? take(&in, 8) : 0;
        cairn__put64(s + 16, claim);
        cairn__put64(s, take(&in, 2));
        cairn__put64(s + 8, take(&in, 2));
    }
    cairn__ring_check_drops(hdr);
    for (int i = 0; i < CAIRN_RING_DROP_SLOTS; i++) {
        const unsigned char *s = hdr + F_DROPS + 48 * i;
        uint64_t claim = cairn__le64(s + 16);
        if (claim == 0) {
            for (int k = 0; k < 48; k++)
                if (s[k]) abort(); /* a free slot is all zero */
            continue;
        }
        size_t len = (claim >> 8) & 0xFF;
        if ((claim & 0xFF) != 2 || len == 0 || len > 23 || (claim & 0xFFFF0000u)) abort();
        for (size_t k = 0; k < 24; k++) {
            char c = (char)s[24 + k];
            if (k < len ? !((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_') : c != 0) abort();
        }
        if ((uint32_t)(claim >> 32) != cairn__crc32c(0, s + 24, len)) abort();
        if (cairn__le64(s + 8) > cairn__le64(s)) abort();
        int is_other = len == 5 && memcmp(s + 24, "other", 5) == 0;
        if (is_other != (i == CAIRN_RING_DROP_OTHER)) abort();
        for (int j = 0; j < i; j++)
            if (memcmp(hdr + F_DROPS + 48 * j + 16, s + 16, 32) == 0) abort();
    }
    if (cairn__ring_check_drops(hdr) != 0) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    input_t in = {data + 1, size - 1};
    switch (data[0] % 4) {
    case 0: raw_mode(in); break;
    case 1: built_mode(in); break;
    case 2: repair_mode(in); break;
    default: drops_mode(in); break;
    }
    return 0;
}
