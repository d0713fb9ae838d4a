#!/usr/bin/env bash
# Performance round 2 (issue 15): the rows of its table re-measured on the GPU
# machine (an H100 through 2026-11-25, an H200 from 2026-12-02; the name stays, the results
# files cite it) and its host, each benchmark in one run, from a build made
# here whose shared libraries the machine lacks travel in BUILD/dev (cmocka,
# jansson, liburing, libsodium, libxdp, UCX's libucs/libucm, libnuma) and ip(8)
# in BUILD/dev/bin:
#  1. bench_regcache: hits at 10k and 100k regions, 1 thread against UCX's
#     rcache (--reps 7, 2M operations each), then N = 2, 4, 8, 16 threads
#     pinned one a core first (--spread), all threads on the same regions and
#     each on its own slice (--disjoint), UCX's rows UCX_OPS a thread;
#  2. peerdma bench reg: the public API's cached reg+close and misses;
#  3. bench_cuda: the CUDA registration rows (hooks, tag check, host memory);
#  4. bench_ingest (a) at 64 B - 1500 B against the D2D copy of the same run;
#  5. bench_regcache's miss rows alone, cold and warm, at 10k and 100k new
#     regions a repetition (is the miss flat?), and its --latency floors;
#  6. the host's ceiling for the thread rows (bench_regcache --ceiling, 1-16
#     threads as step 1 places them), then 2 threads on CPUs 0,1 and on 0,8:
#     the ceiling and the shared 10k hit rows;
#  7. the socket path: bench/ingest/run-xdp.sh's steps SOCKET_PARTS (default
#     23: bench_ingest (g), every receiver, and the goal row at fixed rates);
#  8. hits inside regions (bench_regcache --inside 256: 1 MiB regions, a
#     random 4 KiB page of one), 1 thread, at 256, 10k and 100k regions,
#     UCX's rcache side by side, and BUILD/old/bench_regcache where it is
#     there, alternating with the new one for ROUNDS rounds.
# Each writes its table (.txt) and JSON under OUT. One call's 10 minutes do
# not hold them all: PARTS (default 12345678) picks steps, THREADS (default
# "2 4 8 16") the thread counts of step 1, UCX_OPS (default 20000) UCX's
# operations a thread in step 1's N-thread runs, ROUNDS (default 2) the new/old
# rounds of steps 2, 3 and 8.
# usage: [PARTS=..] [THREADS=..] [UCX_OPS=..] [ROUNDS=..] bench/run-round2-h100.sh BUILD OUT
set -uo pipefail
. "$(dirname "$0")/device-env.sh" "${1:?build dir}"
OUT=${2:?output dir}
mkdir -p "$OUT"
{
	date -u
	nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
	echo "$(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
} | tee "$OUT/regcache.txt"

PARTS=${PARTS:-12345678}
if [[ $PARTS == *1* ]]; then
echo "=== 1. bench_regcache"
{
	echo "--- threads 1"
	timeout 150 "$B/bench/regcache/bench_regcache" --sizes 10000,100000 --threads 1 --no-miss \
		--reps 7 --ops 2000000 --json "$OUT/rc-1-shared.json"
	for t in ${THREADS:-2 4 8 16}; do
		for mode in shared disjoint; do
			flag=
			[ $mode = disjoint ] && flag=--disjoint
			echo "--- threads $t, $mode"
			timeout 150 "$B/bench/regcache/bench_regcache" --sizes 10000,100000 --threads $t \
				--no-miss --reps 5 --ops 2000000 --spread --ucx-ops "${UCX_OPS:-20000}" $flag \
				--json "$OUT/rc-$t-$mode.json"
		done
	done
} >>"$OUT/regcache.txt" 2>&1
grep -E "^hit rand +10000|^---" "$OUT/regcache.txt"
fi

# Steps 2, 3 and 8: where BUILD/old holds the binaries of the code before a
# change, they run too, alternating with the new ones. ab NEW OLD FN runs FN
# with bin (the binary), v (new or old) and r (the round) set, ROUNDS rounds
# (its locals: FN sees them).
ab() {
	local r v
	for r in $(seq "${ROUNDS:-2}"); do
		for v in new old; do
			bin=$1
			[ $v = old ] && bin=$2
			[ -x "$bin" ] || continue
			echo "--- $v, round $r"
			"$3" 2>&1
		done
	done
}

if [[ $PARTS == *2* ]]; then
echo "=== 2. peerdma bench reg"
reg() { timeout 180 "$bin" bench reg --iters 200000 --json "$OUT/bench-reg-$v-$r.json"; }
ab "$B/peerdma" "$B/old/peerdma" reg >"$OUT/bench-reg.txt"
cat "$OUT/bench-reg.txt"
fi

if [[ $PARTS == *3* ]]; then
echo "=== 3. bench_cuda"
cuda() { timeout 180 "$bin" --json "$OUT/bench-cuda-$v-$r.json"; }
ab "$B/bench/cuda/bench_cuda" "$B/old/bench_cuda" cuda >"$OUT/bench-cuda.txt"
grep -iE "^---|reg|close|host|hit" "$OUT/bench-cuda.txt" | head -60
fi

if [[ $PARTS == *4* ]]; then
echo "=== 4. bench_ingest (a)"
timeout 300 "$B/bench/ingest/bench_ingest" --parts a --sizes 64,256,1024,1500 \
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

if [[ $PARTS == *6* ]]; then
echo "=== 6. the host's ceiling for the thread rows"
{
	echo "--- 1-16 threads, --spread"
	timeout 120 "$B/bench/regcache/bench_regcache" --no-hit --no-miss --ceiling --threads 16 \
		--spread --reps 5 --json "$OUT/rc-ceiling.json"
	for cpus in 0,1 0,8; do
		echo "--- 2 threads on CPUs $cpus"
		taskset -c $cpus timeout 100 "$B/bench/regcache/bench_regcache" --sizes 10000 --threads 2 \
			--no-miss --reps 5 --ops 2000000 --spread --ucx-ops 20000 --ceiling \
			--json "$OUT/rc-pair-$cpus.json"
	done
} >"$OUT/ceiling.txt" 2>&1
grep -vE "^(workload|ns:)" "$OUT/ceiling.txt"
fi

if [[ $PARTS == *8* ]]; then
echo "=== 8. hits inside regions"
inside() {
	timeout 150 "$bin" --inside 256 --sizes 256,10000,100000 --threads 1 --no-miss --reps 5 \
		--ops 1000000 --json "$OUT/rc-inside-$v-$r.json"
}
ab "$B/bench/regcache/bench_regcache" "$B/old/bench_regcache" inside >"$OUT/inside.txt"
grep -E "^hit|^---" "$OUT/inside.txt"
fi

if [[ $PARTS == *7* ]]; then
echo "=== 7. the socket path (run-xdp.sh)"
PARTS=${SOCKET_PARTS:-23} bash "$(dirname "$0")/ingest/run-xdp.sh" "$B" "$OUT" >/dev/null 2>&1
echo "rc=$?"
cat "$OUT/xdp.txt"
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
