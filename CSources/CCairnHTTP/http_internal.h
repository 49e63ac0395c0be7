/*
 * http_internal.h: what the HTTP client's files share and nothing outside sees.
 */
#ifndef CAIRN_HTTP_INTERNAL_H
#define CAIRN_HTTP_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* RFC 9110 tchar: the bytes of methods and header names. */
int cairn_http__is_token(unsigned char c);

/* send(2) without SIGPIPE, and recv(2), both again after EINTR (client.c): bytes, or -1
 * with errno set (EAGAIN or EWOULDBLOCK when the non-blocking socket is not ready). */
ssize_t cairn_http__send(int fd, const void *data, size_t len);
ssize_t cairn_http__recv(int fd, void *data, size_t len);

/* Fuzzing only (CSources/Fuzz/fuzz_http_exchange.c), compiled in when
 * CAIRN_HTTP_FUZZ_HOOKS is defined and never in the library: when set, connecting to
 * host:port (the collector's, or the proxy's) calls it instead of resolving the name
 * and connecting. It returns a connected non-blocking socket, which the connection
 * then owns, or -1 with errno set (the connect fails as a refused one does). */
#ifdef CAIRN_HTTP_FUZZ_HOOKS
extern int (*cairn_http__connect_hook)(const char *host, int port);
#endif

/* The subject of the DER certificate `der` (`length` bytes), found without parsing the
 * certificate (der.c): 1 with its encoding (tag and length included) at `*offset`,
 * `*subject_length` bytes; 0 when the certificate's structure does not lead to it. */
int cairn_http__der_subject(const unsigned char *der, size_t length, size_t *offset, size_t *subject_length);

/* ---- TLS (tls.c): mbedTLS or OpenSSL 3, loaded with dlopen on first use. ---- */

/* What a non-blocking TLS call needs next. FAILED: the connection failed (the
 * network's doing, or the handshake's); REFUSED: after the handshake, the peer ended
 * the session at the TLS level (an alert, such as TLS 1.3's certificate_required from
 * a server that wants a client certificate), or sent what TLS cannot accept: a `tls`
 * failure, not a `network` one. Both set `message`. */
enum {
    CAIRN_TLS_WANT_READ = -1,
    CAIRN_TLS_WANT_WRITE = -2,
    CAIRN_TLS_FAILED = -3,
    CAIRN_TLS_REFUSED = -4,
};

/* A TLS context for `library` (CAIRN_HTTP_TLS_*): verification on, TLS 1.2 minimum,
 * the given CA file or the system store; or NULL with `message` set. Loads the
 * library it settles on first if needed. */
/* The files a TLS context reads: the trusted CAs (NULL: the system store) and the
 * client's own certificate chain and key (NULL: none; the key may be in the
 * certificate's file). */
typedef struct cairn_http__tls_files {
    const char *ca_file;
    const char *cert_file;
    const char *key_file;
} cairn_http__tls_files;

void *cairn_http__tls_context_new(const cairn_http__tls_files *files, int library, char *message, size_t cap);
void cairn_http__tls_context_free(void *context);

/* Makes the context's library context now (loads the library, reads the trust store and
 * client certificate), as the first session would: 1 when done, 0 with `message` saying
 * why it cannot be. */
int cairn_http__tls_context_ready(void *context, char *message, size_t cap);

/* A session over `fd` for `host` (SNI and name check, or IP check for a literal), or
 * NULL with `message` set. */
void *cairn_http__tls_session_new(void *context, int fd, const char *host, int host_is_ip,
                                  char *message, size_t cap);
void cairn_http__tls_session_free(void *session);

/* The handshake step: 0 when done, or a CAIRN_TLS_* value (FAILED sets `message`,
 * with the certificate check's text when that is what failed). */
int cairn_http__tls_handshake(void *session, char *message, size_t cap);

/* Reads or writes: bytes done (> 0), 0 for the peer's close (read only), or a
 * CAIRN_TLS_* value (FAILED and REFUSED set `message`). */
ssize_t cairn_http__tls_read(void *session, void *buffer, size_t len, char *message, size_t cap);
ssize_t cairn_http__tls_write(void *session, const void *buffer, size_t len, char *message,
                              size_t cap);

/* Pages of the TLS libraries' code that ran once (pages.c): a send that started a TLS
 * session (its handshake, whether it completed or not) calls `connection_used` once its
 * exchange is over; every https send then calls `release_if_due`, which unmaps the
 * libraries' pages (see cairn_http_tls_release_pages) when a session was started since
 * they were last unmapped and that was a second ago or more (or never), and once more
 * at the first https send 2 s or more after a release that followed a setup (the code
 * the sends run has come back by then, and is split). The first session's setup is
 * released at the end of its send; those of a burst that follows within the second, at
 * the first https send a second later or more; a collector that closes every
 * connection costs one release a second at most. */
