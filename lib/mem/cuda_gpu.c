// SPDX-License-Identifier: MIT
/*
 * The cuda backend's GPU memory (pdma_mem_cuda_ops): query, pins of whole
 * 64 KiB GPU pages through a dma-buf export or, without one, the nv-p2p path
 * (virtual address), unpin, and what a pin carries (pdma_cuda_pin_info).
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mem/cuda_int.h"
#include "monitor/monitor.h"

/* ------------------------------------------------------------ GPU memory */

void pdma_cuda_alloc_from_info(struct pdma_mem_alloc *alloc, const struct pdma_cuda_ptr_info *in)
{
	alloc->base = in->base;
	alloc->size = in->size;
	alloc->buffer_id = in->buffer_id;
	/* Trusted without a buffer-ID check only if the hooks saw it made:
	 * then every way it can leave is hooked (lib/hooks/seen.c). */
	alloc->unwatched = !pdma_cuda_alloc_seen(in->base, in->buffer_id);
}

/* Is the classified pointer GPU memory that may be pinned? */
static int gpu_kind_ok(struct pdma_cuda *ctx, const struct pdma_cuda_ptr_info *in, uint64_t addr)
{
	switch (in->kind) {
	case PDMA_CUDA_KIND_DEVICE:
		return 0;
	case PDMA_CUDA_KIND_MANAGED:
		pdma_cuda_log(ctx, 3, PDMA_CUDA_MANAGED_MSG, (unsigned long long)addr);
		return -EINVAL;
	case PDMA_CUDA_KIND_HOST:
		pdma_cuda_log(ctx, 3,
			 "cuda: %#llx is page-locked host memory, not GPU memory: register it through the host path (pdma_cuda_ops_for)",
			 (unsigned long long)addr);
		return -EINVAL;
	default:
		pdma_cuda_log(ctx, 3, "cuda: %#llx is not CUDA memory", (unsigned long long)addr);
		return -EFAULT;
	}
}

int pdma_mem_cuda_query(void *be, uint64_t addr, size_t len, struct pdma_mem_alloc *alloc)
{
	struct pdma_cuda *ctx = be;
	struct pdma_cuda_ptr_info in;
	int ret = pdma_cuda_classify_at(ctx, addr, &in, CL_ALLOC);

	if (!ret)
		ret = gpu_kind_ok(ctx, &in, addr);
	if (!ret)
		ret = pdma_cuda_check_range(ctx, &in, addr, len, in.base + in.size);
	if (!ret)
		pdma_cuda_alloc_from_info(alloc, &in);
	return ret;
}

/* One attribute, one driver call: a cache's per-hit check (mem.h). */
int pdma_mem_cuda_same_alloc(void *be, uint64_t addr, uint64_t buffer_id)
{
	return pdma_cuda_tag_check(be, addr, buffer_id);
}

static int dmabuf_enabled(void)
{
	const char *e = getenv("PEERDMA_CUDA_DMABUF");

	return !(e && !strcmp(e, "0"));
}

/* Export [start, start + len) as a dma-buf. The driver wants host-page
 * alignment and a range inside the allocation: a pin rounded out to 64 KiB may
 * pass the end of an allocation whose size is not a multiple of 64 KiB (the GPU
 * page behind it is still the allocation's), so retry up to the allocation's
 * end rounded to a host page. */
