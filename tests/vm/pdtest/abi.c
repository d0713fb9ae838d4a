// SPDX-License-Identifier: GPL-2.0
/*
 * The ioctl contract: version and caps, the exact errno of every malformed
 * argument.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

static void t_version(void)
{
	int fd = pd_open();
	struct peerdma_version v = { .size = sizeof(v) };

	struct stat sb;

	EXPECT_OK(stat(PEERDMA_DEVICE, &sb));
	EXPECT(S_ISCHR(sb.st_mode));
	EXPECT_EQ(sb.st_mode & 07777, 0600);
	EXPECT_EQ(sb.st_uid, 0);
	EXPECT_EQ(sb.st_gid, 0);
	EXPECT_OK(ioctl(fd, PEERDMA_IOC_VERSION, &v));
	EXPECT_EQ(v.abi_version >> 16, PEERDMA_ABI_MAJOR);
	EXPECT((v.caps & (PEERDMA_CAP_HOST | PEERDMA_CAP_GPU | PEERDMA_CAP_DMABUF |
			  PEERDMA_CAP_EVENTS)) ==
	       (PEERDMA_CAP_HOST | PEERDMA_CAP_GPU | PEERDMA_CAP_DMABUF | PEERDMA_CAP_EVENTS));
	v.size = sizeof(v) - 1;
	EXPECT_ERR(ioctl(fd, PEERDMA_IOC_VERSION, &v), EINVAL);
	v.size = sizeof(v);
	v.flags = 1;
	EXPECT_ERR(ioctl(fd, PEERDMA_IOC_VERSION, &v), EINVAL);
	v.flags = 0;
	v.pad = 1;
	EXPECT_ERR(ioctl(fd, PEERDMA_IOC_VERSION, &v), EINVAL);
	EXPECT_ERR(ioctl(fd, PEERDMA_IOC_VERSION, NULL), EFAULT);
	EXPECT_ERR(ioctl(fd, PEERDMA_IOC_VERSION, (void *)0xffff888000000000ULL), EFAULT);
	EXPECT_ERR(ioctl(fd, _IOWR(PEERDMA_IOC_MAGIC, 0x55, struct peerdma_pin), &v), ENOTTY);
	EXPECT_ERR(ioctl(fd, _IOWR(PEERDMA_IOC_MAGIC, 0x01, uint32_t), &v), ENOTTY);
	EXPECT_ERR(ioctl(fd, _IOR(PEERDMA_IOC_MAGIC, 0x00, struct peerdma_version), &v), ENOTTY);
	close(fd);
}

static void t_bad_inputs(void)
{
	int fd = pd_open(), gfd = gs_open(), nfd = open("/dev/null", O_RDONLY);
	char *m = map_anon(2 * PAGE);
	uint64_t goff, gva = gs_alloc(gfd, GPAGE, &goff);
	void *gm = map_gpu(gfd, goff, GPAGE);
	char *hole = map_anon(PAGE);
	struct peerdma_pin p;
	struct peerdma_unpin u;
	struct peerdma_query q;
	struct peerdma_get_pages g;

	munmap(hole, PAGE);
#define PIN_ERR(mod, err)                                                 \
	do {                                                              \
		p = pin_req(PEERDMA_KIND_HOST, 0, (uintptr_t)m, PAGE);    \
		mod;                                                      \
		EXPECT_ERR(ioctl(fd, PEERDMA_IOC_PIN, &p), err);          \
	} while (0)
	PIN_ERR(p.len = 0, EINVAL);
	PIN_ERR(p.size = sizeof(p) + 8, EINVAL);
	PIN_ERR(p.size = 0, EINVAL);
	PIN_ERR(p.flags = 0x100, EINVAL);
	PIN_ERR(p.flags = 0x80000000, EINVAL);
	PIN_ERR(p.kind = 0, EINVAL);
	PIN_ERR(p.kind = 4, EINVAL);
	PIN_ERR(p.kind = 0xffffffff, EINVAL);
	PIN_ERR(p.fd = 0, EINVAL);
	PIN_ERR(p.fd = nfd, EINVAL);
	PIN_ERR(p.flags = PEERDMA_PIN_GPU_CALLBACK, EINVAL);
	PIN_ERR(p.addr = 0xffff888000000000ULL, EFAULT);
	PIN_ERR(p.addr = 0xffffffffff600000ULL, EFAULT);
	PIN_ERR((p.addr = 0x7ffffffff000ULL, p.len = 2 * PAGE), EFAULT);
	PIN_ERR((p.addr = ~0ULL - 10, p.len = 100), EOVERFLOW);
	PIN_ERR((p.addr = ~0ULL - PAGE, p.len = 2 * PAGE), EOVERFLOW);
	PIN_ERR(p.len = 1ULL << 40, E2BIG);
	PIN_ERR(p.len = PEERDMA_MAX_PIN_LEN + 1, E2BIG);
	PIN_ERR((p.flags = PEERDMA_PIN_EXACT, p.addr += 1), EINVAL);
	PIN_ERR((p.flags = PEERDMA_PIN_EXACT, p.len = 100), EINVAL);
	PIN_ERR(p.addr = (uintptr_t)hole, EFAULT);
	PIN_ERR(p.addr = 0, EFAULT);
	PIN_ERR(p.addr = (uintptr_t)gm, EFAULT); /* VM_IO: no struct pages */
	/* GPU kind: not GPU memory, outside the allocation, EXACT misaligned */
	PIN_ERR((p.kind = PEERDMA_KIND_GPU, p.addr = (uintptr_t)m), EINVAL);
	PIN_ERR((p.kind = PEERDMA_KIND_GPU, p.addr = gva, p.len = 2 * GPAGE), EINVAL);
	PIN_ERR((p.kind = PEERDMA_KIND_GPU, p.addr = gva + PAGE, p.flags = PEERDMA_PIN_EXACT),
		EINVAL);
	PIN_ERR((p.kind = PEERDMA_KIND_GPU, p.addr = 0xffff800000000000ULL), EFAULT);
	/* dma-buf kind: fd checks */
	PIN_ERR((p.kind = PEERDMA_KIND_DMABUF, p.addr = 0), EBADF);
	PIN_ERR((p.kind = PEERDMA_KIND_DMABUF, p.addr = 0, p.fd = 999), EBADF);
	PIN_ERR((p.kind = PEERDMA_KIND_DMABUF, p.addr = 0, p.fd = nfd), EINVAL);
	EXPECT_ERR(ioctl(fd, PEERDMA_IOC_PIN, NULL), EFAULT);
	EXPECT_ERR(ioctl(fd, PEERDMA_IOC_PIN, (void *)(uintptr_t)hole), EFAULT);
	EXPECT_EQ(live_pins(), 0);

	/* unknown handles, bad unpin/query/get_pages arguments */
	EXPECT_ERR(unpin(fd, 0), ENOENT);
	EXPECT_ERR(unpin(fd, 12345678), ENOENT);
	EXPECT_ERR(unpin(fd, ~0ULL), ENOENT);
	EXPECT_ERR(query(fd, 0, &q), ENOENT);
	EXPECT_ERR(get_pages(fd, 77, NULL, 0, &g), ENOENT);
	u = (struct peerdma_unpin){ .size = sizeof(u), .flags = 1, .handle = 1 };
	EXPECT_ERR(ioctl(fd, PEERDMA_IOC_UNPIN, &u), EINVAL);
	u = (struct peerdma_unpin){ .size = 8, .handle = 1 };
	EXPECT_ERR(ioctl(fd, PEERDMA_IOC_UNPIN, &u), EINVAL);
	memset(&q, 0, sizeof(q));
	q.size = sizeof(q);
	q.pad = 1;
	EXPECT_ERR(ioctl(fd, PEERDMA_IOC_QUERY, &q), EINVAL);
	memset(&g, 0, sizeof(g));
	g.size = sizeof(g);
	g.flags = 2;
	EXPECT_ERR(ioctl(fd, PEERDMA_IOC_GET_PAGES, &g), EINVAL);
	/* read: short buffer, nothing queued */
	char small[8];
	struct peerdma_event ev;

	EXPECT_ERR(read(fd, small, sizeof(small)), EINVAL);
	fcntl(fd, F_SETFL, O_NONBLOCK);
	EXPECT_ERR(read(fd, &ev, sizeof(ev)), EAGAIN);
	EXPECT_ERR(write(fd, &ev, sizeof(ev)), EINVAL);
	EXPECT_ERR(lseek(fd, 0, SEEK_SET), ESPIPE);
	close(nfd);
	close(fd);
	close(gfd);
}

const struct pd_test pd_abi_tests[] = {
	{ "version", t_version },
	{ "bad_inputs", t_bad_inputs },
	{ NULL },
};
