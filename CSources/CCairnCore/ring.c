/* ring.c: the file-backed, memory-mapped ring buffer (docs/FORMATS.md, "Ring file").
 *
 * Design
 * ------
 * Positions are absolute byte offsets that only grow; a position's place in the data
 * area is `pos & (capacity - 1)`. The header holds two cursors: `write_pos` (the end
 * of the last reservation) and `read_pos` (the oldest unconsumed record).
 *
 * Producers reserve with a compare-and-swap on write_pos, checking free space against
 * read_pos; a record never straddles the end of the data area, so a reservation that
 * would is preceded by a padding record filling the rest of the lap. A producer then
 * writes the record header's length and CRC, copies the payload, and publishes by
 * storing the record's publish word, (position | 1) XOR the file's salt, in the
 * header's first word with release order.
 *
 * The consumer reads a record at position P only when that word is P's (acquire), so
 * it never sees a half-written record: a header left from an earlier lap carries an
 * earlier position, and a fresh file's zeros never match. A record whose producer died
 * before publishing stays unpublished; at the next open, recovery walks the unconsumed
 * window, and where a record is not valid it looks for the next valid header (word
 * and CRC), rewrites the gap as padding, and counts it. CRC work during recovery is
 * budgeted, so no file makes open slow. Records that follow one another from the
 * write cursor are taken in: within one boot the page cache holds every byte written
 * through the mapping, so only damage can put them there, but after a reboot (the
 * boot id in the header differs) the header may be older than the data pages. After a
 * reboot recovery also clears stale words that producers might otherwise reuse.
 *
 * Every file read back is untrusted. A record's CRC covers its stored publish word, so
 * it proves the record intact with neither the salt nor the position known. When the
 * header is damaged, open finds such records by scanning the data area and rebuilds
 * what was lost: the capacity from the file size; the salt from the records' words
 * (each is the salt XOR its position, so records of one lap agree, and two adjacent
 * laps fix the salt up to a shift of every position, which reads the same); the
 * cursors from the highest record, one capacity below it. Each way of reading the
 * file is scored by the intact records it explains and the best one wins; what the
 * header still says (salt, cursors) wins ties. A truncated file is extended with
 * zeros, which read as no record. After any repair (or a reboot), every word outside
 * the window's records that reads as a publish word of its offset, in any lap, is
 * cleared, so no stale header can be taken for a record a producer has yet to
 * publish. Only a file in which nothing checks out is set aside.
 *
 * Records have a kind: data, padding, context and bare (version 2; a version 1 file
 * holds the first two and is upgraded when opened). Only padding has no payload; the
 * ring gives the others no meaning, it stores and returns them in order with their kind
 * (what a context record means to the bare records after it is the consumer's
 * business).
 *
 * The read cursor has a check copy (its complement) beside it, written by the same
 * consumer: a damaged cursor would otherwise silently skip records. Where they
 * disagree the lower one wins, so damage repeats records rather than losing them.
 *
 * The header also holds the drop table: named counters that producers bump with one
 * atomic add and that outlive the process. A slot is claimed by a CAS on its claim
 * word, which carries the name's length and CRC: a thread meeting a claim in progress
 * for its own name finishes it (the same bytes) rather than waiting for a thread that
 * may never run again, so claiming is lock-free and signal-safe and every name gets one
 * slot. A claim cut short by a kill is finished, or renamed `unknown` with its counts
 * kept, at the next open.
 *
 * The mapping is MAP_SHARED over a file whose blocks are allocated at creation, so a
 * published record survives the process being killed, and writes cannot SIGBUS on a
 * full disk. Counters that producers update live on the producer's cache line, next
 * to write_pos, which a successful CAS has just brought into this core's cache.
 */
#include "cairn_core.h"
#include "cairn_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; older kernels answer EINVAL */
#endif

/* Header layout (byte offsets). Bytes 0..35 are fixed at creation and covered by
 * the header CRC; the boot id, cursors, counters and drop table after them change. */
enum {
    H_MAGIC = 0,          /* 8 bytes "CAIRNRNG" */
    H_VERSION = 8,        /* u32 */
    H_HEADER_SIZE = 12,   /* u32, CAIRN_RING_HEADER_SIZE */
    H_CAPACITY = 16,      /* u64, power of two */
    H_SALT = 24,          /* u64, random, bit 0 clear: XORed into publish words */
    H_FLAGS = 32,         /* u32, 0 */
    H_CRC = 36,           /* u32, CRC32C of bytes 0..35 */
    H_BOOT_ID = 40,       /* 16 bytes: the boot the ring was last opened in */
    H_WRITE_POS = 64,     /* u64, producer cache line */
    H_APPENDED = 72,      /* u64 */
    H_HIGH_WATER = 80,    /* u64 */
    H_READ_POS = 128,     /* u64, consumer cache line */
    H_READ_CHECK = 136,   /* u64, ~read position; 0 when absent (an older writer) */
    H_DROPPED_FULL = 192, /* u64, cold line */
    H_DROPPED_BIG = 200,  /* u64 */
    H_DROPS = 1024,       /* the drop table, to the end of the header */
};

/* A drop table slot: u64 counted, u64 reported, u64 claim word, 24 bytes of name. The
 * claim word is the state (bits 0..7), the name's length (bits 8..15) and its CRC32C
 * (bits 32..63); a free slot is all zero. */
enum { D_COUNTED = 0, D_REPORTED = 8, D_CLAIM = 16, D_NAME = 24, DROP_SLOT_SIZE = 48 };
#define CLAIM_CLAIMING 1u /* claimed, name being written */
#define CLAIM_NAMED 2u    /* name complete */
#define CLAIM_STATE(c) ((c) & 0xFFu)
_Static_assert(H_DROPS + CAIRN_RING_DROP_SLOTS * DROP_SLOT_SIZE == CAIRN_RING_HEADER_SIZE,
               "the drop table fills the rest of the header");

static const char ring_magic[8] = {'C', 'A', 'I', 'R', 'N', 'R', 'N', 'G'};

/* Record header: u64 publish word, u32 length|kind, u32 CRC32C over header bytes
 * 0..11 then (for data records) the payload. The publish word is the record's
 * position with bit 0 set, XORed with the file's salt. Positions are multiples of 16,
 * so a word from an earlier lap never matches, neither does the zero of a fresh file
 * (which would otherwise pass for a record published at position 0), and the salt
 * keeps payload bytes that happen to hold a position from passing for a header. */
#define KIND_SHIFT 30
#define LEN_MASK ((1u << KIND_SHIFT) - 1)
#define KIND_DATA CAIRN_RING_KIND_DATA
#define KIND_PADDING CAIRN_RING_KIND_PADDING
/* Every kind but padding has a payload that its CRC covers (data, context, bare). */
#define HAS_PAYLOAD(len_kind) (((len_kind) >> KIND_SHIFT) != KIND_PADDING)
/* Version 1 files hold data and padding only; version 2 added context and bare
 * records. A version 1 file is read as it is and becomes version 2 when reopened. */
#define OLDEST_VERSION 1u
static int version_known(uint32_t v) { return v >= OLDEST_VERSION && v <= CAIRN_RING_FORMAT_VERSION; }

/* The repair bits that name a header field. */
#define HEADER_FIELD_REPAIRS                                                                     \
    (CAIRN_RING_REPAIR_MAGIC | CAIRN_RING_REPAIR_VERSION | CAIRN_RING_REPAIR_HEADER_SIZE |       \
     CAIRN_RING_REPAIR_CAPACITY | CAIRN_RING_REPAIR_SALT | CAIRN_RING_REPAIR_FLAGS |             \
     CAIRN_RING_REPAIR_HEADER_CRC | CAIRN_RING_REPAIR_WRITE_POS | CAIRN_RING_REPAIR_READ_POS)

/* Largest position accepted in a file: far beyond what a ring writes in centuries
 * (2^62 bytes), and low enough that position arithmetic can never overflow. */
#define MAX_POSITION (1ull << 62)
/* Recovery computes CRCs over at most this many capacities' worth of bytes, so a
 * damaged or hostile file cannot make open quadratic in the capacity. */
#define RECOVERY_CRC_BUDGET 4u

struct cairn_ring {
    unsigned char *map;  /* whole file */
    cairn__ring_area_t area; /* data area (map + CAIRN_RING_HEADER_SIZE), capacity, salt */
    uint64_t *write_pos, *read_pos, *read_check;
    uint64_t *appended, *high_water, *dropped_full, *dropped_big;
    uint64_t mask;
    size_t map_len;
    uint32_t max_record;
    uint32_t reclaim_bytes;
    size_t page_size;
    int fd;
    /* Drop table slots of the ring's own refusals, claimed at the first one (-1). */
    int slot_full, slot_big;
    /* Consumer-only state. */
    uint64_t peeked_to;    /* furthest `next` handed out by peek */
    uint64_t reclaimed_to; /* pages before this position have been dropped */
    uint64_t populated_to; /* pages before this position have been prefaulted */
    uint64_t managed_head; /* the write position at the last commit, for the runway */
    uint64_t runway;       /* the last runway's length */
    int populate_failed;   /* the kernel lacks MADV_POPULATE_WRITE */
    /* Set at open. */
    cairn__recovery_t recovery;
    uint32_t origin;
    uint32_t repairs;
    uint32_t drop_slots_repaired;
    uint64_t restored_bytes, cut_bytes;
    /* Each drop slot's `counted` when this handle opened the ring: what earlier opens counted. */
    uint64_t counted_at_open[CAIRN_RING_DROP_SLOTS];
};

