#!/usr/bin/env bash
# Performance round 2 (issue 15): the rows of its table re-measured on the GPU
# machine's host in one call of the device tool, from a build made here whose
# shared libraries the machine lacks travel in BUILD/dev (cmocka, jansson,
# liburing, UCX's libucs/libucm and libnuma):
#  1. bench_regcache: hits at 10k and 100k regions with 1 and N = 2, 4, 8, 16
#     threads, all threads on the same regions and each on its own slice
#     (--disjoint), UCX's rcache side by side (miss + pin: step 5);
#  2. peerdma bench reg: the public API's cached reg+close and misses;
#  3. bench_cuda: the CUDA registration rows (hooks, tag check, host memory);
#  4. bench_ingest (a) at 64 B - 1500 B against the D2D copy of the same run,
#     and (c) gen -> ingest over loopback, 1500 B, 1-4 receive threads;
#  5. bench_regcache's miss rows alone, cold and warm, at 10k and 100k new
#     regions a repetition (is the miss flat?), and its --latency floors.
# Each writes its table (.txt) and JSON under OUT. One call's 10 minutes do
# not hold them all: PARTS (default 12345) picks steps, THREADS (default
# "2 4 8 16") the thread counts of step 1, ROUNDS (default 2) the new/old
# rounds of steps 2 and 3; UCX's rcache takes microseconds a
# hit with 4 or more threads, so step 1 runs 200k operations a thread.
# usage: [PARTS=..] [THREADS=..] [ROUNDS=..] bench/run-round2-h100.sh BUILD OUT
set -uo pipefail
. "$(dirname "$0")/device-env.sh" "${1:?build dir}"
OUT=${2:?output dir}
mkdir -p "$OUT"
{
	date -u
	nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
	echo "$(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
} | tee "$OUT/regcache.txt"

PARTS=${PARTS:-12345}
if [[ $PARTS == *1* ]]; then
echo "=== 1. bench_regcache"
for t in ${THREADS:-2 4 8 16}; do
	for mode in shared disjoint; do
		flag=
		[ $mode = disjoint ] && flag=--disjoint
		echo "--- threads $t, $mode"
		timeout 150 "$B/bench/regcache/bench_regcache" --sizes 10000,100000 --threads $t --no-miss \
			--reps 3 --ops 200000 $flag --json "$OUT/rc-$t-$mode.json"
	done
done >>"$OUT/regcache.txt" 2>&1
grep -E "^hit rand +10000|^---" "$OUT/regcache.txt"
fi

# 2 and 3: where BUILD/old holds the binaries of the code before a change
# (peerdma, bench_cuda), they run too, alternating with the new ones
if [[ $PARTS == *2* ]]; then
echo "=== 2. peerdma bench reg"
for r in $(seq "${ROUNDS:-2}"); do
	for v in new old; do
		bin=$B/peerdma
		[ $v = old ] && bin=$B/old/peerdma
		[ -x "$bin" ] || continue
		echo "--- $v, round $r"
		timeout 180 "$bin" bench reg --iters 200000 --json "$OUT/bench-reg-$v-$r.json" 2>&1
	done
done >"$OUT/bench-reg.txt"
cat "$OUT/bench-reg.txt"
fi

if [[ $PARTS == *3* ]]; then
echo "=== 3. bench_cuda"
for r in $(seq "${ROUNDS:-2}"); do
	for v in new old; do
		bin=$B/bench/cuda/bench_cuda
		[ $v = old ] && bin=$B/old/bench_cuda
		[ -x "$bin" ] || continue
		echo "--- $v, round $r"
		timeout 180 "$bin" --json "$OUT/bench-cuda-$v-$r.json" 2>&1
	done
done >"$OUT/bench-cuda.txt"
grep -iE "^---|reg|close|host|hit" "$OUT/bench-cuda.txt" | head -60
fi

if [[ $PARTS == *4* ]]; then
echo "=== 4. bench_ingest (a), (c)"
timeout 300 "$B/bench/ingest/bench_ingest" --parts ac --sizes 64,256,1024,1500 --rx recvmmsg,io_uring \
	--json "$OUT/ingest.json" >"$OUT/ingest.txt" 2>&1
echo "rc=$?"
cat "$OUT/ingest.txt"
fi
if [[ $PARTS == *5* ]]; then
echo "=== 5. bench_regcache miss + pin, cold and warm"
for n in 10000 100000; do
	echo "--- $n new regions a repetition"
	timeout 150 "$B/bench/regcache/bench_regcache" --no-hit --reps 5 --miss-ops $n \
		--json "$OUT/rc-miss-$n.json" 2>&1
done >"$OUT/regcache-miss.txt"
echo "--- floors: DRAM latency, a cache line between two cores" >>"$OUT/regcache-miss.txt"
timeout 120 "$B/bench/regcache/bench_regcache" --no-hit --no-miss --latency \
	--json "$OUT/rc-latency.json" >>"$OUT/regcache-miss.txt" 2>&1
grep -E "^miss|^---|KiB|cache line" "$OUT/regcache-miss.txt"
fi

# the regcache runs in one file (the device tool returns at most 8)
python3 - "$OUT" <<'PY'
import glob, json, os, sys
o = sys.argv[1]
runs = {}
for f in sorted(glob.glob(os.path.join(o, "rc-*.json"))):
    runs[os.path.basename(f)[3:-5]] = json.load(open(f))
    os.remove(f)
json.dump(runs, open(os.path.join(o, "regcache.json"), "w"), indent=1)
for kind in ("bench-reg", "bench-cuda"):
    runs = {}
    for f in sorted(glob.glob(os.path.join(o, kind + "-*.json"))):
        runs[os.path.basename(f)[len(kind) + 1:-5]] = json.load(open(f))
        os.remove(f)
    json.dump(runs, open(os.path.join(o, kind + ".json"), "w"), indent=1)
PY
date -u
