#!/usr/bin/env bash
# peerdma forward across three network namespaces on one machine (issue 16's
# CI case): an ingest node (the forwarder, fed by gen inside it) and two
# consumer nodes, each joined to it by a veth pair of its own, the ingest
# node's ends on a bridge there (one subnet, 10.77.0.0/24: the forwarder
# 10.77.0.1, the consumers .2 and .3; Debian's iproute2), UCX's tcp transport
# between them. The cases are forward-test.sh's: two consumers each asking
# for half of the streams (every sample, gaps exactly at gen's losses), one
# killed mid-run, and bad input. The namespaces and links are named after
# this process and always removed.
# Needs root and ip(8): otherwise "skipped: <why>" and exit 77.
# usage: tests/forward/netns-test.sh PEERDMA_TOOL [split|kill|bad]...
set -euo pipefail
tool=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
shift
src=$(cd "$(dirname "$0")" && pwd)
skip() { echo "netns-test: skipped: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "not root (ip netns needs CAP_SYS_ADMIN)"
command -v ip >/dev/null || skip "no ip(8) (Debian's iproute2)"
tag=pdfw$$
ns_i=$tag-i ns_a=$tag-a ns_b=$tag-b
cleanup() {
	for n in "$ns_i" "$ns_a" "$ns_b"; do ip netns del "$n" 2>/dev/null || true; done
	# a veth pair goes with its namespace; these only if one never moved
	ip link del "${tag}ia" 2>/dev/null || true
	ip link del "${tag}ib" 2>/dev/null || true
}
trap cleanup EXIT
ip netns add "$ns_i" 2>/dev/null || skip "ip netns add failed (no network namespaces here?)"
ip netns add "$ns_a"
ip netns add "$ns_b"
# One subnet behind a bridge: UCX's tcp transport offers each of a node's
# interfaces to its peers; with a link (and subnet) per consumer it chose the
# other consumer's link for a peer, whose connection then failed.
ip -n "$ns_i" link add "${tag}br" type bridge || skip "no bridge device here"
ip -n "$ns_i" addr add 10.77.0.1/24 dev "${tag}br"
ip -n "$ns_i" link set "${tag}br" up
ip -n "$ns_i" link set lo up
n=2
for x in a b; do
	ns=ns_$x
	ip link add "${tag}i$x" type veth peer name "${tag}$x" || skip "no veth pairs here"
	ip link set "${tag}i$x" netns "$ns_i"
	ip link set "${tag}$x" netns "${!ns}"
	ip -n "$ns_i" link set "${tag}i$x" master "${tag}br" up
	ip -n "${!ns}" addr add "10.77.0.$n/24" dev "${tag}$x"
	ip -n "${!ns}" link set "${tag}$x" up
	ip -n "${!ns}" link set lo up
	n=$((n + 1))
done
# UCX_NET_DEVICES: each node's link, not lo (whose 127.0.0.1 UCX would offer
# its peers, where it is their own loopback)
RUN_FWD="ip netns exec $ns_i env UCX_NET_DEVICES=${tag}br" \
RUN_A="ip netns exec $ns_a env UCX_NET_DEVICES=${tag}a" \
RUN_B="ip netns exec $ns_b env UCX_NET_DEVICES=${tag}b" \
	LISTEN=0.0.0.0 CONN_A=10.77.0.1 CONN_B=10.77.0.1 \
	"$src/forward-test.sh" "$tool" "$@"
echo "netns-test: passed"
