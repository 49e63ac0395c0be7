/*
 * fuzz_http_der.c: libFuzzer target for the search of a certificate's subject in its
 * DER encoding (der.c, cairn_http__der_subject), which the OpenSSL back end runs on
 * every certificate of a trust file.
 *
 * The input is the DER bytes, passed in a buffer of exactly their size. Checks, with
 * abort(): nothing reads past the input; the same answer twice; a subject found lies
 * inside the input and starts with a SEQUENCE tag whose length, read as DER, covers
 * exactly the bytes returned.
 *
 * `make fuzz-smoke` builds and runs every fuzzer; its seeds (corpus/http_der) are
 * certificates of the test CA and of the system store.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    unsigned char *copy = malloc(size ? size : 1);
    if (!copy) return 0;
    memcpy(copy, data, size);
    size_t offset = 0, length = 0, offset2 = 0, length2 = 0;
    int found = cairn_http__der_subject(copy, size, &offset, &length);
    int again = cairn_http__der_subject(copy, size, &offset2, &length2);
    if (found != again || (found && (offset != offset2 || length != length2))) abort();
    if (found) {
        if (length < 2 || offset > size || length > size - offset || copy[offset] != 0x30) abort();
        size_t header = 2, n = copy[offset + 1];
        if (n & 0x80) {
            size_t bytes = n & 0x7f;
            if (bytes == 0 || bytes > 4 || length < 2 + bytes) abort();
            n = 0;
            for (size_t i = 0; i < bytes; i++) n = (n << 8) | copy[offset + 2 + i];
            header += bytes;
        }
        if (header + n != length) abort();
    }
    free(copy);
    return 0;
}
