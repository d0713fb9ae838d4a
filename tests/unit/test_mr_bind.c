// SPDX-License-Identifier: MIT
/*
 * The fi_mr-style registration API, binding: RMA event counters, endpoint
 * binding and enable, asynchronous registration through an event queue.
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

static void test_rma_event_counter(void **state)
{
	struct pdma_domain *d = dom_open(PDMA_MR_BASIC | PDMA_MR_RMA_EVENT, NULL);
	struct pdma_domain *o = dom_open(PDMA_MR_BASIC, NULL);
	static char buf[4096];
	struct pdma_cntr *c, *c2, *oc;
	struct pdma_mr *m, *om;
	char out[4];

	(void)state;
	assert_int_equal(pdma_cntr_open(d, &c), 0);
	assert_int_equal(pdma_cntr_open(d, &c2), 0);
	assert_int_equal(pdma_cntr_open(o, &oc), 0);
	assert_int_equal(pdma_mr_reg(d, buf, 64, RW, 0, 0, 0, &m, NULL), 0);
	/* Disabled until enabled. */
	assert_int_equal(pdma_sim_dma_write(d, pdma_mr_key(m), (uintptr_t)buf, "a", 1), -EAGAIN);
	assert_int_equal(pdma_mr_bind_cntr(m, c, 0), -EINVAL);
	assert_int_equal(pdma_mr_bind_cntr(m, oc, PDMA_REMOTE_WRITE_EVENTS), -EINVAL);
	assert_int_equal(pdma_mr_bind_cntr(m, c, PDMA_REMOTE_WRITE_EVENTS), 0);
	assert_int_equal(pdma_mr_bind_cntr(m, c2, PDMA_REMOTE_WRITE_EVENTS), -EBUSY);
	assert_int_equal(pdma_mr_enable(m), 0);
	assert_int_equal(pdma_mr_bind_cntr(m, c2, PDMA_REMOTE_WRITE_EVENTS), -EINVAL);
	assert_int_equal(pdma_sim_dma_write(d, pdma_mr_key(m), (uintptr_t)buf, "a", 1), 0);
	assert_int_equal(pdma_sim_dma_write(d, pdma_mr_key(m), (uintptr_t)buf + 1, "b", 1), 0);
	assert_int_equal(pdma_sim_dma_read(d, pdma_mr_key(m), (uintptr_t)buf, out, 2), 0);
	assert_int_equal(pdma_cntr_read(c), 2);
	assert_int_equal(pdma_cntr_read(c2), 0);
	/* The MR cannot be closed while bound to an open counter. */
	assert_int_equal(pdma_mr_close(m), -EBUSY);
	assert_int_equal(pdma_domain_close(d), -EBUSY);
	assert_int_equal(pdma_cntr_close(c), 0);
	assert_int_equal(pdma_mr_close(m), 0);
	assert_int_equal(pdma_cntr_close(c2), 0);
	assert_int_equal(pdma_domain_close(d), 0);
	/* Without RMA_EVENT: no counter binding, MRs start enabled. */
	assert_int_equal(pdma_mr_reg(o, buf, 64, RW, 0, 0, 0, &om, NULL), 0);
	assert_int_equal(pdma_mr_bind_cntr(om, oc, PDMA_REMOTE_WRITE_EVENTS), -EOPNOTSUPP);
	assert_int_equal(pdma_mr_enable(om), 0);
	assert_int_equal(pdma_sim_dma_write(o, pdma_mr_key(om), (uintptr_t)buf, "a", 1), 0);
	assert_int_equal(pdma_mr_close(om), 0);
	assert_int_equal(pdma_cntr_close(oc), 0);
	assert_int_equal(pdma_domain_close(o), 0);
}

