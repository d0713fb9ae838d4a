// SPDX-License-Identifier: MIT
/* A block as a DLPack tensor (Debian's libdlpack-dev, dlpack.h 0.6: the
 * legacy DLManagedTensor that numpy 1.22+, CuPy and PyTorch import): int16
 * [nsamples, 2], I and Q, compact, on the block's device. The tensor holds
 * its own reference to the block; its deleter drops it. */
#include <dlpack/dlpack.h>
#include <errno.h>
#include <stdlib.h>

#include "blocks/blocks.h"

struct blk_tensor {
	DLManagedTensor t;        /* first: what the consumer gets */
	int64_t shape[2];
	struct pdma_block *b;
};

static void tensor_delete(DLManagedTensor *t)
{
	struct blk_tensor *bt = (struct blk_tensor *)t;

	pdma_block_release(bt->b);
	free(bt);
}

int pdma_block_dlpack(struct pdma_block *b, intptr_t stream, void **managed_tensor)
{
	struct blk_tensor *bt;
	DLDeviceType dev;

	if (!b || !managed_tensor)
		return -EINVAL;
	switch (b->mem) {
	case PDMA_BLOCK_HOST: dev = kDLCPU; break;
	case PDMA_BLOCK_CUDA: dev = kDLCUDA; break;
	case PDMA_BLOCK_CUDA_HOST: dev = kDLCUDAHost; break;
	default: return -EINVAL;
	}
	/* The DLPack protocol: a CPU consumer passes no stream (-1 here); a
	 * CUDA consumer its stream, 0 being disallowed (ambiguous). */
	if (b->mem == PDMA_BLOCK_CUDA ? stream == 0 : stream != -1)
		return -EINVAL;
	if (b->mem == PDMA_BLOCK_CUDA && b->cuda_event && stream != -1) {
		int e = pdma_blocks_stream_wait(b, stream);

		if (e)
			return e;
	}
	bt = calloc(1, sizeof(*bt));
	if (!bt)
		return -ENOMEM;
	pdma_block_retain(b);
	bt->b = b;
	bt->shape[0] = (int64_t)b->nsamples;
	bt->shape[1] = 2;
	bt->t.dl_tensor.data = b->data;
	bt->t.dl_tensor.device = (DLDevice){ .device_type = dev,
					     .device_id = b->mem == PDMA_BLOCK_HOST ? 0 : b->device };
	bt->t.dl_tensor.ndim = 2;
	bt->t.dl_tensor.dtype = (DLDataType){ .code = kDLInt, .bits = 16, .lanes = 1 };
	bt->t.dl_tensor.shape = bt->shape;
	bt->t.dl_tensor.strides = NULL; /* compact, row-major */
	bt->t.dl_tensor.byte_offset = 0;
	bt->t.manager_ctx = bt;
	bt->t.deleter = tensor_delete;
	*managed_tensor = &bt->t;
	return 0;
}
