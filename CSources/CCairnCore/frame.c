/*
 * frame.c: zstd batch frames (format in docs/FORMATS.md, "Batch frame").
 *
 * Design note
 *
 * A batch is a zstd skippable frame holding Cairn's metadata, then one standard zstd
 * frame whose content is the records, each followed by '\n'. Decoders that do not
 * know Cairn skip the first frame, so `zstd -d` turns a batch into NDJSON.
 *
 * Encoding streams the records through one reusable ZSTD_CCtx with the body size
 * pledged up front, so the frame header carries the content size. Records are staged
 * into a fixed 16 KiB buffer and handed to ZSTD_compressStream2 a chunk at a time:
 * feeding each record and each newline separately was 5-20% slower on batches of
 * 100-500 JSON events, and concatenating the whole body for ZSTD_compress2 was no
 * faster but needed a body-sized scratch buffer. A dictionary is digested once into a
 * ZSTD_CDict that the context references for every frame. Once the context has grown
 * to the largest batch seen, encoding allocates nothing.
 *
 * Dictionaries must be in zstd's dictionary format (`zstd --train`,
 * ZDICT_trainFromBuffer, ZDICT_finalizeDictionary), whose non-zero id is written to the
 * metadata and to the zstd frame header. Raw-content dictionaries have no id, so a
 * decoder could not tell a missing dictionary from corrupt data; they are refused.
 *
 * Decoding trusts nothing: both headers are parsed with explicit length checks, the
 * content size declared by the metadata must equal the one in the zstd frame header
 * and is checked against the decoder's limit and the caller's buffer before a single
 * byte is decompressed. Decompression is one-shot into the caller's buffer with its
 * capacity set to exactly that content size, so a frame lying about its size fails
 * instead of writing further, and no window buffer is ever allocated. (The
 * context's ZSTD_d_windowLogMax is still bounded by the limit; zstd applies it only to
 * streaming decompression, which this file does not use.) The frame's checksum is
 * required, so any change to the body is detected, and the body must hold exactly the
 * announced number of newline-terminated records.
 */
#include "cairn_core.h"
#include "cairn_internal.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <zstd.h>
#include <zstd_errors.h>

/* "CRNB" read as a little-endian u32. */
#define META_MAGIC 0x424E5243u
#define SKIPPABLE_HEADER_SIZE 8u
/* Zstandard frame magic (RFC 8878, 3.1.1). */
#define ZSTD_FRAME_MAGIC 0xFD2FB528u
/* Frame_Header_Descriptor bit: a 32-bit content checksum ends the frame. */
#define ZSTD_FHD_CHECKSUM 0x04u
#define STAGE_SIZE 16384u
/* Most levels accepted; above 19 zstd's "ultra" levels want windows far beyond the
 * SDK's memory budget for no useful gain on small batches. */
#define MAX_LEVEL 19
/* A 32 KiB window: events repeat their keys and values within a few hundred bytes, so a
 * longer window buys little on event JSON (8 % smaller batches at 64 KiB, on batches of
 * one repeated event, the kindest case for a long window), while each doubling costs the
 * stream context another window and block (zstd's estimate for the default level 1:
 * 0.27 MiB at 32 KiB, 0.51 MiB at 64 KiB, 1.37 MiB at zstd's own 512 KiB). */
#define WINDOW_LOG 15
/* Match-finder tables of 2^13 entries (32 KiB each): within a 32 KiB window, larger
 * tables (level 3's 2^17/2^16) find no more matches on event JSON (0.1 % at 2^14), and
 * they were most of the context. */
#define TABLE_LOG 13

struct cairn_frame_encoder {
    ZSTD_CCtx *cctx;
    ZSTD_CDict *cdict; /* NULL without a dictionary */
    uint32_t dict_id;
    unsigned char stage[STAGE_SIZE];
};

struct cairn_frame_decoder {
    ZSTD_DCtx *dctx;
    ZSTD_DDict *ddict; /* NULL without a dictionary */
    uint32_t dict_id;
    size_t max_content;
};

