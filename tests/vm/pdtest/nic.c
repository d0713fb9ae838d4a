// SPDX-License-Identifier: GPL-2.0
/*
 * The reference NIC driver (drivers/e1000/, /dev/peerdma_nic0) against QEMU's
 * e1000, with tests/vm/nic-host.py on the far side of the -netdev dgram
 * socket: frames received into GPU memory (gpusim) with buffers replenished,
 * the descriptor ring in GPU memory polled through the gpusim mmap, odd
 * frames, TX from GPU pages checked byte for byte by the host, a revoke
 * while receiving, kill -9 and rmmod with frames arriving, and the figures
 * (frames/s, driver CPU time and doorbells per frame).
 *
 * The guest talks to the host helper with control frames it transmits from
 * GPU memory (nic-host.py lists them); data frames carry (seq, seed) and a
 * pattern both sides compute (frame_byte, frame_bytes() there). Frames of
 * another test (a stream still queued in QEMU) carry another seed: skipped.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/capability.h>
#include <linux/userfaultfd.h>

#include <uapi/peerdma_nic.h>
#include "harness.h"

#define NIC_DEV "/dev/peerdma_nic0"
#define ET_CTL 0x88B5
#define ET_DATA 0x88B6
#define ET_TX 0x88B7
#define RXLEN (16 * 2048UL)	/* 16 receive buffers of 2048 bytes */
#define TXLEN (2 * GPAGE)
#define QMAX 64
#define TX_FLOOD (1U << 20)	/* frames of tx_flood() */
#define NIC_DRV "/sys/bus/pci/drivers/peerdma_e1000"

static const uint8_t guest_mac[6] = { 0x52, 0x54, 0x00, 0x12, 0x34, 0x56 };
static const uint8_t host_mac[6] = { 0x52, 0x54, 0x00, 0x00, 0x00, 0x02 };

struct nic {
	int fd, gfd, nfd;
	uint64_t rx_va, rx_off, tx_va, tx_off;	/* GPU addresses, BAR offsets */
	uint8_t *rx, *tx;			/* the gpusim mmaps */
	uint64_t hrx, htx;
	struct pdma_nic_rx_attach at;
	unsigned int seed;
	uint32_t fcs;				/* 4 unless STRIP_CRC */
	struct pdma_nic_cqe q[QMAX];
	uint32_t qn, qi;
	uint32_t skipped;
};

static uint8_t frame_byte(unsigned int seed, uint32_t seq, size_t i)
{
	return (uint8_t)(seed * 131 + seq * 7 + i * 13 + (i >> 8));
}

static uint32_t vary_size(uint32_t seq)
{
	return 64 + (seq * 97) % 1451;
}

static void frame_fill(uint8_t *p, const uint8_t *dst, const uint8_t *src, uint16_t et,
		       uint32_t seq, unsigned int seed, size_t len)
{
	memcpy(p, dst, 6);
	memcpy(p + 6, src, 6);
	p[12] = et >> 8;
	p[13] = et;
	for (int i = 0; i < 4; i++) {
		p[14 + i] = seq >> (24 - 8 * i);
		p[18 + i] = seed >> (24 - 8 * i);
	}
	for (size_t i = 22; i < len; i++)
		p[i] = frame_byte(seed, seq, i);
}

static uint32_t be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | p[1] << 16 | p[2] << 8 | p[3];
}

static int nic_open(void)
{
	int fd = open(NIC_DEV, O_RDWR | O_CLOEXEC);

	if (fd < 0) {
		printf("  %s: %s\n", NIC_DEV, strerror(errno));
		exit(errno == ENOENT ? SKIP : 1);
	}
	return fd;
}

static struct pdma_nic_stats nic_stats(int nfd)
{
	struct pdma_nic_stats st = { .size = sizeof(st) };

	EXPECT_OK(ioctl(nfd, PDMA_NIC_IOC_STATS, &st));
	return st;
}

/* GPU memory for receive (high in the BAR when @high) and for transmit */
static void nic_init(struct nic *c, uint64_t rx_size, int high)
{
	uint64_t pad_va = 0;

	memset(c, 0, sizeof(*c));
	c->fd = pd_open();
	c->gfd = gs_open();
	c->nfd = nic_open();
	c->seed = (cfg_seed * 977 + (unsigned int)getpid()) & 0xffffff;
	/*
	 * Above 32 MiB of the BAR (first fit): the bytes HOSTCHECK lines of
	 * earlier tests left low in the BAR stay as they are for the host to
	 * check; the revoke test's memory (HOSTZERO) 48 MiB up, where no later
	 * test's allocation reaches.
	 */
	pad_va = gs_alloc(c->gfd, (high ? 48ULL : 32ULL) << 20, NULL);
	c->rx_va = gs_alloc(c->gfd, rx_size, &c->rx_off);
	c->tx_va = gs_alloc(c->gfd, TXLEN, &c->tx_off);
	EXPECT_OK(gs_free(c->gfd, pad_va));
	c->rx = map_gpu(c->gfd, c->rx_off, rx_size);
	c->tx = map_gpu(c->gfd, c->tx_off, TXLEN);
	memset(c->rx, 0, rx_size);
	/* the revoke test frees it: the nv-p2p free callback must run */
	c->hrx = pin(c->fd, PEERDMA_KIND_GPU, high ? PEERDMA_PIN_GPU_CALLBACK : 0, c->rx_va,
		     rx_size, NULL);
	c->htx = pin(c->fd, PEERDMA_KIND_GPU, 0, c->tx_va, TXLEN, NULL);
	EXPECT(c->hrx && c->htx);
}

static int nic_attach(struct nic *c, uint32_t flags, uint32_t buf_size, uint64_t len)
{
	c->at = (struct pdma_nic_rx_attach){ .size = sizeof(c->at), .flags = flags,
		.peerdma_fd = c->fd, .buf_size = buf_size, .handle = c->hrx, .len = len };
	c->fcs = (flags & PDMA_NIC_RX_STRIP_CRC) ? 0 : 4;
	c->qn = c->qi = 0;
	return ioctl(c->nfd, PDMA_NIC_IOC_RX_ATTACH, &c->at);
}

static int nic_tx(struct nic *c, const struct pdma_nic_tx_frame *f, uint32_t n, uint32_t *done)
{
	struct pdma_nic_tx t = { .size = sizeof(t), .peerdma_fd = c->fd, .n = n,
		.handle = c->htx, .frames = (uintptr_t)f, .timeout_ms = 2000 };
	int r = ioctl(c->nfd, PDMA_NIC_IOC_TX, &t);

	if (done)
		*done = t.done;
	return r;
}

/* a control frame to nic-host.py, built in GPU memory (the last 2 KiB) */
static void ctl_send(struct nic *c, const char *fmt, ...)
{
	uint64_t off = TXLEN - 2048;
	uint8_t *p = c->tx + off;
	struct pdma_nic_tx_frame f = { .offset = off, .len = 128 };
	va_list ap;

	memset(p, 0, 128);
	memcpy(p, host_mac, 6);
	memcpy(p + 6, guest_mac, 6);
	p[12] = ET_CTL >> 8;
	p[13] = ET_CTL & 0xff;
	memcpy(p + 14, "PDNIC ", 6);
	va_start(ap, fmt);
	vsnprintf((char *)p + 20, 100, fmt, ap);
	va_end(ap);
	EXPECT_OK(nic_tx(c, &f, 1, NULL));
}

static void post(struct nic *c, uint32_t buf)
{
	struct pdma_nic_rx_post p = { .size = sizeof(p), .bufs = (uintptr_t)&buf, .n = 1 };

	EXPECT_OK(ioctl(c->nfd, PDMA_NIC_IOC_RX_POST, &p));
}

/* the next completion (waits up to ms); -errno of RX_POLL otherwise */
static int next_cqe(struct nic *c, struct pdma_nic_cqe *e, int ms)
{
	struct pdma_nic_rx_poll p = { .size = sizeof(p), .cqes = (uintptr_t)c->q,
		.max = QMAX, .timeout_ms = ms };

	if (c->qi == c->qn) {
		if (ioctl(c->nfd, PDMA_NIC_IOC_RX_POLL, &p))
			return -errno;
		if (!p.n)
			return -ETIMEDOUT;
		c->qn = p.n;
		c->qi = 0;
	}
	*e = c->q[c->qi++];
	return 0;
}

static uint8_t *buf_of(struct nic *c, uint32_t b)
{
	return c->rx + c->at.bufs_offset + (uint64_t)b * c->at.buf_size;
}

