// SPDX-License-Identifier: MIT
/*
 * A stand-in for libcuda's (and libcudart's) entry points through which memory
 * arrives and leaves, for interpose.c: it counts the calls that reach "the
 * driver" (or "the runtime").
 * One fake allocation, reachable at its own address and, once opened through
 * IPC, at a second mapping of it; VMM create/map/unmap/release; context
 * destroy. The driver's answers follow CUDA's rules closely enough for the
 * hook library to pass them through (wrong base: CUDA_ERROR_INVALID_VALUE).
 */
#include <string.h>

#include "stub_cuda.h"

#define ALLOC 0x10000ull     /* the allocation (cuMemAlloc) */
#define IPC_MAP 0x7000000ull /* where an IPC open maps it */
#define VMM_VA 0x9000000ull  /* the reserved VMM range */
#define RT_ALLOC 0x30000ull  /* the runtime's allocation (cudaMalloc) */

int stub_cuda_frees, stub_cuda_allocs, stub_cuda_ipc_opens, stub_cuda_ipc_closes;
int stub_cuda_vmm_creates, stub_cuda_vmm_maps, stub_cuda_vmm_unmaps, stub_cuda_vmm_releases;
int stub_cuda_ctx_destroys, stub_cudart_frees, stub_cudart_ipc_closes;
unsigned long long stub_cuda_alloc_id, stub_cudart_alloc_id;
static unsigned long long next_id = 100;
static int ipc_mapped, vmm_mapped;

int cuMemFree_v2(uint64_t dptr)
{
	(void)dptr;
	stub_cuda_frees++;
	return 0;
}

int cuMemFree(unsigned int dptr)
{
	(void)dptr;
	stub_cuda_frees++;
	return 0;
}

int cuMemAlloc_v2(uint64_t *dptr, size_t size)
{
	(void)size;
	*dptr = ALLOC;
	stub_cuda_alloc_id = next_id++;
	stub_cuda_allocs++;
	return 0;
}

/* CU_POINTER_ATTRIBUTE_BUFFER_ID (7) of the two allocations only. */
int cuPointerGetAttribute(void *data, int attribute, uint64_t ptr)
{
	unsigned long long id = ptr == ALLOC ? stub_cuda_alloc_id :
				ptr == RT_ALLOC ? stub_cudart_alloc_id : 0;

	if (attribute != 7 || !id)
		return 1;
	*(unsigned long long *)data = id;
	return 0;
}

int cuIpcGetMemHandle(stub_ipc_handle *h, uint64_t dptr)
{
	if (dptr != ALLOC)
		return 1;
	memset(h, 0, sizeof(*h));
	memcpy(h->reserved, &dptr, sizeof(dptr));
	return 0;
}

int cuIpcOpenMemHandle_v2(uint64_t *dptr, stub_ipc_handle h, unsigned int flags)
{
	uint64_t src;

	memcpy(&src, h.reserved, sizeof(src));
	if (src != ALLOC || flags != 1 || ipc_mapped)
		return 1;
	ipc_mapped = 1;
	*dptr = IPC_MAP; /* the second mapping of the same allocation */
	stub_cuda_ipc_opens++;
	return 0;
}

int cuIpcCloseMemHandle(uint64_t dptr)
{
	if (dptr != IPC_MAP || !ipc_mapped)
		return 1;
	ipc_mapped = 0;
	stub_cuda_ipc_closes++;
	return 0;
}

int cuMemCreate(uint64_t *handle, size_t size, const void *prop, unsigned long long flags)
{
	(void)size;
	(void)prop;
	(void)flags;
	*handle = 0x4242;
	stub_cuda_vmm_creates++;
	return 0;
}

int cuMemMap(uint64_t ptr, size_t size, size_t offset, uint64_t handle, unsigned long long flags)
{
	(void)size;
	(void)offset;
	(void)flags;
	if (ptr != VMM_VA || handle != 0x4242 || vmm_mapped)
		return 1;
	vmm_mapped = 1;
	stub_cuda_vmm_maps++;
	return 0;
}

int cuMemUnmap(uint64_t ptr, size_t size)
{
	(void)size;
	if (ptr != VMM_VA || !vmm_mapped)
		return 1;
	vmm_mapped = 0;
	stub_cuda_vmm_unmaps++;
	return 0;
}

int cuMemRelease(uint64_t handle)
{
	if (handle != 0x4242)
		return 1;
	stub_cuda_vmm_releases++;
	return 0;
}

int cuCtxDestroy_v2(void *ctx)
{
	(void)ctx;
	stub_cuda_ctx_destroys++;
	return 0;
}

/* ------------------------------------------------------------ the runtime */

int cudaMalloc(void **p, size_t size)
{
	(void)size;
	*p = (void *)(uintptr_t)RT_ALLOC;
	stub_cudart_alloc_id = next_id++;
	return 0;
}

int cudaFree(void *p)
{
	(void)p;
	stub_cudart_frees++;
	return 0;
}

int cudaIpcCloseMemHandle(void *p)
{
	if ((uintptr_t)p != IPC_MAP)
		return 1; /* cudaErrorInvalidValue */
	stub_cudart_ipc_closes++;
	return 0;
}
