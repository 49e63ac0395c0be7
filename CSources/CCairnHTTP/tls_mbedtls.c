/*
 * tls_mbedtls.c: TLS through mbedTLS 2.28 (Debian's libmbedtls14), loaded with
 * dlopen("libmbedtls.so.14") when tls.c first asks for it, never before.
 *
 * Why a second library: OpenSSL 3 adds about 6 MiB to a process once a TLS context
 * exists (its provider tables, error strings and the parsed trust store), more than
 * the SDK's whole memory budget; mbedTLS adds about 1.4 MiB for the same request to
 * the same collector with the same system store (README, "Choosing the transport").
 *
 * As in tls_openssl.c, mbedTLS's headers give the types; every function is resolved
 * with dlsym into a pointer of the same type, and the load is done once for the
 * process and never undone. The headers must be the ones the library was built with
 * (Debian's libmbedtls-dev for libmbedtls14): the structures below are allocated here
 * with their sizes, and mbedTLS's threading (MBEDTLS_THREADING_C, on in Debian's build)
 * makes the shared random generator safe from several connections at once.
 *
 * Verification is always on, and no application byte is written before it passed: the
 * peer's chain against the trusted CAs, the host name checked against the certificate
 * and sent as SNI, TLS 1.2 at least (mbedTLS 2.28 has no TLS 1.3). mbedTLS 2.28 keeps
 * a certificate's iPAddress entries but does not match them, so for an IP-literal
 * host `verify_peer` does (RFC 6125: an address matches an iPAddress entry of the same
 * bytes, never a name or the CN), and no SNI is sent (RFC 6066).
 *
 * The trusted CAs are found as OpenSSL finds them, by subject, and only those a peer's
 * chain asks for are kept (see `find_issuers`): the system store's 140 certificates,
 * parsed whole, were about 0.6 MiB of a process's memory, and mbedTLS 2.28 as Debian
 * builds it has no CA callback. So the handshake runs with MBEDTLS_SSL_VERIFY_OPTIONAL
 * (it still checks the name, dates, key usage and every signature of the handshake),
 * and `verify_peer` then checks the chain against the CAs found so far, looking up the
 * ones it lacks, before the connection is used.
 *
 * The socket is reached through callbacks of our own, with the client's send
 * (MSG_NOSIGNAL: no SIGPIPE in the host) and recv, non-blocking like the rest of it.
 */
#include "http_internal.h"

/* Without the headers (the -dev package was missing at build time) this library
 * builds as one that says so at its first use: the package still builds, and the
 * other library, or a clear error, serves https. */
#if !__has_include(<mbedtls/ssl.h>)
CAIRN_HTTP_UNBUILT_TLS_LIBRARY(cairn_http__mbedtls, "mbedTLS", "libmbedtls-dev");
#else

#include <arpa/inet.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/error.h>
#include <mbedtls/net_sockets.h>
#include <mbedtls/oid.h>
#include <mbedtls/pk.h>
#include <mbedtls/ssl.h>
#include <mbedtls/version.h>
#include <mbedtls/x509_crt.h>

#include "cairn_http.h"

/* The library and its two dependencies (found through its DT_NEEDED entries). */
#define LIBMBEDTLS "libmbedtls.so.14"

/* Debian's bundle of the system store; the directory when the bundle is missing. */
#define SYSTEM_BUNDLE "/etc/ssl/certs/ca-certificates.crt"
#define SYSTEM_DIRECTORY "/etc/ssl/certs"

#define MBED_FUNCTIONS(X)            \
    X(mbedtls_ssl_init)              \
    X(mbedtls_ssl_free)              \
    X(mbedtls_ssl_setup)             \
    X(mbedtls_ssl_set_hostname)      \
    X(mbedtls_ssl_set_bio)           \
    X(mbedtls_ssl_handshake)         \
    X(mbedtls_ssl_read)              \
    X(mbedtls_ssl_write)             \
    X(mbedtls_ssl_get_verify_result) \
    X(mbedtls_ssl_config_init)       \
    X(mbedtls_ssl_config_defaults)   \
    X(mbedtls_ssl_config_free)       \
    X(mbedtls_ssl_conf_authmode)     \
    X(mbedtls_ssl_conf_rng)          \
    X(mbedtls_ssl_conf_min_version)  \
    X(mbedtls_x509_crt_init)         \
    X(mbedtls_x509_crt_free)         \
    X(mbedtls_x509_crt_parse)        \
    X(mbedtls_x509_crt_parse_der)    \
    X(mbedtls_x509_crt_parse_file)   \
    X(mbedtls_x509_crt_verify_with_profile) \
    X(mbedtls_ssl_get_peer_cert)     \
    X(mbedtls_x509_crt_verify_info)  \
    X(mbedtls_pk_init)               \
    X(mbedtls_pk_free)               \
    X(mbedtls_pk_parse_keyfile)      \
    X(mbedtls_pk_check_pair)         \
    X(mbedtls_ssl_conf_own_cert)     \
    X(mbedtls_entropy_init)          \
    X(mbedtls_entropy_free)          \
    X(mbedtls_entropy_func)          \
    X(mbedtls_ctr_drbg_init)         \
    X(mbedtls_ctr_drbg_free)         \
    X(mbedtls_ctr_drbg_seed)         \
    X(mbedtls_ctr_drbg_random)       \
    X(mbedtls_strerror)              \
    X(mbedtls_version_get_number)    \
    X(mbedtls_version_check_feature)

