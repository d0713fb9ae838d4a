#!/bin/bash
# Experiment: the header pass without its block barriers (A/B against main's module in build-r3/old).
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
for round in 1 2 3; do
  for w in old new; do
    echo "== round $round $w big" >> $OUT/log.txt
    run $w --parts x --slot-layout full --sizes 1024,1500,8192 --x d2d,v11,auto,hdr --json $OUT/$w-big-$round.json >> $OUT/log.txt 2>&1
    echo "== round $round $w small" >> $OUT/log.txt
    run $w --parts x --sizes 64,256 --x d2d,auto --json $OUT/$w-small-$round.json >> $OUT/log.txt 2>&1
  done
done
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
for w in old new; do
  echo "=== ncu $w" >> $OUT/ncu.txt
  PEERDMA_BENCH_WARMUP=1 run $w --parts x --slot-layout full --sizes 1024 --iters 1 --x hdr > /dev/null 2>&1
  if [ $w = old ]; then export PEERDMA_VRT_CUDA=$B/old/libpeerdma_vrt_cuda.so PEERDMA_VRT_CUDA_BENCH=$B/old/libpeerdma_vrt_cuda_bench.so; fi
  PEERDMA_BENCH_WARMUP=1 timeout 120 $NCU --clock-control none -k 'regex:dfr_hdr_pass' --launch-skip 1 --launch-count 1 \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,smsp__inst_executed.sum,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active \
    $BI --parts x --slot-layout full --sizes 1024 --iters 1 --x hdr >> $OUT/ncu.txt 2>&1
  unset PEERDMA_VRT_CUDA PEERDMA_VRT_CUDA_BENCH
  . bench/device-env.sh build-r3
done
for t in test_deframer test_deframer_frames test_blocks_gpu; do
  build-r3/tests/$t > $OUT/$t.txt 2>&1; echo "rc=$?" >> $OUT/$t.txt
done
cd $OUT && tar czf all.tgz *.txt *.json && rm -f *.json
grep -E "^==|v11 |auto |hdr " log.txt
grep -E "^===|gpu__time|registers|warps_active" ncu.txt
tail -2 test_*.txt
