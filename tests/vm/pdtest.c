// SPDX-License-Identifier: GPL-2.0
/*
 * In-guest test suite of peerdma.ko (static binary, run by tests/vm/init).
 *   pdtest suite [SEED [TEST]]  every functional test (or one), one "ok - NAME" / "not ok - NAME"
 *                        / "skip - NAME" line each (SEED: of the DMA pattern)
 *   pdtest race SECONDS  GPU free / dma-buf revoke / munmap racing unpin, pin,
 *                        close and process exit (with a client attached in some
 *                        rounds); live pins back to 0 at the end
 *   pdtest fuzz SECONDS [SEED]  random ioctls, reads and closes on /dev/peerdma
 *   pdtest rmmod         rmmod with live pins refused, nothing leaked after
 * Every test runs in its own child process; a crash or hang fails only it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/capability.h>

#include <uapi/peerdma.h>
#include "gpusim_uapi.h"
#include "edu_uapi.h"

/* the ABI as user space sees it (kernel/ioctl.c asserts the same) */
_Static_assert(sizeof(struct peerdma_version) == 24, "abi");
_Static_assert(sizeof(struct peerdma_pin) == 72, "abi");
_Static_assert(sizeof(struct peerdma_unpin) == 16, "abi");
_Static_assert(sizeof(struct peerdma_query) == 64, "abi");
_Static_assert(sizeof(struct peerdma_get_pages) == 32, "abi");
_Static_assert(sizeof(struct peerdma_event) == 24, "abi");

#define PAGE 4096UL
#define GPAGE 65536UL

static int fails;

#define FAIL(...)                                                        \
	do {                                                             \
		printf("  FAIL %s:%d: ", __func__, __LINE__);            \
		printf(__VA_ARGS__);                                     \
		printf("\n");                                            \
		fails++;                                                 \
	} while (0)

