#!/usr/bin/env bash
# v9 (two passes, host-side stride, 4/8 windows per thread) against v7s and
# v8tp in one device call, from binaries built here and carried in DIR (see
# NOTES.md): test_deframer (every variant, byte-identical to the CPU
# deframer), bench_ingest (x) for the copies, v7s, v8tp, v9, v9u8, then (a)
# once with v7s and v9; then, while time is left, compute-sanitizer memcheck
# of test_deframer and an ncu split of v9's two passes at 1 KiB. Logs under $OUT.
#   usage: bench/ingest/run-v9.sh DIR
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
echo "test_deframer rc=$? ($SECONDS s)"
grep -E "PASSED|FAILED|ERROR|v9|v7s" "$OUT/test_deframer.log" | tail -14
echo "=== (x)"
timeout 70 "$D/bench_ingest" --parts x --sizes 64,256,1024,1500,8192 --x d2d,copy,simple,v7s,v8tp,v9,v9u8 \
	--json "$OUT/x.json" | tee "$OUT/x.txt"
echo "(x) rc=$? ($SECONDS s)"
for k in v7s v9; do
	echo "=== (a) PEERDMA_DFR_KERNEL=$k"
	PEERDMA_DFR_KERNEL=$k timeout 40 "$D/bench_ingest" --parts a --json "$OUT/a-$k.json" | tee "$OUT/a-$k.txt"
	echo "(a) $k rc=$? ($SECONDS s)"
done
if command -v compute-sanitizer >/dev/null && [ "$SECONDS" -lt 170 ]; then
	echo "=== compute-sanitizer memcheck test_deframer ($SECONDS s so far)"
	timeout $((215 - SECONDS)) compute-sanitizer --tool memcheck --error-exitcode 9 "$D/test_deframer" \
		>"$OUT/sanitizer.log" 2>&1
	echo "sanitizer rc=$?"
	tail -n 3 "$OUT/sanitizer.log"
fi
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
if [ -n "$NCU" ] && [ "$SECONDS" -lt 205 ]; then
	echo "=== ncu v9 passes, 1 KiB ($SECONDS s so far)"
	PEERDMA_BENCH_WARMUP=0 timeout $((228 - SECONDS)) "$NCU" --clock-control none -k "regex:dfr_tp_hdr|dfr_v9" --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
		"$D/bench_ingest" --parts x --sizes 1024 --iters 1 --x v9 >"$OUT/ncu.txt" 2>&1
	echo "ncu rc=$?"
	grep -E "^  [a-z_0-9 ]+.*\(|gpu__time" "$OUT/ncu.txt" | sed 's/(const unsigned char.*//; s/(pdma_dfr_config.*//' | head -12
fi
date -u
