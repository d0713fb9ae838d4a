// SPDX-License-Identifier: MIT
/*
 * The stale-registration adversary: every way an application changes the
 * memory under a registration it has closed (so the registration cache still
 * holds it), thousands of times, through the public MR API with the cache on,
 * under the host monitor named on the command line.
 *
 * A registration is stale when the cache hands back a region pinned over pages
 * the address range no longer has: after munmap+mmap at the same address,
 * mmap(MAP_FIXED) over it, free() of an mmap'ed or trimmed heap chunk and a
 * new malloc there, mremap, madvise(MADV_DONTNEED), or a simulated GPU free
 * and reallocation. Each scenario first proves the memory is cached (a second
 * registration is a hit), then changes the pages, then registers again: that
 * registration must pin anew (the cache's miss count grows) and a registration
 * of a range that is no longer mapped must fail with -EFAULT. When a monitor
 * cannot watch the memory the cache does not keep it; the suite reports that
 * ("cached 0 of N") and it is not an error. Where the new pages happen to be
 * the old ones (glibc reused a heap chunk without trimming) a hit is correct:
 * the scenario tells the two apart by a pattern written before the change.
 *
 * The oracle reads the domain's cache counters, which are internal: this
 * program links the static library, as the unit tests do.
 *
 * Usage: adversary [--monitor default|userfaultfd|memhooks|kernel|disabled]
 *                  [--rounds N] [--seed S] [--no-userfaultfd] [--expect M]
 *                  [--kernel-device PATH]
 * --kernel-device (implied as /dev/peerdma by --monitor kernel) opens the
 * domain with peerdma.ko: host memory is pinned through the module, and its
 * MMU notifier is the "kernel" monitor (the default then). Without the module
 * loaded it exits 77 (skipped); tests/vm/run runs it in the QEMU guest.
 * --no-userfaultfd installs a seccomp filter that makes userfaultfd(2) and
 * /dev/userfaultfd's ioctl fail with EPERM, as Docker's default profile does.
 * --expect names the monitor the cache must have picked (or "none").
 * Exit 0 when every scenario found 0 stale registrations; prints
 * "N passed, N failed" (one check per scenario).
 */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <linux/userfaultfd.h>

#ifdef PDMA_HAVE_SECCOMP
#include <seccomp.h>
#include <sys/ioctl.h>
#endif

#include "peerdma/mr.h"
#include "cache/cache.h"
#include "mem/sim.h"
#include "mr/domain.h"

#define LEN (64u * 1024u)
#define BIG (256u * 1024u) /* above the pinned mmap threshold: malloc mmaps it */
#define PAT 0x5a

enum scen {
	S_MUNMAP, S_FIXED, S_MALLOC_MMAP, S_MALLOC_BRK, S_MREMAP, S_MADVISE, S_SHARED, S_SIM, S_N
};
static const char *const scen_name[S_N] = {
	"munmap+mmap same address", "mmap(MAP_FIXED) over live", "malloc/free/malloc (mmap)",
	"malloc/free/trim/malloc (brk)", "mremap move + shrink", "madvise(DONTNEED)",
	"shared, hole punched by a child", "sim free/realloc",
};

struct tally {
	unsigned long rounds, primed, cached, stale, errors;
};

struct adv {
	struct pdma_domain *d;
	struct pdma_sim *sim;
	struct tally t[S_N];
	enum scen cur;
	unsigned long printed;
	bool host_cached; /* the cache keeps host registrations (a monitor runs) */
	int zero;         /* /dev/zero: the kernel's own writes into memory */
};

/* Registrations of memory the cache does not keep cannot be stale: they pin
 * every time, bypassing the cache and its counters. */
static bool kept(struct adv *a, enum pdma_hmem_iface iface)
{
	return iface != PDMA_HMEM_SYSTEM || a->host_cached;
}

static uint64_t misses(struct adv *a)
{
	struct pdma_cache_stats s;

	pdma_cache_get_stats(a->d->cache, &s);
	return s.misses;
}

static void report(struct adv *a, bool stale, const char *what, const void *p, int ret)
{
	if (stale)
		a->t[a->cur].stale++;
	else
		a->t[a->cur].errors++;
	if (a->printed++ < 20)
		fprintf(stderr, "%s: %s: %s at %p (ret %d)\n", scen_name[a->cur],
			stale ? "STALE" : "error", what, p, ret);
}

