// SPDX-License-Identifier: GPL-2.0
/*
 * dma-buf import, static and dynamic exporters: entries, addresses, bounds,
 * revocation by move_notify with a client attached.
 */
#define _GNU_SOURCE
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
