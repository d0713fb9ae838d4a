// SPDX-License-Identifier: MIT
/*
 * Registration cache (lib/cache/): hit/miss, overlap and adjacency policy,
 * LRU order, both limits, pass-through, -ENOMEM eviction and retry,
 * invalidation by notification, by backend revocation and by buffer-ID tag
 * check, stale-entry adversaries (host with userfaultfd, sim GPU), and the
 * userfaultfd monitor's events (munmap, madvise(MADV_DONTNEED), mremap,
 * free() of an mmap'ed malloc chunk).
 *
 * Most tests use a fake backend (counting pins, finite BAR, controllable
 * buffer IDs, revocation on "free") so they check the cache alone.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <malloc.h>
#include <sys/mman.h>
#include <cmocka.h>

#include "cache/cache.h"
#include "monitor/monitor.h"
#include "mem/sim.h"

/* ------------------------------------------------------------------------ */
/* Fake backend */

#define PG 65536ull
#define BASE 0x7f0000000000ull

struct fpin {
	uint64_t start;
	size_t len;
	pdma_mem_revoke_fn revoke;
	void *arg;
	int revoked;
	uint64_t gen;
	struct fpin *next;
};

struct fake {
	size_t bar, used;
	unsigned pins, unpins, live, revokes;
	int fail_once;          /* -errno for the next pin */
	uint64_t buffer_id;     /* what query reports */
	unsigned queries;
	uint64_t unpinned[256]; /* starts, in unpin order */
	unsigned nunpinned;
	struct fpin *list;
};

static int fake_query(void *be, uint64_t addr, size_t len, struct pdma_mem_alloc *a)
{
	struct fake *f = be;

	f->queries++;
	a->base = addr & ~(PG - 1);
	a->size = len;
	a->buffer_id = f->buffer_id;
	return 0;
}

static int fake_pin(void *be, uint64_t addr, size_t len, pdma_mem_revoke_fn revoke, void *arg,
		    void **pin)
{
	struct fake *f = be;
	struct fpin *p;

	if ((addr | len) & (PG - 1) || !len)
		return -EINVAL;
	if (f->fail_once) {
		int e = f->fail_once;

		f->fail_once = 0;
		return e;
	}
	if (f->used + len > f->bar)
		return -ENOMEM;
	p = calloc(1, sizeof(*p));
	assert_non_null(p);
	p->start = addr;
	p->len = len;
	p->revoke = revoke;
	p->arg = arg;
	p->gen = f->buffer_id;
	p->next = f->list;
	f->list = p;
	f->used += len;
	f->pins++;
	f->live++;
	*pin = p;
	return 0;
}

static void fake_unpin(void *be, void *pin)
{
	struct fake *f = be;
	struct fpin *p = pin, **pp;

	for (pp = &f->list; *pp && *pp != p; pp = &(*pp)->next)
		;
	assert_ptr_equal(*pp, p); /* never unpinned twice */
	*pp = p->next;
	if (!p->revoked)
		f->used -= p->len;
	f->unpins++;
	f->live--;
	if (f->nunpinned < 256)
		f->unpinned[f->nunpinned++] = p->start;
	free(p);
}

static const struct pdma_mem_ops fake_ops = {
	.name = "fake", .page_size = PG, .query = fake_query, .pin = fake_pin, .unpin = fake_unpin,
};

/* Backend-side free: revoke every live pin overlapping the range. */
static void fake_free(struct fake *f, uint64_t start, size_t len)
{
	for (struct fpin *p = f->list; p; p = p->next) {
		if (p->revoked || p->start >= start + len || p->start + p->len <= start)
			continue;
		p->revoked = 1;
		f->used -= p->len;
		f->revokes++;
		p->revoke(p->arg);
	}
}

static void fake_init(struct fake *f, size_t bar_pages)
{
	memset(f, 0, sizeof(*f));
	f->bar = bar_pages * PG;
	f->buffer_id = 1;
}

static struct pdma_cache *open_cache(size_t max_count, size_t max_size)
{
	struct pdma_cache_attr a;
	struct pdma_cache *c = NULL;

	memset(&a, 0, sizeof(a));
	a.max_count = max_count;
	a.max_size = max_size;
	a.monitor = PDMA_CACHE_MONITOR_DISABLED;
	a.mode[PDMA_HMEM_SIM] = PDMA_CACHE_MODE_TRUST;
	a.mode[PDMA_HMEM_CUDA] = PDMA_CACHE_MODE_TAG_CHECK;
	assert_int_equal(pdma_cache_open(&a, &c), 0);
	return c;
}

static struct pdma_region *get_ok(struct pdma_cache *c, struct fake *f, uint64_t addr, size_t len)
{
	struct pdma_region *r = NULL;

	assert_int_equal(pdma_cache_get(c, &fake_ops, f, PDMA_HMEM_SIM, addr, len, NULL, &r), 0);
	assert_non_null(r);
	assert_true(r->start <= addr && r->start + r->len >= addr + len);
	assert_true(atomic_load(&r->valid));
	return r;
}

static void stats(struct pdma_cache *c, struct pdma_cache_stats *s)
{
	pdma_cache_get_stats(c, s);
}

/* ------------------------------------------------------------------------ */

static void test_hit_miss(void **state)
{
	struct fake f;
	struct pdma_cache *c;
	struct pdma_region *r1, *r2, *r3, *r4;
	struct pdma_cache_stats s;

	(void)state;
	fake_init(&f, 64);
	c = open_cache(100, 1 << 30);
	r1 = get_ok(c, &f, BASE + 100, 3 * PG); /* rounds to [BASE, BASE + 4 PG) */
	assert_int_equal(r1->start, BASE);
	assert_int_equal(r1->len, 4 * PG);
	assert_int_equal(f.pins, 1);
	assert_non_null(r1->owner); /* the MR code releases it through pdma_cache_put */
	pdma_cache_put(c, r1);
	assert_int_equal(f.unpins, 0); /* lazy unpinning */

	r2 = get_ok(c, &f, BASE + 100, 3 * PG); /* same request: hit */
	assert_ptr_equal(r2, r1);
	r3 = get_ok(c, &f, BASE, 10); /* same start page, shorter: hit (hash path) */
	assert_ptr_equal(r3, r1);
	r4 = get_ok(c, &f, BASE + 2 * PG + 5, PG); /* inside: hit (ordered index path) */
	assert_ptr_equal(r4, r1);
	assert_int_equal(f.pins, 1);
	pdma_cache_put(c, r2);
	pdma_cache_put(c, r3);
	pdma_cache_put(c, r4);

	r2 = get_ok(c, &f, BASE + 3 * PG, 2 * PG); /* runs past the end: miss */
	assert_ptr_not_equal(r2, r1);
	assert_int_equal(r2->start, BASE + 3 * PG);
	assert_int_equal(r2->len, 2 * PG);
	assert_int_equal(f.pins, 2);
	pdma_cache_put(c, r2);

	/* Another backend context at the same address is another key. */
	{
		struct fake g;
		struct pdma_region *r;

		fake_init(&g, 8);
		assert_int_equal(pdma_cache_get(c, &fake_ops, &g, PDMA_HMEM_SIM, BASE, PG, NULL, &r),
				 0);
		assert_ptr_not_equal(r, r1);
		assert_int_equal(g.pins, 1);
		pdma_cache_put(c, r);
		assert_int_equal(pdma_cache_flush(c), 3);
		assert_int_equal(g.unpins, 1);
	}
	stats(c, &s);
	assert_int_equal(s.count, 0);
	assert_int_equal(s.misses, 3);
	assert_int_equal(f.unpins, 2);
	assert_int_equal(f.live, 0);

	/* Bad arguments. */
	assert_int_equal(pdma_cache_get(c, &fake_ops, &f, PDMA_HMEM_SIM, BASE, 0, NULL, &r1),
			 -EINVAL);
	assert_int_equal(pdma_cache_get(c, &fake_ops, &f, PDMA_HMEM_SIM, UINT64_MAX - 10, 100,
					NULL, &r1),
			 -EINVAL);
	pdma_cache_close(c);
}

