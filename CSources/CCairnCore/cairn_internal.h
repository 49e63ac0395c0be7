/* cairn_internal.h: declarations shared between the C cores' files (the crash core
 * includes it by its relative path). Not installed, not part of the ABI. */
#ifndef CAIRN_INTERNAL_H
#define CAIRN_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "cairn_core.h"

/* CRC32C (Castagnoli, reflected, as in iSCSI and ext4): continues `crc` over `len`
 * bytes. Start with 0. Uses the SSE4.2 / ARMv8 CRC instructions when the CPU has
 * them. Async-signal-safe. */
uint32_t cairn__crc32c(uint32_t crc, const void *data, size_t len);

/* CRC32C of the 12 bytes w (64-bit little-endian), v (32-bit little-endian), then
 * `len` bytes of `data`: a ring record's checksum in one call. */
uint32_t cairn__crc32c_after(uint64_t w, uint32_t v, const void *data, size_t len);

/* Little-endian loads and stores of the on-disk formats (the core targets
 * little-endian machines; these keep the intent explicit and alignment-safe). */
static inline uint16_t cairn__le16(const unsigned char *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t cairn__le32(const unsigned char *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline uint64_t cairn__le64(const unsigned char *p)
{
    return (uint64_t)cairn__le32(p) | ((uint64_t)cairn__le32(p + 4) << 32);
}
static inline void cairn__put16(unsigned char *p, uint16_t v) { p[0] = (unsigned char)v; p[1] = (unsigned char)(v >> 8); }
static inline void cairn__put32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v; p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16); p[3] = (unsigned char)(v >> 24);
}
static inline void cairn__put64(unsigned char *p, uint64_t v)
{
    cairn__put32(p, (uint32_t)v); cairn__put32(p + 4, (uint32_t)(v >> 32));
}

/* A ring's data area in memory: where it is, its capacity (a power of two) and the
 * file's salt (bit 0 clear). */
typedef struct cairn__ring_area {
    unsigned char *data;
    uint64_t capacity;
    uint64_t salt;
} cairn__ring_area_t;

/* The word that marks the record at `pos` as published: its position with bit 0 set,
 * XORed with the salt. */
static inline uint64_t cairn__ring_publish_word(const cairn__ring_area_t *a, uint64_t pos)
{
    return (pos | 1) ^ a->salt;
}

/* What recovery found. */
typedef struct cairn__recovery {
    uint64_t recovered;       /* data records in the window, intact */
    uint64_t skipped_regions; /* torn or damaged regions rewritten as padding */
    uint64_t skipped_bytes;   /* bytes in those regions */
    uint64_t taken_in;        /* data records found beyond the write cursor and taken in */
    uint64_t contexts;        /* context records among `recovered` */
} cairn__recovery_t;

/* cairn__ring_recover() flags. */
#define CAIRN__RECOVER_CLEAR_STALE 1 /* clear stale headers outside the window */
#define CAIRN__RECOVER_READ_ONLY 2   /* count only: write nothing (the area may be read-only) */

/* Ring recovery over a data area in memory (see ring.c), exposed so the fuzzer can
 * drive it without files. Walks the records from read_pos on: records beyond
 * *write_pos that follow one another from it are taken in (the header missed them),
 * a record the write cursor points inside is kept whole, and torn regions inside the
 * window are rewritten as padding and counted. With CAIRN__RECOVER_CLEAR_STALE (after
 * a reboot or a repair), every word outside the window's records that reads as a
 * publish word of its offset, of any lap, is cleared. With CAIRN__RECOVER_READ_ONLY,
 * the same walk and counts with nothing written. Returns 0. */
int cairn__ring_recover(const cairn__ring_area_t *area, uint64_t read_pos, uint64_t *write_pos,
                        int flags, cairn__recovery_t *out);

/* cairn_ring_inspect() over a file's bytes in memory, exposed for the fuzzer: its
 * header `hdr` (CAIRN_RING_HEADER_SIZE bytes, zeros past a shorter file), the file's
 * size, and the `avail` bytes of data area it holds at `data`. Reads nothing else
 * and writes nothing there. */
int cairn__ring_inspect_bytes(const unsigned char *hdr, uint64_t file_size, const unsigned char *data,
                              uint64_t avail, cairn_ring_inspection_t *out);

/* How to open an existing ring file: the header values to use and what they repair. */
typedef struct cairn__ring_plan {
    uint64_t capacity;
    uint64_t salt;
    uint64_t read_pos;
    uint64_t write_pos;
    uint32_t repairs; /* CAIRN_RING_REPAIR_* bits; 0 for a sound file */
    int header_only;  /* the header alone planned it: the data area was not read */
} cairn__ring_plan_t;

/* Plans the opening of an existing ring file from its header `hdr`
 * (CAIRN_RING_HEADER_SIZE bytes; bytes past the end of a shorter file read as zero),
 * the file's size, and the `avail` bytes of data area that the file holds at `data`
 * (NULL when avail is 0). A sound file is planned as it is. A damaged header is
 * repaired from the records, whose checksums need neither the salt nor the position
 * (docs/FORMATS.md, "Recovery"). Returns 0 with *plan filled; CAIRN_EVERSION for a
 * file of a newer format (its header checks out, its version or flags are unknown);
 * CAIRN_ECORRUPT when nothing in it can be trusted (no sound header, no intact
 * record); CAIRN_ENOMEM. With `data` NULL, a plan whose `header_only` is 0 must be made
 * again with the data area. */
int cairn__ring_plan(const unsigned char *hdr, uint64_t file_size, const unsigned char *data,
                     uint64_t avail, cairn__ring_plan_t *plan);

/* Carries out a plan on a ring in memory, before any producer runs: writes the
 * header's fixed part, cursors and read check into `hdr`, then recovers the window of
 * the data area `data` (plan->capacity bytes; clearing stale words after a reboot or
 * any repair) and stores the final write cursor. Returns the plan's repairs, plus
 * CAIRN_RING_REPAIR_WRITE_POS when, within one boot, records were found beyond the
 * write cursor. */
uint32_t cairn__ring_restore(unsigned char *hdr, unsigned char *data, const cairn__ring_plan_t *plan,
                             int after_reboot, cairn__recovery_t *out);

/* Validates the drop table in header `hdr` (see ring.c): damaged or half-claimed
 * slots that hold counts are renamed `unknown` (the catch-all slot `other`), empty
 * ones freed, duplicate names merged, `reported` clamped to `counted`. Never fails.
 * Returns the number of slots it changed. */
uint32_t cairn__ring_check_drops(unsigned char *hdr);

/* Size of the ring file header; data starts at this offset. */
#define CAIRN_RING_HEADER_SIZE 4096u

#endif
