/*
 * cairn_core.h: the public interface of Cairn's storage core (CCairnCore), which every
 * part of Cairn may link: it starts no thread, installs no handler and defines no libc
 * function.
 *
 * It holds what must be fast or crash-proof:
 *   - a file-backed, memory-mapped ring buffer of records (many producers, one
 *     consumer) that survives the process being killed;
 *   - zstd framing: a batch of records becomes one standard zstd frame, preceded by a
 *     skippable frame carrying Cairn's metadata, so any zstd tool can read the body;
 *   - the error codes and versions shared by both cores.
 *
 * The crash core (cairn_crash.h) builds on it; CCairn.h includes both, for C programs
 * and other SDKs that link libcairn.
 *
 * This header includes only the C standard library. Handles are opaque; structures
 * passed by value hold fixed-width types only. On-disk and on-wire layouts are
 * specified in docs/FORMATS.md.
 *
 * Conventions:
 *   - Functions returning `int` return 0 on success, a negative CAIRN_E* code for a
 *     Cairn error, or a positive errno value for a failed system call.
 *   - Each function documents its ownership rules, its thread-safety and whether it
 *     is async-signal-safe.
 */
#ifndef CAIRN_CORE_H
#define CAIRN_CORE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------ */
/* Versions                                                                         */
/* ------------------------------------------------------------------------------ */

/** The SDK's version: the one source of the C core's, the Swift SDK's (`cairnVersion`)
 *  and the `sdk.version` of events. Semantic versioning: a major version changes the
 *  C ABI or a file format incompatibly. */
#define CAIRN_VERSION_MAJOR 0
#define CAIRN_VERSION_MINOR 2
#define CAIRN_VERSION_PATCH 0
/** The version as text, "MAJOR.MINOR.PATCH". */
#define CAIRN_VERSION_STRING "0.2.0"
/** The version as one number, major * 10000 + minor * 100 + patch, for `#if`. */
#define CAIRN_CORE_VERSION (CAIRN_VERSION_MAJOR * 10000 + CAIRN_VERSION_MINOR * 100 + CAIRN_VERSION_PATCH)

/** Marks the library's exported functions. libcairn is built with hidden visibility,
 *  so only these (all named `cairn_*`) are exported; internals (`cairn__*`) are not. */
#if defined(__GNUC__) || defined(__clang__)
#define CAIRN_API __attribute__((visibility("default")))
#else
#define CAIRN_API
#endif

/** Version of the ring file format written by this library (docs/FORMATS.md).
 *  Version 1 files (data and padding records only) are read too, and become version 2
 *  when opened. */
#define CAIRN_RING_FORMAT_VERSION 2

/** Version of the batch frame metadata written by this library (docs/FORMATS.md). */
#define CAIRN_FRAME_FORMAT_VERSION 1

/* ------------------------------------------------------------------------------ */
/* Errors                                                                           */
/* ------------------------------------------------------------------------------ */

/** Success. */
#define CAIRN_OK 0
/** An argument is out of range or a handle is NULL. */
#define CAIRN_EINVAL (-1)
/** The ring has no room for the record; it was dropped and counted. */
#define CAIRN_EFULL (-2)
/** The record is larger than the ring's maximum record size; dropped and counted. */
#define CAIRN_ETOOBIG (-3)
/** Another open handle (in this or another process) owns the ring file. */
#define CAIRN_ELOCKED (-4)
/** Input is damaged: bad magic, bad checksum, inconsistent lengths. */
#define CAIRN_ECORRUPT (-5)
/** Input ends before the structure it announces. */
#define CAIRN_ETRUNCATED (-6)
/** Input was written in a format version this library does not read. */
#define CAIRN_EVERSION (-7)
/** The caller's output buffer is too small. */
#define CAIRN_EBUFSIZE (-8)
/** Decoding would exceed the configured maximum size. */
#define CAIRN_ELIMIT (-9)
/** The zstd library reported an error. */
#define CAIRN_EZSTD (-10)
/** Memory could not be allocated. */
#define CAIRN_ENOMEM (-11)
/** The frame needs a dictionary the decoder does not have. */
#define CAIRN_EDICT (-12)
/* Codes -13 to -99 are reserved for later versions of this library; other SDKs built on
 * it keep theirs at -100 and below. Positive values are errno values. */

/**
 * Describes an error code returned by any cairn_ function.
 *
 * @param err  A negative CAIRN_E* code, 0, or a positive errno value.
 * @return     A static, NUL-terminated English description; never NULL. Unknown codes
 *             give "unknown error". Positive values are described without calling
 *             strerror(3), so the call stays signal-safe.
 *
 * Ownership: the string is static; do not free it.
 * Thread-safety: safe from any thread.
 * Async-signal-safe: yes.
 */
CAIRN_API const char *cairn_strerror(int err);

/**
 * The version of the library linked at run time (which may differ from the header's
 * CAIRN_VERSION_STRING a program was compiled with).
 *
 * @return "MAJOR.MINOR.PATCH", static; never NULL.
 *
 * Thread-safety: safe from any thread. Async-signal-safe: yes.
 */
CAIRN_API const char *cairn_version(void);

/* ------------------------------------------------------------------------------ */
/* Ring buffer                                                                      */
/* ------------------------------------------------------------------------------ */

