#!/usr/bin/env bash
# Issue 15, item 5 (the socket path) on the GPU machine's host, one call of the
# device tool: bench_ingest (g), one receive thread on the cpu path, 1500-byte
# datagrams: recvmmsg, io_uring and UDP GRO receive with gen sending datagram
# by datagram and UDP GSO over loopback, then one at a time over a veth pair
# between two network namespaces with GRO on the receiving end (as root with
# ip(8); the part says why it skips that otherwise). Its table and JSON go to
# OUT; the header says what the machine has (kernel, CPUs, root, ip, ethtool:
# part g does not need ethtool, it sets the veth's features through the
# ethtool ioctl). About 2-3 minutes with 16 cores.
#   SENDERS=N: gen's sender threads (default three quarters of the cores).
#   usage: bench/ingest/run-socket.sh BUILD OUT   (BUILD as run-round2-h100.sh's:
#          the build tree, shared libraries the machine lacks in BUILD/dev)
set -uo pipefail
. "$(dirname "$0")/../device-env.sh" "${1:?build dir}"
OUT=${2:?output dir}
mkdir -p "$OUT"
{
	date -u
	echo "kernel $(uname -r), $(nproc) CPUs:$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), uid $(id -u)"
	for t in ip ethtool; do
		command -v "$t" >/dev/null && echo "$t: $(command -v "$t")" || echo "$t: not installed"
	done
	echo "net.core.rmem_max $(cat /proc/sys/net/core/rmem_max)"
	# Senders: three quarters of the cores (12 of 16), so that the veth
	# rows' one-datagram-a-call senders, which also run the receiving
	# NAPI in their softirq, can offer more than one receive thread takes.
	n=$(( $(nproc) * 3 / 4 )); [ "$n" -lt 1 ] && n=1; [ "$n" -gt 16 ] && n=16
	echo "sender threads: $n (SENDERS overrides)"
	timeout 400 "$B/bench/ingest/bench_ingest" --parts g --senders "${SENDERS:-$n}" --json "$OUT/socket.json"
	echo "bench_ingest exit $?"
	# Nothing of ours may be left behind (part g deletes its namespaces
	# even on error; this says so if it did not).
	ip netns list 2>/dev/null | grep -E '^pdg-(rx|tx)-' && echo "LEFT BEHIND: the namespaces above"
} 2>&1 | tee "$OUT/socket.txt"
