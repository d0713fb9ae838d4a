// SPDX-License-Identifier: MIT
/*
 * The registration cache's per-thread reference counts (lib/cache/shard.c),
 * run under TSan by tests/run-all:
 *  - a miss and its put count on the entry; the first hit moves the entry
 *    to the shards;
 *  - a hit and its put write the thread's shard slot, not the entry's line
 *    (its count and stamp stay as the index left them);
 *  - a reference taken in one thread and dropped in another, and one whose
 *    thread exited, still keep the region pinned until it is dropped, and
 *    unpin it exactly once after an invalidation;
 *  - a thread that takes a shard given back goes on from its counts;
 *  - more threads than shards: the rest count on the entries;
 *  - folds (invalidation, eviction, flush) while threads hit the regions:
 *    no stale hit, every pin released once;
 *  - a forked child whose parent had a thread inside a hit does not wait
 *    for it.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "cache/cache.h"
#include "cache/cache_int.h"

#define PG 4096ull
#define BASE 0x7d0000000000ull
#define NREG 32

static _Atomic uint64_t pins, unpins;
static _Atomic uint64_t pinned[NREG]; /* per region: pins - unpins */

static inline uint64_t reg_addr(int k)
{
	return BASE + (uint64_t)k * 4 * PG; /* apart: one region each */
}

static int t_pin(void *be, uint64_t addr, size_t len, pdma_mem_revoke_fn revoke, void *arg,
		 void **pin)
{
	(void)be, (void)len, (void)revoke, (void)arg;
	atomic_fetch_add(&pins, 1);
	atomic_fetch_add(&pinned[(addr - BASE) / (4 * PG)], 1);
	*pin = (void *)(uintptr_t)addr;
	return 0;
}

static void t_unpin(void *be, void *pin)
{
	(void)be;
	atomic_fetch_add(&unpins, 1);
	atomic_fetch_sub(&pinned[((uint64_t)(uintptr_t)pin - BASE) / (4 * PG)], 1);
}

static const struct pdma_mem_ops t_ops = {
	.name = "shard-test", .page_size = PG, .pin = t_pin, .unpin = t_unpin,
};

static struct pdma_cache *open_cache(size_t max_count)
{
	struct pdma_cache_attr a;
	struct pdma_cache *c;

	memset(&a, 0, sizeof(a));
	a.max_count = max_count;
	a.max_size = (size_t)1 << 40;
	a.monitor = PDMA_CACHE_MONITOR_DISABLED;
	a.mode[PDMA_HMEM_SIM] = PDMA_CACHE_MODE_TRUST;
	assert_int_equal(pdma_cache_open(&a, &c), 0);
	return c;
}

static struct pdma_region *get(struct pdma_cache *c, int k)
{
	struct pdma_region *r = NULL;

	if (pdma_cache_get(c, &t_ops, NULL, PDMA_HMEM_SIM, reg_addr(k), PG, NULL, &r))
		return NULL;
	return r;
}

/* Close, then: every pin released, each region once. */
static void close_check(struct pdma_cache *c)
{
	pdma_cache_close(c);
	assert_int_equal(atomic_load(&pins), atomic_load(&unpins));
	for (int k = 0; k < NREG; k++)
		assert_int_equal(atomic_load(&pinned[k]), 0);
}

static struct entry *entry_of_region(struct pdma_region *r)
{
	return entry_of(r);
}

static bool shards_usable(void)
{
	return pdma_cache_shard_init() == 0;
}