#define DECLARE(name) static __typeof__(name) *f_##name;
MBED_FUNCTIONS(DECLARE)
#undef DECLARE

static void mbed_context_free(void *context);
static void mbed_session_free(void *session);

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static char load_error[256];
static atomic_int loaded;

/* Where trusted CAs are looked up: the CA file alone when one is given; else the
 * system store as OpenSSL reads it, the file SSL_CERT_FILE names (else Debian's
 * bundle) and then each directory of SSL_CERT_DIR (a `:`-separated list; else
 * /etc/ssl/certs), by OpenSSL's hashed names. Read from the environment once, when
 * the context is made. */
typedef struct trust_sources {
    char file[4096];
    char dirs[4096]; /* empty with a CA file */
} trust_sources;

/* What a client's connections share: the configuration, the trusted CAs found so far
 * (those the collectors' chains asked for; `lock` guards them while a chain is
 * checked or the list grows), where to find more, and one seeded random generator
 * (locked inside mbedTLS). */
typedef struct mbed_context {
    mbedtls_ssl_config config;
    pthread_mutex_t lock;
    mbedtls_x509_crt trusted;
    trust_sources sources;
    mbedtls_x509_crt own; /* the client's certificate chain, if any */
    mbedtls_pk_context key; /* and its key */
    mbedtls_entropy_context entropy;
    mbedtls_ctr_drbg_context random;
} mbed_context;

/* One connection's TLS state, and the socket its callbacks use. */
typedef struct mbed_session {
    mbedtls_ssl_context ssl;
    mbed_context *context;
    char host[256];
    unsigned char address[16]; /* an IP-literal host's bytes (address_len 4 or 16), else 0 */
    size_t address_len;
    int fd;
    int last_errno; /* of the last failed send or recv, for the message */
} mbed_session;

/* Build options this file relies on: the random generator is shared by connections
 * (threads), and the peer's chain is kept after the handshake for `verify_peer`. */
static const char *const required_features[] = {
    "MBEDTLS_THREADING_C", "MBEDTLS_THREADING_PTHREAD", "MBEDTLS_SSL_KEEP_PEER_CERTIFICATE",
    "MBEDTLS_SSL_SERVER_NAME_INDICATION",
};

/* Wrappers of the same type for the layout probe. */
static void probe_ssl_init(void *p) { f_mbedtls_ssl_init(p); }
static void probe_ssl_free(void *p) { f_mbedtls_ssl_free(p); }
static void probe_config_init(void *p) { f_mbedtls_ssl_config_init(p); }
static void probe_config_free(void *p) { f_mbedtls_ssl_config_free(p); }
static void probe_crt_init(void *p) { f_mbedtls_x509_crt_init(p); }
static void probe_crt_free(void *p) { f_mbedtls_x509_crt_free(p); }
static void probe_pk_init(void *p) { f_mbedtls_pk_init(p); }
static void probe_pk_free(void *p) { f_mbedtls_pk_free(p); }
static void probe_drbg_init(void *p) { f_mbedtls_ctr_drbg_init(p); }
static void probe_drbg_free(void *p) { f_mbedtls_ctr_drbg_free(p); }
static void probe_entropy_init(void *p) { f_mbedtls_entropy_init(p); }
static void probe_entropy_free(void *p) { f_mbedtls_entropy_free(p); }

/* Room past a structure for the probe: a library's structure larger than ours by
 * less than this is seen, not overrun. */
#define PROBE_SLACK 4096

