/* SPDX-License-Identifier: MIT */
/*
 * What the XDP program (xdp_redirect.bpf.c) and its loader (xdp.c) share:
 * the program's configuration, set in its read-only data before the load,
 * and the names the loader looks up.
 */
#ifndef PDMA_INGEST_RX_XDP_PROG_H
#define PDMA_INGEST_RX_XDP_PROG_H

#include <linux/types.h>

struct pdma_xdp_cfg {
	__u32 daddr;   /* IPv4 destination, network order; 0: any */
	__u32 max_len; /* longer frames go to the stack: they would not fit a UMEM frame */
	__u16 port;    /* UDP destination port, network order */
	__u16 pad;
};

#define PDMA_XDP_PROG "pdma_xdp_redirect"
#define PDMA_XDP_MAP "pdma_xsks"
#define PDMA_XDP_MAX_QUEUES 64 /* the XSKMAP's entries: receive queues 0..63 */

#endif /* PDMA_INGEST_RX_XDP_PROG_H */
