// SPDX-License-Identifier: MIT
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "deframe/deframe.h"
#include "gen_ring.h"

uint32_t gen_ring_fill2(struct pdma_ring *r, const struct pdma_gen_config *a, const struct pdma_gen_config *b,
			bool finish)
{
	const uint16_t lay = r->dgram_off == PDMA_SLOT_HDR_TINY     ? PDMA_SLOT_TINY
			     : r->dgram_off == PDMA_SLOT_HDR_PACKED ? PDMA_SLOT_PACKED
								    : 0;
	struct pdma_gen *g[2];
	bool done[2] = { false, false };
	uint32_t si, n = 0;

	assert_int_equal(pdma_gen_open(a, &g[0]), 0);
	assert_int_equal(pdma_gen_open(b, &g[1]), 0);
	for (int turn = 0; !(done[0] && done[1]); turn++) {
		const int w = turn % 2;
		if (done[w])
			continue;
		uint8_t *s = pdma_ring_slot(r, n);
		const int len = pdma_gen_next(g[w], s + r->dgram_off, pdma_ring_room(r), &si);
		assert_true(len >= 0);
		if (len == 0) {
			done[w] = true;
			continue;
		}
		if (finish) {
			pdma_slot_finish(s, r->dgram_off, (uint32_t)len, 0, n);
		} else {
			struct pdma_slot_hdr *h = (struct pdma_slot_hdr *)s;
			h->len = (uint16_t)len;
			h->flags = lay;
		}
		n++;
		assert_true(n < r->nslots);
	}
	pdma_gen_close(g[0]);
	pdma_gen_close(g[1]);
	return n;
}