/* Whether the library's init function for a structure of `size` bytes (ours) stays
 * within it, and with `whole`, clears all of it: mbedTLS 2.28's init functions for
 * these structures begin with a memset of the whole structure (the library's size),
 * so over a buffer filled with a pattern, one past the last byte changed is the
 * library's size. Two patterns, so that a field set to one of them hides nothing. */
static int same_size(void (*init)(void *), void (*release)(void *), size_t size, int whole)
{
    unsigned char *buffer = malloc(size + PROBE_SLACK);
    if (!buffer) return 0;
    size_t end = 0;
    for (int round = 0; round < 2; round++) {
        unsigned char pattern = round ? 0x5A : 0xA5;
        memset(buffer, pattern, size + PROBE_SLACK);
        init(buffer);
        size_t changed = 0;
        for (size_t i = size + PROBE_SLACK; i > 0; i--)
            if (buffer[i - 1] != pattern) {
                changed = i;
                break;
            }
        release(buffer);
        if (changed > end) end = changed;
    }
    free(buffer);
    return whole ? end == size : end <= size;
}

/* The structures allocated here are allocated with the sizes of the headers built
 * against; the library's own sizes depend on its version and build options. The
 * name of the first that differs, or NULL. (The entropy context's init sets fields
 * without clearing the whole structure: for it, only that nothing past ours is
 * written.) */
static const char *layout_differs(void)
{
    if (!same_size(probe_ssl_init, probe_ssl_free, sizeof(mbedtls_ssl_context), 1)) return "mbedtls_ssl_context";
    if (!same_size(probe_config_init, probe_config_free, sizeof(mbedtls_ssl_config), 1)) return "mbedtls_ssl_config";
    if (!same_size(probe_crt_init, probe_crt_free, sizeof(mbedtls_x509_crt), 1)) return "mbedtls_x509_crt";
    if (!same_size(probe_pk_init, probe_pk_free, sizeof(mbedtls_pk_context), 1)) return "mbedtls_pk_context";
    if (!same_size(probe_drbg_init, probe_drbg_free, sizeof(mbedtls_ctr_drbg_context), 1))
        return "mbedtls_ctr_drbg_context";
    if (!same_size(probe_entropy_init, probe_entropy_free, sizeof(mbedtls_entropy_context), 0))
        return "mbedtls_entropy_context";
    return NULL;
}

/* A function in each of libmbedtls, libmbedx509 and libmbedcrypto that load() brought
 * into the process (not those the service had loaded), for mbed_release_pages. */
static const void *own_objects[3];
static size_t own_count;

