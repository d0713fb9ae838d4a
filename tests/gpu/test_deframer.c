// SPDX-License-Identifier: MIT
/* The GPU deframer is byte-identical to the CPU deframer: same output
 * buffers, tags (gap flags), stream table and per-packet descriptors, hence
 * the same accounting, for the three GPU receive paths: ring in GPU memory
 * ("direct"), zero-copy (mapped pinned host ring) and host-staged (copy
 * engine chunks); with stream launch and with CUDA graph launch (whole rings
 * and small batches of varying size, so graphs are built, replayed with new
 * parameters and evicted); and for each kernel (auto, v11, v16, v7s), on a ring
 * whose payloads all allow 16-byte copies as well as on one whose payloads do
 * not, and on two rings of packed slots (deframe.h) sized to small datagrams
 * (64- and 284-byte packets in 304-byte slots; 64- and 92-byte ones in
 * 112-byte slots, whose payloads of at most 64 bytes run v16's tiny
 * instance, dfr_tiny_pass, once the longest payload is known) and one of
 * tiny slots (64- and 72-byte packets in 80-byte slots, the datagram at byte
 * 4, no tail copy: dfr_tiny80_pass takes the trailer from the 80 bytes it
 * loads, the other passes read it; it stores the 32-byte payloads from each
 * packet's own thread, the 44-byte ones with the warp copy). The rings hold
 * malformed packets, failing
 * trailers among them (alone and beside a valid copy of the same packet),
 * and slots with and without the receive side's copy of the datagram's last
 * word (PDMA_SLOT_TAIL), which the fast path trusts (test_slot_tail shows it
 * does). Exits 77 without a CUDA device. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "deframe/acct.h"
#include "deframe/deframe_cpu.h"
#include "gen/gen.h"
#include "gpu.h"
#include "support/gen_ring.h"
#include "rx/ring.h"

#define SLOT 2048u

/* One ring and its CPU reference. */
struct ringref {
	const char *name;
	struct pdma_ring ring;
	bool packed;
	bool tiny; /* packed, payloads of 32 and 64 bytes */
	bool t80;  /* tiny slots (80 bytes), payloads of 32 and 44 bytes */
	uint32_t n;
	uint32_t streams;
	struct pdma_dfr cpu;
	struct pdma_dfr_desc *cpu_desc;
	void *dev; /* device copy ("direct") */
};

struct fixture {
	struct pdma_gpu_ops ops;
	void *dl;
	struct pdma_gpu_dfr *g;
	struct pdma_dfr_config cfg;
	struct ringref mixed, aligned, packed, tiny, t80;
	struct pdma_dfr_desc *gpu_desc;
	struct pdma_dfr_tables host; /* GPU tables copied back */
};

static struct fixture F;

/* Interleave two generators (different packet sizes, loss, dup, reorder),
 * then break a few packets in place so malformed handling is compared too.
 * R->packed: 64- and 284-byte packets in packed 304-byte slots; R->tiny: 64-
 * and 92-byte packets (32- and 64-byte payloads) in packed 112-byte slots;
 * R->t80: 64- and 72-byte packets (32 and 44, no trailer) in 80-byte tiny
 * slots.
 * mixed: the second generator's payloads (260 bytes, no trailer) are not a
 * multiple of 16, so groups with them take the 4-byte copy; aligned: 1024-
 * and 256-byte payloads only (16-byte copies). */
