// SPDX-License-Identifier: MIT
/*
 * The cuda backend's pins against a fake driver (support/fake_cuda.c):
 * classification, managed refusal, SYNC_MEMOPS once per allocation, 64 KiB
 * rounding, dma-buf export and its fd's life, the nv-p2p fallback, the flush
 * rule, tag checks, pins racing a release, a pin outliving its backend, and
 * log routing.
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

#include "support/fake_cuda.h"

/* ------------------------------------------------------------ the backend */
static void test_device_info(void **state)
{
	struct pdma_cuda_dev_info d;

	(void)state;
	assert_int_equal(F.retained, 1);
	assert_int_equal(pdma_cuda_device_count(cu), 1);
	assert_int_equal(pdma_cuda_driver_version(cu), 13000);
	assert_int_equal(pdma_cuda_device_info(cu, 0, &d), 0);
	assert_string_equal(d.name, "Fake GPU 0");
	assert_string_equal(d.pci_bus_id, "0000:3b:00.0"); /* lower case */
	assert_int_equal(d.gdr_supported, 1);
	assert_int_equal(d.dmabuf_supported, 1);
	assert_int_equal(d.writes_ordering, 100);
	assert_int_equal(d.cc_major, 9);
	assert_int_equal(pdma_cuda_device_info(cu, 1, &d), -ENODEV);
}

static void test_classify_kinds(void **state)
{
	struct pdma_cuda_ptr_info in;
	struct pdma_mem_alloc al;
	const struct pdma_mem_ops *ops = NULL;

	(void)state;
	fadd(0x7f0000000000ull, 3 * MiB, PDMA_CU_MEMORYTYPE_DEVICE, 0);
	fadd(0x7f1000000000ull, MiB, PDMA_CU_MEMORYTYPE_DEVICE, 1);
	fadd(0x7f2000000000ull, MiB, PDMA_CU_MEMORYTYPE_HOST, 0);

	assert_int_equal(pdma_cuda_classify(cu, 0x7f0000000000ull + 5, &in), 0);
	assert_int_equal(in.kind, PDMA_CUDA_KIND_DEVICE);
	assert_int_equal(in.base, 0x7f0000000000ull);
	assert_int_equal(in.size, 3 * MiB);
	assert_int_equal(in.buffer_id, 1);
	assert_int_equal(in.device, 0);
	assert_false(in.sync_memops);
	assert_int_equal(F.last_nattrs, 7); /* all of them, in one call */
	assert_int_equal(pdma_cuda_ops_for(cu, 0x7f0000000000ull, 1, &ops), 0);
	assert_ptr_equal(ops, &pdma_mem_cuda_ops);
	assert_int_equal(F.last_nattrs, 2); /* the table needs the kind only */
	assert_int_equal(pdma_mem_cuda_ops.query(cu, 0x7f0000000000ull, 1, &al), 0);
	assert_int_equal(F.last_nattrs, 5); /* kind, buffer ID, range */

	assert_int_equal(pdma_cuda_classify(cu, 0x7f1000000000ull, &in), 0);
	assert_int_equal(in.kind, PDMA_CUDA_KIND_MANAGED);
	assert_int_equal(pdma_mem_cuda_ops.query(cu, 0x7f1000000000ull, 64, &al), -EINVAL);
	assert_non_null(strstr(pdma_cuda_last_error(), "managed"));
	assert_int_equal(pdma_cuda_ops_for(cu, 0x7f1000000000ull, 64, &ops), -EINVAL);
	assert_int_equal(pdma_mem_cuda_host_ops.query(cu, 0x7f1000000000ull, 64, &al), -EINVAL);

	assert_int_equal(pdma_cuda_classify(cu, 0x7f2000000000ull, &in), 0);
	assert_int_equal(in.kind, PDMA_CUDA_KIND_HOST);
	assert_int_equal(pdma_mem_cuda_ops.query(cu, 0x7f2000000000ull, 64, &al), -EINVAL);
	assert_int_equal(pdma_cuda_ops_for(cu, 0x7f2000000000ull, 64, &ops), 0);
	assert_ptr_equal(ops, &pdma_mem_cuda_host_ops);

	assert_int_equal(pdma_cuda_classify(cu, 0x1000, &in), 0);
	assert_int_equal(in.kind, PDMA_CUDA_KIND_UNKNOWN);
	assert_int_equal(in.device, -1);
	assert_int_equal(pdma_mem_cuda_ops.query(cu, 0x1000, 64, &al), -EFAULT);
	assert_int_equal(pdma_cuda_classify(cu, 0, &in), -EFAULT);

	/* Ranges: inside, leaving, empty, wrapping. */
	assert_int_equal(pdma_mem_cuda_ops.query(cu, 0x7f0000000000ull + MiB, 2 * MiB, &al), 0);
	assert_int_equal(al.base, 0x7f0000000000ull);
	assert_int_equal(al.size, 3 * MiB);
	assert_int_equal(al.buffer_id, 1);
	assert_int_equal(pdma_mem_cuda_ops.query(cu, 0x7f0000000000ull + MiB, 2 * MiB + 1, &al),
			 -EFAULT);
	assert_int_equal(pdma_mem_cuda_ops.query(cu, 0x7f0000000000ull, 0, &al), -EFAULT);
	assert_int_equal(pdma_mem_cuda_ops.query(cu, 0x7f0000000000ull, SIZE_MAX, &al), -EFAULT);
	assert_int_equal(pdma_mem_cuda_ops.page_size, 64 * KiB);
	assert_int_equal(pdma_mem_cuda_host_ops.page_size, 4 * KiB);
}

