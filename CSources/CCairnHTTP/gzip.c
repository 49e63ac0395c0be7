/*
 * gzip (RFC 1952) for request bodies, with the system's zlib loaded at the first use
 * (libz.so.1): a service that never asks for gzip never maps it, and building Cairn
 * needs no zlib headers. zlib's own check (deflateInit2_ with its version and the
 * stream's size) refuses a library whose layout is not this one.
 */
#include "cairn_http.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* zlib's z_stream, as zlib.h has declared it since 1.0 (checked by deflateInit2_). */
typedef struct {
    const unsigned char *next_in;
    unsigned avail_in;
    unsigned long total_in;
    unsigned char *next_out;
    unsigned avail_out;
    unsigned long total_out;
    const char *msg;
    void *state;
    void *(*zalloc)(void *, unsigned, unsigned);
    void (*zfree)(void *, void *);
    void *opaque;
    int data_type;
    unsigned long adler;
    unsigned long reserved;
} cairn_z_stream;

enum { Z_OK_ = 0, Z_STREAM_END_ = 1, Z_FINISH_ = 4, Z_DEFLATED_ = 8, Z_DEFAULT_STRATEGY_ = 0 };

static struct {
    pthread_once_t once;
    int (*init2)(cairn_z_stream *, int, int, int, int, int, const char *, int);
    int (*deflate)(cairn_z_stream *, int);
    int (*end)(cairn_z_stream *);
    unsigned long (*bound)(cairn_z_stream *, unsigned long);
    const char *(*version)(void);
} zlib = {PTHREAD_ONCE_INIT, NULL, NULL, NULL, NULL, NULL};

static void load_zlib(void) {
    void *lib = dlopen("libz.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return;
    *(void **)&zlib.init2 = dlsym(lib, "deflateInit2_");
    *(void **)&zlib.deflate = dlsym(lib, "deflate");
    *(void **)&zlib.end = dlsym(lib, "deflateEnd");
    *(void **)&zlib.bound = dlsym(lib, "deflateBound");
    *(void **)&zlib.version = dlsym(lib, "zlibVersion");
    if (!zlib.init2 || !zlib.deflate || !zlib.end || !zlib.bound || !zlib.version) {
        zlib.init2 = NULL;
        dlclose(lib);
    }
}

int cairn_http_gzip(const void *data, size_t len, int level, unsigned char **out, size_t *out_len) {
    if (!out || !out_len || (len && !data)) return CAIRN_HTTP_EINVALID;
    *out = NULL;
    *out_len = 0;
    if (len > 0xFFFFFFFFu) return CAIRN_HTTP_EINVALID;
    if (level < 1 || level > 9) level = 6;
    pthread_once(&zlib.once, load_zlib);
    if (!zlib.init2) return CAIRN_HTTP_ENOTSUP;

    cairn_z_stream z;
    memset(&z, 0, sizeof z);
    /* 15 + 16: a window of 32 KiB and the gzip wrapper (header and CRC-32 trailer). */
    if (zlib.init2(&z, level, Z_DEFLATED_, 15 + 16, 8, Z_DEFAULT_STRATEGY_, zlib.version(), (int)sizeof z) != Z_OK_)
        return CAIRN_HTTP_ENOTSUP;
    unsigned long cap = zlib.bound(&z, (unsigned long)len);
    unsigned char *buf = malloc(cap ? cap : 1);
    if (!buf) {
        zlib.end(&z);
        return CAIRN_HTTP_ENOMEM;
    }
    z.next_in = data;
    z.avail_in = (unsigned)len;
    z.next_out = buf;
    z.avail_out = (unsigned)cap;
    int rc = zlib.deflate(&z, Z_FINISH_);
    size_t produced = (size_t)z.total_out;
    zlib.end(&z);
    if (rc != Z_STREAM_END_) {
        free(buf);
        return CAIRN_HTTP_EINVALID;
    }
    *out = buf;
    *out_len = produced;
    return 0;
}
