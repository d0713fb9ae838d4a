/* SPDX-License-Identifier: MIT */
/*
 * Registration (pin-down) cache. See lib/cache.c for the policy.
 * A domain opened with use_cache gets one; its MRs obtain regions through it.
 */
#ifndef PDMA_LIB_CACHE_H
#define PDMA_LIB_CACHE_H

#include "region.h"

struct pdma_cache;

struct pdma_cache_attr {
	size_t max_size;   /* bytes of unreferenced pinned regions kept (0: default) */
	size_t max_count;  /* unreferenced regions kept; 0 disables caching */
};

/* Reads PEERDMA_MR_CACHE_* from the environment into *attr. */
void pdma_cache_attr_from_env(struct pdma_cache_attr *attr);
int pdma_cache_open(const struct pdma_cache_attr *attr, struct pdma_cache **cache);
void pdma_cache_close(struct pdma_cache *cache);
/* A valid region covering [addr, addr + len) of the allocation alloc, with one
 * reference for the caller: a hit, or a new pin (evicting LRU regions and
 * retrying when the pin fails with -ENOMEM). */
int pdma_cache_get(struct pdma_cache *cache, const struct pdma_mem_ops *ops, void *be,
		   enum pdma_hmem_iface iface, uint64_t addr, size_t len,
		   const struct pdma_mem_alloc *alloc, struct pdma_region **region);
void pdma_cache_put(struct pdma_cache *cache, struct pdma_region *region);

#endif /* PDMA_LIB_CACHE_H */
