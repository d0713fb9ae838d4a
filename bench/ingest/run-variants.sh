#!/usr/bin/env bash
# Deframer kernel variants against each other in one device call, from
# binaries built here and carried in DIR (see NOTES.md): test_deframer (every
# variant, byte-identical to the CPU deframer; once more with $DFR_TEST_ENV set
# when given, e.g. PEERDMA_DFR_V10_MIN=256 to make v10 split the small test
# rings), bench_ingest (x) for the items ITEMS (copies and variants, comma
# separated), (a) once per kernel of KERNELS (space separated), then, while
# time is left, compute-sanitizer memcheck of test_deframer and, when
# $NCU_REGEX is set, an ncu split of the matching kernels at $NCU_SIZES
# (default 1024; variant $NCU_VARIANT), with the sections $NCU_SECTIONS (space
# separated, e.g. "WarpStateStats Occupancy") when given. Logs under $OUT (at
# most 8 files come back).
#   usage: bench/ingest/run-variants.sh DIR ITEMS "KERNELS"
#   e.g.   bench/ingest/run-variants.sh .vrt-carry d2d,copy,v7s,v9,v10 "v7s v10"
set -uo pipefail
D=$(readlink -f "${1:-.vrt-carry}")
ITEMS=${2:-d2d,copy,simple,v7s}
KERNELS=${3:-v7s}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$D PEERDMA_VRT_CUDA=$D/libpeerdma_vrt_cuda.so
exec > >(tee "$OUT/run.log") 2>&1
date -u; uname -r
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
echo "=== test_deframer (all variants)"
timeout 60 "$D/test_deframer" >"$OUT/test_deframer.log" 2>&1
echo "test_deframer rc=$? ($SECONDS s)"
grep -E "PASSED|FAILED|ERROR" "$OUT/test_deframer.log" | tail -8
if [ -n "${DFR_TEST_ENV:-}" ]; then
	echo "=== test_deframer, $DFR_TEST_ENV"
	env $DFR_TEST_ENV timeout 60 "$D/test_deframer" >"$OUT/test_deframer-env.log" 2>&1
	echo "test_deframer ($DFR_TEST_ENV) rc=$? ($SECONDS s)"
	grep -E "PASSED|FAILED|ERROR" "$OUT/test_deframer-env.log" | tail -8
fi
echo "=== (x)"
timeout 70 "$D/bench_ingest" --parts x --sizes 64,256,1024,1500,8192 --x "$ITEMS" \
	--json "$OUT/x.json" | tee "$OUT/x.txt"
echo "(x) rc=$? ($SECONDS s)"
for k in $KERNELS; do
	echo "=== (a) PEERDMA_DFR_KERNEL=$k"
	PEERDMA_DFR_KERNEL=$k timeout 40 "$D/bench_ingest" --parts a --json "/tmp/a-$k.json" | tee "$OUT/a-$k.txt"
	echo "(a) $k rc=$? ($SECONDS s)"
done
if command -v compute-sanitizer >/dev/null && [ "$SECONDS" -lt 300 ]; then
	echo "=== compute-sanitizer memcheck test_deframer ${DFR_TEST_ENV:-} ($SECONDS s so far)"
	env ${DFR_TEST_ENV:-} timeout $((420 - SECONDS)) compute-sanitizer --tool memcheck --error-exitcode 9 \
		"$D/test_deframer" >"$OUT/sanitizer.log" 2>&1
	echo "sanitizer rc=$?"
	tail -n 3 "$OUT/sanitizer.log"
fi
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
if [ -n "$NCU" ] && [ -n "${NCU_REGEX:-}" ] && [ "$SECONDS" -lt 460 ]; then
	echo "=== ncu $NCU_REGEX, ${NCU_SIZES:=1024} B ($SECONDS s so far)"
	sec=()
	for x in ${NCU_SECTIONS:-}; do sec+=(--section "$x"); done
	PEERDMA_BENCH_WARMUP=0 timeout $((${NCU_LIMIT:-560} - SECONDS)) "$NCU" --clock-control none \
		-k "regex:$NCU_REGEX" "${sec[@]}" \
		--metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
		"$D/bench_ingest" --parts x --sizes "$NCU_SIZES" --iters 1 --x "${NCU_VARIANT:-v7s}" \
		>"$OUT/ncu.txt" 2>&1
	echo "ncu rc=$?"
	grep -E "^  [a-z_0-9 ]+.*\(|gpu__time" "$OUT/ncu.txt" | sed 's/(const unsigned char.*//; s/(pdma_dfr_config.*//' | head -24
fi
date -u
