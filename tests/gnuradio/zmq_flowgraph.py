#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""A real GNU Radio 3.10 flowgraph receives `peerdma ingest --zmq` and is
checked sample for sample against what `peerdma gen` sent.

Per scenario: ingest (--path cpu) binds the ZeroMQ endpoint and waits for one
subscriber per stream (--zmq-wait: the slow-joiner handshake); the flowgraph
(one zeromq.sub_source per stream, key "stream-XXXXXXXX", into a vector sink)
starts and subscribes; once ingest says it is listening, gen sends with
injected loss and writes every datagram it sent to a pcap. ingest stops on
--idle, drains, and writes its JSON summary (where each stream's published
samples begin). The expected samples come from the pcap (each data packet's
timestamp and payload, the payload itself checked against gen's formula,
ingest/gen/gen.h pdma_gen_sample, reimplemented here): a packet that was sent
gives its samples, one that was not (injected loss, and the packet positions
of the first and last block before gen's first and after its last packet)
gives zeros. With --zmq-tags the pdma_gap tags must cover exactly those zeros
and rx_time must name the first sample.

usage: zmq_flowgraph.py PEERDMA_TOOL   (exit 0 pass, 1 fail, 77 skipped)
"""
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

try:
    import numpy as np
    import pmt
    from gnuradio import blocks, gr, zeromq
except ImportError as e:
    print("skipped: GNU Radio (Debian's gnuradio) not installed: %s" % e)
    sys.exit(77)

RATE = 10000000          # samples per second (gen's and ingest's default)
PACKET_SIZE = 1024       # gen's default: 28 header + 992 payload + 4 trailer bytes
SPP = (PACKET_SIZE - 32) // 4


def gen_samples(sid, s0, n):
    """gen's samples s0 .. s0+n-1 of stream sid as int16 (I, Q) pairs."""
    s = np.arange(s0, s0 + n, dtype=np.uint64)
    m = ((s * np.uint64(2654435761)) & np.uint64(0xffffffff)).astype(np.uint32)
    i = m ^ np.uint32((sid * 40503) & 0xffffffff)
    q = ((s + np.uint64(sid)) & np.uint64(0xffff)).astype(np.uint32)
    w = (i & np.uint32(0xffff0000)) | q
    out = np.empty((n, 2), dtype=np.int16)
    out[:, 0] = (w >> np.uint32(16)).astype(np.uint16).view(np.int16)
    out[:, 1] = (w & np.uint32(0xffff)).astype(np.uint16).view(np.int16)
    return out


def read_pcap(path):
    """{stream_id: {first_sample: payload int16 (n, 2)}} of the data packets."""
    sent = {}
    with open(path, "rb") as f:
        hdr = f.read(24)
        assert struct.unpack("<I", hdr[:4])[0] == 0xa1b2c3d4, "pcap magic"
        while True:
            rh = f.read(16)
            if len(rh) < 16:
                break
            incl = struct.unpack("<IIII", rh)[2]
            frame = f.read(incl)
            ihl = (frame[14] & 15) * 4
            vrt = frame[14 + ihl + 8:]
            w0, sid = struct.unpack(">II", vrt[:8])
            if w0 >> 28 != 1:          # context packets: no samples
                continue
            ts_int, ts_frac = struct.unpack(">IQ", vrt[16:28])
            has_trailer = (w0 >> 26) & 1
            words = w0 & 0xffff
            payload = vrt[28:4 * words - 4 * has_trailer]
            iq = np.frombuffer(payload, dtype=">i2").astype(np.int16).reshape(-1, 2)
            sent.setdefault(sid, {})[ts_int * RATE + ts_frac] = iq
    return sent


def free_port(kind):
    s = socket.socket(socket.AF_INET, kind)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Stderr(threading.Thread):
    """Collects a process's stderr lines (so its pipe never fills)."""

    def __init__(self, proc):
        super().__init__(daemon=True)
        self.proc, self.lines, self.cv = proc, [], threading.Condition()
        self.start()

    def run(self):
        for line in self.proc.stderr:
            with self.cv:
                self.lines.append(line.rstrip("\n"))
                self.cv.notify_all()

    def wait_for(self, text, timeout):
        end = time.time() + timeout
        with self.cv:
            while not any(text in l for l in self.lines):
                left = end - time.time()
                if left <= 0 or self.proc.poll() is not None:
                    return False
                self.cv.wait(min(left, 0.2))
            return True


def fail(msg):
    print("FAIL: " + msg)
    return 1


def runs(mask):
    """[start, end) index runs of True in a boolean array."""
    d = np.diff(np.concatenate(([0], mask.astype(np.int8), [0])))
    return list(zip(np.flatnonzero(d == 1).tolist(), np.flatnonzero(d == -1).tolist()))


def scenario(tool, name, fmt, tags, policy, streams, packets, loss, seed, tmp):
    print("=== %s: --zmq-format %s%s --zmq-policy %s, %d streams x %d packets, loss %d/1000, "
          "seed %d" % (name, fmt, " --zmq-tags" if tags else "", policy, streams, packets, loss,
                       seed))
    udp, tcp = free_port(socket.SOCK_DGRAM), free_port(socket.SOCK_STREAM)
    ep = "tcp://127.0.0.1:%d" % tcp
    js, pcap = os.path.join(tmp, name + ".json"), os.path.join(tmp, name + ".pcap")
    sids = [0x1000 + i for i in range(streams)]
    cmd = [tool, "ingest", "--path", "cpu", "--port", str(udp), "--zmq", ep,
           "--zmq-format", fmt, "--zmq-wait", str(streams), "--zmq-policy", policy,
           "--idle", "1500", "--json", js]
    if tags:
        cmd.append("--zmq-tags")
    ing = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    err = Stderr(ing)
    tb = gr.top_block()
    sinks = {}
    try:
        for sid in sids:
            key = "stream-%08x" % sid
            if fmt == "ci16":   # one item = one sample: I, Q int16
                src = zeromq.sub_source(gr.sizeof_short, 2, ep, 100, tags, -1, key)
                snk = blocks.vector_sink_s(2)
            else:
                src = zeromq.sub_source(gr.sizeof_gr_complex, 1, ep, 100, tags, -1, key)
                snk = blocks.vector_sink_c()
            tb.connect(src, snk)
            sinks[sid] = snk
        tb.start()
        if not err.wait_for("listening on", 30):
            return fail("ingest did not start listening:\n" + "\n".join(err.lines))
        g = subprocess.run([tool, "gen", "--port", str(udp), "--streams", str(streams),
                            "--stream-id", str(sids[0]), "--packets", str(packets),
                            "--loss", str(loss), "--seed", str(seed), "--rate", "20000",
                            "--pcap", pcap, "--json"],
                           capture_output=True, text=True, timeout=120)
        if g.returncode:
            return fail("gen exit %d: %s" % (g.returncode, g.stderr))
        gj = json.loads(g.stdout)
        try:
            rc = ing.wait(timeout=120)
        except subprocess.TimeoutExpired:
            ing.kill()
            return fail("ingest did not stop")
        err.join(5)
        if rc:
            return fail("ingest exit %d:\n%s" % (rc, "\n".join(err.lines)))
        with open(js) as f:
            summary = json.load(f)
        z = summary["zmq"]
        zs = {s["stream_id"]: s for s in z["streams"]}
        want_items = {sid: zs[sid]["samples"] for sid in sids if sid in zs}
        if sorted(want_items) != sids:
            return fail("streams published %s, want %s" % (sorted(zs), sids))
        end = time.time() + 60
        while time.time() < end and any(
                len(sinks[sid].data()) < want_items[sid] * (2 if fmt == "ci16" else 1)
                for sid in sids):
            time.sleep(0.05)
    finally:
        tb.stop()
        tb.wait()
        if ing.poll() is None:
            ing.kill()

    sent = read_pcap(pcap)
    bad = 0
    for sid in sids:
        st = zs[sid]
        first, n = st["first_sample"], st["samples"]
        lost = [s for s in gj["streams"] if s["stream_id"] == sid][0]["lost"]
        if st["fill_samples"] or st["jumps"] or st["stale"]:
            bad += fail("0x%x: blocks dropped on the way (%s)" % (sid, st))
            continue
        if first % SPP:
            bad += fail("0x%x: first sample %d not on a packet boundary" % (sid, first))
            continue
        # expected: gen's samples where a packet was sent, zeros elsewhere
        want = np.zeros((n, 2), dtype=np.int16)
        is_gap = np.ones(n // SPP, dtype=bool)
        for s0, iq in sent.get(sid, {}).items():
            if not np.array_equal(iq, gen_samples(sid, s0, len(iq))):
                bad += fail("0x%x: pcap payload at %d differs from gen's formula" % (sid, s0))
                break
            if first <= s0 < first + n:
                want[s0 - first:s0 - first + len(iq)] = iq
                is_gap[(s0 - first) // SPP] = False
        lost_in = int(is_gap.sum())
        sent_n = len(sent.get(sid, {}))
        if sent_n + lost != packets:
            bad += fail("0x%x: pcap has %d data packets, gen says %d sent of %d (lost %d)"
                        % (sid, sent_n, packets - lost, packets, lost))
        d = sinks[sid].data()
        if fmt == "ci16":
            got = np.array(d, dtype=np.int16).reshape(-1, 2)
        else:
            c = np.array(d, dtype=np.complex64)
            want = (want[:, 0].astype(np.float32) / np.float32(32768)
                    + 1j * (want[:, 1].astype(np.float32) / np.float32(32768))).astype(np.complex64)
            got = c
        if len(got) != n:
            bad += fail("0x%x: flowgraph got %d samples, ingest published %d" % (sid, len(got), n))
            continue
        diff = np.flatnonzero((got != want).reshape(n, -1).any(axis=1))
        if len(diff):
            i = int(diff[0])
            bad += fail("0x%x: %d samples differ, first at time line %d (packet %d of the "
                        "published range): got %s want %s"
                        % (sid, len(diff), first + i, i // SPP, got[i], want[i]))
            continue
        print("0x%x: %d samples from %d, sample for sample equal; gen lost %d packet(s), "
              "%d zero packet position(s) in the published range (lost + before the first/after "
              "the last packet)" % (sid, n, first, lost, lost_in))
        if lost == 0:
            bad += fail("0x%x: gen lost nothing: the run does not test gaps" % sid)
        if st["gap_samples"] != lost_in * SPP:
            bad += fail("0x%x: ingest counted %d gap samples, the pcap says %d"
                        % (sid, st["gap_samples"], lost_in * SPP))
        if tags:
            tg = sinks[sid].tags()
            gaps = sorted((t.offset, pmt.to_uint64(t.value)) for t in tg
                          if pmt.symbol_to_string(t.key) == "pdma_gap")
            # adjacent tags (a run across a block boundary) merge into one run
            merged = []
            for off, cnt in gaps:
                if merged and merged[-1][1] == off:
                    merged[-1][1] = off + cnt
                else:
                    merged.append([off, off + cnt])
            want_runs = [[a * SPP, b * SPP] for a, b in runs(is_gap)]
            if merged != want_runs:
                bad += fail("0x%x: pdma_gap tags cover %s, the lost packets %s"
                            % (sid, merged[:8], want_runs[:8]))
            rt = [t for t in tg if pmt.symbol_to_string(t.key) == "rx_time"]
            if len(rt) != 1 or rt[0].offset != 0:
                bad += fail("0x%x: want one rx_time tag at item 0, got %s"
                            % (sid, [(t.offset, str(t.value)) for t in rt]))
            else:
                secs = pmt.to_uint64(pmt.tuple_ref(rt[0].value, 0))
                frac = pmt.to_double(pmt.tuple_ref(rt[0].value, 1))
                if secs != first // RATE or abs(frac - (first % RATE) / RATE) > 1e-12:
                    bad += fail("0x%x: rx_time (%d, %r) is not sample %d" % (sid, secs, frac, first))
            drops = [t for t in tg if pmt.symbol_to_string(t.key) == "pdma_drop"]
            if drops:
                bad += fail("0x%x: pdma_drop tags without dropped blocks" % sid)
            print("0x%x: %d pdma_gap tag(s) exactly on the %d zero run(s); rx_time at item 0"
                  % (sid, len(gaps), len(want_runs)))
    if z["subscribers"] < streams:
        bad += fail("ingest saw %d subscribers, want %d" % (z["subscribers"], streams))
    return 1 if bad else 0


def main():
    tool = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("PEERDMA_TOOL")
    if not tool:
        print("usage: zmq_flowgraph.py PEERDMA_TOOL")
        return 2
    print("GNU Radio %s" % gr.version())
    failed = 0
    with tempfile.TemporaryDirectory(prefix="pdma-gr-") as tmp:
        # backpressure: on a busy machine a descheduled publisher makes the
        # session wait (the receive ring absorbs it) rather than drop blocks,
        # so every zero is one gen lost
        failed += scenario(tool, "ci16", "ci16", False, "backpressure", 2, 3000, 20, 7, tmp)
        failed += scenario(tool, "cf32-tags", "cf32", True, "backpressure", 2, 3000, 30, 11, tmp)
    print("gnuradio zmq: %d passed, %d failed" % (2 - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
