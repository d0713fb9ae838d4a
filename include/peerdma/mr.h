/* SPDX-License-Identifier: MIT */
/*
 * peerdma memory registration: the fi_mr(3) model of libfabric, prefix pdma_.
 *
 * Objects: a domain owns memory regions (MRs), counters, endpoints and an
 * optional event queue. An MR pins a set of buffers (host, CUDA or simulated
 * GPU memory) for device DMA and names them with a key and a descriptor.
 *
 * Errors: every call that can fail returns 0 or a negative errno value, and
 * nothing else. Where libfabric's fi_errno code is the errno value itself
 * (FI_EINVAL, FI_ENOMEM, FI_EFAULT, FI_EBUSY, FI_EAGAIN, FI_EACCES, FI_ENOSYS,
 * FI_EOPNOTSUPP, FI_EKEYREJECTED, FI_ENODEV, FI_ENOSPC, FI_EOVERFLOW, ...) the
 * numbers agree. Two codes that libfabric numbers on its own do not:
 *   -ENOKEY  (key unknown or in use)        is libfabric's -FI_ENOKEY (266)
 *   -ERANGE  (caller's buffer too small)    is libfabric's -FI_ETOOSMALL (257)
 * pdma_errno_to_fi() and pdma_errno_from_fi() convert; errno values with no
 * libfabric code (-ESTALE, -EPROTO, -EEXIST, -ECHILD) become -FI_EOTHER (256).
 *
 * What a host memory (PDMA_HMEM_SYSTEM) registration guarantees:
 *  - Without the kernel module (kernel_device NULL): the range was mapped when
 *    it was registered; nothing more is done to the pages. They are neither
 *    locked nor pinned: user space cannot make a DMA pin (mlock keeps pages
 *    resident, but the kernel may still migrate them), so peerdma does not
 *    pretend to. Devices of this library reach the memory through the
 *    process's virtual addresses. The application's munmap, madvise
 *    (MADV_DONTNEED, MADV_FREE) and free() always succeed, whether an MR is
 *    open or closed and cached. With the cache on, the monitor drops a cached
 *    registration whose memory was unmapped, remapped or discarded: the next
 *    registration of the range takes the memory as it is then (unmapped:
 *    -EFAULT), never the old one, and device access through an MR still open
 *    on it fails with -EFAULT. Residency is the application's choice:
 *    mlock(2) the memory itself (peerdma never unlocks it).
 *  - With the kernel module (kernel_device set): the pages are pinned with
 *    pin_user_pages(FOLL_LONGTERM), a DMA pin, and the module's MMU notifier
 *    revokes the registration when the range is unmapped or changed; DMA
 *    through a revoked registration fails with -EFAULT.
 *
 * fork(): the parent's registrations stay valid and keep the parent's pages.
 * Private memory is copy-on-write for the child, and a private anonymous page
 * pinned through the kernel module is copied for the child at fork by the
 * kernel itself, so the child's writes never reach the pinned page (Linux 5.9
 * and later; Debian 12's 6.1: copy_present_pte() copies a page that may be
 * DMA-pinned instead of sharing it). Shared mappings (MAP_SHARED) stay
 * shared, as the application asked. peerdma does not madvise(MADV_DONTFORK)
 * registered memory (the model of ibv_fork_init): on these kernels it would
 * protect nothing more, and it would unmap the registered pages, and whatever
 * shares a page with them (malloc'd neighbours), in the child.
 * In the child, domains opened before the fork keep working, but their cache
 * forgets the parent's registrations without releasing them: each
 * registration there pins afresh (a domain opened in the child caches
 * again). A kernel-device domain opened before the fork refuses registrations
 * there with -ECHILD: the module's file and its pins belong to the parent;
 * open a new domain in the child. Closing inherited MRs and domains in the
 * child releases nothing of the parent's. Where the child holds the module's
 * file last (the parent closed the domain first), the module releases the
 * parent's pins when the child closes it; GPU pages pinned through nv-p2p
 * then stay with the NVIDIA driver until the parent frees that memory or
 * exits, since only the pinning process can give them back (kernel/README.md,
 * "orphans"). Another thread's registration,
 * transfer or EQ read (also one blocked waiting for an event) at the moment
 * of the fork is safe: the child can read, post to and close inherited EQs.
 *
 * Thread safety: a domain may be used from many threads at once; all calls on
 * distinct MRs of one domain may run concurrently. Calls on the same MR must
 * be serialised by the caller, except pdma_mr_key(), which only reads an
 * immutable field, and pdma_mr_desc(), whose first call on an MR makes its
 * descriptor under the domain's lock (later calls read it). Closing an object
 * while another thread uses it is undefined, as in libfabric.
 */