static int reg(struct adv *a, const void *p, size_t len, enum pdma_hmem_iface iface,
	       struct pdma_mr **mr)
{
	struct iovec iov = { .iov_base = (void *)p, .iov_len = len };
	struct pdma_mr_attr at = { .mr_iov = &iov, .iov_count = 1, .access = PDMA_ACCESS_ALL,
				   .iface = iface };

	return pdma_mr_regattr(a->d, &at, 0, mr);
}

/* Register and close twice; the second is a hit if the cache keeps this
 * memory. Leaves one closed, cached registration behind. */
static void prime(struct adv *a, const void *p, size_t len, enum pdma_hmem_iface iface)
{
	struct pdma_mr *mr;
	uint64_t m;
	int ret;

	for (int i = 0; i < 2; i++) {
		m = misses(a);
		ret = reg(a, p, len, iface, &mr);
		if (ret) {
			report(a, false, "registration of live memory failed", p, ret);
			return;
		}
		pdma_mr_close(mr);
	}
	a->t[a->cur].primed++;
	if (kept(a, iface) && misses(a) == m)
		a->t[a->cur].cached++;
}

/* The pages changed: the next registration must pin. */
static void fresh(struct adv *a, const void *p, size_t len, enum pdma_hmem_iface iface)
{
	struct pdma_mr *mr;
	uint64_t m = misses(a);
	int ret = reg(a, p, len, iface, &mr);

	if (ret) {
		report(a, false, "registration of new memory failed", p, ret);
		return;
	}
	if (kept(a, iface) && misses(a) == m)
		report(a, true, "served the old pages' registration", p, 0);
	pdma_mr_close(mr);
}

/* Nothing is mapped there any more: registering must fail with -EFAULT. */
static void gone(struct adv *a, const void *p, size_t len, enum pdma_hmem_iface iface)
{
	struct pdma_mr *mr;
	int ret = reg(a, p, len, iface, &mr);

	if (ret == 0) {
		report(a, true, "registered unmapped memory", p, 0);
		pdma_mr_close(mr);
	} else if (ret != -EFAULT) {
		report(a, false, "unmapped memory: wrong error", p, ret);
	}
}

/* extra: MAP_FIXED..., or MAP_SHARED for a shared mapping */
/* Is any page of [addr, addr + len) unmapped? */
static bool unmapped(uintptr_t addr, size_t len)
{
	unsigned char vec[BIG / 4096 + 2];
	uintptr_t s = addr & ~(uintptr_t)4095;

	return mincore((void *)s, ((addr + len - s) + 4095) & ~(size_t)4095, vec) &&
	       errno == ENOMEM;
}

static void *map(void *at, size_t len, int extra)
{
	int kind = extra & MAP_SHARED ? 0 : MAP_PRIVATE;
	void *p = mmap(at, len, PROT_READ | PROT_WRITE, kind | MAP_ANONYMOUS | extra, -1, 0);

	if (p == MAP_FAILED) {
		perror("mmap");
		exit(2);
	}
	memset(p, PAT, len);
	return p;
}

static void s_munmap(struct adv *a)
{
	char *p = map(NULL, LEN, 0);

	prime(a, p, LEN, PDMA_HMEM_SYSTEM);
	munmap(p, LEN);
	gone(a, p, LEN, PDMA_HMEM_SYSTEM);
	if (map(p, LEN, MAP_FIXED_NOREPLACE) != p)
		exit(2);
	fresh(a, p, LEN, PDMA_HMEM_SYSTEM);
	munmap(p, LEN);
}

static void s_fixed(struct adv *a)
{
	char *p = map(NULL, LEN, 0);

	prime(a, p, LEN, PDMA_HMEM_SYSTEM);
	map(p, LEN, MAP_FIXED);
	fresh(a, p, LEN, PDMA_HMEM_SYSTEM);
	/* Half of it replaced: a registration of the whole must pin again. */
	prime(a, p, LEN, PDMA_HMEM_SYSTEM);
	map(p + LEN / 2, LEN / 2, MAP_FIXED);
	fresh(a, p, LEN, PDMA_HMEM_SYSTEM);
	munmap(p, LEN);
}

