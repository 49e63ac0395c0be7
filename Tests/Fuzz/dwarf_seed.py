#!/usr/bin/env python3
"""Packs the DWARF sections of an ELF file, and the addresses of its functions, into one
input for fuzz_dwarf (see fuzz_dwarf.swift for the layout).

Usage: dwarf_seed.py <elf file> <output>"""
import struct
import subprocess
import sys

NAMES = [".debug_info", ".debug_abbrev", ".debug_str", ".debug_line_str", ".debug_str_offsets",
         ".debug_addr", ".debug_ranges", ".debug_rnglists", ".debug_line"]


def sections(data):
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_offset = headers[shstrndx][4]
    found = {}
    for h in headers:
        end = data.index(b"\0", names_offset + h[0])
        found[data[names_offset + h[0]:end].decode()] = data[h[4]:h[4] + h[5]]
    return found


def main():
    path, out = sys.argv[1], sys.argv[2]
    data = open(path, "rb").read()
    found = sections(data)
    blobs = [found.get(n, b"") for n in NAMES]
    nm = subprocess.run(["nm", "--defined-only", path], capture_output=True, text=True).stdout
    addresses = [int(line.split()[0], 16) + 4 for line in nm.splitlines()
                 if len(line.split()) == 3 and line.split()[1] in "Tt"][:16]
    with open(out, "wb") as f:
        f.write(struct.pack("<9I", *[len(b) for b in blobs]))
        for b in blobs:
            f.write(b)
        for a in addresses:
            f.write(struct.pack("<Q", a))


if __name__ == "__main__":
    main()
