// SPDX-License-Identifier: MIT
/*
 * bench_cuda: what registering real CUDA memory costs (issue 5).
 *
 *  1. First registration per allocation size: the pieces (one
 *     cuPointerGetAttributes classification, SYNC_MEMOPS, cuMemGetAddressRange,
 *     dma-buf export + close) and the whole pin through pdma_mem_cuda_ops; host
 *     memory through cuMemHostRegister for comparison.
 *  2. A cache hit on GPU memory: with the per-use tag check vs trusting the
 *     deallocation hooks, vs a hit on host memory. Measured twice:
 *     a) through lib/cache/: CUDA in TAG_CHECK mode as the registration
 *        path takes its hits (pdma_cache_find: one BUFFER_ID call per hit,
 *        ops->same_alloc) and as it took them before (the caller's five-
 *        attribute query, then pdma_cache_get compares), CUDA in TRUST mode
 *        (hooks), host memory in TRUST mode (userfaultfd monitor);
 *     b) in a minimal harness (binary search over sorted regions), isolating
 *        the check itself: cuPointerGetAttribute(BUFFER_ID) per hit vs none.
 *
 * usage: bench_cuda [--json FILE] [--quick]
 * Prints a table; JSON with every number to FILE.
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "peerdma/mr.h"

#include "cache/cache.h"
#include "cuda/api.h"
#include "mem/cuda.h"

#define KiB 1024ull
#define MiB (1024ull * 1024)
#define GiB (1024ull * MiB)

static struct pdma_cuda *cu;
static const struct pdma_cu_api *api;

static inline uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

struct st {
	double med, p10, p90;
};

static struct st stats(uint64_t *v, size_t n)
{
	struct st s = { 0, 0, 0 };

	if (!n)
		return s;
	qsort(v, n, sizeof(*v), cmp_u64);
	s.med = (double)v[n / 2];
	s.p10 = (double)v[n / 10];
	s.p90 = (double)v[(n * 9) / 10];
	return s;
}

static json_t *jst(struct st s)
{
	return json_pack("{s:f,s:f,s:f}", "median_ns", s.med, "p10_ns", s.p10, "p90_ns", s.p90);
}

static void die(const char *what, int r)
{
	fprintf(stderr, "bench_cuda: %s failed: %d %s\n", what, r, pdma_cuda_last_error());
	exit(1);
}

#define CU(call)                                                    \
	do {                                                        \
		pdma_cu_result r_ = (call);                         \
		if (r_ != PDMA_CU_SUCCESS)                          \
			die(#call, r_);                             \
	} while (0)

/* ---------------------------------------------- 1. first registration */

