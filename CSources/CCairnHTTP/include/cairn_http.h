/*
 * cairn_http.h: Cairn's HTTP/1.1 client, the transport under the uploader.
 *
 * A small client for one job: send a request with a body to a collector and read its
 * answer, with a total deadline, over plain TCP or TLS, directly or through a proxy
 * named in the environment. It replaces libcurl, which cost every host process
 * memory and start-up time even when nothing was sent.
 *
 *   - A client (cairn_http_client_t) holds what connections share: options, the proxy
 *     settings read once at creation, and the TLS context, made on the first https
 *     request. The TLS library (mbedTLS 2.28's libmbedtls.so.14, or OpenSSL 3's
 *     libssl.so.3 when mbedTLS is missing; see CAIRN_HTTP_TLS_AUTO) is loaded with dlopen() at that moment and never before:
 *     a process that only speaks http maps no TLS library.
 *   - A connection (cairn_http_conn_t) holds one socket (kept alive between requests
 *     when the server allows it), a fixed header buffer and the response body up to
 *     the client's limit. It is used by one thread at a time.
 *   - The response parser (cairn_http_parser_t) is a pure state machine over bytes,
 *     with no I/O, so it can be fed in any split and fuzzed.
 *
 * This header includes only the C standard library. No call raises SIGPIPE (sockets
 * are written with MSG_NOSIGNAL, TLS included) or installs a signal handler.
 *
 * Conventions: functions returning `int` return CAIRN_HTTP_OK (0) or a negative
 * CAIRN_HTTP_E* code; each function documents its ownership rules and thread-safety.
 * None is async-signal-safe.
 */
#ifndef CAIRN_HTTP_H
#define CAIRN_HTTP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------ */
/* Errors: one code per broad reason, matching the Swift TransportFailure.Kind      */
/* ------------------------------------------------------------------------------ */

/** Success: a response came (whatever its status). */
#define CAIRN_HTTP_OK 0
/** No connection could be made: refused, unreachable, a name (host or proxy) that did
 *  not resolve, or a proxy that refused the tunnel. */
#define CAIRN_HTTP_ECONNECT (-1)
/** The connect timeout or the request's total deadline passed. */
#define CAIRN_HTTP_ETIMEOUT (-2)
/** The TLS library could not be loaded, the handshake failed, the peer's
 *  certificate did not verify, or the peer ended the session at the TLS level after
 *  the handshake (an alert, such as TLS 1.3's certificate_required). */
#define CAIRN_HTTP_ETLS (-3)
/** The connection broke, or the reply is not well-formed HTTP/1.x. */
#define CAIRN_HTTP_ENETWORK (-4)
/** The request cannot be sent as given (nothing was sent): a URL that is not an
 *  absolute http(s) URL, a method or header that is not valid HTTP, or a proxy
 *  setting that cannot be used. */
#define CAIRN_HTTP_EINVALID (-5)
/** Memory could not be allocated. */
#define CAIRN_HTTP_ENOMEM (-6)
/** What was asked needs a system library that cannot be loaded here (zlib, for
 *  cairn_http_gzip). */
#define CAIRN_HTTP_ENOTSUP (-7)

/** Most header bytes kept of one response (status line and headers, or trailers);
 *  more is a CAIRN_HTTP_ENETWORK error. */
#define CAIRN_HTTP_MAX_HEADER_BYTES (64u * 1024u)
/** Most body bytes read and discarded after the kept part; past this the connection
 *  is closed instead of drained, and the response is returned as it is. */
#define CAIRN_HTTP_MAX_DRAIN_BYTES (1u << 20)

/**
 * Describes a CAIRN_HTTP_* code.
 *
 * @param err  CAIRN_HTTP_OK or a negative CAIRN_HTTP_E* code.
 * @return     A static English phrase ("connect", "timeout", ...); "unknown error"
 *             for other values. Never NULL.
 *
 * Ownership: the string is static; do not free it.
 * Thread-safety: safe from any thread.
 * Async-signal-safe: yes.
 */
const char *cairn_http_strerror(int err);

/* ------------------------------------------------------------------------------ */
/* Response parser                                                                  */
/* ------------------------------------------------------------------------------ */