static void test_overlap_no_merge(void **state)
{
	struct fake f;
	struct pdma_cache *c;
	struct pdma_region *a, *b, *x, *y;

	(void)state;
	fake_init(&f, 64);
	c = open_cache(100, 1 << 30);
	a = get_ok(c, &f, BASE, 4 * PG);
	b = get_ok(c, &f, BASE + 2 * PG, 4 * PG); /* overlaps a's last two pages */
	assert_ptr_not_equal(a, b);
	assert_int_equal(b->start, BASE + 2 * PG); /* pinned as asked, not merged */
	assert_int_equal(b->len, 4 * PG);
	assert_int_equal(a->len, 4 * PG); /* a unchanged and still valid */
	assert_true(atomic_load(&a->valid));
	assert_int_equal(f.pins, 2);
	x = get_ok(c, &f, BASE + PG, PG); /* covered by a only */
	assert_ptr_equal(x, a);
	y = get_ok(c, &f, BASE + 5 * PG, PG); /* covered by b only */
	assert_ptr_equal(y, b);
	pdma_cache_put(c, x);
	pdma_cache_put(c, y);
	x = get_ok(c, &f, BASE + 2 * PG, 2 * PG); /* covered by both: either, no pin */
	assert_true(x == a || x == b);
	assert_int_equal(f.pins, 2);
	pdma_cache_put(c, x);
	pdma_cache_put(c, a);
	pdma_cache_put(c, b);
	pdma_cache_close(c);
	assert_int_equal(f.live, 0);
	assert_int_equal(f.unpins, 2);
}

static void test_adjacent_no_merge(void **state)
{
	struct fake f;
	struct pdma_cache *c;
	struct pdma_region *a, *b, *x;

	(void)state;
	fake_init(&f, 64);
	c = open_cache(100, 1 << 30);
	a = get_ok(c, &f, BASE, 2 * PG);
	b = get_ok(c, &f, BASE + 2 * PG, 2 * PG);
	assert_int_equal(a->start + a->len, b->start);
	/* A request across the boundary is covered by neither: a new pin of
	 * exactly that range; a and b stay as they are. */
	x = get_ok(c, &f, BASE + PG, 2 * PG);
	assert_ptr_not_equal(x, a);
	assert_ptr_not_equal(x, b);
	assert_int_equal(x->start, BASE + PG);
	assert_int_equal(x->len, 2 * PG);
	assert_int_equal(f.pins, 3);
	assert_int_equal(a->len, 2 * PG);
	assert_int_equal(b->len, 2 * PG);
	pdma_cache_put(c, a);
	pdma_cache_put(c, b);
	pdma_cache_put(c, x);
	pdma_cache_close(c);
	assert_int_equal(f.live, 0);
}

static void test_lru_order(void **state)
{
	struct fake f;
	struct pdma_cache *c;
	struct pdma_region *r[5];
	struct pdma_cache_stats s;

	(void)state;
	fake_init(&f, 64);
	c = open_cache(3, 1 << 30);
	for (int i = 0; i < 3; i++)
		r[i] = get_ok(c, &f, BASE + i * PG, PG); /* A B C */
	pdma_cache_put(c, r[1]); /* B released first, then C, then A */
	pdma_cache_put(c, r[2]);
	pdma_cache_put(c, r[0]);
	/* Touch B again: LRU is now C, A, B. */
	r[1] = get_ok(c, &f, BASE + 1 * PG, PG);
	pdma_cache_put(c, r[1]);
	r[3] = get_ok(c, &f, BASE + 3 * PG, PG); /* D: evicts C */
	assert_int_equal(f.nunpinned, 1);
	assert_int_equal(f.unpinned[0], BASE + 2 * PG);
	pdma_cache_put(c, r[3]);
	r[4] = get_ok(c, &f, BASE + 4 * PG, PG); /* E: evicts A */
	assert_int_equal(f.nunpinned, 2);
	assert_int_equal(f.unpinned[1], BASE + 0 * PG);
	/* Referenced regions are never evicted: hold E, insert F, G. */
	r[0] = get_ok(c, &f, BASE + 5 * PG, PG); /* F: evicts B (LRU: B, D; E held) */
	assert_int_equal(f.unpinned[2], BASE + 1 * PG);
	r[1] = get_ok(c, &f, BASE + 6 * PG, PG); /* G: evicts D */
	assert_int_equal(f.unpinned[3], BASE + 3 * PG);
	assert_int_equal(f.nunpinned, 4);
	stats(c, &s);
	assert_int_equal(s.count, 3);
	assert_int_equal(s.evictions, 4);
	assert_int_equal(s.uncached, 0);
	pdma_cache_put(c, r[4]);
	pdma_cache_put(c, r[0]);
	pdma_cache_put(c, r[1]);
	pdma_cache_close(c);
	assert_int_equal(f.live, 0);
}

