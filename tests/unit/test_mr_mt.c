// SPDX-License-Identifier: MIT
/* Registration under concurrency (run under TSan by tests/run-all):
 * device DMA racing GPU free, EQ ordering, parallel registration. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "peerdma/mr.h"
#include "mem/sim.h"
#include "mr/domain.h"
#include "support/distinct.h"

#define RW (PDMA_READ | PDMA_WRITE | PDMA_REMOTE_READ | PDMA_REMOTE_WRITE)

static int rounds(int full)
{
	/* Valgrind and TSan slow things 20-50x: keep the wall time bounded. */
	return getenv("PEERDMA_VALGRIND") ? full / 20 : full;
}

/* The key and the address the devices use, published together: with two
 * separate atomics a device could pair one round's key with another round's
 * address (a bounds error, not the race under test). */
struct target {
	uint64_t key, addr;
};

struct writer {
	struct pdma_domain *d;
	struct target *_Atomic tgt;
	atomic_bool stop;
	atomic_long ok, faulted;
};

/* Each device thread writes its own 64 bytes: two engines writing the same
 * bytes at once would be a race in the test, not in the library. */
struct writer_thread {
	struct writer *w;
	uint64_t off;
};

static void *writer_main(void *arg)
{
	struct writer_thread *wt = arg;
	struct writer *w = wt->w;
	static const char pat[64] = "STALE-STALE-STALE-STALE-STALE-STALE-STALE-STALE-STALE-STALE-ST";

	while (!atomic_load(&w->stop)) {
		const struct target *t = atomic_load(&w->tgt);
		int r = pdma_sim_dma_write(w->d, t->key, t->addr + wt->off, pat, sizeof(pat));

		if (r == 0)
			atomic_fetch_add(&w->ok, 1);
		else if (r == -EFAULT || r == -ENOKEY)
			atomic_fetch_add(&w->faulted, 1);
		else
			fail_msg("unexpected DMA result %d", r);
	}
	return NULL;
}

/* Free GPU memory while two device threads write into it, then reallocate
 * the same address: after pdma_sim_free returns, not one byte of the new
 * allocation may be written through the old registration. */
/* Spin (yielding) until *v moves past old, at most about a second. */
static void wait_for(atomic_long *v, long old)
{
	for (int i = 0; i < 1000000 && atomic_load(v) == old; i++)
		sched_yield();
}

