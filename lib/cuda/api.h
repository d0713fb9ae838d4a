/* SPDX-License-Identifier: MIT */
/*
 * The few CUDA driver API types, constants and entry points libpeerdma uses,
 * declared from NVIDIA's public documentation so that the library builds
 * without the CUDA toolkit. Every value below matches cuda.h: the unit test
 * tests/unit/test_cuda_api.c compares each one with CUDA's own header where it
 * is installed (/usr/local/cuda/include/cuda.h; 53 of them, CUDA 13.0). Names
 * carry a pdma_cu / PDMA_CU prefix so that a file may include cuda.h as well.
 *
 * libcuda.so.1 is loaded at run time (dlopen) by lib/cuda/loader.c; a missing
 * driver is an error code and a message, never a crash.
 */
#ifndef PDMA_LIB_CUDA_API_H
#define PDMA_LIB_CUDA_API_H

#include <stddef.h>
#include <stdint.h>

typedef int pdma_cu_result;                 /* CUresult */
typedef int pdma_cu_device;                 /* CUdevice */
typedef unsigned long long pdma_cu_ptr;     /* CUdeviceptr (64-bit) */
typedef struct pdma_cu_ctx_st *pdma_cu_ctx; /* CUcontext */
typedef struct pdma_cu_stream_st *pdma_cu_stream; /* CUstream */
typedef unsigned long long pdma_cu_mem_handle; /* CUmemGenericAllocationHandle */
/* CUipcMemHandle: 64 opaque bytes, passed by value. */
#define PDMA_CU_IPC_HANDLE_SIZE 64
typedef struct {
	char reserved[PDMA_CU_IPC_HANDLE_SIZE];
} pdma_cu_ipc_mem_handle;
/* CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS */
#define PDMA_CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS 0x1

/* CUresult values used by name. */
#define PDMA_CU_SUCCESS 0
#define PDMA_CU_ERROR_INVALID_VALUE 1
#define PDMA_CU_ERROR_OUT_OF_MEMORY 2
#define PDMA_CU_ERROR_NOT_INITIALIZED 3
#define PDMA_CU_ERROR_DEINITIALIZED 4
#define PDMA_CU_ERROR_STUB_LIBRARY 34
#define PDMA_CU_ERROR_NO_DEVICE 100
#define PDMA_CU_ERROR_INVALID_DEVICE 101
#define PDMA_CU_ERROR_INVALID_CONTEXT 201
#define PDMA_CU_ERROR_NOT_FOUND 500
#define PDMA_CU_ERROR_HOST_MEMORY_ALREADY_REGISTERED 712
#define PDMA_CU_ERROR_HOST_MEMORY_NOT_REGISTERED 713
#define PDMA_CU_ERROR_NOT_PERMITTED 800
#define PDMA_CU_ERROR_NOT_SUPPORTED 801

/* CUpointer_attribute */
#define PDMA_CU_POINTER_ATTRIBUTE_CONTEXT 1
#define PDMA_CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define PDMA_CU_POINTER_ATTRIBUTE_SYNC_MEMOPS 6
#define PDMA_CU_POINTER_ATTRIBUTE_BUFFER_ID 7
#define PDMA_CU_POINTER_ATTRIBUTE_IS_MANAGED 8
#define PDMA_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9
#define PDMA_CU_POINTER_ATTRIBUTE_RANGE_START_ADDR 11
#define PDMA_CU_POINTER_ATTRIBUTE_RANGE_SIZE 12

/* CUmemorytype */
#define PDMA_CU_MEMORYTYPE_HOST 1
#define PDMA_CU_MEMORYTYPE_DEVICE 2
#define PDMA_CU_MEMORYTYPE_ARRAY 3
#define PDMA_CU_MEMORYTYPE_UNIFIED 4

/* CUdevice_attribute */
#define PDMA_CU_DEVICE_ATTRIBUTE_PCI_BUS_ID 33
#define PDMA_CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID 34
#define PDMA_CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING 41
#define PDMA_CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID 50
#define PDMA_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR 75
#define PDMA_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR 76
#define PDMA_CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED 99
#define PDMA_CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED 110
#define PDMA_CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED 116
#define PDMA_CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS 117
#define PDMA_CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING 118
#define PDMA_CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED 124

