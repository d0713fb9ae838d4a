// SPDX-License-Identifier: MIT
/*
 * The fi_mr-style registration API over real memory: host registration
 * (nothing locked), cached host memory unmapped under a registration, the
 * simulated GPU (its BAR and free callback), and refresh after remapping.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache/cache.h"
#include "mr/domain.h"
#include "peerdma/mr.h"
#include "mem/sim.h"
#include "support/mr_setup.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer) && !defined(__SANITIZE_ADDRESS__)
#define __SANITIZE_ADDRESS__ 1
#endif
#if __has_feature(thread_sanitizer) && !defined(__SANITIZE_THREAD__)
#define __SANITIZE_THREAD__ 1
#endif
#endif

/* Host registrations neither lock nor unlock pages (include/peerdma/mr.h):
 * open MRs leave VmLck as it was, the application's madvise on an open
 * registration succeeds, and closing an MR keeps the application's own
 * mlock (before, the backend's munlock undid it: mlock is not counted). */
static void test_host_not_locked(void **state)
{
	struct pdma_domain *d = dom_open(PDMA_MR_BASIC, NULL);
	const size_t sz = 16 * 4096;
	char *buf = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct pdma_mr *m1, *m2;
	long base;

	(void)state;
	assert_true(buf != MAP_FAILED);
	memset(buf, 1, sz);
	base = vmlck_kib();
	/* 100 bytes straddling a page boundary cover two whole pages. */
	assert_int_equal(pdma_mr_reg(d, buf + 4096 - 50, 100, RW, 0, 0, 0, &m1, NULL), 0);
	assert_int_equal(pdma_mr_reg(d, buf + 4096 + 100, 3 * 4096, RW, 0, 0, 0, &m2, NULL), 0);
	assert_int_equal(vmlck_kib(), base);
	assert_int_equal(madvise(buf + 8 * 4096, 4096, MADV_DONTNEED), 0);
	assert_int_equal(pdma_mr_close(m1), 0);
	assert_int_equal(pdma_mr_close(m2), 0);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
	/* (ASan and TSan replace mlock with a no-op: VmLck cannot move.) */
	assert_int_equal(mlock(buf, 4 * 4096), 0);
	assert_int_equal(vmlck_kib() - base, 16);
	assert_int_equal(pdma_mr_reg(d, buf + 100, 2 * 4096, RW, 0, 0, 0, &m1, NULL), 0);
	assert_int_equal(pdma_mr_close(m1), 0);
	assert_int_equal(vmlck_kib() - base, 16); /* still the application's */
	assert_int_equal(munlock(buf, 4 * 4096), 0);
#endif
	assert_int_equal(munmap(buf, sz), 0);
	assert_int_equal(pdma_domain_close(d), 0);
}

/* A cached host registration is found without querying the memory; once the
 * memory is unmapped, the cache must not hand out the old pages: the next
 * registration fails like an uncached one, and new memory at the same address
 * is pinned afresh. */
