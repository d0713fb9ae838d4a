// SPDX-License-Identifier: MIT
/* Openers for the MR layer's unit tests (mr_setup.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <sys/uio.h>

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