static void test_endpoint_binding(void **state)
{
	struct pdma_domain *d = dom_open(PDMA_MR_BASIC | PDMA_MR_ENDPOINT, NULL);
	struct pdma_domain *o = dom_open(PDMA_MR_BASIC, NULL);
	static char buf[4096];
	struct pdma_ep *ep, *oep;
	struct pdma_mr *m, *om;

	(void)state;
	assert_int_equal(pdma_ep_open(d, &ep), 0);
	assert_int_equal(pdma_ep_open(o, &oep), 0);
	assert_int_equal(pdma_mr_reg(d, buf, 64, RW, 0, 0, 0, &m, NULL), 0);
	assert_int_equal(pdma_mr_enable(m), -EINVAL); /* must be bound first */
	assert_int_equal(pdma_sim_dma_write(d, pdma_mr_key(m), (uintptr_t)buf, "a", 1), -EAGAIN);
	assert_int_equal(pdma_mr_bind_ep(m, oep, 0), -EINVAL);
	assert_int_equal(pdma_mr_bind_ep(m, ep, 1), -EINVAL);
	assert_int_equal(pdma_mr_bind_ep(m, ep, 0), 0);
	assert_int_equal(pdma_mr_bind_ep(m, ep, 0), -EBUSY);
	assert_int_equal(pdma_mr_enable(m), 0);
	assert_int_equal(pdma_sim_dma_write(d, pdma_mr_key(m), (uintptr_t)buf, "a", 1), 0);
	assert_int_equal(pdma_mr_close(m), -EBUSY);
	assert_int_equal(pdma_ep_close(ep), 0);
	assert_int_equal(pdma_mr_close(m), 0);
	assert_int_equal(pdma_domain_close(d), 0);
	assert_int_equal(pdma_mr_reg(o, buf, 64, RW, 0, 0, 0, &om, NULL), 0);
	assert_int_equal(pdma_mr_bind_ep(om, oep, 0), -EOPNOTSUPP);
	assert_int_equal(pdma_mr_close(om), 0);
	assert_int_equal(pdma_ep_close(oep), 0);
	assert_int_equal(pdma_domain_close(o), 0);
}

static void test_eq_registration(void **state)
{
	struct pdma_domain *d = dom_open(PDMA_MR_BASIC, NULL);
	static char buf[4096];
	struct pdma_eq *eq, *eq2;
	struct pdma_eq_entry e;
	struct pdma_mr *m1, *m2, *m3;

	(void)state;
	assert_int_equal(pdma_eq_open(d, 0, &eq), -EINVAL);
	assert_int_equal(pdma_eq_open(d, 2, &eq), 0);
	assert_int_equal(pdma_eq_open(d, 2, &eq2), 0);
	assert_int_equal(pdma_domain_bind_eq(d, eq, 0), -EINVAL);
	assert_int_equal(pdma_domain_bind_eq(d, eq, PDMA_REG_MR), 0);
	assert_int_equal(pdma_domain_bind_eq(d, eq2, PDMA_REG_MR), -EBUSY);
	assert_int_equal(pdma_eq_close(eq2), 0);
	assert_int_equal(pdma_eq_read(eq, &e, 0), -EAGAIN);
	assert_int_equal(pdma_mr_reg(d, buf, 64, RW, 0, 0, 0, &m1, (void *)0x11), 0);
	/* A failed registration posts nothing. */
	assert_int_equal(pdma_mr_reg(d, buf, 0, RW, 0, 0, 0, &m3, (void *)0x33), -EINVAL);
	assert_int_equal(pdma_mr_reg(d, buf + 64, 64, RW, 0, 0, 0, &m2, (void *)0x22), 0);
	/* The queue holds two: a third registration is refused, not lost. */
	assert_int_equal(pdma_mr_reg(d, buf, 64, RW, 0, 0, 0, &m3, (void *)0x33), -EAGAIN);
	assert_int_equal(pdma_eq_read(eq, &e, 0), 0);
	assert_int_equal(e.event, PDMA_MR_COMPLETE);
	assert_ptr_equal(e.mr, m1);
	assert_ptr_equal(e.context, (void *)0x11);
	assert_int_equal(pdma_eq_read(eq, &e, 10), 0);
	assert_ptr_equal(e.mr, m2);
	assert_ptr_equal(e.context, (void *)0x22);
	assert_int_equal(pdma_eq_read(eq, &e, 20), -EAGAIN);
	assert_int_equal(pdma_eq_close(eq), -EBUSY);
	assert_int_equal(pdma_mr_close(m1), 0);
	assert_int_equal(pdma_mr_close(m2), 0);
	assert_int_equal(pdma_domain_close(d), -EBUSY); /* EQ still bound */
	assert_int_equal(pdma_eq_close(eq), 0);
	/* An EQ never bound holds the domain open too: its close takes the
	 * domain's lock (before, the domain closed under it and that close used
	 * freed memory). */
	assert_int_equal(pdma_eq_open(d, 2, &eq2), 0);
	assert_int_equal(pdma_eq_open(d, 2, &eq), 0);
	assert_int_equal(pdma_domain_close(d), -EBUSY);
	assert_int_equal(pdma_eq_close(eq2), 0);
	assert_int_equal(pdma_domain_close(d), -EBUSY);
	assert_int_equal(pdma_eq_close(eq), 0);
	assert_int_equal(pdma_domain_close(d), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rma_event_counter),
		cmocka_unit_test(test_endpoint_binding),
		cmocka_unit_test(test_eq_registration),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
