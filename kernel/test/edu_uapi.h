/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note OR MIT */
/*
 * peerdma_edu (test only): a reference peerdma client driver for QEMU's edu
 * device. It DMAs between two peerdma handles through the edu's 4 KiB buffer
 * (bus -> edu, then edu -> bus) and can hold a handle's mapping to show the
 * quiesce callback at work.
 */
#ifndef PEERDMA_EDU_UAPI_H
#define PEERDMA_EDU_UAPI_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define PEERDMA_EDU_DEVICE "/dev/peerdma_edu"
#define PEERDMA_EDU_MAX_XFER 4095

struct peerdma_edu_xfer {
	__s32 peerdma_fd;
	__u32 len;		/* 1..4095 */
	__u64 src_handle;
	__u64 src_off;		/* from the handle's pinned_addr */
	__u64 dst_handle;
	__u64 dst_off;
};

#define PEERDMA_EDU_ATTACH_SPLIT_4K 1	/* ask peerdma for 4 KiB entries */

struct peerdma_edu_attach {
	__s32 peerdma_fd;
	__u32 flags;		/* PEERDMA_EDU_ATTACH_* */
	__u64 handle;
};

struct peerdma_edu_status {
	__u32 attached;
	__u32 mapped;		/* the attached mapping is still valid */
	__u32 quiesced;		/* quiesce callbacks seen by the attached client */
	__u32 entries;
	__u64 first_dma;	/* I/O address of entry 0 */
};

#define PEERDMA_EDU_IOC_XFER	_IOW('E', 0, struct peerdma_edu_xfer)
#define PEERDMA_EDU_IOC_ATTACH	_IOW('E', 1, struct peerdma_edu_attach)
#define PEERDMA_EDU_IOC_STATUS	_IOR('E', 2, struct peerdma_edu_status)
#define PEERDMA_EDU_IOC_DETACH	_IO('E', 3)

#endif /* PEERDMA_EDU_UAPI_H */