#define EXPECT(cond)                                                     \
	do {                                                             \
		if (!(cond))                                             \
			FAIL("%s", #cond);                               \
	} while (0)

#define EXPECT_EQ(a, b)                                                  \
	do {                                                             \
		long long _a = (long long)(a), _b = (long long)(b);      \
		if (_a != _b)                                            \
			FAIL("%s == %lld, want %s == %lld", #a, _a, #b, _b); \
	} while (0)

/* expr must fail with errno err */
#define EXPECT_ERR(expr, err)                                            \
	do {                                                             \
		errno = 0;                                               \
		long _r = (long)(expr);                                  \
		int _e = errno;                                          \
		if (_r != -1 || _e != (err))                             \
			FAIL("%s -> %ld errno %d (%s), want %s", #expr, _r, \
			     _e, strerror(_e), #err);                    \
	} while (0)

#define EXPECT_OK(expr)                                                  \
	do {                                                             \
		errno = 0;                                               \
		long _r = (long)(expr);                                  \
		if (_r < 0)                                              \
			FAIL("%s -> %ld errno %d (%s)", #expr, _r, errno, \
			     strerror(errno));                           \
	} while (0)

#define SKIP 77

static unsigned int cfg_seed = 1;

/* ---- helpers ---- */

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Open a device node the suite cannot run without. */
static int open_dev(const char *path)
{
	int fd = open(path, O_RDWR | O_CLOEXEC);

	if (fd < 0) {
		printf("  open %s: %s\n", path, strerror(errno));
		exit(1);
	}
	return fd;
}

static int pd_open(void)
{
	return open_dev(PEERDMA_DEVICE);
}

static int gs_open(void)
{
	return open_dev(GPUSIM_DEVICE);
}

static int edu_open(void)
{
	return open_dev(PEERDMA_EDU_DEVICE);
}

static uint64_t gs_alloc(int gfd, uint64_t size, uint64_t *bar_off)
{
	struct gpusim_alloc a = { .size = size };

	if (ioctl(gfd, GPUSIM_IOC_ALLOC, &a)) {
		printf("  gpusim alloc %llu: %s\n", (unsigned long long)size, strerror(errno));
		exit(1);
	}
	if (bar_off)
		*bar_off = a.bar_off;
	return a.va;
}

static int gs_free(int gfd, uint64_t va)
{
	return ioctl(gfd, GPUSIM_IOC_FREE, &va);
}

static struct gpusim_info gs_info(void)
{
	struct gpusim_info i = { 0 };
	int fd = gs_open();

	if (ioctl(fd, GPUSIM_IOC_INFO, &i))
		printf("  gpusim info: %s\n", strerror(errno));
	close(fd);
	return i;
}

static int gs_export(int gfd, uint64_t va, uint64_t len)
{
	struct gpusim_export e = { .va = va, .len = len };

	if (ioctl(gfd, GPUSIM_IOC_EXPORT, &e))
		return -1;
	return e.fd;
}

static long live_pins(void)
{
	char buf[64] = "";
	int fd = open("/sys/kernel/debug/peerdma/live_pins", O_RDONLY);

	if (fd < 0)
		return -1;
	if (read(fd, buf, sizeof(buf) - 1) < 0)
		buf[0] = 0;
	close(fd);
	return strtol(buf, NULL, 10);
}

static int write_param(const char *mod, const char *p, const char *v)
{
	char path[256];
	int fd, r;

	snprintf(path, sizeof(path), "/sys/module/%s/parameters/%s", mod, p);
	fd = open(path, O_WRONLY);
	if (fd < 0)
		return -1;
	r = write(fd, v, strlen(v));
	close(fd);
	return r < 0 ? -1 : 0;
}

static struct peerdma_pin pin_req(uint32_t kind, uint32_t flags, uint64_t addr, uint64_t len)
{
	struct peerdma_pin p;

	memset(&p, 0, sizeof(p));
	p.size = sizeof(p);
	p.flags = flags;
	p.kind = kind;
	p.fd = -1;
	p.addr = addr;
	p.len = len;
	p.user_data = 0xabc0000 + kind;
	return p;
}

/* pin; returns the handle or 0 (errno set) */
static uint64_t pin(int fd, uint32_t kind, uint32_t flags, uint64_t addr, uint64_t len,
		    struct peerdma_pin *out)
{
	struct peerdma_pin p = pin_req(kind, flags, addr, len);

	if (ioctl(fd, PEERDMA_IOC_PIN, &p))
		return 0;
	if (out)
		*out = p;
	return p.handle;
}

static uint64_t pin_buf(int fd, int buf_fd, uint64_t off, uint64_t len, struct peerdma_pin *out)
{
	struct peerdma_pin p = pin_req(PEERDMA_KIND_DMABUF, 0, off, len);

	p.fd = buf_fd;
	if (ioctl(fd, PEERDMA_IOC_PIN, &p))
		return 0;
	if (out)
		*out = p;
	return p.handle;
}

static int unpin(int fd, uint64_t h)
{
	struct peerdma_unpin u = { .size = sizeof(u), .handle = h };

	return ioctl(fd, PEERDMA_IOC_UNPIN, &u);
}

static int query(int fd, uint64_t h, struct peerdma_query *q)
{
	memset(q, 0, sizeof(*q));
	q->size = sizeof(*q);
	q->handle = h;
	return ioctl(fd, PEERDMA_IOC_QUERY, q);
}

static int get_pages(int fd, uint64_t h, uint64_t *addrs, uint32_t count, struct peerdma_get_pages *g)
{
	memset(g, 0, sizeof(*g));
	g->size = sizeof(*g);
	g->handle = h;
	g->addrs = (uintptr_t)addrs;
	g->count = count;
	return ioctl(fd, PEERDMA_IOC_GET_PAGES, g);
}

static int state_of(int fd, uint64_t h)
{
	struct peerdma_query q;

	if (query(fd, h, &q))
		return -errno;
	return q.state;
}

/* one event, waiting up to ms; 0 if none */
static int read_event(int fd, struct peerdma_event *ev, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	if (poll(&p, 1, ms) != 1)
		return 0;
	return read(fd, ev, sizeof(*ev)) == sizeof(*ev);
}

static int xfer(int efd, int pfd, uint64_t sh, uint64_t soff, uint64_t dh, uint64_t doff,
		uint32_t len)
{
	struct peerdma_edu_xfer x = {
		.peerdma_fd = pfd, .len = len,
		.src_handle = sh, .src_off = soff, .dst_handle = dh, .dst_off = doff,
	};

	return ioctl(efd, PEERDMA_EDU_IOC_XFER, &x);
}

static void *map_anon(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED) {
		printf("  mmap: %s\n", strerror(errno));
		exit(1);
	}
	memset(p, 0x5a, len);
	return p;
}

static void *map_gpu(int gfd, uint64_t bar_off, size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, gfd, bar_off);

	if (p == MAP_FAILED) {
		printf("  mmap gpusim: %s\n", strerror(errno));
		exit(1);
	}
	return p;
}

static uint8_t pattern(unsigned int seed, size_t i)
{
	return (uint8_t)(seed * 7 + i * 31 + (i >> 8));
}

static int cmdline_has(const char *word)
{
	char buf[1024] = "";
	int fd = open("/proc/cmdline", O_RDONLY);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;

	if (fd >= 0)
		close(fd);
	buf[n > 0 ? n : 0] = 0;
	return strstr(buf, word) != NULL;
}

static int check_clean(const char *when)
{
	struct gpusim_info i = gs_info();
	long live = live_pins();
	int bad = 0;

	if (live != 0 || i.tables || i.mappings || i.bufs || i.bufmaps || i.pinned) {
		printf("  %s: live_pins %ld, gpusim tables %u mappings %u bufs %u/%u pinned %llu\n",
		       when, live, i.tables, i.mappings, i.bufs, i.bufmaps,
		       (unsigned long long)i.pinned);
		bad = 1;
	}
	return bad;
}

static void wait_clean(void)
{
	/* deferred releases (workqueue) finish within a few ms */
	for (int i = 0; i < 200 && (live_pins() || gs_info().mappings || gs_info().bufs ||
				    gs_info().bufmaps); i++)
		usleep(5000);
}

/* ---- tests ---- */

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

static int send_fd(int sock, int fd)
{
	char c = 'f';
	struct iovec iov = { .iov_base = &c, .iov_len = 1 };
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} u;
	struct msghdr msg = {
		.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
		.msg_controllen = sizeof(u.buf),
	};
	struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);

	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	return sendmsg(sock, &msg, 0) == 1 ? 0 : -1;
}

