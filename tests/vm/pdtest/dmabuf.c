// SPDX-License-Identifier: GPL-2.0
/*
 * dma-buf import, static and dynamic exporters: entries, addresses, bounds,
 * revocation by move_notify with a client attached, and with a client DMA in
 * flight.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <unistd.h>

#include "harness.h"

static void dmabuf_mode(int dynamic)
{
	int fd = pd_open(), gfd = gs_open(), efd = edu_open(), bfd;
	uint64_t off, va = gs_alloc(gfd, 4 * GPAGE, &off), h, h2;
	struct gpusim_info info = gs_info();
	struct peerdma_pin p;
	struct peerdma_get_pages g;
	struct peerdma_event ev[2];
	uint64_t a[4];

	bfd = gs_export(gfd, va + GPAGE, 2 * GPAGE);
	EXPECT(bfd >= 0);
	EXPECT_ERR(gs_export(gfd, va + 1, GPAGE), EINVAL);
	h = pin_buf(fd, bfd, 0, 2 * GPAGE, &p);
	EXPECT(h != 0);
	EXPECT_EQ(p.page_size, GPAGE);
	EXPECT_EQ(p.entries, 2);
	EXPECT_OK(get_pages(fd, h, a, 4, &g));
	EXPECT_EQ(a[0], info.bar_phys + off + GPAGE);
	EXPECT_EQ(a[1], info.bar_phys + off + 2 * GPAGE);
	h2 = pin_buf(fd, bfd, PAGE + 5, 100, &p);
	EXPECT(h2 != 0);
	EXPECT_EQ(p.pinned_addr, PAGE);
	EXPECT_EQ(p.page_size, PAGE);
	EXPECT_EQ(p.entries, 1);
	EXPECT_OK(get_pages(fd, h2, a, 4, &g));
	EXPECT_EQ(a[0], info.bar_phys + off + GPAGE + PAGE);
	EXPECT_EQ(live_pins(), 2);
	EXPECT_ERR(-!pin_buf(fd, bfd, 2 * GPAGE, PAGE, NULL), EINVAL);
	EXPECT_ERR(-!pin_buf(fd, bfd, GPAGE, 2 * GPAGE, NULL), EINVAL);
	EXPECT_ERR(-!pin_buf(fd, bfd, ~0ULL - 100, 50, NULL), EOVERFLOW);
	/* a client attachment of its own, for the edu device */
	struct peerdma_edu_attach at = { .peerdma_fd = fd, .handle = h };
	struct peerdma_edu_status st;

	EXPECT_OK(ioctl(efd, PEERDMA_EDU_IOC_ATTACH, &at));
	EXPECT_EQ(gs_info().bufmaps, 3);
	/* GPU memory freed: the exporter revokes (move_notify) */
	EXPECT_OK(gs_free(gfd, va));
	EXPECT_EQ(live_pins(), 0);
	EXPECT_OK(ioctl(efd, PEERDMA_EDU_IOC_STATUS, &st));
	EXPECT_EQ(st.quiesced, 1);
	EXPECT_EQ(st.mapped, 0);
	/* dynamic exporter: the mappings are gone at once; static: at detach */
	EXPECT_EQ(gs_info().bufmaps, dynamic ? 0 : 3);
	EXPECT_EQ(read(fd, ev, sizeof(ev)), sizeof(ev));
	/* one event each, in the exporter's attachment order */
	EXPECT((ev[0].handle == h && ev[1].handle == h2) ||
	       (ev[0].handle == h2 && ev[1].handle == h));
	EXPECT_EQ(ev[0].reason, PEERDMA_EVENT_DMABUF_MOVE);
	EXPECT_EQ(ev[1].reason, PEERDMA_EVENT_DMABUF_MOVE);
	EXPECT_EQ(state_of(fd, h), PEERDMA_STATE_REVOKED);
	EXPECT_ERR(-!pin_buf(fd, bfd, 0, PAGE, NULL), ENODEV);
	EXPECT_OK(unpin(fd, h));
	EXPECT_OK(unpin(fd, h2));
	EXPECT_OK(ioctl(efd, PEERDMA_EDU_IOC_DETACH));
	wait_clean();
	EXPECT_EQ(gs_info().bufmaps, 0);
	EXPECT_EQ(gs_info().bufs, 1);
	close(bfd);
	EXPECT_EQ(gs_info().bufs, 0);
	EXPECT_EQ(gs_info().used, info.used - 4 * GPAGE);
	close(efd);
	close(fd);
	close(gfd);
}

static void t_dmabuf(void)
{
	EXPECT_OK(write_param("gpusim", "dmabuf_dynamic", "0"));
	dmabuf_mode(0);
	EXPECT_OK(write_param("gpusim", "dmabuf_dynamic", "1"));
	dmabuf_mode(1);
}

