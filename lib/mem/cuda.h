/* SPDX-License-Identifier: MIT */
/*
 * The cuda memory backend (DESIGN.md "mem"): real CUDA memory, libcuda loaded
 * at run time. Follows NVIDIA's "Developing a Linux Kernel Module using
 * GPUDirect RDMA":
 *  - pointers are classified with one cuPointerGetAttributes call (memory type,
 *    managed, buffer ID, device ordinal, SYNC_MEMOPS, allocation range);
 *  - CUDA managed (unified) memory is refused for device DMA (-EINVAL);
 *  - CU_POINTER_ATTRIBUTE_SYNC_MEMOPS is set once per allocation, before its
 *    first pin;
 *  - a pin covers whole 64 KiB GPU pages of one allocation, and carries the
 *    handle the kernel module needs: a dma-buf fd (cuMemGetHandleForAddressRange,
 *    when the device reports DMA_BUF_SUPPORTED; kept open until unpin or
 *    revocation) or the virtual address for the nv-p2p path;
 *  - host memory used by the GPU is pinned with cuMemHostRegister
 *    (pdma_mem_cuda_host_ops, 4 KiB pages).
 *
 * Two ops tables: pdma_mem_cuda_ops (GPU memory, 64 KiB pages) and
 * pdma_mem_cuda_host_ops (host memory, CPU pages). pdma_cuda_ops_for() picks
 * the one that fits a pointer. Both take a struct pdma_cuda * as backend
 * context ("be").
 *
 * Invalidation (lib/monitor/cuda.c): either a per-use BUFFER_ID tag check
 * (pdma_cuda_tag_check) or interposed deallocation hooks that revoke pins and
 * call pdma_monitor_notify(PDMA_HMEM_CUDA, ...) before the memory is released
 * (pdma_cuda_monitor_mode() says which one a cache should use).
 */
#ifndef PDMA_LIB_MEM_CUDA_H
#define PDMA_LIB_MEM_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mem/mem.h"
#include "peerdma/mr.h"

#define PDMA_CUDA_GPU_PAGE (64u * 1024)

struct pdma_cuda;

extern const struct pdma_mem_ops pdma_mem_cuda_ops;      /* GPU memory */
extern const struct pdma_mem_ops pdma_mem_cuda_host_ops; /* host memory for the GPU */

/*
 * Load libcuda (first use), initialise it and retain each device's primary
 * context. -ENODEV when libcuda.so.1 or a device is missing: the reason is
 * then in pdma_cuda_last_error() (also passed to the log function if set).
 */
int pdma_cuda_open(struct pdma_cuda **ctx);
void pdma_cuda_close(struct pdma_cuda *ctx);
/* Text of the last failure of a pdma_cuda_* call in this thread ("" if none). */
const char *pdma_cuda_last_error(void);
/* Route log lines (level: 3 error, 4 warning, 6 info, 7 debug), like a domain's. */
void pdma_cuda_set_log(struct pdma_cuda *ctx, pdma_log_fn fn, void *arg);

/* What the driver says about a pointer (one cuPointerGetAttributes call). */
enum pdma_cuda_kind {
	PDMA_CUDA_KIND_UNKNOWN = 0, /* not known to CUDA (plain host memory) */
	PDMA_CUDA_KIND_DEVICE,      /* GPU memory (cuMemAlloc, cudaMalloc, VMM) */
	PDMA_CUDA_KIND_HOST,        /* page-locked host memory (cuMemHostAlloc / registered) */
	PDMA_CUDA_KIND_MANAGED,     /* managed (unified) memory: refused for DMA */
};

struct pdma_cuda_ptr_info {
	enum pdma_cuda_kind kind;
	int device;          /* device ordinal (-1 if none) */
	uint64_t buffer_id;  /* CU_POINTER_ATTRIBUTE_BUFFER_ID (0: none) */
	uint64_t base;       /* allocation start (RANGE_START_ADDR) */
	size_t size;         /* allocation size (RANGE_SIZE) */
	bool sync_memops;    /* CU_POINTER_ATTRIBUTE_SYNC_MEMOPS is set */
};

int pdma_cuda_classify(struct pdma_cuda *ctx, uint64_t addr, struct pdma_cuda_ptr_info *info);
/* The ops table for [addr, addr + len): GPU memory -> pdma_mem_cuda_ops, host
 * memory (CUDA-registered or not) -> pdma_mem_cuda_host_ops; -EINVAL for
 * managed memory. */
int pdma_cuda_ops_for(struct pdma_cuda *ctx, uint64_t addr, size_t len,
		      const struct pdma_mem_ops **ops);
/* pdma_cuda_ops_for, and for GPU memory also what that ops table's query
 * (pdma_mem_cuda_query) would say of [addr, addr + len), from the same
 * driver call: returns 1 with *alloc filled, 0 where the caller must still
 * query (host memory), or a negative errno (the query's, for GPU memory). A
 * cached registration then costs one driver call instead of two. */
