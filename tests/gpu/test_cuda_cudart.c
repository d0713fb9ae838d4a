// SPDX-License-Identifier: MIT
/*
 * The CUDA runtime hooks (libpeerdma_cuda_hooks.so) on a real GPU: loaded
 * before libcudart (as LD_PRELOAD would), the process's cudaFree is the hook's;
 * cudaFree / cudaFreeHost revoke pins and notify the monitor before the runtime
 * releases the memory; free + cudaMalloc at the same address over thousands of
 * rounds gives no stale hit, while the same rounds through the runtime's own
 * cudaFree (no hook) do.
 * Skips (exit 77) without a GPU, without libcudart or without the hook library
 * (found next to $PEERDMA_TOOL, in bench/cuda/ there, or at $PEERDMA_CUDA_HOOKS).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda/api.h"
#include "mem/cuda.h"
#include "monitor/monitor.h"

#define MiB (1024u * 1024u)
#define ROUNDS 2000

typedef int (*malloc_t)(void **, size_t);
typedef int (*free_t)(void *);

static struct pdma_cuda *cu;
static const struct pdma_cu_api *api;
static void *shim, *rt;
static malloc_t rt_malloc, rt_malloc_host;
static free_t hooked_free, rt_free, hooked_free_host;
static unsigned long (*shim_calls)(void);

static uint64_t buffer_id(uint64_t p)
{
	unsigned long long id = 0;

	if (api->PointerGetAttribute(&id, PDMA_CU_POINTER_ATTRIBUTE_BUFFER_ID, p))
		return 0;
	return id;
}

static void *dmalloc(size_t n)
{
	void *p = NULL;

	assert_int_equal(rt_malloc(&p, n), 0);
	assert_non_null(p);
	return p;
}

static void test_cudafree_is_hooked(void **state)
{
	(void)state;
	assert_ptr_equal(dlsym(RTLD_DEFAULT, "cudaFree"), dlsym(shim, "pdma_cuda_hook_cudaFree"));
	assert_ptr_not_equal(rt_free, hooked_free);
	assert_true(pdma_cuda_hooks_attach());
}

static int revokes, revoke_saw_alive;
static uint64_t revoke_addr;

static void on_revoke(void *arg)
{
	(void)arg;
	revokes++;
	revoke_saw_alive = buffer_id(revoke_addr) != 0;
}

static void test_cudafree_revokes_first(void **state)
{
	void *p = dmalloc(4 * MiB), *pin = NULL;
	struct pdma_cuda_pin_info pi;
	unsigned long c0 = shim_calls();

	(void)state;
	revokes = 0;
	revoke_addr = (uintptr_t)p;
	assert_int_equal(pdma_mem_cuda_ops.pin(cu, (uintptr_t)p, 2 * MiB, on_revoke, NULL, &pin), 0);
	assert_int_equal(hooked_free(p), 0);
	assert_int_equal(revokes, 1);
	assert_true(revoke_saw_alive);
	assert_int_equal(shim_calls(), c0 + 1);
	assert_int_equal(pdma_cuda_pin_info(pin, &pi), 0);
	assert_true(pi.revoked);
	assert_int_equal(pi.dmabuf_fd, -1);
	pdma_mem_cuda_ops.unpin(cu, pin);
}

static void test_cudafreehost_revokes_first(void **state)
{
	void *h = NULL, *pin = NULL;

	(void)state;
	assert_int_equal(rt_malloc_host(&h, 2 * MiB), 0);
	revokes = 0;
	revoke_addr = (uintptr_t)h;
	assert_int_equal(pdma_mem_cuda_host_ops.pin(cu, (uintptr_t)h, MiB, on_revoke, NULL, &pin), 0);
	assert_int_equal(hooked_free_host(h), 0);
	assert_int_equal(revokes, 1);
	assert_true(revoke_saw_alive);
	pdma_mem_cuda_host_ops.unpin(cu, pin);
}

struct ent {
	uint64_t addr, id;
	int valid;
};

static void on_notify(void *arg, enum pdma_hmem_iface iface, uint64_t addr, size_t len)
{
	struct ent *c = arg;

	if (iface != PDMA_HMEM_CUDA)
		return;
	for (int i = 0; i < 8; i++)
		if (c[i].valid && c[i].addr >= addr && c[i].addr < addr + len)
			c[i].valid = 0;
}

static void rounds(free_t f, int *stale, int *same, int *hits)
{
	struct ent c[8];
	void *b[8];
	struct pdma_monitor_sub *sub = NULL;

	*stale = *same = *hits = 0;
	memset(c, 0, sizeof(c));
	assert_int_equal(pdma_monitor_subscribe(on_notify, c, &sub), 0);
	for (int i = 0; i < 8; i++)
		b[i] = dmalloc(2 * MiB);
	for (int r = 0; r < ROUNDS; r++) {
		int v = r % 8;
		void *old;

		for (int i = 0; i < 8; i++) {
			uint64_t a = (uintptr_t)b[i], truth = buffer_id(a);

			if (c[i].valid && c[i].addr == a) {
				(*hits)++;
				if (c[i].id != truth)
					(*stale)++;
			} else {
				c[i] = (struct ent){ a, truth, 1 };
			}
		}
		old = b[v];
		assert_int_equal(f(old), 0);
		b[v] = dmalloc(2 * MiB);
		if (b[v] == old)
			(*same)++;
	}
	for (int i = 0; i < 8; i++)
		assert_int_equal(rt_free(b[i]), 0);
	pdma_monitor_unsubscribe(sub);
}

static void test_realloc_rounds(void **state)
{
	int stale, same, hits;

	(void)state;
	rounds(rt_free, &stale, &same, &hits);
	printf("# runtime cudaFree, not hooked: %d rounds, %d same-address reallocations, %d hits, %d STALE\n",
	       ROUNDS, same, hits, stale);
	assert_true(same > 0);
	assert_true(stale > 0);
	rounds(hooked_free, &stale, &same, &hits);
	printf("# cudaFree through the hook: %d rounds, %d same-address reallocations, %d hits, %d stale\n",
	       ROUNDS, same, hits, stale);
	assert_true(same > 0);
	assert_true(hits > 0);
	assert_int_equal(stale, 0);
}

static int find_shim(char *out, size_t n)
{
	const char *env = getenv("PEERDMA_CUDA_HOOKS"), *tool = getenv("PEERDMA_TOOL");
	char dir[PATH_MAX];

	if (env && !access(env, R_OK)) {
		snprintf(out, n, "%s", env);
		return 0;
	}
	if (!tool)
		return -1;
	snprintf(dir, sizeof(dir), "%s", tool);
	dirname(dir);
	snprintf(out, n, "%s/libpeerdma_cuda_hooks.so", dir);
	if (!access(out, R_OK))
		return 0;
	snprintf(out, n, "%s/bench/cuda/libpeerdma_cuda_hooks.so", dir);
	return access(out, R_OK);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cudafree_is_hooked),
		cmocka_unit_test(test_cudafree_revokes_first),
		cmocka_unit_test(test_cudafreehost_revokes_first),
		cmocka_unit_test(test_realloc_rounds),
	};
	static const char *const rts[] = { "libcudart.so.13", "libcudart.so.12", "libcudart.so" };
	char path[PATH_MAX + 64];
	int ret = pdma_cuda_open(&cu);

	if (ret == -ENODEV) {
		printf("skipped: no CUDA device (%s)\n", pdma_cuda_last_error());
		return 77;
	}
	if (ret)
		return 1;
	pdma_cuda_close(cu);
	if (find_shim(path, sizeof(path))) {
		printf("skipped: libpeerdma_cuda_hooks.so not built (set PEERDMA_CUDA_HOOKS)\n");
		return 77;
	}
	/* The hook library first, as LD_PRELOAD would put it. */
	shim = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
	if (!shim) {
		printf("cannot load %s: %s\n", path, dlerror());
		return 1;
	}
	for (size_t i = 0; !rt && i < sizeof(rts) / sizeof(rts[0]); i++)
		rt = dlopen(rts[i], RTLD_NOW | RTLD_GLOBAL);
	if (!rt) {
		printf("skipped: no CUDA runtime library (libcudart)\n");
		return 77;
	}
	*(void **)&rt_malloc = dlsym(rt, "cudaMalloc");
	*(void **)&rt_malloc_host = dlsym(rt, "cudaMallocHost");
	*(void **)&rt_free = dlsym(rt, "cudaFree");
	*(void **)&hooked_free = dlsym(RTLD_DEFAULT, "cudaFree");
	*(void **)&hooked_free_host = dlsym(RTLD_DEFAULT, "cudaFreeHost");
	*(void **)&shim_calls = dlsym(shim, "pdma_cuda_hooks_calls");
	if (!rt_malloc || !rt_malloc_host || !rt_free || !hooked_free || !hooked_free_host ||
	    !shim_calls) {
		printf("missing CUDA runtime entry points\n");
		return 1;
	}
	/* Opened after the hook library is there: it registers with it. */
	if (pdma_cuda_open(&cu) || pdma_cu_get(&api, NULL, 0))
		return 1;
	ret = cmocka_run_group_tests(tests, NULL, NULL);
	pdma_cuda_close(cu);
	return ret;
}