const struct pd_test pd_dmabuf_tests[] = {
	{ "dmabuf", t_dmabuf },
	{ NULL },
};

static struct {
	int efd, fd, r, e;
	uint64_t sh, dh;
} D;

static void *dma_thread(void *arg)
{
	D.r = xfer(D.efd, D.fd, D.sh, 0, D.dh, 0, 4000);
	D.e = errno;
	return NULL;
}

/*
 * move_notify with a client DMA in flight: the GPU memory behind a dma-buf
 * handle is freed while edu writes into it. The revoke waits for the client's
 * quiesce, which waits for the transfer (quiesce_waits grows); the event comes;
 * a transfer after the revoke is refused, and the host checks in the ivshmem
 * file that exactly the first transfer's bytes are there (HOSTCHECK), or none
 * (HOSTZERO) when the revoke came first. Runs last in the guest (pdtest
 * final), so that no later test reuses that memory before the host looks.
 */
static int revoke_dma_round(int last)
{
	int gfd = gs_open(), bfd, before = fails, conclusive = 0;
	/* clear of dma_edu's bytes (the first 128 KiB), which the host checks too */
	uint64_t spacer = gs_alloc(gfd, 2 * GPAGE, NULL), off, va = gs_alloc(gfd, GPAGE, &off);
	uint8_t *gm = map_gpu(gfd, off, GPAGE), *src = map_anon(PAGE);
	struct peerdma_event ev;
	long waits0, waits1;
	pthread_t t;

	memset(gm, 0, GPAGE);
	for (size_t i = 0; i < PAGE; i++)
		src[i] = pattern(cfg_seed, i);
	D.fd = pd_open();
	D.efd = edu_open();
	bfd = gs_export(gfd, va, GPAGE);
	D.dh = pin_buf(D.fd, bfd, 0, GPAGE, NULL);
	D.sh = pin(D.fd, PEERDMA_KIND_HOST, PEERDMA_PIN_READONLY, (uintptr_t)src, PAGE, NULL);
	EXPECT(D.dh && D.sh);
	waits0 = read_param("peerdma_edu", "quiesce_waits");
	pthread_create(&t, NULL, dma_thread, NULL);
	usleep(30000);	/* edu takes 2 x 100 ms of virtual time per transfer */
	EXPECT_OK(gs_free(gfd, va));	/* the exporter's move_notify */
	waits1 = read_param("peerdma_edu", "quiesce_waits");
	pthread_join(t, NULL);
	if (D.r)
		EXPECT_EQ(D.e, ENODEV);
	else
		conclusive = waits1 > waits0;
	EXPECT_EQ(read_event(D.fd, &ev, 1000), 1);
	EXPECT_EQ(ev.handle, D.dh);
	EXPECT_EQ(ev.reason, PEERDMA_EVENT_DMABUF_MOVE);
	EXPECT_EQ(state_of(D.fd, D.dh), PEERDMA_STATE_REVOKED);
	/* after the revoke: refused, and nothing lands (the host checks) */
	for (size_t i = 0; i < PAGE; i++)
		src[i] = ~pattern(cfg_seed, i);
	EXPECT_ERR(xfer(D.efd, D.fd, D.sh, 0, D.dh, 0, 4000), ENODEV);
	printf("  transfer %s, quiesce %s\n", D.r ? strerror(D.e) : "completed",
	       waits1 > waits0 ? "waited for it" : "found the device idle");
	if (conclusive || last) {
		if (D.r)
			printf("HOSTZERO %llu %u\n", (unsigned long long)off, 4000);
		else
			printf("HOSTCHECK %llu %u %u\n", (unsigned long long)off, 4000, cfg_seed);
	}
	EXPECT_OK(unpin(D.fd, D.dh));
	EXPECT_OK(unpin(D.fd, D.sh));
	EXPECT_OK(gs_free(gfd, spacer));
	close(bfd);
	close(D.efd);
	close(D.fd);
	close(gfd);
	wait_clean();
	if (check_clean("after the revoke with DMA in flight"))
		fails++;
	return fails == before ? conclusive : -1;
}

static void t_dmabuf_revoke_dma(void)
{
	int r = 0;

	for (int i = 0; i < 5 && r == 0; i++)
		r = revoke_dma_round(i == 4);
	EXPECT(r == 1);	/* five rounds without a DMA in flight at the revoke */
}

/* pdtest final: after everything else, before rmmod */
const struct pd_test pd_final_tests[] = {
	{ "dmabuf_revoke_dma", t_dmabuf_revoke_dma },
	{ "faults_alloc", t_faults_alloc },	/* faults.c */
	{ NULL },
};
