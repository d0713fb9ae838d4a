// SPDX-License-Identifier: MIT
/*
 * The cuda memory backend against a real GPU (issue 5): classification of
 * device / host / managed / pinned-host pointers, SYNC_MEMOPS, dma-buf export,
 * sub-allocation and multi-allocation ranges, free + reallocation at the same
 * address caught by both invalidation methods over thousands of rounds, the
 * deallocation hooks, host registration and the GPUDirect attributes.
 * Elsewhere: "skipped: no CUDA device", exit 77.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda/api.h"
#include "mem/cuda.h"
#include "monitor/monitor.h"
#include "cache/region.h"

/* The hooked driver entry points (libpeerdma_cuda_hooks.so, linked in). */
pdma_cu_result cuMemFree_v2(pdma_cu_ptr dptr);
pdma_cu_result cuMemHostUnregister(void *p);
pdma_cu_result cuCtxDestroy_v2(pdma_cu_ctx ctx);

#define MiB (1024u * 1024u)
#define ROUNDS 2000

static struct pdma_cuda *cu;
static const struct pdma_cu_api *api;
static pdma_cu_ctx primary;

#define CU_OK(call) assert_int_equal((call), PDMA_CU_SUCCESS)

static pdma_cu_ptr dalloc(size_t size)
{
	pdma_cu_ptr p = 0;

	CU_OK(api->MemAlloc(&p, size));
	assert_true(p != 0);
	return p;
}

static uint64_t buffer_id(pdma_cu_ptr p)
{
	unsigned long long id = 0;

	CU_OK(api->PointerGetAttribute(&id, PDMA_CU_POINTER_ATTRIBUTE_BUFFER_ID, p));
	return id;
}

static int fd_is_open(int fd)
{
	return fcntl(fd, F_GETFD) != -1;
}

/* ------------------------------------------------------------ attributes */

static void test_device_attributes(void **state)
{
	struct pdma_cuda_dev_info d;
	struct pdma_cuda_stats s0, s1;
	int ret;

	(void)state;
	assert_true(pdma_cuda_device_count(cu) >= 1);
	assert_true(pdma_cuda_driver_version(cu) >= 11070); /* dma-buf export exists */
	assert_int_equal(pdma_cuda_device_info(cu, 0, &d), 0);
	assert_int_equal(pdma_cuda_device_info(cu, pdma_cuda_device_count(cu), &d), -ENODEV);
	assert_int_equal(pdma_cuda_device_info(cu, 0, &d), 0);
	printf("# device 0: %s, PCI %s, cc %d.%d, GPU_DIRECT_RDMA_SUPPORTED=%d DMA_BUF_SUPPORTED=%d "
	       "WRITES_ORDERING=%d FLUSH_OPTIONS=%d VMM_GDR=%d driver %d\n",
	       d.name, d.pci_bus_id, d.cc_major, d.cc_minor, d.gdr_supported, d.dmabuf_supported,
	       d.writes_ordering, d.flush_options, d.vmm_gdr_supported,
	       pdma_cuda_driver_version(cu));
	assert_int_equal(strlen(d.pci_bus_id), 12); /* dddd:bb:dd.f */
	assert_true(d.pci_bus_id[4] == ':' && d.pci_bus_id[7] == ':' && d.pci_bus_id[10] == '.');
	assert_true(d.gdr_supported == 0 || d.gdr_supported == 1);
	assert_true(d.writes_ordering == 0 || d.writes_ordering == 100 || d.writes_ordering == 200);
	/* The flush happens only when the ordering attribute asks for it. */
	pdma_cuda_get_stats(cu, &s0);
	ret = pdma_cuda_flush_rdma_writes(cu, 0);
	pdma_cuda_get_stats(cu, &s1);
	if (d.writes_ordering >= 100) {
		assert_int_equal(ret, 0);
		assert_int_equal(s1.flushes, s0.flushes);
	} else if (d.flush_options & PDMA_CU_FLUSH_GPU_DIRECT_RDMA_WRITES_OPTION_HOST) {
		assert_int_equal(ret, 1);
		assert_int_equal(s1.flushes, s0.flushes + 1);
	} else {
		assert_int_equal(ret, -EOPNOTSUPP);
	}
	assert_int_equal(pdma_cuda_flush_rdma_writes(cu, -1), -ENODEV);
}

/* -------------------------------------------------------- classification */

