// SPDX-License-Identifier: MIT
/*
 * The CUDA driver API's deallocation entry points, hooked: cuMemFree_v2,
 * cuMemFree, cuMemFreeAsync(_ptsz), cuMemFreeHost, cuMemHostUnregister,
 * cuMemUnmap, cuMemAddressFree, cuCtxDestroy_v2, cuDevicePrimaryCtxReset_v2.
 * Each tells libpeerdma first (it revokes the pins of the memory and notifies
 * its caches), then calls the driver's own function, then lets libpeerdma pin
 * that memory again (hooks.c, cuda_hooks.h).
 *
 * The CUDA runtime does not call these names (it fetches driver entry points
 * with cuGetProcAddress): its frees are hooked by runtime.c.
 *
 * cuMemRelease is not hooked: it only drops the handle; the memory stays
 * mapped, and usable by DMA, until cuMemUnmap, which is hooked.
 */
#include <stdint.h>

#include "cuda/api.h"
#include "hooks/hooks.h"

/* Our definitions of the interposed entry points (the driver's prototypes). */
pdma_cu_result cuMemFree_v2(pdma_cu_ptr dptr);
pdma_cu_result pdma_cuda_hook_cuMemFree_v2(pdma_cu_ptr dptr);
pdma_cu_result cuMemFree(unsigned int dptr);
pdma_cu_result cuMemFreeAsync(pdma_cu_ptr dptr, pdma_cu_stream s);
pdma_cu_result cuMemFreeAsync_ptsz(pdma_cu_ptr dptr, pdma_cu_stream s);
pdma_cu_result cuMemFreeHost(void *p);
pdma_cu_result cuMemHostUnregister(void *p);
pdma_cu_result cuMemUnmap(pdma_cu_ptr ptr, size_t size);
pdma_cu_result cuMemAddressFree(pdma_cu_ptr ptr, size_t size);
pdma_cu_result cuCtxDestroy_v2(pdma_cu_ctx ctx);
pdma_cu_result cuDevicePrimaryCtxReset_v2(pdma_cu_device dev);

#define NOT_INIT PDMA_CU_ERROR_NOT_INITIALIZED

typedef pdma_cu_result (*ptr_fn)(pdma_cu_ptr);
typedef pdma_cu_result (*ptr_stream_fn)(pdma_cu_ptr, pdma_cu_stream);
typedef pdma_cu_result (*host_fn)(void *);
typedef pdma_cu_result (*range_fn)(pdma_cu_ptr, size_t);
typedef pdma_cu_result (*ctx_fn)(pdma_cu_ctx);
typedef pdma_cu_result (*dev_fn)(pdma_cu_device);
typedef pdma_cu_result (*ptr32_fn)(unsigned int);

/* The public cuMemFree_v2 is an alias of this name, so that libpeerdma can
 * tell whether the process's global lookup reaches the hook
 * (PDMA_CUDA_HOOKS_DRIVER_FREE). */
pdma_cu_result pdma_cuda_hook_cuMemFree_v2(pdma_cu_ptr dptr)
{
	ptr_fn f;
	struct pdma_hook_call c;
	pdma_cu_result r;

	*(void **)&f = pdma_hook_driver_fn("cuMemFree_v2");
	pdma_hook_begin_alloc(&c, dptr);
	r = f ? f(dptr) : NOT_INIT;
	pdma_hook_end(&c);
	return r;
}

pdma_cu_result cuMemFree_v2(pdma_cu_ptr dptr) __attribute__((alias("pdma_cuda_hook_cuMemFree_v2")));

pdma_cu_result cuMemFree(unsigned int dptr)
{
	ptr32_fn f;
	struct pdma_hook_call c;
	pdma_cu_result r;

	*(void **)&f = pdma_hook_driver_fn("cuMemFree");
	pdma_hook_begin_alloc(&c, dptr);
	r = f ? f(dptr) : NOT_INIT;
	pdma_hook_end(&c);
	return r;
}

/* Stream-ordered free: the memory may be reused by the pool only after the
 * stream reaches the free, but no DMA may be started on it from now on. */
static pdma_cu_result free_async(const char *name, pdma_cu_ptr dptr, pdma_cu_stream s)
{
	ptr_stream_fn f;
	struct pdma_hook_call c;
	pdma_cu_result r;

	*(void **)&f = pdma_hook_driver_fn(name);
	pdma_hook_begin_alloc(&c, dptr);
	r = f ? f(dptr, s) : NOT_INIT;
	pdma_hook_end(&c);
	return r;
}

pdma_cu_result cuMemFreeAsync(pdma_cu_ptr dptr, pdma_cu_stream s)
{
	return free_async("cuMemFreeAsync", dptr, s);
}

pdma_cu_result cuMemFreeAsync_ptsz(pdma_cu_ptr dptr, pdma_cu_stream s)
{
	return free_async("cuMemFreeAsync_ptsz", dptr, s);
}

static pdma_cu_result host_release(const char *name, void *p)
{
	host_fn f;
	struct pdma_hook_call c;
	pdma_cu_result r;

	*(void **)&f = pdma_hook_driver_fn(name);
	pdma_hook_begin_alloc(&c, (uint64_t)(uintptr_t)p);
	r = f ? f(p) : NOT_INIT;
	pdma_hook_end(&c);
	return r;
}

pdma_cu_result cuMemFreeHost(void *p)
{
	return host_release("cuMemFreeHost", p);
}

pdma_cu_result cuMemHostUnregister(void *p)
{
	return host_release("cuMemHostUnregister", p);
}

static pdma_cu_result range_release(const char *name, pdma_cu_ptr ptr, size_t size)
{
	range_fn f;
	struct pdma_hook_call c;
	pdma_cu_result r;

	*(void **)&f = pdma_hook_driver_fn(name);
	pdma_hook_begin_range(&c, ptr, size);
	r = f ? f(ptr, size) : NOT_INIT;
	pdma_hook_end(&c);
	return r;
}

pdma_cu_result cuMemUnmap(pdma_cu_ptr ptr, size_t size)
{
	return range_release("cuMemUnmap", ptr, size);
}

pdma_cu_result cuMemAddressFree(pdma_cu_ptr ptr, size_t size)
{
	return range_release("cuMemAddressFree", ptr, size);
}

pdma_cu_result cuCtxDestroy_v2(pdma_cu_ctx ctx)
{
	ctx_fn f;
	struct pdma_hook_call c;
	pdma_cu_result r;

	*(void **)&f = pdma_hook_driver_fn("cuCtxDestroy_v2");
	pdma_hook_begin_context(&c, ctx, -1);
	r = f ? f(ctx) : NOT_INIT;
	pdma_hook_end(&c);
	return r;
}

pdma_cu_result cuDevicePrimaryCtxReset_v2(pdma_cu_device dev)
{
	dev_fn f;
	struct pdma_hook_call c;
	pdma_cu_result r;

	*(void **)&f = pdma_hook_driver_fn("cuDevicePrimaryCtxReset_v2");
	pdma_hook_begin_context(&c, NULL, dev);
	r = f ? f(dev) : NOT_INIT;
	pdma_hook_end(&c);
	return r;
}
