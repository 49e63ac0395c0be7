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

/* ---- TLS (tls.c): mbedTLS or OpenSSL 3, loaded with dlopen on first use. ---- */

/* What a non-blocking TLS call needs next. */
enum {
    CAIRN_TLS_WANT_READ = -1,
    CAIRN_TLS_WANT_WRITE = -2,
    CAIRN_TLS_FAILED = -3,
};

/* A TLS context for `library` (CAIRN_HTTP_TLS_*): verification on, TLS 1.2 minimum,
 * the given CA file or the system store; or NULL with `message` set. Loads the
 * library it settles on first if needed. */
void *cairn_http__tls_context_new(const char *ca_file, int library, char *message, size_t cap);
void cairn_http__tls_context_free(void *context);

/* A session over `fd` for `host` (SNI and name check, or IP check for a literal), or
 * NULL with `message` set. */
void *cairn_http__tls_session_new(void *context, int fd, const char *host, int host_is_ip,
                                  char *message, size_t cap);
void cairn_http__tls_session_free(void *session);

/* The handshake step: 0 when done, or a CAIRN_TLS_* value (FAILED sets `message`,
 * with the certificate check's text when that is what failed). */
int cairn_http__tls_handshake(void *session, char *message, size_t cap);

/* Reads or writes: bytes done (> 0), 0 for the peer's close (read only), or a
 * CAIRN_TLS_* value (FAILED sets `message`). */
ssize_t cairn_http__tls_read(void *session, void *buffer, size_t len, char *message, size_t cap);
ssize_t cairn_http__tls_write(void *session, const void *buffer, size_t len, char *message,
                              size_t cap);

/* The two libraries behind those calls, with the same contracts (tls_openssl.c,
 * tls_mbedtls.c). `*_available` loads the library if it was not yet tried and says
 * whether it is usable (with why not in `message`); `*_loaded` only says whether it
 * was loaded. */
int cairn_http__ossl_loaded(void);
void *cairn_http__ossl_context_new(const char *ca_file, char *message, size_t cap);
void cairn_http__ossl_context_free(void *context);
void *cairn_http__ossl_session_new(void *context, int fd, const char *host, int host_is_ip,
                                   char *message, size_t cap);
void cairn_http__ossl_session_free(void *session);
int cairn_http__ossl_handshake(void *session, char *message, size_t cap);
ssize_t cairn_http__ossl_read(void *session, void *buffer, size_t len, char *message, size_t cap);
ssize_t cairn_http__ossl_write(void *session, const void *buffer, size_t len, char *message,
                               size_t cap);

int cairn_http__mbed_available(char *message, size_t cap);
int cairn_http__mbed_loaded(void);
void *cairn_http__mbed_context_new(const char *ca_file, char *message, size_t cap);
void cairn_http__mbed_context_free(void *context);
void *cairn_http__mbed_session_new(void *context, int fd, const char *host, char *message,
                                   size_t cap);
void cairn_http__mbed_session_free(void *session);
int cairn_http__mbed_handshake(void *session, char *message, size_t cap);
ssize_t cairn_http__mbed_read(void *session, void *buffer, size_t len, char *message, size_t cap);
ssize_t cairn_http__mbed_write(void *session, const void *buffer, size_t len, char *message,
                               size_t cap);

#endif /* CAIRN_HTTP_INTERNAL_H */