static json_t *bench_first_registration(int quick)
{
	static const uint64_t sizes[] = { 64 * KiB, 1 * MiB, 16 * MiB, 256 * MiB, 1 * GiB };
	json_t *arr = json_array();

	printf("\nFirst registration of a fresh cuMemAlloc allocation (median ns, p90 in brackets)\n");
	printf("%10s %14s %14s %14s %16s %14s %16s %14s %16s\n", "size", "attributes",
	       "SYNC_MEMOPS", "addr range", "dma-buf export", "close fd", "pin (ops, all)",
	       "unpin", "cuMemHostRegister");
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		uint64_t size = sizes[k];
		size_t it = size <= 16 * MiB ? 200 : 20, hit = size <= 16 * MiB ? 50 : 5;
		uint64_t *t_attr, *t_sync, *t_range, *t_exp, *t_close, *t_pin, *t_unpin, *t_hreg;
		struct st s_attr, s_sync, s_range, s_exp, s_close, s_pin, s_unpin, s_hreg;

		if (quick) {
			it = it / 10 + 1;
			hit = hit / 5 + 1;
		}
		t_attr = calloc(it, 8);
		t_sync = calloc(it, 8);
		t_range = calloc(it, 8);
		t_exp = calloc(it, 8);
		t_close = calloc(it, 8);
		t_pin = calloc(it, 8);
		t_unpin = calloc(it, 8);
		t_hreg = calloc(hit, 8);
		for (size_t i = 0; i < it; i++) {
			pdma_cu_ptr d = 0, d2 = 0, base = 0;
			struct pdma_cuda_ptr_info in;
			unsigned int one = 1;
			size_t rs = 0;
			uint64_t t0, t1;
			void *pin = NULL;
			int fd = -1, ret;

			CU(api->MemAlloc(&d, size));
			CU(api->MemAlloc(&d2, size));
			t0 = now_ns();
			ret = pdma_cuda_classify(cu, d, &in);
			t1 = now_ns();
			if (ret || in.kind != PDMA_CUDA_KIND_DEVICE)
				die("classify", ret);
			t_attr[i] = t1 - t0;
			t0 = now_ns();
			CU(api->PointerSetAttribute(&one, PDMA_CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, d));
			t1 = now_ns();
			t_sync[i] = t1 - t0;
			t0 = now_ns();
			CU(api->MemGetAddressRange(&base, &rs, d));
			t1 = now_ns();
			t_range[i] = t1 - t0;
			if (api->MemGetHandleForAddressRange) {
				t0 = now_ns();
				CU(api->MemGetHandleForAddressRange(&fd, d, size,
								    PDMA_CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0));
				t1 = now_ns();
				t_exp[i] = t1 - t0;
				t0 = now_ns();
				close(fd);
				t1 = now_ns();
				t_close[i] = t1 - t0;
			}
			/* The whole pin of a second fresh allocation: classification,
			 * SYNC_MEMOPS, context lookup, export, bookkeeping. */
			t0 = now_ns();
			ret = pdma_mem_cuda_ops.pin(cu, d2, size, NULL, NULL, &pin);
			t1 = now_ns();
			if (ret)
				die("pin", ret);
			t_pin[i] = t1 - t0;
			t0 = now_ns();
			pdma_mem_cuda_ops.unpin(cu, pin);
			t1 = now_ns();
			t_unpin[i] = t1 - t0;
			CU(api->MemFree(d));
			CU(api->MemFree(d2));
		}
		for (size_t i = 0; i < hit; i++) {
			void *h = aligned_alloc(4096, size);
			uint64_t t0, t1;
			int ret;

			if (!h)
				die("aligned_alloc", -ENOMEM);
			memset(h, 1, size); /* fault the pages in first */
			t0 = now_ns();
			ret = pdma_cuda_host_register(cu, h, size);
			t1 = now_ns();
			if (ret)
				die("cuMemHostRegister", ret);
			t_hreg[i] = t1 - t0;
			pdma_cuda_host_unregister(cu, h);
			free(h);
		}
		s_attr = stats(t_attr, it);
		s_sync = stats(t_sync, it);
		s_range = stats(t_range, it);
		s_exp = stats(t_exp, it);
		s_close = stats(t_close, it);
		s_pin = stats(t_pin, it);
		s_unpin = stats(t_unpin, it);
		s_hreg = stats(t_hreg, hit);
		printf("%8llu K %14.0f %14.0f %14.0f %9.0f [%4.0f] %14.0f %9.0f [%4.0f] %14.0f %16.0f\n",
		       (unsigned long long)(size / KiB), s_attr.med, s_sync.med, s_range.med,
		       s_exp.med, s_exp.p90, s_close.med, s_pin.med, s_pin.p90, s_unpin.med,
		       s_hreg.med);
		json_array_append_new(
			arr, json_pack("{s:I,s:I,s:I,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o}", "size",
				       (json_int_t)size, "iterations", (json_int_t)it,
				       "host_iterations", (json_int_t)hit, "attributes", jst(s_attr),
				       "sync_memops", jst(s_sync), "address_range", jst(s_range),
				       "dmabuf_export", jst(s_exp), "dmabuf_close", jst(s_close),
				       "pin_total", jst(s_pin), "unpin_total", jst(s_unpin),
				       "host_register", jst(s_hreg)));
		free(t_attr);
		free(t_sync);
		free(t_range);
		free(t_exp);
		free(t_close);
		free(t_pin);
		free(t_unpin);
		free(t_hreg);
	}
	return arr;
}

