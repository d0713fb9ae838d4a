// SPDX-License-Identifier: MIT
/*
 * What a host registration does to the application's memory (issue 17,
 * section 2), through the public API with the cache on: a registration that
 * was closed but is still cached must not make the application's own
 * madvise(MADV_DONTNEED/MADV_FREE), munmap or free() fail or leak, and the
 * next registration of that memory must not be stale.
 *
 * Before the fix the host backend mlock'ed its pins and the cache kept closed
 * regions pinned: madvise(MADV_DONTNEED) on them failed with EINVAL and their
 * pages stayed locked (VmLck) after the last MR was closed.
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
#include "mr/domain.h"
#include "peerdma/mr.h"
#include "mem/sim.h"
#include "support/fake_mem.h"
#include "support/mr_setup.h"

#define HPG 4096 /* host page */

/* npages of fresh anonymous memory between two PROT_NONE guard pages, so an
 * unmapped hole stays ours (the next mmap cannot land there by chance). */
static char *guarded(size_t npages, char **guard)
{
	char *g = mmap(NULL, (npages + 2) * HPG, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *p;

	assert_true(g != MAP_FAILED);
	p = mmap(g + HPG, npages * HPG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
		 -1, 0);
	assert_true(p == g + HPG);
	*guard = g;
	return p;
}

static void reg_close(struct pdma_domain *d, void *p, size_t len)
{
	struct pdma_mr *m;

	assert_int_equal(pdma_mr_reg(d, p, len, RW, 0, 0, 0, &m, NULL), 0);
	assert_int_equal(pdma_mr_close(m), 0);
}

/* Register, close (cached), madvise(MADV_DONTNEED): the call succeeds, the
 * cached region is dropped, and a new registration moves the device's bytes
 * into the memory as it is now; then munmap succeeds and the unmapped range
 * cannot be registered. */
static void test_dontneed_after_close(void **state)
{
	struct pdma_domain *d = dom_open_cached();
	const size_t n = 8;
	struct pdma_cache_stats s0, s1;
	struct pdma_mr *m;
	char *guard, *buf = guarded(n, &guard), tmp[8];

	(void)state;
	assert_non_null(d);
	memset(buf, 'a', n * HPG);
	reg_close(d, buf, n * HPG);
	pdma_cache_get_stats(d->cache, &s0);
	if (dom_host_cached(d))
		assert_int_equal(s0.count, 1); /* closed, still cached */
	assert_int_equal(madvise(buf, n * HPG, MADV_DONTNEED), 0);
	uffd_settle();
	assert_int_equal(buf[0], 0); /* the kernel did drop the pages */

	assert_int_equal(pdma_mr_reg(d, buf, n * HPG, RW, 0, 0, 0, &m, NULL), 0);
	pdma_cache_get_stats(d->cache, &s1);
	assert_int_equal(s1.misses, s0.misses + (dom_host_cached(d) ? 1 : 0)); /* not the old region */
	assert_int_equal(pdma_sim_dma_write(d, pdma_mr_key(m), (uintptr_t)buf + 3 * HPG, "dev", 3),
			 0);
	assert_memory_equal(buf + 3 * HPG, "dev", 3);
	assert_int_equal(pdma_sim_dma_read(d, pdma_mr_key(m), (uintptr_t)buf + 5 * HPG, tmp, 4), 0);
	assert_memory_equal(tmp, "\0\0\0\0", 4);
	assert_int_equal(pdma_mr_close(m), 0);

	/* MADV_FREE too (the pages may stay until memory is short). */
	reg_close(d, buf, n * HPG);
	assert_int_equal(madvise(buf, n * HPG, MADV_FREE), 0);

	assert_int_equal(munmap(buf, n * HPG), 0);
	uffd_settle();
	assert_int_equal(pdma_mr_reg(d, buf, n * HPG, RW, 0, 0, 0, &m, NULL), -EFAULT);
	assert_int_equal(pdma_domain_close(d), 0);
	munmap(guard, (n + 2) * HPG);
}

/* Closed registrations leave no locked memory behind (before: every closed,
 * cached region kept its pages in VmLck, counted against RLIMIT_MEMLOCK). */
static void test_closed_leaves_nothing_locked(void **state)
{
	struct pdma_domain *d = dom_open_cached();
	enum { N = 8 };
	char *guard[N], *buf[N];
	long base = vmlck_kib();

	(void)state;
	assert_non_null(d);
	for (int i = 0; i < N; i++) {
		buf[i] = guarded(4, &guard[i]);
		memset(buf[i], i, 4 * HPG);
		reg_close(d, buf[i], 4 * HPG);
	}
	assert_int_equal(vmlck_kib(), base);
	for (int i = 0; i < N; i++) {
		assert_int_equal(madvise(buf[i], 4 * HPG, MADV_DONTNEED), 0);
		assert_int_equal(munmap(guard[i], 6 * HPG), 0);
	}
	assert_int_equal(pdma_domain_close(d), 0);
}

/* free() of malloc'd buffers whose registrations were closed, in glibc's
 * mmap size class (free unmaps inside libc) and in its heap (free may trim
 * with madvise or sbrk): nothing fails, nothing stays locked, and the freed
 * mmap-class range is not registrable any more (not a stale cache hit). */
static void test_free_after_close(void **state)
{
	struct pdma_domain *d = dom_open_cached();
	const size_t big = 256 * 1024, small = 64 * 1024;
	long base = vmlck_kib();
	struct pdma_mr *m;
	uintptr_t pa;
	char *p, *q;

	(void)state;
	assert_non_null(d);
	mallopt(M_MMAP_THRESHOLD, 128 * 1024);
	p = malloc(big);
	q = malloc(small);
	assert_non_null(p);
	assert_non_null(q);
	memset(p, 1, big);
	memset(q, 2, small);
	reg_close(d, p + 100, big - 200);
	reg_close(d, q + 100, small - 200);
	assert_int_equal(vmlck_kib(), base);
	free(q);
	assert_int_equal(vmlck_kib(), base);
	pa = (uintptr_t)p;
	free(p);
	uffd_settle();
	if (!under_valgrind()) {
		/* glibc unmapped p (valgrind's allocator keeps freed memory). */
		unsigned char v;
		int unmapped = mincore((void *)(pa & ~(uintptr_t)(HPG - 1)), HPG, &v) &&
			       errno == ENOMEM;

		if (unmapped)
			assert_int_equal(pdma_mr_reg(d, (void *)(pa + 100), big - 200, RW, 0, 0, 0,
						     &m, NULL),
					 -EFAULT);
	}
	malloc_trim(0);
	assert_int_equal(vmlck_kib(), base);
	assert_int_equal(pdma_domain_close(d), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_dontneed_after_close),
		cmocka_unit_test(test_closed_leaves_nothing_locked),
		cmocka_unit_test(test_free_after_close),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
