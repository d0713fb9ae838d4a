// SPDX-License-Identifier: MIT OR GPL-2.0
/*
 * The XDP program of `peerdma ingest --rx xdp` (xdp.c loads it): IPv4 UDP
 * frames to the session's port (and address) go to the XDP socket of the
 * receive queue they arrived on; everything else, and every frame of a queue
 * without a socket of ours, goes on to the kernel's stack (XDP_PASS). So
 * fragments, IP options past the frame's first bytes and frames too long
 * for a UMEM frame reach the session's UDP socket, as without XDP, and the
 * device's other traffic is untouched.
 *
 * Built with clang's BPF target; the object is compiled into libpeerdma_ingest.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "xdp_prog.h"

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, PDMA_XDP_MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
} pdma_xsks SEC(".maps");

/* Set by the loader before the load: the verifier sees constants. */
const volatile struct pdma_xdp_cfg pdma_cfg;

SEC("xdp")
int pdma_xdp_redirect(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	struct udphdr *udp;
	__u16 proto;

	if ((void *)ip > end || end - data > pdma_cfg.max_len)
		return XDP_PASS;
	proto = eth->h_proto;
	if (proto == bpf_htons(ETH_P_8021Q)) {
		/* one 802.1Q tag: its TCI, then the inner EtherType */
		if ((void *)ip + 4 > end)
			return XDP_PASS;
		proto = *(__u16 *)((void *)ip + 2);
		ip = (void *)ip + 4;
	}
	if (proto != bpf_htons(ETH_P_IP) || (void *)(ip + 1) > end)
		return XDP_PASS;
	if (ip->protocol != IPPROTO_UDP || ip->ihl < 5 || (ip->frag_off & bpf_htons(0x3fff)))
		return XDP_PASS;
	if (pdma_cfg.daddr && ip->daddr != pdma_cfg.daddr)
		return XDP_PASS;
	udp = (void *)ip + ip->ihl * 4;
	if ((void *)(udp + 1) > end || udp->dest != pdma_cfg.port)
		return XDP_PASS;
	return bpf_redirect_map(&pdma_xsks, ctx->rx_queue_index, XDP_PASS);
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
