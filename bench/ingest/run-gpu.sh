#!/usr/bin/env bash
# The GPU half of issue 6, in one call on the GPU machine (device tool):
# GPU deframer test (+ compute-sanitizer), end-to-end ingest through the GPU
# paths, and bench_ingest (a)-(d). Binaries are built on the development
# machine (nvcc there compiles the module) and carried in DIR with the two
# shared libraries the image lacks (cmocka, jansson).
#   usage: bench/ingest/run-gpu.sh DIR   (writes logs and JSON to $OUT)
set -uo pipefail
D=$(readlink -f "${1:-.vrt-carry}")
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$D PEERDMA_VRT_CUDA=$D/libpeerdma_vrt_cuda.so
nvidia-smi -L
echo "=== test_deframer"
"$D/test_deframer" 2>&1 | tee "$OUT/test_deframer.log"
echo "rc=${PIPESTATUS[0]}" | tee -a "$OUT/test_deframer.log"
if command -v compute-sanitizer >/dev/null; then
	echo "=== compute-sanitizer memcheck test_deframer"
	compute-sanitizer --tool memcheck --error-exitcode 9 "$D/test_deframer" >"$OUT/sanitizer.log" 2>&1
	echo "sanitizer rc=$?" | tee -a "$OUT/test_deframer.log"
	tail -n 3 "$OUT/sanitizer.log"
fi
[ -n "${SKIP_E2E:-}" ] || {
echo "=== loopback end to end through the GPU paths (peerdma gen | peerdma ingest)"
for p in host-staged zero-copy cpu; do
	"$D/peerdma" ingest --path $p -p 4991 -t 2 -i 700 -q -j "$OUT/e2e-$p.json" &
	pid=$!
	sleep 0.5
	"$D/peerdma" gen -p 4991 -s 4 -n 20000 -S 1500 --loss 4 --loss-burst 16 --dup 3 --reorder 5 \
		-r 400000 -j >"$OUT/e2e-gen-$p.json"
	wait $pid
	echo "path $p rc=$?"
	echo "--- gen"; cat "$OUT/e2e-gen-$p.json"; echo "--- ingest"; cat "$OUT/e2e-$p.json"
	rm -f "$OUT/e2e-gen-$p.json" "$OUT/e2e-$p.json"
done >"$OUT/e2e.log" 2>&1
grep "rc=" "$OUT/e2e.log"
}
echo "=== bench_ingest"
"$D/bench_ingest" --parts "${BENCH_PARTS:-abcd}" --json "$OUT/ingest.json" 2>&1 | tee "$OUT/bench.log"
