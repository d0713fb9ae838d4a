// SPDX-License-Identifier: MIT
/* Frame rings on the GPU deframer are byte-identical to the CPU deframer's:
 * the same output buffers, tags, stream table and per-frame descriptors
 * (hence the same per-reason frame counters and stream accounting), on the
 * generator's Ethernet frames with every malformed kind inserted, frames
 * with the NIC's checksum flags (trusted, and distrusted beside an error
 * bit), MAC-padded runts and 802.1Q-tagged copies. The region in device
 * memory (frames copied from host memory, in batches of varying size, so the
 * copy stride changes), in registered host memory (zero-copy, frames in
 * device memory), and through GPU batching's entry point
 * (pdma_gpu_batch_frames). Exits 77 without a CUDA device. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "deframe/deframe_cpu.h"
#include "deframe/frame_acct.h"
#include "deframe/gpu_batch.h"
#include "gpu.h"
#include "support/frame_ring.h"

#define PORT 4991

static struct {
	struct pdma_gpu_ops ops;
	void *dl;
	struct pdma_gpu_dfr *g;
	struct pdma_dfr_config cfg;
	struct pdma_frm_cfg fc;
	struct frame_ring r;
	struct pdma_dfr cpu;             /* the reference */
	struct pdma_dfr_desc *cpu_desc, *gpu_desc;
	struct pdma_dfr_tables host;     /* GPU tables copied back */
} F;

