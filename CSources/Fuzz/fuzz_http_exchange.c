/*
 * fuzz_http_exchange.c: libFuzzer target for the HTTP client's exchange (client.c):
 * cairn_http_conn_send() writing a request of up to 4 MiB and reading the reply of a
 * server that the input scripts, over a socket pair, with a deadline of 10 to 73 ms.
 *
 * The client's connect is replaced by the fuzzing hook of http_internal.h (built with
 * -DCAIRN_HTTP_FUZZ_HOOKS): it hands over one end of a socket pair, once per input; a
 * second connect is refused. A thread plays the server on the other end: it reads the
 * request (checking it as it comes) and writes the reply.
 *
 * The input: 7 bytes of settings, then the server's reply.
 *   [0] bits 0-2 the method (POST, PUT, GET, HEAD, PATCH, DELETE, OPTIONS, M-SEARCH);
 *       bit 3 send twice on the connection; bit 4 a "Connection: close" header;
 *       bits 5-7 the body bytes the client keeps (0, 1, 16, 100, 1024, 4096, 64 KiB, 1 MiB)
 *   [1] bits 0-2 the body length's shift (modulo 7); bits 3-4 the route: 0 direct
 *       http://collector.test:8080, 1 the same through http_proxy (with credentials),
 *       2 https:// through https_proxy (a CONNECT tunnel; the client's TLS library is
 *       not a valid one, so a tunnel that opens ends in CAIRN_HTTP_ETLS before any TLS
 *       byte), 3 direct http://[::1] with http_proxy set and no_proxy listing ::1;
 *       bit 5 a 1 ms connect timeout (it bounds the tunnel's answer); bit 6 the server
 *       reads nothing while it writes the first reply (an answer that comes while the
 *       client's sends wait)
 *   [2..3] the body length before its shift, little-endian: up to 65535 << 6, about
 *       4 MiB; the body is a fixed pattern, not input bytes, and the server checks it
 *   [4] the deadline, 10 + this byte modulo 64, in ms (4 MiB take a few ms here)
 *   [5] 0: the server writes the reply at once; else a seed for the sizes of the pieces
 *       it writes, each given to the client to read before the next (2 ms at most, 20 ms
 *       in all), so that the client's reads end where the pieces do
 *   [6] the server: bit 0 answer only once the first request is read (else at once);
 *       bit 1 keep the connection open after the reply (else close it); bit 2 stop
 *       reading after the first request's head; bit 3 shut down its reading side then
 *       instead (the client's sends then fail); bit 4 shut down its writing side after
 *       the reply instead of closing (it reads on); bits 5-6 filler after the (last)
 *       reply ('x' bytes: none, 64 KiB, 1 MiB + 1, 3 MiB: bodies past the drain limit);
 *       bit 7 4 KiB socket buffers
 *   [7...] the reply bytes. A "<<NEXT>>" in them ends the first reply: what follows is
 *       written only once a second request is read (a kept-alive connection's second
 *       exchange; or, when empty, a server that closes it on the next request)
 *
 * Checks, with abort(): no crash or sanitizer report; each send returns within its
 * deadline (400 ms of margin) with CAIRN_HTTP_OK, a status of 200..999, a header block
 * of exactly header_count "name\0value\0" pairs, at most the kept body bytes and an
 * empty cairn_http_conn_error(), or with an error of the kinds the route allows and a
 * non-empty text. The server sees well-formed requests: the expected request line, one
 * Host, Content-Length as the body and method require (the caller's Content-Length and
 * Transfer-Encoding dropped), Proxy-Authorization exactly through the proxy, a body
 * equal to the one given, and no more requests than sends; through the tunnel, only the
 * CONNECT. When the server reads the whole request before answering and then closes,
 * the first response is the one the parser alone makes of the reply (or a timeout).
 * A server thread still waiting 5 s past the deadlines aborts.
 *
 * `make fuzz-smoke` builds and runs every fuzzer; by hand, from the repository root:
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -DCAIRN_HTTP_FUZZ_HOOKS -pthread \
 *     -I CSources/CCairnHTTP/include -I CSources/CCairnHTTP CSources/CCairnHTTP/client.c \
 *     CSources/CCairnHTTP/parser.c CSources/CCairnHTTP/tls.c \
 *     CSources/CCairnHTTP/tls_openssl.c CSources/CCairnHTTP/tls_mbedtls.c \
 *     CSources/Fuzz/fuzz_http_exchange.c -o fuzz_http_exchange
 *   mkdir -p corpus && ./fuzz_http_exchange -max_total_time=60 corpus \
 *     CSources/Fuzz/corpus/http_exchange
 */