static void test_pin_dmabuf_sync_once(void **state)
{
	uint64_t base = 0x7f0000000000ull;
	struct pdma_cuda_pin_info pi;
	struct pdma_cuda_stats st;
	void *p1 = NULL, *p2 = NULL, *p3 = NULL;
	int fd1;

	(void)state;
	fadd(base, 4 * MiB, PDMA_CU_MEMORYTYPE_DEVICE, 0);
	assert_null(F.current); /* no context current: the backend pushes one */
	assert_int_equal(pdma_mem_cuda_ops.pin(cu, base, MiB, NULL, NULL, &p1), 0);
	assert_int_equal(F.set_sync_calls, 1);
	assert_int_equal(F.pushes, F.pops);
	assert_true(F.pushes >= 1);
	assert_null(F.current);
	assert_int_equal(pdma_mem_cuda_ops.pin(cu, base + 2 * MiB, 2 * MiB, NULL, NULL, &p2), 0);
	assert_int_equal(F.set_sync_calls, 1); /* once per allocation */
	assert_int_equal(F.exports, 2);
	assert_int_equal(pdma_cuda_pin_info(p1, &pi), 0);
	assert_int_equal(pi.kind, PDMA_CUDA_PIN_DMABUF);
	assert_int_equal(pi.va, base);
	assert_int_equal(pi.len, MiB);
	assert_int_equal(pi.buffer_id, 1);
	assert_int_equal(pi.dmabuf_start, base);
	assert_int_equal(pi.dmabuf_len, MiB);
	fd1 = pi.dmabuf_fd;
	assert_true(fd_open(fd1));
	/* Not whole GPU pages; outside the allocation. */
	assert_int_equal(pdma_mem_cuda_ops.pin(cu, base + 4096, 64 * KiB, NULL, NULL, &p3), -EINVAL);
	assert_int_equal(pdma_mem_cuda_ops.pin(cu, base + 3 * MiB, 2 * MiB, NULL, NULL, &p3), -EFAULT);
	assert_int_equal(pdma_mem_cuda_ops.pin(cu, 0x5000000, 64 * KiB, NULL, NULL, &p3), -EFAULT);
	assert_null(p3);
	pdma_cuda_get_stats(cu, &st);
	assert_int_equal(st.pins, 2);
	assert_int_equal(st.sync_memops, 1);
	assert_int_equal(st.dmabuf_export, 2);
	pdma_mem_cuda_ops.unpin(cu, p1);
	assert_false(fd_open(fd1)); /* closed on unpin */
	pdma_mem_cuda_ops.unpin(cu, p2);
	pdma_cuda_get_stats(cu, &st);
	assert_int_equal(st.unpins, 2);
}

static void test_pin_allocation_end(void **state)
{
	uint64_t base = 0x7f0000000000ull;
	struct pdma_cuda_pin_info pi;
	void *p = NULL;

	(void)state;
	/* 100000 bytes: the pin covers two 64 KiB pages (131072); a driver that
	 * refuses to export past the allocation gets the range up to its end
	 * rounded to a host page. */
	fadd(base, 100000, PDMA_CU_MEMORYTYPE_DEVICE, 0);
	F.export_strict = 1;
	assert_int_equal(pdma_mem_cuda_ops.pin(cu, base, 128 * KiB, NULL, NULL, &p), 0);
	assert_int_equal(pdma_cuda_pin_info(p, &pi), 0);
	assert_int_equal(pi.len, 128 * KiB);
	assert_int_equal(pi.dmabuf_len, 102400);
	pdma_mem_cuda_ops.unpin(cu, p);
	/* Past the last GPU page of the allocation: refused. */
	assert_int_equal(pdma_mem_cuda_ops.pin(cu, base, 192 * KiB, NULL, NULL, &p), -EFAULT);
}