static void load(void)
{
    static cairn_http__objects before; /* under load_once */
    cairn_http__objects_now(&before);
    void *library = dlopen(LIBMBEDTLS, RTLD_NOW | RTLD_LOCAL);
    if (!library) {
        const char *why = dlerror();
        snprintf(load_error, sizeof load_error,
                 "%s could not be loaded (install libmbedtls14): %s", LIBMBEDTLS,
                 why ? why : "unknown reason");
        return;
    }
    /* dlsym on the handle also searches its dependencies (libmbedx509, libmbedcrypto). */
#define RESOLVE(name)                                                                     \
    f_##name = (__typeof__(name) *)dlsym(library, #name);                                 \
    if (!f_##name) {                                                                        \
        snprintf(load_error, sizeof load_error, "%s has no function %s", LIBMBEDTLS, #name); \
        return;                                                                             \
    }
    MBED_FUNCTIONS(RESOLVE)
#undef RESOLVE
    const void *objects[] = {(const void *)f_mbedtls_ssl_handshake, (const void *)f_mbedtls_x509_crt_parse,
                             (const void *)f_mbedtls_ctr_drbg_seed};
    own_count = cairn_http__objects_added(&before, objects, 3, own_objects);
    /* The structures are allocated here with the sizes of the headers built against,
     * which depend on the library's version and build options: a library of another
     * minor version, one without an option this file relies on, or one whose
     * structures have other sizes (probed), is not used. */
    unsigned version = f_mbedtls_version_get_number();
    if ((version >> 16) != (MBEDTLS_VERSION_NUMBER >> 16)) {
        snprintf(load_error, sizeof load_error, "%s is version %u.%u, built against %u.%u", LIBMBEDTLS,
                 version >> 24, (version >> 16) & 0xff, MBEDTLS_VERSION_NUMBER >> 24,
                 (MBEDTLS_VERSION_NUMBER >> 16) & 0xff);
        return;
    }
    for (size_t i = 0; i < sizeof required_features / sizeof *required_features; i++)
        if (f_mbedtls_version_check_feature(required_features[i]) != 0) {
            snprintf(load_error, sizeof load_error, "%s was built without %s", LIBMBEDTLS, required_features[i]);
            return;
        }
    const char *differs = layout_differs();
    if (differs) {
        snprintf(load_error, sizeof load_error,
                 "%s was built with another size of %s than its headers here give (other build options)",
                 LIBMBEDTLS, differs);
        return;
    }
    atomic_store(&loaded, 1);
}

static int mbed_available(char *message, size_t cap)
{
    pthread_once(&load_once, load);
    if (atomic_load(&loaded)) return 1;
    snprintf(message, cap, "TLS is unavailable: %s", load_error);
    return 0;
}

static int mbed_loaded(void)
{
    return atomic_load(&loaded);
}

/* "what: mbedTLS's text for `code`". */
static void mbed_message(char *message, size_t cap, const char *what, int code)
{
    char text[160];
    f_mbedtls_strerror(code, text, sizeof text);
    snprintf(message, cap, "%s: %s (-0x%04x)", what, text, (unsigned)-code);
}

/* Calls `visit(certificate, arg)` for each certificate of the PEM file `path`, parsed
 * one at a time into a temporary (so a whole bundle is never held), until `visit`
 * returns nonzero. Blocks that do not parse are skipped, as OpenSSL skips them.
 * Returns -1 (errno set) when the file cannot be opened, else how many parsed. */
static int each_certificate(const char *path, int (*visit)(const mbedtls_x509_crt *, void *), void *arg)
{
    FILE *file = fopen(path, "re");
    if (!file) return -1;
    enum { BLOCK_CAP = 64 * 1024 };
    static const char begin[] = "-----BEGIN CERTIFICATE-----", end[] = "-----END CERTIFICATE-----";
    char *block = malloc(BLOCK_CAP);
    if (!block) {
        fclose(file);
        errno = ENOMEM;
        return -1;
    }
    char line[1024];
    size_t len = 0;
    int inside = 0, parsed = 0, stop = 0;
    while (!stop && fgets(line, sizeof line, file)) {
        size_t n = strlen(line);
        if (!inside) {
            if (strncmp(line, begin, sizeof begin - 1) != 0) continue;
            inside = 1;
            len = 0;
        }
        if (len + n + 1 > BLOCK_CAP) { /* not a certificate of any sane size: skip it */
            inside = 0;
            continue;
        }
        memcpy(block + len, line, n);
        len += n;
        if (strncmp(line, end, sizeof end - 1) != 0) continue;
        inside = 0;
        block[len] = '\0';
        mbedtls_x509_crt one;
        f_mbedtls_x509_crt_init(&one);
        if (f_mbedtls_x509_crt_parse(&one, (const unsigned char *)block, len + 1) == 0) {
            parsed++;
            stop = visit(&one, arg);
        }
        f_mbedtls_x509_crt_free(&one);
    }
    free(block);
    fclose(file);
    return parsed;
}

/* Whether `name` is one OpenSSL gives a certificate in a hashed directory: eight
 * lowercase hex digits (the subject's hash), a dot, a decimal sequence number. */
static int hashed_name(const char *name)
{
    for (int i = 0; i < 8; i++)
        if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f'))) return 0;
    if (name[8] != '.' || name[9] == '\0') return 0;
    for (const char *p = name + 9; *p; p++)
        if (*p < '0' || *p > '9') return 0;
    return 1;
}

/* A lookup of trusted CAs by subject. */
typedef struct issuer_search {
    mbed_context *context;
    const mbedtls_x509_buf *names[16]; /* the subjects wanted (DER) */
    int count;
    int added;
} issuer_search;

static int same_buffer(const mbedtls_x509_buf *a, const mbedtls_x509_buf *b)
{
    return a->len == b->len && memcmp(a->p, b->p, a->len) == 0;
}

/* Keeps `certificate` when its subject is wanted and it is not kept already. */
static int keep_if_wanted(const mbedtls_x509_crt *certificate, void *arg)
{
    issuer_search *search = arg;
    int wanted = 0;
    for (int i = 0; i < search->count && !wanted; i++) wanted = same_buffer(&certificate->subject_raw, search->names[i]);
    if (!wanted) return 0;
    mbed_context *c = search->context;
    if (c->trusted.version != 0)
        for (const mbedtls_x509_crt *kept = &c->trusted; kept; kept = kept->next)
            if (same_buffer(&kept->raw, &certificate->raw)) return 0;
    if (f_mbedtls_x509_crt_parse_der(&c->trusted, certificate->raw.p, certificate->raw.len) == 0) search->added++;
    return 0;
}

/* Adds to the context's trusted CAs every certificate of its sources whose subject
 * is one of `search`'s names; how many were added. Sets `*readable` when at least one
 * source could be read. Called with the context's lock held. */
static int find_issuers(issuer_search *search, int *readable)
{
    mbed_context *c = search->context;
    if (each_certificate(c->sources.file, keep_if_wanted, search) >= 0) *readable = 1;
    char dirs[sizeof c->sources.dirs];
    memcpy(dirs, c->sources.dirs, sizeof dirs);
    char *rest = dirs;
    for (char *dir = strsep(&rest, ":"); dir; dir = strsep(&rest, ":")) {
        DIR *listing = *dir ? opendir(dir) : NULL;
        if (!listing) continue;
        struct dirent *entry;
        while ((entry = readdir(listing)) != NULL) {
            if (!hashed_name(entry->d_name)) continue;
            char path[8192];
            if (snprintf(path, sizeof path, "%s/%s", dir, entry->d_name) >= (int)sizeof path) continue;
            if (each_certificate(path, keep_if_wanted, search) >= 0) *readable = 1;
        }
        closedir(listing);
    }
    return search->added;
}

/* Where to look for trusted CAs (see trust_sources), from `ca_file` or the
 * environment. */
static void read_sources(trust_sources *sources, const char *ca_file)
{
    if (ca_file) {
        snprintf(sources->file, sizeof sources->file, "%s", ca_file);
        sources->dirs[0] = '\0';
        return;
    }
    const char *env_file = getenv("SSL_CERT_FILE");
    const char *env_dirs = getenv("SSL_CERT_DIR");
    snprintf(sources->file, sizeof sources->file, "%s", env_file && *env_file ? env_file : SYSTEM_BUNDLE);
    snprintf(sources->dirs, sizeof sources->dirs, "%s", env_dirs && *env_dirs ? env_dirs : SYSTEM_DIRECTORY);
}

static int stop_at_first(const mbedtls_x509_crt *certificate, void *arg)
{
    (void)certificate;
    (void)arg;
    return 1;
}

/* A CA file that is given must hold a certificate: else an error naming it. 0, or
 * -1 with `message`. */
static int check_ca_file(const char *ca_file, char *message, size_t cap)
{
    int found = each_certificate(ca_file, stop_at_first, NULL);
    if (found > 0) return 0;
    if (found < 0)
        snprintf(message, cap, "loading the CA file %s: %s", ca_file, CAIRN_HTTP_ERRNO_TEXT(errno));
    else
        snprintf(message, cap, "loading the CA file %s: no certificate could be read", ca_file);
    return -1;
}

static void *mbed_context_new(const cairn_http__tls_files *files, char *message, size_t cap)
{
    const char *ca_file = files->ca_file;
    if (!mbed_available(message, cap)) return NULL;
    mbed_context *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(message, cap, "TLS context: out of memory");
        return NULL;
    }
    f_mbedtls_ssl_config_init(&c->config);
    pthread_mutex_init(&c->lock, NULL);
    f_mbedtls_x509_crt_init(&c->trusted);
    f_mbedtls_x509_crt_init(&c->own);
    f_mbedtls_pk_init(&c->key);
    f_mbedtls_entropy_init(&c->entropy);
    f_mbedtls_ctr_drbg_init(&c->random);
    static const unsigned char personal[] = "cairn-http";
    int rc = f_mbedtls_ctr_drbg_seed(&c->random, f_mbedtls_entropy_func, &c->entropy, personal,
                                     sizeof personal - 1);
    if (rc != 0) {
        mbed_message(message, cap, "seeding the random generator", rc);
        goto fail;
    }
    rc = f_mbedtls_ssl_config_defaults(&c->config, MBEDTLS_SSL_IS_CLIENT, MBEDTLS_SSL_TRANSPORT_STREAM,
                                       MBEDTLS_SSL_PRESET_DEFAULT);
    if (rc != 0) {
        mbed_message(message, cap, "TLS configuration", rc);
        goto fail;
    }
    if (ca_file && check_ca_file(ca_file, message, cap) != 0) goto fail;
    read_sources(&c->sources, ca_file);
    /* The chain's trust is checked by verify_peer, after the handshake and before any
     * use; the handshake checks all the rest (module comment). */
    f_mbedtls_ssl_conf_authmode(&c->config, MBEDTLS_SSL_VERIFY_OPTIONAL);
    f_mbedtls_ssl_conf_rng(&c->config, f_mbedtls_ctr_drbg_random, &c->random);
    f_mbedtls_ssl_conf_min_version(&c->config, MBEDTLS_SSL_MAJOR_VERSION_3, MBEDTLS_SSL_MINOR_VERSION_3);
    if (files->cert_file) {
        /* The client's own certificate, for a collector that asks for one. */
        const char *key = files->key_file ? files->key_file : files->cert_file;
        char what[512];
        if ((rc = f_mbedtls_x509_crt_parse_file(&c->own, files->cert_file)) != 0) {
            snprintf(what, sizeof what, "loading the client certificate %s", files->cert_file);
        } else if ((rc = f_mbedtls_pk_parse_keyfile(&c->key, key, NULL)) != 0) {
            snprintf(what, sizeof what, "loading the client key %s", key);
        } else if ((rc = f_mbedtls_pk_check_pair(&c->own.pk, &c->key)) != 0) {
            snprintf(what, sizeof what, "the client key %s does not match the certificate %s", key, files->cert_file);
        } else if ((rc = f_mbedtls_ssl_conf_own_cert(&c->config, &c->own, &c->key)) != 0) {
            snprintf(what, sizeof what, "using the client certificate %s", files->cert_file);
        }
        if (rc != 0) {
            mbed_message(message, cap, what, rc);
            goto fail;
        }
    }
    return c;
fail:
    mbed_context_free(c);
    return NULL;
}

