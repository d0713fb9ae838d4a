#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""What `peerdma gen --pcap` sent, per stream: the data packets' indices
(sample count / samples per packet, from the VITA-49 timestamps), against
the GAP/STREAM lines of tests/public/ingest_consumer.c: every packet between
a stream's first and last that gen did not send must be a gap, and every gap
a packet gen did not send. The pcap is gen's Ethernet/IPv4/UDP frames, from
`gen --pcap` (loopback, tests/install-test.sh) or `gen --eth --pcap` (the
frames QEMU's e1000 received, tests/vm/run's nic_system api run: no
--malformed, so every frame is a VITA-49 datagram); other lines of the
consumer's output are ignored.
--tap: each line starts "ok - " or "not ok - " (tests/vm/run counts them).
usage: gen_sent.py [--tap] PCAP SAMPLE_RATE CONSUMER_OUTPUT"""
import struct
import sys


def data_packets(path):
    """Every data packet of the pcap, in order sent: (stream ID, integer
    seconds, sample count, payload bytes as sent: big-endian I/Q words)."""
    with open(path, "rb") as f:
        data = f.read()
    off = 24  # pcap global header
    while off + 16 <= len(data):
        incl = struct.unpack_from("<I", data, off + 8)[0]
        rec = data[off + 16:off + 16 + incl]
        off += 16 + incl
        ihl = (rec[14] & 15) * 4
        dg = rec[14 + ihl + 8:]
        h, sid = struct.unpack_from(">II", dg, 0)
        if h >> 28 not in (1, 3):
            continue  # context packets
        words = h & 0xFFFF
        trailer = (h >> 26) & 1
        tsi, frac = struct.unpack_from(">IQ", dg, 16)
        yield sid, tsi, frac, dg[28:words * 4 - 4 * trailer]


def sent_packets(path, rate):
    out = {}
    for sid, tsi, frac, payload in data_packets(path):
        spp = len(payload) // 4
        out.setdefault(sid, set()).add((tsi * rate + frac) // spp)
    return out


def main():
    args = sys.argv[1:]
    tap = args[:1] == ["--tap"]
    if tap:
        args = args[1:]
    if len(args) != 3:
        sys.exit(__doc__)
    bad = 0

    def say(ok, text):
        nonlocal bad
        bad |= not ok
        print(("ok - " if ok else "not ok - ") + text if tap else text)

    sent = sent_packets(args[0], int(args[1]))
    gaps, streams = {}, {}
    for line in open(args[2]):
        w = line.split()
        if w and w[0] == "GAP":
            gaps.setdefault(int(w[1]), set()).add(int(w[2]))
        elif w and w[0] == "STREAM":
            streams[int(w[1])] = (int(w[2]), int(w[3]))
    for sid, pkts in sorted(sent.items()):
        first, n = streams.get(sid, (None, 0))
        want_gaps = set(range(min(pkts), max(pkts) + 1)) - pkts
        if first != min(pkts) or first + n != max(pkts) + 1:
            say(False, f"stream {sid:#x}: blocks cover [{first}, +{n}), gen sent [{min(pkts)}, {max(pkts)}]")
        if gaps.get(sid, set()) != want_gaps:
            say(False, f"stream {sid:#x}: gaps {sorted(gaps.get(sid, set()) ^ want_gaps)[:8]} differ from gen's losses")
        elif first == min(pkts) and first + n == max(pkts) + 1:
            say(True, f"stream {sid:#x}: {len(pkts)} packets in order, {len(want_gaps)} gaps exactly where gen lost")
    extra = sorted((set(streams) | set(gaps)) - set(sent))
    if extra:
        say(False, f"streams gen never sent: {[hex(x) for x in extra]}")
    if not sent:
        say(False, "no data packets in the pcap")
    sys.exit(bad)


if __name__ == "__main__":
    main()
