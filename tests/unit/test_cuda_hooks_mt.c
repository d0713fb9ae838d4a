// SPDX-License-Identifier: MIT
/*
 * The cuda backend under concurrency (TSan target, label "threads"): worker
 * threads pin, use (DMA sections) and unpin regions of GPU allocations while
 * another thread frees and reallocates those allocations at the same
 * addresses through the interposed cuMemFree_v2. Against a fake, thread-safe
 * driver table. Checks: no region is usable after its memory was freed (a DMA
 * section that began is never on freed memory), every dma-buf fd is closed
 * exactly once (no fd left open at the end), the counters add up.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda/api.h"
#include "mem/cuda.h"
#include "cache/region.h"

pdma_cu_result cuMemFree_v2(pdma_cu_ptr dptr);

#define NALLOC 8
#define ASIZE (2u * 1024 * 1024)
#define BASE 0x7f0000000000ull
#define WORKERS 3
#define ROUNDS 400

static pthread_mutex_t lk = PTHREAD_MUTEX_INITIALIZER;
static struct {
	uint64_t id;   /* 0: freed */
	int sync;
} al[NALLOC];
static uint64_t next_id;
static _Thread_local pdma_cu_ctx cur;
static atomic_int exports, frees, freed_while_in_dma;
static atomic_int in_dma[NALLOC];

static int slot(pdma_cu_ptr p)
{
	if (p < BASE || p >= BASE + (uint64_t)NALLOC * 4 * ASIZE)
		return -1;
	if ((p - BASE) % (4 * ASIZE) >= ASIZE)
		return -1;
	return (int)((p - BASE) / (4 * ASIZE));
}

static pdma_cu_result f_ok(unsigned int f)
{
	(void)f;
	return 0;
}
static pdma_cu_result f_count(int *n)
{
	*n = 1;
	return 0;
}
static pdma_cu_result f_name(char *n, int len, pdma_cu_device d)
{
	snprintf(n, (size_t)len, "Fake %d", d);
	return 0;
}
static pdma_cu_result f_attr(int *v, int a, pdma_cu_device d)
{
	(void)d;
	*v = a == PDMA_CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED ? 1 : 0;
	return 0;
}
static pdma_cu_result f_retain(pdma_cu_ctx *c, pdma_cu_device d)
{
	*c = (pdma_cu_ctx)(uintptr_t)(0x1000 + d);
	return 0;
}
static pdma_cu_result f_release(pdma_cu_device d)
{
	(void)d;
	return 0;
}
static pdma_cu_result f_getcur(pdma_cu_ctx *c)
{
	*c = cur;
	return 0;
}
static pdma_cu_result f_push(pdma_cu_ctx c)
{
	cur = c;
	return 0;
}
static pdma_cu_result f_pop(pdma_cu_ctx *c)
{
	*c = cur;
	cur = NULL;
	return 0;
}
static pdma_cu_result f_errname(pdma_cu_result e, const char **s)
{
	(void)e;
	*s = "CUDA_ERROR_FAKE";
	return 0;
}

static void fill(int s, int attr, void *data)
{
	int live = s >= 0 && al[s].id;

	switch (attr) {
	case PDMA_CU_POINTER_ATTRIBUTE_MEMORY_TYPE: *(unsigned *)data = live ? 2 : 0; break;
	case PDMA_CU_POINTER_ATTRIBUTE_IS_MANAGED: *(unsigned *)data = 0; break;
	case PDMA_CU_POINTER_ATTRIBUTE_BUFFER_ID: *(unsigned long long *)data = live ? al[s].id : 0; break;
	case PDMA_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data = live ? 0 : -2; break;
	case PDMA_CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: *(unsigned *)data = live ? (unsigned)al[s].sync : 0; break;
	case PDMA_CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
		*(pdma_cu_ptr *)data = live ? BASE + (uint64_t)s * 4 * ASIZE : 0;
		break;
	case PDMA_CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data = live ? ASIZE : 0; break;
	case PDMA_CU_POINTER_ATTRIBUTE_CONTEXT: *(pdma_cu_ctx *)data = NULL; break;
	}
}

static pdma_cu_result f_getattrs(unsigned int n, int *attrs, void **data, pdma_cu_ptr p)
{
	pthread_mutex_lock(&lk);
	for (unsigned int i = 0; i < n; i++)
		fill(slot(p), attrs[i], data[i]);
	pthread_mutex_unlock(&lk);
	return 0;
}
static pdma_cu_result f_getattr(void *data, int attr, pdma_cu_ptr p)
{
	int s = slot(p), r = 0;

	pthread_mutex_lock(&lk);
	if (s < 0 || !al[s].id)
		r = PDMA_CU_ERROR_INVALID_VALUE;
	else
		fill(s, attr, data);
	pthread_mutex_unlock(&lk);
	return r;
}
static pdma_cu_result f_setattr(const void *v, int attr, pdma_cu_ptr p)
{
	int s = slot(p), r = 0;

	(void)v;
	(void)attr;
	pthread_mutex_lock(&lk);
	if (s < 0 || !al[s].id)
		r = PDMA_CU_ERROR_INVALID_VALUE;
	else
		al[s].sync = 1;
	pthread_mutex_unlock(&lk);
	return r;
}
static pdma_cu_result f_export(void *h, pdma_cu_ptr p, size_t size, int type,
			       unsigned long long flags)
{
	int s = slot(p), r = 0;

	(void)size;
	(void)type;
	(void)flags;
	pthread_mutex_lock(&lk);
	if (s < 0 || !al[s].id) {
		r = PDMA_CU_ERROR_INVALID_VALUE;
	} else {
		*(int *)h = open("/dev/null", O_RDONLY | O_CLOEXEC);
		atomic_fetch_add(&exports, 1);
	}
	pthread_mutex_unlock(&lk);
	return r;
}
static pdma_cu_result f_free(pdma_cu_ptr p)
{
	int s = slot(p), r = 0;

	pthread_mutex_lock(&lk);
	if (s < 0 || !al[s].id) {
		r = PDMA_CU_ERROR_INVALID_VALUE;
	} else {
		/* The hooks revoked every region first, which waited for the
		 * DMA sections in flight: none may be running now. */
		if (atomic_load(&in_dma[s]))
			atomic_fetch_add(&freed_while_in_dma, 1);
		al[s].id = 0;
		al[s].sync = 0;
		atomic_fetch_add(&frees, 1);
	}
	pthread_mutex_unlock(&lk);
	return r;
}

