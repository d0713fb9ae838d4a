/* SPDX-License-Identifier: MIT */
/*
 * The simulated GPU and DMA device: an in-process model used by tests and the
 * demo where no GPU or special hardware exists.
 *
 * GPU memory: allocations at 64 KiB-aligned virtual addresses inside one
 * reserved range, first fit, so freeing and reallocating the same size returns
 * the same address (as a real H100 does), each allocation with a new buffer ID.
 * The memory is ordinary host memory, so the CPU may read and write it
 * directly (a real GPU's is not CPU-visible; tests use this to check bytes).
 *
 * Pinning: pins cover whole 64 KiB pages and are charged against a finite BAR
 * capacity; a pin beyond it fails with -ENOMEM. Freeing pinned memory first
 * runs each pin's free callback (as nvidia_p2p's does), then frees.
 *
 * DMA device: pdma_sim_dma_write/read move bytes through a registered MR by
 * key, the way a remote peer or a PCIe device would, checking the key, the
 * MR's access flags, its bounds and that it is enabled and not revoked.
 *
 * Thread safety: all calls may be made from any thread.
 */
#ifndef PEERDMA_SIM_H
#define PEERDMA_SIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PDMA_SIM_PAGE_SIZE (64u * 1024u)

struct pdma_sim;
struct pdma_domain;

struct pdma_sim_attr {
	size_t mem_size; /* GPU memory in bytes (0: 64 MiB); rounded up to 64 KiB */
	size_t bar_size; /* pinnable bytes (0: same as mem_size) */
};

int pdma_sim_open(const struct pdma_sim_attr *attr, struct pdma_sim **sim);
/* -EBUSY while pins are live. Allocations still live are freed. */
int pdma_sim_close(struct pdma_sim *sim);

/* 64 KiB-aligned allocation; -EINVAL for len 0, -ENOMEM when full. */
int pdma_sim_alloc(struct pdma_sim *sim, size_t len, void **ptr);
/* Fires the free callbacks of pins on the allocation, then frees it.
 * -EINVAL if ptr is not the start of a live allocation. */
int pdma_sim_free(struct pdma_sim *sim, void *ptr);

struct pdma_sim_ptr_info {
	uint64_t base;      /* start of the allocation holding the pointer */
	size_t size;        /* its size */
	uint64_t buffer_id; /* unique per allocation, never reused */
};
/* -ENOENT if addr is not inside a live allocation. */
int pdma_sim_ptr_info(struct pdma_sim *sim, const void *addr, struct pdma_sim_ptr_info *info);

struct pdma_sim_stats {
	size_t bar_size, bar_used;  /* bytes */
	uint64_t live_pins;         /* pins held now */
	uint64_t pins, unpins;      /* totals */
	uint64_t free_callbacks;    /* pins revoked by pdma_sim_free */
	uint64_t dma_bytes;         /* bytes moved by the DMA device */
};
void pdma_sim_get_stats(struct pdma_sim *sim, struct pdma_sim_stats *stats);

/* The DMA device. addr is a virtual address under PDMA_MR_VIRT_ADDR, else an
 * offset from the start of the MR. -ENOKEY unknown or closed key, -EACCES
 * access not granted, -EINVAL out of bounds, -EAGAIN MR not enabled,
 * -EFAULT the MR was revoked (memory freed). */
int pdma_sim_dma_write(struct pdma_domain *domain, uint64_t key, uint64_t addr,
		       const void *src, size_t len);
int pdma_sim_dma_read(struct pdma_domain *domain, uint64_t key, uint64_t addr, void *dst,
		      size_t len);

/* RMA through the device between a local buffer and a remote MR, the shape of
 * fi_write/fi_read: the device reads (write) or fills (read) the local buffer
 * buf, described by desc, and writes or reads the remote MR named by key.
 * The local buffer needs desc (the MR's pdma_mr_desc) when the domain has
 * PDMA_MR_LOCAL, and always when it is device memory under PDMA_MR_HMEM; the
 * desc's MR must cover it and grant PDMA_WRITE (write) or PDMA_READ (read).
 * Without PDMA_MR_LOCAL and with no desc, host memory is registered on the
 * fly (through the domain's registration cache when it has one).
 * Errors as above, plus -EINVAL for a missing, stale or foreign desc. */
int pdma_sim_write(struct pdma_domain *domain, const void *buf, size_t len, void *desc,
		   uint64_t addr, uint64_t key);
int pdma_sim_read(struct pdma_domain *domain, void *buf, size_t len, void *desc, uint64_t addr,
		  uint64_t key);

#ifdef __cplusplus
}
#endif
#endif /* PEERDMA_SIM_H */
