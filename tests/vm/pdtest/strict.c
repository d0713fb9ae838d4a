// SPDX-License-Identifier: GPL-2.0
/*
 * The orders the strict stand-in forces: a free callback held up with the
 * driver lock taken while unpin wins the ownership decision, a dma-buf client
 * attaching while its handle is unpinned, and the race of NVIDIA drivers
 * 515-535 (put_pages not waiting for a running callback), which the
 * persistent default never meets. Each of these failed on peerdma before the
 * fixes named in tests/vm/README.md.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"

static struct {
	int gfd, efd, r, e;
	uint64_t va;
	struct peerdma_edu_attach a;
} S;

/* until gpusim sleeps in a delay (the lock it holds there, taken) */
static void wait_delayed(void)
{
	double end = now() + 10;

	while (read_param("gpusim", "delayed") < 1 && now() < end)
		usleep(1000);
	EXPECT(read_param("gpusim", "delayed") >= 1);
}

static void *free_thread(void *arg)
{
	S.r = gs_free(S.gfd, S.va);
	S.e = errno;
	return NULL;
}

/*
 * S.va freed on another thread (gpusim holds the driver lock in cb_delay_ms
 * before the callback) while this one unpins @h; a persistent pin has no
 * callback to wait for
 */
static void free_vs_unpin(int fd, uint64_t h, uint32_t flags)
{
	pthread_t t;

	pthread_create(&t, NULL, free_thread, NULL);
	if (flags & PEERDMA_PIN_GPU_CALLBACK)
		wait_delayed();
	else
		usleep(100000);
	EXPECT_OK(unpin(fd, h));
	pthread_join(t, NULL);
}

static void *attach_thread(void *arg)
{
	S.r = ioctl(S.efd, PEERDMA_EDU_IOC_ATTACH, &S.a);
	S.e = errno;
	return NULL;
}

/*
 * cuMemFree holds the driver lock and its free callback has not been entered
 * yet (cb_delay_ms) when unpin takes the pages: unpin owns them, and nothing
 * it does may touch the page table after the callback returned (the driver
 * frees it then). A client is attached, so there is a mapping to take down.
 */
static void unpin_during_callback(uint32_t flags)
{
	int fd = pd_open(), efd = edu_open();
	uint32_t v0 = gs_info().violations, cb0 = gs_info().callbacks;
	struct peerdma_edu_status st;
	uint64_t h;

	S.gfd = gs_open();
	S.va = gs_alloc(S.gfd, GPAGE, NULL);
	h = pin(fd, PEERDMA_KIND_GPU, flags, S.va, GPAGE, NULL);
	EXPECT(h != 0);
	S.a = (struct peerdma_edu_attach){ .peerdma_fd = fd, .handle = h };
	EXPECT_OK(ioctl(efd, PEERDMA_EDU_IOC_ATTACH, &S.a));
	EXPECT_OK(write_param("gpusim", "cb_delay_ms", "300"));
	free_vs_unpin(fd, h, flags);
	EXPECT_OK(write_param("gpusim", "cb_delay_ms", "0"));
	EXPECT_EQ(S.r, 0);
	EXPECT_OK(ioctl(efd, PEERDMA_EDU_IOC_STATUS, &st));
	EXPECT_EQ(st.quiesced, 1);
	EXPECT_EQ(st.mapped, 0);
	EXPECT_EQ(gs_info().callbacks, cb0 + !!(flags & PEERDMA_PIN_GPU_CALLBACK));
	EXPECT_EQ(gs_info().violations, v0);
	EXPECT_EQ(gs_info().tables, 0);
	EXPECT_EQ(gs_info().mappings, 0);
	EXPECT_OK(ioctl(efd, PEERDMA_EDU_IOC_DETACH));
	close(efd);
	close(fd);
	close(S.gfd);
	wait_clean();
	if (check_clean("after unpin during the callback"))
		fails++;
}

static void t_unpin_during_callback(void)
{
	unpin_during_callback(PEERDMA_PIN_GPU_CALLBACK);
	unpin_during_callback(0);
}

/*
 * A client attaches to a dma-buf handle (the exporter's attach is slow:
 * attach_delay_ms) while the handle is unpinned and the dma-buf's last file
 * reference is gone: the attachment must hold a reference of its own, and
 * the client gets -ENODEV (or the handle first, then its quiesce).
 */
