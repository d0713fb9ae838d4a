// SPDX-License-Identifier: MIT
/*
 * Registration cache under concurrency (run under TSan by tests/run-all):
 * hitters get/put random slots (holding some for a while), while other
 * threads invalidate slots by notification (as a free hook would), revoke
 * pins from the backend (as a GPU free does), flush, and the limits and a
 * small BAR force evictions and -ENOMEM retries all the time.
 *
 * Checked: every region handed out covers the request, is valid when handed
 * out, and was pinned no earlier than the last free of its slot that had
 * completed before the get began (zero stale hits); every pin is released
 * exactly once, none leaks.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cache/cache.h"
#include "monitor/monitor.h"
#include "support/distinct.h"

#define PG 65536ull
#define BASE 0x7e0000000000ull
#define NSLOT 64
#define SLOT_PAGES 2
#define NHIT 4

enum { LIVE, REVOKING, DEAD };

struct fpin {
	uint64_t start;
	size_t len;
	pdma_mem_revoke_fn revoke;
	void *arg;
	int state;
	uint64_t gen; /* generation of the slot's memory when pinned */
	struct fpin *next;
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t dead;
	size_t bar, used;
	uint64_t pins, unpins, live;
	struct fpin *list;
} fk = { .lock = PTHREAD_MUTEX_INITIALIZER, .dead = PTHREAD_COND_INITIALIZER };

static _Atomic uint64_t gen[NSLOT];      /* bumped when a slot's memory is "freed" */
static _Atomic uint64_t done_gen[NSLOT]; /* that free has finished notifying */
static atomic_int errors, stop;
static _Atomic uint64_t n_gets, n_enomem;

static inline uint64_t slot_addr(int k)
{
	return BASE + (uint64_t)k * 4 * PG; /* gaps: slots never touch */
}

static int fk_query(void *be, uint64_t addr, size_t len, struct pdma_mem_alloc *a)
{
	(void)be;
	a->base = addr;
	a->size = len;
	a->buffer_id = 0;
	return 0;
}

static int fk_pin(void *be, uint64_t addr, size_t len, pdma_mem_revoke_fn revoke, void *arg,
		  void **pin)
{
	struct fpin *p;

	(void)be;
	if ((addr | len) & (PG - 1))
		return -EINVAL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	pthread_mutex_lock(&fk.lock);
	if (fk.used + len > fk.bar) {
		pthread_mutex_unlock(&fk.lock);
		free(p);
		return -ENOMEM;
	}
	p->start = addr;
	p->len = len;
	p->revoke = revoke;
	p->arg = arg;
	p->state = LIVE;
	p->gen = atomic_load(&gen[(addr - BASE) / (4 * PG)]);
	p->next = fk.list;
	fk.list = p;
	fk.used += len;
	fk.pins++;
	fk.live++;
	pthread_mutex_unlock(&fk.lock);
	*pin = p;
	return 0;
}

static void fk_unpin(void *be, void *pin)
{
	struct fpin *p = pin, **pp;

	(void)be;
	pthread_mutex_lock(&fk.lock);
	while (p->state == REVOKING)
		pthread_cond_wait(&fk.dead, &fk.lock);
	for (pp = &fk.list; *pp && *pp != p; pp = &(*pp)->next)
		;
	if (*pp != p) {
		atomic_fetch_add(&errors, 1); /* unpinned twice */
		pthread_mutex_unlock(&fk.lock);
		return;
	}
	*pp = p->next;
	if (p->state == LIVE)
		fk.used -= p->len;
	fk.unpins++;
	fk.live--;
	pthread_mutex_unlock(&fk.lock);
	free(p);
}

static const struct pdma_mem_ops fk_ops = {
	.name = "fake-mt", .page_size = PG, .query = fk_query, .pin = fk_pin, .unpin = fk_unpin,
};

