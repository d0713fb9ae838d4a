// SPDX-License-Identifier: MIT
/*
 * Registration (pin-down) cache.
 *
 * Policy
 *  - Key: the page-rounded range [start, end) at the backend's pin page size
 *    (64 KiB GPU, 4 KiB host) plus the backend (ops, be) and interface.
 *  - A lookup returns any valid region of the same backend that covers the
 *    rounded request. A miss pins exactly the rounded request.
 *  - No merging, of overlapping or of adjacent registrations. Overlapping
 *    regions coexist. Why: a merge must pin the union (more BAR, a new pin of
 *    pages already pinned, while the old pins stay referenced by in-flight
 *    users), adjacent ranges may belong to different allocations (a GPU pin
 *    must stay inside one allocation), and a merged region couples the
 *    lifetimes of unrelated buffers (freeing one invalidates the other's
 *    registration). Immutable regions also keep the hit path free of writes
 *    to the index. The cost: a growing sequence of overlapping registrations
 *    pins some pages more than once (bounded by the limits).
 *  - Limits (libfabric semantics): max_count regions and max_size bytes
 *    tracked. Full: unreferenced regions are unpinned in LRU order; if all are
 *    in use the new pin is handed out uncached. Pin failure with -ENOMEM (BAR
 *    exhausted) unpins LRU unreferenced regions of the same backend (at least
 *    the requested bytes' worth) and retries, until it works or none is left.
 *  - Staleness: a region leaves the index (and is never returned again) when
 *    a monitor notifies an overlapping range (host: userfaultfd; CUDA: the
 *    CUDA engineer's free hooks; sim: the backend's free), when the backend
 *    revokes its pin (pdma_region_revoke -> pdma_cache_region_revoked), or
 *    when a hit's buffer ID differs from the caller's query (alloc) or, in
 *    TAG_CHECK mode (TRUST_WATCHED: for regions of memory no monitor
 *    watches, e->verify), from the allocation's now: one ops->same_alloc
 *    call where the backend has it and the range lies inside the allocation's
 *    bounds seen at the pin (hit_verify), else a fresh ops->query. A region
 *    whose pin raced with an invalidation of its range is handed out uncached.
 *
 * Concurrency
 *  - The hit path takes no lock and writes nothing shared: a hash probe on
 *    the start page (inline), then for a lookup inside a region two probes
 *    of a span table for each size class in use, or past eight classes a
 *    skip list ordered by start (index.c), all bounded; the reference and
 *    the put's LRU stamp go to the calling thread's shard slot for the entry
 *    (plain stores to a line only that thread writes: shard.c). The entry's
 *    own line is only read, so N threads hitting a common set of regions
 *    keep it shared in every core's cache; before shard.c each hit wrote
 *    the count there, and a hit on a region another core hit last took the
 *    line from that core (16 threads got 6.8x the hits of one, where threads
 *    on disjoint regions got 16.6x: bench/regcache --disjoint).
 *    Threads without a shard (past 64) count on the entry's line as before.
 *  - Everything a get or put reads sits in one 64-byte line of the entry
 *    (key, validity, counting mode); the region handed out follows it, and
 *    get/put convert between them by address arithmetic only, as they find
 *    the thread's slot (the slab chunk's slots follow the chunk).
 *  - Memory safety without a read-side protocol: entries live in a per-cache
 *    slab of 2 MiB chunks that are only unmapped when the cache is freed
 *    (type-stable memory, as SLAB_TYPESAFE_BY_RCU), and outgrown hash tables
 *    are kept until then (they sum to less than the live one). A reader that
 *    follows a stale pointer finds either a DEAD count or a recycled entry;
 *    it takes a reference first and then re-checks the key and the validity
 *    flag, backing off on a mismatch. All reader-visible fields are atomics.
 *  - Reference counts: users + 1 while indexed. While an entry is fast
 *    (indexed, counting in shards) its count also holds FAST_BIAS and the
 *    users are spread over the count and the shard slots; the writer folds
 *    them back (shard.c) before it drops the index's reference (invalidation,
 *    revocation, a stale hit, close) or tests the count for eviction, so the
 *    rules below apply to an exact count. A reader's increment on the count
 *    counts only if the old value was positive. Whoever takes the count to 0
 *    moves it 0 -> DEAD with a CAS and unpins; eviction moves an unreferenced
 *    region 1 -> DEAD. A count can only reach 0 after the region was
 *    invalidated (validity false, published by the release of the drop), so
 *    a reader that slips in on a transient increment sees it invalid.
 *    Recycling revives a slot by adding 1 - DEAD, which keeps in-flight
 *    transient increments balanced.
 *  - Writers (misses, evictions, invalidations) serialise on the cache mutex.
 *    Pins and unpins run outside it: the sim backend waits in unpin for a
 *    running revoke callback, and that callback takes the mutex. Unpins
 *    triggered inside a notification or revoke callback are deferred to the
 *    next writer call for the same reason.
 *  - LRU: put stores a per-thread monotonic stamp (exact order within a
 *    thread; a thread syncs with the others' through a global once every 64
 *    of its puts, so between threads a stamp lags by what the others put in
 *    that time; cache_int.h, lru_stamp), in its shard slot (an entry's
 *    stamp is the newest of its slots' and its own: pdma_cache_last_use);
 *    eviction pops a heap keyed by the stamp seen at insertion and re-sorts
 *    lazily, which yields exact LRU order among unreferenced regions for
 *    single-threaded use.
 *  - fork(): in the child, caches opened before the fork are pass-through
 *    and forget their regions without unpinning them (lib/cache/fork.c).
 *  - Host memory (userfaultfd monitor): before a lookup of host memory the
 *    caller waits while the monitor thread is handling events (one load), so
 *    an munmap that has returned is always reflected in the index.
 *  - Host memory (kernel monitor, the default when the domain has a kernel
 *    device that counts revocations): every cached host region is a pin of
 *    peerdma.ko's, watched by its own MMU notifier, which counts the
 *    revocation in a page mapped from /dev/peerdma before the munmap,
 *    madvise, mremap... returns. Before a lookup of host memory the caller
 *    compares that counter with the events handled (one load each) and, when
 *    they differ, handles the pending events itself (pdma_kdev_sync), so here
 *    too an munmap that has returned is always reflected in the index. Host
 *    regions pinned any other way are handed out uncached. If the events
 *    cannot be handled (a module bug), every host region is dropped.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/cache_int.h"
#include "monitor/monitor.h"

static _Atomic uint64_t cache_ids = 1;

/* ---------------------------------------------------------------------------
 * Retirement (free after a grace period).
 */
