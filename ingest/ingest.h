/* SPDX-License-Identifier: MIT */
/*
 * The VITA-49 receive session (library peerdma_ingest): N receive threads,
 * each with its own SO_REUSEPORT socket and receive ring (rx/), and one
 * deframer thread that consumes all rings, in order of arrival per ring (a
 * flow always hashes to the same socket, so per-stream order is kept), with
 * the CPU deframer or GPU batching (deframe/), and accounts per stream.
 * Errors are negative errno values.
 *
 * A datagram's way down the layers:
 *   rx/socket.c -> rx/recvmmsg.c, rx/io_uring.c or rx/gro.c (-> rx/sim_dma.c),
 *   or an XDP socket (rx/xdp.c) -> a slot of rx/ring.h -> deframe/deframe_cpu.c or deframe/gpu_batch.c (the shared
 *   core: deframe/deframe.h) -> deframe/acct.c -> pdma_ingest_json.
 *
 * Start/stop/stats from one controlling thread; nothing here uses globals.
 */
#ifndef PDMA_INGEST_INGEST_H
#define PDMA_INGEST_INGEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "deframe/deframe_cpu.h"
#include "peerdma/ingest.h"
#include "deframe/gpu_batch.h"
#include "rx/nic.h"

struct pdma_domain;
struct pdma_sim;

/* cpu: CPU deframer. host-staged: the ring (pinned, mapped) is copied to the
 * GPU in chunks and deframed there. zero-copy: the GPU deframer reads the
 * mapped ring directly. direct: the ring lives in (simulated) GPU memory and
 * the (simulated) DMA device writes packets into it by key; the CPU deframer
 * reads it, since sim GPU memory is host memory. The two GPU paths need a
 * CUDA device and the module (pdma_ingest_open: -ENODEV / -ENOENT). nic: a
 * NIC driver (drivers/e1000/) writes Ethernet frames into GPU memory pinned
 * by peerdma.ko (rx/nic.h); the frames are deframed in place by the GPU
 * deframer, or by the CPU deframer from a copy (nic_deframer); the UDP
 * destination port the frames must carry is port. */
enum pdma_rx_path { PDMA_RX_CPU = 0, PDMA_RX_HOST_STAGED, PDMA_RX_ZERO_COPY, PDMA_RX_DIRECT,
		    PDMA_RX_NIC };
/* nic path: which deframer reads the frames (auto: the GPU's where the
 * module loads, else the CPU's). */
enum pdma_nic_deframer { PDMA_NIC_DFR_AUTO = 0, PDMA_NIC_DFR_CPU, PDMA_NIC_DFR_GPU };
/* How a receive thread reads its socket: recvmmsg batches (default),
 * io_uring (multishot recvmsg into the ring's slots as provided buffers),
 * gro (UDP GRO: recvmmsg batches of coalesced buffers, split into one slot
 * per datagram, rx/gro.c), or xdp (AF_XDP: an XDP program hands the frames
 * to an XDP socket per receive thread, on receive queue 0, 1, ... of
 * xdp_dev, rx/xdp.c; root). Only recvmmsg is for the direct path, whose
 * datagrams go through the device. */
enum pdma_rx_io { PDMA_RX_IO_RECVMMSG = 0, PDMA_RX_IO_URING, PDMA_RX_IO_GRO, PDMA_RX_IO_XDP };
/* Its name ("recvmmsg", "io_uring", "gro", "xdp"). */
const char *pdma_rx_io_name(enum pdma_rx_io io);

/* The rings' slot layout (rx/ring.h, deframe/deframe.h). Where the receive
 * path can fill them (not io_uring), auto takes tiny slots (datagram at byte
 * 4, 80-byte slots) for slots of at most PDMA_SLOT_TINY_MAX bytes, packed
 * ones (datagram at byte 20, 16-byte rounding) for slots of at most
 * PDMA_SLOTS_PACKED_AUTO bytes, the full layout (datagram at byte 36, 64-byte
 * rounding) else. Every layout needs 64 bytes after its header (the fast
 * path's prefix), so 81-83-byte slots fit none: the session refuses them
 * and says so, as every slot it refuses. */
enum pdma_slot_choice { PDMA_SLOTS_AUTO = 0, PDMA_SLOTS_FULL, PDMA_SLOTS_PACKED, PDMA_SLOTS_TINY };
/* Where packed slots were measured to win on the GPU (H200,
 * ingest/deframe/cuda/DESIGN.md): 64-byte packets in 96-byte slots deframe
 * 11.5% faster than in 128-byte full ones; at 128 bytes the two are level, at
 * 256 the full layout's 64-byte aligned payloads are 4% faster. Slots of up
 * to 128 bytes: datagrams of up to 108. In 80-byte tiny slots 64-byte
 * packets deframe another 11% faster (68.3-68.7% of a D2D copy against
 * 61.0-61.8% in packed ones). */
#define PDMA_SLOTS_PACKED_AUTO 128u
/* The layout a ring of slot_size-byte slots filled by io gets for choice:
 * the one rule the session, its slot check and the benchmarks share. */
