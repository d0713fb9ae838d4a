// SPDX-License-Identifier: MIT
/*
 * libpeerdma_cuda_hooks.so: libpeerdma's registration and the bracket every
 * hooked call puts around the real function (cuda_hooks.h says why the hooks
 * are a library of their own).
 */
#include <dlfcn.h>
#include <stdatomic.h>

#include "hooks/hooks.h"

static _Atomic(const struct pdma_cuda_hook_ops *) cur_ops;
static atomic_ulong calls;

void pdma_cuda_hooks_set(const struct pdma_cuda_hook_ops *ops);
unsigned long pdma_cuda_hooks_calls(void);

/* ops lives in libpeerdma for the life of the process (static storage). */
void pdma_cuda_hooks_set(const struct pdma_cuda_hook_ops *ops)
{
	atomic_store(&cur_ops, ops);
}

unsigned long pdma_cuda_hooks_calls(void)
{
	return atomic_load(&calls);
}

void pdma_hook_pass(struct pdma_hook_call *c)
{
	atomic_fetch_add_explicit(&calls, 1, memory_order_relaxed);
	c->ops = NULL;
}

static const struct pdma_cuda_hook_ops *enter(struct pdma_hook_call *c)
{
	atomic_fetch_add_explicit(&calls, 1, memory_order_relaxed);
	c->ops = atomic_load(&cur_ops);
	return c->ops;
}

void pdma_hook_begin_alloc(struct pdma_hook_call *c, uint64_t ptr)
{
	if (enter(c))
		c->ops->begin_alloc(&c->tok, ptr);
}

void pdma_hook_begin_range(struct pdma_hook_call *c, uint64_t addr, size_t len)
{
	if (enter(c))
		c->ops->begin_range(&c->tok, addr, len);
}

void pdma_hook_begin_context(struct pdma_hook_call *c, void *cuctx, int device)
{
	if (enter(c))
		c->ops->begin_context(&c->tok, cuctx, device);
}

void pdma_hook_end(struct pdma_hook_call *c)
{
	if (c->ops)
		c->ops->end(&c->tok);
}

void *pdma_hook_driver_fn(const char *name)
{
	const struct pdma_cuda_hook_ops *ops = atomic_load(&cur_ops);
	void *f = ops && ops->driver_fn ? ops->driver_fn(name) : NULL;

	return f ? f : dlsym(RTLD_NEXT, name);
}

/* cuPointerGetAttribute of the driver the process uses: libpeerdma's, the
 * next definition, or that of a libcuda loaded privately (the CUDA runtime
 * dlopens libcuda itself, where RTLD_NEXT does not reach). */
static void *attr_fn(void)
{
	void *f = pdma_hook_driver_fn("cuPointerGetAttribute");

	if (!f) {
		void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);

		if (h) {
			f = dlsym(h, "cuPointerGetAttribute");
			dlclose(h); /* NOLOAD: still loaded by its owner */
		}
	}
	return f;
}

void pdma_hook_allocated(uint64_t ptr)
{
	int (*get)(void *data, int attribute, unsigned long long ptr);
	unsigned long long id = 0;

	if (!ptr)
		return;
	*(void **)&get = attr_fn();
	/* CU_POINTER_ATTRIBUTE_BUFFER_ID (7): unique in the process. */
	if (get && get(&id, 7, ptr) == 0 && id)
		pdma_hook_seen_add(ptr, id);
}
