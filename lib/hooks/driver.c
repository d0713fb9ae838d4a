// SPDX-License-Identifier: MIT
/*
 * The CUDA driver API's entry points through which device memory leaves the
 * process, hooked: cuMemFree_v2, cuMemFree, cuMemFreeAsync(_ptsz),
 * cuMemFreeHost, cuMemHostUnregister, cuIpcCloseMemHandle (a mapping of
 * another process's memory), cuMemUnmap and cuMemAddressFree (virtual memory
 * management), cuCtxDestroy_v2, cuDevicePrimaryCtxReset_v2. Each tells
 * libpeerdma first (it revokes the pins of the memory and notifies its
 * caches), then calls the driver's own function, then lets libpeerdma pin
 * that memory again (hooks.c, cuda_hooks.h).
 *
 * And the allocators whose memory leaves only through those: cuMemAlloc_v2,
 * cuMemAllocPitch_v2, cuMemAllocAsync(_ptsz), cuMemAllocFromPoolAsync(_ptsz).
 * What they return is listed (seen.c): libpeerdma's `auto` mode trusts
 * invalidation alone for listed memory and keeps the buffer-ID check for the
 * rest.
 *
 * The CUDA runtime does not call these names (it fetches driver entry points
 * with cuGetProcAddress): its allocations, frees and IPC close are hooked by
 * runtime.c. Nor does a program that fetches them itself (cuGetProcAddress,
 * cudaGetDriverEntryPoint): such calls are not seen; memory such a program
 * allocates is not listed, so it keeps the check.
 *
 * Not hooked, and why:
 *  - cuMemRelease only drops the handle; the memory stays mapped, and usable
 *    by DMA, until cuMemUnmap, which is hooked.
 *  - cuDevicePrimaryCtxRelease_v2 destroys the primary context only when it
 *    drops the last reference, and libpeerdma's CUDA backend holds one of
 *    its own on every device while it is open (lib/mem/cuda.c): the
 *    application's release is never the last while libpeerdma holds pins.
 *  - The pre-CUDA-4 names (cuCtxDestroy, cuDevicePrimaryCtxReset, ...):
 *    programs built with cuda.h since CUDA 4.0 call the _v2 names.
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
pdma_cu_result cuIpcCloseMemHandle(pdma_cu_ptr dptr);
pdma_cu_result cuMemAlloc_v2(pdma_cu_ptr *dptr, size_t size);
pdma_cu_result cuMemAllocPitch_v2(pdma_cu_ptr *dptr, size_t *pitch, size_t width, size_t height,
				  unsigned int elem);
pdma_cu_result cuMemAllocAsync(pdma_cu_ptr *dptr, size_t size, pdma_cu_stream s);
pdma_cu_result cuMemAllocAsync_ptsz(pdma_cu_ptr *dptr, size_t size, pdma_cu_stream s);
pdma_cu_result cuMemAllocFromPoolAsync(pdma_cu_ptr *dptr, size_t size, void *pool,
				       pdma_cu_stream s);
pdma_cu_result cuMemAllocFromPoolAsync_ptsz(pdma_cu_ptr *dptr, size_t size, void *pool,
					    pdma_cu_stream s);

#define NOT_INIT PDMA_CU_ERROR_NOT_INITIALIZED

typedef pdma_cu_result (*ptr_fn)(pdma_cu_ptr);
typedef pdma_cu_result (*ptr_stream_fn)(pdma_cu_ptr, pdma_cu_stream);
typedef pdma_cu_result (*host_fn)(void *);
typedef pdma_cu_result (*range_fn)(pdma_cu_ptr, size_t);
typedef pdma_cu_result (*ctx_fn)(pdma_cu_ctx);
typedef pdma_cu_result (*dev_fn)(pdma_cu_device);
typedef pdma_cu_result (*ptr32_fn)(unsigned int);
typedef pdma_cu_result (*alloc_fn)(pdma_cu_ptr *, size_t);
typedef pdma_cu_result (*pitch_fn)(pdma_cu_ptr *, size_t *, size_t, size_t, unsigned int);
typedef pdma_cu_result (*alloc_async_fn)(pdma_cu_ptr *, size_t, pdma_cu_stream);
typedef pdma_cu_result (*alloc_pool_fn)(pdma_cu_ptr *, size_t, void *, pdma_cu_stream);

/* The allocation (or IPC mapping) at dptr leaves through the driver's name. */
static pdma_cu_result ptr_release(const char *name, pdma_cu_ptr dptr)
{
	ptr_fn f;
	struct pdma_hook_call c;
	pdma_cu_result r;

	*(void **)&f = pdma_hook_driver_fn(name);
	pdma_hook_seen_remove(dptr);
	pdma_hook_begin_alloc(&c, dptr);
	r = f ? f(dptr) : NOT_INIT;
	pdma_hook_end(&c);
	return r;
}

