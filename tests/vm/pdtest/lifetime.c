// SPDX-License-Identifier: GPL-2.0
/*
 * Pins outliving their owner: SIGKILL of a process holding every kind, close
 * of a file with live pins, exit before close, a free-callback pin whose file
 * another process closes last, and rmmod refused while pins are held or a
 * free callback may still come (pdtest rmmod).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

/* a process holding every kind of pin, killed with SIGKILL */
static void hold_pins(int ready_fd, int with_edu)
{
	int fd = pd_open(), gfd = gs_open(), efd = -1, bfd;
	uint64_t va = gs_alloc(gfd, 4 * GPAGE, NULL);
	char *m = map_anon(4 * PAGE);
	uint64_t h[6];

	h[0] = pin(fd, PEERDMA_KIND_HOST, 0, (uintptr_t)m, 4 * PAGE, NULL);
	h[1] = pin(fd, PEERDMA_KIND_GPU, 0, va, GPAGE, NULL);
	h[2] = pin(fd, PEERDMA_KIND_GPU, PEERDMA_PIN_GPU_CALLBACK, va + GPAGE, GPAGE, NULL);
	bfd = gs_export(gfd, va + 2 * GPAGE, 2 * GPAGE);
	h[3] = pin_buf(fd, bfd, 0, 2 * GPAGE, NULL);
	h[4] = pin(fd, PEERDMA_KIND_GPU, PEERDMA_PIN_GPU_CALLBACK, va, 4 * GPAGE, NULL);
	if (with_edu) {
		struct peerdma_edu_attach a = { .peerdma_fd = fd, .handle = h[2] };

		efd = edu_open();
		if (ioctl(efd, PEERDMA_EDU_IOC_ATTACH, &a))
			h[0] = 0;
	}
	char c = (h[0] && h[1] && h[2] && h[3] && h[4]) ? 'r' : 'x';

	if (write(ready_fd, &c, 1) != 1)
		_exit(1);
	for (;;)
		pause();
}

