// SPDX-License-Identifier: MIT
/*
 * Per-thread reference counts: how N threads hitting the same regions get N
 * times the hits of one.
 *
 * Why: a hit used to add to its entry's count and a put to subtract and to
 * store the LRU stamp, all on the entry's first line. When threads hit a
 * common set of regions, the line of a region another core hit last is in
 * that core's cache, modified: each hit took it over (one cache line passed
 * between two cores costs 78-93 ns on the H100 machine's host, 2-3 whole
 * single-thread hits). 16 threads got 6.8x the hits of one.
 *
 * How (the scheme of Linux's percpu_ref, with threads for CPUs):
 *  - A thread gets one of PDMA_CACHE_SHARDS shards at its first hit and keeps
 *    it until it exits. Each slab chunk has, for each shard, an array of
 *    slots, one per entry: {count, stamp}. Only the shard's thread writes
 *    them, with plain stores.
 *  - An entry becomes fast at its first hit by a thread with a shard (the
 *    miss that indexed it and its put count on the entry: cache.c, promote).
 *    While it is fast (indexed, and no writer is taking it apart) a hit by a
 *    thread with a shard adds 1 to its slot and the put subtracts 1 and
 *    stores its stamp there. The entry's own count then holds FAST_BIAS on
 *    top of the index's reference and any references taken outside the
 *    shards, so that nothing dropped on it can reach zero. The true count is
 *    the entry's count - FAST_BIAS + the sum of its slots (a slot may be
 *    negative: a reference is often dropped by another thread than took it).
 *  - Before the writer drops the index's reference (invalidation, eviction,
 *    close) it folds the entry: clears fast, fences every thread with
 *    membarrier(2) and waits until none is inside shard_count (busy), then
 *    adds the sum of the slots less FAST_BIAS to the count and zeroes the
 *    slots. From then on every reference is counted on the entry, and the
 *    count is exact: the last put unpins as before. A thread's half is a store
 *    of busy, a compiler barrier and a load of fast (cache_int.h,
 *    shard_count); it is Dekker's exclusion with the fence moved to the rare
 *    side, as the domain lock's bias (lib/mr/lock.h).
 *  - A fold costs a membarrier() (microseconds) where another thread has a
 *    shard; none where the caller is the only one. Eviction folds up to
 *    FOLD_BATCH entries at the heap's top at once, so a full cache under
 *    misses pays one fence per FOLD_BATCH evictions; an entry folded but
 *    not evicted (in use) counts on its own line until it is used again.
 *  - The LRU stamp of a fast entry is the newest of its slots' and its own
 *    (pdma_cache_last_use): eviction reads one slot per shard ever given.
 *  - A thread that exits gives its shard back; the next thread to take it
 *    goes on from the counts left in its slots (only the sum means anything).
 *  - Threads beyond PDMA_CACHE_SHARDS, and processes without membarrier's
 *    private expedited command (a seccomp filter, kernels before 4.14),
 *    count on the entry as before.
 *  - fork(): the child has one thread; the others' shards are given back
 *    and their busy flags cleared (pdma_cache_shard_fork_child).
 * Memory: SHARD_STRIDE bytes a shard a chunk of address space (5.5 MiB a
 * 2 MiB chunk for 64 shards), backed only where a thread wrote: 16 bytes an
 * entry a thread that hit it.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>

#include "cache/cache_int.h"
#include "mr/lock.h"
#include "mr/membarrier.h"

/* Where no shard was free, try again after this many counts on the entry. */
#define ATTACH_RETRY 4096

static struct pdma_cache_thr thr[PDMA_CACHE_SHARDS];
/* Shards held by a live thread. */
static _Atomic uint64_t attached;
/* Shards ever given: their slots may hold counts (never cleared). */
static _Atomic uint64_t touched;
static pthread_key_t thr_key;
static int thr_key_ok; /* 1: key made and membarrier usable; -1: never attach */
static pthread_once_t thr_once = PTHREAD_ONCE_INIT;

TLS struct pdma_cache_thr *pdma_cache_self;
static TLS unsigned int attach_wait;

/* Thread exit: the shard goes back (its slots keep their counts). */
static void thr_exit(void *p)
{
	struct pdma_cache_thr *t = p;

	pdma_cache_self = NULL;
	atomic_fetch_and_explicit(&attached, ~(UINT64_C(1) << t->idx), memory_order_release);
}

static void thr_setup(void)
{
	thr_key_ok = pdma_membarrier_ready() && !pthread_key_create(&thr_key, thr_exit) ? 1 : -1;
	for (unsigned int i = 0; i < PDMA_CACHE_SHARDS; i++) {
		thr[i].idx = i;
		thr[i].off = i * SHARD_STRIDE;
	}
}

/* At a cache's open: the membarrier registration's stall belongs there. */
int pdma_cache_shard_init(void)
{
	pthread_once(&thr_once, thr_setup);
	return thr_key_ok > 0 ? 0 : -ENOSYS;
}

/* The calling thread's first count: take a free shard, or count on the
 * entries (NULL) and ask again ATTACH_RETRY counts later. */
struct pdma_cache_thr *pdma_cache_thr_attach(void)
{
	uint64_t m;
	unsigned int i;