#define _GNU_SOURCE /* memmem */
#include "cairn_http.h"
#include "header_block.h"
#include "http_internal.h"

#include <errno.h>
#include <linux/sockios.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MARGIN_MS 400
#define WATCHDOG_MS 5000
#define MAX_BODY (65535u << 6)
#define HEAD_CAP 8192
#define SERVER_CHUNK 65536
#define NEXT "<<NEXT>>"

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_http_exchange: %s\n", what);
        abort();
    }
}

static int64_t now_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

static const char *const methods[] = {"POST", "PUT", "GET", "HEAD", "PATCH", "DELETE", "OPTIONS", "M-SEARCH"};
static const size_t kept_sizes[] = {0, 1, 16, 100, 1024, 4096, 65536, 1u << 20};
static const size_t filler_sizes[] = {0, 65536, (1u << 20) + 1, 3u << 20};

/* Where each route connects, what it asks for and what the server must see. */
typedef struct route {
    const char *url;
    const char *environment[3];
    const char *connect_host;
    int connect_port;
    const char *target; /* the request line's target; NULL for the CONNECT route */
    const char *host;   /* the Host header */
    int proxy_authorization;
} route;

static const route routes[] = {
    {"http://collector.test:8080/v1/events?batch=1#ignored", {NULL}, "collector.test", 8080,
     "/v1/events?batch=1", "collector.test:8080", 0},
    {"http://collector.test:8080/v1/events?batch=1#ignored", {"http_proxy=http://fuzz:p%40ss@proxy.test:3128/", NULL},
     "proxy.test", 3128, "http://collector.test:8080/v1/events?batch=1", "collector.test:8080", 1},
    {"https://collector.test/v1/events", {"https_proxy=http://fuzz:p%40ss@proxy.test:3128", NULL}, "proxy.test",
     3128, NULL, "collector.test:443", 1},
    {"http://[::1]?q", {"http_proxy=http://proxy.test:3128", "no_proxy=example.com, ::1", NULL}, "::1", 80, "/?q",
     "[::1]", 0},
};
#define PROXY_AUTHORIZATION "Basic ZnV6ejpwQHNz" /* fuzz:p@ss */

static uint8_t *pattern; /* the request body: MAX_BODY bytes that differ from their neighbours' */

/* ---- The connect hook: one end of the socket pair, once ---- */

static int client_end = -1;
static const route *current;

static int connect_hook(const char *host, int port)
{
    check(strcmp(host, current->connect_host) == 0 && port == current->connect_port,
          "the client connected to the wrong place");
    if (client_end < 0) {
        errno = ECONNREFUSED;
        return -1;
    }
    int fd = client_end;
    client_end = -1;
    return fd;
}

/* ---- The server ---- */

enum {
    ANSWER_AFTER_REQUEST = 1,
    HOLD_OPEN = 2,
    STOP_READING = 4,
    SHUT_READING = 8,
    HALF_CLOSE = 16,
    SMALL_BUFFERS = 128,
    PAUSE_READING = 256,
};

typedef struct server {
    int fd;
    int flags;
    const uint8_t *reply;
    size_t reply_len;
    size_t first_len;    /* the first reply: reply[0..first_len) */
    size_t second_start; /* the second, after the marker; 0 when there is none */
    size_t filler;
    uint32_t seed;
    int64_t watchdog;
    /* The request as the client should send it. */
    const route *r;
    const char *method;
    size_t body_len;
    int closes;
    size_t sends;
    /* The requests as read. */
    char head[HEAD_CAP];
    size_t head_len;
    int in_body;
    size_t body_offset;
    size_t requests;
} server;