void cairn_http__tls_connection_used(void);
void cairn_http__tls_release_if_due(int64_t now_ms);

/* A TLS library behind those calls (tls_openssl.c, tls_mbedtls.c): its functions, with
 * the same contracts. `available` loads the library if that was not yet tried and says
 * whether it is usable (why not in `message`); `loaded` only says whether it was
 * loaded. A library that cannot check an IP literal refuses one in `session_new`. */
typedef struct cairn_http__tls_library {
    int (*available)(char *message, size_t cap);
    int (*loaded)(void);
    void *(*context_new)(const cairn_http__tls_files *files, char *message, size_t cap);
    void (*context_free)(void *context);
    void *(*session_new)(void *context, int fd, const char *host, int host_is_ip, char *message,
                         size_t cap);
    void (*session_free)(void *session);
    int (*handshake)(void *session, char *message, size_t cap);
    ssize_t (*read)(void *session, void *buffer, size_t len, char *message, size_t cap);
    ssize_t (*write)(void *session, const void *buffer, size_t len, char *message, size_t cap);
    /* Unmaps the resident pages of the code and read-only data of the shared objects
     * this library's load brought into the process (not those it found loaded), as
     * cairn_http__release_code_pages does; returns the bytes unmapped. NULL for a
     * library built without its headers. */
    size_t (*release_pages)(void);
} cairn_http__tls_library;

extern const cairn_http__tls_library cairn_http__openssl;
extern const cairn_http__tls_library cairn_http__mbedtls;

/* ---- Pages of loaded libraries (pages.c). ---- */

/* The shared objects loaded in the process at one moment, by load address: taken by a
 * back end before its dlopen, to tell afterwards which objects that dlopen brought. */
typedef struct cairn_http__objects {
    size_t count;
    int overflow; /* more objects than `base` holds: none counts as added */
    uintptr_t base[512];
} cairn_http__objects;

void cairn_http__objects_now(cairn_http__objects *objects);

/* Of `addresses` (functions, `count` of them), one per shared object that was not
 * loaded at `before`, into `added` (room for `count`); returns how many. */
size_t cairn_http__objects_added(const cairn_http__objects *before, const void *const *addresses, size_t count,
                                 const void **added);

/* Unmaps from the process the resident pages of the read-only segments (code, tables)
 * of the shared objects that contain `addresses` (`count` of them), which are still the
 * files' own pages (/proc/self/pagemap): they come back from the page cache when used
 * again. Nothing while a debugger is attached, for an object with text relocations, or
 * without /proc/self/pagemap. Returns the bytes unmapped. Not for a hot path: it reads
 * /proc files and calls madvise. */
size_t cairn_http__release_code_pages(const void *const *addresses, size_t count);

/* strerror, thread-safe (strerror_r into `buffer`; client.c). */
const char *cairn_http__strerror(int error, char *buffer, size_t cap);
/* The text of errno value `e`, in a buffer that lives as long as the enclosing block. */
#define CAIRN_HTTP_ERRNO_TEXT(e) cairn_http__strerror((e), (char[128]){0}, 128)

/* A library whose headers were missing when Cairn was built: every call says so (tls.c
 * defines its functions; a back end that cannot build points its table at them). */
int cairn_http__tls_unbuilt_available(const char *library, const char *package, char *message,
                                      size_t cap);
int cairn_http__tls_unbuilt_loaded(void);
void cairn_http__tls_unbuilt_context_free(void *context);

/* Defines `name`, the table of a library built without its headers. */
#define CAIRN_HTTP_UNBUILT_TLS_LIBRARY(name, library, package)                              \
    static int name##_unbuilt(char *message, size_t cap)                                  \
    {                                                                                     \
        return cairn_http__tls_unbuilt_available(library, package, message, cap);         \
    }                                                                                     \
    static void *name##_unbuilt_context(const cairn_http__tls_files *files, char *message, \
                                        size_t cap)                                       \
    {                                                                                     \
        (void)files;                                                                      \
        name##_unbuilt(message, cap);                                                     \
        return NULL;                                                                      \
    }                                                                                     \
    const cairn_http__tls_library name = {                                                \
        .available = name##_unbuilt,                                                      \
        .loaded = cairn_http__tls_unbuilt_loaded,                                         \
        .context_new = name##_unbuilt_context,                                            \
        .context_free = cairn_http__tls_unbuilt_context_free,                             \
    }

#endif /* CAIRN_HTTP_INTERNAL_H */
