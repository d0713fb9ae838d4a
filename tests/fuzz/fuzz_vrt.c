// SPDX-License-Identifier: MIT
/* libFuzzer target: the VRT parser and the deframer's header stage.
 * Invariants: no out-of-bounds access (ASan), a parsed packet lies inside the
 * input, rebuilding a parsed packet reproduces its bytes exactly, and the
 * header stage's fast path (pdma_dfr_header_fast) accepts only packets that
 * the general path accepts as data, with the same descriptor and result,
 * whether the slot header carries the datagram's last word or not, in full,
 * packed and tiny slots. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "deframe/deframe.h"
#include "peerdma/vrt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct pdma_vrt_packet p;
	static uint8_t out[262144 + 64];
	int n;

	for (unsigned flags = 0; flags < 2; flags++) {
		n = pdma_vrt_parse(data, size, flags ? PDMA_VRT_EXACT : 0, &p);
		if (n < 0) {
			if (n <= -PDMA_VRT_E__MAX)
				abort();
			continue;
		}
		if ((size_t)n > size || n != p.size_words * 4 ||
		    (size_t)p.payload_off + p.payload_len > (size_t)n)
			abort();
		if (flags && (size_t)n != size)
			abort();
		struct pdma_vrt_packet q = p;
		int m = pdma_vrt_build(&q, data + p.payload_off, p.payload_len, out, sizeof(out));
		if (m != n || memcmp(out, data, (size_t)n) != 0)
			abort();
	}

	/* The deframer's header stage on the same bytes in a ring slot, in
	 * each layout (deframe.h): full, packed, tiny (an 80-byte slot). */
	for (int lay = 0; lay < 3 && size <= 9000; lay++) {
		static uint8_t slot[9016 + 64];
		struct pdma_slot_hdr *h = (struct pdma_slot_hdr *)slot;
		struct pdma_dfr_config c = { 4, 16, 8192, 4, 1000000 };
		struct pdma_dfr_desc d;
		struct pdma_dfr_pkt r;
		const uint32_t off = lay == 2 ? PDMA_SLOT_HDR_TINY : lay ? PDMA_SLOT_HDR_PACKED : PDMA_SLOT_HDR;
		const uint32_t ss = lay == 2 ? PDMA_SLOT_TINY_MAX : (uint32_t)sizeof(slot);
		if (size > ss - off)
			break;
		h->len = (uint16_t)size;
		h->flags = lay == 2 ? PDMA_SLOT_TINY : lay ? PDMA_SLOT_PACKED : 0;
		memcpy(slot + off, data, size);
		int st = pdma_dfr_header(&c, slot, ss, &d, &r);
		if (st == PDMA_DFR_ST_DATA &&
		    ((size_t)r.payload_off + r.payload_len > size || r.payload_len > c.max_payload))
			abort();
		if (st < 0 && -st >= PDMA_DFR_E__MAX)
			abort();
		/* The fast path from a slot header without and with the
		 * producer's finish (full and packed: the copy of the last
		 * word, PDMA_SLOT_TAIL; tiny: never a copy). */
		for (int tail = 0; tail < 2; tail++) {
			struct pdma_dfr_pre pre;
			struct pdma_dfr_desc fd;
			struct pdma_dfr_pkt fr;
			if (tail)
				pdma_slot_finish(slot, off, (uint32_t)size, 0, 7);
			pdma_dfr_prefix(slot, ss, 0, &pre);
			if (pre.off != off || (lay == 2 && (pre.flags & PDMA_SLOT_TAIL)))
				abort();
			if (pdma_dfr_header_fast(&c, slot, ss, &pre, &fd, &fr) &&
			    (st != PDMA_DFR_ST_DATA || fd.pkt != d.pkt || fd.stream_id != d.stream_id ||
			     fd.stream != d.stream || fd.count != d.count || fr.pkt != r.pkt ||
			     fr.payload_off != r.payload_off || fr.payload_len != r.payload_len ||
			     fr.cls != r.cls))
				abort();
			/* Without the trailer: accepted means DATA or a trailer
			 * error, by the trailer word alone. */
			uint32_t tr_off;
			if (pdma_dfr_header_fast_nt(&c, ss, &pre, &fd, &fr, &tr_off)) {
				int tok = !tr_off || pdma_vrt_trailer_ok(pdma_vrt_get32(slot + tr_off));
				if (st != (tok ? PDMA_DFR_ST_DATA : -PDMA_VRT_E_TRAILER) ||
				    fd.stream_id != d.stream_id || fd.count != d.count ||
				    (tok && (fr.pkt != r.pkt || fr.payload_len != r.payload_len)))
					abort();
			}
		}
	}
	return 0;
}