/** What cairn_http_parser_feed() and cairn_http_parser_finish() found. */
typedef enum cairn_http_parse_status {
    /** The response is not complete: feed more bytes. */
    CAIRN_HTTP_PARSE_MORE = 0,
    /** The final response is complete. */
    CAIRN_HTTP_PARSE_DONE = 1,
    /** The bytes are not a well-formed response; `error` in the parser says why. */
    CAIRN_HTTP_PARSE_ERROR = -1,
} cairn_http_parse_status_t;

/**
 * The state of one response being parsed. Its fields are read-only for callers;
 * the ones documented below are meaningful once the parse is DONE.
 *
 * Headers are kept in the caller's header buffer as consecutive pairs
 * "name\0value\0" (value without surrounding white space; obsolete line folds joined
 * with one space), in the order received. Interim 1xx responses are skipped; only the
 * final response's headers remain.
 */
typedef struct cairn_http_parser {
    /* Buffers given to cairn_http_parser_init (not owned). */
    char *headers;
    size_t header_cap;
    uint8_t *body;
    size_t body_cap;

    /** Final status code, 200..999 (set once the status line is read). */
    int status;
    /** HTTP minor version of the final response (0 or 1). */
    int minor_version;
    /** Bytes of `headers` holding name/value pairs. */
    size_t headers_len;
    /** Number of header pairs in `headers`. */
    size_t header_count;
    /** Body bytes kept in `body` (at most body_cap). */
    size_t body_len;
    /** 1 when the body was longer than body_cap: `body` holds its start. */
    int body_truncated;
    /** 1 when the connection may carry another request after this response. */
    int keep_alive;
    /** 1 when more than CAIRN_HTTP_MAX_DRAIN_BYTES were past the kept part: parsing
     *  stopped there (DONE), and the connection must be closed. */
    int abandoned;
    /** Static text saying why the parse failed; NULL unless it did. */
    const char *error;

    /* Internal state. */
    int state;
    int no_body;
    int started;
    int interim_count;
    size_t line_len;
    uint64_t remaining;
    uint64_t drained;
    size_t trailer_bytes;
    char small_line[256];
} cairn_http_parser_t;

/**
 * Prepares a parser for one response.
 *
 * @param p           The parser; any previous state is forgotten.
 * @param headers     Buffer for the final response's headers; header_cap bytes.
 *                    Status line and headers longer than this fail the parse.
 * @param header_cap  Its size in bytes (CAIRN_HTTP_MAX_HEADER_BYTES suits).
 * @param body        Buffer for the start of the body; may be NULL when body_cap is 0.
 * @param body_cap    How many body bytes are kept; the rest is counted and dropped.
 * @param no_body     Nonzero when the request was HEAD: the response has no body,
 *                    whatever its headers announce.
 *
 * Ownership: the buffers stay the caller's and must outlive the parse.
 * Thread-safety: a parser is used by one thread at a time.
 * Async-signal-safe: yes.
 */
void cairn_http_parser_init(cairn_http_parser_t *p, char *headers, size_t header_cap,
                            uint8_t *body, size_t body_cap, int no_body);

/**
 * Feeds bytes received from the server.
 *
 * @param p     A parser prepared by cairn_http_parser_init().
 * @param data  The bytes; may be NULL when len is 0.
 * @param len   Their count.
 * @param used  Set to how many bytes were consumed. Less than len only with DONE
 *              (the rest belongs after the response) or ERROR.
 * @return      CAIRN_HTTP_PARSE_MORE, CAIRN_HTTP_PARSE_DONE or CAIRN_HTTP_PARSE_ERROR.
 *              After DONE or ERROR further calls return the same result and consume
 *              nothing.
 *
 * Ownership: nothing is retained from `data`.
 * Thread-safety: a parser is used by one thread at a time.
 * Async-signal-safe: yes.
 */
cairn_http_parse_status_t cairn_http_parser_feed(cairn_http_parser_t *p, const uint8_t *data,
                                                 size_t len, size_t *used);

