/*
 * tls_openssl.c: TLS through OpenSSL 3, loaded with dlopen("libssl.so.3") when tls.c
 * first asks for it (an https request it gives to OpenSSL), so a process that only
 * speaks http maps no TLS library.
 *
 * OpenSSL's headers give the types and macros; every function is resolved with
 * dlsym into a pointer of the same type (a header/library mismatch is a compile-time
 * type error, not a crash). The load is done once (pthread_once) for the whole
 * process and never undone. OpenSSL 3 is thread-safe without setup.
 *
 * The socket is reached through a BIO of our own rather than OpenSSL's socket BIO:
 * OpenSSL's writes would use write(2), which raises SIGPIPE in the host when the peer
 * has gone; ours uses the client's send (MSG_NOSIGNAL).
 *
 * Verification is always on: SSL_VERIFY_PEER against the system store (or the given
 * CA file), the host name (or IP literal) checked against the certificate, TLS 1.2
 * at least. The store is read as SSL_CTX_set_default_verify_paths reads it (the file
 * SSL_CERT_FILE names, else OpenSSL's default bundle; then the directories of
 * SSL_CERT_DIR, else the default one, by hashed name), except that the file is not
 * parsed whole at the first handshake: a lookup of our own (`lookup_by_subject`)
 * reads it for the certificates whose subject a chain asks for, as OpenSSL's
 * directory lookup does, and keeps those only. The system bundle's 140 certificates,
 * parsed, were about 0.8 MiB of the process's memory. Nor is each parsed to be
 * compared: a subject is found in the certificate's encoding (der.c), and only the
 * matching certificate is parsed (parsing them all took about 40 ms of the first
 * handshake).
 */
#include "http_internal.h"

/* Without the headers (the -dev package was missing at build time) this library
 * builds as one that says so at its first use: the package still builds, and the
 * other library, or a clear error, serves https. */
#if !__has_include(<openssl/ssl.h>)
CAIRN_HTTP_UNBUILT_TLS_LIBRARY(cairn_http__openssl, "OpenSSL", "libssl-dev");
#else

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include "cairn_http.h"

#define LIBSSL "libssl.so.3"

#define TLS_FUNCTIONS(X)                  \
    X(OPENSSL_init_ssl)                   \
    X(TLS_client_method)                  \
    X(SSL_CTX_new)                        \
    X(SSL_CTX_free)                       \
    X(SSL_CTX_set_verify)                 \
    X(SSL_CTX_set_options)                \
    X(SSL_CTX_ctrl)                       \
    X(SSL_CTX_get_cert_store)             \
    X(X509_STORE_add_lookup)              \
    X(X509_STORE_add_cert)                \
    X(X509_LOOKUP_hash_dir)               \
    X(X509_LOOKUP_ctrl)                   \
    X(X509_LOOKUP_meth_new)               \
    X(X509_LOOKUP_meth_set_get_by_subject) \
    X(X509_LOOKUP_meth_set_free)          \
    X(X509_LOOKUP_set_method_data)        \
    X(X509_LOOKUP_get_method_data)        \
    X(X509_LOOKUP_get_store)              \
    X(X509_OBJECT_set1_X509)              \
    X(X509_get_default_cert_file)         \
    X(X509_get_subject_name)              \
    X(X509_NAME_cmp)                      \
    X(X509_free)                          \
    X(PEM_read_X509)                      \
    X(PEM_read)                           \
    X(d2i_X509)                           \
    X(d2i_X509_NAME)                      \
    X(X509_NAME_free)                     \
    X(X509_NAME_get0_der)                 \
    X(CRYPTO_free)                        \
    X(SSL_CTX_use_certificate_chain_file) \
    X(SSL_CTX_use_PrivateKey_file)        \
    X(SSL_CTX_check_private_key)          \
    X(SSL_new)                            \
    X(SSL_free)                           \
    X(SSL_set_bio)                        \
    X(SSL_ctrl)                           \
    X(SSL_set1_host)                      \
    X(SSL_get0_param)                     \
    X(SSL_connect)                        \
    X(SSL_read)                           \
    X(SSL_write)                          \
    X(SSL_get_error)                      \
    X(SSL_get_verify_result)              \
    X(X509_VERIFY_PARAM_set1_ip_asc)      \
    X(X509_verify_cert_error_string)      \
    X(ERR_get_error)                      \
    X(ERR_error_string_n)                 \
    X(ERR_clear_error)                    \
    X(BIO_get_new_index)                  \
    X(BIO_meth_new)                       \
    X(BIO_meth_set_write)                 \
    X(BIO_meth_set_read)                  \
    X(BIO_meth_set_ctrl)                  \
    X(BIO_new)                            \
    X(BIO_set_data)                       \
    X(BIO_get_data)                       \
    X(BIO_set_init)                       \
    X(BIO_set_flags)                      \
    X(BIO_clear_flags)