static int recv_fd(int sock)
{
	char c;
	struct iovec iov = { .iov_base = &c, .iov_len = 1 };
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} u;
	struct msghdr msg = {
		.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
		.msg_controllen = sizeof(u.buf),
	};
	struct cmsghdr *cm;
	int fd;

	if (recvmsg(sock, &msg, 0) != 1)
		return -1;
	cm = CMSG_FIRSTHDR(&msg);
	if (!cm || cm->cmsg_type != SCM_RIGHTS)
		return -1;
	memcpy(&fd, CMSG_DATA(cm), sizeof(int));
	return fd;
}

/* another process cannot use a handle: forked child, fd over a UNIX socket */
static void t_isolation(void)
{
	int sv[2], st;
	uint64_t hbuf[2];
	pid_t pid;

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) {
		FAIL("socketpair");
		return;
	}
	pid = fork();
	if (pid == 0) {
		/* receiver: a process that never opened the file */
		int f, own, efd = edu_open(), gfd = gs_open();
		struct peerdma_query q;
		struct peerdma_event ev;

		close(sv[0]);
		f = recv_fd(sv[1]);
		if (read(sv[1], hbuf, sizeof(hbuf)) != sizeof(hbuf))
			_exit(3);
		if (f < 0)
			_exit(2);
		EXPECT_ERR(query(f, hbuf[0], &q), EACCES);
		EXPECT_ERR(unpin(f, hbuf[0]), EACCES);
		EXPECT_ERR(-!pin(f, PEERDMA_KIND_HOST, 0, (uintptr_t)&q, 8, NULL), EACCES);
		EXPECT_ERR(read(f, &ev, sizeof(ev)), EACCES);
		struct peerdma_edu_attach a = { .peerdma_fd = f, .handle = hbuf[0] };

		EXPECT_ERR(ioctl(efd, PEERDMA_EDU_IOC_ATTACH, &a), EACCES);
		own = pd_open();
		EXPECT_ERR(query(own, hbuf[0], &q), ENOENT);
		EXPECT_ERR(unpin(own, hbuf[0]), ENOENT);
		a.peerdma_fd = own;
		EXPECT_ERR(ioctl(efd, PEERDMA_EDU_IOC_ATTACH, &a), ENOENT);
		a.peerdma_fd = gfd;	/* not a peerdma fd */
		EXPECT_ERR(ioctl(efd, PEERDMA_EDU_IOC_ATTACH, &a), EINVAL);
		a.peerdma_fd = 999;
		EXPECT_ERR(ioctl(efd, PEERDMA_EDU_IOC_ATTACH, &a), EBADF);
		/* someone else's GPU memory: the driver refuses the pin */
		EXPECT_ERR(-!pin(own, PEERDMA_KIND_GPU, 0, hbuf[1], GPAGE, NULL), EINVAL);
		_exit(fails ? 1 : 0);
	}
	close(sv[1]);
	int fd = pd_open(), gfd = gs_open();
	char *m = map_anon(PAGE);
	uint64_t va = gs_alloc(gfd, GPAGE, NULL);

	hbuf[0] = pin(fd, PEERDMA_KIND_HOST, 0, (uintptr_t)m, PAGE, NULL);
	hbuf[1] = va;
	EXPECT(hbuf[0] != 0);
	EXPECT_OK(send_fd(sv[0], fd));
	EXPECT(write(sv[0], hbuf, sizeof(hbuf)) == sizeof(hbuf));
	waitpid(pid, &st, 0);
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		FAIL("receiver failed (status %#x)", st);

	/* forked child: inherited fd, different process */
	pid = fork();
	if (pid == 0) {
		struct peerdma_query q;

		EXPECT_ERR(query(fd, hbuf[0], &q), EACCES);
		EXPECT_ERR(unpin(fd, hbuf[0]), EACCES);
		_exit(fails ? 1 : 0);
	}
	waitpid(pid, &st, 0);
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		FAIL("forked child failed (status %#x)", st);
	EXPECT_EQ(state_of(fd, hbuf[0]), PEERDMA_STATE_LIVE);
	EXPECT_OK(unpin(fd, hbuf[0]));

	/* no CAP_SYS_RAWIO: no physical addresses */
	pid = fork();
	if (pid == 0) {
		struct __user_cap_header_struct hd = { .version = _LINUX_CAPABILITY_VERSION_3 };
		struct __user_cap_data_struct d[2];
		struct peerdma_get_pages g;
		uint64_t a[1];
		int f2 = pd_open();
		uint64_t h = pin(f2, PEERDMA_KIND_HOST, 0, (uintptr_t)m, PAGE, NULL);

		memset(d, 0, sizeof(d));
		if (syscall(SYS_capget, &hd, d) == 0) {
			d[0].effective &= ~(1U << CAP_SYS_RAWIO);
			syscall(SYS_capset, &hd, d);
		}
		EXPECT_ERR(get_pages(f2, h, a, 1, &g), EPERM);
		EXPECT_OK(unpin(f2, h));
		_exit(fails ? 1 : 0);
	}
	waitpid(pid, &st, 0);
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		FAIL("no-RAWIO child failed (status %#x)", st);
	close(fd);
	close(gfd);
	close(sv[0]);
}

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
	EXPECT_EQ(gs_info().mappings, 1);

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

