#!/bin/bash
# Experiment: copy blocks released per header block (flags) instead of griddepcontrol.wait;
# A/B against main's module in build-r3/old, alternating.
. bench/device-env.sh build-r3
BI=build-r3/bench/ingest/bench_ingest
run() { # $1 old|new, rest: bench args
  local w=$1; shift
  if [ $w = old ]; then
    PEERDMA_VRT_CUDA=$B/old/libpeerdma_vrt_cuda.so PEERDMA_VRT_CUDA_BENCH=$B/old/libpeerdma_vrt_cuda_bench.so $BI "$@"
  else
    $BI "$@"
  fi
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader > $OUT/gpu.txt
for t in test_deframer test_deframer_frames test_blocks_gpu; do
  build-r3/tests/$t > $OUT/$t.txt 2>&1; echo "rc=$?" >> $OUT/$t.txt
done
for round in 1 2 3; do
  for w in new old; do
    echo "== round $round $w" >> $OUT/log.txt
    run $w --parts x --slot-layout full --sizes 256,1024,1500,8192 --x d2d,v11,auto,hdr,cpass --json $OUT/$w-x-$round.json >> $OUT/log.txt 2>&1
  done
done
for w in new old; do
  echo "== (a) $w" >> $OUT/log.txt
  run $w --parts a --json $OUT/$w-a.json >> $OUT/log.txt 2>&1
done
for k in 1 2 3; do
  build-r3/tests/test_deframer > $OUT/test_deframer-$k.txt 2>&1; echo "rc=$?" >> $OUT/test_deframer-$k.txt
done
cd $OUT && tar czf all.tgz *.txt *.json && rm -f *.json
grep -E "^==|v11 |auto |hdr |cpass |^ +[0-9]+ +[0-9.]+ " log.txt
for f in test_*.txt; do echo "$f: $(tail -n 3 $f | tr '\n' ' ')"; done
