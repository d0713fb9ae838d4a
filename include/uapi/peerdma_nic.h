/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note OR MIT */
/*
 * peerdma_e1000: the user/kernel contract of the reference NIC driver
 * (drivers/e1000/), a peerdma client for Intel 8254x (e1000) NICs that
 * receives into and transmits from memory pinned through /dev/peerdma (GPU
 * pages above all), with no copy through host memory.
 *
 * /dev/peerdma_nicN, one per bound NIC. One file may own the receive side
 * (RX_ATTACH .. RX_DETACH or close) at a time: a second gets EBUSY. Every
 * ioctl argument starts with { __u32 size; __u32 flags; } as in peerdma.h
 * (size-versioned, unknown flag bits and nonzero pad: EINVAL).
 *
 * Receive: RX_ATTACH gives the driver (peerdma fd, handle) of a pin made by
 * the calling process; the driver maps it for the NIC with
 * peerdma_client_get(PEERDMA_CLIENT_SPLIT_4K) and splits [offset, offset +
 * len) of the pinned range into nbufs receive buffers of buf_size bytes
 * (buffer i at offset + i * buf_size; a buffer never straddles a
 * discontiguous pair of pages). All buffers start posted to the NIC. A frame
 * lands at the start of one buffer (no jumbo frames: frames of more than 1522
 * bytes, 1518 and a VLAN tag, are dropped by the NIC and counted in rx_long,
 * whatever buf_size). RX_POLL reports completions in arrival order, without
 * touching the payload; the buffers they name belong to user space until
 * RX_POST gives them back. No completion is lost to a cqes array that cannot
 * be written: RX_POLL fails with EFAULT (or returns what it wrote before the
 * bad part) and the next RX_POLL delivers the rest first. RX_POST gives back
 * all of its buffers or, on an error, none.
 *
 * Receive ring in GPU memory (PDMA_NIC_RX_RING_IN_MEM, CAP_SYS_RAWIO): the
 * NIC's descriptor ring itself is put at [offset, offset + ring_bytes) of the
 * pinned range and the buffers follow it; descriptor i always names buffer i
 * (legacy e1000 descriptors: the NIC writes back length, status and errors,
 * never the address). The consumer (a GPU kernel) polls the descriptors'
 * status bytes itself, clears them, and hands descriptors back by ringing
 * the doorbell: RX_DOORBELL with the new tail. RX_POLL and RX_POST then
 * return EINVAL. Whoever can write the ring can aim the NIC's DMA: hence
 * CAP_SYS_RAWIO (and the IOMMU, where there is one, still confines it to the
 * pinned range).
 *
 * Revocation: when peerdma revokes the pin (GPU memory freed, dma-buf moved,
 * unpin, the peerdma file closed), the driver's quiesce callback disables the
 * receiver and waits until the NIC is idle before returning; from then on
 * RX_POLL returns what had completed before and then ENODEV, and RX_POST,
 * RX_DOORBELL fail with ENODEV. RX_DETACH (or close) releases the attachment
 * in any state.
 *
 * Transmit: TX sends frames from a pinned range (any handle of the calling
 * process), each frame one descriptor (two where it crosses pages that are
 * not contiguous in I/O space), and waits until the NIC reports them sent.
 * The range is mapped for the NIC for that call only: if timeout_ms passes
 * (ETIMEDOUT), a signal comes (EINTR), the call fails, a quiesce comes or the
 * NIC is unbound (ENXIO), the transmitter is stopped and what was still
 * queued is dropped; done says how many went. TX calls are served one at a
 * time, but a TX never holds the receive side: RX_POLL, RX_POST and STATS of
 * any file go on while it runs. A page of cqes, bufs or frames that faults
 * slowly holds only its own call, never another file's.
 *
 * Errors: ENOTTY unknown ioctl; EINVAL bad size/flags/pad, buf_size not one
 * the NIC supports, offset/len outside the pin or not buf_size aligned, too
 * few buffers; EBUSY receive side owned by another file; ENOENT/ENODEV/EACCES
 * as peerdma_client_get (unknown, revoked handle, another process's file);
 * EPERM ring in memory without CAP_SYS_RAWIO; ENXIO the NIC was unbound.
 */
#ifndef _UAPI_PEERDMA_NIC_H
#define _UAPI_PEERDMA_NIC_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define PDMA_NIC_DEVICE_FMT "/dev/peerdma_nic%u"

struct pdma_nic_info {
	__u32 size;
	__u32 flags;		/* 0 */
	__u8 mac[6];		/* out */
	__u16 link_up;		/* out: 1 when the link is up */
	__u32 rx_ring_max;	/* out: receive descriptors (960 in pinned memory) */
	__u32 tx_ring;		/* out: transmit descriptors */
	__u32 buf_sizes;	/* out: bit n set: 1 << n bytes is a valid buf_size */
	__u32 pad;
};

#define PDMA_NIC_RX_RING_IN_MEM	(1U << 0)	/* descriptor ring in the pinned range */
#define PDMA_NIC_RX_PROMISC	(1U << 1)	/* accept every unicast MAC */
#define PDMA_NIC_RX_STRIP_CRC	(1U << 2)	/* NIC strips the 4-byte FCS (default: kept off) */
#define PDMA_NIC_RX_FLAGS	0x7U