/**
 * A file-backed ring buffer of variable-size records.
 *
 * Producers (any number of threads) append records without taking a lock; one
 * consumer reads runs of records in order and releases them with a commit once they
 * are safe elsewhere. The file is mapped MAP_SHARED, so a record is durable against
 * the process dying (SIGKILL, crash) as soon as its append returns; it is durable
 * against power loss only after cairn_ring_sync().
 */
typedef struct cairn_ring cairn_ring_t;

/** Default ring capacity in bytes (1 MiB). */
#define CAIRN_RING_DEFAULT_CAPACITY (1u << 20)
/** Smallest accepted ring capacity in bytes (64 KiB). */
#define CAIRN_RING_MIN_CAPACITY (1u << 16)
/** Largest accepted ring capacity in bytes (1 GiB). */
#define CAIRN_RING_MAX_CAPACITY (1u << 30)
/** Size of a record header in the ring file, in bytes. */
#define CAIRN_RING_RECORD_HEADER 16u
/** Records start at multiples of this many bytes. */
#define CAIRN_RING_ALIGN 16u

/** @name Record kinds (docs/FORMATS.md, "Ring file", "Records")
 *  What a record's payload is. The ring stores and returns the kind; what a context
 *  means to the records after it is the consumer's business. */
/** @{ */
/** A complete record: delivered as it is. */
#define CAIRN_RING_KIND_DATA 0u
/** Filler the consumer never sees. */
#define CAIRN_RING_KIND_PADDING 1u
/** A context: applies to every bare record after it, in ring order, until the next
 *  context record. Cairn's payload is the `"context":{...},"sdk":{...}` fragment. */
#define CAIRN_RING_KIND_CONTEXT 2u
/** A bare record: completed by the context in force where it lies (for Cairn, an
 *  event object without its context and sdk fields). */
#define CAIRN_RING_KIND_BARE 3u
/** @} */

/** Options for cairn_ring_open(). Initialise with cairn_ring_options_init(). */
typedef struct cairn_ring_options {
    /** Data capacity in bytes; rounded up to a power of two within
     *  [CAIRN_RING_MIN_CAPACITY, CAIRN_RING_MAX_CAPACITY]. An existing ring keeps the
     *  capacity it was created with. Default CAIRN_RING_DEFAULT_CAPACITY. */
    uint64_t capacity;
    /** Largest payload accepted, in bytes; larger appends fail with CAIRN_ETOOBIG.
     *  0 (the default) and any larger value mean capacity / 4. */
    uint32_t max_record;
    /** Consumed pages are dropped from memory (madvise MADV_DONTNEED) once at least
     *  this many bytes of whole pages have been released by commits, so resident
     *  memory follows the live window rather than the capacity. 0 keeps every page
     *  resident. Default 64 KiB. */
    uint32_t reclaim_bytes;
} cairn_ring_options_t;

/** How cairn_ring_open() found the file. */
typedef enum cairn_ring_origin {
    /** The file did not exist or was empty; a fresh ring was created. */
    CAIRN_RING_CREATED = 0,
    /** A valid ring was reopened with its unconsumed records. */
    CAIRN_RING_REOPENED = 1,
    /** Nothing in the file could be trusted (no sound header and no intact record), or
     *  it was written in a newer format; it was renamed aside and a fresh ring
     *  created. */
    CAIRN_RING_SET_ASIDE = 2,
    /** The header was damaged or the file truncated or extended; the header was
     *  rebuilt (from the records where needed) and every record still proven intact
     *  by its checksum kept. cairn_ring_stats_t.repairs says what was repaired. */
    CAIRN_RING_REPAIRED = 3
} cairn_ring_origin_t;

/** @name What cairn_ring_open() repaired (bits of cairn_ring_stats_t.repairs)
 *  One bit per header field that was rewritten, plus how the window was found. */
/** @{ */
#define CAIRN_RING_REPAIR_MAGIC       0x001u /**< magic */
#define CAIRN_RING_REPAIR_VERSION     0x002u /**< version */
#define CAIRN_RING_REPAIR_HEADER_SIZE 0x004u /**< header size */
#define CAIRN_RING_REPAIR_CAPACITY    0x008u /**< capacity (taken from the file size) */
#define CAIRN_RING_REPAIR_SALT        0x010u /**< salt (inferred from the records) */
#define CAIRN_RING_REPAIR_FLAGS       0x020u /**< flags */
#define CAIRN_RING_REPAIR_HEADER_CRC  0x040u /**< header checksum */
#define CAIRN_RING_REPAIR_WRITE_POS   0x080u /**< write position */
#define CAIRN_RING_REPAIR_READ_POS    0x100u /**< read position, or its check copy */
#define CAIRN_RING_REPAIR_FILE_SIZE   0x200u /**< file length (zeros restored or extra bytes cut) */
/** The read position could not be trusted and was inferred from the records: records
 *  that had already been consumed may be delivered again (Cairn's events carry ids,
 *  so a collector drops the duplicates). */
#define CAIRN_RING_REPAIR_WINDOW_INFERRED 0x400u
/** @} */

/** Counters of one open ring. Counts are since cairn_ring_open(); the cumulative,
 *  persistent drop counts are in the drop table (cairn_ring_read_drops()). */
