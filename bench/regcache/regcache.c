// SPDX-License-Identifier: MIT
/*
 * bench_regcache: peerdma's registration cache (lib/cache/) against UCX's
 * registration cache (ucs_rcache, UCX 1.13 API, called directly), the same
 * workloads in the same run, interleaved repetition by repetition.
 *
 *   hit  rand|seq  at 1k, 10k, 100k cached regions, 1 and N threads:
 *        get + put of a cached region (one page, regions two pages apart so
 *        UCX merges nothing); ns per get+put per thread, and total Mops/s.
 *        With --inside N the regions are N pages long and each lookup is of
 *        one page at random inside one: the lookup cannot start from the
 *        region's start address.
 *        All threads draw from all regions (shared), or with --disjoint each
 *        thread from its own 1/N of them: the difference is what threads pay
 *        for writing the same regions' cache lines
 *   miss  no-op backend: every get pins a region never seen before (lookup,
 *        pin, insert; "regions" is the count inserted per repetition)
 *   miss  sim backend: the same with peerdma's simulated GPU (64 KiB pins
 *        charged against a BAR)
 *        Both miss rows run cold (each cache faults its memory in) and warm
 *        ("warm": memory recycled from an earlier fill; bench_miss says how)
 *
 * Both caches run without memory-event monitors (UCX: ucm_events 0; peerdma:
 * the no-op/sim interface in TRUST mode), so both hit paths are the bare
 * index lookup and reference counting.
 *
 * usage: bench_regcache [--reps N] [--threads N] [--ops N] [--sizes a,b,c]
 *                       [--json FILE] [--dat FILE] [--note TEXT] [--quick] [--no-miss]
 *                       [--no-hit] [--disjoint] [--spread] [--ucx-ops N] [--miss-ops N]
 *                       [--latency] [--ceiling] [--inside N]
 *
 * --spread: pin thread t to the t-th CPU in an order that takes one hardware
 * thread of each core before any core's second (sysfs topology), so that 2
 * threads run on 2 cores, not on the two hardware threads of one, whose
 * shared issue width would hide what the cache itself scales to.
 * --ucx-ops N: UCX's hit rows run N operations a thread instead of --ops.
 * From 4 threads on UCX takes microseconds a hit: the runs peerdma's rows
 * need to outlast the host's noise (millions of hits a thread) would take
 * UCX minutes.
 * --miss-ops N: regions inserted per repetition of the miss rows (default
 * 100000; the sim row inserts N/4), to compare the miss at several sizes.
 * --latency: the physical floors next to the rows: one dependent load at
 * footprints from 256 KiB to 1 GiB (a lookup's working set outgrowing L2,
 * L3), and one cache line passed between two threads (a hit on a region
 * another core wrote last).
 * --ceiling: what the host gives N threads that share nothing of the cache,
 * at 1, 2, 4, 8 ... --threads threads, pinned as the hit rows are: the
 * physical ceiling of the hit rows' N-thread / 1-thread ratio. Four loops
 * a thread: a dependent xorshift chain in registers (the cores alone:
 * frequency, vCPUs sharing a host's; one chain's latency leaves a core's
 * issue slots free for a second hardware thread), four independent chains
 * ("alu-ilp": the core's issue width, which two hardware threads on one core
 * share, as a hit's instructions need it), and independent random 64-byte
 * loads from an array the size of the 10k-region cache's footprint, shared
 * by all threads and then a slice each (the memory hierarchy's share, as
 * the shared and --disjoint hit rows draw on it).
 */
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/utsname.h>

#include <jansson.h>
#include <ucs/memory/rcache.h>

#include "cache/cache.h"
#include "mem/sim.h"

#define HPG 4096ull
#define STRIDE (2 * HPG)

enum kind { K_PDMA, K_UCX };
enum pattern { P_SEQ, P_RAND, P_MISS };

static bool disjoint; /* hit rows: each thread its own slice of the regions */
/* hit rows: peerdma's lookups that missed (each must hit: the program fails) */
static uint64_t hit_misses;
/* --spread: thread t runs on spread_cpu[t % n_spread], one CPU of each core
 * first, then the cores' second hardware threads */
static int spread_cpu[CPU_SETSIZE], n_spread, n_cores;
/* --ucx-ops: UCX's hit rows run this many operations a thread (0: --ops) */
static size_t ucx_hit_ops;
/* --inside: the hit rows' regions are this many pages, a page apart; a
 * lookup takes one of them at random (1: the region's only page) */
static uint64_t hit_pages = 1;

/* The hit rows' distance between regions' starts: a page apart */
static uint64_t hit_stride(void)
{
	return (hit_pages + 1) * HPG;
}

/* ---------------------------------------------------------------- backends */


/* UCX side: the same no-op registration, or a sim pin. */
struct ucx_region {
	ucs_rcache_region_t super;
	void *pin;
};

struct ucx_ctx {
	struct pdma_sim *sim; /* NULL: no-op */
};

static void ucx_revoke_noop(void *arg)
{
	(void)arg;
}

