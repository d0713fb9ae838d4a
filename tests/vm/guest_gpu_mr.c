// SPDX-License-Identifier: MIT
/*
 * In-guest test: GPU memory registered through libpeerdma's public MR API is
 * pinned by peerdma.ko. Dynamically linked against libpeerdma.so, with the
 * CUDA driver API from libcuda-gpusim.so (tests/vm/libcuda_gpusim.c over
 * /dev/gpusim) loaded exactly as libcuda.so.1 is (PEERDMA_LIBCUDA), so the
 * library's CUDA backend is the code that runs on a real GPU. The test opens
 * the same stand-in itself (dlopen of the same path: the same instance) for
 * cuMemAlloc/cuMemFree and the copies.
 *
 * For each route, dma-buf (PEERDMA_KIND_DMABUF) and nv-p2p (KIND_GPU, forced
 * with PEERDMA_CUDA_DMABUF=0), in a kernel_device domain with the cache on:
 *  - the registration is pinned by the module: PEERDMA_IOC_QUERY of the handle
 *    pdma_mr_dma() names says LIVE and the kind;
 *  - pdma_mr_dma fields; pdma_mr_dma_pages (root) gives the BAR's physical
 *    pages of the allocation, in order; a short room gives -ERANGE + count,
 *    CAP_SYS_RAWIO dropped -EPERM;
 *  - a second registration is a cache hit (same kernel handle);
 *  - cuMemFree -> the module revokes the pin -> PDMA_MR_REVOKED on the EQ
 *    (bound with PDMA_MR_REVOKE_EVENTS), pdma_mr_dma -ENODEV, the handle
 *    REVOKED with the route's reason; the freed address no longer registers
 *    (no stale cache hit); a new allocation at the reused address has a new
 *    buffer ID and registers with a fresh LIVE pin; freeing memory whose MR was
 *    closed (cached) posts no event.
 * Then: host memory in the kdev domain (kind HOST); a domain without a kernel
 * device: dma-buf export only (kernel_fd -1, pages -ENOENT), nv-p2p refused
 * (-EOPNOTSUPP); a range past the allocation (-EFAULT); and at the end gpusim
 * holds no page table, mapping or dma-buf of ours.
 *
 * Prints "ok - gpu_mr: ..." / "not ok - gpu_mr: ..." lines (tests/vm/run
 * counts them) and "gpu_mr: N passed, N failed"; exit status 1 on a failure.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/capability.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "gpusim_uapi.h"
#include "peerdma/mr.h"
#include "uapi/peerdma.h"

#define MiB (1024ull * 1024)
#define SZ (1 * MiB)

static int passed, failed;

static void check(int cond, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(int cond, const char *fmt, ...)
{
	va_list ap;

	printf("%s - gpu_mr: ", cond ? "ok" : "not ok");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	if (cond)
		passed++;
	else
		failed++;
}

/* The stand-in's entry points this test calls itself. */
typedef unsigned long long cuptr;
static struct {
	int (*Init)(unsigned int);
	int (*MemAlloc)(cuptr *, size_t);
	int (*MemFree)(cuptr);
	int (*MemsetD8)(cuptr, unsigned char, size_t);
	int (*MemcpyHtoD)(cuptr, const void *, size_t);
	int (*MemcpyDtoH)(void *, cuptr, size_t);
	int (*PointerGetAttribute)(void *, int, cuptr);
} cu;
#define CU_POINTER_ATTRIBUTE_BUFFER_ID 7

static int cu_load(const char *path)
{
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);

	if (!h) {
		printf("  dlopen %s: %s\n", path, dlerror());
		return -1;
	}
	cu.Init = (int (*)(unsigned int))dlsym(h, "cuInit");
	cu.MemAlloc = (int (*)(cuptr *, size_t))dlsym(h, "cuMemAlloc_v2");
	cu.MemFree = (int (*)(cuptr))dlsym(h, "cuMemFree_v2");
	cu.MemsetD8 = (int (*)(cuptr, unsigned char, size_t))dlsym(h, "cuMemsetD8_v2");
	cu.MemcpyHtoD = (int (*)(cuptr, const void *, size_t))dlsym(h, "cuMemcpyHtoD_v2");
	cu.MemcpyDtoH = (int (*)(void *, cuptr, size_t))dlsym(h, "cuMemcpyDtoH_v2");
	cu.PointerGetAttribute = (int (*)(void *, int, cuptr))dlsym(h, "cuPointerGetAttribute");
	if (!cu.Init || !cu.MemAlloc || !cu.MemFree || !cu.MemsetD8 || !cu.MemcpyHtoD ||
	    !cu.MemcpyDtoH || !cu.PointerGetAttribute)
		return -1;
	return cu.Init(0) ? -1 : 0;
}

