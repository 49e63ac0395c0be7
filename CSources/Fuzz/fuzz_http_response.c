/*
 * fuzz_http_response.c: libFuzzer target for the HTTP response parser (parser.c).
 *
 * The first two bytes choose the body limit, whether the request was HEAD, whether
 * the connection closes after the input, and a seed for split points; the rest is
 * the server's reply. It is parsed twice: in one piece, and in pieces of sizes drawn
 * from the seed (1 byte and up). Neither may crash, both must end the same way with
 * the same response, and whatever is accepted must be self-consistent: the header
 * block holds exactly header_count "name\0value\0" pairs, within the buffer, and the
 * kept body fits its limit.
 *
 * `make fuzz-smoke` builds and runs every fuzzer; by hand, from the repository root:
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -I CSources/CCairnHTTP/include \
 *     -I CSources/CCairnHTTP CSources/CCairnHTTP/parser.c CSources/CCairnHTTP/client.c \
 *     CSources/CCairnHTTP/tls.c CSources/CCairnHTTP/tls_openssl.c \
 *     CSources/CCairnHTTP/tls_mbedtls.c CSources/Fuzz/fuzz_http_response.c \
 *     -o fuzz_http_response
 *   mkdir -p corpus && ./fuzz_http_response -max_total_time=60 corpus \
 *     CSources/Fuzz/corpus/http_response
 */
#include "cairn_http.h"
#include "header_block.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HEADER_CAP 4096u

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_http_response: %s\n", what);
        abort();
    }
}

typedef struct outcome {
    cairn_http_parse_status_t result;
    size_t consumed;
    cairn_http_parser_t parser;
    char headers[HEADER_CAP];
    uint8_t body[256];
} outcome;

static outcome one_piece, in_pieces;

static void run(outcome *out, const uint8_t *data, size_t len, size_t body_cap, int head, int closes,
                uint32_t seed)
{
    memset(out->headers, 0xA5, sizeof out->headers);
    cairn_http_parser_init(&out->parser, out->headers, sizeof out->headers, out->body, body_cap, head);
    out->result = CAIRN_HTTP_PARSE_MORE;
    out->consumed = 0;
    while (out->consumed < len && out->result == CAIRN_HTTP_PARSE_MORE) {
        size_t piece = len - out->consumed;
        if (seed != 0) {
            seed = seed * 1103515245u + 12345u;
            size_t drawn = 1 + (seed >> 16) % 17;
            if (drawn < piece) piece = drawn;
        }
        size_t used = 0;
        out->result = cairn_http_parser_feed(&out->parser, data + out->consumed, piece, &used);
        check(used <= piece, "consumed more than given");
        check(out->result != CAIRN_HTTP_PARSE_MORE || used == piece, "MORE without consuming everything");
        out->consumed += used;
    }
    if (out->result == CAIRN_HTTP_PARSE_MORE && closes) out->result = cairn_http_parser_finish(&out->parser);
    size_t after = 0;
    check(cairn_http_parser_feed(&out->parser, data, len, &after) == out->result || out->result == CAIRN_HTTP_PARSE_MORE,
          "a finished parser changed its mind");
}

static void check_accepted(const outcome *out, size_t body_cap)
{
    const cairn_http_parser_t *p = &out->parser;
    check(p->status >= 200 && p->status <= 999, "final status out of range");
    check(p->headers_len <= sizeof out->headers, "headers past the buffer");
    check(p->body_len <= body_cap, "body past its limit");
    const char *problem = header_block_problem(out->headers, p->headers_len, p->header_count);
    check(problem == NULL, problem);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    size_t body_cap = data[0] % 5 == 0 ? 0 : (size_t)(data[0] * 7u) % (sizeof one_piece.body + 1);
    int head = (data[1] & 1) != 0;
    int closes = (data[1] & 2) != 0;
    uint32_t seed = (uint32_t)data[1] * 2654435761u | 1u;
    data += 2;
    size -= 2;

    run(&one_piece, data, size, body_cap, head, closes, 0);
    run(&in_pieces, data, size, body_cap, head, closes, seed);

    check(one_piece.result == in_pieces.result, "the split changed the result");
    if (one_piece.result == CAIRN_HTTP_PARSE_ERROR) {
        check(one_piece.parser.error && in_pieces.parser.error, "an error without a message");
        return 0;
    }
    if (one_piece.result != CAIRN_HTTP_PARSE_DONE) return 0;
    check_accepted(&one_piece, body_cap);
    check_accepted(&in_pieces, body_cap);
    const cairn_http_parser_t *a = &one_piece.parser, *b = &in_pieces.parser;
    check(a->status == b->status && a->header_count == b->header_count && a->headers_len == b->headers_len
              && a->body_len == b->body_len && a->body_truncated == b->body_truncated
              && a->keep_alive == b->keep_alive && a->abandoned == b->abandoned,
          "the split changed the response");
    check(memcmp(one_piece.headers, in_pieces.headers, a->headers_len) == 0, "the split changed the headers");
    check(memcmp(one_piece.body, in_pieces.body, a->body_len) == 0, "the split changed the body");
    /* Where a response abandoned for its size stops depends on the pieces. */
    check(a->abandoned || one_piece.consumed == in_pieces.consumed, "the split changed where the response ends");
    return 0;
}
