// SPDX-License-Identifier: MIT
/*
 * The registration cache's index: a hash table on the start page, a second on
 * the span and a skip list ordered by start, all written under the cache lock
 * and read without one; the lookup a hit takes.
 *
 * A lookup at a region's start is one probe of the first table. A lookup
 * inside a region (a 4 KiB buffer in a 1 MiB registration) cannot know
 * where the region starts; the span table finds it in a few independent
 * probes instead of the skip list's chain of dependent loads (log n of them,
 * measured 3-4x the cost of the hit at 256 regions of 1 MiB). Each entry
 * sits once in it, at (m, start >> m), where 2^m, its span class, is the
 * least power of two not below its length. A region of class m covering
 * address s then starts in s's granule of 2^m bytes or in the one before:
 * two probes for each class in use (c->span_classes). Where more classes are
 * in use than SPAN_CLASSES_MAX, the skip list is the cheaper search.
 */
#include <errno.h>
#include <stdlib.h>

#include "cache/cache_int.h"

/* 16 probes: about the skip list's steps at a few thousand regions */
#define SPAN_CLASSES_MAX 8

/* At most SPAN_CLASSES_MAX bits set. Not __builtin_popcountll: without
 * -mpopcnt (Debian's baseline x86-64) that is a call into libgcc on every
 * lookup inside a region; this is one step a class in use. */
static inline bool span_classes_few(uint64_t classes)
{
	for (int i = 0; i < SPAN_CLASSES_MAX && classes; i++)
		classes &= classes - 1;
	return !classes;
}

/* Capped at 63: every address is in the granule of 2^63 bytes it names or
 * the one before, so the two probes still find a longer region. */
static inline unsigned span_class(uint64_t len)
{
	return len <= 1 ? 0 : len > (UINT64_C(1) << 63) ? 63 : 64 - (unsigned)__builtin_clzll(len - 1);
}

/* A bucket of the second half. As in hash_start, neighbouring granules of a
 * class go to neighbouring buckets (a cache filling in address order writes
 * few lines and faults in few pages of the table); each block of 64 granules,
 * with the class, starts at a random bucket. */
static inline size_t hash_span(const struct htab *t, unsigned m, uint64_t granule)
{
	uint64_t blk = (granule >> 6) * 64 + m;

	return (((size_t)((blk * 0x9E3779B97F4A7C15ull) >> t->shift) + (granule & 63)) & t->mask) +
	       t->mask + 1;
}

/* A region of one page is only ever found at its start (a lookup rounds
 * its address down to a page): the start table holds it, the span table
 * need not. */
static inline bool span_indexed(const struct entry *e)
{
	return e->end - e->start > e->ops->page_size;
}

static inline size_t hash_span_of(const struct htab *t, const struct entry *e)
{
	unsigned m = span_class(e->end - e->start);

	return hash_span(t, m, e->start >> m);
}

/* The writer's side of the two tables: chain 0 (hash_start's, through hnext)
 * and chain 1 (hash_span's, through snext). Links and heads are stored with
 * release: lock-free readers may be walking the chains. */
static inline struct entry *_Atomic *chain_next(struct entry *e, int span)
{
	return span ? &e->snext : &e->hnext;
}

static inline struct entry *_Atomic *chain_head(struct htab *t, const struct entry *e, int span)
{
	return &t->b[span ? hash_span_of(t, e) : hash_start(t, e->start)];
}

static void chain_push(struct htab *t, struct entry *e, int span)
{
	struct entry *_Atomic *h = chain_head(t, e, span);

	atomic_store_explicit(chain_next(e, span), atomic_load_explicit(h, memory_order_relaxed),
			      memory_order_release);
	atomic_store_explicit(h, e, memory_order_release);
}

static void chain_unlink(struct htab *t, struct entry *e, int span)
{
	struct entry *_Atomic *l = chain_head(t, e, span);
	struct entry *n;

	while ((n = atomic_load_explicit(l, memory_order_relaxed)) && n != e)
		l = chain_next(n, span);
	if (n)
		atomic_store_explicit(l, atomic_load_explicit(chain_next(e, span), memory_order_relaxed),
				      memory_order_release);
}

size_t pdma_cache_htab_bytes(const struct htab *t)
{
	return sizeof(*t) + 2 * (t->mask + 1) * sizeof(t->b[0]);
}

struct htab *pdma_cache_htab_new(size_t nb)
{
	struct htab *t = pdma_cache_zalloc(sizeof(*t) + 2 * nb * sizeof(t->b[0]));
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
	uint64_t maxlen, lo, classes;

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
	/* its class is at least that of the request's length */
	classes = atomic_load_explicit(&c->span_classes, memory_order_acquire) &
		  ~((UINT64_C(1) << span_class(end - s)) - 1);
	if (span_classes_few(classes)) {
		for (; classes; classes &= classes - 1) {
			unsigned m = (unsigned)__builtin_ctzll(classes);

			/* its granule and the one before (none before the first) */
			for (uint64_t g = s >> m, k = 0; k < 2 && k <= g; k++) {
				for (e = atomic_load_explicit(&t->b[hash_span(t, m, g - k)],
							      memory_order_acquire);
				     e; e = atomic_load_explicit(&e->snext, memory_order_acquire)) {
					if (try_hit(e, ops, be, iface, s, end))
						return e;
					if (!--n)
						return NULL;
				}
			}
		}
		return NULL;
	}
	lo = end - maxlen > end ? 0 : end - maxlen;
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
		for (int span = 0; span < 2; span++) {
			struct entry *e, *n;

			e = atomic_load_explicit(&old->b[span * (old->mask + 1) + i],
						 memory_order_relaxed);
			for (; e; e = n) {
				n = atomic_load_explicit(chain_next(e, span), memory_order_relaxed);
				chain_push(t, e, span);
			}
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
	uint64_t cls = span_indexed(e) ? UINT64_C(1) << span_class(e->end - e->start) : 0;
	uint64_t have;

	e->heap_key = atomic_load_explicit(&e->last_use, memory_order_relaxed);
	if (pdma_cache_heap_push(c, e))
		return -ENOMEM;
	pdma_cache_index_grow(c);
	t = atomic_load_explicit(&c->ht, memory_order_relaxed);
	if ((e->end - e->start) > atomic_load_explicit(&c->max_len, memory_order_relaxed))
		atomic_store_explicit(&c->max_len, (e->end - e->start), memory_order_release);
	have = atomic_load_explicit(&c->span_classes, memory_order_relaxed);
	if (~have & cls)
		atomic_store_explicit(&c->span_classes, have | cls, memory_order_release);
	sl_insert(c, e);
	chain_push(t, e, 0);
	if (cls)
		chain_push(t, e, 1);
	e->indexed = true;
	c->count++;
	c->bytes += (e->end - e->start);
	return 0;
}

/* Unlink from every structure; the index reference is the caller's to drop. */
void pdma_cache_index_remove(struct pdma_cache *c, struct entry *e)
{
	struct htab *t = atomic_load_explicit(&c->ht, memory_order_relaxed);

	chain_unlink(t, e, 0);
	if (span_indexed(e))
		chain_unlink(t, e, 1);
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
