// SPDX-License-Identifier: GPL-2.0
/*
 * pdtest fuzz: random ioctls (well-formed headers mostly, so the checks past
 * them run), reads, closes, GPU frees and client attaches on /dev/peerdma,
 * and random ioctls of the reference NIC driver (/dev/peerdma_nic0, where it
 * is bound) on those pins.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <unistd.h>

#include <uapi/peerdma_nic.h>
#include "harness.h"

/* xorshift64: the whole run replays from the seed it prints */
static uint64_t rng;

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

/*
 * One NIC ioctl, its fields random but for the ones that would make it wait
 * for ever (RX_POLL and TX timeouts: 0..2 ms) or take seconds each (a
 * ring-in-memory attach: 1 in 8 keep the flag).
 */
static long fuzz_nic(int nfd, int pfd, uint64_t *handles, int nh, void *mem, uint64_t va)
{
	static const unsigned int cmds[] = {
		PDMA_NIC_IOC_INFO, PDMA_NIC_IOC_RX_ATTACH, PDMA_NIC_IOC_RX_POLL,
		PDMA_NIC_IOC_RX_POST, PDMA_NIC_IOC_RX_DOORBELL, PDMA_NIC_IOC_RX_DETACH,
		PDMA_NIC_IOC_TX, PDMA_NIC_IOC_STATS,
	};
	static struct pdma_nic_tx_frame frames[8];
	static struct pdma_nic_cqe cq[8];
	static uint32_t idx[8];
	unsigned int cmd = cmds[rnd() % 8];
	uint64_t buf[16];
	uint32_t *w = (uint32_t *)buf;
	void *arg = buf;

	for (int i = 0; i < 16; i++)
		buf[i] = fuzz_value(handles, nh, mem, va);
	for (int i = 0; i < 8; i++) {
		frames[i] = (struct pdma_nic_tx_frame){
			.offset = rnd() % 2 ? rnd() % (2 * GPAGE) : fuzz_value(handles, nh, mem, va),
			.len = rnd() % 2 ? 60 + rnd() % 1455 : (uint32_t)rnd(),
			.pad = rnd() % 8 ? 0 : (uint32_t)rnd(),
		};
		idx[i] = rnd() % 2 ? rnd() % 32 : (uint32_t)rnd();
	}
	if (rnd() % 4) {
		w[0] = _IOC_SIZE(cmd);
		w[1] = (rnd() % 3) ? 0 : (uint32_t)rnd();
	}
	if (cmd == PDMA_NIC_IOC_RX_ATTACH) {
		struct pdma_nic_rx_attach *a = arg;

		if (rnd() % 2) {
			a->peerdma_fd = pfd;
			a->handle = nh ? handles[rnd() % nh] : 0;
			a->buf_size = rnd() % 2 ? 2048 : 4096;
			a->offset = rnd() % 2 ? 0 : a->offset;
			a->len = rnd() % 2 ? (1 + rnd() % 32) * 2048 : a->len;
			a->ring_entries = rnd() % 2 ? 0 : a->ring_entries;
		}
		if (rnd() % 8)
			a->flags &= ~PDMA_NIC_RX_RING_IN_MEM;
	} else if (cmd == PDMA_NIC_IOC_RX_POLL) {
		struct pdma_nic_rx_poll *p = arg;

		p->timeout_ms = rnd() % 3;
		if (rnd() % 2) {
			p->cqes = (uintptr_t)cq;
			p->max = rnd() % 9;
		}
	} else if (cmd == PDMA_NIC_IOC_RX_POST) {
		struct pdma_nic_rx_post *p = arg;

		if (rnd() % 2) {
			p->bufs = (uintptr_t)idx;
			p->n = rnd() % 9;
		}
	} else if (cmd == PDMA_NIC_IOC_TX) {
		struct pdma_nic_tx *t = arg;

		t->timeout_ms = rnd() % 3;
		if (rnd() % 2) {
			t->peerdma_fd = pfd;
			t->handle = nh ? handles[rnd() % nh] : 0;
			t->frames = (uintptr_t)frames;
			t->n = 1 + rnd() % 8;
		}
	}
	if (rnd() % 16 == 0)
		arg = (void *)(uintptr_t)fuzz_value(handles, nh, mem, va);
	return ioctl(nfd, cmd, arg);
}

int do_fuzz(int seconds, uint64_t seed)
{
	static const unsigned int cmds[] = {
		PEERDMA_IOC_VERSION, PEERDMA_IOC_PIN, PEERDMA_IOC_UNPIN,
		PEERDMA_IOC_QUERY, PEERDMA_IOC_GET_PAGES,
	};
	double end = now() + seconds;
	int fd = pd_open(), gfd = gs_open(), efd = edu_open(), bfd = -1;
	int nfd = open("/dev/peerdma_nic0", O_RDWR | O_CLOEXEC);	/* -1: no NIC bound */
	char *mem = map_anon(8 * PAGE);
	uint64_t handles[64], va = gs_alloc(gfd, 4 * GPAGE, NULL), buf[16];
	int nh = 0;
	long calls = 0, okc = 0, nic_calls = 0;

	rng = seed;
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
			/* other versions of the struct: older, newer (tail random or zero) */
			if (rnd() % 4 == 0) {
				cmd = _IOC(_IOC_READ | _IOC_WRITE, PEERDMA_IOC_MAGIC, _IOC_NR(cmd),
					   8 * (1 + rnd() % 16));
				if (rnd() % 2)
					memset((char *)buf + 48, 0, sizeof(buf) - 48);
			}
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
		} else if (op < 92 && nfd >= 0) {
			r = fuzz_nic(nfd, fd, handles, nh, mem, va);
			calls++;
			nic_calls++;
			if (r == 0)
				okc++;
			else if (errno == 0 || errno > 200)
				FAIL("NIC ioctl: errno %d", errno);
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
	if (nfd >= 0)
		close(nfd);
	close(gfd);
	wait_clean();
	printf("  %sfuzz: %ld calls (%ld of the NIC driver), %ld succeeded\n", ABI_TAG, calls,
	       nic_calls, okc);
	if (check_clean("after fuzz"))
		fails++;
	return fails;
}
