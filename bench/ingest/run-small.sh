#!/usr/bin/env bash
# Issue 15, item 4 (small packets), in one call on the GPU machine from the
# build tree BUILD built on the development machine (nvcc there), with the
# shared libraries the image lacks in BUILD/dev (bench/ingest/NOTES.md):
#  1. bench_ingest (x): v11, v16 and auto next to the D2D copy, 64 B - 1500 B,
#     on full slots and on packed slots (deframe.h; LAYOUTS);
#  2. bench_ingest (a): the default kernel (auto) at the table's sizes, full
#     slots, then the default layout (auto: packed up to 108-byte packets);
#  3. test_deframer (CPU == GPU for every kernel) and its compute-sanitizer run;
#  4. Nsight Compute: DRAM bytes and time of v11's passes and of v16 at 64 B,
#     256 B and 1 KiB, for the bytes-per-packet account of DESIGN.md. One
#     warm-up launch each: the second launch of a kernel is the steady state
#     (the longest payload known: v11's copy stride, v16's tiny instance).
#   usage: bench/ingest/run-small.sh [BUILD]   (results in $OUT)
set -uo pipefail
. "$(dirname "$0")/../device-env.sh" "${1:-build-vrt}"
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
exec > >(tee "$OUT/run.log") 2>&1
date -u
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
for L in ${LAYOUTS:-full packed}; do
	echo "=== 1. (x), $L slots"
	timeout 200 "$B/bench/ingest/bench_ingest" --parts x --sizes "${SIZES:-64,128,256,512,1024,1500}" \
		--x d2d,v11,v16,auto --slot-layout "$L" --json "$OUT/x-$L.json"
done
for L in full auto; do
	echo "=== 2. (a), $L slots"
	timeout 200 "$B/bench/ingest/bench_ingest" --parts a --slot-layout "$L" --json "$OUT/a-$L.json"
done
echo "=== 3. test_deframer"
timeout 120 "$B/tests/test_deframer" >"$OUT/test_deframer.log" 2>&1
echo "test_deframer rc=$?"
tail -n 2 "$OUT/test_deframer.log"
if command -v compute-sanitizer >/dev/null; then
	timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/tests/test_deframer" >"$OUT/sanitizer.log" 2>&1
	echo "compute-sanitizer rc=$?"
	tail -n 2 "$OUT/sanitizer.log"
fi
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
if [ -n "$NCU" ]; then
	echo "=== 4. ncu"
	PEERDMA_BENCH_WARMUP=1 timeout 150 "$NCU" --clock-control none -k 'regex:dfr_small_pass|dfr_tiny_pass|dfr_tiny80_pass|dfr_hdr_pass|dfr_copy_pass' \
		--metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \
		"$B/bench/ingest/bench_ingest" --parts x --sizes "${NCU_SIZES:-64,256,1024}" --iters 1 --x v11,v16 \
		--slot-layout "${NCU_LAYOUT:-auto}" >"$OUT/ncu.txt" 2>&1
	echo "ncu rc=$?"
	grep -E "^  [a-z_]+.*\(|dram__|gpu__time" "$OUT/ncu.txt" | sed 's/(pdma_dfr_config.*//; s/(const unsigned char.*//'
fi
date -u