#ifndef PEERDMA_MR_H
#define PEERDMA_MR_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Domain mr_mode bits (fi_mr(3) "MEMORY REGISTRATION MODES"). */
#define PDMA_MR_LOCAL      (1u << 0) /* local buffers must be registered; desc required */
#define PDMA_MR_RAW        (1u << 1) /* keys are raw byte strings (pdma_mr_raw_attr) */
#define PDMA_MR_VIRT_ADDR  (1u << 2) /* remote addressing by virtual address, not offset */
#define PDMA_MR_ALLOCATED  (1u << 3) /* only allocated (backed) memory may be registered */
#define PDMA_MR_PROV_KEY   (1u << 4) /* the provider chooses keys; requested_key must be 0 */
#define PDMA_MR_MMU_NOTIFY (1u << 5) /* caller must pdma_mr_refresh() after remapping */
#define PDMA_MR_RMA_EVENT  (1u << 6) /* MRs start disabled; counters via pdma_mr_bind */
#define PDMA_MR_ENDPOINT   (1u << 7) /* MRs bind to an endpoint and start disabled */
#define PDMA_MR_HMEM       (1u << 8) /* device (CUDA, sim) buffers must be registered */
#define PDMA_MR_BASIC (PDMA_MR_VIRT_ADDR | PDMA_MR_ALLOCATED | PDMA_MR_PROV_KEY)
#define PDMA_MR_MODE_ALL ((1u << 9) - 1)

/* Access flags (fi_mr(3) "access"). */
#define PDMA_SEND         (1u << 0)
#define PDMA_RECV         (1u << 1)
#define PDMA_READ         (1u << 2)
#define PDMA_WRITE        (1u << 3)
#define PDMA_REMOTE_READ  (1u << 4)
#define PDMA_REMOTE_WRITE (1u << 5)
#define PDMA_ACCESS_ALL   ((1u << 6) - 1)

/* Flags for pdma_domain_bind_eq() and pdma_mr_bind_cntr(). */
#define PDMA_REG_MR       (1ull << 0) /* EQ: registrations complete asynchronously */
#define PDMA_REMOTE_WRITE_EVENTS (1ull << 1) /* cntr: count remote writes into the MR */
#define PDMA_MR_REVOKE_EVENTS (1ull << 2) /* EQ: PDMA_MR_REVOKED events */

/* pdma_mr_key() when the domain uses raw keys. */
#define PDMA_KEY_NOTAVAIL UINT64_MAX

enum pdma_hmem_iface {
	PDMA_HMEM_SYSTEM = 0, /* host memory */
	PDMA_HMEM_CUDA = 1,   /* CUDA device memory (libcuda loaded at run time) */
	PDMA_HMEM_SIM = 2,    /* simulated GPU memory (test builds: lib/mem/sim.h) */
};

struct pdma_domain;
struct pdma_mr;
struct pdma_eq;
struct pdma_cntr;
struct pdma_ep;
struct pdma_sim;

