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
 *    TAG_CHECK mode, from a fresh ops->query. A region whose pin raced with an
 *    invalidation of its range is handed out uncached.
 *
 * Concurrency
 *  - The hit path takes no lock and writes nothing shared but the region's
 *    own cache line: a hash probe on the start page (inline), then bounded
 *    walks of the hash chains or of a skip list ordered by start (lookups
 *    inside a region), one atomic add on the region's count; put is one
 *    atomic subtract plus the LRU stamp, on the same line.
 *  - Everything a get or put touches sits in one 64-byte line of the entry
 *    (key, count, validity, stamp); the region handed out follows it, and
 *    get/put convert between them by address arithmetic only.
 *  - Memory safety without a read-side protocol: entries live in a per-cache
 *    slab of 2 MiB chunks that are only unmapped when the cache is freed
 *    (type-stable memory, as SLAB_TYPESAFE_BY_RCU), and outgrown hash tables
 *    are kept until then (they sum to less than the live one). A reader that
 *    follows a stale pointer finds either a DEAD count or a recycled entry;
 *    it takes a reference first and then re-checks the key and the validity
 *    flag, backing off on a mismatch. All reader-visible fields are atomics.
 *  - Reference counts: users + 1 while indexed. A reader's increment counts
 *    only if the old value was positive. Whoever takes the count to 0 moves
 *    it 0 -> DEAD with a CAS and unpins; eviction moves an unreferenced
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
 *    thread, skew of at most 64 puts between threads); eviction pops a heap
 *    keyed by the stamp seen at insertion and re-sorts lazily, which yields
 *    exact LRU order among unreferenced regions for single-threaded use.
 *  - Host memory (userfaultfd monitor): before a lookup of host memory the
 *    caller waits while the monitor thread is handling events (one load), so
 *    an munmap that has returned is always reflected in the index.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "cache/cache.h"
#include "monitor/monitor.h"

#define TLS __thread __attribute__((tls_model("initial-exec")))
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define RLX(x) atomic_load_explicit(&(x), memory_order_relaxed)

#define REF_DEAD (INT32_MIN / 2)
#define SL_MAX 12 /* p = 1/4: ample for 4^12 regions */
#define SLAB_CHUNK ((size_t)2 << 20)
#define INVAL_RING 64
#define SCAN_LIMIT 256

/* ---------------------------------------------------------------------------
 * LRU stamps: per-thread monotonic, loosely synchronised through a global.
 */
static _Atomic uint64_t lru_global;
static TLS uint64_t lru_local;
static TLS unsigned lru_count;

static inline uint64_t lru_stamp(void)
{
	uint64_t g = atomic_load_explicit(&lru_global, memory_order_relaxed);
	uint64_t t = (lru_local > g ? lru_local : g) + 1;

	lru_local = t;
	if (unlikely(++lru_count >= 64)) {
		lru_count = 0;
		if (t > atomic_load_explicit(&lru_global, memory_order_relaxed))
			atomic_store_explicit(&lru_global, t, memory_order_relaxed);
	}
	return t;
}

/* ---------------------------------------------------------------------------
 * Index entries and structures.
 */
struct retire {
	struct retire *next;
	void *base; /* what to free(); NULL: an entry, back to the slab */
};

/*
 * One cache line holds everything a hit (get + put) touches: the key, the
 * reference count, the lookup-validity flag and the LRU stamp. The region
 * handed to callers follows it; get returns &e->r and put finds e by
 * subtraction, so neither touches the region's own lines.
 */
struct entry {
	struct entry *_Atomic hnext;  /* hash chain */
	_Atomic uint64_t start, end;  /* page-rounded range */
	const struct pdma_mem_ops *_Atomic ops;
	void *_Atomic be;
	_Atomic uint64_t buffer_id;
	_Atomic int32_t refcnt;       /* see "Reference counts" above */
	_Atomic uint8_t iface;
	atomic_bool valid;            /* false: never returned by a lookup again */
	_Atomic uint64_t last_use;    /* LRU stamp (put) */
	/* --- cold --- */
	struct pdma_region r;         /* what callers see (its refcnt is unused) */
	struct pdma_cache *cache;
	uint64_t heap_key;            /* writer: stamp when (re)placed in the heap */
	size_t heap_idx;              /* writer: heap position; SIZE_MAX: not in it */
	bool indexed;                 /* writer: in hash, skip list and heap */
	struct entry *defer_next;
	struct retire rt;
	int levels;
	struct entry *_Atomic next[]; /* skip list, levels entries */
} __attribute__((aligned(64)));

_Static_assert(offsetof(struct entry, r) == 64, "hot fields fill one cache line");

struct htab {
	size_t mask;
	unsigned shift;
	struct retire rt;
	struct entry *_Atomic b[];
};

struct inval_rec {
	uint64_t seq, start, end;
	enum pdma_hmem_iface iface;
};

struct pdma_cache {
	/* Read-mostly (hit path). */
	uint64_t id;
	struct htab *_Atomic ht;
	_Atomic uint64_t max_len;      /* longest region ever indexed */
	enum pdma_cache_mode mode[PDMA_CACHE_NIFACE];
	bool uffd;
	bool memhooks;
	bool passthrough;              /* max_count == 0 */
	struct entry *_Atomic head[SL_MAX] __attribute__((aligned(64)));

