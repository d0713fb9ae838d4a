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

/* ---------------------------------------------------------------------------
 * Entry slab.
 */
/* A 2 MiB-aligned chunk, carved into DEAD entries on c->slab_free. */
static int slab_grow(struct pdma_cache *c)
{
	char *m = mmap(NULL, 2 * SLAB_CHUNK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0), *a;
	struct entry *first = NULL, *last = NULL;
	size_t n;

	if (m == MAP_FAILED)
		return -ENOMEM;
	/* No lock held here: the munmap may be seen by the memhooks monitor
	 * (a notification for a range no cache holds). */
	a = (char *)(((uintptr_t)m + SLAB_CHUNK - 1) & ~(uintptr_t)(SLAB_CHUNK - 1));
	if (a > m)
		munmap(m, (size_t)(a - m));
	munmap(a + SLAB_CHUNK, (size_t)(m + 2 * SLAB_CHUNK - (a + SLAB_CHUNK)));
	madvise(a, SLAB_CHUNK, MADV_HUGEPAGE);
	/* The first slot holds the chunk link; carve the rest. */
	n = SLAB_CHUNK / c->entry_size;
	for (size_t i = n - 1; i >= 1; i--) {
		struct entry *e = (struct entry *)(a + i * c->entry_size);

		atomic_init(&e->refcnt, REF_DEAD);
		e->rt.next = (struct retire *)first;
		first = e;
		if (!last)
			last = e;
	}
	pthread_mutex_lock(&c->slab_lock);
	*(void **)a = c->chunks;
	c->chunks = a;
	last->rt.next = (struct retire *)c->slab_free;
	c->slab_free = first;
	pthread_mutex_unlock(&c->slab_lock);
	return 0;
}

struct entry *pdma_cache_slab_alloc(struct pdma_cache *c)
{
	for (;;) {
		struct entry *e;

		pthread_mutex_lock(&c->slab_lock);
		e = c->slab_free;
		if (e)
			c->slab_free = (struct entry *)e->rt.next;
		pthread_mutex_unlock(&c->slab_lock);
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

		munmap(c->chunks, SLAB_CHUNK);
		c->chunks = n;
	}
	pthread_mutex_destroy(&c->slab_lock);
}
