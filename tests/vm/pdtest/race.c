// SPDX-License-Identifier: GPL-2.0
/*
 * pdtest race: GPU free, dma-buf revoke and munmap racing unpin, pin, close
 * and process exit, with a client attached in some rounds; live pins back to 0
 * at the end.
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
		if (R.variant == 3 || R.variant == 6)
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
		} else if (R.variant == 7) {
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

int do_race(int seconds)
{
	double end = now() + seconds;
	long rounds = 0, revoked = 0, exits = 0, pin_races = 0;
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
	while (now() < end && !fails) {
		int v = rounds % 8, bfd = -1;

		if (rounds % 64 == 63) {
			pid_t pid = fork();
			int st;

			if (pid == 0)
				race_exit_child();
			waitpid(pid, &st, 0);
			exits++;
		}
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
				FAIL("round %ld variant %d: pin: %s", rounds, v,
				     strerror(R.r_unpin));
			if (R.h && unpin(R.pfd, R.h))
				FAIL("round %ld variant %d: unpin: %s", rounds, v, strerror(errno));
			if (R.r_free)
				FAIL("round %ld variant %d: free/munmap failed", rounds, v);
			pin_races += R.h != 0;
			goto drain;
		}
		if (v == 7) {
			R.cfd = pd_open();
			R.va = gs_alloc(R.gfd, 2 * GPAGE, NULL);
			if (!pin(R.cfd, PEERDMA_KIND_GPU, PEERDMA_PIN_GPU_CALLBACK, R.va, 2 * GPAGE,
				 NULL) ||
			    !pin(R.cfd, PEERDMA_KIND_GPU, 0, R.va + GPAGE, GPAGE, NULL))
				FAIL("round %ld variant 7: pin: %s", rounds, strerror(errno));
			pthread_barrier_wait(&R.go);
			pthread_barrier_wait(&R.done);
			if (R.r_free || R.r_unpin)
				FAIL("round %ld variant 7: free %d close %d", rounds, R.r_free,
				     R.r_unpin);
			goto drain;
		}
		if (v == 3) {
			R.hostmem = map_anon(2 * PAGE);
			R.h = pin(R.pfd, PEERDMA_KIND_HOST, 0, (uintptr_t)R.hostmem, 2 * PAGE, NULL);
		} else {
			R.va = gs_alloc(R.gfd, GPAGE, NULL);
			if (v == 0 || v == 4)
				R.h = pin(R.pfd, PEERDMA_KIND_GPU, PEERDMA_PIN_GPU_CALLBACK, R.va,
					  GPAGE, NULL);
			else if (v == 1)
				R.h = pin(R.pfd, PEERDMA_KIND_GPU, 0, R.va, GPAGE, NULL);
			else {
				bfd = gs_export(R.gfd, R.va, GPAGE);
				R.h = pin_buf(R.pfd, bfd, 0, GPAGE, NULL);
			}
		}
		if (!R.h) {
			FAIL("round %ld variant %d: pin: %s", rounds, v, strerror(errno));
			break;
		}
		if (v == 4) {
			struct peerdma_edu_attach a = { .peerdma_fd = R.pfd, .handle = R.h };

			if (ioctl(R.efd, PEERDMA_EDU_IOC_ATTACH, &a))
				FAIL("round %ld: attach: %s", rounds, strerror(errno));
		}
		pthread_barrier_wait(&R.go);
		pthread_barrier_wait(&R.done);
		if (v == 4) {
			struct peerdma_edu_status st;

			if (ioctl(R.efd, PEERDMA_EDU_IOC_STATUS, &st) || st.quiesced != 1 ||
			    st.mapped)
				FAIL("round %ld: client not quiesced (%u, mapped %u)", rounds,
				     st.quiesced, st.mapped);
			ioctl(R.efd, PEERDMA_EDU_IOC_DETACH);
		}
		if (R.r_free || R.r_unpin)
			FAIL("round %ld variant %d: free %d unpin %d (%s)", rounds, v, R.r_free,
			     R.r_unpin, strerror(errno));
		if (bfd >= 0)
			close(bfd);
drain:
		for (;;) {
			ssize_t n = read(R.pfd, ev, sizeof(ev));

			if (n <= 0)
				break;
			revoked += n / sizeof(ev[0]);
		}
		rounds++;
	}
	R.stop = 1;
	pthread_barrier_wait(&R.go);
	pthread_join(t1, NULL);
	pthread_join(t2, NULL);
	close(R.pfd);
	close(R.gfd);
	close(R.efd);
	wait_clean();
	printf("  race: %ld rounds, %ld revoked before unpin, %ld process exits, "
	       "%ld pins won against free/munmap\n", rounds, revoked, exits, pin_races);
	if (rounds < 50L * seconds)
		FAIL("only %ld rounds", rounds);
	if (check_clean("after race"))
		fails++;
	if (gs_info().used)
		FAIL("gpusim memory still used: %llu", (unsigned long long)gs_info().used);
	return fails;
}
