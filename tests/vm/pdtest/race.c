// SPDX-License-Identifier: GPL-2.0
/*
 * pdtest race SECONDS [ROUNDS]: GPU free, dma-buf revoke and munmap racing
 * unpin, pin, close and process exit, with a client attached in some rounds;
 * one phase per provider (nv-p2p, host, dma-buf), each SECONDS/3 long, or
 * until ROUNDS rounds when given (then fewer within SECONDS/3 fail); live pins
 * back to 0 at the end.
 *
 * Variants: 0 free-callback pin, 1 persistent pin, 4 free-callback + client,
 * 8 persistent + client: GPU free vs unpin; 5 pin vs free; 7 close vs free;
 * process exit vs free every 64th GPU round. 3 munmap vs unpin, 9 the same
 * with a client, 6 pin vs munmap. 2 dma-buf revoke vs unpin, 10 the same with
 * a client, 11 close vs revoke.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

static struct {
	pthread_barrier_t go, done;
	int pfd, gfd, efd, cfd;
	volatile int variant, stop;
	uint64_t va, h;
	void *hostmem;
	int r_free, r_unpin;
} R;

static void *race_free(void *arg)
{
	for (;;) {
		pthread_barrier_wait(&R.go);
		if (R.stop)
			return NULL;
		if (R.variant == 3 || R.variant == 6 || R.variant == 9)
			R.r_free = munmap(R.hostmem, 2 * PAGE);
		else
			R.r_free = gs_free(R.gfd, R.va);
		pthread_barrier_wait(&R.done);
	}
}

static void *race_unpin(void *arg)
{
	for (;;) {
		pthread_barrier_wait(&R.go);
		if (R.stop)
			return NULL;
		if (R.variant == 5) {
			/* pin racing the free: creation vs callback */
			R.h = pin(R.pfd, PEERDMA_KIND_GPU, PEERDMA_PIN_GPU_CALLBACK, R.va, GPAGE,
				  NULL);
			R.r_unpin = R.h ? 0 : errno;
		} else if (R.variant == 6) {
			/* pin racing munmap: creation vs MMU invalidation */
			R.h = pin(R.pfd, PEERDMA_KIND_HOST, 0, (uintptr_t)R.hostmem, 2 * PAGE,
				  NULL);
			R.r_unpin = R.h ? 0 : errno;
		} else if (R.variant == 7 || R.variant == 11) {
			/* close of the file (with its pins) racing the free */
			R.r_unpin = close(R.cfd);
		} else {
			R.r_unpin = unpin(R.pfd, R.h);
		}
		pthread_barrier_wait(&R.done);
	}
}

static void race_exit_child(void)
{
	int f = pd_open(), g = gs_open();
	uint64_t v = gs_alloc(g, GPAGE, NULL);
	pthread_t t;

	R.gfd = g;
	R.va = v;
	R.variant = 0;
	pin(f, PEERDMA_KIND_GPU, PEERDMA_PIN_GPU_CALLBACK, v, GPAGE, NULL);
	pin(f, PEERDMA_KIND_GPU, 0, v, GPAGE, NULL);
	pthread_barrier_init(&R.go, NULL, 2);
	pthread_barrier_init(&R.done, NULL, 2);
	pthread_create(&t, NULL, race_free, NULL);
	pthread_barrier_wait(&R.go);
	_exit(0);	/* exit races with the free on the other thread */
}

static const struct {
	const char *name;
	int variants[7];	/* ends with -1 */
} phases[] = {
	{ "nv-p2p", { 0, 1, 4, 5, 7, 8, -1 } },
	{ "host", { 3, 6, 9, -1 } },
	{ "dma-buf", { 2, 10, 11, -1 } },
};

static int is_client_variant(int v)
{
	return v == 4 || v == 8 || v == 9 || v == 10;
}

