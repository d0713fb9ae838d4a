/* SPDX-License-Identifier: MIT */
/*
 * Frame rings: the deframers' second input, raw Ethernet frames as a NIC
 * wrote them into receive buffers, beside ring slots (deframe.h). Shared
 * verbatim by the CPU deframer (deframe_cpu.c), the GPU deframer
 * (cuda/kernels.cu) and the fuzz target (tests/fuzz/fuzz_frame.c): one parser
 * of the Ethernet/IPv4/UDP headers, so the two deframers cannot disagree on
 * which frame carries a datagram.
 *
 * A frame ring is a region (receive buffers, GPU or host memory) and per
 * frame a struct pdma_frame: where its buffer starts, the length the NIC
 * reported and the NIC's completion status bits (PDMA_NIC_CQE_*, so an
 * e1000 completion maps straight in: offset = bufs_offset + buf * buf_size).
 * Each frame: Ethernet II, optionally one 802.1Q tag; IPv4 (version 4, IHL
 * >= 5, total length within the frame, no fragment, protocol UDP, header
 * checksum checked unless the NIC verified it); UDP (destination port the
 * configured one, length within the IP datagram, checksum checked when
 * nonzero unless the NIC verified it). Bytes after the IP datagram (Ethernet
 * padding, an FCS the NIC kept) are ignored. The UDP payload is the VITA-49
 * datagram, deframed exactly as a slot's (pdma_dfr_dgram_v in deframe.h).
 *
 * A frame that does not match is skipped: its descriptor gets status
 * -PDMA_DFR_E_FRAME and the reason (enum pdma_frm_err) in its count byte;
 * it never reaches the stream table or the stream accounting, and the
 * per-reason counters (struct pdma_frm_stats, deframe/frame_acct.h) count it.
 * The slot-tail promise (PDMA_SLOT_TAIL) does not exist here: the trailer is
 * always read from the datagram.
 */
#ifndef PDMA_INGEST_DEFRAME_FRAME_H
#define PDMA_INGEST_DEFRAME_FRAME_H

#include <stdint.h>

#include "uapi/peerdma_nic.h"

#if !defined(PDMA_DFR_FN)
#if defined(__CUDACC__)
#define PDMA_DFR_FN static __host__ __device__ __forceinline__
#else
#define PDMA_DFR_FN static inline
#endif
#endif

/* One received frame: bytes [off, off + len) of the region. The layout of
 * struct pdma_nic_cqe with the buffer index turned into a byte offset; a
 * region is at most 4 GiB (a NIC's receive buffers are far fewer). */
struct pdma_frame {
	uint32_t off;   /* the frame's first byte, from the region's start */
	uint16_t len;   /* bytes the NIC wrote (FCS included when it kept it) */
	uint8_t flags;  /* PDMA_NIC_CQE_*: IPCS / L4CS trusted unless ERR is set */
	uint8_t pad;
};

/* What the frames must carry. */
struct pdma_frm_cfg {
	uint32_t max_len; /* longer frames are skipped (oversize); 0: PDMA_FRM_MAX_LEN */
	uint16_t port;    /* UDP destination port */
	uint16_t pad;
};

#define PDMA_FRM_MAX_LEN 4096u /* the largest receive buffer a NIC offers here */
#define PDMA_FRM_ETH 14u       /* Ethernet II header */
#define PDMA_FRM_VLAN 4u       /* one 802.1Q tag */
#define PDMA_FRM_MIN 60u       /* the Ethernet minimum without FCS (MACs pad to it) */

/* Why a frame was skipped (0: it carries a datagram). The order of the
 * checks is this order (a frame is counted once, under its first failure). */
enum pdma_frm_err {
	PDMA_FRM_OK = 0,
	PDMA_FRM_E_OVERSIZE,  /* longer than max_len */
	PDMA_FRM_E_RUNT,      /* shorter than its headers; or an Ethernet-minimum frame
			       * (<= 64 bytes: padded by the MAC, maybe with FCS) whose IP
			       * datagram does not fit it, i.e. a truncated frame padded */
	PDMA_FRM_E_ETHERTYPE, /* not IPv4 (after at most one 802.1Q tag) */
	PDMA_FRM_E_IP_HDR,    /* IP version not 4, or IHL < 5 */
	PDMA_FRM_E_IP_LEN,    /* IP total length shorter than its header + UDP, or past the frame */
	PDMA_FRM_E_FRAGMENT,  /* MF set or a fragment offset */
	PDMA_FRM_E_NOT_UDP,   /* IP protocol not 17 */
	PDMA_FRM_E_PORT,      /* UDP destination port not the configured one */
	PDMA_FRM_E_UDP_LEN,   /* UDP length < 8 or past the IP datagram */
	PDMA_FRM_E_IP_CSUM,   /* IPv4 header checksum wrong */
	PDMA_FRM_E_UDP_CSUM,  /* UDP checksum (nonzero) wrong */
	PDMA_FRM_E__MAX
};

/* Bytes of p (even address on the device path's fast loop; any on the host)
 * added as big-endian 16-bit words into acc (ones' complement, carries
 * folded at the end by pdma_frm_fold). An odd last byte is the high half of
 * a word padded with zero. */
