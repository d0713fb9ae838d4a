// SPDX-License-Identifier: MIT
/*
 * Registration cache (lib/cache/) over the simulated GPU (lib/mem/sim.c):
 * free and reallocation at the same address never hit a stale region, and
 * BAR exhaustion evicts and retries.
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
		cmocka_unit_test(test_stale_sim),
		cmocka_unit_test(test_sim_bar_enomem),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
