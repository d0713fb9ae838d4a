// SPDX-License-Identifier: MIT
/*
 * Registration cache (lib/cache/), the index: hit and miss, overlapping and
 * adjacent registrations (never merged), lookups inside regions (the span
 * table and, past its classes, the skip list), pdma_cache_find, close with
 * users.
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
#include "support/fake_mem.h"

static void test_hit_miss(void **state)
{
	struct fake_mem f;
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
		struct fake_mem g;
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
	struct fake_mem f;
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
	struct fake_mem f;
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

/*
 * Lookups inside regions: every page of regions of many lengths, placed
 * across the granule boundaries of their span classes (index.c), is a hit on
 * the lock-free path (no pin, no slow hit). First with six classes in use
 * (the span table's probes), then with ten (past SPAN_CLASSES_MAX: the skip
 * list). An invalidated region is gone from the lookup inside it too.
 */
static void check_inside(struct pdma_cache *c, struct fake_mem *f, struct pdma_region **r,
			 const uint64_t *at, const size_t *pages, int n)
{
	for (int i = 0; i < n; i++) {
		for (size_t p = 0; p < pages[i]; p++) {
			struct pdma_region *x = get_ok(c, f, at[i] + p * PG + 7, 100);

			assert_ptr_equal(x, r[i]);
			pdma_cache_put(c, x);
		}
		/* the whole region, and its last page to one past the end */
		assert_ptr_equal(get_ok(c, f, at[i], pages[i] * PG), r[i]);
		pdma_cache_put(c, r[i]);
	}
}

static void test_inside(void **state)
{
	/* 1 .. 21 pages: span classes 2^16 .. 2^21 bytes (six); 9 .. 257 pages
	 * add 2^22 .. 2^25 (ten) */
	static const size_t pages[] = { 1, 2, 3, 5, 8, 13, 21, 9, 33, 65, 129, 257 };
	enum { N = sizeof(pages) / sizeof(pages[0]), FEW = 7 };
	struct fake_mem f;
	struct pdma_cache *c;
	struct pdma_region *r[N], *x;
	struct pdma_cache_stats s;
	uint64_t at[N], a = BASE + 67 * PG;
	unsigned pins;

	(void)state;
	fake_init(&f, 1024);
	c = open_cache(100, (size_t)1 << 40);
	for (int i = 0; i < N; i++) {
		/* one page off a granule; one region exactly on its granule;
		 * the rest one after another, a page apart */
		at[i] = i == 0 ? BASE + 3 * PG : i == 1 ? BASE + 64 * PG : a;
		if (i > 1)
			a += (pages[i] + 1) * PG;
		r[i] = get_ok(c, &f, at[i], pages[i] * PG);
		pdma_cache_put(c, r[i]);
		if (i + 1 == FEW || i + 1 == N) {
			pins = f.pins;
			check_inside(c, &f, r, at, pages, i + 1);
			assert_int_equal(f.pins, pins);
			stats(c, &s);
			assert_int_equal(s.slow_hits, 0);
		}
	}

	/* one page past the end: another region */
	x = get_ok(c, &f, at[5] + (pages[5] - 1) * PG, 2 * PG);
	assert_ptr_not_equal(x, r[5]);
	assert_int_equal(f.pins, pins + 1);
	pdma_cache_put(c, x);
	/* invalidated: a lookup inside pins anew (the slab may hand the new
	 * region the same entry: its start tells) */
	assert_int_equal(pdma_cache_invalidate(c, PDMA_HMEM_SIM, at[6], pages[6] * PG), 1);
	x = get_ok(c, &f, at[6] + 10 * PG, PG);
	assert_int_equal(x->start, at[6] + 10 * PG);
	assert_int_equal(f.pins, pins + 2);
	pdma_cache_put(c, x);
	pdma_cache_close(c);
	assert_int_equal(f.live, 0);
}

/* pdma_cache_find: hits only, only in TRUST mode, never pins, never queries. */
static void test_find(void **state)
{
	struct fake_mem f;
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
		struct fake_mem g;

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
	/* TAG_CHECK: a hit is verified by one same_alloc call, not a query
	 * (test_cache_stale.c: the cases where find declines). */
	assert_int_equal(pdma_cache_get(c, &fake_ops, &f, PDMA_HMEM_CUDA, BASE, PG, &al, &a), 0);
	pdma_cache_put(c, a);
	f.queries = 0;
	assert_int_equal(pdma_cache_find(c, &fake_ops, &f, PDMA_HMEM_CUDA, BASE, PG, &x), 0);
	assert_ptr_equal(x, a);
	assert_int_equal(f.id_checks, 1);
	assert_int_equal(f.queries, 0);
	pdma_cache_put(c, x);
	assert_int_equal(f.pins, 2);
	pdma_cache_close(c);
	assert_int_equal(f.live, 0);
}

static void test_close_with_users(void **state)
{
	struct fake_mem f;
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hit_miss),
		cmocka_unit_test(test_overlap_no_merge),
		cmocka_unit_test(test_adjacent_no_merge),
		cmocka_unit_test(test_inside),
		cmocka_unit_test(test_find),
		cmocka_unit_test(test_close_with_users),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
