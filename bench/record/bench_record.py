#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""peerdma record against the disk it writes to, measured in the same run.

Each round, on the file system of --dir:
  writer bench_sigmf_writer: the SigMF writer fed host blocks from memory (no
         network, no deframer), --mb MB, fdatasync and metadata included;
  disk   a sequential write of the same number of bytes that the recording
         holds, in 4 MiB write(2)s (record's write buffer) of random data (no
         file system can compress it away), then fdatasync: bytes / time;
  ingest the same, to `peerdma ingest`: what the receive path alone takes
         in of the same load (datagrams received);
  record `peerdma gen` sends --streams streams of --packet-size packets,
         unpaced, over loopback to `peerdma record`; its JSON summary gives
         the bytes it wrote and the writer's time (first block taken to the
         recording on disk, fdatasync included), and ingest's receive
         counters (datagrams, drops) say what the receive path sustained;
         waits/overruns 0 mean the writer kept up with it (every block
         received was written).
They alternate, so all see the same disk state; the table gives each round
and the ratios to the disk of the medians. Prints a table,
writes JSON (--json).
usage: bench/record/bench_record.py [--tool build/peerdma] [--dir DIR] [--mb 512]
       [--rounds 3] [--streams 2] [--packet-size 8192] [--json FILE]"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

CHUNK = 4 << 20


def disk_write(path, nbytes):
    buf = os.urandom(CHUNK)
    t0 = time.monotonic()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        left = nbytes
        while left > 0:
            left -= os.write(fd, buf if left >= CHUNK else buf[:left])
        os.fdatasync(fd)
    finally:
        os.close(fd)
    dt = time.monotonic() - t0
    os.unlink(path)
    return nbytes / dt / 1e6, dt


def writer_once(exe, d, mb, streams, spp):
    out = subprocess.run([exe, d, str(mb), str(streams), "64", str(spp)], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def record_once(tool, d, streams, packet_size, packets, cmd="record"):
    summary = os.path.join(d, "summary.json")
    args = ["--dir", d, "--prefix", "bench"] if cmd == "record" else []
    rec = subprocess.Popen([tool, cmd, "--port", "0", "--idle", "1000", "--json", summary] + args,
                           stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    port = None
    line = ""
    for line in rec.stderr:
        m = re.search(r"listening on [0-9.]+:(\d+)", line)
        if m:
            port = m.group(1)
            break
    if not port:
        rec.kill()
        sys.exit("bench_record: record did not start: " + line)
    t0 = time.monotonic()
    subprocess.run([tool, "gen", "--port", port, "--streams", str(streams), "--packet-size",
                    str(packet_size), "--packets", str(packets), "--rate", "0"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    send_s = time.monotonic() - t0
    err = rec.stderr.read()
    if rec.wait() != 0:
        sys.exit("bench_record: record failed: " + err)
    with open(summary) as f:
        j = json.load(f)
    for name in os.listdir(d):
        os.unlink(os.path.join(d, name))
    if cmd == "ingest":
        return {"datagrams_received": j["datagrams"], "socket_drops": j["socket_drops"],
                "send_seconds": send_s}
    r = j["record"]
    sent = streams * packets
    return {
        "bytes": r["bytes"], "seconds": r["seconds"], "MBps": r["MBps"],
        "blocks": r["blocks"], "overruns": r["overruns"], "waits": r["waits"],
        "datagrams_sent": sent, "datagrams_received": j.get("datagrams"),
        "socket_drops": j.get("socket_drops"), "ring_overruns": j.get("ring_overruns"),
        "send_seconds": send_s,
        "missing_samples": sum(s["missing"] for s in r["streams"]),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--tool", default=os.path.join(src, "build", "peerdma"))
    ap.add_argument("--dir", default=None, help="file system to measure (default: a temp dir)")
    ap.add_argument("--mb", type=int, default=512, help="recording size, MB (default 512)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--streams", type=int, default=2)
    ap.add_argument("--packet-size", type=int, default=8192)
    ap.add_argument("--writer", default=os.path.join(src, "build", "bench", "record",
                                                      "bench_sigmf_writer"))
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    payload = a.packet_size - 28 - 4  # DIFI prologue and trailer
    packets = max(1, a.mb * 1000000 // (payload * a.streams))
    d = tempfile.mkdtemp(prefix="bench_record.", dir=a.dir)
    rounds = []
    try:
        for i in range(a.rounds):
            wr = writer_once(a.writer, d, a.mb, a.streams, payload // 4)
            disk, disk_s = disk_write(os.path.join(d, "disk.tmp"), wr["bytes"])
            r = record_once(a.tool, d, a.streams, a.packet_size, packets)
            ing = record_once(a.tool, d, a.streams, a.packet_size, packets, "ingest")
            r.update(round=i, disk_MBps=disk, disk_seconds=disk_s, writer=wr, ingest=ing)
            rounds.append(r)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print("%5s %6s %6s %6s %6s %6s %8s %9s %9s %7s" % (
        "round", "disk", "writer", "w/disk", "record", "r/disk", "sent", "rx_record", "rx_ingest",
        "kept_up"))
    for r in rounds:
        print("%5d %6.0f %6.0f %6.2f %6.0f %6.2f %8d %9s %9s %7s" % (
            r["round"], r["disk_MBps"], r["writer"]["MBps"], r["writer"]["MBps"] / r["disk_MBps"],
            r["MBps"], r["MBps"] / r["disk_MBps"], r["datagrams_sent"], r["datagrams_received"],
            r["ingest"]["datagrams_received"],
            "yes" if r["waits"] == 0 and r["overruns"] == 0 else "no"))
    print("(MB/s; rx_*: datagrams received of those sent, by record and by plain ingest)")
    rec_med = statistics.median(r["MBps"] for r in rounds)
    wr_med = statistics.median(r["writer"]["MBps"] for r in rounds)
    disk_med = statistics.median(r["disk_MBps"] for r in rounds)
    print("median: disk %.0f MB/s; writer %.0f MB/s (%.2f of the disk); record over loopback "
          "%.0f MB/s (%.2f of the disk)" % (disk_med, wr_med, wr_med / disk_med, rec_med,
                                          rec_med / disk_med))
    out = {"bench": "record", "dir": a.dir or tempfile.gettempdir(), "streams": a.streams,
           "packet_size": a.packet_size, "packets_per_stream": packets, "rounds": rounds,
           "record_MBps_median": rec_med, "writer_MBps_median": wr_med,
           "disk_MBps_median": disk_med, "record_over_disk": rec_med / disk_med,
           "writer_over_disk": wr_med / disk_med, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
