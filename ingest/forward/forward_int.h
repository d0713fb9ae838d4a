/* SPDX-License-Identifier: MIT */
/* The forwarder's inside view: opened on any subscription (forward.c). */
#ifndef PDMA_INGEST_FORWARD_FORWARD_INT_H
#define PDMA_INGEST_FORWARD_FORWARD_INT_H

#include <stddef.h>

#include "peerdma/forward.h"

/* The two parts of PDMA_FWD_POOL_RESERVE: the forwarder's subscription's
 * depth, and the blocks one consumer without credit may have waiting. */
#define PDMA_FWD_SUB_DEPTH 16
#define PDMA_FWD_QUEUE 16
_Static_assert(PDMA_FWD_SUB_DEPTH + PDMA_FWD_QUEUE == PDMA_FWD_POOL_RESERVE,
	       "PDMA_FWD_POOL_RESERVE is the forwarder's two queues");

/* As pdma_fwd_open, on sub (of any blocks layer: the session's, or
 * bench/forward's synthetic source), which the forwarder owns from here on
 * (closed on failure too). The thread ends when sub ends (-EPIPE). */
int pdma_fwd_open_sub(struct pdma_sub *sub, const struct pdma_fwd_attr *a, struct pdma_fwd **f,
		      char *msg, size_t msglen);

#endif