/* wait for the control frame that starts with @want; data frames: skipped */
static int wait_ctl(struct nic *c, const char *want, char *out, size_t outlen, double secs)
{
	struct pdma_nic_cqe e;
	double end = now() + secs;

	while (now() < end) {
		if (next_cqe(c, &e, 200))
			continue;
		uint8_t *p = buf_of(c, e.buf);
		int match = (p[12] << 8 | p[13]) == ET_CTL && e.len >= 20 + strlen(want) &&
			    !memcmp(p + 20, want, strlen(want));

		if (match && out)
			snprintf(out, outlen, "%.*s", (int)(e.len - 20 - c->fcs), (char *)p + 20);
		if (!match)
			c->skipped++;
		post(c, e.buf);
		if (match)
			return 0;
	}
	return -1;
}

/*
 * A command and its answer, repeated when the answer does not come: QEMU
 * stalls reception for 1 s after each RCTL write (attach) and the host's
 * socket drops what overflows meanwhile.
 */
static int ask(struct nic *c, const char *cmd, const char *want, char *out, size_t outlen)
{
	for (int i = 0; i < 5; i++) {
		ctl_send(c, "%s", cmd);
		if (!wait_ctl(c, want, out, outlen, 3))
			return 0;
	}
	FAIL("no '%s' from nic-host.py for '%s'", want, cmd);
	return -1;
}

/* the "ready" frame: the receive side is attached; nic-host.py answers */
static void ready(struct nic *c)
{
	ask(c, "READY", "READY-OK", NULL, 0);
}

/* a data frame of ours (other seeds: skipped) checked byte for byte */
static int check_data(struct nic *c, const struct pdma_nic_cqe *e, uint32_t seq, uint32_t size)
{
	const uint8_t *p = buf_of(c, e->buf);

	if (e->len != size + c->fcs || !(e->status & PDMA_NIC_CQE_EOP) || e->errors) {
		FAIL("frame seq %u: len %u status %#x errors %#x, want len %u", seq, e->len,
		     e->status, e->errors, size + c->fcs);
		return -1;
	}
	if (memcmp(p, guest_mac, 6) || memcmp(p + 6, host_mac, 6) || be32(p + 14) != seq) {
		FAIL("frame seq %u: header (seq %u)", seq, be32(p + 14));
		return -1;
	}
	for (size_t i = 22; i < size; i++)
		if (p[i] != frame_byte(c->seed, seq, i)) {
			FAIL("frame seq %u byte %zu: %#x want %#x", seq, i, p[i],
			     frame_byte(c->seed, seq, i));
			return -1;
		}
	return 0;
}

/* the next data frame of this test's seed (others are posted back) */
static int next_data(struct nic *c, struct pdma_nic_cqe *e, int ms)
{
	for (;;) {
		int r = next_cqe(c, e, ms);

		if (r)
			return r;
		const uint8_t *p = buf_of(c, e->buf);

		if ((p[12] << 8 | p[13]) == ET_DATA && be32(p + 18) == c->seed)
			return 0;
		c->skipped++;
		post(c, e->buf);
	}
}

/* COUNT frames in batches, each checked, buffers posted back one by one */
static void receive_checked(struct nic *c, uint32_t count, uint32_t batch, uint32_t size)
{
	struct pdma_nic_cqe e;

	for (uint32_t first = 0; first < count; first += batch) {
		uint32_t n = count - first < batch ? count - first : batch;

		ctl_send(c, "SEND %u %u %u %u", first, n, size, c->seed);
		for (uint32_t seq = first; seq < first + n; seq++) {
			if (next_data(c, &e, 5000)) {
				FAIL("frame %u of %u never came", seq, count);
				return;
			}
			if (check_data(c, &e, seq, size ? size : vary_size(seq)))
				return;
			post(c, e.buf);
		}
	}
}

static void nic_done(struct nic *c)
{
	EXPECT_OK(ioctl(c->nfd, PDMA_NIC_IOC_RX_DETACH));
	close(c->nfd);
	close(c->fd);
	close(c->gfd);
	wait_clean();
	if (check_clean("after the NIC test"))
		fails++;
}

/* 320 frames of varying size through 16 buffers, completions exact */
static void t_nic_rx(void)
{
	struct pdma_nic_info in = { .size = sizeof(in) };
	struct pdma_nic_stats s0, s1;
	uint32_t skipped0, queued0;
	struct nic c;

	nic_init(&c, GPAGE, 0);
	EXPECT_OK(ioctl(c.nfd, PDMA_NIC_IOC_INFO, &in));
	EXPECT(!memcmp(in.mac, guest_mac, 6));
	EXPECT_EQ(in.link_up, 1);
	EXPECT_EQ(in.buf_sizes, 2048 | 4096);
	EXPECT_OK(nic_attach(&c, 0, 2048, RXLEN));
	EXPECT_EQ(c.at.nbufs, 16);
	EXPECT_EQ(c.at.bufs_offset, 0);
	ready(&c);
	/*
	 * Frames of an earlier test (another seed) may still come, even while
	 * ready() waits: the count is of what was reaped between s0 and s1,
	 * and the completions fetched but not yet looked at are on the side
	 * of the snapshot that reaped them
	 */
	s0 = nic_stats(c.nfd);
	skipped0 = c.skipped;
	queued0 = c.qn - c.qi;
	receive_checked(&c, 320, 32, 0);
	s1 = nic_stats(c.nfd);
	/* 320 data frames and no other of ours (the SEND frames get no answer) */
	EXPECT_EQ(s1.rx_frames - s0.rx_frames,
		  320 + (c.skipped - skipped0) - queued0 + (c.qn - c.qi));
	EXPECT_EQ(s1.tx_frames - s0.tx_frames, 10);
	EXPECT_EQ(s1.rx_errors - s0.rx_errors, 0);
	printf("  320 frames through 16 buffers (%u other frames skipped)\n", c.skipped);
	nic_done(&c);
}

/* argument checks: exact errno, nothing attached by a failed call */
static void t_nic_errors(void)
{
	struct pdma_nic_rx_doorbell db = { .size = sizeof(db) };
	struct pdma_nic_tx_frame f = { .offset = 0, .len = 59 };
	struct pdma_nic_info in = { .size = sizeof(in) - 4 };
	struct nic c;
	int nfd2;
	uint32_t b;

	nic_init(&c, GPAGE, 0);
	EXPECT_ERR(ioctl(c.nfd, PDMA_NIC_IOC_INFO, &in), EINVAL);
	EXPECT_ERR(ioctl(c.nfd, _IO('N', 99)), ENOTTY);
	EXPECT_ERR(nic_attach(&c, 1U << 7, 2048, RXLEN), EINVAL);
	EXPECT_ERR(nic_attach(&c, 0, 1024, RXLEN), EINVAL);
	EXPECT_ERR(nic_attach(&c, 0, 0, RXLEN), EINVAL);	/* was a divide error */
	EXPECT_ERR(nic_attach(&c, 0, 2048, RXLEN + 100), EINVAL);
	EXPECT_ERR(nic_attach(&c, 0, 2048, 2 * GPAGE), EINVAL);	/* beyond the pin */
	EXPECT_ERR(nic_attach(&c, 0, 2048, 4 * 2048), EINVAL);	/* too few buffers */
	c.hrx = 999999;
	EXPECT_ERR(nic_attach(&c, 0, 2048, RXLEN), ENOENT);
	c.hrx = pin(c.fd, PEERDMA_KIND_GPU, 0, c.rx_va, GPAGE, NULL);
	EXPECT_ERR(ioctl(c.nfd, PDMA_NIC_IOC_RX_DOORBELL, &db), EINVAL);
	EXPECT_OK(nic_attach(&c, 0, 4096, RXLEN));
	EXPECT_EQ(c.at.nbufs, 8);
	nfd2 = nic_open();
	c.nfd ^= nfd2, nfd2 ^= c.nfd, c.nfd ^= nfd2;
	EXPECT_ERR(nic_attach(&c, 0, 2048, RXLEN), EBUSY);
	c.nfd ^= nfd2, nfd2 ^= c.nfd, c.nfd ^= nfd2;
	close(nfd2);
	/* a buffer the NIC holds cannot be posted again */
	b = 3;
	struct pdma_nic_rx_post p = { .size = sizeof(p), .bufs = (uintptr_t)&b, .n = 1 };

	EXPECT_ERR(ioctl(c.nfd, PDMA_NIC_IOC_RX_POST, &p), EINVAL);
	b = 8;
	EXPECT_ERR(ioctl(c.nfd, PDMA_NIC_IOC_RX_POST, &p), EINVAL);
	EXPECT_ERR(nic_tx(&c, &f, 1, NULL), EINVAL);
	f.len = 1515;
	EXPECT_ERR(nic_tx(&c, &f, 1, NULL), EINVAL);
	f = (struct pdma_nic_tx_frame){ .offset = TXLEN - 100, .len = 200 };
	EXPECT_ERR(nic_tx(&c, &f, 1, NULL), EINVAL);
	/* offset + len wraps around: outside the pin too */
	f = (struct pdma_nic_tx_frame){ .offset = ~0ULL - 255, .len = 1000 };
	EXPECT_ERR(nic_tx(&c, &f, 1, NULL), EINVAL);
	ready(&c);	/* still works after all that (4 KiB buffers) */
	nic_done(&c);
}

