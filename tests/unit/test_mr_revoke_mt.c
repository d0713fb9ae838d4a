// SPDX-License-Identifier: MIT
/*
 * PDMA_MR_REVOKED under concurrency (TSan target, label "threads"): one thread
 * registers a CUDA MR (fake driver, cache on), asks pdma_mr_dma, closes it
 * and drains the EQ, round after round, while another thread revokes the
 * memory (pdma_cuda_invalidate, what the deallocation hooks do) at random
 * moments. Only the registering thread calls the fake driver. Checks, every
 * round: at most one event, only for this round's MR (never a late one for a
 * closed MR), with its context; pdma_mr_dma answers 0 or -ENODEV; some
 * rounds saw a revocation and some did not.
 *
 * Which outcome a round has is up to the scheduler: on a loaded machine (the
 * valgrind tests running beside TSan's) 2000 rounds once passed with no
 * revocation landing while an MR was open. So after ROUNDS the rounds go on
 * until both outcomes were seen, for at most EXTRA_SECONDS.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "mr/domain.h"
#include "support/fake_cuda.h"

#define BASE 0x7f0000000000ull
#define ROUNDS 2000
#define EXTRA_SECONDS 60

static atomic_bool stop;
static atomic_int invalidations;

static void *revoker(void *arg)
{
	unsigned int seed = 12345;

	(void)arg;
	while (!atomic_load(&stop)) {
		for (int i = rand_r(&seed) % 200; i > 0; i--)
			sched_yield();
		pdma_cuda_invalidate(BASE, 2 * MiB);
		atomic_fetch_add(&invalidations, 1);
	}
	return NULL;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void test_revoke_vs_close(void **state)
{
	struct iovec iov = { (void *)(uintptr_t)BASE, MiB };
	struct pdma_mr_attr a = { .mr_iov = &iov, .iov_count = 1, .access = PDMA_REMOTE_WRITE,
				  .iface = PDMA_HMEM_CUDA };
	struct pdma_domain_attr da;
	struct pdma_domain *d;
	struct pdma_eq *eq;
	pthread_t t;
	int revoked_rounds = 0, live_rounds = 0;
	unsigned int seed = 99;
	double deadline = 0;

	(void)state;
	fadd(BASE, 2 * MiB, PDMA_CU_MEMORYTYPE_DEVICE, 0);
	pdma_domain_attr_init(&da);
	da.use_cache = 1;
	assert_int_equal(pdma_domain_open(&da, &d), 0);
	assert_int_equal(pdma_eq_open(d, 8, &eq), 0);
	assert_int_equal(pdma_domain_bind_eq(d, eq, PDMA_MR_REVOKE_EVENTS), 0);
	assert_int_equal(pthread_create(&t, NULL, revoker, NULL), 0);
	for (uintptr_t round = 1;; round++) {
		struct pdma_eq_entry e;
		struct pdma_mr_dma dma;
		struct pdma_mr *m;
		int ret, events = 0, dret;

		if (round > ROUNDS) {
			if (revoked_rounds && live_rounds)
				break;
			if (!deadline)
				deadline = now_s() + EXTRA_SECONDS;
			else if (now_s() > deadline)
				break;
		}
		a.context = (void *)round;
		ret = pdma_mr_regattr(d, &a, 0, &m);
		/* A pin in progress while the memory is being released fails
		 * (lib/mem/cuda.h, pdma_cuda_release_begin). */
		if (ret == -EFAULT) {
			assert_int_equal(pdma_eq_read(eq, &e, 0), -EAGAIN);
			continue;
		}
		assert_int_equal(ret, 0);
		for (int i = rand_r(&seed) % 100; i > 0; i--)
			sched_yield();
		dret = pdma_mr_dma(m, 0, &dma);
		assert_true(dret == 0 || dret == -ENODEV);
		assert_int_equal(pdma_mr_close(m), 0);
		while (pdma_eq_read(eq, &e, 0) == 0) {
			assert_int_equal(e.event, PDMA_MR_REVOKED);
			assert_ptr_equal(e.mr, m);
			assert_ptr_equal(e.context, (void *)round);
			events++;
		}
		/* pdma_mr_dma may say -ENODEV (the backend saw the release
		 * begin) before the region's revocation ran; closed meanwhile,
		 * the MR then gets no event: at most one, never after close. */
		assert_true(events <= 1);
		if (events)
			revoked_rounds++;
		else
			live_rounds++;
	}
	atomic_store(&stop, true);
	pthread_join(t, NULL);
	assert_true(atomic_load(&invalidations) > 0);
	/* Both outcomes happened, else the race was not exercised. */
	assert_true(revoked_rounds > 0);
	assert_true(live_rounds > 0);
	assert_int_equal(pdma_eq_close(eq), 0);
	assert_int_equal(pdma_domain_close(d), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_revoke_vs_close, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
