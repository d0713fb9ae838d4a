#!/bin/bash
# Experiment: where the header pass's time over its loads goes (H200).
. bench/device-env.sh build-r3
BI=build-r3/bench/ingest/bench_ingest
S=1024,1500,8192
for round in 1 2; do
  for fl in 0 1; do
    export PEERDMA_BENCH_FLUSH_L2=1; [ $fl = 0 ] && unset PEERDMA_BENCH_FLUSH_L2
    echo "== round $round flush=$fl base" >> $OUT/log.txt
    $BI --parts x --slot-layout full --sizes $S --x d2d,v11,hdr,touchp --json $OUT/f$fl-base-$round.json >> $OUT/log.txt 2>&1
    echo "== round $round flush=$fl noatom" >> $OUT/log.txt
    PEERDMA_DFR_X=1 $BI --parts x --slot-layout full --sizes $S --x d2d,v11,hdr --json $OUT/f$fl-noatom-$round.json >> $OUT/log.txt 2>&1
    echo "== round $round flush=$fl nowl" >> $OUT/log.txt
    PEERDMA_DFR_X=2 $BI --parts x --slot-layout full --sizes $S --x d2d,hdr --json $OUT/f$fl-nowl-$round.json >> $OUT/log.txt 2>&1
    echo "== round $round flush=$fl noatom+nowl" >> $OUT/log.txt
    PEERDMA_DFR_X=3 $BI --parts x --slot-layout full --sizes $S --x d2d,hdr --json $OUT/f$fl-none-$round.json >> $OUT/log.txt 2>&1
  done
done
unset PEERDMA_BENCH_FLUSH_L2
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_op_atom.sum,lts__t_sector_op_atom_hit_rate.pct,lts__t_sector_hit_rate.pct
for fl in 0 1; do for x in 0 1; do
  export PEERDMA_BENCH_FLUSH_L2=1; [ $fl = 0 ] && unset PEERDMA_BENCH_FLUSH_L2
  echo "=== ncu flush=$fl x=$x" >> $OUT/ncu.txt
  PEERDMA_DFR_X=$x PEERDMA_BENCH_WARMUP=1 timeout 100 $NCU --clock-control none -k 'regex:dfr_hdr_pass' --metrics $M \
    $BI --parts x --slot-layout full --sizes 1024 --iters 1 --x hdr >> $OUT/ncu.txt 2>&1
done; done
unset PEERDMA_BENCH_FLUSH_L2 PEERDMA_DFR_X
build-r3/tests/test_deframer > $OUT/tests.txt 2>&1; echo "rc=$?" >> $OUT/tests.txt
mkdir -p /tmp/pk && cp $OUT/*.json $OUT/*.txt /tmp/pk/ && rm -f $OUT/*.json && tar czf $OUT/all.tgz -C /tmp/pk .
tail -4 $OUT/tests.txt
grep -E "^===|gpu__time|dram__bytes_read|atom" $OUT/ncu.txt | head -40