static void mbed_context_free(void *context)
{
    mbed_context *c = context;
    if (!c) return;
    f_mbedtls_ssl_config_free(&c->config);
    pthread_mutex_destroy(&c->lock);
    f_mbedtls_x509_crt_free(&c->trusted);
    f_mbedtls_x509_crt_free(&c->own);
    f_mbedtls_pk_free(&c->key);
    f_mbedtls_ctr_drbg_free(&c->random);
    f_mbedtls_entropy_free(&c->entropy);
    free(c);
}

/* What a socket call's result `n` means to mbedTLS: bytes moved, `again` when the
 * socket would block, else `failed` (errno kept for the message). */
static int io_result(mbed_session *s, ssize_t n, int again, int failed)
{
    if (n >= 0) return (int)n;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return again;
    s->last_errno = errno;
    return failed;
}

static int send_callback(void *context, const unsigned char *data, size_t len)
{
    mbed_session *s = context;
    return io_result(s, cairn_http__send(s->fd, data, len), MBEDTLS_ERR_SSL_WANT_WRITE, MBEDTLS_ERR_NET_SEND_FAILED);
}

static int recv_callback(void *context, unsigned char *data, size_t len)
{
    mbed_session *s = context;
    return io_result(s, cairn_http__recv(s->fd, data, len), MBEDTLS_ERR_SSL_WANT_READ, MBEDTLS_ERR_NET_RECV_FAILED);
}

