// SPDX-License-Identifier: MIT
/*
 * The CUDA deallocation hooks: this program links the hook library
 * libpeerdma_cuda_hooks.so (tests/CMakeLists.txt, PDMA_HOOKED_TESTS), as
 * LD_PRELOAD would load it, and frees through its cuMemFree_v2, cuMemUnmap,
 * cuCtxDestroy_v2 and cuMemHostUnregister over the fake driver
 * (support/fake_cuda.c): pins are revoked and the monitor told before the
 * driver frees, and the driver's own answer comes back.
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
#include "monitor/monitor.h"
#include "support/fake_cuda.h"

/* The hooked entry points (lib/hooks/driver.c, in libpeerdma_cuda_hooks.so). */
pdma_cu_result cuMemFree_v2(pdma_cu_ptr dptr);
pdma_cu_result cuMemHostUnregister(void *p);
pdma_cu_result cuMemUnmap(pdma_cu_ptr ptr, size_t size);
pdma_cu_result cuCtxDestroy_v2(pdma_cu_ctx ctx);

static void test_hooks_free_order(void **state)
{
	uint64_t base = 0x7f0000000000ull, other = 0x7f0000400000ull;
	struct pdma_monitor_sub *sub = NULL;
	struct pdma_cuda_pin_info pi;
	void *p = NULL, *q = NULL;
	uint64_t h0 = pdma_cuda_hooks_count();
	int fd;

	(void)state;
	fadd(base, 4 * MiB, PDMA_CU_MEMORYTYPE_DEVICE, 0);
	fadd(other, 4 * MiB, PDMA_CU_MEMORYTYPE_DEVICE, 0);
	assert_int_equal(pdma_monitor_subscribe(on_notify, NULL, &sub), 0);
	assert_int_equal(pdma_mem_cuda_ops.pin(cu, base + MiB, MiB, on_revoke, NULL, &p), 0);
	assert_int_equal(pdma_mem_cuda_ops.pin(cu, other, MiB, on_revoke, NULL, &q), 0);
	assert_int_equal(pdma_cuda_pin_info(p, &pi), 0);
	fd = pi.dmabuf_fd;
	/* The application frees through the interposed entry point. */
	assert_int_equal(cuMemFree_v2(base), PDMA_CU_SUCCESS);
	assert_int_equal(F.frees, 1);
	assert_int_equal(F.notified_before_free, 1); /* the monitor was told first */
	assert_int_equal(F.revoked_before_free, 1);  /* and the pin revoked first */
	assert_int_equal(notified_addr, base);
	assert_int_equal(notified_len, 4 * MiB);
	assert_int_equal(pdma_cuda_hooks_count(), h0 + 1);
	assert_int_equal(pdma_cuda_pin_info(p, &pi), 0);
	assert_true(pi.revoked);
	assert_int_equal(pi.dmabuf_fd, -1);
	assert_false(fd_open(fd));
	assert_int_equal(pdma_cuda_pin_info(q, &pi), 0);
	assert_false(pi.revoked); /* the other allocation's pin is untouched */
	assert_int_equal(F.revokes, 1);
	/* A bad free: the driver's error comes back; nothing more is revoked. */
	assert_int_equal(cuMemFree_v2(base), PDMA_CU_ERROR_INVALID_VALUE);
	assert_int_equal(F.revokes, 1);
	/* Unpin after revocation only frees. */
	pdma_mem_cuda_ops.unpin(cu, p);
	/* VMM unmap of the other range: revoked before the driver unmaps. */
	assert_int_equal(cuMemUnmap(other, 4 * MiB), PDMA_CU_SUCCESS);
	assert_int_equal(F.revokes, 2);
	assert_int_equal(notified_addr, other);
	pdma_mem_cuda_ops.unpin(cu, q);
	pdma_monitor_unsubscribe(sub);
}

