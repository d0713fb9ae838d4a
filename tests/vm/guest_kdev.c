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
 * process's write replaced it) and its key still works. Prints "ok N - name"
 * lines and a closing "kdev: N passed, N failed".
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mr/domain.h"
#include "mem/kdev.h"
#include "peerdma/mr.h"
#include "mem/sim.h"

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

int main(void)
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
		printf("kdev: %d passed, %d failed\n", passed, failed + 9);
		return 1;
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
	printf("kdev: %d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
