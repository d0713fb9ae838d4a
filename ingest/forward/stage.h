/* SPDX-License-Identifier: MIT */
/* The forwarder's staging buffers (stage.c): host memory a block is copied
 * into before it is sent, where UCX cannot send from the block's own memory
 * (GPU memory and a UCX without the CUDA memory type: Debian's) or --stage
 * asks for it. One copy serves every consumer the block goes to, whenever
 * each is sent it: a buffer counts its users (refs), and when the last send
 * that read it completes it goes to the end of the free list with its copy
 * still valid. A consumer that was out of credit and is sent the block later
 * finds the copy there, unless that many newer copies have taken the buffer
 * since (the oldest free buffer is taken first).
 *
 * Thread safety: none. Only the forwarder's thread uses them (its sends'
 * completions run in its calls to UCX's progress). */
#ifndef PDMA_INGEST_FORWARD_STAGE_H
#define PDMA_INGEST_FORWARD_STAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda/api.h"
#include "forward/ucx.h"

struct pdma_block;
struct pdma_blocks;

struct pdma_stage_buf {
	void *p;
	uint32_t refs;
	bool valid;                   /* p holds a whole copy of block number `of` */
	uint64_t of;
	struct pdma_stage_buf *prev, *next; /* the free list (refs 0) */
};

struct pdma_fwd_stage {
	void *mem;                    /* NULL: no staging */
	size_t len, buf_bytes;
	uint32_t n;
	ucp_mem_h memh;               /* mapped once for UCX: sends name it */
	struct pdma_stage_buf *all;
	struct pdma_stage_buf *free_head, *free_tail; /* oldest first */
	struct pdma_stage_buf **by_no; /* [n]: the last copy of block number k, at k % n */
	const struct pdma_cu_api *cu; /* non-NULL: mem pinned by cuMemHostRegister */
	pdma_cu_device dev;
	pdma_cu_ctx ctx;
	char pin[112];                /* where mem is ("in host memory", "pinned by ..."),
				       * for the forwarder's description */
};

/* n buffers of bl's block size, mapped on u; pinned through CUDA where bl's
 * blocks are in device memory, so that the copies run at the copy engines'
 * rate. 0, or -ENOMEM with msg set. */
int pdma_fwd_stage_open(struct pdma_fwd_stage *s, struct pdma_ucx *u, const struct pdma_blocks *bl,
			uint32_t n, char *msg, size_t msglen);
/* A copy of b, the forwarder's block number no (refs +1: the caller's).
 * The buffer that already holds it if one does; else the oldest free one,
 * filled once b's event has completed (*copied set, the time spent waiting
 * for the event and copying added to *wait_s and *copy_s). NULL when no
 * buffer is free or the copy failed. */
struct pdma_stage_buf *pdma_fwd_stage_get(struct pdma_fwd_stage *s, const struct pdma_block *b,
					  uint64_t no, bool *copied, double *wait_s, double *copy_s);
/* One user fewer: the last puts the buffer, its copy kept, at the end of
 * the free list. */
void pdma_fwd_stage_put(struct pdma_fwd_stage *s, struct pdma_stage_buf *sb);
/* Every buffer (no send may still read them): unpinned, unmapped, freed. */
void pdma_fwd_stage_close(struct pdma_fwd_stage *s, struct pdma_ucx *u);

#endif