	/* Writer side. */
	pthread_mutex_t lock __attribute__((aligned(64)));
	struct pdma_cache_attr attr;
	size_t count, bytes;
	struct entry **heap;
	size_t heap_len, heap_cap;
	uint64_t inval_seq;
	struct inval_rec inval[INVAL_RING];
	struct pdma_monitor_sub *sub;
	struct pdma_cache_stats st;

	/* Entry slab: 2 MiB chunks (huge pages where the kernel gives them), so
	 * that the hot lines of many regions share few TLB entries. */
	pthread_mutex_t slab_lock;
	struct entry *slab_free;
	void *chunks;                  /* linked through their first word */
	size_t entry_size;

	struct retire *old_tables;     /* outgrown hash tables, freed at the end */

	/* Any thread. */
	struct entry *_Atomic deferred; /* last reference dropped in a notification */
	_Atomic uint64_t live;         /* 1 (the cache itself) + regions not yet unpinned */
	_Atomic uint64_t n_uncached, n_stale;
	atomic_bool closed;
};

static _Atomic uint64_t cache_ids = 1;

static inline struct entry *entry_of(struct pdma_region *r)
{
	return (struct entry *)((char *)r - offsetof(struct entry, r));
}

/* Neighbouring pages go to neighbouring buckets (sequential access stays in
 * few cache lines); each 256 KiB block of pages starts at a random bucket (so
 * 2 MiB-aligned GPU buffers do not pile up in a few buckets). */
static inline size_t hash_start(const struct htab *t, uint64_t start)
{
	uint64_t pn = start >> 12;

	return (size_t)((((pn >> 6) * 0x9E3779B97F4A7C15ull) >> t->shift) + (pn & 63)) & t->mask;
}

static struct htab *htab_new(size_t nb)
{
	struct htab *t = calloc(1, sizeof(*t) + nb * sizeof(t->b[0]));
	unsigned bits = 0;

	if (!t)
		return NULL;
	while (((size_t)1 << bits) < nb)
		bits++;
	t->mask = nb - 1;
	t->shift = 64 - bits;
	t->rt.base = t;
	return t;
}

/* ---------------------------------------------------------------------------
 * Entry slab.
 */
/* A 2 MiB-aligned chunk, carved into DEAD entries on c->slab_free. */
static int slab_grow(struct pdma_cache *c)
{
	char *m = mmap(NULL, 2 * SLAB_CHUNK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0), *a;
	struct entry *first = NULL, *last = NULL;
	size_t n;

	if (m == MAP_FAILED)
		return -ENOMEM;
	/* No lock held here: the munmap may be seen by the memhooks monitor
	 * (a notification for a range no cache holds). */
	a = (char *)(((uintptr_t)m + SLAB_CHUNK - 1) & ~(uintptr_t)(SLAB_CHUNK - 1));
	if (a > m)
		munmap(m, (size_t)(a - m));
	munmap(a + SLAB_CHUNK, (size_t)(m + 2 * SLAB_CHUNK - (a + SLAB_CHUNK)));
	madvise(a, SLAB_CHUNK, MADV_HUGEPAGE);
	/* The first slot holds the chunk link; carve the rest. */
	n = SLAB_CHUNK / c->entry_size;
	for (size_t i = n - 1; i >= 1; i--) {
		struct entry *e = (struct entry *)(a + i * c->entry_size);

		atomic_init(&e->refcnt, REF_DEAD);
		e->rt.next = (struct retire *)first;
		first = e;
		if (!last)
			last = e;
	}
	pthread_mutex_lock(&c->slab_lock);
	*(void **)a = c->chunks;
	c->chunks = a;
	last->rt.next = (struct retire *)c->slab_free;
	c->slab_free = first;
	pthread_mutex_unlock(&c->slab_lock);
	return 0;
}

static struct entry *slab_alloc(struct pdma_cache *c)
{
	struct entry *e;

	for (;;) {
		pthread_mutex_lock(&c->slab_lock);
		e = c->slab_free;
		if (e)
			c->slab_free = (struct entry *)e->rt.next;
		pthread_mutex_unlock(&c->slab_lock);
		if (e || slab_grow(c))
			return e;
	}
}

static void slab_free(struct pdma_cache *c, struct entry *e)
{
	pthread_mutex_lock(&c->slab_lock);
	e->rt.next = (struct retire *)c->slab_free;
	c->slab_free = e;
	pthread_mutex_unlock(&c->slab_lock);
}

static void slab_destroy(struct pdma_cache *c)
{
	while (c->chunks) {
		void *n = *(void **)c->chunks;

		munmap(c->chunks, SLAB_CHUNK);
		c->chunks = n;
	}
	pthread_mutex_destroy(&c->slab_lock);
}

/* ---------------------------------------------------------------------------
 * Retirement (free after a grace period).
 */