static long read_param(const char *mod, const char *p)
{
	char path[256], buf[32];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/sys/module/%s/parameters/%s", mod, p);
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	return strtol(buf, NULL, 0);
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

/* a process holding every kind of pin, killed with SIGKILL */
static void hold_pins(int ready_fd, int with_edu)
{
	int fd = pd_open(), gfd = gs_open(), efd = -1, bfd;
	uint64_t va = gs_alloc(gfd, 4 * GPAGE, NULL);
	char *m = map_anon(4 * PAGE);
	uint64_t h[6];

	h[0] = pin(fd, PEERDMA_KIND_HOST, 0, (uintptr_t)m, 4 * PAGE, NULL);
	h[1] = pin(fd, PEERDMA_KIND_GPU, 0, va, GPAGE, NULL);
	h[2] = pin(fd, PEERDMA_KIND_GPU, PEERDMA_PIN_GPU_CALLBACK, va + GPAGE, GPAGE, NULL);
	bfd = gs_export(gfd, va + 2 * GPAGE, 2 * GPAGE);
	h[3] = pin_buf(fd, bfd, 0, 2 * GPAGE, NULL);
	h[4] = pin(fd, PEERDMA_KIND_GPU, PEERDMA_PIN_GPU_CALLBACK, va, 4 * GPAGE, NULL);
	if (with_edu) {
		struct peerdma_edu_attach a = { .peerdma_fd = fd, .handle = h[2] };

		efd = edu_open();
		if (ioctl(efd, PEERDMA_EDU_IOC_ATTACH, &a))
			h[0] = 0;
	}
	char c = (h[0] && h[1] && h[2] && h[3] && h[4]) ? 'r' : 'x';

	if (write(ready_fd, &c, 1) != 1)
		_exit(1);
	for (;;)
		pause();
}

static void t_kill9(void)
{
	for (int round = 0; round < 2; round++) {
		int p[2], st;
		char c = 0;
		pid_t pid;

		if (pipe(p))
			return;
		pid = fork();
		if (pid == 0) {
			close(p[0]);
			hold_pins(p[1], round);
		}
		close(p[1]);
		if (read(p[0], &c, 1) != 1 || c != 'r')
			FAIL("holder not ready (%c)", c);
		EXPECT_EQ(live_pins(), 5);
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
		EXPECT(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
		close(p[0]);
		wait_clean();
		if (check_clean("after kill -9"))
			fails++;
	}
}

static void t_close_live(void)
{
	int fd = pd_open(), gfd = gs_open(), bfd;
	uint64_t va = gs_alloc(gfd, 2 * GPAGE, NULL);
	char *m = map_anon(PAGE);

	EXPECT(pin(fd, PEERDMA_KIND_HOST, 0, (uintptr_t)m, PAGE, NULL));
	EXPECT(pin(fd, PEERDMA_KIND_GPU, 0, va, GPAGE, NULL));
	EXPECT(pin(fd, PEERDMA_KIND_GPU, PEERDMA_PIN_GPU_CALLBACK, va, GPAGE, NULL));
	bfd = gs_export(gfd, va + GPAGE, GPAGE);
	EXPECT(pin_buf(fd, bfd, 0, GPAGE, NULL));
	close(bfd);
	EXPECT_EQ(live_pins(), 4);
	close(fd);
	EXPECT_EQ(live_pins(), 0);
	EXPECT_EQ(gs_info().tables, 0);
	close(gfd);
	wait_clean();
	if (check_clean("after close"))
		fails++;
	/* GPU memory freed by process exit first, then the peerdma file closed */
	pid_t pid = fork();
	int st;

	if (pid == 0) {
		int f = pd_open(), g = gs_open();
		uint64_t v = gs_alloc(g, GPAGE, NULL);

		if (!pin(f, PEERDMA_KIND_GPU, PEERDMA_PIN_GPU_CALLBACK, v, GPAGE, NULL))
			_exit(2);
		close(g);	/* fires the callback */
		struct peerdma_event ev;

		_exit(read_event(f, &ev, 1000) == 1 ? 0 : 3);
	}
	waitpid(pid, &st, 0);
	EXPECT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	if (check_clean("after exit"))
		fails++;
}

struct test {
	const char *name;
	void (*fn)(void);
};

static const struct test tests[] = {
	{ "version", t_version },
	{ "host_pin", t_host_pin },
	{ "bad_inputs", t_bad_inputs },
	{ "gpusim_api", t_gpusim_api },
	{ "gpu_persistent", t_gpu_persistent },
	{ "gpu_persistent_free", t_gpu_persistent_free },
	{ "gpu_callback_free", t_gpu_callback_free },
	{ "gpu_enomem_version", t_gpu_enomem_version },
	{ "isolation", t_isolation },
	{ "dmabuf", t_dmabuf },
	{ "host_invalidate", t_host_invalidate },
	{ "dma_edu", t_dma },
	{ "client_quiesce", t_client_quiesce },
	{ "dma_vs_free", t_dma_vs_free },
	{ "kill9", t_kill9 },
	{ "close_live", t_close_live },
};

static int run_one(const char *name, void (*fn)(void), int timeout)
{
	int st;
	pid_t pid;

	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		alarm(timeout);
		fails = 0;
		fn();
		fflush(stdout);
		_exit(fails ? 1 : 0);
	}
	waitpid(pid, &st, 0);
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
		printf("ok - %s\n", name);
		return 0;
	}
	if (WIFEXITED(st) && WEXITSTATUS(st) == SKIP) {
		printf("skip - %s\n", name);
		return 0;
	}
	if (WIFSIGNALED(st))
		printf("  %s: killed by signal %d\n", name, WTERMSIG(st));
	printf("not ok - %s\n", name);
	return 1;
}

