// SPDX-License-Identifier: MIT
/* The nic receive path (rx/nic.h tells a frame's life in order). */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "cuda/api.h"
#include "peerdma/mr.h"
#include "rx/nic.h"

#define GPU_PAGE (64u << 10)
#define POLL_MAX PDMA_RX_NIC_BATCH
#define POLL_MS 20

struct pdma_rx_nic {
	struct pdma_rx_nic_config c;
	const struct pdma_cu_api *cu;
	pdma_cu_device dev;
	pdma_cu_ctx ctx;
	bool ctx_retained;
	pdma_cu_ptr region;   /* 0 once freed */
	uint64_t region_addr; /* where it was (reports) */
	uint64_t bytes;
	struct pdma_mr *mr;
	struct pdma_eq *eq;
	uint32_t pin_kind;
	int fd;               /* the NIC */
	uint64_t bufs_off;
	uint32_t nbufs;
	uint8_t *stage;       /* host copy at the region's offsets (stage) */
	struct pdma_nic_stats base; /* the NIC's counters when we attached */
	bool revoked;
};

static int fail(char *msg, size_t msglen, int err, const char *fmt, ...)
{
	va_list ap;

	if (msg && msglen) {
		va_start(ap, fmt);
		vsnprintf(msg, msglen, fmt, ap);
		va_end(ap);
	}
	return err;
}

static int cu_fail(struct pdma_rx_nic *n, char *msg, size_t msglen, const char *what,
		   pdma_cu_result r)
{
	(void)n;
	return fail(msg, msglen, pdma_cu_errno(r), "%s failed: %s", what, pdma_cu_errname(r));
}

static int nic_counters(int fd, struct pdma_nic_stats *s)
{
	memset(s, 0, sizeof(*s));
	s->size = sizeof(*s);
	return ioctl(fd, PDMA_NIC_IOC_STATS, s) ? -errno : 0;
}

/* The region: device memory, zeroed so that nothing stale reads as a frame,
 * registered for device writes through the public API. */
static int region_open(struct pdma_rx_nic *n, struct pdma_domain *dom, char *msg, size_t msglen)
{
	struct pdma_mr_dma d;
	pdma_cu_result r;
	int ret;

	ret = pdma_cu_get(&n->cu, msg, msglen);
	if (ret)
		return ret;
	r = n->cu->Init(0);
	if (r == PDMA_CU_SUCCESS)
		r = n->cu->DeviceGet(&n->dev, n->c.cuda_device);
	if (r != PDMA_CU_SUCCESS)
		return cu_fail(n, msg, msglen, "CUDA device", r);
	r = n->cu->DevicePrimaryCtxRetain(&n->ctx, n->dev);
	if (r != PDMA_CU_SUCCESS)
		return cu_fail(n, msg, msglen, "cuDevicePrimaryCtxRetain", r);
	n->ctx_retained = true;
	n->cu->CtxSetCurrent(n->ctx);
	n->bytes = ((uint64_t)n->c.nbufs * n->c.buf_size + GPU_PAGE - 1) & ~(uint64_t)(GPU_PAGE - 1);
	r = n->cu->MemAlloc(&n->region, n->bytes);
	if (r != PDMA_CU_SUCCESS) {
		n->region = 0;
		return cu_fail(n, msg, msglen, "cuMemAlloc of the receive region", r);
	}
	n->region_addr = n->region;
	r = n->cu->MemsetD8(n->region, 0, n->bytes);
	if (r != PDMA_CU_SUCCESS)
		return cu_fail(n, msg, msglen, "cuMemsetD8", r);

	struct iovec iov = { (void *)(uintptr_t)n->region, n->bytes };
	struct pdma_mr_attr a = {
		.mr_iov = &iov,
		.iov_count = 1,
		.access = PDMA_RECV | PDMA_REMOTE_WRITE,
		.iface = PDMA_HMEM_CUDA,
		.device = n->c.cuda_device,
	};
	ret = pdma_mr_regattr(dom, &a, 0, &n->mr);
	if (ret)
		return fail(msg, msglen, ret, "registering the receive region: %s", pdma_strerror(ret));
	ret = pdma_mr_dma(n->mr, 0, &d);
	if (ret || d.kernel_fd < 0)
		return fail(msg, msglen, ret ? ret : -ENOENT,
			    "the receive region has no kernel pin (%s): open the domain with a kernel device",
			    pdma_strerror(ret ? ret : -ENOENT));
	n->pin_kind = d.kind;

	struct pdma_nic_rx_attach at = {
		.size = sizeof(at),
		/* lengths without the FCS: a NIC (QEMU's) may count it unwritten */
		.flags = PDMA_NIC_RX_STRIP_CRC,
		.peerdma_fd = d.kernel_fd,
		.buf_size = n->c.buf_size,
		.handle = d.handle,
		.offset = n->region - d.pinned_addr,
		.len = n->bytes,
	};
	if (ioctl(n->fd, PDMA_NIC_IOC_RX_ATTACH, &at))
		return fail(msg, msglen, -errno, "%s: attaching the receive region: %s", n->c.dev,
			    strerror(errno));
	n->nbufs = at.nbufs;
	nic_counters(n->fd, &n->base);
	n->bufs_off = at.bufs_offset - at.offset; /* from the region's start */
	return 0;
}

