/* The read pass of cairn_store_guard.h: LMDB reads the store in a forked child. */
#define _GNU_SOURCE
#include "cairn_store_guard.h"

#include <errno.h>
#include <lmdb.h>
#include <signal.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Child exit statuses: 0 read, 100 + k for LMDB error k of the table below, 99 other. */
static const int lmdb_codes[] = {MDB_INVALID, MDB_CORRUPTED, MDB_VERSION_MISMATCH, MDB_PANIC, MDB_PAGE_NOTFOUND,
                                 MDB_BAD_DBI, MDB_INCOMPATIBLE, MDB_NOTFOUND, MDB_BAD_TXN, MDB_BAD_VALSIZE,
                                 MDB_MAP_RESIZED, MDB_READERS_FULL, EINVAL, ENOENT, EACCES, ENOMEM, EIO};
#define CODES (int)(sizeof lmdb_codes / sizeof *lmdb_codes)
#define OTHER_STATUS 99
#define CODE_STATUS 100

static int status_of(int rc)
{
    for (int i = 0; i < CODES; i++)
        if (lmdb_codes[i] == rc) return CODE_STATUS + i;
    return OTHER_STATUS;
}

/* Touches every byte of `v`, so that a value whose pages lie beyond the file faults here. */
static unsigned char touch(const MDB_val *v)
{
    const volatile unsigned char *p = v->mv_data;
    unsigned char x = 0;
    for (size_t i = 0; i < v->mv_size; i++) x ^= p[i];
    return x;
}

/* Reads every entry of `dbi` in `txn`; 0 or an LMDB code. */
static int read_all(MDB_txn *txn, MDB_dbi dbi, unsigned char *sink)
{
    MDB_cursor *cursor;
    int rc = mdb_cursor_open(txn, dbi, &cursor);
    if (rc) return rc;
    MDB_val key, value;
    for (rc = mdb_cursor_get(cursor, &key, &value, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cursor, &key, &value, MDB_NEXT)) {
        *sink ^= touch(&key) ^ touch(&value);
    }
    mdb_cursor_close(cursor);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

/* A write transaction that LMDB commits: it copies the pages it touches and takes
 * them from the free-page tree, and writes that tree back, so damage there that no
 * read meets shows here. It puts a key in the main database and deletes it again. */
static int write_pass(const char *directory)
{
    MDB_env *env;
    int rc = mdb_env_create(&env);
    if (rc) return rc;
    mdb_env_set_maxdbs(env, 64);
    rc = mdb_env_open(env, directory, MDB_NOLOCK | MDB_NOSYNC | MDB_NORDAHEAD, 0600);
    if (rc) return rc;
    MDB_txn *txn;
    rc = mdb_txn_begin(env, NULL, 0, &txn);
    if (rc) return rc;
    MDB_dbi main_db;
    rc = mdb_dbi_open(txn, NULL, 0, &main_db);
    if (rc) return rc;
    char key_bytes[] = "cairn-store-probe", value_bytes[64];
    memset(value_bytes, 0, sizeof value_bytes);
    MDB_val key = {sizeof key_bytes - 1, key_bytes}, value = {sizeof value_bytes, value_bytes};
    rc = mdb_put(txn, main_db, &key, &value, 0);
    if (rc == 0) rc = mdb_del(txn, main_db, &key, NULL);
    if (rc) return rc;
    return mdb_txn_commit(txn);
}

/* The child: opens, reads (and writes), exits. Never returns. */
static void child(const char *directory, int writes)
{
    static const int faults[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGSYS, SIGTRAP};
    sigset_t set;
    sigemptyset(&set);
    for (size_t i = 0; i < sizeof faults / sizeof *faults; i++) {
        signal(faults[i], SIG_DFL);
        sigaddset(&set, faults[i]);
    }
    sigprocmask(SIG_UNBLOCK, &set, NULL);
    MDB_env *env;
    int rc = mdb_env_create(&env);
    if (rc) _exit(status_of(rc));
    mdb_env_set_maxdbs(env, 64);
    rc = mdb_env_open(env, directory, MDB_RDONLY | MDB_NOLOCK | MDB_NORDAHEAD, 0600);
    if (rc) _exit(status_of(rc));
    MDB_txn *txn;
    rc = mdb_txn_begin(env, NULL, MDB_RDONLY, &txn);
    if (rc) _exit(status_of(rc));
    MDB_dbi main_db;
    rc = mdb_dbi_open(txn, NULL, 0, &main_db);
    if (rc) _exit(status_of(rc));
    unsigned char sink = 0;
    rc = read_all(txn, main_db, &sink);
    if (rc) _exit(status_of(rc));
    /* Each key of the main database names a database: read each one whole. */
    MDB_cursor *names;
    rc = mdb_cursor_open(txn, main_db, &names);
    if (rc) _exit(status_of(rc));
    MDB_val key, value;
    char name[512];
    for (rc = mdb_cursor_get(names, &key, &value, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(names, &key, &value, MDB_NEXT)) {
        if (key.mv_size == 0 || key.mv_size >= sizeof name || memchr(key.mv_data, 0, key.mv_size)) continue;
        memcpy(name, key.mv_data, key.mv_size);
        name[key.mv_size] = 0;
        MDB_dbi dbi;
        int r = mdb_dbi_open(txn, name, 0, &dbi);
        if (r == MDB_INCOMPATIBLE) continue; /* a plain key, not a database */
        if (r == MDB_DBS_FULL) break;        /* more databases than Cairn makes: read what fits */
        if (r) _exit(status_of(r));
        r = read_all(txn, dbi, &sink);
        if (r) _exit(status_of(r));
    }
    if (rc != MDB_NOTFOUND && rc != 0) _exit(status_of(rc));
    (void)sink; /* the reads were volatile: none was elided */
    mdb_txn_abort(txn);
    mdb_env_close(env);
    if (writes) {
        rc = write_pass(directory);
        if (rc) _exit(status_of(rc));
    }
    /* No other cleanup: _exit releases everything. */
    _exit(0);
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int cairn_store_probe(const char *directory, int writes, int timeout_ms, cairn_store_probe_t *out)
{
    if (!directory || !out) return EINVAL;
    memset(out, 0, sizeof *out);
    pid_t pid = fork();
    if (pid < 0) {
        out->outcome = CAIRN_STORE_PROBE_NO_CHILD;
        out->error = errno;
        return 0;
    }
    if (pid == 0) child(directory, writes);
    const long long deadline = now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    int status = 0;
    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) break;
        if (r < 0 && errno != EINTR) {
            out->outcome = CAIRN_STORE_PROBE_NO_CHILD;
            out->error = errno;
            kill(pid, SIGKILL);
            return 0;
        }
        if (now_ms() >= deadline) {
            kill(pid, SIGKILL);
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
            }
            out->outcome = CAIRN_STORE_PROBE_TIMED_OUT;
            return 0;
        }
        struct timespec pause = {0, 2 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    if (WIFSIGNALED(status)) {
        out->outcome = CAIRN_STORE_PROBE_CRASHED;
        out->signal = WTERMSIG(status);
    } else if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        out->outcome = CAIRN_STORE_PROBE_READ;
    } else {
        int code = WIFEXITED(status) ? WEXITSTATUS(status) : OTHER_STATUS;
        out->outcome = CAIRN_STORE_PROBE_REFUSED;
        out->lmdb_error = code >= CODE_STATUS && code < CODE_STATUS + CODES ? lmdb_codes[code - CODE_STATUS] : -1;
    }
    return 0;
}
