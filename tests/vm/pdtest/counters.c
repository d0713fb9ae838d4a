// SPDX-License-Identifier: GPL-2.0
/*
 * The revocation counter page (PEERDMA_CAP_REVOKE_COUNT): it counts a
 * revocation before the revoking munmap/madvise/mremap or GPU free returns,
 * it is read-only to user space for good (mmap, mprotect, /proc/self/mem,
 * a forked child), only the opener may map it, and it lives as long as the
 * file: the mapping keeps the file open.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

static volatile struct peerdma_counters *map_counters(int fd)
{
	void *p = mmap(NULL, PAGE, PROT_READ, MAP_SHARED, fd, PEERDMA_MMAP_COUNTERS);

	if (p == MAP_FAILED) {
		FAIL("mmap of the counter page: %s", strerror(errno));
		exit(1);
	}
	return p;
}

static uint64_t revokes(volatile struct peerdma_counters *c)
{
	return __atomic_load_n(&c->revokes, __ATOMIC_ACQUIRE);
}

/* write to the page through /proc/self/mem (FOLL_FORCE): must fail */
static int poke_proc_mem(volatile void *addr)
{
	uint64_t v = 0xdead;
	int mfd = open("/proc/self/mem", O_RDWR);
	ssize_t n;

	if (mfd < 0)
		return -1;
	n = pwrite(mfd, &v, sizeof(v), (off_t)(uintptr_t)addr);
	close(mfd);
	return n == sizeof(v) ? 0 : -1;
}

/* a plain store to the page: must die of SIGSEGV */
static int store_faults(volatile struct peerdma_counters *c)
{
	int st;
	pid_t pid = fork();

	if (pid == 0) {
		c->revokes = 12345;
		_exit(0);
	}
	waitpid(pid, &st, 0);
	return WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV;
}

static void t_counter_sync(void)
{
	int fd = pd_open(), gfd = gs_open();
	struct peerdma_version v = { .size = sizeof(v) };
	volatile struct peerdma_counters *c;
	struct peerdma_event ev;
	char *m = map_anon(8 * PAGE), *r;
	uint64_t h[4], va;

	EXPECT_OK(ioctl(fd, PEERDMA_IOC_VERSION, &v));
	EXPECT(v.caps & PEERDMA_CAP_REVOKE_COUNT);
	EXPECT((v.abi_version & 0xffff) >= 2);
	c = map_counters(fd);
	EXPECT_EQ(revokes(c), 0);
	for (int i = 0; i < 4; i++) {
		h[i] = pin(fd, PEERDMA_KIND_HOST, 0, (uintptr_t)m + 2 * i * PAGE, PAGE, NULL);
		EXPECT(h[i] != 0);
	}
	/* no revocation: protection change, unpin of a live handle */
	EXPECT_OK(mprotect(m, 8 * PAGE, PROT_READ));
	EXPECT_OK(mprotect(m, 8 * PAGE, PROT_READ | PROT_WRITE));
	EXPECT_OK(unpin(fd, h[3]));
	EXPECT_EQ(revokes(c), 0);
	/* counted before the call returns, the event follows */
	EXPECT_OK(munmap(m, PAGE));
	EXPECT_EQ(revokes(c), 1);
	EXPECT_OK(madvise(m + 2 * PAGE, PAGE, MADV_DONTNEED));
	EXPECT_EQ(revokes(c), 2);
	r = mremap(m + 4 * PAGE, PAGE, PAGE, MREMAP_MAYMOVE | MREMAP_FIXED, m + 7 * PAGE);
	EXPECT(r == m + 7 * PAGE);
	EXPECT_EQ(revokes(c), 3);
	for (int i = 0; i < 3; i++) {
		EXPECT_EQ(read_event(fd, &ev, 2000), 1);
		EXPECT_EQ(ev.reason, PEERDMA_EVENT_HOST_INVALIDATE);
	}
	EXPECT_EQ(read_event(fd, &ev, 0), 0);
	EXPECT_EQ(revokes(c), 3);
	/* the GPU free callback counts too, before gs_free returns */
	va = gs_alloc(gfd, GPAGE, NULL);
	h[3] = pin(fd, PEERDMA_KIND_GPU, PEERDMA_PIN_GPU_CALLBACK, va, GPAGE, NULL);
	EXPECT(h[3] != 0);
	EXPECT_OK(gs_free(gfd, va));
	EXPECT_EQ(revokes(c), 4);
	EXPECT_EQ(read_event(fd, &ev, 2000), 1);
	EXPECT_EQ(ev.reason, PEERDMA_EVENT_GPU_FREE);
	/* another file has its own counter */
	int fd2 = pd_open();
	volatile struct peerdma_counters *c2 = map_counters(fd2);

	EXPECT_EQ(revokes(c2), 0);
	for (int i = 0; i < 4; i++)
		EXPECT_OK(unpin(fd, h[i]));
	EXPECT_EQ(revokes(c), 4);
	munmap((void *)c2, PAGE);
	close(fd2);
	munmap((void *)c, PAGE);
	close(fd);
	close(gfd);
	wait_clean();
	EXPECT_EQ(live_pins(), 0);
}

