#!/bin/bash
# Experiment: header-pass instances and the touch probe's loads in flight (H200).
. bench/device-env.sh build-r3
BI=build-r3/bench/ingest/bench_ingest
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv > $OUT/gpu.txt
for round in 1 2; do
for v in base b6 p2 p4 p2b5 p4b3 b8; do
  if [ $v = base ]; then unset PEERDMA_DFR_HDR; else export PEERDMA_DFR_HDR=$v; fi
  echo "== round $round hdr=$v" | tee -a $OUT/log.txt
  $BI --parts x --slot-layout full --sizes 1024,1500,8192 --x d2d,v11,hdr --json $OUT/hdr-$v-$round.json >> $OUT/log.txt 2>&1
done
unset PEERDMA_DFR_HDR
for np in 1 2 4 8; do
  echo "== round $round touchp np=$np" | tee -a $OUT/log.txt
  PEERDMA_TOUCH_NP=$np $BI --parts x --slot-layout full --sizes 1024,1500,8192 --x d2d,touchp --json $OUT/touch-$np-$round.json >> $OUT/log.txt 2>&1
done
done
# correctness with each instance
for v in base b6 p2 p4 p2b5 p4b3 b8; do
  if [ $v = base ]; then unset PEERDMA_DFR_HDR; else export PEERDMA_DFR_HDR=$v; fi
  echo "== test_deframer hdr=$v" >> $OUT/tests.txt
  PEERDMA_DFR_KERNEL=v11 build-r3/tests/test_deframer >> $OUT/tests.txt 2>&1; echo "rc=$?" >> $OUT/tests.txt
done
grep -E "^rc=|passed|failed" $OUT/tests.txt | tail -20
