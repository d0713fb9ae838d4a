// SPDX-License-Identifier: MIT
/*
 * In-guest test of libpeerdma's kdev backend against the real peerdma.ko:
 * a domain opened with kernel_device pins host memory through /dev/peerdma;
 * the simulated DMA device moves bytes through the MR's key; munmap of the
 * registered buffer makes the kernel revoke the pin (MMU notifier), the event
 * reaches the library's event thread, and the key stops working: no stale
 * access to pages the process no longer owns. Then fork(): the child writes
 * the registered memory, cannot register through the parent's domain
 * (-ECHILD) and closes the inherited MR and domain; the parent's pin is not
 * revoked (the kernel copied the pinned page for the child, so neither
 * process's write replaced it) and its key still works.
 *
 * Then the kernel as the registration cache's host monitor (use_cache, the
 * default monitor with a kernel device): ROUNDS rounds (argv[1], default
 * 4000) of register, close (cached), change the memory behind the address
 * (munmap + mmap at the same address, mmap MAP_FIXED over it, madvise
 * DONTNEED, mremap away and back, free + malloc of an mmap-sized chunk), and
 * register again at once, with no sleep: the registration must be the pages
 * mapped now (the module's physical addresses of the pin equal
 * /proc/self/pagemap's) and its pin live, else it is counted stale; a round
 * that changes nothing must be a cache hit. Prints "ok N - name" lines and a
 * closing "kdev: N passed, N failed".
 */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cache/cache.h"
#include "mr/domain.h"
#include "mem/kdev.h"
#include "peerdma/mr.h"
#include "mem/sim.h"
#include "uapi/peerdma.h"

static int passed, failed;

