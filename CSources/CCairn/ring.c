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
 * budgeted, so no file makes open slow. Within one boot the page cache holds every
 * byte written through the mapping; after a reboot (the boot id in the header
 * differs), recovery also takes in records the stale header missed and clears stale
 * words that producers might otherwise reuse.
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
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; older kernels answer EINVAL */
#endif

/* Header layout (byte offsets). Bytes 0..35 are fixed at creation and covered by
 * the header CRC; the boot id, cursors and counters after them change. */
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
    H_DROPPED_FULL = 192, /* u64, cold line */
    H_DROPPED_BIG = 200,  /* u64 */
};

static const char ring_magic[8] = {'C', 'A', 'I', 'R', 'N', 'R', 'N', 'G'};

/* Record header: u64 publish word, u32 length|kind, u32 CRC32C over header bytes
 * 0..11 then (for data records) the payload. The publish word is the record's
 * position with bit 0 set, XORed with the file's salt. Positions are multiples of 16,
 * so a word from an earlier lap never matches, neither does the zero of a fresh file
 * (which would otherwise pass for a record published at position 0), and the salt
 * keeps payload bytes that happen to hold a position from passing for a header. */
#define KIND_SHIFT 30
#define LEN_MASK ((1u << KIND_SHIFT) - 1)
#define KIND_DATA 0u
#define KIND_PADDING 1u

/* Largest position accepted in a file: far beyond what a ring writes in centuries
 * (2^62 bytes), and low enough that position arithmetic can never overflow. */
#define MAX_POSITION (1ull << 62)
/* Recovery computes CRCs over at most this many capacities' worth of bytes, so a
 * damaged or hostile file cannot make open quadratic in the capacity. */
#define RECOVERY_CRC_BUDGET 4u