	if (attach_wait) {
		attach_wait--;
		return NULL;
	}
	attach_wait = ATTACH_RETRY;
	pthread_once(&thr_once, thr_setup);
	if (thr_key_ok < 0)
		return NULL;
	m = atomic_load_explicit(&attached, memory_order_relaxed);
	do {
		if (!~m)
			return NULL;
		i = (unsigned int)__builtin_ctzll(~m);
	} while (!atomic_compare_exchange_weak_explicit(&attached, &m, m | (UINT64_C(1) << i),
							memory_order_seq_cst,
							memory_order_relaxed));
	/* seq_cst: a fold that did not see this bit cleared fast first, and the
	 * next load of fast (after this) sees that. */
	atomic_fetch_or_explicit(&touched, UINT64_C(1) << i, memory_order_relaxed);
	if (pthread_setspecific(thr_key, &thr[i])) {
		atomic_fetch_and_explicit(&attached, ~(UINT64_C(1) << i), memory_order_release);
		return NULL;
	}
	attach_wait = 0;
	pdma_cache_self = &thr[i];
	return &thr[i];
}

/* Writer side, under the cache lock: make e count in the shards. */
void pdma_cache_fast_on(struct entry *e)
{
	if (thr_key_ok <= 0 || atomic_load_explicit(&e->fast, memory_order_relaxed))
		return;
	atomic_fetch_add_explicit(&e->refcnt, FAST_BIAS, memory_order_relaxed);
	atomic_store_explicit(&e->fast, true, memory_order_release);
}

/* Wait until no other thread is inside shard_count with a fast it read
 * before the caller cleared it. */
void pdma_cache_fold_wait(void)
{
	struct pdma_cache_thr *self = pdma_cache_self;
	uint64_t others;

	/* The fence pairs with the attach's seq_cst exchange: a thread this
	 * does not see as attached reads fast after this point. The acquire
	 * pairs with thr_exit: what a thread gone counted is seen. */
	atomic_thread_fence(memory_order_seq_cst);
	others = atomic_load_explicit(&attached, memory_order_acquire);
	if (self)
		others &= ~(UINT64_C(1) << self->idx);
	if (!others)
		return;
	pdma_membarrier_fence();
	for (; others; others &= others - 1) {
		struct pdma_cache_thr *t = &thr[__builtin_ctzll(others)];

		for (unsigned int spins = 0; atomic_load_explicit(&t->busy, memory_order_acquire);
		     spins++)
			pdma_spin_backoff(spins); /* preempted inside: let it finish */
	}
	atomic_thread_fence(memory_order_acquire);
}

/* Writer side, under the cache lock. A fold is start for each entry, one
 * wait, then finish for each: one fence for them all. */
bool pdma_cache_fold_start(struct entry *e)
{
	e->folding = atomic_load_explicit(&e->fast, memory_order_relaxed);
	if (e->folding)
		atomic_store_explicit(&e->fast, false, memory_order_relaxed);
	return e->folding;
}

/* After the wait: e's slots on its own count, which is exact from now on. */
void pdma_cache_fold_finish(struct entry *e)
{
	uint64_t lu = RLX(e->last_use);
	int64_t sum = 0;

	if (!e->folding)
		return;
	e->folding = false;
	for (uint64_t m = atomic_load_explicit(&touched, memory_order_relaxed); m; m &= m - 1) {
		struct shard_slot *s = shard_slot(e, &thr[__builtin_ctzll(m)]);
		uint64_t st = RLX(s->stamp);

		sum += RLX(s->cnt);
		if (st > lu)
			lu = st;
		atomic_store_explicit(&s->cnt, 0, memory_order_relaxed);
		atomic_store_explicit(&s->stamp, 0, memory_order_relaxed);
	}
	atomic_store_explicit(&e->last_use, lu, memory_order_relaxed);
	atomic_fetch_add_explicit(&e->refcnt, (int32_t)(sum - FAST_BIAS), memory_order_acq_rel);
}

void pdma_cache_fold(struct entry *e)
{
	if (pdma_cache_fold_start(e)) {
		pdma_cache_fold_wait();
		pdma_cache_fold_finish(e);
	}
}

void pdma_cache_fold_list(struct entry *list)
{
	bool fold = false;

	for (struct entry *e = list; e; e = (struct entry *)e->rt.next)
		fold |= pdma_cache_fold_start(e);
	if (!fold)
		return;
	pdma_cache_fold_wait();
	for (struct entry *e = list; e; e = (struct entry *)e->rt.next)
		pdma_cache_fold_finish(e);
}

uint64_t pdma_cache_last_use(const struct entry *e)
{
	uint64_t lu = RLX(e->last_use);

	if (!atomic_load_explicit(&e->fast, memory_order_relaxed))
		return lu;
	for (uint64_t m = atomic_load_explicit(&touched, memory_order_relaxed); m; m &= m - 1) {
		uint64_t st = RLX(shard_slot(e, &thr[__builtin_ctzll(m)])->stamp);

		if (st > lu)
			lu = st;
	}
	return lu;
}

/* In a forked child only the forking thread runs: nobody else is inside
 * shard_count, and the other shards are free again. */
void pdma_cache_shard_fork_child(void)
{
	struct pdma_cache_thr *self = pdma_cache_self;

	for (unsigned int i = 0; i < PDMA_CACHE_SHARDS; i++)
		if (&thr[i] != self)
			atomic_store_explicit(&thr[i].busy, 0, memory_order_relaxed);
	atomic_store_explicit(&attached, self ? UINT64_C(1) << self->idx : 0,
			      memory_order_relaxed);
}
