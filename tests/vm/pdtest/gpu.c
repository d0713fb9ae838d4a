// SPDX-License-Identifier: GPL-2.0
/*
 * GPU pins through nv-p2p (the gpusim stand-in): its own semantics,
 * persistent pins, free-callback pins and their revocation, BAR exhaustion and
 * the page table version checks.
 */
#define _GNU_SOURCE
#include <poll.h>
#include <unistd.h>

#include "harness.h"

/* the stand-in's own nv-p2p semantics, and allocation limits */
static void t_gpusim_api(void)
{
	int gfd = gs_open();
	struct gpusim_info info = gs_info();
	uint64_t off, va = gs_alloc(gfd, GPAGE, &off), half, va2;
	struct gpusim_alloc a;

	EXPECT_EQ(va % GPAGE, 0);
	EXPECT_EQ(va, GPUSIM_VA_BASE + off);
	EXPECT_EQ(ioctl(gfd, GPUSIM_IOC_SELFTEST, &va), 0);
	EXPECT_EQ(gs_info().tables, 0);
	/* BAR exhausted: ENOMEM; larger than the BAR: EINVAL; zero: EINVAL */
	half = (info.bar_size - info.used) / 2;
	va2 = gs_alloc(gfd, half, NULL);
	a = (struct gpusim_alloc){ .size = half };
	EXPECT_ERR(ioctl(gfd, GPUSIM_IOC_ALLOC, &a), ENOMEM);
	a.size = info.bar_size + 1;
	EXPECT_ERR(ioctl(gfd, GPUSIM_IOC_ALLOC, &a), EINVAL);
	a.size = 0;
	EXPECT_ERR(ioctl(gfd, GPUSIM_IOC_ALLOC, &a), EINVAL);
	EXPECT_OK(gs_free(gfd, va2));
	a.size = 100;	/* rounded up to 64 KiB */
	EXPECT_OK(ioctl(gfd, GPUSIM_IOC_ALLOC, &a));
	EXPECT_EQ(gs_info().used, info.used + 2 * GPAGE);
	close(gfd);
	EXPECT_EQ(gs_info().used, info.used);
}

static void t_gpu_persistent(void)
{
	int fd = pd_open(), gfd = gs_open();
	uint64_t off, va = gs_alloc(gfd, 4 * GPAGE, &off), h, h2;
	struct gpusim_info info = gs_info();
	struct peerdma_pin p;
	struct peerdma_get_pages g;
	uint64_t addrs[64];

	h = pin(fd, PEERDMA_KIND_GPU, 0, va + PAGE, 2 * PAGE, &p);
	EXPECT(h != 0);
	EXPECT_EQ(p.pinned_addr, va);
	EXPECT_EQ(p.pinned_len, GPAGE);
	EXPECT_EQ(p.page_size, GPAGE);
	EXPECT_EQ(p.entries, 1);
	h2 = pin(fd, PEERDMA_KIND_GPU, PEERDMA_PIN_SPLIT_4K, va, 4 * GPAGE, &p);
	EXPECT(h2 != 0);
	EXPECT_EQ(p.page_size, PAGE);
	EXPECT_EQ(p.entries, 64);
	EXPECT_EQ(gs_info().tables, 2);
	EXPECT_EQ(gs_info().pinned, 5 * GPAGE);
	EXPECT_EQ(live_pins(), 2);
	EXPECT_OK(get_pages(fd, h2, addrs, 64, &g));
	EXPECT_EQ(g.count, 64);
	for (int i = 0; i < 64; i++)
		if (addrs[i] != info.bar_phys + off + i * PAGE) {
			FAIL("split entry %d: %llx", i, (unsigned long long)addrs[i]);
			break;
		}
	EXPECT_OK(get_pages(fd, h, addrs, 1, &g));
	EXPECT_EQ(g.page_size, GPAGE);
	EXPECT_EQ(addrs[0], info.bar_phys + off);
	EXPECT_OK(unpin(fd, h));
	EXPECT_OK(unpin(fd, h2));
	EXPECT_EQ(gs_info().tables, 0);
	EXPECT_EQ(live_pins(), 0);
	EXPECT_OK(gs_free(gfd, va));
	EXPECT_ERR(gs_free(gfd, va), EINVAL);
	close(fd);
	close(gfd);
}

