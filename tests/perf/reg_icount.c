// SPDX-License-Identifier: MIT
/*
 * reg_icount: the two loops whose instruction counts tests/perf/icount-check.sh
 * guards (issue 15), each bracketed by callgrind client requests so that only
 * its own instructions count, dumped under its own name:
 *
 *   cache_hit   pdma_cache_get + pdma_cache_put of an indexed region, straight
 *               on lib/cache/ as bench/regcache's hit rows drive it: a no-op
 *               backend on the sim interface in TRUST mode, no host monitor,
 *               HIT_REGIONS one-page regions two pages apart, visited in order
 *   mr_cached   pdma_mr_regattr + pdma_mr_close of the same buffer through the
 *               public API, on a use_cache domain: the cached registration path
 *
 * The buffer of mr_cached is simulated GPU memory (PDMA_HMEM_SIM): host memory
 * is cached only under a monitor, and none runs deterministically under
 * valgrind without root (memhooks refuses to, userfaultfd needs privilege).
 * The sim interface's TRUST mode caches without one, on any machine.
 *
 * Both loops are checked to be what they claim (every get a hit: no miss and
 * no slow hit in the cache's statistics), so a change that turned them into
 * misses fails here instead of passing as "more instructions".
 *
 * Run outside valgrind the client requests do nothing; the program then only
 * checks the hits. Prints one line per loop: "measured NAME OPS".
 *
 * usage: reg_icount [--ops N]   (N operations per loop, default 20000)
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <valgrind/callgrind.h>

#include <peerdma/mr.h>

#include "cache/cache.h"
#include "mem/sim.h"
#include "mr/domain.h"

#define HPG 4096ull
#define HIT_REGIONS 1024
/* A fixed address range, never mapped: the no-op backend never touches the
 * memory, and a fixed base keeps the hash buckets (hence the instructions of
 * every lookup) the same from run to run whatever the address-space layout. */
#define HIT_BASE 0x7e0000000000ull


static int fail(const char *what, int err)
{
	fprintf(stderr, "reg_icount: %s: %s\n", what, strerror(err < 0 ? -err : err));
	return 1;
}

static int get_put(struct pdma_cache *c, uint64_t addr)
{
	struct pdma_region *r;
	int ret = pdma_cache_get(c, &pdma_mem_noop_ops, NULL, PDMA_HMEM_SIM, addr, HPG, NULL, &r);

	if (ret)
		return ret;
	pdma_cache_put(c, r);
	return 0;
}

/* Gets that did not hit on the lock-free path. */
static uint64_t not_fast(struct pdma_cache *c)
{
	struct pdma_cache_stats s;

	pdma_cache_get_stats(c, &s);
	return s.misses + s.slow_hits + s.uncached;
}

static int measure_cache_hit(size_t ops)
{
	struct pdma_cache_attr a;
	struct pdma_cache *c;
	uint64_t before;
	int ret, errs = 0;
	size_t i = 0;

	memset(&a, 0, sizeof(a));
	a.max_count = HIT_REGIONS + 64;
	a.max_size = (size_t)1 << 40;
	a.monitor = PDMA_CACHE_MONITOR_DISABLED;
	a.mode[PDMA_HMEM_SIM] = PDMA_CACHE_MODE_TRUST;
	ret = pdma_cache_open(&a, &c);
	if (ret)
		return fail("pdma_cache_open", ret);
	/* Fill, then one pass of hits: every lazy binding and first touch
	 * happens before the measured loop. */
	for (int pass = 0; pass < 2; pass++)
		for (size_t k = 0; k < HIT_REGIONS; k++)
			if ((ret = get_put(c, HIT_BASE + k * 2 * HPG)))
				return fail("fill", ret);
	before = not_fast(c);

	CALLGRIND_ZERO_STATS;
	CALLGRIND_TOGGLE_COLLECT;
	for (size_t k = 0; k < ops; k++) {
		errs |= get_put(c, HIT_BASE + i * 2 * HPG);
		if (++i == HIT_REGIONS)
			i = 0;
	}
	CALLGRIND_TOGGLE_COLLECT;
	CALLGRIND_DUMP_STATS_AT("cache_hit");

	if (errs)
		return fail("get in the measured loop", errs);
	if (not_fast(c) != before) {
		fprintf(stderr, "reg_icount: cache_hit: %llu of %zu gets were not lock-free hits\n",
			(unsigned long long)(not_fast(c) - before), ops);
		return 1;
	}
	pdma_cache_close(c);
	printf("measured cache_hit %zu\n", ops);
	return 0;
}

