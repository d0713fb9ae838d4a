// SPDX-License-Identifier: MIT
/*
 * peerdma bench: quick measurements of the registration path on this machine
 * (no GPU needed), each next to its ceiling measured in the same run:
 *   reg   registration + close cost (host 4 KiB..16 MiB, sim GPU 64 KiB..16 MiB),
 *         and the cached re-registration of the same buffer (use_cache domain);
 *         then the cached host registration (hit and miss) under each host
 *         monitor, userfaultfd and memhooks, the hit next to the lib/cache
 *         find + put beneath it ("hit alone", and the ratio "x hit") and
 *         the two domain-lock pairs it takes ("locks"; "x both":
 *         the registration over hit + locks, its floor with this locking);
 *   dma   transfers through the simulated DMA device by key vs plain memcpy of
 *         the same sizes (the copy is the device's physical limit here).
 * Prints a table; --json FILE writes the rows. The full benchmarks (UCX
 * comparison, GPU) are programs under bench/.
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "cmd.h"
#include "peerdma/mr.h"
#include "cache/cache.h"
#include "mem/mem.h"
#include "mem/sim.h"
#include "mr/domain.h"
#include "opt.h"

#define RW (PDMA_READ | PDMA_WRITE | PDMA_REMOTE_READ | PDMA_REMOTE_WRITE)

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void row(json_t *rows, const char *test, const char *mem, size_t bytes, double ns,
		double ceiling_ns)
{
	char sz[32];

	if (bytes >= (1u << 20))
		snprintf(sz, sizeof(sz), "%zu MiB", bytes >> 20);
	else if (bytes >= 1024)
		snprintf(sz, sizeof(sz), "%zu KiB", bytes >> 10);
	else
		snprintf(sz, sizeof(sz), "%zu B", bytes);
	printf("  %-20s %-6s %9s %12.0f", test, mem, sz, ns);
	if (ceiling_ns > 0)
		printf(" %12.0f %8.2f %9.2f GB/s", ceiling_ns, ceiling_ns / ns, bytes / ns);
	printf("\n");
	json_array_append_new(rows, json_pack("{s:s,s:s,s:I,s:f,s:f}", "test", test, "memory", mem,
					      "bytes", (json_int_t)bytes, "ns", ns, "ceiling_ns",
					      ceiling_ns));
}

/* n registrations + closes with attribute template *a, the i-th of bufs[i %
 * nbufs] (len bytes each); the mean in *ns. */
static int reg_close_ns(struct pdma_domain *d, const struct pdma_mr_attr *a, void *const *bufs,
			int nbufs, size_t len, int n, double *ns)
{
	struct iovec iov = { NULL, len };
	struct pdma_mr_attr at = *a;
	double t0 = now_ns();
	int ret = 0;

	at.mr_iov = &iov;
	at.iov_count = 1;
	for (int i = 0; i < n && !ret; i++) {
		struct pdma_mr *mr;

		iov.iov_base = bufs[i % nbufs];
		ret = pdma_mr_regattr(d, &at, 0, &mr);
		if (!ret)
			ret = pdma_mr_close(mr);
	}
	*ns = (now_ns() - t0) / n;
	return ret;
}

/* Registration + close of one buffer, mean of iters. */
static int bench_reg(json_t *rows, int iters)
{
	static const size_t sizes[] = { 4096, 1u << 16, 1u << 20, 16u << 20 };
	struct pdma_sim_attr sa = { .mem_size = 64u << 20 };
	struct pdma_domain_attr da;
	struct pdma_domain *d, *dc;
	struct pdma_sim *sim;
	int ret;

	ret = pdma_sim_open(&sa, &sim);
	if (ret)
		return ret;
	pdma_domain_attr_init(&da);
	da.sim = sim;
	ret = pdma_domain_open(&da, &d);
	if (ret)
		goto out_sim;
	da.use_cache = 1;
	ret = pdma_domain_open(&da, &dc);
	if (ret)
		goto out_d;
	printf("  %-20s %-6s %9s %12s\n", "registration", "memory", "size", "ns/op");
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]) && !ret; i++) {
		size_t len = sizes[i];
		char *host = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
				  -1, 0);
		void *gpu = NULL;

		if (host == MAP_FAILED)
			return -ENOMEM;
		memset(host, 1, len);
		ret = pdma_sim_alloc(sim, len, &gpu);
		for (int kind = 0; kind < 4 && !ret; kind++) {
			struct pdma_mr_attr a = { .access = RW,
						  .iface = kind & 1 ? PDMA_HMEM_SIM
								    : PDMA_HMEM_SYSTEM };
			void *buf = kind & 1 ? gpu : host;
			double ns;

			ret = reg_close_ns(kind >= 2 ? dc : d, &a, &buf, 1, len, iters, &ns);
			row(rows, kind >= 2 ? "reg+close (cache)" : "reg+close", kind & 1 ? "sim" : "host",
			    len, ns, 0);
		}
		if (gpu)
			pdma_sim_free(sim, gpu);
		munmap(host, len);
	}
	pdma_domain_close(dc);