/* The public cuMemFree_v2 is an alias of this name, so that libpeerdma can
 * tell whether the process's global lookup reaches the hook
 * (PDMA_CUDA_HOOKS_DRIVER_FREE). */
pdma_cu_result pdma_cuda_hook_cuMemFree_v2(pdma_cu_ptr dptr)
{
	return ptr_release("cuMemFree_v2", dptr);
}

pdma_cu_result cuMemFree_v2(pdma_cu_ptr dptr) __attribute__((alias("pdma_cuda_hook_cuMemFree_v2")));

pdma_cu_result cuMemFree(unsigned int dptr)
{
	ptr32_fn f;
	struct pdma_hook_call c;
	pdma_cu_result r;

	*(void **)&f = pdma_hook_driver_fn("cuMemFree");
	pdma_hook_seen_remove(dptr);
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
	pdma_hook_seen_remove(dptr);
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
	/* Which listed allocations were the context's is not known here:
	 * forget them all (the survivors go back to the buffer-ID check). */
	pdma_hook_seen_clear();
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
	pdma_hook_seen_clear();
	pdma_hook_begin_context(&c, NULL, dev);
	r = f ? f(dev) : NOT_INIT;
	pdma_hook_end(&c);
	return r;
}

/* Another process's allocation, mapped here by cuIpcOpenMemHandle: the
 * mapping is its own allocation in this process (cuPointerGetAttributes
 * gives its range), and closing it unmaps that range. */
pdma_cu_result cuIpcCloseMemHandle(pdma_cu_ptr dptr)
{
	return ptr_release("cuIpcCloseMemHandle", dptr);
}

/* ------------------------------------------------------------ allocators */

pdma_cu_result cuMemAlloc_v2(pdma_cu_ptr *dptr, size_t size)
{
	alloc_fn f;
	pdma_cu_result r;

	*(void **)&f = pdma_hook_driver_fn("cuMemAlloc_v2");
	r = f ? f(dptr, size) : NOT_INIT;
	if (r == PDMA_CU_SUCCESS)
		pdma_hook_allocated(*dptr);
	return r;
}

pdma_cu_result cuMemAllocPitch_v2(pdma_cu_ptr *dptr, size_t *pitch, size_t width, size_t height,
				  unsigned int elem)
{
	pitch_fn f;
	pdma_cu_result r;

	*(void **)&f = pdma_hook_driver_fn("cuMemAllocPitch_v2");
	r = f ? f(dptr, pitch, width, height, elem) : NOT_INIT;
	if (r == PDMA_CU_SUCCESS)
		pdma_hook_allocated(*dptr);
	return r;
}

static pdma_cu_result alloc_async(const char *name, pdma_cu_ptr *dptr, size_t size,
				  pdma_cu_stream s)
{
	alloc_async_fn f;
	pdma_cu_result r;

	*(void **)&f = pdma_hook_driver_fn(name);
	r = f ? f(dptr, size, s) : NOT_INIT;
	if (r == PDMA_CU_SUCCESS)
		pdma_hook_allocated(*dptr);
	return r;
}

pdma_cu_result cuMemAllocAsync(pdma_cu_ptr *dptr, size_t size, pdma_cu_stream s)
{
	return alloc_async("cuMemAllocAsync", dptr, size, s);
}

pdma_cu_result cuMemAllocAsync_ptsz(pdma_cu_ptr *dptr, size_t size, pdma_cu_stream s)
{
	return alloc_async("cuMemAllocAsync_ptsz", dptr, size, s);
}

static pdma_cu_result alloc_pool(const char *name, pdma_cu_ptr *dptr, size_t size, void *pool,
				 pdma_cu_stream s)
{
	alloc_pool_fn f;
	pdma_cu_result r;

	*(void **)&f = pdma_hook_driver_fn(name);
	r = f ? f(dptr, size, pool, s) : NOT_INIT;
	if (r == PDMA_CU_SUCCESS)
		pdma_hook_allocated(*dptr);
	return r;
}

pdma_cu_result cuMemAllocFromPoolAsync(pdma_cu_ptr *dptr, size_t size, void *pool,
				       pdma_cu_stream s)
{
	return alloc_pool("cuMemAllocFromPoolAsync", dptr, size, pool, s);
}

pdma_cu_result cuMemAllocFromPoolAsync_ptsz(pdma_cu_ptr *dptr, size_t size, void *pool,
					    pdma_cu_stream s)
{
	return alloc_pool("cuMemAllocFromPoolAsync_ptsz", dptr, size, pool, s);
}
