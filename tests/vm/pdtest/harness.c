// SPDX-License-Identifier: GPL-2.0
/*
 * The in-guest harness: wrappers of the three devices and of the checks every
 * test ends with (live pins back to 0, nothing left in the GPU stand-in).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <linux/capability.h>

#include "harness.h"

/* the ABI as user space sees it (kernel/ioctl.c asserts the same) */
_Static_assert(sizeof(struct peerdma_version) == PEERDMA_VERSION_SIZE_VER0, "abi");
_Static_assert(sizeof(struct peerdma_pin) == PEERDMA_PIN_SIZE_VER0, "abi");
_Static_assert(sizeof(struct peerdma_unpin) == PEERDMA_UNPIN_SIZE_VER0, "abi");
_Static_assert(sizeof(struct peerdma_query) == PEERDMA_QUERY_SIZE_VER1, "abi");
_Static_assert(sizeof(struct peerdma_get_pages) == PEERDMA_GET_PAGES_SIZE_VER0, "abi");
_Static_assert(sizeof(struct peerdma_event) == 24, "abi");

int fails;
unsigned int cfg_seed = 1;

double now(void)
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

int pd_open(void)
{
	return open_dev(PEERDMA_DEVICE);
}

int gs_open(void)
{
	return open_dev(GPUSIM_DEVICE);
}

int edu_open(void)
{
	return open_dev(PEERDMA_EDU_DEVICE);
}

uint64_t gs_alloc(int gfd, uint64_t size, uint64_t *bar_off)
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

int gs_free(int gfd, uint64_t va)
{
	return ioctl(gfd, GPUSIM_IOC_FREE, &va);
}

struct gpusim_info gs_info(void)
{
	struct gpusim_info i = { 0 };
	int fd = gs_open();

	if (ioctl(fd, GPUSIM_IOC_INFO, &i))
		printf("  gpusim info: %s\n", strerror(errno));
	close(fd);
	return i;
}

int gs_export(int gfd, uint64_t va, uint64_t len)
{
	struct gpusim_export e = { .va = va, .len = len };

	if (ioctl(gfd, GPUSIM_IOC_EXPORT, &e))
		return -1;
	return e.fd;
}

/* the number in a one-number file (debugfs, sysfs); -1 if unreadable */
static long read_number(const char *path)
{
	char buf[64] = "";
	int fd = open(path, O_RDONLY);

	if (fd < 0)
		return -1;
	if (read(fd, buf, sizeof(buf) - 1) < 0)
		buf[0] = 0;
	close(fd);
	return strtol(buf, NULL, 10);
}

long live_pins(void)
{
	return read_number("/sys/kernel/debug/peerdma/live_pins");
}

long orphans(void)
{
	return read_number("/sys/kernel/debug/peerdma/orphans");
}

long module_refs(const char *mod)
{
	char path[256];

	snprintf(path, sizeof(path), "/sys/module/%s/refcnt", mod);
	return read_number(path);
}

/* this thread loses @cap from its effective set (the permitted set keeps it) */
int drop_cap(int cap)
{
	struct __user_cap_header_struct hd = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct d[2];

	memset(d, 0, sizeof(d));
	if (syscall(SYS_capget, &hd, d))
		return -1;
	d[cap / 32].effective &= ~(1U << (cap % 32));
	return syscall(SYS_capset, &hd, d) ? -1 : 0;
}

/* @v written to the sysfs or debugfs file @path in one write; 0 or -1 */
int write_file(const char *path, const char *v)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC), r;

	if (fd < 0)
		return -1;
	r = write(fd, v, strlen(v)) == (ssize_t)strlen(v) ? 0 : -1;
	close(fd);
	return r;
}

int write_param(const char *mod, const char *p, const char *v)
{
	char path[256];

	snprintf(path, sizeof(path), "/sys/module/%s/parameters/%s", mod, p);
	return write_file(path, v);
}

struct peerdma_pin pin_req(uint32_t kind, uint32_t flags, uint64_t addr, uint64_t len)
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
uint64_t pin(int fd, uint32_t kind, uint32_t flags, uint64_t addr, uint64_t len,
		    struct peerdma_pin *out)
{
	struct peerdma_pin p = pin_req(kind, flags, addr, len);