static void s_malloc_mmap(struct adv *a)
{
	char *p = malloc(BIG), *q;

	if (!p)
		exit(2);
	memset(p, PAT, BIG);
	prime(a, p, BIG, PDMA_HMEM_SYSTEM);
	/* volatile: gcc -O2 -Wuse-after-free follows the integer, and using the
	 * freed address is the point here */
	volatile uintptr_t was = (uintptr_t)p;

	free(p); /* glibc munmaps the chunk inside free() */
	if (unmapped(was, BIG)) /* (a sanitizer's allocator keeps it) */
		gone(a, (void *)was, BIG, PDMA_HMEM_SYSTEM);
	q = malloc(BIG);
	if (!q)
		exit(2);
	memset(q, 0, BIG);
	fresh(a, q, BIG, PDMA_HMEM_SYSTEM);
	free(q);
}

static void s_malloc_brk(struct adv *a)
{
	char *p = malloc(LEN), *q;
	uintptr_t was = (uintptr_t)p;
	bool same;

	if (!p)
		exit(2);
	memset(p, PAT, LEN);
	prime(a, p, LEN, PDMA_HMEM_SYSTEM);
	free(p);
	malloc_trim(0); /* sbrk(-n) of the top, madvise(DONTNEED) of free pages */
	q = malloc(LEN);
	if (!q)
		exit(2);
	/* Same pages if the pattern survived in the middle (malloc writes only
	 * its chunk headers): then a hit is right; else the pages are new. */
	same = (uintptr_t)q == was && q[LEN / 2] == PAT;
	if (!same) {
		memset(q, 0, LEN);
		fresh(a, q, LEN, PDMA_HMEM_SYSTEM);
	}
	free(q);
}

static void s_mremap(struct adv *a)
{
	char *p = map(NULL, LEN, 0), *dst = map(NULL, 2 * LEN, 0), *r;

	prime(a, p, LEN, PDMA_HMEM_SYSTEM);
	/* Move the pages to dst (replacing what was there): p is unmapped. */
	prime(a, dst, LEN, PDMA_HMEM_SYSTEM);
	r = mremap(p, LEN, 2 * LEN, MREMAP_MAYMOVE | MREMAP_FIXED, dst);
	if (r != dst)
		exit(2);
	/* The grown tail has no pages yet, in a mapping the monitor watches:
	 * the kernel's own write there (read(2)) must not fail. A
	 * userfaultfd of the user-mode-only kind in missing-page mode made
	 * it EFAULT. */
	if (read(a->zero, dst + LEN, 4096) != 4096)
		report(a, false, "read(2) into a grown mapping's new pages failed", dst + LEN, -errno);
	gone(a, p, LEN, PDMA_HMEM_SYSTEM);
	fresh(a, dst, LEN, PDMA_HMEM_SYSTEM);
	/* Shrink in place: the tail is gone, a registration of the old length
	 * must fail rather than find the old region. */
	prime(a, dst, 2 * LEN, PDMA_HMEM_SYSTEM);
	if (mremap(dst, 2 * LEN, LEN, 0) != dst)
		exit(2);
	gone(a, dst, 2 * LEN, PDMA_HMEM_SYSTEM);
	munmap(dst, LEN);
}

static void s_madvise(struct adv *a)
{
	char *p = map(NULL, LEN, 0);

	prime(a, p, LEN, PDMA_HMEM_SYSTEM);
	/* A closed registration must not make the application's madvise fail. */
	if (madvise(p, LEN, MADV_DONTNEED))
		report(a, false, "madvise(MADV_DONTNEED) refused", p, -errno);
	else if (p[LEN / 2] != 0)
		report(a, false, "madvise(MADV_DONTNEED) kept the pages", p, 0);
	else
		fresh(a, p, LEN, PDMA_HMEM_SYSTEM);
	munmap(p, LEN);
}

/* Shared memory loses its pages through another process: no user-space
 * monitor of this one sees that, so the cache must not keep it. */