static void test_classify(void **state)
{
	struct pdma_cuda_ptr_info in;
	struct pdma_mem_alloc al;
	const struct pdma_mem_ops *ops;
	pdma_cu_ptr d = dalloc(3 * MiB + 12345), base = 0, m = 0;
	size_t size = 0;
	void *h = NULL, *plain, *reg;

	(void)state;
	/* Device memory: one call gives kind, ordinal, buffer ID, range. */
	assert_int_equal(pdma_cuda_classify(cu, d + 100, &in), 0);
	assert_int_equal(in.kind, PDMA_CUDA_KIND_DEVICE);
	assert_int_equal(in.device, 0);
	assert_true(in.buffer_id != 0);
	assert_int_equal(in.buffer_id, buffer_id(d));
	CU_OK(api->MemGetAddressRange(&base, &size, d + 100));
	assert_int_equal(in.base, base);
	assert_int_equal(in.size, size);
	assert_int_equal(in.base, d);
	assert_int_equal(in.size, 3 * MiB + 12345);
	assert_int_equal(pdma_cuda_ops_for(cu, d, 1, &ops), 0);
	assert_ptr_equal(ops, &pdma_mem_cuda_ops);
	assert_int_equal(pdma_mem_cuda_ops.query(cu, d + 4096, MiB, &al), 0);
	assert_int_equal(al.base, d);
	assert_int_equal(al.size, 3 * MiB + 12345);
	assert_int_equal(al.buffer_id, in.buffer_id);
	/* A range that leaves the allocation. */
	assert_int_equal(pdma_mem_cuda_ops.query(cu, d + 3 * MiB, 12346, &al), -EFAULT);
	assert_int_equal(pdma_mem_cuda_ops.query(cu, d, 0, &al), -EFAULT);

	/* Managed memory: classified, refused with a clear message. */
	CU_OK(api->MemAllocManaged(&m, 64 * 1024, PDMA_CU_MEM_ATTACH_GLOBAL));
	assert_int_equal(pdma_cuda_classify(cu, m, &in), 0);
	assert_int_equal(in.kind, PDMA_CUDA_KIND_MANAGED);
	assert_int_equal(pdma_mem_cuda_ops.query(cu, m, 4096, &al), -EINVAL);
	assert_non_null(strstr(pdma_cuda_last_error(), "managed"));
	assert_int_equal(pdma_cuda_ops_for(cu, m, 4096, &ops), -EINVAL);
	{
		void *pin = NULL;

		assert_int_equal(pdma_mem_cuda_ops.pin(cu, m, 64 * 1024, NULL, NULL, &pin), -EINVAL);
		assert_null(pin);
		assert_int_equal(pdma_mem_cuda_host_ops.query(cu, m, 4096, &al), -EINVAL);
	}

	/* Page-locked host memory (cuMemAllocHost). */
	CU_OK(api->MemAllocHost(&h, 2 * MiB));
	assert_int_equal(pdma_cuda_classify(cu, (uintptr_t)h + 10, &in), 0);
	assert_int_equal(in.kind, PDMA_CUDA_KIND_HOST);
	assert_true(in.buffer_id != 0);
	assert_int_equal(in.base, (uintptr_t)h);
	assert_int_equal(pdma_mem_cuda_ops.query(cu, (uintptr_t)h, 4096, &al), -EINVAL);
	assert_int_equal(pdma_cuda_ops_for(cu, (uintptr_t)h, 4096, &ops), 0);
	assert_ptr_equal(ops, &pdma_mem_cuda_host_ops);

	/* Plain host memory: unknown to CUDA until registered. */
	plain = aligned_alloc(4096, MiB);
	assert_non_null(plain);
	assert_int_equal(pdma_cuda_classify(cu, (uintptr_t)plain, &in), 0);
	assert_int_equal(in.kind, PDMA_CUDA_KIND_UNKNOWN);
	assert_int_equal(in.device, -1);
	assert_int_equal(pdma_mem_cuda_ops.query(cu, (uintptr_t)plain, 4096, &al), -EFAULT);
	assert_int_equal(pdma_cuda_ops_for(cu, (uintptr_t)plain, 4096, &ops), 0);
	assert_ptr_equal(ops, &pdma_mem_cuda_host_ops);
	reg = aligned_alloc(4096, MiB);
	assert_non_null(reg);
	assert_int_equal(pdma_cuda_host_register(cu, reg, MiB), 0);
	assert_int_equal(pdma_cuda_classify(cu, (uintptr_t)reg + 4096, &in), 0);
	assert_int_equal(in.kind, PDMA_CUDA_KIND_HOST);
	assert_int_equal(pdma_cuda_host_register(cu, reg, MiB), -EEXIST);
	assert_int_equal(pdma_cuda_host_unregister(cu, reg), 0);
	assert_int_equal(pdma_cuda_classify(cu, (uintptr_t)reg, &in), 0);
	assert_int_equal(in.kind, PDMA_CUDA_KIND_UNKNOWN);

	assert_int_equal(pdma_cuda_classify(cu, 0, &in), -EFAULT);
	free(reg);
	free(plain);
	CU_OK(api->MemFreeHost(h));
	CU_OK(api->MemFree(m));
	CU_OK(api->MemFree(d));
}

