// SPDX-License-Identifier: MIT
/* The forwarder's staging buffers (stage.h). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blocks/blocks.h"
#include "forward/stage.h"

/* GPU blocks are copied into the staging buffers (pdma_block_read): pinned
 * with cuMemHostRegister, that copy runs at the copy engines' rate rather
 * than through the driver's own bounce buffer. */
static void stage_pin(struct pdma_fwd_stage *s, int device)
{
	const struct pdma_cu_api *cu;
	pdma_cu_ctx c;
	pdma_cu_result r;
	char m[64];

	if (pdma_cu_get(&cu, m, sizeof(m))) {
		snprintf(s->pin, sizeof(s->pin), "in pageable memory (no CUDA driver: %s)", m);
		return;
	}
	r = cu->DeviceGet(&s->dev, device);
	if (r == PDMA_CU_SUCCESS)
		r = cu->DevicePrimaryCtxRetain(&s->ctx, s->dev);
	if (r == PDMA_CU_SUCCESS) {
		if (cu->CtxPushCurrent(s->ctx) == PDMA_CU_SUCCESS) {
			r = cu->MemHostRegister(s->mem, s->len, PDMA_CU_MEMHOSTREGISTER_PORTABLE);
			cu->CtxPopCurrent(&c);
		}
		if (r != PDMA_CU_SUCCESS)
			cu->DevicePrimaryCtxRelease(s->dev);
	}
	if (r != PDMA_CU_SUCCESS) {
		snprintf(s->pin, sizeof(s->pin), "in pageable memory (cuMemHostRegister: %s)", pdma_cu_errname(r));
		return;
	}
	s->cu = cu;
	snprintf(s->pin, sizeof(s->pin), "pinned by cuMemHostRegister");
}

/* the free list: taken from the head (the oldest copy), put back at the tail */
static void free_unlink(struct pdma_fwd_stage *s, struct pdma_stage_buf *b)
{
	*(b->prev ? &b->prev->next : &s->free_head) = b->next;
	*(b->next ? &b->next->prev : &s->free_tail) = b->prev;
	b->prev = b->next = NULL;
}

/* at the tail (the newest copy), or at the head: taken next */
static void free_push(struct pdma_fwd_stage *s, struct pdma_stage_buf *b, bool next)
{
	if (next) {
		b->prev = NULL;
		b->next = s->free_head;
		*(s->free_head ? &s->free_head->prev : &s->free_tail) = b;
		s->free_head = b;
	} else {
		b->next = NULL;
		b->prev = s->free_tail;
		*(s->free_tail ? &s->free_tail->next : &s->free_head) = b;
		s->free_tail = b;
	}
}

int pdma_fwd_stage_open(struct pdma_fwd_stage *s, struct pdma_ucx *u, const struct pdma_blocks *bl,
			uint32_t n, char *msg, size_t msglen)
{
	memset(s, 0, sizeof(*s));
	s->buf_bytes = bl->buf_bytes;
	s->n = n;
	if (n <= (SIZE_MAX - 4095) / bl->buf_bytes) { /* else no memory holds them: ENOMEM below */
		s->len = (n * bl->buf_bytes + 4095) / 4096 * 4096;
		s->mem = aligned_alloc(4096, s->len);
	}
	s->all = calloc(n, sizeof(*s->all));
	s->by_no = calloc(n, sizeof(*s->by_no));
	if (!s->mem || !s->all || !s->by_no ||
	    pdma_ucx_map(u, s->mem, n * bl->buf_bytes, UCS_MEMORY_TYPE_HOST, &s->memh)) {
		if (msg)
			snprintf(msg, msglen, "staging buffers: cannot allocate and map %u of %zu bytes "
				 "(--stage-buffers)", n, bl->buf_bytes);
		pdma_fwd_stage_close(s, u);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < n; i++) {
		s->all[i].p = (uint8_t *)s->mem + (size_t)i * bl->buf_bytes;
		free_push(s, &s->all[i], false);
	}
	if (bl->mem.kind != PDMA_BLOCK_HOST)
		stage_pin(s, bl->mem.device);
	else
		snprintf(s->pin, sizeof(s->pin), "in host memory");
	return 0;
}

struct pdma_stage_buf *pdma_fwd_stage_get(struct pdma_fwd_stage *s, const struct pdma_block *b,
					  uint64_t no, bool *copied, double *wait_s, double *copy_s)
{
	struct pdma_stage_buf *n = s->by_no[no % s->n];
	double t0, t1;
	int e;

	*copied = false;
	if (n && n->valid && n->of == no) {
		if (!n->refs++)
			free_unlink(s, n);
		return n;
	}
	n = s->free_head;
	if (!n)
		return NULL;
	free_unlink(s, n);
	n->valid = false;
	/* the copy is the staging cost; the wait before it is for the
	 * block's own production (its event) */
	t0 = pdma_ucx_now();
	e = pdma_blocks_ready(b);
	t1 = pdma_ucx_now();
	if (!e)
		e = pdma_block_read(b, 0, b->npackets, n->p);
	if (e) {
		free_push(s, n, true); /* nothing worth keeping: taken next */
		return NULL;
	}
	*wait_s += t1 - t0;
	*copy_s += pdma_ucx_now() - t1;
	n->valid = true;
	n->of = no;
	n->refs = 1;
	s->by_no[no % s->n] = n;
	*copied = true;
	return n;
}

void pdma_fwd_stage_put(struct pdma_fwd_stage *s, struct pdma_stage_buf *sb)
{
	if (!--sb->refs)
		free_push(s, sb, false);
}

void pdma_fwd_stage_close(struct pdma_fwd_stage *s, struct pdma_ucx *u)
{
	if (s->cu) {
		pdma_cu_ctx c;

		if (s->cu->CtxPushCurrent(s->ctx) == PDMA_CU_SUCCESS) {
			s->cu->MemHostUnregister(s->mem);
			s->cu->CtxPopCurrent(&c);
		}
		s->cu->DevicePrimaryCtxRelease(s->dev);
	}
	if (s->memh)
		u->api->mem_unmap(u->ctx, s->memh);
	free(s->mem);
	free(s->all);
	free(s->by_no);
	memset(s, 0, sizeof(*s));
}
