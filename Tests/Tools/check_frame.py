#!/usr/bin/env python3
"""Checks a Cairn batch frame independently of Cairn's code.

Usage: check_frame.py BATCH EXPECTED_BODY [--dict DICT] [--batch-id N]

BATCH is one batch (docs/FORMATS.md, "Batch frame (version 1)"); EXPECTED_BODY is the
exact NDJSON body it must hold. The metadata is parsed here with `struct` and the body
decoded with the `zstandard` module. Exits 0 when everything matches; otherwise prints
what differs to stderr and exits 1 (2 for bad usage, 3 when `zstandard` is missing).
"""
import argparse
import io
import struct
import sys

try:
    import zstandard
except ImportError:
    print("check_frame.py: the Python module 'zstandard' is missing "
          "(`make deps` installs it)", file=sys.stderr)
    sys.exit(3)

SKIPPABLE_MAGIC = 0x184D2A5C
ZSTD_MAGIC = 0xFD2FB528
META_V1 = struct.Struct("<4sHHQIIQ")  # magic, version, flags, batch id, count, dict id, size


def check(batch, expected, dict_data=None, batch_id=None):
    """Returns a list of problems; empty when the batch is valid and holds `expected`."""
    problems = []
    if len(batch) < 8:
        return ["shorter than a skippable frame header"]
    magic, meta_size = struct.unpack_from("<II", batch, 0)
    if magic != SKIPPABLE_MAGIC:
        return ["first frame magic is 0x%08X, not 0x%08X" % (magic, SKIPPABLE_MAGIC)]
    if meta_size < META_V1.size or len(batch) < 8 + meta_size:
        return ["metadata size %d invalid for a %d-byte file" % (meta_size, len(batch))]
    tag, version, flags, bid, count, dict_id, content_size = META_V1.unpack_from(batch, 8)
    if tag != b"CRNB":
        problems.append("metadata magic is %r, not b'CRNB'" % tag)
    if version != 1 or flags != 0:
        problems.append("version %d flags %d, expected 1 and 0" % (version, flags))
    if batch_id is not None and bid != batch_id:
        problems.append("batch id %d, expected %d" % (bid, batch_id))

    frame = batch[8 + meta_size:]
    if len(frame) < 4 or struct.unpack_from("<I", frame, 0)[0] != ZSTD_MAGIC:
        return problems + ["no zstd frame after the metadata"]
    params = zstandard.get_frame_parameters(frame)
    if params.content_size != content_size:
        problems.append("zstd content size %d, metadata says %d"
                        % (params.content_size, content_size))
    if params.dict_id != dict_id:
        problems.append("zstd dictionary id %d, metadata says %d" % (params.dict_id, dict_id))
    if not params.has_checksum:
        problems.append("the zstd frame has no checksum")

    dctx = zstandard.ZstdDecompressor(
        dict_data=zstandard.ZstdCompressionDict(dict_data) if dict_data else None)
    decoder = dctx.decompressobj()
    try:
        body = decoder.decompress(frame)
    except zstandard.ZstdError as error:
        return problems + ["zstd could not decode the body: %s" % error]
    if not decoder.eof:
        problems.append("the zstd frame is incomplete")
    if decoder.unused_data:
        problems.append("%d bytes follow the zstd frame" % len(decoder.unused_data))
    if len(body) != content_size:
        problems.append("body is %d bytes, metadata says %d" % (len(body), content_size))
    if body.count(b"\n") != count or not body.endswith(b"\n"):
        problems.append("body has %d newline-terminated records, metadata says %d"
                        % (body.count(b"\n"), count))
    if body != expected:
        at = next((i for i, (a, b) in enumerate(zip(body, expected)) if a != b),
                  min(len(body), len(expected)))
        problems.append("body differs from the expected file at byte %d" % at)

    # Readers that know nothing of Cairn skip the metadata frame.
    plain = dctx.stream_reader(io.BytesIO(batch), read_across_frames=True).read()
    if plain != body:
        problems.append("a generic multi-frame read gives a different body")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("batch")
    parser.add_argument("expected_body")
    parser.add_argument("--dict", help="zstd dictionary the batch was compressed with")
    parser.add_argument("--batch-id", type=int)
    args = parser.parse_args()
    with open(args.batch, "rb") as f:
        batch = f.read()
    with open(args.expected_body, "rb") as f:
        expected = f.read()
    dict_data = None
    if args.dict:
        with open(args.dict, "rb") as f:
            dict_data = f.read()
    problems = check(batch, expected, dict_data, args.batch_id)
    for problem in problems:
        print("check_frame.py: %s: %s" % (args.batch, problem), file=sys.stderr)
    if problems:
        return 1
    print("ok: %d bytes, %d records" % (len(batch), expected.count(b"\n")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
