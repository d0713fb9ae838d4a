// SPDX-License-Identifier: MIT
/*
 * In-guest test of libpeerdma's kdev backend against the real peerdma.ko:
 * a domain opened with kernel_device pins host memory through /dev/peerdma;
 * the simulated DMA device moves bytes through the MR's key; munmap of the
 * registered buffer makes the kernel revoke the pin (MMU notifier), the event
 * reaches the library's event thread, and the key stops working: no stale
 * access to pages the process no longer owns. Prints "ok N - name" lines and
 * a closing "kdev: N passed, N failed".
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

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
		printf("kdev: %d passed, %d failed\n", passed, failed + 4);
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
	check(pdma_domain_close(d) == 0, "domain closes, kdev thread and file released");
	printf("kdev: %d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
