// SPDX-License-Identifier: MIT
/*
 * CUDA deallocation hooks: invalidation without a per-use tag check.
 *
 * libpeerdma defines the driver API's deallocation entry points itself
 * (cuMemFree_v2, cuMemFree, cuMemFreeAsync, cuMemFreeHost, cuMemHostUnregister,
 * cuMemUnmap, cuMemAddressFree, cuCtxDestroy_v2, cuDevicePrimaryCtxReset_v2).
 * Each one revokes the pins of the memory it is about to release and calls
 * pdma_monitor_notify(PDMA_HMEM_CUDA, base, size) (pdma_cuda_release_begin),
 * then calls the driver's own function, and keeps new pins of that memory out
 * until the driver has returned (pdma_cuda_release_end). They take effect by
 * symbol interposition:
 *  - LD_PRELOAD=libpeerdma.so: every dynamic caller of these symbols binds here;
 *  - linking libpeerdma (shared, before libcuda; or static): the program's own
 *    calls bind here.
 * The CUDA runtime does not call these symbols (it fetches driver entry points
 * with cuGetProcAddress): programs using cudaFree need the runtime shim as well
 * (lib/cudart_hook/cudart_hook.c -> libpeerdma_cudart_hook.so, LD_PRELOAD, or
 * dlopen RTLD_GLOBAL before libcudart), which calls back into libpeerdma through
 * the functions pdma_cuda_hooks_attach() registers with it (pdma_cuda_open does).
 * A statically linked CUDA runtime cannot be hooked at all: such programs must
 * use the tag check (PEERDMA_CUDA_MONITOR=tag).
 *
 * cuMemRelease is not hooked: it only drops the handle; the memory stays
 * mapped, and usable by DMA, until cuMemUnmap, which is hooked.
 *
 * pdma_cuda_monitor_mode() tells a cache which invalidation to rely on.
 */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_api.h"
#include "mem_cuda.h"

/* Our definitions of the interposed entry points (the driver's prototypes). */
pdma_cu_result cuMemFree_v2(pdma_cu_ptr dptr);
pdma_cu_result cuMemFree(unsigned int dptr);
pdma_cu_result cuMemFreeAsync(pdma_cu_ptr dptr, pdma_cu_stream s);
pdma_cu_result cuMemFreeAsync_ptsz(pdma_cu_ptr dptr, pdma_cu_stream s);
pdma_cu_result cuMemFreeHost(void *p);
pdma_cu_result cuMemHostUnregister(void *p);
pdma_cu_result cuMemUnmap(pdma_cu_ptr ptr, size_t size);
pdma_cu_result cuMemAddressFree(pdma_cu_ptr ptr, size_t size);
pdma_cu_result cuCtxDestroy_v2(pdma_cu_ctx ctx);
pdma_cu_result cuDevicePrimaryCtxReset_v2(pdma_cu_device dev);

static atomic_uint_fast64_t hook_calls;

uint64_t pdma_cuda_hooks_count(void)
{
	return atomic_load(&hook_calls);
}

static const struct pdma_cu_api *api(void)
{
	const struct pdma_cu_api *a = pdma_cu_peek();

	if (!a && pdma_cu_get(&a, NULL, 0))
		a = NULL;
	return a;
}

/* The driver's function behind an interposed name: from our table if it has
 * it, else the next definition in the lookup order, else libcuda's own. */
static void *real_sym(const char *name)
{
	const struct pdma_cu_api *a = api();
	void *f = NULL;

	if (a && a->handle)
		f = dlsym(a->handle, name);
	if (!f)
		f = dlsym(RTLD_NEXT, name);
	return f;
}

/* Start the release of the allocation that contains p: revoke, notify, and
 * lock pins of it out until pdma_cuda_release_end. */
void pdma_cuda_before_release(struct pdma_cuda_release *rel, uint64_t p)
{
	const struct pdma_cu_api *a;
	pdma_cu_ptr start = 0;
	size_t size = 0;
	int attrs[] = { PDMA_CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
			PDMA_CU_POINTER_ATTRIBUTE_RANGE_SIZE };
	void *data[] = { &start, &size };

	atomic_fetch_add_explicit(&hook_calls, 1, memory_order_relaxed);
	a = api();
	if (!p || !a || !a->PointerGetAttributes ||
	    a->PointerGetAttributes(2, attrs, data, p) != PDMA_CU_SUCCESS || !size) {
		/* Unknown to the driver (it will fail the free): still tell
		 * subscribers about the address itself. */
		start = p;
		size = 1;
	}
	pdma_cuda_release_begin(rel, start, size);
}

