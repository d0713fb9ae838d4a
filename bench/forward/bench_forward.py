#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""peerdma forward against UCX's own ucx_perftest, same message size, same
transport, side by side in one run (issue 16: forward at >= 90% of it).

Each round, alternating (both see the same machine state):
  perftest  ucx_perftest -t ucp_am_bw -s SIZE -H HDR -e -z between two
            processes over loopback: UCP active messages of SIZE data bytes
            with a HDR-byte header (the size of forward's block header for a
            one-packet block), peer error handling and pre-registered memory,
            as forward sends them. Its "overall" bandwidth (MiB/s) is
            converted to MB/s (1e6 bytes).
  plain     the same without -e -z -H (UCX 1.13's perftest over tcp loses
            about half its bandwidth with -e, peer error handling, which
            forward needs to see a consumer die): the higher yardstick.
  forward   bench_forward (the forwarder fed by a synthetic source of
            SIZE-byte blocks: peerdma forward's code from the subscription
            on; gen -> ingest over UDP loopback could not feed it) and a
            peerdma consume: the bytes the consumer received over the time
            from its first block to its last, in MB/s; with the blocks the
            forwarder dropped for lack of credit (it never waits for a
            consumer: a consumer slower than the source shows as drops).
The transport is UCX_TLS (default tcp) for both; any other UCX_* setting in
the environment applies to both. One rendezvous lane (UCX_MAX_RNDV_RAILS=1
unless set, --rndv-lanes 0: UCX's own default of 2) for both: perftest's
endpoint, made from a worker address, has one tcp lane (lo); forward's,
made through UCX's connection manager (a listener), has one for every tcp
interface both ends have (lo and eth0 here), and a 64 KiB rendezvous split
over two tcp connections to the same host costs the consumer four sends
back per block instead of two (strace). Prints a table (each round, the medians, the
ratio forward / perftest per size) and writes JSON (--json).
  paced     forward again with the source publishing at --paced (0.9) x
            the round's perftest rate, as a fixed-rate sender does: does it
            carry that without dropping a block (the real-time form of the
            goal, >= 90% of perftest)?
usage: bench/forward/bench_forward.py [--build build] [--sizes 65536,1048576]
       [--seconds 4] [--rounds 3] [--stage] [--eager-max 262144] [--paced 0.9]
       [--rndv-lanes 1] [--json FILE]"""
import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HDR = 104  # pdma_fwd_block_hdr_len(1): forward's AM header for a 1-packet block
MIB = 1048576


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def perftest(size, seconds, guess_mbps, plain=False, eager=False):
    """ucx_perftest's overall bandwidth in MB/s; iterations for ~seconds at
    the rate the previous round saw (guess). eager: UCX_RNDV_THRESH=inf, every
    message an eager one, as forward --eager-max sends them."""
    env = dict(os.environ, UCX_RNDV_THRESH="inf") if eager else None
    iters = max(2000, int(guess_mbps * 1e6 * seconds / size))
    port = str(free_port())
    args = ["-t", "ucp_am_bw", "-s", str(size), "-n", str(iters), "-w", str(max(100, iters // 20)),
            "-p", port] + ([] if plain else ["-H", str(HDR), "-e", "-z"])
    srv = subprocess.Popen(["ucx_perftest"] + args, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, env=env)
    time.sleep(0.5)
    out = ""
    for _ in range(20):  # the server may not listen yet
        cli = subprocess.run(["ucx_perftest", "127.0.0.1"] + args, capture_output=True, text=True,
                             timeout=600, env=env)
        out = cli.stdout + cli.stderr
        if cli.returncode == 0:
            break
        time.sleep(0.3)
    srv.wait(timeout=60)
    m = re.search(r"^Final:\s+(\d+)\s+\S+\s+\S+\s+\S+\s+\S+\s+(\S+)", out, re.M)
    if not m:
        sys.exit("bench_forward: ucx_perftest gave no Final line:\n" + out[-2000:])
    return float(m.group(2)) * MIB / 1e6, iters


def forward(build, size, seconds, stage, tmp, eager_max=0, rate=0, credits=16):
    bf = os.path.join(build, "bench", "forward", "bench_forward")
    tool = os.path.join(build, "peerdma")
    err = open(os.path.join(tmp, "bf.err"), "w+")
    cmd = [bf, "--size", str(size), "--seconds", str(seconds), "--eager-max", str(eager_max),
           "--rate", str(int(rate)), "--credits", str(credits),
           "--pool", str(max(64, 48 + credits))] + (["--stage"] if stage else [])
    src = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
    port = None
    for _ in range(600):
        err.seek(0)
        m = re.search(r"UCX listener on 127\.0\.0\.1:(\d+)", err.read())
        if m:
            port = m.group(1)
            break
        if src.poll() is not None:
            break
        time.sleep(0.1)
    if not port:
        src.kill()
        err.seek(0)
        sys.exit("bench_forward: the source did not start:\n" + err.read())
    cj = os.path.join(tmp, "consume.json")
    c = subprocess.run([tool, "consume", "--connect", "127.0.0.1:" + port,
                        "--pool-blocks", str(max(64, 2 * credits)),
                        "--json", cj, "-q"], capture_output=True, text=True, timeout=seconds + 120)
    out, _ = src.communicate(timeout=120)
    if c.returncode or src.returncode:
        err.seek(0)
        sys.exit("bench_forward: forward round failed:\n%s\n%s" % (c.stderr, err.read()))
    j = json.load(open(cj))
    f = json.loads(out.strip().splitlines()[-1])
    err.seek(0)
    desc = re.search(r"UCX listener on \S+; (.*)", err.read()).group(1)
    return j["MBps"], f, j, desc


def paced_run(a, size, secs, tmp, r, perftest_mbps, eager_max=0):
    """forward with the source at a.paced x perftest_mbps: what arrived and
    what was dropped (printed and returned)."""
    m, f, _, _ = forward(a.build, size, secs, a.stage, tmp, eager_max=eager_max,
                         rate=a.paced * perftest_mbps, credits=a.credits)
    print("size %8d round %d: %spaced at %.0f%% of %sperftest: offered %8.1f MB/s, received %8.1f, "
          "%d of %d blocks dropped" %
          (size, r, "eager, " if eager_max else "", 100 * a.paced, "eager " if eager_max else "",
           f["offered_MBps"], m, f["dropped_blocks"], f["blocks_in"]), flush=True)
    return {"perftest_MBps": perftest_mbps, "offered_MBps": f["offered_MBps"], "received_MBps": m,
            "dropped_blocks": f["dropped_blocks"], "blocks_in": f["blocks_in"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--sizes", default="65536,1048576")
    ap.add_argument("--seconds", type=float, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--stage", action="store_true", help="forward stages blocks (host copy first)")
    ap.add_argument("--eager-max", type=int, default=262144,
                    help="sizes up to this also run eager: forward --eager-max beside perftest "
                         "with UCX_RNDV_THRESH=inf (0: not)")
    ap.add_argument("--paced", type=float, default=0.9,
                    help="also run the source paced at this fraction of the round's perftest rate: "
                         "does forward carry it without dropping a block? (0: not)")
    ap.add_argument("--credits", type=int, default=16,
                    help="blocks in flight per consumer (forward --credits; the pools grow with it)")
    ap.add_argument("--rndv-lanes", type=int, default=1,
                    help="UCX_MAX_RNDV_RAILS for both, unless set (0: UCX's default)")
    ap.add_argument("--json")
    a = ap.parse_args()
    if not shutil.which("ucx_perftest"):
        sys.exit("bench_forward: no ucx_perftest (Debian's ucx-utils: scripts/install-deps bench)")
    os.environ.setdefault("UCX_TLS", "tcp")
    # what peerdma sets for its own load of UCX (ingest/forward/ucx.h), so that
    # both sides run UCX alike
    os.environ.setdefault("UCX_MEM_EVENTS", "no")
    if a.rndv_lanes:
        if "UCX_MAX_RNDV_LANES" not in os.environ:  # its alias
            os.environ.setdefault("UCX_MAX_RNDV_RAILS", str(a.rndv_lanes))
    sizes = [int(x, 0) for x in a.sizes.split(",")]
    rows, res = [], {"transport": os.environ["UCX_TLS"], "header_bytes": HDR, "rounds": a.rounds,
                     "credits": a.credits,
                     "ucx_env": {k: v for k, v in os.environ.items() if k.startswith("UCX_")},
                     "host": socket.gethostname(), "nproc": os.cpu_count(), "sizes": []}
    tmp = tempfile.mkdtemp()
    try:
        for size in sizes:
            pt, pp, fw, pe, fe, guess, desc = [], [], [], [], [], 1000.0, ""
            paced, paced_e = [], []
            eager = size <= a.eager_max
            secs = int(max(1, a.seconds))
            for r in range(a.rounds):
                p, iters = perftest(size, a.seconds, guess)
                q, _ = perftest(size, a.seconds, guess, plain=True)
                guess = max(p, q)
                m, f, j, desc = forward(a.build, size, secs, a.stage, tmp, credits=a.credits)
                pt.append(p)
                pp.append(q)
                fw.append(m)
                rows.append((size, r, p, q, m, f["dropped_blocks"], f["blocks_in"]))
                print("size %8d round %d: perftest %8.1f MB/s (plain %8.1f, %d msgs)   forward %8.1f "
                      "MB/s (%d blocks received, %d of %d dropped for no credit)" %
                      (size, r, p, q, iters, m, j["blocks"], f["dropped_blocks"], f["blocks_in"]),
                      flush=True)
                if a.paced:
                    paced.append(paced_run(a, size, secs, tmp, r, p))
                if eager:
                    p, _ = perftest(size, a.seconds, guess, eager=True)
                    m, f, j, _ = forward(a.build, size, secs, a.stage, tmp, eager_max=a.eager_max,
                                         credits=a.credits)
                    if f["eager_blocks"] != f["sent_blocks"]:
                        sys.exit("bench_forward: --eager-max sent %d of %d blocks eager" %
                                 (f["eager_blocks"], f["sent_blocks"]))
                    pe.append(p)
                    fe.append(m)
                    print("size %8d round %d: eager: perftest %8.1f MB/s   forward %8.1f MB/s "
                          "(%d of %d dropped for no credit)" %
                          (size, r, p, m, f["dropped_blocks"], f["blocks_in"]), flush=True)
                    if a.paced:
                        paced_e.append(paced_run(a, size, secs, tmp, r, p, eager_max=a.eager_max))
            mp, mq, mf = statistics.median(pt), statistics.median(pp), statistics.median(fw)
            row = {"size": size, "perftest_MBps": pt, "perftest_plain_MBps": pp,
                   "forward_MBps": fw, "perftest_median": mp,
                   "perftest_plain_median": mq, "forward_median": mf,
                   "ratio": mf / mp if mp else 0,
                   "ratio_plain": mf / mq if mq else 0, "forward": desc}
            if paced:
                row["paced"] = paced
            if paced_e:
                row["eager_paced"] = paced_e
            if eager:
                row.update({"eager_perftest_MBps": pe, "eager_forward_MBps": fe,
                            "eager_perftest_median": statistics.median(pe),
                            "eager_forward_median": statistics.median(fe),
                            "eager_forward_to_perftest": statistics.median(fe) / mp if mp else 0,
                            "eager_ratio": statistics.median(fe) / statistics.median(pe)})
            res["sizes"].append(row)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("\nUCX_TLS=%s, %d rounds, medians (MB/s = 1e6 bytes/s)" % (res["transport"], a.rounds))
    print("%10s %14s %14s %14s %8s %8s" % ("size", "perftest -e", "perftest", "forward", "ratio",
                                           "ratio"))
    print("%10s %14s %14s %14s %8s %8s" % ("", "-z -H", "(plain)", "", "to -e", "to plain"))
    for s in res["sizes"]:
        print("%10d %14.1f %14.1f %14.1f %7.1f%% %7.1f%%" % (
            s["size"], s["perftest_median"], s["perftest_plain_median"], s["forward_median"],
            100 * s["ratio"], 100 * s["ratio_plain"]))
    eg = [s for s in res["sizes"] if "eager_ratio" in s]
    if eg:
        print("\neager (forward --eager-max %d; perftest with UCX_RNDV_THRESH=inf)" % a.eager_max)
        print("%10s %14s %14s %8s %14s" % ("size", "perftest", "forward", "ratio",
                                          "fwd/perftest -e"))
        for s in eg:
            print("%10d %14.1f %14.1f %7.1f%% %13.1f%%" % (
                s["size"], s["eager_perftest_median"], s["eager_forward_median"],
                100 * s["eager_ratio"], 100 * s["eager_forward_to_perftest"]))
    if res["sizes"]:
        print("forward: %s" % res["sizes"][0]["forward"])
    if a.paced:
        print("\npaced: the source at %.0f%% of the round's perftest rate (eager: of eager perftest); "
              "per round: received MB/s / blocks dropped" % (100 * a.paced))
        for s in res["sizes"]:
            for key, name in (("paced", "rendezvous"), ("eager_paced", "eager")):
                if key in s:
                    print("%10d %-10s %s" % (s["size"], name, "   ".join(
                        "%.0f/%.0f: %d" % (x["received_MBps"], x["offered_MBps"], x["dropped_blocks"])
                        for x in s[key])))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