PDMA_DFR_FN uint64_t pdma_frm_sum(const uint8_t *p, uint32_t len, uint64_t acc)
{
#if defined(__CUDA_ARCH__)
	/* Aligned 32-bit loads where the start allows (buffers start 4-byte
	 * aligned; the IP header at 14 or 18 is 2-byte aligned): a 1500-byte
	 * frame is ~375 loads in one thread, not 1500. */
	if (!((uintptr_t)p & 1)) {
		if (((uintptr_t)p & 2) && len >= 2) {
			acc += (uint32_t)p[0] << 8 | p[1];
			p += 2;
			len -= 2;
		}
		for (; len >= 4; p += 4, len -= 4)
			acc += __byte_perm(*(const uint32_t *)p, 0, 0x0123);
	}
#else
	for (; len >= 4; p += 4, len -= 4)
		acc += (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
#endif
	for (; len >= 2; p += 2, len -= 2)
		acc += (uint32_t)p[0] << 8 | p[1];
	if (len)
		acc += (uint32_t)p[0] << 8;
	return acc;
}

/* The 16-bit ones' complement sum of acc (a sum of 16- and 32-bit words). */
PDMA_DFR_FN uint32_t pdma_frm_fold(uint64_t acc)
{
	while (acc >> 16)
		acc = (acc & 0xffffu) + (acc >> 16);
	return (uint32_t)acc;
}

/* The checksums of a frame whose headers are already valid: IPv4 header at
 * ip (ihl bytes), UDP datagram at udp (ulen bytes). Returns 0 or
 * PDMA_FRM_E_IP_CSUM / _UDP_CSUM. */
PDMA_DFR_FN int pdma_frm_csums(const uint8_t *ip, uint32_t ihl, const uint8_t *udp, uint32_t ulen,
			       uint32_t flags)
{
	const int trust = !(flags & PDMA_NIC_CQE_ERR);

	if (!(trust && (flags & PDMA_NIC_CQE_IPCS)) && pdma_frm_fold(pdma_frm_sum(ip, ihl, 0)) != 0xffffu)
		return PDMA_FRM_E_IP_CSUM;
	if (!(trust && (flags & PDMA_NIC_CQE_L4CS)) && (udp[6] | udp[7])) {
		/* Pseudo-header: source and destination address, protocol, UDP length. */
		uint64_t acc = pdma_frm_sum(ip + 12, 8, 17u + ulen);
		if (pdma_frm_fold(pdma_frm_sum(udp, ulen, acc)) != 0xffffu)
			return PDMA_FRM_E_UDP_CSUM;
	}
	return 0;
}

/* Validate frame f (len bytes, NIC status flags) against c: 0 with the UDP
 * payload (the VITA-49 datagram) at f + *dg_off, *dg_len bytes, or the
 * reason (enum pdma_frm_err). Reads no byte at or past f + len. */
PDMA_DFR_FN int pdma_frm_parse(const struct pdma_frm_cfg *c, const uint8_t *f, uint32_t len,
			       uint32_t flags, uint32_t *dg_off, uint32_t *dg_len)
{
	const uint32_t max = c->max_len ? c->max_len : PDMA_FRM_MAX_LEN;
	uint32_t l2 = PDMA_FRM_ETH, et, ihl, tot, ulen;
	const uint8_t *ip, *udp;

	if (len > max)
		return PDMA_FRM_E_OVERSIZE;
	if (len < PDMA_FRM_ETH)
		return PDMA_FRM_E_RUNT;
	et = (uint32_t)f[12] << 8 | f[13];
	if (et == 0x8100u) {
		if (len < PDMA_FRM_ETH + PDMA_FRM_VLAN)
			return PDMA_FRM_E_RUNT;
		l2 += PDMA_FRM_VLAN;
		et = (uint32_t)f[16] << 8 | f[17];
	}
	if (et != 0x0800u)
		return PDMA_FRM_E_ETHERTYPE;
	if (len < l2 + 20u + 8u)
		return PDMA_FRM_E_RUNT;
	ip = f + l2;
	ihl = (ip[0] & 15u) * 4u;
	if ((ip[0] >> 4) != 4u || ihl < 20u)
		return PDMA_FRM_E_IP_HDR;
	tot = (uint32_t)ip[2] << 8 | ip[3];
	if (l2 + tot > len) /* a frame cut short; at the Ethernet minimum, padded after the cut */
		return len <= PDMA_FRM_MIN + 4u ? PDMA_FRM_E_RUNT : PDMA_FRM_E_IP_LEN;
	if (tot < ihl + 8u)
		return PDMA_FRM_E_IP_LEN;
	if (((uint32_t)ip[6] << 8 | ip[7]) & 0x3fffu)
		return PDMA_FRM_E_FRAGMENT;
	if (ip[9] != 17u)
		return PDMA_FRM_E_NOT_UDP;
	udp = ip + ihl;
	if (((uint32_t)udp[2] << 8 | udp[3]) != c->port)
		return PDMA_FRM_E_PORT;
	ulen = (uint32_t)udp[4] << 8 | udp[5];
	if (ulen < 8u || ulen > tot - ihl)
		return PDMA_FRM_E_UDP_LEN;
	{
		const int e = pdma_frm_csums(ip, ihl, udp, ulen, flags);
		if (e)
			return e;
	}
	*dg_off = (uint32_t)(udp - f) + 8u;
	*dg_len = ulen - 8u;
	return PDMA_FRM_OK;
}

#endif /* PDMA_INGEST_DEFRAME_FRAME_H */
