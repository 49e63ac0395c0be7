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
 * storing the record's own position (bit 0 set) in the header's first word with
 * release order.
 *
 * The consumer reads a record at position P only when that word equals P|1 (acquire),
 * so it never sees a half-written record: a stale header left from an earlier lap
 * carries an earlier position. A record whose producer died before publishing stays
 * unpublished; at the next open, recovery walks the unconsumed window, and where a
 * record is not valid it looks for the next valid header (its position word must equal
 * its own position and its CRC must match), rewrites the gap as padding, and counts it.
 *
 * The mapping is MAP_SHARED over a file whose blocks are allocated at creation, so a
 * published record survives the process being killed, and writes cannot SIGBUS on a
 * full disk. Counters that producers update live on the producer's cache line, next
 * to write_pos, which a successful CAS has just brought into this core's cache.
 */
#include "CCairn.h"
#include "cairn_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; older kernels answer EINVAL */
#endif

/* Header layout (byte offsets). Bytes 0..27 are fixed at creation and covered by
 * header_crc; the cursors and counters below them change while the ring runs. */
enum {
    H_MAGIC = 0,          /* 8 bytes "CAIRNRNG" */
    H_VERSION = 8,        /* u32 */
    H_HEADER_SIZE = 12,   /* u32, CAIRN_RING_HEADER_SIZE */
    H_CAPACITY = 16,      /* u64, power of two */
    H_FLAGS = 24,         /* u32, 0 */
    H_CRC = 28,           /* u32, CRC32C of bytes 0..27 */
    H_WRITE_POS = 64,     /* u64, producer cache line */
    H_APPENDED = 72,      /* u64 */
    H_HIGH_WATER = 80,    /* u64 */
    H_READ_POS = 128,     /* u64, consumer cache line */
    H_DROPPED_FULL = 192, /* u64, cold line */
    H_DROPPED_BIG = 200,  /* u64 */
};

static const char ring_magic[8] = {'C', 'A', 'I', 'R', 'N', 'R', 'N', 'G'};

/* Record header: u64 publish word, u32 length|kind, u32 CRC32C over header bytes
 * 0..11 then (for data records) the payload. The publish word is the record's
 * position with bit 0 set: positions are multiples of 16, so a word from an earlier
 * lap never matches, and neither does the zero of a fresh file (which would otherwise
 * pass for a record published at position 0). */
#define KIND_SHIFT 30
#define LEN_MASK ((1u << KIND_SHIFT) - 1)
#define KIND_DATA 0u
#define KIND_PADDING 1u

struct cairn_ring {
    unsigned char *map;  /* whole file */
    unsigned char *data; /* map + CAIRN_RING_HEADER_SIZE */
    uint64_t *write_pos, *read_pos;
    uint64_t *appended, *high_water, *dropped_full, *dropped_big;
    uint64_t capacity, mask;
    size_t map_len;
    uint32_t max_record;
    uint32_t reclaim_bytes;
    size_t page_size;
    int fd;
    /* Consumer-only state. */
    uint64_t peeked_to;    /* furthest `next` handed out by peek */
    uint64_t reclaimed_to; /* pages before this position have been dropped */
    uint64_t populated_to; /* pages before this position have been prefaulted */
    int populate_failed;   /* the kernel lacks MADV_POPULATE_WRITE */
    /* Set at open. */
    cairn__recovery_t recovery;
    uint32_t origin;
};

