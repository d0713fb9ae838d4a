// SPDX-License-Identifier: MIT
/*
 * Registration cache (lib/cache/), the limits: LRU order, max_count and
 * max_size (pass-through when full), -ENOMEM eviction and retry, limits and
 * modes from the environment.
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

static void test_lru_order(void **state)
{
	struct fake_mem f;
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
	struct fake_mem f;
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
	struct fake_mem f;
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
	struct fake_mem f;
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
		struct fake_mem g;
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_lru_order),
		cmocka_unit_test(test_limit_count),
		cmocka_unit_test(test_limit_size),
		cmocka_unit_test(test_enomem_evict_retry),
		cmocka_unit_test(test_env),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
