/* SPDX-License-Identifier: MIT */
/*
 * Registration (pin-down) cache. See lib/cache/ for the design and policy.
 * A domain opened with use_cache gets one; its MRs obtain regions through it.
 *
 * Every region returned by pdma_cache_get() has owner == the cache (indexed,
 * or handed out uncached: beyond the limits, interface not cached, max_count
 * 0) and must be released with pdma_cache_put(), exactly once per get. The
 * cache counts references itself: r->refcnt of such a region is not used.
 * r->valid turns false when the memory goes (notification, revocation, stale
 * buffer ID): DMA must stop (pdma_region_dma_begin fails), the pin stays
 * until the last put.
 *
 * Thread safety: every call from any thread. get/put on a hit take no lock
 * and write nothing another thread's hit reads (a thread's references are
 * counted in its own memory: lib/cache/shard.c), so threads hitting the
 * same regions do not slow each other down.
 * Closing a cache while other threads use it is undefined (as fi_close).
 */
#ifndef PDMA_LIB_CACHE_H
#define PDMA_LIB_CACHE_H

#include <stdatomic.h>
#include <stdbool.h>

#include "cache/region.h"
#include "mem/kdev.h"
#include "monitor/monitor.h"

struct pdma_cache;

/* Host memory monitor (PEERDMA_MR_CACHE_MONITOR): what tells the cache that
 * host memory was unmapped or remapped. Without one, host memory is not cached. */
enum pdma_cache_monitor {
	PDMA_CACHE_MONITOR_DEFAULT = 0,   /* kernel if attr.kdev can be a monitor, else
					   * userfaultfd if the kernel allows it, else
					   * memhooks if it can patch libc, else disabled */
	PDMA_CACHE_MONITOR_DISABLED,      /* host memory is never cached */
	PDMA_CACHE_MONITOR_USERFAULTFD,   /* kernel unmap/remap/remove events (lib/monitor/uffd.c) */
	PDMA_CACHE_MONITOR_MEMHOOKS,      /* interposed munmap/mremap/madvise/brk/sbrk
					   * (lib/monitor/memhooks.c; misses libc-internal
					   * unmaps such as free()) */
	PDMA_CACHE_MONITOR_KERNEL,        /* peerdma.ko's MMU notifier on each host pin
					   * (attr.kdev, lib/mem/kdev.c): no userfaultfd, no
					   * code patching, so it works in containers */
};

/* How the cache keeps regions of one memory interface from going stale. */
enum pdma_cache_mode {
	PDMA_CACHE_MODE_DEFAULT = 0, /* SYSTEM: TRUST if a host monitor runs, else OFF;
				      * CUDA: TAG_CHECK (the domain picks
				      * TRUST_WATCHED when the CUDA hooks are detected:
				      * PEERDMA_CUDA_MONITOR=auto); SIM: TRUST */
	PDMA_CACHE_MODE_OFF,         /* never cached: every get pins, every last put unpins */
	PDMA_CACHE_MODE_TRUST,       /* trust invalidations (monitor notifications and backend
				      * revocation); hits cost no backend call */
	PDMA_CACHE_MODE_TAG_CHECK,   /* also verify every hit by buffer ID (the GPUDirect
				      * guide's method: ops->same_alloc, else ops->query);
				      * regions without a buffer ID are not cached */
	PDMA_CACHE_MODE_TRUST_WATCHED, /* per region: TRUST where the backend's query said
				      * a monitor sees the allocation leave (alloc->unwatched
				      * false), TAG_CHECK where it did not. For CUDA with the
				      * hooks detected (`auto`): allocations the hooks saw made
				      * by cuMemAlloc* / cudaMalloc* are trusted; IPC and VMM
				      * mappings, memory allocated before the hooks were loaded
				      * or past them, and host memory keep the check (and are
				      * not cached without a buffer ID). */
};

#define PDMA_CACHE_NIFACE 3 /* PDMA_HMEM_SYSTEM, _CUDA, _SIM */

struct pdma_cache_attr {
	/* Limits with the meanings of libfabric's FI_MR_CACHE_MAX_SIZE/COUNT: the
	 * bytes and the number of regions the cache tracks, in use or not. When
	 * one would be exceeded, unreferenced regions are unpinned in LRU order;
	 * if that is not enough (all in use) the new registration is handed out
	 * uncached (unpinned at its last put). max_count 0 disables caching
	 * (pass-through); max_size 0 means the default (physical memory / CPUs / 2). */
	size_t max_size;
	size_t max_count;
	enum pdma_cache_monitor monitor;
	enum pdma_cache_mode mode[PDMA_CACHE_NIFACE]; /* indexed by enum pdma_hmem_iface */
	/* The domain's /dev/peerdma backend (NULL: none): the source of the
	 * kernel monitor. Host regions are then cached only when pinned through
	 * it (pdma_mem_kdev_host_ops with be == kdev). Not from the environment. */
	struct pdma_kdev *kdev;
};