static void cache_free(struct pdma_cache *c)
{
	struct htab *t = atomic_load_explicit(&c->ht, memory_order_relaxed);

	while (c->old_tables) {
		struct retire *n = c->old_tables->next;

		free(c->old_tables->base);
		c->old_tables = n;
	}
	free(t);
	free(c->heap);
	slab_destroy(c);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

static void cache_unref(struct pdma_cache *c)
{
	if (atomic_fetch_sub_explicit(&c->live, 1, memory_order_acq_rel) == 1)
		cache_free(c);
}

/* Unpin an entry whose count went to DEAD; its slot goes back to the slab
 * (type-stable: readers with a stale pointer find DEAD or another key). */
static void entry_destroy(struct entry *e)
{
	struct pdma_cache *c = e->cache;

	pdma_region_fini(&e->r);
	slab_free(c, e);
	cache_unref(c);
}

/*
 * Drop one reference; true if the caller must unpin (the count is then DEAD).
 * Whoever takes the count to 0 tries 0 -> DEAD; if a reader's transient
 * increment got in between, that reader's own drop takes it to 0 again and
 * tries in turn, so exactly one caller wins.
 */
static bool entry_unref_last(struct entry *e)
{
	int32_t zero = 0;

	if (atomic_fetch_sub_explicit(&e->refcnt, 1, memory_order_acq_rel) != 1)
		return false;
	return atomic_compare_exchange_strong_explicit(&e->refcnt, &zero, REF_DEAD,
						       memory_order_acq_rel, memory_order_relaxed);
}

/* Drop one reference; the last one unpins. */
static void entry_unref(struct entry *e)
{
	if (entry_unref_last(e))
		entry_destroy(e);
}

/*
 * Drop one reference from inside a notification or a revoke callback: there
 * the backend may be revoking the very pin (the sim backend's unpin waits for
 * the revocation to finish), so the unpin is deferred to the next writer call.
 */
static void entry_unref_deferred(struct entry *e)
{
	struct pdma_cache *c = e->cache;
	struct entry *old;

	if (!entry_unref_last(e))
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
		entry_destroy(e);
	}
}

/* Take a reference on an entry found through the index. False: it is dying
 * or dead (the transient increment is undone). The caller then re-checks the
 * key: the slot may have been recycled for another region. */
static inline bool entry_tryref(struct entry *e)
{
	int32_t old = atomic_fetch_add_explicit(&e->refcnt, 1, memory_order_acq_rel);

	if (likely(old > 0))
		return true;
	entry_unref(e);
	return false;
}

/* ---------------------------------------------------------------------------
 * LRU heap (writer side).
 */
static inline bool heap_less(const struct entry *a, const struct entry *b)
{
	return a->heap_key < b->heap_key;
}

static void heap_set(struct pdma_cache *c, size_t i, struct entry *e)
{
	c->heap[i] = e;
	e->heap_idx = i;
}

static void heap_up(struct pdma_cache *c, size_t i)
{
	struct entry *e = c->heap[i];

	while (i > 0) {
		size_t p = (i - 1) / 2;

		if (!heap_less(e, c->heap[p]))
			break;
		heap_set(c, i, c->heap[p]);
		i = p;
	}
	heap_set(c, i, e);
}

static void heap_down(struct pdma_cache *c, size_t i)
{
	struct entry *e = c->heap[i];

	for (;;) {
		size_t l = 2 * i + 1, m = i;
		struct entry *me = e;

		if (l < c->heap_len && heap_less(c->heap[l], me))
			m = l, me = c->heap[l];
		if (l + 1 < c->heap_len && heap_less(c->heap[l + 1], me))
			m = l + 1, me = c->heap[l + 1];
		if (m == i)
			break;
		heap_set(c, i, me);
		i = m;
	}
	heap_set(c, i, e);
}

static int heap_push(struct pdma_cache *c, struct entry *e)
{
	if (c->heap_len == c->heap_cap) {
		size_t n = c->heap_cap ? c->heap_cap * 2 : 64;
		struct entry **h = realloc(c->heap, n * sizeof(*h));

		if (!h)
			return -ENOMEM;
		c->heap = h;
		c->heap_cap = n;
	}
	heap_set(c, c->heap_len++, e);
	heap_up(c, c->heap_len - 1);
	return 0;
}

static void heap_remove(struct pdma_cache *c, struct entry *e)
{
	size_t i = e->heap_idx;
	struct entry *last;

	if (i == SIZE_MAX)
		return;
	e->heap_idx = SIZE_MAX;
	last = c->heap[--c->heap_len];
	if (i == c->heap_len)
		return;
	heap_set(c, i, last);
	heap_up(c, i);
	heap_down(c, last->heap_idx);
}

/* ---------------------------------------------------------------------------
 * Skip list ordered by (start, end, address); single writer, lock-free readers.
 */
static inline bool sl_before(const struct entry *a, uint64_t start, uint64_t end,
			     const struct entry *b)
{
	if (a->start != start)
		return a->start < start;
	if (a->end != end)
		return a->end < end;
	return (uintptr_t)a < (uintptr_t)b;
}

static inline struct entry *_Atomic *sl_link(struct pdma_cache *c, struct entry *p, int i)
{
	return p ? &p->next[i] : &c->head[i];
}

