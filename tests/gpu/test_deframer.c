// SPDX-License-Identifier: MIT
/* The GPU deframer is byte-identical to the CPU deframer: same output
 * buffers, tags (gap flags), stream table and per-packet descriptors, hence
 * the same accounting, for the three GPU receive paths: ring in GPU memory
 * ("direct"), zero-copy (mapped pinned host ring) and host-staged (copy
 * engine chunks). Exits 77 without a CUDA device. */
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

#include "gpu.h"
#include "ingest.h"

#define SLOT 2048u

struct fixture {
	struct pdma_gpu_ops ops;
	void *dl;
	struct pdma_gpu_dfr *g;
	struct pdma_dfr_config cfg;
	struct pdma_ring ring;
	uint32_t n;
	struct pdma_dfr cpu;
	struct pdma_dfr_desc *cpu_desc, *gpu_desc;
	struct pdma_dfr_tables host; /* GPU tables copied back */
};

static struct fixture F;

/* Interleave two generators (different packet sizes, loss, dup, reorder),
 * then break a few packets in place so malformed handling is compared too. */
static void fill_ring(void)
{
	struct pdma_gen_config a, b;
	struct pdma_gen *ga, *gb;
	uint32_t si;
	int len = 1;
	uint64_t i = 0;

	pdma_gen_config_default(&a);
	a.streams = 4;
	a.packets = 3000;
	a.packet_size = 1056;
	a.loss_pm = 5;
	a.loss_burst = 16;
	a.dup_pm = 10;
	a.reorder_pm = 10;
	b = a;
	b.streams = 3;
	b.stream_id_base = 0x2000;
	b.packet_size = 288;
	b.trailer = false;
	b.seed = 5;
	assert_int_equal(pdma_gen_open(&a, &ga), 0);
	assert_int_equal(pdma_gen_open(&b, &gb), 0);
	assert_int_equal(pdma_ring_init(&F.ring, 32768, SLOT), 0);
	bool done[2] = { false, false };
	for (int turn = 0; !(done[0] && done[1]); turn++) {
		int w = turn % 2;
		if (done[w])
			continue;
		uint8_t *s = pdma_ring_slot(&F.ring, i);
		struct pdma_slot_hdr *h = (struct pdma_slot_hdr *)s;
		len = pdma_gen_next(w ? gb : ga, s + PDMA_SLOT_HDR, SLOT - PDMA_SLOT_HDR, &si);
		assert_true(len >= 0);
		if (len == 0) {
			done[w] = true;
			continue;
		}
		h->len = (uint32_t)len;
		h->flags = 0;
		h->rx_seq = i;
		i++;
		assert_true(i < F.ring.nslots);
	}
	F.n = (uint32_t)i;
	for (uint64_t k = 100; k < i; k += 997) {
		uint8_t *s = pdma_ring_slot(&F.ring, k);
		switch ((k / 997) % 4) {
		case 0: s[PDMA_SLOT_HDR] = 0x9c; break;                        /* reserved type */
		case 1: ((struct pdma_slot_hdr *)s)->len -= 4; break;          /* truncated */
		case 2: s[PDMA_SLOT_HDR + 8] = 0xff; break;                    /* class reserved bits */
		case 3: ((struct pdma_slot_hdr *)s)->flags = PDMA_SLOT_TRUNC; break;
		}
	}
	pdma_gen_close(ga);
	pdma_gen_close(gb);
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
	pdma_dfr_config_default(&F.cfg);
	F.cfg.max_streams = 16;
	F.cfg.out_pkts = 4096;
	F.cfg.max_payload = 2048;
	if (F.ops.open(&F.cfg, 0, &F.g)) {
		fprintf(stderr, "gpu open failed\n");
		return -1;
	}
	printf("GPU: %s\n", F.ops.device_name(F.g));
	fill_ring();
	/* CPU reference: descriptors and tables. */
	assert_int_equal(pdma_dfr_init(&F.cpu, &F.cfg), 0);
	F.cpu_desc = calloc(F.n, sizeof(*F.cpu_desc));
	F.gpu_desc = calloc(F.n, sizeof(*F.gpu_desc));
	for (uint32_t i = 0; i < F.n; i++) {
		uint32_t len = pdma_dfr_cpu_slot(&F.cpu.cfg, &F.cpu.t, pdma_ring_slot(&F.ring, i),
						  F.ring.slot_size, &F.cpu_desc[i]);
		pdma_acct_add(&F.cpu.acct, &F.cpu_desc[i], len);
	}
	size_t ns = F.cfg.max_streams, tags = ns * F.cfg.out_pkts;
	F.host.keys = calloc(ns, 8);
	F.host.plen = calloc(ns, 4);
	F.host.tags = calloc(tags, 8);
	F.host.out = malloc(tags * F.cfg.max_payload);
	printf("%u packets in the ring\n", F.n);
	/* Pinned and mapped once: zero-copy reads it, host-staged copies it. */
	if (F.ops.host_register(F.g, F.ring.base, F.ring.bytes)) {
		fprintf(stderr, "host_register: %s\n", F.ops.last_error(F.g));
		return -1;
	}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	if (F.g) {
		F.ops.host_unregister(F.g, F.ring.base);
		F.ops.close(F.g);
	}
	pdma_gpu_unload(F.dl);
	pdma_dfr_fini(&F.cpu);
	pdma_ring_fini(&F.ring);
	free(F.cpu_desc);
	free(F.gpu_desc);
	free(F.host.keys);
	free(F.host.plen);
	free(F.host.tags);
	free(F.host.out);
	return 0;
}

