/*
 * fuzz_frame.c: libFuzzer target for the batch frame codec (frame.c).
 *
 * Each input is used three ways:
 *   1. as a batch: cairn_frame_read_info and cairn_frame_decode (with a small limit,
 *      with and without a dictionary) must not crash, and whatever they accept must be
 *      self-consistent;
 *   2. as records: the bytes after the first are split on '\n' and encoded (level and
 *      dictionary chosen by the first byte); decoding must give them back exactly, and
 *      an output buffer one byte short must fail with CAIRN_EBUFSIZE;
 *   3. as damage: one byte of that valid batch is changed; decoding may fail, but
 *      anything it accepts must hold the original records.
 *
 * `make fuzz-smoke` builds and runs every fuzzer; by hand, from the repository root:
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -I CSources/CCairnCore/include \
 *     CSources/CCairnCore/frame.c CSources/CCairnCore/error.c CSources/Fuzz/fuzz_frame.c \
 *     -lzstd -o fuzz_frame
 *   mkdir -p corpus && ./fuzz_frame -max_total_time=60 corpus CSources/Fuzz/corpus/frame
 * (new inputs go to the first directory, so the seeds stay as they are).
 */
#include "cairn_core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zdict.h>

#define SMALL_LIMIT 4096u
#define ROUND_TRIP_LIMIT (1u << 24)

static const int levels[] = {1, 3, -5, 9};
#define LEVELS (sizeof levels / sizeof levels[0])

static cairn_frame_encoder_t *encoders[LEVELS];
static cairn_frame_encoder_t *dict_encoder;
static cairn_frame_decoder_t *small_decoder, *small_dict_decoder, *decoder, *dict_decoder;
static unsigned char small_body[SMALL_LIMIT];

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_frame: %s\n", what);
        abort();
    }
}

/* A dictionary trained on JSON events like the ones Cairn batches. */
static void *make_dictionary(size_t *len)
{
    enum { SAMPLES = 400, SAMPLE_CAP = 200, DICT_CAP = 4096 };
    static char samples[SAMPLES * SAMPLE_CAP];
    static size_t sizes[SAMPLES];
    static unsigned char dict[DICT_CAP];
    size_t total = 0;
    for (unsigned i = 0; i < SAMPLES; i++) {
        int n = snprintf(samples + total, SAMPLE_CAP,
                         "{\"event\":\"%s\",\"id\":%u,\"plan\":\"%s\",\"ms\":%u,"
                         "\"path\":\"/api/v%u/items/%u\"}",
                         i % 3 ? "checkout" : "page_view", i * 7919u,
                         i % 2 ? "pro" : "free", (i * 37u) % 1000u, i % 3u, i * 13u);
        sizes[i] = (size_t)n;
        total += (size_t)n;
    }
    size_t r = ZDICT_trainFromBuffer(dict, sizeof dict, samples, sizes, SAMPLES);
    check(!ZDICT_isError(r), "dictionary training failed");
    *len = r;
    return dict;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    size_t dict_len;
    void *dict = make_dictionary(&dict_len);
    for (size_t i = 0; i < LEVELS; i++)
        check(cairn_frame_encoder_new(levels[i], NULL, 0, &encoders[i]) == 0, "encoder");
    check(cairn_frame_encoder_new(1, dict, dict_len, &dict_encoder) == 0, "dict encoder");
    check(cairn_frame_decoder_new(SMALL_LIMIT, NULL, 0, &small_decoder) == 0, "decoder");
    check(cairn_frame_decoder_new(SMALL_LIMIT, dict, dict_len, &small_dict_decoder) == 0,
          "decoder");
    check(cairn_frame_decoder_new(ROUND_TRIP_LIMIT, NULL, 0, &decoder) == 0, "decoder");
    check(cairn_frame_decoder_new(ROUND_TRIP_LIMIT, dict, dict_len, &dict_decoder) == 0,
          "decoder");
    return 0;
}

static size_t count_newlines(const unsigned char *p, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        n += p[i] == '\n';
    return n;
}

/* Field by field: the struct has padding, which memcmp would compare. */
static int same_info(const cairn_frame_info_t *a, const cairn_frame_info_t *b)
{
    return a->version == b->version && a->flags == b->flags &&
           a->record_count == b->record_count && a->batch_id == b->batch_id &&
           a->dict_id == b->dict_id && a->content_size == b->content_size &&
           a->frame_size == b->frame_size;
}