static inline uint64_t align_up(uint64_t v) { return (v + (CAIRN_RING_ALIGN - 1)) & ~(uint64_t)(CAIRN_RING_ALIGN - 1); }
static inline uint64_t load_acq(const uint64_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static inline void store_rel(uint64_t *p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
static inline void count(uint64_t *p) { __atomic_fetch_add(p, 1, __ATOMIC_RELAXED); }
static inline uint64_t publish_word(uint64_t pos) { return pos | 1; }

static uint32_t header_crc(uint32_t len_kind, uint64_t pos)
{
    return cairn__crc32c_after(publish_word(pos), len_kind, NULL, 0);
}

/* Writes a published padding record of `total` bytes (header included) at `pos`. */
static void write_padding(unsigned char *data, uint64_t mask, uint64_t pos, uint64_t total)
{
    unsigned char *h = data + (pos & mask);
    uint32_t len_kind = (uint32_t)(total - CAIRN_RING_RECORD_HEADER) | (KIND_PADDING << KIND_SHIFT);
    cairn__put32(h + 8, len_kind);
    cairn__put32(h + 12, header_crc(len_kind, pos));
    store_rel((uint64_t *)h, publish_word(pos));
}

/* Fills [from, to) with padding records, one per lap. */
static void fill_padding(unsigned char *data, uint64_t capacity, uint64_t from, uint64_t to)
{
    while (from < to) {
        uint64_t lap_end = (from | (capacity - 1)) + 1;
        uint64_t end = to < lap_end ? to : lap_end;
        write_padding(data, capacity - 1, from, end - from);
        from = end;
    }
}

/* Is there a complete, valid record at `pos`, ending at or before `limit`? On success
 * stores its total size (header, payload, alignment) in *total. */
static int valid_record_at(const unsigned char *data, uint64_t capacity, uint64_t pos,
                           uint64_t limit, int check_crc, uint64_t *total, uint32_t *len_kind_out)
{
    uint64_t off = pos & (capacity - 1);
    const unsigned char *h = data + off;
    if (load_acq((const uint64_t *)h) != publish_word(pos)) return 0;
    uint32_t len_kind = cairn__le32(h + 8);
    uint32_t kind = len_kind >> KIND_SHIFT;
    uint64_t len = len_kind & LEN_MASK;
    if (kind != KIND_DATA && kind != KIND_PADDING) return 0;
    uint64_t size = kind == KIND_PADDING ? CAIRN_RING_RECORD_HEADER + len
                                         : align_up(CAIRN_RING_RECORD_HEADER + len);
    if (size % CAIRN_RING_ALIGN != 0 || off + size > capacity || pos + size > limit) return 0;
    if (check_crc) {
        uint32_t crc = cairn__crc32c_after(publish_word(pos), len_kind, h + CAIRN_RING_RECORD_HEADER,
                                           kind == KIND_DATA ? len : 0);
        if (crc != cairn__le32(h + 12)) return 0;
    }
    *total = size;
    *len_kind_out = len_kind;
    return 1;
}

int cairn__ring_recover(unsigned char *data, uint64_t capacity, uint64_t read_pos,
                        uint64_t write_pos, cairn__recovery_t *out)
{
    memset(out, 0, sizeof *out);
    uint64_t pos = read_pos;
    while (pos < write_pos) {
        uint64_t total;
        uint32_t len_kind;
        if (valid_record_at(data, capacity, pos, write_pos, 1, &total, &len_kind)) {
            if ((len_kind >> KIND_SHIFT) == KIND_DATA) out->recovered++;
            pos += total;
            continue;
        }
        /* Torn or damaged: the next valid header is where the data resumes. Each
         * candidate is checked once, so the scan is bounded by the window size. */
        uint64_t next = pos + CAIRN_RING_ALIGN;
        while (next < write_pos && !valid_record_at(data, capacity, next, write_pos, 1, &total, &len_kind))
            next += CAIRN_RING_ALIGN;
        if (next > write_pos) next = write_pos;
        fill_padding(data, capacity, pos, next);
        out->skipped_regions++;
        out->skipped_bytes += next - pos;
        pos = next;
    }
    return 0;
}

int cairn__ring_check_header(const unsigned char *hdr, size_t hdr_len, uint64_t file_size)
{
    if (hdr_len < CAIRN_RING_HEADER_SIZE || file_size < CAIRN_RING_HEADER_SIZE) return CAIRN_ETRUNCATED;
    if (memcmp(hdr + H_MAGIC, ring_magic, sizeof ring_magic) != 0) return CAIRN_ECORRUPT;
    if (cairn__crc32c(0, hdr, H_CRC) != cairn__le32(hdr + H_CRC)) return CAIRN_ECORRUPT;
    if (cairn__le32(hdr + H_VERSION) != CAIRN_RING_FORMAT_VERSION) return CAIRN_EVERSION;
    uint64_t cap = cairn__le64(hdr + H_CAPACITY);
    if (cairn__le32(hdr + H_HEADER_SIZE) != CAIRN_RING_HEADER_SIZE || cap < CAIRN_RING_MIN_CAPACITY ||
        cap > CAIRN_RING_MAX_CAPACITY || (cap & (cap - 1)) != 0)
        return CAIRN_ECORRUPT;
    if (file_size != CAIRN_RING_HEADER_SIZE + cap) return CAIRN_ETRUNCATED;
    uint64_t w = cairn__le64(hdr + H_WRITE_POS), r = cairn__le64(hdr + H_READ_POS);
    if (w % CAIRN_RING_ALIGN || r % CAIRN_RING_ALIGN || w < r || w - r > cap) return CAIRN_ECORRUPT;
    return 0;
}

void cairn_ring_options_init(cairn_ring_options_t *opts)
{
    if (!opts) return;
    memset(opts, 0, sizeof *opts);
    opts->capacity = CAIRN_RING_DEFAULT_CAPACITY;
    opts->max_record = 0;
    opts->reclaim_bytes = 64u * 1024u;
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
    memcpy(hdr + H_MAGIC, ring_magic, sizeof ring_magic);
    cairn__put32(hdr + H_VERSION, CAIRN_RING_FORMAT_VERSION);
    cairn__put32(hdr + H_HEADER_SIZE, CAIRN_RING_HEADER_SIZE);
    cairn__put64(hdr + H_CAPACITY, capacity);
    cairn__put32(hdr + H_CRC, cairn__crc32c(0, hdr, H_CRC));
    ssize_t n;
    do n = pwrite(fd, hdr, sizeof hdr, 0); while (n < 0 && errno == EINTR);
    if (n < 0) return errno;
    if ((size_t)n != sizeof hdr) return EIO;
    return 0;
}

/* Renames a file that is not a readable ring out of the way: it is kept for a
 * person to look at, never deleted. */
static int set_aside(const char *path)
{
    size_t n = strlen(path) + 64;
    char *aside = malloc(n);
    if (!aside) return CAIRN_ENOMEM;
    snprintf(aside, n, "%s.corrupt-%lld-%d", path, (long long)time(NULL), (int)getpid());
    int rc = rename(path, aside) == 0 ? 0 : errno;
    free(aside);
    return rc;
}

static int open_locked(const char *path, int *fd_out)
{
    int fd;
    do fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600); while (fd < 0 && errno == EINTR);
    if (fd < 0) return errno;
    int rc;
    do rc = flock(fd, LOCK_EX | LOCK_NB); while (rc != 0 && errno == EINTR);
    if (rc != 0) {
        int err = errno;
        close(fd);
        return err == EWOULDBLOCK ? CAIRN_ELOCKED : err;
    }
    *fd_out = fd;
    return 0;
}

/* Reads and checks the header of an existing file. Returns 0 for a usable ring, a
 * format error for a file to set aside, or an errno for an I/O failure. */
static int check_file(int fd, uint64_t *capacity)
{
    struct stat st;
    if (fstat(fd, &st) != 0) return errno;
    unsigned char hdr[CAIRN_RING_HEADER_SIZE];
    size_t got = 0;
    while (got < sizeof hdr) {
        ssize_t n = pread(fd, hdr + got, sizeof hdr - got, (off_t)got);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return errno;
        if (n == 0) break;
        got += (size_t)n;
    }
    int rc = cairn__ring_check_header(hdr, got, (uint64_t)st.st_size);
    if (rc == 0) *capacity = cairn__le64(hdr + H_CAPACITY);
    return rc;
}

static uint64_t round_capacity(uint64_t want)
{
    uint64_t cap = CAIRN_RING_MIN_CAPACITY;
    while (cap < want) cap <<= 1;
    return cap;
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
    uint64_t want_cap = round_capacity(o.capacity);

    int fd = -1, rc;
    uint32_t origin = CAIRN_RING_REOPENED;
    uint64_t capacity = 0;
    if ((rc = open_locked(path, &fd)) != 0) return rc;

    struct stat st;
    if (fstat(fd, &st) != 0) { rc = errno; goto fail; }
    if (st.st_size == 0) {
        origin = CAIRN_RING_CREATED;
    } else {
        rc = check_file(fd, &capacity);
        if (rc > 0) goto fail; /* I/O error: leave the file alone */
        if (rc < 0) origin = CAIRN_RING_SET_ASIDE;
    }
    if (origin == CAIRN_RING_SET_ASIDE) {
        if ((rc = set_aside(path)) != 0) goto fail;
        close(fd);
        fd = -1;
        if ((rc = open_locked(path, &fd)) != 0) return rc;
        if (fstat(fd, &st) != 0) { rc = errno; goto fail; }
        if (st.st_size != 0) { rc = CAIRN_ELOCKED; goto fail; } /* someone else made one */
    }
    if (origin != CAIRN_RING_REOPENED) {
        capacity = want_cap;
        if ((rc = create_ring(fd, capacity)) != 0) goto fail;
    } else {
        /* Make sure every block exists (a copied or restored file may be sparse). */
        if ((rc = posix_fallocate(fd, 0, (off_t)(CAIRN_RING_HEADER_SIZE + capacity))) != 0) goto fail;
    }

    cairn_ring_t *r = calloc(1, sizeof *r);
    if (!r) { rc = CAIRN_ENOMEM; goto fail; }
    r->fd = fd;
    r->capacity = capacity;
    r->mask = capacity - 1;
    r->map_len = CAIRN_RING_HEADER_SIZE + capacity;
    r->map = mmap(NULL, r->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (r->map == MAP_FAILED) { rc = errno; free(r); goto fail; }
    r->data = r->map + CAIRN_RING_HEADER_SIZE;
    r->write_pos = (uint64_t *)(r->map + H_WRITE_POS);
    r->read_pos = (uint64_t *)(r->map + H_READ_POS);
    r->appended = (uint64_t *)(r->map + H_APPENDED);
    r->high_water = (uint64_t *)(r->map + H_HIGH_WATER);
    r->dropped_full = (uint64_t *)(r->map + H_DROPPED_FULL);
    r->dropped_big = (uint64_t *)(r->map + H_DROPPED_BIG);
    long ps = sysconf(_SC_PAGESIZE);
    r->page_size = ps > 0 ? (size_t)ps : 4096;
    uint32_t limit = (uint32_t)(capacity / 4);
    r->max_record = o.max_record == 0 || o.max_record > limit ? limit : o.max_record;
    r->reclaim_bytes = o.reclaim_bytes;
    r->origin = origin;

    if (origin == CAIRN_RING_REOPENED)
        cairn__ring_recover(r->data, capacity, load_acq(r->read_pos), load_acq(r->write_pos), &r->recovery);
    r->peeked_to = load_acq(r->read_pos);
    r->reclaimed_to = r->peeked_to;
    r->populated_to = r->peeked_to;
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

int cairn_ring_reserve(cairn_ring_t *ring, size_t len, cairn_ring_reservation_t *res)
{
    if (!ring || !res) return CAIRN_EINVAL;
    if (len > ring->max_record) {
        count(ring->dropped_big);
        return CAIRN_ETOOBIG;
    }
    const uint64_t need = align_up(CAIRN_RING_RECORD_HEADER + len);
    const uint64_t cap = ring->capacity;
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
            count(ring->dropped_full);
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
    if (start != head) write_padding(ring->data, ring->mask, head, start - head);
    res->pos = start;
    res->data = ring->data + (start & ring->mask) + CAIRN_RING_RECORD_HEADER;
    res->capacity = (uint32_t)(need - CAIRN_RING_RECORD_HEADER);
    return 0;
}

/* Seals a record of `len` payload bytes whose CRC is `crc` (header included) and
 * publishes it, turning unused reserved room into padding first. */
static void seal(cairn_ring_t *ring, cairn_ring_reservation_t *res, size_t len, uint32_t len_kind, uint32_t crc)
{
    unsigned char *h = ring->data + (res->pos & ring->mask);
    uint64_t used = align_up(CAIRN_RING_RECORD_HEADER + len);
    uint64_t reserved = CAIRN_RING_RECORD_HEADER + (uint64_t)res->capacity;
    if (used < reserved) write_padding(ring->data, ring->mask, res->pos + used, reserved - used);
    cairn__put32(h + 8, len_kind);
    cairn__put32(h + 12, crc);
    store_rel((uint64_t *)h, publish_word(res->pos));
    count(ring->appended);
    res->data = NULL;
}

int cairn_ring_publish(cairn_ring_t *ring, cairn_ring_reservation_t *res, size_t len)
{
    if (!ring || !res || !res->data) return CAIRN_EINVAL;
    if (len > res->capacity) {
        cairn_ring_cancel(ring, res);
        return CAIRN_EINVAL;
    }
    uint32_t len_kind = (uint32_t)len | (KIND_DATA << KIND_SHIFT);
    seal(ring, res, len, len_kind, cairn__crc32c_after(publish_word(res->pos), len_kind, res->data, len));
    return 0;
}

void cairn_ring_cancel(cairn_ring_t *ring, cairn_ring_reservation_t *res)
{
    if (!ring || !res || !res->data) return;
    write_padding(ring->data, ring->mask, res->pos, CAIRN_RING_RECORD_HEADER + (uint64_t)res->capacity);
    res->data = NULL;
}

int cairn_ring_append(cairn_ring_t *ring, const void *data, size_t len)
{
    if (!ring || (!data && len)) return CAIRN_EINVAL;
    cairn_ring_reservation_t res;
    int rc = cairn_ring_reserve(ring, len, &res);
    if (rc != 0) return rc;
    uint32_t len_kind = (uint32_t)len | (KIND_DATA << KIND_SHIFT);
    /* The CRC is taken from the caller's bytes, still in cache, not re-read from the
     * mapping just written. */
    uint32_t crc = cairn__crc32c_after(publish_word(res.pos), len_kind, data, len);
    if (len) memcpy(res.data, data, len);
    seal(ring, &res, len, len_kind, crc);
    return 0;
}

uint64_t cairn_ring_read_pos(const cairn_ring_t *ring)
{
    return ring ? load_acq(ring->read_pos) : 0;
}

int cairn_ring_peek(cairn_ring_t *ring, uint64_t from, cairn_ring_record_t *records,
                    size_t max_records, size_t max_bytes, uint64_t *next)
{
    if (!ring || !next || (!records && max_records)) return CAIRN_EINVAL;
    uint64_t tail = load_acq(ring->read_pos);
    uint64_t head = load_acq(ring->write_pos);
    if (from < tail || from > head || from % CAIRN_RING_ALIGN) return CAIRN_EINVAL;
    size_t n = 0, bytes = 0;
    uint64_t pos = from;
    while (pos < head && n < max_records) {
        uint64_t total;
        uint32_t len_kind;
        /* In-process, a published record is complete: the CRC is for recovery. */
        if (!valid_record_at(ring->data, ring->capacity, pos, head, 0, &total, &len_kind)) break;
        if ((len_kind >> KIND_SHIFT) == KIND_DATA) {
            uint32_t len = len_kind & LEN_MASK;
            if (n > 0 && bytes + len > max_bytes) break;
            records[n].data = ring->data + (pos & ring->mask) + CAIRN_RING_RECORD_HEADER;
            records[n].len = len;
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
    if (to - from > ring->capacity) from = to - ring->capacity;
    while (from < to) {
        uint64_t lap_end = (from | ring->mask) + 1;
        uint64_t end = to < lap_end ? to : lap_end;
        uintptr_t a = (uintptr_t)(ring->data + (from & ring->mask));
        uintptr_t b = (uintptr_t)(ring->data + ((end - 1) & ring->mask) + 1);
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
 * itself (MADV_POPULATE_WRITE), off the producers' path. */
static void manage_pages(cairn_ring_t *ring, uint64_t tail)
{
    if (tail - ring->reclaimed_to >= ring->reclaim_bytes) {
        advise(ring, ring->reclaimed_to, tail, MADV_DONTNEED);
        /* Resume at the start of the page holding `tail`, which is not dropped yet. */
        uintptr_t in_page = (uintptr_t)(ring->data + (tail & ring->mask)) & (ring->page_size - 1);
        if (tail - in_page > ring->reclaimed_to) ring->reclaimed_to = tail - in_page;
    }
    if (ring->populate_failed) return;
    uint64_t head = load_acq(ring->write_pos);
    uint64_t runway = 4 * (uint64_t)ring->reclaim_bytes;
    if (runway > ring->capacity / 4) runway = ring->capacity / 4;
    uint64_t from = ring->populated_to > head ? ring->populated_to : head;
    uint64_t to = head + runway < tail + ring->capacity ? head + runway : tail + ring->capacity;
    if (to >= from + runway / 2) {
        if (advise(ring, from, to, MADV_POPULATE_WRITE) == EINVAL) ring->populate_failed = 1;
        ring->populated_to = to;
    }
}

int cairn_ring_commit(cairn_ring_t *ring, uint64_t upto)
{
    if (!ring) return CAIRN_EINVAL;
    uint64_t tail = load_acq(ring->read_pos);
    if (upto < tail || upto > ring->peeked_to || upto % CAIRN_RING_ALIGN) return CAIRN_EINVAL;
    store_rel(ring->read_pos, upto);
    if (ring->reclaim_bytes) manage_pages(ring, upto);
    return 0;
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
    uint64_t tail = load_acq(ring->read_pos);
    uint64_t head = load_acq(ring->write_pos);
    s->capacity = ring->capacity;
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
    return 0;
}