/* Checks one request head, head[0..len) with its blank line. */
static void check_head(server *s, char *head, size_t len)
{
    char line[HEAD_CAP];
    const route *r = s->r;
    if (r->target)
        snprintf(line, sizeof line, "%s %s HTTP/1.1", s->method, r->target);
    else
        snprintf(line, sizeof line, "CONNECT %s HTTP/1.1", r->host);
    char *end = strstr(head, "\r\n");
    check(end != NULL && (size_t)(end - head) == strlen(line) && memcmp(head, line, strlen(line)) == 0,
          "the request line is not the expected one");
    size_t hosts = 0, lengths = 0, encodings = 0, authorizations = 0, closes = 0;
    int bodiless = strcmp(s->method, "GET") == 0 || strcmp(s->method, "HEAD") == 0;
    char *cursor = end + 2;
    while (cursor < head + len - 2) {
        char *stop = strstr(cursor, "\r\n");
        check(stop != NULL, "a header line without CRLF");
        *stop = 0;
        char *colon = strchr(cursor, ':');
        check(colon != NULL && colon > cursor, "a header line without a name");
        *colon = 0;
        const char *value = colon[1] == ' ' ? colon + 2 : colon + 1;
        check(colon[1] == 0 || colon[1] == ' ', "a header value not after \": \"");
        if (strcasecmp(cursor, "host") == 0) {
            hosts++;
            check(strcmp(value, r->host) == 0, "the Host header is not the expected one");
        } else if (strcasecmp(cursor, "content-length") == 0) {
            lengths++;
            char number[32];
            snprintf(number, sizeof number, "%zu", s->body_len);
            check(r->target && strcmp(value, number) == 0, "Content-Length is not the body's length");
        } else if (strcasecmp(cursor, "transfer-encoding") == 0) {
            encodings++;
        } else if (strcasecmp(cursor, "proxy-authorization") == 0) {
            authorizations++;
            check(strcmp(value, PROXY_AUTHORIZATION) == 0, "Proxy-Authorization is not the expected one");
        } else if (strcasecmp(cursor, "connection") == 0) {
            closes++;
        }
        cursor = stop + 2;
    }
    check(hosts == 1, "not one Host header");
    check(encodings == 0, "a Transfer-Encoding header");
    check(authorizations == (size_t)r->proxy_authorization, "Proxy-Authorization where it does not belong, or missing");
    if (r->target) {
        check(lengths == (s->body_len > 0 || !bodiless ? 1u : 0u), "Content-Length missing, or where it does not belong");
        check(closes == (size_t)s->closes, "the Connection header is lost, or added");
    } else {
        check(lengths == 0 && closes == 0, "a CONNECT request with a body's or the request's headers");
    }
}

/* Checks what the client sent, as it comes. */
static void check_request(server *s, const uint8_t *data, size_t len)
{
    while (len > 0) {
        check(s->r->target || s->requests == 0, "bytes after the CONNECT request");
        if (s->in_body) {
            size_t n = s->body_len - s->body_offset < len ? s->body_len - s->body_offset : len;
            check(memcmp(data, pattern + s->body_offset, n) == 0, "the body sent is not the body given");
            s->body_offset += n;
            data += n;
            len -= n;
            if (s->body_offset == s->body_len) s->in_body = 0;
            continue;
        }
        check(s->head_len < sizeof s->head - 1, "a request head of 8 KiB");
        s->head[s->head_len++] = (char)*data++;
        len--;
        if (s->head_len >= 4 && memcmp(s->head + s->head_len - 4, "\r\n\r\n", 4) == 0) {
            s->head[s->head_len] = 0;
            check(memchr(s->head, 0, s->head_len) == NULL, "a NUL byte in the request head");
            s->requests++;
            check(s->requests <= s->sends, "more requests than sends");
            check_head(s, s->head, s->head_len);
            s->head_len = 0;
            s->body_offset = 0;
            s->in_body = s->r->target && s->body_len > 0;
        }
    }
}

/* How many requests the server has read: whole ones, or when it no longer reads, heads. */
static size_t requests_read(const server *s, int reading)
{
    return s->requests - (reading && s->in_body ? 1 : 0);
}

