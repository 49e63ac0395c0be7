/*
 * header_block.h: the check the HTTP fuzzers make of a parsed header block (the
 * parser's and the client's: "name\0value\0" pairs, cairn_http.h), shared by
 * fuzz_http_response.c and fuzz_http_exchange.c.
 */
#ifndef CAIRN_FUZZ_HEADER_BLOCK_H
#define CAIRN_FUZZ_HEADER_BLOCK_H

#include <stddef.h>
#include <string.h>

/* NULL when `headers` (`len` bytes) is exactly `count` "name\0value\0" pairs with
 * non-empty names, all within `len`; else what is wrong. */
static inline const char *header_block_problem(const char *headers, size_t len, size_t count)
{
    size_t pairs = 0, offset = 0;
    while (offset < len) {
        size_t name_len = strnlen(headers + offset, len - offset);
        if (name_len == 0 || offset + name_len >= len) return "a header name is empty or unterminated";
        offset += name_len + 1;
        size_t value_len = strnlen(headers + offset, len - offset);
        if (offset + value_len >= len) return "a header value is unterminated";
        offset += value_len + 1;
        pairs++;
    }
    return pairs == count ? NULL : "header count differs from the pairs";
}

#endif