struct cairn_ring {
    unsigned char *map;  /* whole file */
    cairn__ring_area_t area; /* data area (map + CAIRN_RING_HEADER_SIZE), capacity, salt */
    uint64_t *write_pos, *read_pos;
    uint64_t *appended, *high_water, *dropped_full, *dropped_big;
    uint64_t mask;
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
    uint32_t kind = len_kind >> KIND_SHIFT;
    uint64_t len = len_kind & LEN_MASK;
    if (kind != KIND_DATA && kind != KIND_PADDING) return 0;
    uint64_t size = kind == KIND_PADDING ? CAIRN_RING_RECORD_HEADER + len
                                         : align_up(CAIRN_RING_RECORD_HEADER + len);
    if (size % CAIRN_RING_ALIGN != 0 || size > a->capacity - off || pos > limit || size > limit - pos)
        return 0;
    if (crc_budget) {
        uint64_t covered = kind == KIND_DATA ? len : 0;
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

int cairn__ring_recover(const cairn__ring_area_t *a, uint64_t read_pos, uint64_t *write_pos,
                        int after_reboot, cairn__recovery_t *out)
{
    memset(out, 0, sizeof *out);
    uint64_t budget = RECOVERY_CRC_BUDGET * a->capacity;
    uint64_t write = *write_pos, total;
    uint32_t len_kind;
    if (after_reboot) {
        /* The kernel wrote the mapping back in no particular order, so records
         * published after the header's last write-back may lie beyond write_pos:
         * they are real, take them in. */
        while (write < read_pos + a->capacity && valid_record_at(a, write, read_pos + a->capacity,
                                                                 &budget, &total, &len_kind))
            write += total;
    }
    uint64_t pos = read_pos;
    while (pos < write) {
        if (valid_record_at(a, pos, write, &budget, &total, &len_kind)) {
            if ((len_kind >> KIND_SHIFT) == KIND_DATA) out->recovered++;
            pos += total;
            continue;
        }
        /* Torn or damaged: the next valid header is where the data resumes. Each
         * candidate is looked at once and CRCs are budgeted, so this is linear. */
        uint64_t next = pos + CAIRN_RING_ALIGN;
        while (next < write && budget > 0 && !valid_record_at(a, next, write, &budget, &total, &len_kind))
            next += CAIRN_RING_ALIGN;
        if (next > write || budget == 0) next = write;
        fill_padding(a, pos, next);
        out->skipped_regions++;
        out->skipped_bytes += next - pos;
        pos = next;
    }
    if (after_reboot) {
        /* Beyond the window, a record left by a lap the header never saw could match
         * a position that producers are about to reuse: clear every such word. */
        for (uint64_t q = write; q < read_pos + a->capacity; q += CAIRN_RING_ALIGN) {
            uint64_t *w = word_at(a, q);
            if (*w == cairn__ring_publish_word(a, q)) *w = 0;
        }
    }
    *write_pos = write;
    return 0;
}

int cairn__ring_check_header(const unsigned char *hdr, size_t hdr_len, uint64_t file_size)
{
    if (hdr_len < CAIRN_RING_HEADER_SIZE || file_size < CAIRN_RING_HEADER_SIZE) return CAIRN_ETRUNCATED;
    if (memcmp(hdr + H_MAGIC, ring_magic, sizeof ring_magic) != 0) return CAIRN_ECORRUPT;
    if (cairn__crc32c(0, hdr, H_CRC) != cairn__le32(hdr + H_CRC)) return CAIRN_ECORRUPT;
    /* Unknown flags would change how the file reads: treat them as a newer version. */
    if (cairn__le32(hdr + H_VERSION) != CAIRN_RING_FORMAT_VERSION || cairn__le32(hdr + H_FLAGS) != 0)
        return CAIRN_EVERSION;
    uint64_t cap = cairn__le64(hdr + H_CAPACITY);
    if (cairn__le32(hdr + H_HEADER_SIZE) != CAIRN_RING_HEADER_SIZE || cap < CAIRN_RING_MIN_CAPACITY ||
        cap > CAIRN_RING_MAX_CAPACITY || (cap & (cap - 1)) != 0 || (cairn__le64(hdr + H_SALT) & 1))
        return CAIRN_ECORRUPT;
    if (file_size != CAIRN_RING_HEADER_SIZE + cap) return CAIRN_ETRUNCATED;
    uint64_t w = cairn__le64(hdr + H_WRITE_POS), r = cairn__le64(hdr + H_READ_POS);
    if (w % CAIRN_RING_ALIGN || r % CAIRN_RING_ALIGN || w < r || w - r > cap || w > MAX_POSITION)
        return CAIRN_ECORRUPT;
    return 0;
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
    memcpy(hdr + H_MAGIC, ring_magic, sizeof ring_magic);
    cairn__put32(hdr + H_VERSION, CAIRN_RING_FORMAT_VERSION);
    cairn__put32(hdr + H_HEADER_SIZE, CAIRN_RING_HEADER_SIZE);
    cairn__put64(hdr + H_CAPACITY, capacity);
    cairn__put64(hdr + H_SALT, new_salt());
    cairn__put32(hdr + H_CRC, cairn__crc32c(0, hdr, H_CRC));
    ssize_t n;
    do n = pwrite(fd, hdr, sizeof hdr, 0); while (n < 0 && errno == EINTR);
    if (n < 0) return errno;
    if ((size_t)n != sizeof hdr) return EIO;
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
 * our open and our flock, and then we retry on the new file. */
static int open_locked(const char *path, int *fd_out)
{
    for (int attempt = 0; attempt < 8; attempt++) {
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
        if (st.st_size != 0) { rc = CAIRN_ELOCKED; goto fail; } /* another process made one */
    }
    if (origin != CAIRN_RING_REOPENED) {
        capacity = round_capacity(o.capacity);
        if ((rc = create_ring(fd, capacity)) != 0) goto fail;
    } else {
        /* Make sure every block exists (a copied or restored file may be sparse). */
        if ((rc = posix_fallocate(fd, 0, (off_t)(CAIRN_RING_HEADER_SIZE + capacity))) != 0) goto fail;
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
    r->area.salt = cairn__le64(r->map + H_SALT);
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

    /* Within one boot the page cache holds every byte any process wrote to the
     * mapping; after a reboot only what the kernel happened to write back survives. */
    unsigned char boot[16];
    read_boot_id(boot);
    static const unsigned char unknown[16];
    int rebooted = memcmp(boot, r->map + H_BOOT_ID, sizeof boot) != 0 || memcmp(boot, unknown, sizeof boot) == 0;
    memcpy(r->map + H_BOOT_ID, boot, sizeof boot);
    if (origin == CAIRN_RING_REOPENED) {
        uint64_t write = *r->write_pos;
        cairn__ring_recover(&r->area, *r->read_pos, &write, rebooted, &r->recovery);
        *r->write_pos = write;
    }
    r->peeked_to = *r->read_pos;
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

int cairn_ring_publish(cairn_ring_t *ring, cairn_ring_reservation_t *res, size_t len)
{
    if (!ring || !res || !res->data) return CAIRN_EINVAL;
    if (len > res->capacity) {
        cairn_ring_cancel(ring, res);
        return CAIRN_EINVAL;
    }
    uint32_t len_kind = (uint32_t)len | (KIND_DATA << KIND_SHIFT);
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
    if (!ring || (!data && len)) return CAIRN_EINVAL;
    cairn_ring_reservation_t res;
    int rc = cairn_ring_reserve(ring, len, &res);
    if (rc != 0) return rc;
    uint32_t len_kind = (uint32_t)len | (KIND_DATA << KIND_SHIFT);
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
        if ((len_kind >> KIND_SHIFT) == KIND_DATA) {
            uint32_t len = len_kind & LEN_MASK;
            if (n > 0 && bytes + len > max_bytes) break;
            records[n].data = ring->area.data + (pos & ring->mask) + CAIRN_RING_RECORD_HEADER;
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
 * itself (MADV_POPULATE_WRITE), off the producers' path. */
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
    uint64_t runway = 4 * (uint64_t)ring->reclaim_bytes;
    if (runway > ring->area.capacity / 4) runway = ring->area.capacity / 4;
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
    return 0;
}

uint64_t cairn_ring_id(const cairn_ring_t *ring)
{
    return ring ? ring->area.salt | 1u : 0;
}
