/* SPDX-License-Identifier: MIT */
/*
 * Inside the registration cache (lib/cache/): the index entry, the cache
 * object and the functions its files share. The design (policy, concurrency,
 * reference counts) is described at the top of cache.c; each structure has
 * its file: slab.c (entry memory), index.c (hash tables, skip list, lookup),
 * lru.c (LRU stamps, heap, eviction), shard.c (per-thread reference counts),
 * env.c (limits from the environment).
 * Nothing here is seen outside lib/cache/ (cache.h is the interface).
 */
#ifndef PDMA_LIB_CACHE_CACHE_INT_H
#define PDMA_LIB_CACHE_CACHE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/cache.h"
#include "mr/fork.h"

#define TLS __thread __attribute__((tls_model("initial-exec")))
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define RLX(x) atomic_load_explicit(&(x), memory_order_relaxed)

#define REF_DEAD (INT32_MIN / 2)
/* Skip-list levels, p = 1/4: 4^9 = 262144 regions before the top level grows
 * longer than a few entries (beyond, a search takes n / 4^8 steps there).
 * Not more: every entry reserves SL_MAX links, and with 9 an entry fills six
 * cache lines instead of seven, which is a seventh less memory to fault in
 * and zero while a cache fills (the larger part of a miss's cost measured
 * at 100k regions). */
#define SL_MAX 9
#define SLAB_CHUNK ((size_t)2 << 20)
#define INVAL_RING 64
#define SCAN_LIMIT 256
#define HT_PRESIZE_MAX ((size_t)1 << 18) /* buckets: 2 MiB of table */

/* ---------------------------------------------------------------------------
 * LRU stamps: per-thread monotonic, loosely synchronised through a global
 * (defined in lru.c; inline here because every put takes one). A thread reads
 * and writes the global only on its first put and then once every 64 puts:
 * a load of it on every put missed in the cache whenever another thread had
 * just published, which with many threads was most puts (the line moves
 * between cores). Exact order within a thread; between threads a stamp lags
 * the others' by at most what they put during 64 of its own puts.
 */
struct pdma_cache_lru_line {
	_Atomic uint64_t stamp;
	char pad[64 - sizeof(uint64_t)]; /* the line to itself: threads write it */
} __attribute__((aligned(64)));
extern struct pdma_cache_lru_line pdma_cache_lru_global;
extern TLS uint64_t pdma_cache_lru_local;
extern TLS unsigned pdma_cache_lru_count;

static inline uint64_t lru_stamp(void)
{
	uint64_t t = pdma_cache_lru_local + 1;

	if (unlikely(pdma_cache_lru_count-- == 0)) {
		uint64_t g = atomic_load_explicit(&pdma_cache_lru_global.stamp, memory_order_relaxed);

		pdma_cache_lru_count = 63;
		if (g >= t)
			t = g + 1; /* others ran ahead: catch up */
		else
			atomic_store_explicit(&pdma_cache_lru_global.stamp, t, memory_order_relaxed);
	}
	pdma_cache_lru_local = t;
	return t;
}

/* ---------------------------------------------------------------------------
 * Per-thread reference counts (shard.c explains them).
 */
#define PDMA_CACHE_SHARDS 64
/* Added to an entry's count while its references are counted in shards, so
 * that a reference dropped on the entry's own count (a thread without a shard,
 * a path that does not look) never takes it to zero while shards may hold
 * more. Taken off when the shards are folded back. */
#define FAST_BIAS (1 << 28)

/* One entry's count and LRU stamp in one thread's shard: written by that
 * thread alone, read by the writer when it folds the shards back. */
struct shard_slot {
	_Atomic int64_t cnt;    /* references taken minus dropped through this shard */
	_Atomic uint64_t stamp; /* the stamp of the last put through it */
};

/* A thread with a shard. busy is its half of the exclusion with a fold. */
struct pdma_cache_thr {
	atomic_int busy;        /* 1 while it counts in its shard (stored by it alone) */
	unsigned int idx;       /* its shard */
	size_t off;             /* idx * SHARD_STRIDE: where its slots start in a chunk's */
} __attribute__((aligned(64)));