static void cache_free(struct pdma_cache *c)
{
	struct htab *t = atomic_load_explicit(&c->ht, memory_order_relaxed);

	while (c->old_tables) {
		struct retire *n = c->old_tables->next;
		struct htab *o = c->old_tables->base;

		pdma_cache_zfree(o, pdma_cache_htab_bytes(o));
		c->old_tables = n;
	}
	pdma_cache_zfree(t, pdma_cache_htab_bytes(t));
	pdma_cache_zfree(c->heap, c->heap_cap * sizeof(*c->heap));
	pdma_cache_slab_destroy(c);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

void pdma_cache_cache_unref(struct pdma_cache *c)
{
	if (atomic_fetch_sub_explicit(&c->live, 1, memory_order_acq_rel) == 1)
		cache_free(c);
}

/* Unpin an entry whose count went to DEAD; its slot goes back to the slab
 * (type-stable: readers with a stale pointer find DEAD or another key). */
void pdma_cache_entry_destroy(struct entry *e)
{
	struct pdma_cache *c = e->cache;

	pdma_region_fini(&e->r);
	pdma_cache_slab_free(c, e);
	pdma_cache_cache_unref(c);
}

/*
 * Drop one reference; true if the caller must unpin (the count is then DEAD).
 * Whoever takes the count to 0 tries 0 -> DEAD; if a reader's transient
 * increment got in between, that reader's own drop takes it to 0 again and
 * tries in turn, so exactly one caller wins.
 */
bool pdma_cache_entry_unref_last(struct entry *e)
{
	int32_t zero = 0;

	if (atomic_fetch_sub_explicit(&e->refcnt, 1, memory_order_acq_rel) != 1)
		return false;
	return atomic_compare_exchange_strong_explicit(&e->refcnt, &zero, REF_DEAD,
						       memory_order_acq_rel, memory_order_relaxed);
}

/* Drop one reference; the last one unpins. */
void pdma_cache_entry_unref(struct entry *e)
{
	if (pdma_cache_entry_unref_last(e))
		pdma_cache_entry_destroy(e);
}

/*
 * A hit by a thread with a shard on an indexed entry that counts on its own
 * line: from now on it counts in the shards (shard.c). A miss indexes its
 * entry counting on its own line, so that the miss and the put after it
 * touch no shard slot (a cold line each, and a page fault every 256 new
 * regions: 10% on a miss); the first hit moves it. Skipped while a writer
 * holds the lock: a later hit does it.
 */
static void promote(struct entry *e)
{
	struct pdma_cache *c = e->cache;

	if (!pdma_cache_self || pthread_mutex_trylock(&c->lock))
		return;
	if (e->indexed && atomic_load_explicit(&e->valid, memory_order_relaxed))
		pdma_cache_fast_on(e);
	pthread_mutex_unlock(&c->lock);
}

bool pdma_cache_entry_tryref_slow(struct entry *e)
{
	if (likely(atomic_fetch_add_explicit(&e->refcnt, 1, memory_order_acq_rel) > 0)) {
		promote(e);
		return true;
	}
	pdma_cache_entry_unref(e);
	return false;
}

void pdma_cache_entry_put(struct entry *e)
{
	if (!shard_count(e, -1, 0))
		pdma_cache_entry_unref(e);
}

/*
 * Drop one reference from inside a notification or a revoke callback: there
 * the backend may be revoking the very pin (the sim backend's unpin waits for
 * the revocation to finish), so the unpin is deferred to the next writer call.
 */
void pdma_cache_entry_unref_deferred(struct entry *e)
{
	struct pdma_cache *c = e->cache;
	struct entry *old;

	if (!pdma_cache_entry_unref_last(e))
		return;
	old = atomic_load_explicit(&c->deferred, memory_order_relaxed);
	do
		e->defer_next = old;
	while (!atomic_compare_exchange_weak_explicit(&c->deferred, &old, e, memory_order_release,
						      memory_order_relaxed));
}

static void deferred_run(struct pdma_cache *c)
{
	struct entry *e, *n;

	if (!atomic_load_explicit(&c->deferred, memory_order_relaxed))
		return;
	e = atomic_exchange_explicit(&c->deferred, NULL, memory_order_acquire);
	for (; e; e = n) {
		n = e->defer_next;
		pdma_cache_entry_destroy(e);
	}
}

static void destroy_victims(struct entry *v)
{
	struct entry *rev = NULL;

	/* Built newest-first: unpin in eviction (LRU) order. */
	while (v) {
		struct entry *n = (struct entry *)v->rt.next;

		v->rt.next = (struct retire *)rev;
		rev = v;
		v = n;
	}
	v = rev;
	while (v) {
		struct entry *n = (struct entry *)v->rt.next;

		pdma_cache_entry_destroy(v);
		v = n;
	}
}

/* Under c->lock: drop the overlapping regions of iface. */
static size_t invalidate_locked(struct pdma_cache *c, enum pdma_hmem_iface iface, uint64_t addr,
				uint64_t end, struct entry **drop)
{
	uint64_t maxlen = atomic_load_explicit(&c->max_len, memory_order_relaxed);
	uint64_t lo = addr > maxlen ? addr - maxlen : 0;
	struct inval_rec *rec = &c->inval[c->inval_seq % INVAL_RING];
	struct entry *e, *n;
	size_t cnt = 0;

	rec->seq = ++c->inval_seq;
	rec->start = addr;
	rec->end = end;
	rec->iface = iface;
	size_t budget = SIZE_MAX;

	for (e = pdma_cache_sl_lower_bound(c, lo, &budget); e && e->start < end; e = n) {
		n = atomic_load_explicit(&e->next[0], memory_order_relaxed);
		if (e->iface != iface || e->end <= addr)
			continue;
		atomic_store_explicit(&e->valid, false, memory_order_release);
		pdma_cache_index_remove(c, e);
		e->rt.next = (struct retire *)*drop;
		*drop = e;
		cnt++;
		c->st.invalidations++;
	}
	/* The index's references go next (drop_list): count exactly first. */
	pdma_cache_fold_list(*drop);
	return cnt;
}

/* Revoke (stop DMA: the memory is going) and drop the index references of a
 * list built by invalidate_locked; no lock held. */
static void drop_list(struct entry *v, bool defer)
{
	while (v) {
		struct entry *n = (struct entry *)v->rt.next;

		pdma_region_revoke(&v->r); /* our hook finds it unindexed */
		if (defer)
			pdma_cache_entry_unref_deferred(v);
		else
			pdma_cache_entry_unref(v);
		v = n;
	}
}

/* Did an invalidation overlapping [s, end) of iface happen after seq? */
static bool inval_since(struct pdma_cache *c, uint64_t seq, enum pdma_hmem_iface iface,
			uint64_t s, uint64_t end)
{
	if (c->inval_seq - seq > INVAL_RING)
		return true; /* too many to tell: assume so */
	for (uint64_t q = seq + 1; q <= c->inval_seq; q++) {
		const struct inval_rec *r = &c->inval[(q - 1) % INVAL_RING];

		if (r->iface == iface && r->start < end && r->end > s)
			return true;
	}
	return false;
}

static size_t invalidate(struct pdma_cache *c, enum pdma_hmem_iface iface, uint64_t addr,
			 size_t len, bool defer)
{
	struct entry *drop = NULL;
	uint64_t end = addr + len < addr ? UINT64_MAX : addr + len;
	size_t n;

	if (!len)
		return 0;
	pthread_mutex_lock(&c->lock);
	n = invalidate_locked(c, iface, addr, end, &drop);
	pthread_mutex_unlock(&c->lock);
	drop_list(drop, defer);
	return n;
}

/* Runs in the thread that frees the memory, possibly while the backend is
 * revoking pins on it: unpins are deferred. */
static void monitor_cb(void *arg, enum pdma_hmem_iface iface, uint64_t addr, size_t len)
{
	invalidate(arg, iface, addr, len, true);
}

/* ---------------------------------------------------------------------------
 * Public API.
 */
int pdma_cache_open(const struct pdma_cache_attr *attr, struct pdma_cache **cache)
{
	struct pdma_cache *c;
	int ret;

	if (!attr || !cache || (unsigned)attr->monitor > PDMA_CACHE_MONITOR_KERNEL)
		return -EINVAL;
	for (int i = 0; i < PDMA_CACHE_NIFACE; i++)
		if ((unsigned)attr->mode[i] > PDMA_CACHE_MODE_TRUST_WATCHED)
			return -EINVAL;
	/* Per-thread counts need membarrier's registration: its stall (an RCU
	 * grace period with threads) belongs in an open. Without it hits count
	 * on their entries. */
	(void)pdma_cache_shard_init();
	c = aligned_alloc(64, sizeof(*c));
	if (!c)
		return -ENOMEM;
	memset(c, 0, sizeof(*c));
	c->attr = *attr;
	if (!c->attr.max_size)
		c->attr.max_size = pdma_cache_default_max_size();
	c->passthrough = attr->max_count == 0;
	c->id = atomic_fetch_add(&cache_ids, 1);
	atomic_init(&c->live, 1);
	pthread_mutex_init(&c->lock, NULL);
	pthread_mutex_init(&c->slab_lock, NULL);
	/* The hash table starts at the size of the configured limit (load 1/2,
	 * at most HT_PRESIZE_MAX buckets): growing from 64 buckets rehashed every
	 * entry about once more, a cold line each, in the writer's critical
	 * section, and faulted in a fresh table per doubling. The memory is
	 * mapped, so buckets never written cost no RAM. Above the cap it grows
	 * as before. */
	{
		size_t nb = 64;

		while (nb < HT_PRESIZE_MAX && nb < 2 * attr->max_count)
			nb *= 2;
		atomic_init(&c->ht, pdma_cache_htab_new(nb));
	}
	if (!atomic_load(&c->ht)) {
		pthread_mutex_destroy(&c->slab_lock);
		pthread_mutex_destroy(&c->lock);
		free(c);
		return -ENOMEM;
	}

	/* Host memory: cached only with a monitor that runs. */
	c->st.monitor = PDMA_CACHE_MONITOR_DISABLED;
	/* The kernel monitor first: it needs neither userfaultfd (blocked in
	 * containers) nor code patching, and it watches every pinned page. */
	if (!c->passthrough && (attr->monitor == PDMA_CACHE_MONITOR_DEFAULT ||
				attr->monitor == PDMA_CACHE_MONITOR_KERNEL) &&
	    pdma_kdev_monitor_ok(attr->kdev)) {
		c->kdev = attr->kdev;
		c->st.monitor = PDMA_CACHE_MONITOR_KERNEL;
	}
	if (!c->passthrough && !c->kdev && (attr->monitor == PDMA_CACHE_MONITOR_DEFAULT ||
					    attr->monitor == PDMA_CACHE_MONITOR_USERFAULTFD)) {
		if (pdma_uffd_monitor_start() == 0) {
			c->uffd = true;
			c->st.monitor = PDMA_CACHE_MONITOR_USERFAULTFD;
		}
	}
	/* The default falls back to memhooks where userfaultfd is refused
	 * (seccomp, as Docker's default profile; an unprivileged process on a
	 * kernel without the user-mode-only kind or write-protect mode). */
	if (!c->passthrough && (attr->monitor == PDMA_CACHE_MONITOR_MEMHOOKS ||
				(attr->monitor == PDMA_CACHE_MONITOR_DEFAULT && !c->uffd &&
				 !c->kdev))) {
		if (pdma_memhooks_monitor_start() == 0) {
			c->memhooks = true;
			c->st.monitor = PDMA_CACHE_MONITOR_MEMHOOKS;
		}
	}
	for (int i = 0; i < PDMA_CACHE_NIFACE; i++) {
		enum pdma_cache_mode m = attr->mode[i];

		if (m == PDMA_CACHE_MODE_DEFAULT)
			m = i == PDMA_HMEM_CUDA ? PDMA_CACHE_MODE_TAG_CHECK : PDMA_CACHE_MODE_TRUST;
		if (i == PDMA_HMEM_SYSTEM && !c->uffd && !c->memhooks && !c->kdev)
			m = PDMA_CACHE_MODE_OFF;
		if (c->passthrough)
			m = PDMA_CACHE_MODE_OFF;
		c->mode[i] = m;
		c->st.mode[i] = m;
	}
	ret = pdma_monitor_subscribe(monitor_cb, c, &c->sub);
	if (ret) {
		if (c->uffd)
			pdma_uffd_monitor_stop();
		if (c->memhooks)
			pdma_memhooks_monitor_stop();
		pdma_cache_zfree(atomic_load(&c->ht), pdma_cache_htab_bytes(atomic_load(&c->ht)));
		pthread_mutex_destroy(&c->slab_lock);
		pthread_mutex_destroy(&c->lock);
		free(c);
		return ret;
	}
	pdma_cache_fork_track(c);
	*cache = c;
	return 0;
}

void pdma_cache_close(struct pdma_cache *c)
{
	struct entry *drop = NULL;

	if (!c)
		return;
	pdma_cache_fork_untrack(c);
	pdma_monitor_unsubscribe(c->sub);
	pthread_mutex_lock(&c->lock);
	/* Every indexed region leaves; referenced ones live on until their put. */
	while (c->heap_len) {
		struct entry *e = c->heap[0];

		pdma_cache_index_remove(c, e);
		e->rt.next = (struct retire *)drop;
		drop = e;
	}
	/* Entries that lost their heap slot (allocation failure) */
	for (struct entry *e = atomic_load_explicit(&c->head[0], memory_order_relaxed), *n; e;
	     e = n) {
		n = atomic_load_explicit(&e->next[0], memory_order_relaxed);
		pdma_cache_index_remove(c, e);
		e->rt.next = (struct retire *)drop;
		drop = e;
	}
	pdma_cache_fold_list(drop);
	atomic_store(&c->closed, true);
	pthread_mutex_unlock(&c->lock);
	/* Not revoked: the memory is still there and users may still DMA. */
	while (drop) {
		struct entry *n = (struct entry *)drop->rt.next;

		pdma_cache_entry_unref(drop);
		drop = n;
	}
	deferred_run(c);
	if (c->uffd)
		pdma_uffd_monitor_stop();
	if (c->memhooks)
		pdma_memhooks_monitor_stop();
	pdma_cache_cache_unref(c);
}

void pdma_cache_region_revoked(struct pdma_region *r)
{
	struct entry *e = entry_of(r);
	struct pdma_cache *c = e->cache;

	atomic_store_explicit(&e->valid, false, memory_order_release);
	pthread_mutex_lock(&c->lock);
	if (e->indexed) {
		pdma_cache_index_remove(c, e);
		pdma_cache_fold(e);
		c->st.invalidations++;
		/* An unpin here would wait for this very callback in the sim
		 * backend: deferred. Queued under the lock, so that a close
		 * either finds the entry indexed or finds it queued (after the
		 * lock, a close's last deferred run could miss it: the pin and
		 * the cache leaked). */
		pdma_cache_entry_unref_deferred(e);
	}
	pthread_mutex_unlock(&c->lock);
}

size_t pdma_cache_invalidate(struct pdma_cache *c, enum pdma_hmem_iface iface, uint64_t addr,
			     size_t len)
{
	size_t n = invalidate(c, iface, addr, len, false);

	deferred_run(c);
	return n;
}

size_t pdma_cache_flush(struct pdma_cache *c)
{
	struct entry *v = NULL;
	size_t n = 0;

	deferred_run(c);
	pthread_mutex_lock(&c->lock);
	pdma_cache_evict_lru(c, NULL, NULL, SIZE_MAX, SIZE_MAX, &v);
	pthread_mutex_unlock(&c->lock);
	for (struct entry *e = v; e; e = (struct entry *)e->rt.next)
		n++;
	destroy_victims(v);
	return n;
}

void pdma_cache_get_stats(struct pdma_cache *c, struct pdma_cache_stats *s)
{
	deferred_run(c);
	pthread_mutex_lock(&c->lock);
	*s = c->st;
	s->count = c->count;
	s->bytes = c->bytes;
	pthread_mutex_unlock(&c->lock);
	s->uncached = atomic_load(&c->n_uncached);
	s->stale_rejected = atomic_load(&c->n_stale);
	s->live = atomic_load(&c->live) - (atomic_load(&c->closed) ? 0 : 1);
}

/*
 * A referenced hit the cache verifies by buffer ID (e->verify), checked the
 * cheap way: the range against the allocation's bounds seen at the pin, then
 * one ops->same_alloc call. Buffer IDs are never reused, so the same ID means
 * the same allocation, with the same bounds, still there. 0: fresh; -ESTALE:
 * another allocation now, or none; -ENOENT: cannot tell this way (no
 * same_alloc, bounds unknown, or the range leaves the allocation inside its
 * pinned pages): the caller asks ops->query.
 */
static inline int hit_verify(struct entry *e, uint64_t addr, size_t len)
{
	const struct pdma_mem_ops *ops = RLX(e->ops);
	uint64_t id = RLX(e->buffer_id);

	if (!id || !ops->same_alloc || e->r.alloc_head == UINT32_MAX ||
	    addr - RLX(e->start) < e->r.alloc_head || RLX(e->end) - (addr + len) < e->r.alloc_tail)
		return -ENOENT;
	return ops->same_alloc(RLX(e->be), addr, id) ? -ESTALE : 0;
}

/* Is the hit e still the memory the caller means? */
static inline bool hit_fresh(struct entry *e, const struct pdma_mem_alloc *alloc,
			     uint64_t addr, size_t len)
{
	uint64_t id = RLX(e->buffer_id);

	if (alloc && alloc->buffer_id)
		return !id || alloc->buffer_id == id;
	if (likely(!RLX(e->verify)))
		return true;
	switch (hit_verify(e, addr, len)) {
	case 0:
		return true;
	case -ESTALE:
		return false;
	}
	{
		struct pdma_mem_alloc a = { 0 };

		return !e->ops->query(e->be, addr, len, &a) && a.buffer_id == id;
	}
}

/* A hit that turned out stale: make sure nobody gets it again. */
static void reject_stale(struct pdma_cache *c, struct entry *e)
{
	struct entry *drop = NULL;

	atomic_fetch_add_explicit(&c->n_stale, 1, memory_order_relaxed);
	atomic_store_explicit(&e->valid, false, memory_order_release);
	pthread_mutex_lock(&c->lock);
	if (e->indexed) {
		pdma_cache_index_remove(c, e);
		pdma_cache_fold(e);
		c->st.invalidations++;
		drop = e;
		e->rt.next = NULL;
	}
	pthread_mutex_unlock(&c->lock);
	if (drop)
		drop_list(drop, false);
	else
		pdma_region_revoke(&e->r);
	pdma_cache_entry_put(e); /* the caller's lookup reference */
}

static inline void uffd_wait(void)
{
	while (atomic_load_explicit(&pdma_uffd_seq, memory_order_acquire) & 1)
		sched_yield();
}

/* Kernel monitor: handle every revocation that began before the lookup. */
static inline void kernel_sync(struct pdma_cache *c)
{
	if (unlikely(pdma_kdev_sync(c->kdev)))
		invalidate(c, PDMA_HMEM_SYSTEM, 0, UINT64_MAX, false);
}

/* Is a host region of (ops, be) watched by the kernel monitor? */
static inline bool kernel_watched(const struct pdma_cache *c, const struct pdma_mem_ops *ops,
				  const void *be)
{
	return ops == &pdma_mem_kdev_host_ops && be == c->kdev;
}

/* The pinned pages [s, end) against the allocation, for hit_verify: the bytes
 * of the first and last page outside it, or UINT32_MAX where the allocation's
 * bounds are unknown or do not cover the request (a caller's alloc that the
 * query did not check). */
static void alloc_bounds(struct pdma_region *r, const struct pdma_mem_alloc *alloc, uint64_t s,
			 uint64_t end)
{
	uint64_t ab, ae;

	r->alloc_head = r->alloc_tail = UINT32_MAX;
	if (!alloc || !alloc->size || alloc->base + alloc->size < alloc->base)
		return;
	ab = alloc->base;
	ae = alloc->base + alloc->size;
	if (ab >= end || ae <= s || (ab > s && ab - s >= UINT32_MAX) ||
	    (ae < end && end - ae >= UINT32_MAX))
		return;
	r->alloc_head = ab > s ? (uint32_t)(ab - s) : 0;
	r->alloc_tail = ae < end ? (uint32_t)(end - ae) : 0;
}

/*
 * The miss path (and every get when the interface is not cached): look again
 * under the lock, make room for the limits, pin outside the lock (evicting
 * and retrying on -ENOMEM), then index the region if nothing invalidated its
 * range meanwhile and it fits.
 */
static int get_slow(struct pdma_cache *c, const struct pdma_mem_ops *ops, void *be,
		    enum pdma_hmem_iface iface, uint64_t addr, size_t len, uint64_t s,
		    uint64_t end, const struct pdma_mem_alloc *alloc, struct pdma_region **region)
{
	enum pdma_cache_mode mode = (unsigned)iface < PDMA_CACHE_NIFACE ? c->mode[iface] :
									 PDMA_CACHE_MODE_OFF;
	uint64_t id = alloc ? alloc->buffer_id : 0;
	size_t plen = (size_t)(end - s);
	struct entry *e, *victims = NULL;
	bool cacheable, watched = true, indexed = false;
	int levels = pdma_cache_random_level(), ret;
	uint64_t seq = 0;
	/* Hits on this region must be verified by buffer ID: in TAG_CHECK mode
	 * all, under TRUST_WATCHED those of memory no monitor watches (or of
	 * unknown memory: no alloc). Such regions are cached only with an ID. */
	bool verify = mode == PDMA_CACHE_MODE_TAG_CHECK ||
		      (mode == PDMA_CACHE_MODE_TRUST_WATCHED && (!alloc || alloc->unwatched));

	cacheable = verify ? id != 0 : (mode == PDMA_CACHE_MODE_TRUST ||
					mode == PDMA_CACHE_MODE_TRUST_WATCHED);
	if (cacheable && plen > c->attr.max_size)
		cacheable = false;
	deferred_run(c);
	if (mode != PDMA_CACHE_MODE_OFF) {
		for (;;) {
			pthread_mutex_lock(&c->lock);
			e = pdma_cache_lookup_ref(c, ops, be, iface, s, end, 0);
			if (!e)
				break;
			c->st.slow_hits++;
			pthread_mutex_unlock(&c->lock);
			if (hit_fresh(e, alloc, addr, len)) {
				*region = &e->r;
				return 0;
			}
			reject_stale(c, e);
		}
		c->st.misses++;
		seq = c->inval_seq;
		/* Full: unpin LRU regions before pinning (frees BAR too). */
		if (cacheable &&
		    (c->count + 1 > c->attr.max_count || c->bytes + plen > c->attr.max_size))
			pdma_cache_evict_lru(c, NULL, NULL,
				  c->count + 1 > c->attr.max_count ?
					  c->count + 1 - c->attr.max_count : 0,
				  c->bytes + plen > c->attr.max_size ?
					  c->bytes + plen - c->attr.max_size : 0,
				  &victims);
		pthread_mutex_unlock(&c->lock);
		destroy_victims(victims);
		victims = NULL;
	}

	e = pdma_cache_slab_alloc(c);
	if (!e)
		return -ENOMEM;
	/* Readers holding a stale pointer may look at this slot at any time:
	 * reader-visible fields are written atomically, then the count is
	 * revived from DEAD (keeping any in-flight transient increments). */
	atomic_store_explicit(&e->hnext, NULL, memory_order_relaxed);
	atomic_store_explicit(&e->start, s, memory_order_relaxed);
	atomic_store_explicit(&e->end, end, memory_order_relaxed);
	atomic_store_explicit(&e->ops, ops, memory_order_relaxed);
	atomic_store_explicit(&e->be, be, memory_order_relaxed);
	atomic_store_explicit(&e->buffer_id, id, memory_order_relaxed);
	atomic_store_explicit(&e->iface, (uint8_t)iface, memory_order_relaxed);
	atomic_store_explicit(&e->valid, true, memory_order_relaxed);
	atomic_store_explicit(&e->verify, verify, memory_order_relaxed);
	atomic_store_explicit(&e->last_use, lru_stamp(), memory_order_relaxed);
	memset(&e->r, 0, sizeof(e->r));
	alloc_bounds(&e->r, alloc, s, end);
	e->defer_next = NULL;
	e->indexed = false;
	e->heap_key = 0;
	e->levels = levels;
	e->cache = c;
	e->heap_idx = SIZE_MAX;
	e->r.owner = c; /* before the pin: a revocation may come at once */
	atomic_fetch_add(&c->live, 1);

	for (;;) {
		size_t freed;

		ret = pdma_region_init(&e->r, ops, be, iface, s, plen, id);
		if (ret != -ENOMEM || mode == PDMA_CACHE_MODE_OFF)
			break;
		/* BAR or lock limit: unpin LRU regions of this backend, retry. */
		pthread_mutex_lock(&c->lock);
		freed = pdma_cache_evict_lru(c, ops, be, 1, plen, &victims);
		if (freed)
			c->st.enomem_retries++;
		pthread_mutex_unlock(&c->lock);
		if (!freed)
			break;
		destroy_victims(victims);
		victims = NULL;
	}
	if (ret) {
		pdma_cache_slab_free(c, e); /* still DEAD: stale readers back off */
		pdma_cache_cache_unref(c);
		return ret;
	}
	/* Pinned: revive the count (keeping in-flight transient increments);
	 * this release publishes the fields above to readers that take a ref. */
	atomic_fetch_add_explicit(&e->refcnt, 1 - REF_DEAD, memory_order_release);
	if (!cacheable) {
		atomic_fetch_add_explicit(&c->n_uncached, 1, memory_order_relaxed);
		*region = &e->r;
		return 0;
	}
	/* Only private anonymous memory is watchable from user space (vma.c). */
	if (iface == PDMA_HMEM_SYSTEM && (c->uffd || c->memhooks))
		watched = pdma_vma_private_anon(s, plen);
	if (watched && iface == PDMA_HMEM_SYSTEM && c->uffd)
		watched = pdma_uffd_monitor_watch(s, plen) == 0;
	if (iface == PDMA_HMEM_SYSTEM && c->kdev)
		watched = kernel_watched(c, ops, be);

	pthread_mutex_lock(&c->lock);
	if (!atomic_load_explicit(&e->r.valid, memory_order_acquire) ||
	    !atomic_load_explicit(&e->valid, memory_order_acquire)) {
		/* Revoked before it was indexed: the memory is gone. */
		pthread_mutex_unlock(&c->lock);
		pdma_cache_entry_unref(e);
		return -EFAULT;
	}
	if (watched && !inval_since(c, seq, iface, s, end)) {
		if (c->count + 1 > c->attr.max_count || c->bytes + plen > c->attr.max_size)
			pdma_cache_evict_lru(c, NULL, NULL,
				  c->count + 1 > c->attr.max_count ?
					  c->count + 1 - c->attr.max_count : 0,
				  c->bytes + plen > c->attr.max_size ?
					  c->bytes + plen - c->attr.max_size : 0,
				  &victims);
		if (c->count + 1 <= c->attr.max_count && c->bytes + plen <= c->attr.max_size) {
			atomic_fetch_add_explicit(&e->refcnt, 1, memory_order_relaxed);
			if (pdma_cache_index_insert(c, e))
				atomic_fetch_sub_explicit(&e->refcnt, 1, memory_order_relaxed);
			else
				indexed = true;
		}
	}
	pthread_mutex_unlock(&c->lock);
	if (!indexed)
		atomic_fetch_add_explicit(&c->n_uncached, 1, memory_order_relaxed);
	destroy_victims(victims);
	*region = &e->r;
	return 0;
}

/* [s, end): the backend pages covering [addr, addr + len); false for len 0 or
 * a range that wraps (also once rounded up to a page). */
static inline bool page_span(const struct pdma_mem_ops *ops, uint64_t addr, size_t len,
			     uint64_t *s, uint64_t *end)
{
	uint64_t pm = ops->page_size - 1;

	if (!len || addr + len < addr || addr + len + pm < addr + len)
		return false;
	*s = addr & ~pm;
	*end = (addr + len + pm) & ~pm;
	return true;
}

/* The hit path's lookup, for get and find: a referenced valid entry covering
 * [s, end), or NULL. Host memory first takes the invalidations its monitor
 * has queued. The common case inline: the region starts on the request's
 * first page and heads its hash chain. */
static inline __attribute__((always_inline)) struct entry *
lookup(struct pdma_cache *c, const struct pdma_mem_ops *ops,
       void *be, enum pdma_hmem_iface iface, uint64_t s, uint64_t end)
{
	struct htab *t;
	struct entry *e;

	if (iface == PDMA_HMEM_SYSTEM && c->uffd)
		uffd_wait();
	if (iface == PDMA_HMEM_SYSTEM && c->kdev)
		kernel_sync(c);
	t = atomic_load_explicit(&c->ht, memory_order_acquire);
	e = atomic_load_explicit(&t->b[hash_start(t, s)], memory_order_acquire);
	if (e && RLX(e->start) == s && try_hit(e, ops, be, iface, s, end))
		return e;
	return pdma_cache_lookup_ref(c, ops, be, iface, s, end, SCAN_LIMIT);
}

int pdma_cache_get(struct pdma_cache *c, const struct pdma_mem_ops *ops, void *be,
		   enum pdma_hmem_iface iface, uint64_t addr, size_t len,
		   const struct pdma_mem_alloc *alloc, struct pdma_region **region)
{
	uint64_t s, end;
	struct entry *e;

	if (unlikely(!page_span(ops, addr, len, &s, &end)))
		return -EINVAL;
	if (unlikely((unsigned)iface >= PDMA_CACHE_NIFACE ||
		     c->mode[iface] == PDMA_CACHE_MODE_OFF))
		return get_slow(c, ops, be, iface, addr, len, s, end, alloc, region);
	e = lookup(c, ops, be, iface, s, end);
	if (likely(e)) {
		if (likely(hit_fresh(e, alloc, addr, len))) {
			*region = &e->r;
			return 0;
		}
		reject_stale(c, e);
	}
	return get_slow(c, ops, be, iface, addr, len, s, end, alloc, region);
}

/* pdma_cache_find's hit on memory no monitor watches: one driver call says
 * whether it is still the allocation pinned; where that cannot tell, the
 * caller queries the memory and takes pdma_cache_get. Out of line: the
 * trusted hits then save no registers for this call. */
static __attribute__((noinline)) int find_verify(struct pdma_cache *c, struct entry *e,
						 uint64_t addr, size_t len,
						 struct pdma_region **region)
{
	int ret = hit_verify(e, addr, len);

	if (!ret) {
		*region = &e->r;
		return 0;
	}
	if (ret == -ESTALE)
		reject_stale(c, e);
	else
		pdma_cache_entry_put(e);
	return -ENOENT;
}

int pdma_cache_find(struct pdma_cache *c, const struct pdma_mem_ops *ops, void *be,
		    enum pdma_hmem_iface iface, uint64_t addr, size_t len,
		    struct pdma_region **region)
{
	uint64_t s, end;
	struct entry *e;

	if (unlikely((unsigned)iface >= PDMA_CACHE_NIFACE ||
		     c->mode[iface] == PDMA_CACHE_MODE_OFF)) /* resolved at open: never DEFAULT */
		return -ENOENT;
	if (unlikely(!page_span(ops, addr, len, &s, &end)))
		return -EINVAL;
	e = lookup(c, ops, be, iface, s, end);
	if (!e)
		return -ENOENT;
	if (unlikely(RLX(e->verify)))
		return find_verify(c, e, addr, len, region);
	*region = &e->r;
	return 0;
}

void pdma_cache_put(struct pdma_cache *c, struct pdma_region *r)
{
	struct entry *e = entry_of(r);
	uint64_t stamp = lru_stamp();

	(void)c;
	if (likely(shard_count(e, -1, stamp)))
		return;
	atomic_store_explicit(&e->last_use, stamp, memory_order_relaxed);
	pdma_cache_entry_unref(e);
}