static unsigned long long buffer_id(cuptr p)
{
	unsigned long long id = 0;

	return cu.PointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, p) ? 0 : id;
}

/* CAP_SYS_RAWIO in the effective set on or off (it stays permitted, so it
 * can come back): the physical addresses are for the privileged. */
static int rawio(int on)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct c[2];

	if (syscall(SYS_capget, &h, c))
		return -errno;
	if (on)
		c[CAP_SYS_RAWIO / 32].effective |= 1u << (CAP_SYS_RAWIO % 32);
	else
		c[CAP_SYS_RAWIO / 32].effective &= ~(1u << (CAP_SYS_RAWIO % 32));
	return syscall(SYS_capset, &h, c) ? -errno : 0;
}

static int query(int fd, uint64_t handle, struct peerdma_query *q)
{
	*q = (struct peerdma_query){ .size = sizeof(*q), .handle = handle };
	return ioctl(fd, PEERDMA_IOC_QUERY, q) ? -errno : 0;
}

static int reg(struct pdma_domain *d, cuptr va, size_t len, void *ctx, struct pdma_mr **m)
{
	struct iovec iov = { .iov_base = (void *)(uintptr_t)va, .iov_len = len };
	struct pdma_mr_attr a = {
		.mr_iov = &iov, .iov_count = 1, .access = PDMA_READ | PDMA_WRITE | PDMA_REMOTE_WRITE,
		.iface = PDMA_HMEM_CUDA, .device = 0, .context = ctx,
	};

	*m = NULL;
	return pdma_mr_regattr(d, &a, 0, m);
}

static struct gpusim_info gs_info(void)
{
	struct gpusim_info i = { 0 };
	int fd = open(GPUSIM_DEVICE, O_RDWR | O_CLOEXEC);

	if (fd >= 0) {
		if (ioctl(fd, GPUSIM_IOC_INFO, &i))
			memset(&i, 0, sizeof(i));
		close(fd);
	}
	return i;
}

static void logfn(void *arg, int level, const char *msg)
{
	(void)arg;
	printf("  log %d: %s\n", level, msg);
}

/* Wait for the next EQ event (ms): its kind, -EAGAIN if none came. */
static int eq_next(struct pdma_eq *eq, int ms, struct pdma_eq_entry *e)
{
	int ret = pdma_eq_read(eq, e, ms);

	return ret ? ret : (int)e->event;
}

