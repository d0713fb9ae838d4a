// SPDX-License-Identifier: MIT
/*
 * fork() of a process that holds registrations (issue 17, section 4), through
 * the public API with the cache on:
 *  - the child writes to the registered memory; the parent's registration
 *    still moves the parent's bytes for the device afterwards;
 *  - the child's cache does not take the parent's regions for its own: its
 *    registration of the same range is a fresh pin, and its device transfers
 *    work;
 *  - a domain the child opens itself caches again, under a monitor of its
 *    own (the parent's userfaultfd monitor thread does not exist there).
 * Children report the step that failed in their exit status.
 *
 * Before the fix the child's registration was a hit on the parent's cached
 * region, and a cache opened in the child counted on the parent's monitor:
 * after an munmap in the child, the next registration was a stale hit.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "cache/cache.h"
#include "monitor/monitor.h"
#include "mr/domain.h"
#include "peerdma/mr.h"
#include "mem/sim.h"
#include "support/mr_setup.h"

#define HPG 4096 /* host page */
#define NPG 4

static int child_status(pid_t pid)
{
	int st;

	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	return WEXITSTATUS(st);
}

/* The child's half of test_fork_parent_keeps_registration. */
static int child_registers(struct pdma_domain *d, char *buf, const struct pdma_region *parents)
{
	struct pdma_cache_stats s0, s1;
	struct pdma_mr *m;
	char tmp[8];

	memset(buf, 'C', NPG * HPG); /* the child writes to the registered memory */
	pdma_cache_get_stats(d->cache, &s0);
	if (pdma_mr_reg(d, buf, NPG * HPG, RW, 0, 0, 0, &m, NULL))
		return 10;
	if (m->segs[0].region == parents)
		return 11; /* a hit on the parent's region */
	pdma_cache_get_stats(d->cache, &s1);
	if (s1.slow_hits != s0.slow_hits || s1.misses + s1.uncached == s0.misses + s0.uncached)
		return 12; /* not a fresh pin */
	if (pdma_sim_dma_write(d, pdma_mr_key(m), (uintptr_t)buf + HPG, "child", 5) ||
	    memcmp(buf + HPG, "child", 5))
		return 13;
	if (pdma_sim_dma_read(d, pdma_mr_key(m), (uintptr_t)buf + 2 * HPG, tmp, 4) ||
	    memcmp(tmp, "CCCC", 4))
		return 14;
	if (pdma_mr_close(m))
		return 15;
	/* New memory at the same address in the child: still never a hit. */
	if (mmap(buf, NPG * HPG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
		 -1, 0) != buf)
		return 16;
	if (pdma_mr_reg(d, buf, NPG * HPG, RW, 0, 0, 0, &m, NULL))
		return 17;
	if (pdma_sim_dma_read(d, pdma_mr_key(m), (uintptr_t)buf + 2 * HPG, tmp, 4) ||
	    memcmp(tmp, "\0\0\0\0", 4))
		return 18;
	if (pdma_mr_close(m))
		return 19;
	return 0;
}

static void test_fork_parent_keeps_registration(void **state)
{
	struct pdma_domain *d = dom_open_cached();
	struct pdma_cache_stats s0, s1;
	struct pdma_mr *m;
	char *buf, tmp[8];
	pid_t pid;

	(void)state;
	assert_non_null(d);
	buf = mmap(NULL, NPG * HPG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(buf != MAP_FAILED);
	memset(buf, 'P', NPG * HPG);
	/* Registered and closed (cached), registered again (a hit, open at fork). */
	assert_int_equal(pdma_mr_reg(d, buf, NPG * HPG, RW, 0, 0, 0, &m, NULL), 0);
	assert_int_equal(pdma_mr_close(m), 0);
	assert_int_equal(pdma_mr_reg(d, buf, NPG * HPG, RW, 0, 0, 0, &m, NULL), 0);
	pdma_cache_get_stats(d->cache, &s0);
	if (dom_host_cached(d))
		assert_int_equal(s0.misses, 1);

	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(child_registers(d, buf, m->segs[0].region));
	assert_int_equal(child_status(pid), 0);

	/* The child wrote 'C' and "child" to its copy; the parent's registration
	 * still reads and writes the parent's pages. */
	assert_int_equal(pdma_sim_dma_read(d, pdma_mr_key(m), (uintptr_t)buf + HPG, tmp, 5), 0);
	assert_memory_equal(tmp, "PPPPP", 5);
	assert_int_equal(pdma_sim_dma_write(d, pdma_mr_key(m), (uintptr_t)buf + 3 * HPG, "parent",
					    6), 0);
	assert_memory_equal(buf + 3 * HPG, "parent", 6);
	assert_int_equal(pdma_mr_close(m), 0);
	/* The parent's cache is untouched: the next registration is a hit. */
	assert_int_equal(pdma_mr_reg(d, buf, NPG * HPG, RW, 0, 0, 0, &m, NULL), 0);
	pdma_cache_get_stats(d->cache, &s1);
	assert_int_equal(s1.misses, s0.misses);
	assert_int_equal(pdma_mr_close(m), 0);
	assert_int_equal(pdma_domain_close(d), 0);
	assert_int_equal(munmap(buf, NPG * HPG), 0);
}

/* The child's half of test_fork_child_domain_caches. */
static int child_opens_domain(char *buf)
{
	struct pdma_domain *d = dom_open_cached();
	struct pdma_cache_stats s;
	struct pdma_mr *m;

	if (!d)
		return 20;
	if (!dom_host_cached(d))
		return 21; /* the parent caches host memory: so can the child */
	if (pdma_mr_reg(d, buf, NPG * HPG, RW, 0, 0, 0, &m, NULL) || pdma_mr_close(m))
		return 22;
	pdma_cache_get_stats(d->cache, &s);
	if (s.count != 1)
		return 23; /* not cached */
	if (munmap(buf, NPG * HPG))
		return 24;
	/* The child's own monitor saw the munmap: no stale hit. */
	if (pdma_mr_reg(d, buf, NPG * HPG, RW, 0, 0, 0, &m, NULL) != -EFAULT)
		return 25;
	if (pdma_domain_close(d))
		return 26;
	return 0;
}

static void test_fork_child_domain_caches(void **state)
{
	struct pdma_domain *d = dom_open_cached();
	struct pdma_mr *m;
	char *buf;
	pid_t pid;

	(void)state;
	assert_non_null(d);
	if (!dom_host_cached(d)) {
		pdma_domain_close(d);
		skip(); /* no host monitor here at all */
	}
	buf = mmap(NULL, NPG * HPG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(buf != MAP_FAILED);
	memset(buf, 'P', NPG * HPG);
	assert_int_equal(pdma_mr_reg(d, buf, NPG * HPG, RW, 0, 0, 0, &m, NULL), 0);
	assert_int_equal(pdma_mr_close(m), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(child_opens_domain(buf));
	assert_int_equal(child_status(pid), 0);
	/* The child's munmap was its own. */
	assert_int_equal(buf[0], 'P');
	assert_int_equal(pdma_mr_reg(d, buf, NPG * HPG, RW, 0, 0, 0, &m, NULL), 0);
	assert_int_equal(pdma_mr_close(m), 0);
	assert_int_equal(pdma_domain_close(d), 0);
	assert_int_equal(munmap(buf, NPG * HPG), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fork_parent_keeps_registration),
		cmocka_unit_test(test_fork_child_domain_caches),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