/* ---------------------------------------------------------------------------- */
/* Encoder                                                                        */
/* ---------------------------------------------------------------------------- */

int cairn_frame_encoder_new(int level, const void *dict, size_t dict_len,
                            cairn_frame_encoder_t **out)
{
    if (out == NULL)
        return CAIRN_EINVAL;
    *out = NULL;
    if (dict == NULL && dict_len != 0)
        return CAIRN_EINVAL;
    if (level == 0 || level < ZSTD_minCLevel() || level > MAX_LEVEL)
        return CAIRN_EINVAL;
    uint32_t dict_id = 0;
    /* Only dictionaries in zstd's format have an id; raw content is refused. */
    if (dict_len != 0 && (dict_id = ZSTD_getDictID_fromDict(dict, dict_len)) == 0)
        return CAIRN_EINVAL;

    int rc = CAIRN_ENOMEM;
    cairn_frame_encoder_t *enc = calloc(1, sizeof *enc);
    if (enc == NULL)
        return CAIRN_ENOMEM;
    enc->dict_id = dict_id;
    enc->cctx = ZSTD_createCCtx();
    if (enc->cctx == NULL)
        goto fail;

    rc = CAIRN_EZSTD;
    if (ZSTD_isError(ZSTD_CCtx_setParameter(enc->cctx, ZSTD_c_compressionLevel, level)) ||
        ZSTD_isError(ZSTD_CCtx_setParameter(enc->cctx, ZSTD_c_windowLog, WINDOW_LOG)) ||
        ZSTD_isError(ZSTD_CCtx_setParameter(enc->cctx, ZSTD_c_hashLog, TABLE_LOG)) ||
        ZSTD_isError(ZSTD_CCtx_setParameter(enc->cctx, ZSTD_c_chainLog, TABLE_LOG)) ||
        ZSTD_isError(ZSTD_CCtx_setParameter(enc->cctx, ZSTD_c_checksumFlag, 1)) ||
        ZSTD_isError(ZSTD_CCtx_setParameter(enc->cctx, ZSTD_c_contentSizeFlag, 1)) ||
        ZSTD_isError(ZSTD_CCtx_setParameter(enc->cctx, ZSTD_c_dictIDFlag, 1)))
        goto fail;
    if (dict_len != 0) {
        /* ZSTD_createCDict copies the dictionary; NULL means zstd could not parse it
         * (it starts with the dictionary magic, so it is not taken as raw content) or
         * could not allocate. */
        enc->cdict = ZSTD_createCDict(dict, dict_len, level);
        if (enc->cdict == NULL)
            goto fail;
        if (ZSTD_isError(ZSTD_CCtx_refCDict(enc->cctx, enc->cdict)))
            goto fail;
    }
    *out = enc;
    return CAIRN_OK;

fail:
    cairn_frame_encoder_free(enc);
    return rc;
}

void cairn_frame_encoder_free(cairn_frame_encoder_t *enc)
{
    if (enc == NULL)
        return;
    ZSTD_freeCCtx(enc->cctx);
    ZSTD_freeCDict(enc->cdict);
    free(enc);
}

size_t cairn_frame_bound(size_t payload_bytes, size_t record_count)
{
    /* ZSTD_compressBound is only meaningful below ZSTD_MAX_INPUT_SIZE (it returns an
     * error code above it); SIZE_MAX / 2 keeps well below that and below overflow. */
    if (payload_bytes > SIZE_MAX / 2 || record_count > SIZE_MAX / 2 - payload_bytes)
        return SIZE_MAX;
    size_t bound = ZSTD_compressBound(payload_bytes + record_count);
    if (ZSTD_isError(bound) || bound > SIZE_MAX - CAIRN_FRAME_PREFIX_SIZE)
        return SIZE_MAX;
    return CAIRN_FRAME_PREFIX_SIZE + bound;
}

/* Maps a compression error to a Cairn code. */
static int compress_error(size_t zr)
{
    switch (ZSTD_getErrorCode(zr)) {
    case ZSTD_error_dstSize_tooSmall:
        return CAIRN_EBUFSIZE;
    case ZSTD_error_memory_allocation:
        return CAIRN_ENOMEM;
    default:
        return CAIRN_EZSTD;
    }
}