static void test_hooks_region_and_context(void **state)
{
	uint64_t base = 0x7f0000000000ull;
	pdma_cu_ctx c = (pdma_cu_ctx)(uintptr_t)0x5555;
	struct pdma_region *r = NULL;
	void *q = NULL;

	(void)state;
	F.current = c;
	fadd(base, 2 * MiB, PDMA_CU_MEMORYTYPE_DEVICE, 0);
	F.current = NULL;
	fadd(base + 8 * MiB, 2 * MiB, PDMA_CU_MEMORYTYPE_DEVICE, 0);
	assert_int_equal(pdma_region_create(&pdma_mem_cuda_ops, cu, PDMA_HMEM_CUDA, base, 2 * MiB,
					    1, &r), 0);
	assert_int_equal(pdma_mem_cuda_ops.pin(cu, base + 8 * MiB, MiB, on_revoke, NULL, &q), 0);
	assert_true(pdma_region_dma_begin(r));
	pdma_region_dma_end(r);
	/* Destroying the context revokes the pins of its allocations only. */
	assert_int_equal(cuCtxDestroy_v2(c), PDMA_CU_SUCCESS);
	assert_false(atomic_load(&r->valid));
	assert_false(pdma_region_dma_begin(r));
	assert_int_equal(F.revokes, 0);
	pdma_region_destroy(r);
	pdma_mem_cuda_ops.unpin(cu, q);
}

/* Through the public API, with the hooks live: a cached CUDA registration is
 * found without a driver call; a free (through the hook) drops it. */
static void test_mr_cached_hooks(void **state)
{
	uint64_t base = 0x7f2000000000ull;
	struct pdma_domain_attr da;
	struct pdma_domain *d;
	struct iovec iov = { (void *)(uintptr_t)base, MiB };
	struct pdma_mr_attr a = { .mr_iov = &iov, .iov_count = 1, .access = PDMA_REMOTE_WRITE,
				  .iface = PDMA_HMEM_CUDA };
	struct pdma_mr *m;
	int calls;

	(void)state;
	setenv("PEERDMA_CUDA_MONITOR", "hooks", 1);
	pdma_domain_attr_init(&da);
	da.mr_mode |= PDMA_MR_HMEM;
	da.use_cache = 1;
	assert_int_equal(pdma_domain_open(&da, &d), 0);
	fadd(base, 2 * MiB, PDMA_CU_MEMORYTYPE_DEVICE, 0);
	assert_int_equal(pdma_mr_regattr(d, &a, 0, &m), 0);
	assert_int_equal(F.exports, 1);
	assert_int_equal(pdma_mr_close(m), 0);
	calls = F.attr_calls;
	assert_int_equal(pdma_mr_regattr(d, &a, 0, &m), 0);
	assert_int_equal(F.exports, 1);       /* a hit */
	assert_int_equal(F.attr_calls, calls); /* and no driver call to find it */
	assert_int_equal(pdma_mr_close(m), 0);
	/* Freed through the hook and reallocated at the same address. */
	assert_int_equal(cuMemFree_v2(base), PDMA_CU_SUCCESS);
	fadd(base, 2 * MiB, PDMA_CU_MEMORYTYPE_DEVICE, 0);
	assert_int_equal(pdma_mr_regattr(d, &a, 0, &m), 0);
	assert_int_equal(F.exports, 2);
	assert_int_equal(pdma_mr_close(m), 0);
	assert_int_equal(pdma_domain_close(d), 0);
	unsetenv("PEERDMA_CUDA_MONITOR");
}