struct pdma_domain_attr {
	uint32_t mr_mode;        /* PDMA_MR_* bits */
	size_t mr_key_size;      /* bytes of a non-raw key: 1..8 (0 means 8) */
	size_t mr_iov_limit;     /* max iov entries per MR: 1..64 (0 means 4) */
	size_t raw_key_size;     /* bytes of a raw key under PDMA_MR_RAW: 16..64 (0 means 16) */
	struct pdma_sim *sim;    /* simulated GPU + DMA device for PDMA_HMEM_SIM (test builds,
				  * static library: lib/mem/sim.h); NULL otherwise */
	int use_cache;           /* 1: registrations go through the registration cache.
				  * CUDA memory in it ($PEERDMA_CUDA_MONITOR): "tag"
				  * checks the buffer ID on every hit; "hooks" trusts
				  * the deallocation hooks (libpeerdma_cuda_hooks.so)
				  * for all CUDA memory; "auto" (default), with the
				  * hooks detected, trusts them only for allocations
				  * they saw made (cuMemAlloc*, cudaMalloc*) and keeps
				  * the check for IPC and VMM mappings and any other
				  * memory; without the hooks, auto is "tag" */
	const char *kernel_device; /* non-NULL (e.g. "/dev/peerdma"): pin host memory through
				    * the kernel module (pin_user_pages + MMU notifier, revocation
				    * events), a DMA pin; without it host memory is checked, not
				    * pinned (see above); open fails if it is absent. With
				    * use_cache, the module is also the cache's host memory
				    * monitor ("kernel", the default; see below) */
};

/*
 * Host memory monitors of the registration cache (use_cache; environment
 * PEERDMA_MR_CACHE_MONITOR=kernel|userfaultfd|memhooks|disabled). Default:
 * "kernel" when the domain has a kernel_device whose module counts
 * revocations (ABI 1.2, PEERDMA_CAP_REVOKE_COUNT), else "userfaultfd" if the
 * kernel allows it, else "memhooks" if libc's entry points can be patched,
 * else host memory is not cached.
 *
 * The kernel monitor's guarantee: every cached host registration is a pin of
 * peerdma.ko's, watched by an MMU notifier on its pages. Any change of the
 * pages behind it (munmap, mmap MAP_FIXED over it, mremap, madvise
 * MADV_DONTNEED/FREE/REMOVE, brk shrinking, free() that unmaps, exit) revokes
 * the pin inside that call, and the next registration of host memory in this
 * domain, in any thread, first handles every revocation that began before it:
 * once munmap() has returned, no registration is ever served from the old
 * pages. It needs neither userfaultfd (which Docker's default seccomp profile
 * blocks) nor patched code, only read/write
 * access to the device node. Cost: one load and a compare per host cache
 * lookup; a revocation costs an event read by the next lookup (or the
 * library's event thread), a few microseconds. Closed, cached registrations
 * hold pinned (not mlocked) pages: the application's own munmap, madvise and
 * free succeed and simply drop them.
 */

/* Fills *attr with defaults: PDMA_MR_BASIC|LOCAL|HMEM, 8-byte keys, 4 iovs. */
void pdma_domain_attr_init(struct pdma_domain_attr *attr);

/* The first open in a process registers it for membarrier(2)'s private
 * expedited barrier, which the domain lock uses (lib/mr/lock.h): with one
 * thread that is microseconds; with more, the kernel waits for an RCU grace
 * period (milliseconds), once per process, here rather than in a
 * registration. */
int pdma_domain_open(const struct pdma_domain_attr *attr, struct pdma_domain **domain);
/* -EBUSY while MRs, counters, endpoints or EQs (bound or not) are still open. */
int pdma_domain_close(struct pdma_domain *domain);
/* Effective attributes after defaults were applied. */
int pdma_domain_query(const struct pdma_domain *domain, struct pdma_domain_attr *attr);
/* The host monitor the domain's registration cache runs: "kernel",
 * "userfaultfd", "memhooks", or "none" when host memory is not cached (no
 * monitor could start; PEERDMA_MR_CACHE_MONITOR=disabled); NULL without
 * use_cache. Host memory is cached only where a monitor sees every change to
 * it: under "userfaultfd" and "memhooks" private anonymous memory (heap,
 * anonymous mmap, stacks), shared and file-backed mappings being registered
 * uncached (README.md, "Registration cache"); under "kernel" any memory the
 * module pins, because the MMU notifier also sees another process's hole
 * punch or truncate. */
const char *pdma_domain_cache_monitor(const struct pdma_domain *domain);

