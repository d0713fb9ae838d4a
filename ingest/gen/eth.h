/* SPDX-License-Identifier: MIT */
/*
 * Ethernet/IPv4/UDP framing of the generator's datagrams, as a NIC receives
 * them: `peerdma gen --eth` sends each frame as the payload of one UDP
 * datagram to QEMU's `-netdev dgram` socket, which hands it to the guest NIC
 * as a received frame; the pcap writer frames its records with the same
 * headers. Also the malformed frames that --malformed inserts, one per kind
 * the frame-ring deframers skip (ingest/deframe/frame.h, whose reasons name
 * the kinds), so a receiver's per-reason counters can be compared exactly.
 *
 * Pure functions over caller buffers; thread-safe.
 */
#ifndef PDMA_INGEST_GEN_ETH_H
#define PDMA_INGEST_GEN_ETH_H

#include <stdint.h>

#include "deframe/frame.h"

#define PDMA_ETH_HDRS 42u /* Ethernet II (14) + IPv4 (20) + UDP (8) */
/* Length of the oversize malformed frame: past the largest receive buffer
 * (PDMA_FRM_MAX_LEN) and the deframers' default limit. */
#define PDMA_ETH_OVERSIZE_LEN 4200u

struct pdma_eth_addr {
	uint8_t dst_mac[6], src_mac[6];
	uint32_t src_ip, dst_ip; /* network byte order */
	uint16_t sport, dport;   /* host byte order */
};

/* Headers for the len-byte datagram at f + PDMA_ETH_HDRS, written to
 * f[0..42): IPv4 with DF, TTL 64 and identification ip_id, a valid header
 * checksum; the UDP checksum over the datagram when udp_csum (a checksum
 * that comes out 0 is sent as 0xffff, as RFC 768 says), else 0 (none).
 * Returns the frame's length, or -EMSGSIZE when the IP datagram would pass
 * 65535 bytes. */
int pdma_eth_frame(uint8_t *f, const struct pdma_eth_addr *a, uint32_t len, uint16_t ip_id, int udp_csum);

/* The kinds --malformed inserts, in its cycle order; each one's reason
 * (enum pdma_frm_err) is what a frame-ring deframer counts it as. */
#define PDMA_ETH_MALFORMED_KINDS 11u
extern const uint8_t pdma_eth_malformed_kind[PDMA_ETH_MALFORMED_KINDS];

/* Turn the valid frame f (len bytes, from pdma_eth_frame with a UDP
 * checksum) into a malformed one of kind why (enum pdma_frm_err), in place,
 * breaking exactly that property and keeping the rest valid. cap is f's
 * size: PDMA_ETH_OVERSIZE_LEN at least for PDMA_FRM_E_OVERSIZE. Returns
 * the new length, or -EINVAL (unknown kind, frame shorter than 65 bytes, or
 * cap too small). A runt is 34 bytes (Ethernet and IPv4 headers): a MAC that
 * pads it to 60 (+ 4 FCS) still delivers a runt by frame.h's rule. */
int pdma_eth_malform(uint8_t *f, uint32_t len, uint32_t cap, int why);

/*
 * The generator's datagrams as frames (what `peerdma gen --eth` sends, and
 * what tests build frame rings from): pdma_gen_next's datagrams in its order,
 * each framed with addr and a UDP checksum, the IPv4 identification counting
 * up; with malformed_every N > 0, after every N good frames one malformed
 * frame, a copy of the last good one broken in the next kind of
 * pdma_eth_malformed_kind[] (cycling). Injections are counted by kind.
 */
struct pdma_gen;
struct pdma_gen_eth {
	struct pdma_eth_addr addr;
	uint32_t malformed_every;               /* 0: none */
	uint64_t good;                          /* frames carrying a datagram */
	uint64_t injected[PDMA_FRM_E__MAX];     /* malformed frames by kind (reason) */
	/* private */
	uint32_t since, next_kind;
	uint16_t ip_id;
	uint32_t last_len;
	uint8_t *last;                          /* the last good frame */
};

/* addr and malformed_every set by the caller first; allocates the copy of
 * the last frame. 0 or -ENOMEM. */
int pdma_gen_eth_init(struct pdma_gen_eth *e);
void pdma_gen_eth_fini(struct pdma_gen_eth *e);
/* The next frame into buf (cap bytes: packet size + PDMA_ETH_HDRS, and
 * PDMA_ETH_OVERSIZE_LEN at least): its length, 0 at the end, or a negative
 * errno. *stream: the datagram's stream index, or UINT32_MAX for a
 * malformed frame. */
int pdma_gen_eth_next(struct pdma_gen_eth *e, struct pdma_gen *g, uint8_t *buf, uint32_t cap, uint32_t *stream);
/* All malformed frames injected. */
uint64_t pdma_gen_eth_malformed(const struct pdma_gen_eth *e);

#endif /* PDMA_INGEST_GEN_ETH_H */
