// SPDX-License-Identifier: MIT
/*
 * The fi_mr-style registration API: domain attributes, registration
 * arguments and their exact errno, the memory interfaces (host, CUDA, sim),
 * and the rules for local descriptors.
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

static void test_domain_attrs(void **state)
{
	struct pdma_domain_attr a, q;
	struct pdma_domain *d;

	(void)state;
	pdma_domain_attr_init(&a);
	assert_int_equal(a.mr_mode, PDMA_MR_BASIC | PDMA_MR_LOCAL | PDMA_MR_HMEM);
	assert_int_equal(PDMA_MR_BASIC, PDMA_MR_VIRT_ADDR | PDMA_MR_ALLOCATED | PDMA_MR_PROV_KEY);
	assert_int_equal(pdma_domain_open(NULL, &d), -EINVAL);
	assert_int_equal(pdma_domain_open(&a, NULL), -EINVAL);
	a.mr_mode = 1u << 20;
	assert_int_equal(pdma_domain_open(&a, &d), -EINVAL);
	pdma_domain_attr_init(&a);
	a.mr_key_size = 9;
	assert_int_equal(pdma_domain_open(&a, &d), -EINVAL);
	pdma_domain_attr_init(&a);
	a.mr_iov_limit = 65;
	assert_int_equal(pdma_domain_open(&a, &d), -EINVAL);
	a.mr_iov_limit = 0;
	/* mr.h: a raw key is 16..64 bytes (8 key + 8 tag at least) */
	a.raw_key_size = 15;
	assert_int_equal(pdma_domain_open(&a, &d), -EINVAL);
	a.raw_key_size = 65;
	assert_int_equal(pdma_domain_open(&a, &d), -EINVAL);
	a.raw_key_size = 64;
	assert_int_equal(pdma_domain_open(&a, &d), 0);
	assert_int_equal(pdma_domain_query(d, &q), 0);
	assert_int_equal(q.raw_key_size, 64);
	assert_int_equal(pdma_domain_close(d), 0);
	a.raw_key_size = 0;
	a.kernel_device = "/nonexistent/peerdma";
	assert_int_equal(pdma_domain_open(&a, &d), -ENODEV);
	a.kernel_device = NULL;
	a.mr_key_size = 0;
	a.mr_iov_limit = 0;
	assert_int_equal(pdma_domain_open(&a, &d), 0);
	assert_int_equal(pdma_domain_query(d, &q), 0);
	assert_int_equal(q.mr_key_size, 8);
	assert_int_equal(q.mr_iov_limit, 4);
	assert_int_equal(q.raw_key_size, 16);
	assert_null(q.kernel_device); /* no module: tests/vm/guest_kdev.c has the other case */
	assert_int_equal(pdma_domain_close(d), 0);
	assert_int_equal(pdma_domain_close(NULL), -EINVAL);
}