static ucs_status_t ucx_mem_reg(void *context, ucs_rcache_t *rc, void *arg,
				ucs_rcache_region_t *region, uint16_t flags)
{
	struct ucx_ctx *cx = context;
	struct ucx_region *r = (struct ucx_region *)region;
	uint64_t s, e;

	(void)rc, (void)arg, (void)flags;
	if (!cx->sim) {
		r->pin = NULL;
		return UCS_OK;
	}
	s = region->super.start & ~(uint64_t)(PDMA_SIM_PAGE_SIZE - 1);
	e = (region->super.end + PDMA_SIM_PAGE_SIZE - 1) & ~(uint64_t)(PDMA_SIM_PAGE_SIZE - 1);
	if (pdma_mem_sim_ops.pin(cx->sim, s, e - s, ucx_revoke_noop, NULL, &r->pin))
		return UCS_ERR_NO_MEMORY;
	return UCS_OK;
}

static void ucx_mem_dereg(void *context, ucs_rcache_t *rc, ucs_rcache_region_t *region)
{
	struct ucx_ctx *cx = context;
	struct ucx_region *r = (struct ucx_region *)region;

	(void)rc;
	if (cx->sim)
		pdma_mem_sim_ops.unpin(cx->sim, r->pin);
}

static void ucx_dump(void *context, ucs_rcache_t *rc, ucs_rcache_region_t *region, char *buf,
		     size_t max)
{
	(void)context, (void)rc, (void)region;
	if (max)
		buf[0] = '\0';
}

static const ucs_rcache_ops_t ucx_ops = {
	.mem_reg = ucx_mem_reg, .mem_dereg = ucx_mem_dereg, .dump_region = ucx_dump,
};

/* ------------------------------------------------------------------ caches */

struct cachex {
	enum kind kind;
	struct pdma_cache *pc;
	const struct pdma_mem_ops *ops;
	void *be;
	ucs_rcache_t *uc;
	struct ucx_ctx ucx;
};

static int cachex_open(struct cachex *x, enum kind kind, size_t max_regions,
		       struct pdma_sim *sim)
{
	memset(x, 0, sizeof(*x));
	x->kind = kind;
	if (kind == K_PDMA) {
		struct pdma_cache_attr a;

		memset(&a, 0, sizeof(a));
		a.max_count = max_regions;
		a.max_size = (size_t)1 << 50;
		a.monitor = PDMA_CACHE_MONITOR_DISABLED;
		a.mode[PDMA_HMEM_SIM] = PDMA_CACHE_MODE_TRUST;
		x->ops = sim ? &pdma_mem_sim_ops : &pdma_mem_noop_ops;
		x->be = sim;
		return pdma_cache_open(&a, &x->pc);
	} else {
		ucs_rcache_params_t p;

		memset(&p, 0, sizeof(p));
		p.region_struct_size = sizeof(struct ucx_region);
		p.alignment = HPG;
		p.max_alignment = HPG;
		p.ucm_events = 0;
		p.ops = &ucx_ops;
		x->ucx.sim = sim;
		p.context = &x->ucx;
		p.flags = UCS_RCACHE_FLAG_NO_PFN_CHECK;
		p.max_regions = max_regions;
		p.max_size = SIZE_MAX;
		p.max_unreleased = SIZE_MAX;
		return ucs_rcache_create(&p, "bench", NULL, &x->uc) == UCS_OK ? 0 : -EIO;
	}
}

/* The benchmark cannot run without its caches: exit, saying which. */
static void cachex_open_or_exit(struct cachex *x, enum kind kind, size_t max_regions,
				struct pdma_sim *sim)
{
	if (cachex_open(x, kind, max_regions, sim)) {
		fprintf(stderr, "cannot open the %s cache\n", kind == K_PDMA ? "peerdma" : "UCX");
		exit(1);
	}
}

static void cachex_close(struct cachex *x)
{
	if (x->kind == K_PDMA)
		pdma_cache_close(x->pc);
	else
		ucs_rcache_destroy(x->uc);
}

/* One get + put; 0 or an error. */
static inline int op_pdma(struct cachex *x, uint64_t addr, size_t len)
{
	struct pdma_region *r;
	int ret = pdma_cache_get(x->pc, x->ops, x->be, PDMA_HMEM_SIM, addr, len, NULL, &r);

	if (ret)
		return ret;
	pdma_cache_put(x->pc, r);
	return 0;
}

static inline int op_ucx(struct cachex *x, uint64_t addr, size_t len)
{
	ucs_rcache_region_t *r;

	if (ucs_rcache_get(x->uc, (void *)(uintptr_t)addr, len, PROT_READ | PROT_WRITE, NULL, &r) !=
	    UCS_OK)
		return -EIO;
	ucs_rcache_region_put(x->uc, r);
	return 0;
}

/* ------------------------------------------------------------------ workers */

struct work {
	struct cachex *x;
	enum pattern pat;
	uint64_t base, stride;
	size_t len, nregions, ops;
	uint64_t pages;       /* hit rows: the lookup's page inside the region, drawn from these */
	uint64_t seed, first; /* P_MISS: index of this thread's first fresh region */
	pthread_barrier_t *bar;
	int idx;
	double secs;
	size_t errors;
};

/* The allowed CPUs, each core's first hardware thread first (sysfs
 * topology: the lowest CPU of thread_siblings_list), so that N threads
 * pinned in this order use N cores while there are that many. */
