#!/bin/bash
# Experiment: copy blocks released per header block (flags) instead of griddepcontrol.wait;
# PEERDMA_DFR_EARLY 1 (all blocks by flags), 2 (first two waves by flags), 0 (all by the grid),
# A/B against main's module in build-r3/old, alternating.
. bench/device-env.sh build-r3
BI=build-r3/bench/ingest/bench_ingest
run() { # $1 old|e0|e1|e2, rest: bench args
  local w=$1; shift
  case $w in
  old) PEERDMA_VRT_CUDA=$B/old/libpeerdma_vrt_cuda.so PEERDMA_VRT_CUDA_BENCH=$B/old/libpeerdma_vrt_cuda_bench.so $BI "$@" ;;
  e*) PEERDMA_DFR_EARLY=${w#e} $BI "$@" ;;
  esac
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader > $OUT/gpu.txt
for e in 2 3; do
  PEERDMA_DFR_EARLY=$e build-r3/tests/test_deframer > $OUT/test_deframer-e$e.txt 2>&1; echo "rc=$?" >> $OUT/test_deframer-e$e.txt
  PEERDMA_DFR_EARLY=$e build-r3/tests/test_deframer_frames > $OUT/test_deframer_frames-e$e.txt 2>&1; echo "rc=$?" >> $OUT/test_deframer_frames-e$e.txt
done
build-r3/tests/test_blocks_gpu > $OUT/test_blocks_gpu.txt 2>&1; echo "rc=$?" >> $OUT/test_blocks_gpu.txt
for round in 1 2 3; do
  for w in e2 old e3; do
    echo "== round $round $w" >> $OUT/log.txt
    run $w --parts x --slot-layout full --sizes 256,1024,1500,8192 --x d2d,v11,auto,cpass --json $OUT/$w-x-$round.json >> $OUT/log.txt 2>&1
  done
done
for w in e2 old e3; do
  echo "== (a) $w" >> $OUT/log.txt
  run $w --parts a --json $OUT/$w-a.json >> $OUT/log.txt 2>&1
done
cd $OUT && tar czf all.tgz *.txt *.json && rm -f *.json
grep -E "^==|v11 |auto |cpass |^ +[0-9]+ +[0-9.]+ " log.txt
for f in test_*.txt; do echo "$f: $(tail -n 3 $f | tr '\n' ' ')"; done