static void *mbed_session_new(void *context, int fd, const char *host, int host_is_ip,
                              char *message, size_t cap)
{
    mbed_context *c = context;
    mbed_session *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(message, cap, "TLS session: out of memory");
        return NULL;
    }
    s->fd = fd;
    s->context = c;
    snprintf(s->host, sizeof s->host, "%s", host);
    if (host_is_ip) {
        if (inet_pton(AF_INET, host, s->address) == 1)
            s->address_len = 4;
        else if (inet_pton(AF_INET6, host, s->address) == 1)
            s->address_len = 16;
    }
    f_mbedtls_ssl_init(&s->ssl);
    int rc = f_mbedtls_ssl_setup(&s->ssl, &c->config);
    if (rc == 0 && host_is_ip && s->address_len == 0) {
        snprintf(message, cap, "TLS session: %s is not an IP address", host);
        mbed_session_free(s);
        return NULL;
    }
    /* A name is both sent (SNI) and checked against the certificate; an address is
     * checked by verify_peer. */
    if (rc == 0 && !host_is_ip) rc = f_mbedtls_ssl_set_hostname(&s->ssl, host);
    if (rc != 0) {
        mbed_message(message, cap, "TLS session", rc);
        mbed_session_free(s);
        return NULL;
    }
    f_mbedtls_ssl_set_bio(&s->ssl, s, send_callback, recv_callback, NULL);
    return s;
}

static void mbed_session_free(void *session)
{
    mbed_session *s = session;
    if (!s) return;
    f_mbedtls_ssl_free(&s->ssl);
    free(s);
}