static void free_vs_dma(int use_cache)
{
	struct pdma_sim_attr sa = { .mem_size = 4 << 20 };
	struct pdma_domain_attr da;
	struct pdma_sim *s;
	struct writer w = { 0 };
	pthread_t th[2];
	struct writer_thread wt[2] = { { &w, 0 }, { &w, 1024 } };
	const int n = rounds(200);
	struct target *tg = calloc((size_t)n + 1, sizeof(*tg)); /* tg[0]: no key yet */
	long stale = 0;

	assert_non_null(tg);
	atomic_init(&w.tgt, &tg[0]);
	assert_int_equal(pdma_sim_open(&sa, &s), 0);
	pdma_domain_attr_init(&da);
	da.sim = s;
	da.use_cache = use_cache;
	assert_int_equal(pdma_domain_open(&da, &w.d), 0);
	for (int t = 0; t < 2; t++)
		assert_int_equal(pthread_create(&th[t], NULL, writer_main, &wt[t]), 0);
	for (int i = 0; i < n; i++) {
		struct iovec iov;
		struct pdma_mr_attr a = { .mr_iov = &iov, .iov_count = 1, .access = RW,
					  .iface = PDMA_HMEM_SIM };
		struct pdma_mr *m;
		unsigned char *g, *g2;
		long ok0;

		assert_int_equal(pdma_sim_alloc(s, 1 << 16, (void **)&g), 0);
		iov.iov_base = g;
		iov.iov_len = 4096;
		assert_int_equal(pdma_mr_regattr(w.d, &a, 0, &m), 0);
		/* A fresh registration of a reused address is live. */
		assert_int_equal(pdma_sim_dma_write(w.d, pdma_mr_key(m), (uintptr_t)g + 2048, "ok",
						    2), 0);
		assert_memory_equal(g + 2048, "ok", 2);
		tg[i + 1].addr = (uint64_t)(uintptr_t)g;
		tg[i + 1].key = pdma_mr_key(m);
		ok0 = atomic_load(&w.ok);
		atomic_store(&w.tgt, &tg[i + 1]);
		/* Free while the devices are writing: wait (bounded) until one
		 * write went through, so the free meets transfers in flight. */
		wait_for(&w.ok, ok0);
		assert_int_equal(pdma_sim_free(s, g), 0);
		assert_int_equal(pdma_sim_alloc(s, 1 << 16, (void **)&g2), 0);
		assert_ptr_equal(g2, g);
		wait_for(&w.faulted, atomic_load(&w.faulted));
		for (int b = 0; b < 2048; b++)
			stale += g2[b] != 0;
		assert_int_equal(pdma_mr_close(m), 0);
		assert_int_equal(pdma_sim_free(s, g2), 0);
	}
	atomic_store(&w.stop, true);
	for (int t = 0; t < 2; t++)
		pthread_join(th[t], NULL);
	free(tg);
	assert_int_equal(stale, 0);
	/* The race was real: writes both succeeded and were refused. */
	assert_true(atomic_load(&w.ok) > 0);
	assert_true(atomic_load(&w.faulted) > 0);
	assert_int_equal(pdma_domain_close(w.d), 0);
	assert_int_equal(pdma_sim_close(s), 0);
}

static void test_free_vs_dma_no_stale_write(void **state)
{
	(void)state;
	free_vs_dma(0);
}

/* The same through the registration cache: the free callback and the
 * cache's invalidation race the device threads, and the revoked region must
 * leave the cache's index (the next registration of the reused address must
 * pin the new allocation, not hit the dead entry). */
static void test_free_vs_dma_cached(void **state)
{
	(void)state;
	free_vs_dma(1);
}

struct eq_reader {
	struct pdma_eq *eq;
	struct pdma_mr **slots;
	int n;
	int mismatches;
};

static void *eq_reader_main(void *arg)
{
	struct eq_reader *r = arg;

	for (int i = 0; i < r->n; i++) {
		struct pdma_eq_entry e;
		int idx;

		if (pdma_eq_read(r->eq, &e, 5000)) {
			r->mismatches = -1;
			return NULL;
		}
		idx = (int)(intptr_t)e.context;
		/* The handle must already be stored where the caller asked:
		 * a plain read, so TSan also flags a store racing the event. */
		if (r->slots[idx] != e.mr)
			r->mismatches++;
	}
	return NULL;
}

static void test_eq_handle_before_event(void **state)
{
	enum { N = 300 };
	struct pdma_domain_attr da;
	struct pdma_domain *d;
	struct pdma_eq *eq;
	static struct pdma_mr *slots[N];
	static char buf[4096];
	struct eq_reader r;
	pthread_t th;

	(void)state;
	pdma_domain_attr_init(&da);
	assert_int_equal(pdma_domain_open(&da, &d), 0);
	assert_int_equal(pdma_eq_open(d, N, &eq), 0);
	assert_int_equal(pdma_domain_bind_eq(d, eq, PDMA_REG_MR), 0);
	r = (struct eq_reader){ .eq = eq, .slots = slots, .n = N };
	assert_int_equal(pthread_create(&th, NULL, eq_reader_main, &r), 0);
	for (int i = 0; i < N; i++) {
		assert_int_equal(pdma_mr_reg(d, buf, 64, RW, 0, 0, 0, &slots[i],
					     (void *)(intptr_t)i), 0);
	}
	pthread_join(th, NULL);
	assert_int_equal(r.mismatches, 0);
	for (int i = 0; i < N; i++)
		assert_int_equal(pdma_mr_close(slots[i]), 0);
	assert_int_equal(pdma_eq_close(eq), 0);
	assert_int_equal(pdma_domain_close(d), 0);
}