static void t_kill9(void)
{
	for (int round = 0; round < 2; round++) {
		int p[2], st;
		char c = 0;
		pid_t pid;

		if (pipe(p))
			return;
		pid = fork();
		if (pid == 0) {
			close(p[0]);
			hold_pins(p[1], round);
		}
		close(p[1]);
		if (read(p[0], &c, 1) != 1 || c != 'r')
			FAIL("holder not ready (%c)", c);
		EXPECT_EQ(live_pins(), 5);
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
		EXPECT(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
		close(p[0]);
		wait_clean();
		if (check_clean("after kill -9"))
			fails++;
	}
}

static void t_close_live(void)
{
	int fd = pd_open(), gfd = gs_open(), bfd;
	uint64_t va = gs_alloc(gfd, 2 * GPAGE, NULL);
	char *m = map_anon(PAGE);

	EXPECT(pin(fd, PEERDMA_KIND_HOST, 0, (uintptr_t)m, PAGE, NULL));
	EXPECT(pin(fd, PEERDMA_KIND_GPU, 0, va, GPAGE, NULL));
	EXPECT(pin(fd, PEERDMA_KIND_GPU, PEERDMA_PIN_GPU_CALLBACK, va, GPAGE, NULL));
	bfd = gs_export(gfd, va + GPAGE, GPAGE);
	EXPECT(pin_buf(fd, bfd, 0, GPAGE, NULL));
	close(bfd);
	EXPECT_EQ(live_pins(), 4);
	close(fd);
	EXPECT_EQ(live_pins(), 0);
	EXPECT_EQ(gs_info().tables, 0);
	close(gfd);
	wait_clean();
	if (check_clean("after close"))
		fails++;
	/* GPU memory freed by process exit first, then the peerdma file closed */
	pid_t pid = fork();
	int st;

	if (pid == 0) {
		int f = pd_open(), g = gs_open();
		uint64_t v = gs_alloc(g, GPAGE, NULL);

		if (!pin(f, PEERDMA_KIND_GPU, PEERDMA_PIN_GPU_CALLBACK, v, GPAGE, NULL))
			_exit(2);
		close(g);	/* fires the callback */
		struct peerdma_event ev;

		_exit(read_event(f, &ev, 1000) == 1 ? 0 : 3);
	}
	waitpid(pid, &st, 0);
	EXPECT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	if (check_clean("after exit"))
		fails++;
}

/*
 * A free-callback pin on @va whose file is closed last by a forked child. Only
 * the pinning process can put such pages (the driver looks them up by the
 * caller's process), so the pin becomes an orphan: released, its pages left
 * to the callback of the GPU free. Returns the handle, 0 on failure.
 */
static uint64_t orphan_pin(uint64_t va)
{
	int fd = pd_open(), p[2], st;
	uint64_t h = pin(fd, PEERDMA_KIND_GPU, PEERDMA_PIN_GPU_CALLBACK, va, GPAGE, NULL);
	pid_t pid;
	char c;

	if (!h || pipe(p)) {
		close(fd);
		return 0;
	}
	pid = fork();
	if (pid == 0) {
		close(p[1]);
		/* EOF once the owner closed its copy: this close is the last */
		if (read(p[0], &c, 1) != 0)
			_exit(2);
		_exit(close(fd) ? 3 : 0);
	}
	close(p[0]);
	close(fd);
	close(p[1]);
	waitpid(pid, &st, 0);
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? h : 0;
}

static void t_foreign_close(void)
{
	int gfd = gs_open(), st;
	uint64_t va = gs_alloc(gfd, GPAGE, NULL);
	struct gpusim_info i0 = gs_info();
	long refs0 = module_refs("peerdma");

	EXPECT(orphan_pin(va) != 0);
	EXPECT_EQ(live_pins(), 0);
	EXPECT_EQ(orphans(), 1);
	/* the driver still holds the pages; the child did not try to put them */
	EXPECT_EQ(gs_info().tables, 1);
	EXPECT_EQ(gs_info().violations, i0.violations);
	/* the module stays for the callback */
	EXPECT_EQ(module_refs("peerdma"), refs0 + 1);
	EXPECT_OK(gs_free(gfd, va));
	EXPECT_EQ(gs_info().callbacks, i0.callbacks + 1);
	EXPECT_EQ(gs_info().tables, 0);
	EXPECT_EQ(orphans(), 0);
	EXPECT_EQ(module_refs("peerdma"), refs0);
	close(gfd);

	/* the owner exits instead of freeing: its exit frees the memory */
	pid_t pid = fork();

	if (pid == 0) {
		int g = gs_open();

		fails = 0;
		EXPECT(orphan_pin(gs_alloc(g, GPAGE, NULL)) != 0);
		EXPECT_EQ(orphans(), 1);
		_exit(fails ? 1 : 0);
	}
	waitpid(pid, &st, 0);
	EXPECT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	EXPECT_EQ(orphans(), 0);
	EXPECT_EQ(module_refs("peerdma"), refs0);
	if (check_clean("after the orphans' callbacks"))
		fails++;
}

/* pdtest rmmod: rmmod with live pins refused, nothing leaked, dev_gid */
int do_rmmod(void)
{
	int p[2], st;
	char c = 0;
	pid_t pid;

	fails = 0;
	if (syscall(SYS_delete_module, "peerdma_edu", O_NONBLOCK))
		FAIL("rmmod peerdma_edu: %s", strerror(errno));
	/* the reference NIC driver (drivers/e1000) uses peerdma's symbols too */
	if (syscall(SYS_delete_module, "peerdma_e1000", O_NONBLOCK) && errno != ENOENT)
		FAIL("rmmod peerdma_e1000: %s", strerror(errno));
	if (pipe(p))
		return 1;
	pid = fork();
	if (pid == 0) {
		close(p[0]);
		hold_pins(p[1], 0);
	}
	close(p[1]);
	if (read(p[0], &c, 1) != 1 || c != 'r')
		FAIL("holder not ready");
	EXPECT_ERR(syscall(SYS_delete_module, "peerdma", O_NONBLOCK), EWOULDBLOCK);
	EXPECT_ERR(syscall(SYS_delete_module, "gpusim", O_NONBLOCK), EWOULDBLOCK);
	EXPECT_EQ(live_pins(), 5);
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	wait_clean();
	if (check_clean("before rmmod"))
		fails++;
	/* an orphan's callback may still come: refused until it came */
	int gfd = gs_open();
	uint64_t va = gs_alloc(gfd, GPAGE, NULL);

	EXPECT(orphan_pin(va) != 0);
	EXPECT_EQ(orphans(), 1);
	EXPECT_ERR(syscall(SYS_delete_module, "peerdma", O_NONBLOCK), EWOULDBLOCK);
	EXPECT_OK(gs_free(gfd, va));
	close(gfd);
	EXPECT_EQ(orphans(), 0);
	EXPECT_OK(syscall(SYS_delete_module, "peerdma", O_NONBLOCK));

	/* the device node's group comes from a module parameter */
	int kfd = open("/lib/modules/peerdma.ko", O_RDONLY | O_CLOEXEC);
	struct stat sb;

	EXPECT_OK(syscall(SYS_finit_module, kfd, "dev_gid=4321", 0));
	close(kfd);
	EXPECT_OK(stat(PEERDMA_DEVICE, &sb));
	EXPECT_EQ(sb.st_mode & 07777, 0660);
	EXPECT_EQ(sb.st_gid, 4321);
	EXPECT_OK(syscall(SYS_delete_module, "peerdma", O_NONBLOCK));
	EXPECT_ERR(stat(PEERDMA_DEVICE, &sb), ENOENT);
	EXPECT_OK(syscall(SYS_delete_module, "gpusim", O_NONBLOCK));
	return fails;
}

const struct pd_test pd_lifetime_tests[] = {
	{ "kill9", t_kill9 },
	{ "close_live", t_close_live },
	{ "foreign_close", t_foreign_close },
	{ NULL },
};