/* 1. The input as a batch. */
static void decode_untrusted(const uint8_t *data, size_t size)
{
    cairn_frame_info_t info;
    int info_rc = cairn_frame_read_info(data, size, &info);
    if (info_rc == 0)
        check(info.frame_size <= size && info.record_count > 0, "info out of bounds");

    cairn_frame_decoder_t *decs[] = {small_decoder, small_dict_decoder};
    for (size_t d = 0; d < 2; d++) {
        size_t body_len = 0;
        cairn_frame_info_t dinfo;
        int rc = cairn_frame_decode(decs[d], data, size, small_body, sizeof small_body,
                                    &body_len, &dinfo);
        if (rc != 0) {
            check(rc < 0 && cairn_strerror(rc) != NULL, "decode error code");
            continue;
        }
        check(info_rc == 0 && same_info(&info, &dinfo), "info differs");
        check(dinfo.frame_size == size, "decode accepted trailing bytes");
        check(body_len == dinfo.content_size && body_len <= SMALL_LIMIT, "body length");
        check(small_body[body_len - 1] == '\n', "body not newline-terminated");
        check(count_newlines(small_body, body_len) == dinfo.record_count, "record count");
    }
}

/* 2 and 3. The input as records. */
static void round_trip(const uint8_t *data, size_t size)
{
    unsigned char selector = size > 0 ? data[0] : 0;
    const unsigned char *payload = size > 0 ? data + 1 : data;
    size_t payload_len = size > 0 ? size - 1 : 0;
    int use_dict = (selector & 0x80) != 0;
    cairn_frame_encoder_t *enc = use_dict ? dict_encoder : encoders[selector % LEVELS];
    cairn_frame_decoder_t *dec = use_dict ? dict_decoder : decoder;

    size_t count = count_newlines(payload, payload_len) + 1;
    cairn_slice_t *records = malloc(count * sizeof *records);
    check(records != NULL, "malloc");
    size_t n = 0, start = 0;
    for (size_t i = 0; i <= payload_len; i++) {
        if (i == payload_len || payload[i] == '\n') {
            records[n].data = payload + start;
            records[n].len = i - start;
            n++;
            start = i + 1;
        }
    }
    check(n == count, "split");

    size_t cap = cairn_frame_bound(payload_len - (count - 1), count);
    unsigned char *frame = malloc(cap);
    check(frame != NULL, "malloc");
    size_t frame_len = 0;
    check(cairn_frame_encode(enc, size, records, count, frame, cap, &frame_len) == 0,
          "encode failed within the bound");
    check(frame_len <= cap, "encode past the bound");

    /* Exactly the frame's size minus one: ASan sees any write past it. */
    unsigned char *tight = malloc(frame_len - 1);
    size_t tight_len = 1;
    check(tight != NULL, "malloc");
    check(cairn_frame_encode(enc, size, records, count, tight, frame_len - 1, &tight_len) ==
              CAIRN_EBUFSIZE && tight_len == 0,
          "short buffer not refused");
    free(tight);

    /* The body is the payload plus a final '\n'. */
    size_t body_cap = payload_len + 1;
    unsigned char *body = malloc(body_cap);
    check(body != NULL, "malloc");
    size_t body_len = 0;
    cairn_frame_info_t info;
    check(cairn_frame_decode(dec, frame, frame_len, body, body_cap, &body_len, &info) == 0,
          "round trip decode failed");
    check(body_len == body_cap && memcmp(body, payload, payload_len) == 0 &&
              body[payload_len] == '\n',
          "round trip body differs");
    check(info.record_count == count && info.batch_id == size && info.frame_size == frame_len,
          "round trip metadata differs");

    if (frame_len > 0 && payload_len > 0) {
        size_t at = (size_t)payload[0] * 257u % frame_len;
        unsigned char mask = (unsigned char)(payload[payload_len - 1] | 1u);
        frame[at] ^= mask;
        memset(body, 0, body_cap);
        cairn_frame_info_t damaged;
        int rc = cairn_frame_decode(dec, frame, frame_len, body, body_cap, &body_len,
                                    &damaged);
        if (rc == 0) {
            check(body_len == body_cap && memcmp(body, payload, payload_len) == 0,
                  "damaged batch decoded to different records");
            check(damaged.record_count == count, "damaged record count accepted");
        }
    }
    free(body);
    free(frame);
    free(records);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    decode_untrusted(data, size);
    round_trip(data, size);
    return 0;
}