struct regger {
	struct pdma_domain *d;
	int id;
	int errors;
};

static void *regger_main(void *arg)
{
	struct regger *g = arg;
	char *buf = malloc(8192);

	for (int i = 0; i < rounds(2000); i++) {
		struct pdma_mr *m;
		uint64_t key = ((uint64_t)g->id << 32) | (uint64_t)i;
		char out[4];

		if (pdma_mr_reg(g->d, buf + (i % 64), 100, RW, 0, key, 0, &m, NULL) ||
		    pdma_mr_key(m) != key || pdma_sim_dma_write(g->d, key, 1, "mt", 2) ||
		    pdma_sim_dma_read(g->d, key, 1, out, 2) || memcmp(out, "mt", 2) ||
		    pdma_mr_close(m) || pdma_sim_dma_write(g->d, key, 1, "mt", 2) != -ENOKEY)
			g->errors++;
	}
	free(buf);
	return NULL;
}

static void test_parallel_registration(void **state)
{
	struct pdma_domain_attr da;
	struct regger g[4];
	pthread_t th[4];

	(void)state;
	pdma_domain_attr_init(&da);
	da.mr_mode = 0; /* requested keys, offsets */
	assert_int_equal(pdma_domain_open(&da, &g[0].d), 0);
	for (int t = 0; t < 4; t++) {
		g[t] = (struct regger){ .d = g[0].d, .id = t + 1 };
		assert_int_equal(pthread_create(&th[t], NULL, regger_main, &g[t]), 0);
	}
	for (int t = 0; t < 4; t++) {
		pthread_join(th[t], NULL);
		assert_int_equal(g[t].errors, 0);
	}
	assert_int_equal(pdma_domain_close(g[0].d), 0);
}

/*
 * Provider keys from several threads at once, MR objects recycled through the
 * domain's pool between them: every thread registers its own buffer (a
 * pattern of its own), publishes the key, reads through it and closes. Other
 * threads read through whatever key was published last, live or dead: the
 * answer must be -ENOKEY or the publisher's own pattern, never another
 * thread's (a dead key resolving to a reused object), and a key whose close
 * returned is refused from then on.
 */
enum { PK_THREADS = 4 };

struct pk_shared {
	struct pdma_domain *d;
	_Atomic uint64_t published[PK_THREADS]; /* owner's latest key */
	_Atomic uint64_t dead[PK_THREADS];      /* owner's latest closed key */
	char *bufs[PK_THREADS];                 /* each thread's buffer, set before start */
};

struct pk_thread {
	struct pk_shared *sh;
	int id;
	int foreign, live_dead, errors;
	long hits;
};

