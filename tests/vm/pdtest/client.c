// SPDX-License-Identifier: GPL-2.0
/*
 * The in-kernel client API through the edu reference driver: real device DMA
 * between host and GPU memory, quiesce before the pages go, the I/O address
 * with and without an IOMMU, and a GPU free racing a DMA in flight.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"

/* DMA through edu: host page -> GPU memory -> host page, and a dma-buf */
static void t_dma(void)
{
	int fd = pd_open(), gfd = gs_open(), efd = edu_open(), bfd;
	uint64_t off, va = gs_alloc(gfd, 2 * GPAGE, &off), hh, hh2, hg, hb;
	uint8_t *gm = map_gpu(gfd, off, 2 * GPAGE);
	uint8_t *src = map_anon(2 * PAGE), *dst = map_anon(2 * PAGE);
	const uint32_t len = 1000, goff = 0x1000 + 123, soff = 77;
	unsigned int seed = cfg_seed;
	size_t i;

	memset(gm, 0, 2 * GPAGE);
	for (i = 0; i < len; i++)
		src[soff + i] = pattern(seed, i);
	hh = pin(fd, PEERDMA_KIND_HOST, PEERDMA_PIN_READONLY, (uintptr_t)src, 2 * PAGE, NULL);
	hh2 = pin(fd, PEERDMA_KIND_HOST, 0, (uintptr_t)dst, 2 * PAGE, NULL);
	hg = pin(fd, PEERDMA_KIND_GPU, 0, va, 2 * GPAGE, NULL);
	EXPECT(hh && hh2 && hg);

	EXPECT_OK(xfer(efd, fd, hh, soff, hg, goff, len));
	for (i = 0; i < len; i++)
		if (gm[goff + i] != pattern(seed, i)) {
			FAIL("GPU byte %zu: %#x want %#x", i, gm[goff + i], pattern(seed, i));
			break;
		}
	EXPECT_EQ(gm[goff - 1], 0);
	EXPECT_EQ(gm[goff + len], 0);
	printf("HOSTCHECK %llu %u %u\n", (unsigned long long)(off + goff), len, seed);

	/* back: GPU -> host */
	EXPECT_OK(xfer(efd, fd, hg, goff, hh2, 200, len));
	EXPECT(memcmp(dst + 200, src + soff, len) == 0);
	EXPECT_EQ(dst[199], 0x5a);
	EXPECT_EQ(dst[200 + len], 0x5a);

	/* dma-buf of the same GPU memory as source */
	bfd = gs_export(gfd, va, GPAGE);
	hb = pin_buf(fd, bfd, 0, GPAGE, NULL);
	EXPECT(hb != 0);
	memset(dst, 0, PAGE);
	EXPECT_OK(xfer(efd, fd, hb, goff, hh2, 0, 64));
	EXPECT(memcmp(dst, src + soff, 64) == 0);

	/* bad transfers: exact errno, no DMA */
	EXPECT_ERR(xfer(efd, fd, hh, 0, hg, 0, 0), EINVAL);
	EXPECT_ERR(xfer(efd, fd, hh, 0, hg, 0, 4096), EINVAL);
	EXPECT_ERR(xfer(efd, fd, 999999, 0, hg, 0, 16), ENOENT);
	EXPECT_ERR(xfer(efd, fd, hh, 2 * PAGE, hg, 0, 16), ERANGE);
	EXPECT_ERR(xfer(efd, fd, hh, 0, hg, 2 * GPAGE - 8, 16), ERANGE);
	EXPECT_ERR(xfer(efd, 999, hh, 0, hg, 0, 16), EBADF);
	EXPECT_ERR(xfer(efd, gfd, hh, 0, hg, 0, 16), EINVAL);

	EXPECT_OK(unpin(fd, hh));
	EXPECT_OK(unpin(fd, hh2));
	EXPECT_OK(unpin(fd, hg));
	EXPECT_OK(unpin(fd, hb));
	EXPECT_ERR(xfer(efd, fd, hh, 0, hg, 0, 16), ENOENT);
	close(bfd);
	close(efd);
	close(fd);
	close(gfd);
	wait_clean();
}