static void route(int dmabuf)
{
	const char *rn = dmabuf ? "dma-buf" : "nv-p2p";
	uint32_t kind = dmabuf ? PEERDMA_KIND_DMABUF : PEERDMA_KIND_GPU;
	struct pdma_domain_attr da;
	struct pdma_domain *d = NULL;
	struct pdma_eq *eq = NULL;
	struct pdma_mr *m = NULL, *m2 = NULL;
	struct pdma_mr_dma dma, dma2;
	struct pdma_eq_entry e;
	struct peerdma_query q;
	struct gpusim_info gi = gs_info();
	unsigned char *buf = malloc(SZ), *back = malloc(SZ), *save = malloc(SZ);
	uint64_t pages[64];
	uint32_t count;
	unsigned long long id1, id2;
	cuptr va = 0, va2 = 0;
	int ret, ctx_tag = 42;

	if (dmabuf)
		unsetenv("PEERDMA_CUDA_DMABUF");
	else
		setenv("PEERDMA_CUDA_DMABUF", "0", 1);
	pdma_domain_attr_init(&da);
	da.kernel_device = PEERDMA_DEVICE;
	da.use_cache = 1;
	ret = pdma_domain_open(&da, &d);
	check(ret == 0, "%s: kernel_device domain with the cache opens (%d)", rn, ret);
	if (ret)
		goto out;
	pdma_domain_set_log(d, logfn, NULL);
	check(pdma_eq_open(d, 16, &eq) == 0 &&
	      pdma_domain_bind_eq(d, eq, PDMA_MR_REVOKE_EVENTS) == 0,
	      "%s: EQ bound with PDMA_MR_REVOKE_EVENTS", rn);

	ret = cu.MemAlloc(&va, SZ);
	check(ret == 0 && va, "%s: cuMemAlloc 1 MiB at %#llx (%d)", rn, va, ret);
	/* The BAR is the host's ivshmem file, whose bytes tests/vm/run checks
	 * after the guest (what pdtest's DMA left): put them back afterwards. */
	ret = cu.MemcpyDtoH(save, va, SZ);
	for (size_t i = 0; i < SZ; i++)
		buf[i] = (unsigned char)(i * 7 + dmabuf);
	check(ret == 0 && cu.MemsetD8(va, 0x5a, SZ) == 0 &&
	      cu.MemcpyHtoD(va + 4096, buf, SZ - 8192) == 0 && cu.MemcpyDtoH(back, va, SZ) == 0 &&
	      back[0] == 0x5a && back[SZ - 1] == 0x5a && !memcmp(back + 4096, buf, SZ - 8192),
	      "%s: cuMemsetD8/HtoD/DtoH through the BAR", rn);
	check(cu.MemcpyHtoD(va, save, SZ) == 0 && cu.MemcpyDtoH(back, va, SZ) == 0 &&
	      !memcmp(back, save, SZ), "%s: the BAR's bytes restored", rn);
	id1 = buffer_id(va);

	ret = reg(d, va, SZ, &ctx_tag, &m);
	check(ret == 0, "%s: pdma_mr_regattr(HMEM_CUDA) of the allocation (%d)", rn, ret);
	if (ret)
		goto free;
	ret = pdma_mr_dma(m, 0, &dma);
	check(ret == 0 && dma.kernel_fd >= 0 && dma.kind == kind && dma.handle && dma.addr == va &&
	      dma.pinned_addr == va && dma.pinned_len == SZ && dma.page_size &&
	      (uint64_t)dma.page_size * dma.entries == SZ &&
	      (dmabuf ? dma.dmabuf_fd >= 0 && dma.dmabuf_offset == 0 : dma.dmabuf_fd == -1),
	      "%s: pdma_mr_dma: fd %d kind %u handle %llu addr %#llx pinned [%#llx, +%llu) %u x %u B, dma-buf %d+%llu (%d)",
	      rn, dma.kernel_fd, dma.kind, (unsigned long long)dma.handle,
	      (unsigned long long)dma.addr, (unsigned long long)dma.pinned_addr,
	      (unsigned long long)dma.pinned_len, dma.entries, dma.page_size, dma.dmabuf_fd,
	      (unsigned long long)dma.dmabuf_offset, ret);
	if (ret)
		goto close;
	ret = query(dma.kernel_fd, dma.handle, &q);
	check(ret == 0 && q.state == PEERDMA_STATE_LIVE && q.kind == kind && q.pinned_len == SZ,
	      "%s: pinned by peerdma.ko: QUERY state %u kind %u len %llu (%d)", rn, q.state, q.kind,
	      (unsigned long long)q.pinned_len, ret);
	count = 0;
	ret = pdma_mr_dma_pages(m, 0, pages, &count);
	check(ret == -ERANGE && count == dma.entries,
	      "%s: pdma_mr_dma_pages with no room: -ERANGE, count %u (%d)", rn, count, ret);
	count = 64;
	ret = pdma_mr_dma_pages(m, 0, pages, &count);
	{
		uint64_t want = gi.bar_phys + (va - GPUSIM_VA_BASE);
		int in_order = ret == 0 && count == dma.entries;

		for (uint32_t i = 0; in_order && i < count; i++)
			in_order = pages[i] == want + (uint64_t)i * dma.page_size;
		check(in_order, "%s: pdma_mr_dma_pages: %u pages from %#llx, the BAR's at %#llx (%d)",
		      rn, count, ret ? 0ull : (unsigned long long)pages[0],
		      (unsigned long long)want, ret);
	}
	if (rawio(0) == 0) {
		count = 64;
		ret = pdma_mr_dma_pages(m, 0, pages, &count);
		rawio(1);
		check(ret == -EPERM, "%s: pdma_mr_dma_pages without CAP_SYS_RAWIO: -EPERM (%d)", rn,
		      ret);
	} else {
		check(0, "%s: drop CAP_SYS_RAWIO", rn);
	}
	ret = reg(d, va, SZ, NULL, &m2);
	check(ret == 0 && pdma_mr_dma(m2, 0, &dma2) == 0 && dma2.handle == dma.handle,
	      "%s: a second registration is a cache hit (same kernel handle)", rn);
	if (m2)
		pdma_mr_close(m2);
	check(eq_next(eq, 0, &e) == -EAGAIN, "%s: no event while the memory lives", rn);

	/* Free under the open MR: the module revokes, the event reaches the EQ. */
	check(cu.MemFree(va) == 0, "%s: cuMemFree with the MR open", rn);
	ret = eq_next(eq, 5000, &e);
	check(ret == PDMA_MR_REVOKED && e.mr == m && e.context == &ctx_tag,
	      "%s: PDMA_MR_REVOKED on the EQ for the MR (%d)", rn, ret);
	ret = pdma_mr_dma(m, 0, &dma2);
	check(ret == -ENODEV && dma2.kernel_fd == -1, "%s: pdma_mr_dma after the free: -ENODEV (%d)",
	      rn, ret);
	count = 64;
	ret = pdma_mr_dma_pages(m, 0, pages, &count);
	check(ret == -ENODEV, "%s: pdma_mr_dma_pages after the free: -ENODEV (%d)", rn, ret);
	ret = query(dma.kernel_fd, dma.handle, &q);
	check(ret == 0 && q.state == PEERDMA_STATE_REVOKED &&
	      q.revoke_reason == (dmabuf ? PEERDMA_EVENT_DMABUF_MOVE : PEERDMA_EVENT_GPU_FREE),
	      "%s: the module's handle REVOKED, reason %u (%d)", rn, q.revoke_reason, ret);
	/* Not CUDA memory any more: the backend takes it for host memory,
	 * which is not mapped there (the driver refuses: -EINVAL). */
	ret = reg(d, va, SZ, NULL, &m2);
	check(ret == -EINVAL || ret == -EFAULT,
	      "%s: the freed address does not register (no stale cache hit): %d", rn, ret);
	if (!ret)
		pdma_mr_close(m2);
	check(eq_next(eq, 0, &e) == -EAGAIN, "%s: one event per MR", rn);
	check(pdma_mr_close(m) == 0, "%s: the revoked MR closes", rn);
	m = NULL;

	/* The address comes back with a new buffer ID: a fresh pin. */
	ret = cu.MemAlloc(&va2, SZ);
	check(ret == 0, "%s: cuMemAlloc again (%d)", rn, ret);
	id2 = buffer_id(va2);
	check(va2 == va && id2 && id2 != id1, "%s: the address %#llx is reused with a new buffer ID (%llu -> %llu)",
	      rn, va2, id1, id2);
	ret = reg(d, va2, SZ, NULL, &m);
	if (!ret)
		ret = pdma_mr_dma(m, 0, &dma2);
	if (!ret)
		ret = query(dma2.kernel_fd, dma2.handle, &q);
	check(ret == 0 && dma2.handle != dma.handle && q.state == PEERDMA_STATE_LIVE &&
	      q.kind == kind,
	      "%s: re-registration at the reused address pins afresh (handle %llu -> %llu, %d)", rn,
	      (unsigned long long)dma.handle, (unsigned long long)dma2.handle, ret);
	if (m) {
		ret = pdma_mr_close(m);
		m = NULL;
	}
	/* Closed and cached: freeing it revokes the cached pin, no MR event. */
	check(cu.MemFree(va2) == 0, "%s: cuMemFree of the re-registered allocation", rn);
	va2 = 0;
	check(eq_next(eq, 300, &e) == -EAGAIN, "%s: no event for a closed (cached) MR", rn);
	ret = reg(d, va, SZ, NULL, &m);
	check(ret == -EINVAL || ret == -EFAULT, "%s: nor is the freed cached pin served again (%d)",
	      rn, ret);
	if (!ret)
		pdma_mr_close(m);
	m = NULL;
	va = 0;
	goto free;
close:
	pdma_mr_close(m);
	m = NULL;
free:
	if (va)
		cu.MemFree(va);
	if (va2)
		cu.MemFree(va2);
out:
	if (eq)
		check(pdma_eq_close(eq) == 0, "%s: EQ closes", rn);
	if (d)
		check(pdma_domain_close(d) == 0, "%s: domain closes", rn);
	free(buf);
	free(back);
	free(save);
}