static void *pk_main(void *arg)
{
	struct pk_thread *t = arg;
	struct pk_shared *sh = t->sh;
	char *buf = sh->bufs[t->id];

	for (int i = 0; i < rounds(3000); i++) {
		struct pdma_mr *m;
		uint64_t key, base = (uint64_t)(uintptr_t)buf;
		char out[8];

		if (pdma_mr_reg(sh->d, buf, 4096, RW, 0, 0, 0, &m, NULL)) {
			t->errors++;
			continue;
		}
		key = pdma_mr_key(m);
		atomic_store(&sh->published[t->id], key);
		if (pdma_sim_dma_read(sh->d, key, base + 8, out, sizeof(out)) ||
		    out[0] != 'A' + t->id)
			t->errors++;
		/* Every thread's latest key, whatever state it is in now, at
		 * every thread's buffer: it may reach only its owner's (VIRT_ADDR:
		 * elsewhere -EINVAL), and there only the owner's pattern. A dead
		 * key is refused everywhere. */
		for (int o = 0; o < PK_THREADS; o++) {
			uint64_t k = atomic_load(&sh->published[o]);
			uint64_t dk = atomic_load(&sh->dead[o]);

			for (int j = 0; j < PK_THREADS && k; j++) {
				uint64_t a = (uint64_t)(uintptr_t)sh->bufs[j] + 8;
				int r = pdma_sim_dma_read(sh->d, k, a, out, 1);

				if (r == 0 && (j != o || out[0] != 'A' + o))
					t->foreign++;
				else if (r && r != -ENOKEY && r != -EINVAL)
					t->errors++;
				if (dk && pdma_sim_dma_read(sh->d, dk, a, out, 1) != -ENOKEY)
					t->live_dead++;
			}
		}
		if (pdma_mr_close(m))
			t->errors++;
		atomic_store(&sh->dead[t->id], key);
		if (pdma_sim_dma_read(sh->d, key, base + 8, out, sizeof(out)) != -ENOKEY)
			t->live_dead++;
		t->hits++;
	}
	return NULL;
}

static void test_provider_keys_parallel(void **state)
{
	struct pdma_domain_attr da;
	struct pk_shared sh = { 0 };
	struct pk_thread t[PK_THREADS];
	pthread_t th[PK_THREADS];

	(void)state;
	pdma_domain_attr_init(&da);
	da.use_cache = 1; /* cached hits: the fast path, MR objects from the pool */
	assert_int_equal(pdma_domain_open(&da, &sh.d), 0);
	for (int i = 0; i < PK_THREADS; i++) {
		sh.bufs[i] = malloc(4096);
		assert_non_null(sh.bufs[i]);
		memset(sh.bufs[i], 'A' + i, 4096);
	}
	for (int i = 0; i < PK_THREADS; i++) {
		t[i] = (struct pk_thread){ .sh = &sh, .id = i };
		assert_int_equal(pthread_create(&th[i], NULL, pk_main, &t[i]), 0);
	}
	for (int i = 0; i < PK_THREADS; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(t[i].errors, 0);
		assert_int_equal(t[i].foreign, 0);
		assert_int_equal(t[i].live_dead, 0);
		assert_true(t[i].hits == rounds(3000));
	}
	assert_int_equal(pdma_domain_close(sh.d), 0);
	for (int i = 0; i < PK_THREADS; i++)
		free(sh.bufs[i]);
}

/* pdma_mr_close waits for the transfers in flight through the MR's key
 * (lib/mr/domain.h, Locking): once it returns, no byte of the memory is
 * written through the dead key, however long the device's writes. Two
 * device threads write 512 KiB at a time, each its own half (two engines on
 * the same bytes would be the test's race); the test zeroes the memory right
 * after close returns and finds it still zero after the writers were told
 * to stop. Without the wait, a copy begun before the close lands after it. */
struct cw_shared {
	struct pdma_domain *d;
	_Atomic uint64_t key;
	atomic_bool stop;
	atomic_long ok, refused;
	const unsigned char *src;
	size_t len;
};

struct cw_thread {
	struct cw_shared *sh;
	uint64_t off;
};

static void *cw_writer(void *arg)
{
	const struct cw_thread *t = arg;
	struct cw_shared *sh = t->sh;

	while (!atomic_load(&sh->stop)) {
		uint64_t k = atomic_load(&sh->key);
		int r = pdma_sim_dma_write(sh->d, k, t->off, sh->src, sh->len / 2);

		if (r == 0)
			atomic_fetch_add(&sh->ok, 1);
		else if (r == -ENOKEY)
			atomic_fetch_add(&sh->refused, 1);
		else
			fail_msg("unexpected DMA result %d", r);
	}
	return NULL;
}