/* A hit writes the thread's slot; the entry's count and stamp stay. */
static void test_hit_writes_slot_only(void **state)
{
	struct pdma_cache *c = open_cache(1024);
	struct pdma_region *r, *r2;
	struct entry *e;
	struct shard_slot *s;
	int32_t cnt;
	int64_t s0;
	uint64_t lu;

	(void)state;
	if (!shards_usable()) {
		print_message("skipped: no membarrier(2) private expedited command\n");
		pdma_cache_close(c);
		skip();
	}
	r = get(c, 0); /* the miss: pins and indexes */
	assert_non_null(r);
	pdma_cache_put(c, r);
	e = entry_of_region(r);
	/* The miss and its put count on the entry; the first hit moves it. */
	assert_false(atomic_load(&e->fast));
	assert_int_equal(atomic_load(&e->refcnt), 1);
	pdma_cache_put(c, get(c, 0));
	assert_true(atomic_load(&e->fast));
	assert_non_null(pdma_cache_self);
	s = shard_slot(e, pdma_cache_self);
	/* The miss's reference was taken on the entry and dropped in the
	 * slot: only the sum means anything (1, the index's). */
	cnt = atomic_load(&e->refcnt);
	s0 = atomic_load(&s->cnt);
	assert_int_equal(cnt - FAST_BIAS + s0, 1);
	lu = atomic_load(&e->last_use);

	r2 = get(c, 0); /* a hit */
	assert_ptr_equal(r2, r);
	assert_int_equal(atomic_load(&s->cnt), s0 + 1);
	assert_int_equal(atomic_load(&e->refcnt), cnt);
	pdma_cache_put(c, r2);
	assert_int_equal(atomic_load(&s->cnt), s0);
	assert_true(atomic_load(&s->stamp) > lu);
	assert_int_equal(atomic_load(&e->refcnt), cnt);
	assert_int_equal(atomic_load(&e->last_use), lu);

	/* Held through a hit, then invalidated: the fold puts the slot's count
	 * on the entry; the region stays pinned until the put. */
	r2 = get(c, 0);
	assert_int_equal(pdma_cache_invalidate(c, PDMA_HMEM_SIM, reg_addr(0), PG), 1);
	assert_false(atomic_load(&e->fast));
	assert_int_equal(atomic_load(&s->cnt), 0);
	assert_int_equal(atomic_load(&e->refcnt), 1); /* the held one */
	assert_int_equal(atomic_load(&pinned[0]), 1);
	pdma_cache_put(c, r2);
	assert_int_equal(atomic_load(&pinned[0]), 0);
	close_check(c);
}

/* ---- references that cross threads ---- */
struct xarg {
	struct pdma_cache *c;
	struct pdma_region *r[NREG];
	int n;
};

static void *put_all(void *p)
{
	struct xarg *x = p;

	for (int i = 0; i < x->n; i++)
		pdma_cache_put(x->c, x->r[i]);
	return NULL;
}

static void *get_all(void *p)
{
	struct xarg *x = p;

	for (int i = 0; i < x->n; i++) {
		x->r[i] = get(x->c, i);
		if (!x->r[i])
			return (void *)1;
	}
	return NULL;
}

/* Taken here, dropped in another thread; invalidated while held. */
static void test_put_by_another_thread(void **state)
{
	struct pdma_cache *c = open_cache(1024);
	struct xarg x = { .c = c, .n = NREG };
	pthread_t th;

	(void)state;
	for (int k = 0; k < NREG; k++)
		pdma_cache_put(c, get(c, k)); /* cached */
	assert_null(get_all(&x)); /* hits */
	assert_int_equal(pdma_cache_invalidate(c, PDMA_HMEM_SIM, reg_addr(0), NREG * 4 * PG), NREG);
	for (int k = 0; k < NREG; k++)
		assert_int_equal(atomic_load(&pinned[k]), 1); /* held */
	assert_int_equal(pthread_create(&th, NULL, put_all, &x), 0);
	pthread_join(th, NULL);
	for (int k = 0; k < NREG; k++)
		assert_int_equal(atomic_load(&pinned[k]), 0);

	/* And the other way: hits in a thread, puts here, then a flush evicts
	 * them all (the slots' counts sum to zero across the two shards). */
	for (int k = 0; k < NREG; k++)
		pdma_cache_put(c, get(c, k));
	assert_int_equal(pthread_create(&th, NULL, get_all, &x), 0);
	pthread_join(th, NULL);
	put_all(&x);
	assert_int_equal(pdma_cache_flush(c), NREG);
	for (int k = 0; k < NREG; k++)
		assert_int_equal(atomic_load(&pinned[k]), 0);
	close_check(c);
}

