// SPDX-License-Identifier: MIT
/*
 * The cuda backend's host memory (pdma_mem_cuda_host_ops): memory the GPU
 * uses, pinned with cuMemHostRegister unless the application registered it
 * already (then its own cuMemHostUnregister revokes our pin first).
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

/* ----------------------------------------------------------- host memory */

static int host_query(void *be, uint64_t addr, size_t len, struct pdma_mem_alloc *alloc)
{
	struct pdma_cuda *ctx = be;
	struct pdma_cuda_ptr_info in;
	int ret = pdma_cuda_classify_at(ctx, addr, &in, CL_ALLOC);

	if (ret)
		return ret;
	switch (in.kind) {
	case PDMA_CUDA_KIND_HOST:
		ret = pdma_cuda_check_range(ctx, &in, addr, len, in.base + in.size);
		if (!ret)
			pdma_cuda_alloc_from_info(alloc, &in);
		return ret;
	case PDMA_CUDA_KIND_UNKNOWN:
		/* Plain host memory: the allocation is not known; the range is. */
		if (!len || addr + len < addr)
			return -EFAULT;
		pdma_page_round(HOST_PAGE, addr, len, &alloc->base, &alloc->size);
		alloc->buffer_id = 0;
		/* Its munmap or free never reaches the CUDA hooks. */
		alloc->unwatched = true;
		return 0;
	case PDMA_CUDA_KIND_MANAGED:
		pdma_cuda_log(ctx, 3, PDMA_CUDA_MANAGED_MSG, (unsigned long long)addr);
		return -EINVAL;
	default:
		pdma_cuda_log(ctx, 3, "cuda: %#llx is GPU memory, not host memory (use pdma_cuda_ops_for)",
			 (unsigned long long)addr);
		return -EINVAL;
	}
}

static int host_pin(void *be, uint64_t addr, size_t len, pdma_mem_revoke_fn revoke, void *arg,
		    void **pin)
{
	struct pdma_cuda *ctx = be;
	struct pdma_cuda_ptr_info in;
	struct cuda_pin *p;
	int ret;

	if (!len || ((addr | len) & (HOST_PAGE - 1))) {
		pdma_cuda_log(ctx, 3, "cuda: host pin of [%#llx, +%zu): not whole pages",
			 (unsigned long long)addr, len);
		return -EINVAL;
	}
	ret = host_query(be, addr, len, &(struct pdma_mem_alloc){ 0 });
	if (ret)
		return ret;
	p = pdma_cuda_pin_begin(ctx, addr, len, revoke, arg);
	if (!p)
		return -ENOMEM;
	ret = pdma_cuda_classify_at(ctx, addr, &in, CL_ALLOC);
	if (ret)
		goto fail;
	if (in.kind == PDMA_CUDA_KIND_HOST) {
		p->kind = PDMA_CUDA_PIN_HOST_CUDA;
		pdma_cuda_pin_set_alloc(p, &in, NULL);
	} else if (in.kind == PDMA_CUDA_KIND_UNKNOWN) {
		ret = pdma_cuda_host_register(ctx, (void *)(uintptr_t)addr, len);
		if (ret)
			goto fail;
		p->kind = PDMA_CUDA_PIN_HOST_REGISTERED;
		if (!pdma_cuda_classify_at(ctx, addr, &in, CL_ALLOC)) {
			in.base = addr;
			in.size = len;
			pdma_cuda_pin_set_alloc(p, &in, NULL);
		}
	} else {
		ret = -EINVAL; /* changed kind since host_query: freed and reused */
		goto fail;
	}
	/* Host pins have no device: the context hooks leave them alone. */
	ret = pdma_cuda_pin_commit(p);
	if (ret)
		return ret;
	*pin = p;
	return 0;
fail:
	return pdma_cuda_pin_fail(p, ret);
}

const struct pdma_mem_ops pdma_mem_cuda_host_ops = {
	.name = "cuda-host",
	.page_size = HOST_PAGE,
	.cpu_visible = true,
	.query = host_query,
	.pin = host_pin,
	.unpin = pdma_cuda_unpin,
};

int pdma_cuda_host_register(struct pdma_cuda *ctx, void *p, size_t len)
{
	pdma_cu_result r;
	bool pushed = pdma_cuda_ctx_enter(ctx, 0);

	r = ctx->api->MemHostRegister(p, len,
				      PDMA_CU_MEMHOSTREGISTER_PORTABLE |
					      PDMA_CU_MEMHOSTREGISTER_DEVICEMAP);
	pdma_cuda_ctx_leave(ctx, pushed);
	if (r != PDMA_CU_SUCCESS)
		return pdma_cuda_cu_fail(ctx, "cuMemHostRegister", r);
	return 0;
}

int pdma_cuda_host_unregister(struct pdma_cuda *ctx, void *p)
{
	pdma_cu_result r;
	bool pushed = pdma_cuda_ctx_enter(ctx, 0);

	r = ctx->api->MemHostUnregister(p);
	pdma_cuda_ctx_leave(ctx, pushed);
	if (r != PDMA_CU_SUCCESS)
		return pdma_cuda_cu_fail(ctx, "cuMemHostUnregister", r);
	return 0;
}