static int reg_close(struct pdma_domain *d, const struct pdma_mr_attr *ma)
{
	struct pdma_mr *mr;
	int ret = pdma_mr_regattr(d, ma, 0, &mr);

	if (ret)
		return ret;
	return pdma_mr_close(mr);
}

static int measure_mr_cached(size_t ops)
{
	struct pdma_sim_attr sa = { .mem_size = 4 << 20 };
	struct pdma_domain_attr da;
	struct pdma_domain *d;
	struct pdma_sim *s;
	struct pdma_mr_attr ma;
	struct iovec iov;
	uint64_t before;
	void *buf;
	int ret, errs = 0;

	ret = pdma_sim_open(&sa, &s);
	if (ret)
		return fail("pdma_sim_open", ret);
	ret = pdma_sim_alloc(s, 1 << 20, &buf);
	if (ret)
		return fail("pdma_sim_alloc", ret);
	pdma_domain_attr_init(&da);
	da.sim = s;
	da.use_cache = 1;
	ret = pdma_domain_open(&da, &d);
	if (ret)
		return fail("pdma_domain_open", ret);
	if (!d->cache) {
		fprintf(stderr, "reg_icount: the domain has no cache\n");
		return 1;
	}
	/* A buffer inside the allocation, as an application registers one. */
	iov.iov_base = (char *)buf + 4096;
	iov.iov_len = 256 << 10;
	memset(&ma, 0, sizeof(ma));
	ma.mr_iov = &iov;
	ma.iov_count = 1;
	ma.access = PDMA_READ | PDMA_WRITE | PDMA_REMOTE_READ | PDMA_REMOTE_WRITE;
	ma.iface = PDMA_HMEM_SIM;
	/* The first pins and caches; the others warm up. */
	for (int k = 0; k < 16; k++)
		if ((ret = reg_close(d, &ma)))
			return fail("warm-up registration", ret);
	before = not_fast(d->cache);

	CALLGRIND_ZERO_STATS;
	CALLGRIND_TOGGLE_COLLECT;
	for (size_t k = 0; k < ops; k++)
		errs |= reg_close(d, &ma);
	CALLGRIND_TOGGLE_COLLECT;
	CALLGRIND_DUMP_STATS_AT("mr_cached");

	if (errs)
		return fail("registration in the measured loop", errs);
	if (not_fast(d->cache) != before) {
		fprintf(stderr, "reg_icount: mr_cached: %llu of %zu registrations missed the cache\n",
			(unsigned long long)(not_fast(d->cache) - before), ops);
		return 1;
	}
	if ((ret = pdma_domain_close(d)) || (ret = pdma_sim_free(s, buf)) ||
	    (ret = pdma_sim_close(s)))
		return fail("teardown", ret);
	printf("measured mr_cached %zu\n", ops);
	return 0;
}

int main(int argc, char **argv)
{
	size_t ops = 20000;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--ops") && i + 1 < argc) {
			ops = strtoull(argv[++i], NULL, 0);
		} else {
			fprintf(stderr, "usage: %s [--ops N]\n", argv[0]);
			return 2;
		}
	}
	if (!ops) {
		fprintf(stderr, "reg_icount: --ops must be positive\n");
		return 2;
	}
	/* No host monitor thread: nothing else runs while a loop is measured,
	 * and the domain is the same on every machine. */
	setenv("PEERDMA_MR_CACHE_MONITOR", "disabled", 1);
	if (measure_cache_hit(ops) || measure_mr_cached(ops))
		return 1;
	return 0;
}
