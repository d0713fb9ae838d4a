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
 *  - Readers (the hit path) take no lock: a per-thread last-hit slot, then a
 *    hash table on the start page (lock-free chains), then a skip list ordered
 *    by start for lookups inside a region; all under an epoch read section
 *    (RCU-like: a per-thread counter store, with the writer paying the fence
 *    through membarrier(2); plain fences where membarrier is unavailable).
 *  - Reference counts are per region: users + 1 while indexed. A reader takes
 *    a reference with one atomic add and backs off if the count was not
 *    positive. The last reference moves the count 1 -> DEAD with a CAS, after
 *    which no transient increment can revive it.
 *  - Writers (misses, evictions, invalidations) serialise on the cache mutex.
 *    Pins and unpins run outside it: the sim backend waits in unpin for a
 *    running revoke callback, and that callback takes the mutex.
 *  - Index memory (entries, old hash tables) is freed only after a grace
 *    period, in batches.
 *  - LRU: put stores a per-thread monotonic stamp (exact order within a
 *    thread, skew of at most 64 puts between threads); eviction pops a heap
 *    keyed by the stamp seen at insertion and re-sorts lazily, which yields
 *    exact LRU order among unreferenced regions for single-threaded use.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>

#include "cache.h"
#include "monitor.h"

#define TLS __thread __attribute__((tls_model("initial-exec")))
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

#define REF_DEAD (INT32_MIN / 2)
#define SL_MAX 16
#define INVAL_RING 64
#define RETIRE_BATCH 64
#define SCAN_LIMIT 256

/* ---------------------------------------------------------------------------
 * Epoch-based reclamation (RCU-like), process-wide.
 */
struct rcu_reader {
	_Atomic uint64_t ctr; /* 0: outside; else the epoch seen at entry */
	struct rcu_reader *next;
} __attribute__((aligned(64)));

static _Atomic uint64_t rcu_epoch = 1;
static pthread_mutex_t rcu_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rcu_reader *rcu_readers;
static pthread_once_t rcu_once = PTHREAD_ONCE_INIT;
static pthread_key_t rcu_key;
static bool rcu_membarrier;
static TLS struct rcu_reader *tls_reader;

static void rcu_reader_exit(void *arg)
{
	struct rcu_reader *rd = arg, **p;

	pthread_mutex_lock(&rcu_lock);
	for (p = &rcu_readers; *p; p = &(*p)->next) {
		if (*p == rd) {
			*p = rd->next;
			break;
		}
	}
	pthread_mutex_unlock(&rcu_lock);
	free(rd);
}

static void rcu_init(void)
{
	pthread_key_create(&rcu_key, rcu_reader_exit);
	if (getenv("PEERDMA_CACHE_NO_MEMBARRIER"))
		return;
	if (syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0)
		rcu_membarrier = true;
}

static struct rcu_reader *rcu_register(void)
{
	struct rcu_reader *rd;

	pthread_once(&rcu_once, rcu_init);
	rd = aligned_alloc(64, sizeof(*rd));
	if (!rd)
		return NULL;
	atomic_init(&rd->ctr, 0);
	pthread_mutex_lock(&rcu_lock);
	rd->next = rcu_readers;
	rcu_readers = rd;
	pthread_mutex_unlock(&rcu_lock);
	pthread_setspecific(rcu_key, rd);
	tls_reader = rd;
	return rd;
}

/* Returns the reader, or NULL (no memory to register this thread: take the slow path). */
static inline struct rcu_reader *rcu_read_lock(void)
{
	struct rcu_reader *rd = tls_reader;

	if (unlikely(!rd) && !(rd = rcu_register()))
		return NULL;
	atomic_store_explicit(&rd->ctr, atomic_load_explicit(&rcu_epoch, memory_order_acquire),
			      memory_order_release);
	if (likely(rcu_membarrier))
		atomic_signal_fence(memory_order_seq_cst);
	else
		atomic_thread_fence(memory_order_seq_cst);
	return rd;
}

static inline void rcu_read_unlock(struct rcu_reader *rd)
{
	atomic_store_explicit(&rd->ctr, 0, memory_order_release);
}