static struct pdma_cu_api fake = {
	.Init = f_ok, .GetErrorName = f_errname, .DeviceGetCount = f_count,
	.DeviceGetName = f_name, .DeviceGetPCIBusId = f_name, .DeviceGetAttribute = f_attr,
	.DevicePrimaryCtxRetain = f_retain, .DevicePrimaryCtxRelease = f_release,
	.CtxGetCurrent = f_getcur, .CtxPushCurrent = f_push, .CtxPopCurrent = f_pop,
	.PointerGetAttributes = f_getattrs, .PointerGetAttribute = f_getattr,
	.PointerSetAttribute = f_setattr, .MemGetHandleForAddressRange = f_export,
	.MemFree = f_free,
};

static struct pdma_cuda *cu;
static atomic_int stop, pinned, used, refused, stale_use;

static void *worker(void *arg)
{
	unsigned seed = (unsigned)(uintptr_t)arg;

	while (!atomic_load(&stop)) {
		int s = (int)(rand_r(&seed) % NALLOC);
		uint64_t a = BASE + (uint64_t)s * 4 * ASIZE;
		struct pdma_region *r = NULL;

		if (pdma_region_create(&pdma_mem_cuda_ops, cu, PDMA_HMEM_CUDA, a, ASIZE, 0, &r)) {
			atomic_fetch_add(&refused, 1); /* freed in between: -EFAULT */
			continue;
		}
		atomic_fetch_add(&pinned, 1);
		for (int k = 0; k < 64; k++) {
			struct pdma_cuda_pin_info pi;
			uint64_t now;

			if (!pdma_region_dma_begin(r))
				break;
			atomic_fetch_add(&in_dma[s], 1);
			/* Inside a DMA section the memory is the one pinned. */
			assert_int_equal(pdma_cuda_pin_info(r->pin, &pi), 0);
			pthread_mutex_lock(&lk);
			now = al[s].id;
			pthread_mutex_unlock(&lk);
			if (now != pi.buffer_id)
				atomic_fetch_add(&stale_use, 1);
			atomic_fetch_add(&used, 1);
			atomic_fetch_sub(&in_dma[s], 1);
			pdma_region_dma_end(r);
			sched_yield();
		}
		pdma_region_destroy(r);
	}
	return NULL;
}

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	int n = 0;

	if (!d)
		return -1;
	while ((de = readdir(d)))
		n += de->d_name[0] != '.';
	closedir(d);
	return n;
}

static void test_free_races_pins(void **state)
{
	pthread_t th[WORKERS];
	struct pdma_cuda_stats st;
	int fds0;

	(void)state;
	for (int i = 0; i < NALLOC; i++)
		al[i].id = ++next_id;
	pdma_cu_set_api_for_testing(&fake);
	assert_int_equal(pdma_cuda_open(&cu), 0);
	fds0 = count_fds();
	for (int i = 0; i < WORKERS; i++)
		assert_int_equal(pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)(i + 1)), 0);
	for (int r = 0; r < ROUNDS; r++) {
		int s = r % NALLOC;

		assert_int_equal(cuMemFree_v2(BASE + (uint64_t)s * 4 * ASIZE), 0);
		pthread_mutex_lock(&lk);
		al[s].id = ++next_id; /* reallocated at the same address */
		pthread_mutex_unlock(&lk);
		usleep(50);
	}
	atomic_store(&stop, 1);
	for (int i = 0; i < WORKERS; i++)
		pthread_join(th[i], NULL);
	pdma_cuda_get_stats(cu, &st);
	printf("# %d pins, %d DMA sections, %d refused, %d frees, %llu revoked, %d exports\n",
	       atomic_load(&pinned), atomic_load(&used), atomic_load(&refused),
	       atomic_load(&frees), (unsigned long long)st.revoked, atomic_load(&exports));
	assert_int_equal(atomic_load(&frees), ROUNDS);
	assert_int_equal(atomic_load(&freed_while_in_dma), 0);
	assert_int_equal(atomic_load(&stale_use), 0);
	assert_true(st.revoked > 0); /* frees did meet live pins */
	assert_true(atomic_load(&pinned) > 0);
	assert_int_equal(st.pins, (uint64_t)atomic_load(&pinned));
	assert_int_equal(st.unpins, st.pins);
	assert_int_equal((int)st.dmabuf_export, atomic_load(&exports));
	assert_int_equal(count_fds(), fds0); /* every dma-buf closed, none twice */
	pdma_cuda_close(cu);
	pdma_cu_set_api_for_testing(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_free_races_pins),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