static void fill_ring(struct ringref *R, bool aligned)
{
	struct pdma_gen_config a, b;

	pdma_gen_config_default(&a);
	a.streams = 4;
	a.packets = 3000;
	a.packet_size = R->packed ? 64 : 1056;
	a.loss_pm = 5;
	a.loss_burst = 16;
	a.dup_pm = 10;
	a.reorder_pm = 10;
	b = a;
	b.streams = 3;
	b.stream_id_base = 0x2000;
	b.packet_size = R->t80 ? 72 : R->tiny ? 92 : aligned ? 284 : 288;
	b.trailer = false;
	b.seed = aligned ? 9 : 5;
	R->streams = 7;
	assert_int_equal(pdma_ring_init(&R->ring, 32768, R->t80 ? 80 : R->tiny ? 112 : R->packed ? 304 : SLOT,
				       R->t80 ? PDMA_RING_TINY : R->packed ? PDMA_RING_PACKED : PDMA_RING_FULL), 0);
	const uint32_t off = R->ring.dgram_off, ss = R->ring.slot_size;
	const uint16_t lay = R->t80 ? PDMA_SLOT_TINY : R->packed ? PDMA_SLOT_PACKED : 0;
	const uint64_t i = gen_ring_fill2(&R->ring, &a, &b, false);
	R->n = (uint32_t)i;
	/* Failing trailers (an indicator without its enable), alone and next to
	 * a valid copy of the same packet, before or after it: the valid copy
	 * must win its position whichever comes first. */
	for (uint64_t k = 50; k + 1 < i; k += 211) {
		uint8_t *s = pdma_ring_slot(&R->ring, k);
		const struct pdma_slot_hdr *h = (const struct pdma_slot_hdr *)s;
		if (!(s[off] & 0x04) || (s[off] >> 4) != 1)
			continue; /* not a data packet with a trailer */
		const uint32_t kind = (uint32_t)(k / 211) % 3;
		if (kind)
			memcpy(pdma_ring_slot(&R->ring, k + 1), s, ss);
		uint8_t *t = (kind == 2 ? pdma_ring_slot(&R->ring, k + 1) : s) + off + h->len - 4;
		t[2] |= 0x01;  /* indicator bit 8 ... */
		t[1] &= ~0x10; /* ... without enable bit 20 */
	}
	for (uint64_t k = 100; k < i; k += 997) {
		uint8_t *s = pdma_ring_slot(&R->ring, k);
		switch ((k / 997) % 4) {
		case 0: s[off] = 0x9c; break;                                  /* reserved type */
		case 1: ((struct pdma_slot_hdr *)s)->len -= 4; break;          /* truncated */
		case 2: s[off + 8] = 0xff; break;                              /* class reserved bits */
		case 3: ((struct pdma_slot_hdr *)s)->flags = PDMA_SLOT_TRUNC | lay; break;
		}
	}
	/* No packet here changes its stream's class ID: within one launch the
	 * GPU's first claim of a stream's class (like its payload size) goes to
	 * whichever lane gets there first, so a changed class could win on the
	 * GPU and lose on the CPU. compare() checks the class each stream
	 * holds; the refusal itself is test_ingest_dfr's test_class_mismatch. */
	/* The receive side's slot header, as the datagrams (mutated ones
	 * included) arrived: with the copy of the last word in two of three
	 * slots, without it (a producer that cannot keep that promise) in the
	 * third, so both ways of reading the trailer run. */
	for (uint64_t k = 0; k < i; k++) {
		uint8_t *s = pdma_ring_slot(&R->ring, k);
		const struct pdma_slot_hdr *h = (const struct pdma_slot_hdr *)s;
		if (k % 3)
			pdma_slot_finish(s, off, h->len, h->flags & PDMA_SLOT_TRUNC, (uint32_t)k);
	}
	/* Headers claiming more than their slot holds (a corrupt producer):
	 * truncated on every path, host-staged copies of each slot's span
	 * (fewer bytes than the slot) included. */
	for (uint64_t k = 150; k < i; k += 1499)
		((struct pdma_slot_hdr *)pdma_ring_slot(&R->ring, k))->len = (uint16_t)ss;
}

static int ring_setup(struct ringref *R, const char *name, bool aligned)
{
	R->name = name;
	fill_ring(R, aligned);
	/* CPU reference: descriptors and tables. */
	assert_int_equal(pdma_dfr_init(&R->cpu, &F.cfg), 0);
	R->cpu_desc = calloc(R->n, sizeof(*R->cpu_desc));
	assert_non_null(R->cpu_desc);
	for (uint32_t i = 0; i < R->n; i++) {
		uint32_t len = pdma_dfr_cpu_slot(&R->cpu.cfg, &R->cpu.t, pdma_ring_slot(&R->ring, i),
						 R->ring.slot_size, &R->cpu_desc[i]);
		pdma_acct_add(&R->cpu.acct, &R->cpu_desc[i], len);
	}
	printf("%s ring: %u packets\n", name, R->n);
	/* Pinned and mapped once: zero-copy reads it, host-staged copies it. */
	if (F.ops.host_register(F.g, R->ring.base, R->ring.bytes)) {
		fprintf(stderr, "host_register: %s\n", F.ops.last_error(F.g));
		return -1;
	}
	/* Stand-in for a device writing into a ring in GPU memory. */
	if (F.ops.dev_alloc(F.g, R->ring.bytes, &R->dev) ||
	    F.ops.upload(F.g, R->dev, R->ring.base, R->ring.bytes)) {
		fprintf(stderr, "device ring: %s\n", F.ops.last_error(F.g));
		return -1;
	}
	return 0;
}