/* runt, largest, oversize (dropped and counted), marker; FCS stripped */
static void nic_odd_frames(struct nic *c)
{
	struct pdma_nic_stats s0, s1;
	struct pdma_nic_cqe e;

	ready(c);
	s0 = nic_stats(c->nfd);
	ctl_send(c, "ODD %u", c->seed);
	/* the runt comes padded to 60 bytes (zeros after its 20) */
	if (!next_data(c, &e, 5000)) {
		EXPECT_EQ(e.len, 60);
		EXPECT_EQ(be32(buf_of(c, e.buf) + 14), 1);
		EXPECT_EQ(buf_of(c, e.buf)[59], 0);
		post(c, e.buf);
	} else {
		FAIL("no runt");
	}
	if (!next_data(c, &e, 5000)) {
		check_data(c, &e, 2, 1514);
		post(c, e.buf);
	} else {
		FAIL("no 1514-byte frame");
	}
	if (!next_data(c, &e, 5000)) {
		check_data(c, &e, 6, 100);	/* 3..5 were dropped */
		post(c, e.buf);
	} else {
		FAIL("no marker");
	}
	s1 = nic_stats(c->nfd);
	EXPECT_EQ(s1.rx_long - s0.rx_long, 3);
	EXPECT_EQ(s1.rx_errors - s0.rx_errors, 0);
}

/*
 * The odd frames into 2048- and into 4096-byte buffers: no jumbo frames, so
 * the 1600- and 3000-byte frames are dropped even where they would fit.
 */
static void t_nic_odd(void)
{
	struct nic c;

	nic_init(&c, GPAGE, 0);
	EXPECT_OK(nic_attach(&c, PDMA_NIC_RX_STRIP_CRC, 2048, RXLEN));
	nic_odd_frames(&c);
	EXPECT_OK(ioctl(c.nfd, PDMA_NIC_IOC_RX_DETACH));
	EXPECT_OK(nic_attach(&c, PDMA_NIC_RX_STRIP_CRC, 4096, RXLEN));
	nic_odd_frames(&c);
	nic_done(&c);
}

/*
 * Arguments user space cannot write: a completion RX_POLL could not copy out
 * comes with the next RX_POLL, an attachment whose reply could not be written
 * is undone; RX_POST gives back all of its buffers or none (a bad index in
 * its second batch of 256 leaves the first batch the user's).
 */
static void t_nic_user_faults(void)
{
	struct pdma_nic_rx_poll p = { .size = sizeof(p), .max = 8, .timeout_ms = 3000 };
	struct pdma_nic_rx_post po = { .size = sizeof(po) };
	uint32_t ours[260], n = 0;
	struct pdma_nic_cqe e;
	struct nic c;
	uint8_t *ro;

	/* 512 buffers of 2 KiB */
	nic_init(&c, 16 * GPAGE, 0);
	ro = map_anon(PAGE);
	memcpy(ro, &(struct pdma_nic_rx_attach){ .size = sizeof(struct pdma_nic_rx_attach),
		.flags = PDMA_NIC_RX_STRIP_CRC, .peerdma_fd = c.fd, .buf_size = 2048,
		.handle = c.hrx, .len = 16 * GPAGE }, sizeof(struct pdma_nic_rx_attach));
	EXPECT_OK(mprotect(ro, PAGE, PROT_READ));
	EXPECT_ERR(ioctl(c.nfd, PDMA_NIC_IOC_RX_ATTACH, ro), EFAULT);
	EXPECT_ERR(ioctl(c.nfd, PDMA_NIC_IOC_RX_DETACH), EINVAL);	/* nothing attached */
	EXPECT_OK(nic_attach(&c, PDMA_NIC_RX_STRIP_CRC, 2048, 16 * GPAGE));
	EXPECT_EQ(c.at.nbufs, 512);
	ready(&c);

	ctl_send(&c, "SEND 0 4 128 %u", c.seed);
	p.cqes = (uintptr_t)ro;		/* read-only */
	EXPECT_ERR(ioctl(c.nfd, PDMA_NIC_IOC_RX_POLL, &p), EFAULT);
	for (uint32_t seq = 0; seq < 4; seq++) {
		if (next_data(&c, &e, 3000)) {
			FAIL("frame %u lost to the failed RX_POLL", seq);
			break;
		}
		check_data(&c, &e, seq, 128);
		post(&c, e.buf);
	}

	ctl_send(&c, "SEND 100 257 60 %u", c.seed);
	while (n < 257) {
		if (next_data(&c, &e, 5000)) {
			FAIL("%u of 257 frames", n);
			break;
		}
		ours[n++] = e.buf;
	}
	if (n == 257) {
		ours[256] = 9999;
		po.bufs = (uintptr_t)ours;
		po.n = 257;
		EXPECT_ERR(ioctl(c.nfd, PDMA_NIC_IOC_RX_POST, &po), EINVAL);
		/* none went back: each can be posted now */
		po.n = 256;
		EXPECT_OK(ioctl(c.nfd, PDMA_NIC_IOC_RX_POST, &po));
		EXPECT_ERR(ioctl(c.nfd, PDMA_NIC_IOC_RX_POST, &po), EINVAL);
	}
	munmap(ro, PAGE);
	nic_done(&c);
}

struct uffd_stall {
	int uffd;
	uint8_t *page;		/* registered: its first touch faults */
	const void *fill;	/* what the page holds once the fault is resolved */
	int faulted;		/* atomic: the fault came */
	int resolved;
};

/*
 * A fresh anonymous page whose first touch, kernel copies included, waits
 * on userfaultfd until uffd_resolve() fills it: 0, or -1 where the kernel
 * has no userfaultfd (the test is skipped).
 */
static int uffd_page(struct uffd_stall *u, const void *fill)
{
	struct uffdio_api api = { .api = UFFD_API };
	struct uffdio_register reg = { .mode = UFFDIO_REGISTER_MODE_MISSING };

	memset(u, 0, sizeof(*u));
	u->fill = fill;
	/* poll() on a blocking userfaultfd says POLLERR at once */
	u->uffd = syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
	if (u->uffd < 0) {
		printf("  userfaultfd: %s\n", strerror(errno));
		return -1;
	}
	/* not map_anon(): it fills the page */
	u->page = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	EXPECT(u->page != MAP_FAILED);
	reg.range.start = (uintptr_t)u->page;
	reg.range.len = PAGE;
	EXPECT_OK(ioctl(u->uffd, UFFDIO_API, &api));
	EXPECT_OK(ioctl(u->uffd, UFFDIO_REGISTER, &reg));
	return 0;
}

/* in a thread: wait for the page's fault, leave it unresolved 1 s, then fill the page */
static void *uffd_resolve(void *arg)
{
	struct uffd_stall *u = arg;
	struct pollfd pfd = { .fd = u->uffd, .events = POLLIN };
	struct uffdio_copy cp = { .dst = (uintptr_t)u->page, .src = (uintptr_t)u->fill,
		.len = PAGE };
	struct uffd_msg msg;

	if (poll(&pfd, 1, 5000) == 1 && read(u->uffd, &msg, sizeof(msg)) == sizeof(msg) &&
	    msg.event == UFFD_EVENT_PAGEFAULT) {
		__atomic_store_n(&u->faulted, 1, __ATOMIC_SEQ_CST);
		usleep(1000000);
	}
	u->resolved = !ioctl(u->uffd, UFFDIO_COPY, &cp);
	return NULL;
}

/* what another file's calls took while a page's fault waited (seconds; -1: none came) */
struct probe {
	double stats, tx;
};

/* once @u's fault came: another file's (@other) STATS, then a one-frame TX */
static struct probe probe_during_fault(struct uffd_stall *u, struct nic *c, int other)
{
	struct pdma_nic_tx_frame f = { .offset = 0, .len = 60 };
	struct pdma_nic_tx t = { .size = sizeof(t), .peerdma_fd = c->fd, .handle = c->htx,
		.n = 1, .frames = (uintptr_t)&f, .timeout_ms = 3000 };
	struct probe pr = { -1, -1 };
	double t0;

