/* SPDX-License-Identifier: MIT */
/* The forwarder's staging buffers (stage.c): host memory a block is copied
 * into before it is sent, where UCX cannot send from the block's own memory
 * (GPU memory and a UCX without the CUDA memory type: Debian's) or --stage
 * asks for it. One copy serves every consumer the block goes to: a buffer
 * counts its users (refs) and goes back to the free list when the last
 * send that read it completes.
 *
 * Thread safety: none. Only the forwarder's thread uses them (its sends'
 * completions run in its calls to UCX's progress). */
#ifndef PDMA_INGEST_FORWARD_STAGE_H
#define PDMA_INGEST_FORWARD_STAGE_H

#include <stddef.h>
#include <stdint.h>

#include "cuda/api.h"
#include "forward/ucx.h"

struct pdma_block;
struct pdma_blocks;

struct pdma_stage_buf {
	void *p;
	uint32_t refs;
	struct pdma_stage_buf *next;
};

struct pdma_fwd_stage {
	void *mem;                    /* NULL: no staging */
	size_t len, buf_bytes;
	ucp_mem_h memh;               /* mapped once for UCX: sends name it */
	struct pdma_stage_buf *free, *all;
	const struct pdma_cu_api *cu; /* non-NULL: mem pinned by cuMemHostRegister */
	pdma_cu_device dev;
	pdma_cu_ctx ctx;
	char pin[96];                 /* how mem is pinned, for the forwarder's description */
};

/* n buffers of bl's block size, mapped on u; pinned through CUDA where bl's
 * blocks are in device memory, so that the copies run at the copy engines'
 * rate. 0, or -ENOMEM with msg set. */
int pdma_fwd_stage_open(struct pdma_fwd_stage *s, struct pdma_ucx *u, const struct pdma_blocks *bl,
			uint32_t n, char *msg, size_t msglen);
/* A copy of b in a free buffer (refs 1: the caller's), once b's event has
 * completed; NULL when no buffer is free or the copy failed. The time spent
 * waiting for the event and copying is added to *wait_s and *copy_s. */
struct pdma_stage_buf *pdma_fwd_stage_copy(struct pdma_fwd_stage *s, const struct pdma_block *b,
					   double *wait_s, double *copy_s);
/* One user fewer: the last returns the buffer to the free list. */
void pdma_fwd_stage_put(struct pdma_fwd_stage *s, struct pdma_stage_buf *sb);
/* Every buffer (no send may still read them): unpinned, unmapped, freed. */
void pdma_fwd_stage_close(struct pdma_fwd_stage *s, struct pdma_ucx *u);

#endif
