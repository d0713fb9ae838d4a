// SPDX-License-Identifier: MIT
/*
 * Every way device memory leaves the process, through the public API with the
 * registration cache on and the hook library in place (linked, as
 * LD_PRELOAD loads it: tests/CMakeLists.txt, PDMA_HOOKED_TESTS), in the
 * default `auto` mode, over the fake driver (support/fake_cuda.c):
 *  - an IPC mapping closed with cuIpcCloseMemHandle, then another process's
 *    allocation opened at the same address;
 *  - a VMM mapping unmapped with cuMemUnmap and a new one mapped at the same
 *    virtual address;
 *  - a context destroyed, and new memory at the same address;
 *  - each of these where the way out passes by the hooks (a program that
 *    fetched the driver function with cuGetProcAddress, or an older hook
 *    library): `auto` must still never hand out the old region.
 * The registration after the change must be a fresh one: a new pin (a new
 * dma-buf export) whose buffer ID is the new memory's.
 * And what `auto` trusts: allocations the hooks saw made (cuMemAlloc_v2) hit
 * without a driver call; the hooks' list of them (lib/hooks/seen.c) under
 * many allocations and frees.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>

#include "cache/cache.h"
#include "mr/domain.h"
#include "support/fake_cuda.h"

/* The hooked entry points (lib/hooks/driver.c, in libpeerdma_cuda_hooks.so). */
pdma_cu_result cuMemAlloc_v2(pdma_cu_ptr *dptr, size_t size);
pdma_cu_result cuMemFree_v2(pdma_cu_ptr dptr);
pdma_cu_result cuMemUnmap(pdma_cu_ptr ptr, size_t size);
pdma_cu_result cuCtxDestroy_v2(pdma_cu_ctx ctx);
pdma_cu_result cuIpcCloseMemHandle(pdma_cu_ptr dptr);

#define VA 0x7f4000000000ull

/* A domain with the cache on, in the default mode (auto: the hooks are
 * detected, being linked in). */
static struct pdma_domain *dom(void)
{
	struct pdma_domain_attr da;
	struct pdma_domain *d;
	struct pdma_cache_stats st;

	unsetenv("PEERDMA_CUDA_MONITOR");
	unsetenv("PEERDMA_MR_CUDA_CACHE_TAG_CHECK");
	pdma_domain_attr_init(&da);
	da.mr_mode |= PDMA_MR_HMEM;
	da.use_cache = 1;
	assert_int_equal(pdma_domain_open(&da, &d), 0);
	pdma_cache_get_stats(d->cache, &st);
	assert_int_equal(st.mode[PDMA_HMEM_CUDA], PDMA_CACHE_MODE_TRUST_WATCHED);
	return d;
}

/* Register [p, p + len) as CUDA memory; the buffer ID its region was pinned
 * with. */
static uint64_t reg(struct pdma_domain *d, uint64_t p, size_t len, struct pdma_mr **m)
{
	struct iovec iov = { (void *)(uintptr_t)p, len };
	struct pdma_mr_attr a = { .mr_iov = &iov, .iov_count = 1, .access = PDMA_REMOTE_WRITE,
				  .iface = PDMA_HMEM_CUDA };

	assert_int_equal(pdma_mr_regattr(d, &a, 0, m), 0);
	assert_int_equal((*m)->nsegs, 1);
	return (*m)->segs[0].region->buffer_id;
}

static uint64_t stale_rejected(struct pdma_domain *d)
{
	struct pdma_cache_stats st;

	pdma_cache_get_stats(d->cache, &st);
	return st.stale_rejected;
}

/* Open an IPC handle to an allocation of size bytes "of another process" at
 * VA (the fake maps every open there). */
static struct falloc *ipc_open(size_t size)
{
	struct falloc exporter = { .size = size };
	pdma_cu_ptr p = 0;