	for (t0 = now(); !__atomic_load_n(&u->faulted, __ATOMIC_SEQ_CST); usleep(1000))
		if (now() - t0 > 5)
			return pr;
	t0 = now();
	nic_stats(other);
	pr.stats = now() - t0;
	t0 = now();
	EXPECT_OK(ioctl(other, PDMA_NIC_IOC_TX, &t));
	pr.tx = now() - t0;
	return pr;
}

struct stall_call {
	int nfd;
	unsigned long cmd;
	void *arg;
	int ret, err;
};

static void *stall_call(void *arg)
{
	struct stall_call *s = arg;

	s->ret = ioctl(s->nfd, s->cmd, s->arg);
	s->err = errno;
	return NULL;
}

/*
 * ioctl @cmd of @c->nfd in a thread, its user array in @u's page, whose
 * fault waits 1 s: the call must succeed once the page is there, and
 * another file's (@other) calls must not wait meanwhile.
 */
static void stalled_call(struct uffd_stall *u, struct nic *c, unsigned long cmd, void *arg,
			 int other)
{
	struct stall_call sc = { .nfd = c->nfd, .cmd = cmd, .arg = arg };
	struct probe pr;
	pthread_t th, res;

	EXPECT_OK(pthread_create(&res, NULL, uffd_resolve, u));
	EXPECT_OK(pthread_create(&th, NULL, stall_call, &sc));
	pr = probe_during_fault(u, c, other);
	pthread_join(th, NULL);
	pthread_join(res, NULL);
	EXPECT(u->resolved);
	if (sc.ret)
		FAIL("the call with its array in the slow page: %s", strerror(sc.err));
	printf("  %s, its array's page fault waiting 1 s: another file's STATS %.2f ms,"
	       " one-frame TX %.2f ms\n", cmd == PDMA_NIC_IOC_RX_POLL ? "RX_POLL" :
	       cmd == PDMA_NIC_IOC_RX_POST ? "RX_POST" : "TX", pr.stats * 1e3, pr.tx * 1e3);
	EXPECT(pr.stats >= 0 && pr.stats < 0.3);
	EXPECT(pr.tx >= 0 && pr.tx < 0.3);
}

static void uffd_release(struct uffd_stall *u)
{
	munmap(u->page, PAGE);
	close(u->uffd);
}

/*
 * RX_POLL's cqes, RX_POST's indices and TX's frame list in a page that
 * faults slowly (a userfaultfd page left unresolved for 1 s, as a FUSE
 * mapping would): the driver never waits on that fault holding a lock
 * another file needs, so another file's STATS and TX return at once; each
 * call completes once the page is there, and nothing is lost.
 */
static void t_nic_user_stall(void)
{
	struct pdma_nic_rx_poll p = { .size = sizeof(p), .max = 64, .timeout_ms = 3000 };
	struct pdma_nic_rx_post po = { .size = sizeof(po), .n = 4 };
	struct pdma_nic_tx t = { .size = sizeof(t), .n = 1, .timeout_ms = 3000 };
	uint32_t *fill = calloc(1, PAGE);
	struct pdma_nic_cqe *q, e;
	struct uffd_stall u;
	uint32_t seq = 0;
	struct nic c;
	int other;

	nic_init(&c, GPAGE, 0);
	if (!fill || uffd_page(&u, fill))
		exit(SKIP);
	EXPECT_OK(nic_attach(&c, PDMA_NIC_RX_STRIP_CRC, 2048, RXLEN));
	ready(&c);
	other = nic_open();
	/* what the probe's TX sends: a frame of a seed nobody checks */
	frame_fill(c.tx, host_mac, guest_mac, ET_TX, 0, c.seed + 1, 60);

	/* RX_POLL: four frames reaped, their completions copied into the page */
	ctl_send(&c, "SEND 0 4 128 %u", c.seed);
	usleep(300000);
	p.cqes = (uintptr_t)u.page;
	stalled_call(&u, &c, PDMA_NIC_IOC_RX_POLL, &p, other);
	q = (struct pdma_nic_cqe *)u.page;
	for (uint32_t i = 0; i < p.n; i++) {
		const uint8_t *f = buf_of(&c, q[i].buf);

		if ((f[12] << 8 | f[13]) == ET_DATA && be32(f + 18) == c.seed &&
		    !check_data(&c, &q[i], seq, 128))
			seq++;
		post(&c, q[i].buf);
	}
	EXPECT_EQ(seq, 4);	/* all four delivered through the slow page */
	uffd_release(&u);

	/* RX_POST: four buffers of ours, their indices in the page */
	ctl_send(&c, "SEND 4 4 128 %u", c.seed);
	for (seq = 0; seq < 4 && !next_data(&c, &e, 3000); seq++)
		fill[seq] = e.buf;
	EXPECT_EQ(seq, 4);
	if (uffd_page(&u, fill))
		exit(1);
	po.bufs = (uintptr_t)u.page;
	stalled_call(&u, &c, PDMA_NIC_IOC_RX_POST, &po, other);
	/* the four went back to the NIC: a second post of them is refused */
	EXPECT_ERR(ioctl(c.nfd, PDMA_NIC_IOC_RX_POST, &po), EINVAL);
	uffd_release(&u);

	/* TX: its frame list in the page */
	memcpy(fill, &(struct pdma_nic_tx_frame){ .offset = 0, .len = 60 },
	       sizeof(struct pdma_nic_tx_frame));
	if (uffd_page(&u, fill))
		exit(1);
	t.peerdma_fd = c.fd;
	t.handle = c.htx;
	t.frames = (uintptr_t)u.page;
	stalled_call(&u, &c, PDMA_NIC_IOC_TX, &t, other);
	EXPECT_EQ(t.done, 1);
	uffd_release(&u);

	close(other);
	free(fill);
	nic_done(&c);
}

static void on_alarm(int sig)
{
	(void)sig;
}

/*
 * The rest of the uapi header's promises: who may attach and detach
 * (EACCES, EINVAL, EPERM), RX_POST's checks (duplicates, too many: nothing
 * posted), RX_POLL ends at a signal, the ring-in-memory mode's limits and
 * its ENODEV after a revoke.
 */
static void t_nic_contract(void)
{
	struct pdma_nic_rx_poll p = { .size = sizeof(p), .cqes = 0, .max = 1, .timeout_ms = -1 };
	struct pdma_nic_rx_post po = { .size = sizeof(po) };
	struct pdma_nic_rx_doorbell db = { .size = sizeof(db) };
	struct sigaction sa = { .sa_handler = on_alarm }, old_sa;
	struct itimerval it = { .it_value = { .tv_usec = 200000 } };
	struct pdma_nic_cqe q[4], e;
	uint32_t bufs[3];
	struct nic c;
	int st, nfd2, r, err;
	pid_t pid;

	nic_init(&c, GPAGE, 0);
	EXPECT_OK(nic_attach(&c, PDMA_NIC_RX_STRIP_CRC, 2048, RXLEN));
	/* another file cannot detach it; another process cannot use our pins */
	nfd2 = nic_open();
	EXPECT_ERR(ioctl(nfd2, PDMA_NIC_IOC_RX_DETACH), EINVAL);
	close(nfd2);
	pid = fork();
	if (pid == 0) {
		struct pdma_nic_tx_frame f = { .offset = 0, .len = 60 };

		fails = 0;
		/* the inherited fd and handle: refused by peerdma_client_get */
		EXPECT_ERR(nic_tx(&c, &f, 1, NULL), EACCES);
		_exit(fails ? 1 : 0);
	}
	waitpid(pid, &st, 0);
	EXPECT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	ready(&c);

	/* two buffers of ours: a duplicate or an oversized list posts nothing */
	ctl_send(&c, "SEND 0 2 60 %u", c.seed);
	for (int i = 0; i < 2; i++)
		if (next_data(&c, &e, 5000))
			FAIL("frame %d never came", i);
		else
			bufs[i] = e.buf;
	bufs[2] = bufs[0];
	po.bufs = (uintptr_t)bufs;
	po.n = 3;
	EXPECT_ERR(ioctl(c.nfd, PDMA_NIC_IOC_RX_POST, &po), EINVAL);
	po.n = c.at.nbufs + 1;
	EXPECT_ERR(ioctl(c.nfd, PDMA_NIC_IOC_RX_POST, &po), EINVAL);
	po.n = 2;
	EXPECT_OK(ioctl(c.nfd, PDMA_NIC_IOC_RX_POST, &po));

	/* RX_POLL with no timeout ends at a signal (stray frames: posted back) */
	p.cqes = (uintptr_t)q;
	sigaction(SIGALRM, &sa, &old_sa);	/* no SA_RESTART */
	setitimer(ITIMER_REAL, &it, NULL);
	while ((r = ioctl(c.nfd, PDMA_NIC_IOC_RX_POLL, &p)) == 0)
		post(&c, q[0].buf);
	err = errno;
	EXPECT_EQ(r, -1);
	EXPECT_EQ(err, EINTR);
	sigaction(SIGALRM, &old_sa, NULL);
	EXPECT_OK(ioctl(c.nfd, PDMA_NIC_IOC_RX_DETACH));

	/* the ring in memory: limits, and RX_POST refused there */
	c.at = (struct pdma_nic_rx_attach){ .size = sizeof(c.at),
		.flags = PDMA_NIC_RX_RING_IN_MEM, .peerdma_fd = c.fd, .buf_size = 2048,
		.handle = c.hrx, .len = GPAGE, .ring_entries = 968 };
	EXPECT_ERR(ioctl(c.nfd, PDMA_NIC_IOC_RX_ATTACH, &c.at), EINVAL);
	c.at.ring_entries = 20;	/* not a multiple of 8 */
	EXPECT_ERR(ioctl(c.nfd, PDMA_NIC_IOC_RX_ATTACH, &c.at), EINVAL);
	pid = fork();
	if (pid == 0) {
		struct nic c2;

		fails = 0;
		nic_init(&c2, GPAGE, 0);
		EXPECT_OK(drop_cap(CAP_SYS_RAWIO));
		EXPECT_ERR(nic_attach(&c2, PDMA_NIC_RX_RING_IN_MEM, 2048, 17 * 2048), EPERM);
		_exit(fails ? 1 : 0);
	}
	waitpid(pid, &st, 0);
	EXPECT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	EXPECT_OK(nic_attach(&c, PDMA_NIC_RX_RING_IN_MEM, 2048, 17 * 2048));
	po.n = 1;
	EXPECT_ERR(ioctl(c.nfd, PDMA_NIC_IOC_RX_POST, &po), EINVAL);
	/* unpin revokes: the doorbell is refused from then on */
	EXPECT_OK(unpin(c.fd, c.hrx));
	db.tail = 3;
	EXPECT_ERR(ioctl(c.nfd, PDMA_NIC_IOC_RX_DOORBELL, &db), ENODEV);
	nic_done(&c);
}