#define DECLARE(name) static __typeof__(name) *f_##name;
TLS_FUNCTIONS(DECLARE)
#undef DECLARE

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static char load_error[256];
static atomic_int loaded;
static BIO_METHOD *socket_method;
/* A function in each of libssl and libcrypto that load() brought into the process
 * (not those the service had loaded), for ossl_release_pages. */
static const void *own_objects[2];
static size_t own_count;
static X509_LOOKUP_METHOD *subject_method;

static void openssl_message(char *message, size_t cap, const char *what);

static int ossl_loaded(void)
{
    return atomic_load(&loaded);
}

/* Our BIO: the socket's fd in the BIO's data, I/O with recv/send. */
static int bio_fd(BIO *bio)
{
    return (int)(intptr_t)f_BIO_get_data(bio);
}

static int bio_write(BIO *bio, const char *data, int len)
{
    f_BIO_clear_flags(bio, BIO_FLAGS_RWS | BIO_FLAGS_SHOULD_RETRY);
    ssize_t n = cairn_http__send(bio_fd(bio), data, (size_t)len);
    if (n >= 0) return (int)n;
    if (errno == EAGAIN || errno == EWOULDBLOCK) f_BIO_set_flags(bio, BIO_FLAGS_WRITE | BIO_FLAGS_SHOULD_RETRY);
    return -1;
}

static int bio_read(BIO *bio, char *data, int len)
{
    f_BIO_clear_flags(bio, BIO_FLAGS_RWS | BIO_FLAGS_SHOULD_RETRY);
    ssize_t n = cairn_http__recv(bio_fd(bio), data, (size_t)len);
    if (n >= 0) return (int)n;
    if (errno == EAGAIN || errno == EWOULDBLOCK) f_BIO_set_flags(bio, BIO_FLAGS_READ | BIO_FLAGS_SHOULD_RETRY);
    return -1;
}

static long bio_ctrl(BIO *bio, int command, long number, void *pointer)
{
    (void)bio;
    (void)number;
    (void)pointer;
    return command == BIO_CTRL_FLUSH ? 1 : 0;
}

/* A trust file read by subject: the certificates found in it so far (each also added
 * to the store, which asks the lookups only for subjects it does not hold), kept
 * until the lookup is freed with its store. */
typedef struct by_subject {
    pthread_mutex_t lock;
    char file[4096];
    X509 *found[64];
    int count;
} by_subject;

/* Whether the certificate `der` (`size` bytes) has `name` as its subject, compared as
 * OpenSSL compares names (X509_NAME_cmp: canonical forms) but without parsing the
 * certificate: the subject is found in the encoding (der.c), equal bytes are equal
 * names, and otherwise only the subject is parsed. -1 when the certificate's
 * structure does not lead to its subject. */
static int subject_is(const unsigned char *der, long size, const X509_NAME *name, const unsigned char *wanted,
                      size_t length)
{
    size_t offset, subject_length;
    if (size <= 0 || !cairn_http__der_subject(der, (size_t)size, &offset, &subject_length)) return -1;
    if (wanted && subject_length == length && memcmp(der + offset, wanted, length) == 0) return 1;
    const unsigned char *p = der + offset;
    X509_NAME *subject = f_d2i_X509_NAME(NULL, &p, (long)subject_length);
    int same = subject && f_X509_NAME_cmp(subject, name) == 0;
    f_X509_NAME_free(subject);
    return same;
}