int pdma_cuda_ops_query(struct pdma_cuda *ctx, uint64_t addr, size_t len,
			const struct pdma_mem_ops **ops, struct pdma_mem_alloc *alloc);

/* A pin's handle, for the kernel module (uapi) and for tests. */
enum pdma_cuda_pin_kind {
	PDMA_CUDA_PIN_DMABUF = 1, /* dma_fd: dma-buf of [dmabuf_start, + dmabuf_len) */
	PDMA_CUDA_PIN_NVP2P,      /* the kernel pins va/len with nvidia_p2p_get_pages */
	PDMA_CUDA_PIN_HOST_REGISTERED, /* host memory we registered (cuMemHostRegister) */
	PDMA_CUDA_PIN_HOST_CUDA,  /* host memory CUDA had page-locked already */
};

struct pdma_cuda_pin_info {
	enum pdma_cuda_pin_kind kind;
	uint64_t va;            /* pinned range start (page-aligned) */
	size_t len;             /* pinned range length (whole pages) */
	int device;
	uint64_t buffer_id;
	int dmabuf_fd;          /* -1 unless PDMA_CUDA_PIN_DMABUF and not revoked */
	uint64_t dmabuf_start;  /* exported range (may stop short of va + len at the
				 * allocation's end, see cuda_gpu.c) */
	size_t dmabuf_len;
	uint64_t dmabuf_offset; /* va - dmabuf_start (0) */
	bool revoked;
};

int pdma_cuda_pin_info(void *pin, struct pdma_cuda_pin_info *info);

/* Per-device GPUDirect facts (cuDeviceGetAttribute). */
struct pdma_cuda_dev_info {
	int ordinal;
	char name[96];
	char pci_bus_id[32];    /* "0000:3b:00.0" */
	int cc_major, cc_minor;
	int gdr_supported;      /* GPU_DIRECT_RDMA_SUPPORTED */
	int dmabuf_supported;   /* DMA_BUF_SUPPORTED */
	int writes_ordering;    /* GPU_DIRECT_RDMA_WRITES_ORDERING: 0, 100 (owner), 200 (all) */
	int flush_options;      /* GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS bit mask */
	int vmm_gdr_supported;  /* GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED */
};

int pdma_cuda_device_count(struct pdma_cuda *ctx);
int pdma_cuda_device_info(struct pdma_cuda *ctx, int ordinal, struct pdma_cuda_dev_info *info);
/* Driver version as cuDriverGetVersion reports it (e.g. 13000). */
int pdma_cuda_driver_version(struct pdma_cuda *ctx);

/*
 * Make completed third-party writes into device `ordinal`'s memory visible to
 * its CUDA work. Calls cuFlushGPUDirectRDMAWrites only when the device's
 * WRITES_ORDERING attribute says the owner does not order them natively (0);
 * returns 1 if a flush was issued, 0 if none was needed, -EOPNOTSUPP if one is
 * needed and the device cannot flush.
 */
int pdma_cuda_flush_rdma_writes(struct pdma_cuda *ctx, int ordinal);

/* Tag check: 0 if addr still belongs to the allocation with buffer_id, else
 * -ESTALE (freed, or reallocated at the same address). */
int pdma_cuda_tag_check(struct pdma_cuda *ctx, uint64_t addr, uint64_t buffer_id);

/* Host memory for the GPU (cuMemHostRegister, PORTABLE|DEVICEMAP). */
int pdma_cuda_host_register(struct pdma_cuda *ctx, void *p, size_t len);
int pdma_cuda_host_unregister(struct pdma_cuda *ctx, void *p);

/* Counters (tests, benches). */
struct pdma_cuda_stats {
	uint64_t sync_memops;   /* cuPointerSetAttribute(SYNC_MEMOPS) calls */
	uint64_t dmabuf_export; /* dma-bufs exported */
	uint64_t pins, unpins;  /* pin / unpin calls that succeeded */
	uint64_t revoked;       /* pins revoked by the deallocation hooks */
	uint64_t flushes;       /* cuFlushGPUDirectRDMAWrites calls */
	uint64_t tag_stale;     /* tag checks that failed (passing ones are not
				 * counted: the hit path shares no counter) */
};
void pdma_cuda_get_stats(struct pdma_cuda *ctx, struct pdma_cuda_stats *st);