/* ------------------------------------------------------------ SYNC_MEMOPS */

static void test_sync_memops(void **state)
{
	pdma_cu_ptr d = dalloc(4 * MiB);
	unsigned int sync = 7;
	struct pdma_cuda_stats s0, s1;
	void *p1 = NULL, *p2 = NULL;

	(void)state;
	CU_OK(api->PointerGetAttribute(&sync, PDMA_CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, d));
	assert_int_equal(sync, 0);
	pdma_cuda_get_stats(cu, &s0);
	assert_int_equal(pdma_mem_cuda_ops.pin(cu, d + MiB, MiB, NULL, NULL, &p1), 0);
	sync = 0;
	CU_OK(api->PointerGetAttribute(&sync, PDMA_CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, d));
	assert_int_equal(sync, 1);
	/* Set on the allocation: visible from any address in it. */
	sync = 0;
	CU_OK(api->PointerGetAttribute(&sync, PDMA_CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, d + 3 * MiB));
	assert_int_equal(sync, 1);
	/* Once per allocation: the second pin sets nothing. */
	assert_int_equal(pdma_mem_cuda_ops.pin(cu, d + 2 * MiB, MiB, NULL, NULL, &p2), 0);
	pdma_cuda_get_stats(cu, &s1);
	assert_int_equal(s1.sync_memops, s0.sync_memops + 1);
	assert_int_equal(s1.pins, s0.pins + 2);
	pdma_mem_cuda_ops.unpin(cu, p1);
	pdma_mem_cuda_ops.unpin(cu, p2);
	CU_OK(api->MemFree(d));
}

/* --------------------------------------------------------------- dma-buf */

static void check_dmabuf(pdma_cu_ptr d, size_t alloc_size, uint64_t va, size_t len)
{
	struct pdma_cuda_pin_info pi;
	char link[128], path[64];
	ssize_t n;
	off_t end;
	void *pin = NULL;
	int fd;

	assert_int_equal(pdma_mem_cuda_ops.pin(cu, va, len, NULL, NULL, &pin), 0);
	assert_int_equal(pdma_cuda_pin_info(pin, &pi), 0);
	assert_int_equal(pi.kind, PDMA_CUDA_PIN_DMABUF);
	assert_int_equal(pi.va, va);
	assert_int_equal(pi.len, len);
	assert_int_equal(pi.device, 0);
	assert_int_equal(pi.buffer_id, buffer_id(d));
	assert_int_equal(pi.dmabuf_start, va);
	assert_int_equal(pi.dmabuf_offset, 0);
	assert_false(pi.revoked);
	fd = pi.dmabuf_fd;
	assert_true(fd >= 0);
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, link, sizeof(link) - 1);
	assert_true(n > 0);
	link[n] = 0;
	assert_non_null(strstr(link, "dmabuf"));
	/* A dma-buf's size is what SEEK_END reports. */
	end = lseek(fd, 0, SEEK_END);
	printf("# dma-buf of [+%#llx, %zu) in an allocation of %zu: fd %d (%s), size %lld, exported %zu\n",
	       (unsigned long long)(va - d), len, alloc_size, fd, link, (long long)end, pi.dmabuf_len);
	assert_int_equal((size_t)end, pi.dmabuf_len);
	assert_true(pi.dmabuf_len <= len);
	assert_true(va + pi.dmabuf_len >= d + alloc_size || pi.dmabuf_len == len);
	pdma_mem_cuda_ops.unpin(cu, pin);
	assert_false(fd_is_open(fd)); /* closed on unpin */
}