static void *serve(void *argument)
{
    server *s = argument;
    /* What the server writes, in order: the first reply, the second (once a second
     * request is read), the filler (after the last of them). */
    static uint8_t filler[SERVER_CHUNK], input[SERVER_CHUNK];
    memset(filler, 'x', sizeof filler);
    struct segment {
        const uint8_t *bytes;
        size_t len;
        size_t after; /* requests read before it is written */
        int repeats;  /* the filler: `bytes` is SERVER_CHUNK bytes, repeated */
    } segments[3] = {
        {s->reply, s->first_len, s->flags & ANSWER_AFTER_REQUEST ? 1 : 0, 0},
        {s->reply + s->second_start, s->reply_len - s->second_start, 2, 0},
        {filler, s->filler, s->second_start ? 2 : (s->flags & ANSWER_AFTER_REQUEST ? 1 : 0), 1},
    };
    if (!s->second_start) segments[1].len = 0;
    size_t segment = 0, offset = 0;
    int reading = 1, blocked = 0, waiting = 0, finished = 0;
    int64_t wait_until = 0, wait_budget = 20;
    uint32_t seed = s->seed;
    for (;;) {
        int64_t now = now_ms();
        check(now < s->watchdog, "the exchange outlived its deadline by 5 s");
        while (segment < 3 && offset == segments[segment].len) {
            segment++;
            offset = 0;
        }
        const struct segment *g = segment < 3 ? &segments[segment] : NULL;
        int answering = g && requests_read(s, reading) >= g->after;
        if (answering && !waiting && !blocked) {
            size_t piece = g->len - offset;
            if (g->repeats) {
                if (piece > SERVER_CHUNK) piece = SERVER_CHUNK;
            } else if (seed) {
                seed = seed * 1103515245u + 12345u;
                uint32_t drawn = seed >> 16;
                size_t size = 1 + ((drawn & 0x100) ? drawn % 4096 : drawn % 17);
                if (size < piece) piece = size;
            }
            ssize_t n = send(s->fd, g->repeats ? g->bytes : g->bytes + offset, piece, MSG_NOSIGNAL | MSG_DONTWAIT);
            blocked = n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
            if (n > 0) {
                offset += (size_t)n;
                if (seed && !g->repeats && wait_budget > 0) {
                    waiting = 1;
                    wait_until = now + 2;
                }
            } else if (!blocked) {
                segment = 3; /* the client is gone, or no longer reads */
            }
            continue;
        }
        if (!g && !finished) {
            finished = 1;
            if (s->flags & HOLD_OPEN) {
            } else if (s->flags & HALF_CLOSE) {
                shutdown(s->fd, SHUT_WR);
            } else {
                break;
            }
        }
        if (waiting) {
            int queued = 0;
            if (ioctl(s->fd, SIOCOUTQ, &queued) != 0 || queued == 0 || now >= wait_until) {
                wait_budget -= now_ms() - (wait_until - 2);
                waiting = 0;
                continue;
            }
        }
        int paused = (s->flags & PAUSE_READING) && g == &segments[0] && answering;
        short events = (short)((reading && !paused ? POLLIN : 0) | (blocked && !waiting ? POLLOUT : 0));
        struct pollfd poller = {.fd = s->fd, .events = events, .revents = 0};
        int ready = poll(&poller, 1, waiting ? 1 : answering && !blocked ? 0 : 50);
        if (ready < 0) continue;
        if (poller.revents & POLLOUT) blocked = 0;
        if (reading && !paused && (poller.revents & (POLLIN | POLLHUP | POLLERR))) {
            ssize_t got = recv(s->fd, input, sizeof input, MSG_DONTWAIT);
            if (got == 0) break; /* the client closed */
            if (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK) break;
            if (got > 0) {
                check_request(s, input, (size_t)got);
                if (s->requests > 0 && (s->flags & (STOP_READING | SHUT_READING))) {
                    /* Stop after the first head: the rest of what was read is dropped. */
                    if (s->flags & SHUT_READING) shutdown(s->fd, SHUT_RD);
                    reading = 0;
                }
            }
        } else if (!reading && (poller.revents & (POLLHUP | POLLERR))) {
            break;
        }
    }
    close(s->fd);
    return NULL;
}