static void t_counter_readonly(void)
{
	int fd = pd_open();
	volatile struct peerdma_counters *c;
	void *p;

	EXPECT(mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED &&
	       errno == EPERM);
	EXPECT(mmap(NULL, PAGE, PROT_READ | PROT_EXEC, MAP_SHARED, fd, 0) == MAP_FAILED &&
	       errno == EPERM);
	EXPECT(mmap(NULL, PAGE, PROT_READ, MAP_PRIVATE, fd, 0) == MAP_FAILED && errno == EINVAL);
	EXPECT(mmap(NULL, 2 * PAGE, PROT_READ, MAP_SHARED, fd, 0) == MAP_FAILED &&
	       errno == EINVAL);
	EXPECT(mmap(NULL, PAGE, PROT_READ, MAP_SHARED, fd, PAGE) == MAP_FAILED &&
	       errno == EINVAL);
	c = map_counters(fd);
	EXPECT_ERR(mprotect((void *)c, PAGE, PROT_READ | PROT_WRITE), EACCES);
	EXPECT_ERR(mprotect((void *)c, PAGE, PROT_READ | PROT_EXEC), EACCES);
	EXPECT(poke_proc_mem(c) != 0);
	EXPECT(store_faults(c));
	/* cannot grow into a writable or larger mapping */
	p = mremap((void *)c, PAGE, 2 * PAGE, MREMAP_MAYMOVE);
	EXPECT(p == MAP_FAILED);
	EXPECT_EQ(revokes(c), 0);
	/* the page read zero past the counter */
	for (size_t i = sizeof(struct peerdma_counters); i < PAGE; i++)
		if (((volatile uint8_t *)c)[i])
			FAIL("byte %zu of the counter page is %u", i, ((volatile uint8_t *)c)[i]);
	munmap((void *)c, PAGE);
	close(fd);
}

/* the mapping keeps the file (and so its counter and pins) until unmapped */
static void t_counter_lifetime(void)
{
	int fd = pd_open();
	volatile struct peerdma_counters *c = map_counters(fd);
	char *m = map_anon(4 * PAGE);
	uint64_t h;

	h = pin(fd, PEERDMA_KIND_HOST, 0, (uintptr_t)m, PAGE, NULL);
	EXPECT(h != 0);
	EXPECT(pin(fd, PEERDMA_KIND_HOST, 0, (uintptr_t)m + 2 * PAGE, PAGE, NULL) != 0);
	close(fd);
	EXPECT_EQ(live_pins(), 2);	/* the file is still open: the mapping holds it */
	EXPECT_OK(munmap(m, PAGE));
	EXPECT_EQ(revokes(c), 1);
	wait_clean();
	EXPECT_EQ(live_pins(), 1);
	EXPECT_OK(munmap((void *)c, PAGE));	/* the last reference: the file closes */
	wait_clean();
	EXPECT_EQ(live_pins(), 0);
	EXPECT_OK(munmap(m + 2 * PAGE, PAGE));
}

/* a forked child sees the page read-only and cannot map or change it */
static void t_counter_fork(void)
{
	int fd = pd_open(), st;
	volatile struct peerdma_counters *c = map_counters(fd);
	char *m = map_anon(4 * PAGE);
	uint64_t h;
	pid_t pid;

	h = pin(fd, PEERDMA_KIND_HOST, 0, (uintptr_t)m, 2 * PAGE, NULL);
	EXPECT(h != 0);
	pid = fork();
	if (pid == 0) {
		int bad = 0;

		/* the pinned pages were copied for the child: its unmap is its own */
		bad |= munmap(m, 4 * PAGE) != 0;
		bad |= revokes(c) != 0;
		bad |= mprotect((void *)c, PAGE, PROT_READ | PROT_WRITE) == 0;
		bad |= poke_proc_mem(c) == 0;
		bad |= mmap(NULL, PAGE, PROT_READ, MAP_SHARED, fd, 0) != MAP_FAILED ||
		       errno != EACCES;
		bad |= !store_faults(c);
		bad |= munmap((void *)c, PAGE) != 0;
		_exit(bad);
	}
	waitpid(pid, &st, 0);
	EXPECT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	EXPECT_EQ(revokes(c), 0);
	EXPECT_EQ(state_of(fd, h), PEERDMA_STATE_LIVE);
	EXPECT_OK(munmap(m, 4 * PAGE));
	EXPECT_EQ(revokes(c), 1);
	EXPECT_OK(unpin(fd, h));
	munmap((void *)c, PAGE);
	close(fd);
	wait_clean();
	EXPECT_EQ(live_pins(), 0);
}

const struct pd_test pd_counter_tests[] = {
	{ "counter_sync", t_counter_sync },
	{ "counter_readonly", t_counter_readonly },
	{ "counter_lifetime", t_counter_lifetime },
	{ "counter_fork", t_counter_fork },
	{ NULL },
};