static void test_dmabuf_export(void **state)
{
	static const size_t sizes[] = { 64 * 1024, MiB + 4096, 16 * MiB, 100000 };
	struct pdma_cuda_dev_info di;

	(void)state;
	assert_int_equal(pdma_cuda_device_info(cu, 0, &di), 0);
	if (!di.dmabuf_supported) {
		printf("# device 0 has no dma-buf support: nv-p2p handles only\n");
		return;
	}
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		pdma_cu_ptr d = dalloc(sizes[i]);
		uint64_t s;
		size_t l;

		/* The whole allocation, rounded out to 64 KiB GPU pages. */
		pdma_page_round(PDMA_CUDA_GPU_PAGE, d, sizes[i], &s, &l);
		assert_int_equal(s, d);
		check_dmabuf(d, sizes[i], s, l);
		/* A sub-range in the middle. */
		if (sizes[i] >= 16 * MiB)
			check_dmabuf(d, sizes[i], d + 4 * MiB, 2 * MiB);
		CU_OK(api->MemFree(d));
	}
	/* Without dma-buf (PEERDMA_CUDA_DMABUF=0): the nv-p2p handle (the VA). */
	{
		pdma_cu_ptr d = dalloc(MiB);
		struct pdma_cuda_pin_info pi;
		void *pin = NULL;

		setenv("PEERDMA_CUDA_DMABUF", "0", 1);
		assert_int_equal(pdma_mem_cuda_ops.pin(cu, d, MiB, NULL, NULL, &pin), 0);
		unsetenv("PEERDMA_CUDA_DMABUF");
		assert_int_equal(pdma_cuda_pin_info(pin, &pi), 0);
		assert_int_equal(pi.kind, PDMA_CUDA_PIN_NVP2P);
		assert_int_equal(pi.dmabuf_fd, -1);
		assert_int_equal(pi.va, d);
		pdma_mem_cuda_ops.unpin(cu, pin);
		CU_OK(api->MemFree(d));
	}
}

/* ------------------------------------------- sub- and multi-allocations */

static void test_sub_and_multi_allocation(void **state)
{
	pdma_cu_ptr a = dalloc(4 * MiB), b = dalloc(4 * MiB), lo, hi;
	struct pdma_region *r1 = NULL, *r2 = NULL, *r3 = NULL;
	struct pdma_cuda_pin_info p1, p2, p3;
	struct pdma_mem_alloc al;
	void *pin = NULL;

	(void)state;
	/* Sub-allocations: two registrations inside one allocation. */
	assert_int_equal(pdma_region_create(&pdma_mem_cuda_ops, cu, PDMA_HMEM_CUDA, a, MiB,
					    buffer_id(a), &r1), 0);
	assert_int_equal(pdma_region_create(&pdma_mem_cuda_ops, cu, PDMA_HMEM_CUDA, a + 2 * MiB,
					    2 * MiB, buffer_id(a), &r2), 0);
	assert_int_equal(pdma_cuda_pin_info(r1->pin, &p1), 0);
	assert_int_equal(pdma_cuda_pin_info(r2->pin, &p2), 0);
	assert_int_equal(p1.buffer_id, p2.buffer_id);
	assert_int_equal(p1.va, a);
	assert_int_equal(p2.va, a + 2 * MiB);
	assert_int_equal(p2.len, 2 * MiB);
	/* Each its own handle. */
	if (p1.kind == PDMA_CUDA_PIN_DMABUF)
		assert_int_not_equal(p1.dmabuf_fd, p2.dmabuf_fd);

	/* Another allocation: its own buffer ID and handle. */
	assert_int_equal(pdma_region_create(&pdma_mem_cuda_ops, cu, PDMA_HMEM_CUDA, b, 4 * MiB,
					    buffer_id(b), &r3), 0);
	assert_int_equal(pdma_cuda_pin_info(r3->pin, &p3), 0);
	assert_int_not_equal(p3.buffer_id, p1.buffer_id);

	/* A range across two allocations is never one registration, even when
	 * they happen to be adjacent. */
	lo = a < b ? a : b;
	hi = a < b ? b : a;
	assert_int_equal(pdma_mem_cuda_ops.query(cu, lo + 3 * MiB, 2 * MiB, &al), -EFAULT);
	assert_int_equal(pdma_mem_cuda_ops.pin(cu, lo + 3 * MiB, 2 * MiB, NULL, NULL, &pin), -EFAULT);
	assert_null(pin);
	printf("# allocations at %#llx and %#llx (gap %lld)\n", (unsigned long long)lo,
	       (unsigned long long)hi, (long long)(hi - lo - 4 * MiB));
	/* Not 64 KiB aligned: refused. */
	assert_int_equal(pdma_mem_cuda_ops.pin(cu, a + 4096, 64 * 1024, NULL, NULL, &pin), -EINVAL);

	/* Freeing a through the hook revokes both of its regions, not b's. */
	CU_OK(cuMemFree_v2(a));
	assert_false(atomic_load(&r1->valid));
	assert_false(atomic_load(&r2->valid));
	assert_true(atomic_load(&r3->valid));
	assert_int_equal(pdma_cuda_pin_info(r1->pin, &p1), 0);
	assert_true(p1.revoked);
	assert_int_equal(p1.dmabuf_fd, -1);
	if (p2.kind == PDMA_CUDA_PIN_DMABUF)
		assert_false(fd_is_open(p2.dmabuf_fd));
	assert_false(pdma_region_dma_begin(r1));
	assert_true(pdma_region_dma_begin(r3));
	pdma_region_dma_end(r3);
	pdma_region_destroy(r1);
	pdma_region_destroy(r2);
	pdma_region_destroy(r3);
	CU_OK(api->MemFree(b));
}