struct pdma_mr_attr {
	const struct iovec *mr_iov;
	size_t iov_count;
	uint64_t access;
	uint64_t offset;          /* must be 0 */
	uint64_t requested_key;   /* under PDMA_MR_PROV_KEY must be 0 (-EKEYREJECTED:
				   * libfabric ignores it; we refuse to let a caller
				   * believe it got its key) */
	void *context;
	size_t auth_key_size;     /* must be 0: no authorization keys */
	const uint8_t *auth_key;
	enum pdma_hmem_iface iface;
	int device;               /* CUDA ordinal or sim device id (0) */
};

int pdma_mr_reg(struct pdma_domain *domain, const void *buf, size_t len, uint64_t access,
		uint64_t offset, uint64_t requested_key, uint64_t flags, struct pdma_mr **mr,
		void *context);
int pdma_mr_regv(struct pdma_domain *domain, const struct iovec *iov, size_t count,
		 uint64_t access, uint64_t offset, uint64_t requested_key, uint64_t flags,
		 struct pdma_mr **mr, void *context);
int pdma_mr_regattr(struct pdma_domain *domain, const struct pdma_mr_attr *attr,
		    uint64_t flags, struct pdma_mr **mr);
/* -EBUSY while bound to an open counter or endpoint. Waits for the device
 * transfers in flight in the domain: once it returns, none reaches the
 * memory through the MR's keys. */
int pdma_mr_close(struct pdma_mr *mr);

uint64_t pdma_mr_key(const struct pdma_mr *mr);
void *pdma_mr_desc(const struct pdma_mr *mr);
void *pdma_mr_context(const struct pdma_mr *mr);

/* -ERANGE (libfabric's FI_ETOOSMALL) when *key_size is smaller than the raw
 * key; *key_size then holds the size needed. */
int pdma_mr_raw_attr(const struct pdma_mr *mr, uint64_t *base_addr, uint8_t *raw_key,
		     size_t *key_size, uint64_t flags);
/* *key: a new random key for the raw key's MR, within mr_key_size as the
 * MR's own keys are, alive until pdma_mr_unmap_key or the MR's close.
 * -ENOSPC when a small mr_key_size leaves no free key. */
int pdma_mr_map_raw(struct pdma_domain *domain, uint64_t base_addr, const uint8_t *raw_key,
		    size_t key_size, uint64_t *key, uint64_t flags);
int pdma_mr_unmap_key(struct pdma_domain *domain, uint64_t key);

int pdma_mr_bind_cntr(struct pdma_mr *mr, struct pdma_cntr *cntr, uint64_t flags);
int pdma_mr_bind_ep(struct pdma_mr *mr, struct pdma_ep *ep, uint64_t flags);
int pdma_mr_enable(struct pdma_mr *mr);
int pdma_mr_refresh(struct pdma_mr *mr, const struct iovec *iov, size_t count, uint64_t flags);

/* Counters and endpoints: the objects an MR binds to. */
int pdma_cntr_open(struct pdma_domain *domain, struct pdma_cntr **cntr);
uint64_t pdma_cntr_read(const struct pdma_cntr *cntr);
int pdma_cntr_close(struct pdma_cntr *cntr);
int pdma_ep_open(struct pdma_domain *domain, struct pdma_ep **ep);
int pdma_ep_close(struct pdma_ep *ep);

/*
 * What a device driver needs to DMA to or from a registered buffer (iov
 * iov_index of the MR). Memory pinned by peerdma.ko (a domain opened with
 * kernel_device: host memory, and GPU memory pinned through its dma-buf or
 * nv-p2p) has a kernel handle: a driver of the same process passes
 * (kernel_fd, handle) to its kernel side, which calls peerdma_client_get()
 * (kernel/peerdma_client.h) and is quiesced before the pages go. GPU memory
 * exported as a dma-buf also names the dma-buf (any importer can attach it).
 * The fds belong to the domain and the MR: valid while the MR is open, never
 * to be closed by the caller. -ENODEV once the memory was revoked (freed,
 * moved), -ENOENT for memory that has neither (host memory checked but not
 * pinned). Thread safety: any thread, concurrently with other MR calls.
 */