static void test_limit_count(void **state)
{
	struct fake f;
	struct pdma_cache *c;
	struct pdma_region *a, *b, *x;
	struct pdma_cache_stats s;

	(void)state;
	fake_init(&f, 64);
	c = open_cache(2, 1 << 30);
	a = get_ok(c, &f, BASE, PG);
	b = get_ok(c, &f, BASE + PG, PG);
	/* Full of regions in use: the third is handed out uncached. */
	x = get_ok(c, &f, BASE + 2 * PG, PG);
	assert_non_null(x->owner); /* still the cache's: released through put */
	stats(c, &s);
	assert_int_equal(s.count, 2);
	assert_int_equal(s.uncached, 1);
	assert_int_equal(f.live, 3);
	pdma_cache_put(c, x); /* unpinned at once */
	assert_int_equal(f.live, 2);
	assert_int_equal(f.unpinned[0], BASE + 2 * PG);
	x = get_ok(c, &f, BASE + 2 * PG, PG); /* not cached: pins again */
	assert_int_equal(f.pins, 4);
	pdma_cache_put(c, x);
	/* Released regions stay pinned up to the limit. */
	pdma_cache_put(c, a);
	pdma_cache_put(c, b);
	assert_int_equal(f.live, 2);
	stats(c, &s);
	assert_int_equal(s.count, 2);
	pdma_cache_close(c);
	assert_int_equal(f.live, 0);

	/* max_count 0: caching disabled, plain pass-through pins. */
	c = open_cache(0, 1 << 30);
	stats(c, &s);
	assert_int_equal(s.mode[PDMA_HMEM_SIM], PDMA_CACHE_MODE_OFF);
	a = get_ok(c, &f, BASE, PG);
	assert_non_null(a->owner);
	b = get_ok(c, &f, BASE, PG);
	assert_ptr_not_equal(a, b);
	assert_int_equal(f.live, 2);
	pdma_cache_put(c, a);
	pdma_cache_put(c, b);
	assert_int_equal(f.live, 0);
	pdma_cache_close(c);
}

static void test_limit_size(void **state)
{
	struct fake f;
	struct pdma_cache *c;
	struct pdma_region *a, *b, *x;
	struct pdma_cache_stats s;

	(void)state;
	fake_init(&f, 64);
	c = open_cache(100, 3 * PG);
	a = get_ok(c, &f, BASE, 2 * PG);
	pdma_cache_put(c, a);
	b = get_ok(c, &f, BASE + 4 * PG, 2 * PG); /* 4 pages > 3: evicts a */
	assert_int_equal(f.nunpinned, 1);
	assert_int_equal(f.unpinned[0], BASE);
	stats(c, &s);
	assert_int_equal(s.count, 1);
	assert_int_equal(s.bytes, 2 * PG);
	x = get_ok(c, &f, BASE + 8 * PG, 4 * PG); /* larger than the limit: uncached */
	stats(c, &s);
	assert_int_equal(s.uncached, 1);
	assert_int_equal(s.count, 1);
	assert_int_equal(s.bytes, 2 * PG);
	pdma_cache_put(c, x);
	assert_int_equal(f.unpinned[1], BASE + 8 * PG);
	x = get_ok(c, &f, BASE + 8 * PG, PG); /* fits beside b */
	stats(c, &s);
	assert_int_equal(s.count, 2);
	assert_int_equal(s.bytes, 3 * PG);
	pdma_cache_put(c, x);
	pdma_cache_put(c, b);
	pdma_cache_close(c);
	assert_int_equal(f.live, 0);
}

static void test_enomem_evict_retry(void **state)
{
	struct fake f;
	struct pdma_cache *c;
	struct pdma_region *r[4], *x, *y;
	struct pdma_cache_stats s;

	(void)state;
	fake_init(&f, 4); /* BAR: 4 pages */
	c = open_cache(100, 1 << 30);
	for (int i = 0; i < 4; i++)
		r[i] = get_ok(c, &f, BASE + i * 2 * PG, PG);
	for (int i = 0; i < 4; i++)
		pdma_cache_put(c, r[i]); /* LRU: 0 1 2 3 */
	assert_int_equal(f.used, 4 * PG);
	x = get_ok(c, &f, BASE + 20 * PG, 2 * PG); /* needs 2: evicts 0 and 1 */
	assert_int_equal(f.nunpinned, 2);
	assert_int_equal(f.unpinned[0], BASE + 0 * PG);
	assert_int_equal(f.unpinned[1], BASE + 2 * PG);
	stats(c, &s);
	assert_int_equal(s.enomem_retries, 1);
	assert_int_equal(s.evictions, 2);
	assert_int_equal(s.count, 3);
	/* Everything held: nothing to evict, the error comes back. */
	r[2] = get_ok(c, &f, BASE + 4 * PG, PG);
	r[3] = get_ok(c, &f, BASE + 6 * PG, PG);
	assert_int_equal(pdma_cache_get(c, &fake_ops, &f, PDMA_HMEM_SIM, BASE + 30 * PG, PG, NULL,
					&y),
			 -ENOMEM);
	assert_int_equal(f.live, 3);
	/* Another backend's regions are not evicted for this one's BAR. */
	{
		struct fake g;
		struct pdma_region *gr;

		fake_init(&g, 1);
		assert_int_equal(pdma_cache_get(c, &fake_ops, &g, PDMA_HMEM_SIM, BASE, PG, NULL, &gr),
				 0);
		pdma_cache_put(c, gr);
		assert_int_equal(pdma_cache_get(c, &fake_ops, &f, PDMA_HMEM_SIM, BASE + 30 * PG, PG,
						NULL, &y),
				 -ENOMEM);
		assert_int_equal(g.live, 1);
		assert_int_equal(pdma_cache_flush(c), 1);
		assert_int_equal(g.live, 0);
	}
	/* Other pin errors are not retried. */
	pdma_cache_put(c, r[2]);
	f.fail_once = -EFAULT;
	assert_int_equal(pdma_cache_get(c, &fake_ops, &f, PDMA_HMEM_SIM, BASE + 40 * PG, PG, NULL,
					&y),
			 -EFAULT);
	assert_int_equal(f.live, 3);
	pdma_cache_put(c, r[3]);
	pdma_cache_put(c, x);
	pdma_cache_close(c);
	assert_int_equal(f.live, 0);
	assert_int_equal(f.used, 0);
}