/* Defaults, then PEERDMA_MR_CACHE_MAX_SIZE (bytes, K/M/G suffix allowed),
 * PEERDMA_MR_CACHE_MAX_COUNT (0 disables caching), PEERDMA_MR_CACHE_MONITOR
 * (kernel | userfaultfd | memhooks | disabled), PEERDMA_MR_CUDA_CACHE_MONITOR_ENABLED
 * (0: CUDA memory is not cached; 1, the default: cached, verified per use by
 * buffer ID) and PEERDMA_MR_CUDA_CACHE_TAG_CHECK (0: TRUST: trust the CUDA free
 * hooks, pdma_monitor_notify(PDMA_HMEM_CUDA, ...), instead of per-use checks,
 * for all CUDA memory, including memory the hooks cannot see leave). */
void pdma_cache_attr_from_env(struct pdma_cache_attr *attr);
/* -EINVAL for a bad attribute; -ENOMEM. The host monitor is started here;
 * if the one asked for cannot run, host memory is not cached (see stats). */
int pdma_cache_open(const struct pdma_cache_attr *attr, struct pdma_cache **cache);
/* Unpins every unreferenced region. Regions still referenced stay valid and are
 * unpinned at their last pdma_cache_put(). */
void pdma_cache_close(struct pdma_cache *cache);
/* A valid region covering [addr, addr + len) of the allocation alloc, with one
 * reference for the caller: a hit, or a new pin (evicting LRU regions and
 * retrying when the pin fails with -ENOMEM). alloc may be NULL (no buffer ID
 * known). Errors: the backend's pin error (-ENOMEM once nothing is left to
 * evict), -EFAULT if the memory was freed while it was being pinned, -EINVAL
 * for len 0 or a range that wraps. */
int pdma_cache_get(struct pdma_cache *cache, const struct pdma_mem_ops *ops, void *be,
		   enum pdma_hmem_iface iface, uint64_t addr, size_t len,
		   const struct pdma_mem_alloc *alloc, struct pdma_region **region);
/* A hit only, found without facts about the allocation: lets a caller skip
 * classifying and querying the memory (a five-attribute driver call for CUDA)
 * when the region is already pinned. A hit the mode verifies (TAG_CHECK;
 * TRUST_WATCHED: of an unwatched region) costs one ops->same_alloc call; a
 * stale one is dropped from the cache. -ENOENT on a miss, a stale hit, a hit
 * that only ops->query can verify (no same_alloc, or a range that leaves the
 * allocation inside its pinned pages), or when the interface is not cached;
 * the caller then takes the pdma_cache_get() path. */
int pdma_cache_find(struct pdma_cache *cache, const struct pdma_mem_ops *ops, void *be,
		    enum pdma_hmem_iface iface, uint64_t addr, size_t len,
		    struct pdma_region **region);
void pdma_cache_put(struct pdma_cache *cache, struct pdma_region *region);

/* Drop every region of iface overlapping [addr, addr + len) (what monitor
 * notifications do); regions still in use are unpinned at their last put.
 * Returns the number of regions dropped. */
size_t pdma_cache_invalidate(struct pdma_cache *cache, enum pdma_hmem_iface iface,
			     uint64_t addr, size_t len);
/* Unpin every unreferenced region; returns how many. */
size_t pdma_cache_flush(struct pdma_cache *cache);

struct pdma_cache_stats {
	size_t count, bytes;          /* regions tracked now (in use or not) and their bytes */
	uint64_t misses;              /* gets that pinned (cached or not) */
	uint64_t slow_hits;           /* hits found by the locked slow path */
	uint64_t uncached;            /* gets handed a region outside the index */
	uint64_t evictions;           /* LRU regions unpinned for the limits or -ENOMEM */
	uint64_t enomem_retries;      /* pins retried after -ENOMEM eviction */
	uint64_t invalidations;       /* regions dropped by notifications/revocation/flush */
	uint64_t stale_rejected;      /* hits refused because the buffer ID changed */
	uint64_t live;                /* regions of this cache not yet unpinned */
	enum pdma_cache_monitor monitor; /* host monitor running for this cache */
	enum pdma_cache_mode mode[PDMA_CACHE_NIFACE]; /* effective modes */
};
void pdma_cache_get_stats(struct pdma_cache *cache, struct pdma_cache_stats *stats);

#endif /* PDMA_LIB_CACHE_H */
