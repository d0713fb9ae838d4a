// SPDX-License-Identifier: MIT
/*
 * The forwarder's sending side without a receive path: a source that
 * publishes blocks of SIZE bytes (one packet each) into a blocks layer as
 * fast as the pool lets it, the forwarder (pdma_fwd_open_sub: the same code
 * as peerdma forward's, from the subscription on) sending them to the
 * consumers that connect. gen -> ingest over loopback UDP cannot feed UCX's
 * tcp transport at its rate, so this is how forward is measured against
 * ucx_perftest (bench_forward.py): the consumer (peerdma consume) reports
 * what arrived per second.
 * Prints "bench_forward: UCX listener on 127.0.0.1:PORT", waits for
 * --consumers live consumers, publishes for --seconds, then ends (END to
 * the consumers) and prints one JSON line of the forwarder's counters.
 * --rate MBPS: the source publishes at that many MB/s (1e6 bytes) at most, as
 * a sender of a fixed rate (a digitizer) does, instead of as fast as it can:
 * the rate forward must sustain without dropping a block.
 * --d2h-peak: instead, the yardstick of the staging path (GPU blocks where
 * UCX has no CUDA): cuMemcpyDtoH of --size bytes from device memory into
 * pinned (cuMemAllocHost), pageable and cuMemHostRegister'ed host memory,
 * back to back for --seconds each; and into the registered memory one copy
 * every 1.28 ms (stage_gpu.py's block rate), as the forwarder copies: an
 * isolated copy pays the GPU's and the link's wake-up, not only bytes / peak.
 * One JSON line (GB/s); exit 77 without a CUDA device.
 * usage: bench_forward [--size B] [--seconds S] [--streams N] [--port P]
 *        [--consumers K] [--pool N] [--credits N] [--eager-max B] [--rate MBPS] [--stage]
 *        [--d2h-peak]
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "blocks/blocks.h"
#include "cuda/api.h"
#include "forward/forward_int.h"

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static int arg_u(int argc, char **argv, int *i, unsigned long long *v)
{
	char *end;

	if (*i + 1 >= argc)
		return -1;
	*v = strtoull(argv[++*i], &end, 0);
	return *end || argv[*i][0] == '-' ? -1 : 0;
}

/* GB/s of cuMemcpyDtoH of n bytes into dst over about secs, counting only
 * the copies' own time; gap_us > 0: one copy every gap_us (the forwarder's
 * way: each copy starts alone), else back to back. < 0 on error. */
static double d2h_rate(const struct pdma_cu_api *cu, pdma_cu_ptr src, void *dst, size_t n,
		       unsigned gap_us, double secs)
{
	const struct timespec gap = { 0, (long)gap_us * 1000 };
	double busy = 0, t0;
	uint64_t k = 0;

	for (int i = 0; i < 3; i++) /* warm up */
		if (cu->MemcpyDtoH(dst, src, n) != PDMA_CU_SUCCESS)
			return -1;
	t0 = now_s();
	do {
		double t = now_s();

		if (cu->MemcpyDtoH(dst, src, n) != PDMA_CU_SUCCESS)
			return -1;
		busy += now_s() - t;
		k++;
		if (gap_us)
			nanosleep(&gap, NULL);
	} while (now_s() - t0 < secs);
	return (double)k * n / busy / 1e9;
}

