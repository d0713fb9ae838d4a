// SPDX-License-Identifier: GPL-2.0
/*
 * In-guest test suite of peerdma.ko (static binary, run by tests/vm/init).
 *   pdtest suite [SEED [TEST]]  every functional test (or one; TEST_: a prefix), one "ok - NAME" / "not ok - NAME"
 *                        / "skip - NAME" line each (SEED: of the DMA pattern)
 *   pdtest final [SEED]  the tests that must run last (the host checks their bytes)
 *   pdtest race SECONDS [ROUNDS]  see race.c
 *   pdtest fuzz SECONDS [SEED]  see fuzz.c
 *   pdtest rmmod         rmmod with live pins refused, nothing leaked after
 * Every test runs in its own child process; a crash or hang fails only it.
 * The tests live in one file per subject (harness.h lists them).
 * Built 32-bit (gcc -m32, tests/vm/run's pdtest32), every name starts with
 * "m32/": the same tests through the compat ioctl path, beside the 64-bit run.
 */
#define _GNU_SOURCE
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static const struct pd_test *const suites[] = {
	pd_abi_tests, pd_host_tests, pd_counter_tests, pd_gpu_tests, pd_isolation_tests,
	pd_dmabuf_tests, pd_client_tests, pd_lifetime_tests, pd_strict_tests,
	pd_fault_tests, pd_nic_tests,
};

/* TEST "nic_" (ends in '_'): every test whose name starts with it */
static int only_prefix(const char *only, const char *name)
{
	size_t n = strlen(only);

	return n && only[n - 1] == '_' && !strncmp(only, name, n);
}

static int run_one(const char *name, void (*fn)(void), int timeout)
{
	int st;
	pid_t pid;

	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		alarm(timeout);
		fails = 0;
		fn();
		fflush(stdout);
		_exit(fails ? 1 : 0);
	}
	waitpid(pid, &st, 0);
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
		printf("ok - %s%s\n", ABI_TAG, name);
		return 0;
	}
	if (WIFEXITED(st) && WEXITSTATUS(st) == SKIP) {
		printf("skip - %s%s\n", ABI_TAG, name);
		return 0;
	}
	if (WIFSIGNALED(st))
		printf("  %s%s: killed by signal %d\n", ABI_TAG, name, WTERMSIG(st));
	printf("not ok - %s%s\n", ABI_TAG, name);
	return 1;
}

int main(int argc, char **argv)
{
	int bad = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc >= 2 && !strcmp(argv[1], "suite")) {
		const char *only = argc >= 4 ? argv[3] : NULL;

		cfg_seed = argc >= 3 ? atoi(argv[2]) : 1;
		for (size_t i = 0; i < sizeof(suites) / sizeof(suites[0]); i++)
			for (const struct pd_test *t = suites[i]; t->name; t++)
				if (!only || !strcmp(only, t->name) || only_prefix(only, t->name))
					bad |= run_one(t->name, t->fn, 120);
		return bad;
	}
	if (argc >= 2 && !strcmp(argv[1], "final")) {
		cfg_seed = argc >= 3 ? atoi(argv[2]) : 1;
		for (const struct pd_test *t = pd_final_tests; t->name; t++)
			bad |= run_one(t->name, t->fn, 120);
		return bad;
	}
	if (argc >= 3 && !strcmp(argv[1], "race")) {
		bad = do_race(atoi(argv[2]), argc >= 4 ? atol(argv[3]) : 0);
		printf("%s - race\n", bad ? "not ok" : "ok");
		return bad;
	}
	if (argc >= 3 && !strcmp(argv[1], "fuzz")) {
		uint64_t seed = argc >= 4 ? strtoull(argv[3], NULL, 0) : 0;

		if (!seed)
			seed = 88172645463325252ULL ^ (uint64_t)time(NULL) * 2654435761ULL ^
			       (uint64_t)now() << 20;
		printf("  %sfuzz seed %llu\n", ABI_TAG, (unsigned long long)seed);
		bad = do_fuzz(atoi(argv[2]), seed);
		printf("%s - %sfuzz\n", bad ? "not ok" : "ok", ABI_TAG);
		return bad;
	}
	if (argc >= 2 && !strcmp(argv[1], "nicctl"))
		return nicctl_main(argc, argv);
	if (argc >= 2 && !strcmp(argv[1], "gpuzero"))
		return gpuzero_main(argc, argv);
	if (argc >= 2 && !strcmp(argv[1], "rmmod")) {
		bad = do_rmmod();
		printf("%s - rmmod_live_pins\n", bad ? "not ok" : "ok");
		return bad;
	}
	fprintf(stderr,
		"usage: pdtest suite [SEED [TEST]] | final [SEED] | race S [ROUNDS] | fuzz S [SEED] | rmmod\n"
		"       pdtest nicctl CMD [WANT] | gpuzero BYTES\n");
	return 2;
}