/* Runs ZSTD_compressStream2 until `inb` is consumed (ZSTD_e_continue) or the frame is
 * finished (ZSTD_e_end). Output full with work left means the batch cannot fit: the
 * frame still needs at least its checksum. */
static int compress(ZSTD_CCtx *cctx, ZSTD_outBuffer *outb, ZSTD_inBuffer *inb,
                    ZSTD_EndDirective mode)
{
    for (;;) {
        size_t in_before = inb->pos, out_before = outb->pos;
        size_t zr = ZSTD_compressStream2(cctx, outb, inb, mode);
        if (ZSTD_isError(zr))
            return compress_error(zr);
        bool done = mode == ZSTD_e_end ? zr == 0 : inb->pos == inb->size;
        if (done)
            return CAIRN_OK;
        if (outb->pos == outb->size)
            return CAIRN_EBUFSIZE;
        /* zstd always makes progress while it has room; guard against looping. */
        if (inb->pos == in_before && outb->pos == out_before)
            return CAIRN_EZSTD;
    }
}

static int feed(ZSTD_CCtx *cctx, ZSTD_outBuffer *outb, const void *data, size_t len)
{
    ZSTD_inBuffer inb = {data, len, 0};
    return compress(cctx, outb, &inb, ZSTD_e_continue);
}

/* Encodes the records the pieces make: with `ends` NULL each piece is a record, else a
 * record ends at each piece whose `ends` byte is non-zero (the last one must be). */
static int encode_pieces(cairn_frame_encoder_t *enc, uint64_t batch_id,
                         const cairn_slice_t *records, const uint8_t *ends, size_t count,
                         void *dst, size_t dst_cap, size_t *dst_len)
{
    if (dst_len != NULL)
        *dst_len = 0;
    if (enc == NULL || records == NULL || dst_len == NULL || (dst == NULL && dst_cap != 0))
        return CAIRN_EINVAL;
    if (count == 0 || (ends != NULL && ends[count - 1] == 0))
        return CAIRN_EINVAL;

    /* The body is every record plus one '\n' each. */
    uint64_t record_count = 0;
    uint64_t content = 0;
    for (size_t i = 0; i < count; i++) {
        const cairn_slice_t *r = &records[i];
        bool end = ends == NULL || ends[i] != 0;
        record_count += end;
        content += end;
        if (r->len == 0)
            continue;
        if (r->data == NULL || r->len > UINT64_MAX - content)
            return CAIRN_EINVAL;
        if (memchr(r->data, '\n', r->len) != NULL)
            return CAIRN_EINVAL;
        content += r->len;
    }
    if (record_count > UINT32_MAX)
        return CAIRN_EINVAL;
    if (dst_cap < CAIRN_FRAME_PREFIX_SIZE)
        return CAIRN_EBUFSIZE;

    unsigned char *p = dst;
    cairn__put32(p, CAIRN_FRAME_SKIPPABLE_MAGIC);
    cairn__put32(p + 4, CAIRN_FRAME_META_SIZE);
    unsigned char *meta = p + SKIPPABLE_HEADER_SIZE;
    cairn__put32(meta + 0, META_MAGIC);
    cairn__put16(meta + 4, CAIRN_FRAME_FORMAT_VERSION);
    cairn__put16(meta + 6, 0);
    cairn__put64(meta + 8, batch_id);
    cairn__put32(meta + 16, (uint32_t)record_count);
    cairn__put32(meta + 20, enc->dict_id);
    cairn__put64(meta + 24, content);

    ZSTD_CCtx *cctx = enc->cctx;
    if (ZSTD_isError(ZSTD_CCtx_setPledgedSrcSize(cctx, content)))
        return CAIRN_EZSTD;

    ZSTD_outBuffer outb = {p + CAIRN_FRAME_PREFIX_SIZE, dst_cap - CAIRN_FRAME_PREFIX_SIZE, 0};
    size_t staged = 0;
    int rc = CAIRN_OK;
    for (size_t i = 0; i < count; i++) {
        size_t len = records[i].len;
        if (len >= STAGE_SIZE - staged) { /* staged + len + '\n' would not fit */
            rc = feed(cctx, &outb, enc->stage, staged);
            staged = 0;
            if (rc != CAIRN_OK)
                break;
        }
        if (len >= STAGE_SIZE) {
            /* Too big to stage: hand the record to zstd directly. */
            rc = feed(cctx, &outb, records[i].data, len);
            if (rc != CAIRN_OK)
                break;
        } else if (len != 0) {
            memcpy(enc->stage + staged, records[i].data, len);
            staged += len;
        }
        if (ends == NULL || ends[i] != 0)
            enc->stage[staged++] = '\n';
    }
    if (rc == CAIRN_OK) {
        ZSTD_inBuffer inb = {enc->stage, staged, 0};
        rc = compress(cctx, &outb, &inb, ZSTD_e_end);
    }
    if (rc != CAIRN_OK) {
        /* Drops the half-written frame so the next call starts clean; the parameters
         * and the referenced dictionary are kept. */
        ZSTD_CCtx_reset(cctx, ZSTD_reset_session_only);
        return rc;
    }
    *dst_len = CAIRN_FRAME_PREFIX_SIZE + outb.pos;
    return CAIRN_OK;
}