static void check(int cond, const char *name)
{
	printf("%s %d - %s\n", cond ? "ok" : "not ok", passed + failed + 1, name);
	if (cond)
		passed++;
	else
		failed++;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

static int pagemap = -1;

/* physical address mapped at va now (0: none) */
static uint64_t phys_of(uint64_t va)
{
	uint64_t e;

	if (pread(pagemap, &e, sizeof(e), (off_t)(va / 4096 * sizeof(e))) != sizeof(e) ||
	    !(e >> 63))
		return 0;
	return (e & ((1ULL << 55) - 1)) << 12;
}

/* Does the MR's first segment reach memory other than what is mapped now? */
static int mr_stale(struct pdma_domain *d, struct pdma_mr *m)
{
	const struct pdma_region *r = m->segs[0].region;
	uint32_t n = (uint32_t)(r->len / 4096), st = 0;
	uint64_t phys[64];

	if (n > 64 || pdma_kdev_pin_pages(d->kdev, r->pin, &st, phys, n) ||
	    st != PEERDMA_STATE_LIVE)
		return 1;
	for (uint32_t i = 0; i < n; i++)
		if (phys_of(r->start + i * 4096ULL) != phys[i])
			return 1;
	return 0;
}

enum change { SAME, UNMAP_MAP, MAP_OVER, DONTNEED, REMAP, FREE_MALLOC, NCHANGE };
static const char *const change_name[NCHANGE] = {
	"nothing", "munmap+mmap", "mmap MAP_FIXED over", "madvise DONTNEED",
	"mremap away and back", "free+malloc (mmap class)",
};

/* Change the memory behind [buf, buf + len) by c; returns the buffer now there. */
static char *change(enum change c, char *buf, size_t len)
{
	const int prot = PROT_READ | PROT_WRITE, fl = MAP_PRIVATE | MAP_ANONYMOUS;
	char *p = buf, *tmp;

	switch (c) {
	case SAME:
	case NCHANGE:
		break;
	case UNMAP_MAP:
		munmap(buf, len);
		p = mmap(buf, len, prot, fl | MAP_FIXED_NOREPLACE, -1, 0);
		break;
	case MAP_OVER:
		p = mmap(buf, len, prot, fl | MAP_FIXED, -1, 0);
		break;
	case DONTNEED:
		madvise(buf, len, MADV_DONTNEED);
		break;
	case REMAP:
		tmp = mmap(NULL, len, PROT_NONE, fl, -1, 0);
		tmp = mremap(buf, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, tmp);
		p = tmp == MAP_FAILED ? tmp : mremap(tmp, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, buf);
		break;
	case FREE_MALLOC:
		free(buf);
		p = malloc(len);
		break;
	}
	if (p != MAP_FAILED && p)
		memset(p, (int)c + 1, len);
	return p == MAP_FAILED ? NULL : p;
}

static void cached_rounds(long rounds)
{
	const size_t len = 64 * 1024; /* malloc serves it with mmap (threshold 32 KiB) */
	long stale[NCHANGE] = { 0 }, done[NCHANGE] = { 0 }, nohit = 0, errors = 0, reused = 0;
	struct pdma_domain_attr a;
	struct pdma_domain *d = NULL;
	struct pdma_cache_stats st0, st1;
	char *mbuf = MAP_FAILED, *hbuf = NULL;
	int ret;

	pagemap = open("/proc/self/pagemap", O_RDONLY);
	mallopt(M_MMAP_THRESHOLD, 32 * 1024); /* fixed: no dynamic threshold */
	pdma_domain_attr_init(&a);
	a.kernel_device = "/dev/peerdma";
	a.use_cache = 1;
	ret = pdma_domain_open(&a, &d);
	check(ret == 0 && pagemap >= 0, "cached domain with kernel_device opens");
	if (ret)
		return;
	pdma_cache_get_stats(d->cache, &st0);
	check(st0.monitor == PDMA_CACHE_MONITOR_KERNEL &&
		      st0.mode[PDMA_HMEM_SYSTEM] == PDMA_CACHE_MODE_TRUST,
	      "the kernel is the cache's host monitor (default), host memory cached");
	mbuf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	hbuf = malloc(len);
	if (mbuf == MAP_FAILED || !hbuf)
		rounds = 0;
	else
		memset(mbuf, 0, len);
	for (long i = 0; i < rounds; i++) {
		enum change c = (enum change)(i % NCHANGE);
		char *nb, *buf, **bp = c == FREE_MALLOC ? &hbuf : &mbuf;
		struct pdma_mr *m = NULL;

		buf = *bp;

		/* register and close: the region stays cached */
		if (pdma_mr_reg(d, buf, len, PDMA_REMOTE_WRITE, 0, 0, 0, &m, NULL) || !m) {
			errors++;
			break;
		}
		stale[c] += mr_stale(d, m);
		pdma_mr_close(m);
		pdma_cache_get_stats(d->cache, &st0);
		nb = change(c, buf, len);
		if (!nb) {
			errors++;
			*bp = NULL;
			break;
		}
		reused += c == FREE_MALLOC && nb == buf;
		buf = *bp = nb;
		/* at once: the change is in the index before the lookup */
		m = NULL;
		if (pdma_mr_reg(d, buf, len, PDMA_REMOTE_WRITE, 0, 0, 0, &m, NULL) || !m) {
			errors++;
			break;
		}
		stale[c] += mr_stale(d, m);
		pdma_cache_get_stats(d->cache, &st1);
		if (c == SAME && st1.misses != st0.misses)
			nohit++;
		done[c]++;
		pdma_mr_close(m);
	}
	for (int c = 0; c < NCHANGE; c++)
		printf("  kernel monitor: %-26s %6ld rounds, %ld stale\n", change_name[c], done[c],
		       stale[c]);
	printf("  kernel monitor: malloc returned the freed address in %ld of %ld rounds\n",
	       reused, done[FREE_MALLOC]);
	{
		long total = 0, bad = 0;

		for (int c = 0; c < NCHANGE; c++) {
			total += done[c];
			bad += stale[c];
		}
		check(!errors && total == rounds, "every round registered (no error)");
		check(bad == 0, "kernel monitor: 0 stale registrations");
	}
	check(nohit == 0, "an unchanged buffer is a cache hit");
	free(hbuf);
	if (mbuf && mbuf != MAP_FAILED)
		munmap(mbuf, len);
	check(pdma_domain_close(d) == 0, "cached domain closes");
	close(pagemap);
}

/* The child's half of fork_keeps_pin: exit status 0, or the step that failed. */
static int fork_child(struct pdma_domain *d, struct pdma_mr *m, char *buf, size_t len)
{
	struct pdma_mr *cm;

	memset(buf, 'C', len); /* the child writes to the registered memory */
	if (pdma_mr_reg(d, buf, len, PDMA_REMOTE_READ, 0, 0, 0, &cm, NULL) != -ECHILD)
		return 10;
	if (pdma_mr_close(m))
		return 11; /* must not unpin the parent's handle */
	if (pdma_domain_close(d))
		return 12; /* must not stop the parent's event thread */
	return 0;
}

static void fork_keeps_pin(struct pdma_domain *d)
{
	const size_t len = 4 * 4096;
	char *buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct pdma_mr *m = NULL;
	uint64_t ev0;
	char out[8];
	int st = -1;
	pid_t pid;

	memset(buf, 'P', len);
	if (pdma_mr_reg(d, buf, len, PDMA_REMOTE_READ | PDMA_REMOTE_WRITE, 0, 0, 0, &m, NULL)) {
		check(0, "fork: register host memory");
		return;
	}
	ev0 = pdma_kdev_events(d->kdev);
	pid = fork();
	if (pid == 0)
		_exit(fork_child(d, m, buf, len));
	waitpid(pid, &st, 0);
	check(WIFEXITED(st) && WEXITSTATUS(st) == 0,
	      "fork: child writes the memory, gets -ECHILD, closes MR and domain (exit 0)");
	if (WIFEXITED(st) && WEXITSTATUS(st))
		printf("  child failed at step %d\n", WEXITSTATUS(st));
	memset(buf + 4096, 'Q', 4096); /* the parent writes too */
	sleep_ms(100);
	check(pdma_kdev_events(d->kdev) == ev0,
	      "fork: the parent's pin is not revoked (the kernel copied the page for the child)");
	check(pdma_sim_dma_read(d, pdma_mr_key(m), (uintptr_t)buf, out, 4) == 0 &&
		      !memcmp(out, "PPPP", 4),
	      "fork: the parent's key still reads the parent's bytes");
	check(pdma_sim_dma_write(d, pdma_mr_key(m), (uintptr_t)buf + 8192, "after", 5) == 0 &&
		      !memcmp(buf + 8192, "after", 5),
	      "fork: the parent's key still writes");
	check(pdma_mr_close(m) == 0, "fork: the parent closes its MR");
	munmap(buf, len);
}

int main(int argc, char **argv)
{
	const size_t len = 8 * 4096;
	struct pdma_domain_attr a;
	struct pdma_domain *d = NULL;
	struct pdma_mr *m = NULL;
	char *buf, out[8];
	uint64_t key;
	int ret, i;

	pdma_domain_attr_init(&a);
	a.kernel_device = "/dev/peerdma";
	ret = pdma_domain_open(&a, &d);
	check(ret == 0, "domain with kernel_device opens /dev/peerdma");
	if (ret) {
		printf("kdev: %d passed, %d failed\n", passed, failed + 10);
		return 1;
	}
	{
		struct pdma_domain_attr q;

		check(pdma_domain_query(d, &q) == 0 && q.kernel_device &&
			      !strcmp(q.kernel_device, "/dev/peerdma") &&
			      q.kernel_device != a.kernel_device,
		      "query reports the kernel device (the domain's own copy)");
	}
	check((pdma_kdev_caps(d->kdev) & 1) != 0, "module reports host pinning (CAP_HOST)");

	buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	memset(buf, 0, len);
	ret = pdma_mr_reg(d, buf + 100, len - 200, PDMA_REMOTE_READ | PDMA_REMOTE_WRITE, 0, 0, 0,
			  &m, NULL);
	check(ret == 0, "register host memory through the kernel");
	key = m ? pdma_mr_key(m) : 0;
	check(pdma_sim_dma_write(d, key, (uintptr_t)buf + 5000, "kernel", 6) == 0 &&
		      !memcmp(buf + 5000, "kernel", 6),
	      "DMA by key lands in the pinned pages");

	/* Unmapping the registered pages: the MMU notifier revokes the pin. */
	munmap(buf, len);
	for (i = 0; i < 200 && !pdma_kdev_events(d->kdev); i++)
		sleep_ms(5);
	check(pdma_kdev_events(d->kdev) == 1, "munmap produced exactly one revocation event");
	ret = pdma_sim_dma_read(d, key, (uintptr_t)buf + 5000, out, 6);
	check(ret == -EFAULT, "the revoked MR's key no longer reaches memory (-EFAULT)");
	check(m && pdma_mr_close(m) == 0, "close the revoked MR (unpins the kernel handle)");
	fork_keeps_pin(d);
	check(pdma_domain_close(d) == 0, "domain closes, kdev thread and file released");
	cached_rounds(argc > 1 ? atol(argv[1]) : 4000);
	printf("kdev: %d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
