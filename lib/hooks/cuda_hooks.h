/* SPDX-License-Identifier: MIT */
/*
 * The contract between libpeerdma and its CUDA deallocation hook library,
 * libpeerdma_cuda_hooks.so (lib/hooks/: driver.c, runtime.c, hooks.c).
 *
 * Why a library of its own: the hooks work by defining the CUDA driver's and
 * runtime's deallocation entry points (cuMemFree_v2, cudaFree, ...), so that
 * the application's calls bind to them first. A library that merely defined
 * them would interpose every program that links it; libpeerdma does not: the
 * hooks are opt-in, LD_PRELOAD=libpeerdma_cuda_hooks.so (or dlopen RTLD_GLOBAL
 * before libcuda / libcudart are used).
 *
 * The hook library does not link libpeerdma: it works with any copy of it
 * (shared, or static inside the program). libpeerdma registers its callbacks
 * with pdma_cuda_hooks_set() when it opens the CUDA backend (found with
 * dlsym(RTLD_DEFAULT)); until then every hooked call passes straight through
 * to the driver or runtime. Each hooked call is:
 *     begin (revoke pins, notify, lock new pins of the memory out)
 *     the real function
 *     end   (let pins of that range in again)
 * with the token on the hook's stack.
 */
#ifndef PDMA_LIB_HOOKS_CUDA_HOOKS_H
#define PDMA_LIB_HOOKS_CUDA_HOOKS_H

#include <stddef.h>
#include <stdint.h>

/* libpeerdma's bookkeeping of one release in progress, kept by the hook on its
 * stack (libpeerdma checks at compile time that its state fits). */
struct pdma_cuda_hook_token {
	uint64_t w[4];
};

struct pdma_cuda_hook_ops {
	/* The allocation that contains ptr is about to be released. */
	void (*begin_alloc)(struct pdma_cuda_hook_token *t, uint64_t ptr);
	/* [addr, addr + len) is about to be unmapped (virtual memory management). */
	void (*begin_range)(struct pdma_cuda_hook_token *t, uint64_t addr, size_t len);
	/* The CUDA context cuctx is destroyed, or (cuctx NULL) device ordinal
	 * device's primary context is reset (-1: the device is unknown). */
	void (*begin_context)(struct pdma_cuda_hook_token *t, void *cuctx, int device);
	/* The real function has returned. */
	void (*end)(struct pdma_cuda_hook_token *t);
	/* The driver entry point libpeerdma uses for a cu* name (the libcuda it
	 * loaded), or NULL: the hook library then takes the next definition in
	 * the lookup order (dlsym RTLD_NEXT). */
	void *(*driver_fn)(const char *name);
};

/* Defined by the hook library; libpeerdma looks these names up. */
#define PDMA_CUDA_HOOKS_SET "pdma_cuda_hooks_set"
typedef void (*pdma_cuda_hooks_set_fn)(const struct pdma_cuda_hook_ops *ops);
/* Local aliases of the hooked cuMemFree_v2 and cudaFree: the process is hooked
 * when its global lookup of the public names finds these. */
#define PDMA_CUDA_HOOKS_DRIVER_FREE "pdma_cuda_hook_cuMemFree_v2"
#define PDMA_CUDA_HOOKS_RUNTIME_FREE "pdma_cuda_hook_cudaFree"
/* int pdma_cuda_hooks_seen(uint64_t base, uint64_t buffer_id): 1 if the hooks
 * saw the allocation at base with that buffer ID being made (cuMemAlloc*,
 * cudaMalloc*) and have not seen it leave. Every way such memory leaves the
 * process is hooked; for any other memory (IPC and VMM mappings, memory
 * allocated before the hooks were loaded or through an entry point they do
 * not define) libpeerdma's `auto` mode keeps the buffer-ID check (seen.c).
 * A hook library without this name is too old: `auto` does not trust it. */
#define PDMA_CUDA_HOOKS_SEEN "pdma_cuda_hooks_seen"
typedef int (*pdma_cuda_hooks_seen_fn)(uint64_t base, uint64_t buffer_id);
/* unsigned long pdma_cuda_hooks_calls(void): hooked calls so far (all kinds). */
#define PDMA_CUDA_HOOKS_CALLS "pdma_cuda_hooks_calls"

#endif /* PDMA_LIB_HOOKS_CUDA_HOOKS_H */
