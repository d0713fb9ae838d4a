// SPDX-License-Identifier: MIT
/*
 * The cuda backend without a GPU: the loader's clean failures, and the whole
 * backend (classification, managed refusal, SYNC_MEMOPS once per allocation,
 * 64 KiB rounding, dma-buf export and its fd's life, the nv-p2p fallback, the
 * flush rule, tag checks, host registration, the deallocation hooks and their
 * order) against a fake driver table injected with pdma_cu_set_api_for_testing.
 * The real driver is exercised by tests/gpu/test_cuda.c.
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

#include "cache.h"
#include "cuda_api.h"
#include "domain.h"
#include "mem_cuda.h"
#include "monitor.h"
#include "region.h"

/* The interposed entry points (lib/monitor_cuda.c). */
pdma_cu_result cuMemFree_v2(pdma_cu_ptr dptr);
pdma_cu_result cuMemHostUnregister(void *p);
pdma_cu_result cuMemUnmap(pdma_cu_ptr ptr, size_t size);
pdma_cu_result cuCtxDestroy_v2(pdma_cu_ctx ctx);

#define KiB 1024u
#define MiB (1024u * 1024u)

/* ------------------------------------------------------ the fake driver */

struct falloc {
	uint64_t base;
	size_t size;
	uint64_t id;
	int type;     /* PDMA_CU_MEMORYTYPE_* */
	int managed;
	int sync;
	pdma_cu_ctx ctx;
	int live;
};

static struct fake {
	struct falloc a[32];
	uint64_t next_id;
	int ndev;
	int attr_gdr, attr_dmabuf, attr_order, attr_flushopt;
	int retained, pushes, pops;
	pdma_cu_ctx current;
	int set_sync_calls, exports, flushes, host_regs, host_unregs, frees;
	int notified;               /* monitor notifications seen */
	int notified_before_free;   /* at the last free: was the monitor told first? */
	int revoked_before_free;
	int revokes;
	int export_strict;          /* refuse exports past the allocation's size */
	unsigned int last_nattrs;   /* attributes asked in the last cuPointerGetAttributes */
	int free_during_setattr;    /* a concurrent free lands in the middle of a pin */
	int attr_calls;             /* pointer attribute queries */
} F;

static struct falloc *ffind(uint64_t p)
{
	for (int i = 0; i < 32; i++)
		if (F.a[i].live && p >= F.a[i].base && p < F.a[i].base + F.a[i].size)
			return &F.a[i];
	return NULL;
}

static struct falloc *fadd(uint64_t base, size_t size, int type, int managed)
{
	for (int i = 0; i < 32; i++) {
		if (!F.a[i].live) {
			F.a[i] = (struct falloc){ base, size, ++F.next_id, type, managed, 0,
						  F.current, 1 };
			return &F.a[i];
		}
	}
	fail();
	return NULL;
}

static pdma_cu_result f_init(unsigned int flags)
{
	(void)flags;
	return 0;
}
static pdma_cu_result f_version(int *v)
{
	*v = 13000;
	return 0;
}
static pdma_cu_result f_errname(pdma_cu_result e, const char **s)
{
	*s = e == 1 ? "CUDA_ERROR_INVALID_VALUE" : "CUDA_ERROR_FAKE";
	return 0;
}
static pdma_cu_result f_count(int *n)
{
	*n = F.ndev;
	return 0;
}
static pdma_cu_result f_name(char *n, int len, pdma_cu_device d)
{
	snprintf(n, (size_t)len, "Fake GPU %d", d);
	return 0;
}
static pdma_cu_result f_busid(char *n, int len, pdma_cu_device d)
{
	snprintf(n, (size_t)len, "0000:3B:%02X.0", d);
	return 0;
}
static pdma_cu_result f_attr(int *v, int a, pdma_cu_device d)
{
	(void)d;
	switch (a) {
	case PDMA_CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED: *v = F.attr_gdr; break;
	case PDMA_CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED: *v = F.attr_dmabuf; break;
	case PDMA_CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING: *v = F.attr_order; break;
	case PDMA_CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS: *v = F.attr_flushopt; break;
	case PDMA_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = 9; break;
	default: *v = 0;
	}
	return 0;
}
static pdma_cu_result f_retain(pdma_cu_ctx *c, pdma_cu_device d)
{
	*c = (pdma_cu_ctx)(uintptr_t)(0x1000 + d);
	F.retained++;
	return 0;
}
static pdma_cu_result f_release(pdma_cu_device d)
{
	(void)d;
	F.retained--;
	return 0;
}
static pdma_cu_result f_getcur(pdma_cu_ctx *c)
{
	*c = F.current;
	return 0;
}
static pdma_cu_result f_setcur(pdma_cu_ctx c)
{
	F.current = c;
	return 0;
}
static pdma_cu_result f_push(pdma_cu_ctx c)
{
	F.pushes++;
	F.current = c;
	return 0;
}
static pdma_cu_result f_pop(pdma_cu_ctx *c)
{
	F.pops++;
	*c = F.current;
	F.current = NULL;
	return 0;
}

