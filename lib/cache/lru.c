// SPDX-License-Identifier: MIT
/*
 * The registration cache's LRU: the per-thread stamps a put takes, the heap of
 * indexed entries ordered by the stamp seen at insertion (re-sorted lazily),
 * and eviction of unreferenced entries in that order.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#include "cache/cache_int.h"

/* Eviction folds this many entries at the heap's top with one fence. */
#define FOLD_BATCH 64

struct pdma_cache_lru_line pdma_cache_lru_global;
TLS uint64_t pdma_cache_lru_local;
TLS unsigned pdma_cache_lru_count;

/* ---------------------------------------------------------------------------
 * LRU heap (writer side).
 */
static inline bool heap_less(const struct entry *a, const struct entry *b)
{
	return a->heap_key < b->heap_key;
}

static void heap_set(struct pdma_cache *c, size_t i, struct entry *e)
{
	c->heap[i] = e;
	e->heap_idx = i;
}

static void heap_up(struct pdma_cache *c, size_t i)
{
	struct entry *e = c->heap[i];

	while (i > 0) {
		size_t p = (i - 1) / 2;

		if (!heap_less(e, c->heap[p]))
			break;
		heap_set(c, i, c->heap[p]);
		i = p;
	}
	heap_set(c, i, e);
}

static void heap_down(struct pdma_cache *c, size_t i)
{
	struct entry *e = c->heap[i];

	for (;;) {
		size_t l = 2 * i + 1, m = i;
		struct entry *me = e;

		if (l < c->heap_len && heap_less(c->heap[l], me))
			m = l, me = c->heap[l];
		if (l + 1 < c->heap_len && heap_less(c->heap[l + 1], me))
			m = l + 1, me = c->heap[l + 1];
		if (m == i)
			break;
		heap_set(c, i, me);
		i = m;
	}
	heap_set(c, i, e);
}

int pdma_cache_heap_push(struct pdma_cache *c, struct entry *e)
{
	/* First allocation: room for the configured limit (capped as the hash
	 * table is), so that filling the cache does not copy the heap at each
	 * doubling; pages never written are not backed. */
	size_t first = c->attr.max_count;

	if (first > HT_PRESIZE_MAX / 2)
		first = HT_PRESIZE_MAX / 2;
	if (first < 64)
		first = 64;
	if (c->heap_len == c->heap_cap &&
	    pdma_cache_array_grow((void **)&c->heap, &c->heap_cap, first, sizeof(*c->heap)))
		return -ENOMEM;
	heap_set(c, c->heap_len++, e);
	heap_up(c, c->heap_len - 1);
	return 0;
}

void pdma_cache_heap_remove(struct pdma_cache *c, struct entry *e)
{
	size_t i = e->heap_idx;
	struct entry *last;

	if (i == SIZE_MAX)
		return;
	e->heap_idx = SIZE_MAX;
	last = c->heap[--c->heap_len];
	if (i == c->heap_len)
		return;
	heap_set(c, i, last);
	heap_up(c, i);
	heap_down(c, last->heap_idx);
}

/*
 * The eviction candidates near the heap's top count on their own lines from
 * here on: the candidate and the fast entries among the first FOLD_BATCH
 * slots of the heap (its top levels: the oldest stamps, roughly), folded
 * with one fence (shard.c). Those not evicted now are likely the next.
 */
static void fold_top(struct pdma_cache *c)
{
	bool fold = false;

	for (size_t i = 0; i < c->heap_len && i < FOLD_BATCH; i++)
		fold |= pdma_cache_fold_start(c->heap[i]);
	if (!fold)
		return;
	pdma_cache_fold_wait();
	for (size_t i = 0; i < c->heap_len && i < FOLD_BATCH; i++)
		pdma_cache_fold_finish(c->heap[i]);
}

/*
 * Evict unreferenced regions in LRU order (under c->lock) onto *victims
 * (linked through rt.next, unpinned by the caller outside the lock).
 * Matching: same backend if ops != NULL. Stops once need_count regions and
 * need_bytes bytes went, or nothing evictable is left. Returns bytes evicted.
 */
size_t pdma_cache_evict_lru(struct pdma_cache *c, const struct pdma_mem_ops *ops, const void *be,
			    size_t need_count, size_t need_bytes, struct entry **victims)
{
	struct entry **aside = NULL;
	size_t naside = 0, cap = 0, got = 0, gotb = 0;

	while (c->heap_len && (got < need_count || gotb < need_bytes)) {
		struct entry *e = c->heap[0];
		uint64_t lu = pdma_cache_last_use(e);
		int expect = 1;
		bool other;

		if (lu != e->heap_key) {
			/* Used since it was placed: re-sort by its newer stamp,
			 * and count in the shards again if a fold took it out. */
			e->heap_key = lu;
			pdma_cache_fast_on(e);
			heap_down(c, 0);
			continue;
		}
		other = ops && (e->ops != ops || e->be != be);
		if (!other && atomic_load_explicit(&e->fast, memory_order_relaxed))
			fold_top(c); /* the count exact before it is tested */
		if (other ||
		    !atomic_compare_exchange_strong_explicit(&e->refcnt, &expect, REF_DEAD,
							     memory_order_acq_rel,
							     memory_order_relaxed)) {
			/* In use or another backend: set aside, keep looking. */
			if (naside == cap &&
			    pdma_cache_array_grow((void **)&aside, &cap, 512, sizeof(*aside)))
				break;
			aside[naside++] = e;
			pdma_cache_heap_remove(c, e);
			continue;
		}
		pdma_cache_index_remove(c, e);
		e->rt.next = (struct retire *)*victims;
		*victims = e;
		got++;
		gotb += (e->end - e->start);
		c->st.evictions++;
	}
	for (size_t i = 0; i < naside; i++) {
		aside[i]->heap_key = pdma_cache_last_use(aside[i]);
		if (pdma_cache_heap_push(c, aside[i])) {
			/* Out of memory for the heap: the entry stays indexed but
			 * can no longer be evicted; it goes at close. */
			aside[i]->heap_idx = SIZE_MAX;
		}
	}
	pdma_cache_zfree(aside, cap * sizeof(*aside));
	return gotb;
}