extern TLS struct pdma_cache_thr *pdma_cache_self;
struct pdma_cache_thr *pdma_cache_thr_attach(void);

/* ---------------------------------------------------------------------------
 * Index entries and structures.
 */
struct retire {
	struct retire *next;
	void *base; /* what to free(); NULL: an entry, back to the slab */
};

/*
 * One cache line holds everything a hit (get + put) reads: the key, the
 * lookup-validity flag and the counting mode. A hit writes none of it (its
 * count and LRU stamp go to the thread's shard slot), so that the line stays
 * shared by every core that hits it. The region handed to callers follows
 * it; get returns &e->r and put finds e by subtraction, so neither touches
 * the region's own lines.
 */
struct entry {
	struct entry *_Atomic hnext;  /* hash chain */
	_Atomic uint64_t start, end;  /* page-rounded range */
	const struct pdma_mem_ops *_Atomic ops;
	void *_Atomic be;
	_Atomic uint64_t buffer_id;
	_Atomic int32_t refcnt;       /* see "Reference counts" in cache.c */
	_Atomic uint8_t iface;
	atomic_bool valid;            /* false: never returned by a lookup again */
	_Atomic uint8_t verify;       /* check the buffer ID on every hit (TAG_CHECK,
				       * or an unwatched region under TRUST_WATCHED) */
	atomic_bool fast;             /* references counted in the threads' shards
				       * (shard.c); changed under the cache lock */
	_Atomic uint64_t last_use;    /* LRU stamp of a put outside the shards */
	/* --- cold --- */
	struct pdma_region r;         /* what callers see (its refcnt is unused) */
	struct pdma_cache *cache;
	uint64_t heap_key;            /* writer: stamp when (re)placed in the heap */
	size_t heap_idx;              /* writer: heap position; SIZE_MAX: not in it */
	bool indexed;                 /* writer: in the tables, skip list and heap */
	bool folding;                 /* writer: fast until this fold (shard.c) */
	int levels;                   /* here, in indexed's padding: see SL_MAX */
	struct entry *defer_next;
	struct { struct retire *next; } rt; /* victims, drop and slab-free lists */
	struct entry *_Atomic snext;  /* span chain (index.c): read only by a lookup
				       * inside a region, after the hot line's miss */
	struct entry *_Atomic next[]; /* skip list, levels entries */
} __attribute__((aligned(64)));

_Static_assert(offsetof(struct entry, r) == 64, "hot fields fill one cache line");

/* An entry with its skip-list links, whole cache lines; the slab's unit. The
 * links start at offsetof(next), before sizeof's tail padding. */
#define ENTRY_SIZE ((offsetof(struct entry, next) + SL_MAX * sizeof(struct entry *) + 63) & \
		    ~(size_t)63)
/* One shard's slots for the entries of one slab chunk, whole pages. */
#define SHARD_STRIDE (((SLAB_CHUNK / ENTRY_SIZE) * sizeof(struct shard_slot) + 4095) & \
		      ~(size_t)4095)
_Static_assert(offsetof(struct entry, next) + SL_MAX * sizeof(void *) <= 6 * 64,
	       "an entry and its links fit six cache lines (SL_MAX)");