int pdma_rx_nic_open(struct pdma_rx_nic **out, const struct pdma_rx_nic_config *c,
		     struct pdma_domain *dom, struct pdma_eq *eq, char *msg, size_t msglen)
{
	struct pdma_nic_info info = { .size = sizeof(info) };
	struct pdma_rx_nic *n;
	int ret;

	n = calloc(1, sizeof(*n));
	if (!n)
		return -ENOMEM;
	n->c = *c;
	if (!n->c.dev)
		n->c.dev = "/dev/peerdma_nic0";
	if (!n->c.nbufs)
		n->c.nbufs = 1024;
	if (!n->c.buf_size)
		n->c.buf_size = 2048;
	n->eq = eq;
	n->fd = open(n->c.dev, O_RDWR | O_CLOEXEC);
	if (n->fd < 0) {
		ret = fail(msg, msglen, -errno, "%s: %s (is peerdma_e1000.ko loaded and a NIC bound?)",
			   n->c.dev, strerror(errno));
		goto err;
	}
	if (ioctl(n->fd, PDMA_NIC_IOC_INFO, &info)) {
		ret = fail(msg, msglen, -errno, "%s: %s", n->c.dev, strerror(errno));
		goto err;
	}
	if (n->c.buf_size & (n->c.buf_size - 1) || n->c.buf_size >= (1u << 31) ||
	    !(info.buf_sizes & n->c.buf_size)) {
		ret = fail(msg, msglen, -EINVAL, "%s: buffer size %u not supported (sizes mask %#x)",
			   n->c.dev, n->c.buf_size, info.buf_sizes);
		goto err;
	}
	ret = region_open(n, dom, msg, msglen);
	if (ret)
		goto err;
	if (n->c.stage) {
		n->stage = aligned_alloc(GPU_PAGE, n->bytes);
		if (!n->stage) {
			ret = -ENOMEM;
			goto err;
		}
	}
	*out = n;
	return 0;
err:
	pdma_rx_nic_close(n);
	return ret;
}

/* Copy the completed frames to the host mirror, one copy per run of
 * adjacent buffers (the NIC fills them in ring order, so a batch is one or
 * two runs). */
static int stage_frames(struct pdma_rx_nic *n, const struct pdma_frame *f, uint32_t cnt)
{
	for (uint32_t i = 0; i < cnt;) {
		uint32_t j = i + 1;

		while (j < cnt && f[j].off == f[j - 1].off + n->c.buf_size)
			j++;
		uint64_t len = f[j - 1].off - f[i].off + f[j - 1].len;
		pdma_cu_result r = n->cu->MemcpyDtoH(n->stage + f[i].off, n->region + f[i].off, len);

		if (r != PDMA_CU_SUCCESS)
			return pdma_cu_errno(r);
		i = j;
	}
	return 0;
}

/* The memory is gone: wait (briefly) for the MR's revocation event, so the
 * report can say it came through libpeerdma. */
static void await_revoke_event(struct pdma_rx_nic *n)
{
	struct pdma_eq_entry e;

	n->revoked = true;
	if (!n->eq)
		return;
	for (int tries = 0; tries < 50; tries++)
		if (pdma_eq_read(n->eq, &e, 100) == 0 && e.event == PDMA_MR_REVOKED && e.mr == n->mr)
			return;
}