static void test_pin_nvp2p(void **state)
{
	uint64_t base = 0x7f0000000000ull;
	struct pdma_cuda_pin_info pi;
	void *p = NULL;

	(void)state;
	fadd(base, MiB, PDMA_CU_MEMORYTYPE_DEVICE, 0);
	setenv("PEERDMA_CUDA_DMABUF", "0", 1);
	assert_int_equal(pdma_mem_cuda_ops.pin(cu, base, MiB, NULL, NULL, &p), 0);
	unsetenv("PEERDMA_CUDA_DMABUF");
	assert_int_equal(F.exports, 0);
	assert_int_equal(pdma_cuda_pin_info(p, &pi), 0);
	assert_int_equal(pi.kind, PDMA_CUDA_PIN_NVP2P);
	assert_int_equal(pi.dmabuf_fd, -1);
	assert_int_equal(pi.va, base);
	pdma_mem_cuda_ops.unpin(cu, p);
}

static void test_pin_device_without_dmabuf(void **state)
{
	struct pdma_cuda_pin_info pi;
	void *p = NULL;

	(void)state;
	fadd(0x7f0000000000ull, MiB, PDMA_CU_MEMORYTYPE_DEVICE, 0);
	assert_int_equal(pdma_mem_cuda_ops.pin(cu, 0x7f0000000000ull, MiB, NULL, NULL, &p), 0);
	assert_int_equal(pdma_cuda_pin_info(p, &pi), 0);
	assert_int_equal(pi.kind, PDMA_CUDA_PIN_NVP2P);
	assert_int_equal(F.exports, 0);
	pdma_mem_cuda_ops.unpin(cu, p);
}

static void test_flush_rule(void **state)
{
	(void)state;
	/* Ordering OWNER (100): nothing to do. */
	assert_int_equal(pdma_cuda_flush_rdma_writes(cu, 0), 0);
	assert_int_equal(F.flushes, 0);
	assert_int_equal(pdma_cuda_flush_rdma_writes(cu, 1), -ENODEV);
	pdma_cuda_close(cu);
	/* Ordering NONE with a host flush: flush, in the device's context. */
	F.attr_order = 0;
	assert_int_equal(pdma_cuda_open(&cu), 0);
	assert_int_equal(pdma_cuda_flush_rdma_writes(cu, 0), 1);
	assert_int_equal(F.flushes, 1);
	assert_null(F.current);
	pdma_cuda_close(cu);
	/* Ordering NONE, no way to flush. */
	F.attr_flushopt = 0;
	assert_int_equal(pdma_cuda_open(&cu), 0);
	assert_int_equal(pdma_cuda_flush_rdma_writes(cu, 0), -EOPNOTSUPP);
	assert_int_equal(F.flushes, 1);
}

static void test_tag_check(void **state)
{
	uint64_t base = 0x7f0000000000ull;
	struct falloc *a = fadd(base, 2 * MiB, PDMA_CU_MEMORYTYPE_DEVICE, 0);
	uint64_t id = a->id;
	struct pdma_cuda_stats st;

	(void)state;
	assert_int_equal(pdma_cuda_tag_check(cu, base + 100, id), 0);
	a->live = 0; /* freed */
	assert_int_equal(pdma_cuda_tag_check(cu, base + 100, id), -ESTALE);
	fadd(base, 2 * MiB, PDMA_CU_MEMORYTYPE_DEVICE, 0); /* same address, new ID */
	assert_int_equal(pdma_cuda_tag_check(cu, base + 100, id), -ESTALE);
	assert_int_equal(pdma_cuda_tag_check(cu, base + 100, id + 1), 0);
	assert_int_equal(pdma_cuda_tag_check(cu, base, 0), -ESTALE);
	pdma_cuda_get_stats(cu, &st);
	assert_int_equal(st.tag_stale, 3);
}

