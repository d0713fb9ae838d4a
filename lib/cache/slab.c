// SPDX-License-Identifier: MIT
/*
 * The registration cache's entry slab: 2 MiB chunks (huge pages where the
 * kernel gives them) carved into entries, never unmapped before the cache is
 * freed, so a lock-free reader that follows a stale pointer still reads an
 * entry (type-stable memory; cache.c "Memory safety").
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cache/cache_int.h"
#include "monitor/monitor.h"

/* ---------------------------------------------------------------------------
 * Writer-side arrays (hash tables, the LRU heap, eviction scratch): mapped,
 * never from malloc. They are allocated under the cache lock, and a malloc or
 * free there could trim the heap or unmap a chunk that an application
 * registered, whose memhooks notification would then need the very lock this
 * thread holds. Our own mappings are announced as ours (pdma_monitor_enter),
 * so the hooks let them pass.
 */
void *pdma_cache_zalloc(size_t len)
{
	void *p;

	pdma_monitor_enter();
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	pdma_monitor_leave();
	return p == MAP_FAILED ? NULL : p;
}

void pdma_cache_zfree(void *p, size_t len)
{
	if (!p)
		return;
	pdma_monitor_enter();
	munmap(p, len);
	pdma_monitor_leave();
}

/* Grow an array of n elements of size sz to 2n (or min); *cap in elements. */
int pdma_cache_array_grow(void **arr, size_t *cap, size_t min, size_t sz)
{
	size_t n = *cap ? *cap * 2 : min;
	void *a = pdma_cache_zalloc(n * sz);

	if (!a)
		return -ENOMEM;
	if (*arr) {
		memcpy(a, *arr, *cap * sz);
		pdma_cache_zfree(*arr, *cap * sz);
	}
	*arr = a;
	*cap = n;
	return 0;
}

/* ---------------------------------------------------------------------------
 * Entry slab.
 */
#define SHARDS_BYTES (PDMA_CACHE_SHARDS * SHARD_STRIDE)

/*
 * A 2 MiB-aligned chunk of entries, followed by the shard slots of its
 * entries (shard.c): PDMA_CACHE_SHARDS arrays of SHARD_STRIDE bytes, one per
 * shard, so that a thread's slots share lines with its own slots only. A
 * slot's address is then arithmetic on the entry's (cache_int.h,
 * shard_slot): no load to wait for before the slot's line is fetched,
 * alongside the entry's. 5.5 MiB of address space a chunk (MAP_NORESERVE);
 * only the pages of the slots a thread writes are backed.
 *
 * Entries are handed out in address order as they are first needed
 * (slab_next), not carved onto the free list when the chunk is mapped: that
 * wrote one line of every entry of a fresh chunk, 5461 lines that a cold
 * fill then fetched a second time when it used them. An entry is DEAD from
 * the moment it is handed out, as one off the free list is; a reader never
 * reaches one that was not (nothing points at it before).
 */
static int slab_grow(struct pdma_cache *c)
{
	const size_t span = SLAB_CHUNK + SHARDS_BYTES, len = span + SLAB_CHUNK;
	char *m = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0), *a;

	if (m == MAP_FAILED)
		return -ENOMEM;
	/* No lock held here: the munmap may be seen by the memhooks monitor
	 * (a notification for a range no cache holds). */
	a = (char *)(((uintptr_t)m + SLAB_CHUNK - 1) & ~(uintptr_t)(SLAB_CHUNK - 1));
	if (a > m)
		munmap(m, (size_t)(a - m));
	if (m + len > a + span)
		munmap(a + span, (size_t)(m + len - (a + span)));
	madvise(a, SLAB_CHUNK, MADV_HUGEPAGE);
	/* The first touch, here and not under the lock: where the kernel gives
	 * a huge page, this fault zeroes all 2 MiB (hundreds of microseconds). */
	*(void **)a = NULL;
	pthread_mutex_lock(&c->slab_lock);
	*(void **)a = c->chunks; /* the first entry's room holds the chunk link */
	c->chunks = a;
	/* What was left of the chunk before (another thread's grow raced this
	 * one) goes to the free list. */
	for (; c->slab_end - c->slab_next >= ENTRY_SIZE; c->slab_next += ENTRY_SIZE) {
		struct entry *e = (struct entry *)c->slab_next;

		atomic_init(&e->refcnt, REF_DEAD);
		e->rt.next = (struct retire *)c->slab_free;
		c->slab_free = e;
	}
	c->slab_next = (uintptr_t)a + ENTRY_SIZE;
	c->slab_end = (uintptr_t)a + SLAB_CHUNK;
	pthread_mutex_unlock(&c->slab_lock);
	return 0;
}

struct entry *pdma_cache_slab_alloc(struct pdma_cache *c)
{
	for (;;) {
		struct entry *e;
		bool fresh = false;

		pthread_mutex_lock(&c->slab_lock);
		e = c->slab_free;
		if (e) {
			c->slab_free = (struct entry *)e->rt.next;
		} else if (c->slab_end - c->slab_next >= ENTRY_SIZE) {
			e = (struct entry *)c->slab_next;
			c->slab_next += ENTRY_SIZE;
			fresh = true;
		}
		pthread_mutex_unlock(&c->slab_lock);
		/* Outside the lock: the store may fault a page in. The entry is
		 * this thread's alone; nothing points at it yet. */
		if (fresh)
			atomic_init(&e->refcnt, REF_DEAD);
		if (e || slab_grow(c))
			return e;
	}
}

void pdma_cache_slab_free(struct pdma_cache *c, struct entry *e)
{
	pthread_mutex_lock(&c->slab_lock);
	e->rt.next = (struct retire *)c->slab_free;
	c->slab_free = e;
	pthread_mutex_unlock(&c->slab_lock);
}

void pdma_cache_slab_destroy(struct pdma_cache *c)
{
	while (c->chunks) {
		void *n = *(void **)c->chunks;

		munmap(c->chunks, SLAB_CHUNK + SHARDS_BYTES);
		c->chunks = n;
	}
	pthread_mutex_destroy(&c->slab_lock);
}