/* Backend-side free of slot k: revoke its live pins (callbacks without the lock). */
static void fk_free_slot(int k)
{
	uint64_t s = slot_addr(k), e = s + SLOT_PAGES * PG;
	struct fpin *todo[64];
	int n = 0;
	uint64_t g = atomic_fetch_add(&gen[k], 1) + 1;

	pthread_mutex_lock(&fk.lock);
	for (struct fpin *p = fk.list; p && n < 64; p = p->next) {
		if (p->state == LIVE && p->start < e && p->start + p->len > s) {
			p->state = REVOKING;
			fk.used -= p->len;
			todo[n++] = p;
		}
	}
	pthread_mutex_unlock(&fk.lock);
	for (int i = 0; i < n; i++)
		todo[i]->revoke(todo[i]->arg);
	pthread_mutex_lock(&fk.lock);
	for (int i = 0; i < n; i++)
		todo[i]->state = DEAD;
	pthread_cond_broadcast(&fk.dead);
	pthread_mutex_unlock(&fk.lock);
	atomic_store(&done_gen[k], g);
}

/* A free hook's way: notify, then the memory is gone. */
static void notify_free_slot(int k)
{
	uint64_t g = atomic_fetch_add(&gen[k], 1) + 1;

	pdma_monitor_notify(PDMA_HMEM_SIM, slot_addr(k), SLOT_PAGES * PG);
	atomic_store(&done_gen[k], g);
}

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

struct targ {
	struct pdma_cache *c;
	int id;
	int iters;
};

static void check(struct pdma_region *r, uint64_t addr, size_t len, uint64_t g0)
{
	struct fpin *p = r->pin;

	if (r->start > addr || r->start + r->len < addr + len)
		atomic_fetch_add(&errors, 1);
	if (p->gen < g0)
		atomic_fetch_add(&errors, 1); /* a stale hit */
}

static void *hitter(void *arg)
{
	struct targ *t = arg;
	uint64_t s = 0x9E3779B97F4A7C15ull * (uint64_t)(t->id + 1);
	struct pdma_region *held[4] = { 0 };

	for (int i = 0; i < t->iters; i++) {
		int k = (int)(rnd(&s) % NSLOT);
		uint64_t off = rnd(&s) % (SLOT_PAGES * PG - 1);
		size_t len = 1 + rnd(&s) % (SLOT_PAGES * PG - off);
		uint64_t addr = slot_addr(k) + off;
		uint64_t g0 = atomic_load(&done_gen[k]);
		struct pdma_region *r;
		int ret = pdma_cache_get(t->c, &fk_ops, NULL, PDMA_HMEM_SIM, addr, len, NULL, &r);

		atomic_fetch_add_explicit(&n_gets, 1, memory_order_relaxed);
		if (ret == -ENOMEM || ret == -EFAULT) {
			/* all BAR held by others / freed while pinning: legitimate */
			atomic_fetch_add_explicit(&n_enomem, 1, memory_order_relaxed);
			continue;
		}
		if (ret) {
			atomic_fetch_add(&errors, 1);
			continue;
		}
		check(r, addr, len, g0);
		if (rnd(&s) % 8 == 0) {
			int h = (int)(rnd(&s) % 4);

			if (held[h])
				pdma_cache_put(t->c, held[h]);
			held[h] = r;
		} else {
			pdma_cache_put(t->c, r);
		}
	}
	for (int h = 0; h < 4; h++)
		if (held[h])
			pdma_cache_put(t->c, held[h]);
	return NULL;
}

static void *chaos(void *arg)
{
	struct targ *t = arg;
	uint64_t s = 12345;
	unsigned n = 0;

	while (!atomic_load(&stop)) {
		int k = (int)(rnd(&s) % NSLOT);

		switch (n++ % 8) {
		case 0: case 1: case 2:
			notify_free_slot(k);
			break;
		case 3: case 4: case 5:
			fk_free_slot(k);
			break;
		case 6:
			pdma_cache_invalidate(t->c, PDMA_HMEM_SIM, slot_addr(k) + PG, 1);
			break;
		default:
			if (n % 64 == 7)
				pdma_cache_flush(t->c);
			break;
		}
		for (volatile int spin = 0; spin < 2000; spin++)
			;
	}
	return NULL;
}