/* --------------------------------------- reallocation at the same address */

/* The mini cache both methods are tested with: one entry per address. */
struct entry {
	pdma_cu_ptr addr;
	uint64_t id;   /* buffer ID when registered */
	int valid;
};

struct hook_seen {
	pdma_cu_ptr addr;
	size_t len;
	int calls;
	int alive_at_notify; /* the allocation still existed when notified */
	struct entry *cache;
	size_t n;
};

static void on_notify(void *arg, enum pdma_hmem_iface iface, uint64_t addr, size_t len)
{
	struct hook_seen *hs = arg;
	unsigned long long id = 0;

	if (iface != PDMA_HMEM_CUDA)
		return;
	hs->calls++;
	hs->addr = addr;
	hs->len = len;
	hs->alive_at_notify =
		api->PointerGetAttribute(&id, PDMA_CU_POINTER_ATTRIBUTE_BUFFER_ID, addr) ==
			PDMA_CU_SUCCESS && id != 0;
	for (size_t i = 0; i < hs->n; i++)
		if (hs->cache[i].valid && hs->cache[i].addr >= addr && hs->cache[i].addr < addr + len)
			hs->cache[i].valid = 0;
}

enum method { M_NONE, M_TAG, M_HOOKS };

/* ROUNDS rounds of: use each of n buffers through the cache, then free one
 * and allocate it again (same size: the driver often hands back the same
 * address with a new buffer ID). A hit whose registration's buffer ID is not
 * the memory's current one is a stale hit. */
static void realloc_rounds(enum method m, int *stale, int *same_addr, int *hits)
{
	enum { N = 8 };
	pdma_cu_ptr buf[N];
	struct entry cache[N];
	struct hook_seen hs = { .cache = cache, .n = N };
	struct pdma_monitor_sub *sub = NULL;

	*stale = *same_addr = *hits = 0;
	memset(cache, 0, sizeof(cache));
	if (m == M_HOOKS)
		assert_int_equal(pdma_monitor_subscribe(on_notify, &hs, &sub), 0);
	for (int i = 0; i < N; i++)
		buf[i] = dalloc(2 * MiB);
	for (int r = 0; r < ROUNDS; r++) {
		int v = r % N;

		for (int i = 0; i < N; i++) {
			uint64_t truth = buffer_id(buf[i]);
			int hit = cache[i].valid && cache[i].addr == buf[i];

			if (hit && m == M_TAG && pdma_cuda_tag_check(cu, buf[i], cache[i].id))
				hit = 0;
			if (hit) {
				(*hits)++;
				if (cache[i].id != truth)
					(*stale)++;
			} else {
				cache[i] = (struct entry){ buf[i], truth, 1 };
			}
		}
		{
			pdma_cu_ptr old = buf[v];

			if (m == M_HOOKS)
				CU_OK(cuMemFree_v2(old));
			else
				CU_OK(api->MemFree(old));
			buf[v] = dalloc(2 * MiB);
			if (buf[v] == old)
				(*same_addr)++;
		}
	}
	for (int i = 0; i < N; i++)
		CU_OK(api->MemFree(buf[i]));
	if (sub)
		pdma_monitor_unsubscribe(sub);
	if (m == M_HOOKS) {
		assert_true(hs.calls >= ROUNDS);
		assert_true(hs.alive_at_notify);
		assert_int_equal(hs.len, 2 * MiB);
	}
}