int cairn_frame_encode(cairn_frame_encoder_t *enc, uint64_t batch_id,
                       const cairn_slice_t *records, size_t count,
                       void *dst, size_t dst_cap, size_t *dst_len)
{
    return encode_pieces(enc, batch_id, records, NULL, count, dst, dst_cap, dst_len);
}

int cairn_frame_encode_parts(cairn_frame_encoder_t *enc, uint64_t batch_id,
                             const cairn_slice_t *pieces, const uint8_t *ends, size_t count,
                             void *dst, size_t dst_cap, size_t *dst_len)
{
    if (ends == NULL) {
        if (dst_len != NULL)
            *dst_len = 0;
        return CAIRN_EINVAL;
    }
    return encode_pieces(enc, batch_id, pieces, ends, count, dst, dst_cap, dst_len);
}

/* ---------------------------------------------------------------------------- */
/* Reading                                                                        */
/* ---------------------------------------------------------------------------- */

/* Parses and checks both headers; on success fills `info` and the length of the
 * skippable frame (where the zstd frame starts). */
static int parse(const unsigned char *p, size_t len, cairn_frame_info_t *info,
                 size_t *prefix_len)
{
    if (len < 4)
        return CAIRN_ETRUNCATED;
    if (cairn__le32(p) != CAIRN_FRAME_SKIPPABLE_MAGIC)
        return CAIRN_ECORRUPT;
    if (len < SKIPPABLE_HEADER_SIZE)
        return CAIRN_ETRUNCATED;
    uint32_t meta_size = cairn__le32(p + 4);
    if (meta_size < CAIRN_FRAME_META_SIZE)
        return CAIRN_ECORRUPT;
    /* 64-bit arithmetic: 8 + a u32 cannot overflow it, unlike a 32-bit size_t. */
    uint64_t prefix = (uint64_t)SKIPPABLE_HEADER_SIZE + meta_size;
    if (len < SKIPPABLE_HEADER_SIZE + CAIRN_FRAME_META_SIZE)
        return CAIRN_ETRUNCATED;

    const unsigned char *meta = p + SKIPPABLE_HEADER_SIZE;
    if (cairn__le32(meta) != META_MAGIC)
        return CAIRN_ECORRUPT;
    cairn_frame_info_t m = {
        .version = cairn__le16(meta + 4),
        .flags = cairn__le16(meta + 6),
        .batch_id = cairn__le64(meta + 8),
        .record_count = cairn__le32(meta + 16),
        .dict_id = cairn__le32(meta + 20),
        .content_size = cairn__le64(meta + 24),
    };
    if (m.version != CAIRN_FRAME_FORMAT_VERSION)
        return CAIRN_EVERSION;
    /* A version 1 flag would change how the body is read; none is defined yet. */
    if (m.flags != 0)
        return CAIRN_EVERSION;
    /* Every record contributes at least its '\n'. */
    if (m.record_count == 0 || m.content_size < m.record_count)
        return CAIRN_ECORRUPT;
    if (len < prefix)
        return CAIRN_ETRUNCATED;

    const unsigned char *z = p + prefix;
    size_t zlen = len - (size_t)prefix;
    if (zlen < 4)
        return CAIRN_ETRUNCATED;
    /* Checked here because ZSTD_findFrameCompressedSize also accepts skippable and
     * legacy frames, neither of which may hold a batch body. */
    if (cairn__le32(z) != ZSTD_FRAME_MAGIC)
        return CAIRN_ECORRUPT;
    size_t frame = ZSTD_findFrameCompressedSize(z, zlen);
    if (ZSTD_isError(frame))
        return ZSTD_getErrorCode(frame) == ZSTD_error_srcSize_wrong ? CAIRN_ETRUNCATED
                                                                     : CAIRN_ECORRUPT;
    /* The header is complete now (findFrameCompressedSize walked past it), so these
     * reads see the frame's real fields. */
    if ((z[4] & ZSTD_FHD_CHECKSUM) == 0)
        return CAIRN_ECORRUPT;
    unsigned long long fcs = ZSTD_getFrameContentSize(z, zlen);
    if (fcs == ZSTD_CONTENTSIZE_ERROR || fcs == ZSTD_CONTENTSIZE_UNKNOWN ||
        fcs != m.content_size)
        return CAIRN_ECORRUPT;
    if (ZSTD_getDictID_fromFrame(z, zlen) != m.dict_id)
        return CAIRN_ECORRUPT;

    m.frame_size = prefix + frame;
    *info = m;
    *prefix_len = (size_t)prefix;
    return CAIRN_OK;
}

