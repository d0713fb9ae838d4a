// SPDX-License-Identifier: MIT
/* Openers for the MR layer's unit tests (mr_setup.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <unistd.h>
#include <sys/uio.h>

#include "cache/cache.h"
#include "monitor/monitor.h"
#include "mr/domain.h"

#include "support/mr_setup.h"

struct pdma_domain *dom_open(uint32_t mode, struct pdma_sim *sim)
{
	struct pdma_domain_attr a;
	struct pdma_domain *d = NULL;

	pdma_domain_attr_init(&a);
	a.mr_mode = mode;
	a.sim = sim;
	assert_int_equal(pdma_domain_open(&a, &d), 0);
	return d;
}

struct pdma_sim *sim_open(size_t mem, size_t bar)
{
	struct pdma_sim_attr a = { .mem_size = mem, .bar_size = bar };
	struct pdma_sim *s = NULL;

	assert_int_equal(pdma_sim_open(&a, &s), 0);
	return s;
}

struct pdma_mr *reg_sim(struct pdma_domain *d, void *buf, size_t len, uint64_t access)
{
	struct iovec iov = { buf, len };
	struct pdma_mr_attr a = { .mr_iov = &iov, .iov_count = 1, .access = access,
				  .iface = PDMA_HMEM_SIM };
	struct pdma_mr *m = NULL;

	assert_int_equal(pdma_mr_regattr(d, &a, 0, &m), 0);
	return m;
}

struct pdma_domain *dom_open_cached(void)
{
	struct pdma_domain_attr a;
	struct pdma_domain *d = NULL;

	pdma_domain_attr_init(&a);
	a.use_cache = 1;
	return pdma_domain_open(&a, &d) ? NULL : d;
}

bool dom_host_cached(struct pdma_domain *d)
{
	struct pdma_cache_stats s;

	pdma_cache_get_stats(d->cache, &s);
	return s.mode[PDMA_HMEM_SYSTEM] == PDMA_CACHE_MODE_TRUST;
}

void uffd_settle(void)
{
	while (atomic_load(&pdma_uffd_seq) & 1)
		usleep(100);
}

long vmlck_kib(void)
{
	char line[256];
	long v = -1;
	FILE *f = fopen("/proc/self/status", "r");

	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmLck: %ld kB", &v) == 1)
			break;
	fclose(f);
	return v;
}