static void test_realloc_negative_control(void **state)
{
	int stale, same, hits;

	(void)state;
	/* No invalidation at all: the reuse of addresses makes stale hits; this
	 * is what the two methods must prevent (and proves the harness sees it). */
	realloc_rounds(M_NONE, &stale, &same, &hits);
	printf("# no invalidation: %d rounds, %d reallocations at the same address, %d hits, %d STALE\n",
	       ROUNDS, same, hits, stale);
	assert_true(same > 0);
	assert_true(stale > 0);
}

static void test_realloc_tag_check(void **state)
{
	int stale, same, hits;
	struct pdma_cuda_stats s;

	(void)state;
	realloc_rounds(M_TAG, &stale, &same, &hits);
	pdma_cuda_get_stats(cu, &s);
	printf("# tag check: %d rounds, %d same-address reallocations, %d hits, %d stale (refused %llu)\n",
	       ROUNDS, same, hits, stale, (unsigned long long)s.tag_stale);
	assert_true(same > 0);
	assert_true(hits > 0);
	assert_int_equal(stale, 0);
	assert_true(s.tag_stale >= (uint64_t)same);
}

static void test_realloc_hooks(void **state)
{
	int stale, same, hits;
	uint64_t h0 = pdma_cuda_hooks_count();

	(void)state;
	realloc_rounds(M_HOOKS, &stale, &same, &hits);
	printf("# hooks: %d rounds, %d same-address reallocations, %d hits, %d stale, %llu hook calls\n",
	       ROUNDS, same, hits, stale, (unsigned long long)(pdma_cuda_hooks_count() - h0));
	assert_true(same > 0);
	assert_true(hits > 0);
	assert_int_equal(stale, 0);
	assert_true(pdma_cuda_hooks_count() - h0 >= ROUNDS);
}

/* Tag check on one reallocation, exactly. */
static void test_tag_check_exact(void **state)
{
	pdma_cu_ptr d = dalloc(2 * MiB), d2;
	uint64_t id = buffer_id(d), id2;
	int tries = 0;

	(void)state;
	assert_int_equal(pdma_cuda_tag_check(cu, d, id), 0);
	assert_int_equal(pdma_cuda_tag_check(cu, d + MiB, id), 0);
	assert_int_equal(pdma_cuda_tag_check(cu, d, id + 1), -ESTALE);
	do {
		pdma_cu_ptr prev = d;

		CU_OK(api->MemFree(d));
		/* Freed: stale even before any reallocation. */
		assert_int_equal(pdma_cuda_tag_check(cu, prev, id), -ESTALE);
		d2 = dalloc(2 * MiB);
		d = d2;
		if (d2 == prev)
			break;
		id = buffer_id(d);
	} while (++tries < 100);
	assert_true(tries < 100);
	id2 = buffer_id(d2);
	assert_int_not_equal(id2, id);
	assert_int_equal(pdma_cuda_tag_check(cu, d2, id), -ESTALE);
	assert_int_equal(pdma_cuda_tag_check(cu, d2, id2), 0);
	CU_OK(api->MemFree(d2));
}

/* ------------------------------------------------------------------ hooks */

static int revoked_calls;
static int revoke_saw_alive;
static pdma_cu_ptr revoke_addr;

static void on_revoke(void *arg)
{
	unsigned long long id = 0;

	(void)arg;
	revoked_calls++;
	revoke_saw_alive = api->PointerGetAttribute(&id, PDMA_CU_POINTER_ATTRIBUTE_BUFFER_ID,
						    revoke_addr) == PDMA_CU_SUCCESS;
}

static void test_hook_revokes_before_free(void **state)
{
	pdma_cu_ptr d = dalloc(8 * MiB);
	struct pdma_cuda_pin_info pi;
	struct pdma_cuda_stats s0, s1;
	void *pin = NULL;

	(void)state;
	revoked_calls = 0;
	revoke_addr = d;
	pdma_cuda_get_stats(cu, &s0);
	assert_int_equal(pdma_mem_cuda_ops.pin(cu, d + MiB, 2 * MiB, on_revoke, NULL, &pin), 0);
	CU_OK(cuMemFree_v2(d));
	assert_int_equal(revoked_calls, 1);
	assert_true(revoke_saw_alive); /* revoked BEFORE the driver released it */
	assert_int_equal(pdma_cuda_pin_info(pin, &pi), 0);
	assert_true(pi.revoked);
	assert_int_equal(pi.dmabuf_fd, -1);
	pdma_cuda_get_stats(cu, &s1);
	assert_int_equal(s1.revoked, s0.revoked + 1);
	/* A second free of the same pointer fails in the driver and revokes nothing. */
	assert_int_not_equal(cuMemFree_v2(d), PDMA_CU_SUCCESS);
	assert_int_equal(revoked_calls, 1);
	pdma_mem_cuda_ops.unpin(cu, pin); /* after revocation: only frees */
}