/* The thread that took the references exits holding them; its shard goes
 * back; another thread takes it and goes on counting in it. */
static void test_thread_exits_holding(void **state)
{
	struct pdma_cache *c = open_cache(1024);
	struct xarg x = { .c = c, .n = NREG }, y = { .c = c, .n = NREG };
	struct pdma_cache_stats st;
	pthread_t th;
	void *ret;

	(void)state;
	for (int k = 0; k < NREG; k++)
		pdma_cache_put(c, get(c, k));
	assert_int_equal(pthread_create(&th, NULL, get_all, &x), 0);
	pthread_join(th, &ret);
	assert_null(ret);
	/* Gone, holding NREG references: a flush must not unpin them. */
	assert_int_equal(pdma_cache_flush(c), 0);
	pdma_cache_get_stats(c, &st);
	assert_int_equal(st.count, NREG);
	/* A new thread (maybe on the same shard) takes and drops more. */
	assert_int_equal(pthread_create(&th, NULL, get_all, &y), 0);
	pthread_join(th, &ret);
	assert_null(ret);
	assert_int_equal(pthread_create(&th, NULL, put_all, &y), 0);
	pthread_join(th, NULL);
	assert_int_equal(pdma_cache_flush(c), 0); /* x's still held */
	put_all(&x);
	assert_int_equal(pdma_cache_flush(c), NREG);
	for (int k = 0; k < NREG; k++)
		assert_int_equal(atomic_load(&pinned[k]), 0);
	close_check(c);
}

/* ---- many threads, folds under hits ---- */
#define MANY (PDMA_CACHE_SHARDS + 16)

static pthread_barrier_t bar;
static atomic_int errors, stop;

struct harg {
	struct pdma_cache *c;
	int id;
	int iters;
	bool has_shard;
};

static void *hitter(void *p)
{
	struct harg *h = p;
	uint64_t s = 0x9E3779B97F4A7C15ull * (uint64_t)(h->id + 1);
	struct pdma_region *held = NULL;

	pthread_barrier_wait(&bar);
	for (int i = 0; i < h->iters || (h->iters < 0 && !atomic_load(&stop)); i++) {
		int k;
		struct pdma_region *r;

		s ^= s << 13;
		s ^= s >> 7;
		s ^= s << 17;
		k = (int)(s % NREG);
		r = get(h->c, k);
		if (!r || r->start != reg_addr(k)) {
			atomic_fetch_add(&errors, 1);
			continue;
		}
		if (s % 16 == 0) { /* hold one a while */
			if (held)
				pdma_cache_put(h->c, held);
			held = r;
		} else {
			pdma_cache_put(h->c, r);
		}
	}
	if (held)
		pdma_cache_put(h->c, held);
	h->has_shard = pdma_cache_self != NULL;
	pthread_barrier_wait(&bar); /* all alive until every one has counted */
	return NULL;
}

/* More threads than shards, all alive at once: the rest count on the
 * entries, and the counts still balance. */
