/*
 * parser.c: the HTTP/1.x response parser, a state machine over bytes.
 *
 * No I/O, no allocation, no global state: the caller gives the buffers and feeds
 * whatever it received, split anywhere. Everything the server sends is untrusted:
 * lengths are checked before every copy, numbers before every addition, and any
 * input either parses, asks for more, or fails with a static message.
 *
 * Framing (RFC 9112, section 6.3, for a client that never sends CONNECT here):
 *   - 1xx interim responses are skipped (101 is refused: no upgrade is asked for);
 *   - HEAD, 204 and 304 responses have no body;
 *   - Transfer-Encoding ending in chunked: chunked, trailers read and dropped;
 *     any other Transfer-Encoding: the body runs until the close;
 *   - otherwise Content-Length (all values equal), else until the close.
 */
#include "cairn_http.h"
#include "http_internal.h"

#include <string.h>

enum {
    ST_STATUS,
    ST_HEADER,
    ST_BODY_LENGTH,
    ST_BODY_CLOSE,
    ST_CHUNK_SIZE,
    ST_CHUNK_DATA,
    ST_CHUNK_END,
    ST_TRAILER,
    ST_DONE,
    ST_ERROR,
};

/* More interim responses than this before the final one is a misbehaving server. */
#define MAX_INTERIM 32
/* Chunk sizes above this are refused (no collector answers with petabytes). */
#define MAX_CHUNK_SIZE (UINT64_C(1) << 56)

void cairn_http_parser_init(cairn_http_parser_t *p, char *headers, size_t header_cap,
                            uint8_t *body, size_t body_cap, int no_body)
{
    memset(p, 0, sizeof *p);
    p->headers = headers;
    p->header_cap = header_cap;
    p->body = body;
    p->body_cap = body ? body_cap : 0;
    p->no_body = no_body != 0;
    p->state = ST_STATUS;
}

int cairn_http_parser_started(const cairn_http_parser_t *p)
{
    return p->started;
}

static cairn_http_parse_status_t fail(cairn_http_parser_t *p, const char *why)
{
    p->state = ST_ERROR;
    p->error = why;
    return CAIRN_HTTP_PARSE_ERROR;
}

static cairn_http_parse_status_t done(cairn_http_parser_t *p)
{
    p->state = ST_DONE;
    return CAIRN_HTTP_PARSE_DONE;
}

static int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
static int is_space(unsigned char c) { return c == ' ' || c == '\t'; }

