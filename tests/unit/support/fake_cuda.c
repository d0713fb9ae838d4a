// SPDX-License-Identifier: MIT
/* The fake CUDA driver of the cuda backend's unit tests (fake_cuda.h). */
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

struct fake F;


struct falloc *ffind(uint64_t p)
{
	for (int i = 0; i < 32; i++)
		if (F.a[i].live && p >= F.a[i].base && p < F.a[i].base + F.a[i].size)
			return &F.a[i];
	return NULL;
}

struct falloc *fadd(uint64_t base, size_t size, int type, int managed)
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
	F.attrs_asked += (int)n;
	for (unsigned int i = 0; i < n; i++)
		fill_attr(a, attrs[i], data[i]);
	return 0;
}
static pdma_cu_result f_getattr(void *data, int attr, pdma_cu_ptr p)
{
	struct falloc *a = ffind(p);

	F.attr_calls++;
	F.attrs_asked++;
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
	int n = 0;

	F.notified_before_free = F.notified;
	for (int i = 0; i < 32; i++) {
		struct falloc *a = &F.a[i];

		if (a->live && a->base < p + size && p < a->base + a->size) {
			a->live = 0;
			n++;
		}
	}
	F.unmaps += n;
	return n ? 0 : PDMA_CU_ERROR_INVALID_VALUE;
}
static pdma_cu_result f_memalloc(pdma_cu_ptr *p, size_t size)
{
	struct falloc *a = fadd(F.alloc_at, size, PDMA_CU_MEMORYTYPE_DEVICE, 0);

	*p = a->base;
	return 0;
}

struct falloc *fake_vmm_map(uint64_t va, size_t size)
{
	return fadd(va, size, PDMA_CU_MEMORYTYPE_DEVICE, 0);
}

pdma_cu_ipc_mem_handle fake_ipc_handle(const struct falloc *a)
{
	pdma_cu_ipc_mem_handle h;

	memset(&h, 0, sizeof(h));
	memcpy(h.reserved, &a->size, sizeof(a->size));
	return h;
}

static pdma_cu_result f_ipcopen(pdma_cu_ptr *p, pdma_cu_ipc_mem_handle h, unsigned int flags)
{
	size_t size;

	if (flags != PDMA_CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
		return PDMA_CU_ERROR_INVALID_VALUE;
	memcpy(&size, h.reserved, sizeof(size));
	/* The importer's mapping: its own range and buffer ID in this process. */
	*p = fadd(F.alloc_at, size, PDMA_CU_MEMORYTYPE_DEVICE, 0)->base;
	F.ipc_opens++;
	return 0;
}
static pdma_cu_result f_ipcclose(pdma_cu_ptr p)
{
	struct falloc *a = ffind(p);

	if (!a || a->base != p)
		return PDMA_CU_ERROR_INVALID_VALUE;
	a->live = 0;
	F.ipc_closes++;
	return 0;
}
static pdma_cu_result f_ctxdestroy(pdma_cu_ctx c)
{
	F.revoked_before_free = F.revokes;
	for (int i = 0; i < 32; i++)
		if (F.a[i].live && F.a[i].ctx == c)
			F.a[i].live = 0;
	return 0;
}

struct pdma_cu_api fake_api = {
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
	.MemAlloc = f_memalloc,
	.MemFree = f_free,
	.MemUnmap = f_unmap,
	.IpcOpenMemHandle = f_ipcopen,
	.IpcCloseMemHandle = f_ipcclose,
	.CtxDestroy = f_ctxdestroy,
};

struct pdma_cuda *cu;

int setup(void **state)
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

int teardown(void **state)
{
	(void)state;
	pdma_cuda_close(cu);
	cu = NULL;
	assert_int_equal(F.retained, 0);
	pdma_cu_set_api_for_testing(NULL);
	return 0;
}

int fd_open(int fd)
{
	return fcntl(fd, F_GETFD) != -1;
}

int setup_no_dmabuf(void **state)
{
	int r = setup(state);

	pdma_cuda_close(cu);
	F.attr_dmabuf = 0;
	return r ? r : pdma_cuda_open(&cu);
}

uint64_t notified_addr;
size_t notified_len;

void on_notify(void *arg, enum pdma_hmem_iface iface, uint64_t addr, size_t len)
{
	(void)arg;
	assert_int_equal(iface, PDMA_HMEM_CUDA);
	F.notified++;
	notified_addr = addr;
	notified_len = len;
}

void on_revoke(void *arg)
{
	(void)arg;
	F.revokes++;
}

