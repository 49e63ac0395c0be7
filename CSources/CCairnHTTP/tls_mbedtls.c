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
 * Verification is always on: MBEDTLS_SSL_VERIFY_REQUIRED against the system store (or
 * the given CA file), the host name checked against the certificate and sent as SNI,
 * TLS 1.2 at least (mbedTLS 2.28 has no TLS 1.3). mbedTLS 2.28 does not check IP
 * addresses in certificates, so tls.c never gives it an IP-literal host.
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
    X(mbedtls_ssl_conf_ca_chain)     \
    X(mbedtls_ssl_conf_rng)          \
    X(mbedtls_ssl_conf_min_version)  \
    X(mbedtls_x509_crt_init)         \
    X(mbedtls_x509_crt_free)         \
    X(mbedtls_x509_crt_parse_file)   \
    X(mbedtls_x509_crt_parse_path)   \
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

/* What a client's connections share: the configuration, the trusted CAs (read once,
 * about 0.45 MiB for Debian's 140-certificate system store), and one seeded random
 * generator (locked inside mbedTLS). Freeing the CAs between handshakes was tried and
 * measured: glibc kept their pages (its trim threshold rises with the host's large
 * frees), so it only added a re-read per new connection. */
typedef struct mbed_context {
    mbedtls_ssl_config config;
    mbedtls_x509_crt trusted;
    mbedtls_x509_crt own; /* the client's certificate chain, if any */
    mbedtls_pk_context key; /* and its key */
    mbedtls_entropy_context entropy;
    mbedtls_ctr_drbg_context random;
} mbed_context;

/* One connection's TLS state, and the socket its callbacks use. */
typedef struct mbed_session {
    mbedtls_ssl_context ssl;
    int fd;
    int last_errno; /* of the last failed send or recv, for the message */
} mbed_session;