/* CUflushGPUDirectRDMAWritesOptions (bit mask) */
#define PDMA_CU_FLUSH_GPU_DIRECT_RDMA_WRITES_OPTION_HOST 1
#define PDMA_CU_FLUSH_GPU_DIRECT_RDMA_WRITES_OPTION_MEMOPS 2
/* CUGPUDirectRDMAWritesOrdering */
#define PDMA_CU_GPU_DIRECT_RDMA_WRITES_ORDERING_NONE 0
#define PDMA_CU_GPU_DIRECT_RDMA_WRITES_ORDERING_OWNER 100
#define PDMA_CU_GPU_DIRECT_RDMA_WRITES_ORDERING_ALL_DEVICES 200
/* CUflushGPUDirectRDMAWritesScope / Target */
#define PDMA_CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER 100
#define PDMA_CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_ALL_DEVICES 200
#define PDMA_CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX 0

/* CUmemRangeHandleType */
#define PDMA_CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD 1

/* cuMemHostRegister / cuMemHostAlloc flags */
#define PDMA_CU_MEMHOSTREGISTER_PORTABLE 0x01
#define PDMA_CU_MEMHOSTREGISTER_DEVICEMAP 0x02
#define PDMA_CU_MEMHOSTREGISTER_READ_ONLY 0x08
#define PDMA_CU_MEM_ATTACH_GLOBAL 0x1

/*
 * The driver entry points, loaded once per process (dlsym of the versioned
 * names that cuda.h's macros select: cuMemFree -> cuMemFree_v2, ...).
 * Optional entries (newer drivers only) may be NULL; the rest are required.
 */
struct pdma_cu_api {
	void *handle;       /* dlopen handle (NULL for an injected test table) */
	int driver_version; /* cuDriverGetVersion, e.g. 13000 */

	pdma_cu_result (*Init)(unsigned int flags);
	pdma_cu_result (*DriverGetVersion)(int *version);
	pdma_cu_result (*GetErrorName)(pdma_cu_result err, const char **str);
	pdma_cu_result (*GetErrorString)(pdma_cu_result err, const char **str);
	pdma_cu_result (*DeviceGetCount)(int *count);
	pdma_cu_result (*DeviceGet)(pdma_cu_device *dev, int ordinal);
	pdma_cu_result (*DeviceGetName)(char *name, int len, pdma_cu_device dev);
	pdma_cu_result (*DeviceGetPCIBusId)(char *busid, int len, pdma_cu_device dev);
	pdma_cu_result (*DeviceGetAttribute)(int *value, int attrib, pdma_cu_device dev);
	pdma_cu_result (*DevicePrimaryCtxRetain)(pdma_cu_ctx *ctx, pdma_cu_device dev);
	pdma_cu_result (*DevicePrimaryCtxRelease)(pdma_cu_device dev);      /* _v2 */
	pdma_cu_result (*CtxGetCurrent)(pdma_cu_ctx *ctx);
	pdma_cu_result (*CtxSetCurrent)(pdma_cu_ctx ctx);
	pdma_cu_result (*CtxPushCurrent)(pdma_cu_ctx ctx);                  /* _v2 */
	pdma_cu_result (*CtxPopCurrent)(pdma_cu_ctx *ctx);                  /* _v2 */
	pdma_cu_result (*CtxSynchronize)(void);

	pdma_cu_result (*PointerGetAttribute)(void *data, int attribute, pdma_cu_ptr ptr);
	pdma_cu_result (*PointerGetAttributes)(unsigned int n, int *attributes, void **data,
					       pdma_cu_ptr ptr);
	pdma_cu_result (*PointerSetAttribute)(const void *value, int attribute, pdma_cu_ptr ptr);
	pdma_cu_result (*MemGetAddressRange)(pdma_cu_ptr *base, size_t *size, pdma_cu_ptr ptr); /* _v2 */
	pdma_cu_result (*MemGetHandleForAddressRange)(void *handle, pdma_cu_ptr ptr, size_t size,
						      int handle_type, unsigned long long flags);
	pdma_cu_result (*MemHostRegister)(void *p, size_t size, unsigned int flags); /* _v2 */
	pdma_cu_result (*MemHostUnregister)(void *p);
	pdma_cu_result (*FlushGPUDirectRDMAWrites)(int target, int scope);