/* ---- race stress ---- */

static struct {
	pthread_barrier_t go, done;
	int pfd, gfd, efd, cfd;
	volatile int variant, stop;
	uint64_t va, h;
	void *hostmem;
	int r_free, r_unpin;
} R;

static void *race_free(void *arg)
{
	for (;;) {
		pthread_barrier_wait(&R.go);
		if (R.stop)
			return NULL;
		if (R.variant == 3 || R.variant == 6)
			R.r_free = munmap(R.hostmem, 2 * PAGE);
		else
			R.r_free = gs_free(R.gfd, R.va);
		pthread_barrier_wait(&R.done);
	}
}

static void *race_unpin(void *arg)
{
	for (;;) {
		pthread_barrier_wait(&R.go);
		if (R.stop)
			return NULL;
		if (R.variant == 5) {
			/* pin racing the free: creation vs callback */
			R.h = pin(R.pfd, PEERDMA_KIND_GPU, PEERDMA_PIN_GPU_CALLBACK, R.va, GPAGE,
				  NULL);
			R.r_unpin = R.h ? 0 : errno;
		} else if (R.variant == 6) {
			/* pin racing munmap: creation vs MMU invalidation */
			R.h = pin(R.pfd, PEERDMA_KIND_HOST, 0, (uintptr_t)R.hostmem, 2 * PAGE,
				  NULL);
			R.r_unpin = R.h ? 0 : errno;
		} else if (R.variant == 7) {
			/* close of the file (with its pins) racing the free */
			R.r_unpin = close(R.cfd);
		} else {
			R.r_unpin = unpin(R.pfd, R.h);
		}
		pthread_barrier_wait(&R.done);
	}
}

static void race_exit_child(void)
{
	int f = pd_open(), g = gs_open();
	uint64_t v = gs_alloc(g, GPAGE, NULL);
	pthread_t t;

	R.gfd = g;
	R.va = v;
	R.variant = 0;
	pin(f, PEERDMA_KIND_GPU, PEERDMA_PIN_GPU_CALLBACK, v, GPAGE, NULL);
	pin(f, PEERDMA_KIND_GPU, 0, v, GPAGE, NULL);
	pthread_barrier_init(&R.go, NULL, 2);
	pthread_barrier_init(&R.done, NULL, 2);
	pthread_create(&t, NULL, race_free, NULL);
	pthread_barrier_wait(&R.go);
	_exit(0);	/* exit races with the free on the other thread */
}