static void s_shared(struct adv *a)
{
	char *p = map(NULL, LEN, MAP_SHARED);
	pid_t pid;
	int st;

	prime(a, p, LEN, PDMA_HMEM_SYSTEM);
	pid = fork();
	if (pid == 0)
		_exit(madvise(p, LEN, MADV_REMOVE) ? 1 : 0);
	if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) {
		report(a, false, "child's madvise(MADV_REMOVE) failed", p, 0);
	} else if (p[LEN / 2] != 0) {
		report(a, false, "MADV_REMOVE kept the pages", p, 0);
	} else {
		fresh(a, p, LEN, PDMA_HMEM_SYSTEM);
	}
	munmap(p, LEN);
}

static void s_sim(struct adv *a)
{
	void *p, *q;
	unsigned char in[64], out[64];
	struct pdma_mr *mr;
	int ret;

	if (pdma_sim_alloc(a->sim, LEN, &p))
		exit(2);
	prime(a, p, LEN, PDMA_HMEM_SIM);
	pdma_sim_free(a->sim, p);
	gone(a, p, LEN, PDMA_HMEM_SIM);
	if (pdma_sim_alloc(a->sim, LEN, &q))
		exit(2);
	fresh(a, q, LEN, PDMA_HMEM_SIM);
	/* And the device writes the new allocation, not the freed one. */
	memset(in, (int)(a->t[S_SIM].rounds & 0xff), sizeof(in));
	ret = reg(a, q, LEN, PDMA_HMEM_SIM, &mr);
	if (!ret) {
		ret = pdma_sim_dma_write(a->d, pdma_mr_key(mr), (uint64_t)(uintptr_t)q + 100, in,
					 sizeof(in));
		memcpy(out, (char *)q + 100, sizeof(out));
		if (ret || memcmp(in, out, sizeof(in)))
			report(a, true, "device write missed the new allocation", q, ret);
		pdma_mr_close(mr);
	} else {
		report(a, false, "registration of new memory failed", q, ret);
	}
	pdma_sim_free(a->sim, q);
}

static void (*const scen_fn[S_N])(struct adv *) = {
	s_munmap, s_fixed, s_malloc_mmap, s_malloc_brk, s_mremap, s_madvise, s_shared, s_sim,
};

/* 0 if this process may have a userfaultfd of either kind, else the errno
 * (a seccomp filter, a kernel before 5.11 for an unprivileged process) */
static int uffd_refused(void)
{
	int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC);

#ifdef UFFD_USER_MODE_ONLY
	if (fd < 0)
		fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY);
#endif
	if (fd < 0)
		return errno;
	close(fd);
	return 0;
}

static int block_userfaultfd(void)
{
#ifdef PDMA_HAVE_SECCOMP
	/* Spelled out: SCMP_A1() leaves datum_b to the compiler's warnings. */
	const struct scmp_arg_cmp is_new = { .arg = 1, .op = SCMP_CMP_EQ,
					     .datum_a = USERFAULTFD_IOC_NEW, .datum_b = 0 };
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	int ret;

	if (!ctx)
		return -ENOMEM;
	ret = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(userfaultfd), 0);
	if (!ret)
		ret = seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
					     &is_new);
	if (!ret)
		ret = seccomp_load(ctx);
	seccomp_release(ctx);
	return ret;
#else
	return -ENOSYS;
#endif
}

