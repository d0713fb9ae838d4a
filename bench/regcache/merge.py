#!/usr/bin/env python3
"""Pool several bench_regcache --json runs: per row, the median of all samples
of all runs (each sample: one repetition's mean ns per get+put per thread).
usage: merge.py OUT_PREFIX run1.json run2.json ...  (writes .json .dat .txt)"""
import json
import statistics
import sys

out, runs = sys.argv[1], [json.load(open(f)) for f in sys.argv[2:]]
rows = []
for i, r0 in enumerate(runs[0]["rows"]):
    row = {k: r0[k] for k in ("workload", "pattern", "regions", "threads")}
    for lib in ("peerdma", "ucx"):
        samples = [s for run in runs for s in run["rows"][i][lib]["ns_samples"]]
        ns = statistics.median(samples)
        row[lib] = {"ns_per_op": ns, "mops_total_of_median": row["threads"] * 1e3 / ns,
                    "ns_min": min(samples), "ns_max": max(samples), "ns_samples": samples,
                    "errors": sum(run["rows"][i][lib]["errors"] for run in runs)}
    row["ratio_ns"] = row["peerdma"]["ns_per_op"] / row["ucx"]["ns_per_op"]
    # Paired: repetition k of both ran back to back (same load), so the
    # median of the per-repetition ratios is less noisy than a ratio of medians.
    row["ratio_paired_median"] = statistics.median(
        p / u for p, u in zip(row["peerdma"]["ns_samples"], row["ucx"]["ns_samples"]))
    rows.append(row)
merged = {"machine": runs[0]["machine"], "runs": len(runs),
          "runs_loadavg_1min": [[r["machine"].get("loadavg_1min_at_start"),
                                 r["machine"].get("loadavg_1min_at_end")] for r in runs],
          "reps_per_run": runs[0]["reps"], "ops_per_thread": runs[0]["ops_per_thread"],
          "statistic": "median of all repetitions of all runs; ns per get+put per thread",
          "rows": rows}
json.dump(merged, open(out + ".json", "w"), indent=2)
with open(out + ".txt", "w") as f:
    f.write("%-16s %8s %3s | %10s %15s | %10s %15s | %6s %6s\n" % (
        "workload", "regions", "thr", "peerdma ns", "(min-max)", "UCX ns", "(min-max)", "ratio",
        "paired"))
    for r in rows:
        p, u = r["peerdma"], r["ucx"]
        f.write("%-16s %8d %3d | %10.1f %15s | %10.1f %15s | %6.3f %6.3f\n" % (
            r["workload"], r["regions"], r["threads"], p["ns_per_op"],
            "(%.1f-%.1f)" % (p["ns_min"], p["ns_max"]), u["ns_per_op"],
            "(%.1f-%.1f)" % (u["ns_min"], u["ns_max"]), r["ratio_ns"],
            r["ratio_paired_median"]))
    f.write("ns: median over %d runs x %d repetitions of the mean time per get+put per thread; "
            "ratio: peerdma ns / UCX ns; paired: median of the per-repetition ratios "
            "(both caches back to back)\n" % (len(runs), runs[0]["reps"]))
sizes = sorted({r["regions"] for r in rows if r["workload"].startswith("hit")})
with open(out + ".dat", "w") as f:
    f.write("# regions pdma_rand_1t ucx_rand_1t pdma_seq_1t ucx_seq_1t pdma_rand_Nt ucx_rand_Nt "
            "pdma_seq_Nt ucx_seq_Nt\n")
    for n in sizes:
        v = [0.0] * 8
        for r in rows:
            if r["regions"] != n or not r["workload"].startswith("hit"):
                continue
            col = (2 if r["pattern"] == "seq" else 0) + (4 if r["threads"] > 1 else 0)
            v[col], v[col + 1] = r["peerdma"]["ns_per_op"], r["ucx"]["ns_per_op"]
        f.write("%d %s\n" % (n, " ".join("%.2f" % x for x in v)))
print(open(out + ".txt").read(), end="")
