/* cairn-ring-child: a process for the ring kill tests.
 *
 * Usage: cairn-ring-child <ring path> <run id> <producer threads> [<silent threads>]
 *        cairn-ring-child <ring path> drops <threads>
 *
 * In the drops form, each thread counts drops one at a time into its own reason
 * (`t<thread>`) and into one shared reason (`shared`), and every 4096 counts looks up
 * the next of 16 more reasons (`c0` to `c15`, round and round), racing the other
 * threads to claim them. After every 64 counts it reports how many it has counted
 * ('D', thread, total); after each look-up, the slot it got ('N', slot, n).
 *
 * Producer threads append records as fast as they can, each a JSON object naming the
 * run, the thread and a per-thread sequence number, padded with filler derived from
 * them so the reader can tell a real record from an invented one. After each append
 * returns success the thread reports it on stdout; a consumer thread reports each
 * record it reads before committing it. Every report is one 16-byte write(2) to a
 * pipe, so reports are atomic and never interleave. Silent threads (numbered after
 * the reporting ones) append large records without reporting, so that a kill often
 * lands inside an append and leaves a torn record. The parent sends SIGKILL at a
 * random moment and checks the ring against the reports. */
#include "cairn_core.h"

#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static cairn_ring_t *ring;
static unsigned run_id;
static uint32_t reporting_threads;

/* Exits with `code` after saying why on stderr, for the parent's failure message. */
static void die(int code, const char *why)
{
    if (write(STDERR_FILENO, why, strlen(why)) < 0) { /* nothing more to do */ }
    _exit(code);
}

static void report(char kind, uint32_t thread, uint64_t seq)
{
    unsigned char msg[16] = {0};
    msg[0] = (unsigned char)kind;
    memcpy(msg + 4, &thread, 4);
    memcpy(msg + 8, &seq, 8);
    if (write(STDOUT_FILENO, msg, sizeof msg) != (ssize_t)sizeof msg) die(3, "report write failed\n");
}

/* Must match the expectation in RingKillTests.swift. */
static int make_record(char *buf, size_t cap, unsigned run, uint32_t thread, uint64_t seq)
{
    int fill = (int)((seq * 37 + thread * 11) % (thread < reporting_threads ? 300 : 4000));
    int n = snprintf(buf, cap, "{\"r\":%u,\"t\":%u,\"s\":%llu,\"x\":\"", run, thread, (unsigned long long)seq);
    for (int i = 0; i < fill && (size_t)n < cap - 3; i++) buf[n++] = (char)('a' + (seq + (uint64_t)i) % 26);
    buf[n++] = '"';
    buf[n++] = '}';
    return n;
}

static void *producer(void *arg)
{
    uint32_t thread = (uint32_t)(uintptr_t)arg;
    char buf[4096 + 64];
    for (uint64_t seq = 0;; seq++) {
        int n = make_record(buf, sizeof buf, run_id, thread, seq);
        int rc;
        if (thread < reporting_threads) {
            while ((rc = cairn_ring_append(ring, buf, (size_t)n)) == CAIRN_EFULL) sched_yield();
            if (rc != 0) die(4, "append failed\n");
            report('A', thread, seq);
        } else {
            /* Encode in place, slowly, as a serialiser writing into a reservation
             * would: a kill now lands inside an unpublished record. */
            cairn_ring_reservation_t res;
            while ((rc = cairn_ring_reserve(ring, (size_t)n, &res)) == CAIRN_EFULL) sched_yield();
            if (rc != 0) die(4, "reserve failed\n");
            volatile char *dst = res.data;
            for (int i = 0; i < n; i++) dst[i] = buf[i];
            if (cairn_ring_publish(ring, &res, (size_t)n) != 0) die(4, "publish failed\n");
        }
    }
    return NULL;
}