/* Host memory in a kdev domain answers pdma_mr_dma too (kind HOST). */
static void host_mr(void)
{
	struct pdma_domain_attr da;
	struct pdma_domain *d;
	struct pdma_mr *m;
	struct pdma_mr_dma dma;
	void *p = NULL;
	int ret;

	pdma_domain_attr_init(&da);
	da.kernel_device = PEERDMA_DEVICE;
	if (pdma_domain_open(&da, &d)) {
		check(0, "host: kdev domain opens");
		return;
	}
	if (posix_memalign(&p, 4096, 65536) == 0) {
		memset(p, 1, 65536);
		ret = pdma_mr_reg(d, p, 65536, PDMA_READ | PDMA_WRITE, 0, 0, 0, &m, NULL);
		check(ret == 0, "host: pdma_mr_reg in the kdev domain (%d)", ret);
		if (!ret) {
			ret = pdma_mr_dma(m, 0, &dma);
			check(ret == 0 && dma.kind == PEERDMA_KIND_HOST && dma.kernel_fd >= 0 &&
			      dma.handle && dma.page_size == 4096 && dma.entries == 16 &&
			      dma.pinned_addr == (uintptr_t)p && dma.dmabuf_fd == -1,
			      "host: pdma_mr_dma kind %u, %u x %u B (%d)", dma.kind, dma.entries,
			      dma.page_size, ret);
			check(pdma_mr_dma(m, 1, &dma) == -EINVAL, "host: iov index past the MR: -EINVAL");
			pdma_mr_close(m);
		}
	}
	free(p);
	pdma_domain_close(d);
}

