#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The consumer paths outside C, each against the receive rate of its own run
(bench_ingest part f measures the C API's: pdma_sub_next, callbacks, and the
delivery latency).

  python   this package's Session (python/peerdma) on --path, `peerdma gen`
           unpaced over loopback; each block viewed through DLPack
           (numpy.from_dlpack, or cupy.from_dlpack on the GPU paths) and
           summed, so every sample is read once; then released
  gnuradio `peerdma ingest --zmq` publishing every stream to a GNU Radio 3.10
           flowgraph (one zeromq.sub_source per stream into a null sink, as a
           user's flowgraph would start), Debian's gnuradio; the items the
           sinks read, less the zeros ingest published for lost packets and
           for blocks the flowgraph was too slow for (drop-oldest: overruns),
           against the samples of the datagrams ingest received

Each row: gen's datagrams, the receive path's (received, dropped), what the
consumer took, the ratio taken/received; the receive rate (the samples of
the datagrams received over gen's run, process start to exit, seen to within
10 ms) and the consumer's MB/s of samples over its own active time (first
block to 95% of its bytes: a stream's last blocks wait for the idle flush),
which shows how fast it drains what comes in bursts. Over one window both
compare as taken/received: the throughput ratio of the run. Prints a table, writes JSON (--json).
usage: bench/ingest/consumers.py [--tool build/peerdma] [--path cpu]
       [--packets 100000] [--streams 4] [--rounds 3] [--block-packets 64]
       [--only python,gnuradio] [--json FILE]
(the package is found as python/peerdma beside this tree; its library through
PEERDMA_LIBRARY or the build tree, python/README.md)"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
PACKET = 1500
SPP = (PACKET - 32) // 4          # gen: 28 prologue + payload + 4 trailer bytes


def rate95(series):
    """MB/s of a consumer from its (time, cumulative bytes) samples: from the
    first to the one that reached 95% of the total, so that the stream's
    last blocks, which wait for the idle flush (flush_idle_ms) by design,
    do not count as consumer time."""
    if len(series) < 2:
        return 0.0
    total = series[-1][1]
    t0, b0 = series[0]
    for t, b in series:
        if b >= 0.95 * total and t > t0:
            return (b - b0) / (t - t0) / 1e6
    return 0.0


def gen_cmd(tool, port, streams, packets):
    # one sender thread per stream: the receive path, not one sender, sets the rate
    return [tool, "gen", "--port", str(port), "--streams", str(streams), "--threads", str(streams),
            "--packets", str(packets), "--packet-size", str(PACKET), "--no-context", "--json"]


def python_once(tool, path, streams, packets, block_packets):
    import numpy
    import peerdma
    xp = numpy
    if path != "cpu":
        import cupy
        xp = cupy
        # CuPy compiles its reduction kernel at the first sum: not inside
        # the measured run, where it would stall the consumer for a second
        int(cupy.zeros((64, 2), dtype=cupy.int16).sum())
    with peerdma.Session(path=path, port=0, max_payload=SPP * 4, block_packets=block_packets,
                         window_blocks=max(8, 4096 // block_packets)) as s:
        sub = s.subscribe(depth=max(8, 4096 // block_packets))
        s.start()
        tg = time.monotonic()
        g = subprocess.Popen(gen_cmd(tool, s.port, streams, packets), stdout=subprocess.PIPE,
                             text=True)
        taken, nbytes, series, total, tg_end = 0, 0, [], 0, None
        while True:
            try:
                b = sub.next(timeout=0.5)
            except TimeoutError:
                if g.poll() is not None:
                    break
                continue
            if g.poll() is not None and not tg_end:
                tg_end = time.monotonic()
            with b:
                a = xp.from_dlpack(b)
                # the sum is read back before the release: a GPU block may
                # be released only once the work reading it has completed
                total += int(a.sum())
                n = b.npackets - b.gaps
                del a
            taken += n
            nbytes += n * SPP * 4
            series.append((time.monotonic(), nbytes))
        gen = json.loads(g.communicate()[0])
        tg_end = tg_end or time.monotonic()
        s.stop()
        for b in sub:       # what the stop published
            with b:
                taken += b.npackets - b.gaps
        st = s.stats()
        ss = sub.stats()
    return {"sent": sum(x["sent"] for x in gen["streams"]), "received": st.datagrams,
            "receive_MBps": st.datagrams * SPP * 4 / (tg_end - tg) / 1e6,
            "dropped": st.socket_drops + st.ring_overruns, "taken": taken,
            "consumer_MBps": rate95(series),
            "overruns": ss.overruns, "checksum": total & 0xffffffff}


def free_port(kind):
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gnuradio_once(tool, streams, packets, tmp):
    from gnuradio import blocks, gr, zeromq
    udp, tcp = free_port(socket.SOCK_DGRAM), free_port(socket.SOCK_STREAM)
    ep = "tcp://127.0.0.1:%d" % tcp
    js, log = os.path.join(tmp, "ingest.json"), os.path.join(tmp, "ingest.err")
    with open(log, "w") as err:
        ing = subprocess.Popen([tool, "ingest", "--path", "cpu", "--port", str(udp), "--zmq", ep,
                                "--zmq-wait", str(streams), "--idle", "1000", "--json",
                                js], stdout=subprocess.DEVNULL, stderr=err)
    tb = gr.top_block()
    sinks = []
    for i in range(streams):
        src = zeromq.sub_source(gr.sizeof_short, 2, ep, 100, False, -1, "stream-%08x" % (0x1000 + i))
        snk = blocks.null_sink(gr.sizeof_short * 2)
        tb.connect(src, snk)
        sinks.append(snk)
    tb.start()
    # ingest listens once every stream's SUB has subscribed
    end = time.monotonic() + 30
    while "listening on" not in open(log).read():
        if time.monotonic() > end or ing.poll() is not None:
            tb.stop()
            ing.kill()
            raise RuntimeError("ingest --zmq did not start listening: " + open(log).read())
        time.sleep(0.05)
    tg, tg_end = time.monotonic(), None
    g = subprocess.Popen(gen_cmd(tool, udp, streams, packets), stdout=subprocess.PIPE, text=True)
    # the sinks' items read, every 10 ms, until ingest has stopped and the
    # flowgraph has read what is still in its sockets
    series, quiet = [], 0
    while quiet < 50:
        n = sum(s.nitems_read(0) for s in sinks) * 4
        if n and (not series or n != series[-1][1]):
            series.append((time.monotonic(), n))
            quiet = 0
        elif ing.poll() is not None:
            quiet += 1
        if not tg_end and g.poll() is not None:
            tg_end = time.monotonic()
        time.sleep(0.01)
    gout = g.communicate()[0]
    ing.wait(timeout=120)
    tb.stop()
    tb.wait()
    gen = json.loads(gout)
    with open(js) as f:
        rep = json.load(f)
    tot = rep
    items = sum(s.nitems_read(0) for s in sinks)
    # the stream's zeros (lost packets, and blocks the sink dropped when the
    # flowgraph fell behind: fill) are items too, but not samples received
    z = rep.get("zmq") or {"streams": [], "overruns": 0}
    zeros = sum(x["gap_samples"] + x["fill_samples"] for x in z["streams"])
    return {"sent": sum(x["sent"] for x in gen["streams"]), "received": tot["datagrams"],
            "receive_MBps": tot["datagrams"] * SPP * 4 / (tg_end - tg) / 1e6,
            "dropped": tot.get("socket_drops", 0) + tot.get("ring_overruns", 0),
            "taken": (items - zeros) // SPP, "items": items, "overruns": z["overruns"],
            "consumer_MBps": rate95(series), "zmq": z}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tool", default=os.path.join(HERE, "..", "..", "build", "peerdma"))
    ap.add_argument("--path", default="cpu", choices=["cpu", "host-staged", "zero-copy"])
    ap.add_argument("--packets", type=int, default=100000)
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--block-packets", type=int, default=64,
                    help="python: packets per block (the pool holds 4096 packets a stream)")
    ap.add_argument("--only", default="python,gnuradio")
    ap.add_argument("--json")
    a = ap.parse_args()
    rows = []
    print("consumers: %d streams x %d packets of %d B, unpaced over loopback, %d rounds, "
          "python blocks of %d packets" % (a.streams, a.packets, PACKET, a.rounds, a.block_packets))
    print("  %-9s %-11s %9s %9s %8s %9s %8s %8s %8s %8s" % (
        "consumer", "path", "sent", "received", "dropped", "taken", "overruns", "taken/rx",
        "rx MB/s", "own MB/s"))
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.only.split(","):
            # round -1 warms up and is not counted: the first session of a
            # process creates its CUDA context, CuPy loads its kernels, GNU
            # Radio its blocks
            for r in range(-1, a.rounds):
                n = a.packets if r >= 0 else max(a.packets // 10, 1000)
                try:
                    if name == "python":
                        res, path = python_once(a.tool, a.path, a.streams, n, a.block_packets), a.path
                    else:
                        res, path = gnuradio_once(a.tool, a.streams, n, tmp), "cpu"
                except (ImportError, ModuleNotFoundError) as e:
                    print("  %-9s skipped: %s" % (name, e))
                    break
                if r < 0:
                    continue
                res.update(consumer=name, path=path, round=r)
                res["taken_over_received"] = res["taken"] / res["received"] if res["received"] else 0
                rows.append(res)
                print("  %-9s %-11s %9d %9d %8d %9d %8d %8.3f %8.1f %8.1f" % (
                    name, path, res["sent"], res["received"], res["dropped"], res["taken"],
                    res["overruns"], res["taken_over_received"], res["receive_MBps"],
                    res["consumer_MBps"]))
    summary = {}
    for name in {r["consumer"] for r in rows}:
        rs = [r for r in rows if r["consumer"] == name]
        summary[name] = {k: statistics.median(r[k] for r in rs)
                         for k in ("taken_over_received", "receive_MBps", "consumer_MBps")}
        m = summary[name]
        print("  median %-9s taken/rx %.3f, received %.1f MB/s, consumer %.1f MB/s (%.2f of it)"
              % (name, m["taken_over_received"], m["receive_MBps"], m["consumer_MBps"],
                 m["consumer_MBps"] / m["receive_MBps"] if m["receive_MBps"] else 0))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "median": summary, "packet_size": PACKET,
                       "block_packets": a.block_packets,
                       "host": socket.gethostname()}, f, indent=2)


if __name__ == "__main__":
    main()
