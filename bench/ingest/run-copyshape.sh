#!/bin/bash
# Experiment: v11's copy-pass shapes on the H200 (PEERDMA_DFR_COPY), same build, alternating.
. bench/device-env.sh build-r3
BI=build-r3/bench/ingest/bench_ingest
SHAPES=${SHAPES:-"u2b6 u1b8 u2b8 u3b5 u4b4 u2b6cs u1b8cs"}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader > $OUT/gpu.txt
for round in 1 2; do
  for s in $SHAPES; do
    echo "== round $round $s" >> $OUT/log.txt
    PEERDMA_DFR_COPY=$s $BI --parts x --slot-layout full --sizes 256,1024,1500,8192 --x d2d,simple,v11,cpass \
      --json $OUT/$s-$round.json >> $OUT/log.txt 2>&1
  done
done
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
for s in $SHAPES; do
  echo "=== ncu $s" >> $OUT/ncu.txt
  PEERDMA_DFR_COPY=$s PEERDMA_BENCH_WARMUP=1 timeout 100 $NCU -f --clock-control none -k 'regex:dfr_copy' --launch-skip 1 --launch-count 1 \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed \
    $BI --parts x --slot-layout full --sizes 1024 --iters 1 --x cpass >> $OUT/ncu.txt 2>&1
done
for s in $SHAPES; do
  echo "== $s" >> $OUT/tests.txt
  PEERDMA_DFR_COPY=$s build-r3/tests/test_deframer 2>&1 | tail -2 >> $OUT/tests.txt
done
for t in test_deframer test_deframer_frames test_blocks_gpu; do
  build-r3/tests/$t > $OUT/$t.txt 2>&1; echo "rc=$?" >> $OUT/$t.txt
done
cd $OUT && tar czf all.tgz *.txt *.json && rm -f *.json
grep -E "^==|d2d |simple |v11 |cpass " log.txt
grep -E "^===|gpu__time|dram__bytes|registers|warps_active|throughput" ncu.txt
cat tests.txt; tail -2 test_*.txt
