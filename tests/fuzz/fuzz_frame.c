// SPDX-License-Identifier: MIT
/* libFuzzer target: the frame-ring parser (ingest/deframe/frame.h) and the
 * frame header stage both deframers run. Input: one byte of NIC status flags
 * (PDMA_NIC_CQE_*), one byte choosing the UDP port to want (the frame's own
 * destination port, or 4991), then the frame. Invariants: no byte read
 * outside the frame (ASan: the frame is copied to a buffer of exactly its
 * length); a reason in range; an accepted frame's datagram lies inside it,
 * after at least the 42 header bytes; the header stage agrees with the
 * parser and, on the datagram, its fast path (the GPU's) with its general
 * path; a frame the parser accepts with checksums checked is accepted the
 * same with the NIC's flags; and the generator's framing of the datagram
 * (gen/eth.c) parses back to it, each malformed kind of it to that kind. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "deframe/deframe.h"
#include "gen/eth.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t big[PDMA_ETH_OVERSIZE_LEN + 65536];
	struct pdma_dfr_config c = { 4, 16, 8192, 4, 1000000 };
	uint32_t off, len, off2, len2;

	if (size < 2 || size > 65535 + 2)
		return 0;
	const uint8_t flags = data[0], want = data[1];
	const uint32_t n = (uint32_t)size - 2;
	uint8_t *f = malloc(n ? n : 1);
	if (!f)
		return 0;
	memcpy(f, data + 2, n);
	struct pdma_frm_cfg fc = { want & 1 ? 0 : 65535, 4991, 0 };
	if ((want & 2) && n >= 38)
		fc.port = (uint16_t)(f[36] << 8 | f[37]); /* the port of an untagged frame */

	int why = pdma_frm_parse(&fc, f, n, flags, &off, &len);
	if (why < 0 || why >= PDMA_FRM_E__MAX)
		abort();
	if (!why && (off < PDMA_ETH_HDRS || (uint64_t)off + len > n))
		abort();
	/* Checked and found right: the NIC saying so changes nothing. */
	int why0 = pdma_frm_parse(&fc, f, n, 0, &off2, &len2);
	if (!why0 && (pdma_frm_parse(&fc, f, n, PDMA_NIC_CQE_IPCS | PDMA_NIC_CQE_L4CS, &off, &len) || off != off2 ||
		      len != len2))
		abort();
	why = pdma_frm_parse(&fc, f, n, flags, &off, &len);

	/* The header stage: the parser's verdict, then the datagram's. */
	struct pdma_dfr_desc d, d2;
	struct pdma_dfr_pkt r, r2;
	struct pdma_vrt_packet v;
	uint32_t dg;
	int st = pdma_dfr_frame_v(&c, &fc, f, n, flags, &d, &r, &v, &dg);
	if (why ? st != -PDMA_DFR_E_FRAME || d.count != why || (d.count & 0x10) : st == -PDMA_DFR_E_FRAME)
		abort();
	if (!why) {
		if (st == PDMA_DFR_ST_DATA && (uint64_t)r.payload_off + r.payload_len > n)
			abort();
		if (pdma_dfr_dgram_fast(&c, f + off, len, &d2, &r2) &&
		    (st != PDMA_DFR_ST_DATA || d2.pkt != d.pkt || d2.stream_id != d.stream_id || d2.count != d.count ||
		     r2.payload_off + off != r.payload_off || r2.payload_len != r.payload_len || r2.cls != r.cls))
			abort();
	}

	/* The generator's framing of these bytes as a datagram. */
	if (n <= 65535 - PDMA_ETH_HDRS - 20) {
		const struct pdma_eth_addr a = { { 1, 2, 3, 4, 5, 6 }, { 7 }, 0x0100000a, 0x0200000a, flags, 4991 };
		const struct pdma_frm_cfg gc = { 65535, 4991, 0 };
		memcpy(big + PDMA_ETH_HDRS, f, n);
		int fl = pdma_eth_frame(big, &a, n, want, 1);
		if (fl != (int)(n + PDMA_ETH_HDRS) || pdma_frm_parse(&gc, big, (uint32_t)fl, 0, &off, &len) ||
		    off != PDMA_ETH_HDRS || len != n || memcmp(big + off, f, n))
			abort();
		uint32_t k = want % PDMA_ETH_MALFORMED_KINDS;
		int kind = pdma_eth_malformed_kind[k];
		int ml = pdma_eth_malform(big, (uint32_t)fl, sizeof(big), kind);
		if (fl > 64 && (ml < 0 || (kind != PDMA_FRM_E_OVERSIZE &&
					   pdma_frm_parse(&gc, big, (uint32_t)ml, 0, &off, &len) != kind)))
			abort();
		if (fl > 64 && kind == PDMA_FRM_E_OVERSIZE &&
		    (ml < (int)PDMA_ETH_OVERSIZE_LEN || pdma_frm_parse(&gc, big, (uint32_t)ml, 0, &off, &len)))
			abort();
	}
	free(f);
	return 0;
}
