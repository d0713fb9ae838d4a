/* SPDX-License-Identifier: MIT */
/*
 * A fake CUDA driver table for the cuda backend's unit tests (test_cuda_*.c):
 * allocations with buffer IDs, memory types and contexts, device attributes,
 * dma-buf export, host registration, and counters of what the backend asked.
 * setup() injects it (pdma_cu_set_api_for_testing) and opens the backend as cu.
 */
#ifndef PDMA_TESTS_FAKE_CUDA_H
#define PDMA_TESTS_FAKE_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "cuda/api.h"
#include "mem/cuda.h"

#define KiB 1024u
#define MiB (1024u * 1024u)

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

struct fake {
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
	int attrs_asked;            /* attributes asked for, over all of them */
	uint64_t alloc_at;          /* where the next cuMemAlloc / IPC open maps */
	int ipc_opens, ipc_closes, unmaps;
};

/* The fake driver's state (zeroed by setup()). */
extern struct fake F;
extern struct pdma_cu_api fake_api;
/* The backend setup() opened over fake_api. */
extern struct pdma_cuda *cu;

struct falloc *ffind(uint64_t p);
struct falloc *fadd(uint64_t base, size_t size, int type, int managed);
/* A VMM mapping (cuMemCreate + cuMemAddressReserve + cuMemMap, which no
 * hook sees) of size bytes at va: a new allocation with a new buffer ID. */
struct falloc *fake_vmm_map(uint64_t va, size_t size);
/* The exporter's side of CUDA IPC: a handle naming allocation a (its buffer
 * ID), which fake_api.IpcOpenMemHandle maps at F.alloc_at as a new
 * allocation of this process. */
pdma_cu_ipc_mem_handle fake_ipc_handle(const struct falloc *a);
/* cmocka fixtures: inject the fake (one device, dma-buf capable), open cu. */
int setup(void **state);
/* The same with a device that cannot export dma-bufs. */
int setup_no_dmabuf(void **state);
int teardown(void **state);
int fd_open(int fd);

/* A monitor subscriber and a pin revoke callback that count into F. */
extern uint64_t notified_addr;
extern size_t notified_len;
void on_notify(void *arg, enum pdma_hmem_iface iface, uint64_t addr, size_t len);
void on_revoke(void *arg);

#endif /* PDMA_TESTS_FAKE_CUDA_H */
