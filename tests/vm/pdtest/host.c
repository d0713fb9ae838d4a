// SPDX-License-Identifier: GPL-2.0
/*
 * Host memory pins: rounding, entries and addresses, the handle limit, and
 * revocation by the MMU notifier (munmap, MADV_DONTNEED; not mprotect or fork).
 */
#define _GNU_SOURCE
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

static void t_host_pin(void)
{
	int fd = pd_open();
	char *m = map_anon(4 * PAGE);
	struct peerdma_pin p;
	struct peerdma_query q;
	struct peerdma_get_pages g;
	uint64_t addrs[8] = { 0 }, h;

	h = pin(fd, PEERDMA_KIND_HOST, 0, (uintptr_t)m + 100, 2 * PAGE, &p);
	EXPECT(h != 0);
	EXPECT_EQ(p.pinned_addr, (uintptr_t)m);
	EXPECT_EQ(p.pinned_len, 3 * PAGE);
	EXPECT_EQ(p.page_size, PAGE);
	EXPECT_EQ(p.entries, 3);
	EXPECT_EQ(live_pins(), 1);
	EXPECT_OK(query(fd, h, &q));
	EXPECT_EQ(q.state, PEERDMA_STATE_LIVE);
	EXPECT_EQ(q.kind, PEERDMA_KIND_HOST);
	EXPECT_EQ(q.user_data, 0xabc0000 + PEERDMA_KIND_HOST);
	EXPECT_EQ(q.pinned_len, 3 * PAGE);
	EXPECT_EQ(q.clients, 0);
	EXPECT_OK(get_pages(fd, h, addrs, 8, &g));
	EXPECT_EQ(g.count, 3);
	EXPECT_EQ(g.page_size, PAGE);
	for (int i = 0; i < 3; i++)
		EXPECT(addrs[i] && !(addrs[i] & (PAGE - 1)));
	EXPECT_EQ(addrs[3], 0);
	/* too little room: EINVAL and the count needed */
	EXPECT_ERR(get_pages(fd, h, addrs, 2, &g), EINVAL);
	EXPECT_EQ(g.count, 3);
	EXPECT_ERR(get_pages(fd, h, NULL, 3, &g), EFAULT);
	/* exact alignment accepted with PEERDMA_PIN_EXACT */
	uint64_t h2 = pin(fd, PEERDMA_KIND_HOST, PEERDMA_PIN_EXACT | PEERDMA_PIN_READONLY,
			  (uintptr_t)m, PAGE, &p);
	EXPECT(h2 != 0 && h2 != h);
	EXPECT_EQ(live_pins(), 2);
	EXPECT_OK(unpin(fd, h));
	EXPECT_OK(unpin(fd, h2));
	EXPECT_EQ(live_pins(), 0);
	EXPECT_ERR(unpin(fd, h), ENOENT);
	EXPECT_ERR(query(fd, h, &q), ENOENT);

	/* handle limit per file (lowered for the test), per file not global */
	uint64_t hs[8];
	int f2 = pd_open();

	EXPECT_OK(write_param("peerdma", "max_handles", "8"));
	for (int i = 0; i < 8; i++) {
		hs[i] = pin(fd, PEERDMA_KIND_HOST, 0, (uintptr_t)m, PAGE, NULL);
		EXPECT(hs[i] != 0);
	}
	EXPECT_ERR(-!pin(fd, PEERDMA_KIND_HOST, 0, (uintptr_t)m, PAGE, NULL), ENOSPC);
	h = pin(f2, PEERDMA_KIND_HOST, 0, (uintptr_t)m, PAGE, NULL);
	EXPECT(h != 0);
	EXPECT_OK(unpin(fd, hs[3]));
	hs[3] = pin(fd, PEERDMA_KIND_HOST, 0, (uintptr_t)m, PAGE, NULL);
	EXPECT(hs[3] != 0);
	EXPECT_OK(write_param("peerdma", "max_handles", "65536"));
	EXPECT_EQ(live_pins(), 9);
	close(f2);
	close(fd);
	EXPECT_EQ(live_pins(), 0);
}

static void t_host_invalidate(void)
{
	int fd = pd_open(), st;
	char *m = map_anon(4 * PAGE);
	struct peerdma_event ev;
	uint64_t h, h2;
	pid_t pid;

	h = pin(fd, PEERDMA_KIND_HOST, 0, (uintptr_t)m, 2 * PAGE, NULL);
	h2 = pin(fd, PEERDMA_KIND_HOST, 0, (uintptr_t)m + 2 * PAGE, 2 * PAGE, NULL);
	EXPECT(h && h2);
	/* protection changes and fork keep the pages: no revoke */
	EXPECT_OK(mprotect(m, 4 * PAGE, PROT_READ));
	EXPECT_OK(mprotect(m, 4 * PAGE, PROT_READ | PROT_WRITE));
	pid = fork();
	if (pid == 0)
		_exit(m[0] == 0x5a ? 0 : 1);
	waitpid(pid, &st, 0);
	m[0] = 1;	/* parent writes after fork: pinned pages were copied eagerly */
	EXPECT_EQ(read_event(fd, &ev, 0), 0);
	EXPECT_EQ(state_of(fd, h), PEERDMA_STATE_LIVE);
	/* munmap of part of the first range revokes it, not the second */
	EXPECT_OK(munmap(m + PAGE, PAGE));
	EXPECT_EQ(read_event(fd, &ev, 2000), 1);
	EXPECT_EQ(ev.handle, h);
	EXPECT_EQ(ev.reason, PEERDMA_EVENT_HOST_INVALIDATE);
	EXPECT_EQ(state_of(fd, h), PEERDMA_STATE_REVOKED);
	EXPECT_EQ(state_of(fd, h2), PEERDMA_STATE_LIVE);
	EXPECT_EQ(live_pins(), 1);
	/* madvise(DONTNEED) replaces the pages: revoke */
	EXPECT_OK(madvise(m + 2 * PAGE, PAGE, MADV_DONTNEED));
	EXPECT_EQ(read_event(fd, &ev, 2000), 1);
	EXPECT_EQ(ev.handle, h2);
	EXPECT_EQ(live_pins(), 0);
	EXPECT_OK(unpin(fd, h));
	EXPECT_OK(unpin(fd, h2));
	close(fd);
}

const struct pd_test pd_host_tests[] = {
	{ "host_pin", t_host_pin },
	{ "host_invalidate", t_host_invalidate },
	{ NULL },
};