out_d:
	pdma_domain_close(d);
out_sim:
	pdma_sim_close(sim);
	return ret;
}

/* One row of bench_reg_monitors: kind "hit" or "miss"; ceiling_ns > 0: the
 * cache hit alone (lib/cache find + put), printed with the ratio, and
 * locks_ns, the domain-lock operations a cached reg+close takes (below). */
static void monitor_row(json_t *rows, const char *kind, const char *asked, const char *runs,
			size_t len, double ns, double ceiling_ns, double locks_ns)
{
	char test[64], json_test[32];

	snprintf(test, sizeof(test), "%s, asked %s", kind, asked);
	snprintf(json_test, sizeof(json_test), "reg+close (cache %s)", kind);
	printf("  %-28s %-12s %9s %12.0f", test, runs, "64 KiB", ns);
	if (ceiling_ns > 0)
		printf(" %12.1f %8.1f %10.1f %8.1f", ceiling_ns, ns / ceiling_ns, locks_ns,
		       ns / (ceiling_ns + locks_ns));
	printf("\n");
	json_array_append_new(rows, json_pack("{s:s,s:s,s:s,s:I,s:f,s:f,s:f}", "test", json_test,
					      "memory", "host", "monitor", runs, "bytes",
					      (json_int_t)len, "ns", ns, "cache_hit_ns",
					      ceiling_ns, "domain_locks_ns", locks_ns));
}

/* What the locking of a cached reg+close costs in this process: the domain
 * lock of d (lib/mr/domain.h) taken and released twice, as pdma_mr_regattr
 * and pdma_mr_close each take it once, uncontended. In a process that never
 * had a second thread the lock is a plain store; this one has had the
 * userfaultfd monitor's thread wherever that monitor runs (its row comes
 * first). There a take is an atomic exchange, until this thread has taken
 * the lock PDMA_BIAS_AFTER times in a row and owns it (lib/mr/lock.h): then
 * it is plain stores again, as for a program's one registering thread.
 * With the hit alone it is the floor of a registration that makes its key
 * visible to devices under the domain lock. Mean ns of n. */
static double domain_locks_ns(struct pdma_domain *d, int n)
{
	double t0 = now_ns();

	for (int i = 0; i < n; i++) {
		pdma_dom_lock(d);
		pdma_dom_unlock(d);
		pdma_dom_lock(d);
		pdma_dom_unlock(d);
	}
	return (now_ns() - t0) / n;
}

/* The hit beneath a cached registration, alone: what seg_pin (lib/mr/mr.c)
 * does for host memory, pdma_cache_find + pdma_cache_put, in a cache of its
 * own under the same monitor choice. Mean ns of n, or 0 when the host
 * memory is not trusted by that cache (no find path) or not cached. */
static double cache_hit_ns(void *buf, size_t len, int n)
{
	struct pdma_cache_attr ca;
	struct pdma_cache *c;
	struct pdma_region *r;
	double t0, ns = 0;

	pdma_cache_attr_from_env(&ca);
	if (pdma_cache_open(&ca, &c))
		return 0;
	if (!pdma_cache_find(c, &pdma_mem_host_ops, NULL, PDMA_HMEM_SYSTEM,
			     (uint64_t)(uintptr_t)buf, len, &r)) {
		pdma_cache_put(c, r); /* already cached: not a fresh cache */
		goto out;
	}
	{
		struct pdma_mem_alloc al;

		if (pdma_mem_host_ops.query(NULL, (uint64_t)(uintptr_t)buf, len, &al) ||
		    pdma_cache_get(c, &pdma_mem_host_ops, NULL, PDMA_HMEM_SYSTEM,
				   (uint64_t)(uintptr_t)buf, len, &al, &r))
			goto out;
		pdma_cache_put(c, r); /* the miss that caches it */
	}
	t0 = now_ns();
	for (int i = 0; i < n; i++) {
		if (pdma_cache_find(c, &pdma_mem_host_ops, NULL, PDMA_HMEM_SYSTEM,
				    (uint64_t)(uintptr_t)buf, len, &r)) {
			ns = -1;
			break;
		}
		pdma_cache_put(c, r);
	}
	ns = ns < 0 ? 0 : (now_ns() - t0) / n;
out:
	pdma_cache_close(c);
	return ns;
}

