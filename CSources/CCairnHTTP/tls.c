/*
 * tls.c: which TLS library a connection uses, and the calls that pass it on.
 *
 * CAIRN_HTTP_TLS_AUTO (the default) uses mbedTLS (tls_mbedtls.c), by host name or by
 * address: it costs the host process a fraction of OpenSSL's memory. OpenSSL 3
 * (tls_openssl.c) serves everything when mbedTLS is not installed or cannot be set up.
 * CAIRN_HTTP_TLS_OPENSSL and CAIRN_HTTP_TLS_MBEDTLS use that library only (and fail
 * when it is missing). Each library is loaded on its first use, never before; each is
 * reached through its table of functions (http_internal.h).
 *
 * A context is made once per client under the client's lock. It holds each library's
 * own context, made on the first session that uses that library (under the context's
 * lock), so an automatic client that finds mbedTLS never maps OpenSSL.
 */
#include "http_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cairn_http.h"

/* The libraries by index: their tables and, in a context, their contexts. */
enum { OPENSSL, MBEDTLS, LIBRARIES };
static const cairn_http__tls_library *const libraries[LIBRARIES] = {
    [OPENSSL] = &cairn_http__openssl,
    [MBEDTLS] = &cairn_http__mbedtls,
};

typedef struct tls_context {
    int library; /* CAIRN_HTTP_TLS_* as asked */
    char *ca_file, *cert_file, *key_file;
    cairn_http__tls_files files; /* pointing at the copies above */
    pthread_mutex_t lock;
    void *contexts[LIBRARIES]; /* under `lock`: each made when first needed */
    int mbed_failed;           /* under `lock`: automatic, mbedTLS could not be set up */
} tls_context;

typedef struct tls_session {
    const cairn_http__tls_library *library;
    void *impl;
} tls_session;

int cairn_http__tls_unbuilt_available(const char *library, const char *package, char *message,
                                      size_t cap)
{
    snprintf(message, cap,
             "TLS is unavailable: Cairn was built without %s's headers (install %s and rebuild)",
             library, package);
    return 0;
}

int cairn_http__tls_unbuilt_loaded(void) { return 0; }

void cairn_http__tls_unbuilt_context_free(void *context) { (void)context; }

int cairn_http_tls_loaded(void)
{
    return (cairn_http__openssl.loaded() ? CAIRN_HTTP_TLS_OPENSSL : 0)
           | (cairn_http__mbedtls.loaded() ? CAIRN_HTTP_TLS_MBEDTLS : 0);
}

void *cairn_http__tls_context_new(const cairn_http__tls_files *files, int library, char *message, size_t cap)
{
    if (library != CAIRN_HTTP_TLS_AUTO && library != CAIRN_HTTP_TLS_OPENSSL
        && library != CAIRN_HTTP_TLS_MBEDTLS) {
        snprintf(message, cap, "TLS library %d is not one of CAIRN_HTTP_TLS_*", library);
        return NULL;
    }
    tls_context *c = calloc(1, sizeof *c);
    if (!c || (files->ca_file && !(c->ca_file = strdup(files->ca_file)))
        || (files->cert_file && !(c->cert_file = strdup(files->cert_file)))
        || (files->key_file && !(c->key_file = strdup(files->key_file)))) {
        if (c) {
            free(c->ca_file);
            free(c->cert_file);
        }
        free(c);
        snprintf(message, cap, "TLS context: out of memory");
        return NULL;
    }
    c->library = library;
    c->files = (cairn_http__tls_files){c->ca_file, c->cert_file, c->key_file ? c->key_file : c->cert_file};
    pthread_mutex_init(&c->lock, NULL);
    return c;
}

void cairn_http__tls_context_free(void *context)
{
    tls_context *c = context;
    if (!c) return;
    for (int i = 0; i < LIBRARIES; i++)
        if (c->contexts[i]) libraries[i]->context_free(c->contexts[i]);
    pthread_mutex_destroy(&c->lock);
    free(c->ca_file);
    free(c->cert_file);
    free(c->key_file);
    free(c);
}

/* Which library serves `c`: what was asked, or for automatic, mbedTLS while it can be
 * loaded and set up. */
static int choose(tls_context *c)
{
    if (c->library == CAIRN_HTTP_TLS_OPENSSL) return OPENSSL;
    if (c->library == CAIRN_HTTP_TLS_MBEDTLS) return MBEDTLS;
    char why[256];
    return !c->mbed_failed && cairn_http__mbedtls.available(why, sizeof why) ? MBEDTLS : OPENSSL;
}