/**
 * Tells the parser that the server closed the connection.
 *
 * @param p  A parser prepared by cairn_http_parser_init().
 * @return   CAIRN_HTTP_PARSE_DONE when the response is complete (a body delimited by
 *           the close ends here, and keep_alive is 0), otherwise
 *           CAIRN_HTTP_PARSE_ERROR (the response was cut short).
 *
 * Ownership: none.
 * Thread-safety: a parser is used by one thread at a time.
 * Async-signal-safe: yes.
 */
cairn_http_parse_status_t cairn_http_parser_finish(cairn_http_parser_t *p);

/**
 * Whether the parser has seen any byte of the response.
 *
 * @param p  A parser prepared by cairn_http_parser_init().
 * @return   1 when at least one byte was fed, 0 otherwise.
 *
 * Ownership: none.
 * Thread-safety: a parser is used by one thread at a time.
 * Async-signal-safe: yes.
 */
int cairn_http_parser_started(const cairn_http_parser_t *p);

/* ------------------------------------------------------------------------------ */
/* Client and connections                                                           */
/* ------------------------------------------------------------------------------ */

/** Shared settings and TLS state of a family of connections. */
typedef struct cairn_http_client cairn_http_client_t;

/** One connection slot: at most one open socket, its buffers, the last response. */
typedef struct cairn_http_conn cairn_http_conn_t;

/** TLS library choice (cairn_http_client_options_t.tls_library), and the bits of
 *  cairn_http_tls_loaded(). Automatic (the default, 0): mbedTLS 2.28, for collectors
 *  named by host name or by IP address (a fraction of OpenSSL's memory in the host
 *  process), and OpenSSL 3 whenever libmbedtls.so.14 cannot be loaded or set up. */
#define CAIRN_HTTP_TLS_AUTO 0
/** OpenSSL 3 only (libssl.so.3): TLS 1.3, and the choice for FIPS-validated setups. */
#define CAIRN_HTTP_TLS_OPENSSL 1
/** mbedTLS 2.28 only (libmbedtls.so.14): TLS 1.2. */
#define CAIRN_HTTP_TLS_MBEDTLS 2

/** Options for cairn_http_client_new(). Zero-initialise, then set what you need. */
typedef struct cairn_http_client_options {
    /** How many body bytes of a response are kept (the rest is drained or the
     *  connection closed). */
    size_t max_body_bytes;
    /** A PEM file of trusted CA certificates used instead of the system store;
     *  NULL for the system store (which honours SSL_CERT_FILE and SSL_CERT_DIR). */
    const char *ca_file;
    /** Proxy variables as "NAME=value" strings, NULL-terminated like environ; NULL
     *  reads the process environment. Read once, by cairn_http_client_new(). As curl
     *  reads them: a host listed in no_proxy (NO_PROXY) goes direct (`*`, the host, a
     *  domain it is in, an IP address or a CIDR range holding it); else the variable
     *  of the URL's scheme (http_proxy; https_proxy, else HTTPS_PROXY); else
     *  all_proxy (ALL_PROXY). A lowercase name wins over its uppercase one, an empty
     *  value is unset, and HTTP_PROXY is never read (a CGI-style server sets it from a
     *  request's `Proxy:` header, "httpoxy"). Only http:// proxies are spoken: a
     *  variable holding another (socks5://, https://) fails the requests it applies
     *  to, with CAIRN_HTTP_EINVALID naming it, and is ignored for the others. */
    const char *const *environment;
    /** Which TLS library https requests use: CAIRN_HTTP_TLS_AUTO (0, the default),
     *  CAIRN_HTTP_TLS_OPENSSL or CAIRN_HTTP_TLS_MBEDTLS. Any other value makes every
     *  https request fail with CAIRN_HTTP_ETLS. Both verify the certificate chain and
     *  the host name and require TLS 1.2 at least. */
    int tls_library;
    /** The client's own certificate (PEM: the certificate, then any intermediates)
     *  for a collector that asks for one (mutual TLS); NULL for none. */
    const char *client_cert_file;
    /** Its private key (PEM, unencrypted); NULL when it is in `client_cert_file`. */
    const char *client_key_file;
} cairn_http_client_options_t;

