#!/bin/bash
# Experiment: what the header pass's time is made of (H200, 1 KiB), steady state.
. bench/device-env.sh build-r3
BI=build-r3/bench/ingest/bench_ingest
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
for it in hdr hdrd; do
  PEERDMA_BENCH_WARMUP=1 timeout 150 $NCU --clock-control none -k 'regex:dfr_hdr_pass' --launch-skip 1 --launch-count 1 \
    --set full --import-source yes -f -o /tmp/$it $BI --parts x --slot-layout full --sizes 1024 --iters 1 --x $it > $OUT/run-$it.txt 2>&1
  $NCU -i /tmp/$it.ncu-rep --page details --print-details all > $OUT/det-$it.txt 2>&1
  $NCU -i /tmp/$it.ncu-rep --page source --csv --print-source sass > $OUT/src-$it.csv 2>&1
done
cd $OUT && tar czf all.tgz *.txt *.csv && rm -f src-*.csv
grep -E "Duration|Warp Cycles Per Issued|No Eligible|Active Warps Per Sch" det-*.txt
