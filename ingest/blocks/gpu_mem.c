// SPDX-License-Identifier: MIT
/* Blocks out of the GPU deframer's window: the pools in device memory, the
 * copies, zeroing and events done by the deframer module (deframe/gpu.h's
 * blk_* operations), so that nothing here links CUDA. */
#include <errno.h>
#include <stdlib.h>

#include "blocks/blocks.h"
#include "deframe/gpu.h"
#include "deframe/gpu_batch.h"

struct gpu_mem {
	const struct pdma_gpu_ops *ops;
	struct pdma_gpu_dfr *g;
};

static int g_copy(void *arg, void *dst, const void *src, size_t n)
{
	struct gpu_mem *m = arg;

	return m->ops->blk_copy(m->g, dst, src, n);
}

static int g_zero(void *arg, void *dst, size_t n)
{
	struct gpu_mem *m = arg;

	return m->ops->blk_zero(m->g, dst, n);
}

static int g_fence(void *arg, void **event)
{
	struct gpu_mem *m = arg;

	return m->ops->blk_fence(m->g, event);
}

static int g_stream_wait(void *arg, intptr_t stream, void *event)
{
	struct gpu_mem *m = arg;

	return m->ops->blk_stream_wait(m->g, stream, event);
}

static void g_event_destroy(void *arg, void *event)
{
	struct gpu_mem *m = arg;

	m->ops->blk_event_destroy(m->g, event);
}

static int g_read(void *arg, void *dst, const void *src, size_t n, void *event)
{
	struct gpu_mem *m = arg;

	return m->ops->blk_read(m->g, dst, src, n, event);
}

static int g_alloc(void *arg, size_t n, void **p)
{
	struct gpu_mem *m = arg;

	return m->ops->dev_alloc(m->g, n, p);
}

static void g_free(void *arg, void *p)
{
	struct gpu_mem *m = arg;

	m->ops->dev_free(m->g, p);
}

int pdma_blocks_gpu_mem(struct pdma_gpu_batch *gb, struct pdma_blk_mem *mem, const uint8_t **window)
{
	struct gpu_mem *m = calloc(1, sizeof(*m));
	struct pdma_dfr_tables t;
	int e;

	if (!m)
		return -ENOMEM;
	m->ops = pdma_gpu_batch_ops(gb, &m->g);
	e = m->ops->blk_tables(m->g, &t);
	if (e) {
		free(m);
		return e;
	}
	*window = t.out;
	*mem = (struct pdma_blk_mem){ .kind = PDMA_BLOCK_CUDA, .device = pdma_gpu_batch_device(gb),
				      .copy = g_copy,
				      .zero = g_zero, .fence = g_fence, .stream_wait = g_stream_wait,
				      .event_destroy = g_event_destroy, .read = g_read, .alloc = g_alloc,
				      .free = g_free, .fini = free, .arg = m };
	return 0;
}