/* The lookup's get_by_subject: adds to the store every certificate of the file whose
 * subject is `name`, and gives the first in `ret` (borrowed, as OpenSSL's own
 * lookups give theirs: `found` holds the reference). Each PEM block is decoded and
 * its subject compared (subject_is) before the certificate is parsed: parsing the
 * system bundle's 140 certificates (their public keys through OpenSSL 3's decoders)
 * took about 40 ms of a handshake, for the one or two that match. */
static int lookup_by_subject(X509_LOOKUP *lookup, X509_LOOKUP_TYPE type, const X509_NAME *name, X509_OBJECT *ret)
{
    by_subject *b = f_X509_LOOKUP_get_method_data(lookup);
    X509_STORE *store = f_X509_LOOKUP_get_store(lookup);
    if (type != X509_LU_X509 || !b || !store) return 0;
    FILE *file = fopen(b->file, "re");
    if (!file) return 0;
    const unsigned char *wanted = NULL;
    size_t length = 0;
    if (f_X509_NAME_get0_der(name, &wanted, &length) != 1) wanted = NULL;
    int given = 0;
    pthread_mutex_lock(&b->lock);
    char *label = NULL, *header = NULL;
    unsigned char *data = NULL;
    long size = 0;
    while (b->count < (int)(sizeof b->found / sizeof *b->found)
           && f_PEM_read(file, &label, &header, &data, &size) == 1) {
        /* The blocks PEM_read_X509 reads ("X509 CERTIFICATE" is the old label). */
        if (strcmp(label, PEM_STRING_X509) == 0 || strcmp(label, PEM_STRING_X509_OLD) == 0) {
            int same = subject_is(data, size, name, wanted, length);
            const unsigned char *p = data;
            X509 *certificate = same != 0 ? f_d2i_X509(NULL, &p, size) : NULL;
            if (certificate && same < 0 && f_X509_NAME_cmp(f_X509_get_subject_name(certificate), name) != 0) {
                f_X509_free(certificate); /* its subject had to be read from the parsed certificate */
                certificate = NULL;
            }
            if (certificate) {
                b->found[b->count++] = certificate;
                (void)f_X509_STORE_add_cert(store, certificate);
                if (!given && f_X509_OBJECT_set1_X509(ret, certificate) == 1) {
                    f_X509_free(certificate); /* the reference set1 took: `found` keeps one */
                    given = 1;
                }
            }
        }
        f_CRYPTO_free(label, OPENSSL_FILE, OPENSSL_LINE);
        f_CRYPTO_free(header, OPENSSL_FILE, OPENSSL_LINE);
        f_CRYPTO_free(data, OPENSSL_FILE, OPENSSL_LINE);
        label = header = NULL;
        data = NULL;
    }
    pthread_mutex_unlock(&b->lock);
    fclose(file);
    f_ERR_clear_error(); /* the end of the file reads as "no start line" */
    return given;
}

static void lookup_free(X509_LOOKUP *lookup)
{
    by_subject *b = f_X509_LOOKUP_get_method_data(lookup);
    if (!b) return;
    for (int i = 0; i < b->count; i++) f_X509_free(b->found[i]);
    pthread_mutex_destroy(&b->lock);
    free(b);
}

static X509_LOOKUP_METHOD *make_subject_method(void)
{
    X509_LOOKUP_METHOD *method = f_X509_LOOKUP_meth_new("cairn: a PEM file read by subject");
    if (!method || f_X509_LOOKUP_meth_set_get_by_subject(method, lookup_by_subject) != 1
        || f_X509_LOOKUP_meth_set_free(method, lookup_free) != 1)
        return NULL;
    return method;
}

/* Adds to `context`'s store the lookup of `file` by subject, then with `dirs` the
 * directory lookup of the SSL_CERT_DIR directories (else the default one), as
 * SSL_CTX_set_default_verify_paths adds them. 0, or -1 with `message`. */