/* -------------------------------------------------------- 2. cache hits */

#define NREG 256
#define NACC 65536

static uint32_t rng_state = 12345;
static uint32_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 17;
	rng_state ^= rng_state << 5;
	return rng_state;
}

/* a) through the real cache. Returns ns per hit and put (median of 5 passes),
 * or -1 if the cache did not hit (mode OFF for that iface). TAG_CHECK hits
 * are taken as the registration path takes them, pdma_cache_find (one
 * BUFFER_ID call, ops->same_alloc), or with query set as it did before:
 * the caller queries the allocation (five attributes) and hands the buffer ID
 * to pdma_cache_get, which compares. */
static double cache_hits(enum pdma_hmem_iface iface, enum pdma_cache_mode mode,
			 const struct pdma_mem_ops *ops, void *be, const uint64_t *addr,
			 size_t regsz, const uint32_t *order, int query, int *hit_ok)
{
	int tag = mode == PDMA_CACHE_MODE_TAG_CHECK;
	struct pdma_mem_alloc al, *alp = NULL;
	struct pdma_cache_attr a;
	struct pdma_cache *c = NULL;
	struct pdma_region *r, *r2;
	uint64_t pass[5];
	int ret;

	pdma_cache_attr_from_env(&a);
	a.max_count = 4 * NREG;
	a.max_size = 64 * GiB;
	a.mode[iface] = mode;
	ret = pdma_cache_open(&a, &c);
	if (ret)
		die("pdma_cache_open", ret);
	/* Warm: one miss per region. */
	if (tag)
		alp = &al;
	for (int i = 0; i < NREG; i++) {
		if (tag && ops->query(be, addr[i], regsz, &al))
			die("query", -1);
		ret = pdma_cache_get(c, ops, be, iface, addr[i], regsz, alp, &r);
		if (ret)
			die("pdma_cache_get", ret);
		pdma_cache_put(c, r);
	}
	/* Is it a hit (same region object twice)? */
	if (tag && ops->query(be, addr[0], regsz, &al))
		die("query", -1);
	pdma_cache_get(c, ops, be, iface, addr[0], regsz, alp, &r);
	pdma_cache_get(c, ops, be, iface, addr[0], regsz, alp, &r2);
	*hit_ok = r == r2;
	pdma_cache_put(c, r);
	pdma_cache_put(c, r2);
	if (!*hit_ok) {
		pdma_cache_close(c);
		return -1;
	}
	for (int p = 0; p < 5; p++) {
		uint64_t t0 = now_ns();

		for (int i = 0; i < NACC; i++) {
			uint32_t k = order[i];
			uint64_t va = addr[k] + 4096 * (i & 7);

			if (tag && !query) {
				if (pdma_cache_find(c, ops, be, iface, va, 4096, &r))
					die("find", -1);
			} else {
				if (tag && ops->query(be, va, 4096, &al))
					die("query", -1);
				if (pdma_cache_get(c, ops, be, iface, va, 4096, alp, &r))
					die("hit", -1);
			}
			pdma_cache_put(c, r);
		}
		pass[p] = now_ns() - t0;
	}
	pdma_cache_close(c);
	qsort(pass, 5, 8, cmp_u64);
	return (double)pass[2] / NACC;
}

/* b) the harness: binary search over sorted [start, end) + the check. */
struct hreg {
	uint64_t start, end, id;
	_Atomic int valid;
};

static struct hreg *hfind(struct hreg *v, int n, uint64_t a)
{
	int lo = 0, hi = n - 1;