typedef struct cairn_ring_stats {
    uint64_t capacity;        /**< data capacity in bytes */
    uint64_t used;            /**< bytes between the read and write cursors */
    uint64_t high_water;      /**< largest `used` seen since open */
    uint64_t appended;        /**< records published */
    uint64_t dropped_full;    /**< appends refused with CAIRN_EFULL since open (also counted,
                                   persistently, in the drop table as `ring_full`) */
    uint64_t dropped_too_big; /**< appends refused with CAIRN_ETOOBIG since open (also in the
                                   drop table, as `ring_too_big`) */
    uint64_t recovered;       /**< unconsumed records found intact at open */
    uint64_t skipped_corrupt; /**< torn or damaged regions skipped at open */
    uint64_t skipped_bytes;   /**< bytes in those regions */
    uint32_t origin;          /**< a cairn_ring_origin_t */
    uint32_t max_record;      /**< largest payload accepted */
    uint64_t restored_bytes;  /**< bytes a truncated file lacked, restored as zeros at open */
    uint64_t cut_bytes;       /**< bytes past the end of the ring, cut from a longer file */
    uint32_t repairs;         /**< CAIRN_RING_REPAIR_* bits; 0 unless origin is REPAIRED */
    uint32_t repaired_fields; /**< header fields rewritten at open (fields among `repairs`) */
    uint32_t drop_slots_repaired; /**< drop table slots found damaged at open and fixed */
} cairn_ring_stats_t;

/** A reservation made by cairn_ring_reserve(); write the payload into `data`. */
typedef struct cairn_ring_reservation {
    void *data;       /**< where the payload goes; `capacity` bytes are writable */
    uint32_t capacity;/**< bytes reserved for the payload */
    uint64_t pos;     /**< absolute position of the record in the ring */
} cairn_ring_reservation_t;

/** One record returned by cairn_ring_peek(). */
typedef struct cairn_ring_record {
    const void *data; /**< payload, inside the mapping; valid until committed */
    uint32_t len;     /**< payload length in bytes */
    uint32_t kind;    /**< CAIRN_RING_KIND_DATA, _CONTEXT or _BARE (never padding) */
    uint64_t pos;     /**< absolute position of the record */
} cairn_ring_record_t;

/**
 * Fills `opts` with the defaults.
 *
 * @param opts  Options to initialise; must not be NULL.
 *
 * Ownership: the caller owns `opts`.
 * Thread-safety: safe from any thread.
 * Async-signal-safe: yes.
 */
CAIRN_API void cairn_ring_options_init(cairn_ring_options_t *opts);

/**
 * Opens the ring file at `path`, creating it if needed.
 *
 * A valid ring is reopened: its unconsumed records are kept, records torn by a
 * producer that died mid-write are skipped and counted, and later records are still
 * found. The file is never trusted: a damaged header is rebuilt (the salt and the
 * cursors from the records, whose own checksums prove them intact), a truncated file
 * is extended back with zeros and a longer one cut to size, and the origin is then
 * CAIRN_RING_REPAIRED. Only a file in which nothing can be trusted (no sound header
 * and no intact record), or one of a newer format, is renamed to
 * `<path>.corrupt-<unix seconds>-<pid>` and replaced by a fresh ring. The file's
 * blocks are allocated up front, so writing through the mapping cannot fault on a
 * full disk. The file is locked (flock) for as long as the handle is open.
 *
 * @param path  File path, NUL-terminated; its directory must exist.
 * @param opts  Options, or NULL for the defaults.
 * @param out   Receives the handle on success, NULL on failure.
 * @return 0; CAIRN_EINVAL for a NULL argument or an option out of range;
 *         CAIRN_ELOCKED if another handle owns the file (tried for up to 10 ms: a
 *         child process between fork and exec holds a copy of a handle briefly);
 *         CAIRN_ENOMEM; or an errno value from open, flock, fallocate, ftruncate, mmap
 *         or rename (ENOSPC when the disk cannot hold the ring).
 *
 * Ownership: the caller owns the handle and releases it with cairn_ring_close().
 * Thread-safety: safe from any thread; each call makes an independent handle.
 * Async-signal-safe: no.
 */
CAIRN_API int cairn_ring_open(const char *path, const cairn_ring_options_t *opts, cairn_ring_t **out);

/**
 * Unmaps and unlocks the ring. Unconsumed records stay in the file for the next open.
 *
 * @param ring  The handle, or NULL (ignored).
 *
 * Ownership: the handle is invalid afterwards, as are record pointers from peek.
 * Thread-safety: no other call on this handle may run concurrently.
 * Async-signal-safe: no.
 */
CAIRN_API void cairn_ring_close(cairn_ring_t *ring);

/**
 * Appends one record: reserves space, copies `len` bytes from `data`, publishes.
 * Never blocks and never overwrites unconsumed records.
 *
 * @param ring  The ring.
 * @param data  Payload; may be NULL only when `len` is 0.
 * @param len   Payload length in bytes.
 * @return 0 once the record is published; CAIRN_EFULL when there is no room (the drop
 *         is counted); CAIRN_ETOOBIG when `len` exceeds the maximum record size
 *         (counted); CAIRN_EINVAL for a NULL argument.
 *
 * Ownership: the bytes are copied; the caller keeps `data`.
 * Thread-safety: safe from any number of threads concurrently (lock-free).
 * Async-signal-safe: yes (no allocation, no locks, no system calls).
 */
CAIRN_API int cairn_ring_append(cairn_ring_t *ring, const void *data, size_t len);

