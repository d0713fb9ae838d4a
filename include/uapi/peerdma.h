/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note OR MIT */
/*
 * peerdma: the user/kernel contract of /dev/peerdma.
 *
 * Every ioctl argument starts with { __u32 size; __u32 flags; }: flags must
 * hold only the bits defined for that ioctl, and every field named pad or
 * reserved must be zero. Call PEERDMA_IOC_VERSION first: same ABI major, and
 * check caps and the minor for what a field added later needs.
 *
 * Growing the ABI (since 1.1; a 1.0 module wants exactly its own sizes): the
 * structs are size-versioned, as those of openat2(2), clone3(2) and
 * perf_event_open(2). They only ever grow at the end, and a field added later
 * reads zero as "what the older ABI did". The caller's size travels twice, both
 * being sizeof of the struct it was compiled against: in the size field and in
 * _IOC_SIZE of the ioctl number. The module matches a command by its type,
 * number and direction whatever _IOC_SIZE says, then:
 *   size != _IOC_SIZE(cmd), or size below PEERDMA_*_SIZE_VER0 (the first
 *   published size of that struct): EINVAL;
 *   size above the module's struct (a newer caller): accepted when the bytes
 *   the module does not know are all zero, else E2BIG (the caller asked for
 *   something this module cannot do);
 *   size below the module's struct (an older caller): zero-extended, i.e. the
 *   fields it does not know read as zero.
 * Results are copied back only up to the smaller of the two sizes: nothing past
 * the caller's size is ever read or written. The struct peerdma_event records
 * of read() keep their 24 bytes. A caller that must also run on a 1.0 module
 * asks PEERDMA_IOC_VERSION (unchanged since 1.0) and uses the _SIZE_VER0 size
 * of a struct that grew (with _IOC(_IOC_READ | _IOC_WRITE, PEERDMA_IOC_MAGIC,
 * nr, size)) when the minor is 0.
 *
 * Handles are bound to the open file that created them and to the process (mm)
 * that opened it: another file, a forked child or a process that received the
 * fd over a UNIX socket gets -EACCES on every ioctl of that file.
 *
 * Errors (negative errno from ioctl, as errno in user space):
 *   ENOTTY     unknown ioctl number
 *   EFAULT     argument or array pointer not readable/writable; address range
 *              not in user space (kernel address); host memory not mapped or
 *              not pinnable (VM_IO, VM_PFNMAP)
 *   EINVAL     size wrong (see above), unknown flag bit, nonzero pad/reserved,
 *              unknown kind, zero length, misaligned range with
 *              PEERDMA_PIN_EXACT, fd that is not a dma-buf, memory that the
 *              provider refuses
 *   EOVERFLOW  addr + len wraps around
 *   E2BIG      len above PEERDMA_MAX_PIN_LEN; nonzero bytes past the module's
 *              struct size
 *   ENOENT     unknown handle (never created by this file, or already unpinned)
 *   ENODEV     handle revoked (pages gone; only UNPIN and QUERY work on it);
 *              PIN: the dma-buf moved while it was being pinned
 *   EAGAIN     PIN of host memory: the range kept changing under the pin (it
 *              was invalidated on every try); try again
 *   EPROTO     PIN of GPU memory: the GPU driver's page table is not one this
 *              module reads (version, page size, or not covering the range)
 *   EACCES     file used from a process other than the one that opened it
 *   EPERM      physical/DMA addresses asked for without CAP_SYS_RAWIO
 *   ENOSPC     too many handles on this file (PEERDMA_MAX_HANDLES)
 *   ENOMEM     out of memory, or the GPU's BAR space is exhausted
 *   EBADF      bad dma-buf fd
 *   EOPNOTSUPP kind not available (no GPU provider)
 *   other      the GPU driver's or the dma-buf exporter's own error, passed on
 *              (EIO, ERANGE, ...)
 *
 * Invalidation events: read() on the file returns whole struct peerdma_event
 * records (a buffer shorter than one record: EINVAL; none queued: blocks, or
 * EAGAIN with O_NONBLOCK); poll() reports EPOLLIN while any is queued. Each
 * revoked handle produces exactly one event; the handle stays allocated (state
 * REVOKED) until PEERDMA_IOC_UNPIN.
 *
 * Revocation counter (since ABI 1.2, PEERDMA_CAP_REVOKE_COUNT): an event is
 * queued once the pages are released, which may be after the munmap() (or
 * madvise, mremap...) that revoked the pin has returned. So that user space can
 * know synchronously that a revocation happened, each file has a counter of its
 * revocations, incremented inside the revoking call (for host memory, in the
 * MMU notifier: before munmap() returns), and readable without a system call:
 *   mmap(NULL, page size, PROT_READ, MAP_SHARED, fd, PEERDMA_MMAP_COUNTERS)
 * maps one read-only page that starts with struct peerdma_counters. Only the
 * process that opened the file may map it (else EACCES); PROT_WRITE or
 * PROT_EXEC, MAP_PRIVATE, a length other than one page or another offset:
 * EINVAL (EPERM for PROT_WRITE/PROT_EXEC), and mprotect() cannot add them
 * later. Every revocation counted is followed by exactly one event (unless the
 * file is closed), so "revokes == events read" means every revocation that
 * began before the counter was read has been seen; while they differ, the
 * missing events are on their way (read() them, poll() for them). A forked
 * child keeps the mapping read-only; the mapping, like the fd, keeps the file
 * open (its pins live) until it is unmapped.
 */