/* Wait until every read section that began before the call has ended. */
static void rcu_synchronize(void)
{
	uint64_t e;

	pthread_once(&rcu_once, rcu_init);
	e = atomic_fetch_add(&rcu_epoch, 1) + 1;
	if (rcu_membarrier)
		syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
	else
		atomic_thread_fence(memory_order_seq_cst);
	pthread_mutex_lock(&rcu_lock);
	for (struct rcu_reader *rd = rcu_readers; rd; rd = rd->next) {
		for (;;) {
			uint64_t c = atomic_load_explicit(&rd->ctr, memory_order_acquire);

			if (c == 0 || c >= e)
				break;
			sched_yield();
		}
	}
	pthread_mutex_unlock(&rcu_lock);
	atomic_thread_fence(memory_order_seq_cst);
}

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
	void *base; /* what to free() */
};

/* Hot fields first: a lookup and a put touch the first 128 bytes only. */
struct entry {
	struct entry *_Atomic hnext;  /* hash chain */
	_Atomic uint64_t last_use;    /* LRU stamp (put) */
	struct pdma_region r;         /* what callers see */
	struct pdma_cache *cache;
	uint64_t end;                 /* r.start + r.len */
	uint64_t heap_key;            /* writer: stamp when (re)placed in the heap */
	size_t heap_idx;              /* writer: heap position; SIZE_MAX: not in it */
	bool indexed;                 /* writer: in hash, skip list and heap */
	struct entry *defer_next;
	struct retire rt;
	int levels;
	struct entry *_Atomic next[]; /* skip list, levels entries */
} __attribute__((aligned(128)));

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
	_Atomic uint64_t gen;          /* bumped when an entry leaves the index */
	enum pdma_cache_mode mode[PDMA_CACHE_NIFACE];
	bool uffd;
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
	uint64_t rng;
	struct pdma_monitor_sub *sub;
	struct pdma_cache_stats st;

	/* Any thread. */
	struct retire *_Atomic retired;
	_Atomic size_t nretired;
	struct entry *_Atomic deferred; /* last reference dropped in a notification */
	_Atomic uint64_t live;         /* 1 (the cache itself) + regions not yet unpinned */
	_Atomic uint64_t n_uncached, n_stale;
	atomic_bool closed;
};

static _Atomic uint64_t cache_ids = 1;

/* Per-thread last hit. */
static TLS struct {
	uint64_t cache_id, gen;
	struct entry *e;
} tls_last;

static inline struct entry *entry_of(struct pdma_region *r)
{
	return (struct entry *)((char *)r - offsetof(struct entry, r));
}