static int do_race(int seconds)
{
	double end = now() + seconds;
	long rounds = 0, revoked = 0, exits = 0, pin_races = 0;
	struct peerdma_event ev[64];
	pthread_t t1, t2;

	fails = 0;
	R.pfd = pd_open();
	R.gfd = gs_open();
	R.efd = edu_open();
	fcntl(R.pfd, F_SETFL, O_NONBLOCK);
	pthread_barrier_init(&R.go, NULL, 3);
	pthread_barrier_init(&R.done, NULL, 3);
	pthread_create(&t1, NULL, race_free, NULL);
	pthread_create(&t2, NULL, race_unpin, NULL);
	while (now() < end && !fails) {
		int v = rounds % 8, bfd = -1;

		if (rounds % 64 == 63) {
			pid_t pid = fork();
			int st;

			if (pid == 0)
				race_exit_child();
			waitpid(pid, &st, 0);
			exits++;
		}
		R.variant = v;
		R.h = 0;
		if (v == 5 || v == 6) {
			if (v == 5)
				R.va = gs_alloc(R.gfd, GPAGE, NULL);
			else
				R.hostmem = map_anon(2 * PAGE);
			pthread_barrier_wait(&R.go);
			pthread_barrier_wait(&R.done);
			/* the pin either lost (alloc gone / unmapped) or won and is unpinned */
			if (R.r_unpin && R.r_unpin != (v == 5 ? EINVAL : EFAULT))
				FAIL("round %ld variant %d: pin: %s", rounds, v,
				     strerror(R.r_unpin));
			if (R.h && unpin(R.pfd, R.h))
				FAIL("round %ld variant %d: unpin: %s", rounds, v, strerror(errno));
			if (R.r_free)
				FAIL("round %ld variant %d: free/munmap failed", rounds, v);
			pin_races += R.h != 0;
			goto drain;
		}
		if (v == 7) {
			R.cfd = pd_open();
			R.va = gs_alloc(R.gfd, 2 * GPAGE, NULL);
			if (!pin(R.cfd, PEERDMA_KIND_GPU, PEERDMA_PIN_GPU_CALLBACK, R.va, 2 * GPAGE,
				 NULL) ||
			    !pin(R.cfd, PEERDMA_KIND_GPU, 0, R.va + GPAGE, GPAGE, NULL))
				FAIL("round %ld variant 7: pin: %s", rounds, strerror(errno));
			pthread_barrier_wait(&R.go);
			pthread_barrier_wait(&R.done);
			if (R.r_free || R.r_unpin)
				FAIL("round %ld variant 7: free %d close %d", rounds, R.r_free,
				     R.r_unpin);
			goto drain;
		}
		if (v == 3) {
			R.hostmem = map_anon(2 * PAGE);
			R.h = pin(R.pfd, PEERDMA_KIND_HOST, 0, (uintptr_t)R.hostmem, 2 * PAGE, NULL);
		} else {
			R.va = gs_alloc(R.gfd, GPAGE, NULL);
			if (v == 0 || v == 4)
				R.h = pin(R.pfd, PEERDMA_KIND_GPU, PEERDMA_PIN_GPU_CALLBACK, R.va,
					  GPAGE, NULL);
			else if (v == 1)
				R.h = pin(R.pfd, PEERDMA_KIND_GPU, 0, R.va, GPAGE, NULL);
			else {
				bfd = gs_export(R.gfd, R.va, GPAGE);
				R.h = pin_buf(R.pfd, bfd, 0, GPAGE, NULL);
			}
		}
		if (!R.h) {
			FAIL("round %ld variant %d: pin: %s", rounds, v, strerror(errno));
			break;
		}
		if (v == 4) {
			struct peerdma_edu_attach a = { .peerdma_fd = R.pfd, .handle = R.h };

			if (ioctl(R.efd, PEERDMA_EDU_IOC_ATTACH, &a))
				FAIL("round %ld: attach: %s", rounds, strerror(errno));
		}
		pthread_barrier_wait(&R.go);
		pthread_barrier_wait(&R.done);
		if (v == 4) {
			struct peerdma_edu_status st;

			if (ioctl(R.efd, PEERDMA_EDU_IOC_STATUS, &st) || st.quiesced != 1 ||
			    st.mapped)
				FAIL("round %ld: client not quiesced (%u, mapped %u)", rounds,
				     st.quiesced, st.mapped);
			ioctl(R.efd, PEERDMA_EDU_IOC_DETACH);
		}
		if (R.r_free || R.r_unpin)
			FAIL("round %ld variant %d: free %d unpin %d (%s)", rounds, v, R.r_free,
			     R.r_unpin, strerror(errno));
		if (bfd >= 0)
			close(bfd);
drain:
		for (;;) {
			ssize_t n = read(R.pfd, ev, sizeof(ev));

			if (n <= 0)
				break;
			revoked += n / sizeof(ev[0]);
		}
		rounds++;
	}
	R.stop = 1;
	pthread_barrier_wait(&R.go);
	pthread_join(t1, NULL);
	pthread_join(t2, NULL);
	close(R.pfd);
	close(R.gfd);
	close(R.efd);
	wait_clean();
	printf("  race: %ld rounds, %ld revoked before unpin, %ld process exits, "
	       "%ld pins won against free/munmap\n", rounds, revoked, exits, pin_races);
	if (rounds < 50L * seconds)
		FAIL("only %ld rounds", rounds);
	if (check_clean("after race"))
		fails++;
	if (gs_info().used)
		FAIL("gpusim memory still used: %llu", (unsigned long long)gs_info().used);
	return fails;
}