int main(int argc, char **argv)
{
	struct pdma_domain_attr da;
	struct pdma_cache_stats cs;
	struct adv a;
	unsigned long rounds = 2000, seed = 1;
	const char *expect = NULL, *kdev = NULL, *mon;
	int failed = 0, checks = S_N + 1, ret;

	for (int i = 1; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(argv[i], "--monitor") && v) {
			setenv("PEERDMA_MR_CACHE_MONITOR", v, 1);
			if (!strcmp(v, "kernel") && !kdev)
				kdev = "/dev/peerdma";
			i++;
		} else if (!strcmp(argv[i], "--kernel-device") && v) {
			kdev = v;
			i++;
		} else if (!strcmp(argv[i], "--rounds") && v) {
			rounds = strtoul(v, NULL, 10);
			i++;
		} else if (!strcmp(argv[i], "--seed") && v) {
			seed = strtoul(v, NULL, 10);
			i++;
		} else if (!strcmp(argv[i], "--expect") && v) {
			expect = v;
			i++;
		} else if (!strcmp(argv[i], "--no-userfaultfd")) {
			ret = block_userfaultfd();
			if (ret) {
				fprintf(stderr, "adversary: seccomp filter: %s\n", strerror(-ret));
				return ret == -ENOSYS ? 77 : 2;
			}
		} else {
			fprintf(stderr, "usage: adversary [--monitor M] [--rounds N] [--seed S] "
					"[--no-userfaultfd] [--expect M] [--kernel-device PATH]\n");
			return 2;
		}
	}
	/* the userfaultfd monitor expected where the kernel gives none */
	if (expect && !strcmp(expect, "userfaultfd") && (ret = uffd_refused())) {
		printf("skipped: this process gets no userfaultfd here (%s)\n", strerror(ret));
		return 77;
	}
	memset(&a, 0, sizeof(a));
	a.zero = open("/dev/zero", O_RDONLY | O_CLOEXEC);
	if (a.zero < 0)
		return 2;
	if (getenv("PEERDMA_VALGRIND") && rounds > 100)
		rounds = 100;
	/* Keep BIG in the mmap size class: glibc otherwise raises its mmap
	 * threshold after the first free of an mmap'ed chunk. */
	mallopt(M_MMAP_THRESHOLD, 128 * 1024);
	srand((unsigned)seed);

	if (pdma_sim_open(&(struct pdma_sim_attr){ .mem_size = 16u << 20 }, &a.sim))
		return 2;
	pdma_domain_attr_init(&da);
	da.sim = a.sim;
	da.use_cache = 1;
	da.kernel_device = kdev;
	ret = pdma_domain_open(&da, &a.d);
	if (ret == -ENODEV && kdev) {
		printf("skipped: no %s (peerdma.ko not loaded)\n", kdev);
		pdma_sim_close(a.sim);
		return 77;
	}
	if (ret) {
		fprintf(stderr, "adversary: domain open failed: %s\n", strerror(-ret));
		return 2;
	}
	/* The monitor as the public API names it ("none": host memory is not
	 * cached). */
	mon = pdma_domain_cache_monitor(a.d);
	pdma_cache_get_stats(a.d->cache, &cs);
	a.host_cached = cs.mode[PDMA_HMEM_SYSTEM] != PDMA_CACHE_MODE_OFF;
	printf("adversary: monitor %s, host memory %s, %lu rounds, seed %lu, uid %u\n", mon,
	       a.host_cached ? "cached" : "not cached", rounds, seed, (unsigned)getuid());
	checks += expect != NULL;
	if (expect && strcmp(expect, mon)) {
		printf("FAIL: expected monitor %s, the cache picked %s\n", expect, mon);
		failed++;
	}

	for (unsigned long r = 0; r < rounds; r++) {
		/* Every scenario each round, in a random order, so the address
		 * reuse patterns mix. */
		int order[S_N];

		for (int i = 0; i < S_N; i++)
			order[i] = i;
		for (int i = S_N - 1; i > 0; i--) {
			int j = rand() % (i + 1), t = order[i];

			order[i] = order[j];
			order[j] = t;
		}
		for (int i = 0; i < S_N; i++) {
			a.cur = (enum scen)order[i];
			a.t[a.cur].rounds++;
			scen_fn[a.cur](&a);
		}
	}

	/* cached: of the registrations closed before a change (primed), how many
	 * the cache kept (a second registration hit). */
	printf("%-32s %8s %8s %8s %6s %6s\n", "scenario", "rounds", "primed", "cached", "stale",
	       "errors");
	for (int i = 0; i < S_N; i++) {
		struct tally *t = &a.t[i];
		bool ok = !t->stale && !t->errors;

		printf("%-32s %8lu %8lu %8lu %6lu %6lu  %s\n", scen_name[i], t->rounds, t->primed,
		       t->cached, t->stale, t->errors, ok ? "ok" : "FAIL");
		failed += !ok;
	}
	if (pdma_domain_close(a.d) || pdma_sim_close(a.sim)) {
		printf("FAIL: domain or sim close (registrations leaked)\n");
		failed++;
	}
	close(a.zero);
	printf("%d passed, %d failed\n", checks - failed, failed);
	return failed ? 1 : 0;
}