static void test_reg_args(void **state)
{
	struct pdma_domain *d = dom_open(PDMA_MR_BASIC, NULL);
	static char buf[8192];
	struct pdma_mr *m;
	struct iovec iov[5];
	struct pdma_mr_attr a = { 0 };
	uint8_t auth[4] = { 0 };
	void *hole;

	(void)state;
	assert_int_equal(pdma_mr_reg(d, buf, 0, RW, 0, 0, 0, &m, NULL), -EINVAL);
	assert_int_equal(pdma_mr_reg(d, NULL, 16, RW, 0, 0, 0, &m, NULL), -EINVAL);
	assert_int_equal(pdma_mr_reg(d, buf, 16, RW, 1, 0, 0, &m, NULL), -EINVAL);
	assert_int_equal(pdma_mr_reg(d, buf, 16, RW, 0, 0, 1, &m, NULL), -EINVAL);
	assert_int_equal(pdma_mr_reg(d, buf, 16, 0, 0, 0, 0, &m, NULL), -EINVAL);
	assert_int_equal(pdma_mr_reg(d, buf, 16, 1u << 6, 0, 0, 0, &m, NULL), -EINVAL);
	assert_int_equal(pdma_mr_reg(d, buf, 16, RW, 0, 0, 0, NULL, NULL), -EINVAL);
	assert_int_equal(pdma_mr_reg(NULL, buf, 16, RW, 0, 0, 0, &m, NULL), -EINVAL);
	/* A hole in the address space: ALLOCATED memory only. */
	hole = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(hole != MAP_FAILED);
	munmap(hole, 4096);
	assert_int_equal(pdma_mr_reg(d, hole, 16, RW, 0, 0, 0, &m, NULL), -EFAULT);
	/* iov count bounds: 1..mr_iov_limit (4). */
	for (int i = 0; i < 5; i++) {
		iov[i].iov_base = buf + 1024 * i;
		iov[i].iov_len = 100;
	}
	assert_int_equal(pdma_mr_regv(d, iov, 0, RW, 0, 0, 0, &m, NULL), -EINVAL);
	assert_int_equal(pdma_mr_regv(d, iov, 5, RW, 0, 0, 0, &m, NULL), -EINVAL);
	assert_int_equal(pdma_mr_regv(d, NULL, 1, RW, 0, 0, 0, &m, NULL), -EINVAL);
	iov[1].iov_len = 0;
	assert_int_equal(pdma_mr_regv(d, iov, 2, RW, 0, 0, 0, &m, NULL), -EINVAL);
	iov[1].iov_len = 100;
	assert_int_equal(pdma_mr_regv(d, iov, 4, RW, 0, 0, 0, &m, (void *)0x1234), 0);
	assert_ptr_equal(pdma_mr_context(m), (void *)0x1234);
	assert_int_equal(pdma_mr_close(m), 0);
	/* regattr: auth keys are not supported, device memory needs HMEM. */
	a.mr_iov = iov;
	a.iov_count = 1;
	a.access = RW;
	a.auth_key = auth;
	a.auth_key_size = sizeof(auth);
	assert_int_equal(pdma_mr_regattr(d, &a, 0, &m), -EINVAL);
	a.auth_key = NULL;
	a.auth_key_size = 0;
	a.iface = PDMA_HMEM_SIM;
	assert_int_equal(pdma_mr_regattr(d, &a, 0, &m), -EOPNOTSUPP);
	a.iface = (enum pdma_hmem_iface)7;
	assert_int_equal(pdma_mr_regattr(d, &a, 0, &m), -EOPNOTSUPP);
	assert_int_equal(pdma_mr_close(NULL), -EINVAL);
	assert_int_equal(pdma_domain_close(d), 0);
}

static void test_hmem_backends(void **state)
{
	struct pdma_domain *d = dom_open(PDMA_MR_BASIC | PDMA_MR_HMEM, NULL);
	static char buf[4096];
	struct iovec iov = { buf, 64 };
	struct pdma_mr_attr a = { .mr_iov = &iov, .iov_count = 1, .access = RW };
	struct pdma_mr *m;
	void *lib;

	(void)state;
	a.iface = PDMA_HMEM_SIM; /* no sim attached to this domain */
	assert_int_equal(pdma_mr_regattr(d, &a, 0, &m), -ENODEV);
	a.iface = (enum pdma_hmem_iface)7;
	assert_int_equal(pdma_mr_regattr(d, &a, 0, &m), -EINVAL);
	a.iface = PDMA_HMEM_CUDA;
	a.device = -1;
	assert_int_equal(pdma_mr_regattr(d, &a, 0, &m), -EINVAL);
	a.device = 0;
	lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!lib) /* no driver: a clear error, not a crash (tests/gpu covers the rest) */
		assert_int_equal(pdma_mr_regattr(d, &a, 0, &m), -ENODEV);
	else
		dlclose(lib);
	a.iface = PDMA_HMEM_SYSTEM;
	assert_int_equal(pdma_mr_regattr(d, &a, 0, &m), 0);
	assert_int_equal(pdma_mr_close(m), 0);
	assert_int_equal(pdma_domain_close(d), 0);
}