static void sl_find_preds(struct pdma_cache *c, struct entry *e, struct entry **preds)
{
	struct entry *p = NULL;

	for (int i = SL_MAX - 1; i >= 0; i--) {
		struct entry *n;

		while ((n = atomic_load_explicit(sl_link(c, p, i), memory_order_relaxed)) &&
		       sl_before(n, e->start, e->end, e))
			p = n;
		preds[i] = p;
	}
}

static void sl_insert(struct pdma_cache *c, struct entry *e)
{
	struct entry *preds[SL_MAX];

	sl_find_preds(c, e, preds);
	for (int i = 0; i < e->levels; i++) {
		struct entry *_Atomic *l = sl_link(c, preds[i], i);

		atomic_store_explicit(&e->next[i], atomic_load_explicit(l, memory_order_relaxed),
				      memory_order_relaxed);
		atomic_store_explicit(l, e, memory_order_release);
	}
}

static void sl_remove(struct pdma_cache *c, struct entry *e)
{
	struct entry *preds[SL_MAX];

	sl_find_preds(c, e, preds);
	for (int i = e->levels - 1; i >= 0; i--) {
		struct entry *_Atomic *l = sl_link(c, preds[i], i);

		if (atomic_load_explicit(l, memory_order_relaxed) == e)
			atomic_store_explicit(
				l, atomic_load_explicit(&e->next[i], memory_order_relaxed),
				memory_order_release);
	}
}

/* First entry with start >= key (reader-safe; *budget bounds the steps). */
static struct entry *sl_lower_bound(struct pdma_cache *c, uint64_t key, size_t *budget)
{
	struct entry *p = NULL, *n = NULL;

	for (int i = SL_MAX - 1; i >= 0; i--) {
		while ((n = atomic_load_explicit(sl_link(c, p, i), memory_order_acquire)) &&
		       RLX(n->start) < key) {
			p = n;
			if (!--*budget)
				return NULL;
		}
	}
	return n;
}

/* ---------------------------------------------------------------------------
 * Lookup (readers and writer).
 */
static inline bool entry_matches(struct entry *e, const struct pdma_mem_ops *ops, void *be,
				 enum pdma_hmem_iface iface, uint64_t s, uint64_t end)
{
	return RLX(e->start) <= s && RLX(e->end) >= end && RLX(e->ops) == ops &&
	       RLX(e->be) == be && RLX(e->iface) == (uint8_t)iface;
}

/* Reference e if it is a valid region covering the request. */
static inline bool try_hit(struct entry *e, const struct pdma_mem_ops *ops, void *be,
			   enum pdma_hmem_iface iface, uint64_t s, uint64_t end)
{
	if (!entry_matches(e, ops, be, iface, s, end) || !RLX(e->valid) || !entry_tryref(e))
		return false;
	/* Referenced: the slot can no longer be recycled; is it still ours? */
	if (likely(entry_matches(e, ops, be, iface, s, end) &&
		   atomic_load_explicit(&e->valid, memory_order_acquire)))
		return true;
	entry_unref(e);
	return false;
}

/*
 * Finds and references a valid covering entry. Readers (limit != 0) run with
 * no lock: every pointer they follow leads to a slab entry (type-stable) or a
 * kept hash table, and every step is bounded (a recycled entry can send a
 * reader down another chain: a false miss, corrected by the locked slow path).
 */
static __attribute__((noinline)) struct entry *
lookup_ref(struct pdma_cache *c, const struct pdma_mem_ops *ops, void *be,
	   enum pdma_hmem_iface iface, uint64_t s, uint64_t end, size_t limit)
{
	struct htab *t = atomic_load_explicit(&c->ht, memory_order_acquire);
	size_t n = limit ? limit : SIZE_MAX;
	struct entry *e;
	uint64_t maxlen, lo;

	for (e = atomic_load_explicit(&t->b[hash_start(t, s)], memory_order_acquire); e;
	     e = atomic_load_explicit(&e->hnext, memory_order_acquire)) {
		if (RLX(e->start) == s && try_hit(e, ops, be, iface, s, end))
			return e;
		if (!--n)
			return NULL;
	}
	/* Inside a region: a covering region starts in [end - maxlen, s). */
	maxlen = atomic_load_explicit(&c->max_len, memory_order_acquire);
	if (maxlen <= end - s)
		return NULL; /* only start == s could cover: the hash said no */
	lo = end - maxlen > end ? 0 : end - maxlen;
	if ((s - lo) / ops->page_size <= 8) {
		/* Few candidate starts: probe the hash for each page. */
		for (uint64_t p = s - ops->page_size; p >= lo && p < s; p -= ops->page_size) {
			for (e = atomic_load_explicit(&t->b[hash_start(t, p)], memory_order_acquire);
			     e; e = atomic_load_explicit(&e->hnext, memory_order_acquire)) {
				if (RLX(e->start) == p && try_hit(e, ops, be, iface, s, end))
					return e;
				if (!--n)
					return NULL;
			}
		}
		return NULL;
	}
	for (e = sl_lower_bound(c, lo, &n); e && RLX(e->start) <= s;
	     e = atomic_load_explicit(&e->next[0], memory_order_acquire)) {
		if (try_hit(e, ops, be, iface, s, end))
			return e;
		if (!--n)
			return NULL;
	}
	return NULL;
}