static inline uint64_t align_up(uint64_t v) { return (v + (CAIRN_RING_ALIGN - 1)) & ~(uint64_t)(CAIRN_RING_ALIGN - 1); }
static inline uint64_t load_acq(const uint64_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static inline void store_rel(uint64_t *p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
static inline void count(uint64_t *p) { __atomic_fetch_add(p, 1, __ATOMIC_RELAXED); }
static inline uint64_t *word_at(const cairn__ring_area_t *a, uint64_t pos)
{
    return (uint64_t *)(a->data + (pos & (a->capacity - 1)));
}

static uint32_t header_crc(const cairn__ring_area_t *a, uint32_t len_kind, uint64_t pos)
{
    return cairn__crc32c_after(cairn__ring_publish_word(a, pos), len_kind, NULL, 0);
}

/* Writes a published padding record of `total` bytes (header included) at `pos`. */
static void write_padding(const cairn__ring_area_t *a, uint64_t pos, uint64_t total)
{
    unsigned char *h = (unsigned char *)word_at(a, pos);
    uint32_t len_kind = (uint32_t)(total - CAIRN_RING_RECORD_HEADER) | (KIND_PADDING << KIND_SHIFT);
    cairn__put32(h + 8, len_kind);
    cairn__put32(h + 12, header_crc(a, len_kind, pos));
    store_rel((uint64_t *)h, cairn__ring_publish_word(a, pos));
}

/* Fills [from, to) with padding records, one per lap. */
static void fill_padding(const cairn__ring_area_t *a, uint64_t from, uint64_t to)
{
    while (from < to) {
        uint64_t lap_end = (from | (a->capacity - 1)) + 1;
        uint64_t end = to < lap_end ? to : lap_end;
        write_padding(a, from, end - from);
        from = end;
    }
}

/* Size of a record (header, payload, alignment) from its length-and-kind word, or 0
 * for a word no writer produces: padding of a length that is not a multiple of 16.
 * All four kinds are known: data, padding, context and bare. */
static uint64_t record_size(uint32_t len_kind)
{
    uint64_t len = len_kind & LEN_MASK;
    if (HAS_PAYLOAD(len_kind)) return align_up(CAIRN_RING_RECORD_HEADER + len);
    if (len % CAIRN_RING_ALIGN == 0) return CAIRN_RING_RECORD_HEADER + len;
    return 0;
}

/* Is there a complete, valid record at `pos`, ending at or before `limit`? On success
 * stores its total size (header, payload, alignment) in *total. With a CRC budget,
 * checks the CRC and charges the bytes it covered; *crc_budget == 0 fails the check. */
static int valid_record_at(const cairn__ring_area_t *a, uint64_t pos, uint64_t limit,
                           uint64_t *crc_budget, uint64_t *total, uint32_t *len_kind_out)
{
    uint64_t off = pos & (a->capacity - 1);
    const unsigned char *h = a->data + off;
    if (load_acq((const uint64_t *)h) != cairn__ring_publish_word(a, pos)) return 0;
    uint32_t len_kind = cairn__le32(h + 8);
    uint64_t size = record_size(len_kind);
    if (size == 0 || size > a->capacity - off || pos > limit || size > limit - pos) return 0;
    if (crc_budget) {
        uint64_t covered = HAS_PAYLOAD(len_kind) ? (len_kind & LEN_MASK) : 0;
        if (*crc_budget < covered + 12) {
            *crc_budget = 0;
            return 0;
        }
        *crc_budget -= covered + 12;
        uint32_t crc = cairn__crc32c_after(cairn__ring_publish_word(a, pos), len_kind,
                                           h + CAIRN_RING_RECORD_HEADER, covered);
        if (crc != cairn__le32(h + 12)) return 0;
    }
    *total = size;
    *len_kind_out = len_kind;
    return 1;
}

/* Clears the word at `pos` when it reads as a publish word of pos's offset in any lap. */
static void clear_if_header(const cairn__ring_area_t *a, uint64_t pos)
{
    uint64_t *w = word_at(a, pos);
    if (((*w ^ a->salt ^ 1) & (a->capacity - 1)) == (pos & (a->capacity - 1))) *w = 0;
}

/* Clears every word outside the records of the clean window [read, write) that could
 * pass for a record header: inside padding, and in the free space. A stale header
 * there carries an old position; but after a repair the salt may be the true one
 * shifted by some laps, and then an old header can read as a future position. */
static void clear_stale(const cairn__ring_area_t *a, uint64_t read, uint64_t write)
{
    uint64_t pos = read, total;
    uint32_t len_kind;
    while (pos < write && valid_record_at(a, pos, write, NULL, &total, &len_kind)) {
        if ((len_kind >> KIND_SHIFT) == KIND_PADDING)
            for (uint64_t q = pos + CAIRN_RING_ALIGN; q < pos + total; q += CAIRN_RING_ALIGN) clear_if_header(a, q);
        pos += total;
    }
    for (uint64_t q = write; q < read + a->capacity; q += CAIRN_RING_ALIGN) clear_if_header(a, q);
}

int cairn__ring_recover(const cairn__ring_area_t *a, uint64_t read_pos, uint64_t *write_pos,
                        int flags, cairn__recovery_t *out)
{
    const int writes = !(flags & CAIRN__RECOVER_READ_ONLY);
    memset(out, 0, sizeof *out);
    uint64_t budget = RECOVERY_CRC_BUDGET * a->capacity;
    const uint64_t limit = read_pos + a->capacity;
    uint64_t write = *write_pos, pos = read_pos, total;
    uint32_t len_kind;
    for (;;) {
        if (pos >= write) {
            /* Records that follow one another from the write cursor are real: the kernel
             * wrote the header back before them (a reboot), or the cursor was damaged.
             * Nothing else can have published a record at a position not yet reached. */
            if (pos >= limit || !valid_record_at(a, pos, limit, &budget, &total, &len_kind)) break;
            if (HAS_PAYLOAD(len_kind)) {
                out->recovered++;
                out->taken_in++;
                if ((len_kind >> KIND_SHIFT) == CAIRN_RING_KIND_CONTEXT) out->contexts++;
            }
            pos += total;
            write = pos;
            continue;
        }
        if (valid_record_at(a, pos, limit, &budget, &total, &len_kind)) {
            if (HAS_PAYLOAD(len_kind)) out->recovered++;
            if ((len_kind >> KIND_SHIFT) == CAIRN_RING_KIND_CONTEXT) out->contexts++;
            pos += total;
            if (pos > write) write = pos; /* a damaged write cursor pointed inside it */
            continue;
        }
        /* Torn or damaged: the next valid header is where the data resumes. Each
         * candidate is looked at once and CRCs are budgeted, so this is linear. */
        uint64_t next = pos + CAIRN_RING_ALIGN;
        while (next < write && budget > 0 && !valid_record_at(a, next, limit, &budget, &total, &len_kind))
            next += CAIRN_RING_ALIGN;
        if (next > write || budget == 0) next = write;
        if (writes) fill_padding(a, pos, next);
        out->skipped_regions++;
        out->skipped_bytes += next - pos;
        pos = next;
    }
    if (writes && (flags & CAIRN__RECOVER_CLEAR_STALE)) clear_stale(a, read_pos, write);
    *write_pos = write;
    return 0;
}

/* ---- Repairing a damaged header ---------------------------------------------- */

static int capacity_ok(uint64_t c)
{
    return c >= CAIRN_RING_MIN_CAPACITY && c <= CAIRN_RING_MAX_CAPACITY && (c & (c - 1)) == 0;
}

/* Do the cursors describe a window of a ring of `cap` bytes? */
static int cursors_ok(uint64_t read, uint64_t write, uint64_t cap)
{
    return read % CAIRN_RING_ALIGN == 0 && write % CAIRN_RING_ALIGN == 0 && read <= write &&
           write - read <= cap && write <= MAX_POSITION;
}

/* The smallest capacity holding `want` bytes, within the accepted range. */
static uint64_t round_capacity(uint64_t want)
{
    uint64_t cap = CAIRN_RING_MIN_CAPACITY;
    while (cap < want && cap < CAIRN_RING_MAX_CAPACITY) cap <<= 1;
    return cap;
}

/* Writes the fixed part of a header (bytes 0..39): constants, capacity, salt, CRC. */
static void put_fixed(unsigned char *h, uint32_t version, uint64_t capacity, uint64_t salt)
{
    memcpy(h + H_MAGIC, ring_magic, sizeof ring_magic);
    cairn__put32(h + H_VERSION, version);
    cairn__put32(h + H_HEADER_SIZE, CAIRN_RING_HEADER_SIZE);
    cairn__put64(h + H_CAPACITY, capacity);
    cairn__put64(h + H_SALT, salt);
    cairn__put32(h + H_FLAGS, 0);
    cairn__put32(h + H_CRC, cairn__crc32c(0, h, H_CRC));
}

/* The most frequent keys of a stream, in constant space (Misra-Gries): a key making
 * up more than 1/(HEAVY_SLOTS + 1) of the stream is sure to be kept. */
#define HEAVY_SLOTS 8
typedef struct {
    uint64_t key[HEAVY_SLOTS];
    uint64_t count[HEAVY_SLOTS];
} heavy_t;

static void heavy_add(heavy_t *h, uint64_t key)
{
    int empty = -1;
    for (int i = 0; i < HEAVY_SLOTS; i++) {
        if (h->count[i] && h->key[i] == key) {
            h->count[i]++;
            return;
        }
        if (!h->count[i] && empty < 0) empty = i;
    }
    if (empty >= 0) {
        h->key[empty] = key;
        h->count[empty] = 1;
        return;
    }
    for (int i = 0; i < HEAVY_SLOTS; i++) h->count[i]--;
}

/* Copies up to `max` kept keys, most counted first; returns how many. */
static int heavy_top(const heavy_t *h, uint64_t *keys, int max)
{
    heavy_t t = *h;
    int n = 0;
    while (n < max) {
        int best = -1;
        for (int i = 0; i < HEAVY_SLOTS; i++)
            if (t.count[i] && (best < 0 || t.count[i] > t.count[best])) best = i;
        if (best < 0) break;
        keys[n++] = t.key[best];
        t.count[best] = 0;
    }
    return n;
}

/* The records of a data area found by their checksums alone. */
typedef struct {
    const unsigned char *data;
    uint64_t capacity;    /* the ring's, a power of two */
    uint64_t end;         /* bytes of data area the file holds, at most the capacity */
    uint64_t *starts;     /* bit i set: an intact record starts at offset 16 * i */
    size_t words;
    uint64_t data_records;
    heavy_t laps;         /* word ^ (offset | 1) per record: the salt XOR the record's lap */
} scan_t;

/* Is there a record at data offset `off` whose CRC holds (the CRC covers the stored
 * publish word, so neither salt nor position is needed), ending by `s->end`? */
static int intact_at(const scan_t *s, uint64_t off, uint64_t *budget, uint64_t *size, int *is_data)
{
    if (s->end - off < CAIRN_RING_RECORD_HEADER) return 0;
    const unsigned char *h = s->data + off;
    uint32_t len_kind = cairn__le32(h + 8);
    uint64_t sz = record_size(len_kind);
    if (sz == 0 || sz > s->end - off) return 0;
    int data_kind = HAS_PAYLOAD(len_kind);
    uint64_t covered = data_kind ? (len_kind & LEN_MASK) : 0;
    if (*budget < covered + 12) {
        *budget = 0;
        return 0;
    }
    *budget -= covered + 12;
    if (cairn__crc32c_after(cairn__le64(h), len_kind, h + CAIRN_RING_RECORD_HEADER, covered) !=
        cairn__le32(h + 12))
        return 0;
    *size = sz;
    *is_data = data_kind;
    return 1;
}

/* Finds the intact records. An intact data record is skipped whole: a later record
 * starting inside it would have overwritten some of its bytes. Padding is not (its
 * content was never written, so older records can lie inside it). CRC work is
 * budgeted like recovery's. */
static void scan(scan_t *s)
{
    uint64_t budget = RECOVERY_CRC_BUDGET * s->capacity, off = 0, size = 0;
    int is_data = 0;
    while (off + CAIRN_RING_RECORD_HEADER <= s->end && budget > 0) {
        if (!intact_at(s, off, &budget, &size, &is_data)) {
            off += CAIRN_RING_ALIGN;
            continue;
        }
        uint64_t i = off / CAIRN_RING_ALIGN;
        s->starts[i / 64] |= 1ull << (i % 64);
        heavy_add(&s->laps, cairn__le64(s->data + off) ^ (off | 1));
        if (is_data) s->data_records++;
        off += is_data ? size : CAIRN_RING_ALIGN;
    }
}

typedef struct {
    const scan_t *s;
    size_t word;
    uint64_t bits;
} scan_iter_t;

static scan_iter_t scan_begin(const scan_t *s)
{
    scan_iter_t it = {s, 0, s->words ? s->starts[0] : 0};
    return it;
}

/* The offset of the next intact record, in offset order; 0 when there is none. */
static int scan_next(scan_iter_t *it, uint64_t *off)
{
    while (it->bits == 0) {
        if (it->word + 1 >= it->s->words) return 0;
        it->bits = it->s->starts[++it->word];
    }
    unsigned bit = (unsigned)__builtin_ctzll(it->bits);
    it->bits &= it->bits - 1;
    *off = ((uint64_t)it->word * 64 + bit) * CAIRN_RING_ALIGN;
    return 1;
}

/* The position of the intact record at `off` under `salt`, or UINT64_MAX when its
 * publish word does not fit its offset (or lies beyond any position a ring reaches). */
static uint64_t position_of(const scan_t *s, uint64_t off, uint64_t salt)
{
    uint64_t p = cairn__le64(s->data + off) ^ salt ^ 1;
    if ((p & (s->capacity - 1)) != off || p > MAX_POSITION - s->capacity) return UINT64_MAX;
    return p;
}

static uint64_t size_at(const scan_t *s, uint64_t off) { return record_size(cairn__le32(s->data + off + 8)); }
static int data_at(const scan_t *s, uint64_t off) { return HAS_PAYLOAD(cairn__le32(s->data + off + 8)); }

/* A way to read a file whose header cannot be taken as it is: a salt, and the laps
 * whose records count. Its positions are the header's (`anchored`) when the salt is
 * the stored one or was voted from the header's write position; a salt inferred from
 * lap groups shifts every position by whole laps. */
typedef struct {
    uint64_t salt;
    int anchored;
    uint64_t lap_lo, lap_hi;
} reading_t;

/* What a reading explains: the intact records in the capacity before the end of its
 * highest record. Under the right reading the records there (with the tail of one
 * that starts before) tile the data area but for torn regions, so the reading that
 * covers the most bytes is preferred: a stale record left inside padding can raise a
 * wrong reading's record count, but not its bytes past the right one's. */
typedef struct {
    uint64_t bytes;   /* bytes of the window covered by records, data and padding */
    uint64_t records; /* data records starting in the window */
    uint64_t first;   /* position of the first record, or `end` */
    uint64_t end;
} window_t;

static int in_laps(const scan_t *s, const reading_t *r, uint64_t p)
{
    uint64_t lap = p / s->capacity;
    return lap >= r->lap_lo && lap <= r->lap_hi;
}

static window_t evaluate(const scan_t *s, const reading_t *r)
{
    window_t w = {0, 0, 0, 0};
    uint64_t off, p, end = 0;
    scan_iter_t it = scan_begin(s);
    while (scan_next(&it, &off))
        if ((p = position_of(s, off, r->salt)) != UINT64_MAX && in_laps(s, r, p) && p + size_at(s, off) > end)
            end = p + size_at(s, off);
    uint64_t lo = end > s->capacity ? end - s->capacity : 0;
    w.end = end;
    w.first = end;
    it = scan_begin(s);
    while (scan_next(&it, &off)) {
        p = position_of(s, off, r->salt);
        if (p == UINT64_MAX || p >= end || p + size_at(s, off) <= lo || !in_laps(s, r, p)) continue;
        w.bytes += p + size_at(s, off) - (p > lo ? p : lo);
        if (p < lo) continue;
        if (p < w.first) w.first = p;
        if (data_at(s, off)) w.records++;
    }
    return w;
}

/* The salt that the header's write position implies: each record in the capacity
 * before it has the one position there that fits its offset, and word ^ (position |
 * 1) is the salt; the value most records give. Returns 0 when no record gives one. */
static int vote_salt(const scan_t *s, uint64_t write, uint64_t *salt)
{
    heavy_t votes;
    memset(&votes, 0, sizeof votes);
    uint64_t lo = write > s->capacity ? write - s->capacity : 0, off;
    scan_iter_t it = scan_begin(s);
    while (scan_next(&it, &off)) {
        uint64_t p = lo + ((off - lo) & (s->capacity - 1));
        if (p >= write) continue;
        uint64_t v = cairn__le64(s->data + off) ^ (p | 1);
        if (!(v & 1)) heavy_add(&votes, v);
    }
    return heavy_top(&votes, salt, 1);
}

/* Readings from the lap groups. Records of one lap share word ^ (offset | 1): the salt
 * XOR the lap's first position. Each of the two largest groups is read as lap 0 alone,
 * and with each of its partner groups: a group whose value differs from it as laps L
 * and L + 1 do (the lowest such L), read as those two laps in either order. Positions
 * then differ from the true ones by whole laps, all in step. Partners are counted
 * exactly and tried most numerous first, up to MAX_PARTNERS: a lap that has just
 * begun may hold fewer records than older laps left inside padding, so all are
 * scored rather than the largest taken. Returns how many readings it added. */
#define MAX_PARTNERS 6
static int lap_readings(const scan_t *s, reading_t *out)
{
    const uint64_t cap = s->capacity;
    const unsigned shift = (unsigned)__builtin_ctzll(cap);
    uint64_t keys[2], off;
    int n = 0, k = heavy_top(&s->laps, keys, 2);
    for (int g = 0; g < k; g++) {
        if (keys[g] & 1) continue;
        out[n++] = (reading_t){keys[g], 0, 0, 0};  /* lap 0 alone */
        /* partners[b]: records whose value differs from this group's by lap bits
         * 2^(b+1) - 1, that is laps L and L + 1 for an L with b trailing ones. */
        uint64_t partners[64];
        memset(partners, 0, sizeof partners);
        scan_iter_t it = scan_begin(s);
        while (scan_next(&it, &off)) {
            uint64_t d = (cairn__le64(s->data + off) ^ (off | 1)) ^ keys[g];
            if (d == 0 || (d & (cap - 1))) continue;
            d >>= shift;
            if ((d & (d + 1)) == 0) partners[__builtin_popcountll(d) - 1]++;
        }
        for (int pick = 0; pick < MAX_PARTNERS; pick++) {
            int b = -1;
            for (int i = 0; i < 64; i++)
                if (partners[i] && (b < 0 || partners[i] > partners[b])) b = i;
            if (b < 0) break;
            partners[b] = 0;
            uint64_t lap = ((2ull << b) - 1) >> 1; /* the lowest L with b trailing ones */
            if (lap + 2 > MAX_POSITION / cap) continue;
            out[n++] = (reading_t){keys[g] ^ (lap << shift), 0, lap, lap + 1};       /* this group older */
            out[n++] = (reading_t){keys[g] ^ ((lap + 1) << shift), 0, lap, lap + 1}; /* this group newer */
        }
    }
    return n;
}

#define MAX_READINGS (2 + 2 * (1 + 2 * MAX_PARTNERS))

/* Plans from the records: the salt, the cursors, or both were lost. */
static int plan_from_records(int fixed_ok, uint64_t stored_salt, uint64_t read, int read_ok, int read_checked,
                             uint64_t write, const unsigned char *data, uint64_t end, cairn__ring_plan_t *plan)
{
    const uint64_t cap = plan->capacity;
    scan_t s;
    memset(&s, 0, sizeof s);
    s.data = data;
    s.capacity = cap;
    s.end = data ? end : 0;
    s.words = (size_t)((cap / CAIRN_RING_ALIGN + 63) / 64);
    s.starts = calloc(s.words, sizeof *s.starts);
    if (!s.starts) return CAIRN_ENOMEM;
    scan(&s);
    if (!fixed_ok && s.data_records == 0) {
        free(s.starts);
        return CAIRN_ECORRUPT;
    }

    /* The readings: the salt voted from the header's write position, the stored salt,
     * salts inferred from lap groups. The stored salt's positions are the header's
     * only if the header's write position agrees (or cannot say): a damaged salt can
     * read as the true one shifted by whole laps. */
    reading_t readings[MAX_READINGS];
    int n = 0;
    const int write_ok = write % CAIRN_RING_ALIGN == 0 && write <= MAX_POSITION;
    uint64_t vote = 0;
    const int voted = !fixed_ok && write_ok && vote_salt(&s, write, &vote);
    if (voted) readings[n++] = (reading_t){vote, 1, 0, UINT64_MAX};
    if (fixed_ok || !(stored_salt & 1))
        readings[n++] = (reading_t){stored_salt, fixed_ok || !voted || vote == stored_salt, 0, UINT64_MAX};
    if (!fixed_ok) n += lap_readings(&s, readings + n);

    /* The best reading overall covers the most bytes, then holds the most data
     * records. But the header's cursors are kept whenever a reading that keeps them
     * delivers as many records, or whatever the others deliver when the stored salt
     * and the header's write position agree on it (stale records can let a reading
     * shifted by whole laps explain a few more). A reading keeps the cursors when it
     * is anchored and its window fits them: the window ends at the header's write
     * position when no record passes it (records beyond were torn). When the write
     * position is wrong, the read position alone is kept only on evidence of its own
     * (a header that checks out, or its check copy), below the highest record's end
     * or, confirmed by its check copy, past it (everything after it was torn). */
    int best = -1, keep = -1;
    window_t bw = {0, 0, 0, 0}, kw = {0, 0, 0, 0};
    uint64_t keep_write = 0;
    for (int i = 0; i < n; i++) {
        window_t w = evaluate(&s, &readings[i]);
        if (best < 0 || w.bytes > bw.bytes || (w.bytes == bw.bytes && w.records > bw.records)) {
            best = i;
            bw = w;
        }
        if (!readings[i].anchored) continue;
        uint64_t window_end = w.end;
        if (read_ok && w.end <= write) {
            window_end = write;
        } else {
            if (!fixed_ok && !read_checked) continue;
            if (read_checked && read > window_end && read - window_end <= cap) window_end = read;
            if (!cursors_ok(read, window_end, cap)) continue;
        }
        if (keep < 0 || w.bytes > kw.bytes || (w.bytes == kw.bytes && w.records > kw.records)) {
            keep = i;
            kw = w;
            keep_write = window_end;
        }
    }
    free(s.starts);
    const int confirmed = keep >= 0 && voted && readings[keep].salt == vote && vote == stored_salt;
    if (keep >= 0 && (confirmed || kw.records >= bw.records)) {
        plan->salt = readings[keep].salt;
        plan->read_pos = read;
        plan->write_pos = keep_write;
        return 0;
    }
    if (best < 0 || (!fixed_ok && bw.records == 0)) return CAIRN_ECORRUPT;
    plan->salt = readings[best].salt;
    plan->read_pos = bw.first;
    plan->write_pos = bw.end;
    plan->repairs |= CAIRN_RING_REPAIR_WINDOW_INFERRED;
    return 0;
}

/* Sets a repair bit for each header field that the plan changes. */
static void note_repairs(const unsigned char *hdr, uint64_t file_size, cairn__ring_plan_t *plan)
{
    /* A version 1 header is sound as it is: its upgrade to the current version when
     * the file is restored is not a repair. */
    const uint32_t version = cairn__le32(hdr + H_VERSION);
    unsigned char fixed[H_CRC + 4];
    put_fixed(fixed, version_known(version) ? version : CAIRN_RING_FORMAT_VERSION, plan->capacity, plan->salt);
    uint32_t r = plan->repairs;
    if (memcmp(hdr + H_MAGIC, ring_magic, sizeof ring_magic) != 0) r |= CAIRN_RING_REPAIR_MAGIC;
    if (!version_known(version)) r |= CAIRN_RING_REPAIR_VERSION;
    if (cairn__le32(hdr + H_HEADER_SIZE) != CAIRN_RING_HEADER_SIZE) r |= CAIRN_RING_REPAIR_HEADER_SIZE;
    if (cairn__le64(hdr + H_CAPACITY) != plan->capacity) r |= CAIRN_RING_REPAIR_CAPACITY;
    if (cairn__le64(hdr + H_SALT) != plan->salt) r |= CAIRN_RING_REPAIR_SALT;
    if (cairn__le32(hdr + H_FLAGS) != 0) r |= CAIRN_RING_REPAIR_FLAGS;
    if (cairn__le32(hdr + H_CRC) != cairn__le32(fixed + H_CRC)) r |= CAIRN_RING_REPAIR_HEADER_CRC;
    if (cairn__le64(hdr + H_WRITE_POS) != plan->write_pos) r |= CAIRN_RING_REPAIR_WRITE_POS;
    if (cairn__le64(hdr + H_READ_POS) != plan->read_pos) r |= CAIRN_RING_REPAIR_READ_POS;
    if (file_size != CAIRN_RING_HEADER_SIZE + plan->capacity) r |= CAIRN_RING_REPAIR_FILE_SIZE;
    plan->repairs = r;
}

int cairn__ring_plan(const unsigned char *hdr, uint64_t file_size, const unsigned char *data,
                     uint64_t avail, cairn__ring_plan_t *plan)
{
    memset(plan, 0, sizeof *plan);
    const int magic_ok = memcmp(hdr + H_MAGIC, ring_magic, sizeof ring_magic) == 0;
    const int crc_ok = cairn__crc32c(0, hdr, H_CRC) == cairn__le32(hdr + H_CRC);
    /* A header that checks out with a version or flags we do not know is a newer
     * writer's: its file must not be read as ours. */
    if (magic_ok && crc_ok &&
        (!version_known(cairn__le32(hdr + H_VERSION)) || cairn__le32(hdr + H_FLAGS) != 0))
        return CAIRN_EVERSION;
    const uint64_t stored_cap = cairn__le64(hdr + H_CAPACITY), stored_salt = cairn__le64(hdr + H_SALT);
    const int fixed_ok = magic_ok && crc_ok && cairn__le32(hdr + H_HEADER_SIZE) == CAIRN_RING_HEADER_SIZE &&
                         capacity_ok(stored_cap) && !(stored_salt & 1);
    /* A sound header's capacity stands (the file may have been cut or extended);
     * otherwise the file size says it, unless the file size is the damaged part. */
    const uint64_t data_size = file_size > CAIRN_RING_HEADER_SIZE ? file_size - CAIRN_RING_HEADER_SIZE : 0;
    if (fixed_ok || (capacity_ok(stored_cap) && !capacity_ok(data_size)))
        plan->capacity = stored_cap;
    else
        plan->capacity = capacity_ok(data_size) ? data_size : round_capacity(data_size);
    const uint64_t cap = plan->capacity;

    uint64_t write = cairn__le64(hdr + H_WRITE_POS), read = cairn__le64(hdr + H_READ_POS);
    const uint64_t check = cairn__le64(hdr + H_READ_CHECK);
    int read_ok = cursors_ok(read, write, cap);
    const int read_checked = check != 0 && ~check == read;
    if (check != 0 && ~check != read) {
        /* The cursor and its check copy disagree: one of them was damaged (or the
         * consumer died between its two stores). The lower one loses nothing. */
        plan->repairs |= CAIRN_RING_REPAIR_READ_POS;
        if (cursors_ok(~check, write, cap) && (!read_ok || ~check < read)) {
            read = ~check;
            read_ok = 1;
        }
    }
    if (fixed_ok && read_ok) {
        plan->salt = stored_salt;
        plan->read_pos = read;
        plan->write_pos = write;
        plan->header_only = 1;
    } else {
        int rc = plan_from_records(fixed_ok, stored_salt, read, read_ok, read_checked, write, data,
                                   avail < cap ? avail : cap, plan);
        if (rc != 0) return rc;
    }
    note_repairs(hdr, file_size, plan);
    return 0;
}

uint32_t cairn__ring_restore(unsigned char *hdr, unsigned char *data, const cairn__ring_plan_t *plan,
                             int after_reboot, cairn__recovery_t *out)
{
    /* The header first, so that a process killed during recovery leaves a file whose
     * header already reads right. */
    put_fixed(hdr, CAIRN_RING_FORMAT_VERSION, plan->capacity, plan->salt);
    cairn__put64(hdr + H_WRITE_POS, plan->write_pos);
    cairn__put64(hdr + H_READ_POS, plan->read_pos);
    cairn__put64(hdr + H_READ_CHECK, ~plan->read_pos);
    cairn__ring_area_t area = {data, plan->capacity, plan->salt};
    uint64_t write = plan->write_pos;
    cairn__ring_recover(&area, plan->read_pos, &write, after_reboot || plan->repairs != 0 ? CAIRN__RECOVER_CLEAR_STALE : 0, out);
    cairn__put64(hdr + H_WRITE_POS, write);
    uint32_t repairs = plan->repairs;
    /* Within one boot the header's write position is exact: moving it is a repair. */
    if (write != plan->write_pos && !after_reboot) repairs |= CAIRN_RING_REPAIR_WRITE_POS;
    return repairs;
}

/* ---- Inspecting a file without opening it ------------------------------------- */

int cairn__ring_inspect_bytes(const unsigned char *hdr, uint64_t file_size, const unsigned char *data,
                              uint64_t avail, cairn_ring_inspection_t *out)
{
    memset(out, 0, sizeof *out);
    if (file_size == 0) return 0; /* an open would create the ring: nothing waits */
    cairn__ring_plan_t plan;
    int rc = cairn__ring_plan(hdr, file_size, avail ? data : NULL, avail, &plan);
    if (rc != 0) return rc;
    /* The walk reads the whole data area: a shorter file reads as zeros past its end
     * (no record), as an open extends it. The copy is mapped on demand, so only the
     * pages the walk reaches take memory. */
    unsigned char *copy = NULL;
    if (avail < plan.capacity) {
        copy = mmap(NULL, (size_t)plan.capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (copy == MAP_FAILED) return CAIRN_ENOMEM;
        if (avail) memcpy(copy, data, (size_t)avail);
    }
    /* Read only: the area is never written (the file's mapping is PROT_READ). */
    cairn__ring_area_t area = {copy ? copy : (unsigned char *)(uintptr_t)data, plan.capacity, plan.salt};
    uint64_t write = plan.write_pos;
    cairn__recovery_t rec;
    cairn__ring_recover(&area, plan.read_pos, &write, CAIRN__RECOVER_READ_ONLY, &rec);
    if (copy) munmap(copy, (size_t)plan.capacity);
    out->capacity = plan.capacity;
    out->read_pos = plan.read_pos;
    out->write_pos = write;
    out->events = rec.recovered - rec.contexts;
    out->contexts = rec.contexts;
    out->torn_regions = rec.skipped_regions;
    out->torn_bytes = rec.skipped_bytes;
    out->repairs = plan.repairs;
    return 0;
}

int cairn_ring_inspect(const char *path, cairn_ring_inspection_t *out)
{
    if (!path || !out) return CAIRN_EINVAL;
    memset(out, 0, sizeof *out);
    int fd;
    do fd = open(path, O_RDONLY | O_CLOEXEC); while (fd < 0 && errno == EINTR);
    if (fd < 0) return errno;
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0) rc = errno;
    else if (!S_ISREG(st.st_mode)) rc = CAIRN_EINVAL;
    if (rc != 0 || st.st_size == 0) {
        close(fd);
        return rc;
    }
    const uint64_t size = (uint64_t)st.st_size, most = CAIRN_RING_HEADER_SIZE + (uint64_t)CAIRN_RING_MAX_CAPACITY;
    const size_t map_len = (size_t)(size < most ? size : most);
    unsigned char *map = mmap(NULL, map_len, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) rc = errno;
    close(fd);
    if (rc != 0) return rc;
    unsigned char hdr[CAIRN_RING_HEADER_SIZE];
    memset(hdr, 0, sizeof hdr);
    memcpy(hdr, map, map_len < sizeof hdr ? map_len : sizeof hdr);
    const uint64_t avail = map_len > CAIRN_RING_HEADER_SIZE ? map_len - CAIRN_RING_HEADER_SIZE : 0;
    rc = cairn__ring_inspect_bytes(hdr, size, map + CAIRN_RING_HEADER_SIZE, avail, out);
    munmap(map, map_len);
    return rc;
}

/* ---- The drop table ------------------------------------------------------------ */

static int reason_ok(const char *reason, size_t len)
{
    if (len == 0 || len > CAIRN_RING_DROP_REASON_MAX) return 0;
    for (size_t i = 0; i < len; i++) {
        char c = reason[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return 0;
    }
    return 1;
}

/* The claim word of a slot for `reason`, without its state. */
static uint64_t claim_tag(const char *reason, size_t len)
{
    return (uint64_t)cairn__crc32c(0, reason, len) << 32 | (uint64_t)len << 8;
}

/* The name field of a slot for `reason`, as the three words stored in it. */
static void pack_name(const char *reason, size_t len, uint64_t words[3])
{
    unsigned char b[24];
    memset(b, 0, sizeof b);
    memcpy(b, reason, len);
    for (int i = 0; i < 3; i++) words[i] = cairn__le64(b + 8 * i);
}

static uint64_t *drop_field(const cairn_ring_t *ring, int slot, int field)
{
    return (uint64_t *)(ring->map + H_DROPS + (size_t)slot * DROP_SLOT_SIZE + field);
}

/* Does slot `i` hold the name `words` (tag `tag`)? With `may_claim`, a free slot is
 * claimed for it first. A claim of the same name in progress is finished here, with
 * the same bytes, rather than waited for. */
static int claim_or_match(cairn_ring_t *ring, int i, uint64_t tag, const uint64_t words[3], int may_claim)
{
    uint64_t *claim = drop_field(ring, i, D_CLAIM);
    uint64_t c = load_acq(claim);
    if (c == 0) {
        if (!may_claim) return 0;
        if (__atomic_compare_exchange_n(claim, &c, tag | CLAIM_CLAIMING, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            c = tag | CLAIM_CLAIMING;
    }
    if ((c & ~(uint64_t)0xFF) != tag) return 0;
    uint64_t *name = drop_field(ring, i, D_NAME);
    if (CLAIM_STATE(c) == CLAIM_CLAIMING) {
        for (int k = 0; k < 3; k++) __atomic_store_n(&name[k], words[k], __ATOMIC_RELAXED);
        __atomic_compare_exchange_n(claim, &c, tag | CLAIM_NAMED, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    } else if (CLAIM_STATE(c) != CLAIM_NAMED) {
        return 0;
    }
    for (int k = 0; k < 3; k++)
        if (__atomic_load_n(&name[k], __ATOMIC_RELAXED) != words[k]) return 0;
    return 1;
}

static int claim_other(cairn_ring_t *ring)
{
    uint64_t words[3];
    pack_name("other", 5, words);
    claim_or_match(ring, CAIRN_RING_DROP_OTHER, claim_tag("other", 5), words, 1);
    return CAIRN_RING_DROP_OTHER;
}

int cairn_ring_drop_slot(cairn_ring_t *ring, const char *reason, size_t len)
{
    if (!ring || !reason || !reason_ok(reason, len)) return CAIRN_EINVAL;
    if (len == 5 && memcmp(reason, "other", 5) == 0) return claim_other(ring);
    uint64_t words[3];
    const uint64_t tag = claim_tag(reason, len);
    pack_name(reason, len, words);
    /* Look everywhere before claiming: open may have freed a slot before the name's. */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < CAIRN_RING_DROP_OTHER; i++)
            if (claim_or_match(ring, i, tag, words, pass)) return i;
    return claim_other(ring);
}

/* Is `slot` a slot index whose name is complete? */
static int named_slot(const cairn_ring_t *ring, int slot)
{
    return ring && slot >= 0 && slot < CAIRN_RING_DROP_SLOTS &&
           CLAIM_STATE(load_acq(drop_field(ring, slot, D_CLAIM))) == CLAIM_NAMED;
}

int cairn_ring_count_drops(cairn_ring_t *ring, int slot, uint64_t n)
{
    if (!named_slot(ring, slot)) return CAIRN_EINVAL;
    __atomic_fetch_add(drop_field(ring, slot, D_COUNTED), n, __ATOMIC_RELAXED);
    return 0;
}

int cairn_ring_read_drops(const cairn_ring_t *ring, cairn_ring_drop_t *out, size_t max)
{
    if (!ring || (!out && max)) return CAIRN_EINVAL;
    int used = 0;
    for (int i = 0; i < CAIRN_RING_DROP_SLOTS; i++) {
        if (!named_slot(ring, i)) continue;
        if ((size_t)used < max) {
            cairn_ring_drop_t *d = &out[used];
            memset(d, 0, sizeof *d);
            const uint64_t *name = drop_field(ring, i, D_NAME);
            unsigned char bytes[24];
            for (int k = 0; k < 3; k++) cairn__put64(bytes + 8 * k, __atomic_load_n(&name[k], __ATOMIC_RELAXED));
            memcpy(d->reason, bytes, CAIRN_RING_DROP_REASON_MAX);
            d->slot = i;
            d->reported = __atomic_load_n(drop_field(ring, i, D_REPORTED), __ATOMIC_RELAXED);
            d->counted = __atomic_load_n(drop_field(ring, i, D_COUNTED), __ATOMIC_RELAXED);
            if (d->reported > d->counted) d->reported = d->counted;
            d->counted_at_open = ring->counted_at_open[i] < d->counted ? ring->counted_at_open[i] : d->counted;
        }
        used++;
    }
    return used;
}

int cairn_ring_mark_reported(cairn_ring_t *ring, int slot, uint64_t reported)
{
    if (!named_slot(ring, slot)) return CAIRN_EINVAL;
    if (reported > __atomic_load_n(drop_field(ring, slot, D_COUNTED), __ATOMIC_RELAXED)) return CAIRN_EINVAL;
    uint64_t *field = drop_field(ring, slot, D_REPORTED);
    if (reported > __atomic_load_n(field, __ATOMIC_RELAXED)) __atomic_store_n(field, reported, __ATOMIC_RELAXED);
    return 0;
}

/* Does the slot at `s` hold a well-formed name matching its claim word? */
static int slot_name_ok(const unsigned char *s, uint64_t claim)
{
    size_t len = (claim >> 8) & 0xFF;
    const char *name = (const char *)s + D_NAME;
    if ((claim & 0xFFFF0000u) != 0 || !reason_ok(name, len)) return 0;
    for (size_t k = len; k < 24; k++)
        if (name[k]) return 0;
    return (uint32_t)(claim >> 32) == cairn__crc32c(0, name, len);
}

static void name_slot(unsigned char *s, const char *reason)
{
    size_t len = strlen(reason);
    memset(s + D_NAME, 0, 24);
    memcpy(s + D_NAME, reason, len);
    cairn__put64(s + D_CLAIM, claim_tag(reason, len) | CLAIM_NAMED);
}

static uint64_t add_saturating(uint64_t a, uint64_t b) { return a + b < a ? UINT64_MAX : a + b; }

/* Adds slot `from`'s counts to slot `to`'s and frees `from`. */
static void merge_slot(unsigned char *to, unsigned char *from)
{
    cairn__put64(to + D_COUNTED, add_saturating(cairn__le64(to + D_COUNTED), cairn__le64(from + D_COUNTED)));
    cairn__put64(to + D_REPORTED, add_saturating(cairn__le64(to + D_REPORTED), cairn__le64(from + D_REPORTED)));
    memset(from, 0, DROP_SLOT_SIZE);
}

uint32_t cairn__ring_check_drops(unsigned char *hdr)
{
    static const unsigned char zero[DROP_SLOT_SIZE];
    uint32_t changed = 0;
    unsigned char *other = hdr + H_DROPS + (size_t)CAIRN_RING_DROP_OTHER * DROP_SLOT_SIZE;
    for (int i = 0; i < CAIRN_RING_DROP_SLOTS; i++) {
        unsigned char *s = hdr + H_DROPS + (size_t)i * DROP_SLOT_SIZE;
        const uint64_t claim = cairn__le64(s + D_CLAIM);
        const int well_formed = (CLAIM_STATE(claim) == CLAIM_NAMED || CLAIM_STATE(claim) == CLAIM_CLAIMING) &&
                                slot_name_ok(s, claim);
        const int is_other = well_formed && ((claim >> 8) & 0xFF) == 5 && memcmp(s + D_NAME, "other", 5) == 0;
        if (well_formed && (s != other || is_other)) {
            /* A claim whose name was complete when its process died: finish it. */
            if (CLAIM_STATE(claim) == CLAIM_CLAIMING) {
                cairn__put64(s + D_CLAIM, (claim & ~(uint64_t)0xFF) | CLAIM_NAMED);
                changed++;
            }
        } else if (memcmp(s, zero, DROP_SLOT_SIZE) != 0) {
            /* Damaged, or claimed by a process that died before naming it: its counts
             * are kept under a name that says so; an empty one is freed. */
            if (cairn__le64(s + D_COUNTED) || cairn__le64(s + D_REPORTED))
                name_slot(s, s == other ? "other" : "unknown");
            else
                memset(s, 0, DROP_SLOT_SIZE);
            changed++;
        }
        if (cairn__le64(s + D_REPORTED) > cairn__le64(s + D_COUNTED)) {
            cairn__put64(s + D_REPORTED, cairn__le64(s + D_COUNTED));
            changed++;
        }
    }
    /* One slot per name: `other` belongs in the catch-all slot, duplicates merge. */
    for (int i = 0; i < CAIRN_RING_DROP_OTHER; i++) {
        unsigned char *s = hdr + H_DROPS + (size_t)i * DROP_SLOT_SIZE;
        const uint64_t claim = cairn__le64(s + D_CLAIM);
        if (CLAIM_STATE(claim) != CLAIM_NAMED) continue;
        if (((claim >> 8) & 0xFF) == 5 && memcmp(s + D_NAME, "other", 5) == 0) {
            if (CLAIM_STATE(cairn__le64(other + D_CLAIM)) != CLAIM_NAMED) name_slot(other, "other");
            merge_slot(other, s);
            changed++;
            continue;
        }
        for (int j = i + 1; j < CAIRN_RING_DROP_OTHER; j++) {
            unsigned char *t = hdr + H_DROPS + (size_t)j * DROP_SLOT_SIZE;
            if (cairn__le64(t + D_CLAIM) == claim && memcmp(t + D_NAME, s + D_NAME, 24) == 0) {
                merge_slot(s, t);
                changed++;
            }
        }
    }
    return changed;
}

void cairn_ring_options_init(cairn_ring_options_t *opts)
{
    if (!opts) return;
    memset(opts, 0, sizeof *opts);
    opts->capacity = CAIRN_RING_DEFAULT_CAPACITY;
    opts->reclaim_bytes = 64u * 1024u;
}

/* A random salt with bit 0 clear. getrandom(2) normally; if it is unavailable, time
 * and addresses still make a salt unlikely to equal any position. */
static uint64_t new_salt(void)
{
    uint64_t salt = 0;
    if (getrandom(&salt, sizeof salt, GRND_NONBLOCK) != (ssize_t)sizeof salt) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        salt = ((uint64_t)ts.tv_nsec << 32) ^ (uint64_t)ts.tv_sec ^ (uint64_t)(uintptr_t)&ts ^
               ((uint64_t)getpid() << 48);
    }
    return salt & ~(uint64_t)1;
}

/* The kernel's id of this boot, 16 bytes; all zero when it cannot be read (then every
 * open is treated as the first after a reboot, which is safe, only slower). */
static void read_boot_id(unsigned char id[16])
{
    memset(id, 0, 16);
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    char text[64];
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    int nibbles = 0;
    for (ssize_t i = 0; i < n && nibbles < 32; i++) {
        char c = text[i];
        int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (v < 0) continue;
        id[nibbles / 2] = (unsigned char)(id[nibbles / 2] | (v << (nibbles % 2 ? 0 : 4)));
        nibbles++;
    }
}

/* Creates a fresh ring in the empty, locked file `fd`. */
static int create_ring(int fd, uint64_t capacity)
{
    int rc = posix_fallocate(fd, 0, (off_t)(CAIRN_RING_HEADER_SIZE + capacity));
    if (rc != 0) {
        /* Leave an empty file rather than a half-sized one. */
        if (ftruncate(fd, 0) != 0) { /* the next open sets a bad file aside anyway */ }
        return rc;
    }
    unsigned char hdr[CAIRN_RING_HEADER_SIZE];
    memset(hdr, 0, sizeof hdr);
    put_fixed(hdr, CAIRN_RING_FORMAT_VERSION, capacity, new_salt());
    cairn__put64(hdr + H_READ_CHECK, ~(uint64_t)0);
    ssize_t n;
    do n = pwrite(fd, hdr, sizeof hdr, 0); while (n < 0 && errno == EINTR);
    if (n < 0) return errno;
    if ((size_t)n != sizeof hdr) return EIO;
    /* The first pages of the data area written through the page cache (they are zero
     * already): the first record, written by the thread that opens the ring, then
     * finds its page cached. A fault on a page not cached reads ahead read_ahead_kb
     * of the file (zero-filling 8 MiB on some systems: milliseconds), which the
     * consumer's populating of pages ahead of the writer then does instead, off the
     * producers' threads. */
    static const unsigned char zeros[16384];
    uint64_t first = capacity < 4 * sizeof zeros ? capacity : 4 * sizeof zeros;
    for (uint64_t off = 0; off < first; off += sizeof zeros) {
        do n = pwrite(fd, zeros, sizeof zeros, (off_t)(CAIRN_RING_HEADER_SIZE + off)); while (n < 0 && errno == EINTR);
        if (n < 0) return errno;
    }
    return 0;
}

/* Renames a file that is not a readable ring out of the way, to
 * `<path>.corrupt-<seconds>-<pid>[-<n>]`, never replacing an earlier one: it is kept
 * for a person to look at, never deleted. */
static int set_aside(const char *path)
{
    size_t n = strlen(path) + 80;
    char *aside = malloc(n);
    if (!aside) return CAIRN_ENOMEM;
    int rc = EEXIST;
    long long now = (long long)time(NULL);
    for (int attempt = 0; attempt < 100 && rc == EEXIST; attempt++) {
        if (attempt == 0)
            snprintf(aside, n, "%s.corrupt-%lld-%d", path, now, (int)getpid());
        else
            snprintf(aside, n, "%s.corrupt-%lld-%d-%d", path, now, (int)getpid(), attempt);
        /* link + unlink: unlike rename, link never replaces an existing name. */
        rc = link(path, aside) == 0 ? 0 : errno;
        if (rc == 0 && unlink(path) != 0) rc = errno;
    }
    free(aside);
    return rc;
}

/* Opens and locks `path`. The lock must be on the file that `path` names when the
 * lock is taken: another process may set the file aside and create a new one between
 * our open and our flock, and then we retry on the new file. A lock that is held is
 * tried again for up to 10 ms: a process forked by another thread holds a copy of a
 * handle closed meanwhile (and its lock) until it runs exec, which closes it. */
static int open_locked(const char *path, int *fd_out)
{
    for (int attempt = 0; attempt < 8; attempt++) {
        int fd;
        do fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600); while (fd < 0 && errno == EINTR);
        if (fd < 0) return errno;
        int rc;
        for (int wait = 0;; wait++) {
            do rc = flock(fd, LOCK_EX | LOCK_NB); while (rc != 0 && errno == EINTR);
            if (rc == 0 || errno != EWOULDBLOCK || wait == 10) break;
            struct timespec ms = {0, 1000000};
            nanosleep(&ms, NULL);
        }
        if (rc != 0) {
            int err = errno;
            close(fd);
            return err == EWOULDBLOCK ? CAIRN_ELOCKED : err;
        }
        struct stat held, named;
        if (fstat(fd, &held) != 0) {
            int err = errno;
            close(fd);
            return err;
        }
        if (!S_ISREG(held.st_mode)) {
            close(fd);
            return EINVAL;
        }
        if (stat(path, &named) == 0 && named.st_dev == held.st_dev && named.st_ino == held.st_ino) {
            *fd_out = fd;
            return 0;
        }
        close(fd);
    }
    return CAIRN_ELOCKED;
}

/* Reads the header of an existing file and plans how to open it (cairn__ring_plan).
 * The data area is read through a read-only mapping of what the file holds: nothing
 * is written before the plan is made, so a file that is set aside keeps its bytes.
 * Returns 0, a format error for a file to set aside, CAIRN_ENOMEM, or an errno. */
static int plan_file(int fd, uint64_t size, cairn__ring_plan_t *plan)
{
    unsigned char hdr[CAIRN_RING_HEADER_SIZE];
    memset(hdr, 0, sizeof hdr);
    size_t want = size < sizeof hdr ? (size_t)size : sizeof hdr, got = 0;
    while (got < want) {
        ssize_t n = pread(fd, hdr + got, want - got, (off_t)got);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return errno;
        if (n == 0) break;
        got += (size_t)n;
    }
    /* The header first: when it is sound (the common case) the records are not read,
     * and the data area need not be mapped here. */
    int rc = cairn__ring_plan(hdr, size, NULL, 0, plan);
    if (plan->header_only) return rc;
    const uint64_t most = CAIRN_RING_HEADER_SIZE + (uint64_t)CAIRN_RING_MAX_CAPACITY;
    const uint64_t map_len = size < most ? size : most;
    if (map_len <= CAIRN_RING_HEADER_SIZE) return rc;
    unsigned char *map = mmap(NULL, (size_t)map_len, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) return errno;
    rc = cairn__ring_plan(hdr, size, map + CAIRN_RING_HEADER_SIZE, map_len - CAIRN_RING_HEADER_SIZE, plan);
    munmap(map, (size_t)map_len);
    return rc;
}

int cairn_ring_open(const char *path, const cairn_ring_options_t *opts, cairn_ring_t **out)
{
    if (out) *out = NULL;
    if (!path || !out || !*path) return CAIRN_EINVAL;
    cairn_ring_options_t o;
    cairn_ring_options_init(&o);
    if (opts) o = *opts;
    if (o.capacity == 0) o.capacity = CAIRN_RING_DEFAULT_CAPACITY;
    if (o.capacity < CAIRN_RING_MIN_CAPACITY || o.capacity > CAIRN_RING_MAX_CAPACITY) return CAIRN_EINVAL;

    int fd = -1, rc;
    uint32_t origin = CAIRN_RING_REOPENED;
    cairn__ring_plan_t plan;
    memset(&plan, 0, sizeof plan);
    uint64_t capacity, restored = 0, cut = 0;
    if ((rc = open_locked(path, &fd)) != 0) return rc;

    struct stat st;
    if (fstat(fd, &st) != 0) { rc = errno; goto fail; }
    uint64_t size = (uint64_t)st.st_size;
    if (size == 0) {
        origin = CAIRN_RING_CREATED;
    } else {
        rc = plan_file(fd, size, &plan);
        if (rc > 0 || rc == CAIRN_ENOMEM) goto fail; /* leave the file alone */
        if (rc < 0) origin = CAIRN_RING_SET_ASIDE;
        else if (plan.repairs) origin = CAIRN_RING_REPAIRED;
    }
    if (origin == CAIRN_RING_SET_ASIDE) {
        if ((rc = set_aside(path)) != 0) goto fail;
        close(fd);
        fd = -1;
        if ((rc = open_locked(path, &fd)) != 0) return rc;
        if (fstat(fd, &st) != 0) { rc = errno; goto fail; }
        if (st.st_size != 0) { rc = CAIRN_ELOCKED; goto fail; } /* another process made one */
    }
    if (origin == CAIRN_RING_CREATED || origin == CAIRN_RING_SET_ASIDE) {
        capacity = round_capacity(o.capacity);
        if ((rc = create_ring(fd, capacity)) != 0) goto fail;
    } else {
        capacity = plan.capacity;
        const uint64_t full = CAIRN_RING_HEADER_SIZE + capacity;
        /* Make sure every block exists: a copied or restored file may be sparse, a
         * truncated one short (its missing bytes come back as zeros: no record). A file
         * of the right size with as many blocks as bytes is whole already (the common
         * case; fallocate would still cost a journal transaction). */
        const int allocated = size == full && (uint64_t)st.st_blocks * 512 >= full;
        if (!allocated && (rc = posix_fallocate(fd, 0, (off_t)full)) != 0) goto fail;
        if (size < full) restored = full - size;
        if (size > full) {
            /* Bytes past the ring belong to no record: cut, the file is a ring again. */
            if (ftruncate(fd, (off_t)full) != 0) { rc = errno; goto fail; }
            cut = size - full;
        }
    }

    cairn_ring_t *r = calloc(1, sizeof *r);
    if (!r) { rc = CAIRN_ENOMEM; goto fail; }
    r->fd = fd;
    r->mask = capacity - 1;
    r->map_len = CAIRN_RING_HEADER_SIZE + capacity;
    r->map = mmap(NULL, r->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (r->map == MAP_FAILED) { rc = errno; free(r); goto fail; }
    r->area.data = r->map + CAIRN_RING_HEADER_SIZE;
    r->area.capacity = capacity;
    r->write_pos = (uint64_t *)(r->map + H_WRITE_POS);
    r->read_pos = (uint64_t *)(r->map + H_READ_POS);
    r->read_check = (uint64_t *)(r->map + H_READ_CHECK);
    r->appended = (uint64_t *)(r->map + H_APPENDED);
    r->high_water = (uint64_t *)(r->map + H_HIGH_WATER);
    r->dropped_full = (uint64_t *)(r->map + H_DROPPED_FULL);
    r->dropped_big = (uint64_t *)(r->map + H_DROPPED_BIG);
    r->slot_full = -1;
    r->slot_big = -1;
    long ps = sysconf(_SC_PAGESIZE);
    r->page_size = ps > 0 ? (size_t)ps : 4096;
    uint32_t limit = (uint32_t)(capacity / 4);
    r->max_record = o.max_record == 0 || o.max_record > limit ? limit : o.max_record;
    r->reclaim_bytes = o.reclaim_bytes;
    r->restored_bytes = restored;
    r->cut_bytes = cut;

    /* Within one boot the page cache holds every byte any process wrote to the
     * mapping; after a reboot only what the kernel happened to write back survives. */
    unsigned char boot[16];
    read_boot_id(boot);
    static const unsigned char unknown[16];
    int rebooted = memcmp(boot, r->map + H_BOOT_ID, sizeof boot) != 0 || memcmp(boot, unknown, sizeof boot) == 0;
    memcpy(r->map + H_BOOT_ID, boot, sizeof boot);
    if (origin == CAIRN_RING_REOPENED || origin == CAIRN_RING_REPAIRED) {
        r->repairs = cairn__ring_restore(r->map, r->area.data, &plan, rebooted, &r->recovery);
        if (r->repairs) origin = CAIRN_RING_REPAIRED;
    }
    r->area.salt = cairn__le64(r->map + H_SALT);
    r->drop_slots_repaired = cairn__ring_check_drops(r->map);
    for (int i = 0; i < CAIRN_RING_DROP_SLOTS; i++)
        r->counted_at_open[i] = named_slot(r, i) ? __atomic_load_n(drop_field(r, i, D_COUNTED), __ATOMIC_RELAXED) : 0;
    r->origin = origin;
    r->peeked_to = *r->read_pos;
    r->reclaimed_to = r->peeked_to;
    r->populated_to = r->peeked_to;
    r->managed_head = *r->write_pos;
    /* Counters describe this open. */
    *r->appended = 0;
    *r->dropped_full = 0;
    *r->dropped_big = 0;
    *r->high_water = *r->write_pos - *r->read_pos;
    *out = r;
    return 0;

fail:
    if (fd >= 0) close(fd);
    return rc;
}

void cairn_ring_close(cairn_ring_t *ring)
{
    if (!ring) return;
    munmap(ring->map, ring->map_len);
    close(ring->fd); /* releases the flock */
    free(ring);
}

/* Counts one of the ring's own refusals: in this open's counter, and persistently in
 * the drop table under `reason` (its slot is claimed at the first refusal). */
static void count_refusal(cairn_ring_t *ring, uint64_t *this_open, int *slot, const char *reason, size_t len)
{
    count(this_open);
    int s = __atomic_load_n(slot, __ATOMIC_RELAXED);
    if (s < 0) {
        s = cairn_ring_drop_slot(ring, reason, len); /* a valid name: always a slot */
        __atomic_store_n(slot, s, __ATOMIC_RELAXED);
    }
    count(drop_field(ring, s, D_COUNTED));
}

int cairn_ring_reserve(cairn_ring_t *ring, size_t len, cairn_ring_reservation_t *res)
{
    if (!ring || !res) return CAIRN_EINVAL;
    if (len > ring->max_record) {
        count_refusal(ring, ring->dropped_big, &ring->slot_big, "ring_too_big", 12);
        return CAIRN_ETOOBIG;
    }
    const uint64_t need = align_up(CAIRN_RING_RECORD_HEADER + len);
    const uint64_t cap = ring->area.capacity;
    uint64_t head = __atomic_load_n(ring->write_pos, __ATOMIC_RELAXED);
    uint64_t start, end;
    for (;;) {
        uint64_t room_to_end = cap - (head & ring->mask);
        start = need <= room_to_end ? head : head + room_to_end;
        end = start + need;
        /* Acquire pairs with the consumer's release in commit: its reads of the space
         * being freed happen before our writes into it. */
        uint64_t tail = load_acq(ring->read_pos);
        if (head < tail) {
            /* Our view of write_pos predates the consumer's latest commit. */
            head = __atomic_load_n(ring->write_pos, __ATOMIC_RELAXED);
            continue;
        }
        if (end - tail > cap) {
            count_refusal(ring, ring->dropped_full, &ring->slot_full, "ring_full", 9);
            return CAIRN_EFULL;
        }
        if (__atomic_compare_exchange_n(ring->write_pos, &head, end, 1, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED)) {
            uint64_t used = end - tail;
            if (used > __atomic_load_n(ring->high_water, __ATOMIC_RELAXED)) {
                uint64_t hw = __atomic_load_n(ring->high_water, __ATOMIC_RELAXED);
                while (used > hw && !__atomic_compare_exchange_n(ring->high_water, &hw, used, 1,
                                                                 __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
                }
            }
            break;
        }
    }
    if (start != head) write_padding(&ring->area, head, start - head);
    res->pos = start;
    res->data = ring->area.data + (start & ring->mask) + CAIRN_RING_RECORD_HEADER;
    res->capacity = (uint32_t)(need - CAIRN_RING_RECORD_HEADER);
    return 0;
}

/* Seals a record of `len` payload bytes whose CRC is `crc` (header included) and
 * publishes it, turning unused reserved room into padding first. */
static void seal(cairn_ring_t *ring, cairn_ring_reservation_t *res, size_t len, uint32_t len_kind, uint32_t crc)
{
    unsigned char *h = ring->area.data + (res->pos & ring->mask);
    uint64_t used = align_up(CAIRN_RING_RECORD_HEADER + len);
    uint64_t reserved = CAIRN_RING_RECORD_HEADER + (uint64_t)res->capacity;
    if (used < reserved) write_padding(&ring->area, res->pos + used, reserved - used);
    cairn__put32(h + 8, len_kind);
    cairn__put32(h + 12, crc);
    store_rel((uint64_t *)h, cairn__ring_publish_word(&ring->area, res->pos));
    count(ring->appended);
    res->data = NULL;
}

/* The kinds a writer may append: every kind but padding. */
static int appendable(uint32_t kind)
{
    return kind == CAIRN_RING_KIND_DATA || kind == CAIRN_RING_KIND_CONTEXT || kind == CAIRN_RING_KIND_BARE;
}

int cairn_ring_publish(cairn_ring_t *ring, cairn_ring_reservation_t *res, size_t len)
{
    return cairn_ring_publish_kind(ring, res, len, CAIRN_RING_KIND_DATA);
}

int cairn_ring_publish_kind(cairn_ring_t *ring, cairn_ring_reservation_t *res, size_t len, uint32_t kind)
{
    if (!ring || !res || !res->data) return CAIRN_EINVAL;
    if (len > res->capacity || !appendable(kind)) {
        cairn_ring_cancel(ring, res);
        return CAIRN_EINVAL;
    }
    uint32_t len_kind = (uint32_t)len | (kind << KIND_SHIFT);
    uint64_t word = cairn__ring_publish_word(&ring->area, res->pos);
    seal(ring, res, len, len_kind, cairn__crc32c_after(word, len_kind, res->data, len));
    return 0;
}

void cairn_ring_cancel(cairn_ring_t *ring, cairn_ring_reservation_t *res)
{
    if (!ring || !res || !res->data) return;
    write_padding(&ring->area, res->pos, CAIRN_RING_RECORD_HEADER + (uint64_t)res->capacity);
    res->data = NULL;
}

int cairn_ring_append(cairn_ring_t *ring, const void *data, size_t len)
{
    return cairn_ring_append_kind(ring, CAIRN_RING_KIND_DATA, data, len);
}

int cairn_ring_append_kind(cairn_ring_t *ring, uint32_t kind, const void *data, size_t len)
{
    if (!ring || (!data && len) || !appendable(kind)) return CAIRN_EINVAL;
    cairn_ring_reservation_t res;
    int rc = cairn_ring_reserve(ring, len, &res);
    if (rc != 0) return rc;
    uint32_t len_kind = (uint32_t)len | (kind << KIND_SHIFT);
    /* The CRC is taken from the caller's bytes, still in cache, not re-read from the
     * mapping just written. */
    uint32_t crc = cairn__crc32c_after(cairn__ring_publish_word(&ring->area, res.pos), len_kind, data, len);
    if (len) memcpy(res.data, data, len);
    seal(ring, &res, len, len_kind, crc);
    return 0;
}

uint64_t cairn_ring_read_pos(const cairn_ring_t *ring)
{
    return ring ? load_acq(ring->read_pos) : 0;
}

/* Is `pos` a place the consumer may start reading from or release up to: the read
 * cursor, the peek frontier, or the start of a published record in between? */
static int is_boundary(const cairn_ring_t *ring, uint64_t pos, uint64_t tail, uint64_t head)
{
    uint64_t total;
    uint32_t len_kind;
    if (pos < tail || pos > ring->peeked_to || pos % CAIRN_RING_ALIGN) return 0;
    return pos == tail || pos == ring->peeked_to || valid_record_at(&ring->area, pos, head, NULL, &total, &len_kind);
}

int cairn_ring_peek(cairn_ring_t *ring, uint64_t from, cairn_ring_record_t *records,
                    size_t max_records, size_t max_bytes, uint64_t *next)
{
    if (!ring || !next || (!records && max_records)) return CAIRN_EINVAL;
    uint64_t tail = load_acq(ring->read_pos);
    uint64_t head = load_acq(ring->write_pos);
    if (!is_boundary(ring, from, tail, head)) return CAIRN_EINVAL;
    size_t n = 0, bytes = 0;
    uint64_t pos = from;
    while (pos < head && n < max_records) {
        uint64_t total;
        uint32_t len_kind;
        /* In-process, a published record is complete: the CRC is for recovery. */
        if (!valid_record_at(&ring->area, pos, head, NULL, &total, &len_kind)) break;
        if (HAS_PAYLOAD(len_kind)) {
            uint32_t len = len_kind & LEN_MASK;
            if (n > 0 && bytes + len > max_bytes) break;
            records[n].data = ring->area.data + (pos & ring->mask) + CAIRN_RING_RECORD_HEADER;
            records[n].len = len;
            records[n].kind = len_kind >> KIND_SHIFT;
            records[n].pos = pos;
            n++;
            bytes += len;
        }
        pos += total;
    }
    *next = pos;
    if (pos > ring->peeked_to) ring->peeked_to = pos;
    return (int)n;
}

/* Calls madvise(advice) on the whole pages of the data area that lie in [from, to),
 * one lap at a time. Returns the first failure's errno, or 0. */
static int advise(cairn_ring_t *ring, uint64_t from, uint64_t to, int advice)
{
    int rc = 0;
    if (from >= to) return 0;
    if (to - from > ring->area.capacity) from = to - ring->area.capacity;
    while (from < to) {
        uint64_t lap_end = (from | ring->mask) + 1;
        uint64_t end = to < lap_end ? to : lap_end;
        uintptr_t a = (uintptr_t)(ring->area.data + (from & ring->mask));
        uintptr_t b = (uintptr_t)(ring->area.data + ((end - 1) & ring->mask) + 1);
        uintptr_t ps = ring->page_size;
        a = (a + ps - 1) & ~(ps - 1);
        b &= ~(ps - 1);
        if (b > a && madvise((void *)a, b - a, advice) != 0 && rc == 0) rc = errno;
        from = end;
    }
    return rc;
}

/* Keeps resident memory near the live window. Consumed pages are dropped from this
 * process's memory (MADV_DONTNEED: the file keeps their contents, MAP_SHARED, so this
 * is safe even while a producer of the next lap writes there; the page faults back
 * in). The producers would then pay a page fault each time they enter a dropped
 * page, so the consumer faults in a runway of free pages ahead of the write cursor
 * itself (MADV_POPULATE_WRITE), off the producers' path. The runway is twice what the
 * producers wrote since the last commit, or half the last runway if that is more (the
 * time between commits varies), from RUNWAY_MIN up to 4 × reclaim_bytes: a service that
 * tracks a few events a second keeps 16 KiB ahead, not 256 KiB, and a busy one up to
 * 256 KiB. A producer that outruns the runway (a burst after a quiet spell, until the
 * next commit) faults its own pages, one fault every 4 KiB. Pages already faulted in
 * ahead stay until the writer has passed them and they are consumed. */
#define RUNWAY_MIN (16u * 1024u)

static void manage_pages(cairn_ring_t *ring, uint64_t tail)
{
    if (tail - ring->reclaimed_to >= ring->reclaim_bytes) {
        advise(ring, ring->reclaimed_to, tail, MADV_DONTNEED);
        /* Resume at the start of the page holding `tail`, which is not dropped yet
         * (with pages larger than the 4 KiB header, that page may start before the
         * data area: never go back past where we were). */
        uintptr_t in_page = (uintptr_t)(ring->area.data + (tail & ring->mask)) & (ring->page_size - 1);
        if (in_page <= tail - ring->reclaimed_to) ring->reclaimed_to = tail - in_page;
    }
    if (ring->populate_failed) return;
    uint64_t head = load_acq(ring->write_pos);
    uint64_t written = head - ring->managed_head;
    ring->managed_head = head;
    uint64_t runway = 2 * written > ring->runway / 2 ? 2 * written : ring->runway / 2;
    if (runway < RUNWAY_MIN) runway = RUNWAY_MIN;
    if (runway > 4 * (uint64_t)ring->reclaim_bytes) runway = 4 * (uint64_t)ring->reclaim_bytes;
    if (runway > ring->area.capacity / 4) runway = ring->area.capacity / 4;
    ring->runway = runway;
    uint64_t from = ring->populated_to > head ? ring->populated_to : head;
    uint64_t to = head + runway < tail + ring->area.capacity ? head + runway : tail + ring->area.capacity;
    if (to >= from + runway / 2) {
        if (advise(ring, from, to, MADV_POPULATE_WRITE) == EINVAL) ring->populate_failed = 1;
        ring->populated_to = to;
    }
}

int cairn_ring_commit(cairn_ring_t *ring, uint64_t upto)
{
    if (!ring) return CAIRN_EINVAL;
    uint64_t tail = load_acq(ring->read_pos);
    if (!is_boundary(ring, upto, tail, load_acq(ring->write_pos))) return CAIRN_EINVAL;
    /* The check copy first: a consumer killed between the two stores leaves the
     * cursor where it was, as if it had died a moment earlier. */
    __atomic_store_n(ring->read_check, ~upto, __ATOMIC_RELAXED);
    store_rel(ring->read_pos, upto);
    if (ring->reclaim_bytes) manage_pages(ring, upto);
    return 0;
}

int cairn_ring_release_pages(cairn_ring_t *ring, uint64_t from, uint64_t to)
{
    if (!ring) return CAIRN_EINVAL;
    if (from > to || from < load_acq(ring->read_pos) || to > ring->peeked_to) return CAIRN_EINVAL;
    if (!ring->reclaim_bytes) return 0;
    return advise(ring, from, to, MADV_DONTNEED);
}

int cairn_ring_release_backlog(cairn_ring_t *ring, uint64_t keep)
{
    if (!ring) return CAIRN_EINVAL;
    if (!ring->reclaim_bytes) return 0;
    uint64_t tail = load_acq(ring->read_pos);
    uint64_t head = load_acq(ring->write_pos);
    uint64_t from = ring->peeked_to > tail ? ring->peeked_to : tail;
    if (head < from || head - from <= 2 * keep) return 0;
    return advise(ring, from + keep, head - keep, MADV_DONTNEED);
}

int cairn_ring_sync(cairn_ring_t *ring)
{
    if (!ring) return CAIRN_EINVAL;
    return msync(ring->map, ring->map_len, MS_SYNC) == 0 ? 0 : errno;
}

int cairn_ring_stats(const cairn_ring_t *ring, cairn_ring_stats_t *s)
{
    if (!ring || !s) return CAIRN_EINVAL;
    memset(s, 0, sizeof *s);
    /* The write cursor first: read after it, the read cursor can only be behind it. */
    uint64_t head = load_acq(ring->write_pos);
    uint64_t tail = load_acq(ring->read_pos);
    s->capacity = ring->area.capacity;
    s->used = head >= tail ? head - tail : 0;
    s->high_water = __atomic_load_n(ring->high_water, __ATOMIC_RELAXED);
    s->appended = __atomic_load_n(ring->appended, __ATOMIC_RELAXED);
    s->dropped_full = __atomic_load_n(ring->dropped_full, __ATOMIC_RELAXED);
    s->dropped_too_big = __atomic_load_n(ring->dropped_big, __ATOMIC_RELAXED);
    s->recovered = ring->recovery.recovered;
    s->skipped_corrupt = ring->recovery.skipped_regions;
    s->skipped_bytes = ring->recovery.skipped_bytes;
    s->origin = ring->origin;
    s->max_record = ring->max_record;
    s->restored_bytes = ring->restored_bytes;
    s->cut_bytes = ring->cut_bytes;
    s->repairs = ring->repairs;
    s->repaired_fields = (uint32_t)__builtin_popcount(ring->repairs & HEADER_FIELD_REPAIRS);
    s->drop_slots_repaired = ring->drop_slots_repaired;
    return 0;
}

uint64_t cairn_ring_id(const cairn_ring_t *ring)
{
    return ring ? ring->area.salt | 1u : 0;
}