/* Two chain heads a bucket: b[0, mask] by start page (hash_start), then
 * b[mask + 1, 2 mask + 1] by span (index.c, hash_span). */
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
	_Atomic uint64_t span_classes; /* bit m: a region of span class m was ever
					* indexed (index.c) */
	enum pdma_cache_mode mode[PDMA_CACHE_NIFACE];
	bool uffd;
	bool memhooks;
	struct pdma_kdev *kdev;        /* kernel monitor: its source, else NULL */
	bool passthrough;              /* max_count == 0 */
	struct entry *_Atomic head[SL_MAX] __attribute__((aligned(64)));

	/* Writer side. */
	pthread_mutex_t lock __attribute__((aligned(64)));
	struct pdma_cache_attr attr;
	size_t count, bytes;
	struct entry **heap;
	size_t heap_len, heap_cap;
	struct entry *sl_finger[SL_MAX]; /* index.c, sl_find_preds */
	uint64_t inval_seq;
	struct inval_rec inval[INVAL_RING];
	struct pdma_monitor_sub *sub;
	struct pdma_cache_stats st;

	/* Entry slab: 2 MiB chunks (huge pages where the kernel gives them), so
	 * that the hot lines of many regions share few TLB entries. */
	pthread_mutex_t slab_lock;
	struct entry *slab_free;
	uintptr_t slab_next, slab_end; /* the newest chunk's entries never handed out */
	void *chunks;                  /* linked through their first word */

	struct retire *old_tables;     /* outgrown hash tables, freed at the end */

	/* Any thread. */
	struct entry *_Atomic deferred; /* last reference dropped in a notification */
	_Atomic uint64_t live;         /* 1 (the cache itself) + regions not yet unpinned */
	_Atomic uint64_t n_uncached, n_stale;
	atomic_bool closed;

	struct pdma_fork_node fork_node; /* fork.c: on the list of open caches */
};


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

/* slab.c: entry memory (type-stable: unmapped only when the cache is freed). */
struct entry *pdma_cache_slab_alloc(struct pdma_cache *c);
void pdma_cache_slab_free(struct pdma_cache *c, struct entry *e);
/* slab.c: zeroed mapped memory for writer-side arrays (never malloc: see
 * slab.c); array_grow doubles an array of sz-byte elements, *cap counts
 * elements. */
void *pdma_cache_zalloc(size_t len);
void pdma_cache_zfree(void *p, size_t len);
int pdma_cache_array_grow(void **arr, size_t *cap, size_t min, size_t sz);
size_t pdma_cache_htab_bytes(const struct htab *t);
void pdma_cache_slab_destroy(struct pdma_cache *c);

/* index.c: hash tables on the start page and on the span, skip list by
 * start, lookup. */
struct htab *pdma_cache_htab_new(size_t nb);
/* limit: how many entries a lock-free reader may step over (0: writer, under
 * c->lock, unbounded). */
struct entry *pdma_cache_lookup_ref(struct pdma_cache *c, const struct pdma_mem_ops *ops,
				    void *be, enum pdma_hmem_iface iface, uint64_t s, uint64_t end,
				    size_t limit);
struct entry *pdma_cache_sl_lower_bound(struct pdma_cache *c, uint64_t key, size_t *budget);
int pdma_cache_index_grow(struct pdma_cache *c);
int pdma_cache_index_insert(struct pdma_cache *c, struct entry *e);
void pdma_cache_index_remove(struct pdma_cache *c, struct entry *e);
int pdma_cache_random_level(void);

/* lru.c: the heap of indexed entries by LRU stamp, and eviction. */
int pdma_cache_heap_push(struct pdma_cache *c, struct entry *e);
void pdma_cache_heap_remove(struct pdma_cache *c, struct entry *e);
size_t pdma_cache_evict_lru(struct pdma_cache *c, const struct pdma_mem_ops *ops, const void *be,
			    size_t need_count, size_t need_bytes, struct entry **victims);

/* env.c */
size_t pdma_cache_default_max_size(void);

/* cache.c: references and retirement. */
void pdma_cache_cache_unref(struct pdma_cache *c);
/* fork.c: caches the fork handlers must reach, from open to close. */
void pdma_cache_fork_track(struct pdma_cache *c);
void pdma_cache_fork_untrack(struct pdma_cache *c);
void pdma_cache_entry_destroy(struct entry *e);
bool pdma_cache_entry_unref_last(struct entry *e);
void pdma_cache_entry_unref(struct entry *e);
void pdma_cache_entry_unref_deferred(struct entry *e);

/* shard.c: the writer's side (under c->lock). fold: e's references back on
 * its own count, which is then exact (no-op where e is not fast); fold_list:
 * the same for a list linked through rt.next, with one fence for them all
 * (fold_start each, true where it was fast; fold_wait once; fold_finish
 * each: the steps, for other collections). fast_on: count them in the
 * shards again; last_use: e's newest LRU stamp. */