/* free while pinned, persistent: the memory stays until unpin, no revoke */
static void t_gpu_persistent_free(void)
{
	int fd = pd_open(), gfd = gs_open();
	uint64_t used0 = gs_info().used, va = gs_alloc(gfd, GPAGE, NULL), va2, h;
	struct peerdma_event ev;

	h = pin(fd, PEERDMA_KIND_GPU, 0, va, GPAGE, NULL);
	EXPECT(h != 0);
	EXPECT_OK(gs_free(gfd, va));
	EXPECT_EQ(read_event(fd, &ev, 0), 0);
	EXPECT_EQ(state_of(fd, h), PEERDMA_STATE_LIVE);
	EXPECT_EQ(gs_info().used, used0 + GPAGE);
	va2 = gs_alloc(gfd, GPAGE, NULL);
	EXPECT(va2 != va);	/* pinned memory is not reused */
	EXPECT_OK(unpin(fd, h));
	EXPECT_EQ(gs_info().used, used0 + GPAGE);
	EXPECT_OK(gs_free(gfd, va2));
	EXPECT_EQ(gs_info().used, used0);
	/* and now the address is reused: same VA, new memory (why stale pins matter) */
	va2 = gs_alloc(gfd, GPAGE, NULL);
	EXPECT_EQ(va2, va);
	EXPECT_EQ(live_pins(), 0);
	close(fd);
	close(gfd);
}

/* free while pinned, callback mode: callback, event, dead handle */
static void t_gpu_callback_free(void)
{
	int fd = pd_open(), gfd = gs_open();
	uint64_t va = gs_alloc(gfd, 2 * GPAGE, NULL), h, h2;
	uint32_t cb0 = gs_info().callbacks;
	struct peerdma_event ev[4];
	struct peerdma_get_pages g;
	uint64_t a[2];

	h = pin(fd, PEERDMA_KIND_GPU, PEERDMA_PIN_GPU_CALLBACK, va, 2 * GPAGE, NULL);
	h2 = pin(fd, PEERDMA_KIND_GPU, PEERDMA_PIN_GPU_CALLBACK, va + GPAGE, GPAGE, NULL);
	EXPECT(h && h2);
	EXPECT_EQ(live_pins(), 2);
	EXPECT_OK(gs_free(gfd, va));
	EXPECT_EQ(gs_info().callbacks, cb0 + 2);
	EXPECT_EQ(gs_info().tables, 0);
	EXPECT_EQ(live_pins(), 0);
	struct pollfd pf = { .fd = fd, .events = POLLIN };

	EXPECT_EQ(poll(&pf, 1, 0), 1);
	EXPECT_EQ(read(fd, ev, sizeof(ev)), 2 * sizeof(ev[0]));
	EXPECT_EQ(ev[0].handle, h);
	EXPECT_EQ(ev[0].reason, PEERDMA_EVENT_GPU_FREE);
	EXPECT_EQ(ev[0].user_data, 0xabc0000 + PEERDMA_KIND_GPU);
	EXPECT_EQ(ev[1].handle, h2);
	EXPECT_EQ(poll(&pf, 1, 0), 0);
	EXPECT_EQ(state_of(fd, h), PEERDMA_STATE_REVOKED);
	EXPECT_ERR(get_pages(fd, h, a, 2, &g), ENODEV);
	EXPECT_OK(unpin(fd, h));
	EXPECT_ERR(unpin(fd, h), ENOENT);
	/* h2 is unpinned by close */
	close(fd);
	close(gfd);
	EXPECT_EQ(live_pins(), 0);
}