static void load(void)
{
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
    /* The structures are allocated here with the sizes of the headers built against,
     * which depend on the library's build options: a library of another minor version,
     * or one built without threads (the random generator is shared by connections),
     * is not used. */
    unsigned version = f_mbedtls_version_get_number();
    if ((version >> 16) != (MBEDTLS_VERSION_NUMBER >> 16)) {
        snprintf(load_error, sizeof load_error, "%s is version %u.%u, built against %u.%u", LIBMBEDTLS,
                 version >> 24, (version >> 16) & 0xff, MBEDTLS_VERSION_NUMBER >> 24,
                 (MBEDTLS_VERSION_NUMBER >> 16) & 0xff);
        return;
    }
    if (f_mbedtls_version_check_feature("MBEDTLS_THREADING_C") != 0
        || f_mbedtls_version_check_feature("MBEDTLS_THREADING_PTHREAD") != 0) {
        snprintf(load_error, sizeof load_error, "%s was built without pthread support", LIBMBEDTLS);
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

/* Adds the certificates of the *.pem and *.crt files in `directory` (Debian's
 * /etc/ssl/certs also holds the bundle and a hash link per certificate: reading every
 * file, as mbedtls_x509_crt_parse_path does, would parse each certificate three
 * times). Returns how many files gave at least one certificate. */
static int add_directory(mbedtls_x509_crt *trusted, const char *directory)
{
    DIR *dir = opendir(directory);
    if (!dir) return 0;
    int added = 0;
    struct dirent *entry;
    while ((entry = readdir(dir)) != NULL) {
        size_t len = strlen(entry->d_name);
        if (len < 5 || (strcmp(entry->d_name + len - 4, ".pem") != 0
                        && strcmp(entry->d_name + len - 4, ".crt") != 0))
            continue;
        char path[4096];
        if (snprintf(path, sizeof path, "%s/%s", directory, entry->d_name) >= (int)sizeof path) continue;
        if (f_mbedtls_x509_crt_parse_file(trusted, path) >= 0) added++;
    }
    closedir(dir);
    return added;
}

/* Loads the trusted CAs. With `ca_file`, that file alone, and a file that gives no
 * certificate is an error naming it. Without, the system store as OpenSSL reads it:
 * the file SSL_CERT_FILE names (else Debian's bundle) and each directory of
 * SSL_CERT_DIR (a `:`-separated list), whichever of them can be read; Debian's
 * directory when neither gave a certificate. A positive result of a parse counts
 * certificates that did not parse: the others are kept, as OpenSSL keeps the good
 * ones of a bundle. 0, or -1 with `message`. */
static int load_trusted(mbed_context *c, const char *ca_file, char *message, size_t cap)
{
    if (ca_file) {
        int rc = f_mbedtls_x509_crt_parse_file(&c->trusted, ca_file);
        if (rc >= 0 && c->trusted.version != 0) return 0;
        char what[512];
        snprintf(what, sizeof what, "loading the CA file %s", ca_file);
        if (rc < 0)
            mbed_message(message, cap, what, rc);
        else
            snprintf(message, cap, "%s: no certificate could be read", what);
        return -1;
    }
    const char *env_file = getenv("SSL_CERT_FILE");
    const char *env_dirs = getenv("SSL_CERT_DIR");
    const char *file = env_file && *env_file ? env_file : SYSTEM_BUNDLE;
    (void)f_mbedtls_x509_crt_parse_file(&c->trusted, file);
    if (env_dirs && *env_dirs) {
        char dirs[4096];
        snprintf(dirs, sizeof dirs, "%s", env_dirs);
        char *rest = dirs;
        for (char *dir = strsep(&rest, ":"); dir; dir = strsep(&rest, ":"))
            if (*dir) add_directory(&c->trusted, dir);
    }
    if (c->trusted.version == 0) add_directory(&c->trusted, SYSTEM_DIRECTORY);
    if (c->trusted.version != 0) return 0;
    snprintf(message, cap, "loading the system trust store: no certificate could be read from %s%s%s or %s",
             file, env_dirs && *env_dirs ? ", " : "", env_dirs && *env_dirs ? env_dirs : "", SYSTEM_DIRECTORY);
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
    if (load_trusted(c, ca_file, message, cap) != 0) goto fail;
    f_mbedtls_ssl_conf_authmode(&c->config, MBEDTLS_SSL_VERIFY_REQUIRED);
    f_mbedtls_ssl_conf_ca_chain(&c->config, &c->trusted, NULL);
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
    if (host_is_ip) {
        snprintf(message, cap,
                 "TLS to %s: mbedTLS 2.28 cannot check an IP address in a certificate "
                 "(name the collector by host name, or use OpenSSL)", host);
        return NULL;
    }
    mbed_context *c = context;
    mbed_session *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(message, cap, "TLS session: out of memory");
        return NULL;
    }
    s->fd = fd;
    f_mbedtls_ssl_init(&s->ssl);
    int rc = f_mbedtls_ssl_setup(&s->ssl, &c->config);
    /* The name is both sent (SNI) and checked against the certificate. */
    if (rc == 0) rc = f_mbedtls_ssl_set_hostname(&s->ssl, host);
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

/* The certificate check's failure in OpenSSL's words first (what the transport's
 * callers and logs already know), then mbedTLS's own lines. */
static void verify_message(mbed_session *s, char *message, size_t cap, const char *what)
{
    uint32_t flags = f_mbedtls_ssl_get_verify_result(&s->ssl);
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

/* The CAIRN_TLS_* step for mbedTLS result `rc` (< 0), or FAILED with a message. */
static int next_step(mbed_session *s, int rc, const char *what, char *message, size_t cap)
{
    switch (rc) {
    case MBEDTLS_ERR_SSL_WANT_READ:
        return CAIRN_TLS_WANT_READ;
    case MBEDTLS_ERR_SSL_WANT_WRITE:
        return CAIRN_TLS_WANT_WRITE;
    case MBEDTLS_ERR_X509_CERT_VERIFY_FAILED:
        verify_message(s, message, cap, what);
        return CAIRN_TLS_FAILED;
    case MBEDTLS_ERR_NET_SEND_FAILED:
    case MBEDTLS_ERR_NET_RECV_FAILED:
        snprintf(message, cap, "%s: %s", what,
                 s->last_errno ? CAIRN_HTTP_ERRNO_TEXT(s->last_errno) : "the connection failed");
        return CAIRN_TLS_FAILED;
    default:
        mbed_message(message, cap, what, rc);
        return CAIRN_TLS_FAILED;
    }
}

static int mbed_handshake(void *session, char *message, size_t cap)
{
    mbed_session *s = session;
    int rc = f_mbedtls_ssl_handshake(&s->ssl);
    if (rc == 0) return 0;
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
};

#endif /* __has_include(<mbedtls/ssl.h>) */