/* ---- fuzzer ---- */

static uint64_t rng = 88172645463325252ULL;

static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static uint64_t fuzz_value(uint64_t *handles, int nh, void *mem, uint64_t va)
{
	static const uint64_t special[] = {
		0, 1, 2, 3, 4, 0x7f, 0x80, 0xff, 0x1000, 0xfff, 0x10000, 0xffff,
		0x7fffffff, 0x80000000, 0xffffffff, 0x100000000ULL, 0x7ffffffff000ULL,
		0x800000000000ULL, 0xffff800000000000ULL, 0xffff888000000000ULL,
		0xffffffffffffffffULL, 0xfffffffffffff000ULL, 1ULL << 34, (1ULL << 34) + 1,
		-2ULL, 0x8000000000000000ULL,
	};

	switch (rnd() % 8) {
	case 0:
	case 1:
		return special[rnd() % (sizeof(special) / sizeof(special[0]))];
	case 2:
		return nh ? handles[rnd() % nh] : rnd();
	case 3:
		return (uintptr_t)mem + (rnd() % (8 * PAGE));
	case 4:
		return va + (rnd() % (4 * GPAGE));
	case 5:
		return rnd() % 0x20000;
	default:
		return rnd();
	}
}

static int do_fuzz(int seconds)
{
	static const unsigned int cmds[] = {
		PEERDMA_IOC_VERSION, PEERDMA_IOC_PIN, PEERDMA_IOC_UNPIN,
		PEERDMA_IOC_QUERY, PEERDMA_IOC_GET_PAGES,
	};
	double end = now() + seconds;
	int fd = pd_open(), gfd = gs_open(), efd = edu_open(), bfd = -1;
	char *mem = map_anon(8 * PAGE);
	uint64_t handles[64], va = gs_alloc(gfd, 4 * GPAGE, NULL), buf[16];
	int nh = 0;
	long calls = 0, okc = 0;

	fails = 0;
	fcntl(fd, F_SETFL, O_NONBLOCK);
	bfd = gs_export(gfd, va, 4 * GPAGE);
	while (now() < end) {
		unsigned int op = rnd() % 100, cmd;
		void *arg = buf;
		long r;

		for (int i = 0; i < 16; i++)
			buf[i] = fuzz_value(handles, nh, mem, va);
		if (op < 60) {
			cmd = cmds[rnd() % 5];
			/* mostly well-formed headers so the checks past them run */
			if (rnd() % 4) {
				uint32_t *w = (uint32_t *)buf;

				w[0] = _IOC_SIZE(cmd);
				w[1] = (rnd() % 3) ? 0 : (uint32_t)rnd();
				if (cmd == PEERDMA_IOC_PIN && rnd() % 2) {
					w[2] = 1 + rnd() % 3;	/* kind */
					w[3] = (w[2] == PEERDMA_KIND_DMABUF) ? bfd : -1;
				}
			}
			if (rnd() % 16 == 0)
				arg = (void *)(uintptr_t)fuzz_value(handles, nh, mem, va);
		} else if (op < 70) {
			cmd = _IOC(rnd() % 4, rnd() % 2 ? PEERDMA_IOC_MAGIC : rnd() % 256,
				   rnd() % 16, rnd() % 128);
		} else if (op < 80) {
			char rb[200];

			r = read(fd, rb, rnd() % sizeof(rb));
			calls++;
			continue;
		} else if (op < 83) {
			/* real pins to have handles worth fuzzing */
			uint64_t h = rnd() % 2 ?
				pin(fd, PEERDMA_KIND_HOST, 0, (uintptr_t)mem, 2 * PAGE, NULL) :
				pin(fd, PEERDMA_KIND_GPU, (rnd() % 2) * PEERDMA_PIN_GPU_CALLBACK,
				    va, GPAGE, NULL);
			if (h)
				handles[nh++ % 64] = h;
			if (nh > 64)
				nh = 64;
			calls++;
			continue;
		} else if (op < 84) {
			/* free and reallocate the GPU memory under the pins */
			close(bfd);
			gs_free(gfd, va);
			va = gs_alloc(gfd, 4 * GPAGE, NULL);
			bfd = gs_export(gfd, va, 4 * GPAGE);
			continue;
		} else if (op < 85) {
			close(fd);
			fd = pd_open();
			fcntl(fd, F_SETFL, O_NONBLOCK);
			nh = 0;
			continue;
		} else if (op < 87) {
			struct peerdma_edu_attach a = {
				.peerdma_fd = fd, .handle = fuzz_value(handles, nh, mem, va),
			};

			r = ioctl(efd, rnd() % 2 ? PEERDMA_EDU_IOC_ATTACH : PEERDMA_EDU_IOC_DETACH,
				  &a);
			calls++;
			continue;
		} else {
			cmd = cmds[rnd() % 5];
			memset(buf, 0, sizeof(buf));
			((uint32_t *)buf)[0] = _IOC_SIZE(cmd);
			((uint64_t *)buf)[1] = fuzz_value(handles, nh, mem, va);
		}
		r = ioctl(fd, cmd, arg);
		calls++;
		if (r == 0)
			okc++;
		else if (errno == 0 || errno > 200)
			FAIL("cmd %#x: errno %d", cmd, errno);
	}
	close(fd);
	close(bfd);
	close(efd);
	close(gfd);
	wait_clean();
	printf("  fuzz: %ld calls, %ld succeeded\n", calls, okc);
	if (check_clean("after fuzz"))
		fails++;
	return fails;
}

