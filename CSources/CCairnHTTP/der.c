/*
 * der.c: finding a certificate's subject in its DER encoding without parsing the
 * certificate, for the OpenSSL back end's trust lookup (tls_openssl.c): the system
 * bundle holds about 140 certificates, and parsing each one (its public key through
 * OpenSSL 3's decoders) to compare subjects took some 40 ms of the first handshake.
 *
 * Only what RFC 5280 fixes is read: Certificate ::= SEQUENCE { tbsCertificate, ... },
 * TBSCertificate ::= SEQUENCE { [0] version OPTIONAL, serialNumber, signature,
 * issuer, validity, subject, ... }. Every length is checked against what encloses it;
 * anything else (a high tag number, an indefinite or over-long length) is "not found".
 */
#include "http_internal.h"

/* Reads one tag-length header at `*at` within `end`: the tag byte in `*tag`, the
 * content's length in `*length`, and `*at` moved to the content. 0 when it does not
 * fit or is not DER this reader knows. */
static int header(const unsigned char **at, const unsigned char *end, unsigned char *tag, size_t *length)
{
    const unsigned char *p = *at;
    if (end - p < 2 || (p[0] & 0x1f) == 0x1f) return 0;
    *tag = *p++;
    size_t n = *p++;
    if (n & 0x80) {
        size_t bytes = n & 0x7f;
        if (bytes == 0 || bytes > 4 || (size_t)(end - p) < bytes) return 0;
        n = 0;
        while (bytes--) n = (n << 8) | *p++;
    }
    if (n > (size_t)(end - p)) return 0;
    *at = p;
    *length = n;
    return 1;
}

int cairn_http__der_subject(const unsigned char *der, size_t length, size_t *offset, size_t *subject_length)
{
    if (!der || !offset || !subject_length) return 0;
    const unsigned char *p = der, *end = der + length;
    unsigned char tag;
    size_t n;
    /* Certificate, then TBSCertificate: both SEQUENCEs, entered. */
    for (int depth = 0; depth < 2; depth++) {
        if (!header(&p, end, &tag, &n) || tag != 0x30) return 0;
        end = p + n;
    }
    /* [0] version (optional), serialNumber, signature, issuer, validity: stepped over. */
    for (int field = 0; field < 6; field++) {
        const unsigned char *start = p;
        if (!header(&p, end, &tag, &n)) return 0;
        if (field == 0 && tag != 0xa0) field = 1; /* no version: this is the serial number */
        p += n;
        if (field == 5) {
            if (tag != 0x30) return 0; /* a Name is a SEQUENCE */
            *offset = (size_t)(start - der);
            *subject_length = (size_t)(p - start);
            return 1;
        }
    }
    return 0;
}