static void test_close_waits_for_dma(void **state)
{
	enum { LEN = 1 << 20 };
	struct cw_shared sh = { .len = LEN };
	struct pdma_domain_attr da;
	unsigned char *buf = malloc(LEN), *src = malloc(LEN);
	const int n = rounds(100);
	pthread_t th[2];
	struct cw_thread ct[2] = { { &sh, 0 }, { &sh, LEN / 2 } };
	long late = 0;

	(void)state;
	assert_non_null(buf);
	assert_non_null(src);
	memset(src, 0x5a, LEN);
	sh.src = src;
	pdma_domain_attr_init(&da);
	da.mr_mode &= ~PDMA_MR_VIRT_ADDR; /* offset 0: the writers need no address */
	assert_int_equal(pdma_domain_open(&da, &sh.d), 0);
	for (int t = 0; t < 2; t++)
		assert_int_equal(pthread_create(&th[t], NULL, cw_writer, &ct[t]), 0);
	for (int i = 0; i < n; i++) {
		struct pdma_mr *m;
		long ok0 = atomic_load(&sh.ok);

		assert_int_equal(pdma_mr_reg(sh.d, buf, LEN, RW, 0, 0, 0, &m, NULL), 0);
		atomic_store(&sh.key, pdma_mr_key(m));
		wait_for(&sh.ok, ok0); /* a write went through: more are in flight */
		assert_int_equal(pdma_mr_close(m), 0);
		memset(buf, 0, LEN);
		/* The writers move on to the dead key: one refusal each at least,
		 * so any copy begun before the close had time to land. */
		long r0 = atomic_load(&sh.refused);
		wait_for(&sh.refused, r0);
		wait_for(&sh.refused, r0 + 1);
		for (size_t b = 0; b < LEN; b += 64)
			late += buf[b] != 0;
	}
	atomic_store(&sh.stop, true);
	for (int t = 0; t < 2; t++)
		pthread_join(th[t], NULL);
	assert_int_equal(late, 0);
	assert_true(atomic_load(&sh.ok) > 0);
	assert_true(atomic_load(&sh.refused) > 0);
	assert_int_equal(pdma_domain_close(sh.d), 0);
	free(buf);
	free(src);
}

/*
 * Descriptors stay unique across threads: each thread takes its IDs a block
 * of 1024 at a time (lib/mr/key.c). Four threads each hold 1100 MRs open at
 * once, so each crosses into a second block while the others draw theirs;
 * no descriptor may be NULL or repeat another, in any thread.
 */
enum { DU_THREADS = 4, DU_MRS = 1100 };

struct du_thread {
	struct pdma_domain *d;
	char *buf;
	struct pdma_mr *mrs[DU_MRS];
	uintptr_t descs[DU_MRS];
	int errors;
};

static void *du_main(void *arg)
{
	struct du_thread *t = arg;

	for (int i = 0; i < DU_MRS; i++) {
		if (pdma_mr_reg(t->d, t->buf, 4096, RW, 0, 0, 0, &t->mrs[i], NULL)) {
			t->errors++;
			t->mrs[i] = NULL;
			continue;
		}
		t->descs[i] = (uintptr_t)pdma_mr_desc(t->mrs[i]);
	}
	return NULL;
}

static void test_desc_unique_across_threads(void **state)
{
	static struct du_thread t[DU_THREADS];
	static char bufs[DU_THREADS][4096] __attribute__((aligned(4096)));
	static uint64_t all[DU_THREADS * DU_MRS];
	struct pdma_domain_attr da;
	struct pdma_domain *d;
	pthread_t th[DU_THREADS];
	size_t n = 0;

	(void)state;
	pdma_domain_attr_init(&da);
	da.use_cache = 1; /* the same buffer again and again: cache hits */
	assert_int_equal(pdma_domain_open(&da, &d), 0);
	for (int i = 0; i < DU_THREADS; i++) {
		t[i] = (struct du_thread){ .d = d, .buf = bufs[i] };
		assert_int_equal(pthread_create(&th[i], NULL, du_main, &t[i]), 0);
	}
	for (int i = 0; i < DU_THREADS; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(t[i].errors, 0);
		for (int j = 0; j < DU_MRS; j++)
			all[n++] = t[i].descs[j];
	}
	assert_all_distinct(all, n);
	assert_true(all[0] != 0); /* sorted: the smallest */
	for (int i = 0; i < DU_THREADS; i++)
		for (int j = 0; j < DU_MRS; j++)
			assert_int_equal(pdma_mr_close(t[i].mrs[j]), 0);
	assert_int_equal(pdma_domain_close(d), 0);
}