static int d2h_peak(size_t n, double secs)
{
	const struct pdma_cu_api *cu;
	pdma_cu_device dev;
	pdma_cu_ctx ctx, c;
	pdma_cu_ptr d = 0;
	void *pinned = NULL, *registered = NULL, *pageable = malloc(n);
	char msg[128];
	int ret = 1;

	if (pdma_cu_get(&cu, msg, sizeof(msg))) {
		printf("bench_forward: skipped: no CUDA device (%s)\n", msg);
		free(pageable);
		return 77;
	}
	if (!pageable || cu->DeviceGet(&dev, 0) != PDMA_CU_SUCCESS ||
	    cu->DevicePrimaryCtxRetain(&ctx, dev) != PDMA_CU_SUCCESS) {
		fprintf(stderr, "bench_forward: no CUDA context\n");
		free(pageable);
		return 1;
	}
	cu->CtxPushCurrent(ctx);
	/* registered: malloc'd memory pinned by cuMemHostRegister, as the
	 * forwarder's staging buffers are */
	registered = aligned_alloc(4096, (n + 4095) & ~(size_t)4095);
	if (registered && cu->MemHostRegister(registered, n, PDMA_CU_MEMHOSTREGISTER_PORTABLE) !=
			      PDMA_CU_SUCCESS) {
		free(registered);
		registered = NULL;
	}
	if (registered && cu->MemAlloc(&d, n) == PDMA_CU_SUCCESS &&
	    cu->MemAllocHost(&pinned, n) == PDMA_CU_SUCCESS && cu->MemsetD8(d, 0x5a, n) == PDMA_CU_SUCCESS) {
		double p = d2h_rate(cu, d, pinned, n, 0, secs), q = d2h_rate(cu, d, pageable, n, 0, secs);
		double r = d2h_rate(cu, d, registered, n, 0, secs);
		double o = d2h_rate(cu, d, registered, n, 1280, secs);

		if (p > 0 && q > 0 && r > 0 && o > 0) {
			printf("{\"size\": %zu, \"d2h_pinned_GBps\": %.3f, \"d2h_pageable_GBps\": %.3f, "
			       "\"d2h_registered_GBps\": %.3f, \"d2h_registered_isolated_GBps\": %.3f}\n",
			       n, p, q, r, o);
			ret = 0;
		}
	}
	if (registered) {
		cu->MemHostUnregister(registered);
		free(registered);
	}
	if (ret)
		fprintf(stderr, "bench_forward: a CUDA call failed\n");
	if (pinned)
		cu->MemFreeHost(pinned);
	if (d)
		cu->MemFree(d);
	cu->CtxPopCurrent(&c);
	cu->DevicePrimaryCtxRelease(dev);
	free(pageable);
	return ret;
}