static void test_local_desc_rules(void **state)
{
	struct pdma_sim *s = sim_open(1 << 20, 0);
	struct pdma_domain *loc = dom_open(PDMA_MR_BASIC | PDMA_MR_LOCAL | PDMA_MR_HMEM, s);
	struct pdma_domain *hid = dom_open(PDMA_MR_BASIC | PDMA_MR_HMEM, s);
	static char src[4096], ro[64];
	struct pdma_mr *ms, *mr_ro, *g_mr, *hs, *hg;
	char *g, back[8];
	void *stale;

	(void)state;
	assert_int_equal(pdma_sim_alloc(s, PDMA_SIM_PAGE_SIZE, (void **)&g), 0);
	memcpy(src, "payload!", 8);
	assert_int_equal(pdma_mr_reg(loc, src, 64, PDMA_WRITE | PDMA_READ, 0, 0, 0, &ms, NULL), 0);
	assert_int_equal(pdma_mr_reg(loc, ro, 64, PDMA_READ, 0, 0, 0, &mr_ro, NULL), 0);
	g_mr = reg_sim(loc, g, 4096, RW);
	/* LOCAL: the local buffer needs its desc. */
	assert_int_equal(pdma_sim_write(loc, src, 8, NULL, (uintptr_t)g, pdma_mr_key(g_mr)),
			 -EINVAL);
	assert_int_equal(pdma_sim_write(loc, src, 8, pdma_mr_desc(ms), (uintptr_t)g,
					pdma_mr_key(g_mr)), 0);
	assert_memory_equal(g, "payload!", 8);
	/* A desc without WRITE access cannot source a write. */
	assert_int_equal(pdma_sim_write(loc, ro, 8, pdma_mr_desc(mr_ro), (uintptr_t)g,
					pdma_mr_key(g_mr)), -EACCES);
	/* A desc that does not cover the buffer. */
	assert_int_equal(pdma_sim_write(loc, src + 60, 8, pdma_mr_desc(ms), (uintptr_t)g,
					pdma_mr_key(g_mr)), -EINVAL);
	/* Read GPU memory back into a registered host buffer. */
	assert_int_equal(pdma_sim_read(loc, ro, 8, pdma_mr_desc(mr_ro), (uintptr_t)g,
				       pdma_mr_key(g_mr)), 0);
	assert_memory_equal(ro, "payload!", 8);
	/* A closed MR's desc is stale. */
	stale = pdma_mr_desc(ms);
	assert_int_equal(pdma_mr_close(ms), 0);
	assert_int_equal(pdma_sim_write(loc, src, 8, stale, (uintptr_t)g, pdma_mr_key(g_mr)),
			 -EINVAL);

	/* Without LOCAL, host buffers need no desc (registered on the fly)... */
	hg = reg_sim(hid, g, 4096, RW);
	memcpy(src, "hidden!!", 8);
	assert_int_equal(pdma_sim_write(hid, src, 8, NULL, (uintptr_t)g + 8, pdma_mr_key(hg)), 0);
	assert_memory_equal(g + 8, "hidden!!", 8);
	assert_int_equal(pdma_sim_read(hid, back, 8, NULL, (uintptr_t)g + 8, pdma_mr_key(hg)), 0);
	assert_memory_equal(back, "hidden!!", 8);
	/* ...but device memory under HMEM must be registered and described. */
	assert_int_equal(pdma_sim_write(hid, g + 100, 8, NULL, (uintptr_t)g, pdma_mr_key(hg)),
			 -EINVAL);
	hs = reg_sim(hid, g + 100, 8, PDMA_WRITE);
	assert_int_equal(pdma_sim_write(hid, g + 100, 8, pdma_mr_desc(hs), (uintptr_t)g + 200,
					pdma_mr_key(hg)), 0);
	/* A desc of another domain is rejected. */
	assert_int_equal(pdma_sim_write(loc, g + 100, 8, pdma_mr_desc(hs), (uintptr_t)g,
					pdma_mr_key(g_mr)), -EINVAL);
	assert_int_equal(pdma_mr_close(hs), 0);
	assert_int_equal(pdma_mr_close(hg), 0);
	assert_int_equal(pdma_mr_close(mr_ro), 0);
	assert_int_equal(pdma_mr_close(g_mr), 0);
	assert_int_equal(pdma_domain_close(loc), 0);
	assert_int_equal(pdma_domain_close(hid), 0);
	assert_int_equal(pdma_sim_close(s), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_domain_attrs),
		cmocka_unit_test(test_reg_args),
		cmocka_unit_test(test_hmem_backends),
		cmocka_unit_test(test_local_desc_rules),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