/* ---------------------------------------------------------------------------
 * Index maintenance (writer, under c->lock).
 */
static int index_grow(struct pdma_cache *c)
{
	struct htab *old = atomic_load_explicit(&c->ht, memory_order_relaxed), *t;

	if (2 * c->count < old->mask + 1)
		return 0;
	t = htab_new((old->mask + 1) * 2);
	if (!t)
		return 0; /* keep the longer chains */
	/* Moving entries rewrites their chain links while readers may walk the
	 * old table: a reader can only be sent to another chain or to its end,
	 * which is a false miss that the locked slow path corrects. */
	for (size_t i = 0; i <= old->mask; i++) {
		struct entry *e = atomic_load_explicit(&old->b[i], memory_order_relaxed), *n;

		for (; e; e = n) {
			size_t b = hash_start(t, e->start);

			n = atomic_load_explicit(&e->hnext, memory_order_relaxed);
			atomic_store_explicit(&e->hnext,
					      atomic_load_explicit(&t->b[b], memory_order_relaxed),
					      memory_order_release);
			atomic_store_explicit(&t->b[b], e, memory_order_release);
		}
	}
	atomic_store_explicit(&c->ht, t, memory_order_release);
	/* Readers may still walk it: kept until the cache is freed (the old
	 * tables add up to less than the current one). */
	old->rt.next = c->old_tables;
	c->old_tables = &old->rt;
	return 0;
}

static int index_insert(struct pdma_cache *c, struct entry *e)
{
	struct htab *t;
	size_t b;

	e->heap_key = atomic_load_explicit(&e->last_use, memory_order_relaxed);
	if (heap_push(c, e))
		return -ENOMEM;
	index_grow(c);
	t = atomic_load_explicit(&c->ht, memory_order_relaxed);
	b = hash_start(t, e->start);
	if ((e->end - e->start) > atomic_load_explicit(&c->max_len, memory_order_relaxed))
		atomic_store_explicit(&c->max_len, (e->end - e->start), memory_order_release);
	sl_insert(c, e);
	atomic_store_explicit(&e->hnext, atomic_load_explicit(&t->b[b], memory_order_relaxed),
			      memory_order_relaxed);
	atomic_store_explicit(&t->b[b], e, memory_order_release);
	e->indexed = true;
	c->count++;
	c->bytes += (e->end - e->start);
	return 0;
}

/* Unlink from every structure; the index reference is the caller's to drop. */
static void index_remove(struct pdma_cache *c, struct entry *e)
{
	struct htab *t = atomic_load_explicit(&c->ht, memory_order_relaxed);
	struct entry *_Atomic *l = &t->b[hash_start(t, e->start)];
	struct entry *n;

	while ((n = atomic_load_explicit(l, memory_order_relaxed)) && n != e)
		l = &n->hnext;
	if (n)
		atomic_store_explicit(l, atomic_load_explicit(&e->hnext, memory_order_relaxed),
				      memory_order_release);
	sl_remove(c, e);
	heap_remove(c, e);
	e->indexed = false;
	c->count--;
	c->bytes -= (e->end - e->start);
}

/*
 * Evict unreferenced regions in LRU order (under c->lock) onto *victims
 * (linked through rt.next, unpinned by the caller outside the lock).
 * Matching: same backend if ops != NULL. Stops once need_count regions and
 * need_bytes bytes went, or nothing evictable is left. Returns bytes evicted.
 */