/* what tx_flood()'s TX call returned: ioctl's result, errno, frames sent */
struct flood_result {
	int ret, err;
	uint32_t done;
};

/*
 * A child process that runs a TX of a million 60-byte frames with no
 * timeout (the host counts them for a seed nobody asks about). Returns its
 * pid once the call is about to start; *res_fd gets its struct
 * flood_result once the call returned.
 */
static pid_t tx_flood(int *res_fd)
{
	int p[2], q[2];
	pid_t pid;
	char ch;

	if (pipe(p) || pipe(q)) {
		FAIL("pipe: %s", strerror(errno));
		exit(1);
	}
	pid = fork();
	if (pid == 0) {
		const uint32_t n = TX_FLOOD;
		struct pdma_nic_tx_frame *f = calloc(n, sizeof(*f));
		struct flood_result res;
		struct nic c;

		nic_init(&c, GPAGE, 0);
		frame_fill(c.tx, host_mac, guest_mac, ET_TX, 0, c.seed + 1, 60);
		for (uint32_t i = 0; f && i < n; i++)
			f[i] = (struct pdma_nic_tx_frame){ .offset = 0, .len = 60 };
		struct pdma_nic_tx t = { .size = sizeof(t), .peerdma_fd = c.fd, .n = n,
			.handle = c.htx, .frames = (uintptr_t)f, .timeout_ms = -1 };

		if (!f || write(p[1], "g", 1) != 1)
			_exit(2);
		res.ret = ioctl(c.nfd, PDMA_NIC_IOC_TX, &t);
		res.err = errno;
		res.done = t.done;
		_exit(write(q[1], &res, sizeof(res)) == sizeof(res) ? 0 : 2);
	}
	close(p[1]);
	close(q[1]);
	EXPECT_EQ(read(p[0], &ch, 1), 1);
	close(p[0]);
	*res_fd = q[0];
	return pid;
}