static int add_trust(SSL_CTX *context, const char *file, int dirs, char *message, size_t cap)
{
    X509_STORE *store = f_SSL_CTX_get_cert_store(context);
    X509_LOOKUP *lookup = store ? f_X509_STORE_add_lookup(store, subject_method) : NULL;
    by_subject *b = lookup ? calloc(1, sizeof *b) : NULL;
    if (!b) {
        openssl_message(message, cap, "setting up the trust store");
        return -1;
    }
    pthread_mutex_init(&b->lock, NULL);
    snprintf(b->file, sizeof b->file, "%s", file);
    f_X509_LOOKUP_set_method_data(lookup, b);
    if (!dirs) return 0;
    lookup = f_X509_STORE_add_lookup(store, f_X509_LOOKUP_hash_dir());
    if (!lookup || f_X509_LOOKUP_ctrl(lookup, X509_L_ADD_DIR, NULL, X509_FILETYPE_DEFAULT, NULL) != 1) {
        openssl_message(message, cap, "setting up the trust store's directories");
        return -1;
    }
    return 0;
}

/* A CA file that is given must hold a certificate: else an error naming it. */
static int check_ca_file(const char *ca_file, char *message, size_t cap)
{
    FILE *file = fopen(ca_file, "re");
    if (!file) {
        snprintf(message, cap, "loading the CA file %s: %s", ca_file, CAIRN_HTTP_ERRNO_TEXT(errno));
        return -1;
    }
    X509 *certificate = f_PEM_read_X509(file, NULL, NULL, NULL);
    fclose(file);
    if (certificate) {
        f_X509_free(certificate);
        return 0;
    }
    char what[4200];
    snprintf(what, sizeof what, "loading the CA file %s: no certificate could be read", ca_file);
    openssl_message(message, cap, what);
    return -1;
}