static size_t evict_lru(struct pdma_cache *c, const struct pdma_mem_ops *ops, void *be,
			size_t need_count, size_t need_bytes, struct entry **victims)
{
	struct entry **aside = NULL;
	size_t naside = 0, cap = 0, got = 0, gotb = 0;

	while (c->heap_len && (got < need_count || gotb < need_bytes)) {
		struct entry *e = c->heap[0];
		uint64_t lu = atomic_load_explicit(&e->last_use, memory_order_relaxed);
		int expect = 1;

		if (lu != e->heap_key) {
			/* Used since it was placed: re-sort by its newer stamp. */
			e->heap_key = lu;
			heap_down(c, 0);
			continue;
		}
		if ((ops && (e->ops != ops || e->be != be)) ||
		    !atomic_compare_exchange_strong_explicit(&e->refcnt, &expect, REF_DEAD,
							     memory_order_acq_rel,
							     memory_order_relaxed)) {
			/* In use or another backend: set aside, keep looking. */
			if (naside == cap) {
				size_t n = cap ? cap * 2 : 16;
				struct entry **a = realloc(aside, n * sizeof(*a));

				if (!a)
					break;
				aside = a;
				cap = n;
			}
			aside[naside++] = e;
			heap_remove(c, e);
			continue;
		}
		index_remove(c, e);
		e->rt.next = (struct retire *)*victims;
		*victims = e;
		got++;
		gotb += (e->end - e->start);
		c->st.evictions++;
	}
	for (size_t i = 0; i < naside; i++) {
		aside[i]->heap_key = atomic_load_explicit(&aside[i]->last_use, memory_order_relaxed);
		if (heap_push(c, aside[i])) {
			/* Out of memory for the heap: the entry stays indexed but
			 * can no longer be evicted; it goes at close. */
			aside[i]->heap_idx = SIZE_MAX;
		}
	}
	free(aside);
	return gotb;
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

		entry_destroy(v);
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

	for (e = sl_lower_bound(c, lo, &budget); e && e->start < end; e = n) {
		n = atomic_load_explicit(&e->next[0], memory_order_relaxed);
		if (e->iface != iface || e->end <= addr)
			continue;
		atomic_store_explicit(&e->valid, false, memory_order_release);
		index_remove(c, e);
		e->rt.next = (struct retire *)*drop;
		*drop = e;
		cnt++;
		c->st.invalidations++;
	}
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
			entry_unref_deferred(v);
		else
			entry_unref(v);
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
static size_t parse_size(const char *s, bool *ok)
{
	char *end;
	unsigned long long v;

	*ok = false;
	if (!s || !*s)
		return 0;
	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || end == s || *s == '-')
		return 0;
	switch (*end) {
	case 'k': case 'K': v <<= 10; end++; break;
	case 'm': case 'M': v <<= 20; end++; break;
	case 'g': case 'G': v <<= 30; end++; break;
	default: break;
	}
	if (*end)
		return 0;
	*ok = true;
	return (size_t)v;
}

static size_t default_max_size(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);

	if (pages <= 0 || psz <= 0)
		return (size_t)1 << 30;
	if (cpus <= 0)
		cpus = 1;
	return (size_t)pages * (size_t)psz / (size_t)cpus / 2;
}

void pdma_cache_attr_from_env(struct pdma_cache_attr *attr)
{
	const char *v;
	bool ok;
	size_t n;

	memset(attr, 0, sizeof(*attr));
	attr->max_size = default_max_size();
	attr->max_count = 1024;
	n = parse_size(getenv("PEERDMA_MR_CACHE_MAX_SIZE"), &ok);
	if (ok && n)
		attr->max_size = n;
	n = parse_size(getenv("PEERDMA_MR_CACHE_MAX_COUNT"), &ok);
	if (ok)
		attr->max_count = n;
	v = getenv("PEERDMA_MR_CACHE_MONITOR");
	if (v && !strcmp(v, "userfaultfd"))
		attr->monitor = PDMA_CACHE_MONITOR_USERFAULTFD;
	else if (v && !strcmp(v, "memhooks"))
		attr->monitor = PDMA_CACHE_MONITOR_MEMHOOKS;
	else if (v && !strcmp(v, "disabled"))
		attr->monitor = PDMA_CACHE_MONITOR_DISABLED;
	v = getenv("PEERDMA_MR_CUDA_CACHE_MONITOR_ENABLED");
	if (v && !strcmp(v, "0"))
		attr->mode[PDMA_HMEM_CUDA] = PDMA_CACHE_MODE_OFF;
	v = getenv("PEERDMA_MR_CUDA_CACHE_TAG_CHECK");
	if (v && !strcmp(v, "0") && attr->mode[PDMA_HMEM_CUDA] != PDMA_CACHE_MODE_OFF)
		attr->mode[PDMA_HMEM_CUDA] = PDMA_CACHE_MODE_TRUST;
}

int pdma_cache_open(const struct pdma_cache_attr *attr, struct pdma_cache **cache)
{
	struct pdma_cache *c;
	int ret;

	if (!attr || !cache || (unsigned)attr->monitor > PDMA_CACHE_MONITOR_MEMHOOKS)
		return -EINVAL;
	for (int i = 0; i < PDMA_CACHE_NIFACE; i++)
		if ((unsigned)attr->mode[i] > PDMA_CACHE_MODE_TAG_CHECK)
			return -EINVAL;
	c = aligned_alloc(64, sizeof(*c));
	if (!c)
		return -ENOMEM;
	memset(c, 0, sizeof(*c));
	c->attr = *attr;
	if (!c->attr.max_size)
		c->attr.max_size = default_max_size();
	c->passthrough = attr->max_count == 0;
	c->id = atomic_fetch_add(&cache_ids, 1);
	atomic_init(&c->live, 1);
	pthread_mutex_init(&c->lock, NULL);
	pthread_mutex_init(&c->slab_lock, NULL);
	c->entry_size = (sizeof(struct entry) + SL_MAX * sizeof(struct entry *) + 63) & ~(size_t)63;
	atomic_init(&c->ht, htab_new(64));
	if (!atomic_load(&c->ht)) {
		pthread_mutex_destroy(&c->slab_lock);
		pthread_mutex_destroy(&c->lock);
		free(c);
		return -ENOMEM;
	}

	/* Host memory: cached only with a monitor that runs. */
	c->st.monitor = PDMA_CACHE_MONITOR_DISABLED;
	if (!c->passthrough && (attr->monitor == PDMA_CACHE_MONITOR_DEFAULT ||
				attr->monitor == PDMA_CACHE_MONITOR_USERFAULTFD)) {
		if (pdma_uffd_monitor_start() == 0) {
			c->uffd = true;
			c->st.monitor = PDMA_CACHE_MONITOR_USERFAULTFD;
		}
	}
	if (!c->passthrough && attr->monitor == PDMA_CACHE_MONITOR_MEMHOOKS) {
		if (pdma_memhooks_monitor_start() == 0) {
			c->memhooks = true;
			c->st.monitor = PDMA_CACHE_MONITOR_MEMHOOKS;
		}
	}
	for (int i = 0; i < PDMA_CACHE_NIFACE; i++) {
		enum pdma_cache_mode m = attr->mode[i];

		if (m == PDMA_CACHE_MODE_DEFAULT)
			m = i == PDMA_HMEM_CUDA ? PDMA_CACHE_MODE_TAG_CHECK : PDMA_CACHE_MODE_TRUST;
		if (i == PDMA_HMEM_SYSTEM && !c->uffd && !c->memhooks)
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
		free(atomic_load(&c->ht));
		pthread_mutex_destroy(&c->slab_lock);
		pthread_mutex_destroy(&c->lock);
		free(c);
		return ret;
	}
	*cache = c;
	return 0;
}