/* The library that serves `c`, its context made (the library loaded, the trust store
 * and client certificate read) if it was not yet; NULL for the context when it cannot
 * be made (`message` says why: no library can be loaded, a CA file cannot be read). */
static void *library_context(tls_context *c, int *chosen_out, char *message, size_t cap)
{
    /* A CA file that cannot be read fails here, at each try, with its name. */
    pthread_mutex_lock(&c->lock);
    int chosen = choose(c);
    if (!c->contexts[chosen])
        c->contexts[chosen] = libraries[chosen]->context_new(&c->files, message, cap);
    if (!c->contexts[chosen] && chosen == MBEDTLS && c->library == CAIRN_HTTP_TLS_AUTO) {
        /* Automatic: what mbedTLS could not set up (a trust store it cannot read),
         * OpenSSL may; from now on it serves this client. */
        c->mbed_failed = 1;
        chosen = OPENSSL;
        if (!c->contexts[chosen])
            c->contexts[chosen] = libraries[chosen]->context_new(&c->files, message, cap);
    }
    void *made = c->contexts[chosen];
    pthread_mutex_unlock(&c->lock);
    char why[256];
    if (!made && c->library == CAIRN_HTTP_TLS_AUTO && chosen == OPENSSL && cap > 0
        && !cairn_http__mbedtls.available(why, sizeof why)) {
        /* Neither library: both reasons, so the operator knows either would do. */
        char openssl[256];
        snprintf(openssl, sizeof openssl, "%s", message);
        snprintf(message, cap, "no TLS library can be used: %s; %s", why, openssl);
    }
    *chosen_out = chosen;
    return made;
}

int cairn_http__tls_context_ready(void *context, char *message, size_t cap)
{
    int chosen;
    return library_context(context, &chosen, message, cap) != NULL;
}

void *cairn_http__tls_session_new(void *context, int fd, const char *host, int host_is_ip,
                                  char *message, size_t cap)
{
    tls_context *c = context;
    tls_session *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(message, cap, "TLS session: out of memory");
        return NULL;
    }
    int chosen;
    void *made = library_context(c, &chosen, message, cap);
    s->library = libraries[chosen];
    if (made) s->impl = s->library->session_new(made, fd, host, host_is_ip, message, cap);
    if (!s->impl) {
        free(s);
        return NULL;
    }
    return s;
}

void cairn_http__tls_session_free(void *session)
{
    tls_session *s = session;
    if (!s) return;
    s->library->session_free(s->impl);
    free(s);
}

int cairn_http__tls_handshake(void *session, char *message, size_t cap)
{
    tls_session *s = session;
    return s->library->handshake(s->impl, message, cap);
}

/* Whether a connection was set up since the libraries' pages were last released, when
 * that was (monotonic milliseconds, 0 for never), and when the release that follows a
 * setup's is due (0 for none). */
static atomic_int setup_since_release;
static _Atomic int64_t last_release_ms;
static _Atomic int64_t follow_up_ms;

/* The release that follows a setup's, this long after it: the code the connection's
 * sends use has come back by then, and is given finer mappings (pages.c). */
#define FOLLOW_UP_MS 2000

void cairn_http__tls_connection_used(void)
{
    atomic_store(&setup_since_release, 1);
}

void cairn_http__tls_release_if_due(int64_t now_ms)
{
    int64_t follow_up = atomic_load(&follow_up_ms);
    if (!atomic_load(&setup_since_release) && !(follow_up != 0 && now_ms >= follow_up)) return;
    int64_t last = atomic_load(&last_release_ms);
    if (last != 0 && now_ms - last < 1000) return;
    /* One caller releases; a connection set up meanwhile sets the flag again. */
    if (!atomic_compare_exchange_strong(&last_release_ms, &last, now_ms)) return;
    int setup = atomic_exchange(&setup_since_release, 0);
    atomic_store(&follow_up_ms, setup ? now_ms + FOLLOW_UP_MS : 0);
    cairn_http_tls_release_pages();
}

size_t cairn_http_tls_release_pages(void)
{
    size_t released = 0;
    for (int i = 0; i < LIBRARIES; i++)
        if (libraries[i]->loaded() && libraries[i]->release_pages) released += libraries[i]->release_pages();
    return released;
}

ssize_t cairn_http__tls_read(void *session, void *buffer, size_t len, char *message, size_t cap)
{
    tls_session *s = session;
    return s->library->read(s->impl, buffer, len, message, cap);
}

ssize_t cairn_http__tls_write(void *session, const void *buffer, size_t len, char *message,
                              size_t cap)
{
    tls_session *s = session;
    return s->library->write(s->impl, buffer, len, message, cap);
}
