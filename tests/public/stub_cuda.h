/* SPDX-License-Identifier: MIT */
/*
 * The stub driver's and runtime's entry points and counters (stub_cuda.c),
 * for interpose.c.
 * Declared with plain C types: neither side may include libpeerdma's own
 * CUDA declarations (interpose.c sees only the public API).
 */
#ifndef PDMA_TESTS_STUB_CUDA_H
#define PDMA_TESTS_STUB_CUDA_H

#include <stddef.h>
#include <stdint.h>

extern int stub_cuda_frees, stub_cuda_allocs, stub_cuda_ipc_opens, stub_cuda_ipc_closes;
extern int stub_cuda_vmm_creates, stub_cuda_vmm_maps, stub_cuda_vmm_unmaps, stub_cuda_vmm_releases;
extern int stub_cuda_ctx_destroys, stub_cudart_frees, stub_cudart_ipc_closes;
/* Buffer IDs of the driver's (cuMemAlloc_v2) and the runtime's (cudaMalloc)
 * allocation: each allocation gets a new one. */
extern unsigned long long stub_cuda_alloc_id, stub_cudart_alloc_id;

typedef struct {
	char reserved[64];
} stub_ipc_handle; /* CUipcMemHandle */

int cuMemFree_v2(uint64_t dptr);
int cuMemFree(unsigned int dptr);
int cuMemAlloc_v2(uint64_t *dptr, size_t size);
int cuIpcGetMemHandle(stub_ipc_handle *h, uint64_t dptr);
int cuIpcOpenMemHandle_v2(uint64_t *dptr, stub_ipc_handle h, unsigned int flags);
int cuIpcCloseMemHandle(uint64_t dptr);
int cuMemCreate(uint64_t *handle, size_t size, const void *prop, unsigned long long flags);
int cuMemMap(uint64_t ptr, size_t size, size_t offset, uint64_t handle, unsigned long long flags);
int cuMemUnmap(uint64_t ptr, size_t size);
int cuMemRelease(uint64_t handle);
int cuCtxDestroy_v2(void *ctx);
int cuPointerGetAttribute(void *data, int attribute, uint64_t ptr);
/* The runtime's (libcudart's) entry points. */
int cudaMalloc(void **p, size_t size);
int cudaFree(void *p);
int cudaIpcCloseMemHandle(void *p);

#endif /* PDMA_TESTS_STUB_CUDA_H */