int cairn_frame_read_info(const void *src, size_t len, cairn_frame_info_t *info)
{
    if (info != NULL)
        memset(info, 0, sizeof *info);
    if (info == NULL || (src == NULL && len != 0))
        return CAIRN_EINVAL;
    size_t prefix;
    return parse(src, len, info, &prefix);
}

/* ---------------------------------------------------------------------------- */
/* Decoder                                                                        */
/* ---------------------------------------------------------------------------- */

int cairn_frame_decoder_new(size_t max_content, const void *dict, size_t dict_len,
                            cairn_frame_decoder_t **out)
{
    if (out == NULL)
        return CAIRN_EINVAL;
    *out = NULL;
    if (max_content == 0 || (dict == NULL && dict_len != 0))
        return CAIRN_EINVAL;
    uint32_t dict_id = 0;
    /* Only dictionaries in zstd's format have an id; raw content is refused. */
    if (dict_len != 0 && (dict_id = ZSTD_getDictID_fromDict(dict, dict_len)) == 0)
        return CAIRN_EINVAL;

    int rc = CAIRN_ENOMEM;
    cairn_frame_decoder_t *dec = calloc(1, sizeof *dec);
    if (dec == NULL)
        return CAIRN_ENOMEM;
    dec->max_content = max_content;
    dec->dict_id = dict_id;
    dec->dctx = ZSTD_createDCtx();
    if (dec->dctx == NULL)
        goto fail;

    /* The smallest window that covers max_content, within zstd's bounds. */
    ZSTD_bounds wb = ZSTD_dParam_getBounds(ZSTD_d_windowLogMax);
    int window_log = 10;
    while (window_log < 62 && ((uint64_t)1 << window_log) < (uint64_t)max_content)
        window_log++;
    if (!ZSTD_isError(wb.error)) {
        if (window_log < wb.lowerBound)
            window_log = wb.lowerBound;
        if (window_log > wb.upperBound)
            window_log = wb.upperBound;
    }
    rc = CAIRN_EZSTD;
    if (ZSTD_isError(ZSTD_DCtx_setParameter(dec->dctx, ZSTD_d_windowLogMax, window_log)))
        goto fail;
    if (dict_len != 0) {
        dec->ddict = ZSTD_createDDict(dict, dict_len);
        if (dec->ddict == NULL)
            goto fail;
    }
    *out = dec;
    return CAIRN_OK;

fail:
    cairn_frame_decoder_free(dec);
    return rc;
}