static void t_gpu_enomem_version(void)
{
	int fd = pd_open(), gfd = gs_open();
	uint64_t va = gs_alloc(gfd, 4 * GPAGE, NULL), h;
	char buf[32];

	EXPECT_OK(write_param("gpusim", "pin_limit", "131072"));
	EXPECT_ERR(-!pin(fd, PEERDMA_KIND_GPU, 0, va, 4 * GPAGE, NULL), ENOMEM);
	h = pin(fd, PEERDMA_KIND_GPU, 0, va, 2 * GPAGE, NULL);
	EXPECT(h != 0);
	EXPECT_ERR(-!pin(fd, PEERDMA_KIND_GPU, PEERDMA_PIN_GPU_CALLBACK, va, GPAGE, NULL), ENOMEM);
	EXPECT_OK(unpin(fd, h));
	EXPECT_OK(write_param("gpusim", "pin_limit", "0"));

	/* page table versions: 1.2 and 2.x accepted, 1.1 and 3.0 refused */
	static const struct { unsigned int v; int ok; } vers[] = {
		{ 0x00010002, 1 }, { 0x00010003, 1 }, { 0x00020001, 1 },
		{ 0x00010001, 0 }, { 0x00030000, 0 }, { 0x00000000, 0 },
	};
	for (unsigned int i = 0; i < sizeof(vers) / sizeof(vers[0]); i++) {
		snprintf(buf, sizeof(buf), "%u", vers[i].v);
		EXPECT_OK(write_param("gpusim", "pt_version", buf));
		for (int cb = 0; cb < 2; cb++) {
			h = pin(fd, PEERDMA_KIND_GPU, cb ? PEERDMA_PIN_GPU_CALLBACK : 0, va, GPAGE,
				NULL);
			if (vers[i].ok) {
				if (!h)
					FAIL("version %#x refused: %s", vers[i].v, strerror(errno));
				else
					EXPECT_OK(unpin(fd, h));
			} else if (h || errno != EPROTO) {
				FAIL("version %#x: handle %llu errno %d", vers[i].v,
				     (unsigned long long)h, errno);
			}
		}
	}
	snprintf(buf, sizeof(buf), "%u", 0x00020000);
	EXPECT_OK(write_param("gpusim", "pt_version", buf));
	EXPECT_EQ(gs_info().tables, 0);
	EXPECT_EQ(live_pins(), 0);

	/* a driver without the persistent API: falls back to callback mode */
	EXPECT_OK(write_param("gpusim", "persistent_api", "0"));
	h = pin(fd, PEERDMA_KIND_GPU, 0, va, GPAGE, NULL);
	EXPECT(h != 0);
	EXPECT_OK(write_param("gpusim", "persistent_api", "1"));
	uint32_t cb0 = gs_info().callbacks;
	struct peerdma_event ev;

	EXPECT_OK(gs_free(gfd, va));
	EXPECT_EQ(gs_info().callbacks, cb0 + 1);
	EXPECT_EQ(read_event(fd, &ev, 1000), 1);
	EXPECT_EQ(ev.handle, h);
	close(fd);
	close(gfd);
}

/* nvp2p_persistent=0: a pin without PEERDMA_PIN_GPU_CALLBACK is in callback mode */
static void t_gpu_mode_param(void)
{
	int fd = pd_open(), gfd = gs_open();
	uint64_t va = gs_alloc(gfd, GPAGE, NULL), h;
	uint32_t cb0 = gs_info().callbacks;
	struct peerdma_event ev;

	EXPECT_OK(write_param("peerdma", "nvp2p_persistent", "0"));
	h = pin(fd, PEERDMA_KIND_GPU, 0, va, GPAGE, NULL);
	EXPECT_OK(write_param("peerdma", "nvp2p_persistent", "1"));
	EXPECT(h != 0);
	EXPECT_OK(gs_free(gfd, va));
	EXPECT_EQ(gs_info().callbacks, cb0 + 1);
	EXPECT_EQ(read_event(fd, &ev, 1000), 1);
	EXPECT_EQ(ev.handle, h);
	EXPECT_EQ(ev.reason, PEERDMA_EVENT_GPU_FREE);
	EXPECT_EQ(state_of(fd, h), PEERDMA_STATE_REVOKED);
	close(fd);
	close(gfd);
}

const struct pd_test pd_gpu_tests[] = {
	{ "gpusim_api", t_gpusim_api },
	{ "gpu_persistent", t_gpu_persistent },
	{ "gpu_persistent_free", t_gpu_persistent_free },
	{ "gpu_callback_free", t_gpu_callback_free },
	{ "gpu_enomem_version", t_gpu_enomem_version },
	{ "gpu_mode_param", t_gpu_mode_param },
	{ NULL },
};