#ifndef _UAPI_PEERDMA_H
#define _UAPI_PEERDMA_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define PEERDMA_ABI_MAJOR 1
#define PEERDMA_ABI_MINOR 2
#define PEERDMA_ABI_VERSION ((PEERDMA_ABI_MAJOR << 16) | PEERDMA_ABI_MINOR)

#define PEERDMA_DEVICE "/dev/peerdma"
#define PEERDMA_MAX_PIN_LEN (1ULL << 34)	/* 16 GiB per handle */
#define PEERDMA_MAX_HANDLES 65536		/* per open file (at most) */

/* caps */
#define PEERDMA_CAP_HOST		(1ULL << 0)	/* host memory pins */
#define PEERDMA_CAP_GPU			(1ULL << 1)	/* nv-p2p GPU pins */
#define PEERDMA_CAP_GPU_PERSISTENT	(1ULL << 2)	/* persistent nv-p2p API */
#define PEERDMA_CAP_DMABUF		(1ULL << 3)	/* dma-buf import */
#define PEERDMA_CAP_EVENTS		(1ULL << 4)	/* read()/poll() events */
#define PEERDMA_CAP_SPLIT_4K		(1ULL << 5)	/* PEERDMA_PIN_SPLIT_4K */
#define PEERDMA_CAP_REVOKE_COUNT	(1ULL << 6)	/* mmap: struct peerdma_counters */

struct peerdma_version {
	__u32 size;
	__u32 flags;		/* 0 */
	__u32 abi_version;	/* out: PEERDMA_ABI_VERSION of the module */
	__u32 pad;
	__u64 caps;		/* out: PEERDMA_CAP_* */
};

/* kinds of memory */
#define PEERDMA_KIND_HOST	1	/* addr: user virtual address */
#define PEERDMA_KIND_GPU	2	/* addr: GPU (UVA) virtual address, nv-p2p */
#define PEERDMA_KIND_DMABUF	3	/* fd: dma-buf, addr: offset in it */

/* pin flags */
#define PEERDMA_PIN_SPLIT_4K	(1U << 0)	/* report 4 KiB entries for 64 KiB pages */
#define PEERDMA_PIN_GPU_CALLBACK (1U << 1)	/* nv-p2p free-callback mode (MIG, vGPU) */
#define PEERDMA_PIN_EXACT	(1U << 2)	/* refuse (EINVAL) instead of rounding out */
#define PEERDMA_PIN_READONLY	(1U << 3)	/* host: devices only read it (DMA_TO_DEVICE) */
#define PEERDMA_PIN_FLAGS	0xfU