static void ring_teardown(struct ringref *R)
{
	if (F.g && R->ring.base) {
		F.ops.host_unregister(F.g, R->ring.base);
		if (R->dev)
			F.ops.dev_free(F.g, R->dev);
	}
	pdma_dfr_fini(&R->cpu);
	pdma_ring_fini(&R->ring);
	free(R->cpu_desc);
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
	printf("GPU: %s, kernel %s, %s launch\n", F.ops.device_name(F.g), F.ops.kernel_name(F.g),
	       F.ops.get_launch(F.g) == PDMA_GPU_LAUNCH_GRAPH ? "graph" : "stream");
	size_t ns = F.cfg.max_streams, tags = ns * F.cfg.out_pkts;
	F.host.keys = calloc(ns, 8);
	F.host.plen = calloc(ns, 4);
	F.host.cls = calloc(ns, 8);
	F.host.tags = calloc(tags, 8);
	F.host.out = malloc(tags * F.cfg.max_payload);
	F.gpu_desc = calloc(32768, sizeof(*F.gpu_desc));
	F.packed.packed = true;
	F.tiny.packed = F.tiny.tiny = true;
	F.t80.packed = F.t80.t80 = true;
	if (ring_setup(&F.mixed, "mixed", false) || ring_setup(&F.aligned, "aligned", true) ||
	    ring_setup(&F.packed, "packed", true) || ring_setup(&F.tiny, "tiny", true) ||
	    ring_setup(&F.t80, "tiny slots", true))
		return -1;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	ring_teardown(&F.mixed);
	ring_teardown(&F.aligned);
	ring_teardown(&F.packed);
	ring_teardown(&F.tiny);
	ring_teardown(&F.t80);
	if (F.g)
		F.ops.close(F.g);
	pdma_gpu_unload(F.dl);
	free(F.gpu_desc);
	free(F.host.keys);
	free(F.host.plen);
	free(F.host.cls);
	free(F.host.tags);
	free(F.host.out);
	return 0;
}

/* Compare the GPU result (F.host, F.gpu_desc) with the CPU one. Stream table
 * indices may differ (GPU claims entries concurrently): map by stream ID. */
static void compare(struct ringref *R, const char *what)
{
	uint32_t map[64];
	size_t row = (size_t)F.cfg.out_pkts * F.cfg.max_payload;
	uint32_t streams = 0;
	struct pdma_dfr *cpu = &R->cpu;

	assert_int_equal(F.ops.read_tables(F.g, &F.host), 0);
	for (uint32_t j = 0; j < F.cfg.max_streams; j++)
		map[j] = UINT32_MAX;
	for (uint32_t k = 0; k < F.cfg.max_streams && cpu->t.keys[k]; k++) {
		uint32_t j;
		for (j = 0; j < F.cfg.max_streams; j++)
			if (F.host.keys[j] == cpu->t.keys[k])
				break;
		assert_true(j < F.cfg.max_streams);
		map[j] = k;
		streams++;
		assert_int_equal(F.host.plen[j], cpu->t.plen[k]);
		assert_true(F.host.cls[j] == cpu->t.cls[k]);
		assert_memory_equal(F.host.tags + (size_t)j * F.cfg.out_pkts,
				    cpu->t.tags + (size_t)k * F.cfg.out_pkts, F.cfg.out_pkts * 8);
		assert_memory_equal(F.host.out + j * row, cpu->t.out + k * row, row);
	}
	assert_int_equal(streams, R->streams);
	/* Descriptors: same verdict per packet (which copy of a duplicate is
	 * the one written may differ: DATA_OLD and DATA are one verdict). */
	struct pdma_acct acct;
	assert_int_equal(pdma_acct_init(&acct, F.cfg.max_streams), 0);
	uint64_t malformed = 0;
	for (uint32_t i = 0; i < R->n; i++) {
		struct pdma_dfr_desc g = F.gpu_desc[i], c = R->cpu_desc[i];
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
		uint32_t len = (gs == PDMA_DFR_ST_DATA) ? cpu->t.plen[g.stream] : 0;
		pdma_acct_add(&acct, &g, len);
	}
	assert_true(malformed >= 4);
	for (uint32_t k = 0; k < F.cfg.max_streams; k++) {
		struct pdma_stream_stats a, b;
		bool x = pdma_acct_stream(&acct, k, &a), y = pdma_acct_stream(&cpu->acct, k, &b);
		assert_int_equal(x, y);
		if (x)
			assert_memory_equal(&a, &b, sizeof(a));
	}
	assert_memory_equal(acct.malformed_by_code, cpu->acct.malformed_by_code,
			    sizeof(acct.malformed_by_code));
	pdma_acct_fini(&acct);
	printf("%s, %s ring, kernel %s, %s launch: byte-identical to the CPU deframer (%u streams, "
	       "%llu malformed)\n", what, R->name, F.ops.kernel_name(F.g),
	       F.ops.get_launch(F.g) == PDMA_GPU_LAUNCH_GRAPH ? "graph" : "stream", streams,
	       (unsigned long long)malformed);
}

