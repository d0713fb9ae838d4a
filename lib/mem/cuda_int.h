/* SPDX-License-Identifier: MIT */
/*
 * Inside the cuda memory backend (lib/mem/cuda*.c; cuda.h is its interface):
 * the backend context, a pin, and what the files share.
 *   cuda.c        the backend: driver, devices, logging, pointer
 *                 classification, the flush rule and the tag check
 *   cuda_gpu.c    GPU memory: pdma_mem_cuda_ops (dma-buf or nv-p2p pins)
 *   cuda_host.c   host memory the GPU uses: pdma_mem_cuda_host_ops
 *   cuda_kdev.c   GPU memory as a domain registers it: pinned by peerdma.ko
 *                 (pdma_mem_cuda_kdev_ops) or a dma-buf export only
 *   cuda_pins.c   the process-wide list of live pins, and the releases and
 *                 revocations the deallocation hooks drive through it
 */
#ifndef PDMA_LIB_MEM_CUDA_INT_H
#define PDMA_LIB_MEM_CUDA_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "cuda/api.h"
#include "mem/cuda.h"

#define HOST_PAGE 4096u

struct pdma_cuda {
	const struct pdma_cu_api *api;
	int ndev;
	pdma_cu_ctx *primary;           /* retained primary context per device */
	struct pdma_cuda_dev_info *devs;
	pdma_log_fn log;
	void *log_arg;
	atomic_int refs;                /* the opener's + one per live pin */
	atomic_uint_fast64_t st_sync, st_export, st_pins, st_unpins, st_revoked, st_flushes,
		st_stale;
};

struct cuda_pin {
	struct cuda_pin *prev, *next;   /* on pins_head, under pdma_cuda_pins_lock */
	struct pdma_cuda *ctx;
	enum pdma_cuda_pin_kind kind;
	uint64_t va;
	size_t len;
	int device;
	uint64_t buffer_id;
	uint64_t alloc_base;            /* the allocation the pin belongs to */
	size_t alloc_size;
	void *cuctx;                    /* its CUDA context */
	int fd;                         /* dma-buf, -1 if none or closed */
	uint64_t dmabuf_start;
	size_t dmabuf_len;
	bool revoked;                   /* under pdma_cuda_pins_lock */
	bool pending;                   /* being pinned: the hooks only mark it revoked */
	int revoking;                   /* callbacks running outside the lock */
	struct cuda_pin *rnext;         /* on a revocation's queue */
	pdma_mem_revoke_fn revoke;
	void *arg;
};

/* [b, e) overlaps [addr, addr + len), len saturating at the top. */
static inline bool overlaps(uint64_t b, uint64_t e, uint64_t addr, size_t len)
{
	uint64_t end = addr + len < addr ? UINT64_MAX : addr + len;

	return b < end && addr < e;
}

/* How much to ask the driver (prefixes of one attribute list, one call):
 * kind (ops_for), allocation (query: adds buffer ID and range), full (pin:
 * adds device ordinal and SYNC_MEMOPS). Measured on the H100 (bench_cuda):
 * fewer attributes, cheaper call. */
enum cl_level { CL_KIND = 2, CL_ALLOC = 5, CL_FULL = 7 };

#define PDMA_CUDA_MANAGED_MSG \
	"cuda: %#llx is CUDA managed (unified) memory: refused for device DMA (its pages migrate; "\
	"third-party DMA to it can read stale data or lose writes): use cuMemAlloc/cudaMalloc memory"

void pdma_cuda_alloc_from_info(struct pdma_mem_alloc *alloc, const struct pdma_cuda_ptr_info *in);
int pdma_cuda_check_range(struct pdma_cuda *ctx, const struct pdma_cuda_ptr_info *in, uint64_t addr,
			  size_t len, uint64_t end_limit);
int pdma_cuda_classify_at(struct pdma_cuda *ctx, uint64_t addr, struct pdma_cuda_ptr_info *info,
			  enum cl_level level);
bool pdma_cuda_ctx_enter(struct pdma_cuda *ctx, int dev);
void pdma_cuda_ctx_leave(struct pdma_cuda *ctx, bool pushed);
void pdma_cuda_ctx_put(struct pdma_cuda *ctx);
int pdma_cuda_cu_fail(struct pdma_cuda *ctx, const char *what, pdma_cu_result r);
void pdma_cuda_log(struct pdma_cuda *ctx, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void pdma_cuda_unpin(void *be, void *pin);
struct cuda_pin *pdma_cuda_pin_begin(struct pdma_cuda *ctx, uint64_t addr, size_t len,
				     pdma_mem_revoke_fn revoke, void *arg);
int pdma_cuda_pin_commit(struct cuda_pin *p);
int pdma_cuda_pin_fail(struct cuda_pin *p, int ret);
void pdma_cuda_pin_set_alloc(struct cuda_pin *p, const struct pdma_cuda_ptr_info *in, void *cuctx);
/* The live pin list's lock, and its condition (a revocation in progress ended). */
extern pthread_mutex_t pdma_cuda_pins_lock;
extern pthread_cond_t pdma_cuda_pins_cond;

#endif /* PDMA_LIB_MEM_CUDA_INT_H */
