/* SPDX-License-Identifier: MIT */
/*
 * Memory backends: where memory lives and how it is pinned. One small ops
 * table per backend (DESIGN.md "mem"): host (checked, neither locked nor
 * pinned: host.c says why), sim (in-process GPU model), cuda (libcuda at run
 * time), kdev (/dev/peerdma: real pins).
 *
 * A pin covers a whole-page range [addr, addr + len) of one allocation. When
 * the backend revokes a pin by itself (GPU memory freed, kernel event), it calls
 * the pin's revoke callback first, synchronously, before the memory is reused;
 * the callback must stop DMA to the range and must not call unpin.
 */
#ifndef PDMA_LIB_MEM_H
#define PDMA_LIB_MEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "peerdma/mr.h"

struct pdma_mem_alloc {
	uint64_t base;      /* allocation start */
	size_t size;        /* allocation size */
	uint64_t buffer_id; /* changes when the address is reallocated (0: unknown) */
	/* No monitor is known to see this allocation leave: a cache in
	 * PDMA_CACHE_MODE_TRUST_WATCHED verifies its hits by buffer ID (CUDA
	 * memory the deallocation hooks did not see being made). Backends that
	 * leave it false are trusted as TRUST trusts them. */
	bool unwatched;
};

typedef void (*pdma_mem_revoke_fn)(void *arg);

struct pdma_mem_ops {
	const char *name;
	size_t page_size; /* pin granularity: 4 KiB host, 64 KiB GPU */
	bool cpu_visible; /* the CPU (and so the sim DMA device) can reach the memory */
	/* The allocation containing [addr, addr + len): -EFAULT if none or if the
	 * range leaves it, -EINVAL if the memory is of a kind this backend refuses
	 * (e.g. CUDA managed memory). */
	int (*query)(void *be, uint64_t addr, size_t len, struct pdma_mem_alloc *alloc);
	/* Optional: 0 if the allocation at addr is still the one whose buffer
	 * ID was buffer_id, else -ESTALE. What a cache verifying its hits by
	 * buffer ID asks per hit (PDMA_CACHE_MODE_TAG_CHECK). For CUDA one
	 * attribute in one driver call, where query asks for five: on the
	 * H100 machine a cache hit verified this way took 161-273 ns, one
	 * verified through query 2.9-3.5x that (round2f-h100.txt in
	 * bench/results). */
	int (*same_alloc)(void *be, uint64_t addr, uint64_t buffer_id);
	/* Pin a page-aligned range; *pin is the backend's handle. -ENOMEM: no BAR
	 * space or lock limit (callers may evict and retry). */
	int (*pin)(void *be, uint64_t addr, size_t len, pdma_mem_revoke_fn revoke, void *arg,
		   void **pin);
	/* Release a pin; safe after the pin was revoked (then only frees it). */
	void (*unpin)(void *be, void *pin);
	/* Optional (NULL: -ENOENT, nothing a device driver could use): what a
	 * driver needs to DMA to the pin (pdma_mr_dma; addr is left to the
	 * caller), and the CPU physical addresses of its pages
	 * (pdma_mr_dma_pages). -ENODEV once the pin was revoked. */
	int (*dma)(void *be, void *pin, struct pdma_mr_dma *dma);
	int (*dma_pages)(void *be, void *pin, uint64_t *addrs, uint32_t *count);
};

extern const struct pdma_mem_ops pdma_mem_host_ops;
extern const struct pdma_mem_ops pdma_mem_sim_ops;
/* pins nothing (4 KiB pages): the cache measured alone (noop.c) */
extern const struct pdma_mem_ops pdma_mem_noop_ops;

struct pdma_sim;
/* Bytes moved by the simulated DMA device (statistics). */
void pdma_sim_count_dma(struct pdma_sim *sim, size_t bytes);

/* Round [addr, addr + len) out to whole pages of size page (a power of 2). */
static inline void pdma_page_round(uint64_t page, uint64_t addr, size_t len, uint64_t *start,
				   size_t *plen)
{
	uint64_t s = addr & ~(page - 1);
	uint64_t e = (addr + len + page - 1) & ~(page - 1);
	*start = s;
	*plen = (size_t)(e - s);
}

#endif /* PDMA_LIB_MEM_H */