/* The certificate check's failure `flags` in OpenSSL's words first (what the
 * transport's callers and logs already know), then mbedTLS's own lines. */
static void verify_message(uint32_t flags, char *message, size_t cap, const char *what)
{
    const char *summary = (flags & MBEDTLS_X509_BADCERT_EXPIRED)      ? "certificate has expired"
                          : (flags & MBEDTLS_X509_BADCERT_FUTURE)     ? "certificate is not yet valid"
                          : (flags & MBEDTLS_X509_BADCERT_CN_MISMATCH) ? "hostname mismatch"
                          : (flags & MBEDTLS_X509_BADCERT_NOT_TRUSTED) ? "unable to get local issuer certificate"
                                                                        : "certificate rejected";
    char detail[512] = "";
    f_mbedtls_x509_crt_verify_info(detail, sizeof detail, "", flags);
    /* One line: mbedTLS ends each reason with a newline. */
    for (char *p = detail; *p; p++)
        if (*p == '\n') *p = p[1] ? ';' : '\0';
    snprintf(message, cap, "%s: certificate verify failed: %s (%s)", what, summary, detail);
}

/* The subjects a chain's trust may rest on: the issuer of each certificate of the
 * peer's chain, and of each CA found so far that another CA issued (an intermediate
 * in the store). */
static void wanted_issuers(issuer_search *search, const mbedtls_x509_crt *peer)
{
    search->count = 0;
    for (const mbedtls_x509_crt *crt = peer; crt && search->count < 16; crt = crt->next)
        search->names[search->count++] = &crt->issuer_raw;
    mbed_context *c = search->context;
    if (c->trusted.version == 0) return;
    for (const mbedtls_x509_crt *crt = &c->trusted; crt && search->count < 16; crt = crt->next)
        if (!same_buffer(&crt->issuer_raw, &crt->subject_raw)) search->names[search->count++] = &crt->issuer_raw;
}

/* Whether the leaf `certificate` has an iPAddress entry (subjectAltName, [7]) of
 * exactly these bytes. */
static int has_address(const mbedtls_x509_crt *certificate, const unsigned char *address, size_t len)
{
    if (!(certificate->ext_types & MBEDTLS_X509_EXT_SUBJECT_ALT_NAME)) return 0;
    for (const mbedtls_x509_sequence *name = &certificate->subject_alt_names; name; name = name->next)
        if (name->buf.tag == (MBEDTLS_ASN1_CONTEXT_SPECIFIC | 7) && name->buf.len == len
            && memcmp(name->buf.p, address, len) == 0)
            return 1;
    return 0;
}

/* After a completed handshake: the handshake's own result (name, dates, key usage),
 * then the peer's chain against the trusted CAs, looking up by subject those it
 * lacks (a few rounds, for intermediates kept in the store). 0, or CAIRN_TLS_FAILED
 * with `message`. */
static int verify_peer(mbed_session *s, char *message, size_t cap)
{
    const char *what = "TLS handshake";
    uint32_t flags = f_mbedtls_ssl_get_verify_result(&s->ssl);
    if (flags & ~(uint32_t)MBEDTLS_X509_BADCERT_NOT_TRUSTED) {
        verify_message(flags, message, cap, what);
        return CAIRN_TLS_FAILED;
    }
    const mbedtls_x509_crt *peer = f_mbedtls_ssl_get_peer_cert(&s->ssl);
    if (!peer) {
        snprintf(message, cap, "%s: the server sent no certificate", what);
        return CAIRN_TLS_FAILED;
    }
    mbed_context *c = s->context;
    issuer_search search = {.context = c};
    int readable = 0, looked = 0;
    pthread_mutex_lock(&c->lock);
    int rc;
    for (int round = 0;; round++) {
        flags = 0;
        rc = f_mbedtls_x509_crt_verify_with_profile((mbedtls_x509_crt *)peer, c->trusted.version ? &c->trusted : NULL,
                                                    NULL, c->config.cert_profile, s->address_len ? NULL : s->host,
                                                    &flags, NULL, NULL);
        if (rc == 0 || flags != MBEDTLS_X509_BADCERT_NOT_TRUSTED || round == 4) break;
        wanted_issuers(&search, peer);
        search.added = 0;
        looked = 1;
        if (find_issuers(&search, &readable) == 0) break;
    }
    pthread_mutex_unlock(&c->lock);
    if (rc == 0 && s->address_len && !has_address(peer, s->address, s->address_len)) {
        snprintf(message, cap, "%s: certificate verify failed: IP address mismatch (%s is not among the certificate's "
                 "IP addresses)", what, s->host);
        return CAIRN_TLS_FAILED;
    }
    if (rc == 0) return 0;
    if (looked && !readable && c->trusted.version == 0) {
        snprintf(message, cap, "%s: certificate verify failed: no trusted certificate could be read from %s%s%s",
                 what, c->sources.file, c->sources.dirs[0] ? " or " : "", c->sources.dirs);
        return CAIRN_TLS_FAILED;
    }
    if (flags == 0) {
        mbed_message(message, cap, what, rc);
        return CAIRN_TLS_FAILED;
    }
    verify_message(flags, message, cap, what);
    return CAIRN_TLS_FAILED;
}

