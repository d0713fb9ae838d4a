// SPDX-License-Identifier: MIT
/*
 * The allocations the hook library saw being made (cuMemAlloc*, cudaMalloc*:
 * driver.c, runtime.c), keyed by base address, with the buffer ID the driver
 * gave each. libpeerdma trusts invalidation alone (no per-use buffer-ID check)
 * only for memory listed here: every way such memory leaves the process
 * (its free, a context destroy or reset) is hooked. Memory the hooks did not
 * see arrive (an IPC mapping, a VMM mapping, anything allocated before the
 * hooks were loaded or through an entry point they do not define) may leave
 * unseen, so it keeps the check.
 *
 * The buffer ID makes a left-over entry harmless: a free the hooks missed
 * leaves its entry behind, but whatever the driver maps at that address next
 * has another buffer ID (they are unique in the process), so it does not
 * match. A context destroy or reset forgets every entry (the hooks do not
 * know which allocations were the context's): the survivors go back to the
 * check, which is slower but never stale.
 *
 * Open addressing with linear probing and backward-shift deletion under one
 * mutex: allocations and frees are rare next to registrations' hits, which
 * never come here (a cache miss asks once per pin).
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "hooks/hooks.h"

struct slot {
	uint64_t base; /* 0: empty */
	uint64_t id;
};

int pdma_cuda_hooks_seen(uint64_t base, uint64_t buffer_id);

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct slot *tab;
static size_t cap, used; /* cap: a power of two, or 0 */

static size_t home(uint64_t base, size_t mask)
{
	/* Bases are 2 MiB- or page-aligned: mix the high bits down. */
	return (size_t)((base * 0x9e3779b97f4a7c15ull) >> 17) & mask;
}

static void put(struct slot *t, size_t mask, uint64_t base, uint64_t id)
{
	size_t i = home(base, mask);

	while (t[i].base && t[i].base != base)
		i = (i + 1) & mask;
	t[i].base = base;
	t[i].id = id;
}

/* Make room for one more entry at most 3/4 full; false if out of memory. */
static bool grow(void)
{
	size_t nc = cap ? cap * 2 : 256;
	struct slot *nt;

	if ((used + 1) * 4 <= cap * 3)
		return true;
	nt = calloc(nc, sizeof(*nt));
	if (!nt)
		return false;
	for (size_t i = 0; i < cap; i++)
		if (tab[i].base)
			put(nt, nc - 1, tab[i].base, tab[i].id);
	free(tab);
	tab = nt;
	cap = nc;
	return true;
}

static struct slot *find(uint64_t base)
{
	size_t mask = cap - 1, i;

	if (!cap)
		return NULL;
	for (i = home(base, mask); tab[i].base; i = (i + 1) & mask)
		if (tab[i].base == base)
			return &tab[i];
	return NULL;
}

/* Remove slot s, shifting back the entries of its probe run. */
static void erase(const struct slot *s)
{
	size_t mask = cap - 1, i = (size_t)(s - tab), j = i;

	for (;;) {
		size_t h;

		tab[i].base = 0;
		do {
			j = (j + 1) & mask;
			if (!tab[j].base)
				return;
			h = home(tab[j].base, mask);
			/* j's entry may move to i if i lies on its way from h. */
		} while (i <= j ? (i < h && h <= j) : (i < h || h <= j));
		tab[i] = tab[j];
		i = j;
	}
}

void pdma_hook_seen_add(uint64_t base, uint64_t id)
{
	struct slot *s;

	if (!base)
		return;
	pthread_mutex_lock(&lock);
	s = find(base);
	if (s) {
		s->id = id;
	} else if (grow()) {
		put(tab, cap - 1, base, id);
		used++;
	}
	/* Out of memory: the allocation stays unlisted, so it is checked. */
	pthread_mutex_unlock(&lock);
}

void pdma_hook_seen_remove(uint64_t base)
{
	struct slot *s;

	pthread_mutex_lock(&lock);
	s = find(base);
	if (s) {
		erase(s);
		used--;
	}
	pthread_mutex_unlock(&lock);
}

void pdma_hook_seen_clear(void)
{
	pthread_mutex_lock(&lock);
	free(tab);
	tab = NULL;
	cap = used = 0;
	pthread_mutex_unlock(&lock);
}

int pdma_cuda_hooks_seen(uint64_t base, uint64_t buffer_id)
{
	struct slot *s;
	int r;

	if (!base || !buffer_id)
		return 0;
	pthread_mutex_lock(&lock);
	s = find(base);
	r = s && s->id == buffer_id;
	pthread_mutex_unlock(&lock);
	return r;
}
