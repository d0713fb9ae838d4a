// SPDX-License-Identifier: MIT
/*
 * The userfaultfd monitor and a transfer in flight (lib/monitor/uffd.c): a
 * thread's simulated-device write into a cached MR of never-touched memory,
 * while the main thread unmaps the MR's last page (not written). The unmap's
 * event makes the monitor thread revoke the region, which waits for the
 * transfer to end. Before, the transfer's first touch of each page was a
 * missing-page fault that only that monitor thread resolves: both waited for
 * each other for ever (the alarm ends the child, the test fails). Ranges are
 * now watched in write-protect mode, where no fault reaches the monitor.
 *
 * In a child process: a hang ends there, and the cache, its monitor and the
 * threads are the child's alone.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "mem/sim.h"
#include "peerdma/mr.h"
#include "support/mr_setup.h"

#define LEN (64u << 20) /* written: 16384 first touches */
#define PG 4096u

struct xfer {
	struct pdma_domain *d;
	uint64_t key;
	char *dst;
	const char *src;
	int ret;
};

static void *write_main(void *arg)
{
	struct xfer *x = arg;

	x->ret = pdma_sim_dma_write(x->d, x->key, (uintptr_t)x->dst, x->src, LEN);
	return NULL;
}

/* 0 passed, 77 no userfaultfd monitor here, else the failed step. */
static int child(void)
{
	struct xfer x;
	struct pdma_mr *m;
	pthread_t th;

	alarm(60);
	setenv("PEERDMA_MR_CACHE_MONITOR", "userfaultfd", 1);
	x.d = dom_open_cached();
	if (!x.d)
		return 10;
	if (!dom_host_cached(x.d) || strcmp(pdma_domain_cache_monitor(x.d), "userfaultfd"))
		return 77;
	x.dst = mmap(NULL, LEN + PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	x.src = mmap(NULL, LEN, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0); /* zeros */
	if (x.dst == MAP_FAILED || x.src == MAP_FAILED)
		return 11;
	if (pdma_mr_reg(x.d, x.dst, LEN + PG, RW, 0, 0, 0, &m, NULL))
		return 12;
	x.key = pdma_mr_key(m);
	if (pthread_create(&th, NULL, write_main, &x))
		return 13;
	usleep(20 * 1000); /* the write is in its first touches */
	if (munmap(x.dst + LEN, PG))
		return 14;
	pthread_join(th, NULL);
	/* begun before the revocation: it completes (or, on a slow start,
	 * is refused as revoked); either way it returns */
	if (x.ret != 0 && x.ret != -EFAULT)
		return 15;
	pdma_mr_close(m);
	munmap(x.dst, LEN);
	munmap((void *)x.src, LEN);
	return pdma_domain_close(x.d) ? 16 : 0;
}

static bool skipped;

static void test_transfer_vs_unmap(void **state)
{
	int st;
	pid_t pid;

	(void)state;
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(child());
	assert_int_equal(waitpid(pid, &st, 0), pid);
	if (!WIFEXITED(st))
		fail_msg("child ended by signal %d (%s)", WTERMSIG(st),
			 WTERMSIG(st) == SIGALRM ? "hung: the transfer and the monitor deadlocked" : "crashed");
	if (WEXITSTATUS(st) == 77) {
		skipped = true;
		return;
	}
	assert_int_equal(WEXITSTATUS(st), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_transfer_vs_unmap),
	};

	int failed = cmocka_run_group_tests(tests, NULL, NULL);

	if (!failed && skipped) {
		printf("skipped: no userfaultfd monitor here (it needs the full userfaultfd)\n");
		return 77;
	}
	return failed;
}
