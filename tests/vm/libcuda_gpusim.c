// SPDX-License-Identifier: MIT
/*
 * libcuda-gpusim.so: the CUDA driver API over /dev/gpusim (kernel/test/, the
 * GPU stand-in backed by QEMU's ivshmem BAR), so that libpeerdma's real CUDA
 * backend (lib/mem/cuda*.c, loaded through lib/cuda/loader.c exactly as
 * libcuda.so.1 is: PEERDMA_LIBCUDA=/path/libcuda-gpusim.so) runs in the test
 * guest. One device, one (primary) context. It implements every entry point
 * loader.c requires, and of the optional ones those GPU memory needs:
 *
 *  cuMemAlloc/cuMemFree       GPUSIM_IOC_ALLOC/FREE. The module frees with the
 *                             nv-p2p free callbacks and dma-buf revocation, as
 *                             cuMemFree does. The virtual address is the
 *                             module's (GPUSIM_VA_BASE + BAR offset): a freed
 *                             address comes back for the next allocation of
 *                             that place, with a new BUFFER_ID (a process-local
 *                             counter, never reused) as on a real GPU.
 *  cuPointerGetAttribute(s)   memory type DEVICE, BUFFER_ID, RANGE_START_ADDR/
 *                             SIZE, CONTEXT, DEVICE_ORDINAL 0, SYNC_MEMOPS,
 *                             IS_MANAGED 0; host memory registered or allocated
 *                             here: HOST; anything else: cuPointerGetAttributes
 *                             answers zeros, cuPointerGetAttribute
 *                             CUDA_ERROR_INVALID_VALUE (the driver's answers).
 *  cuMemGetHandleForAddressRange  a dma-buf fd from GPUSIM_IOC_EXPORT.
 *  cuMemcpyHtoD/DtoH, cuMemsetD8  through mmap(/dev/gpusim, bar_off): the CPU
 *                             writes the BAR, so the bytes land in the host's
 *                             ivshmem file.
 *  device attributes          DMA_BUF_SUPPORTED 1, GPU_DIRECT_RDMA_SUPPORTED 1,
 *                             writes ordering OWNER (BAR memory is coherent:
 *                             no flush is needed), compute capability 9.0.
 *
 * State is process-wide, as the driver's is: the allocations of this process,
 * under one mutex. The current context is per thread (a small stack).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cuda/api.h"
#include "gpusim_uapi.h"

#define EXPORT __attribute__((visibility("default")))
#define CTX_DEPTH 8

struct galloc {
	struct galloc *next;
	uint64_t va;
	size_t size;      /* asked for (RANGE_SIZE) */
	size_t len;       /* the module's: whole 64 KiB pages */
	uint64_t bar_off;
	uint64_t buffer_id;
	unsigned int sync_memops;
	void *cpu;        /* mmap of the BAR range, made at the first copy */
	int host;         /* host memory: registered or cuMemAllocHost'd */
	int host_owned;   /* cuMemAllocHost: ours to free */
};

static struct {
	pthread_mutex_t lock;
	int fd;
	int inited;
	uint64_t next_id;
	struct galloc *allocs;
	int primary_refs;
} G = { .lock = PTHREAD_MUTEX_INITIALIZER, .fd = -1 };

/* The one context; only its address matters to callers. */
static struct pdma_cu_ctx_st {
	int dev;
} primary_ctx;

static _Thread_local pdma_cu_ctx ctx_stack[CTX_DEPTH];
static _Thread_local int ctx_depth;