static void test_cached_host_unmapped(void **state)
{
	struct pdma_domain_attr a;
	struct pdma_domain *d;
	struct pdma_cache_stats st;
	const size_t sz = 4 * 4096;
	struct pdma_mr *m;
	uint64_t misses;
	char *guard, *buf, *again;
	int ret;

	(void)state;
	pdma_domain_attr_init(&a);
	a.use_cache = 1;
	assert_int_equal(pdma_domain_open(&a, &d), 0);
	/* buf between two guard pages of our own: once buf is unmapped its hole
	 * is bounded, not the top of the largest free gap, where the kernel puts
	 * the next mmap of any size (ASan's allocator maps often). */
	guard = mmap(NULL, sz + 2 * 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(guard != MAP_FAILED);
	buf = mmap(guard + 4096, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
		   -1, 0);
	assert_true(buf == guard + 4096);
	memset(buf, 1, sz);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(pdma_mr_reg(d, buf + 100, 2 * 4096, RW, 0, 0, 0, &m, NULL), 0);
		assert_int_equal(pdma_mr_close(m), 0);
	}
	pdma_cache_get_stats(d->cache, &st);
	if (st.mode[PDMA_HMEM_SYSTEM] == PDMA_CACHE_MODE_TRUST)
		assert_int_equal(st.misses, 1); /* cached: two hits */
	misses = st.misses;
	munmap(buf, sz);
	ret = pdma_mr_reg(d, buf + 100, 2 * 4096, RW, 0, 0, 0, &m, NULL);
	if (ret == 0) {
		/* Something mapped the hole again in between (another thread's
		 * allocator): registering that memory is right, but only as a
		 * fresh pin of the new pages, never as the cached region of the
		 * old ones. */
		assert_int_equal(msync(buf, 3 * 4096, MS_ASYNC), 0);
		pdma_cache_get_stats(d->cache, &st);
		if (st.mode[PDMA_HMEM_SYSTEM] == PDMA_CACHE_MODE_TRUST)
			assert_true(st.misses > misses);
		assert_int_equal(pdma_mr_close(m), 0);
	} else {
		assert_int_equal(ret, -EFAULT);
	}
	again = mmap(buf, sz, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (again == buf) {
		memset(again, 2, sz);
		assert_int_equal(pdma_mr_reg(d, buf + 100, 2 * 4096, RW, 0, 0, 0, &m, NULL), 0);
		pdma_cache_get_stats(d->cache, &st);
		if (st.mode[PDMA_HMEM_SYSTEM] == PDMA_CACHE_MODE_TRUST)
			assert_true(st.misses > misses); /* pinned afresh, not the old region */
		assert_int_equal(pdma_mr_close(m), 0);
		munmap(again, sz);
	}
	assert_int_equal(pdma_domain_close(d), 0);
	munmap(guard, 4096); /* the guards only: the hole may be someone else's now */
	munmap(buf + sz, 4096);
}

static void test_sim_memory(void **state)
{
	struct pdma_sim *s = sim_open(1 << 20, 0);
	struct pdma_sim_ptr_info i1, i2;
	void *p, *q, *r;

	(void)state;
	assert_int_equal(pdma_sim_alloc(s, 0, &p), -EINVAL);
	assert_int_equal(pdma_sim_alloc(s, 2 << 20, &p), -ENOMEM);
	assert_int_equal(pdma_sim_alloc(s, 100, &p), 0);
	assert_int_equal((uintptr_t)p % PDMA_SIM_PAGE_SIZE, 0);
	assert_int_equal(pdma_sim_ptr_info(s, (char *)p + 99, &i1), 0);
	assert_int_equal(i1.base, (uintptr_t)p);
	assert_int_equal(i1.size, PDMA_SIM_PAGE_SIZE);
	assert_int_equal(pdma_sim_alloc(s, 3 * PDMA_SIM_PAGE_SIZE, &q), 0);
	assert_int_equal((uintptr_t)q, (uintptr_t)p + PDMA_SIM_PAGE_SIZE);
	/* Free and reallocate: same address, new buffer ID. */
	assert_int_equal(pdma_sim_free(s, p), 0);
	assert_int_equal(pdma_sim_ptr_info(s, p, &i2), -ENOENT);
	assert_int_equal(pdma_sim_free(s, p), -EINVAL);
	assert_int_equal(pdma_sim_free(s, (char *)q + 1), -EINVAL);
	assert_int_equal(pdma_sim_alloc(s, 100, &r), 0);
	assert_ptr_equal(r, p);
	assert_int_equal(pdma_sim_ptr_info(s, r, &i2), 0);
	assert_true(i2.buffer_id != i1.buffer_id);
	/* Fill the rest: 16 pages of 1 MiB, 4 used. */
	assert_int_equal(pdma_sim_alloc(s, 12 * PDMA_SIM_PAGE_SIZE, &p), 0);
	assert_int_equal(pdma_sim_alloc(s, 1, &p), -ENOMEM);
	assert_int_equal(pdma_sim_close(s), 0);
}

static void test_sim_bar_and_free_callback(void **state)
{
	struct pdma_sim *s = sim_open(1 << 20, 2 * PDMA_SIM_PAGE_SIZE);
	struct pdma_domain *d = dom_open(PDMA_MR_BASIC | PDMA_MR_HMEM, s);
	struct pdma_sim_stats st;
	struct pdma_mr *m1, *m2, *m3;
	struct iovec iov;
	struct pdma_mr_attr a = { .mr_iov = &iov, .iov_count = 1, .access = RW,
				  .iface = PDMA_HMEM_SIM };
	char *g1, *g2, *g3, out[8];
	uint64_t k1;

	(void)state;
	assert_int_equal(pdma_sim_alloc(s, PDMA_SIM_PAGE_SIZE, (void **)&g1), 0);
	assert_int_equal(pdma_sim_alloc(s, PDMA_SIM_PAGE_SIZE, (void **)&g2), 0);
	assert_int_equal(pdma_sim_alloc(s, PDMA_SIM_PAGE_SIZE, (void **)&g3), 0);
	/* 100 bytes inside a 64 KiB page pin the whole page. */
	m1 = reg_sim(d, g1 + 500, 100, RW);
	pdma_sim_get_stats(s, &st);
	assert_int_equal(st.bar_used, PDMA_SIM_PAGE_SIZE);
	m2 = reg_sim(d, g2, PDMA_SIM_PAGE_SIZE, RW);
	/* The BAR holds two pages: a third pin fails. */
	iov.iov_base = g3;
	iov.iov_len = 10;
	assert_int_equal(pdma_mr_regattr(d, &a, 0, &m3), -ENOMEM);
	/* Device id 1 does not exist; memory outside any allocation is refused. */
	a.device = 1;
	assert_int_equal(pdma_mr_regattr(d, &a, 0, &m3), -ENODEV);
	a.device = 0;
	iov.iov_base = g3 + PDMA_SIM_PAGE_SIZE - 4;
	assert_int_equal(pdma_mr_regattr(d, &a, 0, &m3), -EFAULT);
	/* A DMA write through the key lands the bytes in GPU memory. */
	k1 = pdma_mr_key(m1);
	assert_int_equal(pdma_sim_dma_write(d, k1, (uintptr_t)g1 + 500, "gpu!", 4), 0);
	assert_memory_equal(g1 + 500, "gpu!", 4);
	/* Free while registered: the free callback revokes the MR. */
	assert_int_equal(pdma_sim_close(s), -EBUSY);
	assert_int_equal(pdma_sim_free(s, g1), 0);
	pdma_sim_get_stats(s, &st);
	assert_int_equal(st.free_callbacks, 1);
	assert_int_equal(st.bar_used, PDMA_SIM_PAGE_SIZE);
	assert_int_equal(st.live_pins, 1);
	assert_int_equal(pdma_sim_dma_write(d, k1, (uintptr_t)g1 + 500, "bad", 3), -EFAULT);
	assert_int_equal(pdma_sim_dma_read(d, k1, (uintptr_t)g1 + 500, out, 3), -EFAULT);
	/* Reallocated at the same address: still no stale write gets through. */
	assert_int_equal(pdma_sim_alloc(s, PDMA_SIM_PAGE_SIZE, (void **)&g3), 0);
	assert_ptr_equal(g3, g1);
	assert_int_equal(pdma_sim_dma_write(d, k1, (uintptr_t)g1 + 500, "bad", 3), -EFAULT);
	assert_memory_equal(g3 + 500, "\0\0\0\0", 4);
	/* The freed BAR space is usable again. */
	m3 = reg_sim(d, g3, 10, RW);
	assert_int_equal(pdma_mr_close(m1), 0);
	assert_int_equal(pdma_mr_close(m2), 0);
	assert_int_equal(pdma_mr_close(m3), 0);
	pdma_sim_get_stats(s, &st);
	assert_int_equal(st.bar_used, 0);
	assert_int_equal(st.live_pins, 0);
	assert_int_equal(st.pins, 3);
	assert_int_equal(st.unpins, 3);
	assert_int_equal(st.dma_bytes, 4);
	assert_int_equal(pdma_domain_close(d), 0);
	assert_int_equal(pdma_sim_close(s), 0);
}

static void test_refresh(void **state)
{
	struct pdma_sim *s = sim_open(1 << 20, 0);
	struct pdma_domain *d = dom_open(PDMA_MR_BASIC | PDMA_MR_HMEM | PDMA_MR_MMU_NOTIFY, s);
	struct pdma_domain *n = dom_open(PDMA_MR_BASIC | PDMA_MR_HMEM, s);
	struct pdma_mr *m, *nm;
	char *g, *g2;
	struct iovec iov;

	(void)state;
	assert_int_equal(pdma_sim_alloc(s, PDMA_SIM_PAGE_SIZE, (void **)&g), 0);
	m = reg_sim(d, g, 4096, RW);
	nm = reg_sim(n, g, 4096, RW);
	iov.iov_base = g;
	iov.iov_len = 4096;
	assert_int_equal(pdma_mr_refresh(nm, &iov, 1, 0), -EOPNOTSUPP);
	assert_int_equal(pdma_sim_free(s, g), 0);
	assert_int_equal(pdma_sim_alloc(s, PDMA_SIM_PAGE_SIZE, (void **)&g2), 0);
	assert_ptr_equal(g2, g);
	assert_int_equal(pdma_sim_dma_write(d, pdma_mr_key(m), (uintptr_t)g, "x", 1), -EFAULT);
	iov.iov_len = 4097;
	assert_int_equal(pdma_mr_refresh(m, &iov, 1, 0), -EINVAL);
	iov.iov_len = 4096;
	assert_int_equal(pdma_mr_refresh(m, &iov, 1, 1), -EINVAL);
	assert_int_equal(pdma_mr_refresh(m, &iov, 1, 0), 0);
	assert_int_equal(pdma_sim_dma_write(d, pdma_mr_key(m), (uintptr_t)g, "x", 1), 0);
	assert_int_equal(g2[0], 'x');
	/* The MR of the domain without MMU_NOTIFY stays dead. */
	assert_int_equal(pdma_sim_dma_write(n, pdma_mr_key(nm), (uintptr_t)g, "y", 1), -EFAULT);
	assert_int_equal(pdma_mr_close(m), 0);
	assert_int_equal(pdma_mr_close(nm), 0);
	assert_int_equal(pdma_domain_close(d), 0);
	assert_int_equal(pdma_domain_close(n), 0);
	assert_int_equal(pdma_sim_close(s), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_host_not_locked),
		cmocka_unit_test(test_cached_host_unmapped),
		cmocka_unit_test(test_sim_memory),
		cmocka_unit_test(test_sim_bar_and_free_callback),
		cmocka_unit_test(test_refresh),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