	while (lo <= hi) {
		int m = (lo + hi) / 2;

		if (a < v[m].start)
			hi = m - 1;
		else if (a >= v[m].end)
			lo = m + 1;
		else
			return &v[m];
	}
	return NULL;
}

static int cmp_hreg(const void *a, const void *b)
{
	const struct hreg *x = a, *y = b;

	return x->start < y->start ? -1 : x->start > y->start;
}

enum hmode { H_TAG, H_HOOKS };

static double harness_hits(const uint64_t *addr, size_t regsz, const uint32_t *order,
			   enum hmode m, int gpu)
{
	static struct hreg v[NREG];
	uint64_t sorted_addr[NREG], pass[5];
	volatile uint64_t sink = 0;

	for (int i = 0; i < NREG; i++) {
		v[i].start = addr[i];
		v[i].end = addr[i] + regsz;
		v[i].id = 0;
		if (gpu) {
			struct pdma_cuda_ptr_info in;

			if (pdma_cuda_classify(cu, addr[i], &in))
				die("classify", -1);
			v[i].id = in.buffer_id;
		}
		atomic_store(&v[i].valid, 1);
	}
	qsort(v, NREG, sizeof(v[0]), cmp_hreg);
	for (int i = 0; i < NREG; i++)
		sorted_addr[i] = addr[i];
	for (int p = 0; p < 5; p++) {
		uint64_t t0 = now_ns();

		for (int i = 0; i < NACC; i++) {
			uint64_t a = sorted_addr[order[i]] + 4096 * (i & 7);
			struct hreg *e = hfind(v, NREG, a);

			if (!e || !atomic_load_explicit(&e->valid, memory_order_acquire))
				die("harness miss", -1);
			if (m == H_TAG && pdma_cuda_tag_check(cu, a, e->id))
				die("harness stale", -1);
			sink += e->start;
		}
		pass[p] = now_ns() - t0;
	}
	(void)sink;
	qsort(pass, 5, 8, cmp_u64);
	return (double)pass[2] / NACC;
}

/* c) the public API: pdma_mr_regattr + pdma_mr_close of a registration the
 * domain's cache holds (the full per-use cost an application sees). The
 * CUDA mode comes from the environment the domain's cache reads. The misses
 * register each allocation whole (regsz), as cache_hits() does: a host
 * registration pins (and caches) only the 4 KiB pages it names, so warming
 * with the first page alone left the 4 KiB lookups at +4..28 KiB uncached:
 * 256 x 8 distinct ranges, twice the cache's default max_count (1024), so
 * about half of the "hits" were LRU misses (mincore, userfaultfd register,
 * an eviction): the 8,210 ns host figure. A GPU registration rounds to its
 * 64 KiB pages and was not affected. */
static double mr_hits(enum pdma_hmem_iface iface, const char *tag_env, const uint64_t *addr,
		      size_t regsz, const uint32_t *order)
{
	struct pdma_domain_attr da;
	struct pdma_domain *d = NULL;
	uint64_t pass[5];
	int ret;

	if (tag_env)
		setenv("PEERDMA_MR_CUDA_CACHE_TAG_CHECK", tag_env, 1);
	pdma_domain_attr_init(&da);
	da.use_cache = 1;
	ret = pdma_domain_open(&da, &d);
	unsetenv("PEERDMA_MR_CUDA_CACHE_TAG_CHECK");
	if (ret)
		die("pdma_domain_open", ret);
	for (int p = -1; p < 5; p++) { /* pass -1: the misses */
		uint64_t t0 = now_ns();

		for (int i = 0; i < (p < 0 ? NREG : NACC); i++) {
			uint64_t a = p < 0 ? addr[i] : addr[order[i]] + 4096 * (i & 7);
			struct iovec iov = { (void *)(uintptr_t)a, p < 0 ? regsz : 4096 };
			struct pdma_mr_attr ma = {
				.mr_iov = &iov, .iov_count = 1,
				.access = PDMA_READ | PDMA_WRITE | PDMA_REMOTE_WRITE,
				.iface = iface, .device = 0,
			};
			struct pdma_mr *m = NULL;

			ret = pdma_mr_regattr(d, &ma, 0, &m);
			if (ret)
				die("pdma_mr_regattr", ret);
			pdma_mr_close(m);
		}
		if (p >= 0)
			pass[p] = now_ns() - t0;
	}
	pdma_domain_close(d);
	qsort(pass, 5, 8, cmp_u64);
	return (double)pass[2] / NACC;
}