/**
 * Appends one record of the given kind, as cairn_ring_append() does for data.
 *
 * @param ring  The ring.
 * @param kind  CAIRN_RING_KIND_DATA, CAIRN_RING_KIND_CONTEXT or CAIRN_RING_KIND_BARE.
 * @param data  Payload; may be NULL only when `len` is 0.
 * @param len   Payload length in bytes.
 * @return As cairn_ring_append(); CAIRN_EINVAL also for any other kind (padding
 *         included), without reserving anything.
 *
 * Ownership: the bytes are copied; the caller keeps `data`.
 * Thread-safety: safe from any number of threads concurrently (lock-free). Records of
 *                concurrent appends are ordered as their reservations were made.
 * Async-signal-safe: yes (no allocation, no locks, no system calls).
 */
CAIRN_API int cairn_ring_append_kind(cairn_ring_t *ring, uint32_t kind, const void *data, size_t len);

/**
 * Reserves room for a payload of up to `len` bytes to be written in place.
 *
 * Every successful reservation must be ended by exactly one cairn_ring_publish() or
 * cairn_ring_cancel(), promptly: the consumer cannot read past an open reservation.
 *
 * @param ring  The ring.
 * @param len   Largest payload that will be written.
 * @param res   Receives the reservation.
 * @return 0; CAIRN_EFULL or CAIRN_ETOOBIG (counted, as for append); CAIRN_EINVAL.
 *
 * Ownership: `res->data` points into the mapping and is writable until the
 *            reservation is published or cancelled.
 * Thread-safety: safe from any number of threads concurrently (lock-free).
 * Async-signal-safe: yes.
 */
CAIRN_API int cairn_ring_reserve(cairn_ring_t *ring, size_t len, cairn_ring_reservation_t *res);

/**
 * Publishes a reservation holding `len` bytes of payload (len <= res->capacity).
 * Room reserved beyond `len` is turned into padding the consumer skips.
 *
 * @param ring  The ring the reservation came from.
 * @param res   The reservation; it is ended by this call.
 * @param len   Bytes written at `res->data`.
 * @return 0; CAIRN_EINVAL when `len` exceeds the reservation (the reservation is then
 *         cancelled, so the ring never stalls).
 *
 * Ownership: the bytes now belong to the ring.
 * Thread-safety: called by the thread that made the reservation.
 * Async-signal-safe: yes.
 */
CAIRN_API int cairn_ring_publish(cairn_ring_t *ring, cairn_ring_reservation_t *res, size_t len);

/**
 * Publishes a reservation as a record of the given kind, as cairn_ring_publish() does
 * for data.
 *
 * @param ring  The ring the reservation came from.
 * @param res   The reservation; it is ended by this call.
 * @param len   Bytes written at `res->data`.
 * @param kind  CAIRN_RING_KIND_DATA, CAIRN_RING_KIND_CONTEXT or CAIRN_RING_KIND_BARE.
 * @return 0; CAIRN_EINVAL when `len` exceeds the reservation or `kind` is not one of
 *         those (the reservation is then cancelled, so the ring never stalls).
 *
 * Ownership: the bytes now belong to the ring.
 * Thread-safety: called by the thread that made the reservation.
 * Async-signal-safe: yes.
 */
CAIRN_API int cairn_ring_publish_kind(cairn_ring_t *ring, cairn_ring_reservation_t *res, size_t len, uint32_t kind);

/**
 * Ends a reservation without a record: the space becomes padding.
 *
 * @param ring  The ring the reservation came from.
 * @param res   The reservation; it is ended by this call.
 *
 * Ownership: `res->data` must not be used afterwards.
 * Thread-safety: called by the thread that made the reservation.
 * Async-signal-safe: yes.
 */
CAIRN_API void cairn_ring_cancel(cairn_ring_t *ring, cairn_ring_reservation_t *res);

/**
 * The read cursor: the position of the oldest unconsumed record. Pass it to
 * cairn_ring_peek() to start reading.
 *
 * @param ring  The ring.
 * @return The absolute read position (0 for a NULL ring).
 *
 * Thread-safety: safe from any thread.
 * Async-signal-safe: yes.
 */
CAIRN_API uint64_t cairn_ring_read_pos(const cairn_ring_t *ring);

/**
 * Reads published records from `from` on, in order, without consuming them.
 *
 * Stops at the first record not yet published, after `max_records`, or before the
 * payload total would exceed `max_bytes` (at least one record is returned when one
 * is available, however large). Padding is skipped; every other kind is returned, in
 * ring order, with its kind (context records count towards both limits). Peeking again from `*next`
 * continues the run, so a consumer can form the next batch while the previous one is
 * still in flight.
 *
 * @param ring         The ring.
 * @param from         The read cursor or a `*next` from an earlier peek.
 * @param records      Array receiving up to `max_records` records.
 * @param max_records  Capacity of `records`.
 * @param max_bytes    Payload budget for this run.
 * @param next         Receives the position after the last record returned (and any
 *                     padding after it): the value to commit to release them.
 * @return The number of records returned, or CAIRN_EINVAL when `from` is not the
 *         read cursor, the end of an earlier peek, or the start of a published record.
 *         0 records with `*next` beyond `from` means the run held only padding:
 *         commit `*next` to free that space.
 *
 * Ownership: record data points into the mapping; valid until committed or closed.
 * Thread-safety: one consumer thread at a time (with cairn_ring_commit()).
 * Async-signal-safe: yes.
 */