static void run(size_t max_count, size_t bar_pages, int iters, bool with_chaos)
{
	struct pdma_cache_attr a;
	struct pdma_cache *c;
	struct pdma_cache_stats st;
	pthread_t th[NHIT + 1];
	struct targ ta[NHIT + 1];

	memset(&a, 0, sizeof(a));
	a.max_count = max_count;
	a.max_size = (size_t)1 << 40;
	a.monitor = PDMA_CACHE_MONITOR_DISABLED;
	a.mode[PDMA_HMEM_SIM] = PDMA_CACHE_MODE_TRUST;
	assert_int_equal(pdma_cache_open(&a, &c), 0);
	fk.bar = bar_pages * PG;
	atomic_store(&stop, 0);
	for (int i = 0; i <= NHIT; i++) {
		ta[i] = (struct targ){ .c = c, .id = i, .iters = iters };
		if (i < NHIT)
			assert_int_equal(pthread_create(&th[i], NULL, hitter, &ta[i]), 0);
		else if (with_chaos)
			assert_int_equal(pthread_create(&th[i], NULL, chaos, &ta[i]), 0);
	}
	for (int i = 0; i < NHIT; i++)
		pthread_join(th[i], NULL);
	atomic_store(&stop, 1);
	if (with_chaos)
		pthread_join(th[NHIT], NULL);
	pdma_cache_get_stats(c, &st);
	print_message("gets %llu (enomem/efault %llu) misses %llu slow_hits %llu uncached %llu "
		      "evictions %llu enomem_retries %llu invalidations %llu\n",
		      (unsigned long long)atomic_load(&n_gets),
		      (unsigned long long)atomic_load(&n_enomem), (unsigned long long)st.misses,
		      (unsigned long long)st.slow_hits, (unsigned long long)st.uncached,
		      (unsigned long long)st.evictions, (unsigned long long)st.enomem_retries,
		      (unsigned long long)st.invalidations);
	atomic_store(&n_gets, 0);
	atomic_store(&n_enomem, 0);
	assert_true(st.count <= max_count);
	assert_int_equal(st.live, st.count); /* nothing held: only the index's */
	pdma_cache_close(c);
	assert_int_equal(atomic_load(&errors), 0);
	pthread_mutex_lock(&fk.lock);
	assert_int_equal(fk.live, 0);
	assert_int_equal(fk.used, 0);
	assert_int_equal(fk.pins, fk.unpins);
	assert_null(fk.list);
	pthread_mutex_unlock(&fk.lock);
}

static int iters(void)
{
	return getenv("PEERDMA_VALGRIND") ? 2000 : 40000;
}

/* Mostly hits: a cache that holds every slot. */
static void test_mt_hits(void **state)
{
	(void)state;
	run(1024, 4 * NSLOT * SLOT_PAGES, iters(), false);
}

/* Hits, misses, limits and -ENOMEM with concurrent invalidation and revocation. */
static void test_mt_chaos(void **state)
{
	(void)state;
	run(24, 40, iters(), true);
}

/* Mostly hits, with concurrent invalidation and revocation: the stale race. */
static void test_mt_hits_chaos(void **state)
{
	(void)state;
	run(1024, 4 * NSLOT * SLOT_PAGES, iters(), true);
}

/*
 * The hash table's growth under lock-free readers. The table starts at the
 * size of max_count, capped (lib/cache: HT_PRESIZE_MAX, 2^18 buckets at load
 * 1/2): the caches above never grow it, so this one asks for more regions
 * than the cap and inserts past it while hitters look up regions inserted
 * first, at their start (the start table) and inside them (the span table:
 * the hot regions are two pages long). A rehash may give a reader a false
 * miss, which the locked slow path must turn into a hit: no region may be
 * pinned twice, and every region must still be found afterwards.
 */
#define GROW_N 140000 /* past 2^17 regions: one doubling */
#define GROW_HOT 64

static _Atomic uint64_t grow_pins, grow_unpins;