static void test_invalidate_notify(void **state)
{
	struct fake f;
	struct pdma_cache *c;
	struct pdma_region *a, *b, *x;
	struct pdma_cache_stats s;

	(void)state;
	fake_init(&f, 64);
	c = open_cache(100, 1 << 30);
	a = get_ok(c, &f, BASE, 2 * PG);
	b = get_ok(c, &f, BASE + 4 * PG, 2 * PG);
	pdma_cache_put(c, b);
	/* A notification from any source (here: as the sim/CUDA hooks send it). */
	pdma_monitor_notify(PDMA_HMEM_SIM, BASE + PG, 4 * PG); /* overlaps both */
	assert_false(atomic_load(&a->valid)); /* held: marked, not unpinned */
	assert_false(atomic_load(&b->valid));
	stats(c, &s); /* runs the deferred unpin of b */
	assert_int_equal(s.invalidations, 2);
	assert_int_equal(s.count, 0);
	assert_int_equal(f.live, 1);
	assert_int_equal(f.unpinned[0], BASE + 4 * PG);
	x = get_ok(c, &f, BASE, 2 * PG); /* never returned again */
	assert_ptr_not_equal(x, a);
	assert_int_equal(f.pins, 3);
	pdma_cache_put(c, a); /* last user: unpinned now */
	assert_int_equal(f.live, 1);
	/* Another interface's notification leaves SIM regions alone. */
	pdma_monitor_notify(PDMA_HMEM_CUDA, BASE, 2 * PG);
	assert_true(atomic_load(&x->valid));
	/* An adjacent range does not overlap. */
	assert_int_equal(pdma_cache_invalidate(c, PDMA_HMEM_SIM, BASE + 2 * PG, PG), 0);
	assert_int_equal(pdma_cache_invalidate(c, PDMA_HMEM_SIM, BASE + 2 * PG - 1, 1), 1);
	pdma_cache_put(c, x);
	pdma_cache_close(c);
	assert_int_equal(f.live, 0);
}

static void test_revoke(void **state)
{
	struct fake f;
	struct pdma_cache *c;
	struct pdma_region *a, *b, *x;
	struct pdma_cache_stats s;

	(void)state;
	fake_init(&f, 64);
	c = open_cache(100, 1 << 30);
	a = get_ok(c, &f, BASE, PG);
	b = get_ok(c, &f, BASE + PG, PG);
	pdma_cache_put(c, b);
	fake_free(&f, BASE, 2 * PG); /* the backend revokes both pins */
	assert_int_equal(f.revokes, 2);
	assert_false(atomic_load(&a->valid));
	assert_false(atomic_load(&b->valid));
	stats(c, &s);
	assert_int_equal(s.count, 0);
	assert_int_equal(s.invalidations, 2);
	assert_int_equal(f.live, 1); /* b unpinned (deferred past the callback) */
	x = get_ok(c, &f, BASE, PG);
	assert_ptr_not_equal(x, a);
	pdma_cache_put(c, a);
	assert_int_equal(f.live, 1);
	pdma_cache_put(c, x);
	pdma_cache_close(c);
	assert_int_equal(f.live, 0);
	assert_int_equal(f.unpins, 3);
}

static void test_tag_check(void **state)
{
	struct fake f;
	struct pdma_cache *c;
	struct pdma_region *a, *x;
	struct pdma_mem_alloc al = { .base = BASE, .size = PG, .buffer_id = 7 };
	struct pdma_cache_stats s;

	(void)state;
	fake_init(&f, 64);
	c = open_cache(100, 1 << 30); /* CUDA: TAG_CHECK, SIM: TRUST */
	f.buffer_id = 7;

	/* TAG_CHECK: every hit is verified through the backend. */
	assert_int_equal(pdma_cache_get(c, &fake_ops, &f, PDMA_HMEM_CUDA, BASE, PG, NULL, &a), 0);
	assert_int_equal(a->buffer_id, 0); /* no ID known: not cached */
	pdma_cache_put(c, a);
	assert_int_equal(f.live, 0);
	assert_int_equal(pdma_cache_get(c, &fake_ops, &f, PDMA_HMEM_CUDA, BASE, PG, &al, &a), 0);
	assert_int_equal(a->buffer_id, 7);
	pdma_cache_put(c, a);
	f.queries = 0;
	assert_int_equal(pdma_cache_get(c, &fake_ops, &f, PDMA_HMEM_CUDA, BASE, PG, NULL, &x), 0);
	assert_ptr_equal(x, a); /* same buffer ID: hit */
	assert_int_equal(f.queries, 1);
	pdma_cache_put(c, x);
	f.buffer_id = 8; /* freed and reallocated at the same address, no notification */
	assert_int_equal(f.pins, 2);
	assert_int_equal(pdma_cache_get(c, &fake_ops, &f, PDMA_HMEM_CUDA, BASE, PG, NULL, &x), 0);
	assert_int_equal(f.pins, 3); /* a new pin, not the stale one */
	assert_int_equal(x->buffer_id, 0);
	stats(c, &s);
	assert_int_equal(s.stale_rejected, 1);
	assert_int_equal(f.unpinned[0], BASE); /* the stale pin is gone */
	pdma_cache_put(c, x);

	/* TRUST: no backend call per hit, but a caller's query (alloc) with
	 * another buffer ID still rejects the hit. */
	al.buffer_id = 8;
	assert_int_equal(pdma_cache_get(c, &fake_ops, &f, PDMA_HMEM_SIM, BASE, PG, &al, &a), 0);
	pdma_cache_put(c, a);
	f.queries = 0;
	assert_int_equal(pdma_cache_get(c, &fake_ops, &f, PDMA_HMEM_SIM, BASE, PG, NULL, &x), 0);
	assert_ptr_equal(x, a);
	assert_int_equal(f.queries, 0);
	pdma_cache_put(c, x);
	al.buffer_id = 9;
	assert_int_equal(f.pins, 4);
	assert_int_equal(pdma_cache_get(c, &fake_ops, &f, PDMA_HMEM_SIM, BASE, PG, &al, &x), 0);
	assert_int_equal(f.pins, 5);
	assert_int_equal(f.live, 1);
	assert_int_equal(x->buffer_id, 9);
	stats(c, &s);
	assert_int_equal(s.stale_rejected, 2);
	pdma_cache_put(c, x);
	pdma_cache_close(c);
	assert_int_equal(f.live, 0);
}