static void fill_attr(struct falloc *a, int attr, void *data)
{
	switch (attr) {
	case PDMA_CU_POINTER_ATTRIBUTE_MEMORY_TYPE: *(unsigned int *)data = a ? (unsigned)a->type : 0; break;
	case PDMA_CU_POINTER_ATTRIBUTE_IS_MANAGED: *(unsigned int *)data = a ? (unsigned)a->managed : 0; break;
	case PDMA_CU_POINTER_ATTRIBUTE_BUFFER_ID: *(unsigned long long *)data = a ? a->id : 0; break;
	case PDMA_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
		*(int *)data = a && a->type == PDMA_CU_MEMORYTYPE_DEVICE ? 0 : -2;
		break;
	case PDMA_CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: *(unsigned int *)data = a ? (unsigned)a->sync : 0; break;
	case PDMA_CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(pdma_cu_ptr *)data = a ? a->base : 0; break;
	case PDMA_CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data = a ? a->size : 0; break;
	case PDMA_CU_POINTER_ATTRIBUTE_CONTEXT: *(pdma_cu_ctx *)data = a ? a->ctx : NULL; break;
	default: fail_msg("attribute %d not faked", attr);
	}
}

static pdma_cu_result f_getattrs(unsigned int n, int *attrs, void **data, pdma_cu_ptr p)
{
	struct falloc *a = ffind(p);

	F.last_nattrs = n;
	F.attr_calls++;
	for (unsigned int i = 0; i < n; i++)
		fill_attr(a, attrs[i], data[i]);
	return 0;
}
static pdma_cu_result f_getattr(void *data, int attr, pdma_cu_ptr p)
{
	struct falloc *a = ffind(p);

	F.attr_calls++;
	if (!a)
		return PDMA_CU_ERROR_INVALID_VALUE;
	fill_attr(a, attr, data);
	return 0;
}
static pdma_cu_result f_setattr(const void *v, int attr, pdma_cu_ptr p)
{
	struct falloc *a = ffind(p);

	if (!a || attr != PDMA_CU_POINTER_ATTRIBUTE_SYNC_MEMOPS || *(const unsigned int *)v != 1)
		return PDMA_CU_ERROR_INVALID_VALUE;
	a->sync = 1;
	F.set_sync_calls++;
	if (F.free_during_setattr) {
		/* Another thread's cuMemFree, between classification and the
		 * end of the pin: the hook's start, the driver's free, the end. */
		struct pdma_cuda_release rel;

		pdma_cuda_release_begin(&rel, a->base, a->size);
		a->live = 0;
		pdma_cuda_release_end(&rel);
	}
	return 0;
}
static pdma_cu_result f_range(pdma_cu_ptr *b, size_t *s, pdma_cu_ptr p)
{
	struct falloc *a = ffind(p);

	if (!a)
		return PDMA_CU_ERROR_NOT_FOUND;
	*b = a->base;
	*s = a->size;
	return 0;
}
static pdma_cu_result f_export(void *h, pdma_cu_ptr p, size_t size, int type,
			       unsigned long long flags)
{
	struct falloc *a = ffind(p);
	uint64_t end;

	if (!a || type != PDMA_CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD || flags || (p | size) & 4095)
		return PDMA_CU_ERROR_INVALID_VALUE;
	end = F.export_strict ? (a->base + a->size + 4095) & ~4095ull
			      : (a->base + a->size + 65535) & ~65535ull;
	if (p + size > end)
		return PDMA_CU_ERROR_INVALID_VALUE;
	if (!F.current)
		return PDMA_CU_ERROR_INVALID_CONTEXT;
	*(int *)h = open("/dev/null", O_RDONLY | O_CLOEXEC);
	F.exports++;
	return 0;
}
static pdma_cu_result f_hostreg(void *p, size_t size, unsigned int flags)
{
	if (ffind((uintptr_t)p))
		return PDMA_CU_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
	if (flags != (PDMA_CU_MEMHOSTREGISTER_PORTABLE | PDMA_CU_MEMHOSTREGISTER_DEVICEMAP))
		return PDMA_CU_ERROR_INVALID_VALUE;
	fadd((uintptr_t)p, size, PDMA_CU_MEMORYTYPE_HOST, 0);
	F.host_regs++;
	return 0;
}
static pdma_cu_result f_hostunreg(void *p)
{
	struct falloc *a = ffind((uintptr_t)p);

	if (!a || a->base != (uintptr_t)p)
		return PDMA_CU_ERROR_HOST_MEMORY_NOT_REGISTERED;
	a->live = 0;
	F.host_unregs++;
	return 0;
}
static pdma_cu_result f_flush(int target, int scope)
{
	if (target != 0 || scope != 100 || !F.current)
		return PDMA_CU_ERROR_INVALID_VALUE;
	F.flushes++;
	return 0;
}
static pdma_cu_result f_free(pdma_cu_ptr p)
{
	struct falloc *a = ffind(p);

	if (!a || a->base != p || a->type != PDMA_CU_MEMORYTYPE_DEVICE)
		return PDMA_CU_ERROR_INVALID_VALUE;
	F.notified_before_free = F.notified;
	F.revoked_before_free = F.revokes;
	a->live = 0;
	F.frees++;
	return 0;
}
static pdma_cu_result f_unmap(pdma_cu_ptr p, size_t size)
{
	(void)size;
	F.notified_before_free = F.notified;
	return ffind(p) ? 0 : PDMA_CU_ERROR_INVALID_VALUE;
}
static pdma_cu_result f_ctxdestroy(pdma_cu_ctx c)
{
	F.revoked_before_free = F.revokes;
	for (int i = 0; i < 32; i++)
		if (F.a[i].live && F.a[i].ctx == c)
			F.a[i].live = 0;
	return 0;
}