static void begin(int mode)
{
	assert_int_equal(F.ops.set_launch(F.g, mode), 0);
	assert_int_equal(F.ops.reset_tables(F.g), 0);
	memset(F.gpu_desc, 0xee, 32768 * sizeof(*F.gpu_desc));
}

/* A graph run must not have fallen back to streams. */
static void end(int mode)
{
	assert_int_equal(F.ops.get_launch(F.g), mode);
}

/* STAGED passes each batch's span (pdma_slots_span: 1152 of the mixed
 * ring's 2048 bytes), copied under stream launch (graphs copy whole
 * slots); STAGED_WHOLE passes none. */
enum path { DIRECT, ZERO_COPY, STAGED, STAGED_WHOLE };

/* The ring in batches of sizes from sizes[] (cycled; 0: the rest), each a
 * separate run (descriptors into place). */
static void run_batches(struct ringref *R, enum path p, const uint32_t *sizes, size_t nsizes, size_t chunk)
{
	uint32_t first = 0;
	for (size_t k = 0; first < R->n; k++) {
		uint32_t cnt = sizes[k % nsizes];
		if (cnt == 0 || cnt > R->n - first)
			cnt = R->n - first;
		size_t o = (size_t)first * R->ring.slot_size;
		int e;
		switch (p) {
		case DIRECT:
			e = F.ops.run(F.g, (uint8_t *)R->dev + o, R->ring.slot_size, cnt, F.gpu_desc + first);
			break;
		case ZERO_COPY:
			e = F.ops.run(F.g, R->ring.base + o, R->ring.slot_size, cnt, F.gpu_desc + first);
			break;
		case STAGED:
			e = F.ops.run_staged(F.g, R->ring.base + o, R->ring.slot_size,
					     pdma_slots_span(R->ring.base + o, R->ring.slot_size, cnt), cnt, chunk,
					     F.gpu_desc + first);
			break;
		default:
			e = F.ops.run_staged(F.g, R->ring.base + o, R->ring.slot_size, 0, cnt, chunk,
					     F.gpu_desc + first);
			break;
		}
		if (e)
			fprintf(stderr, "%s\n", F.ops.last_error(F.g));
		assert_int_equal(e, 0);
		first += cnt;
	}
}

static const uint32_t WHOLE[] = { 0 };

static void test_direct(void **state)
{
	(void)state;
	begin(PDMA_GPU_LAUNCH_STREAM);
	run_batches(&F.mixed, DIRECT, WHOLE, 1, 0);
	compare(&F.mixed, "direct (ring in GPU memory)");
}

static void test_zero_copy(void **state)
{
	(void)state;
	begin(PDMA_GPU_LAUNCH_STREAM);
	run_batches(&F.mixed, ZERO_COPY, WHOLE, 1, 0);
	compare(&F.mixed, "zero-copy (mapped pinned host ring)");
}