static void put16(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

/* Frame i of the ring carries a datagram (as built, no NIC flags). */
static bool good(uint32_t i)
{
	uint32_t off, len;
	return pdma_frm_parse(&F.fc, F.r.base + F.r.fr[i].off, F.r.fr[i].len, 0, &off, &len) == PDMA_FRM_OK;
}

/* The generator's frames (4 streams, loss, duplicates, reordering, one
 * malformed frame after every 9), then NIC flags and extra frames. */
static void build(void)
{
	struct pdma_gen_config gc;
	struct frame_ring *r = &F.r;
	static uint8_t f[FR_BUF + 64];

	pdma_gen_config_default(&gc);
	gc.streams = 4;
	gc.packets = 1500;
	gc.packet_size = 1056;
	gc.loss_pm = 5;
	gc.dup_pm = 10;
	gc.reorder_pm = 10;
	assert_int_equal(frame_ring_build(r, &gc, PORT, 9), 0);
	const uint32_t n0 = r->n;
	/* 802.1Q-tagged copies (duplicates of their datagrams) and MAC-padded
	 * runts, with an FCS's 4 bytes. */
	for (uint32_t i = 3; i < n0 && r->n < n0 + 40; i += 97) {
		const uint8_t *p = r->base + r->fr[i].off;
		uint32_t len = r->fr[i].len;
		if (!good(i))
			continue;
		memcpy(f, p, 12);
		put16(f + 12, 0x8100);
		put16(f + 14, 7);
		memcpy(f + 16, p + 12, len - 12);
		memset(f + len + 4, 0xcc, 4);
		frame_ring_add(r, f, len + 8, 0);
		memcpy(f, p, 34);
		memset(f + 34, 0, 30);
		frame_ring_add(r, f, 64, 0);
	}
	for (uint32_t i = 0; i < n0; i++) {
		uint8_t *p = r->base + r->fr[i].off;
		if (!good(i))
			continue;
		switch (i % 5) {
		case 1: /* the NIC verified both checksums */
			r->fr[i].flags = PDMA_NIC_CQE_EOP | PDMA_NIC_CQE_IPCS | PDMA_NIC_CQE_L4CS;
			if (i % 3 == 0 && r->fr[i].len > 64)
				p[25] ^= 0x40; /* trusted: the wrong IP checksum passes */
			break;
		case 2: /* ... but reported an error: checked here */
			r->fr[i].flags = PDMA_NIC_CQE_EOP | PDMA_NIC_CQE_IPCS | PDMA_NIC_CQE_L4CS | PDMA_NIC_CQE_ERR;
			if (i % 3 == 0 && r->fr[i].len > 64)
				p[25] ^= 0x40;
			break;
		case 3: /* no UDP checksum */
			if (r->fr[i].len > 64 && p[12] == 8 && p[13] == 0)
				put16(p + 40, 0);
			break;
		default:
			break;
		}
	}
}

static int setup(void **state)
{
	(void)state;
	int ret = pdma_gpu_load(&F.ops, &F.dl);
	if (ret == -ENODEV) {
		printf("skipped: no CUDA device\n");
		exit(77);
	}
	if (ret) {
		fprintf(stderr, "GPU present but the deframer module did not load: %s\n", strerror(-ret));
		return -1;
	}
	F.fc = (struct pdma_frm_cfg){ 0, PORT, 0 };
	pdma_dfr_config_default(&F.cfg);
	F.cfg.max_streams = 16;
	F.cfg.out_pkts = 2048;
	F.cfg.max_payload = 2048;
	if (F.ops.open(&F.cfg, 0, &F.g)) {
		fprintf(stderr, "gpu open failed\n");
		return -1;
	}
	printf("GPU: %s\n", F.ops.device_name(F.g));
	size_t ns = F.cfg.max_streams, tags = ns * F.cfg.out_pkts;
	F.host.keys = calloc(ns, 8);
	F.host.plen = calloc(ns, 4);
	F.host.cls = calloc(ns, 8);
	F.host.tags = calloc(tags, 8);
	F.host.out = calloc(tags, F.cfg.max_payload);
	build();
	F.cpu_desc = calloc(F.r.n, sizeof(*F.cpu_desc));
	F.gpu_desc = calloc(F.r.n, sizeof(*F.gpu_desc));
	if (pdma_dfr_init(&F.cpu, &F.cfg))
		return -1;
	/* The reference: the CPU deframer, frame by frame (its descriptors
	 * kept), counted as pdma_dfr_process_frames counts. */
	for (uint32_t i = 0; i < F.r.n; i++) {
		uint32_t len = pdma_dfr_cpu_frame(&F.cfg, &F.cpu.t, &F.fc, F.r.base, &F.r.fr[i], &F.cpu_desc[i]);
		pdma_frm_account(&F.cpu.frames, &F.cpu.acct, &F.cpu_desc[i], len);
	}
	printf("%u frames: %llu datagrams, %llu skipped\n", F.r.n, (unsigned long long)F.cpu.frames.datagrams,
	       (unsigned long long)pdma_frm_skipped_total(&F.cpu.frames));
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	pdma_dfr_fini(&F.cpu);
	frame_ring_fini(&F.r);
	free(F.cpu_desc);
	free(F.gpu_desc);
	free(F.host.keys);
	free(F.host.plen);
	free(F.host.cls);
	free(F.host.tags);
	free(F.host.out);
	if (F.g)
		F.ops.close(F.g);
	pdma_gpu_unload(F.dl);
	return 0;
}

/* GPU stream index j -> CPU stream index, from tables t (keys). */
static void stream_map(const struct pdma_dfr_tables *t, uint32_t *map)
{
	const struct pdma_dfr *cpu = &F.cpu;
	size_t row = (size_t)F.cfg.out_pkts * F.cfg.max_payload;
	uint32_t streams = 0;

	for (uint32_t j = 0; j < F.cfg.max_streams; j++)
		map[j] = UINT32_MAX;
	for (uint32_t k = 0; k < F.cfg.max_streams && cpu->t.keys[k]; k++) {
		uint32_t j;
		for (j = 0; j < F.cfg.max_streams; j++)
			if (t->keys[j] == cpu->t.keys[k])
				break;
		assert_true(j < F.cfg.max_streams);
		map[j] = k;
		streams++;
		assert_int_equal(t->plen[j], cpu->t.plen[k]);
		assert_true(t->cls[j] == cpu->t.cls[k]);
		assert_memory_equal(t->tags + (size_t)j * F.cfg.out_pkts, cpu->t.tags + (size_t)k * F.cfg.out_pkts,
				    F.cfg.out_pkts * 8);
		assert_memory_equal(t->out + j * row, cpu->t.out + k * row, row);
	}
	assert_int_equal(streams, 4);
}

/* The GPU's tables and descriptors against the CPU's: same verdict per
 * frame (which copy of a duplicate is written may differ: DATA_OLD and
 * DATA are one verdict), same counters and stream accounting. */
static void compare(const char *what)
{
	uint32_t map[64];
	struct pdma_acct acct;
	struct pdma_frm_stats fs;

	assert_int_equal(F.ops.read_tables(F.g, &F.host), 0);
	stream_map(&F.host, map);
	memset(&fs, 0, sizeof(fs));
	assert_int_equal(pdma_acct_init(&acct, F.cfg.max_streams), 0);
	for (uint32_t i = 0; i < F.r.n; i++) {
		struct pdma_dfr_desc g = F.gpu_desc[i], c = F.cpu_desc[i];
		int gs = g.status == PDMA_DFR_ST_DATA_OLD ? PDMA_DFR_ST_DATA : g.status;
		int cs = c.status == PDMA_DFR_ST_DATA_OLD ? PDMA_DFR_ST_DATA : c.status;
		if (gs != cs)
			fprintf(stderr, "frame %u: gpu %d cpu %d (count %u / %u)\n", i, gs, cs, g.count, c.count);
		assert_int_equal(gs, cs);
		assert_int_equal(g.stream_id, c.stream_id);
		assert_int_equal(g.count, c.count);
		assert_true(g.pkt == c.pkt);
		if (g.stream != PDMA_DFR_NO_STREAM)
			g.stream = (uint16_t)map[g.stream];
		assert_int_equal(g.stream, c.stream);
		pdma_frm_account(&fs, &acct, &g, gs == PDMA_DFR_ST_DATA ? F.cpu.t.plen[g.stream] : 0);
	}
	assert_memory_equal(&fs, &F.cpu.frames, sizeof(fs));
	for (uint32_t k = 0; k < F.cfg.max_streams; k++) {
		struct pdma_stream_stats a, b;
		bool x = pdma_acct_stream(&acct, k, &a), y = pdma_acct_stream(&F.cpu.acct, k, &b);
		assert_int_equal(x, y);
		if (x)
			assert_memory_equal(&a, &b, sizeof(a));
	}
	assert_memory_equal(acct.malformed_by_code, F.cpu.acct.malformed_by_code, sizeof(acct.malformed_by_code));
	pdma_acct_fini(&acct);
	printf("%s: byte-identical to the CPU deframer (%u frames, %llu skipped)\n", what, F.r.n,
	       (unsigned long long)pdma_frm_skipped_total(&fs));
}

/* Every kind was injected and counted, and a checksum the NIC vouched for
 * was trusted while one beside an error bit was not. */
static void test_reference(void **state)
{
	(void)state;
	for (int k = 1; k < PDMA_FRM_E__MAX; k++) {
		uint64_t extra = k == PDMA_FRM_E_RUNT ? 20 : 0; /* the padded runts */
		if (k == PDMA_FRM_E_IP_CSUM) {
			assert_true(F.cpu.frames.skipped[k] > F.r.injected[k]);
			continue;
		}
		assert_int_equal(F.cpu.frames.skipped[k], F.r.injected[k] + extra);
	}
}

/* The region in device memory, frames from host memory, in batches of
 * 1, 7, 256 and the rest. */
static void test_direct(void **state)
{
	void *dev;
	(void)state;
	size_t bytes = (size_t)F.r.n * FR_BUF;
	assert_int_equal(F.ops.reset_tables(F.g), 0);
	assert_int_equal(F.ops.dev_alloc(F.g, bytes, &dev), 0);
	assert_int_equal(F.ops.upload(F.g, dev, F.r.base, bytes), 0);
	const uint32_t parts[] = { 1, 7, 256, UINT32_MAX };
	uint32_t first = 0;
	for (size_t p = 0; p < 4 && first < F.r.n; p++) {
		uint32_t cnt = F.r.n - first < parts[p] ? F.r.n - first : parts[p];
		assert_int_equal(F.ops.run_frames(F.g, &F.fc, dev, F.r.fr + first, cnt, F.gpu_desc + first), 0);
		first += cnt;
	}
	compare("device-memory region, host frames, 4 batches");
	/* Again over the same tables: every datagram is now old. */
	assert_int_equal(F.ops.run_frames(F.g, &F.fc, dev, F.r.fr, F.r.n, F.gpu_desc), 0);
	for (uint32_t i = 0; i < F.r.n; i++)
		assert_true(F.gpu_desc[i].status != PDMA_DFR_ST_DATA);
	assert_int_equal(F.ops.dev_free(F.g, dev), 0);
}

/* The region in registered host memory, the frames in device memory. */
static void test_zero_copy(void **state)
{
	void *dfr;
	(void)state;
	assert_int_equal(F.ops.reset_tables(F.g), 0);
	assert_int_equal(F.ops.host_register(F.g, F.r.base, (size_t)F.r.n * FR_BUF), 0);
	assert_int_equal(F.ops.dev_alloc(F.g, F.r.n * sizeof(struct pdma_frame), &dfr), 0);
	assert_int_equal(F.ops.upload(F.g, dfr, F.r.fr, F.r.n * sizeof(struct pdma_frame)), 0);
	assert_int_equal(F.ops.run_frames(F.g, &F.fc, F.r.base, dfr, F.r.n, F.gpu_desc), 0);
	compare("registered host region, device frames");
	assert_int_equal(F.ops.dev_free(F.g, dfr), 0);
	assert_int_equal(F.ops.host_unregister(F.g, F.r.base), 0);
}

/* GPU batching's entry point, as `peerdma ingest --path nic` calls it. */
static void test_batch(void **state)
{
	struct pdma_gpu_batch *b;
	struct pdma_dfr d;
	uint32_t map[64];
	(void)state;
	assert_int_equal(pdma_dfr_init(&d, &F.cfg), 0);
	assert_int_equal(pdma_gpu_batch_open(&b, &F.cfg, 0, false, PDMA_INGEST_LAUNCH_DEFAULT, 0, F.r.n), 0);
	assert_int_equal(pdma_gpu_batch_register_mem(b, F.r.base, (size_t)F.r.n * FR_BUF), 0);
	uint32_t half = F.r.n / 2;
	assert_int_equal(pdma_gpu_batch_frames(b, &F.fc, F.r.base, F.r.fr, half, &d.acct, &d.frames), 0);
	assert_int_equal(pdma_gpu_batch_frames(b, &F.fc, F.r.base, F.r.fr + half, F.r.n - half, &d.acct, &d.frames),
			 0);
	assert_int_equal(pdma_gpu_batch_error(b), 0);
	assert_int_equal(pdma_gpu_batch_finish(b, &d), 0);
	pdma_gpu_batch_unregister_mem(b, F.r.base);
	pdma_gpu_batch_close(b);
	assert_memory_equal(&d.frames, &F.cpu.frames, sizeof(d.frames));
	stream_map(&d.t, map);
	for (uint32_t j = 0; j < F.cfg.max_streams; j++) {
		struct pdma_stream_stats a, c;
		if (map[j] == UINT32_MAX)
			continue;
		assert_true(pdma_acct_stream(&d.acct, j, &a));
		assert_true(pdma_acct_stream(&F.cpu.acct, map[j], &c));
		assert_memory_equal(&a, &c, sizeof(a));
	}
	printf("pdma_gpu_batch_frames: counters and tables identical to the CPU deframer's\n");
	pdma_dfr_fini(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reference),
		cmocka_unit_test(test_direct),
		cmocka_unit_test(test_zero_copy),
		cmocka_unit_test(test_batch),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