static json_t *bench_hits(void)
{
	static uint64_t dev[NREG], host[NREG];
	static uint32_t order[NACC];
	const size_t regsz = MiB;
	double c_tag, c_tagq, c_trust, c_host, h_tag, h_hooks, h_host;
	int ok_tag, ok_tagq, ok_trust, ok_host;
	json_t *o, *mr_json;
	double mr_line[3];

	for (int i = 0; i < NREG; i++) {
		pdma_cu_ptr d = 0;
		void *h = aligned_alloc(4096, regsz);

		CU(api->MemAlloc(&d, regsz));
		dev[i] = d;
		if (!h)
			die("aligned_alloc", -ENOMEM);
		memset(h, 0, regsz);
		host[i] = (uintptr_t)h;
	}
	for (int i = 0; i < NACC; i++)
		order[i] = rnd() % NREG;

	c_tag = cache_hits(PDMA_HMEM_CUDA, PDMA_CACHE_MODE_TAG_CHECK, &pdma_mem_cuda_ops, cu, dev,
			   regsz, order, 0, &ok_tag);
	c_tagq = cache_hits(PDMA_HMEM_CUDA, PDMA_CACHE_MODE_TAG_CHECK, &pdma_mem_cuda_ops, cu, dev,
			    regsz, order, 1, &ok_tagq);
	c_trust = cache_hits(PDMA_HMEM_CUDA, PDMA_CACHE_MODE_TRUST, &pdma_mem_cuda_ops, cu, dev,
			     regsz, order, 0, &ok_trust);
	c_host = cache_hits(PDMA_HMEM_SYSTEM, PDMA_CACHE_MODE_TRUST, &pdma_mem_host_ops, NULL,
			    host, regsz, order, 0, &ok_host);
	{
		double m_tag = mr_hits(PDMA_HMEM_CUDA, "1", dev, regsz, order);
		double m_hooks = mr_hits(PDMA_HMEM_CUDA, "0", dev, regsz, order);
		double m_host = mr_hits(PDMA_HMEM_SYSTEM, NULL, host, regsz, order);

		mr_json = json_pack("{s:f,s:f,s:f}", "gpu_tag_check_ns", m_tag, "gpu_trust_hooks_ns",
				    m_hooks, "host_ns", m_host);
		mr_line[0] = m_tag;
		mr_line[1] = m_hooks;
		mr_line[2] = m_host;
	}
	h_tag = h_hooks = h_host = 1e30;
	for (int rep = 0; rep < 3; rep++) { /* interleaved: the best of 3 each */
		double t;

		t = harness_hits(dev, regsz, order, H_TAG, 1);
		h_tag = t < h_tag ? t : h_tag;
		t = harness_hits(dev, regsz, order, H_HOOKS, 1);
		h_hooks = t < h_hooks ? t : h_hooks;
		t = harness_hits(host, regsz, order, H_HOOKS, 0);
		h_host = t < h_host ? t : h_host;
	}

	printf("\nCache hit, %d regions of 1 MiB, %d random 4 KiB lookups (ns per hit, median of 5 passes)\n",
	       NREG, NACC);
	printf("%-44s %10s %10s %10s %14s\n", "", "GPU tag", "GPU hooks", "host", "hooks/host");
	if (ok_tag && ok_trust && ok_host)
		printf("%-44s %10.1f %10.1f %10.1f %14.2f\n",
		       "lib/cache/ find+put (tag: one BUFFER_ID call)", c_tag, c_trust, c_host,
		       c_trust / c_host);
	else
		printf("%-44s %10.1f %10.1f %10.1f %14s\n",
		       "lib/cache/ get+put (-1: not cached)", c_tag, c_trust, c_host,
		       "n/a");
	printf("%-44s %10.1f %10s %10s %14s\n", "lib/cache/ query (five attributes)+get+put",
	       ok_tagq ? c_tagq : -1.0, "", "", "");
	printf("%-44s %10.1f %10.1f %10.1f %14.2f\n", "pdma_mr_regattr+close, cached (public API)",
	       mr_line[0], mr_line[1], mr_line[2], mr_line[1] / mr_line[2]);
	printf("%-44s %10.1f %10.1f %10.1f %14.2f\n", "harness lookup + BUFFER_ID check / none",
	       h_tag, h_hooks, h_host, h_hooks / h_host);

	o = json_pack("{s:i,s:i,s:I,s:{s:f,s:f,s:f,s:f,s:b,s:b,s:b},s:{s:f,s:f,s:f}}", "regions",
		      NREG, "lookups", NACC, "region_size", (json_int_t)regsz, "lib_cache",
		      "gpu_tag_check_ns", c_tag, "gpu_tag_query_get_ns", ok_tagq ? c_tagq : -1.0,
		      "gpu_trust_hooks_ns", c_trust, "host_ns", c_host,
		      "gpu_tag_cached", ok_tag, "gpu_trust_cached", ok_trust, "host_cached",
		      ok_host, "harness", "gpu_tag_check_ns", h_tag, "gpu_hooks_ns", h_hooks,
		      "host_ns", h_host);
	json_object_set_new(o, "mr_api", mr_json);
	for (int i = 0; i < NREG; i++) {
		CU(api->MemFree(dev[i]));
		free((void *)(uintptr_t)host[i]);
	}
	return o;
}

