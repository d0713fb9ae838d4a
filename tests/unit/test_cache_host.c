// SPDX-License-Identifier: MIT
/*
 * Registration cache (lib/cache/) over host memory and its monitors:
 * stale-entry adversaries (munmap + mmap at the same address, free/malloc of
 * mmap'ed chunks) under userfaultfd and memhooks, the userfaultfd monitor's
 * events (munmap, madvise(MADV_DONTNEED), mremap), and no caching without a
 * monitor.
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

/* Built with a sanitizer whose allocator replaces malloc (ASan, TSan). */
static bool sanitized(void)
{
#if defined(PDMA_TEST_ASAN) || defined(__SANITIZE_THREAD__)
	return true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
	return true;
#else
	return false;
#endif
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
	if (s.monitor != PDMA_CACHE_MONITOR_MEMHOOKS && (sanitized() || under_valgrind())) {
		/* The documented refusal: these runtimes' allocators unmap
		 * through raw system calls the hooks cannot see. */
		assert_int_equal(s.mode[PDMA_HMEM_SYSTEM], PDMA_CACHE_MODE_OFF);
		pdma_cache_close(c);
		print_message("memhooks refuses to run under a sanitizer or valgrind\n");
		skip();
	}
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_host_no_monitor),
		cmocka_unit_test(test_stale_host_mmap),
		cmocka_unit_test(test_stale_host_malloc),
		cmocka_unit_test(test_uffd_events),
		cmocka_unit_test(test_memhooks_events),
		cmocka_unit_test(test_stale_host_memhooks),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