static void test_release_lockout(void **state)
{
	uint64_t base = 0x7f0000000000ull;
	struct pdma_cuda_release rel;
	struct pdma_cuda_stats st;
	void *p = NULL;
	int fds = F.exports;

	(void)state;
	fadd(base, 4 * MiB, PDMA_CU_MEMORYTYPE_DEVICE, 0);
	/* While a release of the memory is in progress, no pin of it. */
	pdma_cuda_release_begin(&rel, base, 4 * MiB);
	assert_int_equal(pdma_mem_cuda_ops.pin(cu, base + MiB, MiB, NULL, NULL, &p), -EFAULT);
	assert_null(p);
	pdma_cuda_release_end(&rel);
	/* Other memory is not held up by it; after the end, pins work again. */
	assert_int_equal(pdma_mem_cuda_ops.pin(cu, base + MiB, MiB, NULL, NULL, &p), 0);
	pdma_mem_cuda_ops.unpin(cu, p);
	/* A free that lands while the pin is in progress (another allocation:
	 * SYNC_MEMOPS not set yet) fails the pin, and leaks nothing. */
	base += 8 * MiB;
	fadd(base, 4 * MiB, PDMA_CU_MEMORYTYPE_DEVICE, 0);
	F.free_during_setattr = 1;
	p = NULL;
	assert_int_equal(pdma_mem_cuda_ops.pin(cu, base, MiB, NULL, NULL, &p), -EFAULT);
	F.free_during_setattr = 0;
	assert_null(p);
	assert_non_null(strstr(pdma_cuda_last_error(), "freed while it was being pinned"));
	pdma_cuda_get_stats(cu, &st);
	assert_int_equal(st.pins, 1);
	assert_int_equal(st.unpins, 1);
	/* Exports: the locked-out pin's (closed again) and the good pin's; the
	 * racing pin's export failed in the driver. */
	assert_int_equal(F.exports, fds + 2);
	/* The same without dma-buf (nothing else asks the driver after the
	 * free): the pin's end sees the release and fails it. */
	base += 8 * MiB;
	fadd(base, 4 * MiB, PDMA_CU_MEMORYTYPE_DEVICE, 0);
	setenv("PEERDMA_CUDA_DMABUF", "0", 1);
	F.free_during_setattr = 1;
	assert_int_equal(pdma_mem_cuda_ops.pin(cu, base, MiB, NULL, NULL, &p), -EFAULT);
	F.free_during_setattr = 0;
	unsetenv("PEERDMA_CUDA_DMABUF");
	assert_null(p);
	pdma_cuda_get_stats(cu, &st);
	assert_int_equal(st.pins, 1);
	/* Freed now: a new pin is refused by the driver's answer. */
	assert_int_equal(pdma_mem_cuda_ops.pin(cu, base, MiB, NULL, NULL, &p), -EFAULT);
}

static void test_close_with_live_pin(void **state)
{
	uint64_t base = 0x7f0000000000ull;
	struct pdma_cuda_pin_info pi;
	void *p = NULL;

	(void)state;
	fadd(base, MiB, PDMA_CU_MEMORYTYPE_DEVICE, 0);
	assert_int_equal(pdma_mem_cuda_ops.pin(cu, base, MiB, NULL, NULL, &p), 0);
	/* The backend closes first (a cache may release its regions later):
	 * the pin keeps it, and the device's primary context, until unpin. */
	pdma_cuda_close(cu);
	cu = NULL;
	assert_int_equal(F.retained, 1);
	assert_int_equal(pdma_cuda_pin_info(p, &pi), 0);
	assert_true(pi.dmabuf_fd >= 0);
	pdma_mem_cuda_ops.unpin(NULL, p);
	assert_false(fd_open(pi.dmabuf_fd));
	assert_int_equal(F.retained, 0);
}

static char log_msg[512];
static int log_level;

static void log_fn(void *arg, int level, const char *msg)
{
	*(int *)arg += 1;
	log_level = level;
	snprintf(log_msg, sizeof(log_msg), "%s", msg);
}


static void test_log_routing(void **state)
{
	struct pdma_mem_alloc al;
	int calls = 0;

	(void)state;
	fadd(0x7f1000000000ull, MiB, PDMA_CU_MEMORYTYPE_DEVICE, 1);
	pdma_cuda_set_log(cu, log_fn, &calls);
	assert_int_equal(pdma_mem_cuda_ops.query(cu, 0x7f1000000000ull, 64, &al), -EINVAL);
	assert_int_equal(calls, 1);
	assert_int_equal(log_level, 3);
	assert_non_null(strstr(log_msg, "managed"));
	assert_string_equal(log_msg, pdma_cuda_last_error());
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_device_info, setup, teardown),
		cmocka_unit_test_setup_teardown(test_classify_kinds, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pin_dmabuf_sync_once, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pin_allocation_end, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pin_nvp2p, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pin_device_without_dmabuf, setup_no_dmabuf, teardown),
		cmocka_unit_test_setup_teardown(test_flush_rule, setup, teardown),
		cmocka_unit_test_setup_teardown(test_tag_check, setup, teardown),
		cmocka_unit_test_setup_teardown(test_release_lockout, setup, teardown),
		cmocka_unit_test_setup_teardown(test_close_with_live_pin, setup, teardown),
		cmocka_unit_test_setup_teardown(test_log_routing, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
