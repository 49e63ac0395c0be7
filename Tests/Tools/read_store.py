#!/usr/bin/env python3
"""Reads Cairn's snapshot store (docs/FORMATS.md, "Snapshot store", version 1) with
Python's `lmdb` module, without Cairn's code, and prints one JSON object per snapshot,
oldest first: id, priority, attempts, created_at, next_attempt_at, method, url,
idempotency_key, headers and the SHA-256 of the body.

Usage: read_store.py <store directory> [--meta | --records]
With --meta, prints the metadata entries instead, values in hex. With --records, each
snapshot's object also has "records": its batch body (docs/FORMATS.md, "Batch frame")
decompressed with the `zstandard` module and split into its JSON records.
Exits 1 with a message on stderr when a value does not decode.
"""
import hashlib
import json
import struct
import sys

import lmdb


class Reader:
    def __init__(self, data):
        self.data, self.at = data, 0

    def take(self, n):
        if n > len(self.data) - self.at:
            raise ValueError("value ends early")
        out = self.data[self.at:self.at + n]
        self.at += n
        return out

    def u32(self):
        return struct.unpack("<I", self.take(4))[0]

    def u64(self):
        return struct.unpack("<Q", self.take(8))[0]

    def string(self):
        return self.take(self.u32()).decode("utf-8")


def records(body):
    """The JSON records of a batch: skip the skippable metadata frame, decode the rest."""
    import struct
    import zstandard
    magic, size = struct.unpack_from("<II", body, 0)
    if magic != 0x184D2A5C:
        raise ValueError("the body does not start with Cairn's metadata frame")
    data = zstandard.ZstdDecompressor().decompressobj().decompress(body[8 + size:])
    return [json.loads(line) for line in data.split(b"\n")[:-1]]


def decode(key, value, with_records=False):
    r = Reader(value)
    version, priority = r.take(1)[0], r.take(1)[0]
    if version != 1:
        raise ValueError("unknown version %d" % version)
    r.take(2)
    attempts, created, next_at = r.u32(), r.u64(), r.u64()
    method, url, idem = r.string(), r.string(), r.string()
    headers = [[r.string(), r.string()] for _ in range(r.u32())]
    body = r.take(r.u64())
    if r.at != len(value):
        raise ValueError("trailing bytes")
    out = {
        "id": key.hex(), "priority": priority, "attempts": attempts,
        "created_at": created, "next_attempt_at": next_at, "method": method, "url": url,
        "idempotency_key": idem, "headers": headers,
        "body_sha256": hashlib.sha256(body).hexdigest(), "body_length": len(body),
    }
    if with_records:
        out["records"] = records(body)
    return out


def main(path, meta, with_records):
    env = lmdb.open(path, readonly=True, lock=False, max_dbs=4, subdir=True)
    name = b"meta" if meta else b"snapshots"
    db = env.open_db(name, create=False)
    with env.begin(db=db) as txn:
        for key, value in txn.cursor():
            if meta:
                print(json.dumps({"key": key.decode("utf-8", "replace"), "value": value.hex()}))
                continue
            try:
                print(json.dumps(decode(key, value, with_records)))
            except ValueError as e:
                print("snapshot %s: %s" % (key.hex(), e), file=sys.stderr)
                sys.exit(1)


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    flag = sys.argv[2] if len(sys.argv) == 3 else ""
    if flag not in ("", "--meta", "--records"):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    main(sys.argv[1], flag == "--meta", flag == "--records")