static int grow_pin(void *be, uint64_t addr, size_t len, pdma_mem_revoke_fn revoke, void *arg,
		    void **pin)
{
	(void)be, (void)len, (void)revoke, (void)arg;
	atomic_fetch_add(&grow_pins, 1);
	*pin = (void *)(uintptr_t)addr;
	return 0;
}

static void grow_unpin(void *be, void *pin)
{
	(void)be, (void)pin;
	atomic_fetch_add(&grow_unpins, 1);
}

static const struct pdma_mem_ops grow_ops = {
	.name = "grow", .page_size = 4096, .pin = grow_pin, .unpin = grow_unpin,
};

static inline uint64_t grow_addr(size_t i)
{
	return BASE + (uint64_t)i * 2 * 4096; /* apart: one region per get */
}

struct grow_arg {
	struct pdma_cache *c;
	struct pdma_region *hot[GROW_HOT];
	uint64_t gets;
};

static void *grow_hitter(void *arg)
{
	struct grow_arg *g = arg;

	while (!atomic_load(&stop)) {
		for (size_t i = 0; i < GROW_HOT; i++) {
			struct pdma_region *r;
			uint64_t a = grow_addr(i) + (g->gets & 1) * 4096;

			if (pdma_cache_get(g->c, &grow_ops, NULL, PDMA_HMEM_SIM, a, 4096, NULL,
					   &r) != 0 || r != g->hot[i]) {
				atomic_fetch_add(&errors, 1);
				return NULL;
			}
			pdma_cache_put(g->c, r);
			g->gets++;
		}
	}
	return NULL;
}

/* A cache of 2^20 regions for grow_ops (sim memory, trusted, no monitor). */
static struct pdma_cache *grow_cache_open(void)
{
	struct pdma_cache_attr a;
	struct pdma_cache *c = NULL;

	memset(&a, 0, sizeof(a));
	a.max_count = (size_t)1 << 20;
	a.max_size = (size_t)1 << 40;
	a.monitor = PDMA_CACHE_MONITOR_DISABLED;
	a.mode[PDMA_HMEM_SIM] = PDMA_CACHE_MODE_TRUST;
	assert_int_equal(pdma_cache_open(&a, &c), 0);
	return c;
}

static void test_mt_grow(void **state)
{
	struct pdma_cache_stats st;
	struct grow_arg g[NHIT];
	pthread_t th[NHIT];
	struct pdma_region *hot[GROW_HOT];
	struct pdma_cache *c;

	(void)state;
	c = grow_cache_open();
	atomic_store(&stop, 0);
	for (size_t i = 0; i < GROW_HOT; i++) {
		assert_int_equal(pdma_cache_get(c, &grow_ops, NULL, PDMA_HMEM_SIM, grow_addr(i),
						2 * 4096, NULL, &hot[i]),
				 0);
		pdma_cache_put(c, hot[i]);
	}
	for (int t = 0; t < NHIT; t++) {
		g[t].c = c;
		g[t].gets = 0;
		memcpy(g[t].hot, hot, sizeof(hot));
		assert_int_equal(pthread_create(&th[t], NULL, grow_hitter, &g[t]), 0);
	}
	for (size_t i = GROW_HOT; i < GROW_N; i++) {
		struct pdma_region *r;

		assert_int_equal(pdma_cache_get(c, &grow_ops, NULL, PDMA_HMEM_SIM, grow_addr(i),
						4096, NULL, &r),
				 0);
		pdma_cache_put(c, r);
	}
	atomic_store(&stop, 1);
	for (int t = 0; t < NHIT; t++) {
		pthread_join(th[t], NULL);
		assert_true(g[t].gets > 0);
	}
	assert_int_equal(atomic_load(&errors), 0);
	assert_int_equal(atomic_load(&grow_pins), GROW_N);
	/* After the growth every region is still indexed: all hits, the hot
	 * ones inside them too. */
	for (size_t i = 0; i < GROW_N; i++) {
		struct pdma_region *r;

		assert_int_equal(pdma_cache_get(c, &grow_ops, NULL, PDMA_HMEM_SIM, grow_addr(i),
						4096, NULL, &r),
				 0);
		pdma_cache_put(c, r);
		if (i >= GROW_HOT)
			continue;
		assert_int_equal(pdma_cache_get(c, &grow_ops, NULL, PDMA_HMEM_SIM,
						grow_addr(i) + 4096, 4096, NULL, &r),
				 0);
		assert_ptr_equal(r, hot[i]);
		pdma_cache_put(c, r);
	}
	assert_int_equal(atomic_load(&grow_pins), GROW_N);
	pdma_cache_get_stats(c, &st);
	assert_int_equal(st.count, GROW_N);
	pdma_cache_close(c);
	assert_int_equal(atomic_load(&grow_unpins), GROW_N);
}

