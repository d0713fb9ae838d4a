// SPDX-License-Identifier: GPL-2.0
/*
 * pdtest fuzz: random ioctls (well-formed headers mostly, so the checks past
 * them run), reads, closes, GPU frees and client attaches on /dev/peerdma.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <unistd.h>

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

int do_fuzz(int seconds, uint64_t seed)
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