static void test_more_threads_than_shards(void **state)
{
	struct pdma_cache *c = open_cache(1024);
	struct pdma_cache_stats st;
	static struct harg h[MANY];
	static pthread_t th[MANY];
	int with = 0;

	(void)state;
	if (!shards_usable()) {
		print_message("skipped: no membarrier(2) private expedited command\n");
		pdma_cache_close(c);
		skip();
	}
	for (int k = 0; k < NREG; k++)
		pdma_cache_put(c, get(c, k));
	pthread_barrier_init(&bar, NULL, MANY);
	for (int i = 0; i < MANY; i++) {
		h[i] = (struct harg){ .c = c, .id = i, .iters = 2000 };
		assert_int_equal(pthread_create(&th[i], NULL, hitter, &h[i]), 0);
	}
	for (int i = 0; i < MANY; i++) {
		pthread_join(th[i], NULL);
		with += h[i].has_shard;
	}
	pthread_barrier_destroy(&bar);
	print_message("%d of %d threads had a shard\n", with, MANY);
	/* This thread holds one (from the first test) or none. */
	assert_true(with >= PDMA_CACHE_SHARDS - 1 && with <= PDMA_CACHE_SHARDS);
	assert_int_equal(atomic_load(&errors), 0);
	pdma_cache_get_stats(c, &st);
	assert_int_equal(st.live, st.count);
	assert_int_equal(pdma_cache_flush(c), NREG);
	for (int k = 0; k < NREG; k++)
		assert_int_equal(atomic_load(&pinned[k]), 0);
	close_check(c);
}

/* Invalidations, evictions and flushes fold entries while 4 threads hit
 * them: every hit valid, every pin released once. */
static void test_folds_under_hits(void **state)
{
	struct pdma_cache *c = open_cache(NREG - 4); /* full: misses evict */
	struct harg h[4];
	pthread_t th[4];
	int iters = getenv("PEERDMA_VALGRIND") ? 200 : 3000;

	(void)state;
	atomic_store(&stop, 0);
	pthread_barrier_init(&bar, NULL, 5);
	for (int i = 0; i < 4; i++) {
		h[i] = (struct harg){ .c = c, .id = 100 + i, .iters = -1 };
		assert_int_equal(pthread_create(&th[i], NULL, hitter, &h[i]), 0);
	}
	pthread_barrier_wait(&bar);
	for (int i = 0; i < iters; i++) {
		int k = i % NREG;

		if (i % 3 == 0)
			pdma_cache_invalidate(c, PDMA_HMEM_SIM, reg_addr(k), PG);
		else if (i % 97 == 1)
			pdma_cache_flush(c);
		else
			pdma_cache_put(c, get(c, k));
	}
	atomic_store(&stop, 1);
	pthread_barrier_wait(&bar);
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	pthread_barrier_destroy(&bar);
	assert_int_equal(atomic_load(&errors), 0);
	close_check(c);
}

/* ---- fork ---- */
static void *spin_hits(void *p)
{
	struct harg *h = p;

	while (!atomic_load(&stop))
		pdma_cache_put(h->c, get(h->c, 1));
	return NULL;
}

/* The child runs folds with the parent's other shards in use at the fork:
 * it must not wait for threads it does not have. */
static void test_fork_child_folds(void **state)
{
	struct pdma_cache *c = open_cache(1024);
	struct harg h = { .c = c };
	pthread_t th;
	int status;
	pid_t pid;

	(void)state;
	for (int k = 0; k < NREG; k++)
		pdma_cache_put(c, get(c, k));
	atomic_store(&stop, 0);
	assert_int_equal(pthread_create(&th, NULL, spin_hits, &h), 0);
	usleep(20000);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct pdma_cache *c2;

		alarm(20); /* a wait for the parent's thread would hang here */
		pdma_cache_close(c); /* folds every entry of the parent's cache */
		c2 = open_cache(1024);
		for (int k = 0; k < NREG; k++)
			pdma_cache_put(c2, get(c2, k));
		pdma_cache_put(c2, get(c2, 0));
		pdma_cache_invalidate(c2, PDMA_HMEM_SIM, reg_addr(0), NREG * 4 * PG);
		pdma_cache_close(c2);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	atomic_store(&stop, 1);
	pthread_join(th, NULL);
	close_check(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hit_writes_slot_only),
		cmocka_unit_test(test_put_by_another_thread),
		cmocka_unit_test(test_thread_exits_holding),
		cmocka_unit_test(test_more_threads_than_shards),
		cmocka_unit_test(test_folds_under_hits),
		cmocka_unit_test(test_fork_child_folds),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