/* Compare the GPU result (F.host, F.gpu_desc) with the CPU one. Stream table
 * indices may differ (GPU claims entries concurrently): map by stream ID. */
static void compare(const char *what)
{
	uint32_t map[64];
	size_t row = (size_t)F.cfg.out_pkts * F.cfg.max_payload;
	uint32_t streams = 0;

	assert_int_equal(F.ops.read_tables(F.g, &F.host), 0);
	for (uint32_t j = 0; j < F.cfg.max_streams; j++)
		map[j] = UINT32_MAX;
	for (uint32_t k = 0; k < F.cfg.max_streams && F.cpu.t.keys[k]; k++) {
		uint32_t j;
		for (j = 0; j < F.cfg.max_streams; j++)
			if (F.host.keys[j] == F.cpu.t.keys[k])
				break;
		assert_true(j < F.cfg.max_streams);
		map[j] = k;
		streams++;
		assert_int_equal(F.host.plen[j], F.cpu.t.plen[k]);
		assert_memory_equal(F.host.tags + (size_t)j * F.cfg.out_pkts,
				    F.cpu.t.tags + (size_t)k * F.cfg.out_pkts, F.cfg.out_pkts * 8);
		assert_memory_equal(F.host.out + j * row, F.cpu.t.out + k * row, row);
	}
	assert_int_equal(streams, 7);
	/* Descriptors: same verdict per packet (which copy of a duplicate is
	 * the one written may differ: DATA_OLD and DATA are one verdict). */
	struct pdma_acct acct;
	assert_int_equal(pdma_acct_init(&acct, F.cfg.max_streams), 0);
	uint64_t malformed = 0;
	for (uint32_t i = 0; i < F.n; i++) {
		struct pdma_dfr_desc g = F.gpu_desc[i], c = F.cpu_desc[i];
		int gs = g.status == PDMA_DFR_ST_DATA_OLD ? PDMA_DFR_ST_DATA : g.status;
		int cs = c.status == PDMA_DFR_ST_DATA_OLD ? PDMA_DFR_ST_DATA : c.status;
		assert_int_equal(gs, cs);
		assert_int_equal(g.stream_id, c.stream_id);
		assert_int_equal(g.count, c.count);
		assert_true(g.pkt == c.pkt);
		if (g.stream != PDMA_DFR_NO_STREAM)
			g.stream = (uint16_t)map[g.stream];
		assert_int_equal(g.stream, c.stream);
		malformed += g.status < 0;
		uint32_t len = (gs == PDMA_DFR_ST_DATA) ? F.cpu.t.plen[g.stream] : 0;
		pdma_acct_add(&acct, &g, len);
	}
	assert_true(malformed >= 4);
	for (uint32_t k = 0; k < F.cfg.max_streams; k++) {
		struct pdma_stream_stats a, b;
		bool x = pdma_acct_stream(&acct, k, &a), y = pdma_acct_stream(&F.cpu.acct, k, &b);
		assert_int_equal(x, y);
		if (x)
			assert_memory_equal(&a, &b, sizeof(a));
	}
	assert_memory_equal(acct.malformed_by_code, F.cpu.acct.malformed_by_code,
			    sizeof(acct.malformed_by_code));
	pdma_acct_fini(&acct);
	printf("%s: byte-identical to the CPU deframer (%u streams, %llu malformed)\n", what,
	       streams, (unsigned long long)malformed);
}