/*
 * Invalidation mode for a cache over CUDA memory:
 *  PDMA_CUDA_MON_TAG:   check the BUFFER_ID on every use (pdma_cuda_tag_check);
 *  PDMA_CUDA_MON_HOOKS: forced ($PEERDMA_CUDA_MONITOR=hooks): trust the hooks
 *                       for all CUDA memory, no per-use check;
 *  PDMA_CUDA_MON_AUTO:  the hooks are detected (pdma_cuda_hooks_installed):
 *                       no per-use check for allocations the hooks saw being
 *                       made (pdma_cuda_alloc_seen: every way they leave is
 *                       hooked), the BUFFER_ID check for all other memory
 *                       (IPC and VMM mappings, memory allocated before the
 *                       hooks were loaded or past them).
 * $PEERDMA_CUDA_MONITOR=tag|hooks|auto (default auto) overrides the detection;
 * auto without the hooks detected is TAG.
 */
enum pdma_cuda_monitor_mode {
	PDMA_CUDA_MON_TAG = 0,
	PDMA_CUDA_MON_HOOKS = 1,
	PDMA_CUDA_MON_AUTO = 2,
};
enum pdma_cuda_monitor_mode pdma_cuda_monitor_mode(void);
/* Detection alone: the process's global symbol lookup of cuMemFree_v2 and of
 * cudaFree reaches the hook library (LD_PRELOAD=libpeerdma_cuda_hooks.so, or
 * loaded RTLD_GLOBAL before libcuda and libcudart; required even before a
 * libcudart is loaded, since one may be loaded later), and the library is
 * recent enough to list the allocations it saw (PDMA_CUDA_HOOKS_SEEN). A
 * statically linked CUDA runtime is invisible to the hooks: such programs
 * must set PEERDMA_CUDA_MONITOR=tag. */
bool pdma_cuda_hooks_installed(void);
/* Register libpeerdma's callbacks with the hook library (lib/hooks/) if it is
 * loaded; pdma_cuda_open does it. Returns whether the library was found. */
bool pdma_cuda_hooks_attach(void);
/* Did the hook library see the allocation at base with this buffer ID being
 * made (and not yet leave)? False without a (recent) hook library. */
bool pdma_cuda_alloc_seen(uint64_t base, uint64_t buffer_id);
/* How many deallocations the hooks have reported to libpeerdma so far. */
uint64_t pdma_cuda_hooks_count(void);

/*
 * Releasing memory (the hooks): release_begin revokes every live pin
 * overlapping [addr, addr + len) and notifies the monitor; until release_end
 * (called once the driver has released the memory) any pin of that range in
 * progress fails with -EFAULT, so that no pin can be taken of memory between
 * the hook's revocation and the driver's release. rel is the caller's
 * (typically on its stack).
 */
struct pdma_cuda_release {
	uint64_t addr;
	size_t len;
	struct pdma_cuda_release *next;
};
void pdma_cuda_release_begin(struct pdma_cuda_release *rel, uint64_t addr, size_t len);
void pdma_cuda_release_end(struct pdma_cuda_release *rel);
/* Context destroyed / reset: like release_begin for every pin whose allocation
 * belongs to the CUDA context cuctx or, with cuctx NULL, to device ordinal
 * device (-1: every device); pins in progress meanwhile fail. */
void pdma_cuda_release_context_begin(struct pdma_cuda_release *rel, const void *cuctx,
				     int device);
/* release_begin + release_end at once (callers that free through paths the
 * hooks cannot see call it before freeing). */
void pdma_cuda_invalidate(uint64_t addr, size_t len);
/* Hooks: release_begin for the whole allocation that contains p (looked up
 * with cuPointerGetAttributes RANGE_START_ADDR/RANGE_SIZE). */
void pdma_cuda_before_release(struct pdma_cuda_release *rel, uint64_t p);
/* Same for every pin whose allocation belongs to the CUDA context cuctx (a
 * CUcontext being destroyed), or, with cuctx NULL, to device ordinal device
 * (primary context reset; -1: every device). */
void pdma_cuda_invalidate_context(void *cuctx, int device);

/*
 * GPU memory as a domain registers it (cuda_kdev.c): pdma_mem_cuda_ops'
 * handle pinned by peerdma.ko (be: struct pdma_cuda_kdev *), or, without a
 * kernel device, only the dma-buf export (be: struct pdma_cuda *; memory
 * without one is refused with -EOPNOTSUPP: nothing would pin it).
 */
struct pdma_kdev;
struct pdma_cuda_kdev {
	struct pdma_cuda *cuda;
	struct pdma_kdev *kdev;
};
extern const struct pdma_mem_ops pdma_mem_cuda_kdev_ops;
extern const struct pdma_mem_ops pdma_mem_cuda_export_ops;
/* pdma_mem_cuda_ops.query and .same_alloc, for the tables that share them. */
int pdma_mem_cuda_query(void *be, uint64_t addr, size_t len, struct pdma_mem_alloc *alloc);
int pdma_mem_cuda_same_alloc(void *be, uint64_t addr, uint64_t buffer_id);

#endif /* PDMA_LIB_MEM_CUDA_H */