/*
 * The cached host registration under each host monitor, in one run: a hit
 * (reg+close of a buffer already cached) and a miss (first registration of a
 * fresh mapping: pin, watch, index). The monitor is chosen the way a user
 * chooses it, with PEERDMA_MR_CACHE_MONITOR, and the one the cache actually
 * runs is printed (userfaultfd may be refused, memhooks under sanitizers).
 */
static int bench_reg_monitors(json_t *rows, int iters)
{
	static const char *const mons[] = { "userfaultfd", "memhooks" };
	const size_t len = 1u << 16;
	const char *saved = getenv("PEERDMA_MR_CACHE_MONITOR");
	char *keep = saved ? strdup(saved) : NULL;
	int ret = 0, nmiss = iters < 2000 ? iters : 2000;

	printf("\n  %-28s %-12s %9s %12s %12s %8s %10s %8s\n", "host registration, cached",
	       "monitor", "size", "ns/op", "hit alone", "x hit", "locks", "x both");
	for (size_t m = 0; m < sizeof(mons) / sizeof(mons[0]) && !ret; m++) {
		struct pdma_domain_attr da;
		struct pdma_domain *d;
		char **bufs = calloc((size_t)nmiss, sizeof(*bufs));
		const struct pdma_mr_attr a = { .access = RW };
		const char *runs;
		double hit, miss, locks;

		setenv("PEERDMA_MR_CACHE_MONITOR", mons[m], 1);
		pdma_domain_attr_init(&da);
		da.use_cache = 1;
		ret = bufs ? pdma_domain_open(&da, &d) : -ENOMEM;
		if (ret) {
			free(bufs);
			break;
		}
		runs = pdma_domain_cache_monitor(d);
		for (int i = 0; i < nmiss; i++) {
			bufs[i] = mmap(NULL, len, PROT_READ | PROT_WRITE,
				       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			if (bufs[i] == MAP_FAILED) {
				bufs[i] = NULL;
				ret = -ENOMEM;
				break;
			}
			memset(bufs[i], 1, len);
		}
		/* Each buffer once (misses), then the first again and again. */
		if (!ret)
			ret = reg_close_ns(d, &a, (void *const *)bufs, nmiss, len, nmiss, &miss);
		if (!ret)
			ret = reg_close_ns(d, &a, (void *const *)bufs, 1, len, iters, &hit);
		locks = ret ? 0 : domain_locks_ns(d, iters);
		pdma_domain_close(d);
		if (!ret) {
			/* hit: pdma_mr_regattr + pdma_mr_close of memory the cache
			 * holds, next to the cache hit beneath it */
			monitor_row(rows, "hit", mons[m], runs, len, hit,
				    cache_hit_ns(bufs[0], len, iters), locks);
			monitor_row(rows, "miss", mons[m], runs, len, miss, 0, 0);
		}
		for (int i = 0; i < nmiss; i++)
			if (bufs[i])
				munmap(bufs[i], len);
		free(bufs);
	}
	if (keep) {
		setenv("PEERDMA_MR_CACHE_MONITOR", keep, 1);
		free(keep);
	} else {
		unsetenv("PEERDMA_MR_CACHE_MONITOR");
	}
	return ret;
}

/* Device transfers by key vs memcpy of the same bytes. */
static int bench_dma(json_t *rows, int iters)
{
	static const size_t sizes[] = { 64, 1024, 8192, 1u << 16, 1u << 20, 8u << 20 };
	const size_t max = 8u << 20;
	struct pdma_sim_attr sa = { .mem_size = 32u << 20 };
	struct pdma_domain_attr da;
	struct pdma_domain *d;
	struct pdma_sim *sim;
	struct pdma_mr *m;
	struct iovec iov;
	struct pdma_mr_attr a = { .mr_iov = &iov, .iov_count = 1, .access = RW,
				  .iface = PDMA_HMEM_SIM };
	char *src;
	void *gpu;
	int ret;

	src = malloc(max);
	if (!src)
		return -ENOMEM;
	memset(src, 7, max);
	ret = pdma_sim_open(&sa, &sim);
	if (ret)
		goto out_src;
	pdma_domain_attr_init(&da);
	da.sim = sim;
	da.mr_mode &= ~PDMA_MR_VIRT_ADDR;
	ret = pdma_domain_open(&da, &d);
	if (ret)
		goto out_sim;
	ret = pdma_sim_alloc(sim, max, &gpu);
	if (ret)
		goto out_d;
	iov.iov_base = gpu;
	iov.iov_len = max;
	ret = pdma_mr_regattr(d, &a, 0, &m);
	if (ret)
		goto out_gpu;
	memset(gpu, 0, max); /* fault the pages in before timing either side */
	printf("\n  %-20s %-6s %9s %12s %12s %8s %14s\n", "transfer", "memory", "size", "ns/op",
	       "memcpy ns", "of peak", "throughput");
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]) && !ret; i++) {
		size_t len = sizes[i];
		int n = (int)(iters * (size_t)4096 / (len < 4096 ? 4096 : len)) + 8;
		double dma_ns, cpy_ns;

		/* Best of three for each side: noise only ever adds time. */
		cpy_ns = dma_ns = 1e300;
		for (int rep = 0; rep < 3 && !ret; rep++) {
			double t0 = now_ns();
			for (int k = 0; k < n; k++)
				memcpy((char *)gpu + (k & 1) * (max - len) / 2, src, len);
			t0 = (now_ns() - t0) / n;
			cpy_ns = t0 < cpy_ns ? t0 : cpy_ns;
			t0 = now_ns();
			for (int k = 0; k < n && !ret; k++)
				ret = pdma_sim_dma_write(d, pdma_mr_key(m), (k & 1) * (max - len) / 2,
							 src, len);
			t0 = (now_ns() - t0) / n;
			dma_ns = t0 < dma_ns ? t0 : dma_ns;
		}
		row(rows, "sim DMA write by key", "sim", len, dma_ns, cpy_ns);
	}
	pdma_mr_close(m);