CAIRN_API int cairn_ring_peek(cairn_ring_t *ring, uint64_t from, cairn_ring_record_t *records,
                    size_t max_records, size_t max_bytes, uint64_t *next);

/**
 * Releases every record before `upto`, moving the read cursor. Their space becomes
 * free for producers and, per `reclaim_bytes`, their pages leave memory.
 *
 * @param ring  The ring.
 * @param upto  A `*next` returned by cairn_ring_peek() on this handle, or the position
 *              of a record it returned (releasing only the records before it).
 * @return 0; CAIRN_EINVAL when `upto` is behind the read cursor, beyond what has been
 *         peeked, or not a record boundary.
 *
 * Thread-safety: one consumer thread at a time (with cairn_ring_peek()).
 * Async-signal-safe: no (may call madvise).
 */
CAIRN_API int cairn_ring_commit(cairn_ring_t *ring, uint64_t upto);

/**
 * Drops the pages wholly inside [from, to) from this process's memory, as committed
 * pages are, without consuming anything: for records the consumer has read and keeps
 * elsewhere until they are safe (a batch framed into a request that is in flight). The
 * file keeps their contents (the mapping is shared); reading them again faults them
 * back in. A no-op when the ring was opened with `reclaim_bytes` 0.
 *
 * @param ring  The ring.
 * @param from  At or after the read position.
 * @param to    At most the furthest position a peek has returned, and not before `from`.
 * @return 0; CAIRN_EINVAL for a range outside [read position, furthest peeked]; an
 *         errno value when madvise fails.
 *
 * Ownership: nothing changes hands.
 * Thread-safety: one consumer thread at a time (with cairn_ring_peek()).
 * Async-signal-safe: no (calls madvise).
 */
CAIRN_API int cairn_ring_release_pages(cairn_ring_t *ring, uint64_t from, uint64_t to);

/**
 * Drops from this process's memory the whole pages of the backlog that are neither
 * about to be read nor being written: those in [furthest peeked + keep, write position
 * - keep). A backlog (a collector slower than the producers) is then held by the ring
 * file, not by the process: its pages stay mapped only around the two cursors, and
 * the consumer faults the others back in as it reaches them. Nothing is consumed and
 * no record changes (the mapping is shared: a producer still writing in a dropped page
 * faults it back in with its contents). A no-op when the backlog is under 2 * keep,
 * or when the ring was opened with `reclaim_bytes` 0.
 *
 * @param ring  The ring.
 * @param keep  Bytes kept mapped past the furthest peeked position and before the
 *              write position.
 * @return 0; CAIRN_EINVAL for a NULL ring; an errno value when madvise fails.
 *
 * Ownership: nothing changes hands.
 * Thread-safety: one consumer thread at a time (with cairn_ring_peek()); producers
 *                may write meanwhile.
 * Async-signal-safe: no (calls madvise).
 */
CAIRN_API int cairn_ring_release_backlog(cairn_ring_t *ring, uint64_t keep);

/**
 * Writes the mapping to disk (msync MS_SYNC), for durability across power loss.
 *
 * @param ring  The ring.
 * @return 0 or an errno value from msync.
 *
 * Thread-safety: safe from any thread.
 * Async-signal-safe: no.
 */
CAIRN_API int cairn_ring_sync(cairn_ring_t *ring);

/**
 * Copies the ring's counters into `stats`.
 *
 * @param ring   The ring.
 * @param stats  Receives the counters.
 * @return 0 or CAIRN_EINVAL for a NULL argument.
 *
 * Thread-safety: safe from any thread; counters are read individually, not as one
 *                atomic snapshot.
 * Async-signal-safe: yes.
 */
CAIRN_API int cairn_ring_stats(const cairn_ring_t *ring, cairn_ring_stats_t *stats);

/** What cairn_ring_inspect() found in a ring file: what waits in it, read as
 *  cairn_ring_open() would take it in, without changing the file. */
typedef struct cairn_ring_inspection {
    uint64_t capacity;     /**< data capacity in bytes (0 for an empty file) */
    uint64_t read_pos;     /**< read cursor: what a consumer has released ends here */
    uint64_t write_pos;    /**< write cursor, past any records an open would take in */
    uint64_t events;       /**< intact records waiting, of kinds CAIRN_RING_KIND_DATA and _BARE */
    uint64_t contexts;     /**< intact records waiting, of kind CAIRN_RING_KIND_CONTEXT */
    uint64_t torn_regions; /**< regions an open would skip as torn or damaged (in a ring a
                                process has open, a record being written reads as torn) */
    uint64_t torn_bytes;   /**< bytes in those regions */
    uint32_t repairs;      /**< CAIRN_RING_REPAIR_* bits an open would make to the header */
    uint32_t reserved;     /**< zero */
} cairn_ring_inspection_t;

/**
 * Counts what waits in the ring file at `path` without opening it as a ring: the file
 * is read through a read-only mapping, no lock is taken, nothing is repaired or
 * written, and a process may have the ring open meanwhile (the result is then a
 * snapshot that may be a moment old). A damaged header is read as cairn_ring_open()
 * would repair it, and `repairs` says what it would change.
 *
 * @param path  Ring file path.
 * @param out   Receives the inspection; zeroed first.
 * @return 0; CAIRN_EVERSION for a ring written by a newer format version;
 *         CAIRN_ECORRUPT for a file that is not a ring (cairn_ring_open() would set it
 *         aside); CAIRN_EINVAL for NULL arguments or a path that is not a regular
 *         file; CAIRN_ENOMEM; or an errno value (ENOENT, EACCES, ...).
 *
 * Ownership: the caller owns `out`.
 * Thread-safety: safe from any thread.
 * Async-signal-safe: no.
 */
