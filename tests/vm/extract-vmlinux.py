#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
# Extract the uncompressed ELF vmlinux from a Debian bzImage (XZ inside), for
# QEMU's PVH boot (faster than the bzImage's own decompressor under TCG).
# usage: extract-vmlinux.py BZIMAGE OUT
import lzma
import sys

data = open(sys.argv[1], "rb").read()
pos = data.find(b"\xfd7zXZ\x00")
while pos >= 0:
    try:
        d = lzma.LZMADecompressor(format=lzma.FORMAT_XZ)
        out = d.decompress(data[pos:])
        if out[:4] == b"\x7fELF":
            open(sys.argv[2], "wb").write(out)
            sys.exit(0)
    except lzma.LZMAError:
        pass
    pos = data.find(b"\xfd7zXZ\x00", pos + 1)
sys.exit("extract-vmlinux: no XZ-compressed ELF found in " + sys.argv[1])
