/* SPDX-License-Identifier: MIT */
/* Test support: frame rings (ingest/deframe/frame.h) built in memory from the
 * generator's Ethernet frames (ingest/gen/eth.h), each frame at the start of
 * its own receive buffer as a NIC places them, and the same datagrams as a
 * slot ring (rx/ring.h), for comparing the frame path with the slot path. */
#ifndef PDMA_TEST_FRAME_RING_H
#define PDMA_TEST_FRAME_RING_H

#include <stdint.h>

#include "deframe/deframe.h"
#include "gen/eth.h"
#include "gen/gen.h"
#include "rx/ring.h"

#define FR_BUF 4096u /* receive buffer size */

struct frame_ring {
	uint8_t *base;            /* n buffers of FR_BUF bytes */
	struct pdma_frame *fr;    /* [n] */
	uint32_t n;
	struct pdma_ring slots;   /* the good frames' datagrams, in order (good slots) */
	uint32_t good;
	uint64_t injected[PDMA_FRM_E__MAX];
};

/* Frames of generator config gc with one malformed frame after every
 * `every` good ones (0: none), UDP destination port `port`. 0 or -errno. */
int frame_ring_build(struct frame_ring *r, const struct pdma_gen_config *gc, uint16_t port, uint32_t every);
void frame_ring_fini(struct frame_ring *r);
/* Append a frame (len bytes of f, NIC flags) as one more buffer: its index. */
uint32_t frame_ring_add(struct frame_ring *r, const uint8_t *f, uint32_t len, uint8_t flags);

#endif