CAIRN_API int cairn_ring_inspect(const char *path, cairn_ring_inspection_t *out);

/**
 * The ring file's id: a random value chosen when the file was created (its salt) and
 * kept for the file's life, so that state kept elsewhere about ring positions (the
 * uploader's batch mark) can tell this file from a later one.
 *
 * @param ring  An open ring.
 * @return The id, never 0 for an open ring; 0 for NULL.
 *
 * Ownership: none.
 * Thread-safety: any thread.
 * Async-signal-safe: yes.
 */
CAIRN_API uint64_t cairn_ring_id(const cairn_ring_t *ring);

/* ------------------------------------------------------------------------------ */
/* Drop table                                                                       */
/* ------------------------------------------------------------------------------ */

/** Number of slots in a ring's drop table. */
#define CAIRN_RING_DROP_SLOTS 64
/** Longest drop reason, in bytes (`[a-z0-9_]`). */
#define CAIRN_RING_DROP_REASON_MAX 23
/** The catch-all slot, reason `other`: drops whose reason finds no free slot. */
#define CAIRN_RING_DROP_OTHER 63 /* CAIRN_RING_DROP_SLOTS - 1 */

/** One used slot of the drop table, as read by cairn_ring_read_drops(). */
typedef struct cairn_ring_drop {
    char reason[CAIRN_RING_DROP_REASON_MAX + 1]; /**< NUL-terminated, `[a-z0-9_]` */
    int32_t slot;      /**< slot index, for cairn_ring_count_drops() and _mark_reported() */
    uint64_t counted;  /**< drops counted since the ring file was created */
    uint64_t reported; /**< drops known to be reported (<= counted) */
    uint64_t counted_at_open; /**< `counted` when this handle opened the ring (<= counted):
                                   what earlier processes counted; the rest is this open's */
} cairn_ring_drop_t;

/**
 * Finds the drop table slot of `reason`, claiming a free one for a new reason.
 *
 * The ring file's header holds a table of named drop counters that survive the
 * process (SIGKILL included): producers count what they shed with
 * cairn_ring_count_drops(), the consumer reads them with cairn_ring_read_drops() and
 * records with cairn_ring_mark_reported() how many have been reported. Look a reason's
 * slot up once and keep it; counting into a known slot is one atomic add. The ring
 * itself counts its refusals as `ring_full` (CAIRN_EFULL) and `ring_too_big`
 * (CAIRN_ETOOBIG).
 *
 * @param ring    The ring.
 * @param reason  The reason's bytes, `[a-z0-9_]`, not NUL-terminated.
 * @param len     Their number, 1 to CAIRN_RING_DROP_REASON_MAX.
 * @return The slot index (>= 0). When the table is full, CAIRN_RING_DROP_OTHER, the
 *         catch-all slot `other` (the reason `other` always maps to it).
 *         CAIRN_EINVAL for a NULL argument or a reason that is empty, too long or has
 *         a byte outside `[a-z0-9_]`.
 *
 * Ownership: the bytes are copied into the table.
 * Thread-safety: safe from any number of threads (lock-free); concurrent calls with
 *                the same reason return the same slot.
 * Async-signal-safe: yes (atomics only, no allocation, no locks, no system calls).
 */
CAIRN_API int cairn_ring_drop_slot(cairn_ring_t *ring, const char *reason, size_t len);

/**
 * Adds `n` drops to the counter of `slot`.
 *
 * @param ring  The ring.
 * @param slot  A slot returned by cairn_ring_drop_slot() on this ring.
 * @param n     Number of drops.
 * @return 0; CAIRN_EINVAL for a NULL ring or a slot that is out of range or unclaimed.
 *
 * Ownership: nothing is retained; the count lives in the ring file.
 * Thread-safety: safe from any number of threads (one relaxed atomic add).
 * Async-signal-safe: yes.
 */
CAIRN_API int cairn_ring_count_drops(cairn_ring_t *ring, int slot, uint64_t n);

/**
 * Copies the used slots of the drop table, in slot order.
 *
 * @param ring  The ring.
 * @param out   Array receiving up to `max` slots; may be NULL when `max` is 0.
 * @param max   Capacity of `out`; CAIRN_RING_DROP_SLOTS always suffices.
 * @return The number of used slots (which may exceed `max`: only `max` are copied),
 *         or CAIRN_EINVAL for a NULL ring, or a NULL `out` with `max` > 0.
 *
 * Ownership: the caller owns `out`.
 * Thread-safety: safe from any thread; each slot's values are read individually
 *                (`reported` is clamped to `counted`).
 * Async-signal-safe: yes.
 */
CAIRN_API int cairn_ring_read_drops(const cairn_ring_t *ring, cairn_ring_drop_t *out, size_t max);