/* Between a hook's start and the driver's return, no pin of that memory. */
static void test_release_lockout(void **state)
{
	pdma_cu_ptr d = dalloc(4 * MiB);
	struct pdma_cuda_release rel;
	void *pin = NULL;

	(void)state;
	pdma_cuda_release_begin(&rel, d, 4 * MiB);
	assert_int_equal(pdma_mem_cuda_ops.pin(cu, d, 2 * MiB, NULL, NULL, &pin), -EFAULT);
	assert_null(pin);
	pdma_cuda_release_end(&rel);
	assert_int_equal(pdma_mem_cuda_ops.pin(cu, d, 2 * MiB, NULL, NULL, &pin), 0);
	pdma_mem_cuda_ops.unpin(cu, pin);
	CU_OK(api->MemFree(d));
}

static void test_hook_context_destroy(void **state)
{
	pdma_cu_ctx c = NULL, cur = NULL;
	pdma_cu_ptr d;
	void *pin = NULL;
	struct pdma_cuda_pin_info pi;

	(void)state;
	if (!api->CtxCreate) {
		printf("# cuCtxCreate_v2 not exported by this driver: context hook not exercised\n");
		return;
	}
	CU_OK(api->CtxCreate(&c, 0, 0));
	CU_OK(api->CtxGetCurrent(&cur));
	assert_ptr_equal(cur, c);
	d = dalloc(2 * MiB);
	revoked_calls = 0;
	revoke_addr = d;
	assert_int_equal(pdma_mem_cuda_ops.pin(cu, d, 2 * MiB, on_revoke, NULL, &pin), 0);
	CU_OK(cuCtxDestroy_v2(c));
	assert_int_equal(revoked_calls, 1);
	assert_true(revoke_saw_alive);
	assert_int_equal(pdma_cuda_pin_info(pin, &pi), 0);
	assert_true(pi.revoked);
	pdma_mem_cuda_ops.unpin(cu, pin);
	CU_OK(api->CtxSetCurrent(primary));
}

static void test_monitor_mode(void **state)
{
	(void)state;
	/* This test links the hook library (PDMA_HOOKED_TESTS) and no libcudart:
	 * the process-wide lookup of cuMemFree_v2 and cudaFree reaches it, so
	 * auto trusts the hooks for the allocations they saw made. */
	unsetenv("PEERDMA_CUDA_MONITOR");
	assert_true(pdma_cuda_hooks_installed());
	assert_int_equal(pdma_cuda_monitor_mode(), PDMA_CUDA_MON_AUTO);
	setenv("PEERDMA_CUDA_MONITOR", "hooks", 1);
	assert_int_equal(pdma_cuda_monitor_mode(), PDMA_CUDA_MON_HOOKS);
	setenv("PEERDMA_CUDA_MONITOR", "tag", 1);
	assert_int_equal(pdma_cuda_monitor_mode(), PDMA_CUDA_MON_TAG);
	unsetenv("PEERDMA_CUDA_MONITOR");
}

/* ---------------------------------------------------------- host memory */

