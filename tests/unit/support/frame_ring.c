// SPDX-License-Identifier: MIT
/* Test support: frame rings built in memory (frame_ring.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "frame_ring.h"

#define FR_MAX 8192u /* buffers a ring may hold */

uint32_t frame_ring_add(struct frame_ring *r, const uint8_t *f, uint32_t len, uint8_t flags)
{
	uint32_t i = r->n++;

	if (len > FR_BUF)
		len = FR_BUF; /* the NIC would drop it; here: the buffer's worth */
	memcpy(r->base + (size_t)i * FR_BUF, f, len);
	r->fr[i] = (struct pdma_frame){ .off = i * FR_BUF, .len = (uint16_t)len, .flags = flags };
	return i;
}

int frame_ring_build(struct frame_ring *r, const struct pdma_gen_config *gc, uint16_t port, uint32_t every)
{
	struct pdma_gen_eth e = { .addr = { { 0x52, 0x54, 0, 0x12, 0x34, 0x56 }, { 2, 0, 0, 0, 0, 1 },
					    0x0202000a, 0x0f02000a, 4990, port },
				  .malformed_every = every };
	static uint8_t buf[PDMA_ETH_OVERSIZE_LEN + 65536];
	struct pdma_gen *g;
	uint32_t si;
	int n = 0, ret;

	memset(r, 0, sizeof(*r));
	r->base = calloc(FR_MAX, FR_BUF);
	r->fr = calloc(FR_MAX, sizeof(*r->fr));
	if (!r->base || !r->fr || pdma_ring_init(&r->slots, FR_MAX, 2048, PDMA_RING_FULL))
		return -ENOMEM;
	if ((ret = pdma_gen_open(gc, &g)))
		return ret;
	if ((ret = pdma_gen_eth_init(&e))) {
		pdma_gen_close(g);
		return ret;
	}
	while (r->n < FR_MAX && (n = pdma_gen_eth_next(&e, g, buf, sizeof(buf), &si)) > 0) {
		/* The frame as sent; oversize ones as the first FR_BUF bytes
		 * with the length the NIC would report were it to pass them. */
		uint32_t i = frame_ring_add(r, buf, (uint32_t)n, 0);
		if ((uint32_t)n > FR_BUF)
			r->fr[i].len = (uint16_t)n;
		if (si != UINT32_MAX) {
			uint8_t *s = pdma_ring_slot(&r->slots, r->good++);
			memcpy(s + PDMA_SLOT_HDR, buf + PDMA_ETH_HDRS, (uint32_t)n - PDMA_ETH_HDRS);
			pdma_slot_finish(s, PDMA_SLOT_HDR, (uint32_t)n - PDMA_ETH_HDRS, 0, r->good);
		}
	}
	memcpy(r->injected, e.injected, sizeof(r->injected));
	pdma_gen_eth_fini(&e);
	pdma_gen_close(g);
	return n < 0 ? n : 0;
}

void frame_ring_fini(struct frame_ring *r)
{
	free(r->base);
	free(r->fr);
	pdma_ring_fini(&r->slots);
	memset(r, 0, sizeof(*r));
}