static void t_dmabuf_attach_vs_unpin(void)
{
	int fd = pd_open(), bfd;
	struct peerdma_edu_status st;
	pthread_t t;
	uint64_t h;

	S.gfd = gs_open();
	S.efd = edu_open();
	S.va = gs_alloc(S.gfd, GPAGE, NULL);
	bfd = gs_export(S.gfd, S.va, GPAGE);
	h = pin_buf(fd, bfd, 0, GPAGE, NULL);
	EXPECT(h != 0);
	close(bfd);	/* the pin holds the only reference now */
	S.a = (struct peerdma_edu_attach){ .peerdma_fd = fd, .handle = h };
	EXPECT_OK(write_param("gpusim", "attach_delay_ms", "300"));
	pthread_create(&t, NULL, attach_thread, NULL);
	wait_delayed();
	EXPECT_OK(unpin(fd, h));
	pthread_join(t, NULL);
	EXPECT_OK(write_param("gpusim", "attach_delay_ms", "0"));
	if (S.r) {
		EXPECT_EQ(S.e, ENODEV);
	} else {
		EXPECT_OK(ioctl(S.efd, PEERDMA_EDU_IOC_STATUS, &st));
		EXPECT_EQ(st.quiesced, 1);
	}
	printf("  attach racing unpin: %s\n", S.r ? strerror(S.e) : "attached, then quiesced");
	EXPECT_OK(ioctl(S.efd, PEERDMA_EDU_IOC_DETACH));
	close(S.efd);
	wait_clean();
	EXPECT_EQ(gs_info().bufs, 0);
	EXPECT_EQ(gs_info().bufmaps, 0);
	close(fd);
	close(S.gfd);
	if (check_clean("after attach vs unpin"))
		fails++;
}

/*
 * legacy_race: put_pages does not wait for a free callback that is running
 * on its table (drivers 515-535). A free-callback pin meets it when unpin and
 * cuMemFree race; peerdma survives it (the callback gets the handle id and
 * finds the handle gone). A persistent pin (the default) has no callback and
 * never meets it.
 */
static void legacy_round(uint32_t flags)
{
	int fd = pd_open();
	uint64_t h;

	S.gfd = gs_open();
	S.va = gs_alloc(S.gfd, GPAGE, NULL);
	h = pin(fd, PEERDMA_KIND_GPU, flags, S.va, GPAGE, NULL);
	EXPECT(h != 0);
	free_vs_unpin(fd, h, flags);
	EXPECT_EQ(S.r, 0);
	close(fd);
	close(S.gfd);
	wait_clean();
}

static void t_gpu_legacy_race(void)
{
	uint32_t hits0 = gs_info().legacy_hits, v0 = gs_info().violations, hits1;

	EXPECT_OK(write_param("gpusim", "legacy_race", "1"));
	EXPECT_OK(write_param("gpusim", "cb_delay_ms", "300"));
	legacy_round(0);
	EXPECT_EQ(gs_info().legacy_hits, hits0);	/* persistent: never */
	legacy_round(PEERDMA_PIN_GPU_CALLBACK);
	hits1 = gs_info().legacy_hits;
	EXPECT_EQ(hits1, hits0 + 1);			/* callback mode: met it */
	EXPECT_OK(write_param("gpusim", "cb_delay_ms", "0"));
	EXPECT_OK(write_param("gpusim", "legacy_race", "0"));
	EXPECT_EQ(gs_info().violations, v0);
	EXPECT_EQ(gs_info().tables, 0);
	printf("  legacy race: persistent 0 hits, free-callback %u\n", hits1 - hits0);
	if (check_clean("after the legacy race"))
		fails++;
}

/*
 * The order lockdep reported from reclaim (debug kernel): an MMU-notifier
 * revoke takes pin->lock (munmap of a pinned host range), and a client
 * attach of a persistent GPU pin allocates in dma_map_pages. Reclaim can
 * enter the notifier, so nothing under pin->lock may allocate. Run alone
 * (PDVM_ONLY=reclaim_order) so that lockdep's first report is this one.
 */
static void t_reclaim_order(void)
{
	int fd = pd_open(), gfd = gs_open(), efd = edu_open();
	char *m = map_anon(PAGE);
	uint64_t va = gs_alloc(gfd, GPAGE, NULL), hh, hg;
	struct peerdma_edu_attach a = { .peerdma_fd = fd };
	struct peerdma_event ev;

	hh = pin(fd, PEERDMA_KIND_HOST, 0, (uintptr_t)m, PAGE, NULL);
	EXPECT(hh != 0);
	EXPECT_OK(munmap(m, PAGE));	/* the notifier revokes: pin->lock */
	EXPECT_EQ(read_event(fd, &ev, 1000), 1);
	EXPECT_EQ(ev.handle, hh);
	hg = pin(fd, PEERDMA_KIND_GPU, 0, va, GPAGE, NULL);
	EXPECT(hg != 0);
	a.handle = hg;
	EXPECT_OK(ioctl(efd, PEERDMA_EDU_IOC_ATTACH, &a));	/* dma_map_pages allocates */
	EXPECT_OK(ioctl(efd, PEERDMA_EDU_IOC_DETACH));
	EXPECT_OK(unpin(fd, hg));
	EXPECT_OK(unpin(fd, hh));
	close(efd);
	close(fd);
	close(gfd);
	wait_clean();
	if (check_clean("after the reclaim order"))
		fails++;
}

const struct pd_test pd_strict_tests[] = {
	{ "reclaim_order", t_reclaim_order },
	{ "unpin_during_callback", t_unpin_during_callback },
	{ "dmabuf_attach_vs_unpin", t_dmabuf_attach_vs_unpin },
	{ "gpu_legacy_race", t_gpu_legacy_race },
	{ NULL },
};