/* ---- The response ---- */

static void check_response(const cairn_http_response_t *response, size_t kept)
{
    check(response->status >= 200 && response->status <= 999, "a status out of 200..999");
    check(response->headers_len <= CAIRN_HTTP_MAX_HEADER_BYTES, "headers past their buffer");
    check(response->body_len <= kept, "more body than the client keeps");
    check(!response->body_truncated || response->body_len == kept, "a truncated body shorter than the limit");
    const char *problem = header_block_problem(response->headers, response->headers_len, response->header_count);
    check(problem == NULL, problem);
}

/* The parser alone over the reply and filler, then the close. */
static cairn_http_parse_status_t parse_alone(cairn_http_parser_t *p, const uint8_t *reply, size_t reply_len,
                                             size_t filler, size_t kept, int head)
{
    static char headers[CAIRN_HTTP_MAX_HEADER_BYTES];
    static uint8_t body[1u << 20], x[SERVER_CHUNK];
    memset(x, 'x', sizeof x);
    cairn_http_parser_init(p, headers, sizeof headers, body, kept, head);
    size_t used = 0;
    cairn_http_parse_status_t status = cairn_http_parser_feed(p, reply, reply_len, &used);
    while (status == CAIRN_HTTP_PARSE_MORE && filler > 0) {
        size_t n = filler < sizeof x ? filler : sizeof x;
        status = cairn_http_parser_feed(p, x, n, &used);
        filler -= n;
    }
    return status == CAIRN_HTTP_PARSE_MORE ? cairn_http_parser_finish(p) : status;
}

/* A body given piece by piece (cairn_http_request_t.body_piece): the pattern from the
 * offset asked, in pieces of a size that varies with it. */