int pdma_rx_nic_run(struct pdma_rx_nic *n, const atomic_bool *stop, pdma_rx_nic_fn fn, void *arg,
		    struct pdma_rx_stats *st)
{
	struct pdma_nic_cqe cqe[POLL_MAX];
	struct pdma_frame fr[POLL_MAX];
	uint32_t bufs[POLL_MAX];
	uint64_t frames = 0;
	bool draining = false;
	int ret = 0;

	n->cu->CtxSetCurrent(n->ctx); /* this thread's copies */
	for (;;) {
		struct pdma_nic_rx_poll p = {
			.size = sizeof(p),
			.cqes = (uintptr_t)cqe,
			.max = POLL_MAX,
			.timeout_ms = draining ? 0 : POLL_MS,
		};

		if (ioctl(n->fd, PDMA_NIC_IOC_RX_POLL, &p)) {
			if (errno == EINTR)
				continue;
			if (errno == ENODEV) {
				await_revoke_event(n);
				return -ENODEV;
			}
			return -errno;
		}
		if (!p.n) {
			if (draining)
				return ret;
			if (atomic_load_explicit(stop, memory_order_relaxed))
				draining = true; /* one more non-blocking poll */
			continue;
		}
		for (uint32_t i = 0; i < p.n; i++) {
			fr[i] = (struct pdma_frame){
				.off = (uint32_t)(n->bufs_off + (uint64_t)cqe[i].buf * n->c.buf_size),
				.len = cqe[i].len,
				.flags = cqe[i].status,
			};
			bufs[i] = cqe[i].buf;
			atomic_fetch_add_explicit(&st->bytes, cqe[i].len, memory_order_relaxed);
		}
		atomic_fetch_add_explicit(&st->datagrams, p.n, memory_order_relaxed);
		if (n->region) {
			if (n->stage)
				ret = stage_frames(n, fr, p.n);
			if (!ret)
				ret = fn(arg, n->region, n->stage, fr, p.n);
			if (ret)
				return ret;
		}
		frames += p.n;
		if (n->c.revoke_after && frames >= n->c.revoke_after && n->region) {
			/* Fault injection: the application frees the memory the
			 * NIC is writing into. peerdma.ko must quiesce the NIC
			 * before the driver (here the stand-in) reuses it. */
			n->cu->MemFree(n->region);
			n->region = 0;
		}
		struct pdma_nic_rx_post post = { .size = sizeof(post), .bufs = (uintptr_t)bufs, .n = p.n };

		if (ioctl(n->fd, PDMA_NIC_IOC_RX_POST, &post)) {
			if (errno == ENODEV) {
				await_revoke_event(n);
				return -ENODEV;
			}
			return -errno;
		}
	}
}

/* The driver counts for the NIC's lifetime: report this receiver's share. */
int pdma_rx_nic_stats(struct pdma_rx_nic *n, struct pdma_nic_stats *s)
{
	const struct pdma_nic_stats *b = &n->base;
	int ret = nic_counters(n->fd, s);

	if (ret)
		return ret;
	s->rx_frames -= b->rx_frames;
	s->rx_bytes -= b->rx_bytes;
	s->rx_missed -= b->rx_missed;
	s->rx_long -= b->rx_long;
	s->rx_errors -= b->rx_errors;
	s->tx_frames -= b->tx_frames;
	s->doorbells -= b->doorbells;
	s->irqs -= b->irqs;
	s->quiesces -= b->quiesces;
	s->quiesce_ns -= b->quiesce_ns;
	s->reap_ns -= b->reap_ns;
	return 0;
}

void pdma_rx_nic_info(const struct pdma_rx_nic *n, struct pdma_rx_nic_info *i)
{
	i->dev_addr = n->region_addr;
	i->bytes = n->bytes;
	i->bufs_off = n->bufs_off;
	i->buf_size = n->c.buf_size;
	i->nbufs = n->nbufs;
	i->pin_kind = n->pin_kind;
	i->revoked = n->revoked;
}

void pdma_rx_nic_close(struct pdma_rx_nic *n)
{
	if (!n)
		return;
	/* The NIC stops before its memory goes: detach (it quiesces), then
	 * the MR (the kernel pin), then the allocation. */
	if (n->fd >= 0)
		close(n->fd);
	if (n->mr)
		pdma_mr_close(n->mr);
	if (n->region) {
		n->cu->CtxSetCurrent(n->ctx);
		n->cu->MemFree(n->region);
	}
	if (n->ctx_retained)
		n->cu->DevicePrimaryCtxRelease(n->dev);
	free(n->stage);
	free(n);
}
