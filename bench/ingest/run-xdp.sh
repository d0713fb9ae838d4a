#!/usr/bin/env bash
# Issue 15, item 5 with AF_XDP, on the GPU machine's host in one call of the
# device tool (as root: XDP programs and sockets, network namespaces):
#  1. tests/test_rx_xdp on this kernel (the build's binary);
#  2. bench_ingest (g): every receiver side by side, xdp included, loopback
#     and veth, one receive thread, the cpu path (bench/ingest/socket_parts.c);
#  3. the goal row at fixed offered rates: gen (12 streams, 12 sender
#     threads, 1500-byte datagrams, one skb each) -> ingest -t 1 over
#     127.0.0.1 for 2 s a rate, --rx xdp and --rx recvmmsg, on the cpu path
#     and with the GPU deframing (host-staged: the cpu path's one deframer
#     thread taken out of the question); sent, received, dropped where.
# Tables and JSON go to OUT. About 4 minutes on 16 cores. PARTS (default 123)
# picks steps, RATES the offered rates of step 3, SENDERS the sender threads of
# step 2 (default 12; a list runs it once for each), RX its receivers (all).
#   usage: bench/ingest/run-xdp.sh BUILD OUT   (BUILD: the binaries, with the
#          shared libraries the machine lacks in BUILD/dev and ip(8) in
#          BUILD/dev/bin, as bench/device-env.sh says)
set -uo pipefail
. "$(dirname "$0")/../device-env.sh" "${1:?build dir}"
OUT=${2:?output dir}
RATES=${RATES:-1500000 2000000 2500000 3000000}
PARTS=${PARTS:-123}
mkdir -p "$OUT"
{
	date -u
	echo "kernel $(uname -r), $(nproc) CPUs:$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), uid $(id -u)"
	sysctl -qw net.core.rmem_max=67108864 2>/dev/null
	if [[ $PARTS == *1* ]]; then
		echo "=== 1. test_rx_xdp"
		PEERDMA_TOOL=$B/peerdma timeout 120 "$B/tests/test_rx_xdp" 2>&1 | tail -n 12
	fi
	if [[ $PARTS == *2* ]]; then
		echo "=== 2. bench_ingest (g)"
		for n in ${SENDERS:-12}; do
			timeout 420 "$B/bench/ingest/bench_ingest" --parts g --senders "$n" ${RX:+--rx "$RX"} \
				--json "$OUT/socket-$n.json"
		done
		echo "bench_ingest exit $?"
		ip netns list 2>/dev/null | grep -E '^pdg-(rx|tx)-' && echo "LEFT BEHIND: the namespaces above"
	fi
	[[ $PARTS == *3* ]] && echo "=== 3. fixed rates, one receive thread, 12 senders, 2 s each"
	[[ $PARTS == *3* ]] && for rx in xdp recvmmsg; do
		for path in cpu host-staged; do
			for rate in $RATES; do
				n=$((rate * 2 / 12))
				rm -f "$OUT/i.json" "$OUT/g.json"
				timeout 40 "$B/peerdma" ingest --path "$path" -t 1 --rx "$rx" -p 4991 \
					--slot-size 1536 -i 700 -q -j "$OUT/i.json" 2>"$OUT/i.err" &
				pid=$!
				sleep 0.8
				t0=$(date +%s.%N)
				timeout 30 "$B/peerdma" gen -p 4991 -s 12 -t 12 -n "$n" -S 1500 -r "$rate" --no-context -j \
					>"$OUT/g.json" 2>/dev/null
				t1=$(date +%s.%N)
				wait $pid
				python3 - "$rx" "$path" "$rate" "$t0" "$t1" "$OUT/i.json" "$OUT/g.json" "$OUT/i.err" <<'PY'
import json, sys
rx, path, rate, t0, t1, i, g, err = sys.argv[1:]
try:
    I = json.load(open(i)); G = json.load(open(g))
except Exception as e:
    print(rx, path, rate, "no result:", e, open(err).read().strip()[:200]); sys.exit()
sent = sum(s.get("sent", 0) for s in G["streams"])
gen_pps = sent / (float(t1) - float(t0))
x = I.get("xdp", {})
print(f"{rx:8} {path:11} offered {int(rate)/1e6:.2f} Mpps, gen {gen_pps/1e6:.3f} Mpps: sent {sent} "
      f"received {I['datagrams']} socket_drops {I['socket_drops']} ring_overruns {I['ring_overruns']} "
      f"rx_cpu {I['rx_cpu_seconds']:.3f} s ({I['rx_cpu_seconds']*1e9/max(I['datagrams'],1):.0f} ns/dg, "
      f"sys {I['rx_sys_seconds']:.3f} s) via_stack {x.get('via_stack', '-')} mode {x.get('mode', '-')}"
      f"{'  ZERO LOSS' if I['datagrams'] == sent else ''}")
PY
			done
		done
	done
} 2>&1 | tee "$OUT/xdp.txt"
