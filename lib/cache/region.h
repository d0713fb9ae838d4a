/* SPDX-License-Identifier: MIT */
/*
 * A pinned region: one page-aligned range of one allocation, pinned through a
 * memory backend, shared (reference counted) by the MR segments that use it.
 * Without the cache an MR segment owns its region alone; with the cache, the
 * cache indexes regions and keeps unreferenced ones pinned on an LRU.
 *
 * Revocation (memory freed under a pin, kernel event, monitor): the region is
 * marked invalid under its quiesce lock, which waits for in-flight DMA to end;
 * after that no DMA can touch it and no lookup may return it again.
 */
#ifndef PDMA_LIB_REGION_H
#define PDMA_LIB_REGION_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "mem/mem.h"
#include "mr/fork.h"

/*
 * Someone to tell when the region is revoked (an MR segment: PDMA_MR_REVOKED
 * events). Called from pdma_region_revoke after the region is invalid, under
 * the users list's lock: it must not add or remove users, nor wait for
 * anything that does. It may be called more than once (dedup is the user's).
 */
struct pdma_region_user {
	struct pdma_fork_node node; /* on the region's users list */
	void (*revoked)(struct pdma_region_user *u);
};

struct pdma_region {
	uint64_t start;                 /* page-aligned */
	size_t len;                     /* whole pages */
	uint64_t buffer_id;             /* allocation's buffer ID when pinned (0: none) */
	enum pdma_hmem_iface iface;
	const struct pdma_mem_ops *ops;
	void *be;                       /* backend context */
	void *pin;                      /* backend pin handle */
	uint64_t fork_gen;              /* pdma_fork_gen() of the process that pinned it */
	atomic_int refcnt;              /* users: MR segments (+ the cache's index) */
	atomic_bool valid;              /* false once revoked: never handed out again */
	pthread_rwlock_t quiesce;       /* DMA holds it shared; revoke takes it exclusive */
	struct pdma_fork_list users;    /* told of a revocation (a locked list,
					 * lib/mr/fork.h's: the same shape) */
	void *owner;                    /* the cache that indexes it, or NULL */
	/* Bytes of the first and of the last pinned page outside the
	 * allocation (each under one page): a cache checks a hit it verifies
	 * by buffer ID against them, as the query it skips would have. */
	uint32_t alloc_head, alloc_tail;
};

/* Pin [start, start + len) (page-aligned) and return a region with one reference. */
int pdma_region_create(const struct pdma_mem_ops *ops, void *be, enum pdma_hmem_iface iface,
		       uint64_t start, size_t len, uint64_t buffer_id, struct pdma_region **out);
/* pdma_region_create into caller-provided zeroed memory (the cache embeds
 * regions in its index entries). Leaves owner and alloc_head/_tail as they are, so a
 * cache can set them before the pin exists. Undo with pdma_region_fini. */
int pdma_region_init(struct pdma_region *r, const struct pdma_mem_ops *ops, void *be,
		     enum pdma_hmem_iface iface, uint64_t start, size_t len, uint64_t buffer_id);
/* Mark revoked and wait for in-flight DMA; idempotent. Does not unpin. If the
 * region has an owner (a cache), the owner is told afterwards, so the region
 * leaves its index (pdma_cache_region_revoked, lib/cache/). */
void pdma_region_revoke(struct pdma_region *r);
/* Unpin and free: the last reference is gone. A pin made before a fork() is
 * not unpinned in the child (lib/mr/fork.h): it is the parent's. */
void pdma_region_destroy(struct pdma_region *r);
/* Unpin; the memory of r stays the caller's (pairs with pdma_region_init). */
void pdma_region_fini(struct pdma_region *r);

/* Watch r for revocation; a region already revoked calls u->revoked at once
 * (in the caller's thread). del: after it returns no callback runs for u. */
void pdma_region_add_user(struct pdma_region *r, struct pdma_region_user *u);
void pdma_region_del_user(struct pdma_region *r, struct pdma_region_user *u);

/* Defined by the registration cache (lib/cache/); called by
 * pdma_region_revoke for a region whose owner is set. */
void pdma_cache_region_revoked(struct pdma_region *r);

/* DMA access: returns false (and holds nothing) if the region was revoked. */
static inline bool pdma_region_dma_begin(struct pdma_region *r)
{
	pthread_rwlock_rdlock(&r->quiesce);
	if (atomic_load_explicit(&r->valid, memory_order_acquire))
		return true;
	pthread_rwlock_unlock(&r->quiesce);
	return false;
}

static inline void pdma_region_dma_end(struct pdma_region *r)
{
	pthread_rwlock_unlock(&r->quiesce);
}

#endif /* PDMA_LIB_REGION_H */
