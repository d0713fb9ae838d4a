/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note OR MIT */
/*
 * gpusim (test only): ioctls of /dev/gpusim, the GPU stand-in backed by the
 * BAR2 of QEMU's ivshmem-plain device. "GPU virtual addresses" are
 * GPUSIM_VA_BASE + the offset of the memory in the BAR; the CPU sees the memory
 * through mmap(/dev/gpusim, offset = bar_off). Allocations belong to the
 * process that made them (only it may pin them) and are freed with
 * GPUSIM_IOC_FREE or when its file is closed, which runs the nv-p2p free
 * callbacks and revokes exported dma-bufs, as cuMemFree does.
 */
#ifndef GPUSIM_UAPI_H
#define GPUSIM_UAPI_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define GPUSIM_DEVICE "/dev/gpusim"
#define GPUSIM_VA_BASE 0x200000000000ULL
#define GPUSIM_PAGE 0x10000ULL

struct gpusim_info {
	__u64 bar_phys;		/* CPU physical address of BAR2 */
	__u64 bar_size;
	__u64 used;		/* bytes of BAR allocated (freed-but-pinned included) */
	__u64 pinned;		/* bytes held by nv-p2p page tables */
	__u32 tables;		/* live page tables */
	__u32 mappings;		/* live DMA mappings */
	__u32 bufs;		/* live exported dma-bufs */
	__u32 callbacks;	/* free callbacks run so far */
	__u32 bufmaps;		/* live dma-buf attachment mappings */
	__u32 violations;	/* documented rules broken by a caller */
	__u32 legacy_hits;	/* 515-535 race hits (legacy_race parameter) */
	__u32 pad;
};

struct gpusim_alloc {
	__u64 size;		/* in: bytes, rounded up to 64 KiB */
	__u64 va;		/* out */
	__u64 bar_off;		/* out: mmap offset */
};

struct gpusim_export {
	__u64 va;		/* 64 KiB aligned, inside one allocation */
	__u64 len;
	__s32 fd;		/* out: dma-buf fd (O_CLOEXEC) */
	__u32 pad;
};

#define GPUSIM_IOC_INFO		_IOR('G', 0, struct gpusim_info)
#define GPUSIM_IOC_ALLOC	_IOWR('G', 1, struct gpusim_alloc)
#define GPUSIM_IOC_FREE		_IOW('G', 2, __u64)
#define GPUSIM_IOC_EXPORT	_IOWR('G', 3, struct gpusim_export)
/*
 * Calls the nv-p2p API with documented bad arguments on the caller's
 * allocation at va (64 KiB or more, unpinned); returns the number of calls
 * whose result differed from the documented one (each logged).
 */
#define GPUSIM_IOC_SELFTEST	_IOW('G', 4, __u64)

#endif /* GPUSIM_UAPI_H */