/* The CAIRN_TLS_* step for mbedTLS result `rc` (< 0), or FAILED with a message. */
static int next_step(mbed_session *s, int rc, const char *what, char *message, size_t cap)
{
    switch (rc) {
    case MBEDTLS_ERR_SSL_WANT_READ:
        return CAIRN_TLS_WANT_READ;
    case MBEDTLS_ERR_SSL_WANT_WRITE:
        return CAIRN_TLS_WANT_WRITE;
    case MBEDTLS_ERR_X509_CERT_VERIFY_FAILED:
        verify_message(f_mbedtls_ssl_get_verify_result(&s->ssl), message, cap, what);
        return CAIRN_TLS_FAILED;
    case MBEDTLS_ERR_NET_SEND_FAILED:
    case MBEDTLS_ERR_NET_RECV_FAILED:
        snprintf(message, cap, "%s: %s", what,
                 s->last_errno ? CAIRN_HTTP_ERRNO_TEXT(s->last_errno) : "the connection failed");
        return CAIRN_TLS_FAILED;
    default:
        /* The TLS layer itself (an alert the peer sent, a record it could not accept),
         * not the socket. */
        mbed_message(message, cap, what, rc);
        return CAIRN_TLS_REFUSED;
    }
}

static int mbed_handshake(void *session, char *message, size_t cap)
{
    mbed_session *s = session;
    int rc = f_mbedtls_ssl_handshake(&s->ssl);
    if (rc == 0) return verify_peer(s, message, cap);
    if (rc == MBEDTLS_ERR_SSL_CONN_EOF) {
        snprintf(message, cap, "TLS handshake: the server closed the connection");
        return CAIRN_TLS_FAILED;
    }
    return next_step(s, rc, "TLS handshake", message, cap);
}

static ssize_t mbed_read(void *session, void *buffer, size_t len, char *message, size_t cap)
{
    mbed_session *s = session;
    int rc = f_mbedtls_ssl_read(&s->ssl, buffer, len);
    if (rc > 0) return rc;
    /* A close with or without close_notify ends the read like a plain close; the
     * response's framing (Content-Length, chunked) tells one cut short. */
    if (rc == 0 || rc == MBEDTLS_ERR_SSL_PEER_CLOSE_NOTIFY || rc == MBEDTLS_ERR_SSL_CONN_EOF) return 0;
    return next_step(s, rc, "TLS read", message, cap);
}

static ssize_t mbed_write(void *session, const void *buffer, size_t len, char *message,
                          size_t cap)
{
    mbed_session *s = session;
    int rc = f_mbedtls_ssl_write(&s->ssl, buffer, len);
    if (rc > 0) return rc;
    if (rc == 0 || rc == MBEDTLS_ERR_SSL_PEER_CLOSE_NOTIFY || rc == MBEDTLS_ERR_SSL_CONN_EOF) {
        snprintf(message, cap, "TLS write: the server closed the connection");
        return CAIRN_TLS_FAILED;
    }
    return next_step(s, rc, "TLS write", message, cap);
}

/* Unmaps the code pages of what load() brought (pages.c), for tls.c. */
static size_t mbed_release_pages(void)
{
    return mbed_loaded() ? cairn_http__release_code_pages(own_objects, own_count) : 0;
}

/* This library, for tls.c. */
const cairn_http__tls_library cairn_http__mbedtls = {
    .available = mbed_available,
    .loaded = mbed_loaded,
    .context_new = mbed_context_new,
    .context_free = mbed_context_free,
    .session_new = mbed_session_new,
    .session_free = mbed_session_free,
    .handshake = mbed_handshake,
    .read = mbed_read,
    .write = mbed_write,
    .release_pages = mbed_release_pages,
};

#endif /* __has_include(<mbedtls/ssl.h>) */