static size_t piece_size;
static size_t body_piece(void *context, size_t offset, const void **piece)
{
    size_t len = *(size_t *)context;
    check(offset < len, "a piece asked past the body");
    size_t n = 1 + (offset * 31 + piece_size) % (piece_size + 1);
    *piece = pattern + offset;
    return n < len - offset ? n : len - offset;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 7) return 0;
    if (!pattern) {
        pattern = malloc(MAX_BODY);
        check(pattern != NULL, "out of memory");
        for (size_t i = 0; i < MAX_BODY; i++) pattern[i] = (uint8_t)(i * 7 + i / 251);
        cairn_http__connect_hook = connect_hook;
    }
    const char *method = methods[data[0] & 7];
    size_t sends = data[0] & 8 ? 2 : 1;
    int closes = (data[0] & 16) != 0;
    size_t kept = kept_sizes[data[0] >> 5];
    size_t body_len = (size_t)(data[2] | data[3] << 8) << ((data[1] & 7) % 7);
    const route *r = &routes[(data[1] >> 3) & 3];
    int64_t timeout = 10 + data[4] % 64;
    int64_t connect_timeout = data[1] & 32 ? 1 : timeout;
    int flags = data[6] | (data[1] & 64 ? PAUSE_READING : 0);

    cairn_http_client_options_t options;
    memset(&options, 0, sizeof options);
    options.max_body_bytes = kept;
    options.environment = r->environment;
    options.tls_library = 99;
    cairn_http_client_t *client = NULL;
    check(cairn_http_client_new(&options, &client) == CAIRN_HTTP_OK, "no client");
    cairn_http_conn_t *conn = cairn_http_conn_new(client);
    check(conn != NULL, "no connection");

    int pair[2];
    check(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, pair) == 0, "no socket pair");
    if (flags & SMALL_BUFFERS) {
        int small = 4096;
        for (int i = 0; i < 2; i++) {
            setsockopt(pair[i], SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
            setsockopt(pair[i], SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
        }
    }
    client_end = pair[0];
    current = r;
    static server s;
    memset(&s, 0, sizeof s);
    s.fd = pair[1];
    s.flags = flags;
    s.reply = data + 7;
    s.reply_len = size - 7;
    const uint8_t *marker = memmem(s.reply, s.reply_len, NEXT, strlen(NEXT));
    s.first_len = marker ? (size_t)(marker - s.reply) : s.reply_len;
    s.second_start = marker ? s.first_len + strlen(NEXT) : 0;
    s.filler = filler_sizes[(flags >> 5) & 3];
    s.seed = data[5] ? (uint32_t)data[5] * 2654435761u : 0;
    s.watchdog = now_ms() + (int64_t)sends * (timeout + MARGIN_MS) + WATCHDOG_MS;
    s.r = r;
    s.method = method;
    s.body_len = body_len;
    s.closes = closes;
    s.sends = sends;
    pthread_t thread;
    check(pthread_create(&thread, NULL, serve, &s) == 0, "no server thread");

    cairn_http_header_t headers[] = {
        {"User-Agent", 10, "cairn-fuzz", 10},
        {"Content-Length", 14, "5", 1},
        {"X-Empty", 7, "", 0},
        {"Transfer-Encoding", 17, "chunked", 7},
        {"Connection", 10, "close", 5},
    };
    cairn_http_request_t request = {
        .method = method,
        .method_len = strlen(method),
        .url = r->url,
        .url_len = strlen(r->url),
        .headers = headers,
        .header_count = closes ? 5 : 4,
        .body = pattern,
        .body_len = body_len,
        .connect_timeout_ms = connect_timeout,
        .timeout_ms = timeout,
    };
    if (data[1] & 128) {
        piece_size = 1 + (size_t)data[5] * 97;
        request.body = NULL;
        request.body_piece = body_piece;
        request.body_context = &body_len;
    }
    for (size_t i = 0; i < sends; i++) {
        cairn_http_response_t response;
        int64_t start = now_ms();
        int rc = cairn_http_conn_send(conn, &request, &response);
        int64_t took = now_ms() - start;
        if (took > timeout + MARGIN_MS) {
            fprintf(stderr, "fuzz_http_exchange: %lld ms for a %lld ms deadline (%d: %s)\n", (long long)took,
                    (long long)timeout, rc, cairn_http_conn_error(conn));
            check(0, "the send outlived its deadline");
        }
        const char *error = cairn_http_conn_error(conn);
        if (rc == CAIRN_HTTP_OK) {
            check(r->target != NULL, "a response through a tunnel without TLS");
            check(error[0] == 0, "an error text after a successful send");
            check_response(&response, kept);
        } else {
            check(error[0] != 0, "an error without a text");
            check(rc == CAIRN_HTTP_ENETWORK || rc == CAIRN_HTTP_ETIMEOUT
                      || (rc == CAIRN_HTTP_ECONNECT && (i > 0 || !r->target))
                      || (rc == CAIRN_HTTP_ETLS && !r->target),
                  "an error of a kind this route cannot have");
        }
        int comparable = i == 0 && r->target && !s.second_start
                         && (flags & (ANSWER_AFTER_REQUEST | HOLD_OPEN | STOP_READING | SHUT_READING))
                                == ANSWER_AFTER_REQUEST;
        if (comparable && rc != CAIRN_HTTP_ETIMEOUT) {
            static cairn_http_parser_t p;
            cairn_http_parse_status_t alone =
                parse_alone(&p, s.reply, s.first_len, s.filler, kept, strcmp(method, "HEAD") == 0);
            check((alone == CAIRN_HTTP_PARSE_DONE) == (rc == CAIRN_HTTP_OK),
                  "the exchange and the parser alone disagree on the reply");
            if (rc == CAIRN_HTTP_OK) {
                check(response.status == p.status && response.header_count == p.header_count
                          && response.headers_len == p.headers_len && response.body_len == p.body_len
                          && response.body_truncated == p.body_truncated,
                      "the exchange's response is not the parser's");
                check(memcmp(response.headers, p.headers, p.headers_len) == 0
                          && (p.body_len == 0 || memcmp(response.body, p.body, p.body_len) == 0),
                      "the exchange's headers or body are not the parser's");
            }
        }
    }
    cairn_http_conn_free(conn);
    cairn_http_client_free(client);
    if (client_end >= 0) close(client_end);
    client_end = -1;
    check(pthread_join(thread, NULL) == 0, "the server thread did not end");
    return 0;
}