/* ---- rmmod with live pins ---- */

static int do_rmmod(void)
{
	int p[2], st;
	char c = 0;
	pid_t pid;

	fails = 0;
	if (syscall(SYS_delete_module, "peerdma_edu", O_NONBLOCK))
		FAIL("rmmod peerdma_edu: %s", strerror(errno));
	if (pipe(p))
		return 1;
	pid = fork();
	if (pid == 0) {
		close(p[0]);
		hold_pins(p[1], 0);
	}
	close(p[1]);
	if (read(p[0], &c, 1) != 1 || c != 'r')
		FAIL("holder not ready");
	EXPECT_ERR(syscall(SYS_delete_module, "peerdma", O_NONBLOCK), EWOULDBLOCK);
	EXPECT_ERR(syscall(SYS_delete_module, "gpusim", O_NONBLOCK), EWOULDBLOCK);
	EXPECT_EQ(live_pins(), 5);
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	wait_clean();
	if (check_clean("before rmmod"))
		fails++;
	EXPECT_OK(syscall(SYS_delete_module, "peerdma", O_NONBLOCK));

	/* the device node's group comes from a module parameter */
	int kfd = open("/lib/modules/peerdma.ko", O_RDONLY | O_CLOEXEC);
	struct stat sb;

	EXPECT_OK(syscall(SYS_finit_module, kfd, "dev_gid=4321", 0));
	close(kfd);
	EXPECT_OK(stat(PEERDMA_DEVICE, &sb));
	EXPECT_EQ(sb.st_mode & 07777, 0660);
	EXPECT_EQ(sb.st_gid, 4321);
	EXPECT_OK(syscall(SYS_delete_module, "peerdma", O_NONBLOCK));
	EXPECT_ERR(stat(PEERDMA_DEVICE, &sb), ENOENT);
	EXPECT_OK(syscall(SYS_delete_module, "gpusim", O_NONBLOCK));
	return fails;
}

int main(int argc, char **argv)
{
	int bad = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc >= 2 && !strcmp(argv[1], "suite")) {
		const char *only = argc >= 4 ? argv[3] : NULL;

		cfg_seed = argc >= 3 ? atoi(argv[2]) : 1;
		for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++)
			if (!only || !strcmp(only, tests[i].name))
				bad |= run_one(tests[i].name, tests[i].fn, 60);
		return bad;
	}
	if (argc >= 3 && !strcmp(argv[1], "race")) {
		bad = do_race(atoi(argv[2]));
		printf("%s - race\n", bad ? "not ok" : "ok");
		return bad;
	}
	if (argc >= 3 && !strcmp(argv[1], "fuzz")) {
		if (argc >= 4 && strtoull(argv[3], NULL, 0))
			rng = strtoull(argv[3], NULL, 0);
		else
			rng ^= (uint64_t)time(NULL) * 2654435761ULL ^ (uint64_t)now() << 20;
		printf("  fuzz seed %llu\n", (unsigned long long)rng);
		bad = do_fuzz(atoi(argv[2]));
		printf("%s - fuzz\n", bad ? "not ok" : "ok");
		return bad;
	}
	if (argc >= 2 && !strcmp(argv[1], "rmmod")) {
		bad = do_rmmod();
		printf("%s - rmmod_live_pins\n", bad ? "not ok" : "ok");
		return bad;
	}
	fprintf(stderr, "usage: pdtest suite [SEED [TEST]] | race S | fuzz S [SEED] | rmmod\n");
	return 2;
}