/* a client holding a mapping is quiesced before the pages go */
static void t_client_quiesce(void)
{
	int fd = pd_open(), gfd = gs_open(), efd = edu_open();
	uint64_t va = gs_alloc(gfd, GPAGE, NULL), h, hh;
	char *m = map_anon(PAGE);
	struct peerdma_edu_attach a = { .peerdma_fd = fd };
	struct peerdma_edu_status st;
	struct peerdma_query q;
	struct peerdma_event ev;

	h = pin(fd, PEERDMA_KIND_GPU, PEERDMA_PIN_GPU_CALLBACK, va, GPAGE, NULL);
	hh = pin(fd, PEERDMA_KIND_HOST, 0, (uintptr_t)m, PAGE, NULL);
	EXPECT(h && hh);
	a.handle = h;
	EXPECT_OK(ioctl(efd, PEERDMA_EDU_IOC_ATTACH, &a));
	EXPECT_OK(ioctl(efd, PEERDMA_EDU_IOC_STATUS, &st));
	EXPECT_EQ(st.attached, 1);
	EXPECT_EQ(st.mapped, 1);
	EXPECT_EQ(st.quiesced, 0);
	EXPECT_EQ(st.entries, 1);
	EXPECT_OK(query(fd, h, &q));
	EXPECT_EQ(q.clients, 1);
	/* a free-callback pin's client is mapped by peerdma itself, not through the table */
	EXPECT_EQ(gs_info().mappings, 0);

	EXPECT_OK(gs_free(gfd, va));
	EXPECT_OK(ioctl(efd, PEERDMA_EDU_IOC_STATUS, &st));
	EXPECT_EQ(st.quiesced, 1);
	EXPECT_EQ(st.mapped, 0);
	EXPECT_EQ(gs_info().mappings, 0);
	EXPECT_EQ(read_event(fd, &ev, 1000), 1);
	EXPECT_EQ(ev.handle, h);
	EXPECT_OK(query(fd, h, &q));
	EXPECT_EQ(q.clients, 0);
	EXPECT_ERR(ioctl(efd, PEERDMA_EDU_IOC_ATTACH, &a), ENODEV);
	EXPECT_ERR(xfer(efd, fd, h, 0, hh, 0, 16), ENODEV);
	EXPECT_OK(ioctl(efd, PEERDMA_EDU_IOC_DETACH));

	/* unpin of an attached handle quiesces the client too */
	a.handle = hh;
	EXPECT_OK(ioctl(efd, PEERDMA_EDU_IOC_ATTACH, &a));
	EXPECT_OK(unpin(fd, hh));
	EXPECT_OK(ioctl(efd, PEERDMA_EDU_IOC_STATUS, &st));
	EXPECT_EQ(st.quiesced, 1);
	EXPECT_EQ(st.mapped, 0);
	EXPECT_EQ(live_pins(), 0);

	/* the client's I/O address: the BAR address without IOMMU, an IOVA with one */
	{
		uint64_t v2 = gs_alloc(gfd, GPAGE, NULL), phys[1];
		uint64_t h3 = pin(fd, PEERDMA_KIND_GPU, 0, v2, GPAGE, NULL);
		struct peerdma_get_pages g;
		int iommu = cmdline_has("intel_iommu=on");

		a.handle = h3;
		EXPECT_OK(ioctl(efd, PEERDMA_EDU_IOC_ATTACH, &a));
		EXPECT_OK(ioctl(efd, PEERDMA_EDU_IOC_STATUS, &st));
		EXPECT_OK(get_pages(fd, h3, phys, 1, &g));
		printf("  I/O address %#llx, physical %#llx (%s)\n",
		       (unsigned long long)st.first_dma, (unsigned long long)phys[0],
		       iommu ? "IOMMU" : "no IOMMU");
		if (iommu)
			EXPECT(st.first_dma != phys[0]);
		else
			EXPECT_EQ(st.first_dma, phys[0]);
		/* 4 KiB entries for a device with 4 KiB descriptors */
		a.flags = PEERDMA_EDU_ATTACH_SPLIT_4K;
		EXPECT_OK(ioctl(efd, PEERDMA_EDU_IOC_ATTACH, &a));
		EXPECT_OK(ioctl(efd, PEERDMA_EDU_IOC_STATUS, &st));
		EXPECT_EQ(st.entries, GPAGE / PAGE);
		EXPECT_EQ(st.mapped, 1);
		a.flags = 2;
		EXPECT_ERR(ioctl(efd, PEERDMA_EDU_IOC_ATTACH, &a), EINVAL);
		a.flags = 0;
		EXPECT_OK(ioctl(efd, PEERDMA_EDU_IOC_DETACH));
		EXPECT_OK(unpin(fd, h3));
		EXPECT_OK(gs_free(gfd, v2));
	}

	/* persistent GPU pin through the client API: detach, then unpin */
	va = gs_alloc(gfd, GPAGE, NULL);
	h = pin(fd, PEERDMA_KIND_GPU, 0, va, GPAGE, NULL);
	a.handle = h;
	/* DMA mapping versions: 2.3+ accepted, others refused and unmapped */
	EXPECT_OK(write_param("gpusim", "map_version", "131074"));	/* 0x00020002 */
	EXPECT_ERR(ioctl(efd, PEERDMA_EDU_IOC_ATTACH, &a), EPROTO);
	EXPECT_OK(write_param("gpusim", "map_version", "65539"));	/* 0x00010003 */
	EXPECT_ERR(ioctl(efd, PEERDMA_EDU_IOC_ATTACH, &a), EPROTO);
	EXPECT_EQ(gs_info().mappings, 0);
	EXPECT_OK(write_param("gpusim", "map_version", "131076"));	/* 0x00020004 */
	EXPECT_OK(ioctl(efd, PEERDMA_EDU_IOC_ATTACH, &a));
	EXPECT_OK(ioctl(efd, PEERDMA_EDU_IOC_DETACH));
	EXPECT_OK(write_param("gpusim", "map_version", "131075"));	/* 0x00020003 */
	EXPECT_OK(ioctl(efd, PEERDMA_EDU_IOC_ATTACH, &a));
	EXPECT_EQ(gs_info().mappings, 1);
	EXPECT_OK(ioctl(efd, PEERDMA_EDU_IOC_DETACH));
	EXPECT_EQ(gs_info().mappings, 0);
	EXPECT_OK(unpin(fd, h));
	close(efd);
	close(fd);
	close(gfd);
	wait_clean();
	if (check_clean("after quiesce"))
		fails++;
}

