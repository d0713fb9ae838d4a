/* SPDX-License-Identifier: MIT */
/*
 * The nic receive path: a NIC writes received frames straight into GPU
 * memory, with no copy through host memory on the way in.
 *
 * Where a frame lives and dies, in order:
 *  1. open: the receive region is allocated with the loaded libcuda (the real
 *     driver, or in the QEMU guest the stand-in over /dev/gpusim:
 *     PEERDMA_LIBCUDA), registered through libpeerdma's public MR API in a
 *     domain with a kernel device, so peerdma.ko pins it (dma-buf or nv-p2p),
 *     and handed to the NIC driver (drivers/e1000/) as (kernel fd, handle):
 *     the driver maps it for the NIC, splits it into receive buffers and
 *     posts them all;
 *  2. the NIC DMAs each frame to the start of a buffer and completes it;
 *  3. run: completions (buffer, length, status) come from RX_POLL in arrival
 *     order; the batch goes to the consumer's callback as a frame ring
 *     (offset, length, NIC checksum flags), which deframes the frames in
 *     place (GPU) or from a staged copy (CPU fallback: the CPU cannot read
 *     GPU memory through a pointer, so it copies the completed buffers with
 *     cuMemcpyDtoH, one copy per contiguous run);
 *  4. the buffers go back to the NIC (RX_POST) once the callback returned.
 * Revocation: if the GPU memory goes (freed, dma-buf moved), peerdma.ko
 * quiesces the NIC before the pages are reused; RX_POLL then fails with
 * ENODEV, the MR's PDMA_MR_REVOKED event arrives on the EQ, and run returns
 * -ENODEV after delivering every frame that had completed before.
 *
 * Thread safety: one thread runs a nic receiver; open/close from any thread
 * while it is not running.
 */
#ifndef PDMA_INGEST_RX_NIC_H
#define PDMA_INGEST_RX_NIC_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "deframe/frame.h"
#include "rx/rx.h"
#include "uapi/peerdma_nic.h"

struct pdma_domain;
struct pdma_eq;

/* The most completions one poll returns, so the most frames of a batch. */
#define PDMA_RX_NIC_BATCH 256u

struct pdma_rx_nic_config {
	const char *dev;       /* NIC device, default "/dev/peerdma_nic0" */
	uint32_t nbufs;        /* receive buffers (0: 1024) */
	uint32_t buf_size;     /* 2048 or 4096 (0: 2048) */
	int cuda_device;       /* ordinal of the GPU holding the region */
	bool stage;            /* deliver a host copy of the frames (CPU deframer) */
	uint64_t revoke_after; /* fault injection: free the region after this many frames (0: never) */
};

/*
 * Consumer of one batch: base is the region (a device pointer, or with stage
 * a host copy laid out at the same offsets). Frames are valid until the
 * callback returns. A negative return stops the receiver with that error.
 * A poll that found nothing calls it with n 0 (and f NULL), every 20 ms
 * while the NIC is quiet: the consumer's idle tick.
 */
typedef int (*pdma_rx_nic_fn)(void *arg, uint64_t dev_base, const uint8_t *host_base,
			      const struct pdma_frame *f, uint32_t n);

struct pdma_rx_nic;

/* The whole of step 1. dom must have a kernel device; eq (optional) bound
 * with PDMA_MR_REVOKE_EVENTS. A negative errno with a line in msg. */
int pdma_rx_nic_open(struct pdma_rx_nic **n, const struct pdma_rx_nic_config *c,
		     struct pdma_domain *dom, struct pdma_eq *eq, char *msg, size_t msglen);
/* Steps 2-4 until *stop (then drains what completed, for PDMA_RX_DRAIN_NS
 * at most: pdma_rx_stop_now) or revocation (-ENODEV). Updates st
 * (datagrams, bytes: frames as the NIC delivered them). */
int pdma_rx_nic_run(struct pdma_rx_nic *n, const atomic_bool *stop, pdma_rx_nic_fn fn, void *arg,
		    struct pdma_rx_stats *st);
/* The driver's counters (include/uapi/peerdma_nic.h). */
int pdma_rx_nic_stats(struct pdma_rx_nic *n, struct pdma_nic_stats *s);
/* Region facts for reports: device address, bytes, buffer size and count,
 * where the buffers start, and whether the memory was revoked. */
struct pdma_rx_nic_info {
	uint64_t dev_addr;
	uint64_t bytes;
	uint64_t bufs_off;
	uint32_t buf_size, nbufs;
	uint32_t pin_kind; /* PEERDMA_KIND_* */
	bool revoked;
	bool revoke_event; /* libpeerdma's PDMA_MR_REVOKED arrived on the EQ */
};
void pdma_rx_nic_info(const struct pdma_rx_nic *n, struct pdma_rx_nic_info *i);
/* Detach, close the MR, free the region. */
void pdma_rx_nic_close(struct pdma_rx_nic *n);

#endif /* PDMA_INGEST_RX_NIC_H */