/**
 * Records that the drops of `slot` up to `reported` (a `counted` value read earlier)
 * have been reported in a request that was acknowledged or stored. The next report
 * then needs only `counted - reported`, even after a restart. Never moves backwards:
 * a value below the current one is ignored.
 *
 * @param ring      The ring.
 * @param slot      A used slot.
 * @param reported  The new reported count, at most the slot's `counted`.
 * @return 0; CAIRN_EINVAL for a NULL ring, a slot out of range or unclaimed, or a
 *         value above `counted`.
 *
 * Ownership: nothing is retained; the value lives in the ring file.
 * Thread-safety: the ring's single consumer only (with cairn_ring_peek() and
 *                cairn_ring_commit()).
 * Async-signal-safe: yes.
 */
CAIRN_API int cairn_ring_mark_reported(cairn_ring_t *ring, int slot, uint64_t reported);

/* ------------------------------------------------------------------------------ */
/* Batch frames                                                                     */
/* ------------------------------------------------------------------------------ */

/** Magic number of the skippable zstd frame carrying Cairn's batch metadata. */
#define CAIRN_FRAME_SKIPPABLE_MAGIC 0x184D2A5Cu
/** Bytes of Cairn metadata inside that skippable frame (format version 1). */
#define CAIRN_FRAME_META_SIZE 32u
/** Bytes before the zstd data frame: skippable header (8) + metadata. */
#define CAIRN_FRAME_PREFIX_SIZE (8u + CAIRN_FRAME_META_SIZE)
/** Default zstd compression level used by Cairn. */
#define CAIRN_FRAME_DEFAULT_LEVEL 1

/** A byte range given to the frame encoder. */
typedef struct cairn_slice {
    const void *data; /**< first byte; may be NULL only when len is 0 */
    size_t len;       /**< length in bytes */
} cairn_slice_t;

/** Metadata of one batch frame, as read from its skippable frame. */
typedef struct cairn_frame_info {
    uint16_t version;      /**< metadata format version */
    uint16_t flags;        /**< reserved, 0 */
    uint32_t record_count; /**< records in the body */
    uint64_t batch_id;     /**< caller-chosen batch identifier */
    uint32_t dict_id;      /**< zstd dictionary id, 0 when none */
    uint64_t content_size; /**< decompressed body size in bytes */
    uint64_t frame_size;   /**< total bytes of the batch (both frames) */
} cairn_frame_info_t;

/** A reusable batch encoder (one zstd compression context). */
typedef struct cairn_frame_encoder cairn_frame_encoder_t;
/** A reusable batch decoder (one zstd decompression context). */
typedef struct cairn_frame_decoder cairn_frame_decoder_t;

/**
 * Creates an encoder.
 *
 * @param level     zstd compression level (1..19; negative levels are accepted as
 *                  zstd's fast levels); CAIRN_FRAME_DEFAULT_LEVEL is a good default.
 * @param dict      Optional dictionary in zstd's format (from `zstd --train`,
 *                  ZDICT_trainFromBuffer or ZDICT_finalizeDictionary), or NULL.
 *                  Raw-content dictionaries are refused: they have no id, so a
 *                  decoder could not tell a missing dictionary from corrupt data.
 * @param dict_len  Its length in bytes (0 without a dictionary).
 * @param out       Receives the encoder (NULL on failure).
 * @return 0; CAIRN_EINVAL (NULL `out`, level out of range, a dictionary that is not
 *         in zstd's format); CAIRN_ENOMEM; CAIRN_EZSTD when zstd cannot load the
 *         dictionary.
 *
 * Ownership: the dictionary is copied; free the encoder with cairn_frame_encoder_free().
 * Thread-safety: an encoder is used by one thread at a time.
 * Async-signal-safe: no.
 */
CAIRN_API int cairn_frame_encoder_new(int level, const void *dict, size_t dict_len,
                            cairn_frame_encoder_t **out);

/**
 * Frees an encoder.
 *
 * @param enc  The encoder, or NULL (ignored).
 *
 * Thread-safety: not concurrently with other calls on `enc`.
 * Async-signal-safe: no.
 */
CAIRN_API void cairn_frame_encoder_free(cairn_frame_encoder_t *enc);

/**
 * The largest batch frame that records totalling `payload_bytes` in `record_count`
 * records can produce: size the output buffer of cairn_frame_encode() with it.
 *
 * @return The bound in bytes, or SIZE_MAX when the sizes are too large to encode.
 *
 * Thread-safety: safe from any thread.
 * Async-signal-safe: yes.
 */
CAIRN_API size_t cairn_frame_bound(size_t payload_bytes, size_t record_count);

/**
 * Encodes a batch: a skippable frame with the metadata, then one zstd frame (content
 * size and checksum on) whose content is each record followed by '\n'.
 *
 * @param enc       The encoder.
 * @param batch_id  Identifier stored in the metadata.
 * @param records   The records, in order; none may contain a '\n' byte.
 * @param count     Number of records (at least 1, at most UINT32_MAX).
 * @param dst       Output buffer; may be NULL only when `dst_cap` is 0.
 * @param dst_cap   Its size; cairn_frame_bound() is always enough. Nothing is
 *                  written past it.
 * @param dst_len   Receives the batch size in bytes (0 on failure).
 * @return 0; CAIRN_EINVAL (NULL argument, no records, a record containing '\n');
 *         CAIRN_EBUFSIZE; CAIRN_ENOMEM (zstd could not grow its context);
 *         CAIRN_EZSTD.
 *
 * Ownership: the caller owns all buffers; the encoder allocates nothing per batch
 *            once warm (its context has grown to the largest batch seen).
 * Thread-safety: one thread at a time per encoder.
 * Async-signal-safe: no.
 */