static void test_host_pins(void **state)
{
	void *plain = aligned_alloc(4096, 4 * MiB), *h = NULL, *pin = NULL;
	struct pdma_cuda_ptr_info in;
	struct pdma_cuda_pin_info pi;
	struct pdma_mem_alloc al;

	(void)state;
	assert_non_null(plain);
	/* Plain host memory: pin = cuMemHostRegister; unpin unregisters. */
	assert_int_equal(pdma_mem_cuda_host_ops.query(cu, (uintptr_t)plain + 100, 5000, &al), 0);
	assert_int_equal(al.base, (uintptr_t)plain);
	assert_int_equal(al.size, 8192);
	assert_int_equal(pdma_mem_cuda_host_ops.pin(cu, (uintptr_t)plain, 4 * MiB, NULL, NULL, &pin),
			 0);
	assert_int_equal(pdma_cuda_pin_info(pin, &pi), 0);
	assert_int_equal(pi.kind, PDMA_CUDA_PIN_HOST_REGISTERED);
	assert_int_equal(pdma_cuda_classify(cu, (uintptr_t)plain + MiB, &in), 0);
	assert_int_equal(in.kind, PDMA_CUDA_KIND_HOST);
	/* The GPU can reach it: copy through it. */
	{
		pdma_cu_ptr d = dalloc(MiB);

		memset(plain, 0x5a, MiB);
		CU_OK(api->MemcpyHtoD(d, plain, MiB));
		memset(plain, 0, MiB);
		CU_OK(api->MemcpyDtoH(plain, d, MiB));
		assert_int_equal(((unsigned char *)plain)[MiB - 1], 0x5a);
		CU_OK(api->MemFree(d));
	}
	pdma_mem_cuda_host_ops.unpin(cu, pin);
	assert_int_equal(pdma_cuda_classify(cu, (uintptr_t)plain, &in), 0);
	assert_int_equal(in.kind, PDMA_CUDA_KIND_UNKNOWN);
	/* Not page-aligned: refused. */
	assert_int_equal(pdma_mem_cuda_host_ops.pin(cu, (uintptr_t)plain + 8, 4096, NULL, NULL, &pin),
			 -EINVAL);

	/* Registered host memory unregistered by the application: the hook
	 * revokes our pin first. */
	assert_int_equal(pdma_cuda_host_register(cu, plain, 4 * MiB), 0);
	revoked_calls = 0;
	revoke_addr = (uintptr_t)plain;
	assert_int_equal(pdma_mem_cuda_host_ops.pin(cu, (uintptr_t)plain, MiB, on_revoke, NULL, &pin),
			 0);
	assert_int_equal(pdma_cuda_pin_info(pin, &pi), 0);
	assert_int_equal(pi.kind, PDMA_CUDA_PIN_HOST_CUDA);
	CU_OK(cuMemHostUnregister(plain));
	assert_int_equal(revoked_calls, 1);
	assert_true(revoke_saw_alive);
	pdma_mem_cuda_host_ops.unpin(cu, pin);
	free(plain);

	/* cuMemAllocHost memory: already page-locked, pin leaves it so. */
	CU_OK(api->MemAllocHost(&h, MiB));
	assert_int_equal(pdma_mem_cuda_host_ops.pin(cu, (uintptr_t)h, MiB, NULL, NULL, &pin), 0);
	assert_int_equal(pdma_cuda_pin_info(pin, &pi), 0);
	assert_int_equal(pi.kind, PDMA_CUDA_PIN_HOST_CUDA);
	pdma_mem_cuda_host_ops.unpin(cu, pin);
	assert_int_equal(pdma_cuda_classify(cu, (uintptr_t)h, &in), 0);
	assert_int_equal(in.kind, PDMA_CUDA_KIND_HOST);
	CU_OK(api->MemFreeHost(h));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_device_attributes),
		cmocka_unit_test(test_classify),
		cmocka_unit_test(test_sync_memops),
		cmocka_unit_test(test_dmabuf_export),
		cmocka_unit_test(test_sub_and_multi_allocation),
		cmocka_unit_test(test_tag_check_exact),
		cmocka_unit_test(test_realloc_negative_control),
		cmocka_unit_test(test_realloc_tag_check),
		cmocka_unit_test(test_realloc_hooks),
		cmocka_unit_test(test_hook_revokes_before_free),
		cmocka_unit_test(test_release_lockout),
		cmocka_unit_test(test_hook_context_destroy),
		cmocka_unit_test(test_monitor_mode),
		cmocka_unit_test(test_host_pins),
	};
	int ret = pdma_cuda_open(&cu);

	if (ret == -ENODEV) {
		printf("skipped: no CUDA device (%s)\n", pdma_cuda_last_error());
		return 77;
	}
	if (ret) {
		printf("pdma_cuda_open: %d %s\n", ret, pdma_cuda_last_error());
		return 1;
	}
	assert_int_equal(pdma_cu_get(&api, NULL, 0), 0);
	if (api->DevicePrimaryCtxRetain(&primary, 0) != PDMA_CU_SUCCESS ||
	    api->CtxSetCurrent(primary) != PDMA_CU_SUCCESS) {
		printf("cannot make device 0's primary context current\n");
		return 1;
	}
	ret = cmocka_run_group_tests(tests, NULL, NULL);
	api->DevicePrimaryCtxRelease(0);
	pdma_cuda_close(cu);
	return ret;
}