void pdma_cache_fold(struct entry *e);
void pdma_cache_fold_list(struct entry *list);
bool pdma_cache_fold_start(struct entry *e);
void pdma_cache_fold_wait(void);
void pdma_cache_fold_finish(struct entry *e);
void pdma_cache_fast_on(struct entry *e);
uint64_t pdma_cache_last_use(const struct entry *e);
void pdma_cache_shard_fork_child(void);
int pdma_cache_shard_init(void);

/* e's slot in t's shard: the slab chunk's slots follow the chunk (slab.c). */
static inline struct shard_slot *shard_slot(const struct entry *e, const struct pdma_cache_thr *t)
{
	uintptr_t a = (uintptr_t)e, chunk = a & ~(uintptr_t)(SLAB_CHUNK - 1);

	return (struct shard_slot *)(chunk + SLAB_CHUNK + t->off) + (a - chunk) / ENTRY_SIZE;
}

/*
 * Count d references (and, with a stamp, a put's LRU stamp) in the calling
 * thread's shard, if e counts there now: plain stores to a line of the
 * thread's own. False: not counted; the caller uses e's own count.
 * busy is set before fast is read, and a fold clears fast, fences every
 * thread (membarrier) and then waits for busy: either this sees fast clear,
 * or the fold sees busy and waits until the slot holds what was added.
 */
static inline bool shard_count(struct entry *e, int64_t d, uint64_t stamp)
{
	struct pdma_cache_thr *t = pdma_cache_self;
	bool ok;

	if (unlikely(!t) && !(t = pdma_cache_thr_attach()))
		return false;
	atomic_store_explicit(&t->busy, 1, memory_order_relaxed);
	/* The CPU's half of the fence is the fold's membarrier(). */
	atomic_signal_fence(memory_order_seq_cst);
	ok = atomic_load_explicit(&e->fast, memory_order_relaxed);
	if (likely(ok)) {
		struct shard_slot *s = shard_slot(e, t);

		atomic_store_explicit(&s->cnt, RLX(s->cnt) + d, memory_order_relaxed);
		if (d < 0 && stamp)
			atomic_store_explicit(&s->stamp, stamp, memory_order_relaxed);
	}
	atomic_store_explicit(&t->busy, 0, memory_order_release);
	return ok;
}

/* cache.c: entry_tryref's and try_hit's rare halves, out of line so that the
 * hit path around them stays inline. tryref_slow: the reference on the
 * entry's own count (false: dying or dead, the increment undone); put: drop
 * a reference a lookup took. */
bool pdma_cache_entry_tryref_slow(struct entry *e);
void pdma_cache_entry_put(struct entry *e);

/* Take a reference on an entry found through the index. False: it is dying
 * or dead. The caller then re-checks the key: the slot may have been
 * recycled for another region. */
static inline bool entry_tryref(struct entry *e)
{
	return likely(shard_count(e, 1, 0)) || pdma_cache_entry_tryref_slow(e);
}

/* ---------------------------------------------------------------------------
 * Lookup (readers and writer).
 */
static inline bool entry_matches(struct entry *e, const struct pdma_mem_ops *ops, const void *be,
				 enum pdma_hmem_iface iface, uint64_t s, uint64_t end)
{
	return RLX(e->start) <= s && RLX(e->end) >= end && RLX(e->ops) == ops &&
	       RLX(e->be) == be && RLX(e->iface) == (uint8_t)iface;
}

/* Reference e if it is a valid region covering the request. Inline in every
 * lookup: the hit is a handful of loads and the shard's count. */
static inline __attribute__((always_inline)) bool
try_hit(struct entry *e, const struct pdma_mem_ops *ops, void *be, enum pdma_hmem_iface iface,
	uint64_t s, uint64_t end)
{
	if (!entry_matches(e, ops, be, iface, s, end) || !RLX(e->valid) || !entry_tryref(e))
		return false;
	/* Referenced: the slot can no longer be recycled; is it still ours? */
	if (likely(entry_matches(e, ops, be, iface, s, end) &&
		   atomic_load_explicit(&e->valid, memory_order_acquire)))
		return true;
	pdma_cache_entry_put(e);
	return false;
}

#endif /* PDMA_LIB_CACHE_CACHE_INT_H */