	if (ioctl(fd, PEERDMA_IOC_PIN, &p))
		return 0;
	if (out)
		*out = p;
	return p.handle;
}

uint64_t pin_buf(int fd, int buf_fd, uint64_t off, uint64_t len, struct peerdma_pin *out)
{
	struct peerdma_pin p = pin_req(PEERDMA_KIND_DMABUF, 0, off, len);

	p.fd = buf_fd;
	if (ioctl(fd, PEERDMA_IOC_PIN, &p))
		return 0;
	if (out)
		*out = p;
	return p.handle;
}

int unpin(int fd, uint64_t h)
{
	struct peerdma_unpin u = { .size = sizeof(u), .handle = h };

	return ioctl(fd, PEERDMA_IOC_UNPIN, &u);
}

int query(int fd, uint64_t h, struct peerdma_query *q)
{
	memset(q, 0, sizeof(*q));
	q->size = sizeof(*q);
	q->handle = h;
	return ioctl(fd, PEERDMA_IOC_QUERY, q);
}

int get_pages(int fd, uint64_t h, uint64_t *addrs, uint32_t count, struct peerdma_get_pages *g)
{
	memset(g, 0, sizeof(*g));
	g->size = sizeof(*g);
	g->handle = h;
	g->addrs = (uintptr_t)addrs;
	g->count = count;
	return ioctl(fd, PEERDMA_IOC_GET_PAGES, g);
}

int state_of(int fd, uint64_t h)
{
	struct peerdma_query q;

	if (query(fd, h, &q))
		return -errno;
	return q.state;
}

/* one event, waiting up to ms; 0 if none */
int read_event(int fd, struct peerdma_event *ev, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	if (poll(&p, 1, ms) != 1)
		return 0;
	return read(fd, ev, sizeof(*ev)) == sizeof(*ev);
}

int xfer(int efd, int pfd, uint64_t sh, uint64_t soff, uint64_t dh, uint64_t doff,
		uint32_t len)
{
	struct peerdma_edu_xfer x = {
		.peerdma_fd = pfd, .len = len,
		.src_handle = sh, .src_off = soff, .dst_handle = dh, .dst_off = doff,
	};

	return ioctl(efd, PEERDMA_EDU_IOC_XFER, &x);
}

void *map_anon(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED) {
		printf("  mmap: %s\n", strerror(errno));
		exit(1);
	}
	memset(p, 0x5a, len);
	return p;
}

void *map_gpu(int gfd, uint64_t bar_off, size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, gfd, bar_off);

	if (p == MAP_FAILED) {
		printf("  mmap gpusim: %s\n", strerror(errno));
		exit(1);
	}
	return p;
}

uint8_t pattern(unsigned int seed, size_t i)
{
	return (uint8_t)(seed * 7 + i * 31 + (i >> 8));
}

int cmdline_has(const char *word)
{
	char buf[1024] = "";
	int fd = open("/proc/cmdline", O_RDONLY);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;

	if (fd >= 0)
		close(fd);
	buf[n > 0 ? n : 0] = 0;
	return strstr(buf, word) != NULL;
}

int check_clean(const char *when)
{
	struct gpusim_info i = gs_info();
	long live = live_pins();
	int bad = 0;

	long orph = orphans();

	if (live != 0 || orph != 0 || i.tables || i.mappings || i.bufs || i.bufmaps || i.pinned) {
		printf("  %s: live_pins %ld orphans %ld, gpusim tables %u mappings %u bufs %u/%u pinned %llu\n",
		       when, live, orph, i.tables, i.mappings, i.bufs, i.bufmaps,
		       (unsigned long long)i.pinned);
		bad = 1;
	}
	return bad;
}

void wait_clean(void)
{
	/* deferred releases (workqueue) finish within a few ms */
	for (int i = 0; i < 200 && (live_pins() || gs_info().mappings || gs_info().bufs ||
				    gs_info().bufmaps); i++)
		usleep(5000);
}

long read_param(const char *mod, const char *p)
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
