// SPDX-License-Identifier: GPL-2.0
/*
 * Fault injection: every provider call of a pin and a client attach fails in
 * turn (gpusim's fail_nth), and, on the debug kernel, every allocation the
 * kernel makes for them (/proc/thread-self/fail-nth with failslab). Each
 * failure must reach user space as the documented errno (ENOMEM) and leave
 * nothing behind: no live pin, no page table, mapping or dma-buf attachment
 * (kmemleak, on the debug kernel, checks the rest at the end of the run).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"

enum { F_HOST, F_GPU, F_GPU_CB, F_DMABUF, F_N };
static const char *const fname[F_N] = { "host", "gpu", "gpu-callback", "dmabuf" };

struct fctx {
	int fd, gfd, efd, bfd;
	uint64_t va;
	void *host;
};

/*
 * A fault source: arm(n) makes the nth fault point from now fail (0: none);
 * left() says how many are still to go (0: it fired). gpusim's counts its
 * provider calls; the task's counts every allocation of this thread, so its
 * file stays open (opening it would allocate).
 */
struct fault_src {
	const char *what;
	int (*arm)(int n);
	int (*left)(void);
};

static int gpusim_arm(int n)
{
	char v[16];

	snprintf(v, sizeof(v), "%d", n);
	return write_param("gpusim", "fail_nth", v);
}

static int gpusim_left(void)
{
	return (int)read_param("gpusim", "fail_nth");
}

static int task_fd = -1;

static int task_arm(int n)
{
	char v[16];

	snprintf(v, sizeof(v), "%d", n);
	return pwrite(task_fd, v, strlen(v), 0) < 0 ? -1 : 0;
}

static int task_left(void)
{
	char v[16] = "";

	return pread(task_fd, v, sizeof(v) - 1, 0) > 0 ? atoi(v) : -1;
}

/*
 * Pin one handle of @kind and attach the edu client to it, with the nth fault
 * point armed. Returns 0 or the errno of the step that failed; *fired says
 * whether the fault was injected.
 */
static int scenario(struct fctx *c, int kind, const struct fault_src *src, int n,
		    const char **step, int *fired)
{
	struct peerdma_edu_attach a = { .peerdma_fd = c->fd };
	uint64_t h;
	int e = 0;

	*step = "pin";
	if (src->arm(n))
		return -1;
	switch (kind) {
	case F_HOST:
		h = pin(c->fd, PEERDMA_KIND_HOST, 0, (uintptr_t)c->host, 4 * PAGE, NULL);
		break;
	case F_DMABUF:
		h = pin_buf(c->fd, c->bfd, 0, 2 * GPAGE, NULL);
		break;
	default:
		h = pin(c->fd, PEERDMA_KIND_GPU, kind == F_GPU_CB ? PEERDMA_PIN_GPU_CALLBACK : 0,
			c->va, 2 * GPAGE, NULL);
		break;
	}
	if (!h)
		e = errno;
	*fired = src->left() == 0;
	if (h && !*fired) {
		*step = "attach";
		a.handle = h;
		if (ioctl(c->efd, PEERDMA_EDU_IOC_ATTACH, &a))
			e = errno;
		*fired = src->left() == 0;
	}
	src->arm(0);
	if (h) {
		ioctl(c->efd, PEERDMA_EDU_IOC_DETACH);
		if (unpin(c->fd, h))
			FAIL("%s: unpin after the %s: %s", fname[kind], *step, strerror(errno));
	}
	return e;
}

/* every fault point of every scenario, one at a time; returns how many failed a step */
static int inject_all(const struct fault_src *src, int max)
{
	struct fctx c = { .fd = pd_open(), .gfd = gs_open(), .efd = edu_open() };
	int failed = 0;

	c.va = gs_alloc(c.gfd, 2 * GPAGE, NULL);
	c.bfd = gs_export(c.gfd, c.va, 2 * GPAGE);
	c.host = map_anon(4 * PAGE);
	for (int k = 0; k < F_N; k++) {
		int n, per = 0, absorbed = 0, fired;

		for (n = 1; n <= max; n++) {
			const char *step;
			int e = scenario(&c, k, src, n, &step, &fired);

			if (e < 0) {
				FAIL("%s: cannot arm", src->what);
				break;
			}
			if (!fired) {
				if (e)
					FAIL("%s: %s %s failed with no fault: %s", src->what,
					     fname[k], step, strerror(e));
				break;	/* past the last fault point */
			}
			if (!e) {
				absorbed++;	/* a fallback took it (kvmalloc -> vmalloc...) */
				continue;
			}
			per++;
			if (e != ENOMEM)
				FAIL("%s: %s %s, fault %d: %s, want ENOMEM", src->what, fname[k],
				     step, n, strerror(e));
			if (live_pins() != 0 || gs_info().tables || gs_info().mappings ||
			    gs_info().bufmaps) {
				FAIL("%s: %s %s, fault %d: left live %ld, tables %u, mappings %u, "
				     "bufmaps %u", src->what, fname[k], step, n, live_pins(),
				     gs_info().tables, gs_info().mappings, gs_info().bufmaps);
				break;
			}
		}
		if (n > max)
			FAIL("%s: %s still failing after %d faults", src->what, fname[k], max);
		printf("  %s: %s: %d faults failed it with ENOMEM, %d absorbed, nothing left\n",
		       src->what, fname[k], per, absorbed);
		failed += per;
	}
	close(c.bfd);
	close(c.efd);
	close(c.fd);
	close(c.gfd);
	wait_clean();
	if (check_clean(src->what))
		fails++;
	return failed;
}

static void t_faults_provider(void)
{
	static const struct fault_src src = { "provider calls", gpusim_arm, gpusim_left };

	EXPECT(inject_all(&src, 20) > 0);
}

/*
 * Debug kernel only: failslab + fail-nth, every allocation of the scenarios.
 * Runs in pdtest final, after everything but rmmod (see below why).
 */
void t_faults_alloc(void)
{
	if (access("/proc/thread-self/fail-nth", F_OK) ||
	    access("/sys/kernel/debug/failslab", F_OK)) {
		printf("  no fail-nth / failslab in this kernel (the debug kernel has them)\n");
		exit(SKIP);
	}
	/* sleeping allocations too; quiet (a stack per fault would look like a bug) */
	EXPECT_OK(write_file("/sys/kernel/debug/failslab/ignore-gfp-wait", "N"));
	EXPECT_OK(write_file("/sys/kernel/debug/failslab/verbose", "0"));
	/* slab only: a failed page allocation warns with a stack dump by design */
	EXPECT_OK(write_file("/sys/kernel/debug/fail_page_alloc/min-order", "11"));
	/*
	 * A failed allocation inside DMA-API debugging's own cacheline tracking
	 * turns that debugging off for good ("dma-debug disabled"): this test runs
	 * last (pdtest final), and tests/vm/run accepts that line only after it.
	 */

	static const struct fault_src src = { "allocations", task_arm, task_left };

	task_fd = open("/proc/thread-self/fail-nth", O_RDWR);
	EXPECT(task_fd >= 0);
	EXPECT(inject_all(&src, 400) > 0);
	EXPECT_OK(write_file("/sys/kernel/debug/failslab/ignore-gfp-wait", "Y"));
}

const struct pd_test pd_fault_tests[] = {
	{ "faults_provider", t_faults_provider },
	{ NULL },
};