void pdma_cache_close(struct pdma_cache *c)
{
	struct entry *drop = NULL;

	if (!c)
		return;
	pdma_monitor_unsubscribe(c->sub);
	pthread_mutex_lock(&c->lock);
	/* Every indexed region leaves; referenced ones live on until their put. */
	while (c->heap_len) {
		struct entry *e = c->heap[0];

		index_remove(c, e);
		e->rt.next = (struct retire *)drop;
		drop = e;
	}
	/* Entries that lost their heap slot (allocation failure) */
	for (struct entry *e = atomic_load_explicit(&c->head[0], memory_order_relaxed), *n; e;
	     e = n) {
		n = atomic_load_explicit(&e->next[0], memory_order_relaxed);
		index_remove(c, e);
		e->rt.next = (struct retire *)drop;
		drop = e;
	}
	atomic_store(&c->closed, true);
	pthread_mutex_unlock(&c->lock);
	/* Not revoked: the memory is still there and users may still DMA. */
	while (drop) {
		struct entry *n = (struct entry *)drop->rt.next;

		entry_unref(drop);
		drop = n;
	}
	deferred_run(c);
	if (c->uffd)
		pdma_uffd_monitor_stop();
	if (c->memhooks)
		pdma_memhooks_monitor_stop();
	cache_unref(c);
}

