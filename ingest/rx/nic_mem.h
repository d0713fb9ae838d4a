/* SPDX-License-Identifier: MIT */
/*
 * GPU memory for a NIC (the nic receive path, rx/nic.c, and gen's transmit
 * through a NIC, gen/nic_send.c): allocated with the loaded libcuda (the
 * real driver, or in the QEMU guest the stand-in over /dev/gpusim:
 * PEERDMA_LIBCUDA), zeroed, registered through libpeerdma's public MR API in
 * a domain with a kernel device, so that peerdma.ko pins it, and its kernel
 * pin (pdma_mr_dma) ready to hand to the NIC driver.
 *
 * Thread safety: one owner; copies from any thread that called
 * pdma_nic_mem_enter() first (the CUDA context is per thread).
 */
#ifndef PDMA_INGEST_RX_NIC_MEM_H
#define PDMA_INGEST_RX_NIC_MEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda/api.h"
#include "peerdma/mr.h"

struct pdma_nic_mem {
	const struct pdma_cu_api *cu;
	pdma_cu_device dev;
	pdma_cu_ctx ctx;
	bool ctx_retained;
	pdma_cu_ptr region;   /* 0 once freed */
	uint64_t addr;        /* where it was (reports) */
	uint64_t bytes;       /* whole 64 KiB GPU pages */
	struct pdma_mr *mr;
	struct pdma_mr_dma dma; /* kernel fd, handle, pinned range */
};

/* access: PDMA_* flags of the registration. A negative errno with a line in
 * msg; *m is then safe to close. */
int pdma_nic_mem_open(struct pdma_nic_mem *m, struct pdma_domain *dom, int cuda_device,
		      uint64_t bytes, uint64_t access, char *msg, size_t msglen);
/* The offset of byte off of the region from the pinned range's start (what
 * the NIC driver's ioctls take). */
static inline uint64_t pdma_nic_mem_pin_off(const struct pdma_nic_mem *m, uint64_t off)
{
	return m->addr - m->dma.pinned_addr + off;
}
/* Make the region's CUDA context this thread's. */
void pdma_nic_mem_enter(const struct pdma_nic_mem *m);
/* Free the allocation under the registration (fault injection: what a
 * buggy application does); the MR stays open until close. */
void pdma_nic_mem_free(struct pdma_nic_mem *m);
/* The MR, then the allocation, then the context. */
void pdma_nic_mem_close(struct pdma_nic_mem *m);
/* msg helper shared with the NIC paths: printf into msg, return err. */
int pdma_nic_fail(char *msg, size_t msglen, int err, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

#endif /* PDMA_INGEST_RX_NIC_MEM_H */
