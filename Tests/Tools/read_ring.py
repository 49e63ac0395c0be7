#!/usr/bin/env python3
"""Reads a Cairn ring file (docs/FORMATS.md, "Ring file", versions 1 and 2) without
Cairn's code and prints every unconsumed event, one per line: a data record's payload
as it is, a bare record's completed with the context record in force (the payload
without its final "}", then ",", the context, "}"), or as it is when no context record
precedes it in the window (its context is outside the file: the SDK keeps it in its
snapshot store). Context records are not printed.

With --records, every unconsumed record instead, as "<kind> <payload>" (kind: data,
context or bare), payloads as they are. With --drops, the drop table instead:
"reason counted reported" per used slot.

Usage: read_ring.py [--drops | --records] <ring file>

Exits 1 with a message on stderr if the file is not a valid ring of version 1 or 2, a
record in the unconsumed window fails its checks, or (with --drops) a used slot of the
drop table is not well formed.
"""
import struct
import sys

HEADER_SIZE = 4096
RECORD_HEADER = 16
KIND_DATA, KIND_PADDING, KIND_CONTEXT, KIND_BARE = 0, 1, 2, 3
KIND_NAMES = {KIND_DATA: b"data", KIND_CONTEXT: b"context", KIND_BARE: b"bare"}


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def fail(msg):
    print(msg, file=sys.stderr)
    sys.exit(1)


DROP_TABLE, DROP_SLOTS, DROP_SLOT_SIZE = 1024, 64, 48
CLAIM_NAMED = 2
REASON_BYTES = b"abcdefghijklmnopqrstuvwxyz0123456789_"


def print_drops(buf):
    for i in range(DROP_SLOTS):
        o = DROP_TABLE + i * DROP_SLOT_SIZE
        counted, reported, claim = struct.unpack_from("<QQQ", buf, o)
        if claim & 0xFF != CLAIM_NAMED:
            continue
        length, name_crc = (claim >> 8) & 0xFF, claim >> 32
        name = buf[o + 24:o + 24 + length]
        if not 1 <= length <= 23 or any(c not in REASON_BYTES for c in name) \
                or any(buf[o + 24 + length:o + 48]) or crc32c(name) != name_crc or reported > counted:
            fail("drop table slot %d is not well formed" % i)
        print("%s %d %d" % (name.decode(), counted, reported))


def complete(bare, context):
    """A bare event with its context: without its final "}", then ",", the context, "}"."""
    if context is None or len(bare) < 2 or bare[-1:] != b"}":
        return bare
    return bare[:-1] + (b"" if bare[-2:-1] == b"{" else b",") + context + b"}"


def main(path, mode=None):
    with open(path, "rb") as f:
        buf = f.read()
    if len(buf) < HEADER_SIZE:
        fail("truncated header")
    magic, version, header_size, capacity, salt, flags, hcrc = struct.unpack_from("<8sIIQQII", buf, 0)
    if magic != b"CAIRNRNG":
        fail("bad magic")
    if crc32c(buf[0:36]) != hcrc:
        fail("header checksum mismatch")
    if version not in (1, 2) or flags != 0 or header_size != HEADER_SIZE:
        fail("unsupported version %d (flags %#x)" % (version, flags))
    if len(buf) != HEADER_SIZE + capacity or capacity & (capacity - 1) or salt & 1:
        fail("bad capacity or salt")
    if mode == "--drops":
        print_drops(buf)
        return
    (write_pos,) = struct.unpack_from("<Q", buf, 64)
    (read_pos,) = struct.unpack_from("<Q", buf, 128)
    if write_pos % 16 or read_pos % 16 or not read_pos <= write_pos <= read_pos + capacity \
            or write_pos > 1 << 62:
        fail("bad cursors")
    data = memoryview(buf)[HEADER_SIZE:]
    pos = read_pos
    out = sys.stdout.buffer
    context = None
    while pos < write_pos:
        off = pos & (capacity - 1)
        word, len_kind, rcrc = struct.unpack_from("<QII", data, off)
        if word != (pos | 1) ^ salt:
            fail("unpublished record at %d" % pos)
        kind, length = len_kind >> 30, len_kind & 0x3FFFFFFF
        size = RECORD_HEADER + length if kind == KIND_PADDING else (RECORD_HEADER + length + 15) // 16 * 16
        if size % 16 or off + size > capacity or pos + size > write_pos:
            fail("record at %d does not fit" % pos)
        head = bytes(data[off:off + 12])
        if kind == KIND_PADDING:
            if crc32c(head) != rcrc:
                fail("padding checksum mismatch at %d" % pos)
            pos += size
            continue
        if version == 1 and kind != KIND_DATA:
            fail("record kind %d in a version 1 file at %d" % (kind, pos))
        payload = bytes(data[off + RECORD_HEADER:off + RECORD_HEADER + length])
        if crc32c(payload, crc32c(head)) != rcrc:
            fail("record checksum mismatch at %d" % pos)
        if mode == "--records":
            out.write(KIND_NAMES[kind] + b" " + payload + b"\n")
        elif kind == KIND_CONTEXT:
            context = payload
        else:
            out.write((complete(payload, context) if kind == KIND_BARE else payload) + b"\n")
        pos += size


if __name__ == "__main__":
    args = sys.argv[1:]
    chosen = args[0] if args[:1] in (["--drops"], ["--records"]) else None
    if chosen:
        args = args[1:]
    if len(args) != 1:
        fail("usage: read_ring.py [--drops | --records] <ring file>")
    main(args[0], chosen)