void pdma_cache_region_revoked(struct pdma_region *r)
{
	struct entry *e = entry_of(r);
	struct pdma_cache *c = e->cache;
	bool drop = false;

	atomic_store_explicit(&e->valid, false, memory_order_release);
	pthread_mutex_lock(&c->lock);
	if (e->indexed) {
		index_remove(c, e);
		c->st.invalidations++;
		drop = true;
	}
	pthread_mutex_unlock(&c->lock);
	/* An unpin here would wait for this very callback in the sim backend. */
	if (drop)
		entry_unref_deferred(e);
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
	evict_lru(c, NULL, NULL, SIZE_MAX, SIZE_MAX, &v);
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

/* Is the hit e still the memory the caller means? */
static inline bool hit_fresh(struct pdma_cache *c, struct entry *e,
			     const struct pdma_mem_alloc *alloc, enum pdma_hmem_iface iface,
			     uint64_t addr, size_t len)
{
	uint64_t id = RLX(e->buffer_id);

	if (alloc && alloc->buffer_id)
		return !id || alloc->buffer_id == id;
	if (likely(c->mode[iface] != PDMA_CACHE_MODE_TAG_CHECK))
		return true;
	{
		struct pdma_mem_alloc a;

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
		index_remove(c, e);
		c->st.invalidations++;
		drop = e;
		e->rt.next = NULL;
	}
	pthread_mutex_unlock(&c->lock);
	if (drop)
		drop_list(drop, false);
	else
		pdma_region_revoke(&e->r);
	entry_unref(e); /* the caller's lookup reference */
}

static inline void uffd_wait(void)
{
	while (atomic_load_explicit(&pdma_uffd_seq, memory_order_acquire) & 1)
		sched_yield();
}

/* The skip-list height of a new entry (thread-local generator: no lock). */
static int random_level(void)
{
	static TLS uint64_t x;
	int l = 1;

	if (unlikely(!x))
		x = 0x2545F4914F6CDD1Dull ^ (uint64_t)(uintptr_t)&x;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	for (uint64_t y = x; l < SL_MAX && (y & 3) == 0; y >>= 2)
		l++;
	return l;
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
	int levels = random_level(), ret;
	uint64_t seq = 0;

	cacheable = mode == PDMA_CACHE_MODE_TRUST || (mode == PDMA_CACHE_MODE_TAG_CHECK && id);
	if (cacheable && plen > c->attr.max_size)
		cacheable = false;
	deferred_run(c);
	if (mode != PDMA_CACHE_MODE_OFF) {
		for (;;) {
			pthread_mutex_lock(&c->lock);
			e = lookup_ref(c, ops, be, iface, s, end, 0);
			if (!e)
				break;
			c->st.slow_hits++;
			pthread_mutex_unlock(&c->lock);
			if (hit_fresh(c, e, alloc, iface, addr, len)) {
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
			evict_lru(c, NULL, NULL,
				  c->count + 1 > c->attr.max_count ?
					  c->count + 1 - c->attr.max_count : 0,
				  c->bytes + plen > c->attr.max_size ?
					  c->bytes + plen - c->attr.max_size : 0,
				  &victims);
		pthread_mutex_unlock(&c->lock);
		destroy_victims(victims);
		victims = NULL;
	}

	e = slab_alloc(c);
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
	atomic_store_explicit(&e->last_use, lru_stamp(), memory_order_relaxed);
	memset(&e->r, 0, sizeof(e->r));
	e->defer_next = NULL;
	e->indexed = false;
	e->heap_key = 0;
	e->levels = levels;
	e->cache = c;
	e->heap_idx = SIZE_MAX;
	e->rt.base = NULL;
	e->r.owner = c; /* before the pin: a revocation may come at once */
	atomic_fetch_add(&c->live, 1);

	for (;;) {
		size_t freed;

		ret = pdma_region_init(&e->r, ops, be, iface, s, plen, id);
		if (ret != -ENOMEM || mode == PDMA_CACHE_MODE_OFF)
			break;
		/* BAR or lock limit: unpin LRU regions of this backend, retry. */
		pthread_mutex_lock(&c->lock);
		freed = evict_lru(c, ops, be, 1, plen, &victims);
		if (freed)
			c->st.enomem_retries++;
		pthread_mutex_unlock(&c->lock);
		if (!freed)
			break;
		destroy_victims(victims);
		victims = NULL;
	}
	if (ret) {
		slab_free(c, e); /* still DEAD: stale readers back off */
		cache_unref(c);
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
	if (iface == PDMA_HMEM_SYSTEM && c->uffd)
		watched = pdma_uffd_monitor_watch(s, plen) == 0;

	pthread_mutex_lock(&c->lock);
	if (!atomic_load_explicit(&e->r.valid, memory_order_acquire) ||
	    !atomic_load_explicit(&e->valid, memory_order_acquire)) {
		/* Revoked before it was indexed: the memory is gone. */
		pthread_mutex_unlock(&c->lock);
		entry_unref(e);
		return -EFAULT;
	}
	if (watched && !inval_since(c, seq, iface, s, end)) {
		if (c->count + 1 > c->attr.max_count || c->bytes + plen > c->attr.max_size)
			evict_lru(c, NULL, NULL,
				  c->count + 1 > c->attr.max_count ?
					  c->count + 1 - c->attr.max_count : 0,
				  c->bytes + plen > c->attr.max_size ?
					  c->bytes + plen - c->attr.max_size : 0,
				  &victims);
		if (c->count + 1 <= c->attr.max_count && c->bytes + plen <= c->attr.max_size) {
			atomic_fetch_add_explicit(&e->refcnt, 1, memory_order_relaxed);
			if (index_insert(c, e))
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
	if (iface == PDMA_HMEM_SYSTEM && c->uffd)
		uffd_wait();
	/* The common case inline: the region starts on the request's first
	 * page and heads its hash chain. */
	{
		struct htab *t = atomic_load_explicit(&c->ht, memory_order_acquire);

		e = atomic_load_explicit(&t->b[hash_start(t, s)], memory_order_acquire);
		if (!e || RLX(e->start) != s || !try_hit(e, ops, be, iface, s, end))
			e = lookup_ref(c, ops, be, iface, s, end, SCAN_LIMIT);
	}
	if (likely(e)) {
		if (likely(hit_fresh(c, e, alloc, iface, addr, len))) {
			*region = &e->r;
			return 0;
		}
		reject_stale(c, e);
	}
	return get_slow(c, ops, be, iface, addr, len, s, end, alloc, region);
}

int pdma_cache_find(struct pdma_cache *c, const struct pdma_mem_ops *ops, void *be,
		    enum pdma_hmem_iface iface, uint64_t addr, size_t len,
		    struct pdma_region **region)
{
	uint64_t s, end;
	struct entry *e;

	if (unlikely((unsigned)iface >= PDMA_CACHE_NIFACE ||
		     c->mode[iface] != PDMA_CACHE_MODE_TRUST))
		return -ENOENT;
	if (unlikely(!page_span(ops, addr, len, &s, &end)))
		return -EINVAL;
	if (iface == PDMA_HMEM_SYSTEM && c->uffd)
		uffd_wait();
	e = lookup_ref(c, ops, be, iface, s, end, SCAN_LIMIT);
	if (!e)
		return -ENOENT;
	*region = &e->r;
	return 0;
}

void pdma_cache_put(struct pdma_cache *c, struct pdma_region *r)
{
	struct entry *e = entry_of(r);

	(void)c;
	atomic_store_explicit(&e->last_use, lru_stamp(), memory_order_relaxed);
	entry_unref(e);
}