int main(int argc, char **argv)
{
	unsigned long long size = 65536, seconds = 5, streams = 1, port = 0, consumers = 1, pool = 64,
			   credits = 16, eager_max = 0, rate = 0;
	bool stage = false, peak = false;
	struct pdma_dfr_config cfg = { 0 };
	struct pdma_blocks *bl;
	struct pdma_sub_attr sa;
	struct pdma_sub *sub;
	struct pdma_fwd_attr fa;
	struct pdma_fwd *f;
	struct pdma_fwd_stats st;
	char msg[256];
	int ret;

	for (int i = 1; i < argc; i++) {
		unsigned long long *v = !strcmp(argv[i], "--size") ? &size :
					!strcmp(argv[i], "--seconds") ? &seconds :
					!strcmp(argv[i], "--streams") ? &streams :
					!strcmp(argv[i], "--port") ? &port :
					!strcmp(argv[i], "--consumers") ? &consumers :
					!strcmp(argv[i], "--pool") ? &pool :
					!strcmp(argv[i], "--credits") ? &credits :
					!strcmp(argv[i], "--eager-max") ? &eager_max :
					!strcmp(argv[i], "--rate") ? &rate : NULL;

		if (!strcmp(argv[i], "--stage") || !strcmp(argv[i], "--d2h-peak")) {
			*(argv[i][2] == 's' ? &stage : &peak) = true;
			continue;
		}
		if (!v || arg_u(argc, argv, &i, v)) {
			fprintf(stderr, "usage: bench_forward [--size B] [--seconds S] [--streams N] [--port P] "
					"[--consumers K] [--pool N] [--credits N] [--eager-max B] [--rate MBPS] "
					"[--stage] [--d2h-peak]\n");
			return 2;
		}
	}
	if (!size || size % 4 || size > (1u << 30) || !streams || streams > 256 || port > 65535 ||
	    pool < 2 || !credits || eager_max > (1ull << 30)) {
		fprintf(stderr, "bench_forward: --size must be a multiple of 4 (at most 1 GiB), "
				"--streams 1..256, --pool >= 2, --credits >= 1, --eager-max <= 1 GiB\n");
		return 2;
	}
	if (peak)
		return d2h_peak((size_t)size, (double)seconds);
	cfg.max_streams = (uint32_t)streams;
	cfg.out_pkts = 2;
	cfg.max_payload = (uint32_t)size;
	cfg.bytes_per_sample = 4;
	cfg.sample_rate = 10000000;
	ret = pdma_blocks_open(&bl, &cfg, 1, 0, (uint32_t)pool, NULL, NULL);
	if (ret) {
		fprintf(stderr, "bench_forward: blocks: %s\n", strerror(-ret));
		return 1;
	}
	for (uint32_t s = 0; s < streams; s++) {
		bl->st[s].have = true;
		bl->st[s].stream_id = 0x1000 + s;
		/* something other than zeros on the wire */
		for (uint32_t k = 0; k < pool; k++)
			memset(bl->pool_mem + ((size_t)s * pool + k) * bl->buf_bytes, 0x5a + (int)k, size);
	}
	pdma_sub_attr_init(&sa);
	sa.policy = PDMA_SUB_BACKPRESSURE;
	sa.depth = PDMA_FWD_SUB_DEPTH; /* as pdma_fwd_open's */
	ret = pdma_blocks_subscribe(bl, &sa, &sub);
	if (ret) {
		fprintf(stderr, "bench_forward: subscribe: %s\n", strerror(-ret));
		return 1;
	}
	pdma_blocks_start(bl, true);
	pdma_fwd_attr_init(&fa);
	fa.addr = "127.0.0.1";
	fa.port = (uint16_t)port;
	fa.stage = stage;
	fa.max_credits = (uint32_t)credits;
	fa.eager_max = (uint32_t)eager_max;
	fa.stall_ms = 0;
	ret = pdma_fwd_open_sub(sub, &fa, &f, msg, sizeof(msg));
	if (!ret)
		ret = pdma_fwd_start(f);
	if (ret) {
		fprintf(stderr, "bench_forward: %s\n", msg[0] ? msg : strerror(-ret));
		return 1;
	}
	fprintf(stderr, "bench_forward: UCX listener on 127.0.0.1:%u; %s\n", pdma_fwd_port(f),
		pdma_fwd_describe(f));
	double t_wait = now_s();
	do {
		struct timespec ts = { 0, 10 * 1000 * 1000 };

		nanosleep(&ts, NULL);
		pdma_fwd_stats(f, &st);
		if (now_s() - t_wait > 60) {
			fprintf(stderr, "bench_forward: %u of %llu consumers after 60 s\n", st.live, consumers);
			pdma_blocks_end_subs(bl);
			pdma_fwd_close(f);
			return 1;
		}
	} while (st.live < consumers);
	/* the consumers grant their credits right after connecting */
	struct timespec settle = { 0, 100 * 1000 * 1000 };
	nanosleep(&settle, NULL);
	const uint32_t spp = (uint32_t)(size / 4);
	double t0 = now_s(), t1;
	uint64_t seq = 0, published = 0;

	do {
		/* paced: block seq is due at t0 + seq * streams * size / rate */
		if (rate) {
			double due = t0 + (double)seq * (double)streams * (double)size / ((double)rate * 1e6);

			while (now_s() < due)
				;
		}
		for (uint32_t s = 0; s < streams; s++) {
			struct pdma_blk *b;

			pthread_mutex_lock(&bl->lock);
			b = pdma_blocks_get_buf(bl, s); /* waits for a release: backpressure */
			pthread_mutex_unlock(&bl->lock);
			if (!b)
				continue;
			b->mask[0] = 0;
			b->pub.stream_id = 0x1000 + s;
			b->pub.samples_per_packet = spp;
			b->pub.first_sample = seq * spp;
			b->pub.ts_int = b->pub.first_sample / 10000000;
			b->pub.ts_frac = b->pub.first_sample % 10000000;
			b->pub.nsamples = spp;
			b->pub.npackets = 1;
			b->pub.gaps = 0;
			b->pub.seq = seq;
			b->pub.ctx_fields = 0;
			pthread_mutex_lock(&bl->lock);
			published += pdma_blocks_deliver(bl, b) > 0;
			pthread_mutex_unlock(&bl->lock);
		}
		seq++;
		t1 = now_s();
	} while (t1 - t0 < (double)seconds);
	pdma_blocks_stop(bl);
	pdma_blocks_end_subs(bl);
	pdma_fwd_stats(f, &st);
	pdma_fwd_close(f);
	printf("{\"size\": %llu, \"seconds\": %.6f, \"published\": %llu, \"offered_MBps\": %.1f, "
	       "\"blocks_in\": %llu, \"sent_blocks\": %llu, \"sent_bytes\": %llu, \"dropped_blocks\": %llu, "
	       "\"staged_blocks\": %llu, \"eager_blocks\": %llu, \"sent_MBps\": %.1f}\n", size, t1 - t0,
	       (unsigned long long)published, (double)published * (double)size / (t1 - t0) / 1e6,
	       (unsigned long long)st.blocks_in, (unsigned long long)st.sent_blocks,
	       (unsigned long long)st.sent_bytes, (unsigned long long)st.dropped_blocks,
	       (unsigned long long)st.staged_blocks, (unsigned long long)st.eager_blocks,
	       st.sent_bytes / (t1 - t0) / 1e6);
	pdma_blocks_close(bl, NULL, NULL);
	return 0;
}