/* pdma_cache_find: hits only, only in TRUST mode, never pins, never queries. */
static void test_find(void **state)
{
	struct fake f;
	struct pdma_cache *c;
	struct pdma_region *a, *x = NULL;
	struct pdma_mem_alloc al = { .base = BASE, .size = 4 * PG, .buffer_id = 7 };

	(void)state;
	fake_init(&f, 64);
	c = open_cache(100, 1 << 30); /* CUDA: TAG_CHECK, SIM: TRUST */
	f.buffer_id = 7;
	assert_int_equal(pdma_cache_find(c, &fake_ops, &f, PDMA_HMEM_SIM, BASE, PG, &x), -ENOENT);
	assert_int_equal(f.pins, 0);
	a = get_ok(c, &f, BASE, 4 * PG);
	pdma_cache_put(c, a);
	f.queries = 0;
	assert_int_equal(pdma_cache_find(c, &fake_ops, &f, PDMA_HMEM_SIM, BASE + PG + 3, 100, &x),
			 0);
	assert_ptr_equal(x, a);
	assert_int_equal(f.queries, 0);
	pdma_cache_put(c, x);
	/* Beyond the region, another backend context, bad ranges: no hit. */
	assert_int_equal(pdma_cache_find(c, &fake_ops, &f, PDMA_HMEM_SIM, BASE + 3 * PG, 2 * PG,
					 &x), -ENOENT);
	{
		struct fake g;

		fake_init(&g, 8);
		assert_int_equal(pdma_cache_find(c, &fake_ops, &g, PDMA_HMEM_SIM, BASE, PG, &x),
				 -ENOENT);
	}
	assert_int_equal(pdma_cache_find(c, &fake_ops, &f, PDMA_HMEM_SIM, BASE, 0, &x), -EINVAL);
	assert_int_equal(pdma_cache_find(c, &fake_ops, &f, PDMA_HMEM_SIM, UINT64_MAX - 10, 100, &x),
			 -EINVAL);
	/* Invalidated: gone for find too. */
	assert_int_equal(pdma_cache_invalidate(c, PDMA_HMEM_SIM, BASE, PG), 1);
	assert_int_equal(pdma_cache_find(c, &fake_ops, &f, PDMA_HMEM_SIM, BASE, PG, &x), -ENOENT);
	/* TAG_CHECK: a hit needs the buffer ID, so find never answers. */
	assert_int_equal(pdma_cache_get(c, &fake_ops, &f, PDMA_HMEM_CUDA, BASE, PG, &al, &a), 0);
	pdma_cache_put(c, a);
	assert_int_equal(pdma_cache_find(c, &fake_ops, &f, PDMA_HMEM_CUDA, BASE, PG, &x), -ENOENT);
	assert_int_equal(f.pins, 2);
	pdma_cache_close(c);
	assert_int_equal(f.live, 0);
}

static void test_close_with_users(void **state)
{
	struct fake f;
	struct pdma_cache *c;
	struct pdma_region *a, *b;

	(void)state;
	fake_init(&f, 64);
	c = open_cache(100, 1 << 30);
	a = get_ok(c, &f, BASE, PG);
	b = get_ok(c, &f, BASE + PG, PG);
	pdma_cache_put(c, b);
	pdma_cache_close(c); /* b unpinned, a lives on */
	assert_int_equal(f.live, 1);
	assert_true(atomic_load(&a->valid));
	fake_free(&f, BASE, PG); /* revocation after close still reaches a */
	assert_false(atomic_load(&a->valid));
	pdma_cache_put(NULL, a);
	assert_int_equal(f.live, 0);
}

static void test_env(void **state)
{
	struct pdma_cache_attr a;

	(void)state;
	setenv("PEERDMA_MR_CACHE_MAX_SIZE", "3M", 1);
	setenv("PEERDMA_MR_CACHE_MAX_COUNT", "0", 1);
	setenv("PEERDMA_MR_CACHE_MONITOR", "disabled", 1);
	setenv("PEERDMA_MR_CUDA_CACHE_MONITOR_ENABLED", "0", 1);
	pdma_cache_attr_from_env(&a);
	assert_int_equal(a.max_size, 3 << 20);
	assert_int_equal(a.max_count, 0);
	assert_int_equal(a.monitor, PDMA_CACHE_MONITOR_DISABLED);
	assert_int_equal(a.mode[PDMA_HMEM_CUDA], PDMA_CACHE_MODE_OFF);
	setenv("PEERDMA_MR_CACHE_MAX_COUNT", "77", 1);
	setenv("PEERDMA_MR_CACHE_MONITOR", "userfaultfd", 1);
	setenv("PEERDMA_MR_CUDA_CACHE_MONITOR_ENABLED", "1", 1);
	setenv("PEERDMA_MR_CUDA_CACHE_TAG_CHECK", "0", 1);
	pdma_cache_attr_from_env(&a);
	assert_int_equal(a.max_count, 77);
	assert_int_equal(a.monitor, PDMA_CACHE_MONITOR_USERFAULTFD);
	assert_int_equal(a.mode[PDMA_HMEM_CUDA], PDMA_CACHE_MODE_TRUST);
	unsetenv("PEERDMA_MR_CACHE_MAX_SIZE");
	unsetenv("PEERDMA_MR_CACHE_MAX_COUNT");
	unsetenv("PEERDMA_MR_CACHE_MONITOR");
	unsetenv("PEERDMA_MR_CUDA_CACHE_MONITOR_ENABLED");
	unsetenv("PEERDMA_MR_CUDA_CACHE_TAG_CHECK");
	pdma_cache_attr_from_env(&a);
	assert_int_equal(a.max_count, 1024);
	assert_true(a.max_size > 0);
	assert_int_equal(a.monitor, PDMA_CACHE_MONITOR_DEFAULT);
	assert_int_equal(a.mode[PDMA_HMEM_CUDA], PDMA_CACHE_MODE_DEFAULT);
	a.monitor = 99;
	{
		struct pdma_cache *c;

		assert_int_equal(pdma_cache_open(&a, &c), -EINVAL);
	}
}

/* ------------------------------------------------------------------------ */
/* Real backends */

static bool under_valgrind(void)
{
	return getenv("PEERDMA_VALGRIND") != NULL;
}

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PDMA_TEST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define PDMA_TEST_ASAN 1
#endif

static bool asan(void)
{
#ifdef PDMA_TEST_ASAN
	return true;
#else
	return false;
#endif
}

static struct pdma_cache *open_host_cache(size_t max_count)
{
	struct pdma_cache_attr a;
	struct pdma_cache *c = NULL;
	struct pdma_cache_stats s;

	memset(&a, 0, sizeof(a));
	a.max_count = max_count;
	a.max_size = (size_t)1 << 30;
	a.monitor = PDMA_CACHE_MONITOR_USERFAULTFD;
	assert_int_equal(pdma_cache_open(&a, &c), 0);
	pdma_cache_get_stats(c, &s);
	if (s.monitor != PDMA_CACHE_MONITOR_USERFAULTFD) {
		pdma_cache_close(c);
		return NULL;
	}
	assert_int_equal(s.mode[PDMA_HMEM_SYSTEM], PDMA_CACHE_MODE_TRUST);
	return c;
}

/* munmap/madvise/mremap return once the monitor thread has READ their event;
 * lookups wait for the invalidation to finish (pdma_uffd_seq odd), and so do
 * the tests before they look at stats or valid flags. */
static void uffd_settle(void)
{
	while (atomic_load(&pdma_uffd_seq) & 1)
		usleep(100);
}

static int host_get(struct pdma_cache *c, void *p, size_t len, struct pdma_region **r)
{
	struct pdma_mem_alloc al;
	int ret = pdma_mem_host_ops.query(NULL, (uint64_t)(uintptr_t)p, len, &al);

	if (ret)
		return ret;
	return pdma_cache_get(c, &pdma_mem_host_ops, NULL, PDMA_HMEM_SYSTEM,
			      (uint64_t)(uintptr_t)p, len, &al, r);
}

