#!/usr/bin/env bash
# The GPU deframer's tests and benchmarks in one call on the GPU machine
# (device tool), from binaries built on the development machine (nvcc there
# compiles the modules) and carried in DIR with the shared libraries the image
# lacks (cmocka, jansson, liburing), plus the build tree BUILD for ctest:
#  1. bench_ingest (x): the deframer's kernels (auto, v11, v16, v7s) next to copies
#     of the same data volume and probes of v11's passes; everything after it
#     runs the default kernel (auto), or $KERNEL when set (PEERDMA_DFR_KERNEL);
#  2. ctest -L gpu -V of BUILD (test_deframer, test_cuda, test_cuda_cudart,
#     test_mr_cuda), and test_ingest_loopback_mt (its GPU-path branches);
#  3. bench_ingest (a)-(e);
#  4. gen -> ingest end to end through the GPU paths;
#  5. an Nsight Compute profile (DRAM bytes) of the deframer at 1 KiB;
#  6. compute-sanitizer memcheck of test_deframer.
#   usage: bench/ingest/run-gpu.sh DIR BUILD   (results in $OUT)
set -uo pipefail
D=$(readlink -f "${1:-.vrt-carry}")
B=$(readlink -f "${2:-build-vrt}")
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
src=$(readlink -f "$(dirname "$0")/../..")
# The library's module for the tests and the tool, the benchmarks' module
# (the same objects plus the measurements) for bench_ingest.
export LD_LIBRARY_PATH=$D PEERDMA_VRT_CUDA=$D/libpeerdma_vrt_cuda.so \
	PEERDMA_VRT_CUDA_BENCH=$D/libpeerdma_vrt_cuda_bench.so
exec > >(tee "$OUT/run.log") 2>&1
date -u; uname -r
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader

echo "=== 1. kernels and copies (bench_ingest x)"
timeout 150 "$D/bench_ingest" --parts x --sizes 64,256,1024,1500,8192 --json "$OUT/x.json" | tee "$OUT/x.txt"
best=${KERNEL:-auto}
export PEERDMA_DFR_KERNEL=$best
echo "kernel used from here on: $best"

echo "=== 2. ctest -L gpu, test_ingest_loopback_mt"
. "$src/tests/gpu/ctest-dir.sh"
bdir=$(ctest_dir "$B" "$src")
{
	echo "# $(date -u '+%F %T UTC') $(uname -r) PEERDMA_DFR_KERNEL=$best"
	nvidia-smi --query-gpu=name,driver_version,pci.bus_id,memory.total --format=csv,noheader
	(cd "$bdir" && ctest -L gpu -V --timeout 300)
	# ingest's sessions on the GPU paths (their GPU branches run only here)
	(cd "$bdir" && ctest -R test_ingest_loopback_mt -V --timeout 300)
} >"$OUT/gpu-tests.log" 2>&1
grep -E "tests passed|Passed|Failed|\*\*\*" "$OUT/gpu-tests.log" | tail -8

echo "=== 3. bench_ingest (a)-(e)"
timeout 330 "$D/bench_ingest" --parts "${BENCH_PARTS:-abcde}" --rx "${BENCH_RX:-recvmmsg,io_uring}" \
	--json "$OUT/abcde.json" | tee "$OUT/ingest.txt"
echo "bench rc=$?"

echo "=== 4. gen -> ingest through the GPU paths"
for p in host-staged zero-copy; do
	timeout 30 "$D/peerdma" ingest --path $p -p 4991 -t 2 -i 700 -q -j "$OUT/e2e-$p.json" &
	pid=$!
	sleep 0.5
	timeout 20 "$D/peerdma" gen -p 4991 -s 4 -n 20000 -S 1500 --loss 4 --loss-burst 16 --dup 3 --reorder 5 \
		-r 400000 -j >"$OUT/e2e-gen-$p.json"
	wait $pid
	echo "path $p rc=$?"
	echo "--- gen"; cat "$OUT/e2e-gen-$p.json"; echo "--- ingest"; cat "$OUT/e2e-$p.json"
	rm -f "$OUT/e2e-gen-$p.json" "$OUT/e2e-$p.json"
done >"$OUT/e2e.log" 2>&1
grep -E "rc=|gpu_launch|gpu_kernel" "$OUT/e2e.log"

NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
if [ -n "$NCU" ]; then
	echo "=== 5. ncu, 1 KiB packets"
	PEERDMA_BENCH_WARMUP=0 timeout 90 "$NCU" --clock-control none -k 'regex:dfr_onepass|skel_kernel|dfr_hdr_pass|dfr_copy_pass' \
		--section MemoryWorkloadAnalysis_Tables \
		--metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,gpu__time_duration.sum \
		"$D/bench_ingest" --parts x --sizes 1024 --iters 1 --x "skel4,v7s,v11" >"$OUT/ncu.txt" 2>&1
	echo "ncu rc=$?"
	grep -E "^  [a-z_ ]+.*\(|dram__|lts__|gpu__time|local" "$OUT/ncu.txt" | sed 's/(const unsigned char.*//; s/(pdma_dfr_config.*//'
fi

if command -v compute-sanitizer >/dev/null; then
	echo "=== 6. compute-sanitizer memcheck test_deframer"
	timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 "$D/test_deframer" >"$OUT/sanitizer.log" 2>&1
	echo "sanitizer rc=$?"
	tail -n 3 "$OUT/sanitizer.log"
fi

python3 - "$OUT" "$best" <<'PY'
import json, os, sys
o, best = sys.argv[1], sys.argv[2]
m = {}
for f in ("abcde.json", "x.json"):
    p = os.path.join(o, f)
    if os.path.exists(p):
        m.update(json.load(open(p)))
        os.remove(p)
m["dfr_kernel"] = best
json.dump(m, open(os.path.join(o, "ingest.json"), "w"), indent=2)
with open(os.path.join(o, "ingest.txt"), "a") as t:
    t.write("\n(x) run first; kernel used above: " + best + "\n" + open(os.path.join(o, "x.txt")).read())
os.remove(os.path.join(o, "x.txt"))
PY
date -u
