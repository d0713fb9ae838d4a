// SPDX-License-Identifier: MIT
/*
 * The registration cache's index: a hash table on the start page and a skip
 * list ordered by start, both written under the cache lock and read without
 * one; the lookup a hit takes.
 */
#include <errno.h>
#include <stdlib.h>

#include "cache/cache_int.h"

size_t pdma_cache_htab_bytes(const struct htab *t)
{
	return sizeof(*t) + (t->mask + 1) * sizeof(t->b[0]);
}

struct htab *pdma_cache_htab_new(size_t nb)
{
	struct htab *t = pdma_cache_zalloc(sizeof(*t) + nb * sizeof(t->b[0]));
	unsigned bits = 0;

	if (!t)
		return NULL;
	while (((size_t)1 << bits) < nb)
		bits++;
	t->mask = nb - 1;
	t->shift = 64 - bits;
	t->rt.base = t;
	return t;
}

/* ---------------------------------------------------------------------------
 * Skip list ordered by (start, end, address); single writer, lock-free readers.
 */
static inline bool sl_before(const struct entry *a, uint64_t start, uint64_t end,
			     const struct entry *b)
{
	if (a->start != start)
		return a->start < start;
	if (a->end != end)
		return a->end < end;
	return (uintptr_t)a < (uintptr_t)b;
}

static inline struct entry *_Atomic *sl_link(struct pdma_cache *c, struct entry *p, int i)
{
	return p ? &p->next[i] : &c->head[i];
}

/*
 * Predecessors of e at every level. The search starts, at each level, from the
 * later of the level above's predecessor and the finger (c->sl_finger: the
 * predecessors left by the last insert), when the finger lies before e.
 * Registrations mostly come in address order, so the finger is next to e and
 * the search touches a few recently written entries instead of one cold entry
 * per level (a DRAM miss each beyond the L3: the larger part of a miss's index
 * work at 100k regions). Never more steps than the plain search: both start
 * points are before e, and the later one is taken.
 */
static void sl_find_preds(struct pdma_cache *c, struct entry *e, struct entry **preds)
{
	struct entry *p = NULL;

	for (int i = SL_MAX - 1; i >= 0; i--) {
		struct entry *f = c->sl_finger[i], *n;

		if (f && sl_before(f, e->start, e->end, e) &&
		    (!p || sl_before(p, f->start, f->end, f)))
			p = f;
		while ((n = atomic_load_explicit(sl_link(c, p, i), memory_order_relaxed)) &&
		       sl_before(n, e->start, e->end, e))
			p = n;
		preds[i] = p;
	}
}

static void sl_insert(struct pdma_cache *c, struct entry *e)
{
	struct entry *preds[SL_MAX];

	sl_find_preds(c, e, preds);
	for (int i = 0; i < e->levels; i++) {
		struct entry *_Atomic *l = sl_link(c, preds[i], i);

		atomic_store_explicit(&e->next[i], atomic_load_explicit(l, memory_order_relaxed),
				      memory_order_relaxed);
		atomic_store_explicit(l, e, memory_order_release);
	}
	/* The finger holds, per level, an entry on that level (or NULL: the
	 * head), so that a search may start from it. */
	for (int i = 0; i < SL_MAX; i++)
		c->sl_finger[i] = i < e->levels ? e : preds[i];
}

static void sl_remove(struct pdma_cache *c, struct entry *e)
{
	struct entry *preds[SL_MAX];

	sl_find_preds(c, e, preds);
	for (int i = e->levels - 1; i >= 0; i--) {
		struct entry *_Atomic *l = sl_link(c, preds[i], i);

		if (atomic_load_explicit(l, memory_order_relaxed) == e)
			atomic_store_explicit(
				l, atomic_load_explicit(&e->next[i], memory_order_relaxed),
				memory_order_release);
		/* Keep the finger on entries that are in the list. */
		if (c->sl_finger[i] == e)
			c->sl_finger[i] = preds[i];
	}
}

/* First entry with start >= key (reader-safe; *budget bounds the steps). */
struct entry *pdma_cache_sl_lower_bound(struct pdma_cache *c, uint64_t key, size_t *budget)
{
	struct entry *p = NULL, *n = NULL;

	for (int i = SL_MAX - 1; i >= 0; i--) {
		while ((n = atomic_load_explicit(sl_link(c, p, i), memory_order_acquire)) &&
		       RLX(n->start) < key) {
			p = n;
			if (!--*budget)
				return NULL;
		}
	}
	return n;
}

/*
 * Finds and references a valid covering entry. Readers (limit != 0) run with
 * no lock: every pointer they follow leads to a slab entry (type-stable) or a
 * kept hash table, and every step is bounded (a recycled entry can send a
 * reader down another chain: a false miss, corrected by the locked slow path).
 */
__attribute__((noinline)) struct entry *
pdma_cache_lookup_ref(struct pdma_cache *c, const struct pdma_mem_ops *ops, void *be,
	   enum pdma_hmem_iface iface, uint64_t s, uint64_t end, size_t limit)
{
	struct htab *t = atomic_load_explicit(&c->ht, memory_order_acquire);
	size_t n = limit ? limit : SIZE_MAX;
	struct entry *e;
	uint64_t maxlen, lo;