/**
 * Creates a client.
 *
 * @param options  The options; NULL for all defaults (no body kept, system store,
 *                 the process environment).
 * @param out      Receives the client (NULL on CAIRN_HTTP_ENOMEM).
 * @return         CAIRN_HTTP_OK; CAIRN_HTTP_ENOMEM. A proxy variable Cairn cannot use
 *                 is no error here: the requests it applies to fail (see
 *                 cairn_http_client_proxy()).
 *
 * Ownership: the caller frees the client with cairn_http_client_free() after every
 *            connection made from it. Strings in `options` are copied.
 * Thread-safety: safe from any thread. The environment is read without a lock: do not
 *            call setenv(3) at the same time.
 * Async-signal-safe: no.
 */
int cairn_http_client_new(const cairn_http_client_options_t *options, cairn_http_client_t **out);

/**
 * Does now the one-time set-up that the first request to `url` would do: for an https
 * URL, loading the TLS library and making the client's TLS context (its trust store
 * and client certificate), which a first send otherwise spends some milliseconds on
 * before it connects. Nothing for an http URL; tried once per client (a context that
 * cannot be made is tried again by each send, which says why).
 *
 * @param client  The client.
 * @param url     The URL requests will go to (NUL-terminated); only its scheme is read.
 * @return  0 when there was nothing to do or it is done; CAIRN_HTTP_ETLS when the TLS
 *          context cannot be made (a send to the URL fails and says why).
 *
 * Ownership: none.
 * Thread-safety: safe from any thread (the context is made once, under a lock).
 * Async-signal-safe: no.
 */
int cairn_http_client_prepare(cairn_http_client_t *client, const char *url);

/**
 * Whether requests to `url` can use TLS, found out now: for an https URL, loads the TLS
 * library and makes the client's TLS context (as cairn_http_client_prepare() does), and
 * on failure writes why into `message` (no TLS library can be loaded, a CA or client
 * certificate file cannot be read). Nothing for an http URL. Unlike
 * cairn_http_client_prepare(), every call tries again while the context cannot be made.
 *
 * @param client   The client.
 * @param url      The URL requests will go to (NUL-terminated); only its scheme is read.
 * @param message  Receives the reason (NUL-terminated, empty when there is none); may be
 *                 NULL.
 * @param cap      Its size in bytes.
 * @return  0 when TLS is ready or not needed; CAIRN_HTTP_ETLS when it cannot be used.
 *
 * Ownership: `message` is the caller's.
 * Thread-safety: safe from any thread (the context is made once, under a lock).
 * Async-signal-safe: no.
 */
int cairn_http_client_check_tls(cairn_http_client_t *client, const char *url, char *message, size_t cap);

/**
 * Which proxy a request to `url` goes through, as the client read the environment.
 *
 * @param client   A client.
 * @param url      An absolute http(s) URL, `url_len` bytes.
 * @param out      Receives "direct", "http://host:port (<variable>)", or why not.
 * @param cap      Bytes at `out` (the text is cut to fit, NUL-terminated).
 * @return         CAIRN_HTTP_OK; CAIRN_HTTP_EINVALID when the URL is not usable or the
 *                 variable that applies holds a proxy Cairn cannot use (`out` names it).
 *
 * Thread-safety: safe from any thread.
 * Async-signal-safe: no.
 */
int cairn_http_client_proxy(const cairn_http_client_t *client, const char *url, size_t url_len, char *out,
                            size_t cap);

/**
 * Frees a client and its TLS context. A TLS library, once loaded, stays loaded.
 *
 * @param client  The client, or NULL.
 *
 * Ownership: every connection made from the client must be freed first.
 * Thread-safety: no other thread may use the client during or after the call.
 * Async-signal-safe: no.
 */
void cairn_http_client_free(cairn_http_client_t *client);

/**
 * Creates an unconnected connection slot for a client.
 *
 * @param client  The client; it must outlive the connection.
 * @return        The connection, or NULL when memory could not be allocated. Its
 *                buffers (CAIRN_HTTP_MAX_HEADER_BYTES of headers and the client's
 *                body limit) are allocated here, once.
 *
 * Ownership: the caller frees it with cairn_http_conn_free().
 * Thread-safety: safe from any thread.
 * Async-signal-safe: no.
 */