static void *drop_counter(void *arg)
{
    uint32_t thread = (uint32_t)(uintptr_t)arg;
    char name[16];
    int len = snprintf(name, sizeof name, "t%u", thread);
    int own = cairn_ring_drop_slot(ring, name, (size_t)len);
    int shared = cairn_ring_drop_slot(ring, "shared", 6);
    if (own < 0 || shared < 0) die(8, "drop slot failed\n");
    for (uint64_t n = 1;; n++) {
        if (cairn_ring_count_drops(ring, own, 1) != 0 || cairn_ring_count_drops(ring, shared, 1) != 0)
            die(8, "count failed\n");
        if (n % 64 == 0) report('D', thread, n);
        if (n % 4096 == 0) {
            /* Every thread claims the same names, few enough that the table never
             * fills: each race must end with one slot per name. */
            uint32_t c = (uint32_t)(n / 4096 % 16);
            len = snprintf(name, sizeof name, "c%u", c);
            int slot = cairn_ring_drop_slot(ring, name, (size_t)len);
            if (slot < 0) die(8, "claim failed\n");
            report('N', (uint32_t)slot, c);
        }
    }
    return NULL;
}

static void *consumer(void *arg)
{
    (void)arg;
    cairn_ring_record_t recs[64];
    for (;;) {
        uint64_t next;
        int n = cairn_ring_peek(ring, cairn_ring_read_pos(ring), recs, 64, 1 << 20, &next);
        if (n < 0) die(5, "peek failed\n");
        if (n == 0 && next == cairn_ring_read_pos(ring)) { sched_yield(); continue; }
        for (int i = 0; i < n; i++) {
            unsigned r, t;
            unsigned long long s;
            if (sscanf((const char *)recs[i].data, "{\"r\":%u,\"t\":%u,\"s\":%llu", &r, &t, &s) != 3)
                die(6, "unreadable record\n");
            if (r == run_id && t < reporting_threads) report('C', t, s);
        }
        if (cairn_ring_commit(ring, next) != 0) die(7, "commit failed\n");
    }
    return NULL;
}

/* Opens the ring the parent has just closed. A process that a test running beside
 * the parent's is spawning shares the parent's descriptors until it calls exec, and
 * with them the ring's lock: wait that moment out. */
static int open_ring(const char *path, const cairn_ring_options_t *opts)
{
    int rc = cairn_ring_open(path, opts, &ring);
    for (int attempt = 0; rc == CAIRN_ELOCKED && attempt < 1000; attempt++) {
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
        rc = cairn_ring_open(path, opts, &ring);
    }
    return rc;
}

/* The drops form: threads count drops until the parent kills the process. */
static int count_drops_until_killed(const char *path, int threads)
{
    int rc = open_ring(path, NULL);
    if (rc != 0) {
        fprintf(stderr, "open: %s\n", cairn_strerror(rc));
        return 1;
    }
    pthread_t th[16];
    for (int i = 0; i < threads && i < 16; i++) pthread_create(&th[i], NULL, drop_counter, (void *)(uintptr_t)i);
    report('S', 0, 0); /* started */
    pthread_join(th[0], NULL);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[2], "drops") == 0) return count_drops_until_killed(argv[1], atoi(argv[3]));
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: %s <ring path> <run id> <producer threads> [<silent threads>]\n"
                        "       %s <ring path> drops <threads>\n", argv[0], argv[0]);
        return 2;
    }
    run_id = (unsigned)strtoul(argv[2], NULL, 10);
    reporting_threads = (uint32_t)atoi(argv[3]);
    int producers = (int)reporting_threads + (argc == 5 ? atoi(argv[4]) : 0);
    cairn_ring_options_t opts;
    cairn_ring_options_init(&opts);
    opts.capacity = CAIRN_RING_MIN_CAPACITY; /* small, so runs wrap many times */
    int rc = open_ring(argv[1], &opts);
    if (rc != 0) {
        fprintf(stderr, "open: %s\n", cairn_strerror(rc));
        return 1;
    }
    /* Records left by an earlier run are the parent's to check; start after them. */
    uint64_t next, from = cairn_ring_read_pos(ring);
    cairn_ring_record_t rec;
    while (cairn_ring_peek(ring, from, &rec, 1, 1, &next) > 0) from = next;
    if (from != cairn_ring_read_pos(ring)) {
        fprintf(stderr, "ring not empty at start\n");
        return 1;
    }
    pthread_t th[16];
    pthread_t c;
    pthread_create(&c, NULL, consumer, NULL);
    for (int i = 0; i < producers && i < 16; i++) pthread_create(&th[i], NULL, producer, (void *)(uintptr_t)i);
    report('S', 0, 0); /* started */
    pthread_join(c, NULL);
    return 0;
}