/*
 * The entry slab filled by several threads at once. Entries are handed out
 * in address order from the newest 2 MiB chunk (lib/cache/slab.c); threads
 * that find it used up map chunks of their own at the same moment, and the
 * loser's remainder goes to the free list. Four threads insert 6000 regions
 * each (about four chunks of entries, so each chunk boundary is crossed under
 * contention): every region gets an entry of its own, none is pinned twice,
 * all are found again afterwards, and all are unpinned at close.
 */
#define FILL_N 6000

struct fill_arg {
	struct pdma_cache *c;
	size_t first;
	struct pdma_region *r[FILL_N];
};

static void *fill_thread(void *arg)
{
	struct fill_arg *f = arg;

	for (size_t i = 0; i < FILL_N; i++) {
		if (pdma_cache_get(f->c, &grow_ops, NULL, PDMA_HMEM_SIM, grow_addr(f->first + i),
				   4096, NULL, &f->r[i]) != 0) {
			atomic_fetch_add(&errors, 1);
			return NULL;
		}
		pdma_cache_put(f->c, f->r[i]);
	}
	return NULL;
}

static void test_mt_slab_fill(void **state)
{
	static struct fill_arg f[NHIT];
	static uint64_t all[NHIT * FILL_N];
	struct pdma_cache_stats st;
	pthread_t th[NHIT];
	struct pdma_cache *c;
	size_t n = 0;

	(void)state;
	c = grow_cache_open();
	atomic_store(&errors, 0);
	atomic_store(&grow_pins, 0);
	atomic_store(&grow_unpins, 0);
	for (int t = 0; t < NHIT; t++) {
		f[t].c = c;
		f[t].first = (size_t)t * FILL_N;
		assert_int_equal(pthread_create(&th[t], NULL, fill_thread, &f[t]), 0);
	}
	for (int t = 0; t < NHIT; t++)
		pthread_join(th[t], NULL);
	assert_int_equal(atomic_load(&errors), 0);
	assert_int_equal(atomic_load(&grow_pins), NHIT * FILL_N);
	for (int t = 0; t < NHIT; t++)
		for (size_t i = 0; i < FILL_N; i++)
			all[n++] = (uintptr_t)f[t].r[i];
	assert_all_distinct(all, n);
	for (int t = 0; t < NHIT; t++)
		for (size_t i = 0; i < FILL_N; i++) {
			struct pdma_region *r;

			assert_int_equal(pdma_cache_get(c, &grow_ops, NULL, PDMA_HMEM_SIM,
							grow_addr(f[t].first + i), 4096, NULL, &r),
					 0);
			assert_ptr_equal(r, f[t].r[i]);
			pdma_cache_put(c, r);
		}
	assert_int_equal(atomic_load(&grow_pins), NHIT * FILL_N);
	pdma_cache_get_stats(c, &st);
	assert_int_equal(st.count, NHIT * FILL_N);
	pdma_cache_close(c);
	assert_int_equal(atomic_load(&grow_unpins), NHIT * FILL_N);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mt_hits),
		cmocka_unit_test(test_mt_chaos),
		cmocka_unit_test(test_mt_hits_chaos),
		cmocka_unit_test(test_mt_grow),
		cmocka_unit_test(test_mt_slab_fill),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