cairn_http_conn_t *cairn_http_conn_new(cairn_http_client_t *client);

/**
 * Closes the connection's socket, if open, and frees it.
 *
 * @param conn  The connection, or NULL.
 *
 * Ownership: pointers into its last response become invalid.
 * Thread-safety: the connection must not be in use by another thread.
 * Async-signal-safe: no.
 */
void cairn_http_conn_free(cairn_http_conn_t *conn);

/** One request header. Bytes with lengths: NUL bytes are seen (and refused). */
typedef struct cairn_http_header {
    const char *name;
    size_t name_len;
    const char *value;
    size_t value_len;
} cairn_http_header_t;

/** A request for cairn_http_conn_send(). */
typedef struct cairn_http_request {
    /** The method, an HTTP token such as "POST". */
    const char *method;
    size_t method_len;
    /** An absolute URL: http:// or https://, host name, IPv4 or [IPv6] literal,
     *  optional port, then path and query (no fragment is sent). */
    const char *url;
    size_t url_len;
    /** Headers sent in this order, as given. A Host header replaces the one the
     *  client would send; Content-Length and Transfer-Encoding are not sent from
     *  here (the client frames the body itself). */
    const cairn_http_header_t *headers;
    size_t header_count;
    /** The body, sent with Content-Length (also when empty, except for GET and
     *  HEAD). */
    const void *body;
    size_t body_len;
    /** When set, the `body_len` bytes of the body come from this instead of `body`,
     *  piece by piece, as they are written: called with the offset of the next byte
     *  to send (0 again when the request is sent once more on a fresh connection),
     *  it points `*piece` at the bytes from there (valid until its next call or the
     *  end of the send) and returns how many (at most `body_len - offset`), or 0 when
     *  it cannot give them: the send then fails with CAIRN_HTTP_EINVALID. Called on
     *  the sending thread, within cairn_http_conn_send(). */
    size_t (*body_piece)(void *context, size_t offset, const void **piece);
    /** Passed to `body_piece` as it is. */
    void *body_context;
    /** The most connecting may take (TCP, proxy tunnel, TLS handshake), in ms. */
    int64_t connect_timeout_ms;
    /** The most the whole exchange may take, connecting included, in ms. Name
     *  resolution (getaddrinfo) is not interruptible and is not bounded by it. */
    int64_t timeout_ms;
} cairn_http_request_t;

/** The final response of cairn_http_conn_send(). Pointers are into the connection
 *  and stay valid until its next send or its free. */
typedef struct cairn_http_response {
    /** Status code, 200..999 (interim 1xx responses are skipped). */
    int status;
    /** Header pairs "name\0value\0", in the order received. */
    const char *headers;
    /** Bytes of `headers`. */
    size_t headers_len;
    /** Number of pairs. */
    size_t header_count;
    /** The start of the body, up to the client's max_body_bytes. */
    const uint8_t *body;
    size_t body_len;
    /** 1 when the body was longer than what is kept. */
    int body_truncated;
} cairn_http_response_t;

/**
 * Sends one request and reads its final response.
 *
 * Reuses the connection's open socket when it leads to the same place (scheme, host,
 * port, proxy) and the previous response allowed it; otherwise connects anew. When a
 * reused socket fails before any byte of the response arrives (a keep-alive
 * connection the server closed meanwhile), the request is sent once more on a fresh
 * connection. Redirects are not followed.
 *
 * @param conn      The connection.
 * @param request   The request; checked before anything is sent.
 * @param response  Receives the response on CAIRN_HTTP_OK.
 * @return          CAIRN_HTTP_OK, or a negative CAIRN_HTTP_E* code; then
 *                  cairn_http_conn_error() says what happened.
 *
 * Ownership: nothing in `request` is retained after the call.
 * Thread-safety: one thread at a time per connection; different connections of one
 *            client may send at the same time.
 * Async-signal-safe: no.
 */
int cairn_http_conn_send(cairn_http_conn_t *conn, const cairn_http_request_t *request,
                         cairn_http_response_t *response);