struct pdma_mr_dma {
	int kernel_fd;          /* the domain's /dev/peerdma file, -1: not pinned by the module */
	uint32_t kind;          /* PEERDMA_KIND_* of the kernel pin (include/uapi/peerdma.h), 0 */
	uint64_t handle;        /* peerdma.ko handle of the pin */
	uint64_t addr;          /* the iov's start */
	uint64_t pinned_addr;   /* the pinned range that covers it (whole pages) */
	uint64_t pinned_len;
	uint32_t page_size;     /* bytes per page of the pin (64 KiB GPU, 4 KiB host) */
	uint32_t entries;       /* pages */
	int dmabuf_fd;          /* dma-buf of GPU memory, -1: none */
	uint32_t pad;
	uint64_t dmabuf_offset; /* offset of pinned_addr in the dma-buf */
};
int pdma_mr_dma(const struct pdma_mr *mr, size_t iov_index, struct pdma_mr_dma *dma);
/*
 * CPU physical addresses of the pinned pages of iov iov_index (one per
 * page_size), from the module: needs CAP_SYS_RAWIO (-EPERM) and a kernel pin
 * (-ENOENT). *count: in, room; out, entries (-ERANGE, with *count set, when
 * the room is too small).
 */
int pdma_mr_dma_pages(const struct pdma_mr *mr, size_t iov_index, uint64_t *addrs,
		      uint32_t *count);

/* Event queue: asynchronous registration completions, and revocations. */
#define PDMA_MR_COMPLETE 1
/*
 * The memory of an open MR was revoked under it (GPU memory freed, dma-buf
 * moved, host pages unmapped while the kernel pinned them): the MR's DMA
 * state is gone (pdma_mr_dma: -ENODEV) and its cache entry dropped; close
 * it. Queued to an EQ bound with PDMA_MR_REVOKE_EVENTS, once per MR, by the
 * thread that handles the kernel's event. Such an EQ bound while MRs are open
 * covers them too; one whose memory is already gone gets its event at the bind.
 */
#define PDMA_MR_REVOKED 2
struct pdma_eq_entry {
	uint32_t event;      /* PDMA_MR_COMPLETE, PDMA_MR_REVOKED */
	struct pdma_mr *mr;  /* the MR the event is about */
	void *context;       /* the context given at registration */
};
int pdma_eq_open(struct pdma_domain *domain, size_t size, struct pdma_eq **eq);
int pdma_domain_bind_eq(struct pdma_domain *domain, struct pdma_eq *eq, uint64_t flags);
/* -EAGAIN when empty (timeout_ms 0) or when the wait times out; -1 waits forever. */
int pdma_eq_read(struct pdma_eq *eq, struct pdma_eq_entry *entry, int timeout_ms);
int pdma_eq_close(struct pdma_eq *eq);

/* Routing of log lines (library code never prints by itself unless set):
 * every line from then on, the CUDA backend's included. Any thread, any
 * time; a line logged while it runs goes to the old or the new callback,
 * each with its own argument. fn NULL: no logging. */
typedef void (*pdma_log_fn)(void *arg, int level, const char *msg);
void pdma_domain_set_log(struct pdma_domain *domain, pdma_log_fn fn, void *arg);

/* Text for a negative (or positive) errno value returned by peerdma. */
const char *pdma_strerror(int err);
/* A peerdma return value as libfabric's fi_errno code, keeping the sign (0
 * stays 0): the same number where libfabric uses errno, -FI_ENOKEY for -ENOKEY,
 * -FI_ETOOSMALL for -ERANGE, -FI_EOTHER for errno values libfabric lacks. */
int pdma_errno_to_fi(int err);
/* The reverse: libfabric's code as a negative errno value (sign kept).
 * FI_ETOOSMALL -> ERANGE, FI_ENOKEY -> ENOKEY, FI_EBADFLAGS -> EINVAL,
 * FI_EOPBADSTATE -> EBUSY, FI_ETRUNC -> EMSGSIZE, other FI-only codes -> EIO. */
int pdma_errno_from_fi(int fi_err);

#ifdef __cplusplus
}
#endif
#endif /* PEERDMA_MR_H */
