/* SPDX-License-Identifier: MIT */
/* The forwarder's inside view: opened on any subscription (forward.c). */
#ifndef PDMA_INGEST_FORWARD_FORWARD_INT_H
#define PDMA_INGEST_FORWARD_FORWARD_INT_H

#include <stddef.h>

#include "peerdma/forward.h"

/* As pdma_fwd_open, on sub (of any blocks layer: the session's, or
 * bench/forward's synthetic source), which the forwarder owns from here on
 * (closed on failure too). The thread ends when sub ends (-EPIPE). */
int pdma_fwd_open_sub(struct pdma_sub *sub, const struct pdma_fwd_attr *a, struct pdma_fwd **f,
		      char *msg, size_t msglen);

#endif