	F.alloc_at = VA;
	assert_int_equal(fake_api.IpcOpenMemHandle(&p, fake_ipc_handle(&exporter),
						   PDMA_CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
			 PDMA_CU_SUCCESS);
	assert_int_equal(p, VA);
	return ffind(p);
}

/* The IPC close goes through the hook (hooked) or straight to the driver. */
static void ipc_close_then_reopen(bool hooked)
{
	struct pdma_domain *d = dom();
	struct falloc *a = ipc_open(2 * MiB), *b;
	uint64_t id_a = a->id, rej = stale_rejected(d);
	struct pdma_mr *m;

	assert_int_equal(reg(d, VA, MiB, &m), id_a);
	assert_int_equal(F.exports, 1);
	assert_int_equal(pdma_mr_close(m), 0);
	/* The same mapping again: a hit (verified by buffer ID: the hooks did
	 * not see this memory made). */
	assert_int_equal(reg(d, VA, MiB, &m), id_a);
	assert_int_equal(F.exports, 1);
	assert_int_equal(pdma_mr_close(m), 0);

	if (hooked)
		assert_int_equal(cuIpcCloseMemHandle(VA), PDMA_CU_SUCCESS);
	else
		assert_int_equal(fake_api.IpcCloseMemHandle(VA), PDMA_CU_SUCCESS);
	assert_int_equal(F.ipc_closes, 1);
	/* Another allocation of the exporter, mapped at the same address. */
	b = ipc_open(2 * MiB);
	assert_int_not_equal(b->id, id_a);
	assert_int_equal(reg(d, VA, MiB, &m), b->id);
	assert_int_equal(F.exports, 2); /* a fresh pin, not the old region */
	/* Hooked, the close dropped the region; unhooked, the buffer-ID check
	 * turned the old region away. */
	assert_int_equal(stale_rejected(d), rej + (hooked ? 0 : 1));
	assert_int_equal(pdma_mr_close(m), 0);
	assert_int_equal(pdma_domain_close(d), 0);
}

static void test_ipc_close_hooked(void **state)
{
	(void)state;
	ipc_close_then_reopen(true);
}

static void test_ipc_close_unhooked(void **state)
{
	(void)state;
	ipc_close_then_reopen(false);
}

/* VMM: a mapping unmapped (through the hook, or past it) and a new physical
 * allocation mapped at the same virtual address. */
static void vmm_unmap_then_remap(bool hooked)
{
	struct pdma_domain *d = dom();
	struct falloc *a = fake_vmm_map(VA, 4 * MiB), *b;
	uint64_t id_a = a->id;
	struct pdma_mr *m;

	assert_int_equal(reg(d, VA + MiB, MiB, &m), id_a);
	assert_int_equal(pdma_mr_close(m), 0);
	assert_int_equal(reg(d, VA + MiB, MiB, &m), id_a);
	assert_int_equal(F.exports, 1);
	assert_int_equal(pdma_mr_close(m), 0);
	if (hooked)
		assert_int_equal(cuMemUnmap(VA, 4 * MiB), PDMA_CU_SUCCESS);
	else
		assert_int_equal(fake_api.MemUnmap(VA, 4 * MiB), PDMA_CU_SUCCESS);
	assert_int_equal(F.unmaps, 1);
	/* cuMemRelease of the old handle changes nothing mapped; cuMemCreate +
	 * cuMemMap of a new one at the same address: */
	b = fake_vmm_map(VA, 4 * MiB);
	assert_int_equal(reg(d, VA + MiB, MiB, &m), b->id);
	assert_int_equal(F.exports, 2);
	assert_int_equal(pdma_mr_close(m), 0);
	assert_int_equal(pdma_domain_close(d), 0);
}

static void test_vmm_unmap_hooked(void **state)
{
	(void)state;
	vmm_unmap_then_remap(true);
}

static void test_vmm_unmap_unhooked(void **state)
{
	(void)state;
	vmm_unmap_then_remap(false);
}

/* Memory the hooks saw made (cuMemAlloc_v2) in context c: trusted (a hit
 * costs no driver call) until the context is destroyed; then new memory at
 * the same address is a fresh registration. */
static void test_context_destroy(void **state)
{
	pdma_cu_ctx c = (pdma_cu_ctx)(uintptr_t)0x5555;
	struct pdma_domain *d = dom();
	struct pdma_mr *m;
	pdma_cu_ptr p = 0;
	uint64_t id_a;
	int calls;

	(void)state;
	F.current = c;
	F.alloc_at = VA;
	assert_int_equal(cuMemAlloc_v2(&p, 2 * MiB), PDMA_CU_SUCCESS);
	F.current = NULL;
	id_a = ffind(p)->id;
	assert_true(pdma_cuda_alloc_seen(VA, id_a));
	assert_int_equal(reg(d, VA, MiB, &m), id_a);
	assert_int_equal(pdma_mr_close(m), 0);
	calls = F.attr_calls;
	assert_int_equal(reg(d, VA, MiB, &m), id_a);
	assert_int_equal(F.attr_calls, calls); /* trusted: no driver call */
	assert_int_equal(F.exports, 1);
	assert_int_equal(pdma_mr_close(m), 0);

	assert_int_equal(cuCtxDestroy_v2(c), PDMA_CU_SUCCESS);
	assert_null(ffind(VA));
	/* The hooks forgot what they saw (not knowing which was c's). */
	assert_false(pdma_cuda_alloc_seen(VA, id_a));
	/* New memory at the same address, in another context. */
	assert_int_equal(cuMemAlloc_v2(&p, 2 * MiB), PDMA_CU_SUCCESS);
	assert_int_equal(p, VA);
	assert_int_equal(reg(d, VA, MiB, &m), ffind(VA)->id);
	assert_int_equal(F.exports, 2);
	assert_int_equal(pdma_mr_close(m), 0);
	assert_int_equal(pdma_domain_close(d), 0);
}

/* A free the hooks saw takes the allocation off their list. A free past
 * them (a cuMemFree_v2 fetched with dlsym from libcuda's own handle or with
 * cuGetProcAddress) leaves its entry behind, but memory mapped at that
 * address next has another buffer ID, so the list never vouches for it.
 * (A region cached for the listed allocation is not dropped by such a free:
 * the one case `auto` cannot catch; lib/hooks/driver.c.) */
static void test_seen_free_then_unseen(void **state)
{
	struct pdma_domain *d = dom();
	struct pdma_mr *m;
	pdma_cu_ptr p = 0;
	struct falloc *b;
	uint64_t id_a;
	int calls;

	(void)state;
	F.alloc_at = VA;
	assert_int_equal(cuMemAlloc_v2(&p, 2 * MiB), PDMA_CU_SUCCESS);
	id_a = ffind(VA)->id;
	assert_true(pdma_cuda_alloc_seen(VA, id_a));
	assert_int_equal(cuMemFree_v2(VA), PDMA_CU_SUCCESS);
	assert_false(pdma_cuda_alloc_seen(VA, id_a));

	assert_int_equal(cuMemAlloc_v2(&p, 2 * MiB), PDMA_CU_SUCCESS);
	id_a = ffind(VA)->id;
	assert_int_equal(fake_api.MemFree(VA), PDMA_CU_SUCCESS); /* past the hooks */
	assert_true(pdma_cuda_alloc_seen(VA, id_a));             /* left behind */
	b = ipc_open(2 * MiB);
	assert_false(pdma_cuda_alloc_seen(VA, b->id));
	/* So the new mapping's region is verified on every hit. */
	assert_int_equal(reg(d, VA, MiB, &m), b->id);
	assert_int_equal(pdma_mr_close(m), 0);
	calls = F.attr_calls;
	assert_int_equal(reg(d, VA, MiB, &m), b->id);
	assert_true(F.attr_calls > calls);
	assert_int_equal(F.exports, 1);
	assert_int_equal(pdma_mr_close(m), 0);
	assert_int_equal(cuIpcCloseMemHandle(VA), PDMA_CU_SUCCESS);
	assert_int_equal(pdma_domain_close(d), 0);
}

/* The hooks' list over many allocations and frees at colliding addresses
 * (linear probing with backward-shift deletion: every entry stays
 * findable after its neighbours leave). */
static void test_seen_list(void **state)
{
	uint64_t ids[24];
	pdma_cu_ptr p;

	(void)state;
	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < 24; i++) {
			F.alloc_at = VA + (uint64_t)i * 2 * MiB;
			assert_int_equal(cuMemAlloc_v2(&p, 2 * MiB), PDMA_CU_SUCCESS);
			ids[i] = ffind(p)->id;
		}
		for (int i = round % 2; i < 24; i += 2)
			assert_int_equal(cuMemFree_v2(VA + (uint64_t)i * 2 * MiB), PDMA_CU_SUCCESS);
		for (int i = 0; i < 24; i++) {
			uint64_t a = VA + (uint64_t)i * 2 * MiB;
			bool freed = i % 2 == round % 2;

			assert_int_equal(pdma_cuda_alloc_seen(a, ids[i]), !freed);
			assert_false(pdma_cuda_alloc_seen(a, ids[i] + 1000));
		}
		for (int i = 1 - round % 2; i < 24; i += 2)
			assert_int_equal(cuMemFree_v2(VA + (uint64_t)i * 2 * MiB), PDMA_CU_SUCCESS);
		for (int i = 0; i < 24; i++)
			assert_false(pdma_cuda_alloc_seen(VA + (uint64_t)i * 2 * MiB, ids[i]));
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_ipc_close_hooked, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ipc_close_unhooked, setup, teardown),
		cmocka_unit_test_setup_teardown(test_vmm_unmap_hooked, setup, teardown),
		cmocka_unit_test_setup_teardown(test_vmm_unmap_unhooked, setup, teardown),
		cmocka_unit_test_setup_teardown(test_context_destroy, setup, teardown),
		cmocka_unit_test_setup_teardown(test_seen_free_then_unseen, setup, teardown),
		cmocka_unit_test_setup_teardown(test_seen_list, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