/**
 * Checks a URL as cairn_http_conn_send() reads it, without sending anything: an
 * absolute http:// or https:// URL with a host (name, IPv4 or [IPv6] literal), an
 * optional port, no user credentials, and only visible ASCII characters.
 *
 * @param url      The URL (not necessarily NUL-terminated).
 * @param url_len  Its length in bytes.
 * @param why      Receives, when the URL cannot be sent, a static NUL-terminated
 *                 sentence saying why; untouched otherwise. May be NULL.
 * @return         0 when a request to this URL can be sent, CAIRN_HTTP_EINVALID when
 *                 it cannot.
 *
 * Thread-safety: any thread.
 * Async-signal-safe: no.
 */
int cairn_http_url_check(const char *url, size_t url_len, const char **why);

/**
 * The message of the connection's last failed send: what failed, with the system's,
 * OpenSSL's or the certificate check's own text.
 *
 * @param conn  The connection.
 * @return      A NUL-terminated message; empty after a successful send.
 *
 * Ownership: the string belongs to the connection, valid until its next send.
 * Thread-safety: as cairn_http_conn_send().
 * Async-signal-safe: no.
 */
const char *cairn_http_conn_error(const cairn_http_conn_t *conn);

/**
 * Which TLS libraries clients have loaded into this process (a test hook for "plain
 * http loads no TLS library" and for which library served https).
 *
 * @return  CAIRN_HTTP_TLS_OPENSSL once libssl.so.3 was loaded, ORed with
 *          CAIRN_HTTP_TLS_MBEDTLS once libmbedtls.so.14 was; 0 before either.
 *
 * Ownership: none.
 * Thread-safety: safe from any thread.
 * Async-signal-safe: yes.
 */
int cairn_http_tls_loaded(void);

/**
 * Unmaps from the process the resident pages of the TLS libraries' code and read-only
 * data that clients loaded (never a library the process had loaded before), keeping
 * any page that is no longer the file's own (one a debugger's breakpoint or a uprobe
 * has written).
 *
 * Clients do this by themselves after a send that started a TLS session, at most once
 * a second, and once more at a send 2 s or more after that: loading a library, making
 * its context and the handshakes run code that does not run again (OpenSSL's left
 * about 3 MiB of libcrypto resident), and what runs again comes back from the page
 * cache at its first use (a minor fault), as after the kernel reclaimed it. Nothing is
 * done while a debugger is attached, or when /proc/self/pagemap cannot be read.
 *
 * The kernel brings a page back with its neighbours (the 64 KiB window around it).
 * A window that came back since an earlier release is split first, into one mapping
 * per page (every other page marked MADV_NOHUGEPAGE), so that the code that keeps
 * running comes back page by page; each page split costs the kernel a mapping (about
 * 200 bytes, outside the process's RSS but charged to its memory cgroup; 256 windows at
 * most, about 4,300 mappings). A kernel without transparent huge pages refuses the
 * mark, and windows stay whole. This applies to every release function here.
 *
 * @return  The bytes unmapped (0 when there was nothing to do).
 *
 * Ownership: none.
 * Thread-safety: safe from any thread.
 * Async-signal-safe: no (reads /proc files, takes the dynamic linker's lock).
 */
size_t cairn_http_tls_release_pages(void);

/**
 * Unmaps from the process the resident pages of the code and read-only data of the
 * shared libraries that define `symbols` (looked up with dlsym(RTLD_DEFAULT)). Whether
 * the process loaded them before or not, but otherwise as cairn_http_tls_release_pages
 * does: a page that is no longer the file's own is kept, RELRO and writable segments
 * are never touched, nor a library with text relocations, nor the executable (a symbol
 * it defines is skipped), nor anything while a debugger is attached; each library is
 * held open (dlopen RTLD_NOLOAD) while its pages are released.
 *
 * Cairn calls it for its own dependencies (libzstd, liblmdb, liblzma) 2.5 s, 3.5 s and
 * 10 s after its start, then every 5 minutes: their set-up code runs once, and the
 * kernel keeps the 64 KiB around every page touched mapped. What runs again comes back
 * from the page cache at its first use (a minor fault per 64 KiB, or per page once its
 * window was split). A service that uses one of these libraries itself pays the same
 * minor faults after each release.
 *
 * @param symbols  Names of functions, one per library is enough; names not found are
 *                 skipped. NULL with `count` 0 does nothing.
 * @param count    How many names.
 * @return  The bytes unmapped (0 when there was nothing to do).
 *
 * Ownership: `symbols` is borrowed for the call.
 * Thread-safety: safe from any thread.
 * Async-signal-safe: no (reads /proc files, takes the dynamic linker's lock).
 */
