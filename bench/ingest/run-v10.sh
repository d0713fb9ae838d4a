#!/usr/bin/env bash
# v10 (v9 with the header pass of sub-batch k + 1 overlapping the copy pass of
# sub-batch k, two streams) against v7s and v9 in one device call, from
# binaries built here and carried in DIR (see NOTES.md): test_deframer (every
# variant), again with PEERDMA_DFR_V10_MIN=256 (the test rings are ~6000
# packets: v10 then splits them into 8 sub-batches), bench_ingest (x) for the
# copies, v7s, v9, v10, then (a) with v7s and v10; then, while time is left,
# compute-sanitizer memcheck of test_deframer (sub-batch path). Logs under $OUT
# (8 files).
#   usage: bench/ingest/run-v10.sh DIR
set -uo pipefail
D=$(readlink -f "${1:-.vrt-carry}")
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$D PEERDMA_VRT_CUDA=$D/libpeerdma_vrt_cuda.so
exec > >(tee "$OUT/run.log") 2>&1
date -u; uname -r
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
echo "=== test_deframer (all variants)"
timeout 50 "$D/test_deframer" >"$OUT/test_deframer.log" 2>&1
echo "test_deframer rc=$? ($SECONDS s)"
grep -E "PASSED|FAILED|ERROR|v10|v7s" "$OUT/test_deframer.log" | tail -8
echo "=== test_deframer, PEERDMA_DFR_V10_MIN=256"
PEERDMA_DFR_V10_MIN=256 timeout 50 "$D/test_deframer" >"$OUT/test_deframer-v10min.log" 2>&1
echo "test_deframer (v10 min 256) rc=$? ($SECONDS s)"
grep -E "PASSED|FAILED|ERROR|v10" "$OUT/test_deframer-v10min.log" | tail -8
echo "=== (x)"
timeout 60 "$D/bench_ingest" --parts x --sizes 64,256,1024,1500,8192 --x d2d,copy,v7s,v9,v10 \
	--json "$OUT/x.json" | tee "$OUT/x.txt"
echo "(x) rc=$? ($SECONDS s)"
for k in v7s v10; do
	echo "=== (a) PEERDMA_DFR_KERNEL=$k"
	PEERDMA_DFR_KERNEL=$k timeout 30 "$D/bench_ingest" --parts a --json /tmp/a-$k.json | tee "$OUT/a-$k.txt"
	echo "(a) $k rc=$? ($SECONDS s)"
done
if command -v compute-sanitizer >/dev/null && [ "$SECONDS" -lt 150 ]; then
	echo "=== compute-sanitizer memcheck test_deframer, PEERDMA_DFR_V10_MIN=256 ($SECONDS s so far)"
	PEERDMA_DFR_V10_MIN=256 timeout $((190 - SECONDS)) compute-sanitizer --tool memcheck --error-exitcode 9 \
		"$D/test_deframer" >"$OUT/sanitizer.log" 2>&1
	echo "sanitizer rc=$?"
	tail -n 3 "$OUT/sanitizer.log"
fi
date -u