	/* Allocation and release: used by tests and benches, and the real
	 * functions behind the interposed hooks (lib/monitor/cuda.c). */
	pdma_cu_result (*MemAlloc)(pdma_cu_ptr *dptr, size_t size);          /* _v2 */
	pdma_cu_result (*MemFree)(pdma_cu_ptr dptr);                         /* _v2 */
	pdma_cu_result (*MemFreeAsync)(pdma_cu_ptr dptr, pdma_cu_stream s);
	pdma_cu_result (*MemAllocHost)(void **pp, size_t size);              /* _v2 */
	pdma_cu_result (*MemFreeHost)(void *p);
	pdma_cu_result (*MemAllocManaged)(pdma_cu_ptr *dptr, size_t size, unsigned int flags);
	pdma_cu_result (*MemsetD8)(pdma_cu_ptr dptr, unsigned char v, size_t n); /* _v2 */
	pdma_cu_result (*MemcpyHtoD)(pdma_cu_ptr dst, const void *src, size_t n); /* _v2 */
	pdma_cu_result (*MemcpyDtoH)(void *dst, pdma_cu_ptr src, size_t n);   /* _v2 */
	pdma_cu_result (*MemRelease)(pdma_cu_mem_handle h);
	pdma_cu_result (*MemUnmap)(pdma_cu_ptr ptr, size_t size);
	pdma_cu_result (*MemAddressFree)(pdma_cu_ptr ptr, size_t size);
	pdma_cu_result (*CtxCreate)(pdma_cu_ctx *ctx, unsigned int flags, pdma_cu_device dev); /* _v2 */
	pdma_cu_result (*CtxDestroy)(pdma_cu_ctx ctx);                       /* _v2 */
	pdma_cu_result (*DevicePrimaryCtxReset)(pdma_cu_device dev);         /* _v2 */
	/* Legacy CUDA IPC: tests (tests/gpu/test_cuda_ipc.c), and the real
	 * cuIpcCloseMemHandle behind its hook. */
	pdma_cu_result (*IpcGetMemHandle)(pdma_cu_ipc_mem_handle *h, pdma_cu_ptr dptr);
	pdma_cu_result (*IpcOpenMemHandle)(pdma_cu_ptr *dptr, pdma_cu_ipc_mem_handle h,
					   unsigned int flags);                  /* _v2 */
	pdma_cu_result (*IpcCloseMemHandle)(pdma_cu_ptr dptr);
};

/*
 * Open libcuda at path (NULL: $PEERDMA_LIBCUDA, else "libcuda.so.1"), resolve
 * the entry points and call cuInit(0). Returns 0, or -ENODEV with a message in
 * msg (no driver, the toolkit's stub library, a library lacking a required
 * entry point, cuInit failing, no device). On failure nothing stays loaded.
 */
int pdma_cu_api_open(const char *path, struct pdma_cu_api *api, char *msg, size_t msglen);
void pdma_cu_api_close(struct pdma_cu_api *api);

/*
 * The process-wide table: loaded on first use, kept until exit. A failure is
 * not remembered (a later call tries again). msg may be NULL.
 */
int pdma_cu_get(const struct pdma_cu_api **api, char *msg, size_t msglen);
/* The table if it is loaded already, else NULL (never loads: for hooks). */
const struct pdma_cu_api *pdma_cu_peek(void);
/* The entry point named name (a driver symbol, e.g. "cuMemFree_v2") as api
 * has it: its table field, else the symbol of the library api was loaded
 * from; NULL if neither (for the hook library: lib/monitor/cuda.c). */
void *pdma_cu_api_fn(const struct pdma_cu_api *api, const char *name);
/*
 * Tests only: make api (which must outlive its use) the process-wide table, or
 * with NULL forget an injected table. Entry points left NULL are reported as
 * CUDA_ERROR_NOT_SUPPORTED by the code that needs them.
 */
void pdma_cu_set_api_for_testing(const struct pdma_cu_api *api);

/* "CUDA_ERROR_INVALID_VALUE (1)"-style text of a CUresult, always non-NULL. */
const char *pdma_cu_errname(pdma_cu_result r);
/* Map a CUresult onto a negative errno. */
int pdma_cu_errno(pdma_cu_result r);

#endif /* PDMA_LIB_CUDA_API_H */