static void test_host_staged(void **state)
{
	(void)state;
	begin(PDMA_GPU_LAUNCH_STREAM);
	run_batches(&F.mixed, STAGED, WHOLE, 1, 1u << 20);
	compare(&F.mixed, "host-staged (1 MiB copy-engine chunks, each slot's span)");
	begin(PDMA_GPU_LAUNCH_STREAM);
	run_batches(&F.mixed, STAGED_WHOLE, WHOLE, 1, 1u << 20);
	compare(&F.mixed, "host-staged (1 MiB copy-engine chunks, whole slots)");
}

static void test_graph_direct(void **state)
{
	(void)state;
	begin(PDMA_GPU_LAUNCH_GRAPH);
	run_batches(&F.mixed, DIRECT, WHOLE, 1, 0);
	end(PDMA_GPU_LAUNCH_GRAPH);
	compare(&F.mixed, "direct, one graph launch");
}

/* Small and odd batch sizes: graphs replayed with new addresses, counts and
 * grid sizes. */
static const uint32_t SMALL[] = { 16, 1, 64, 31, 256, 500, 4096, 16, 2000 };

static void test_graph_zero_copy_batches(void **state)
{
	(void)state;
	begin(PDMA_GPU_LAUNCH_GRAPH);
	run_batches(&F.mixed, ZERO_COPY, SMALL, sizeof(SMALL) / sizeof(SMALL[0]), 0);
	end(PDMA_GPU_LAUNCH_GRAPH);
	compare(&F.mixed, "zero-copy, small batches (1..4096 packets)");
}

/* 64 KiB chunks (32 slots): batches of 1 to 128 chunks, so staged graphs of
 * 1..32 chunks, several graph launches per batch, and more shapes than the
 * graph cache holds. */
static void test_graph_host_staged_batches(void **state)
{
	(void)state;
	static const uint32_t sizes[] = { 16, 64, 33, 4096, 500, 1, 1000, 95, 2047, 700, 129, 3000, 160 };
	begin(PDMA_GPU_LAUNCH_GRAPH);
	run_batches(&F.mixed, STAGED, sizes, sizeof(sizes) / sizeof(sizes[0]), 64u << 10);
	end(PDMA_GPU_LAUNCH_GRAPH);
	compare(&F.mixed, "host-staged, 64 KiB chunks, batches of 1..4096 packets");
}

static void test_graph_host_staged_aligned(void **state)
{
	(void)state;
	begin(PDMA_GPU_LAUNCH_GRAPH);
	run_batches(&F.aligned, STAGED, WHOLE, 1, 1u << 20);
	end(PDMA_GPU_LAUNCH_GRAPH);
	compare(&F.aligned, "host-staged, 1 MiB chunks");
}

/* Every kernel (auto, v11, v16, v7s), both rings, direct (whole ring and small
 * batches) and zero-copy, graph launch and stream launch. Names that are not
 * a kernel, the variants measured and removed among them, are refused. */
static void test_kernels(void **state)
{
	static const char *names[] = { "v7s", "v11", "v16", "auto" };
	(void)state;
	char was[16];
	snprintf(was, sizeof(was), "%s", F.ops.kernel_name(F.g));
	for (size_t v = 0; v < sizeof(names) / sizeof(names[0]); v++) {
		assert_int_equal(F.ops.set_kernel(F.g, names[v]), 0);
		assert_string_equal(F.ops.kernel_name(F.g), names[v]);
		struct ringref *rings[5] = { &F.mixed, &F.aligned, &F.packed, &F.tiny, &F.t80 };
		for (int r = 0; r < 5; r++) {
			begin(PDMA_GPU_LAUNCH_GRAPH);
			run_batches(rings[r], DIRECT, WHOLE, 1, 0);
			end(PDMA_GPU_LAUNCH_GRAPH);
			compare(rings[r], "direct");
			begin(PDMA_GPU_LAUNCH_GRAPH);
			run_batches(rings[r], DIRECT, SMALL, sizeof(SMALL) / sizeof(SMALL[0]), 0);
			end(PDMA_GPU_LAUNCH_GRAPH);
			compare(rings[r], "direct, small batches");
		}
		begin(PDMA_GPU_LAUNCH_STREAM);
		run_batches(&F.aligned, ZERO_COPY, WHOLE, 1, 0);
		compare(&F.aligned, "zero-copy");
		begin(PDMA_GPU_LAUNCH_STREAM);
		run_batches(&F.packed, ZERO_COPY, WHOLE, 1, 0);
		compare(&F.packed, "packed, zero-copy");
		begin(PDMA_GPU_LAUNCH_STREAM);
		run_batches(&F.packed, STAGED, WHOLE, 1, 64u << 10);
		compare(&F.packed, "packed, host-staged");
	}
	assert_int_equal(F.ops.set_kernel(F.g, was), 0);
	assert_int_equal(F.ops.set_kernel(F.g, "nonesuch"), -ENOENT);
	assert_int_equal(F.ops.set_kernel(F.g, "v9"), -ENOENT); /* removed */
	assert_string_equal(F.ops.kernel_name(F.g), was);
}

