#!/usr/bin/env bash
# v8tp (two-pass deframer) against v7s in one device call, from binaries built
# here and carried in DIR (see NOTES.md): test_deframer (every variant, byte-
# identical to the CPU deframer), bench_ingest (x) for the copies, v7s and
# v8tp, then (a) once with each kernel; compute-sanitizer memcheck of
# test_deframer if time is left. Logs under $OUT.
#   usage: bench/ingest/run-tp.sh DIR
set -uo pipefail
D=$(readlink -f "${1:-.vrt-carry}")
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$D PEERDMA_VRT_CUDA=$D/libpeerdma_vrt_cuda.so
exec > >(tee "$OUT/run.log") 2>&1
date -u; uname -r
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
echo "=== test_deframer (all variants)"
timeout 60 "$D/test_deframer" >"$OUT/test_deframer.log" 2>&1
echo "test_deframer rc=$?"
grep -E "PASSED|FAILED|ERROR|v8tp|v7s" "$OUT/test_deframer.log" | tail -14
echo "=== (x)"
timeout 70 "$D/bench_ingest" --parts x --sizes 64,256,1024,1500,8192 --x d2d,copy,simple,skel4,v7s,v8tp \
	--json "$OUT/x.json" | tee "$OUT/x.txt"
for k in v7s v8tp; do
	echo "=== (a) PEERDMA_DFR_KERNEL=$k"
	PEERDMA_DFR_KERNEL=$k timeout 45 "$D/bench_ingest" --parts a --json "$OUT/a-$k.json" | tee "$OUT/a-$k.txt"
	echo "(a) $k rc=$?"
done
if command -v compute-sanitizer >/dev/null && [ "$SECONDS" -lt 200 ]; then
	echo "=== compute-sanitizer memcheck test_deframer ($SECONDS s so far)"
	timeout $((270 - SECONDS)) compute-sanitizer --tool memcheck --error-exitcode 9 "$D/test_deframer" \
		>"$OUT/sanitizer.log" 2>&1
	echo "sanitizer rc=$?"
	tail -n 3 "$OUT/sanitizer.log"
fi
date -u
