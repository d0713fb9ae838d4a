// SPDX-License-Identifier: MIT
/*
 * CUDA deallocation hooks, libpeerdma's side: invalidation without a per-use
 * tag check.
 *
 * The hooks themselves (cuMemFree_v2, cudaFree, ... defined so that the
 * application's calls bind to them) live in the opt-in preload library
 * libpeerdma_cuda_hooks.so (lib/hooks/), never in libpeerdma: linking
 * libpeerdma does not interpose anything. Here are the callbacks libpeerdma
 * registers with that library when it opens the CUDA backend
 * (pdma_cuda_hooks_attach): each revokes the pins of the memory about to be
 * released and calls pdma_monitor_notify(PDMA_HMEM_CUDA, base, size)
 * (pdma_cuda_release_begin), and keeps new pins of that memory out until the
 * driver has returned (pdma_cuda_release_end).
 *
 * pdma_cuda_monitor_mode() tells a cache which invalidation to rely on, and
 * pdma_cuda_alloc_seen() which allocations the hooks saw being made (the
 * only ones `auto` trusts without a buffer-ID check).
 */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/api.h"
#include "hooks/cuda_hooks.h"
#include "mem/cuda.h"

_Static_assert(sizeof(struct pdma_cuda_release) <= sizeof(struct pdma_cuda_hook_token),
	       "a release in progress must fit in the hook library's token");
_Static_assert(_Alignof(struct pdma_cuda_release) <= _Alignof(struct pdma_cuda_hook_token),
	       "token alignment");

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

/* ------------------------------------------- callbacks for the hook library */

static struct pdma_cuda_release *rel_of(struct pdma_cuda_hook_token *t)
{
	return (struct pdma_cuda_release *)(void *)t->w;
}

static void hook_begin_alloc(struct pdma_cuda_hook_token *t, uint64_t ptr)
{
	pdma_cuda_before_release(rel_of(t), ptr);
}

static void hook_begin_range(struct pdma_cuda_hook_token *t, uint64_t addr, size_t len)
{
	atomic_fetch_add_explicit(&hook_calls, 1, memory_order_relaxed);
	pdma_cuda_release_begin(rel_of(t), addr, len);
}

static void hook_begin_context(struct pdma_cuda_hook_token *t, void *cuctx, int device)
{
	atomic_fetch_add_explicit(&hook_calls, 1, memory_order_relaxed);
	pdma_cuda_release_context_begin(rel_of(t), cuctx, device);
}

static void hook_end(struct pdma_cuda_hook_token *t)
{
	pdma_cuda_release_end(rel_of(t));
}

/* The driver function the hooks call: the one of the libcuda we loaded (or
 * the table a test installed), so hooks and backend talk to one driver. */
static void *hook_driver_fn(const char *name)
{
	const struct pdma_cu_api *a = api();

	return a ? pdma_cu_api_fn(a, name) : NULL;
}

static const struct pdma_cuda_hook_ops hook_ops = {
	.begin_alloc = hook_begin_alloc,
	.begin_range = hook_begin_range,
	.begin_context = hook_begin_context,
	.end = hook_end,
	.driver_fn = hook_driver_fn,
};

bool pdma_cuda_hooks_attach(void)
{
	pdma_cuda_hooks_set_fn set;

	*(void **)&set = dlsym(RTLD_DEFAULT, PDMA_CUDA_HOOKS_SET);
	if (!set)
		return false;
	set(&hook_ops);
	return true;
}

/* ------------------------------------------------------------- detection */

static _Atomic(pdma_cuda_hooks_seen_fn) seen_fn;

bool pdma_cuda_alloc_seen(uint64_t base, uint64_t buffer_id)
{
	pdma_cuda_hooks_seen_fn f = atomic_load_explicit(&seen_fn, memory_order_relaxed);

	if (!f) {
		*(void **)&f = dlsym(RTLD_DEFAULT, PDMA_CUDA_HOOKS_SEEN);
		if (!f)
			return false; /* no hook library, or one too old to say */
		atomic_store_explicit(&seen_fn, f, memory_order_relaxed);
	}
	return f(base, buffer_id) != 0;
}

bool pdma_cuda_hooks_installed(void)
{
	void *drv = dlsym(RTLD_DEFAULT, "cuMemFree_v2");
	void *drv_hook = dlsym(RTLD_DEFAULT, PDMA_CUDA_HOOKS_DRIVER_FREE);
	void *rt = dlsym(RTLD_DEFAULT, "cudaFree");
	void *rt_hook = dlsym(RTLD_DEFAULT, PDMA_CUDA_HOOKS_RUNTIME_FREE);

	/* A dynamic caller of cuMemFree_v2 binds to whatever the global lookup
	 * finds first: it must be the hook library's. */
	if (!drv_hook || drv != drv_hook)
		return false;
	/* The CUDA runtime frees through driver pointers it fetched itself:
	 * the runtime hooks must be in place, ahead of any libcudart, including
	 * one loaded later (then they are too: preloaded objects come first). */
	if (!rt_hook || (rt && rt != rt_hook))
		return false;
	/* A hook library from before the list of seen allocations hooks no
	 * IPC close and no allocator: `auto` must not trust it. */
	return dlsym(RTLD_DEFAULT, PDMA_CUDA_HOOKS_SEEN) != NULL;
}

enum pdma_cuda_monitor_mode pdma_cuda_monitor_mode(void)
{
	const char *e = getenv("PEERDMA_CUDA_MONITOR");

	if (e && !strcmp(e, "tag"))
		return PDMA_CUDA_MON_TAG;
	if (e && !strcmp(e, "hooks"))
		return PDMA_CUDA_MON_HOOKS;
	return pdma_cuda_hooks_installed() ? PDMA_CUDA_MON_AUTO : PDMA_CUDA_MON_TAG;
}