/* The open's stderr, captured into buf (at most len - 1 bytes). */
static int open_captured(struct pdma_gpu_dfr **g, char *buf, size_t len)
{
	FILE *f = tmpfile();
	assert_non_null(f);
	fflush(stderr);
	const int saved = dup(STDERR_FILENO);
	assert_true(saved >= 0);
	assert_true(dup2(fileno(f), STDERR_FILENO) >= 0);
	const int ret = F.ops.open(&F.cfg, 0, g);
	fflush(stderr);
	assert_true(dup2(saved, STDERR_FILENO) >= 0);
	close(saved);
	rewind(f);
	const size_t n = fread(buf, 1, len - 1, f);
	buf[n] = 0;
	fclose(f);
	return ret;
}

/* PEERDMA_DFR_KERNEL naming a removed variant or no kernel fails the open
 * (a run never takes another kernel than the one asked for), and says which
 * of the two it was; a kernel's name is taken. */
static void test_env_kernel(void **state)
{
	(void)state;
	static const char *const removed = "a kernel variant that was measured and removed", *const none = "no such kernel";
	static const struct {
		const char *name;
		int ret;
		const char *says;
	} cases[] = { { "v9", -EINVAL, removed },       { "tma", -EINVAL, removed }, { "v17", -EINVAL, removed },
		      { "nonesuch", -EINVAL, none }, { "v7s", 0, NULL },        { "v11", 0, NULL } };
	const char *env = getenv("PEERDMA_DFR_KERNEL");
	char *saved = env ? strdup(env) : NULL;
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		struct pdma_gpu_dfr *g = NULL;
		char err[512];
		setenv("PEERDMA_DFR_KERNEL", cases[k].name, 1);
		assert_int_equal(open_captured(&g, err, sizeof(err)), cases[k].ret);
		if (cases[k].ret) {
			assert_null(g);
			if (!strstr(err, cases[k].says))
				fail_msg("PEERDMA_DFR_KERNEL=%s: \"%s\" lacks \"%s\"", cases[k].name, err,
					 cases[k].says);
			continue;
		}
		assert_string_equal(F.ops.kernel_name(g), cases[k].name);
		F.ops.close(g);
	}
	if (saved)
		setenv("PEERDMA_DFR_KERNEL", saved, 1);
	else
		unsetenv("PEERDMA_DFR_KERNEL");
	free(saved);
}

/* Processing the same packets twice changes nothing (newer wins, stale and
 * duplicate packets never overwrite). */
static void test_idempotent(void **state)
{
	(void)state;
	struct ringref *R = &F.mixed;
	begin(PDMA_GPU_LAUNCH_GRAPH);
	assert_int_equal(F.ops.run(F.g, R->ring.base, R->ring.slot_size, R->n, NULL), 0);
	assert_int_equal(F.ops.run(F.g, R->ring.base, R->ring.slot_size, R->n, F.gpu_desc), 0);
	end(PDMA_GPU_LAUNCH_GRAPH);
	assert_int_equal(F.ops.read_tables(F.g, &F.host), 0);
	uint64_t old = 0;
	for (uint32_t i = 0; i < R->n; i++) {
		assert_int_not_equal(F.gpu_desc[i].status, PDMA_DFR_ST_DATA);
		old += F.gpu_desc[i].status == PDMA_DFR_ST_DATA_OLD;
	}
	assert_true(old > 0);
}

/* Kernel `kernel` over ring R in three runs: the first data packet of the
 * shorter payloads alone, so that the longest payload known is short, then
 * the packets before it, then the rest. The shorter payloads are the second
 * generator's (stream IDs 0x2000 on), or the first's on the packed ring. */
