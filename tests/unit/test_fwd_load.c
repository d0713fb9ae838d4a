// SPDX-License-Identifier: MIT
/* UCX is loaded at run time, by the first forwarder or consumer, never at
 * program start (ingest/forward/ucx.h): a program that links the ingest
 * library and never forwards keeps a libc UCX has not patched. Once loaded,
 * mremap(MREMAP_FIXED) still moves to the address asked for (Debian's UCX
 * 1.13 hooks drop it unless UCX_MEM_EVENTS=no); a UCX_MEM_EVENTS the user set
 * is kept; a missing UCX is a clear -ENODEV. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include <peerdma/forward.h>
#include <peerdma/ingest.h>

static bool mapped(const char *lib)
{
	char line[512];
	bool found = false;
	FILE *f = fopen("/proc/self/maps", "r");

	assert_non_null(f);
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, lib) != NULL;
	fclose(f);
	return found;
}

/* A consumer of a port nobody listens on: UCX is loaded, the open fails. */
static int open_refused(char *msg, size_t msglen)
{
	struct pdma_consume_attr a;
	struct pdma_consume *c = NULL;
	int ret;

	pdma_consume_attr_init(&a);
	a.addr = "127.0.0.1";
	a.port = 9; /* discard: nothing listens here in the test's namespace */
	a.timeout_ms = 2000;
	ret = pdma_consume_open(&a, &c, msg, msglen);
	if (!ret)
		pdma_consume_close(c);
	return ret;
}

static void test_not_loaded_at_start(void **state)
{
	(void)state;
	assert_false(mapped("libucp.so"));
	assert_false(mapped("libucs.so"));
	assert_false(mapped("libucm.so"));
}

/* In a child: the once-per-process load must not have happened yet. */
static int in_child(void (*fn)(void))
{
	int st;
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (!pid) {
		fn();
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void missing_ucx(void)
{
	char msg[256] = "";
	int ret;

	setenv("PEERDMA_LIBUCP", "/nonexistent/libucp.so.0", 1);
	ret = open_refused(msg, sizeof(msg));
	if (ret != -ENODEV)
		_exit(1);
	if (!strstr(msg, "UCX not available") || !strstr(msg, "/nonexistent/libucp.so.0"))
		_exit(2);
	/* the same answer again: loaded (or not) once per process */
	if (open_refused(msg, sizeof(msg)) != -ENODEV)
		_exit(3);
}

static void test_missing_ucx(void **state)
{
	(void)state;
	assert_int_equal(in_child(missing_ucx), 0);
}

static void user_setting(void)
{
	const char *v;

	setenv("UCX_MEM_EVENTS", "yes", 1);
	if (open_refused(NULL, 0) == -ENODEV)
		_exit(1);
	v = getenv("UCX_MEM_EVENTS");
	if (!v || strcmp(v, "yes"))
		_exit(2);
}

static void test_user_setting_kept(void **state)
{
	(void)state;
	assert_int_equal(in_child(user_setting), 0);
}

static void test_loaded_and_mremap_fixed(void **state)
{
	const size_t len = 2 * 4096;
	char msg[256] = "";
	char *p, *t, *q;
	int ret;

	(void)state;
	unsetenv("UCX_MEM_EVENTS");
	ret = open_refused(msg, sizeof(msg));
	assert_int_not_equal(ret, 0);
	assert_int_not_equal(ret, -ENODEV);
	assert_true(mapped("libucp.so"));
	assert_true(mapped("libucs.so"));
	assert_string_equal(getenv("UCX_MEM_EVENTS"), "no");

	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	t = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(p != MAP_FAILED && t != MAP_FAILED);
	p[0] = 7;
	q = mremap(p, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, t);
	assert_ptr_equal(q, t);
	assert_int_equal(q[0], 7);
	munmap(q, len);
}

/* forward.h: the session's pool must hold PDMA_FWD_POOL_RESERVE +
 * max_credits buffers a stream, or the open is refused (-EINVAL). */
static int fwd_with_pool(uint32_t window_blocks, char *msg, size_t msglen)
{
	struct pdma_ingest_attr ia;
	struct pdma_ingest *ing;
	struct pdma_fwd_attr fa;
	struct pdma_fwd *f;
	int ret;

	pdma_ingest_attr_init(&ia);
	if (window_blocks)
		ia.window_blocks = window_blocks;
	assert_int_equal(pdma_ingest_open(&ia, &ing, msg, msglen), 0);
	pdma_fwd_attr_init(&fa);
	fa.addr = "127.0.0.1";
	ret = pdma_fwd_open(ing, &fa, &f, msg, msglen);
	if (!ret)
		pdma_fwd_close(f);
	pdma_ingest_close(ing);
	return ret;
}

static void test_pool_checked(void **state)
{
	char msg[256] = "";

	(void)state;
	assert_int_equal(fwd_with_pool(0, msg, sizeof(msg)), -EINVAL); /* default 16 */
	assert_non_null(strstr(msg, "window_blocks"));
	assert_int_equal(fwd_with_pool(PDMA_FWD_POOL_RESERVE + 16 - 1, msg, sizeof(msg)), -EINVAL);
	assert_int_equal(fwd_with_pool(PDMA_FWD_POOL_RESERVE + 16, msg, sizeof(msg)), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_not_loaded_at_start),
		cmocka_unit_test(test_missing_ucx),
		cmocka_unit_test(test_user_setting_kept),
		cmocka_unit_test(test_loaded_and_mremap_fixed),
		cmocka_unit_test(test_pool_checked),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