static struct {
	int efd, fd, r, e;
	uint64_t sh, dh;
} X;

static void *xfer_thread(void *arg)
{
	X.r = xfer(X.efd, X.fd, X.sh, 0, X.dh, 0, 4000);
	X.e = errno;
	return NULL;
}

/*
 * GPU memory freed while edu DMAs into it: the free callback must not return
 * before the client's quiesce did, and that waits for the DMA in flight. The
 * client counts quiesces that found a transfer holding the device
 * (quiesce_waits): read right after the free returns, it must have grown.
 * No timing: a round where the transfer ended (or had not started) before
 * the free is inconclusive and run again.
 */
static int dma_vs_free_round(int *conclusive)
{
	int gfd = gs_open();
	uint64_t va = gs_alloc(gfd, GPAGE, NULL);
	char *m = map_anon(PAGE);
	struct peerdma_event ev;
	long waits0, waits1;
	int before = fails;
	pthread_t t;

	*conclusive = 0;
	X.fd = pd_open();
	X.efd = edu_open();
	X.sh = pin(X.fd, PEERDMA_KIND_HOST, 0, (uintptr_t)m, PAGE, NULL);
	X.dh = pin(X.fd, PEERDMA_KIND_GPU, PEERDMA_PIN_GPU_CALLBACK, va, GPAGE, NULL);
	EXPECT(X.sh && X.dh);
	waits0 = read_param("peerdma_edu", "quiesce_waits");
	EXPECT(waits0 >= 0);
	pthread_create(&t, NULL, xfer_thread, NULL);
	usleep(30000);	/* edu takes 2 x 100 ms of virtual time per transfer */
	EXPECT_OK(gs_free(gfd, va));
	waits1 = read_param("peerdma_edu", "quiesce_waits");
	pthread_join(t, NULL);
	if (X.r) {
		EXPECT_EQ(X.e, ENODEV);	/* quiesced before the transfer started */
	} else if (waits1 > waits0) {
		*conclusive = 1;	/* it waited, and the free waited for it */
		EXPECT_EQ(waits1, waits0 + 1);
	}
	printf("  transfer %s, quiesce %s\n", X.r ? strerror(X.e) : "completed",
	       waits1 > waits0 ? "waited for it" : "found the device idle");
	EXPECT_EQ(read_event(X.fd, &ev, 1000), 1);
	EXPECT_EQ(ev.handle, X.dh);
	EXPECT_ERR(xfer(X.efd, X.fd, X.sh, 0, X.dh, 0, 16), ENODEV);
	close(X.efd);
	close(X.fd);
	close(gfd);
	munmap(m, PAGE);
	wait_clean();
	if (check_clean("after DMA vs free"))
		fails++;
	return fails == before;
}

static void t_dma_vs_free(void)
{
	int conclusive = 0;

	for (int i = 0; i < 5 && !conclusive; i++)
		if (!dma_vs_free_round(&conclusive))
			return;
	EXPECT(conclusive);	/* five rounds without a DMA in flight at the free */
}

const struct pd_test pd_client_tests[] = {
	{ "dma_edu", t_dma },
	{ "client_quiesce", t_client_quiesce },
	{ "dma_vs_free", t_dma_vs_free },
	{ NULL },
};