static void run_short_first(struct ringref *R, const char *kernel)
{
	const size_t ss = R->ring.slot_size;
	uint8_t *d = (uint8_t *)R->dev;
	uint32_t ib = 0;

	while (ib < R->n && !(R->cpu_desc[ib].status == PDMA_DFR_ST_DATA &&
			      (R->cpu_desc[ib].stream_id >= 0x2000) == !R->packed))
		ib++;
	assert_true(ib > 0 && ib + 1 < R->n);
	assert_int_equal(F.ops.set_kernel(F.g, kernel), 0);
	begin(PDMA_GPU_LAUNCH_STREAM);
	assert_int_equal(F.ops.run(F.g, d + ib * ss, (uint32_t)ss, 1, F.gpu_desc + ib), 0);
	assert_int_equal(F.ops.run(F.g, d, (uint32_t)ss, ib, F.gpu_desc), 0);
	assert_int_equal(F.ops.run(F.g, d + (ib + 1) * ss, (uint32_t)ss, R->n - ib - 1, F.gpu_desc + ib + 1), 0);
}

/* v11 sizes its copy pass by the longest payload seen so far. With the first
 * short payload (260 bytes) run alone the hint is short; the 1024-byte
 * payloads after it are wider than the copy pass's stride, so their header
 * threads copy them (the hint is raised for the next launch); then a second
 * run of the whole ring with the hint raised (idempotent: all old).
 * Byte-identical either way. */
static void test_stride_hint(void **state)
{
	(void)state;
	struct ringref *R = &F.mixed;
	char was[16];
	snprintf(was, sizeof(was), "%s", F.ops.kernel_name(F.g));
	run_short_first(R, "v11");
	compare(R, "v11, stride hint short, then overflowed");
	assert_int_equal(F.ops.set_kernel(F.g, "auto"), 0);
	struct pdma_dfr_desc *again = calloc(R->n, sizeof(*again));
	assert_non_null(again);
	assert_int_equal(F.ops.run(F.g, R->dev, (uint32_t)R->ring.slot_size, R->n, again), 0);
	for (uint32_t i = 0; i < R->n; i++)
		assert_int_not_equal(again[i].status, PDMA_DFR_ST_DATA);
	free(again);
	compare(R, "auto, after the same ring again");
	assert_int_equal(F.ops.set_kernel(F.g, was), 0);
}

/* auto runs v16 while the longest payload known is short (256 bytes, the
 * aligned ring's second generator), v11 once a longer one is seen: the
 * packets before the first short one (1024-byte payloads) run under v16,
 * which raises the hint, the rest under v11. Byte-identical across the
 * switch. */
static void test_auto_small(void **state)
{
	(void)state;
	char was[16];
	snprintf(was, sizeof(was), "%s", F.ops.kernel_name(F.g));
	run_short_first(&F.aligned, "auto");
	compare(&F.aligned, "auto, v16 on a short payload, then v11");
	assert_int_equal(F.ops.set_kernel(F.g, was), 0);
}

/* v16 picks its register budget by the longest payload known: after a lone
 * 64-byte packet (a 32-byte payload) the next launches run dfr_tiny_pass. On
 * the tiny ring and the tiny slots they stay there (payloads of at most 64
 * bytes); on the packed ring the 284-byte packets of the second launch raise
 * the hint and the last launch runs dfr_small_pass. Byte-identical across the
 * switch. */
static void test_v16_tiny(void **state)
{
	(void)state;
	char was[16];
	snprintf(was, sizeof(was), "%s", F.ops.kernel_name(F.g));
	run_short_first(&F.tiny, "v16");
	compare(&F.tiny, "v16, tiny payloads only");
	run_short_first(&F.t80, "v16");
	compare(&F.t80, "v16, tiny slots");
	run_short_first(&F.packed, "v16");
	compare(&F.packed, "v16, tiny payloads first, then longer ones");
	assert_int_equal(F.ops.set_kernel(F.g, was), 0);
}

/* The fast path (v11's header pass) takes a packet's trailer from the slot
 * header's copy (PDMA_SLOT_TAIL) instead of reading it from the datagram: in
 * a copy of the aligned ring, every slot carries the copy, and every third
 * valid trailer is then broken in the datagram only (a producer breaking its
 * promise). v11 trusts the copy: those packets are DATA, where the CPU
 * deframer, which reads the bytes, says trailer error. With the flag cleared
 * on them, the bytes decide on the GPU too. This is what shows the device
 * reads the copy (in the right byte order), which the speed relies on. */
