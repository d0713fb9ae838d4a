/* SPDX-License-Identifier: MIT */
/*
 * Inside libpeerdma_cuda_hooks.so: one hooked call's bracket around the real
 * function (hooks.c), shared by the driver (driver.c) and runtime (runtime.c)
 * entry points. Hidden: the library exports the hooked CUDA names and the
 * names of cuda_hooks.h only.
 */
#ifndef PDMA_LIB_HOOKS_HOOKS_H
#define PDMA_LIB_HOOKS_HOOKS_H

#include "hooks/cuda_hooks.h"

#define PDMA_HIDDEN __attribute__((visibility("hidden")))

struct pdma_hook_call {
	const struct pdma_cuda_hook_ops *ops; /* NULL: libpeerdma not registered */
	struct pdma_cuda_hook_token tok;
};

PDMA_HIDDEN void pdma_hook_begin_alloc(struct pdma_hook_call *c, uint64_t ptr);
PDMA_HIDDEN void pdma_hook_begin_range(struct pdma_hook_call *c, uint64_t addr, size_t len);
PDMA_HIDDEN void pdma_hook_begin_context(struct pdma_hook_call *c, void *cuctx, int device);
/* Counts the call; begins nothing (a runtime free of NULL). */
PDMA_HIDDEN void pdma_hook_pass(struct pdma_hook_call *c);
PDMA_HIDDEN void pdma_hook_end(struct pdma_hook_call *c);
/* libpeerdma's driver entry point for name, else the next definition after
 * this library; NULL if there is none. */
PDMA_HIDDEN void *pdma_hook_driver_fn(const char *name);

/* The allocations the hooks saw being made (seen.c): what libpeerdma may
 * trust without a buffer-ID check (pdma_cuda_hooks_seen, cuda_hooks.h). */
PDMA_HIDDEN void pdma_hook_seen_add(uint64_t base, uint64_t id);
PDMA_HIDDEN void pdma_hook_seen_remove(uint64_t base);
PDMA_HIDDEN void pdma_hook_seen_clear(void);
/* A new allocation at ptr, made by a hooked allocator: list it with the
 * buffer ID the driver gives it (unlisted if the driver cannot say). */
PDMA_HIDDEN void pdma_hook_allocated(uint64_t ptr);

#endif /* PDMA_LIB_HOOKS_HOOKS_H */