static int hex_value(unsigned char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* "HTTP/1.x SP 3DIGIT [SP reason]" */
static cairn_http_parse_status_t status_line(cairn_http_parser_t *p, const char *line, size_t len)
{
    if (len < 12 || memcmp(line, "HTTP/1.", 7) != 0 || !is_digit((unsigned char)line[7])
        || line[8] != ' ')
        return fail(p, "the status line is not HTTP/1.x");
    const unsigned char *code = (const unsigned char *)line + 9;
    if (!is_digit(code[0]) || !is_digit(code[1]) || !is_digit(code[2]) || code[0] == '0')
        return fail(p, "the status code is not three digits");
    if (len > 12 && line[12] != ' ')
        return fail(p, "the status code is not followed by a space");
    for (size_t i = 12; i < len; i++) {
        unsigned char c = (unsigned char)line[i];
        if (c == 0 || c == '\r' || (c < 0x20 && c != '\t') || c == 0x7F)
            return fail(p, "the reason phrase holds a control character");
    }
    p->minor_version = line[7] == '0' ? 0 : 1;
    p->status = (code[0] - '0') * 100 + (code[1] - '0') * 10 + (code[2] - '0');
    p->state = ST_HEADER;
    return CAIRN_HTTP_PARSE_MORE;
}

/* Turns the raw header line at headers[headers_len...] into a "name\0value\0" pair in
 * place (the pair is never longer than the line plus one byte, checked). */
static cairn_http_parse_status_t header_line(cairn_http_parser_t *p, size_t len)
{
    char *line = p->headers + p->headers_len;
    for (size_t i = 0; i < len; i++) {
        if (line[i] == 0 || line[i] == '\r')
            return fail(p, "a header line holds a NUL or a bare CR");
    }
    if (is_space((unsigned char)line[0])) {
        /* An obsolete line fold: the previous value goes on after one space. */
        if (p->header_count == 0)
            return fail(p, "the first header line starts with white space");
        size_t start = 0, end = len;
        while (start < end && is_space((unsigned char)line[start])) start++;
        while (end > start && is_space((unsigned char)line[end - 1])) end--;
        if (start == end)
            return CAIRN_HTTP_PARSE_MORE;
        if (p->headers_len + (end - start) + 1 > p->header_cap)
            return fail(p, "the response headers are too large");
        p->headers[p->headers_len - 1] = ' ';
        memmove(line, line + start, end - start);
        line[end - start] = 0;
        p->headers_len += end - start + 1;
        return CAIRN_HTTP_PARSE_MORE;
    }
    size_t colon = 0;
    while (colon < len && line[colon] != ':') {
        if (!cairn_http__is_token((unsigned char)line[colon]))
            return fail(p, "a header name is not an HTTP token");
        colon++;
    }
    if (colon == 0 || colon == len)
        return fail(p, "a header line has no name or no colon");
    size_t start = colon + 1, end = len;
    while (start < end && is_space((unsigned char)line[start])) start++;
    while (end > start && is_space((unsigned char)line[end - 1])) end--;
    if (p->headers_len + colon + (end - start) + 2 > p->header_cap)
        return fail(p, "the response headers are too large");
    line[colon] = 0;
    memmove(line + colon + 1, line + start, end - start);
    line[colon + 1 + (end - start)] = 0;
    p->headers_len += colon + (end - start) + 2;
    p->header_count++;
    return CAIRN_HTTP_PARSE_MORE;
}

static int equals_ci(const char *a, size_t alen, const char *b)
{
    size_t blen = strlen(b);
    if (alen != blen) return 0;
    for (size_t i = 0; i < alen; i++) {
        unsigned char x = (unsigned char)a[i], y = (unsigned char)b[i];
        if (x >= 'A' && x <= 'Z') x = (unsigned char)(x - 'A' + 'a');
        if (x != y) return 0;
    }
    return 1;
}

/* Calls `each` for every comma-separated, trimmed element of `value`. */
typedef int (*element_fn)(const char *element, size_t len, void *context);
static int for_each_element(const char *value, element_fn each, void *context)
{
    const char *cursor = value;
    for (;;) {
        const char *end = strchr(cursor, ',');
        size_t len = end ? (size_t)(end - cursor) : strlen(cursor);
        const char *start = cursor;
        while (len > 0 && is_space((unsigned char)*start)) { start++; len--; }
        while (len > 0 && is_space((unsigned char)start[len - 1])) len--;
        if (len > 0 && each(start, len, context) != 0) return -1;
        if (!end) return 0;
        cursor = end + 1;
    }
}

typedef struct {
    int have;
    uint64_t value;
} length_state;

static int length_element(const char *text, size_t len, void *context)
{
    length_state *state = context;
    uint64_t value = 0;
    if (len > 18) return -1;
    for (size_t i = 0; i < len; i++) {
        if (!is_digit((unsigned char)text[i])) return -1;
        value = value * 10 + (uint64_t)(text[i] - '0');
    }
    if (state->have && state->value != value) return -1;
    state->have = 1;
    state->value = value;
    return 0;
}

typedef struct {
    int close;
    int keep_alive;
} connection_state;

static int connection_element(const char *text, size_t len, void *context)
{
    connection_state *state = context;
    if (equals_ci(text, len, "close")) state->close = 1;
    if (equals_ci(text, len, "keep-alive")) state->keep_alive = 1;
    return 0;
}

static int last_coding(const char *text, size_t len, void *context)
{
    int *chunked = context;
    const char *semicolon = memchr(text, ';', len);
    if (semicolon) {
        len = (size_t)(semicolon - text);
        while (len > 0 && is_space((unsigned char)text[len - 1])) len--;
    }
    *chunked = equals_ci(text, len, "chunked");
    return 0;
}

/* The header block is complete: skip an interim response, or decide the framing. */
static cairn_http_parse_status_t end_of_headers(cairn_http_parser_t *p)
{
    if (p->status < 200) {
        if (p->status == 101)
            return fail(p, "the server switched protocols, which was not asked for");
        if (++p->interim_count > MAX_INTERIM)
            return fail(p, "too many interim (1xx) responses");
        p->headers_len = 0;
        p->header_count = 0;
        p->status = 0;
        p->state = ST_STATUS;
        return CAIRN_HTTP_PARSE_MORE;
    }
    length_state length = {0, 0};
    connection_state connection = {0, 0};
    int transfer_encoding = 0, chunked = 0;
    const char *cursor = p->headers, *end = p->headers + p->headers_len;
    while (cursor < end) {
        const char *name = cursor;
        size_t name_len = strlen(name);
        const char *value = name + name_len + 1;
        cursor = value + strlen(value) + 1;
        if (equals_ci(name, name_len, "content-length")) {
            if (for_each_element(value, length_element, &length) != 0 || !length.have)
                return fail(p, "the Content-Length is not one non-negative number");
        } else if (equals_ci(name, name_len, "transfer-encoding")) {
            transfer_encoding = 1;
            for_each_element(value, last_coding, &chunked);
        } else if (equals_ci(name, name_len, "connection")) {
            for_each_element(value, connection_element, &connection);
        }
    }
    p->keep_alive = p->minor_version >= 1 ? !connection.close
                                          : connection.keep_alive && !connection.close;
    if (p->no_body || p->status == 204 || p->status == 304)
        return done(p);
    if (transfer_encoding) {
        /* With both, Transfer-Encoding wins and the connection cannot be trusted after. */
        if (length.have) p->keep_alive = 0;
        if (chunked) {
            p->state = ST_CHUNK_SIZE;
            p->line_len = 0;
            return CAIRN_HTTP_PARSE_MORE;
        }
        p->keep_alive = 0;
        p->state = ST_BODY_CLOSE;
        return CAIRN_HTTP_PARSE_MORE;
    }
    if (length.have) {
        if (length.value == 0) return done(p);
        p->remaining = length.value;
        p->state = ST_BODY_LENGTH;
        return CAIRN_HTTP_PARSE_MORE;
    }
    p->keep_alive = 0;
    p->state = ST_BODY_CLOSE;
    return CAIRN_HTTP_PARSE_MORE;
}

/* Keeps what fits of `len` body bytes and counts the rest; DONE (abandoned) once
 * too much was dropped. */
static cairn_http_parse_status_t body_bytes(cairn_http_parser_t *p, const uint8_t *data, size_t len)
{
    size_t room = p->body_cap - p->body_len;
    size_t keep = len < room ? len : room;
    if (keep > 0) {
        memcpy(p->body + p->body_len, data, keep);
        p->body_len += keep;
    }
    if (keep < len) {
        p->body_truncated = 1;
        p->drained += len - keep;
        if (p->drained > CAIRN_HTTP_MAX_DRAIN_BYTES) {
            p->abandoned = 1;
            p->keep_alive = 0;
            return done(p);
        }
    }
    return CAIRN_HTTP_PARSE_MORE;
}

/* A line of the status/header block, stored at headers[headers_len + line_len]. */
static cairn_http_parse_status_t header_byte(cairn_http_parser_t *p, uint8_t c)
{
    if (c != '\n') {
        if (p->headers_len + p->line_len + 1 >= p->header_cap)
            return fail(p, "the response headers are too large");
        p->headers[p->headers_len + p->line_len++] = (char)c;
        return CAIRN_HTTP_PARSE_MORE;
    }
    size_t len = p->line_len;
    p->line_len = 0;
    char *line = p->headers + p->headers_len;
    if (len > 0 && line[len - 1] == '\r') len--;
    if (p->state == ST_STATUS) {
        if (len == 0)
            return fail(p, "the response starts with an empty line");
        return status_line(p, line, len);
    }
    if (len == 0) return end_of_headers(p);
    return header_line(p, len);
}

/* A short line (chunk size, chunk end) in small_line. */
static cairn_http_parse_status_t small_line_byte(cairn_http_parser_t *p, uint8_t c)
{
    if (c != '\n') {
        if (p->line_len + 1 >= sizeof p->small_line)
            return fail(p, "a chunk size line is too long");
        p->small_line[p->line_len++] = (char)c;
        return CAIRN_HTTP_PARSE_MORE;
    }
    size_t len = p->line_len;
    p->line_len = 0;
    if (len > 0 && p->small_line[len - 1] == '\r') len--;
    if (p->state == ST_CHUNK_END) {
        if (len != 0) return fail(p, "a chunk is longer than its size");
        p->state = ST_CHUNK_SIZE;
        return CAIRN_HTTP_PARSE_MORE;
    }
    uint64_t size = 0;
    size_t i = 0;
    for (; i < len; i++) {
        int digit = hex_value((unsigned char)p->small_line[i]);
        if (digit < 0) break;
        size = size * 16 + (uint64_t)digit;
        if (size > MAX_CHUNK_SIZE) return fail(p, "a chunk size is too large");
    }
    if (i == 0) return fail(p, "a chunk size is not a hex number");
    while (i < len && is_space((unsigned char)p->small_line[i])) i++;
    if (i < len && p->small_line[i] != ';') return fail(p, "a chunk size line holds junk");
    if (size == 0) {
        p->state = ST_TRAILER;
        p->trailer_bytes = 0;
        return CAIRN_HTTP_PARSE_MORE;
    }
    p->remaining = size;
    p->state = ST_CHUNK_DATA;
    return CAIRN_HTTP_PARSE_MORE;
}

/* Trailer lines: counted and dropped; an empty line ends the message. */
static cairn_http_parse_status_t trailer_byte(cairn_http_parser_t *p, uint8_t c)
{
    if (++p->trailer_bytes > CAIRN_HTTP_MAX_HEADER_BYTES)
        return fail(p, "the trailers are too large");
    if (c != '\n') {
        if (c == 0) return fail(p, "a trailer line holds a NUL");
        if (p->line_len == 0) p->small_line[0] = (char)c;
        p->line_len++;
        return CAIRN_HTTP_PARSE_MORE;
    }
    int empty = p->line_len == 0 || (p->line_len == 1 && p->small_line[0] == '\r');
    p->line_len = 0;
    return empty ? done(p) : CAIRN_HTTP_PARSE_MORE;
}

cairn_http_parse_status_t cairn_http_parser_feed(cairn_http_parser_t *p, const uint8_t *data,
                                                 size_t len, size_t *used)
{
    size_t i = 0;
    cairn_http_parse_status_t result = CAIRN_HTTP_PARSE_MORE;
    if (p->state == ST_DONE || p->state == ST_ERROR) {
        *used = 0;
        return p->state == ST_DONE ? CAIRN_HTTP_PARSE_DONE : CAIRN_HTTP_PARSE_ERROR;
    }
    if (len > 0) p->started = 1;
    while (i < len && result == CAIRN_HTTP_PARSE_MORE) {
        switch (p->state) {
        case ST_STATUS:
        case ST_HEADER:
            result = header_byte(p, data[i++]);
            break;
        case ST_BODY_LENGTH:
        case ST_CHUNK_DATA: {
            size_t take = len - i;
            if ((uint64_t)take > p->remaining) take = (size_t)p->remaining;
            result = body_bytes(p, data + i, take);
            i += take;
            p->remaining -= take;
            if (result == CAIRN_HTTP_PARSE_MORE && p->remaining == 0) {
                if (p->state == ST_BODY_LENGTH) {
                    result = done(p);
                } else {
                    p->state = ST_CHUNK_END;
                    p->line_len = 0;
                }
            }
            break;
        }
        case ST_BODY_CLOSE:
            result = body_bytes(p, data + i, len - i);
            i = len;
            break;
        case ST_CHUNK_SIZE:
        case ST_CHUNK_END:
            result = small_line_byte(p, data[i++]);
            break;
        case ST_TRAILER:
            result = trailer_byte(p, data[i++]);
            break;
        default:
            result = fail(p, "the parser is in an unknown state");
            break;
        }
    }
    *used = i;
    return result;
}

cairn_http_parse_status_t cairn_http_parser_finish(cairn_http_parser_t *p)
{
    switch (p->state) {
    case ST_DONE:
        return CAIRN_HTTP_PARSE_DONE;
    case ST_ERROR:
        return CAIRN_HTTP_PARSE_ERROR;
    case ST_BODY_CLOSE:
        p->keep_alive = 0;
        return done(p);
    default:
        return fail(p, p->started ? "the server closed the connection before the response was complete"
                                  : "the server closed the connection without a response");
    }
}
