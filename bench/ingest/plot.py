#!/usr/bin/env python3
"""Plots of bench_ingest's JSON (bench/results/ingest.json) with gnuplot.
usage: bench/ingest/plot.py [JSON] [OUTDIR]   (default bench/results/)"""
import json, os, subprocess, sys, tempfile

src = sys.argv[1] if len(sys.argv) > 1 else "bench/results/ingest.json"
out = sys.argv[2] if len(sys.argv) > 2 else os.path.dirname(src) or "."
d = json.load(open(src))
gpu = d.get("gpu") or "no GPU"
tmp = tempfile.mkdtemp()

def run(script):
    subprocess.run(["gnuplot"], input=script.encode(), check=True)

def histogram(name, title, rest):
    """A bar chart into OUT/name.png; rest: its axes and plot command."""
    run(f"""set terminal pngcairo size 900,560 noenhanced
set output '{out}/{name}.png'
set title '{title}'
set style data histograms
set style fill solid 0.8 border -1
""" + rest)

a = [r for r in d.get("a_deframe_vs_d2d", []) if "deframe_gbps" in r]
if a:
    f = os.path.join(tmp, "a.dat")
    with open(f, "w") as fh:
        for r in a:
            fh.write('"%d B" %f %f %f\n' % (r["packet_bytes"], r["deframe_gbps"], r["d2d_gbps"],
                                          100 * r["ratio_to_d2d"]))
    histogram("ingest-deframe", f"GPU deframer vs device-to-device copy ceiling (same run), {gpu}", f"""set ylabel 'GB/s (bytes read + written)'
set yrange [0:*]
set y2label '% of copy ceiling'
set y2range [0:110]
set y2tics
set key below horizontal
set grid ytics
plot '{f}' using 2:xtic(1) title 'deframer', '' using 3 title 'D2D copy ceiling', \\
     '' using 0:4 axes x1y2 with linespoints lw 2 pt 7 title '% of ceiling', \\
     90 axes x1y2 with lines dt 2 lc rgb 'red' title '90% goal'
""")

b = d.get("b_host_staged_vs_h2d", {})
if b.get("staged"):
    f = os.path.join(tmp, "b.dat")
    with open(f, "w") as fh:
        for r in b["staged"]:
            fh.write('"%d MiB" %f %f\n' % (r["chunk_bytes"] >> 20, r["h2d_chunked_gbps"], r["staged_gbps"]))
    peak = b["h2d_peak_gbps"]
    histogram("ingest-staged", f"Host-staged ingest vs H2D copy-engine peak ({peak:.1f} GB/s), 1500-byte packets, {gpu}",
              f"""set ylabel 'GB/s'
set yrange [0:{peak * 1.15:.1f}]
set key below horizontal
set grid ytics
plot '{f}' using 2:xtic(1) title 'H2D copies of this chunk size', '' using 3 title 'host-staged (copy + deframe)', \\
     {peak} with lines lw 2 title 'H2D peak', {0.9 * peak} with lines dt 2 lc rgb 'red' title '90% of peak'
""")

c = d.get("c_loopback", [])
if c:
    f = os.path.join(tmp, "c.dat")
    with open(f, "w") as fh:
        for r in c:
            rx = " %s" % r["rx_io"] if "rx_io" in r else ""  # older results: recvmmsg only
            fh.write('"%s%s x%d" %f\n' % (r["path"], rx, r["threads"], r["max_zero_loss_pps"] / 1e3))
        base = d.get("d_baseline_2014", {})
        if "max_zero_loss_pps" in base:
            fh.write('"2014: recv+copy/pkt" %f\n' % (base["max_zero_loss_pps"] / 1e3))
    histogram("ingest-loopback",
              "Loopback gen -> ingest, highest zero-loss rate (1500-byte packets; sender-limited where marked in JSON)",
              f"""set ylabel 'thousand packets/s'
set yrange [0:*]
set xtics rotate by -30
set grid ytics
plot '{f}' using 2:xtic(1) notitle
""")
e = [r for r in d.get("e_small_batches", []) if isinstance(r, dict)]
if e:
    f = os.path.join(tmp, "e.dat")
    with open(f, "w") as fh:
        for r in e:
            fh.write('"%s %d" %f %f %f %f\n' % (r["path"], r["packets_per_batch"], r["sync_stream_us"],
                                             r["sync_graph_us"], r["pipelined_stream_us"],
                                             r["pipelined_graph_us"]))
    histogram("ingest-small-batches",
              f"Small batches of 1500-byte packets back to back: stream vs CUDA graph launch, {gpu}",
              f"""set ylabel 'microseconds per batch'
set yrange [0:*]
set xtics rotate by -30
set key below horizontal
set grid ytics
plot '{f}' using 2:xtic(1) title 'stream, wait each', '' using 3 title 'graph, wait each', \\
     '' using 4 title 'stream, pipelined', '' using 5 title 'graph, pipelined'
""")

print("plots written to", out)