static int export_dmabuf(struct pdma_cuda *ctx, struct cuda_pin *p)
{
	uint64_t alloc_end = p->alloc_base + p->alloc_size;
	pdma_cu_result r;
	bool pushed;
	int fd = -1;

	p->dmabuf_start = p->va;
	p->dmabuf_len = p->len;
	pushed = pdma_cuda_ctx_enter(ctx, p->device);
	r = ctx->api->MemGetHandleForAddressRange(&fd, p->va, p->len,
						  PDMA_CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
	if (r == PDMA_CU_ERROR_INVALID_VALUE && p->va + p->len > alloc_end) {
		uint64_t end = (alloc_end + HOST_PAGE - 1) & ~(uint64_t)(HOST_PAGE - 1);

		p->dmabuf_len = (size_t)(end - p->va);
		r = ctx->api->MemGetHandleForAddressRange(&fd, p->va, p->dmabuf_len,
							  PDMA_CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
	}
	pdma_cuda_ctx_leave(ctx, pushed);
	if (r != PDMA_CU_SUCCESS)
		return pdma_cuda_cu_fail(ctx, "cuMemGetHandleForAddressRange (dma-buf export)", r);
	p->fd = fd;
	atomic_fetch_add_explicit(&ctx->st_export, 1, memory_order_relaxed);
	return 0;
}

static int gpu_pin(void *be, uint64_t addr, size_t len, pdma_mem_revoke_fn revoke, void *arg,
		   void **pin)
{
	struct pdma_cuda *ctx = be;
	struct pdma_cuda_ptr_info in;
	struct cuda_pin *p;
	uint64_t end_limit;
	void *cuctx = NULL;
	int ret;

	if (!len || ((addr | len) & (PDMA_CUDA_GPU_PAGE - 1))) {
		pdma_cuda_log(ctx, 3, "cuda: pin of [%#llx, +%zu): not whole 64 KiB GPU pages",
			 (unsigned long long)addr, len);
		return -EINVAL;
	}
	p = pdma_cuda_pin_begin(ctx, addr, len, revoke, arg);
	if (!p)
		return -ENOMEM;
	ret = pdma_cuda_classify(ctx, addr, &in);
	if (!ret)
		ret = gpu_kind_ok(ctx, &in, addr);
	if (ret)
		goto fail;
	/* The last GPU page of the allocation is the allocation's own. */
	end_limit = (in.base + in.size + PDMA_CUDA_GPU_PAGE - 1) & ~(uint64_t)(PDMA_CUDA_GPU_PAGE - 1);
	ret = pdma_cuda_check_range(ctx, &in, addr, len, end_limit);
	if (ret)
		goto fail;
	/* The guide: SYNC_MEMOPS on memory a third party will DMA into, so that
	 * synchronous CUDA memory operations on it complete before returning. */
	if (!in.sync_memops) {
		unsigned int one = 1;
		pdma_cu_result r = ctx->api->PointerSetAttribute(
			&one, PDMA_CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, (pdma_cu_ptr)in.base);

		if (r != PDMA_CU_SUCCESS) {
			ret = pdma_cuda_cu_fail(ctx, "cuPointerSetAttribute(SYNC_MEMOPS)", r);
			goto fail;
		}
		atomic_fetch_add_explicit(&ctx->st_sync, 1, memory_order_relaxed);
	}
	ctx->api->PointerGetAttribute(&cuctx, PDMA_CU_POINTER_ATTRIBUTE_CONTEXT, (pdma_cu_ptr)addr);
	pdma_cuda_pin_set_alloc(p, &in, cuctx);
	if (in.device >= 0 && in.device < ctx->ndev && ctx->devs[in.device].dmabuf_supported &&
	    ctx->api->MemGetHandleForAddressRange && dmabuf_enabled()) {
		p->kind = PDMA_CUDA_PIN_DMABUF;
		ret = export_dmabuf(ctx, p);
		if (ret)
			goto fail;
	} else {
		/* The kernel module pins va/len itself (nvidia_p2p_get_pages). */
		p->kind = PDMA_CUDA_PIN_NVP2P;
	}
	ret = pdma_cuda_pin_commit(p);
	if (ret)
		return ret;
	*pin = p;
	return 0;
fail:
	return pdma_cuda_pin_fail(p, ret);
}

void pdma_cuda_unpin(void *be, void *pin)
{
	struct cuda_pin *p = pin;
	struct pdma_cuda *ctx = p->ctx;
	bool revoked;
	int fd;

	(void)be;
	pthread_mutex_lock(&pdma_cuda_pins_lock);
	while (p->revoking)
		pthread_cond_wait(&pdma_cuda_pins_cond, &pdma_cuda_pins_lock);
	p->prev->next = p->next;
	p->next->prev = p->prev;
	revoked = p->revoked;
	fd = p->fd;
	p->fd = -1;
	pthread_mutex_unlock(&pdma_cuda_pins_lock);
	if (fd >= 0)
		close(fd);
	if (p->kind == PDMA_CUDA_PIN_HOST_REGISTERED && !revoked) {
		bool pushed = pdma_cuda_ctx_enter(ctx, 0);
		pdma_cu_result r = ctx->api->MemHostUnregister((void *)(uintptr_t)p->va);

		pdma_cuda_ctx_leave(ctx, pushed);
		if (r != PDMA_CU_SUCCESS)
			pdma_cuda_log(ctx, 4, "cuda: cuMemHostUnregister(%#llx) failed: %s",
				 (unsigned long long)p->va, pdma_cu_errname(r));
	}
	atomic_fetch_add_explicit(&ctx->st_unpins, 1, memory_order_relaxed);
	free(p);
	pdma_cuda_ctx_put(ctx);
}

int pdma_cuda_pin_info(void *pin, struct pdma_cuda_pin_info *info)
{
	struct cuda_pin *p = pin;

	if (!p)
		return -EINVAL;
	pthread_mutex_lock(&pdma_cuda_pins_lock);
	info->kind = p->kind;
	info->va = p->va;
	info->len = p->len;
	info->device = p->device;
	info->buffer_id = p->buffer_id;
	info->dmabuf_fd = p->fd;
	info->dmabuf_start = p->kind == PDMA_CUDA_PIN_DMABUF ? p->dmabuf_start : 0;
	info->dmabuf_len = p->kind == PDMA_CUDA_PIN_DMABUF ? p->dmabuf_len : 0;
	info->dmabuf_offset = p->kind == PDMA_CUDA_PIN_DMABUF ? p->va - p->dmabuf_start : 0;
	info->revoked = p->revoked;
	pthread_mutex_unlock(&pdma_cuda_pins_lock);
	return 0;
}

const struct pdma_mem_ops pdma_mem_cuda_ops = {
	.name = "cuda",
	.page_size = PDMA_CUDA_GPU_PAGE,
	.cpu_visible = false, /* GPU memory: not through a CPU pointer */
	.query = pdma_mem_cuda_query,
	.same_alloc = pdma_mem_cuda_same_alloc,
	.pin = gpu_pin,
	.unpin = pdma_cuda_unpin,
};