/* No kernel device: a dma-buf export is the handle; nv-p2p would pin nothing. */
static void no_kdev(void)
{
	struct pdma_domain_attr da;
	struct pdma_domain *d;
	struct pdma_mr *m;
	struct pdma_mr_dma dma;
	uint64_t pages[32];
	uint32_t count = 32;
	cuptr va = 0;
	int ret;

	pdma_domain_attr_init(&da);
	if (pdma_domain_open(&da, &d)) {
		check(0, "no kdev: domain opens");
		return;
	}
	pdma_domain_set_log(d, logfn, NULL);
	if (cu.MemAlloc(&va, SZ)) {
		check(0, "no kdev: cuMemAlloc");
		pdma_domain_close(d);
		return;
	}
	unsetenv("PEERDMA_CUDA_DMABUF");
	ret = reg(d, va, SZ, NULL, &m);
	check(ret == 0, "no kdev: dma-buf route registers (%d)", ret);
	if (!ret) {
		ret = pdma_mr_dma(m, 0, &dma);
		check(ret == 0 && dma.kernel_fd == -1 && dma.kind == 0 && dma.dmabuf_fd >= 0 &&
		      dma.pinned_addr == va && dma.pinned_len == SZ,
		      "no kdev: pdma_mr_dma names the dma-buf (fd %d), no kernel handle (%d)",
		      dma.dmabuf_fd, ret);
		ret = pdma_mr_dma_pages(m, 0, pages, &count);
		check(ret == -ENOENT, "no kdev: pdma_mr_dma_pages: -ENOENT (%d)", ret);
		pdma_mr_close(m);
	}
	setenv("PEERDMA_CUDA_DMABUF", "0", 1);
	ret = reg(d, va + 64 * 1024, 64 * 1024, NULL, &m);
	check(ret == -EOPNOTSUPP, "no kdev: nv-p2p route refused, nothing would pin it (%d)", ret);
	if (!ret)
		pdma_mr_close(m);
	unsetenv("PEERDMA_CUDA_DMABUF");
	ret = reg(d, va, SZ + 128 * 1024, NULL, &m);
	check(ret == -EFAULT, "range past the allocation: -EFAULT (%d)", ret);
	if (!ret)
		pdma_mr_close(m);
	cu.MemFree(va);
	check(pdma_domain_close(d) == 0, "no kdev: domain closes");
}

int main(void)
{
	const char *lib = getenv("PEERDMA_LIBCUDA");
	struct gpusim_info gi;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!lib || cu_load(lib)) {
		check(0, "load the CUDA stand-in (PEERDMA_LIBCUDA=%s)", lib ? lib : "(unset)");
		printf("gpu_mr: %d passed, %d failed\n", passed, failed);
		return 1;
	}
	route(1);
	route(0);
	host_mr();
	no_kdev();
	gi = gs_info();
	check(gi.tables == 0 && gi.mappings == 0 && gi.bufs == 0 && gi.bufmaps == 0 &&
	      gi.violations == 0,
	      "gpusim holds nothing of ours: %u page tables, %u mappings, %u dma-bufs, %u buffer maps, %u violations",
	      gi.tables, gi.mappings, gi.bufs, gi.bufmaps, gi.violations);
	printf("gpu_mr: %d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