struct pdma_nic_rx_attach {
	__u32 size;
	__u32 flags;		/* PDMA_NIC_RX_* */
	__s32 peerdma_fd;	/* the /dev/peerdma file that owns handle */
	__u32 buf_size;		/* 2048 or 4096 (see info.buf_sizes) */
	__u64 handle;		/* peerdma handle */
	__u64 offset;		/* from the pinned range's start */
	__u64 len;		/* bytes to use: ring (RING_IN_MEM) + buffers */
	__u32 ring_entries;	/* in: 0 = one per buffer (out: descriptors used) */
	__u32 nbufs;		/* out: receive buffers */
	__u64 bufs_offset;	/* out: offset of buffer 0 from the pinned start */
	__u64 ring_offset;	/* out (RING_IN_MEM): offset of the descriptor ring */
};

/* completion status bits (normalised from the NIC's descriptor) */
#define PDMA_NIC_CQE_EOP	(1U << 0)	/* whole frame in this buffer */
#define PDMA_NIC_CQE_IPCS	(1U << 1)	/* NIC verified the IPv4 header checksum */
#define PDMA_NIC_CQE_L4CS	(1U << 2)	/* NIC verified the TCP/UDP checksum */
#define PDMA_NIC_CQE_ERR	(1U << 3)	/* NIC reported an error (errors byte) */

struct pdma_nic_cqe {
	__u32 buf;		/* buffer index */
	__u16 len;		/* bytes the NIC wrote at the buffer's start */
	__u8 status;		/* PDMA_NIC_CQE_* */
	__u8 errors;		/* the descriptor's raw errors byte */
};

struct pdma_nic_rx_poll {
	__u32 size;
	__u32 flags;		/* 0 */
	__u64 cqes;		/* user pointer to struct pdma_nic_cqe[max] */
	__u32 max;
	__s32 timeout_ms;	/* 0: do not wait; -1: until one arrives */
	__u32 n;		/* out: completions written */
	__u32 pad;
};

struct pdma_nic_rx_post {
	__u32 size;
	__u32 flags;		/* 0 */
	__u64 bufs;		/* user pointer to __u32[n] buffer indices */
	__u32 n;
	__u32 pad;
};

struct pdma_nic_rx_doorbell {
	__u32 size;
	__u32 flags;		/* 0 */
	__u32 tail;		/* next descriptor the NIC may not use */
	__u32 pad;
};

struct pdma_nic_tx_frame {
	__u64 offset;		/* from the pinned range's start */
	__u32 len;		/* 60..buf limit; the NIC pads and adds the FCS */
	__u32 pad;
};

struct pdma_nic_tx {
	__u32 size;
	__u32 flags;		/* 0 */
	__s32 peerdma_fd;
	__u32 n;		/* frames */
	__u64 handle;
	__u64 frames;		/* user pointer to struct pdma_nic_tx_frame[n] */
	__s32 timeout_ms;
	__u32 done;		/* out: frames the NIC reported sent */
};

struct pdma_nic_stats {
	__u32 size;
	__u32 flags;		/* 0 */
	__u64 rx_frames;	/* completions reported */
	__u64 rx_bytes;
	__u64 rx_missed;	/* NIC had no free descriptor (MPC) */
	__u64 rx_long;		/* longer than 1522 bytes (dropped by the NIC) */
	__u64 rx_errors;	/* completions with PDMA_NIC_CQE_ERR */
	__u64 tx_frames;	/* frames the NIC reported sent, counted as they go */
	__u64 doorbells;	/* tail register writes (RX and TX) */
	__u64 irqs;		/* 0: this driver polls, it takes no interrupt */
	__u64 quiesces;		/* quiesce callbacks run */
	__u64 quiesce_ns;	/* their total time */
	__u64 reap_ns;		/* driver CPU time in RX_POLL + RX_POST */
};

#define PDMA_NIC_IOC_MAGIC	'N'
#define PDMA_NIC_IOC_INFO	_IOWR(PDMA_NIC_IOC_MAGIC, 0, struct pdma_nic_info)
#define PDMA_NIC_IOC_RX_ATTACH	_IOWR(PDMA_NIC_IOC_MAGIC, 1, struct pdma_nic_rx_attach)
#define PDMA_NIC_IOC_RX_POLL	_IOWR(PDMA_NIC_IOC_MAGIC, 2, struct pdma_nic_rx_poll)
#define PDMA_NIC_IOC_RX_POST	_IOW(PDMA_NIC_IOC_MAGIC, 3, struct pdma_nic_rx_post)
#define PDMA_NIC_IOC_RX_DOORBELL _IOW(PDMA_NIC_IOC_MAGIC, 4, struct pdma_nic_rx_doorbell)
#define PDMA_NIC_IOC_RX_DETACH	_IO(PDMA_NIC_IOC_MAGIC, 5)
#define PDMA_NIC_IOC_TX		_IOWR(PDMA_NIC_IOC_MAGIC, 6, struct pdma_nic_tx)
#define PDMA_NIC_IOC_STATS	_IOWR(PDMA_NIC_IOC_MAGIC, 7, struct pdma_nic_stats)

#endif /* _UAPI_PEERDMA_NIC_H */