size_t cairn_http_release_pages_of(const char *const *symbols, size_t count);

/**
 * Says which file holds Cairn's own code (this library's functions) and where it is
 * loaded: the executable ("/proc/self/exe") when Cairn is linked into it, as SwiftPM
 * links it by default, else the shared library's path.
 *
 * @param path  Receives the NUL-terminated path.
 * @param cap   Bytes `path` can hold.
 * @param bias  Receives the load bias: a symbol's ELF address plus it is its address in
 *              the process.
 * @return  1, or 0 (nothing written) when it cannot be told or `path` is too small.
 *
 * Ownership: none.
 * Thread-safety: safe from any thread.
 * Async-signal-safe: no (takes the dynamic linker's lock).
 */
int cairn_http_own_object(char *path, size_t cap, uintptr_t *bias);

/**
 * Unmaps from the process the resident pages of Cairn's own code, as
 * cairn_http_release_pages_of does for its libraries: `bounds` lists the address ranges
 * of Cairn's functions in the file cairn_http_own_object names (Cairn reads them from
 * that file's symbol table), and only the whole pages inside a range and inside a
 * read-only segment of that file are touched, with the same rules (a page that is no
 * longer the file's own is kept, never RELRO or a writable segment, nothing while a
 * debugger is attached). A range outside that file does nothing; a wrong range can
 * only make code that runs again come back at its first use (a minor fault per 64 KiB
 * or per page), never change what runs.
 *
 * Cairn's own start runs once (options, the store's checks, the previous runs'
 * reports): an idle service kept about 1.4 MiB of its code resident. Cairn calls this
 * with its background thread's library releases.
 *
 * @param bounds  `count` pairs: start, end (exclusive), process addresses.
 * @param count   How many ranges; NULL with 0 does nothing.
 * @return  The bytes unmapped (0 when there was nothing to do).
 *
 * Ownership: `bounds` is borrowed for the call.
 * Thread-safety: safe from any thread.
 * Async-signal-safe: no (reads /proc files, takes the dynamic linker's lock).
 */
size_t cairn_http_release_own_pages(const uintptr_t *bounds, size_t count);

/**
 * Compresses `data` as one gzip member (RFC 1952: deflate, with the gzip header and the
 * CRC-32 trailer), as `Content-Encoding: gzip` means, with the system's zlib
 * (libz.so.1, loaded at the first call: a process that never calls this never maps it).
 *
 * @param data     The bytes; may be NULL when `len` is 0.
 * @param len      Their count, at most 4 GiB - 1.
 * @param level    1 (fastest) ... 9 (smallest); anything else is 6, zlib's default.
 * @param out      Receives the compressed bytes, to be freed with free(); NULL on error.
 * @param out_len  Receives their count.
 * @return  CAIRN_HTTP_OK; CAIRN_HTTP_ENOTSUP when zlib cannot be loaded (or is not a
 *          zlib whose stream layout this is); CAIRN_HTTP_ENOMEM; CAIRN_HTTP_EINVALID
 *          for a NULL `out`, a NULL `data` with bytes, or more than 4 GiB - 1.
 *
 * Ownership: `data` is borrowed for the call; `*out` is the caller's.
 * Thread-safety: safe from any thread (zlib is loaded once).
 * Async-signal-safe: no (allocates, may load a library).
 */
int cairn_http_gzip(const void *data, size_t len, int level, unsigned char **out, size_t *out_len);

#ifdef __cplusplus
}
#endif

#endif /* CAIRN_HTTP_H */