static struct pdma_cu_api fake_api = {
	.Init = f_init,
	.DriverGetVersion = f_version,
	.GetErrorName = f_errname,
	.GetErrorString = f_errname,
	.DeviceGetCount = f_count,
	.DeviceGetName = f_name,
	.DeviceGetPCIBusId = f_busid,
	.DeviceGetAttribute = f_attr,
	.DevicePrimaryCtxRetain = f_retain,
	.DevicePrimaryCtxRelease = f_release,
	.CtxGetCurrent = f_getcur,
	.CtxSetCurrent = f_setcur,
	.CtxPushCurrent = f_push,
	.CtxPopCurrent = f_pop,
	.PointerGetAttribute = f_getattr,
	.PointerGetAttributes = f_getattrs,
	.PointerSetAttribute = f_setattr,
	.MemGetAddressRange = f_range,
	.MemGetHandleForAddressRange = f_export,
	.MemHostRegister = f_hostreg,
	.MemHostUnregister = f_hostunreg,
	.FlushGPUDirectRDMAWrites = f_flush,
	.MemFree = f_free,
	.MemUnmap = f_unmap,
	.CtxDestroy = f_ctxdestroy,
};

static struct pdma_cuda *cu;

static int setup(void **state)
{
	(void)state;
	memset(&F, 0, sizeof(F));
	F.ndev = 1;
	F.attr_gdr = 1;
	F.attr_dmabuf = 1;
	F.attr_order = 100;
	F.attr_flushopt = 1;
	fake_api.driver_version = 13000;
	pdma_cu_set_api_for_testing(&fake_api);
	unsetenv("PEERDMA_CUDA_DMABUF");
	unsetenv("PEERDMA_CUDA_MONITOR");
	return pdma_cuda_open(&cu);
}

static int teardown(void **state)
{
	(void)state;
	pdma_cuda_close(cu);
	cu = NULL;
	assert_int_equal(F.retained, 0);
	pdma_cu_set_api_for_testing(NULL);
	return 0;
}

static int fd_open(int fd)
{
	return fcntl(fd, F_GETFD) != -1;
}

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

static int setup_no_dmabuf(void **state)
{
	int r = setup(state);

	pdma_cuda_close(cu);
	F.attr_dmabuf = 0;
	return r ? r : pdma_cuda_open(&cu);
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

/* ------------------------------------------------------------------ hooks */

static uint64_t notified_addr;
static size_t notified_len;

static void on_notify(void *arg, enum pdma_hmem_iface iface, uint64_t addr, size_t len)
{
	(void)arg;
	assert_int_equal(iface, PDMA_HMEM_CUDA);
	F.notified++;
	notified_addr = addr;
	notified_len = len;
}

static void on_revoke(void *arg)
{
	(void)arg;
	F.revokes++;
}

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
		cmocka_unit_test(test_loader_missing_library),
		cmocka_unit_test(test_domain_cache_mode),
		cmocka_unit_test(test_loader_not_a_driver),
		cmocka_unit_test(test_open_without_driver),
		cmocka_unit_test(test_open_no_device),
		cmocka_unit_test(test_errno_map),
		cmocka_unit_test_setup_teardown(test_device_info, setup, teardown),
		cmocka_unit_test_setup_teardown(test_classify_kinds, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pin_dmabuf_sync_once, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pin_allocation_end, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pin_nvp2p, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pin_device_without_dmabuf, setup_no_dmabuf,
						teardown),
		cmocka_unit_test_setup_teardown(test_flush_rule, setup, teardown),
		cmocka_unit_test_setup_teardown(test_tag_check, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hooks_free_order, setup, teardown),
		cmocka_unit_test_setup_teardown(test_release_lockout, setup, teardown),
		cmocka_unit_test_setup_teardown(test_close_with_live_pin, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hooks_region_and_context, setup, teardown),
		cmocka_unit_test_setup_teardown(test_mr_cached_hooks, setup, teardown),
		cmocka_unit_test_setup_teardown(test_host_pins, setup, teardown),
		cmocka_unit_test_setup_teardown(test_log_routing, setup, teardown),
		cmocka_unit_test(test_monitor_mode),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
