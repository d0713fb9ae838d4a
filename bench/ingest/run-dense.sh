#!/bin/bash
# Experiment: v11 with its header pass reading dense 64-byte prefix copies (H200).
. bench/device-env.sh build-r3
BI=build-r3/bench/ingest/bench_ingest
for round in 1 2; do
  echo "== round $round" >> $OUT/log.txt
  $BI --parts x --slot-layout full --sizes 1024,1500,8192 --x d2d,v11,hdr,touchp,v11d,hdrd,touchd,auto \
    --json $OUT/x-$round.json >> $OUT/log.txt 2>&1
  echo "== round $round small" >> $OUT/log.txt
  $BI --parts x --slot-layout full --sizes 256,512 --x d2d,v11,auto,hdr,v11d,hdrd \
    --json $OUT/s-$round.json >> $OUT/log.txt 2>&1
done
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum
for it in hdr hdrd; do
  echo "=== ncu $it" >> $OUT/ncu.txt
  PEERDMA_BENCH_WARMUP=1 timeout 100 $NCU --clock-control none -k 'regex:dfr_hdr_pass' --metrics $M \
    $BI --parts x --slot-layout full --sizes 1024 --iters 1 --x $it >> $OUT/ncu.txt 2>&1
done
build-r3/tests/test_deframer > $OUT/tests.txt 2>&1; echo "rc=$?" >> $OUT/tests.txt
mkdir -p /tmp/pk && cp $OUT/*.json $OUT/*.txt /tmp/pk/ && rm -f $OUT/*.json && tar czf $OUT/all.tgz -C /tmp/pk .
tail -3 $OUT/tests.txt
grep -A16 "^(x)" $OUT/log.txt
grep -E "^===|gpu__time|dram__bytes_read|inst_exec" $OUT/ncu.txt | head -40