static const struct {
	pdma_cu_result r;
	const char *name, *text;
} errs[] = {
	{ PDMA_CU_SUCCESS, "CUDA_SUCCESS", "no error" },
	{ PDMA_CU_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument" },
	{ PDMA_CU_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory" },
	{ PDMA_CU_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error" },
	{ PDMA_CU_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected" },
	{ PDMA_CU_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal" },
	{ PDMA_CU_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context" },
	{ PDMA_CU_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
	  "part or all of the requested memory range is already mapped" },
	{ PDMA_CU_ERROR_HOST_MEMORY_NOT_REGISTERED, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
	  "pointer does not correspond to a registered memory region" },
	{ PDMA_CU_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted" },
	{ PDMA_CU_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported" },
};

EXPORT pdma_cu_result cuGetErrorName(pdma_cu_result e, const char **s)
{
	for (size_t i = 0; i < sizeof(errs) / sizeof(errs[0]); i++)
		if (errs[i].r == e) {
			*s = errs[i].name;
			return PDMA_CU_SUCCESS;
		}
	*s = NULL;
	return PDMA_CU_ERROR_INVALID_VALUE;
}

EXPORT pdma_cu_result cuGetErrorString(pdma_cu_result e, const char **s)
{
	for (size_t i = 0; i < sizeof(errs) / sizeof(errs[0]); i++)
		if (errs[i].r == e) {
			*s = errs[i].text;
			return PDMA_CU_SUCCESS;
		}
	*s = NULL;
	return PDMA_CU_ERROR_INVALID_VALUE;
}

EXPORT pdma_cu_result cuInit(unsigned int flags)
{
	pdma_cu_result r = PDMA_CU_SUCCESS;

	if (flags)
		return PDMA_CU_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&G.lock);
	if (!G.inited) {
		G.fd = open(GPUSIM_DEVICE, O_RDWR | O_CLOEXEC);
		if (G.fd < 0)
			r = PDMA_CU_ERROR_NO_DEVICE;
		else
			G.inited = 1;
	}
	pthread_mutex_unlock(&G.lock);
	return r;
}

EXPORT pdma_cu_result cuDriverGetVersion(int *v)
{
	if (!v)
		return PDMA_CU_ERROR_INVALID_VALUE;
	*v = 12040;
	return PDMA_CU_SUCCESS;
}

#define NEED_INIT()                                   \
	do {                                          \
		if (!G.inited)                        \
			return PDMA_CU_ERROR_NOT_INITIALIZED; \
	} while (0)

EXPORT pdma_cu_result cuDeviceGetCount(int *n)
{
	NEED_INIT();
	if (!n)
		return PDMA_CU_ERROR_INVALID_VALUE;
	*n = 1;
	return PDMA_CU_SUCCESS;
}

EXPORT pdma_cu_result cuDeviceGet(pdma_cu_device *dev, int ordinal)
{
	NEED_INIT();
	if (!dev)
		return PDMA_CU_ERROR_INVALID_VALUE;
	if (ordinal != 0)
		return PDMA_CU_ERROR_INVALID_DEVICE;
	*dev = 0;
	return PDMA_CU_SUCCESS;
}

EXPORT pdma_cu_result cuDeviceGetName(char *name, int len, pdma_cu_device dev)
{
	NEED_INIT();
	if (!name || len <= 0)
		return PDMA_CU_ERROR_INVALID_VALUE;
	if (dev != 0)
		return PDMA_CU_ERROR_INVALID_DEVICE;
	snprintf(name, (size_t)len, "gpusim (ivshmem BAR2)");
	return PDMA_CU_SUCCESS;
}

/* Does sysfs file base/dev/attr start with want? */
static int sysfs_is(const char *base, const char *dev, const char *attr, const char *want)
{
	char path[320], v[16] = "";
	FILE *f;
	int ok;

	snprintf(path, sizeof(path), "%s/%s/%s", base, dev, attr);
	f = fopen(path, "r");
	if (!f)
		return 0;
	ok = fgets(v, sizeof(v), f) && !strncmp(v, want, strlen(want));
	fclose(f);
	return ok;
}

/* The ivshmem device (1af4:1110) whose BAR gpusim hands out, from sysfs. */
EXPORT pdma_cu_result cuDeviceGetPCIBusId(char *bus, int len, pdma_cu_device dev)
{
	static const char *base = "/sys/bus/pci/devices";
	const char *found = "0000:00:00.0";
	char name[256] = "";
	struct dirent *e;
	DIR *d;

	NEED_INIT();
	if (!bus || len <= 0)
		return PDMA_CU_ERROR_INVALID_VALUE;
	if (dev != 0)
		return PDMA_CU_ERROR_INVALID_DEVICE;
	d = opendir(base);
	while (d && (e = readdir(d)))
		if (e->d_name[0] != '.' && sysfs_is(base, e->d_name, "vendor", "0x1af4") &&
		    sysfs_is(base, e->d_name, "device", "0x1110")) {
			snprintf(name, sizeof(name), "%s", e->d_name);
			break;
		}
	if (d)
		closedir(d);
	snprintf(bus, (size_t)len, "%s", name[0] ? name : found);
	return PDMA_CU_SUCCESS;
}

EXPORT pdma_cu_result cuDeviceGetAttribute(int *v, int attr, pdma_cu_device dev)
{
	NEED_INIT();
	if (!v)
		return PDMA_CU_ERROR_INVALID_VALUE;
	if (dev != 0)
		return PDMA_CU_ERROR_INVALID_DEVICE;
	switch (attr) {
	case PDMA_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = 9; break;
	case PDMA_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = 0; break;
	case PDMA_CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED: *v = 1; break;
	case PDMA_CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED: *v = 1; break;
	case PDMA_CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING:
		*v = PDMA_CU_GPU_DIRECT_RDMA_WRITES_ORDERING_OWNER;
		break;
	case PDMA_CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS: *v = 0; break;
	case PDMA_CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED: *v = 0; break;
	case PDMA_CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *v = 1; break;
	case PDMA_CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED: *v = 1; break;
	default: *v = 0; break;
	}
	return PDMA_CU_SUCCESS;
}

EXPORT pdma_cu_result cuDevicePrimaryCtxRetain(pdma_cu_ctx *ctx, pdma_cu_device dev)
{
	NEED_INIT();
	if (!ctx)
		return PDMA_CU_ERROR_INVALID_VALUE;
	if (dev != 0)
		return PDMA_CU_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&G.lock);
	G.primary_refs++;
	pthread_mutex_unlock(&G.lock);
	*ctx = &primary_ctx;
	return PDMA_CU_SUCCESS;
}

EXPORT pdma_cu_result cuDevicePrimaryCtxRelease_v2(pdma_cu_device dev)
{
	pdma_cu_result r = PDMA_CU_SUCCESS;

	NEED_INIT();
	if (dev != 0)
		return PDMA_CU_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&G.lock);
	if (G.primary_refs > 0)
		G.primary_refs--;
	else
		r = PDMA_CU_ERROR_INVALID_CONTEXT;
	pthread_mutex_unlock(&G.lock);
	return r;
}

EXPORT pdma_cu_result cuCtxGetCurrent(pdma_cu_ctx *ctx)
{
	NEED_INIT();
	if (!ctx)
		return PDMA_CU_ERROR_INVALID_VALUE;
	*ctx = ctx_depth ? ctx_stack[ctx_depth - 1] : NULL;
	return PDMA_CU_SUCCESS;
}

EXPORT pdma_cu_result cuCtxSetCurrent(pdma_cu_ctx ctx)
{
	NEED_INIT();
	if (ctx && ctx != &primary_ctx)
		return PDMA_CU_ERROR_INVALID_CONTEXT;
	if (!ctx) {
		if (ctx_depth)
			ctx_depth--;
		return PDMA_CU_SUCCESS;
	}
	if (!ctx_depth)
		ctx_depth = 1;
	ctx_stack[ctx_depth - 1] = ctx;
	return PDMA_CU_SUCCESS;
}

EXPORT pdma_cu_result cuCtxPushCurrent_v2(pdma_cu_ctx ctx)
{
	NEED_INIT();
	if (ctx != &primary_ctx)
		return PDMA_CU_ERROR_INVALID_CONTEXT;
	if (ctx_depth == CTX_DEPTH)
		return PDMA_CU_ERROR_OUT_OF_MEMORY;
	ctx_stack[ctx_depth++] = ctx;
	return PDMA_CU_SUCCESS;
}

EXPORT pdma_cu_result cuCtxPopCurrent_v2(pdma_cu_ctx *ctx)
{
	NEED_INIT();
	if (!ctx_depth)
		return PDMA_CU_ERROR_INVALID_CONTEXT;
	ctx_depth--;
	if (ctx)
		*ctx = ctx_stack[ctx_depth];
	return PDMA_CU_SUCCESS;
}

EXPORT pdma_cu_result cuCtxSynchronize(void)
{
	NEED_INIT();
	return PDMA_CU_SUCCESS; /* copies are synchronous: nothing in flight */
}

EXPORT pdma_cu_result cuCtxDestroy_v2(pdma_cu_ctx ctx)
{
	NEED_INIT();
	/* Only the primary context exists, and it is not destroyed this way. */
	return ctx == &primary_ctx ? PDMA_CU_ERROR_INVALID_CONTEXT : PDMA_CU_ERROR_INVALID_VALUE;
}

/* Under G.lock: the allocation containing [p, p + n) (n 0: just p). */
static struct galloc *find(uint64_t p, size_t n)
{
	for (struct galloc *a = G.allocs; a; a = a->next) {
		size_t lim = a->host ? a->size : a->len;

		if (p >= a->va && p - a->va < lim && n <= lim - (p - a->va))
			return a;
	}
	return NULL;
}

static void attr_value(const struct galloc *a, int attr, void *data)
{
	switch (attr) {
	case PDMA_CU_POINTER_ATTRIBUTE_CONTEXT:
		*(void **)data = a ? (void *)&primary_ctx : NULL;
		break;
	case PDMA_CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
		*(unsigned int *)data = !a ? 0 : a->host ? PDMA_CU_MEMORYTYPE_HOST
							: PDMA_CU_MEMORYTYPE_DEVICE;
		break;
	case PDMA_CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
		*(unsigned int *)data = a ? a->sync_memops : 0;
		break;
	case PDMA_CU_POINTER_ATTRIBUTE_BUFFER_ID:
		*(unsigned long long *)data = a ? a->buffer_id : 0;
		break;
	case PDMA_CU_POINTER_ATTRIBUTE_IS_MANAGED:
		*(unsigned int *)data = 0;
		break;
	case PDMA_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
		*(int *)data = a ? 0 : -2; /* the driver's "invalid" */
		break;
	case PDMA_CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
		*(pdma_cu_ptr *)data = a ? a->va : 0;
		break;
	case PDMA_CU_POINTER_ATTRIBUTE_RANGE_SIZE:
		*(size_t *)data = a ? a->size : 0;
		break;
	}
}

static int attr_known(int attr)
{
	switch (attr) {
	case PDMA_CU_POINTER_ATTRIBUTE_CONTEXT:
	case PDMA_CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
	case PDMA_CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
	case PDMA_CU_POINTER_ATTRIBUTE_BUFFER_ID:
	case PDMA_CU_POINTER_ATTRIBUTE_IS_MANAGED:
	case PDMA_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
	case PDMA_CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
	case PDMA_CU_POINTER_ATTRIBUTE_RANGE_SIZE:
		return 1;
	}
	return 0;
}

EXPORT pdma_cu_result cuPointerGetAttribute(void *data, int attr, pdma_cu_ptr p)
{
	struct galloc *a;

	NEED_INIT();
	if (!data || !attr_known(attr))
		return PDMA_CU_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&G.lock);
	a = find(p, 0);
	if (a)
		attr_value(a, attr, data);
	pthread_mutex_unlock(&G.lock);
	return a ? PDMA_CU_SUCCESS : PDMA_CU_ERROR_INVALID_VALUE;
}

EXPORT pdma_cu_result cuPointerGetAttributes(unsigned int n, int *attrs, void **data,
					      pdma_cu_ptr p)
{
	struct galloc *a;

	NEED_INIT();
	if (!attrs || !data)
		return PDMA_CU_ERROR_INVALID_VALUE;
	for (unsigned int i = 0; i < n; i++)
		if (!attr_known(attrs[i]) || !data[i])
			return PDMA_CU_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&G.lock);
	a = find(p, 0);
	for (unsigned int i = 0; i < n; i++)
		attr_value(a, attrs[i], data[i]);
	pthread_mutex_unlock(&G.lock);
	return PDMA_CU_SUCCESS;
}

EXPORT pdma_cu_result cuPointerSetAttribute(const void *value, int attr, pdma_cu_ptr p)
{
	struct galloc *a;

	NEED_INIT();
	if (!value || attr != PDMA_CU_POINTER_ATTRIBUTE_SYNC_MEMOPS)
		return PDMA_CU_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&G.lock);
	a = find(p, 0);
	if (a && !a->host)
		a->sync_memops = *(const unsigned int *)value != 0;
	pthread_mutex_unlock(&G.lock);
	return a && !a->host ? PDMA_CU_SUCCESS : PDMA_CU_ERROR_INVALID_VALUE;
}

EXPORT pdma_cu_result cuMemGetAddressRange_v2(pdma_cu_ptr *base, size_t *size, pdma_cu_ptr p)
{
	struct galloc *a;

	NEED_INIT();
	pthread_mutex_lock(&G.lock);
	a = find(p, 0);
	if (a && !a->host) {
		if (base)
			*base = a->va;
		if (size)
			*size = a->size;
	}
	pthread_mutex_unlock(&G.lock);
	return a && !a->host ? PDMA_CU_SUCCESS : PDMA_CU_ERROR_NOT_FOUND;
}

EXPORT pdma_cu_result cuMemGetHandleForAddressRange(void *handle, pdma_cu_ptr p, size_t size,
						     int type, unsigned long long flags)
{
	struct gpusim_export e = { .va = p, .len = size };

	NEED_INIT();
	if (!handle || type != PDMA_CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD || flags)
		return PDMA_CU_ERROR_INVALID_VALUE;
	if (ioctl(G.fd, GPUSIM_IOC_EXPORT, &e))
		return errno == ENOMEM ? PDMA_CU_ERROR_OUT_OF_MEMORY : PDMA_CU_ERROR_INVALID_VALUE;
	*(int *)handle = e.fd;
	return PDMA_CU_SUCCESS;
}

EXPORT pdma_cu_result cuMemAlloc_v2(pdma_cu_ptr *dptr, size_t size)
{
	struct gpusim_alloc req = { .size = size };
	struct galloc *a;

	NEED_INIT();
	if (!dptr || !size)
		return PDMA_CU_ERROR_INVALID_VALUE;
	a = calloc(1, sizeof(*a));
	if (!a)
		return PDMA_CU_ERROR_OUT_OF_MEMORY;
	if (ioctl(G.fd, GPUSIM_IOC_ALLOC, &req)) {
		free(a);
		return errno == EINVAL ? PDMA_CU_ERROR_INVALID_VALUE : PDMA_CU_ERROR_OUT_OF_MEMORY;
	}
	a->va = req.va;
	a->size = size;
	a->len = (size + GPUSIM_PAGE - 1) & ~(size_t)(GPUSIM_PAGE - 1);
	a->bar_off = req.bar_off;
	pthread_mutex_lock(&G.lock);
	a->buffer_id = ++G.next_id;
	a->next = G.allocs;
	G.allocs = a;
	pthread_mutex_unlock(&G.lock);
	*dptr = a->va;
	return PDMA_CU_SUCCESS;
}

/* Under G.lock: unlink the allocation that starts at p (host or not). */
static struct galloc *unlink_at(uint64_t p, int host)
{
	for (struct galloc **pp = &G.allocs; *pp; pp = &(*pp)->next) {
		struct galloc *a = *pp;

		if (a->va == p && a->host == host) {
			*pp = a->next;
			return a;
		}
	}
	return NULL;
}

EXPORT pdma_cu_result cuMemFree_v2(pdma_cu_ptr p)
{
	struct galloc *a;
	uint64_t va = p;
	int ret;

	NEED_INIT();
	pthread_mutex_lock(&G.lock);
	a = unlink_at(p, 0);
	pthread_mutex_unlock(&G.lock);
	if (!a)
		return PDMA_CU_ERROR_INVALID_VALUE;
	if (a->cpu)
		munmap(a->cpu, a->len);
	/* The module runs the nv-p2p free callbacks and revokes the exported
	 * dma-bufs before the BAR space can be handed out again. */
	ret = ioctl(G.fd, GPUSIM_IOC_FREE, &va);
	free(a);
	return ret ? PDMA_CU_ERROR_INVALID_VALUE : PDMA_CU_SUCCESS;
}

static pdma_cu_result host_add(void *p, size_t size, int owned)
{
	struct galloc *a = calloc(1, sizeof(*a));
	pdma_cu_result r = PDMA_CU_SUCCESS;

	if (!a)
		return PDMA_CU_ERROR_OUT_OF_MEMORY;
	a->va = (uint64_t)(uintptr_t)p;
	a->size = size;
	a->len = size;
	a->host = 1;
	a->host_owned = owned;
	pthread_mutex_lock(&G.lock);
	if (find(a->va, 0) || find(a->va + size - 1, 0)) {
		r = PDMA_CU_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
	} else {
		a->buffer_id = ++G.next_id;
		a->next = G.allocs;
		G.allocs = a;
	}
	pthread_mutex_unlock(&G.lock);
	if (r)
		free(a);
	return r;
}

EXPORT pdma_cu_result cuMemHostRegister_v2(void *p, size_t size, unsigned int flags)
{
	uintptr_t s = (uintptr_t)p & ~(uintptr_t)4095;
	size_t n = ((uintptr_t)p + size - s + 4095) & ~(size_t)4095;
	unsigned char vec[64];

	NEED_INIT();
	(void)flags;
	if (!p || !size)
		return PDMA_CU_ERROR_INVALID_VALUE;
	/* As the driver: memory that is not mapped cannot be registered
	 * (mincore fails with ENOMEM on a hole). */
	for (size_t off = 0; off < n; off += sizeof(vec) * 4096) {
		size_t part = n - off < sizeof(vec) * 4096 ? n - off : sizeof(vec) * 4096;

		if (mincore((void *)(s + off), part, vec))
			return PDMA_CU_ERROR_INVALID_VALUE;
	}
	return host_add(p, size, 0);
}

EXPORT pdma_cu_result cuMemHostUnregister(void *p)
{
	struct galloc *a;

	NEED_INIT();
	pthread_mutex_lock(&G.lock);
	a = unlink_at((uint64_t)(uintptr_t)p, 1);
	if (a && a->host_owned) { /* cuMemAllocHost memory: not unregistered this way */
		a->next = G.allocs;
		G.allocs = a;
		a = NULL;
	}
	pthread_mutex_unlock(&G.lock);
	free(a);
	return a ? PDMA_CU_SUCCESS : PDMA_CU_ERROR_HOST_MEMORY_NOT_REGISTERED;
}

EXPORT pdma_cu_result cuMemAllocHost_v2(void **pp, size_t size)
{
	void *p = NULL;
	pdma_cu_result r;

	NEED_INIT();
	if (!pp || !size)
		return PDMA_CU_ERROR_INVALID_VALUE;
	if (posix_memalign(&p, 4096, size))
		return PDMA_CU_ERROR_OUT_OF_MEMORY;
	r = host_add(p, size, 1);
	if (r) {
		free(p);
		return r;
	}
	*pp = p;
	return PDMA_CU_SUCCESS;
}

EXPORT pdma_cu_result cuMemFreeHost(void *p)
{
	struct galloc *a;

	NEED_INIT();
	pthread_mutex_lock(&G.lock);
	a = unlink_at((uint64_t)(uintptr_t)p, 1);
	if (a && !a->host_owned) {
		a->next = G.allocs;
		G.allocs = a;
		a = NULL;
	}
	pthread_mutex_unlock(&G.lock);
	if (!a)
		return PDMA_CU_ERROR_INVALID_VALUE;
	free(p);
	free(a);
	return PDMA_CU_SUCCESS;
}

/*
 * The CPU's view of device memory [p, p + n): the allocation's BAR range,
 * mapped at its first use. The allocation stays listed (G.lock is dropped)
 * only as long as the caller does not free it concurrently, as with the
 * driver: a copy racing cuMemFree of its memory is the caller's bug.
 */
static void *cpu_ptr(pdma_cu_ptr p, size_t n, pdma_cu_result *r)
{
	struct galloc *a;
	void *cpu = NULL;

	pthread_mutex_lock(&G.lock);
	a = find(p, n);
	if (!a || a->host) {
		*r = PDMA_CU_ERROR_INVALID_VALUE;
	} else {
		if (!a->cpu) {
			void *m = mmap(NULL, a->len, PROT_READ | PROT_WRITE, MAP_SHARED, G.fd,
				       (off_t)a->bar_off);

			a->cpu = m == MAP_FAILED ? NULL : m;
		}
		if (a->cpu) {
			cpu = (char *)a->cpu + (p - a->va);
			*r = PDMA_CU_SUCCESS;
		} else {
			*r = PDMA_CU_ERROR_OUT_OF_MEMORY;
		}
	}
	pthread_mutex_unlock(&G.lock);
	return cpu;
}

EXPORT pdma_cu_result cuMemcpyHtoD_v2(pdma_cu_ptr dst, const void *src, size_t n)
{
	pdma_cu_result r;
	void *d;

	NEED_INIT();
	if (!n)
		return PDMA_CU_SUCCESS;
	if (!src)
		return PDMA_CU_ERROR_INVALID_VALUE;
	d = cpu_ptr(dst, n, &r);
	if (d)
		memcpy(d, src, n);
	return r;
}

EXPORT pdma_cu_result cuMemcpyDtoH_v2(void *dst, pdma_cu_ptr src, size_t n)
{
	pdma_cu_result r;
	const void *s;

	NEED_INIT();
	if (!n)
		return PDMA_CU_SUCCESS;
	if (!dst)
		return PDMA_CU_ERROR_INVALID_VALUE;
	s = cpu_ptr(src, n, &r);
	if (s)
		memcpy(dst, s, n);
	return r;
}

EXPORT pdma_cu_result cuMemsetD8_v2(pdma_cu_ptr dst, unsigned char v, size_t n)
{
	pdma_cu_result r;
	void *d;

	NEED_INIT();
	if (!n)
		return PDMA_CU_SUCCESS;
	d = cpu_ptr(dst, n, &r);
	if (d)
		memset(d, v, n);
	return r;
}
