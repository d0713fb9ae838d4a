// SPDX-License-Identifier: MIT
/*
 * CUDA memory through the public registration API (pdma_mr_regattr with
 * PDMA_HMEM_CUDA), with and without the registration cache: device memory
 * registers and is refused to the CPU-side sim device, managed memory is
 * refused, page-locked host memory registers and is CPU-visible, and a
 * free + reallocation at the same address never yields a stale registration,
 * also where the buffer-ID check runs in a thread with no CUDA context.
 * Elsewhere: "skipped: no CUDA device", exit 77.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "cache/cache.h"
#include "cuda/api.h"
#include "mr/domain.h" /* the domain's own CUDA backend, for its pin counters */
#include "mem/cuda.h"
#include "peerdma/mr.h"
#include "mem/sim.h"

#define RW (PDMA_READ | PDMA_WRITE | PDMA_REMOTE_READ | PDMA_REMOTE_WRITE)
#define MiB (1024u * 1024u)

static const struct pdma_cu_api *api;

static int reg(struct pdma_domain *d, uint64_t p, size_t len, struct pdma_mr **m)
{
	struct iovec iov = { (void *)(uintptr_t)p, len };
	struct pdma_mr_attr a = { .mr_iov = &iov, .iov_count = 1, .access = RW,
				  .iface = PDMA_HMEM_CUDA };

	return pdma_mr_regattr(d, &a, 0, m);
}

static struct pdma_domain *dom(int use_cache)
{
	struct pdma_domain_attr a;
	struct pdma_domain *d;

	pdma_domain_attr_init(&a);
	a.use_cache = use_cache;
	assert_int_equal(pdma_domain_open(&a, &d), 0);
	return d;
}

static void test_device_memory(void **state)
{
	struct pdma_domain *d = dom(0);
	pdma_cu_ptr p = 0;
	struct pdma_mr *m;
	char x = 1;

	(void)state;
	assert_int_equal(api->MemAlloc(&p, 3 * MiB), PDMA_CU_SUCCESS);
	/* A sub-range in the middle: the pin covers its 64 KiB pages. */
	assert_int_equal(reg(d, p + 100000, 5000, &m), 0);
	assert_true(pdma_mr_key(m) != PDMA_KEY_NOTAVAIL);
	/* GPU memory is not reachable by the CPU-side sim device. */
	assert_int_equal(pdma_sim_dma_write(d, pdma_mr_key(m), p + 100000, &x, 1), -EOPNOTSUPP);
	assert_int_equal(pdma_mr_close(m), 0);
	/* A range leaving the allocation is refused. */
	assert_int_equal(reg(d, p + 3 * MiB - 10, 20, &m), -EFAULT);
	assert_int_equal(api->MemFree(p), PDMA_CU_SUCCESS);
	assert_int_equal(pdma_domain_close(d), 0);
}

static void test_managed_refused(void **state)
{
	struct pdma_domain *d = dom(0);
	pdma_cu_ptr p = 0;
	struct pdma_mr *m;

	(void)state;
	assert_int_equal(api->MemAllocManaged(&p, MiB, PDMA_CU_MEM_ATTACH_GLOBAL),
			 PDMA_CU_SUCCESS);
	assert_int_equal(reg(d, p, 4096, &m), -EINVAL);
	assert_int_equal(api->MemFree(p), PDMA_CU_SUCCESS);
	assert_int_equal(pdma_domain_close(d), 0);
}

static void test_pinned_host_memory(void **state)
{
	struct pdma_domain *d = dom(0);
	struct pdma_mr *m;
	void *h = NULL;
	char out[4];

	(void)state;
	assert_int_equal(api->MemAllocHost(&h, MiB), PDMA_CU_SUCCESS);
	assert_int_equal(reg(d, (uintptr_t)h, 4096, &m), 0);
	/* Host memory is CPU-visible: the sim device reaches it. */
	assert_int_equal(pdma_sim_dma_write(d, pdma_mr_key(m), (uintptr_t)h + 8, "cuda", 4), 0);
	assert_int_equal(pdma_sim_dma_read(d, pdma_mr_key(m), (uintptr_t)h + 8, out, 4), 0);
	assert_memory_equal(out, "cuda", 4);
	assert_int_equal(pdma_mr_close(m), 0);
	assert_int_equal(api->MemFreeHost(h), PDMA_CU_SUCCESS);
	assert_int_equal(pdma_domain_close(d), 0);
}

/* Through the cache: a re-registration of live memory is a hit (no new pin);
 * after free + reallocation at the same address it must be a new pin. */
