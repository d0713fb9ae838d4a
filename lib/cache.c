// SPDX-License-Identifier: MIT
/* PLACEHOLDER pass-through (no caching) until the registration cache lands:
 * the cache helper replaces this file. */
#include <errno.h>
#include <stdlib.h>

#include "cache.h"

struct pdma_cache {
	struct pdma_cache_attr attr;
};

void pdma_cache_attr_from_env(struct pdma_cache_attr *attr)
{
	attr->max_size = 0;
	attr->max_count = 0;
}

int pdma_cache_open(const struct pdma_cache_attr *attr, struct pdma_cache **cache)
{
	struct pdma_cache *c = calloc(1, sizeof(*c));

	if (!c)
		return -ENOMEM;
	c->attr = *attr;
	*cache = c;
	return 0;
}

void pdma_cache_close(struct pdma_cache *cache)
{
	free(cache);
}

int pdma_cache_get(struct pdma_cache *cache, const struct pdma_mem_ops *ops, void *be,
		   enum pdma_hmem_iface iface, uint64_t addr, size_t len,
		   const struct pdma_mem_alloc *alloc, struct pdma_region **region)
{
	uint64_t s;
	size_t l;

	(void)cache;
	pdma_page_round(ops->page_size, addr, len, &s, &l);
	return pdma_region_create(ops, be, iface, s, l, alloc->buffer_id, region);
}

void pdma_cache_put(struct pdma_cache *cache, struct pdma_region *region)
{
	(void)cache;
	if (atomic_fetch_sub(&region->refcnt, 1) == 1)
		pdma_region_destroy(region);
}