static void test_direct(void **state)
{
	void *d;
	(void)state;
	assert_int_equal(F.ops.reset_tables(F.g), 0);
	assert_int_equal(F.ops.dev_alloc(F.g, F.ring.bytes, &d), 0);
	/* Stand-in for the device writing into a ring in GPU memory. */
	assert_int_equal(F.ops.upload(F.g, d, F.ring.base, F.ring.bytes), 0);
	memset(F.gpu_desc, 0xee, F.n * sizeof(*F.gpu_desc));
	assert_int_equal(F.ops.run(F.g, d, F.ring.slot_size, F.n, F.gpu_desc), 0);
	compare("direct (ring in GPU memory)");
	assert_int_equal(F.ops.dev_free(F.g, d), 0);
}

static void test_zero_copy(void **state)
{
	(void)state;
	assert_int_equal(F.ops.reset_tables(F.g), 0);
	memset(F.gpu_desc, 0xee, F.n * sizeof(*F.gpu_desc));
	assert_int_equal(F.ops.run(F.g, F.ring.base, F.ring.slot_size, F.n, F.gpu_desc), 0);
	compare("zero-copy (mapped pinned host ring)");
}

static void test_host_staged(void **state)
{
	(void)state;
	assert_int_equal(F.ops.reset_tables(F.g), 0);
	memset(F.gpu_desc, 0xee, F.n * sizeof(*F.gpu_desc));
	assert_int_equal(F.ops.run_staged(F.g, F.ring.base, F.ring.slot_size, F.n, 1u << 20,
					  F.gpu_desc), 0);
	compare("host-staged (1 MiB copy-engine chunks)");
}

/* Processing the same packets twice changes nothing (newer wins, stale and
 * duplicate packets never overwrite). */
static void test_idempotent(void **state)
{
	(void)state;
	assert_int_equal(F.ops.reset_tables(F.g), 0);
	assert_int_equal(F.ops.run(F.g, F.ring.base, F.ring.slot_size, F.n, NULL), 0);
	assert_int_equal(F.ops.run(F.g, F.ring.base, F.ring.slot_size, F.n, F.gpu_desc), 0);
	assert_int_equal(F.ops.read_tables(F.g, &F.host), 0);
	uint64_t old = 0;
	for (uint32_t i = 0; i < F.n; i++) {
		assert_int_not_equal(F.gpu_desc[i].status, PDMA_DFR_ST_DATA);
		old += F.gpu_desc[i].status == PDMA_DFR_ST_DATA_OLD;
	}
	assert_true(old > 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_direct),
		cmocka_unit_test(test_zero_copy),
		cmocka_unit_test(test_host_staged),
		cmocka_unit_test(test_idempotent),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