static void test_cached_realloc_never_stale(void **state)
{
	struct pdma_domain *d = dom(1);
	struct pdma_cuda_stats s0, s1;
	pdma_cu_ptr p = 0, q = 0;
	struct pdma_mr *m;
	int same = 0, stale = 0;

	(void)state;
	for (int i = 0; i < 500; i++) {
		assert_int_equal(api->MemAlloc(&p, 2 * MiB), PDMA_CU_SUCCESS);
		if (!d->cuda) { /* opened by the first CUDA registration */
			assert_int_equal(reg(d, p, 2 * MiB, &m), 0);
			assert_int_equal(pdma_mr_close(m), 0);
		}
		pdma_cuda_get_stats(d->cuda, &s0);
		assert_int_equal(reg(d, p, 2 * MiB, &m), 0);
		assert_int_equal(pdma_mr_close(m), 0);
		assert_int_equal(reg(d, p, 2 * MiB, &m), 0);
		assert_int_equal(pdma_mr_close(m), 0);
		pdma_cuda_get_stats(d->cuda, &s1);
		/* At most one pin for two registrations of the same memory. */
		assert_true(s1.pins - s0.pins <= 1);
		assert_int_equal(api->MemFree(p), PDMA_CU_SUCCESS);
		assert_int_equal(api->MemAlloc(&q, 2 * MiB), PDMA_CU_SUCCESS);
		same += q == p;
		pdma_cuda_get_stats(d->cuda, &s0);
		assert_int_equal(reg(d, q, 2 * MiB, &m), 0);
		pdma_cuda_get_stats(d->cuda, &s1);
		/* A registration of the new allocation is a fresh pin. */
		stale += s1.pins == s0.pins;
		assert_int_equal(pdma_mr_close(m), 0);
		assert_int_equal(api->MemFree(q), PDMA_CU_SUCCESS);
	}
	printf("# %d of 500 reallocations returned the same address; stale hits: %d\n", same,
	       stale);
	assert_true(same > 0); /* the adversary really happened */
	assert_int_equal(stale, 0);
	assert_int_equal(pdma_domain_close(d), 0);
}

struct thr_reg {
	struct pdma_domain *d;
	uint64_t p;
	int ret, had_ctx;
};

static void *reg_twice(void *arg)
{
	struct thr_reg *t = arg;
	pdma_cu_ctx cur = NULL;
	struct pdma_mr *m;

	t->had_ctx = api->CtxGetCurrent(&cur) == PDMA_CU_SUCCESS && cur;
	for (int i = 0; i < 2 && !t->ret; i++) {
		t->ret = reg(t->d, t->p + 4096, 8192, &m);
		if (!t->ret)
			t->ret = pdma_mr_close(m);
	}
	return NULL;
}

static void reg_in_thread(struct pdma_domain *d, uint64_t p)
{
	struct thr_reg t = { .d = d, .p = p };
	pthread_t th;

	assert_int_equal(pthread_create(&th, NULL, reg_twice, &t), 0);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(t.ret, 0);
	assert_false(t.had_ctx);
}

/* The buffer-ID check of a cached hit (no hooks in this program: TAG_CHECK)
 * from a thread with no CUDA context current: the hits need no new pin, and a
 * reallocation at the same address is still caught. */
static void test_cached_tag_check_no_context(void **state)
{
	struct pdma_domain *d = dom(1);
	struct pdma_cache_stats c0, c1;
	struct pdma_cuda_stats s0, s1;
	pdma_cu_ptr p = 0, q = 0;
	struct pdma_mr *m;

	(void)state;
	assert_int_equal(api->MemAlloc(&p, 2 * MiB), PDMA_CU_SUCCESS);
	assert_int_equal(reg(d, p, 2 * MiB, &m), 0);
	assert_int_equal(pdma_mr_close(m), 0);
	pdma_cache_get_stats(d->cache, &c0);
	assert_int_equal(c0.mode[PDMA_HMEM_CUDA], PDMA_CACHE_MODE_TAG_CHECK);
	pdma_cuda_get_stats(d->cuda, &s0);
	reg_in_thread(d, p);
	pdma_cuda_get_stats(d->cuda, &s1);
	pdma_cache_get_stats(d->cache, &c1);
	assert_int_equal(s1.pins, s0.pins);
	assert_int_equal(s1.tag_stale, s0.tag_stale);
	assert_int_equal(c1.stale_rejected, c0.stale_rejected);
	assert_int_equal(api->MemFree(p), PDMA_CU_SUCCESS);
	for (int i = 0; i < 20 && q != p; i++) {
		if (q)
			assert_int_equal(api->MemFree(q), PDMA_CU_SUCCESS);
		assert_int_equal(api->MemAlloc(&q, 2 * MiB), PDMA_CU_SUCCESS);
	}
	if (q == p) {
		pdma_cuda_get_stats(d->cuda, &s0);
		reg_in_thread(d, q);
		pdma_cuda_get_stats(d->cuda, &s1);
		pdma_cache_get_stats(d->cache, &c1);
		assert_int_equal(s1.pins, s0.pins + 1); /* a new pin, then a hit */
		assert_int_equal(s1.tag_stale, s0.tag_stale + 1);
		assert_int_equal(c1.stale_rejected, c0.stale_rejected + 1);
	} else {
		printf("# no reallocation at the same address in 20 tries\n");
	}
	assert_int_equal(api->MemFree(q), PDMA_CU_SUCCESS);
	assert_int_equal(pdma_domain_close(d), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_device_memory),
		cmocka_unit_test(test_managed_refused),
		cmocka_unit_test(test_pinned_host_memory),
		cmocka_unit_test(test_cached_realloc_never_stale),
		cmocka_unit_test(test_cached_tag_check_no_context),
	};
	struct pdma_cuda *cu;
	pdma_cu_ctx primary;
	int ret = pdma_cuda_open(&cu);

	if (ret == -ENODEV) {
		printf("skipped: no CUDA device (%s)\n", pdma_cuda_last_error());
		return 77;
	}
	if (ret || pdma_cu_get(&api, NULL, 0) ||
	    api->DevicePrimaryCtxRetain(&primary, 0) != PDMA_CU_SUCCESS ||
	    api->CtxSetCurrent(primary) != PDMA_CU_SUCCESS) {
		printf("CUDA setup failed: %d %s\n", ret, pdma_cuda_last_error());
		return 1;
	}
	ret = cmocka_run_group_tests_name("mr_cuda", tests, NULL, NULL);
	api->DevicePrimaryCtxRelease(0);
	pdma_cuda_close(cu);
	return ret;
}