struct peerdma_pin {
	__u32 size;
	__u32 flags;		/* PEERDMA_PIN_* */
	__u32 kind;		/* PEERDMA_KIND_* */
	__s32 fd;		/* dma-buf fd (KIND_DMABUF), else must be -1 */
	__u64 addr;		/* see kinds */
	__u64 len;
	__u64 user_data;	/* returned in events and QUERY */
	/* out */
	__u64 handle;
	__u64 pinned_addr;	/* start after rounding out to whole pages */
	__u64 pinned_len;
	__u32 page_size;	/* bytes per reported entry */
	__u32 entries;		/* number of entries */
};

struct peerdma_unpin {
	__u32 size;
	__u32 flags;		/* 0 */
	__u64 handle;
};

/* handle states */
#define PEERDMA_STATE_LIVE	1
#define PEERDMA_STATE_REVOKED	2

struct peerdma_query {
	__u32 size;
	__u32 flags;		/* 0 */
	__u64 handle;
	/* out */
	__u32 state;		/* PEERDMA_STATE_* */
	__u32 kind;
	__u64 pinned_addr;
	__u64 pinned_len;
	__u64 user_data;
	__u32 page_size;
	__u32 entries;
	__u32 clients;		/* in-kernel client mappings attached */
	__u32 pad;
	/* since ABI 1.1 (PEERDMA_QUERY_SIZE_VER1) */
	__u32 revoke_reason;	/* out: PEERDMA_EVENT_* once the event is queued, else 0 */
	__u32 pad2;
};

/* Physical (CPU) addresses of the pinned pages; needs CAP_SYS_RAWIO. */
struct peerdma_get_pages {
	__u32 size;
	__u32 flags;		/* 0 */
	__u64 handle;
	__u64 addrs;		/* user pointer to __u64[count] */
	__u32 count;		/* in: room; out: entries (EINVAL if room too small) */
	__u32 page_size;	/* out */
};

/* revoke reasons */
#define PEERDMA_EVENT_GPU_FREE		1	/* nv-p2p free callback */
#define PEERDMA_EVENT_HOST_INVALIDATE	2	/* MMU notifier (munmap, exit...) */
#define PEERDMA_EVENT_DMABUF_MOVE	3	/* dma-buf move_notify */

struct peerdma_event {
	__u64 handle;
	__u64 user_data;
	__u32 reason;		/* PEERDMA_EVENT_* */
	__u32 pad;
};

/* mmap offset of the counter page (PEERDMA_CAP_REVOKE_COUNT) */
#define PEERDMA_MMAP_COUNTERS	0

/*
 * The counter page. Written by the module only, each field in one 64-bit store
 * (WRITE_ONCE under the file's event lock: it never goes backwards); read it
 * with an acquire load (__atomic_load_n(&c->revokes, __ATOMIC_ACQUIRE)). The
 * rest of the page reads zero and may gain fields in a later minor.
 */
struct peerdma_counters {
	__u64 revokes;		/* handles of this file revoked so far */
};

/*
 * First published size of each ioctl struct (ABI 1.0), the least a module
 * accepts, and the size of every later version of a struct that grew.
 */
#define PEERDMA_VERSION_SIZE_VER0	24
#define PEERDMA_PIN_SIZE_VER0		72
#define PEERDMA_UNPIN_SIZE_VER0		16
#define PEERDMA_QUERY_SIZE_VER0		64
#define PEERDMA_QUERY_SIZE_VER1		72	/* + revoke_reason, pad2 */
#define PEERDMA_GET_PAGES_SIZE_VER0	32

#define PEERDMA_IOC_MAGIC 0xd7
#define PEERDMA_IOC_VERSION	_IOWR(PEERDMA_IOC_MAGIC, 0x00, struct peerdma_version)
#define PEERDMA_IOC_PIN		_IOWR(PEERDMA_IOC_MAGIC, 0x01, struct peerdma_pin)
#define PEERDMA_IOC_UNPIN	_IOWR(PEERDMA_IOC_MAGIC, 0x02, struct peerdma_unpin)
#define PEERDMA_IOC_QUERY	_IOWR(PEERDMA_IOC_MAGIC, 0x03, struct peerdma_query)
#define PEERDMA_IOC_GET_PAGES	_IOWR(PEERDMA_IOC_MAGIC, 0x04, struct peerdma_get_pages)

#endif /* _UAPI_PEERDMA_H */