void cairn_frame_decoder_free(cairn_frame_decoder_t *dec)
{
    if (dec == NULL)
        return;
    ZSTD_freeDCtx(dec->dctx);
    ZSTD_freeDDict(dec->ddict);
    free(dec);
}

/* Maps a decompression error to a Cairn code. */
static int decompress_error(size_t zr)
{
    switch (ZSTD_getErrorCode(zr)) {
    case ZSTD_error_prefix_unknown:
    case ZSTD_error_version_unsupported:
    case ZSTD_error_frameParameter_unsupported:
    case ZSTD_error_frameParameter_windowTooLarge:
    case ZSTD_error_corruption_detected:
    case ZSTD_error_checksum_wrong:
    case ZSTD_error_literals_headerWrong:
    case ZSTD_error_tableLog_tooLarge:
    case ZSTD_error_maxSymbolValue_tooLarge:
    case ZSTD_error_maxSymbolValue_tooSmall:
    /* Our dictionary was checked when it was loaded: at this point the error means
     * the frame refers to entropy tables that neither it nor the dictionary holds. */
    case ZSTD_error_dictionary_corrupted:
    /* More content than the header announced (dst is exactly that size). */
    case ZSTD_error_dstSize_tooSmall:
    case ZSTD_error_srcSize_wrong:
        return CAIRN_ECORRUPT;
    case ZSTD_error_dictionary_wrong:
        return CAIRN_EDICT;
    case ZSTD_error_memory_allocation:
        return CAIRN_ENOMEM;
    default:
        return CAIRN_EZSTD;
    }
}

int cairn_frame_decode(cairn_frame_decoder_t *dec, const void *src, size_t len,
                       void *dst, size_t dst_cap, size_t *dst_len,
                       cairn_frame_info_t *info)
{
    if (dst_len != NULL)
        *dst_len = 0;
    if (info != NULL)
        memset(info, 0, sizeof *info);
    if (dec == NULL || dst_len == NULL || (src == NULL && len != 0) ||
        (dst == NULL && dst_cap != 0))
        return CAIRN_EINVAL;

    cairn_frame_info_t m;
    size_t prefix;
    int rc = parse(src, len, &m, &prefix);
    if (rc != CAIRN_OK)
        return rc;
    if (m.frame_size != len)
        return CAIRN_ECORRUPT;
    if (m.content_size > dec->max_content)
        return CAIRN_ELIMIT;
    if (m.content_size > dst_cap)
        return CAIRN_EBUFSIZE;
    if (m.dict_id != 0 && m.dict_id != dec->dict_id)
        return CAIRN_EDICT;

    /* The capacity is exactly the announced size, so a frame holding more fails. A
     * frame without a dictionary is decoded without one even when the decoder has
     * one. */
    size_t content = (size_t)m.content_size;
    size_t zr = ZSTD_decompress_usingDDict(dec->dctx, dst, content,
                                           (const unsigned char *)src + prefix, len - prefix,
                                           m.dict_id != 0 ? dec->ddict : NULL);
    if (ZSTD_isError(zr))
        return decompress_error(zr);
    if (zr != content)
        return CAIRN_ECORRUPT;

    const unsigned char *body = dst;
    if (body[content - 1] != '\n')
        return CAIRN_ECORRUPT;
    uint64_t newlines = 0;
    for (const unsigned char *q = body, *end = body + content;
         (q = memchr(q, '\n', (size_t)(end - q))) != NULL; q++)
        newlines++;
    if (newlines != m.record_count)
        return CAIRN_ECORRUPT;

    *dst_len = content;
    if (info != NULL)
        *info = m;
    return CAIRN_OK;
}