static inline size_t hash_start(const struct htab *t, uint64_t start)
{
	return (size_t)(((start >> 12) * 0x9E3779B97F4A7C15ull) >> t->shift);
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
 * Retirement (free after a grace period).
 */
static void retire_push(struct pdma_cache *c, struct retire *rt)
{
	struct retire *old = atomic_load_explicit(&c->retired, memory_order_relaxed);

	do
		rt->next = old;
	while (!atomic_compare_exchange_weak_explicit(&c->retired, &old, rt, memory_order_release,
						      memory_order_relaxed));
	atomic_fetch_add_explicit(&c->nretired, 1, memory_order_relaxed);
}

static void retire_reclaim(struct pdma_cache *c, bool force)
{
	struct retire *list, *n;

	if (!force && atomic_load_explicit(&c->nretired, memory_order_relaxed) < RETIRE_BATCH)
		return;
	list = atomic_exchange_explicit(&c->retired, NULL, memory_order_acquire);
	if (!list)
		return;
	rcu_synchronize();
	for (; list; list = n) {
		n = list->next;
		atomic_fetch_sub_explicit(&c->nretired, 1, memory_order_relaxed);
		free(list->base);
	}
}

static void cache_free(struct pdma_cache *c)
{
	struct htab *t = atomic_load_explicit(&c->ht, memory_order_relaxed);

	retire_reclaim(c, true);
	free(t);
	free(c->heap);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

static void cache_unref(struct pdma_cache *c)
{
	if (atomic_fetch_sub_explicit(&c->live, 1, memory_order_acq_rel) == 1)
		cache_free(c);
}

/* Unpin an entry whose count went to DEAD; free its memory after a grace period. */
static void entry_destroy(struct entry *e)
{
	struct pdma_cache *c = e->cache;

	pdma_region_fini(&e->r);
	retire_push(c, &e->rt);
	cache_unref(c);
}

/* Drop one reference; true if it was the last (the count is then DEAD). */
static bool entry_unref_last(struct entry *e)
{
	int old = atomic_load_explicit(&e->r.refcnt, memory_order_relaxed);

	for (;;) {
		if (old == 1) {
			if (atomic_compare_exchange_weak_explicit(&e->r.refcnt, &old, REF_DEAD,
								  memory_order_acq_rel,
								  memory_order_relaxed))
				return true;
		} else if (atomic_compare_exchange_weak_explicit(&e->r.refcnt, &old, old - 1,
								 memory_order_release,
								 memory_order_relaxed)) {
			return false;
		}
	}
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

/* Take a reference on an entry found in the index (inside a read section or
 * under the lock). False: it is dying. */
static inline bool entry_tryref(struct entry *e)
{
	int old = atomic_fetch_add_explicit(&e->r.refcnt, 1, memory_order_acquire);

	if (likely(old > 0))
		return true;
	atomic_fetch_sub_explicit(&e->r.refcnt, 1, memory_order_relaxed);
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
	if (a->r.start != start)
		return a->r.start < start;
	if (a->end != end)
		return a->end < end;
	return (uintptr_t)a < (uintptr_t)b;
}

static int sl_random_level(struct pdma_cache *c)
{
	int l = 1;

	c->rng ^= c->rng << 13;
	c->rng ^= c->rng >> 7;
	c->rng ^= c->rng << 17;
	for (uint64_t x = c->rng; l < SL_MAX && (x & 3) == 0; x >>= 2)
		l++;
	return l;
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
		       sl_before(n, e->r.start, e->end, e))
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

/* First entry with start >= key (reader-safe). */
static struct entry *sl_lower_bound(struct pdma_cache *c, uint64_t key)
{
	struct entry *p = NULL, *n = NULL;

	for (int i = SL_MAX - 1; i >= 0; i--) {
		while ((n = atomic_load_explicit(sl_link(c, p, i), memory_order_acquire)) &&
		       n->r.start < key)
			p = n;
	}
	return n;
}

/* ---------------------------------------------------------------------------
 * Lookup (readers and writer).
 */
static inline bool entry_matches(const struct entry *e, const struct pdma_mem_ops *ops, void *be,
				 enum pdma_hmem_iface iface, uint64_t s, uint64_t end)
{
	return e->r.start <= s && e->r.start + e->r.len >= end && e->r.ops == ops &&
	       e->r.be == be && e->r.iface == iface;
}

/* Finds and references a valid covering entry. limit bounds the skip-list
 * scan (readers), 0 for none (writer). */
static struct entry *lookup_ref(struct pdma_cache *c, const struct pdma_mem_ops *ops, void *be,
				enum pdma_hmem_iface iface, uint64_t s, uint64_t end,
				size_t limit)
{
	struct htab *t = atomic_load_explicit(&c->ht, memory_order_acquire);
	struct entry *e;
	uint64_t maxlen, lo;
	size_t n = 0;

	for (e = atomic_load_explicit(&t->b[hash_start(t, s)], memory_order_acquire); e;
	     e = atomic_load_explicit(&e->hnext, memory_order_acquire)) {
		if (e->r.start == s && entry_matches(e, ops, be, iface, s, end) &&
		    atomic_load_explicit(&e->r.valid, memory_order_relaxed) && entry_tryref(e))
			return e;
		if (limit && ++n > limit)
			return NULL;
	}
	/* Inside a region: scan the starts that could still cover end. */
	maxlen = atomic_load_explicit(&c->max_len, memory_order_acquire);
	if (maxlen < end - s)
		return NULL;
	lo = end - maxlen > end ? 0 : end - maxlen;
	n = 0;
	for (e = sl_lower_bound(c, lo); e && e->r.start <= s;
	     e = atomic_load_explicit(&e->next[0], memory_order_acquire)) {
		if (entry_matches(e, ops, be, iface, s, end) &&
		    atomic_load_explicit(&e->r.valid, memory_order_relaxed) && entry_tryref(e))
			return e;
		if (limit && ++n > limit)
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

	if (c->count < old->mask + 1)
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
			size_t b = hash_start(t, e->r.start);

			n = atomic_load_explicit(&e->hnext, memory_order_relaxed);
			atomic_store_explicit(&e->hnext,
					      atomic_load_explicit(&t->b[b], memory_order_relaxed),
					      memory_order_release);
			atomic_store_explicit(&t->b[b], e, memory_order_release);
		}
	}
	atomic_store_explicit(&c->ht, t, memory_order_release);
	retire_push(c, &old->rt);
	return 0;
}

static int index_insert(struct pdma_cache *c, struct entry *e)
{
	struct htab *t;
	size_t b;

	e->levels = sl_random_level(c);
	e->heap_key = atomic_load_explicit(&e->last_use, memory_order_relaxed);
	if (heap_push(c, e))
		return -ENOMEM;
	index_grow(c);
	t = atomic_load_explicit(&c->ht, memory_order_relaxed);
	b = hash_start(t, e->r.start);
	if (e->r.len > atomic_load_explicit(&c->max_len, memory_order_relaxed))
		atomic_store_explicit(&c->max_len, e->r.len, memory_order_release);
	sl_insert(c, e);
	atomic_store_explicit(&e->hnext, atomic_load_explicit(&t->b[b], memory_order_relaxed),
			      memory_order_relaxed);
	atomic_store_explicit(&t->b[b], e, memory_order_release);
	e->indexed = true;
	c->count++;
	c->bytes += e->r.len;
	return 0;
}

/* Unlink from every structure; the index reference is the caller's to drop. */
static void index_remove(struct pdma_cache *c, struct entry *e)
{
	struct htab *t = atomic_load_explicit(&c->ht, memory_order_relaxed);
	struct entry *_Atomic *l = &t->b[hash_start(t, e->r.start)];
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
	c->bytes -= e->r.len;
	atomic_fetch_add_explicit(&c->gen, 1, memory_order_release);
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
		if ((ops && (e->r.ops != ops || e->r.be != be)) ||
		    !atomic_compare_exchange_strong_explicit(&e->r.refcnt, &expect, REF_DEAD,
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
		gotb += e->r.len;
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
	for (e = sl_lower_bound(c, lo); e && e->r.start < end; e = n) {
		n = atomic_load_explicit(&e->next[0], memory_order_relaxed);
		if (e->r.iface != iface || e->end <= addr)
			continue;
		atomic_store_explicit(&e->r.valid, false, memory_order_release);
		index_remove(c, e);
		e->rt.next = (struct retire *)*drop;
		*drop = e;
		cnt++;
		c->st.invalidations++;
	}
	return cnt;
}

/* Drop the index references of a list built by invalidate_locked (no lock). */
static void drop_list(struct entry *v, bool defer)
{
	while (v) {
		struct entry *n = (struct entry *)v->rt.next;

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
	pthread_once(&rcu_once, rcu_init);
	c = aligned_alloc(64, sizeof(*c));
	if (!c)
		return -ENOMEM;
	memset(c, 0, sizeof(*c));
	c->attr = *attr;
	if (!c->attr.max_size)
		c->attr.max_size = default_max_size();
	c->passthrough = attr->max_count == 0;
	c->id = atomic_fetch_add(&cache_ids, 1);
	c->rng = 0x2545F4914F6CDD1Dull ^ c->id;
	atomic_init(&c->live, 1);
	pthread_mutex_init(&c->lock, NULL);
	atomic_init(&c->ht, htab_new(64));
	if (!atomic_load(&c->ht)) {
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
	/* PDMA_CACHE_MONITOR_MEMHOOKS: not built (see the report in cache.c's
	 * history); host memory stays uncached rather than unsafely cached. */
	for (int i = 0; i < PDMA_CACHE_NIFACE; i++) {
		enum pdma_cache_mode m = attr->mode[i];

		if (m == PDMA_CACHE_MODE_DEFAULT)
			m = i == PDMA_HMEM_CUDA ? PDMA_CACHE_MODE_TAG_CHECK : PDMA_CACHE_MODE_TRUST;
		if (i == PDMA_HMEM_SYSTEM && !c->uffd)
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
		free(atomic_load(&c->ht));
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
	drop_list(drop, false);
	deferred_run(c);
	if (c->uffd)
		pdma_uffd_monitor_stop();
	cache_unref(c);
}

void pdma_cache_region_revoked(struct pdma_region *r)
{
	struct entry *e = entry_of(r), *drop = NULL;
	struct pdma_cache *c = e->cache;

	pthread_mutex_lock(&c->lock);
	if (e->indexed) {
		index_remove(c, e);
		c->st.invalidations++;
		drop = e;
		e->rt.next = NULL;
	}
	pthread_mutex_unlock(&c->lock);
	/* An unpin here would wait for this very callback in the sim backend. */
	drop_list(drop, true);
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
	retire_reclaim(c, true);
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
static bool hit_fresh(struct pdma_cache *c, struct entry *e, const struct pdma_mem_alloc *alloc,
		      uint64_t addr, size_t len)
{
	uint64_t id = e->r.buffer_id;

	if (alloc && alloc->buffer_id && id && alloc->buffer_id != id)
		return false;
	if (c->mode[e->r.iface] == PDMA_CACHE_MODE_TAG_CHECK &&
	    !(alloc && alloc->buffer_id)) {
		struct pdma_mem_alloc a;

		if (e->r.ops->query(e->r.be, addr, len, &a) || a.buffer_id != id)
			return false;
	}
	return true;
}

/* A hit that turned out stale: make sure nobody gets it again. */
static void reject_stale(struct pdma_cache *c, struct entry *e)
{
	struct entry *drop = NULL;

	atomic_fetch_add_explicit(&c->n_stale, 1, memory_order_relaxed);
	pthread_mutex_lock(&c->lock);
	if (e->indexed) {
		atomic_store_explicit(&e->r.valid, false, memory_order_release);
		index_remove(c, e);
		c->st.invalidations++;
		drop = e;
		e->rt.next = NULL;
	}
	pthread_mutex_unlock(&c->lock);
	drop_list(drop, false);
	entry_unref(e); /* the caller's lookup reference */
}

static inline void uffd_wait(void)
{
	while (atomic_load_explicit(&pdma_uffd_seq, memory_order_acquire) & 1)
		sched_yield();
}

static int get_slow(struct pdma_cache *c, const struct pdma_mem_ops *ops, void *be,
		    enum pdma_hmem_iface iface, uint64_t addr, size_t len, uint64_t s,
		    uint64_t end, const struct pdma_mem_alloc *alloc, struct pdma_region **region)
{
	enum pdma_cache_mode mode = c->mode[iface];
	uint64_t id = alloc ? alloc->buffer_id : 0;
	struct entry *e, *victims = NULL;
	bool cacheable, watched = true, indexed = false;
	uint64_t seq;
	size_t sz;
	int ret;

	deferred_run(c);
	retire_reclaim(c, false);
	for (;;) {
		pthread_mutex_lock(&c->lock);
		e = lookup_ref(c, ops, be, iface, s, end, 0);
		if (!e)
			break;
		c->st.slow_hits++;
		pthread_mutex_unlock(&c->lock);
		if (hit_fresh(c, e, alloc, addr, len)) {
			*region = &e->r;
			return 0;
		}
		reject_stale(c, e);
	}
	c->st.misses++;
	seq = c->inval_seq;
	pthread_mutex_unlock(&c->lock);

	cacheable = mode == PDMA_CACHE_MODE_TRUST || (mode == PDMA_CACHE_MODE_TAG_CHECK && id);
	sz = sizeof(struct entry) + SL_MAX * sizeof(struct entry *);
	e = aligned_alloc(128, (sz + 127) & ~(size_t)127);
	if (!e)
		return -ENOMEM;
	memset(e, 0, sizeof(*e));
	e->cache = c;
	e->end = end;
	e->heap_idx = SIZE_MAX;
	e->rt.base = e;
	e->r.owner = c; /* before the pin: a revocation may come at once */
	atomic_init(&e->last_use, lru_stamp());
	atomic_fetch_add(&c->live, 1);

	for (;;) {
		size_t freed;

		ret = pdma_region_init(&e->r, ops, be, iface, s, (size_t)(end - s), id);
		if (ret != -ENOMEM)
			break;
		/* BAR or lock limit: unpin LRU regions of this backend, retry. */
		pthread_mutex_lock(&c->lock);
		freed = evict_lru(c, ops, be, 1, (size_t)(end - s), &victims);
		pthread_mutex_unlock(&c->lock);
		if (!freed)
			break;
		destroy_victims(victims);
		victims = NULL;
		pthread_mutex_lock(&c->lock);
		c->st.enomem_retries++;
		pthread_mutex_unlock(&c->lock);
	}
	if (ret) {
		free(e);
		cache_unref(c);
		return ret;
	}
	if (cacheable && iface == PDMA_HMEM_SYSTEM && c->uffd)
		watched = pdma_uffd_monitor_watch(s, (size_t)(end - s)) == 0;

	pthread_mutex_lock(&c->lock);
	if (!atomic_load_explicit(&e->r.valid, memory_order_acquire)) {
		/* Revoked before it was indexed: the memory is gone. */
		pthread_mutex_unlock(&c->lock);
		entry_unref(e);
		return -EFAULT;
	}
	if (cacheable && watched && e->r.len <= c->attr.max_size &&
	    !inval_since(c, seq, iface, s, end)) {
		if (c->count + 1 > c->attr.max_count || c->bytes + e->r.len > c->attr.max_size) {
			size_t nc = c->count + 1 > c->attr.max_count ?
					    c->count + 1 - c->attr.max_count : 0;
			size_t nb = c->bytes + e->r.len > c->attr.max_size ?
					    c->bytes + e->r.len - c->attr.max_size : 0;

			evict_lru(c, NULL, NULL, nc, nb, &victims);
		}
		if (c->count + 1 <= c->attr.max_count &&
		    c->bytes + e->r.len <= c->attr.max_size) {
			atomic_fetch_add_explicit(&e->r.refcnt, 1, memory_order_relaxed);
			if (index_insert(c, e))
				atomic_fetch_sub_explicit(&e->r.refcnt, 1, memory_order_relaxed);
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

int pdma_cache_get(struct pdma_cache *c, const struct pdma_mem_ops *ops, void *be,
		   enum pdma_hmem_iface iface, uint64_t addr, size_t len,
		   const struct pdma_mem_alloc *alloc, struct pdma_region **region)
{
	uint64_t pm = ops->page_size - 1, s, end;
	struct rcu_reader *rd;
	struct entry *e = NULL;

	if (!len || addr + len < addr || addr + len + pm < addr + len)
		return -EINVAL;
	if ((unsigned)iface >= PDMA_CACHE_NIFACE || c->mode[iface] == PDMA_CACHE_MODE_OFF) {
		uint64_t ps;
		size_t pl;

		pdma_page_round(ops->page_size, addr, len, &ps, &pl);
		return pdma_region_create(ops, be, iface, ps, pl, alloc ? alloc->buffer_id : 0,
					  region);
	}
	s = addr & ~pm;
	end = (addr + len + pm) & ~pm;
	if (iface == PDMA_HMEM_SYSTEM && c->uffd)
		uffd_wait();

	rd = rcu_read_lock();
	if (unlikely(!rd))
		return get_slow(c, ops, be, iface, addr, len, s, end, alloc, region);
	if (tls_last.cache_id == c->id &&
	    tls_last.gen == atomic_load_explicit(&c->gen, memory_order_acquire) &&
	    entry_matches(tls_last.e, ops, be, iface, s, end) &&
	    atomic_load_explicit(&tls_last.e->r.valid, memory_order_relaxed) &&
	    entry_tryref(tls_last.e)) {
		e = tls_last.e;
	} else {
		uint64_t gen = atomic_load_explicit(&c->gen, memory_order_acquire);

		e = lookup_ref(c, ops, be, iface, s, end, SCAN_LIMIT);
		if (e) {
			tls_last.cache_id = c->id;
			tls_last.gen = gen;
			tls_last.e = e;
		}
	}
	rcu_read_unlock(rd);
	if (likely(e)) {
		/* Revoked after the lookup: it is leaving the index. */
		if (unlikely(!atomic_load_explicit(&e->r.valid, memory_order_acquire))) {
			entry_unref(e);
		} else if (likely(hit_fresh(c, e, alloc, addr, len))) {
			*region = &e->r;
			return 0;
		} else {
			reject_stale(c, e);
		}
	}
	return get_slow(c, ops, be, iface, addr, len, s, end, alloc, region);
}

void pdma_cache_put(struct pdma_cache *c, struct pdma_region *r)
{
	struct entry *e;

	(void)c;
	if (!r->owner) {
		if (atomic_fetch_sub(&r->refcnt, 1) == 1)
			pdma_region_destroy(r);
		return;
	}
	e = entry_of(r);
	atomic_store_explicit(&e->last_use, lru_stamp(), memory_order_relaxed);
	entry_unref(e);
}
