// SPDX-License-Identifier: MIT
/* The nic receive path (rx/nic.h tells a frame's life in order). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "peerdma/mr.h"
#include "rx/nic.h"
#include "rx/nic_mem.h"

#define POLL_MAX PDMA_RX_NIC_BATCH
#define POLL_MS 20

struct pdma_rx_nic {
	struct pdma_rx_nic_config c;
	struct pdma_nic_mem m; /* the receive region */
	struct pdma_eq *eq;
	int fd;               /* the NIC */
	uint64_t bufs_off;    /* from the region's start */
	uint32_t nbufs;
	uint8_t *stage;       /* host copy at the region's offsets (stage) */
	struct pdma_nic_stats base; /* the NIC's counters when we attached */
	bool revoked;
	bool revoke_event;    /* PDMA_MR_REVOKED came on the EQ */
};

static int nic_counters(int fd, struct pdma_nic_stats *s)
{
	memset(s, 0, sizeof(*s));
	s->size = sizeof(*s);
	return ioctl(fd, PDMA_NIC_IOC_STATS, s) ? -errno : 0;
}

/* The region, registered for device writes, and attached to the NIC. */
static int region_open(struct pdma_rx_nic *n, struct pdma_domain *dom, char *msg, size_t msglen)
{
	int ret = pdma_nic_mem_open(&n->m, dom, n->c.cuda_device, (uint64_t)n->c.nbufs * n->c.buf_size,
				    PDMA_RECV | PDMA_REMOTE_WRITE, msg, msglen);

	if (ret)
		return ret;
	struct pdma_nic_rx_attach at = {
		.size = sizeof(at),
		/* lengths without the FCS: a NIC (QEMU's) may count it unwritten */
		.flags = PDMA_NIC_RX_STRIP_CRC,
		.peerdma_fd = n->m.dma.kernel_fd,
		.buf_size = n->c.buf_size,
		.handle = n->m.dma.handle,
		.offset = pdma_nic_mem_pin_off(&n->m, 0),
		.len = n->m.bytes,
	};
	if (ioctl(n->fd, PDMA_NIC_IOC_RX_ATTACH, &at))
		return pdma_nic_fail(msg, msglen, -errno, "%s: attaching the receive region: %s",
				     n->c.dev, strerror(errno));
	n->nbufs = at.nbufs;
	n->bufs_off = at.bufs_offset - at.offset;
	nic_counters(n->fd, &n->base);
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
		ret = pdma_nic_fail(msg, msglen, -errno, "%s: %s (is peerdma_e1000.ko loaded and a NIC bound?)",
				    n->c.dev, strerror(errno));
		goto err;
	}
	if (ioctl(n->fd, PDMA_NIC_IOC_INFO, &info)) {
		ret = pdma_nic_fail(msg, msglen, -errno, "%s: %s", n->c.dev, strerror(errno));
		goto err;
	}
	if (n->c.buf_size & (n->c.buf_size - 1) || n->c.buf_size >= (1u << 31) ||
	    !(info.buf_sizes & n->c.buf_size)) {
		ret = pdma_nic_fail(msg, msglen, -EINVAL, "%s: buffer size %u not supported (sizes mask %#x)",
				    n->c.dev, n->c.buf_size, info.buf_sizes);
		goto err;
	}
	ret = region_open(n, dom, msg, msglen);
	if (ret)
		goto err;
	if (n->c.stage) {
		n->stage = aligned_alloc(4096, n->m.bytes);
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
		pdma_cu_result r = n->m.cu->MemcpyDtoH(n->stage + f[i].off, n->m.region + f[i].off, len);

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
		if (pdma_eq_read(n->eq, &e, 100) == 0 && e.event == PDMA_MR_REVOKED && e.mr == n->m.mr) {
			n->revoke_event = true;
			return;
		}
}

int pdma_rx_nic_run(struct pdma_rx_nic *n, const atomic_bool *stop, pdma_rx_nic_fn fn, void *arg,
		    struct pdma_rx_stats *st)
{
	struct pdma_nic_cqe cqe[POLL_MAX];
	struct pdma_frame fr[POLL_MAX];
	uint32_t bufs[POLL_MAX];
	uint64_t frames = 0, since = 0;
	bool draining = false, revoked = false;
	int ret = 0;

	pdma_nic_mem_enter(&n->m); /* this thread's copies */
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
			if (pdma_rx_stop_now(stop, true, &since))
				draining = true; /* one more non-blocking poll */
			else if ((ret = fn(arg, 0, NULL, NULL, 0)))
				return ret; /* idle tick */
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
		if (n->m.region) {
			if (n->stage)
				ret = stage_frames(n, fr, p.n);
			if (!ret)
				ret = fn(arg, n->m.region, n->stage, fr, p.n);
			if (ret)
				return ret;
		}
		frames += p.n;
		if (n->c.revoke_after && frames >= n->c.revoke_after && n->m.region) {
			/* Fault injection: the application frees the memory the
			 * NIC is writing into. peerdma.ko must quiesce the NIC
			 * before the driver (here the stand-in) reuses it. */
			pdma_nic_mem_free(&n->m);
		}
		/* Once the memory is gone nothing is posted again; RX_POLL
		 * still reports what the NIC completed before the quiesce,
		 * then ENODEV. */
		if (!n->m.region || revoked)
			continue;
		struct pdma_nic_rx_post post = { .size = sizeof(post), .bufs = (uintptr_t)bufs, .n = p.n };

		if (ioctl(n->fd, PDMA_NIC_IOC_RX_POST, &post)) {
			if (errno != ENODEV)
				return -errno;
			revoked = true;
		}
		if (pdma_rx_stop_now(stop, false, &since))
			return ret;
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
	i->dev_addr = n->m.addr;
	i->bytes = n->m.bytes;
	i->bufs_off = n->bufs_off;
	i->buf_size = n->c.buf_size;
	i->nbufs = n->nbufs;
	i->pin_kind = n->m.dma.kind;
	i->revoked = n->revoked;
	i->revoke_event = n->revoke_event;
}

void pdma_rx_nic_close(struct pdma_rx_nic *n)
{
	if (!n)
		return;
	/* The NIC stops before its memory goes: detach (it quiesces), then
	 * the MR (the kernel pin), then the allocation. */
	if (n->fd >= 0)
		close(n->fd);
	pdma_nic_mem_close(&n->m);
	free(n->stage);
	free(n);
}