/*
 * An MR's descriptor is made at the first pdma_mr_desc (lib/mr/domain.h).
 * Four threads ask for the descriptors of the same 500 MRs, none asked for
 * before, at once: every thread must get the same one for an MR, and it must
 * name that MR.
 */
enum { DR_THREADS = 4, DR_MRS = 500 };

struct dr_shared {
	struct pdma_mr *mrs[DR_MRS];
	uintptr_t descs[DR_THREADS][DR_MRS];
	pthread_barrier_t go;
};

struct dr_thread {
	struct dr_shared *sh;
	int idx;
};

static void *dr_main(void *arg)
{
	struct dr_thread *t = arg;

	pthread_barrier_wait(&t->sh->go);
	for (int i = 0; i < DR_MRS; i++) {
		int k = t->idx % 2 ? DR_MRS - 1 - i : i; /* half the threads from the end */

		t->sh->descs[t->idx][k] = (uintptr_t)pdma_mr_desc(t->sh->mrs[k]);
	}
	return NULL;
}

static void test_desc_first_call_race(void **state)
{
	static struct dr_shared sh;
	static char buf[4096] __attribute__((aligned(4096)));
	struct dr_thread t[DR_THREADS];
	struct pdma_domain_attr da;
	struct pdma_domain *d;
	pthread_t th[DR_THREADS];

	(void)state;
	pdma_domain_attr_init(&da);
	da.use_cache = 1;
	assert_int_equal(pdma_domain_open(&da, &d), 0);
	for (int i = 0; i < DR_MRS; i++)
		assert_int_equal(pdma_mr_reg(d, buf, 4096, RW, 0, 0, 0, &sh.mrs[i], NULL), 0);
	assert_int_equal(pthread_barrier_init(&sh.go, NULL, DR_THREADS), 0);
	for (int i = 0; i < DR_THREADS; i++) {
		t[i] = (struct dr_thread){ .sh = &sh, .idx = i };
		assert_int_equal(pthread_create(&th[i], NULL, dr_main, &t[i]), 0);
	}
	for (int i = 0; i < DR_THREADS; i++)
		pthread_join(th[i], NULL);
	for (int j = 0; j < DR_MRS; j++) {
		assert_true(sh.descs[0][j] != 0);
		for (int i = 1; i < DR_THREADS; i++)
			assert_true(sh.descs[i][j] == sh.descs[0][j]);
		assert_ptr_equal(pdma_desc_mr(d, (void *)sh.descs[0][j]), sh.mrs[j]);
		assert_int_equal(pdma_mr_close(sh.mrs[j]), 0);
		assert_null(pdma_desc_mr(d, (void *)sh.descs[0][j]));
	}
	pthread_barrier_destroy(&sh.go);
	assert_int_equal(pdma_domain_close(d), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_free_vs_dma_no_stale_write),
		cmocka_unit_test(test_free_vs_dma_cached),
		cmocka_unit_test(test_eq_handle_before_event),
		cmocka_unit_test(test_parallel_registration),
		cmocka_unit_test(test_provider_keys_parallel),
		cmocka_unit_test(test_close_waits_for_dma),
		cmocka_unit_test(test_desc_unique_across_threads),
		cmocka_unit_test(test_desc_first_call_race),
	};

	return cmocka_run_group_tests_name("mr_mt", tests, NULL, NULL);
}