out_gpu:
	pdma_sim_free(sim, gpu);
out_d:
	pdma_domain_close(d);
out_sim:
	pdma_sim_close(sim);
out_src:
	free(src);
	return ret;
}

struct bench_args {
	const char *json_path, *which;
	uint32_t iters;
};

/* Parse and check: 0 to run, 1 after --help, 2 after a one-line error. */
static int bench_parse(int argc, char **argv, struct bench_args *a)
{
	static const struct option opts[] = {
		{ "json", required_argument, NULL, 'j' },
		{ "iters", required_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct pdma_opt o;
	int c;

	a->json_path = NULL;
	a->which = "all";
	a->iters = 200;
	pdma_opt_init(&o, "peerdma bench", opts, "j:n:h");
	while ((c = pdma_opt_next(&o, argc, argv)) != -1) {
		int bad = 0;

		switch (c) {
		case 'j': bad = pdma_opt_str(&o, &a->json_path); break;
		case 'n': bad = pdma_opt_u32(&o, 1, 1000000, &a->iters); break;
		case 'h':
			printf("usage: peerdma bench [reg|dma|all] [--iters N] [--json FILE]\n\n"
			       "  reg  registration + close cost, host and sim GPU, with and without "
			       "the cache\n  dma  sim DMA device transfers by key vs memcpy (ceiling)\n"
			       "  -n, --iters N   repetitions, 1..1000000 (default 200)\n"
			       "  -j, --json FILE write the rows as JSON\n");
			return 1;
		default:
			return 2; /* getopt_long said why, in one line */
		}
		if (bad)
			return 2;
	}
	if (optind < argc)
		a->which = argv[optind++];
	if (optind < argc)
		return pdma_opt_fail(&o, "unexpected argument '%s'", argv[optind]);
	if (strcmp(a->which, "reg") && strcmp(a->which, "dma") && strcmp(a->which, "all"))
		return pdma_opt_fail(&o, "unknown benchmark '%s' (reg, dma, all)", a->which);
	return 0;
}

int pdma_cmd_bench_check(int argc, char **argv)
{
	struct bench_args a;

	return bench_parse(argc, argv, &a) == 2 ? 2 : 0;
}

int pdma_cmd_bench(int argc, char **argv)
{
	struct bench_args a;
	json_t *rows;
	int ret = bench_parse(argc, argv, &a);

	if (ret)
		return ret == 1 ? 0 : 2;
	const char *json_path = a.json_path, *which = a.which;
	int iters = (int)a.iters;

	rows = json_array();
	if (!strcmp(which, "reg") || !strcmp(which, "all"))
		ret = bench_reg(rows, iters);
	if (!ret && (!strcmp(which, "reg") || !strcmp(which, "all")))
		ret = bench_reg_monitors(rows, iters);
	if (!ret && (!strcmp(which, "dma") || !strcmp(which, "all")))
		ret = bench_dma(rows, iters);
	if (ret)
		fprintf(stderr, "peerdma bench: %s\n", pdma_strerror(ret));
	else if (json_path && json_dump_file(rows, json_path, JSON_INDENT(2))) {
		fprintf(stderr, "peerdma bench: cannot write %s\n", json_path);
		ret = -EIO;
	}
	json_decref(rows);
	return ret ? 1 : 0;
}