/* a TX of a million frames with no timeout ends at SIGKILL, not when sent */
static void t_nic_tx_kill(void)
{
	int st, res_fd;
	pid_t pid = tx_flood(&res_fd);
	double t0;

	usleep(300000);
	t0 = now();
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	close(res_fd);
	/* not an exit: it had sent a million frames before the kill came */
	EXPECT(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	printf("  TX call killed after 300 ms: the process was gone %.0f ms after the kill\n",
	       (now() - t0) * 1e3);
	EXPECT(now() - t0 < 1.0);
	wait_clean();
	if (check_clean("after the killed TX"))
		fails++;
}

/* the longest of the calls timed so far: @worst, updated with now() - @t0 */
static void longest(double *worst, double t0)
{
	double t = now() - t0;

	*worst = t > *worst ? t : *worst;
}

/*
 * Full duplex: one file receives while another runs a TX of a million
 * frames with no timeout (seconds). The receive side and STATS must not wait
 * for that call: twelve frames received before it are posted back one by
 * one, each post followed by an RX_POLL and a STATS, and every one of those
 * calls has returned while the TX still runs. (Latencies are printed, not
 * bounded: under TCG an MMIO access waits for QEMU's global lock, which the
 * TX's doorbells keep busy.)
 */
static void t_nic_duplex(void)
{
	double t0, post_worst = 0, poll_worst = 0, stats_worst = 0;
	struct pdma_nic_cqe e;
	uint32_t bufs[12], n = 0, i;
	int st, res_fd;
	struct pollfd pf;
	struct nic c;
	pid_t pid;

	nic_init(&c, GPAGE, 0);
	EXPECT_OK(nic_attach(&c, 0, 2048, RXLEN));
	ready(&c);
	ctl_send(&c, "SEND 0 12 256 %u", c.seed);
	for (; n < 12 && !next_data(&c, &e, 3000); n++) {
		check_data(&c, &e, n, 256);
		bufs[n] = e.buf;	/* kept: posted back during the TX */
	}
	EXPECT_EQ(n, 12);
	pid = tx_flood(&res_fd);
	usleep(100000);		/* the TX call runs */
	t0 = now();
	for (i = 0; i < n; i++) {
		double t = now();

		post(&c, bufs[i]);
		longest(&post_worst, t);
		t = now();
		if (!next_cqe(&c, &e, 0))	/* whatever came: given back */
			post(&c, e.buf);
		longest(&poll_worst, t);
		t = now();
		nic_stats(c.nfd);
		longest(&stats_worst, t);
	}
	t0 = now() - t0;
	/* every call above returned before the TX did */
	pf = (struct pollfd){ .fd = res_fd, .events = POLLIN };
	EXPECT_EQ(poll(&pf, 1, 0), 0);
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	close(res_fd);
	printf("  during a TX of %u frames on another file: %u RX_POST, RX_POLL and STATS each"
	       " in %.0f ms; longest %.1f, %.1f and %.2f ms\n", TX_FLOOD, n, t0 * 1e3,
	       post_worst * 1e3, poll_worst * 1e3, stats_worst * 1e3);
	nic_done(&c);
}

/* the descriptor ring in GPU memory, polled through the gpusim mmap */
static void t_nic_ring_in_mem(void)
{
	struct pdma_nic_rx_poll p = { .size = sizeof(p), .cqes = 0, .max = 1 };
	struct pdma_nic_rx_doorbell db = { .size = sizeof(db) };
	struct pdma_nic_stats s0, s1;
	const uint32_t count = 200;
	struct nic c;
	uint32_t head = 0, seq = 0, other = 0, n, rung = 0;
	double db_s = 0, t;

	nic_init(&c, GPAGE, 0);
	/* 16 descriptors (256 bytes, one 2 KiB slot) and 16 buffers */
	EXPECT_OK(nic_attach(&c, PDMA_NIC_RX_RING_IN_MEM | PDMA_NIC_RX_STRIP_CRC, 2048,
			     17 * 2048));
	EXPECT_EQ(c.at.nbufs, 16);
	EXPECT_EQ(c.at.ring_entries, 16);
	EXPECT_EQ(c.at.ring_offset, 0);
	EXPECT_EQ(c.at.bufs_offset, 2048);
	EXPECT_ERR(ioctl(c.nfd, PDMA_NIC_IOC_RX_POLL, &p), EINVAL);
	volatile uint8_t *ring = c.rx + c.at.ring_offset;
	uint64_t a0;

	memcpy(&a0, (const void *)ring, 8);
	EXPECT(a0 != 0);	/* the NIC wrote the ring image (loopback) */
	s0 = nic_stats(c.nfd);
	for (uint32_t first = 0; first < count && !fails; first += 8) {
		ctl_send(&c, "SEND %u 8 0 %u", first, c.seed);
		for (n = 0; n < 8 && !fails;) {
			volatile uint8_t *d = ring + 16 * head;
			double end = now() + 5;

			while (!(d[12] & 1) && now() < end)
				usleep(50);
			if (!(d[12] & 1)) {
				FAIL("descriptor %u: no DD", head);
				break;
			}
			uint64_t addr;
			uint16_t len = d[8] | d[9] << 8;
			uint8_t *buf = c.rx + c.at.bufs_offset + (uint64_t)head * 2048;
			struct pdma_nic_cqe e = { .buf = head, .len = len, .status = d[12] & 2 ? 1 : 0,
						  .errors = d[13] };

			memcpy(&addr, (const void *)d, 8);
			if (!addr)
				FAIL("descriptor %u: address gone after write-back", head);
			if ((buf[12] << 8 | buf[13]) == ET_DATA && be32(buf + 18) == c.seed) {
				check_data(&c, &e, first + n, vary_size(first + n));
				n++;
				seq++;
			} else {
				other++;
			}
			d[12] = 0;	/* status cleared, the address stays */
			db.tail = head;	/* the consumed descriptor is the new gap */
			t = now();
			EXPECT_OK(ioctl(c.nfd, PDMA_NIC_IOC_RX_DOORBELL, &db));
			db_s += now() - t;
			rung++;
			head = (head + 1) % 16;
		}
	}
	s1 = nic_stats(c.nfd);
	EXPECT_EQ(seq, count);
	EXPECT_EQ(s1.rx_frames - s0.rx_frames, 0);	/* nothing through RX_POLL */
	EXPECT_EQ(s1.doorbells - s0.doorbells, count + other + count / 8);
	db.tail = 16;
	EXPECT_ERR(ioctl(c.nfd, PDMA_NIC_IOC_RX_DOORBELL, &db), EINVAL);
	printf("  ring in GPU memory: %u frames, descriptor 0 names %#llx; RX_DOORBELL"
	       " %.0f ns each (ioctl + RDT write, TCG)\n", seq, (unsigned long long)a0,
	       rung ? db_s * 1e9 / rung : 0.0);
	nic_done(&c);
}

struct ring_attach {
	struct nic *c;
	uint64_t handle;
	int ret, err;
};

static void *ring_attach_thread(void *arg)
{
	struct ring_attach *ra = arg;
	struct pdma_nic_rx_attach a = { .size = sizeof(a),
		.flags = PDMA_NIC_RX_RING_IN_MEM | PDMA_NIC_RX_STRIP_CRC,
		.peerdma_fd = ra->c->fd, .buf_size = 2048, .handle = ra->handle,
		.len = 17 * 2048 };

	ra->ret = ioctl(ra->c->nfd, PDMA_NIC_IOC_RX_ATTACH, &a);
	ra->err = errno;
	return NULL;
}

/*
 * The GPU memory freed while a ring-in-memory attach is writing the ring by
 * loopback (seconds under QEMU, which stalls reception 1 s after the receiver
 * is enabled): the bootstrap gives up, the attach fails with ENODEV, and the
 * free (the nv-p2p callback, the GPU driver's lock held) waits for one try at
 * most, not for the whole bootstrap.
 */
static void t_nic_ring_revoke(void)
{
	struct pdma_nic_stats s0, s1;
	struct ring_attach ra = { 0 };
	pthread_t th;
	struct nic c;
	double t0, t_free;

	nic_init(&c, GPAGE, 0);
	ra.c = &c;
	ra.handle = pin(c.fd, PEERDMA_KIND_GPU, PEERDMA_PIN_GPU_CALLBACK, c.rx_va, GPAGE, NULL);
	EXPECT(ra.handle != 0);
	s0 = nic_stats(c.nfd);
	EXPECT_OK(pthread_create(&th, NULL, ring_attach_thread, &ra));
	usleep(200000);
	t0 = now();
	EXPECT_OK(gs_free(c.gfd, c.rx_va));	/* c.hrx (persistent) keeps the pages */
	t_free = now() - t0;
	pthread_join(th, NULL);
	s1 = nic_stats(c.nfd);
	EXPECT_EQ(ra.ret, -1);
	EXPECT_EQ(ra.err, ENODEV);
	EXPECT(s1.quiesces > s0.quiesces);
	printf("  GPU free during the ring bootstrap: returned after %.0f ms\n", t_free * 1e3);
	EXPECT(t_free < 0.3);
	EXPECT_ERR(ioctl(c.nfd, PDMA_NIC_IOC_RX_DETACH), EINVAL);	/* nothing attached */
	close(c.nfd);
	close(c.fd);
	close(c.gfd);
	wait_clean();
	if (check_clean("after the revoked ring bootstrap"))
		fails++;
}

/* frames built in GPU pages sent by the NIC; nic-host.py checks each byte */
static void t_nic_tx(void)
{
	struct pdma_nic_tx_frame f[40];
	struct pdma_nic_stats s0, s1;
	uint32_t done = 0, ok = 0, bad = 0;
	char ans[64] = "", cmd[32];
	struct nic c;

	nic_init(&c, GPAGE, 0);
	EXPECT_OK(nic_attach(&c, PDMA_NIC_RX_STRIP_CRC, 2048, RXLEN));
	ready(&c);
	for (uint32_t k = 0; k < 40; k++) {
		uint32_t len = k == 39 ? 1514 : 60 + (k * 211) % 1455;
		/* frame 39 straddles the two 64 KiB GPU pages */
		uint64_t off = k == 39 ? GPAGE - 700 : k * 1600 + (k % 7) * 3;

		f[k] = (struct pdma_nic_tx_frame){ .offset = off, .len = len };
		frame_fill(c.tx + off, host_mac, guest_mac, ET_TX, k, c.seed, len);
	}
	s0 = nic_stats(c.nfd);
	EXPECT_OK(nic_tx(&c, f, 40, &done));
	EXPECT_EQ(done, 40);
	s1 = nic_stats(c.nfd);
	EXPECT_EQ(s1.tx_frames - s0.tx_frames, 40);
	snprintf(cmd, sizeof(cmd), "TXCHECK %u", c.seed);
	if (!ask(&c, cmd, "TXCHECK", ans, sizeof(ans)) &&
	    sscanf(ans, "TXCHECK %u %u", &ok, &bad) != 2)
		FAIL("answer '%s'", ans);
	EXPECT_EQ(ok, 40);
	EXPECT_EQ(bad, 0);
	printf("  TX from GPU pages: host checked %u frames, %u bad\n", ok, bad);
	nic_done(&c);
}

/* the figures: frames/s (TCG), driver CPU time and doorbells per frame */
static void t_nic_perf(void)
{
	struct pdma_nic_rx_poll p = { .size = sizeof(p), .max = QMAX, .timeout_ms = 5000 };
	struct pdma_nic_rx_post po = { .size = sizeof(po) };
	const uint32_t count = 4096, batch = 128, size = 128;
	struct pdma_nic_cqe q[QMAX];
	struct pdma_nic_stats s0, s1;
	uint32_t bufs[QMAX], got = 0, bad = 0, posts = 0;
	struct nic c;
	double t0, t;

	nic_init(&c, GPAGE, 0);
	/* 32 buffers of 2 KiB: 64 KiB, one GPU page */
	EXPECT_OK(nic_attach(&c, PDMA_NIC_RX_STRIP_CRC, 2048, GPAGE));
	ready(&c);
	s0 = nic_stats(c.nfd);
	t0 = now();
	for (uint32_t first = 0; first < count && !fails; first += batch) {
		ctl_send(&c, "SEND %u %u %u %u", first, batch, size, c.seed);
		for (uint32_t n = 0; n < batch;) {
			p.cqes = (uintptr_t)q;
			if (ioctl(c.nfd, PDMA_NIC_IOC_RX_POLL, &p) || !p.n) {
				FAIL("poll: %s (%u of %u)", strerror(errno), got, count);
				break;
			}
			for (uint32_t i = 0; i < p.n; i++) {
				const uint8_t *b = buf_of(&c, q[i].buf);

				bufs[i] = q[i].buf;
				if (be32(b + 18) != c.seed)
					continue;
				bad += q[i].len != size || be32(b + 14) != first + n;
				n++;
				got++;
			}
			po.bufs = (uintptr_t)bufs;
			po.n = p.n;
			EXPECT_OK(ioctl(c.nfd, PDMA_NIC_IOC_RX_POST, &po));
			posts++;
		}
	}
	t = now() - t0;
	s1 = nic_stats(c.nfd);
	EXPECT_EQ(got, count);
	EXPECT_EQ(bad, 0);
	/* one RDT write per RX_POST, one TDT write per TX call (a SEND each) */
	EXPECT_EQ(s1.doorbells - s0.doorbells, posts + count / batch);
	uint64_t fr = s1.rx_frames - s0.rx_frames;

	if (fr)
		printf("  nic perf: %u frames of %u bytes in %.2f s: %.0f frames/s; driver CPU"
		       " (RX_POLL + RX_POST) %.0f ns/frame; %.3f doorbells/frame\n",
		       got, size, t, got / t, (double)(s1.reap_ns - s0.reap_ns) / fr,
		       (double)(s1.doorbells - s0.doorbells) / fr);
	nic_done(&c);
}

/* a receiver that streams until killed (kill -9 / rmmod tests) */
static pid_t start_receiver(int *pfd)
{
	int p[2];
	char ch = 0;
	pid_t pid;

	if (pipe(p))
		return -1;
	pid = fork();
	if (pid == 0) {
		struct pdma_nic_cqe e;
		struct nic c;
		int n = 0;

		close(p[0]);
		nic_init(&c, GPAGE, 0);
		if (nic_attach(&c, 0, 2048, RXLEN))
			_exit(1);
		ready(&c);
		ctl_send(&c, "STREAM %u 256 1000", c.seed);
		for (;;) {
			if (!next_data(&c, &e, 1000)) {
				post(&c, e.buf);
				if (++n == 20 && write(p[1], "r", 1) != 1)
					_exit(1);
			}
		}
	}
	close(p[1]);
	if (read(p[0], &ch, 1) != 1 || ch != 'r')
		FAIL("receiver not streaming");
	*pfd = p[0];
	return pid;
}

/* stop the stream a killed receiver started, from a fresh attachment */
static void stop_stream(void)
{
	char ans[64];
	struct nic c;

	nic_init(&c, GPAGE, 0);
	EXPECT_OK(nic_attach(&c, 0, 2048, RXLEN));	/* not EBUSY: released */
	ask(&c, "STOP", "STOPPED", ans, sizeof(ans));
	printf("  stream: %s\n", ans);
	nic_done(&c);
}

static void t_nic_kill9(void)
{
	int st, pfd;
	pid_t pid = start_receiver(&pfd);

	EXPECT(live_pins() >= 2);
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	close(pfd);
	wait_clean();
	if (check_clean("after kill -9 of the receiver"))
		fails++;
	stop_stream();
}

/* rmmod peerdma_e1000 while frames keep arriving, then insmod again */
static void t_nic_rmmod(void)
{
	int st, pfd, kfd;
	pid_t pid = start_receiver(&pfd);

	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	close(pfd);
	wait_clean();
	EXPECT_OK(syscall(SYS_delete_module, "peerdma_e1000", O_NONBLOCK));
	EXPECT_EQ(access(NIC_DEV, F_OK), -1);
	if (check_clean("after rmmod peerdma_e1000"))
		fails++;
	usleep(200000);		/* the stream goes on meanwhile */
	kfd = open("/lib/modules/peerdma_e1000.ko", O_RDONLY | O_CLOEXEC);
	EXPECT_OK(syscall(SYS_finit_module, kfd, "", 0));
	close(kfd);
	stop_stream();
}

/* the NIC's PCI address: the device link in the driver's sysfs directory; 0 or -1 (failed) */
static int nic_bdf(char *bdf, size_t len)
{
	DIR *d = opendir(NIC_DRV);
	struct dirent *de;
	int r = -1;

	while (d && r && (de = readdir(d)))
		if (de->d_type == DT_LNK && strchr(de->d_name, ':')) {
			snprintf(bdf, len, "%s", de->d_name);
			r = 0;
		}
	if (d)
		closedir(d);
	if (r)
		FAIL("no PCI device bound to %s", NIC_DRV);
	return r;
}

/* the driver unbound from the NIC (what a hot-unplug runs): seconds it took */
static double nic_unbind(const char *bdf)
{
	double t0 = now();

	EXPECT_OK(write_file(NIC_DRV "/unbind", bdf));
	return now() - t0;
}

/* bound again: the device node is back */
static void nic_rebind(const char *bdf)
{
	EXPECT_OK(write_file(NIC_DRV "/bind", bdf));
	EXPECT_OK(access(NIC_DEV, F_OK));
}

struct unbind_poll {
	int nfd;
	int ret, err;
};

/* RX_POLL with no timeout on a ring with no buffer posted: waits for the unbind */
static void *unbind_poller(void *arg)
{
	struct unbind_poll *u = arg;
	struct pdma_nic_cqe q[4];
	struct pdma_nic_rx_poll p = { .size = sizeof(p), .cqes = (uintptr_t)q, .max = 4,
		.timeout_ms = -1 };

	u->ret = ioctl(u->nfd, PDMA_NIC_IOC_RX_POLL, &p);
	u->err = errno;
	return NULL;
}

/*
 * The driver unbound from the NIC (sysfs unbind: what a hot-unplug runs)
 * while frames arrive into an attachment and a thread waits in RX_POLL: the
 * wait ends with ENXIO, every call of the still open file says ENXIO, the
 * pin loses its client, nothing lands in the memory after, and the close
 * and a bind of the driver again work (on the debug kernel: KASAN over the
 * file outliving the device's rings).
 */
static void t_nic_unbind(void)
{
	struct unbind_poll u = { .ret = 0 };
	struct pdma_nic_info in = { .size = sizeof(in) };
	struct pdma_nic_stats st = { .size = sizeof(st) };
	struct pdma_nic_cqe e;
	struct peerdma_query q;
	char bdf[256];
	pthread_t th;
	struct nic c;
	int n = 0;

	if (nic_bdf(bdf, sizeof(bdf)))
		return;
	nic_init(&c, GPAGE, 0);
	EXPECT_OK(nic_attach(&c, 0, 2048, RXLEN));
	ready(&c);
	ctl_send(&c, "STREAM %u 256 1000", c.seed);
	/* 20 frames of the stream, then the buffers stay ours: the ring runs dry */
	while (n < 20 && !next_data(&c, &e, 5000)) {
		post(&c, e.buf);
		n++;
	}
	EXPECT_EQ(n, 20);
	while (!next_cqe(&c, &e, 200))
		;
	EXPECT_OK(query(c.fd, c.hrx, &q));
	EXPECT_EQ(q.clients, 1);
	u.nfd = c.nfd;
	EXPECT_OK(pthread_create(&th, NULL, unbind_poller, &u));
	usleep(100000);

	nic_unbind(bdf);
	EXPECT_OK(pthread_join(th, NULL));
	EXPECT_EQ(u.ret, -1);
	EXPECT_EQ(u.err, ENXIO);
	EXPECT_EQ(access(NIC_DEV, F_OK), -1);
	EXPECT_ERR(ioctl(c.nfd, PDMA_NIC_IOC_INFO, &in), ENXIO);
	EXPECT_ERR(ioctl(c.nfd, PDMA_NIC_IOC_STATS, &st), ENXIO);
	EXPECT_ERR(ioctl(c.nfd, PDMA_NIC_IOC_RX_DETACH), ENXIO);
	EXPECT_EQ(next_cqe(&c, &e, 0), -ENXIO);
	EXPECT_OK(query(c.fd, c.hrx, &q));
	EXPECT_EQ(q.clients, 0);
	/* the host still sends: nothing may land now */
	memset(c.rx, 0, RXLEN);
	usleep(300000);
	for (size_t i = 0; i < RXLEN; i++)
		if (c.rx[i]) {
			FAIL("byte %zu of the receive memory written after the unbind", i);
			break;
		}
	close(c.nfd);
	EXPECT_OK(unpin(c.fd, c.hrx));
	EXPECT_OK(unpin(c.fd, c.htx));
	close(c.fd);
	close(c.gfd);
	wait_clean();
	if (check_clean("after the unbind"))
		fails++;
	nic_rebind(bdf);
	stop_stream();	/* the NIC works again */
}

/*
 * The unbind while a TX of a million frames with no timeout runs: the call
 * owns the transmit ring, and the unbind must not wait until every frame went
 * (with the link down: forever). The call ends with ENXIO.
 */
static void t_nic_unbind_tx(void)
{
	struct flood_result res = { 0, 0, 0 };
	char bdf[256];
	int st, res_fd;
	double took;
	pid_t pid;

	if (nic_bdf(bdf, sizeof(bdf)))
		return;
	pid = tx_flood(&res_fd);
	usleep(300000);
	took = nic_unbind(bdf);
	EXPECT_EQ(read(res_fd, &res, sizeof(res)), (ssize_t)sizeof(res));
	close(res_fd);
	waitpid(pid, &st, 0);
	EXPECT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	printf("  unbind 300 ms into the TX: took %.0f ms; the TX returned %d (%s), %u of %u frames sent\n",
	       took * 1e3, res.ret, res.ret ? strerror(res.err) : "all sent", res.done, TX_FLOOD);
	EXPECT(took < 1.0);
	EXPECT_EQ(res.ret, -1);
	EXPECT_EQ(res.err, ENXIO);
	EXPECT(res.done < TX_FLOOD);
	wait_clean();
	if (check_clean("after the unbind during TX"))
		fails++;
	nic_rebind(bdf);
}

/*
 * The unbind during a ring-in-memory attach's loopback bootstrap (which
 * holds the NIC's locks a second or more under QEMU): the attach gives up
 * within one try with ENXIO, and the unbind does not wait for the bootstrap.
 */
static void t_nic_unbind_ring(void)
{
	struct ring_attach ra = { 0 };
	char bdf[256];
	double took;
	pthread_t th;
	struct nic c;

	if (nic_bdf(bdf, sizeof(bdf)))
		return;
	nic_init(&c, GPAGE, 0);
	ra.c = &c;
	ra.handle = c.hrx;
	EXPECT_OK(pthread_create(&th, NULL, ring_attach_thread, &ra));
	usleep(200000);
	took = nic_unbind(bdf);
	pthread_join(th, NULL);
	printf("  unbind 200 ms into the ring bootstrap: took %.0f ms; the attach returned %d (%s)\n",
	       took * 1e3, ra.ret, ra.ret ? strerror(ra.err) : "attached");
	/* an unbind alone: ~20 ms, ~250 on the debug kernel; the bootstrap: >= 800 */
	EXPECT(took < 0.6);
	EXPECT_EQ(ra.ret, -1);
	EXPECT_EQ(ra.err, ENXIO);
	close(c.nfd);
	close(c.fd);
	close(c.gfd);
	wait_clean();
	if (check_clean("after the unbind during the ring bootstrap"))
		fails++;
	nic_rebind(bdf);
}

/*
 * Free the GPU memory while frames arrive: quiesce stops the receiver,
 * RX_POLL gives what completed before and then ENODEV, and nothing lands in
 * the memory afterwards (zeroed after the free; the host checks the ivshmem
 * file at the end: HOSTZERO).
 */
static void t_nic_revoke(void)
{
	struct pdma_nic_stats s0, s1;
	struct pdma_nic_cqe e;
	struct nic c;
	int r, n = 0, drained = 0;

	nic_init(&c, GPAGE, 1);
	EXPECT_OK(nic_attach(&c, PDMA_NIC_RX_STRIP_CRC, 2048, RXLEN));
	ready(&c);
	ctl_send(&c, "STREAM %u 512 500", c.seed);
	while (n < 30 && !next_data(&c, &e, 5000)) {
		post(&c, e.buf);
		n++;
	}
	EXPECT_EQ(n, 30);
	s0 = nic_stats(c.nfd);
	EXPECT_OK(gs_free(c.gfd, c.rx_va));	/* cuMemFree: the pin is revoked */
	s1 = nic_stats(c.nfd);
	EXPECT(s1.quiesces > s0.quiesces);
	while ((r = next_cqe(&c, &e, 100)) == 0)
		drained++;
	EXPECT_EQ(r, -ENODEV);
	uint32_t b = 0;
	struct pdma_nic_rx_post p = { .size = sizeof(p), .bufs = (uintptr_t)&b, .n = 1 };

	EXPECT_ERR(ioctl(c.nfd, PDMA_NIC_IOC_RX_POST, &p), ENODEV);
	memset(c.rx, 0, RXLEN);
	usleep(500000);		/* ~1000 more frames sent meanwhile */
	for (size_t i = 0; i < RXLEN; i++)
		if (c.rx[i]) {
			FAIL("byte %zu of the freed memory written after the revoke", i);
			break;
		}
	printf("  revoked after %d frames (%d drained), quiesce took %llu us\n", n, drained,
	       (unsigned long long)(s1.quiesce_ns - s0.quiesce_ns) / 1000);
	printf("HOSTZERO %llu %lu\n", (unsigned long long)c.rx_off, RXLEN);
	ctl_send(&c, "STOP");
	nic_done(&c);
}

/*
 * pdtest nicctl CMD [WANT]: one control frame to nic-host.py and, with WANT,
 * its answer (printed). For tests/vm/nic-system.sh, between runs of
 * `peerdma ingest --path nic`: its buffers are host memory, so that nothing
 * it receives lands in the GPU memory (gpusim) whose bytes the host checks.
 * Without WANT the receive side is left alone (ingest may hold it) and the
 * frame only goes out. The answer is asked for again every 3 s, up to
 * 90 s: QEMU stalls reception for 1 s after the attach, and WAIT is answered
 * only once the host's command has finished.
 */
int nicctl_main(int argc, char **argv)
{
	size_t len = RXLEN + TXLEN;
	struct nic c = { .fd = -1 };
	char out[128] = "";
	uint8_t *mem;
	int ret = 1;

	if (argc < 3 || argc > 4) {
		fprintf(stderr, "usage: pdtest nicctl CMD [WANT]\n");
		return 2;
	}
	mem = aligned_alloc(4096, len);
	if (!mem)
		return 1;
	memset(mem, 0, len);
	c.fd = pd_open();
	c.nfd = nic_open();
	c.rx = mem;
	c.tx = mem + RXLEN;
	c.hrx = pin(c.fd, PEERDMA_KIND_HOST, 0, (uintptr_t)c.rx, RXLEN, NULL);
	c.htx = pin(c.fd, PEERDMA_KIND_HOST, 0, (uintptr_t)c.tx, TXLEN, NULL);
	if (!c.hrx || !c.htx)
		goto out;
	if (argc == 3) {
		ctl_send(&c, "%s", argv[2]);
		ret = fails ? 1 : 0;
		goto out;
	}
	if (nic_attach(&c, 0, 2048, RXLEN)) {
		printf("  nicctl: attach: %s\n", strerror(errno));
		goto out;
	}
	for (int i = 0; i < 30 && ret; i++) {
		ctl_send(&c, "%s", argv[2]);
		if (!wait_ctl(&c, argv[3], out, sizeof(out), 3))
			ret = 0;
	}
	printf("  nicctl: %s -> %s\n", argv[2], ret ? "(no answer)" : out);
	ioctl(c.nfd, PDMA_NIC_IOC_RX_DETACH);
out:
	close(c.nfd);
	close(c.fd);
	free(mem);
	return ret;
}

/*
 * pdtest gpuzero BYTES: zero the first BYTES of the GPU memory (first fit:
 * call it with nothing allocated), so that what tests/vm/nic-system.sh's
 * frames left there does not meet the bytes later tests leave for the host.
 */
int gpuzero_main(int argc, char **argv)
{
	uint64_t size = argc == 3 ? strtoull(argv[2], NULL, 0) : 0, off = 0, va;
	int gfd;
	void *p;

	if (!size)
		return 2;
	gfd = gs_open();
	va = gs_alloc(gfd, size, &off);
	p = va ? map_gpu(gfd, off, size) : NULL;
	if (!p || off) {
		printf("  gpuzero: %s\n", p ? "GPU memory in use below" : "no memory");
		close(gfd);
		return 1;
	}
	memset(p, 0, size);
	munmap(p, size);
	gs_free(gfd, va);
	close(gfd);
	return 0;
}

const struct pd_test pd_nic_tests[] = {
	{ "nic_rx", t_nic_rx },
	{ "nic_errors", t_nic_errors },
	{ "nic_odd", t_nic_odd },
	{ "nic_ring_in_mem", t_nic_ring_in_mem },
	{ "nic_ring_revoke", t_nic_ring_revoke },
	{ "nic_tx", t_nic_tx },
	{ "nic_user_faults", t_nic_user_faults },
	{ "nic_user_stall", t_nic_user_stall },
	{ "nic_tx_kill", t_nic_tx_kill },
	{ "nic_duplex", t_nic_duplex },
	{ "nic_contract", t_nic_contract },
	{ "nic_perf", t_nic_perf },
	{ "nic_kill9", t_nic_kill9 },
	{ "nic_rmmod", t_nic_rmmod },
	{ "nic_unbind", t_nic_unbind },
	{ "nic_unbind_tx", t_nic_unbind_tx },
	{ "nic_unbind_ring", t_nic_unbind_ring },
	{ "nic_revoke", t_nic_revoke },
	{ NULL },
};
