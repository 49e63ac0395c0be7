/* The snapshot store's damage guard for LMDB versions whose file layout Cairn does not
 * know (docs/FORMATS.md, "Snapshot store", "Damage"): LMDB itself reads the whole
 * store, in a child process, so that a damaged file can crash only the child.
 *
 * Internal to the Swift package (CairnStore); not part of libcairn. */
#ifndef CAIRN_STORE_GUARD_H
#define CAIRN_STORE_GUARD_H

#ifdef __cplusplus
extern "C" {
#endif

/** How a read pass in a child process ended. */
typedef enum {
    /** LMDB read every entry of every database: the store can be opened. */
    CAIRN_STORE_PROBE_READ = 0,
    /** LMDB refused the store or failed while reading it (`lmdb_error` says how). */
    CAIRN_STORE_PROBE_REFUSED = 1,
    /** The child was ended by a signal (`signal` says which): LMDB faulted on the file. */
    CAIRN_STORE_PROBE_CRASHED = 2,
    /** The child did not finish within the time allowed and was killed. */
    CAIRN_STORE_PROBE_TIMED_OUT = 3,
    /** No child could be made (`error` is the errno of fork or waitpid): nothing was
     *  learnt about the store. */
    CAIRN_STORE_PROBE_NO_CHILD = 4,
} cairn_store_probe_outcome_t;

/** What ::cairn_store_probe found. */
typedef struct {
    cairn_store_probe_outcome_t outcome;
    /** With CAIRN_STORE_PROBE_REFUSED: LMDB's return code (`mdb_strerror` names it). */
    int lmdb_error;
    /** With CAIRN_STORE_PROBE_CRASHED: the signal that ended the child. */
    int signal;
    /** With CAIRN_STORE_PROBE_NO_CHILD: the errno. */
    int error;
} cairn_store_probe_t;

/**
 * Reads the LMDB environment in `directory` (its `data.mdb`) in a forked child, without
 * its lock file, visiting every entry of the main database and of each named database it
 * lists, and every byte of each value. With `writes`, the child then commits one write
 * transaction (a key put in the main database and deleted again), which takes pages from
 * the free-page tree and writes it back: damage that no read meets shows there. Without
 * `writes` nothing is written. The caller must hold the store (no other process may have
 * it open) when `writes` is set. The child
 * takes the default action for SIGSEGV, SIGBUS, SIGILL and SIGFPE (a crash handler the
 * process installed is not run for it) and calls only LMDB and async-signal-safe
 * functions; it ends with `_exit`. The caller waits up to `timeout_ms`, then kills it.
 *
 * Thread-safety: may be called from any thread; the child holds copies of the caller's
 * memory, and a lock another thread held at the fork is never taken in it except by
 * LMDB's own read path, which takes none without a lock file.
 *
 * @return 0 with `*out` filled; EINVAL for a NULL argument.
 */
int cairn_store_probe(const char *directory, int writes, int timeout_ms, cairn_store_probe_t *out);

#ifdef __cplusplus
}
#endif

#endif
