// SPDX-License-Identifier: GPL-2.0
/*
 * The ioctl contract: version and caps, the exact errno of every malformed
 * argument, and the size-versioned structs (include/uapi/peerdma.h, "Growing
 * the ABI"): newer and older callers.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stddef.h>
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
	/* a known command whatever its _IOC_SIZE, but that must match the size field */
	EXPECT_ERR(ioctl(fd, _IOWR(PEERDMA_IOC_MAGIC, 0x01, uint32_t), &v), EINVAL);
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

/* ioctl number of command @cmd for a caller whose struct has @size bytes */
static unsigned long cmd_sized(unsigned long cmd, size_t size)
{
	return _IOC(_IOC_READ | _IOC_WRITE, PEERDMA_IOC_MAGIC, _IOC_NR(cmd), size);
}

/* the struct at the end of a page whose successor is PROT_NONE */
static void *at_guard(char *two_pages, size_t size)
{
	return two_pages + PAGE - size;
}

/*
 * Size-versioned structs (include/uapi/peerdma.h, "Growing the ABI"): a newer
 * caller's larger struct, an older caller's smaller one, too small ones.
 * PEERDMA_IOC_QUERY grew in ABI 1.1 (revoke_reason), so it has both.
 */
static void t_abi_grow(void)
{
	int fd = pd_open();
	char *m = map_anon(4 * PAGE);
	char *g = mmap(NULL, 2 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct {
		struct peerdma_query q;
		uint8_t tail[40];
	} big;
	struct {
		struct peerdma_pin p;
		uint64_t tail[2];
	} bigpin;
	struct peerdma_version v = { .size = sizeof(v) };
	struct peerdma_query q, *gq;
	struct peerdma_event ev;
	uint8_t old[PEERDMA_QUERY_SIZE_VER1];
	uint64_t h, h2;
	long live0 = live_pins();

	EXPECT(g != MAP_FAILED);
	EXPECT_OK(mprotect(g + PAGE, PAGE, PROT_NONE));
	EXPECT_OK(ioctl(fd, PEERDMA_IOC_VERSION, &v));
	EXPECT(v.abi_version >= ((1 << 16) | 1));	/* 1.1: size-versioned, revoke_reason */
	h = pin(fd, PEERDMA_KIND_HOST, 0, (uintptr_t)m, PAGE, NULL);
	h2 = pin(fd, PEERDMA_KIND_HOST, 0, (uintptr_t)m + 2 * PAGE, 2 * PAGE, NULL);
	EXPECT(h && h2);

	/* newer caller, zero tail: accepted, results as today's, tail untouched */
	memset(&big, 0, sizeof(big));
	big.q.size = sizeof(big);
	big.q.handle = h;
	EXPECT_OK(ioctl(fd, cmd_sized(PEERDMA_IOC_QUERY, sizeof(big)), &big));
	EXPECT_EQ(big.q.size, sizeof(big));
	EXPECT_EQ(big.q.state, PEERDMA_STATE_LIVE);
	EXPECT_EQ(big.q.kind, PEERDMA_KIND_HOST);
	EXPECT_EQ(big.q.pinned_len, PAGE);
	for (size_t i = 0; i < sizeof(big.tail); i++)
		if (big.tail[i]) {
			FAIL("tail byte %zu written: %#x", i, big.tail[i]);
			break;
		}
	/* newer caller using a field this module does not know: E2BIG */
	big.tail[sizeof(big.tail) - 1] = 1;
	EXPECT_ERR(ioctl(fd, cmd_sized(PEERDMA_IOC_QUERY, sizeof(big)), &big), E2BIG);
	big.tail[sizeof(big.tail) - 1] = 0;
	big.tail[0] = 0x80;
	EXPECT_ERR(ioctl(fd, cmd_sized(PEERDMA_IOC_QUERY, sizeof(big)), &big), E2BIG);
	/* the same for a pin: accepted once, refused with a nonzero tail, no pin left */
	memset(&bigpin, 0, sizeof(bigpin));
	bigpin.p = pin_req(PEERDMA_KIND_HOST, 0, (uintptr_t)m + PAGE, PAGE);
	bigpin.p.size = sizeof(bigpin);
	EXPECT_OK(ioctl(fd, cmd_sized(PEERDMA_IOC_PIN, sizeof(bigpin)), &bigpin));
	EXPECT(bigpin.p.handle != 0);
	EXPECT_EQ(bigpin.p.entries, 1);
	EXPECT_EQ(bigpin.tail[0] | bigpin.tail[1], 0);
	EXPECT_EQ(live_pins(), live0 + 3);
	EXPECT_OK(unpin(fd, bigpin.p.handle));
	bigpin.tail[1] = 1ULL << 63;
	EXPECT_ERR(ioctl(fd, cmd_sized(PEERDMA_IOC_PIN, sizeof(bigpin)), &bigpin), E2BIG);
	EXPECT_EQ(live_pins(), live0 + 2);
	/* the largest size an ioctl number carries, zero tail */
	{
		size_t n = (1U << _IOC_SIZEBITS) - 8;
		char *b = calloc(1, n);
		struct peerdma_unpin *u = (struct peerdma_unpin *)b;

		u->size = n;
		u->handle = 424242;
		EXPECT_ERR(ioctl(fd, cmd_sized(PEERDMA_IOC_UNPIN, n), b), ENOENT);
		b[n - 1] = 1;
		EXPECT_ERR(ioctl(fd, cmd_sized(PEERDMA_IOC_UNPIN, n), b), E2BIG);
		free(b);
	}

	/*
	 * older caller (ABI 1.0 query, 64 bytes): accepted and zero-extended. The
	 * bytes after its struct would be a nonzero pad2 if the module read them,
	 * and must not be written.
	 */
	memset(old, 0xff, sizeof(old));
	memset(&q, 0, PEERDMA_QUERY_SIZE_VER0);
	q.size = PEERDMA_QUERY_SIZE_VER0;
	q.handle = h;
	memcpy(old, &q, PEERDMA_QUERY_SIZE_VER0);
	EXPECT_OK(ioctl(fd, cmd_sized(PEERDMA_IOC_QUERY, PEERDMA_QUERY_SIZE_VER0), old));
	memcpy(&q, old, PEERDMA_QUERY_SIZE_VER0);
	EXPECT_EQ(q.size, PEERDMA_QUERY_SIZE_VER0);
	EXPECT_EQ(q.state, PEERDMA_STATE_LIVE);
	EXPECT_EQ(q.user_data, 0xabc0000 + PEERDMA_KIND_HOST);
	EXPECT_EQ(q.entries, 1);
	for (size_t i = PEERDMA_QUERY_SIZE_VER0; i < sizeof(old); i++)
		if (old[i] != 0xff) {
			FAIL("byte %zu past the old struct written: %#x", i, old[i]);
			break;
		}
	/* at the very end of the readable memory: nothing past it is touched */
	gq = at_guard(g, PEERDMA_QUERY_SIZE_VER0);
	memset(gq, 0, PEERDMA_QUERY_SIZE_VER0);
	gq->size = PEERDMA_QUERY_SIZE_VER0;
	gq->handle = h;
	EXPECT_OK(ioctl(fd, cmd_sized(PEERDMA_IOC_QUERY, PEERDMA_QUERY_SIZE_VER0), gq));
	EXPECT_EQ(gq->pinned_len, PAGE);
	/* today's struct at the same place reaches into the guard page */
	gq->size = sizeof(struct peerdma_query);
	EXPECT_ERR(ioctl(fd, PEERDMA_IOC_QUERY, gq), EFAULT);

	/* what the grown field adds: the reason of a revocation, for 1.1 callers */
	EXPECT_OK(munmap(m + 2 * PAGE, PAGE));
	EXPECT_EQ(read_event(fd, &ev, 2000), 1);
	EXPECT_EQ(ev.handle, h2);
	EXPECT_OK(query(fd, h2, &q));
	EXPECT_EQ(q.state, PEERDMA_STATE_REVOKED);
	EXPECT_EQ(q.revoke_reason, PEERDMA_EVENT_HOST_INVALIDATE);
	EXPECT_OK(query(fd, h, &q));
	EXPECT_EQ(q.revoke_reason, 0);
	memset(old, 0xff, sizeof(old));
	memcpy(old, &(struct peerdma_query){ .size = PEERDMA_QUERY_SIZE_VER0, .handle = h2 },
	       PEERDMA_QUERY_SIZE_VER0);
	EXPECT_OK(ioctl(fd, cmd_sized(PEERDMA_IOC_QUERY, PEERDMA_QUERY_SIZE_VER0), old));
	memcpy(&q, old, PEERDMA_QUERY_SIZE_VER0);
	EXPECT_EQ(q.state, PEERDMA_STATE_REVOKED);
	EXPECT_EQ(old[offsetof(struct peerdma_query, revoke_reason)], 0xff);
	/* a 1.1 caller's pad2 must be zero */
	query(fd, h, &q);
	q.pad2 = 1;
	EXPECT_ERR(ioctl(fd, PEERDMA_IOC_QUERY, &q), EINVAL);

	/* too small: below the first published size, or size and _IOC_SIZE differ */
	memset(&q, 0, sizeof(q));
	q.handle = h;
	q.size = PEERDMA_QUERY_SIZE_VER0 - 8;
	EXPECT_ERR(ioctl(fd, cmd_sized(PEERDMA_IOC_QUERY, q.size), &q), EINVAL);
	q.size = 8;
	EXPECT_ERR(ioctl(fd, cmd_sized(PEERDMA_IOC_QUERY, q.size), &q), EINVAL);
	q.size = 0;
	EXPECT_ERR(ioctl(fd, cmd_sized(PEERDMA_IOC_QUERY, 0), &q), EINVAL);
	q.size = PEERDMA_QUERY_SIZE_VER0;
	EXPECT_ERR(ioctl(fd, PEERDMA_IOC_QUERY, &q), EINVAL);
	q.size = sizeof(q);
	EXPECT_ERR(ioctl(fd, cmd_sized(PEERDMA_IOC_QUERY, PEERDMA_QUERY_SIZE_VER0), &q), EINVAL);
	{
		struct peerdma_pin p = pin_req(PEERDMA_KIND_HOST, 0, (uintptr_t)m, PAGE);

		p.size = PEERDMA_PIN_SIZE_VER0 - 8;
		EXPECT_ERR(ioctl(fd, cmd_sized(PEERDMA_IOC_PIN, p.size), &p), EINVAL);
		v.size = PEERDMA_VERSION_SIZE_VER0 - 4;
		EXPECT_ERR(ioctl(fd, cmd_sized(PEERDMA_IOC_VERSION, v.size), &v), EINVAL);
	}
	EXPECT_EQ(live_pins(), live0 + 1);
	EXPECT_OK(unpin(fd, h));
	EXPECT_OK(unpin(fd, h2));
	close(fd);
	EXPECT_EQ(live_pins(), live0);
}

const struct pd_test pd_abi_tests[] = {
	{ "version", t_version },
	{ "bad_inputs", t_bad_inputs },
	{ "abi_grow", t_abi_grow },
	{ NULL },
};