static void load(void)
{
    static cairn_http__objects before; /* under load_once */
    cairn_http__objects_now(&before);
    void *library = dlopen(LIBSSL, RTLD_NOW | RTLD_LOCAL);
    if (!library) {
        const char *why = dlerror();
        snprintf(load_error, sizeof load_error,
                 "TLS is unavailable: %s could not be loaded (install OpenSSL 3's libssl3): %s",
                 LIBSSL, why ? why : "unknown reason");
        return;
    }
    /* dlsym on libssl's handle also finds libcrypto's functions (its dependency). */
#define RESOLVE(name)                                                                    \
    f_##name = (__typeof__(name) *)dlsym(library, #name);                               \
    if (!f_##name) {                                                                      \
        snprintf(load_error, sizeof load_error,                                           \
                 "TLS is unavailable: %s has no function %s", LIBSSL, #name);            \
        return;                                                                           \
    }
    TLS_FUNCTIONS(RESOLVE)
#undef RESOLVE
    const void *objects[] = {(const void *)f_SSL_CTX_new, (const void *)f_ERR_get_error};
    own_count = cairn_http__objects_added(&before, objects, 2, own_objects);
    if (f_OPENSSL_init_ssl(0, NULL) != 1) {
        snprintf(load_error, sizeof load_error, "TLS is unavailable: OPENSSL_init_ssl failed");
        return;
    }
    int index = f_BIO_get_new_index();
    socket_method = index > 0 ? f_BIO_meth_new(index | BIO_TYPE_SOURCE_SINK, "cairn socket") : NULL;
    if (!socket_method || f_BIO_meth_set_write(socket_method, bio_write) != 1
        || f_BIO_meth_set_read(socket_method, bio_read) != 1
        || f_BIO_meth_set_ctrl(socket_method, bio_ctrl) != 1) {
        snprintf(load_error, sizeof load_error, "TLS is unavailable: a BIO method could not be made");
        return;
    }
    subject_method = make_subject_method();
    if (!subject_method) {
        snprintf(load_error, sizeof load_error, "TLS is unavailable: an X509_LOOKUP method could not be made");
        return;
    }
    atomic_store(&loaded, 1);
}

/* "what: OpenSSL's first queued error" (the queue is then cleared). */
static void openssl_message(char *message, size_t cap, const char *what)
{
    unsigned long code = f_ERR_get_error();
    char text[256] = "no detail";
    if (code != 0) f_ERR_error_string_n(code, text, sizeof text);
    f_ERR_clear_error();
    snprintf(message, cap, "%s: %s", what, text);
}

static int ossl_available(char *message, size_t cap)
{
    pthread_once(&load_once, load);
    if (atomic_load(&loaded)) return 1;
    snprintf(message, cap, "%s", load_error);
    return 0;
}

static void *ossl_context_new(const cairn_http__tls_files *files, char *message, size_t cap)
{
    const char *ca_file = files->ca_file;
    if (!ossl_available(message, cap)) return NULL;
    f_ERR_clear_error();
    SSL_CTX *context = f_SSL_CTX_new(f_TLS_client_method());
    if (!context) {
        openssl_message(message, cap, "SSL_CTX_new");
        return NULL;
    }
    f_SSL_CTX_set_verify(context, SSL_VERIFY_PEER, NULL);
    /* A server that closes without close_notify ends the read like a plain close;
     * framing (Content-Length, chunked) still tells a cut-short response. */
    f_SSL_CTX_set_options(context, SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_COMPRESSION);
    if (f_SSL_CTX_ctrl(context, SSL_CTRL_SET_MIN_PROTO_VERSION, TLS1_2_VERSION, NULL) != 1) {
        openssl_message(message, cap, "setting TLS 1.2 as the minimum");
        f_SSL_CTX_free(context);
        return NULL;
    }
    const char *env_file = getenv("SSL_CERT_FILE");
    const char *file = ca_file ? ca_file : env_file && *env_file ? env_file : f_X509_get_default_cert_file();
    if ((ca_file && check_ca_file(ca_file, message, cap) != 0) || add_trust(context, file, !ca_file, message, cap) != 0) {
        f_SSL_CTX_free(context);
        return NULL;
    }
    if (files->cert_file) {
        /* The client's own certificate, for a collector that asks for one. */
        char what[512];
        const char *key = files->key_file ? files->key_file : files->cert_file;
        if (f_SSL_CTX_use_certificate_chain_file(context, files->cert_file) != 1) {
            snprintf(what, sizeof what, "loading the client certificate %s", files->cert_file);
        } else if (f_SSL_CTX_use_PrivateKey_file(context, key, SSL_FILETYPE_PEM) != 1) {
            snprintf(what, sizeof what, "loading the client key %s", key);
        } else if (f_SSL_CTX_check_private_key(context) != 1) {
            snprintf(what, sizeof what, "the client key %s does not match the certificate %s", key, files->cert_file);
        } else {
            what[0] = 0;
        }
        if (what[0]) {
            openssl_message(message, cap, what);
            f_SSL_CTX_free(context);
            return NULL;
        }
    }
    return context;
}

static void ossl_context_free(void *context)
{
    if (context) f_SSL_CTX_free(context);
}

static void *ossl_session_new(void *context, int fd, const char *host, int host_is_ip,
                              char *message, size_t cap)
{
    f_ERR_clear_error();
    SSL *ssl = f_SSL_new(context);
    if (!ssl) {
        openssl_message(message, cap, "SSL_new");
        return NULL;
    }
    BIO *bio = f_BIO_new(socket_method);
    if (!bio) {
        openssl_message(message, cap, "BIO_new");
        f_SSL_free(ssl);
        return NULL;
    }
    f_BIO_set_data(bio, (void *)(intptr_t)fd);
    f_BIO_set_init(bio, 1);
    f_SSL_set_bio(ssl, bio, bio);
    int ok;
    if (host_is_ip) {
        /* No SNI for an address (RFC 6066); the certificate must name the IP. */
        ok = f_X509_VERIFY_PARAM_set1_ip_asc(f_SSL_get0_param(ssl), host) == 1;
    } else {
        ok = f_SSL_ctrl(ssl, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name, (void *)host) == 1
             && f_SSL_set1_host(ssl, host) == 1;
    }
    if (!ok) {
        openssl_message(message, cap, "setting the name to verify");
        f_SSL_free(ssl);
        return NULL;
    }
    return ssl;
}

static void ossl_session_free(void *session)
{
    if (session) f_SSL_free(session);
}

/* The next step after `result` of an SSL call, or FAILED with a message. */
static int next_step(SSL *ssl, int result, const char *what, char *message, size_t cap)
{
    int saved_errno = errno;
    switch (f_SSL_get_error(ssl, result)) {
    case SSL_ERROR_WANT_READ:
        return CAIRN_TLS_WANT_READ;
    case SSL_ERROR_WANT_WRITE:
        return CAIRN_TLS_WANT_WRITE;
    case SSL_ERROR_ZERO_RETURN:
        return 0;
    case SSL_ERROR_SYSCALL:
        if (f_ERR_get_error() == 0) {
            f_ERR_clear_error();
            snprintf(message, cap, "%s: %s", what,
                     saved_errno ? CAIRN_HTTP_ERRNO_TEXT(saved_errno) : "the connection was closed");
            return CAIRN_TLS_FAILED;
        }
        openssl_message(message, cap, what);
        return CAIRN_TLS_FAILED;
    default: {
        long verify = f_SSL_get_verify_result(ssl);
        if (verify != X509_V_OK) {
            f_ERR_clear_error();
            snprintf(message, cap, "%s: certificate verify failed: %s", what,
                     f_X509_verify_cert_error_string(verify));
            return CAIRN_TLS_FAILED;
        }
        /* SSL_ERROR_SSL: the TLS layer itself (an alert the peer sent, a record it
         * could not accept), not the socket. */
        openssl_message(message, cap, what);
        return CAIRN_TLS_REFUSED;
    }
    }
}

static int ossl_handshake(void *session, char *message, size_t cap)
{
    f_ERR_clear_error();
    errno = 0;
    int result = f_SSL_connect(session);
    if (result == 1) return 0;
    int step = next_step(session, result, "TLS handshake", message, cap);
    if (step == 0) {
        snprintf(message, cap, "TLS handshake: the server closed the connection");
        return CAIRN_TLS_FAILED;
    }
    return step;
}

static ssize_t ossl_read(void *session, void *buffer, size_t len, char *message, size_t cap)
{
    f_ERR_clear_error();
    errno = 0;
    int want = len > INT32_MAX ? INT32_MAX : (int)len;
    int result = f_SSL_read(session, buffer, want);
    if (result > 0) return result;
    return next_step(session, result, "TLS read", message, cap);
}

static ssize_t ossl_write(void *session, const void *buffer, size_t len, char *message,
                          size_t cap)
{
    f_ERR_clear_error();
    errno = 0;
    int want = len > INT32_MAX ? INT32_MAX : (int)len;
    int result = f_SSL_write(session, buffer, want);
    if (result > 0) return result;
    int step = next_step(session, result, "TLS write", message, cap);
    if (step == 0) {
        snprintf(message, cap, "TLS write: the server closed the connection");
        return CAIRN_TLS_FAILED;
    }
    return step;
}

/* Unmaps the code pages of what load() brought (pages.c), for tls.c. */
static size_t ossl_release_pages(void)
{
    return ossl_loaded() ? cairn_http__release_code_pages(own_objects, own_count) : 0;
}

/* This library, for tls.c. */
const cairn_http__tls_library cairn_http__openssl = {
    .available = ossl_available,
    .loaded = ossl_loaded,
    .context_new = ossl_context_new,
    .context_free = ossl_context_free,
    .session_new = ossl_session_new,
    .session_free = ossl_session_free,
    .handshake = ossl_handshake,
    .read = ossl_read,
    .write = ossl_write,
    .release_pages = ossl_release_pages,
};

#endif /* __has_include(<openssl/ssl.h>) */
