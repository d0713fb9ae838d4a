# SPDX-License-Identifier: MIT
"""What `peerdma gen` sent, independently of the receive side: its sample
formula (pdma_gen_sample in ingest/gen/gen.h, re-implemented here) and the
datagrams of its --pcap file (which packets left, so which were lost)."""
import json
import os
import struct
import subprocess

import numpy as np

GEN_SAMPLE_RATE = 10_000_000   # gen's --sample-rate default
GEN_PACKET_SIZE = 1024         # gen's --packet-size default
GEN_STREAM_BASE = 0x1000       # gen's --stream-id default
VRT_DATA_SID, VRT_CONTEXT = 1, 4


def gen_words(stream_id, s):
    """pdma_gen_sample(stream_id, s) for an array (or scalar) of absolute
    sample indices s: the 32-bit sample word, I in the high half."""
    s = np.asarray(s, dtype=np.uint64)
    prod = (s * np.uint64(2654435761)) & np.uint64(0xffffffff)      # (uint32)(s * 2654435761u)
    x = np.uint64((stream_id * 40503) & 0xffffffff)                  # stream_id * 40503u
    lo = (s + np.uint64(stream_id)) & np.uint64(0xffff)              # (uint32)(s + stream_id) & 0xffff
    return (((prod ^ x) & np.uint64(0xffff0000)) | lo).astype(np.uint32)


def gen_iq(stream_id, first_sample, n):
    """int16 [n, 2]: (I, Q) = ((int16)(w >> 16), (int16)(w & 0xffff))."""
    w = gen_words(stream_id, np.arange(first_sample, first_sample + n, dtype=np.uint64))
    out = np.empty((n, 2), dtype=np.int16)
    out[:, 0] = (w >> np.uint32(16)).astype(np.uint16).view(np.int16)
    out[:, 1] = (w & np.uint32(0xffff)).astype(np.uint16).view(np.int16)
    return out


def read_pcap(path, sample_rate=GEN_SAMPLE_RATE):
    """{stream_id: set of first-sample indices of the data packets sent}
    (duplicates once), from gen's Ethernet/IPv4/UDP pcap. Context packets
    are counted apart: returns (data, contexts)."""
    data, ctx = {}, {}
    with open(path, "rb") as f:
        blob = f.read()
    magic = struct.unpack_from("<I", blob, 0)[0]
    e = "<" if magic in (0xa1b2c3d4, 0xa1b23c4d) else ">"
    off = 24
    while off + 16 <= len(blob):
        _, _, incl, _ = struct.unpack_from(e + "IIII", blob, off)
        frame = blob[off + 16:off + 16 + incl]
        off += 16 + incl
        ihl = (frame[14] & 0x0f) * 4
        vrt = frame[14 + ihl + 8:]
        hdr, sid = struct.unpack_from(">II", vrt, 0)
        ptype = hdr >> 28
        if ptype == VRT_CONTEXT:
            ctx[sid] = ctx.get(sid, 0) + 1
            continue
        assert ptype == VRT_DATA_SID, "unexpected VRT packet type %d" % ptype
        assert hdr & (1 << 27), "gen's data packets carry a class ID"
        ts_int, ts_frac = struct.unpack_from(">IQ", vrt, 16)
        data.setdefault(sid, set()).add(ts_int * sample_rate + ts_frac)
    return data, ctx


def samples_per_packet(packet_size=GEN_PACKET_SIZE, trailer=True):
    return (packet_size - 28 - (4 if trailer else 0)) // 4


class GenRun:
    """One `peerdma gen` run to 127.0.0.1:port, with its pcap and JSON."""

    def __init__(self, tool, port, pcap, streams=2, packets=500, loss=0, seed=1, rate=20000,
                 extra=()):
        # PEERDMA_TEST_SLOW=N: N times slower (valgrind: the receive thread
        # runs under the emulator and would lose datagrams to the socket).
        rate = max(1, rate // int(os.environ.get("PEERDMA_TEST_SLOW", "1")))
        self.args = [tool, "gen", "--host", "127.0.0.1", "--port", str(port), "--streams", str(streams),
                     "--packets", str(packets), "--loss", str(loss), "--seed", str(seed),
                     "--rate", str(rate), "--pcap", pcap, "--json"] + list(extra)
        self.pcap = pcap
        self.streams, self.packets = streams, packets
        self.proc = None
        self.report = None

    def start(self):
        # Not LD_PRELOAD (a sanitizer runtime the library needs in this
        # process, python/CMakeLists.txt): gen links its own.
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        return self

    def wait(self, timeout=120):
        out, err = self.proc.communicate(timeout=timeout)
        assert self.proc.returncode == 0, "gen failed (%d): %s" % (self.proc.returncode, err.decode())
        self.report = json.loads(out)
        self.sent, self.contexts = read_pcap(self.pcap)
        return self

    def run(self):
        return self.start().wait()

    def expected(self):
        """{stream_id: (sent sample starts, lost sample starts)}: gen never
        drops a stream's first or last packet, so the span between them is
        every packet it meant to send."""
        spp = samples_per_packet()
        out = {}
        for sid, starts in self.sent.items():
            lo, hi = min(starts), max(starts)
            span = set(range(lo, hi + spp, spp))
            assert len(span) == self.packets
            out[sid] = (starts, span - starts)
        return out


def tool_path():
    return os.environ["PEERDMA_TOOL"]
