// SPDX-License-Identifier: MIT
/*
 * The fi_mr-style registration API seen by the device: access rights and
 * bounds of DMA through a key, and DMA over a multi-iov registration.
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

static void test_access_and_bounds(void **state)
{
	struct pdma_domain *d = dom_open(PDMA_MR_PROV_KEY | PDMA_MR_ALLOCATED, NULL);
	struct pdma_domain *v = dom_open(PDMA_MR_BASIC, NULL);
	static char buf[4096];
	struct pdma_mr *ro, *wo, *vm;
	char tmp[16];

	(void)state;
	assert_int_equal(pdma_mr_reg(d, buf, 100, PDMA_REMOTE_READ, 0, 0, 0, &ro, NULL), 0);
	assert_int_equal(pdma_mr_reg(d, buf + 200, 100, PDMA_REMOTE_WRITE, 0, 0, 0, &wo, NULL), 0);
	assert_int_equal(pdma_sim_dma_write(d, pdma_mr_key(ro), 0, "x", 1), -EACCES);
	assert_int_equal(pdma_sim_dma_read(d, pdma_mr_key(wo), 0, tmp, 1), -EACCES);
	/* 0-based offsets without VIRT_ADDR. */
	assert_int_equal(pdma_sim_dma_write(d, pdma_mr_key(wo), 98, "ab", 2), 0);
	assert_memory_equal(buf + 298, "ab", 2);
	assert_int_equal(pdma_sim_dma_write(d, pdma_mr_key(wo), 99, "ab", 2), -EINVAL);
	assert_int_equal(pdma_sim_dma_write(d, pdma_mr_key(wo), 0, "", 0), -EINVAL);
	assert_int_equal(pdma_sim_dma_write(d, pdma_mr_key(wo), UINT64_MAX, "a", 1), -EINVAL);
	assert_int_equal(pdma_sim_dma_read(d, pdma_mr_key(ro), 98, tmp, 2), 0);
	assert_memory_equal(tmp, buf + 98, 2);
	/* Virtual addresses under VIRT_ADDR. */
	assert_int_equal(pdma_mr_reg(v, buf + 1000, 100, PDMA_REMOTE_WRITE, 0, 0, 0, &vm, NULL), 0);
	assert_int_equal(pdma_sim_dma_write(v, pdma_mr_key(vm), (uintptr_t)buf + 1050, "va", 2), 0);
	assert_memory_equal(buf + 1050, "va", 2);
	assert_int_equal(pdma_sim_dma_write(v, pdma_mr_key(vm), 50, "va", 2), -EINVAL);
	assert_int_equal(pdma_sim_dma_write(v, pdma_mr_key(vm), (uintptr_t)buf + 999, "v", 1),
			 -EINVAL);
	/* Keys are per domain. */
	assert_int_equal(pdma_sim_dma_write(v, pdma_mr_key(wo), 0, "x", 1), -ENOKEY);
	/* Closing an MR makes its key invalid for the device. */
	uint64_t k = pdma_mr_key(wo);

	assert_int_equal(pdma_mr_close(wo), 0);
	assert_int_equal(pdma_sim_dma_write(d, k, 0, "x", 1), -ENOKEY);
	assert_int_equal(pdma_mr_close(ro), 0);
	assert_int_equal(pdma_mr_close(vm), 0);
	assert_int_equal(pdma_domain_close(d), 0);
	assert_int_equal(pdma_domain_close(v), 0);
}

static void test_iov_dma(void **state)
{
	struct pdma_domain *d = dom_open(PDMA_MR_BASIC, NULL);
	static char a[64], b[32], c[64];
	struct iovec iov[3] = { { a, 16 }, { b, 8 }, { c, 16 } };
	char in[40], out[40];
	struct pdma_mr *m;
	uint64_t base = (uintptr_t)a;

	(void)state;
	for (int i = 0; i < 40; i++)
		in[i] = (char)('A' + i);
	assert_int_equal(pdma_mr_regv(d, iov, 3, RW, 0, 0, 0, &m, NULL), 0);
	/* Offsets 10..34 of the concatenation span all three buffers. */
	assert_int_equal(pdma_sim_dma_write(d, pdma_mr_key(m), base + 10, in, 25), 0);
	assert_memory_equal(a + 10, in, 6);
	assert_memory_equal(b, in + 6, 8);
	assert_memory_equal(c, in + 14, 11);
	assert_int_equal(pdma_sim_dma_read(d, pdma_mr_key(m), base + 10, out, 25), 0);
	assert_memory_equal(out, in, 25);
	assert_int_equal(pdma_sim_dma_write(d, pdma_mr_key(m), base + 30, in, 11), -EINVAL);
	assert_int_equal(pdma_sim_dma_write(d, pdma_mr_key(m), base + 30, in, 10), 0);
	assert_int_equal(pdma_mr_close(m), 0);
	assert_int_equal(pdma_domain_close(d), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_access_and_bounds),
		cmocka_unit_test(test_iov_dma),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