static int spread_init(void)
{
	int second[CPU_SETSIZE], n2 = 0;
	cpu_set_t set;

	if (sched_getaffinity(0, sizeof(set), &set))
		return -errno;
	for (int c = 0; c < CPU_SETSIZE; c++) {
		char path[96];
		FILE *f;
		int first = c;

		if (!CPU_ISSET(c, &set))
			continue;
		snprintf(path, sizeof(path),
			 "/sys/devices/system/cpu/cpu%d/topology/thread_siblings_list", c);
		f = fopen(path, "r");
		if (f) {
			if (fscanf(f, "%d", &first) != 1)
				first = c;
			fclose(f);
		}
		if (first == c)
			spread_cpu[n_spread++] = c;
		else
			second[n2++] = c;
	}
	n_cores = n_spread;
	for (int i = 0; i < n2; i++)
		spread_cpu[n_spread++] = second[i];
	return n_spread ? 0 : -ENOENT;
}

/* Marsaglia's xorshift64: every random draw of this file */
static inline uint64_t xorshift64(uint64_t x)
{
	x ^= x << 13;
	x ^= x >> 7;
	return x ^ (x << 17);
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#define LOOP(OP)                                                                              \
	do {                                                                                  \
		if (w->pat == P_SEQ) {                                                        \
			size_t i = (size_t)(w->seed % w->nregions);                           \
			uint64_t pg = 0;                                                      \
			for (size_t k = 0; k < w->ops; k++) {                                 \
				errs += OP(x, w->base + i * w->stride + pg * HPG, w->len) != 0; \
				if (++i == w->nregions) {                                     \
					i = 0;                                                \
					if (++pg == w->pages)                                 \
						pg = 0;                                       \
				}                                                             \
			}                                                                     \
		} else if (w->pat == P_RAND) {                                                \
			uint64_t s = w->seed | 1;                                             \
			for (size_t k = 0; k < w->ops; k++) {                                 \
				s = xorshift64(s);                                            \
				/* multiply-shift range reduction: no division; the page \
				 * inside from the low half (1 page: always 0) */         \
				errs += OP(x, w->base + (uint64_t)(((unsigned __int128)s *   \
								    w->nregions) >> 64) *     \
							   w->stride +                       \
						   (((s & 0xffffffff) * w->pages) >> 32) * HPG, \
					   w->len) != 0;                                      \
			}                                                                     \
		} else {                                                                      \
			size_t i = (size_t)w->first;                                          \
			for (size_t k = 0; k < w->ops; k++) {                                 \
				errs += OP(x, w->base + i * w->stride, w->len) != 0;          \
				if (++i == w->nregions)                                       \
					i = 0;                                                \
			}                                                                     \
		}                                                                             \
	} while (0)

/* --spread: the calling thread, the idx-th of a run, onto its CPU */
static void spread_pin(int idx)
{
	cpu_set_t set;

	if (!n_spread)
		return;
	CPU_ZERO(&set);
	CPU_SET(spread_cpu[idx % n_spread], &set);
	pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

static void *worker(void *arg)
{
	struct work *w = arg;
	struct cachex *x = w->x;
	size_t errs = 0;
	double t0;

	spread_pin(w->idx);
	pthread_barrier_wait(w->bar);
	t0 = now();
	if (x->kind == K_PDMA)
		LOOP(op_pdma);
	else
		LOOP(op_ucx);
	w->secs = now() - t0;
	w->errors = errs;
	return NULL;
}

/* fn on each of threads work items, sz bytes apart: item 0 on the calling
 * thread, the others on threads of their own; returns when all have (the
 * items' barrier starts their clocks together). */
static void run_items(void *(*fn)(void *), void *items, size_t sz, int threads)
{
	pthread_t th[64];

	for (int t = 1; t < threads; t++)
		pthread_create(&th[t], NULL, fn, (char *)items + (size_t)t * sz);
	fn(items);
	for (int t = 1; t < threads; t++)
		pthread_join(th[t], NULL);
}

struct result {
	double ns;   /* per get+put, per thread */
	double mops; /* total */
	size_t errors;
};

static struct result run_threads(struct cachex *x, enum pattern pat, uint64_t base,
				 uint64_t stride, size_t len, size_t nregions, size_t ops,
				 int threads, uint64_t seed, size_t first)
{
	struct work w[64];
	pthread_barrier_t bar;
	struct result r = { 0 };
	double maxs = 0, sum = 0;

	pthread_barrier_init(&bar, NULL, (unsigned)threads);
	for (int t = 0; t < threads; t++) {
		w[t] = (struct work){ .x = x, .pat = pat, .base = base, .stride = stride, .len = len,
				      .nregions = nregions, .ops = ops,
				      .pages = pat == P_MISS ? 1 : hit_pages,
				      .seed = seed * 7919 + (uint64_t)t * 104729 + 1,
				      .first = first + (size_t)t * ops, .bar = &bar, .idx = t };
		if (disjoint && pat != P_MISS && nregions >= (size_t)threads) {
			w[t].nregions = nregions / (size_t)threads;
			w[t].base = base + (uint64_t)t * w[t].nregions * stride;
		}
	}
	run_items(worker, w, sizeof(w[0]), threads);
	for (int t = 0; t < threads; t++) {
		sum += w[t].secs;
		if (w[t].secs > maxs)
			maxs = w[t].secs;
		r.errors += w[t].errors;
	}
	pthread_barrier_destroy(&bar);
	r.ns = sum / threads / (double)ops * 1e9;
	r.mops = (double)ops * threads / maxs / 1e6;
	return r;
}

/* --------------------------------------------------------------------- main */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

struct row {
	char name[64];
	const char *pattern;
	size_t regions;
	int threads;
	double ns[2], mops[2];
	double ns_all[2][64], mops_all[2][64];
	int reps;
	size_t errors[2];
};

static struct row rows[64];
static int nrows;

static void fill_row(struct row *rw)
{
	for (int k = 0; k < 2; k++) {
		double a[64], b[64];

		memcpy(a, rw->ns_all[k], sizeof(a));
		memcpy(b, rw->mops_all[k], sizeof(b));
		rw->ns[k] = median(a, rw->reps);
		rw->mops[k] = median(b, rw->reps);
	}
}

/* Hit workloads at nregions: both caches filled, then the same loops. */
static void bench_hits(size_t nregions, int maxthreads, int reps, size_t ops, void *mem)
{
	struct cachex x[2];
	const char *pats[2] = { "rand", "seq" };
	enum pattern pv[2] = { P_RAND, P_SEQ };
	uint64_t base = (uint64_t)(uintptr_t)mem;

	for (int k = 0; k < 2; k++) {
		cachex_open_or_exit(&x[k], (enum kind)k, nregions + 64, NULL);
		for (size_t i = 0; i < nregions; i++) {
			uint64_t a = base + i * hit_stride();
			int ret = k == K_PDMA ? op_pdma(&x[k], a, hit_pages * HPG)
					      : op_ucx(&x[k], a, hit_pages * HPG);

			if (ret) {
				fprintf(stderr, "fill failed: %d\n", ret);
				exit(1);
			}
		}
	}
	for (int p = 0; p < 2; p++) {
		for (int threads = 1; threads <= maxthreads; threads = threads == 1 ? maxthreads : threads + 1) {
			struct row *rw = &rows[nrows++];

			snprintf(rw->name, sizeof(rw->name), "hit %s", pats[p]);
			rw->pattern = pats[p];
			rw->regions = nregions;
			rw->threads = threads;
			rw->reps = reps;
			for (int rep = 0; rep < reps; rep++) {
				for (int k = 0; k < 2; k++) {
					/* Alternate which goes first, to share drift. */
					int kk = rep % 2 ? 1 - k : k;
					size_t n = kk == K_UCX && ucx_hit_ops ? ucx_hit_ops : ops;
					struct result r = run_threads(&x[kk], pv[p], base,
								      hit_stride(), HPG,
								      nregions, n, threads,
								      (uint64_t)rep + 1, 0);

					rw->ns_all[kk][rep] = r.ns;
					rw->mops_all[kk][rep] = r.mops;
					rw->errors[kk] += r.errors;
				}
			}
			fill_row(rw);
			if (threads == maxthreads)
				break;
		}
	}
	{
		/* Every lookup of a hit row names a cached region: one that
		 * pinned instead is an index that failed to find it. */
		struct pdma_cache_stats st;

		pdma_cache_get_stats(x[K_PDMA].pc, &st);
		hit_misses += st.misses - nregions;
	}
	for (int k = 0; k < 2; k++)
		cachex_close(&x[k]);
}

/*
 * Miss workloads: every get is a miss on an address never seen before: lookup,
 * pin, insert (and the put that leaves it cached). No limit is reached:
 * UCX 1.13's ucs_rcache does not enforce max_regions (measured: 4000 regions
 * stay registered with max_regions 1024), so eviction cannot be compared.
 * Both caches start cold in every repetition: a cache's first fill faults its
 * memory in. peerdma's slab is mapped per cache and unmapped at close; UCX's
 * regions come from malloc, and glibc would hand the next repetition the
 * pages the last one freed, already faulted in (the miss rows measured UCX
 * 1.4x faster from the second repetition on, 0.9x in the first).
 * malloc_trim(0) after each close gives those pages back to the kernel.
 * warm: both start with their memory faulted in, as a long-lived cache that
 * has recycled regions: each repetition first fills a cache untimed; peerdma
 * then flushes it (the entries go back to its slab), UCX closes it and opens
 * another (its regions go back to glibc's heap, kept, which the new one
 * reuses).
 */
static void bench_miss(bool sim_backend, bool warm, int reps, size_t ops, void *mem)
{
	struct row *rw = &rows[nrows++];
	struct pdma_sim *sim = NULL;
	void *simmem = NULL;
	size_t len;
	uint64_t base, stride;

	snprintf(rw->name, sizeof(rw->name), "miss+pin %s%s", sim_backend ? "sim" : "noop",
		 warm ? " warm" : "");
	rw->pattern = "miss";
	rw->threads = 1;
	rw->reps = reps;
	rw->regions = ops;
	if (sim_backend) {
		struct pdma_sim_attr sa = { .mem_size = 2 * ops * PDMA_SIM_PAGE_SIZE + (1 << 20),
					    .bar_size = 2 * ops * PDMA_SIM_PAGE_SIZE };

		if (pdma_sim_open(&sa, &sim) ||
		    pdma_sim_alloc(sim, 2 * ops * PDMA_SIM_PAGE_SIZE, &simmem)) {
			fprintf(stderr, "sim setup failed\n");
			exit(1);
		}
		base = (uint64_t)(uintptr_t)simmem;
		stride = 2 * PDMA_SIM_PAGE_SIZE; /* apart: UCX merges nothing */
		len = PDMA_SIM_PAGE_SIZE;
	} else {
		base = (uint64_t)(uintptr_t)mem;
		stride = STRIDE;
		len = HPG;
	}
	for (int rep = 0; rep < reps; rep++) {
		for (int k = 0; k < 2; k++) {
			int kk = rep % 2 ? 1 - k : k;
			struct cachex x;
			struct result r;

			cachex_open_or_exit(&x, (enum kind)kk, 2 * ops + 1024, sim);
			if (warm) {
				run_threads(&x, P_MISS, base, stride, len, ops, ops, 1, 1, 0);
				if (kk == K_PDMA) {
					pdma_cache_flush(x.pc);
				} else {
					cachex_close(&x);
					cachex_open_or_exit(&x, (enum kind)kk, 2 * ops + 1024, sim);
				}
			}
			r = run_threads(&x, P_MISS, base, stride, len, ops, ops, 1, 1, 0);
			rw->ns_all[kk][rep] = r.ns;
			rw->mops_all[kk][rep] = r.mops;
			rw->errors[kk] += r.errors;
			cachex_close(&x);
			if (!warm)
				malloc_trim(0);
		}
	}
	fill_row(rw);
	if (sim) {
		pdma_sim_free(sim, simmem);
		pdma_sim_close(sim);
	}
}

/* The physical floor of a lookup: ns per dependent load over a random cycle
 * of 64-byte lines spanning bytes (Sattolo's shuffle: one cycle through every
 * line, so no line is revisited before all were). A hit whose working set
 * outgrows a cache level pays at least one such load per lookup. */
static double chase_ns(size_t bytes)
{
	const size_t n = bytes / 64, steps = 4000000;
	uint64_t *a = mmap(NULL, n * 64, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint32_t *perm = malloc(n * sizeof(*perm));
	uint64_t x = 0x9e3779b97f4a7c15ull, i, j;
	double t0, t;

	if (a == MAP_FAILED || !perm) {
		fprintf(stderr, "latency: cannot allocate %zu bytes\n", bytes);
		exit(1);
	}
	for (i = 0; i < n; i++)
		perm[i] = (uint32_t)i;
	for (i = n - 1; i > 0; i--) {
		x = xorshift64(x);
		j = x % i;
		uint32_t tmp = perm[i];
		perm[i] = perm[j];
		perm[j] = tmp;
	}
	for (i = 0; i < n; i++)
		a[(size_t)perm[i] * 8] = (uint64_t)perm[(i + 1) % n] * 8;
	free(perm);
	j = 0;
	for (i = 0; i < n && i < steps; i++) /* warm: pages and TLB */
		j = a[j];
	t0 = now();
	for (i = 0; i < steps; i++)
		j = a[j];
	t = now() - t0;
	if (j == UINT64_MAX) /* keeps the chain */
		puts("");
	munmap(a, n * 64);
	return t / (double)steps * 1e9;
}

static void machine_json(json_t *m, const char *note, double load_start)
{
	char model[256] = "unknown", line[512];
	long memkb = 0;
	FILE *f = fopen("/proc/cpuinfo", "r");
	struct utsname u;
	double la[3] = { 0 };

	if (f) {
		while (fgets(line, sizeof(line), f)) {
			char *c = strchr(line, ':');

			if (!strncmp(line, "model name", 10) && c) {
				snprintf(model, sizeof(model), "%s", c + 2);
				model[strcspn(model, "\n")] = 0;
				break;
			}
		}
		fclose(f);
	}
	f = fopen("/proc/meminfo", "r");
	if (f) {
		if (fscanf(f, "MemTotal: %ld kB", &memkb) != 1)
			memkb = 0;
		fclose(f);
	}
	uname(&u);
	la[0] = load_start;
	json_object_set_new(m, "cpu", json_string(model));
	json_object_set_new(m, "online_cpus", json_integer(sysconf(_SC_NPROCESSORS_ONLN)));
	json_object_set_new(m, "mem_gib", json_real((double)memkb / 1048576.0));
	json_object_set_new(m, "kernel", json_string(u.release));
	json_object_set_new(m, "ucx_version", json_string(PDMA_UCX_VERSION));
	json_object_set_new(m, "loadavg_1min_at_start", json_real(la[0]));
	if (note)
		json_object_set_new(m, "note", json_string(note));
}

/* The floor of a hit on a region another core hit last: one cache line
 * passed between two threads, each waiting for the other's write before
 * writing (ping-pong). ns per one-way transfer. */
struct pingpong {
	_Alignas(64) _Atomic uint64_t turn;
	uint64_t n;
};

static void *pong(void *arg)
{
	struct pingpong *p = arg;

	for (uint64_t i = 1; i < 2 * p->n; i += 2) {
		while (atomic_load_explicit(&p->turn, memory_order_acquire) != i)
			;
		atomic_store_explicit(&p->turn, i + 1, memory_order_release);
	}
	return NULL;
}

static double handoff_ns(void)
{
	struct pingpong p = { .n = 2000000 };
	pthread_t t;
	double t0;

	atomic_init(&p.turn, 0);
	if (pthread_create(&t, NULL, pong, &p))
		return 0;
	t0 = now();
	for (uint64_t i = 0; i < 2 * p.n; i += 2) {
		while (atomic_load_explicit(&p.turn, memory_order_acquire) != i)
			;
		atomic_store_explicit(&p.turn, i + 1, memory_order_release);
	}
	while (atomic_load_explicit(&p.turn, memory_order_acquire) != 2 * p.n)
		;
	t0 = now() - t0;
	pthread_join(t, NULL);
	return t0 / (2.0 * (double)p.n) * 1e9;
}

/* --ceiling: the host's share of the N-thread / 1-thread ratio, with nothing
 * of the cache in the loop (see the top of the file). */
enum probe { PR_ALU, PR_ILP, PR_SHARED, PR_PRIVATE, PR_N };
static const char *const probe_name[PR_N] = { "alu", "alu-ilp", "load-shared", "load-private" };
/* about the 10k-region cache: 10,000 entries of six 64-byte lines (3.7 MiB) */
#define PROBE_BYTES (4u << 20)
#define PROBE_OPS 20000000 /* a thread, every probe: 20-100 ms */

struct probe_work {
	enum probe kind;
	const uint64_t *lines; /* eight words a line */
	size_t nlines, ops;
	uint64_t seed, sink;
	pthread_barrier_t *bar;
	int idx;
	double secs;
};

static void *probe_worker(void *arg)
{
	struct probe_work *w = arg;
	uint64_t s = w->seed | 1, acc = 0;
	double t0;

	spread_pin(w->idx);
	pthread_barrier_wait(w->bar);
	t0 = now();
	if (w->kind == PR_ILP) {
		/* four independent chains: the core's issue width, not one
		 * chain's latency, bounds it, as a hit's instructions are; two
		 * hardware threads on one core share that width */
		uint64_t s1 = s * 3, s2 = s * 5, s3 = s * 7;

		for (size_t k = 0; k < w->ops; k++) {
			s = xorshift64(s);
			s1 = xorshift64(s1);
			s2 = xorshift64(s2);
			s3 = xorshift64(s3);
			acc += s1 + s2 + s3;
		}
	} else {
		for (size_t k = 0; k < w->ops; k++) {
			s = xorshift64(s);
			/* the hit rows' draw; the loads are independent, as hits are */
			if (w->kind != PR_ALU)
				acc += w->lines[(size_t)(((unsigned __int128)s * w->nlines) >> 64) * 8];
		}
	}
	w->secs = now() - t0;
	w->sink = acc + s; /* keeps the loop */
	return NULL;
}

/* Mops/s in total (operations / the slowest thread's time) of one run */
static double probe_run(enum probe kind, const uint64_t *lines, size_t nlines, size_t ops,
			int threads, uint64_t seed)
{
	struct probe_work w[64];
	pthread_barrier_t bar;
	double maxs = 0;
	uint64_t sink = 0;

	pthread_barrier_init(&bar, NULL, (unsigned)threads);
	for (int t = 0; t < threads; t++) {
		size_t n = kind == PR_PRIVATE ? nlines / (size_t)threads : nlines;

		w[t] = (struct probe_work){ .kind = kind, .lines = lines, .nlines = n, .ops = ops,
					    .seed = seed * 7919 + (uint64_t)t * 104729 + 1,
					    .bar = &bar, .idx = t };
		if (kind == PR_PRIVATE)
			w[t].lines = lines + (size_t)t * n * 8;
	}
	run_items(probe_worker, w, sizeof(w[0]), threads);
	for (int t = 0; t < threads; t++) {
		if (w[t].secs > maxs)
			maxs = w[t].secs;
		sink += w[t].sink;
	}
	pthread_barrier_destroy(&bar);
	if (sink == 42) /* never: the sums must look used */
		puts("");
	return (double)ops * threads / maxs / 1e6;
}

/* 1, 2, 4 ... maxthreads threads, each probe reps times (the probes
 * alternating within a repetition, to share drift); prints the table and
 * returns its JSON */
static json_t *bench_ceiling(int maxthreads, int reps)
{
	const size_t nlines = PROBE_BYTES / 64;
	uint64_t *lines = mmap(NULL, PROBE_BYTES, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	double one[PR_N] = { 0 };
	json_t *ja = json_array();

	if (lines == MAP_FAILED) {
		perror("ceiling: mmap");
		exit(1);
	}
	for (size_t i = 0; i < nlines * 8; i++)
		lines[i] = i;
	printf("\nhost ceiling (--ceiling): Mops/s in total, and the ratio to 1 thread; "
	       "%u KiB arrays, median of %d\n%7s", PROBE_BYTES >> 10, reps, "threads");
	for (int p = 0; p < PR_N; p++)
		printf(" | %12s %6s", probe_name[p], "ratio");
	printf("\n");
	for (int threads = 1; threads <= maxthreads;
	     threads = threads * 2 > maxthreads && threads < maxthreads ? maxthreads : threads * 2) {
		printf("%7d", threads);
		for (int p = 0; p < PR_N; p++) {
			double v[64], m;
			json_t *o = json_object(), *a = json_array();

			for (int r = 0; r < reps; r++) {
				v[r] = probe_run((enum probe)p, lines, nlines, PROBE_OPS, threads,
						 (uint64_t)r + 1);
				json_array_append_new(a, json_real(v[r]));
			}
			m = median(v, reps);
			if (threads == 1)
				one[p] = m;
			printf(" | %12.1f %6.2f", m, m / one[p]);
			json_object_set_new(o, "probe", json_string(probe_name[p]));
			json_object_set_new(o, "threads", json_integer(threads));
			json_object_set_new(o, "mops_total", json_real(m));
			json_object_set_new(o, "ratio_to_1", json_real(m / one[p]));
			json_object_set_new(o, "mops_samples", a);
			json_array_append_new(ja, o);
		}
		printf("\n");
	}
	munmap(lines, PROBE_BYTES);
	return ja;
}

int main(int argc, char **argv)
{
	int reps = 5, threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
	size_t ops = 2000000, miss_ops = 100000;
	size_t sizes[8] = { 1000, 10000, 100000 }, nsizes = 3;
	const char *json_path = NULL, *dat_path = NULL, *note = NULL;
	bool no_miss = false, no_hit = false, latency = false, ceiling = false, failed;
	static const size_t lat_sizes[] = { 256u << 10, 2u << 20, 8u << 20, 32u << 20, 256u << 20, 1u << 30 };
	double lat_ns[sizeof(lat_sizes) / sizeof(lat_sizes[0])];
	const size_t nlat = sizeof(lat_sizes) / sizeof(lat_sizes[0]);
	size_t mem_slots, mem_bytes, max_regions = 0;
	void *mem;
	json_t *root, *jr, *jm, *jc = NULL;
	double la[3] = { 0 }, load_start, handoff = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--reps") && i + 1 < argc)
			reps = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
			threads = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--ops") && i + 1 < argc)
			ops = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--json") && i + 1 < argc)
			json_path = argv[++i];
		else if (!strcmp(argv[i], "--dat") && i + 1 < argc)
			dat_path = argv[++i];
		else if (!strcmp(argv[i], "--note") && i + 1 < argc)
			note = argv[++i];
		else if (!strcmp(argv[i], "--miss-ops") && i + 1 < argc)
			miss_ops = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--no-miss"))
			no_miss = true;
		else if (!strcmp(argv[i], "--no-hit"))
			no_hit = true;
		else if (!strcmp(argv[i], "--ucx-ops") && i + 1 < argc)
			ucx_hit_ops = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--spread")) {
			if (spread_init()) {
				fprintf(stderr, "--spread: cannot read the CPU topology\n");
				return 2;
			}
		} else if (!strcmp(argv[i], "--disjoint"))
			disjoint = true;
		else if (!strcmp(argv[i], "--latency"))
			latency = true;
		else if (!strcmp(argv[i], "--ceiling"))
			ceiling = true;
		else if (!strcmp(argv[i], "--inside") && i + 1 < argc)
			hit_pages = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--quick")) {
			reps = 3;
			ops = 200000;
			miss_ops = 20000;
		} else if (!strcmp(argv[i], "--sizes") && i + 1 < argc) {
			char *s = argv[++i], *t;

			nsizes = 0;
			for (t = strtok(s, ","); t && nsizes < 8; t = strtok(NULL, ","))
				sizes[nsizes++] = strtoull(t, NULL, 0);
		} else {
			fprintf(stderr,
				"usage: %s [--reps N] [--threads N] [--ops N] [--sizes a,b,c] "
				"[--json FILE] [--dat FILE] [--note TEXT] [--quick] [--miss-ops N] [--no-miss] "
				"[--no-hit] [--disjoint] [--spread] [--ucx-ops N] [--latency] [--ceiling] [--inside N]\n",
				argv[0]);
			return 2;
		}
	}
	if (reps < 1 || reps > 64 || threads < 1 || threads > 64 || !ops || miss_ops < 4 ||
	    hit_pages < 1 || hit_pages > 65536) {
		fprintf(stderr, "bad arguments\n");
		return 2;
	}
	for (size_t i = 0; i < nsizes; i++)
		if (sizes[i] > max_regions)
			max_regions = sizes[i];
	/* Untouched address space: the caches never access the memory. */
	mem_slots = max_regions > miss_ops ? max_regions : miss_ops;
	mem_bytes = mem_slots * STRIDE;
	if (max_regions * hit_stride() > mem_bytes)
		mem_bytes = max_regions * hit_stride();
	mem = mmap(NULL, mem_bytes, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (mem == MAP_FAILED) {
		perror("mmap");
		return 1;
	}

	getloadavg(la, 3);
	load_start = la[0];
	for (size_t i = 0; i < nsizes && !no_hit; i++)
		bench_hits(sizes[i], threads, reps, ops, mem);
	if (!no_miss) {
		for (int warm = 0; warm < 2; warm++) {
			bench_miss(false, warm, reps, miss_ops, mem);
			bench_miss(true, warm, reps, miss_ops / 4, mem);
		}
	}

	printf("%-18s %8s %3s | %10s %9s | %10s %9s | %7s\n", "workload", "regions", "thr",
	       "peerdma ns", "Mops/s", "UCX ns", "Mops/s", "ratio");
	for (int i = 0; i < nrows; i++) {
		struct row *rw = &rows[i];

		printf("%-18s %8zu %3d | %10.1f %9.2f | %10.1f %9.2f | %7.3f%s\n", rw->name,
		       rw->regions, rw->threads, rw->ns[0], rw->mops[0], rw->ns[1], rw->mops[1],
		       rw->ns[0] / rw->ns[1], rw->errors[0] || rw->errors[1] ? "  (errors!)" : "");
	}
	printf("ns: median over %d repetitions of the mean time per get+put per thread; "
	       "ratio: peerdma ns / UCX ns\n",
	       reps);
	if (hit_pages > 1)
		printf("hit rows (--inside): regions of %" PRIu64 " pages, each lookup one page at random "
		       "inside one\n", hit_pages);
	if (latency) {
		printf("\nmemory latency (one dependent load of a random 64-byte line; the floor of a "
		       "lookup whose working set is that large)\n%12s %10s\n", "footprint", "ns/load");
		for (size_t i = 0; i < nlat; i++) {
			lat_ns[i] = chase_ns(lat_sizes[i]);
			printf("%9zu KiB %10.1f\n", lat_sizes[i] >> 10, lat_ns[i]);
		}
		handoff = handoff_ns();
		printf("one cache line passed between two threads (ping-pong, one way; the floor of a "
		       "hit on a region another core hit last): %.1f ns\n", handoff);
	}
	if (ceiling)
		jc = bench_ceiling(threads, reps);

	root = json_object();
	jm = json_object();
	machine_json(jm, note, load_start);
	getloadavg(la, 3);
	json_object_set_new(jm, "loadavg_1min_at_end", json_real(la[0]));
	json_object_set_new(root, "machine", jm);
	json_object_set_new(root, "reps", json_integer(reps));
	json_object_set_new(root, "ops_per_thread", json_integer((json_int_t)ops));
	json_object_set_new(root, "ucx_ops_per_thread",
			    json_integer((json_int_t)(ucx_hit_ops ? ucx_hit_ops : ops)));
	json_object_set_new(root, "miss_ops", json_integer((json_int_t)miss_ops));
	json_object_set_new(root, "hit_regions", json_string(disjoint ? "disjoint" : "shared"));
	json_object_set_new(root, "hit_region_pages", json_integer((json_int_t)hit_pages));
	json_object_set_new(root, "spread", n_spread ? json_pack("{si si}", "cores", n_cores,
								    "cpus", n_spread) :
						       json_null());
	json_object_set_new(root, "statistic", json_string("median of reps; ns per get+put per thread"));
	jr = json_array();
	for (int i = 0; i < nrows; i++) {
		struct row *rw = &rows[i];
		json_t *o = json_object();

		json_object_set_new(o, "workload", json_string(rw->name));
		json_object_set_new(o, "pattern", json_string(rw->pattern));
		json_object_set_new(o, "regions", json_integer((json_int_t)rw->regions));
		json_object_set_new(o, "threads", json_integer(rw->threads));
		for (int k = 0; k < 2; k++) {
			json_t *c = json_object(), *a = json_array();

			for (int r = 0; r < rw->reps; r++)
				json_array_append_new(a, json_real(rw->ns_all[k][r]));
			json_object_set_new(c, "ns_per_op", json_real(rw->ns[k]));
			json_object_set_new(c, "mops_total", json_real(rw->mops[k]));
			json_object_set_new(c, "ns_samples", a);
			json_object_set_new(c, "errors", json_integer((json_int_t)rw->errors[k]));
			json_object_set_new(o, k ? "ucx" : "peerdma", c);
		}
		json_object_set_new(o, "ratio_ns", json_real(rw->ns[0] / rw->ns[1]));
		json_array_append_new(jr, o);
	}
	json_object_set_new(root, "rows", jr);
	if (latency) {
		json_t *jl = json_array();

		for (size_t i = 0; i < nlat; i++) {
			json_t *o = json_object();

			json_object_set_new(o, "footprint_bytes", json_integer((json_int_t)lat_sizes[i]));
			json_object_set_new(o, "ns_per_load", json_real(lat_ns[i]));
			json_array_append_new(jl, o);
		}
		json_object_set_new(root, "latency", jl);
		json_object_set_new(root, "line_handoff_ns", json_real(handoff));
	}
	if (jc)
		json_object_set_new(root, "ceiling", jc);
	if (json_path && json_dump_file(root, json_path, JSON_INDENT(2)))
		fprintf(stderr, "cannot write %s\n", json_path);
	json_decref(root);

	if (dat_path) {
		FILE *f = fopen(dat_path, "w");

		if (!f) {
			perror(dat_path);
			return 1;
		}
		/* regions, then peerdma/UCX ns for: rand 1t, seq 1t, rand Nt, seq Nt */
		fprintf(f, "# regions pdma_rand_1t ucx_rand_1t pdma_seq_1t ucx_seq_1t "
			   "pdma_rand_Nt ucx_rand_Nt pdma_seq_Nt ucx_seq_Nt (N=%d)\n",
			threads);
		for (size_t i = 0; i < nsizes; i++) {
			double v[8] = { 0 };

			for (int j = 0; j < nrows; j++) {
				struct row *rw = &rows[j];
				int col;

				if (rw->regions != sizes[i] || strncmp(rw->name, "hit", 3))
					continue;
				col = (!strcmp(rw->pattern, "seq") ? 2 : 0) + (rw->threads > 1 ? 4 : 0);
				v[col] = rw->ns[0];
				v[col + 1] = rw->ns[1];
			}
			fprintf(f, "%zu", sizes[i]);
			for (int k = 0; k < 8; k++)
				fprintf(f, " %.2f", v[k]);
			fprintf(f, "\n");
		}
		fclose(f);
	}
	munmap(mem, mem_bytes);
	failed = hit_misses != 0;
	if (hit_misses)
		fprintf(stderr, "hit rows: %" PRIu64 " lookups of cached regions missed\n", hit_misses);
	for (int i = 0; i < nrows; i++)
		if (rows[i].errors[0] || rows[i].errors[1]) {
			fprintf(stderr, "%s, %zu regions, %d threads: operations failed\n",
				rows[i].name, rows[i].regions, rows[i].threads);
			failed = true;
		}
	return failed;
}
