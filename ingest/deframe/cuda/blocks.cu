// SPDX-License-Identifier: MIT
/* What sample blocks (ingest/blocks/) need of the GPU deframer: the
 * window's device address, the copy of a block out of it (each 16-bit word
 * byte-swapped: VITA-49's big-endian I/Q to host order), zeroing of gap
 * packets, and events. Everything goes on stream 0 and is fenced there; the
 * other stream waits on the fence, so the next batch (on either stream)
 * cannot overwrite the window before a block's copy has read it. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>

#include "dfr.h"

/* n32 words; the pointers are 4-byte aligned (payloads are whole words). */
__global__ void __launch_bounds__(256) k_copy_swap16(uint32_t *dst, const uint32_t *src, size_t n32)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n32;
	     i += (size_t)gridDim.x * blockDim.x)
		dst[i] = __byte_perm(src[i], 0, 0x2301);
}

int dfr_blk_tables(struct pdma_gpu_dfr *g, struct pdma_dfr_tables *t)
{
	*t = g->t;
	return 0;
}

int dfr_blk_copy(struct pdma_gpu_dfr *g, void *dst, const void *src, size_t n)
{
	on_device dev(g->device);
	size_t n32 = n / 4;
	unsigned blocks = (unsigned)((n32 + 255) / 256);

	if (n % 4 || ((uintptr_t)dst | (uintptr_t)src) % 4)
		return -EINVAL;
	if (!n32)
		return 0;
	if (blocks > (unsigned)g->sms * 8)
		blocks = (unsigned)g->sms * 8;
	k_copy_swap16<<<blocks, 256, 0, g->s[0]>>>((uint32_t *)dst, (const uint32_t *)src, n32);
	CK(g, cudaGetLastError());
	return 0;
}

int dfr_blk_zero(struct pdma_gpu_dfr *g, void *dst, size_t n)
{
	on_device dev(g->device);
	CK(g, cudaMemsetAsync(dst, 0, n, g->s[0]));
	return 0;
}

int dfr_blk_fence(struct pdma_gpu_dfr *g, void **event)
{
	on_device dev(g->device);
	cudaEvent_t ev = (cudaEvent_t)*event;

	if (!ev) {
		CK(g, cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
		*event = ev;
	}
	CK(g, cudaEventRecord(ev, g->s[0]));
	CK(g, cudaStreamWaitEvent(g->s[1], ev, 0));
	return 0;
}


/* Its stream waits for the block's copies. The DLPack stream values 1 and 2
 * are the legacy and per-thread default streams, which is what
 * cudaStreamLegacy and cudaStreamPerThread are. */
int dfr_blk_stream_wait(struct pdma_gpu_dfr *g, intptr_t stream, void *event)
{
	on_device d(g->device);

	CK(g, cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)event, 0));
	return 0;
}

/* A host copy of (part of) a block, for consumers that do not link CUDA. */
int dfr_blk_read(struct pdma_gpu_dfr *g, void *dst, const void *src, size_t n, void *event)
{
	on_device d(g->device);

	if (event)
		CK(g, cudaEventSynchronize((cudaEvent_t)event));
	CK(g, cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost));
	return 0;
}

void dfr_blk_event_destroy(struct pdma_gpu_dfr *g, void *event)
{
	on_device dev(g->device);

	if (event)
		cudaEventDestroy((cudaEvent_t)event);
}