#define NOT_INIT PDMA_CU_ERROR_NOT_INITIALIZED

typedef pdma_cu_result (*ptr_fn)(pdma_cu_ptr);
typedef pdma_cu_result (*ptr_stream_fn)(pdma_cu_ptr, pdma_cu_stream);
typedef pdma_cu_result (*host_fn)(void *);
typedef pdma_cu_result (*range_fn)(pdma_cu_ptr, size_t);

/* The table's entry point if it has one, else a lookup by name. */
#define REAL(field, name) \
	(api() && api()->field ? (void *)api()->field : real_sym(name))

/* cuMemFree_v2 is an alias of this local name, so that detection can compare
 * the global lookup's answer with an address no interposition can change. */
static pdma_cu_result hook_mem_free_v2(pdma_cu_ptr dptr)
{
	struct pdma_cuda_release rel;
	ptr_fn f = (ptr_fn)REAL(MemFree, "cuMemFree_v2");
	pdma_cu_result r;

	pdma_cuda_before_release(&rel, dptr);
	r = f ? f(dptr) : NOT_INIT;
	pdma_cuda_release_end(&rel);
	return r;
}

pdma_cu_result cuMemFree_v2(pdma_cu_ptr dptr) __attribute__((alias("hook_mem_free_v2")));

pdma_cu_result cuMemFree(unsigned int dptr)
{
	pdma_cu_result (*f)(unsigned int) = (pdma_cu_result(*)(unsigned int))real_sym("cuMemFree");
	struct pdma_cuda_release rel;
	pdma_cu_result r;

	pdma_cuda_before_release(&rel, dptr);
	r = f ? f(dptr) : NOT_INIT;
	pdma_cuda_release_end(&rel);
	return r;
}

/* Stream-ordered free: the memory may be reused by the pool only after the
 * stream reaches the free, but no DMA may be started on it from now on. */
static pdma_cu_result free_async(ptr_stream_fn f, pdma_cu_ptr dptr, pdma_cu_stream s)
{
	struct pdma_cuda_release rel;
	pdma_cu_result r;

	pdma_cuda_before_release(&rel, dptr);
	r = f ? f(dptr, s) : NOT_INIT;
	pdma_cuda_release_end(&rel);
	return r;
}

pdma_cu_result cuMemFreeAsync(pdma_cu_ptr dptr, pdma_cu_stream s)
{
	return free_async((ptr_stream_fn)REAL(MemFreeAsync, "cuMemFreeAsync"), dptr, s);
}

pdma_cu_result cuMemFreeAsync_ptsz(pdma_cu_ptr dptr, pdma_cu_stream s)
{
	return free_async((ptr_stream_fn)real_sym("cuMemFreeAsync_ptsz"), dptr, s);
}

static pdma_cu_result host_release(host_fn f, void *p)
{
	struct pdma_cuda_release rel;
	pdma_cu_result r;

	pdma_cuda_before_release(&rel, (pdma_cu_ptr)(uintptr_t)p);
	r = f ? f(p) : NOT_INIT;
	pdma_cuda_release_end(&rel);
	return r;
}

pdma_cu_result cuMemFreeHost(void *p)
{
	return host_release((host_fn)REAL(MemFreeHost, "cuMemFreeHost"), p);
}

pdma_cu_result cuMemHostUnregister(void *p)
{
	return host_release((host_fn)REAL(MemHostUnregister, "cuMemHostUnregister"), p);
}

static pdma_cu_result range_release(range_fn f, pdma_cu_ptr ptr, size_t size)
{
	struct pdma_cuda_release rel;
	pdma_cu_result r;

	atomic_fetch_add_explicit(&hook_calls, 1, memory_order_relaxed);
	pdma_cuda_release_begin(&rel, ptr, size);
	r = f ? f(ptr, size) : NOT_INIT;
	pdma_cuda_release_end(&rel);
	return r;
}

pdma_cu_result cuMemUnmap(pdma_cu_ptr ptr, size_t size)
{
	return range_release((range_fn)REAL(MemUnmap, "cuMemUnmap"), ptr, size);
}