/* Single calls, for reference (PLATFORM.md lists some). */
static json_t *bench_calls(void)
{
	enum { N = 100000 };
	pdma_cu_ptr d = 0;
	struct pdma_cuda_ptr_info in;
	unsigned long long id;
	uint64_t t0, t_id, t_cls;

	CU(api->MemAlloc(&d, 2 * MiB));
	t0 = now_ns();
	for (int i = 0; i < N; i++)
		api->PointerGetAttribute(&id, PDMA_CU_POINTER_ATTRIBUTE_BUFFER_ID, d + 4096);
	t_id = now_ns() - t0;
	t0 = now_ns();
	for (int i = 0; i < N; i++)
		pdma_cuda_classify(cu, d + 4096, &in);
	t_cls = now_ns() - t0;
	{
		static const struct { int a; const char *n; } at[] = {
			{ PDMA_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, "MEMORY_TYPE" },
			{ PDMA_CU_POINTER_ATTRIBUTE_IS_MANAGED, "IS_MANAGED" },
			{ PDMA_CU_POINTER_ATTRIBUTE_BUFFER_ID, "BUFFER_ID" },
			{ PDMA_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, "DEVICE_ORDINAL" },
			{ PDMA_CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, "SYNC_MEMOPS" },
			{ PDMA_CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, "RANGE_START_ADDR" },
			{ PDMA_CU_POINTER_ATTRIBUTE_RANGE_SIZE, "RANGE_SIZE" },
			{ PDMA_CU_POINTER_ATTRIBUTE_CONTEXT, "CONTEXT" },
		};
		json_t *pa = json_object();
		unsigned long long big[4];
		int four[] = { PDMA_CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
			       PDMA_CU_POINTER_ATTRIBUTE_IS_MANAGED,
			       PDMA_CU_POINTER_ATTRIBUTE_BUFFER_ID,
			       PDMA_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL };
		unsigned long long v4[4] = { 0 };
		void *d4[] = { &v4[0], &v4[1], &v4[2], &v4[3] };
		pdma_cu_ptr b = 0;
		size_t sz = 0;
		uint64_t t;

		printf("\nSingle calls on a 2 MiB cuMemAlloc allocation (ns per call, %d calls):\n", N);
		for (size_t k = 0; k < sizeof(at) / sizeof(at[0]); k++) {
			t0 = now_ns();
			for (int i = 0; i < N; i++)
				api->PointerGetAttribute(big, at[k].a, d + 4096);
			t = now_ns() - t0;
			printf("  cuPointerGetAttribute(%s) %.1f\n", at[k].n, (double)t / N);
			json_object_set_new(pa, at[k].n, json_real((double)t / N));
		}
		t0 = now_ns();
		for (int i = 0; i < N; i++)
			api->PointerGetAttributes(4, four, d4, d + 4096);
		t = now_ns() - t0;
		printf("  cuPointerGetAttributes(MEMORY_TYPE, IS_MANAGED, BUFFER_ID, DEVICE_ORDINAL) %.1f\n",
		       (double)t / N);
		json_object_set_new(pa, "attributes4", json_real((double)t / N));
		t0 = now_ns();
		for (int i = 0; i < N; i++)
			api->MemGetAddressRange(&b, &sz, d + 4096);
		t = now_ns() - t0;
		printf("  cuMemGetAddressRange %.1f\n", (double)t / N);
		json_object_set_new(pa, "cuMemGetAddressRange", json_real((double)t / N));
		CU(api->MemFree(d));
		printf("  pdma_cuda_classify %.1f\n", (double)t_cls / N);
		json_object_set_new(pa, "pdma_cuda_classify", json_real((double)t_cls / N));
		(void)t_id;
		return pa;
	}
}

