#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The staging path's cost on a GPU machine (issue 16): GPU blocks forwarded
where UCX has no CUDA memory type (Debian's) are copied to pinned host
buffers first. Measured in one run:
  peak     bench_forward --d2h-peak: cuMemcpyDtoH of one block's bytes into
           pinned (and into pageable) host memory, back to back: the copy
           engines' D2H rate for that size; and one copy every 1.28 ms
           (this run's block rate), the rate of a copy that starts alone;
  staging  peerdma forward --path host-staged (blocks in GPU memory) fed by
           gen over loopback, one peerdma consume taking every stream
           (--dir: SigMF, checked sample for sample against gen's pcap with
           tests/record/sigmf_check.py unless --no-verify): the forwarder's
           staged bytes over the time spent in its staging copies, the wait
           before each copy for the block's event (its production on the GPU)
           apart, and what the consumer received per second.
Prints a table and the ratio staging / pinned peak; JSON with --json.
Exit 77 without a CUDA device.
gen is paced (--rate packets/s, all streams): a consumer slower than the
streams loses blocks at the forwarder (counted, no_credit), and the bytes
then cannot all be verified; the table says how many.
usage: bench/forward/stage_gpu.py [--build build] [--packet-size 8192]
       [--packets 20000] [--streams 4] [--rate 50000] [--block-packets 64]
       [--credits 32] [--json FILE] [--no-verify]"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CHECK = os.path.join(HERE, "..", "..", "tests", "record", "sigmf_check.py")


def wait_line(path, rx, proc, secs=60):
    for _ in range(int(secs * 10)):
        m = re.search(rx, open(path).read())
        if m:
            return m
        if proc.poll() is not None:
            return None
        time.sleep(0.1)
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--packet-size", type=int, default=8192)
    ap.add_argument("--packets", type=int, default=20000)
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--block-packets", type=int, default=64)
    ap.add_argument("--rate", type=int, default=50000)
    ap.add_argument("--credits", type=int, default=32)
    ap.add_argument("--json")
    ap.add_argument("--no-verify", action="store_true")
    a = ap.parse_args()
    os.environ.setdefault("UCX_TLS", "tcp")
    tool = os.path.join(a.build, "peerdma")
    bf = os.path.join(a.build, "bench", "forward", "bench_forward")
    payload = a.packet_size - 28 - 4  # header with class ID and timestamps, trailer
    block = a.block_packets * payload
    p = subprocess.run([bf, "--d2h-peak", "--size", str(block), "--seconds", "2"],
                       capture_output=True, text=True)
    if p.returncode == 77:
        print("stage_gpu: skipped: no CUDA device")
        sys.exit(77)
    if p.returncode:
        sys.exit("stage_gpu: bench_forward --d2h-peak failed:\n" + p.stdout + p.stderr)
    peak = json.loads(p.stdout.strip().splitlines()[-1])

    with tempfile.TemporaryDirectory() as d:
        ferr, fj, cj = os.path.join(d, "fwd.err"), os.path.join(d, "fwd.json"), os.path.join(d, "c.json")
        fwd = subprocess.Popen([tool, "forward", "--path", "host-staged", "--port", "0", "--listen",
                                "127.0.0.1", "--fwd-port", "0", "--idle", "1500", "--block-packets",
                                str(a.block_packets), "--credits", str(a.credits), "--pool-blocks",
                                str(16 + 2 * a.credits), "--json", fj], stderr=open(ferr, "w"))
        m = wait_line(ferr, r"listening on 127\.0\.0\.1:(\d+)", fwd)
        if not m:
            fwd.kill()
            err = open(ferr).read()
            if "needs a CUDA device" in err:
                print("stage_gpu: skipped: no CUDA device")
                sys.exit(77)
            sys.exit("stage_gpu: forward did not start:\n" + err)
        uport = m.group(1)
        fport = re.search(r"UCX listener on 127\.0\.0\.1:(\d+)", open(ferr).read()).group(1)
        how = re.search(r"blocks in GPU memory: [^\n]*", open(ferr).read()).group(0)
        cerr = os.path.join(d, "c.err")
        cargs = [tool, "consume", "--connect", "127.0.0.1:" + fport, "--name", "gpu", "--pool-blocks",
                 str(2 * a.credits), "--max-streams", str(max(16, a.streams)), "--json", cj, "-q"]
        if not a.no_verify:
            os.mkdir(os.path.join(d, "rec"))
            cargs += ["--dir", os.path.join(d, "rec"), "--prefix", "cap", "--no-sync"]
        con = subprocess.Popen(cargs, stderr=open(cerr, "w"))
        if not wait_line(cerr, r"receiving from", con):
            sys.exit("stage_gpu: consume did not connect:\n" + open(cerr).read())
        pcap = os.path.join(d, "sent.pcap")
        g = subprocess.run([tool, "gen", "--port", uport, "--streams", str(a.streams), "--packets",
                            str(a.packets), "--packet-size", str(a.packet_size), "--loss", "2",
                            "--seed", "3", "--rate", str(a.rate), "--pcap", pcap], capture_output=True, text=True)
        if g.returncode:
            sys.exit("stage_gpu: gen failed:\n" + g.stderr)
        if fwd.wait(timeout=300) or con.wait(timeout=300):
            sys.exit("stage_gpu: forward or consume failed:\n%s\n%s" % (open(ferr).read(), open(cerr).read()))
        f = json.load(open(fj))
        c = json.load(open(cj))
        verified = None
        if not a.no_verify:
            v = subprocess.run([sys.executable, CHECK, os.path.join(d, "rec"), "cap", pcap, "10000000"],
                               capture_output=True, text=True)
            print(v.stdout, end="")
            verified = v.returncode == 0
    fw = f["forward"]
    res = {"block_bytes": block, "peak": peak, "forward": how,
           "staged_blocks": fw["staged_blocks"], "staged_bytes": fw["staged_bytes"],
           "stage_seconds": fw["stage_seconds"], "stage_GBps": fw["stage_GBps"],
           "stage_wait_seconds": fw["stage_wait_seconds"],
           "ratio_to_pinned_peak": fw["stage_GBps"] / peak["d2h_pinned_GBps"],
           "consumer_MBps": c["MBps"], "consumer_blocks": c["blocks"],
           "stage_drops": fw.get("stage_drops", 0),
           "receive": {k: f.get(k) for k in ("datagrams", "socket_drops", "ring_overruns")},
           "dropped_blocks": fw["dropped_blocks"], "bytes_verified": verified}
    print("forward: %s" % how)
    print("%-38s %10s" % ("", "GB/s"))
    print("%-38s %10.2f" % ("D2H peak, pinned (cuMemcpyDtoH, %d B)" % block, peak["d2h_pinned_GBps"]))
    print("%-38s %10.2f" % ("D2H, pageable", peak["d2h_pageable_GBps"]))
    if "d2h_registered_GBps" in peak:
        print("%-38s %10.2f" % ("D2H, registered (cuMemHostRegister)", peak["d2h_registered_GBps"]))
    if "d2h_registered_isolated_GBps" in peak:
        iso = peak["d2h_registered_isolated_GBps"]
        res["ratio_to_isolated"] = fw["stage_GBps"] / iso
        print("%-38s %10.2f   (one copy every 1.28 ms, as staged; forward's: %.1f%% of it)" % (
            "D2H, registered, isolated copies", iso, 100 * res["ratio_to_isolated"]))
    print("%-38s %10.2f   (%.1f%% of pinned peak, %d blocks)" % (
        "forward's staging copies", fw["stage_GBps"], 100 * res["ratio_to_pinned_peak"],
        fw["staged_blocks"]))
    print("%-38s %10.2f us a block before the copies (each block's event)" % (
        "waiting for the blocks' production",
        1e6 * fw["stage_wait_seconds"] / max(1, fw["staged_blocks"])))
    print("%-38s %10.2f us a block (%.2f us at the pinned peak)" % (
        "staging copy", 1e6 * fw["stage_seconds"] / max(1, fw["staged_blocks"]),
        1e6 * block / (peak["d2h_pinned_GBps"] * 1e9)))
    print("%-38s %10.2f" % ("consumer received", c["MBps"] / 1e3))
    if fw["dropped_blocks"]:
        print("blocks dropped at the forwarder: %d (%d for want of a staging buffer)" %
              (fw["dropped_blocks"], fw.get("stage_drops", 0)))
    if verified is not None:
        print("bytes verified against gen's pcap: %s" % ("yes" if verified else "NO"))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(res, fh, indent=2)
            fh.write("\n")
    sys.exit(0 if verified in (None, True) else 1)


if __name__ == "__main__":
    main()