/* one round of variant @v; false when it could not be set up */
static int race_round(int v, long round, long *pin_races)
{
	int bfd = -1;

	R.variant = v;
	R.h = 0;
	if (v == 5 || v == 6) {
		if (v == 5)
			R.va = gs_alloc(R.gfd, GPAGE, NULL);
		else
			R.hostmem = map_anon(2 * PAGE);
		pthread_barrier_wait(&R.go);
		pthread_barrier_wait(&R.done);
		/* the pin either lost (alloc gone / unmapped) or won and is unpinned */
		if (R.r_unpin && R.r_unpin != (v == 5 ? EINVAL : EFAULT))
			FAIL("round %ld variant %d: pin: %s", round, v, strerror(R.r_unpin));
		if (R.h && unpin(R.pfd, R.h))
			FAIL("round %ld variant %d: unpin: %s", round, v, strerror(errno));
		if (R.r_free)
			FAIL("round %ld variant %d: free/munmap failed", round, v);
		*pin_races += R.h != 0;
		return 1;
	}
	if (v == 7 || v == 11) {
		R.cfd = pd_open();
		R.va = gs_alloc(R.gfd, 2 * GPAGE, NULL);
		if (v == 7) {
			if (!pin(R.cfd, PEERDMA_KIND_GPU, PEERDMA_PIN_GPU_CALLBACK, R.va, 2 * GPAGE,
				 NULL) ||
			    !pin(R.cfd, PEERDMA_KIND_GPU, 0, R.va + GPAGE, GPAGE, NULL))
				FAIL("round %ld variant 7: pin: %s", round, strerror(errno));
		} else {
			bfd = gs_export(R.gfd, R.va, 2 * GPAGE);
			if (!pin_buf(R.cfd, bfd, 0, GPAGE, NULL) ||
			    !pin_buf(R.cfd, bfd, GPAGE, GPAGE, NULL))
				FAIL("round %ld variant 11: pin: %s", round, strerror(errno));
		}
		pthread_barrier_wait(&R.go);
		pthread_barrier_wait(&R.done);
		if (R.r_free || R.r_unpin)
			FAIL("round %ld variant %d: free %d close %d", round, v, R.r_free,
			     R.r_unpin);
		if (bfd >= 0)
			close(bfd);
		return 1;
	}
	if (v == 3 || v == 9) {
		R.hostmem = map_anon(2 * PAGE);
		R.h = pin(R.pfd, PEERDMA_KIND_HOST, 0, (uintptr_t)R.hostmem, 2 * PAGE, NULL);
	} else {
		R.va = gs_alloc(R.gfd, GPAGE, NULL);
		if (v == 0 || v == 4)
			R.h = pin(R.pfd, PEERDMA_KIND_GPU, PEERDMA_PIN_GPU_CALLBACK, R.va,
				  GPAGE, NULL);
		else if (v == 1 || v == 8)
			R.h = pin(R.pfd, PEERDMA_KIND_GPU, 0, R.va, GPAGE, NULL);
		else {
			bfd = gs_export(R.gfd, R.va, GPAGE);
			R.h = pin_buf(R.pfd, bfd, 0, GPAGE, NULL);
		}
	}
	if (!R.h) {
		FAIL("round %ld variant %d: pin: %s", round, v, strerror(errno));
		return 0;
	}
	if (is_client_variant(v)) {
		struct peerdma_edu_attach a = { .peerdma_fd = R.pfd, .handle = R.h };

		if (ioctl(R.efd, PEERDMA_EDU_IOC_ATTACH, &a))
			FAIL("round %ld: attach: %s", round, strerror(errno));
	}
	pthread_barrier_wait(&R.go);
	pthread_barrier_wait(&R.done);
	if (is_client_variant(v)) {
		struct peerdma_edu_status st;

		if (ioctl(R.efd, PEERDMA_EDU_IOC_STATUS, &st) || st.quiesced != 1 || st.mapped)
			FAIL("round %ld variant %d: client not quiesced (%u, mapped %u)", round, v,
			     st.quiesced, st.mapped);
		ioctl(R.efd, PEERDMA_EDU_IOC_DETACH);
	}
	if (R.r_free || R.r_unpin)
		FAIL("round %ld variant %d: free %d unpin %d (%s)", round, v, R.r_free,
		     R.r_unpin, strerror(errno));
	if (bfd >= 0)
		close(bfd);
	return 1;
}

int do_race(int seconds, long target)
{
	long total = 0, revoked = 0, exits = 0, pin_races = 0, done[3] = { 0 };
	struct peerdma_event ev[64];
	pthread_t t1, t2;

	fails = 0;
	R.pfd = pd_open();
	R.gfd = gs_open();
	R.efd = edu_open();
	fcntl(R.pfd, F_SETFL, O_NONBLOCK);
	pthread_barrier_init(&R.go, NULL, 3);
	pthread_barrier_init(&R.done, NULL, 3);
	pthread_create(&t1, NULL, race_free, NULL);
	pthread_create(&t2, NULL, race_unpin, NULL);
	for (int p = 0; p < 3 && !fails; p++) {
		double end = now() + seconds / 3.0;
		long n = 0;

		while (!fails && (target ? n < target : 1) && now() < end) {
			int k = 0, v;

			while (phases[p].variants[k] >= 0)
				k++;
			v = phases[p].variants[n % k];
			if (p == 0 && n % 64 == 63) {
				pid_t pid = fork();
				int st;

				if (pid == 0)
					race_exit_child();
				waitpid(pid, &st, 0);
				exits++;
			}
			if (!race_round(v, n, &pin_races))
				break;
			for (;;) {
				ssize_t r = read(R.pfd, ev, sizeof(ev));

				if (r <= 0)
					break;
				revoked += r / sizeof(ev[0]);
			}
			n++;
		}
		done[p] = n;
		total += n;
		if (target && n < target)
			FAIL("%s: %ld rounds in %d s, want %ld", phases[p].name, n, seconds / 3,
			     target);
		else if (!target && n < 50L * seconds / 3)
			FAIL("%s: only %ld rounds", phases[p].name, n);
	}
	R.stop = 1;
	pthread_barrier_wait(&R.go);
	pthread_join(t1, NULL);
	pthread_join(t2, NULL);
	close(R.pfd);
	close(R.gfd);
	close(R.efd);
	wait_clean();
	printf("  race: %ld rounds (nv-p2p %ld, host %ld, dma-buf %ld), %ld revoked before "
	       "unpin, %ld process exits, %ld pins won against free/munmap\n", total, done[0],
	       done[1], done[2], revoked, exits, pin_races);
	if (check_clean("after race"))
		fails++;
	if (gs_info().used)
		FAIL("gpusim memory still used: %llu", (unsigned long long)gs_info().used);
	return fails;
}
