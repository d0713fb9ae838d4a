// SPDX-License-Identifier: MIT
/*
 * Opening the cuda backend without a GPU: the loader's clean failures, the
 * CUresult to errno map, and which invalidation a cache relies on for CUDA
 * memory (tag checks unless the hook library is in place; this program does
 * not load it). The real driver is exercised by tests/gpu/test_cuda.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/cache.h"
#include "mr/domain.h"
#include "support/fake_cuda.h"

/* ---------------------------------------------------------------- loader */
static void test_loader_missing_library(void **state)
{
	struct pdma_cu_api a;
	char msg[256] = "";

	(void)state;
	assert_int_equal(pdma_cu_api_open("/nonexistent/libcuda.so.1", &a, msg, sizeof(msg)),
			 -ENODEV);
	assert_non_null(strstr(msg, "cannot load /nonexistent/libcuda.so.1"));
	assert_null(a.handle);
	assert_null(a.Init);
}

/* The mode a domain's cache uses for CUDA follows the monitor mode: trust
 * invalidations only when the hooks see every free, else check buffer IDs. */
static enum pdma_cache_mode domain_cuda_cache_mode(void)
{
	struct pdma_domain_attr a = { .use_cache = 1 };
	struct pdma_cache_stats st;
	struct pdma_domain *d;

	assert_int_equal(pdma_domain_open(&a, &d), 0);
	assert_non_null(d->cache);
	pdma_cache_get_stats(d->cache, &st);
	assert_int_equal(pdma_domain_close(d), 0);
	return st.mode[PDMA_HMEM_CUDA];
}

static void test_domain_cache_mode(void **state)
{
	(void)state;
	assert_int_equal(domain_cuda_cache_mode(), PDMA_CACHE_MODE_TAG_CHECK);
	setenv("PEERDMA_CUDA_MONITOR", "hooks", 1);
	assert_int_equal(domain_cuda_cache_mode(), PDMA_CACHE_MODE_TRUST);
	/* An explicit choice wins over the detection. */
	setenv("PEERDMA_MR_CUDA_CACHE_MONITOR_ENABLED", "0", 1);
	assert_int_equal(domain_cuda_cache_mode(), PDMA_CACHE_MODE_OFF);
	unsetenv("PEERDMA_MR_CUDA_CACHE_MONITOR_ENABLED");
	unsetenv("PEERDMA_CUDA_MONITOR");
}

static void test_loader_not_a_driver(void **state)
{
	struct pdma_cu_api a;
	char msg[256] = "";

	(void)state;
	/* A library that exists but is no CUDA driver. */
	assert_int_equal(pdma_cu_api_open("libm.so.6", &a, msg, sizeof(msg)), -ENODEV);
	assert_non_null(strstr(msg, "entry point cuInit missing"));
	assert_null(a.handle);
}

static void test_open_without_driver(void **state)
{
	struct pdma_cuda *c = (struct pdma_cuda *)(uintptr_t)1;

	(void)state;
	setenv("PEERDMA_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
	assert_int_equal(pdma_cuda_open(&c), -ENODEV);
	assert_null(c);
	assert_non_null(strstr(pdma_cuda_last_error(), "CUDA driver not available"));
	assert_null(pdma_cu_peek());
	/* The failure is not remembered: a later call tries again. */
	assert_int_equal(pdma_cuda_open(&c), -ENODEV);
	unsetenv("PEERDMA_LIBCUDA");
}

static void test_open_no_device(void **state)
{
	struct pdma_cuda *c = NULL;

	(void)state;
	memset(&F, 0, sizeof(F));
	F.ndev = 0;
	pdma_cu_set_api_for_testing(&fake_api);
	assert_int_equal(pdma_cuda_open(&c), -ENODEV);
	assert_null(c);
	assert_non_null(strstr(pdma_cuda_last_error(), "no CUDA device"));
	assert_int_equal(F.retained, 0);
	pdma_cu_set_api_for_testing(NULL);
}

static void test_errno_map(void **state)
{
	(void)state;
	assert_int_equal(pdma_cu_errno(PDMA_CU_SUCCESS), 0);
	assert_int_equal(pdma_cu_errno(PDMA_CU_ERROR_INVALID_VALUE), -EINVAL);
	assert_int_equal(pdma_cu_errno(PDMA_CU_ERROR_OUT_OF_MEMORY), -ENOMEM);
	assert_int_equal(pdma_cu_errno(PDMA_CU_ERROR_NO_DEVICE), -ENODEV);
	assert_int_equal(pdma_cu_errno(PDMA_CU_ERROR_STUB_LIBRARY), -ENODEV);
	assert_int_equal(pdma_cu_errno(PDMA_CU_ERROR_HOST_MEMORY_ALREADY_REGISTERED), -EEXIST);
	assert_int_equal(pdma_cu_errno(PDMA_CU_ERROR_NOT_SUPPORTED), -EOPNOTSUPP);
	assert_int_equal(pdma_cu_errno(999), -EIO);
}

static void test_monitor_mode(void **state)
{
	(void)state;
	/* This program links libpeerdma statically: the global lookup does not
	 * reach the hooks, so auto means tag checks. */
	assert_false(pdma_cuda_hooks_installed());
	assert_int_equal(pdma_cuda_monitor_mode(), PDMA_CUDA_MON_TAG);
	setenv("PEERDMA_CUDA_MONITOR", "hooks", 1);
	assert_int_equal(pdma_cuda_monitor_mode(), PDMA_CUDA_MON_HOOKS);
	setenv("PEERDMA_CUDA_MONITOR", "tag", 1);
	assert_int_equal(pdma_cuda_monitor_mode(), PDMA_CUDA_MON_TAG);
	setenv("PEERDMA_CUDA_MONITOR", "auto", 1);
	assert_int_equal(pdma_cuda_monitor_mode(), PDMA_CUDA_MON_TAG);
	unsetenv("PEERDMA_CUDA_MONITOR");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_loader_missing_library),
		cmocka_unit_test(test_domain_cache_mode),
		cmocka_unit_test(test_loader_not_a_driver),
		cmocka_unit_test(test_open_without_driver),
		cmocka_unit_test(test_open_no_device),
		cmocka_unit_test(test_errno_map),
		cmocka_unit_test(test_monitor_mode),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