static void test_host_pins(void **state)
{
	static char buf[64 * 1024] __attribute__((aligned(4096)));
	uint64_t h = (uintptr_t)buf;
	struct pdma_cuda_pin_info pi;
	struct pdma_mem_alloc al;
	void *p = NULL;

	(void)state;
	assert_int_equal(pdma_mem_cuda_host_ops.query(cu, h + 10, 5000, &al), 0);
	assert_int_equal(al.base, h);
	assert_int_equal(al.size, 8192);
	assert_int_equal(al.buffer_id, 0);
	assert_int_equal(pdma_mem_cuda_host_ops.pin(cu, h, 8192, NULL, NULL, &p), 0);
	assert_int_equal(F.host_regs, 1);
	assert_int_equal(pdma_cuda_pin_info(p, &pi), 0);
	assert_int_equal(pi.kind, PDMA_CUDA_PIN_HOST_REGISTERED);
	pdma_mem_cuda_host_ops.unpin(cu, p);
	assert_int_equal(F.host_unregs, 1);
	assert_int_equal(pdma_mem_cuda_host_ops.pin(cu, h + 1, 4096, NULL, NULL, &p), -EINVAL);

	/* Already page-locked by the application: no second registration, and
	 * its cuMemHostUnregister revokes our pin first. */
	assert_int_equal(pdma_cuda_host_register(cu, buf, sizeof(buf)), 0);
	assert_int_equal(pdma_cuda_host_register(cu, buf, sizeof(buf)), -EEXIST);
	assert_int_equal(pdma_mem_cuda_host_ops.pin(cu, h, 8192, on_revoke, NULL, &p), 0);
	assert_int_equal(F.host_regs, 2);
	assert_int_equal(pdma_cuda_pin_info(p, &pi), 0);
	assert_int_equal(pi.kind, PDMA_CUDA_PIN_HOST_CUDA);
	assert_int_equal(cuMemHostUnregister(buf), PDMA_CU_SUCCESS);
	assert_int_equal(F.revokes, 1);
	pdma_mem_cuda_host_ops.unpin(cu, p);
	assert_int_equal(F.host_unregs, 2); /* ours never ran */
	/* GPU memory through the host table: refused. */
	fadd(0x7f0000000000ull, MiB, PDMA_CU_MEMORYTYPE_DEVICE, 0);
	assert_int_equal(pdma_mem_cuda_host_ops.query(cu, 0x7f0000000000ull, 64, &al), -EINVAL);
}

/* Linked in, ahead of any libcuda or libcudart (there is none): the global
 * lookup of cuMemFree_v2 and cudaFree reaches the hook library, libpeerdma
 * finds it and registers, and auto mode trusts the hooks for what they saw
 * allocated (PDMA_CUDA_MON_AUTO); "hooks" trusts them for everything. */
static void test_hooks_detected(void **state)
{
	uint64_t h0 = pdma_cuda_hooks_count();

	(void)state;
	unsetenv("PEERDMA_CUDA_MONITOR");
	assert_true(pdma_cuda_hooks_installed());
	assert_int_equal(pdma_cuda_monitor_mode(), PDMA_CUDA_MON_AUTO);
	setenv("PEERDMA_CUDA_MONITOR", "auto", 1);
	assert_int_equal(pdma_cuda_monitor_mode(), PDMA_CUDA_MON_AUTO);
	setenv("PEERDMA_CUDA_MONITOR", "hooks", 1);
	assert_int_equal(pdma_cuda_monitor_mode(), PDMA_CUDA_MON_HOOKS);
	assert_true(pdma_cuda_hooks_attach());
	setenv("PEERDMA_CUDA_MONITOR", "tag", 1);
	assert_int_equal(pdma_cuda_monitor_mode(), PDMA_CUDA_MON_TAG);
	unsetenv("PEERDMA_CUDA_MONITOR");
	/* A free the driver does not know still reaches libpeerdma, and the
	 * driver's error comes back. */
	assert_int_equal(cuMemFree_v2(0x7e0000000000ull), PDMA_CU_ERROR_INVALID_VALUE);
	assert_int_equal(pdma_cuda_hooks_count(), h0 + 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_hooks_free_order, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hooks_region_and_context, setup, teardown),
		cmocka_unit_test_setup_teardown(test_mr_cached_hooks, setup, teardown),
		cmocka_unit_test_setup_teardown(test_host_pins, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hooks_detected, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