static void test_slot_tail(void **state)
{
	(void)state;
	const struct ringref *R = &F.aligned;
	const uint32_t n = R->n, ss = R->ring.slot_size;
	uint8_t *h = malloc((size_t)n * ss);
	uint32_t *broken = calloc(n, sizeof(*broken)), nb = 0;
	void *dev;
	char was[16];
	assert_non_null(h);
	assert_non_null(broken);
	memcpy(h, R->ring.base, (size_t)n * ss);
	for (uint32_t i = 0; i < n; i++) {
		uint8_t *s = h + (size_t)i * ss;
		struct pdma_slot_hdr *sh = (struct pdma_slot_hdr *)s;
		pdma_slot_finish(s, PDMA_SLOT_HDR, sh->len, sh->flags & PDMA_SLOT_TRUNC, i);
		if (R->cpu_desc[i].status == PDMA_DFR_ST_DATA && (s[PDMA_SLOT_HDR] & 0x04) && i % 3 == 0) {
			s[PDMA_SLOT_HDR + sh->len - 1] ^= 0x01; /* count without E: fails */
			broken[nb++] = i;
		}
	}
	assert_true(nb >= 20);
	assert_int_equal(F.ops.dev_alloc(F.g, (size_t)n * ss, &dev), 0);
	snprintf(was, sizeof(was), "%s", F.ops.kernel_name(F.g));
	assert_int_equal(F.ops.set_kernel(F.g, "v11"), 0);
	for (int flag = 1; flag >= 0; flag--) {
		if (!flag)
			for (uint32_t k = 0; k < nb; k++)
				((struct pdma_slot_hdr *)(h + (size_t)broken[k] * ss))->flags &= ~PDMA_SLOT_TAIL;
		assert_int_equal(F.ops.upload(F.g, dev, h, (size_t)n * ss), 0);
		begin(PDMA_GPU_LAUNCH_STREAM);
		assert_int_equal(F.ops.run(F.g, dev, ss, n, F.gpu_desc), 0);
		for (uint32_t k = 0; k < nb; k++) {
			const struct pdma_dfr_desc *d = &F.gpu_desc[broken[k]];
			if (flag)
				assert_true(d->status == PDMA_DFR_ST_DATA || d->status == PDMA_DFR_ST_DATA_OLD);
			else
				assert_int_equal(d->status, -PDMA_VRT_E_TRAILER);
		}
	}
	printf("v11: %u packets whose trailer copy passes and whose datagram's trailer fails: DATA with "
	       "PDMA_SLOT_TAIL, trailer errors without\n", nb);
	assert_int_equal(F.ops.set_kernel(F.g, was), 0);
	F.ops.dev_free(F.g, dev);
	free(broken);
	free(h);
}

/* open refuses what the CPU deframer refuses: a configuration whose
 * arithmetic would divide by zero on the device. */
static void test_open_config(void **state)
{
	(void)state;
	struct pdma_dfr_config c = F.cfg;
	struct pdma_gpu_dfr *g = NULL;
	c.bytes_per_sample = 0;
	assert_int_equal(F.ops.open(&c, 0, &g), -EINVAL);
	c = F.cfg;
	c.out_pkts = 0;
	assert_int_equal(F.ops.open(&c, 0, &g), -EINVAL);
	c = F.cfg;
	c.max_payload = 1022; /* not whole samples */
	assert_int_equal(F.ops.open(&c, 0, &g), -EINVAL);
	assert_null(g);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_direct),
		cmocka_unit_test(test_zero_copy),
		cmocka_unit_test(test_host_staged),
		cmocka_unit_test(test_graph_direct),
		cmocka_unit_test(test_graph_zero_copy_batches),
		cmocka_unit_test(test_graph_host_staged_batches),
		cmocka_unit_test(test_graph_host_staged_aligned),
		cmocka_unit_test(test_kernels),
		cmocka_unit_test(test_env_kernel),
		cmocka_unit_test(test_idempotent),
		cmocka_unit_test(test_stride_hint),
		cmocka_unit_test(test_auto_small),
		cmocka_unit_test(test_v16_tiny),
		cmocka_unit_test(test_slot_tail),
		cmocka_unit_test(test_open_config),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