/* Host: munmap, then mmap at the same address, thousands of times. Every
 * round must pin again (a hit would be the old, unmapped pages). */
static void test_stale_host_mmap(void **state)
{
	const size_t len = 64 * 1024;
	struct pdma_cache *c;
	struct pdma_cache_stats s;
	struct pdma_region *r, *prev = NULL;
	void *want = NULL;
	int rounds = under_valgrind() ? 200 : 3000, same = 0;

	(void)state;
	c = open_host_cache(1024);
	if (!c)
		skip();
	for (int i = 0; i < rounds; i++) {
		void *p = mmap(want, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		assert_true(p != MAP_FAILED);
		if (p == want)
			same++;
		want = p;
		memset(p, i, len);
		assert_int_equal(host_get(c, p, len, &r), 0);
		assert_int_equal(r->start, (uint64_t)(uintptr_t)p);
		assert_true(atomic_load(&r->valid));
		/* A hit here would hand out the previous mapping's pin. */
		pdma_cache_get_stats(c, &s);
		assert_int_equal(s.misses, (uint64_t)i + 1);
		assert_int_equal(s.slow_hits, 0);
		/* Hits while mapped. */
		{
			struct pdma_region *h;

			assert_int_equal(host_get(c, (char *)p + 100, 200, &h), 0);
			assert_ptr_equal(h, r);
			pdma_cache_put(c, h);
		}
		pdma_cache_put(c, r);
		(void)prev;
		prev = r;
		assert_int_equal(munmap(p, len), 0);
	}
	assert_true(same >= rounds / 2); /* the adversary did reuse the address */
	uffd_settle();
	pdma_cache_get_stats(c, &s);
	assert_int_equal(s.invalidations, (uint64_t)rounds);
	assert_int_equal(s.count, 0);
	pdma_cache_close(c);
}

/* Host: free()/malloc() of a chunk glibc serves with mmap: the unmap happens
 * inside libc, where no symbol hook would see it. */
static void test_stale_host_malloc(void **state)
{
	const size_t len = 1 << 20; /* above the mmap threshold */
	struct pdma_cache *c;
	struct pdma_cache_stats s;
	struct pdma_region *r;
	int rounds = under_valgrind() ? 100 : 2000;

	(void)state;
	if (under_valgrind() || asan())
		skip(); /* their allocators keep freed memory (quarantine) */
	/* A fixed threshold: glibc would otherwise raise it after the first
	 * free and serve the rest from the heap (still correct, not this test). */
	mallopt(M_MMAP_THRESHOLD, 256 * 1024);
	c = open_host_cache(1024);
	if (!c)
		skip();
	for (int i = 0; i < rounds; i++) {
		char *p = malloc(len);

		assert_non_null(p);
		memset(p, i, len);
		assert_int_equal(host_get(c, p + 4096, 8192, &r), 0);
		pdma_cache_get_stats(c, &s);
		assert_int_equal(s.misses, (uint64_t)i + 1);
		pdma_cache_put(c, r);
		free(p);
	}
	uffd_settle();
	pdma_cache_get_stats(c, &s);
	assert_int_equal(s.invalidations, (uint64_t)rounds);
	pdma_cache_close(c);
}

/* Host pins that do not mlock (as a pin_user_pages backend would), so that
 * madvise(MADV_DONTNEED) is allowed on pinned pages. */
static unsigned nolock_live;

static int nolock_pin(void *be, uint64_t addr, size_t len, pdma_mem_revoke_fn revoke,
		      void *arg, void **pin)
{
	(void)be, (void)addr, (void)len, (void)revoke, (void)arg;
	nolock_live++;
	*pin = &nolock_live;
	return 0;
}

static void nolock_unpin(void *be, void *pin)
{
	(void)be, (void)pin;
	nolock_live--;
}

static const struct pdma_mem_ops nolock_ops = {
	.name = "nolock", .page_size = 4096, .pin = nolock_pin, .unpin = nolock_unpin,
};

static int nolock_get(struct pdma_cache *c, void *p, size_t len, struct pdma_region **r)
{
	return pdma_cache_get(c, &nolock_ops, NULL, PDMA_HMEM_SYSTEM, (uint64_t)(uintptr_t)p, len,
			      NULL, r);
}

/* userfaultfd events: madvise(DONTNEED), mremap, munmap. */
static void test_uffd_events(void **state)
{
	const size_t pg = 4096;
	struct pdma_cache *c;
	struct pdma_cache_stats s;
	struct pdma_region *a, *b, *x;
	char *p, *q, *t;

	(void)state;
	c = open_host_cache(1024);
	if (!c)
		skip();
	p = mmap(NULL, 16 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(p != MAP_FAILED);
	memset(p, 1, 16 * pg);
	assert_int_equal(nolock_get(c, p, 4 * pg, &a), 0);
	assert_int_equal(nolock_get(c, p + 8 * pg, 4 * pg, &b), 0);
	pdma_cache_get_stats(c, &s);
	assert_int_equal(s.count, 2);
	pdma_cache_put(c, b);

	/* madvise(MADV_DONTNEED) on one page of a: a is invalidated, b not. */
	assert_int_equal(madvise(p + pg, pg, MADV_DONTNEED), 0);
	/* A lookup after the call never sees a (it waits for the monitor). */
	assert_int_equal(nolock_get(c, p, pg, &x), 0);
	assert_ptr_not_equal(x, a);
	pdma_cache_put(c, x);
	assert_false(atomic_load(&a->valid));
	pdma_cache_get_stats(c, &s);
	assert_int_equal(s.invalidations, 1);
	assert_int_equal(s.count, 2); /* b and the new one */
	assert_int_equal(nolock_get(c, p + 8 * pg, pg, &x), 0);
	assert_ptr_equal(x, b);
	pdma_cache_put(c, x);
	pdma_cache_put(c, a);
	assert_int_equal(nolock_live, 2);
	assert_int_equal(p[pg], 0); /* the page reads back as zero */
	assert_int_equal(p[0], 1);

	/* mremap moving b's pages: b is invalidated. */
	t = mmap(NULL, 4 * pg, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(t != MAP_FAILED);
	q = mremap(p + 8 * pg, 4 * pg, 4 * pg, MREMAP_MAYMOVE | MREMAP_FIXED, t);
	assert_true(q == t);
	uffd_settle();
	pdma_cache_get_stats(c, &s);
	assert_int_equal(s.invalidations, 2);
	assert_false(atomic_load(&b->valid));
	assert_int_equal(q[0], 1);

	/* munmap of the rest. */
	assert_int_equal(nolock_get(c, p + 12 * pg, 2 * pg, &a), 0);
	pdma_cache_put(c, a);
	pdma_cache_get_stats(c, &s);
	assert_int_equal(s.count, 2);
	assert_int_equal(munmap(p, 16 * pg), 0);
	uffd_settle();
	pdma_cache_get_stats(c, &s);
	assert_int_equal(s.invalidations, 4);
	assert_int_equal(s.count, 0);
	assert_int_equal(nolock_live, 0);
	munmap(q, 4 * pg);
	pdma_cache_close(c);
}

/*
 * memhooks: interposed munmap/madvise/mremap invalidate synchronously, before
 * the call returns; thousands of munmap + mmap at the same address give zero
 * stale hits. Where the program's own calls cannot be hooked (sanitizer
 * runtimes define these symbols inside the program) the test says so and
 * skips.
 */
static struct pdma_cache *open_memhooks_cache(void)
{
	struct pdma_cache_attr a;
	struct pdma_cache *c = NULL;
	struct pdma_cache_stats s;

	memset(&a, 0, sizeof(a));
	a.max_count = 1024;
	a.max_size = (size_t)1 << 30;
	a.monitor = PDMA_CACHE_MONITOR_MEMHOOKS;
	assert_int_equal(pdma_cache_open(&a, &c), 0);
	pdma_cache_get_stats(c, &s);
	assert_int_equal(s.monitor, PDMA_CACHE_MONITOR_MEMHOOKS);
	assert_int_equal(s.mode[PDMA_HMEM_SYSTEM], PDMA_CACHE_MODE_TRUST);
	return c;
}

static void test_memhooks_events(void **state)
{
	const size_t pg = 4096;
	struct pdma_cache *c = open_memhooks_cache();
	struct pdma_cache_stats s;
	struct pdma_region *a, *b, *x;
	char *p, *q, *t;

	(void)state;
	p = mmap(NULL, 16 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(p != MAP_FAILED);
	memset(p, 1, 16 * pg);
	assert_int_equal(nolock_get(c, p, 4 * pg, &a), 0);
	assert_int_equal(nolock_get(c, p + 8 * pg, 4 * pg, &b), 0);
	pdma_cache_put(c, b);
	pdma_cache_get_stats(c, &s);
	assert_int_equal(s.count, 2);

	assert_int_equal(madvise(p + pg, pg, MADV_DONTNEED), 0);
	pdma_cache_get_stats(c, &s);
	if (s.invalidations == 0) {
		pdma_cache_put(c, a);
		pdma_cache_close(c);
		munmap(p, 16 * pg);
		print_message("memhooks cannot hook this program's own calls (sanitizer "
			      "interceptors define them in the program)\n");
		skip();
	}
	assert_int_equal(s.invalidations, 1); /* done before madvise returned */
	assert_false(atomic_load(&a->valid));
	pdma_cache_put(c, a);
	/* Other advice does not invalidate. */
	assert_int_equal(madvise(p + 8 * pg, pg, MADV_WILLNEED), 0);
	pdma_cache_get_stats(c, &s);
	assert_int_equal(s.invalidations, 1);

	t = mmap(NULL, 4 * pg, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(t != MAP_FAILED);
	q = mremap(p + 8 * pg, 4 * pg, 4 * pg, MREMAP_MAYMOVE | MREMAP_FIXED, t);
	assert_true(q == t);
	pdma_cache_get_stats(c, &s);
	assert_int_equal(s.invalidations, 2);
	assert_false(atomic_load(&b->valid));

	assert_int_equal(nolock_get(c, p + 12 * pg, 2 * pg, &x), 0);
	pdma_cache_put(c, x);
	assert_int_equal(munmap(p + 13 * pg, pg), 0);
	pdma_cache_get_stats(c, &s);
	if (s.invalidations == 2) {
		/* TSan defines munmap inside the program: not hookable. */
		pdma_cache_flush(c);
		munmap(p, 16 * pg);
		munmap(q, 4 * pg);
		pdma_cache_close(c);
		print_message("memhooks cannot hook this program's own munmap\n");
		skip();
	}
	assert_int_equal(s.invalidations, 3);
	assert_int_equal(s.count, 0);
	assert_int_equal(nolock_live, 0);
	munmap(p, 16 * pg);
	munmap(q, 4 * pg);
	pdma_cache_close(c);
}

static void test_stale_host_memhooks(void **state)
{
	const size_t len = 64 * 1024;
	struct pdma_cache *c = open_memhooks_cache();
	struct pdma_cache_stats s;
	struct pdma_region *r;
	void *want = NULL;
	int rounds = under_valgrind() ? 200 : 3000, same = 0;

	(void)state;
	for (int i = 0; i < rounds; i++) {
		void *p = mmap(want, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		assert_true(p != MAP_FAILED);
		same += p == want;
		want = p;
		memset(p, i, len);
		assert_int_equal(host_get(c, p, len, &r), 0);
		pdma_cache_get_stats(c, &s);
		assert_int_equal(s.misses, (uint64_t)i + 1); /* never the old mapping's pin */
		pdma_cache_put(c, r);
		assert_int_equal(munmap(p, len), 0);
		pdma_cache_get_stats(c, &s);
		if (i == 0 && s.invalidations == 0) {
			pdma_cache_close(c);
			print_message("memhooks cannot hook this program's own calls\n");
			skip();
		}
		assert_int_equal(s.invalidations, (uint64_t)i + 1);
	}
	assert_true(same >= rounds / 2);
	pdma_cache_close(c);
}

/* Host memory is never cached without a monitor. */
static void test_host_no_monitor(void **state)
{
	struct pdma_cache_attr a;
	struct pdma_cache *c;
	struct pdma_cache_stats s;
	struct pdma_region *r1, *r2;
	char *p = aligned_alloc(4096, 8192);

	(void)state;
	memset(&a, 0, sizeof(a));
	a.max_count = 100;
	a.monitor = PDMA_CACHE_MONITOR_DISABLED;
	assert_int_equal(pdma_cache_open(&a, &c), 0);
	pdma_cache_get_stats(c, &s);
	assert_int_equal(s.monitor, PDMA_CACHE_MONITOR_DISABLED);
	assert_int_equal(s.mode[PDMA_HMEM_SYSTEM], PDMA_CACHE_MODE_OFF);
	assert_int_equal(s.mode[PDMA_HMEM_SIM], PDMA_CACHE_MODE_TRUST);
	assert_int_equal(s.mode[PDMA_HMEM_CUDA], PDMA_CACHE_MODE_TAG_CHECK);
	memset(p, 0, 8192);
	assert_int_equal(host_get(c, p, 8192, &r1), 0);
	assert_int_equal(host_get(c, p, 8192, &r2), 0);
	assert_ptr_not_equal(r1, r2);
	pdma_cache_get_stats(c, &s);
	assert_int_equal(s.uncached, 2);
	assert_int_equal(s.count, 0);
	pdma_cache_put(c, r1);
	pdma_cache_put(c, r2);
	pdma_cache_close(c);
	free(p);
}

/* Sim GPU: free, then allocate the same size at the same address (new buffer
 * ID), thousands of rounds, both with and without the caller's query: zero
 * stale hits, every pin released. */
static void sim_adversary(bool with_query)
{
	struct pdma_sim_attr sa = { .mem_size = 16 << 20, .bar_size = 4 << 20 };
	struct pdma_sim *sim;
	struct pdma_sim_stats ss;
	struct pdma_cache *c;
	struct pdma_cache_stats s;
	int rounds = under_valgrind() ? 300 : 5000;
	void *keep, *prev = NULL;
	int same = 0;

	assert_int_equal(pdma_sim_open(&sa, &sim), 0);
	c = open_cache(1024, 1 << 30);
	/* A long-lived neighbour that must stay cached throughout. */
	assert_int_equal(pdma_sim_alloc(sim, 2 * PG, &keep), 0);
	for (int i = 0; i < rounds; i++) {
		struct pdma_sim_ptr_info info;
		struct pdma_mem_alloc al;
		struct pdma_region *r, *h;
		void *p;

		assert_int_equal(pdma_sim_alloc(sim, 3 * PG, &p), 0);
		if (p == prev)
			same++;
		prev = p;
		assert_int_equal(pdma_sim_ptr_info(sim, p, &info), 0);
		al.base = info.base;
		al.size = info.size;
		al.buffer_id = info.buffer_id;
		assert_int_equal(pdma_cache_get(c, &pdma_mem_sim_ops, sim, PDMA_HMEM_SIM,
						(uint64_t)(uintptr_t)p, 3 * PG,
						with_query ? &al : NULL, &r),
				 0);
		pdma_cache_get_stats(c, &s);
		assert_int_equal(s.misses, (uint64_t)i + 1 + (i > 0)); /* + keep's first pin */
		if (with_query)
			assert_int_equal(r->buffer_id, info.buffer_id);
		pdma_cache_put(c, r);
		assert_int_equal(pdma_cache_get(c, &pdma_mem_sim_ops, sim, PDMA_HMEM_SIM,
						(uint64_t)(uintptr_t)p + PG, PG,
						with_query ? &al : NULL, &h),
				 0);
		assert_ptr_equal(h, r); /* a hit while the buffer lives */
		pdma_cache_put(c, h);
		if (i == 0) {
			assert_int_equal(pdma_cache_get(c, &pdma_mem_sim_ops, sim, PDMA_HMEM_SIM,
							(uint64_t)(uintptr_t)keep, PG, NULL, &h),
					 0);
			pdma_cache_put(c, h);
		}
		assert_int_equal(pdma_sim_free(sim, p), 0);
	}
	assert_true(same >= rounds - 1); /* the address was reused every time */
	pdma_cache_get_stats(c, &s);
	assert_int_equal(s.invalidations, (uint64_t)rounds);
	assert_int_equal(s.stale_rejected, 0); /* invalidation came first, every time */
	assert_int_equal(s.count, 1);          /* keep */
	pdma_sim_get_stats(sim, &ss);
	assert_int_equal(ss.live_pins, 1);
	pdma_cache_close(c);
	pdma_sim_get_stats(sim, &ss);
	assert_int_equal(ss.live_pins, 0);
	assert_int_equal(ss.pins, ss.unpins);
	assert_int_equal(ss.free_callbacks, (uint64_t)rounds);
	assert_int_equal(pdma_sim_free(sim, keep), 0);
	assert_int_equal(pdma_sim_close(sim), 0);
}

static void test_stale_sim(void **state)
{
	(void)state;
	sim_adversary(true);
	sim_adversary(false);
}

/* Sim: BAR exhaustion through the real backend: eviction and retry. */
static void test_sim_bar_enomem(void **state)
{
	struct pdma_sim_attr sa = { .mem_size = 16 << 20, .bar_size = 4 * PG };
	struct pdma_sim *sim;
	struct pdma_sim_stats ss;
	struct pdma_cache *c;
	struct pdma_cache_stats s;
	struct pdma_region *r[4];
	void *p;

	(void)state;
	assert_int_equal(pdma_sim_open(&sa, &sim), 0);
	assert_int_equal(pdma_sim_alloc(sim, 8 * PG, &p), 0);
	c = open_cache(1024, 1 << 30);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(pdma_cache_get(c, &pdma_mem_sim_ops, sim, PDMA_HMEM_SIM,
						(uint64_t)(uintptr_t)p + i * PG, PG, NULL, &r[i]),
				 0);
		pdma_cache_put(c, r[i]);
	}
	pdma_sim_get_stats(sim, &ss);
	assert_int_equal(ss.bar_used, 4 * PG);
	assert_int_equal(pdma_cache_get(c, &pdma_mem_sim_ops, sim, PDMA_HMEM_SIM,
					(uint64_t)(uintptr_t)p + 4 * PG, 3 * PG, NULL, &r[0]),
			 0);
	pdma_cache_get_stats(c, &s);
	assert_int_equal(s.evictions, 3);
	assert_int_equal(s.enomem_retries, 1);
	pdma_sim_get_stats(sim, &ss);
	assert_int_equal(ss.bar_used, 4 * PG);
	assert_int_equal(ss.live_pins, 2);
	pdma_cache_put(c, r[0]);
	pdma_cache_close(c);
	assert_int_equal(pdma_sim_free(sim, p), 0);
	assert_int_equal(pdma_sim_close(sim), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hit_miss),
		cmocka_unit_test(test_overlap_no_merge),
		cmocka_unit_test(test_adjacent_no_merge),
		cmocka_unit_test(test_lru_order),
		cmocka_unit_test(test_limit_count),
		cmocka_unit_test(test_limit_size),
		cmocka_unit_test(test_enomem_evict_retry),
		cmocka_unit_test(test_invalidate_notify),
		cmocka_unit_test(test_revoke),
		cmocka_unit_test(test_tag_check),
		cmocka_unit_test(test_find),
		cmocka_unit_test(test_close_with_users),
		cmocka_unit_test(test_env),
		cmocka_unit_test(test_host_no_monitor),
		cmocka_unit_test(test_stale_host_mmap),
		cmocka_unit_test(test_stale_host_malloc),
		cmocka_unit_test(test_uffd_events),
		cmocka_unit_test(test_memhooks_events),
		cmocka_unit_test(test_stale_host_memhooks),
		cmocka_unit_test(test_stale_sim),
		cmocka_unit_test(test_sim_bar_enomem),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
