// SPDX-License-Identifier: MIT
/*
 * Registration cache (lib/cache/), staleness: invalidation by monitor
 * notification, by backend revocation and by buffer-ID tag check.
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

static void test_invalidate_notify(void **state)
{
	struct fake_mem f;
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
	struct fake_mem f;
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
	struct fake_mem f;
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
	assert_int_equal(f.id_checks, 1); /* one same_alloc call, no query */
	assert_int_equal(f.queries, 0);
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

/* pdma_cache_find in TAG_CHECK mode: a hit costs one same_alloc call; a
 * range leaving the allocation inside its pinned pages, or a backend without
 * same_alloc, is left to the query path (the region stays cached); a stale
 * hit is dropped. */
static void test_tag_check_find(void **state)
{
	/* The allocation [BASE + 100, BASE + 1.5 PG): pinned as [BASE, BASE + 2 PG). */
	struct pdma_mem_alloc al = { .base = BASE + 100, .size = PG + PG / 2 - 100, .buffer_id = 7 };
	struct pdma_mem_ops noid = fake_ops;
	struct pdma_region *a, *x;
	struct pdma_cache_stats s;
	struct pdma_cache *c;
	struct fake_mem f;

	(void)state;
	fake_init(&f, 64);
	c = open_cache(100, 1 << 30);
	f.buffer_id = 7;
	assert_int_equal(pdma_cache_get(c, &fake_ops, &f, PDMA_HMEM_CUDA, BASE + 100, PG, &al, &a), 0);
	assert_int_equal(a->start, BASE);
	assert_int_equal(a->len, 2 * PG);
	assert_int_equal(a->alloc_head, 100);
	assert_int_equal(a->alloc_tail, PG / 2);
	pdma_cache_put(c, a);
	f.queries = 0;

	assert_int_equal(pdma_cache_find(c, &fake_ops, &f, PDMA_HMEM_CUDA, BASE + 200, 1000, &x), 0);
	assert_ptr_equal(x, a);
	assert_int_equal(f.id_checks, 1);
	pdma_cache_put(c, x);
	/* The allocation's first and last byte: still a hit. */
	assert_int_equal(pdma_cache_find(c, &fake_ops, &f, PDMA_HMEM_CUDA, BASE + 100,
					 PG + PG / 2 - 100, &x), 0);
	assert_ptr_equal(x, a);
	pdma_cache_put(c, x);
	assert_int_equal(f.id_checks, 2);
	/* One byte before it, one byte past it: pinned pages, not the allocation. */
	assert_int_equal(pdma_cache_find(c, &fake_ops, &f, PDMA_HMEM_CUDA, BASE + 99, 10, &x),
			 -ENOENT);
	assert_int_equal(pdma_cache_find(c, &fake_ops, &f, PDMA_HMEM_CUDA, BASE + PG, PG / 2 + 1, &x),
			 -ENOENT);
	assert_int_equal(f.id_checks, 2);
	assert_int_equal(f.queries, 0);
	assert_true(atomic_load(&a->valid));
	stats(c, &s);
	assert_int_equal(s.stale_rejected, 0);
	assert_int_equal(s.count, 1);

	/* A backend without same_alloc: found, then left to the query. */
	noid.same_alloc = NULL;
	assert_int_equal(pdma_cache_get(c, &noid, &f, PDMA_HMEM_CUDA, BASE + 100, PG, &al, &x), 0);
	assert_ptr_not_equal(x, a); /* another backend's region */
	pdma_cache_put(c, x);
	assert_int_equal(pdma_cache_find(c, &noid, &f, PDMA_HMEM_CUDA, BASE + 200, 1000, &x), -ENOENT);
	assert_int_equal(f.queries, 0);
	stats(c, &s);
	assert_int_equal(s.count, 2);
	assert_int_equal(s.stale_rejected, 0);

	/* Reallocated at the same address with no notification: dropped. */
	f.buffer_id = 8;
	assert_int_equal(f.unpins, 0);
	assert_int_equal(pdma_cache_find(c, &fake_ops, &f, PDMA_HMEM_CUDA, BASE + 200, 1000, &x),
			 -ENOENT);
	assert_int_equal(f.id_checks, 3);
	assert_false(atomic_load(&a->valid));
	stats(c, &s);
	assert_int_equal(s.stale_rejected, 1);
	assert_int_equal(s.count, 1);
	assert_int_equal(f.unpins, 1); /* unreferenced: unpinned at once */
	assert_int_equal(f.unpinned[0], BASE);

	/* TRUST (SIM) finds ask nothing. */
	x = get_ok(c, &f, BASE + 8 * PG, PG);
	pdma_cache_put(c, x);
	assert_int_equal(pdma_cache_find(c, &fake_ops, &f, PDMA_HMEM_SIM, BASE + 8 * PG, 10, &a), 0);
	assert_ptr_equal(a, x);
	pdma_cache_put(c, a);
	assert_int_equal(f.id_checks, 3);

	/* Bounds unknown (an alloc without a size): never verified cheaply. */
	al = (struct pdma_mem_alloc){ .base = BASE + 16 * PG, .buffer_id = 8 };
	assert_int_equal(pdma_cache_get(c, &fake_ops, &f, PDMA_HMEM_CUDA, BASE + 16 * PG, PG, &al, &x), 0);
	assert_int_equal(x->alloc_head, UINT32_MAX);
	pdma_cache_put(c, x);
	assert_int_equal(pdma_cache_find(c, &fake_ops, &f, PDMA_HMEM_CUDA, BASE + 16 * PG, 10, &a),
			 -ENOENT);
	assert_int_equal(f.id_checks, 3);
	pdma_cache_close(c);
	assert_int_equal(f.live, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_invalidate_notify),
		cmocka_unit_test(test_revoke),
		cmocka_unit_test(test_tag_check),
		cmocka_unit_test(test_tag_check_find),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
