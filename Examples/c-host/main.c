/*
 * c-host: a plain C program using libcairn, the C core other SDKs link, as installed
 * (built with `pkg-config --cflags --libs cairn`). It writes events to a ring file,
 * installs the crash writer, leaves a context, and crashes; Cairn's Swift side and the
 * `cairn` command then read what it left (see run.sh).
 *
 *   c-host <data dir> <events>
 */
#define CAIRN_EXPERIMENTAL_CRASH_API 1 /* the crash writer */
#include <cairn.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Kept out of line, so that the crash report names it. */
__attribute__((noinline)) static void charge_card(volatile int *card)
{
    *card = 42; /* card is NULL: SIGSEGV */
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s <data dir> <events>\n", argv[0]);
        return 2;
    }
    char path[4096];
    printf("libcairn %s (built against %s)\n", cairn_version(), CAIRN_VERSION_STRING);

    /* The crash writer first, as early as possible. */
    cairn_crash_options_t crash = {.report_dir = argv[1], .flags = 0, .context_capacity = 0};
    int rc = cairn_crash_install(&crash);
    if (rc != 0) {
        fprintf(stderr, "cairn_crash_install: %s\n", cairn_strerror(rc));
        return 1;
    }

    /* Events: one JSON object per record in the ring, which outlives the process. */
    snprintf(path, sizeof path, "%s/events.ring", argv[1]);
    cairn_ring_options_t opts;
    cairn_ring_options_init(&opts);
    cairn_ring_t *ring = NULL;
    rc = cairn_ring_open(path, &opts, &ring);
    if (rc != 0) {
        fprintf(stderr, "cairn_ring_open %s: %s\n", path, cairn_strerror(rc));
        return 1;
    }
    int events = atoi(argv[2]);
    for (int i = 0; i < events; i++) {
        char event[128];
        int n = snprintf(event, sizeof event, "{\"name\":\"c_host_event\",\"properties\":{\"i\":%d}}", i);
        rc = cairn_ring_append(ring, event, (size_t)n);
        if (rc != 0) fprintf(stderr, "cairn_ring_append: %s\n", cairn_strerror(rc));
    }
    rc = cairn_ring_sync(ring);
    if (rc != 0) fprintf(stderr, "cairn_ring_sync: %s\n", cairn_strerror(rc));

    const char *context = "{\"session_id\":\"c-host-run\",\"breadcrumbs\":[{\"message\":\"charging\"}]}";
    cairn_crash_set_context(context, strlen(context));
    printf("wrote %d events; crashing\n", events);
    fflush(stdout);
    charge_card(NULL);
    return 0;
}