	for (e = atomic_load_explicit(&t->b[hash_start(t, s)], memory_order_acquire); e;
	     e = atomic_load_explicit(&e->hnext, memory_order_acquire)) {
		if (RLX(e->start) == s && try_hit(e, ops, be, iface, s, end))
			return e;
		if (!--n)
			return NULL;
	}
	/* Inside a region: a covering region starts in [end - maxlen, s). */
	maxlen = atomic_load_explicit(&c->max_len, memory_order_acquire);
	if (maxlen <= end - s)
		return NULL; /* only start == s could cover: the hash said no */
	lo = end - maxlen > end ? 0 : end - maxlen;
	if ((s - lo) / ops->page_size <= 8) {
		/* Few candidate starts: probe the hash for each page. */
		for (uint64_t p = s - ops->page_size; p >= lo && p < s; p -= ops->page_size) {
			for (e = atomic_load_explicit(&t->b[hash_start(t, p)], memory_order_acquire);
			     e; e = atomic_load_explicit(&e->hnext, memory_order_acquire)) {
				if (RLX(e->start) == p && try_hit(e, ops, be, iface, s, end))
					return e;
				if (!--n)
					return NULL;
			}
		}
		return NULL;
	}
	for (e = pdma_cache_sl_lower_bound(c, lo, &n); e && RLX(e->start) <= s;
	     e = atomic_load_explicit(&e->next[0], memory_order_acquire)) {
		if (try_hit(e, ops, be, iface, s, end))
			return e;
		if (!--n)
			return NULL;
	}
	return NULL;
}

/* ---------------------------------------------------------------------------
 * Index maintenance (writer, under c->lock).
 */
int pdma_cache_index_grow(struct pdma_cache *c)
{
	struct htab *old = atomic_load_explicit(&c->ht, memory_order_relaxed), *t;

	if (2 * c->count < old->mask + 1)
		return 0;
	t = pdma_cache_htab_new((old->mask + 1) * 2);
	if (!t)
		return 0; /* keep the longer chains */
	/* Moving entries rewrites their chain links while readers may walk the
	 * old table: a reader can only be sent to another chain or to its end,
	 * which is a false miss that the locked slow path corrects. */
	for (size_t i = 0; i <= old->mask; i++) {
		struct entry *e = atomic_load_explicit(&old->b[i], memory_order_relaxed), *n;

		for (; e; e = n) {
			size_t b = hash_start(t, e->start);

			n = atomic_load_explicit(&e->hnext, memory_order_relaxed);
			atomic_store_explicit(&e->hnext,
					      atomic_load_explicit(&t->b[b], memory_order_relaxed),
					      memory_order_release);
			atomic_store_explicit(&t->b[b], e, memory_order_release);
		}
	}
	atomic_store_explicit(&c->ht, t, memory_order_release);
	/* Readers may still walk it: kept until the cache is freed (the old
	 * tables add up to less than the current one). */
	old->rt.next = c->old_tables;
	c->old_tables = &old->rt;
	return 0;
}

int pdma_cache_index_insert(struct pdma_cache *c, struct entry *e)
{
	struct htab *t;
	size_t b;

	e->heap_key = atomic_load_explicit(&e->last_use, memory_order_relaxed);
	if (pdma_cache_heap_push(c, e))
		return -ENOMEM;
	pdma_cache_index_grow(c);
	t = atomic_load_explicit(&c->ht, memory_order_relaxed);
	b = hash_start(t, e->start);
	if ((e->end - e->start) > atomic_load_explicit(&c->max_len, memory_order_relaxed))
		atomic_store_explicit(&c->max_len, (e->end - e->start), memory_order_release);
	sl_insert(c, e);
	atomic_store_explicit(&e->hnext, atomic_load_explicit(&t->b[b], memory_order_relaxed),
			      memory_order_relaxed);
	atomic_store_explicit(&t->b[b], e, memory_order_release);
	e->indexed = true;
	c->count++;
	c->bytes += (e->end - e->start);
	return 0;
}

/* Unlink from every structure; the index reference is the caller's to drop. */
void pdma_cache_index_remove(struct pdma_cache *c, struct entry *e)
{
	struct htab *t = atomic_load_explicit(&c->ht, memory_order_relaxed);
	struct entry *_Atomic *l = &t->b[hash_start(t, e->start)];
	struct entry *n;

	while ((n = atomic_load_explicit(l, memory_order_relaxed)) && n != e)
		l = &n->hnext;
	if (n)
		atomic_store_explicit(l, atomic_load_explicit(&e->hnext, memory_order_relaxed),
				      memory_order_release);
	sl_remove(c, e);
	pdma_cache_heap_remove(c, e);
	e->indexed = false;
	c->count--;
	c->bytes -= (e->end - e->start);
}

/* The skip-list height of a new entry (thread-local generator: no lock). */
int pdma_cache_random_level(void)
{
	static TLS uint64_t x;
	int l = 1;

	if (unlikely(!x))
		x = 0x2545F4914F6CDD1Dull ^ (uint64_t)(uintptr_t)&x;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	for (uint64_t y = x; l < SL_MAX && (y & 3) == 0; y >>= 2)
		l++;
	return l;
}