pdma_cu_result cuMemAddressFree(pdma_cu_ptr ptr, size_t size)
{
	return range_release((range_fn)REAL(MemAddressFree, "cuMemAddressFree"), ptr, size);
}

pdma_cu_result cuCtxDestroy_v2(pdma_cu_ctx ctx)
{
	pdma_cu_result (*f)(pdma_cu_ctx) =
		(pdma_cu_result(*)(pdma_cu_ctx))REAL(CtxDestroy, "cuCtxDestroy_v2");
	struct pdma_cuda_release rel;
	pdma_cu_result r;

	atomic_fetch_add_explicit(&hook_calls, 1, memory_order_relaxed);
	pdma_cuda_release_context_begin(&rel, ctx, -1);
	r = f ? f(ctx) : NOT_INIT;
	pdma_cuda_release_end(&rel);
	return r;
}

pdma_cu_result cuDevicePrimaryCtxReset_v2(pdma_cu_device dev)
{
	pdma_cu_result (*f)(pdma_cu_device) = (pdma_cu_result(*)(pdma_cu_device))REAL(
		DevicePrimaryCtxReset, "cuDevicePrimaryCtxReset_v2");
	struct pdma_cuda_release rel;
	pdma_cu_result r;

	atomic_fetch_add_explicit(&hook_calls, 1, memory_order_relaxed);
	pdma_cuda_release_context_begin(&rel, NULL, dev);
	r = f ? f(dev) : NOT_INIT;
	pdma_cuda_release_end(&rel);
	return r;
}

/* ------------------------------------------------------ the runtime shim */

/* The shim's calls: begin before the runtime's function, end after it. A
 * token that cannot be allocated degrades to an invalidation without the
 * lock-out. */
static void *shim_begin(uint64_t p)
{
	struct pdma_cuda_release *rel = malloc(sizeof(*rel));
	struct pdma_cuda_release tmp;

	if (!rel) {
		pdma_cuda_before_release(&tmp, p);
		pdma_cuda_release_end(&tmp);
		return NULL;
	}
	pdma_cuda_before_release(rel, p);
	return rel;
}

static void *shim_reset_begin(int device)
{
	struct pdma_cuda_release *rel = malloc(sizeof(*rel));

	atomic_fetch_add_explicit(&hook_calls, 1, memory_order_relaxed);
	if (!rel) {
		pdma_cuda_invalidate_context(NULL, device);
		return NULL;
	}
	pdma_cuda_release_context_begin(rel, NULL, device);
	return rel;
}

static void shim_end(void *token)
{
	if (token) {
		pdma_cuda_release_end(token);
		free(token);
	}
}

bool pdma_cuda_hooks_attach(void)
{
	void (*set)(void *(*)(uint64_t), void *(*)(int), void (*)(void *));

	*(void **)&set = dlsym(RTLD_DEFAULT, "pdma_cudart_hook_set");
	if (!set)
		return false;
	set(shim_begin, shim_reset_begin, shim_end);
	return true;
}

/* ------------------------------------------------------------- detection */

bool pdma_cuda_hooks_installed(void)
{
	void *drv = dlsym(RTLD_DEFAULT, "cuMemFree_v2");
	void *rt = dlsym(RTLD_DEFAULT, "cudaFree");
	void *shim = dlsym(RTLD_DEFAULT, "pdma_cudart_hook_cudaFree");

	/* A dynamic caller of cuMemFree_v2 binds to whatever the global lookup
	 * finds first: it must be ours. */
	if (drv != (void *)hook_mem_free_v2)
		return false;
	/* The CUDA runtime frees through driver pointers it fetched itself:
	 * the runtime shim must be in place, ahead of any libcudart, including
	 * one loaded later (then it is too: preloaded objects come first). */
	if (!shim || (rt && rt != shim))
		return false;
	return true;
}

enum pdma_cuda_monitor_mode pdma_cuda_monitor_mode(void)
{
	const char *e = getenv("PEERDMA_CUDA_MONITOR");

	if (e && !strcmp(e, "tag"))
		return PDMA_CUDA_MON_TAG;
	if (e && !strcmp(e, "hooks"))
		return PDMA_CUDA_MON_HOOKS;
	return pdma_cuda_hooks_installed() ? PDMA_CUDA_MON_HOOKS : PDMA_CUDA_MON_TAG;
}