int main(int argc, char **argv)
{
	const char *json_path = NULL;
	struct pdma_cuda_dev_info di;
	int quick = 0, ret;
	json_t *root;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json") && i + 1 < argc)
			json_path = argv[++i];
		else if (!strcmp(argv[i], "--quick"))
			quick = 1;
		else {
			fprintf(stderr, "usage: bench_cuda [--json FILE] [--quick]\n");
			return 2;
		}
	}
	ret = pdma_cuda_open(&cu);
	if (ret) {
		printf("skipped: no CUDA device (%s)\n", pdma_cuda_last_error());
		return ret == -ENODEV ? 0 : 1;
	}
	if (pdma_cu_get(&api, NULL, 0))
		return 1;
	{
		pdma_cu_ctx pc;

		CU(api->DevicePrimaryCtxRetain(&pc, 0));
		CU(api->CtxSetCurrent(pc));
	}
	pdma_cuda_device_info(cu, 0, &di);
	printf("bench_cuda: %s (%s), driver %d, GPU_DIRECT_RDMA_SUPPORTED=%d DMA_BUF_SUPPORTED=%d WRITES_ORDERING=%d\n",
	       di.name, di.pci_bus_id, pdma_cuda_driver_version(cu), di.gdr_supported,
	       di.dmabuf_supported, di.writes_ordering);
	root = json_pack("{s:s,s:s,s:i,s:i,s:i,s:i}", "bench", "cuda", "device", di.name,
			 "driver_version", pdma_cuda_driver_version(cu), "gdr_supported",
			 di.gdr_supported, "dmabuf_supported", di.dmabuf_supported,
			 "writes_ordering", di.writes_ordering);
	json_object_set_new(root, "calls", bench_calls());
	json_object_set_new(root, "first_registration", bench_first_registration(quick));
	json_object_set_new(root, "cache_hit", bench_hits());
	if (json_path && json_dump_file(root, json_path, JSON_INDENT(2)) != 0) {
		fprintf(stderr, "bench_cuda: cannot write %s\n", json_path);
		return 1;
	}
	json_decref(root);
	api->DevicePrimaryCtxRelease(0);
	pdma_cuda_close(cu);
	return 0;
}