enum pdma_ring_layout pdma_ingest_ring_layout(enum pdma_slot_choice choice, uint32_t slot_size,
					      enum pdma_rx_io io);

struct pdma_ingest_config {
	uint16_t port;            /* 0: ephemeral (see pdma_ingest_port) */
	const char *bind_addr;    /* default 127.0.0.1 */
	uint32_t threads;         /* receive threads */
	uint32_t ring_slots;      /* per receive thread */
	uint32_t slot_size;       /* bytes per slot (datagram + its slot header) */
	enum pdma_slot_choice slot_layout;
	uint32_t batch;           /* recvmmsg batch */
	int rcvbuf;               /* SO_RCVBUF bytes */
	enum pdma_rx_path path;
	enum pdma_rx_io rx_io;
	const char *xdp_dev;      /* rx_io xdp: the device (NULL: the one holding bind_addr) */
	struct pdma_dfr_config dfr;
	struct pdma_domain *domain; /* optional: register rings here (required: direct) */
	struct pdma_sim *sim;       /* direct path: the simulated GPU holding the rings */
	size_t gpu_chunk;           /* host-staged: bytes per copy (0: 4 MiB, >= 90% of the H100's copy-engine peak) */
	enum pdma_ingest_launch gpu_launch; /* GPU paths: see deframe/gpu_batch.h */
	int cuda_device;            /* host-staged, zero-copy: the GPU deframer's device
				     * (the nic path: nic.cuda_device, its region's) */
	/* nic path: the NIC and its region (nic.stage is set by the session);
	 * domain must have a kernel device; eq, optional, bound with
	 * PDMA_MR_REVOKE_EVENTS, confirms a revocation */
	struct pdma_rx_nic_config nic;
	enum pdma_nic_deframer nic_deframer;
	struct pdma_eq *eq;
};

struct pdma_ingest_totals {
	uint64_t datagrams, bytes;
	uint64_t ring_overruns;   /* dropped because a ring was full */
	uint64_t socket_drops;    /* kernel drops (SO_RXQ_OVFL) */
	uint64_t truncated;       /* datagrams larger than a slot */
	double ring_fill;         /* worst ring fill now, 0..1 */
	double rx_cpu_s;          /* receive threads' CPU time, summed over those that have
				   * ended (all of them after stop) */
	double rx_sys_s;          /* ... of which in the kernel (system time) */
	uint64_t gro_buffers;     /* rx_io gro: receive buffers the datagrams came in */
	uint64_t xdp_invalid;     /* rx_io xdp: frames with no datagram of ours (checksum, lengths) */
	uint64_t xdp_stack;       /* rx_io xdp: datagrams the program passed on, via the UDP socket */
};

/* The session object is the public one (include/peerdma/ingest.h: start,
 * stop, close, port, ended, subscriptions); what follows is the inside
 * view: a session from a full configuration, its totals, deframer and JSON. */
void pdma_ingest_config_default(struct pdma_ingest_config *c);
/* A session from a full configuration; msg (msglen bytes, may be NULL) gets a
 * line saying what failed. No blocks until pdma_ingest_enable_blocks. */
int pdma_ingest_open_config(const struct pdma_ingest_config *c, struct pdma_ingest **ing, char *msg,
			    size_t msglen);
/* The slot size and layout c asks for: 0, or -EINVAL with the reason in msg
 * (msglen bytes). pdma_ingest_open_config refuses by it; the CLI asks it
 * while parsing, so that a bad slot is a usage error with the same reason. */
int pdma_ingest_check_slots(const struct pdma_ingest_config *c, char *msg, size_t msglen);
/* Blocks for subscribers (blocks/blocks.h): block_packets packets each,
 * published late_blocks blocks behind each stream's newest packet, or
 * flush_idle_ms after the last datagram (0: never), pool buffers per stream. Before start; the cpu path and the nic path's CPU
 * deframer (-EOPNOTSUPP for the GPU's). */
int pdma_ingest_enable_blocks(struct pdma_ingest *ing, uint32_t block_packets, uint32_t late_blocks,
			      uint32_t pool, uint32_t flush_idle_ms);
/* Objects the session closes with itself (the public open's domain and EQ). */
void pdma_ingest_own(struct pdma_ingest *ing, struct pdma_domain *dom, struct pdma_eq *eq);
/* Live progress lines (rates, loss, ring fill) every second, from the
 * deframer thread; NULL (default) for none. Set before start. */
void pdma_ingest_set_progress(struct pdma_ingest *ing, FILE *f);
void pdma_ingest_totals(struct pdma_ingest *ing, struct pdma_ingest_totals *t);
/* The deframer (valid to read after stop). */
const struct pdma_dfr *pdma_ingest_dfr(const struct pdma_ingest *ing);
/* JSON summary (jansson object, caller json_decref()s): totals + streams. */
struct json_t *pdma_ingest_json(struct pdma_ingest *ing, double seconds);

#endif /* PDMA_INGEST_INGEST_H */
