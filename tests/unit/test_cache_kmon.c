// SPDX-License-Identifier: MIT
/*
 * The kernel monitor's selection (lib/cache/cache.c), where no peerdma.ko can
 * be loaded: asked for by name or from the environment, it needs a kernel
 * device that counts revocations; without one host memory is not cached under
 * it, and the default falls back to userfaultfd (or memhooks). The monitor itself (the
 * counter page, synchronous invalidation, 0 stale registrations over
 * thousands of rounds) is tested against the real module in the QEMU guest:
 * tests/vm/guest_kdev.c and tests/vm/pdtest/counters.c.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cache/cache.h"
#include "mem/kdev.h"
#include "mr/domain.h"

static struct pdma_cache *open_with(enum pdma_cache_monitor mon, struct pdma_cache_stats *s)
{
	struct pdma_cache_attr a;
	struct pdma_cache *c = NULL;

	memset(&a, 0, sizeof(a));
	a.max_count = 16;
	a.max_size = 1 << 20;
	a.monitor = mon;
	assert_int_equal(pdma_cache_open(&a, &c), 0);
	pdma_cache_get_stats(c, s);
	return c;
}

static void test_env_names_kernel(void **state)
{
	struct pdma_cache_attr a;

	(void)state;
	setenv("PEERDMA_MR_CACHE_MONITOR", "kernel", 1);
	pdma_cache_attr_from_env(&a);
	assert_int_equal(a.monitor, PDMA_CACHE_MONITOR_KERNEL);
	assert_null(a.kdev); /* the domain supplies it, never the environment */
	unsetenv("PEERDMA_MR_CACHE_MONITOR");
}

static void test_kernel_needs_kdev(void **state)
{
	struct pdma_cache_stats s;
	struct pdma_cache *c = open_with(PDMA_CACHE_MONITOR_KERNEL, &s);

	(void)state;
	/* No source: nothing watches host memory, so it is not cached. */
	assert_int_equal(s.monitor, PDMA_CACHE_MONITOR_DISABLED);
	assert_int_equal(s.mode[PDMA_HMEM_SYSTEM], PDMA_CACHE_MODE_OFF);
	pdma_cache_close(c);
	assert_false(pdma_kdev_monitor_ok(NULL));
}

static void test_default_without_kdev(void **state)
{
	struct pdma_cache_stats s;
	struct pdma_cache *c = open_with(PDMA_CACHE_MONITOR_DEFAULT, &s);

	(void)state;
	assert_int_not_equal(s.monitor, PDMA_CACHE_MONITOR_KERNEL);
	assert_true(s.monitor == PDMA_CACHE_MONITOR_USERFAULTFD ||
		    s.monitor == PDMA_CACHE_MONITOR_MEMHOOKS ||
		    s.monitor == PDMA_CACHE_MONITOR_DISABLED);
	pdma_cache_close(c);
}

static void test_bad_monitor_value(void **state)
{
	struct pdma_cache_attr a;
	struct pdma_cache *c = NULL;

	(void)state;
	memset(&a, 0, sizeof(a));
	a.max_count = 16;
	a.monitor = (enum pdma_cache_monitor)(PDMA_CACHE_MONITOR_KERNEL + 1);
	assert_int_equal(pdma_cache_open(&a, &c), -EINVAL);
}

/* A kernel_device that is not peerdma.ko: the domain does not open. */
static void test_domain_kernel_device_refused(void **state)
{
	struct pdma_domain_attr a;
	struct pdma_domain *d = NULL;
	struct pdma_kdev *k = NULL;

	(void)state;
	assert_int_equal(pdma_kdev_open("/dev/null", &k), -ENOTTY);
	assert_int_equal(pdma_kdev_open("/nonexistent/peerdma", &k), -ENODEV);
	pdma_domain_attr_init(&a);
	a.use_cache = 1;
	a.kernel_device = "/dev/null";
	assert_int_equal(pdma_domain_open(&a, &d), -ENOTTY);
	assert_null(d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_env_names_kernel),
		cmocka_unit_test(test_kernel_needs_kdev),
		cmocka_unit_test(test_default_without_kdev),
		cmocka_unit_test(test_bad_monitor_value),
		cmocka_unit_test(test_domain_kernel_device_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