CAIRN_API int cairn_frame_encode(cairn_frame_encoder_t *enc, uint64_t batch_id,
                       const cairn_slice_t *records, size_t count,
                       void *dst, size_t dst_cap, size_t *dst_len);

/**
 * Encodes a batch as cairn_frame_encode() does, from records given in pieces: a record
 * is the pieces up to and including one whose `ends` byte is non-zero, so a record can be
 * put together from bytes in different places (an event in the ring and the context it
 * is completed with) without copying it first.
 *
 * @param enc       The encoder.
 * @param batch_id  Identifier stored in the metadata.
 * @param pieces    The pieces, in order; none may contain a '\n' byte.
 * @param ends      One byte per piece: non-zero where a record ends. The last must be
 *                  non-zero.
 * @param count     Number of pieces (at least 1); the records they make are at most
 *                  UINT32_MAX.
 * @param dst       Output buffer; may be NULL only when `dst_cap` is 0.
 * @param dst_cap   Its size; cairn_frame_bound() of the pieces' bytes and the record
 *                  count is always enough. Nothing is written past it.
 * @param dst_len   Receives the batch size in bytes (0 on failure).
 * @return As cairn_frame_encode(); CAIRN_EINVAL also when `ends` is NULL or the last
 *         piece does not end a record.
 *
 * Ownership: the caller owns all buffers.
 * Thread-safety: one thread at a time per encoder.
 * Async-signal-safe: no.
 */
CAIRN_API int cairn_frame_encode_parts(cairn_frame_encoder_t *enc, uint64_t batch_id,
                             const cairn_slice_t *pieces, const uint8_t *ends, size_t count,
                             void *dst, size_t dst_cap, size_t *dst_len);

/**
 * Reads the metadata of the batch at the start of `src` without decompressing.
 *
 * Bytes after the batch are allowed (batches may be concatenated): `frame_size` is
 * where the next one starts.
 *
 * @param src   Batch bytes; may be NULL only when `len` is 0.
 * @param len   Their length.
 * @param info  Receives the metadata, including the total frame size.
 * @return 0; CAIRN_EINVAL (NULL argument); CAIRN_ETRUNCATED; CAIRN_ECORRUPT (not a
 *         Cairn batch, its zstd frame header is damaged or disagrees with the
 *         metadata); CAIRN_EVERSION (version other than 1, or non-zero flags).
 *
 * Thread-safety: safe from any thread.
 * Async-signal-safe: yes.
 */
CAIRN_API int cairn_frame_read_info(const void *src, size_t len, cairn_frame_info_t *info);

/**
 * Creates a decoder that refuses bodies larger than `max_content` bytes.
 *
 * @param max_content  Largest decompressed body accepted (at least 1).
 * @param dict         Optional dictionary (as given to the encoder, in zstd's format),
 *                     or NULL. Batches made without a dictionary are read either way.
 * @param dict_len     Its length in bytes.
 * @param out          Receives the decoder (NULL on failure).
 * @return 0; CAIRN_EINVAL (NULL `out`, `max_content` 0, a dictionary that is not in
 *         zstd's format); CAIRN_ENOMEM; CAIRN_EZSTD.
 *
 * Ownership: the dictionary is copied; free with cairn_frame_decoder_free().
 * Thread-safety: a decoder is used by one thread at a time.
 * Async-signal-safe: no.
 */
CAIRN_API int cairn_frame_decoder_new(size_t max_content, const void *dict, size_t dict_len,
                            cairn_frame_decoder_t **out);

/**
 * Frees a decoder.
 *
 * @param dec  The decoder, or NULL (ignored).
 *
 * Thread-safety: not concurrently with other calls on `dec`.
 * Async-signal-safe: no.
 */
CAIRN_API void cairn_frame_decoder_free(cairn_frame_decoder_t *dec);

/**
 * Decodes exactly one batch occupying all of `src`, checking every bound: metadata,
 * content size against `max_content` and `dst_cap`, the zstd checksum, and that the
 * body holds `record_count` newline-terminated records.
 *
 * @param dec      The decoder.
 * @param src      Batch bytes; may be NULL only when `len` is 0.
 * @param len      Their length.
 * @param dst      Receives the body (records, each followed by '\n'); may be NULL
 *                 only when `dst_cap` is 0.
 * @param dst_cap  Its size; the metadata's content_size is enough.
 * @param dst_len  Receives the body length (0 on failure).
 * @param info     Receives the metadata; may be NULL.
 * @return 0; CAIRN_EINVAL (NULL argument); CAIRN_ETRUNCATED; CAIRN_ECORRUPT (bad
 *         metadata, checksum, trailing bytes, record count); CAIRN_EVERSION;
 *         CAIRN_ELIMIT (checked before decompressing); CAIRN_EBUFSIZE; CAIRN_EDICT
 *         (dictionary missing or different); CAIRN_ENOMEM; CAIRN_EZSTD.
 *
 * Thread-safety: one thread at a time per decoder.
 * Async-signal-safe: no.
 */
CAIRN_API int cairn_frame_decode(cairn_frame_decoder_t *dec, const void *src, size_t len,
                       void *dst, size_t dst_cap, size_t *dst_len,
                       cairn_frame_info_t *info);

#ifdef __cplusplus
}
#endif

#endif /* CAIRN_CORE_H */
