// SPDX-License-Identifier: MIT
/*
 * bench_ingest: the VITA-49 ingest pipeline measured against its ceilings.
 *  (a) GPU deframer alone vs the device-to-device copy ceiling measured in the
 *      same run, per packet size (and the CPU deframer for scale);
 *  (b) host-staged transfer (1/4/16 MiB chunks + deframe) vs the host-to-device
 *      copy-engine peak measured in the same run; zero-copy reads too;
 *  (c) end-to-end gen -> ingest over loopback, N receive threads: the highest
 *      offered rate with zero loss;
 *  (d) the 2014 design's baseline side by side: recv() one datagram at a time
 *      into pinned memory plus one copy per packet;
 *  (e) small batches (16..1024 packets of 1500 B) back to back through the
 *      zero-copy and host-staged paths: stream launch vs CUDA graph launch;
 *  (x) the deframer's kernel variants and copies of its data volume without
 *      the deframing (a copy kernel, the payload moves alone), per size.
 * Prints a table per part and writes everything as JSON (--json FILE).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "deframe/deframe_cpu.h"
#include "gen/gen.h"
#include "gpu.h"
#include "ingest.h"
#include "loopback/loopback.h"
#include "rx/ring.h"

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

struct ctx {
	bool quick;
	bool gpu;
	int iters;          /* --iters: timed passes per measurement (0: default) */
	uint32_t sizes[8];  /* --sizes: packet sizes for (a) and (x) (0-terminated; empty: default) */
	const char *xlist;  /* --x: items of (x) */
	const char *rxlist; /* --rx: receive I/O of (c) (default both) */
	struct pdma_gpu_ops ops;
	void *dl;
	json_t *root;
};

/* (x) items that are copies or probes of the deframer's data volume
 * (bench_copy kinds, gpu.h), by name; -1 for a kernel variant. */
static int copy_kind(const char *item)
{
	static const struct {
		const char *name;
		int kind;
	} k[] = {
		{ "copy", PDMA_GPU_COPY_KERNEL }, { "simple", PDMA_GPU_COPY_SIMPLE },
		{ "skel1", PDMA_GPU_COPY_SKEL1 }, { "skel4", PDMA_GPU_COPY_SKEL4 },
		{ "hdr", PDMA_GPU_COPY_HDR },     { "touch", PDMA_GPU_COPY_TOUCH },
		{ "touchp", PDMA_GPU_COPY_TOUCHP }, { "cpass", PDMA_GPU_COPY_CPASS },
	};
	for (size_t i = 0; i < sizeof(k) / sizeof(k[0]); i++)
		if (!strcmp(item, k[i].name))
			return k[i].kind;
	return -1;
}

static uint32_t slot_for(uint32_t pkt)
{
	return (PDMA_SLOT_HDR + pkt + 63u) & ~63u;
}

/* n packets of pkt bytes from 4 streams into a host ring (no injection). */
static int make_ring(struct pdma_ring *r, uint32_t pkt, size_t target_bytes, uint32_t *n_out)
{
	struct pdma_gen_config g;
	struct pdma_gen *gen;
	uint32_t slot = slot_for(pkt), n = (uint32_t)(target_bytes / slot), si;
	int ret;

	pdma_gen_config_default(&g);
	g.streams = 4;
	g.packet_size = pkt;
	g.packets = n / 4;
	g.context = false;
	n = (uint32_t)(g.packets * 4);
	ret = pdma_ring_init(r, n, slot);
	if (ret)
		return ret;
	ret = pdma_gen_open(&g, &gen);
	if (ret)
		return ret;
	for (uint32_t i = 0; i < n; i++) {
		uint8_t *s = pdma_ring_slot(r, i);
		int len = pdma_gen_next(gen, s + PDMA_SLOT_HDR, slot - PDMA_SLOT_HDR, &si);
		if (len <= 0) {
			pdma_gen_close(gen);
			return len < 0 ? len : -EIO;
		}
		pdma_slot_finish(s, (uint32_t)len, 0, i); /* as a receive thread does */
	}
	pdma_gen_close(gen);
	*n_out = n;
	return 0;
}

static void dfr_cfg(struct pdma_dfr_config *c, uint32_t pkt, uint32_t n)
{
	pdma_dfr_config_default(c);
	c->max_streams = 4;
	c->out_pkts = n / 4 + 16; /* the whole batch fits: no position reuse */
	c->max_payload = pkt - 32;
}

static int iters(const struct ctx *x, int full)
{
	return x->iters ? x->iters : x->quick ? 5 : full;
}

/* The packet sizes of (a) / (x): --sizes or the defaults. */
static size_t size_list(const struct ctx *x, const uint32_t *def, size_t ndef, uint32_t *out)
{
	size_t n = 0;
	for (; n < 8 && x->sizes[n]; n++)
		out[n] = x->sizes[n];
	if (n)
		return n;
	memcpy(out, def, ndef * sizeof(*def));
	return ndef;
}

/* (a) */
static void part_a(struct ctx *x)
{
	static const uint32_t def[] = { 64, 256, 1024, 1500, 8192 };
	uint32_t sizes[8];
	size_t nsizes = size_list(x, def, sizeof(def) / sizeof(def[0]), sizes);
	json_t *arr = json_array();
	size_t target = x->quick ? (32u << 20) : (256u << 20);

	printf("\n(a) deframer vs device-to-device copy ceiling (same run), %zu MiB of packets\n",
	       target >> 20);
	printf("    bytes counted on both sides: packets read + payloads written (D2D: a cudaMemcpy of half\n"
	       "    that, counted read + written; copy kernel: a 16-byte grid-stride copy kernel, likewise)\n");
	printf("%8s %12s %12s %12s %8s %13s %8s %10s\n", "packet", "deframe GB/s", "D2D GB/s", "Mpkt/s",
	       "ratio", "copy-kernel", "ratio", "CPU GB/s");
	for (size_t k = 0; k < nsizes; k++) {
		uint32_t pkt = sizes[k], n;
		struct pdma_ring r;
		struct pdma_dfr_config c;
		json_t *o = json_object();
		if (make_ring(&r, pkt, target, &n)) {
			fprintf(stderr, "(a) cannot build %u-byte packets\n", pkt);
			json_decref(o);
			continue;
		}
		dfr_cfg(&c, pkt, n);
		/* CPU deframer over the same packets (one thread). */
		struct pdma_dfr d;
		double cpu_gbps = 0, bytes = 0;
		if (pdma_dfr_init(&d, &c) == 0) {
			double t0 = now_s();
			pdma_dfr_process(&d, &r, 0, n);
			double t = now_s() - t0;
			for (uint32_t i = 0; i < n; i++)
				bytes += ((struct pdma_slot_hdr *)pdma_ring_slot(&r, i))->len;
			bytes += (double)d.placed * (pkt - 32);
			cpu_gbps = bytes / t / 1e9;
			pdma_dfr_fini(&d);
		}
		json_object_set_new(o, "packet_bytes", json_integer(pkt));
		json_object_set_new(o, "packets", json_integer(n));
		json_object_set_new(o, "cpu_deframe_gbps", json_real(cpu_gbps));
		if (x->gpu) {
			struct pdma_gpu_dfr *g;
			struct pdma_gpu_bench bd, bc, bk;
			void *dev;
			int e = x->ops.open(&c, 0, &g);
			if (!e) {
				e = x->ops.dev_alloc(g, r.bytes, &dev);
				if (!e)
					e = x->ops.upload(g, dev, r.base, r.bytes);
				if (!e)
					e = x->ops.bench_deframe(g, dev, r.slot_size, n, iters(x, 20), &bd);
				/* Copy ceiling over the packet bytes (read + written). */
				if (!e)
					e = x->ops.bench_d2d(g, (size_t)(bd.bytes / 2), iters(x, 20), &bc);
				if (!e)
					e = x->ops.bench_copy(g, PDMA_GPU_COPY_KERNEL, dev, r.slot_size, n, iters(x, 20), &bk);
				if (e)
					fprintf(stderr, "(a) %u: %s\n", pkt, x->ops.last_error(g));
				else
					json_object_set_new(o, "kernel", json_string(x->ops.kernel_name(g)));
				x->ops.dev_free(g, dev);
				x->ops.close(g);
			}
			if (!e) {
				double ratio = bd.gbps / bc.gbps;
				printf("%8u %12.1f %12.1f %12.1f %7.1f%% %13.1f %7.1f%% %10.2f\n", pkt, bd.gbps, bc.gbps,
				       n / bd.seconds / 1e6, 100 * ratio, bk.gbps, 100 * bd.gbps / bk.gbps, cpu_gbps);
				json_object_set_new(o, "deframe_gbps", json_real(bd.gbps));
				json_object_set_new(o, "deframe_seconds", json_real(bd.seconds));
				json_object_set_new(o, "deframe_mpps", json_real(n / bd.seconds / 1e6));
				json_object_set_new(o, "deframe_bytes", json_real(bd.bytes));
				json_object_set_new(o, "slot_bytes", json_integer(r.slot_size));
				json_object_set_new(o, "d2d_gbps", json_real(bc.gbps));
				json_object_set_new(o, "ratio_to_d2d", json_real(ratio));
				json_object_set_new(o, "copy_kernel_gbps", json_real(bk.gbps));
				json_object_set_new(o, "ratio_to_copy_kernel", json_real(bd.gbps / bk.gbps));
			}
		} else {
			printf("%8u %12s %12s %12s %8s %13s %8s %10.2f\n", pkt, "-", "-", "-", "-", "-", "-", cpu_gbps);
		}
		json_array_append_new(arr, o);
		pdma_ring_fini(&r);
	}
	json_object_set_new(x->root, "a_deframe_vs_d2d", arr);
}

/* (b) */
static void part_b(struct ctx *x)
{
	static const size_t chunks[] = { 1u << 20, 4u << 20, 16u << 20 };
	size_t target = x->quick ? (64u << 20) : (512u << 20);
	struct pdma_ring r;
	struct pdma_dfr_config c;
	struct pdma_gpu_dfr *g;
	struct pdma_gpu_bench peak, b;
	uint32_t n, pkt = 1500;
	json_t *o = json_object(), *arr = json_array();
	int it = iters(x, 20);

	if (!x->gpu) {
		printf("\n(b) skipped: no CUDA device\n");
		json_decref(arr);
		json_object_set_new(o, "skipped", json_string("no CUDA device"));
		json_object_set_new(x->root, "b_host_staged_vs_h2d", o);
		return;
	}
	if (make_ring(&r, pkt, target, &n))
		return;
	dfr_cfg(&c, pkt, n);
	if (x->ops.open(&c, 0, &g)) {
		pdma_ring_fini(&r);
		return;
	}
	int e = x->ops.host_register(g, r.base, r.bytes);
	if (!e)
		e = x->ops.bench_h2d(g, r.base, r.bytes, r.bytes, it, &peak);
	if (e) {
		fprintf(stderr, "(b): %s\n", x->ops.last_error(g));
		goto out;
	}
	printf("\n(b) host-staged (copy engine + deframe) vs H2D copy-engine peak, %zu MiB ring of "
	       "%u-byte packets\n", r.bytes >> 20, pkt);
	printf("    CUDA events around each pass (both streams), median of %d passes; bytes = slots copied\n", it);
	printf("H2D peak (one %zu MiB copy): %.2f GB/s\n", r.bytes >> 20, peak.gbps);
	printf("%10s %10s %14s %8s %14s %8s\n", "chunk", "H2D GB/s", "staged stream", "ratio", "staged graph",
	       "ratio");
	json_object_set_new(o, "ring_bytes", json_integer((json_int_t)r.bytes));
	json_object_set_new(o, "packet_bytes", json_integer(pkt));
	json_object_set_new(o, "h2d_peak_gbps", json_real(peak.gbps));
	json_object_set_new(o, "passes", json_integer(it));
	json_object_set_new(o, "timing", json_string("CUDA events, median"));
	for (size_t k = 0; k < sizeof(chunks) / sizeof(chunks[0]); k++) {
		struct pdma_gpu_bench h, bs, bg;
		int es = x->ops.bench_h2d(g, r.base, r.bytes, chunks[k], it, &h);
		if (!es)
			es = x->ops.set_launch(g, PDMA_GPU_LAUNCH_STREAM);
		if (!es)
			es = x->ops.bench_staged(g, r.base, r.slot_size, n, chunks[k], it, &bs);
		if (!es)
			es = x->ops.set_launch(g, PDMA_GPU_LAUNCH_GRAPH);
		if (!es)
			es = x->ops.bench_staged(g, r.base, r.slot_size, n, chunks[k], it, &bg);
		if (!es && x->ops.get_launch(g) != PDMA_GPU_LAUNCH_GRAPH)
			es = -EIO;
		if (es) {
			fprintf(stderr, "(b) chunk %zu: %s\n", chunks[k], x->ops.last_error(g));
			continue;
		}
		printf("%7zu MiB %10.2f %14.2f %7.1f%% %14.2f %7.1f%%\n", chunks[k] >> 20, h.gbps, bs.gbps,
		       100 * bs.gbps / peak.gbps, bg.gbps, 100 * bg.gbps / peak.gbps);
		json_t *j = json_object();
		json_object_set_new(j, "chunk_bytes", json_integer((json_int_t)chunks[k]));
		json_object_set_new(j, "h2d_chunked_gbps", json_real(h.gbps));
		json_object_set_new(j, "staged_stream_gbps", json_real(bs.gbps));
		json_object_set_new(j, "staged_graph_gbps", json_real(bg.gbps));
		/* The ingest default (graph launch). */
		json_object_set_new(j, "staged_gbps", json_real(bg.gbps));
		json_object_set_new(j, "ratio_to_peak", json_real(bg.gbps / peak.gbps));
		json_object_set_new(j, "stream_ratio_to_peak", json_real(bs.gbps / peak.gbps));
		json_array_append_new(arr, j);
	}
	if (!x->ops.bench_mapped(g, r.base, r.slot_size, n, it, &b)) {
		printf("zero-copy (GPU deframer reading the mapped host ring): %.2f GB/s of packets, "
		       "%.1f%% of the H2D peak\n", b.gbps, 100 * b.gbps / peak.gbps);
		json_object_set_new(o, "zero_copy_gbps", json_real(b.gbps));
		json_object_set_new(o, "zero_copy_ratio_to_peak", json_real(b.gbps / peak.gbps));
	}
	x->ops.host_unregister(g, r.base);
out:
	json_object_set_new(o, "staged", arr);
	json_object_set_new(x->root, "b_host_staged_vs_h2d", o);
	x->ops.close(g);
	pdma_ring_fini(&r);
}

/* (e) small batches: what ingest does per batch (enqueue the batch, wait,
 * take its descriptors) back to back, stream vs graph launch. */
static void part_e(struct ctx *x)
{
	static const uint32_t pers[] = { 16, 64, 256, 1024 };
	const uint32_t pkt = 1500, total = 65536;
	struct pdma_ring r;
	struct pdma_dfr_config c;
	struct pdma_gpu_dfr *g;
	uint32_t n;
	json_t *arr = json_array();
	int reps = x->quick ? 3 : 7;

	if (!x->gpu) {
		printf("\n(e) skipped: no CUDA device\n");
		json_object_set_new(x->root, "e_small_batches", json_string("skipped: no CUDA device"));
		json_decref(arr);
		return;
	}
	if (make_ring(&r, pkt, (size_t)total * slot_for(pkt), &n))
		return;
	dfr_cfg(&c, pkt, n);
	if (x->ops.open(&c, 0, &g)) {
		pdma_ring_fini(&r);
		return;
	}
	if (x->ops.host_register(g, r.base, r.bytes)) {
		fprintf(stderr, "(e): %s\n", x->ops.last_error(g));
		goto out;
	}
	printf("\n(e) small batches of %u-byte packets back to back (host clock, median of %d runs)\n"
	       "    sync: each batch enqueued, waited for and its descriptors copied out (ingest's cycle);\n"
	       "    pipelined: all batches enqueued, one wait at the end\n", pkt, reps);
	printf("%12s %6s %10s %10s %10s %10s %8s %12s %12s\n", "path", "pkts", "stream us", "graph us",
	       "stream Mp/s", "graph Mp/s", "speedup", "pipe str us", "pipe gr us");
	for (int staged = 0; staged < 2; staged++)
		for (size_t k = 0; k < sizeof(pers) / sizeof(pers[0]); k++) {
			uint32_t per = pers[k], batches = n / per > 2000 ? 2000 : n / per;
			struct pdma_gpu_bench v[2][2]; /* [sync/pipelined][stream/graph] */
			int e = 0;
			for (int p = 0; p < 2 && !e; p++)
				for (int m = 0; m < 2 && !e; m++)
					e = x->ops.bench_batches(g, r.base, r.slot_size, per, batches, staged,
								 m ? PDMA_GPU_LAUNCH_GRAPH : PDMA_GPU_LAUNCH_STREAM,
								 p == 0, reps, &v[p][m]);
			if (e) {
				fprintf(stderr, "(e) %u: %s\n", per, x->ops.last_error(g));
				continue;
			}
			const char *pn = staged ? "host-staged" : "zero-copy";
			printf("%12s %6u %10.2f %10.2f %10.2f %10.2f %7.2fx %12.2f %12.2f\n", pn, per,
			       v[0][0].seconds * 1e6, v[0][1].seconds * 1e6, per / v[0][0].seconds / 1e6,
			       per / v[0][1].seconds / 1e6, v[0][0].seconds / v[0][1].seconds,
			       v[1][0].seconds * 1e6, v[1][1].seconds * 1e6);
			json_t *j = json_object();
			json_object_set_new(j, "path", json_string(pn));
			json_object_set_new(j, "packets_per_batch", json_integer(per));
			json_object_set_new(j, "batches", json_integer(batches));
			json_object_set_new(j, "sync_stream_us", json_real(v[0][0].seconds * 1e6));
			json_object_set_new(j, "sync_graph_us", json_real(v[0][1].seconds * 1e6));
			json_object_set_new(j, "sync_stream_pps", json_real(per / v[0][0].seconds));
			json_object_set_new(j, "sync_graph_pps", json_real(per / v[0][1].seconds));
			json_object_set_new(j, "pipelined_stream_us", json_real(v[1][0].seconds * 1e6));
			json_object_set_new(j, "pipelined_graph_us", json_real(v[1][1].seconds * 1e6));
			json_object_set_new(j, "pipelined_stream_pps", json_real(per / v[1][0].seconds));
			json_object_set_new(j, "pipelined_graph_pps", json_real(per / v[1][1].seconds));
			json_array_append_new(arr, j);
		}
	x->ops.host_unregister(g, r.base);
out:
	json_object_set_new(x->root, "e_small_batches", arr);
	x->ops.close(g);
	pdma_ring_fini(&r);
}

/* Is name one of the comma-separated items of list? */
static bool in_list(const char *list, const char *name)
{
	size_t n = strlen(name);
	for (const char *p = list; (p = strstr(p, name)); p += n)
		if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == 0))
			return true;
	return false;
}

/* (x) kernel variants and data-volume copies, per packet size; GB/s on the
 * deframer's byte count, % of the D2D copy of the same bytes. */
static void part_x(struct ctx *x)
{
	static const uint32_t def[] = { 1024, 1500, 8192 };
	static const char *items[] = { "d2d", "copy", "simple", "skel1", "skel4", "v5", "v5cs", "v5b4",
				       "v5na", "v6", "v6b4", "v7s", "v7", "v7b4", "tma", "v6tma", "v8tp", "v9",
				       "v9u8", "v10", "v11", "auto", "hdr", "cpass", "touch", "touchp" };
	const size_t nitems = sizeof(items) / sizeof(items[0]);
	uint32_t sizes[8];
	size_t nsizes = size_list(x, def, sizeof(def) / sizeof(def[0]), sizes);
	size_t target = x->quick ? (32u << 20) : (256u << 20);
	json_t *arr = json_array();

	if (!x->gpu) {
		printf("\n(x) skipped: no CUDA device\n");
		json_decref(arr);
		return;
	}
	printf("\n(x) variants and copies of the same data volume: GB/s on the deframer's byte count "
	       "(%% of D2D)\n%8s", "item");
	for (size_t k = 0; k < nsizes; k++)
		printf(" %9u B      ", sizes[k]);
	printf("\n");
	double res[32][8];
	for (size_t k = 0; k < nsizes; k++) {
		uint32_t pkt = sizes[k], n;
		struct pdma_ring r;
		struct pdma_dfr_config c;
		struct pdma_gpu_dfr *g;
		void *dev;
		for (size_t i = 0; i < nitems; i++)
			res[i][k] = -1;
		if (make_ring(&r, pkt, target, &n))
			continue;
		dfr_cfg(&c, pkt, n);
		if (x->ops.open(&c, 0, &g)) {
			pdma_ring_fini(&r);
			continue;
		}
		if (!x->ops.dev_alloc(g, r.bytes, &dev)) {
			if (!x->ops.upload(g, dev, r.base, r.bytes)) {
				/* The deframer's byte count (as bench_deframe counts it). */
				double bytes = 0;
				for (uint32_t i = 0; i < n; i++) {
					const uint8_t *sl = pdma_ring_slot(&r, i);
					struct pdma_dfr_desc d;
					struct pdma_dfr_pkt p;
					bytes += ((const struct pdma_slot_hdr *)sl)->len;
					if (pdma_dfr_header(&c, sl, r.slot_size, &d, &p) == PDMA_DFR_ST_DATA)
						bytes += p.payload_len;
				}
				for (size_t i = 0; i < nitems && bytes > 0; i++) {
					struct pdma_gpu_bench b;
					int e;
					if (x->xlist && !in_list(x->xlist, items[i]))
						continue;
					int kind = copy_kind(items[i]);
					if (!strcmp(items[i], "d2d"))
						e = x->ops.bench_d2d(g, (size_t)(bytes / 2), iters(x, 20), &b);
					else if (kind >= 0)
						e = x->ops.bench_copy(g, kind, dev, r.slot_size, n, iters(x, 20), &b);
					else if ((e = x->ops.set_kernel(g, items[i])) == 0)
						e = x->ops.bench_deframe(g, dev, r.slot_size, n, iters(x, 20), &b);
					if (!e)
						res[i][k] = bytes / b.seconds / 1e9;
					else
						fprintf(stderr, "(x) %u %s: %s\n", pkt, items[i], x->ops.last_error(g));
				}
			}
			x->ops.dev_free(g, dev);
		}
		x->ops.close(g);
		pdma_ring_fini(&r);
	}
	for (size_t i = 0; i < nitems; i++) {
		json_t *o = json_object();
		printf("%8s", items[i]);
		json_object_set_new(o, "item", json_string(items[i]));
		json_t *v = json_object();
		for (size_t k = 0; k < nsizes; k++) {
			char key[16];
			snprintf(key, sizeof(key), "%u", sizes[k]);
			if (res[i][k] < 0) {
				printf(" %16s", "-");
				continue;
			}
			double d2d = res[0][k];
			printf(" %8.1f (%5.1f%%)", res[i][k], d2d > 0 ? 100 * res[i][k] / d2d : 0);
			json_object_set_new(v, key, json_real(res[i][k]));
		}
		printf("\n");
		json_object_set_new(o, "gbps", v);
		json_array_append_new(arr, o);
	}
	json_object_set_new(x->root, "x_variants", arr);
}

/* (c) highest zero-loss rate for each path and thread count. */
static const double rates[] = { 50e3, 100e3, 200e3, 400e3, 800e3, 1.6e6, 3.2e6 };

/* One (c) run at an offered rate; appends its record to runs. *sent_pps: the
 * rate the senders achieved (datagrams sent over their own time). */
static int c_run(struct pdma_gen_config *g, const struct pdma_ingest_config *ic, double rate,
		 double sec, json_t *runs, bool *ok, double *sent_pps, double *cpu_ns)
{
	struct pdma_loopback_result res;
	g->packets = (uint64_t)(rate * sec / g->streams);
	if (g->packets < 500)
		g->packets = 500;
	int e = pdma_loopback_once(g, ic, rate, &res);
	if (e) {
		free(res.s);
		return e;
	}
	uint64_t sent = 0;
	for (uint32_t i = 0; i < res.streams; i++)
		sent += res.s[i].injected.sent;
	*sent_pps = res.send_seconds > 0 ? (double)sent / res.send_seconds : 0;
	*ok = res.match && !res.totals.socket_drops && !res.totals.ring_overruns;
	json_t *j = json_object();
	json_object_set_new(j, "offered_pps", json_real(rate));
	json_object_set_new(j, "sent_pps", json_real(*sent_pps));
	json_object_set_new(j, "received_pps", json_real((double)res.totals.datagrams / res.seconds));
	json_object_set_new(j, "socket_drops", json_integer((json_int_t)res.totals.socket_drops));
	json_object_set_new(j, "ring_overruns", json_integer((json_int_t)res.totals.ring_overruns));
	json_object_set_new(j, "zero_loss", json_boolean(*ok));
	*cpu_ns = res.totals.datagrams ? res.totals.rx_cpu_s * 1e9 / (double)res.totals.datagrams : 0;
	json_object_set_new(j, "rx_cpu_ns_per_datagram", json_real(*cpu_ns));
	json_array_append_new(runs, j);
	free(res.s);
	return 0;
}

/* One row of (c): the highest zero-loss rate for a path, receive I/O and
 * number of receive threads. Doubles the offered rate until a run loses or
 * the senders fall behind it, then bisects between the last zero-loss rate
 * and the first lossy one (to 5%). The rate reported is the senders'
 * achieved rate of the best zero-loss run. */
static double c_row(struct ctx *x, enum pdma_rx_path path, const char *pname, enum pdma_rx_io io,
		    uint32_t threads, uint32_t streams, uint32_t senders, json_t *arr)
{
	const char *ioname = io == PDMA_RX_IO_URING ? "io_uring" : "recvmmsg";
	struct pdma_gen_config g;
	struct pdma_ingest_config ic;
	double best = 0, best_cpu = 0, lo = 0, hi = 0, rate = 50e3, sec = x->quick ? 0.25 : 0.6;
	bool sender_limited = false, failed = false;
	json_t *runs = json_array();
	pdma_gen_config_default(&g);
	g.packet_size = 1500;
	g.context = false;
	g.streams = streams;
	g.send_threads = senders;
	pdma_ingest_config_default(&ic);
	ic.threads = threads;
	ic.path = path;
	ic.rx_io = io;
	ic.slot_size = 1536;
	ic.ring_slots = 16384;
	ic.dfr.max_payload = 1500;
	/* Output window: 16k packets per stream (positions reused across
	 * batches, newer wins), 16 table entries. */
	ic.dfr.out_pkts = 16384;
	ic.dfr.max_streams = 16;
	for (int n = 0; n < 24; n++) {
		bool ok;
		double sent, cpu;
		int e = c_run(&g, &ic, rate, sec, runs, &ok, &sent, &cpu);
		if (e) {
			fprintf(stderr, "(c) %s, %s: %s\n", pname, ioname, strerror(-e));
			failed = true;
			break;
		}
		if (ok) {
			if (sent > best) {
				best = sent;
				best_cpu = cpu;
			}
			lo = rate;
			if (sent < 0.9 * rate && hi == 0) {
				/* No loss at the senders' maximum (and no lossy run
				 * seen): a lower bound only. */
				sender_limited = true;
				break;
			}
		} else {
			hi = rate;
		}
		if (hi == 0)
			rate *= 2;
		else if (hi - lo <= 0.05 * hi)
			break;
		else
			rate = lo > 0 ? (lo + hi) / 2 : hi / 2;
		if (rate < 1e3)
			break;
	}
	printf("%12s %9s %8u %14.0f %10.2f %12.0f %s\n", pname, ioname, threads, best, best * 1500 * 8 / 1e9, best_cpu,
	       failed ? "(failed)" : sender_limited ? "(sender-limited: no loss at the senders' maximum)" : "");
	json_t *o = json_object();
	json_object_set_new(o, "path", json_string(pname));
	json_object_set_new(o, "rx_io", json_string(ioname));
	json_object_set_new(o, "threads", json_integer(threads));
	json_object_set_new(o, "sender_threads", json_integer(senders));
	json_object_set_new(o, "streams", json_integer(streams));
	json_object_set_new(o, "max_zero_loss_pps", json_real(best));
	json_object_set_new(o, "max_zero_loss_gbps", json_real(best * 1500 * 8 / 1e9));
	json_object_set_new(o, "sender_limited", json_boolean(sender_limited));
	json_object_set_new(o, "rx_cpu_ns_per_datagram", json_real(best_cpu));
	json_object_set_new(o, "failed", json_boolean(failed));
	json_object_set_new(o, "runs", runs);
	json_array_append_new(arr, o);
	return best;
}

/* (c): every path this machine has, with recvmmsg and io_uring receive side
 * by side (an io_uring row says "(failed)" and why where io_uring is
 * unavailable). */
static void part_c(struct ctx *x, json_t **best1)
{
	json_t *arr = json_array();
	uint32_t threads[] = { 1, 2, 4 };
	enum pdma_rx_path paths[] = { PDMA_RX_CPU, PDMA_RX_HOST_STAGED };
	const char *pname[] = { "cpu", "host-staged" };
	const uint32_t streams = 8;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	/* Enough senders to outrun the receivers: half the cores, one per
	 * stream at most (on loopback a sender also pays the receive-side
	 * network stack up to the socket queue). */
	uint32_t senders = ncpu > 3 ? (uint32_t)(ncpu / 2) : 1;
	if (senders > streams)
		senders = streams;

	printf("\n(c) end-to-end gen -> ingest over 127.0.0.1, 1500-byte packets, %u streams, %u sender "
	       "threads\n", streams, senders);
	printf("%12s %9s %8s %14s %10s %12s\n", "path", "rx", "threads", "max 0-loss pps", "Gb/s", "rx CPU ns/dg");
	json_object_set_new(x->root, "c_sender_threads", json_integer(senders));
	for (int p = 0; p < (x->gpu ? 2 : 1); p++)
		for (size_t k = 0; k < sizeof(threads) / sizeof(threads[0]); k++)
			for (int io = 0; io < 2; io++) {
				if (x->rxlist && !in_list(x->rxlist, io ? "io_uring" : "recvmmsg"))
					continue;
				double b = c_row(x, paths[p], pname[p], io ? PDMA_RX_IO_URING : PDMA_RX_IO_RECVMMSG,
						 threads[k], streams, senders, arr);
				if (p == 0 && k == 0 && !*best1)
					*best1 = json_real(b); /* (d)'s comparison: the first row */
			}
	json_object_set_new(x->root, "c_loopback", arr);
}

/* (d) the 2014 design: recv() per datagram into pinned memory, one copy per
 * packet (to the GPU with a GPU, else a host memcpy). */
struct base_rx {
	int fd;
	uint8_t *buf;      /* pinned receive buffer */
	uint8_t *dst;      /* copy destination (device or host) */
	size_t dst_bytes;
	struct ctx *x;
	struct pdma_gpu_dfr *g;
	atomic_bool stop;
	uint64_t got;
	int err;
};

static void *base_main(void *arg)
{
	struct base_rx *b = arg;
	size_t off = 0;
	for (;;) {
		ssize_t n = recv(b->fd, b->buf, 65536, 0);
		if (n < 0) {
			if ((errno == EAGAIN || errno == EWOULDBLOCK) && atomic_load(&b->stop))
				break;
			continue;
		}
		if (off + (size_t)n > b->dst_bytes)
			off = 0;
		if (b->g) {
			if (b->x->ops.copy_one(b->g, b->dst + off, b->buf, (size_t)n)) {
				b->err = -EIO;
				break;
			}
		} else {
			memcpy(b->dst + off, b->buf, (size_t)n);
		}
		off += (size_t)n;
		b->got++;
	}
	return NULL;
}

static void part_d(struct ctx *x, json_t *ours1)
{
	json_t *o = json_object(), *runs = json_array();
	struct pdma_dfr_config c;
	struct base_rx b = { .x = x, .fd = -1 };
	double best = 0;
	bool limited = false;

	pdma_dfr_config_default(&c);
	c.max_streams = 1;
	c.out_pkts = 1;
	if (x->gpu && x->ops.open(&c, 0, &b.g) == 0) {
		b.dst_bytes = 64u << 20;
		if (x->ops.dev_alloc(b.g, b.dst_bytes, (void **)&b.dst))
			goto out;
	} else {
		b.dst_bytes = 64u << 20;
		b.dst = malloc(b.dst_bytes);
	}
	struct pdma_ring pinned; /* a one-slot "ring": pinned receive memory */
	if (pdma_ring_init(&pinned, 1, 65536 + 64))
		goto out;
	b.buf = pinned.base;
	if (b.g)
		x->ops.host_register(b.g, pinned.base, pinned.bytes);
	printf("\n(d) 2014 baseline: recv() per datagram into pinned memory + one %s copy per packet\n",
	       b.g ? "cudaMemcpy (H2D)" : "memcpy");
	for (size_t q = 0; q < sizeof(rates) / sizeof(rates[0]); q++) {
		struct pdma_gen_config g;
		struct pdma_gen *gen;
		struct sockaddr_in a = { .sin_family = AF_INET };
		socklen_t al = sizeof(a);
		int sz = 32 << 20;
		struct timeval tv = { 0, 20000 };
		pthread_t th;

		pdma_gen_config_default(&g);
		g.packet_size = 1500;
		g.context = false;
		g.packets = (uint64_t)(rates[q] * (x->quick ? 0.25 : 0.6) / g.streams);
		if (g.packets < 500)
			g.packets = 500;
		b.fd = socket(AF_INET, SOCK_DGRAM, 0);
		inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
		if (setsockopt(b.fd, SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof(sz)))
			setsockopt(b.fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
		setsockopt(b.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		bind(b.fd, (struct sockaddr *)&a, sizeof(a));
		getsockname(b.fd, (struct sockaddr *)&a, &al);
		b.got = 0;
		atomic_store(&b.stop, false);
		pthread_create(&th, NULL, base_main, &b);
		pdma_gen_open(&g, &gen);
		struct pdma_gen_send_opts so = { .host = "127.0.0.1", .port = ntohs(a.sin_port),
						 .rate_pps = rates[q] };
		double t0 = now_s();
		pdma_gen_send(gen, &so);
		atomic_store(&b.stop, true);
		pthread_join(th, NULL);
		double sec = now_s() - t0;
		uint64_t sent = g.packets * g.streams;
		pdma_gen_close(gen);
		close(b.fd);
		bool ok = b.got == sent && !b.err;
		json_t *j = json_object();
		json_object_set_new(j, "offered_pps", json_real(rates[q]));
		json_object_set_new(j, "received_pps", json_real((double)b.got / sec));
		json_object_set_new(j, "lost", json_integer((json_int_t)(sent - b.got)));
		json_object_set_new(j, "zero_loss", json_boolean(ok));
		json_array_append_new(runs, j);
		if (!ok)
			break;
		double got = (double)b.got / sec;
		if (got > best)
			best = got;
		if (got < 0.7 * rates[q]) {
			limited = true;
			break;
		}
	}
	printf("baseline max zero-loss rate: %.0f pkt/s (%.2f Gb/s)%s; this pipeline (cpu path, 1 thread): "
	       "%.0f pkt/s\n", best, best * 1500 * 8 / 1e9, limited ? " (sender-limited)" : "",
	       ours1 ? json_real_value(ours1) : 0.0);
	json_object_set_new(o, "sender_limited", json_boolean(limited));
	json_object_set_new(o, "copy", json_string(b.g ? "cudaMemcpy H2D per packet" : "memcpy per packet"));
	json_object_set_new(o, "max_zero_loss_pps", json_real(best));
	json_object_set_new(o, "ours_cpu_1thread_max_zero_loss_pps", ours1 ? json_incref(ours1) : json_null());
	json_object_set_new(o, "runs", runs);
	if (b.g)
		x->ops.host_unregister(b.g, pinned.base);
	pdma_ring_fini(&pinned);
out:
	if (b.g) {
		if (b.dst)
			x->ops.dev_free(b.g, b.dst);
		x->ops.close(b.g);
	} else {
		free(b.dst);
	}
	json_object_set_new(x->root, "d_baseline_2014", o);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "quick", no_argument, NULL, 'q' },
		{ "json", required_argument, NULL, 'j' },
		{ "parts", required_argument, NULL, 'p' },
		{ "iters", required_argument, NULL, 'i' },
		{ "sizes", required_argument, NULL, 's' },
		{ "x", required_argument, NULL, 'x' },
		{ "rx", required_argument, NULL, 'r' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	struct ctx x = { 0 };
	const char *json_path = NULL, *parts = "abcde";
	int opt;

	while ((opt = getopt_long(argc, argv, "qj:p:i:s:x:r:h", opts, NULL)) != -1) {
		switch (opt) {
		case 'q': x.quick = true; break;
		case 'j': json_path = optarg; break;
		case 'p': parts = optarg; break;
		case 'i': x.iters = atoi(optarg); break;
		case 's': {
			char *p = optarg;
			for (int k = 0; k < 7 && *p; k++) {
				x.sizes[k] = (uint32_t)strtoul(p, &p, 10);
				if (*p == ',')
					p++;
			}
			break;
		}
		case 'x': x.xlist = optarg; break;
		case 'r': x.rxlist = optarg; break;
		case 'h':
			printf("usage: bench_ingest [--quick] [--parts abcdex] [--json FILE] [--iters N]\n"
			       "                    [--sizes 1024,1500,...] [--x d2d,copy,simple,skel1,skel4,v5,v5cs,v5b4,v5na,v6,v6b4,tma,v6tma]\n"
			       "                    [--rx recvmmsg,io_uring]   (receive I/O of part c; default both)\n");
			return 0;
		default:
			return 2;
		}
	}
	x.root = json_object();
	int e = pdma_gpu_load(&x.ops, &x.dl);
	x.gpu = e == 0;
	struct utsname u;
	uname(&u);
	json_object_set_new(x.root, "host", json_string(u.nodename));
	json_object_set_new(x.root, "cpus", json_integer(sysconf(_SC_NPROCESSORS_ONLN)));
	json_object_set_new(x.root, "quick", json_boolean(x.quick));
	if (x.gpu) {
		struct pdma_dfr_config c;
		struct pdma_gpu_dfr *g;
		pdma_dfr_config_default(&c);
		c.max_streams = 1;
		c.out_pkts = 1;
		if (x.ops.open(&c, 0, &g) == 0) {
			printf("GPU: %s\n", x.ops.device_name(g));
			json_object_set_new(x.root, "gpu", json_string(x.ops.device_name(g)));
			x.ops.close(g);
		}
	} else {
		printf("no GPU (%s): GPU parts skipped\n", e == -ENODEV ? "no CUDA device" : "module not found");
		json_object_set_new(x.root, "gpu", json_null());
	}
	json_t *ours1 = NULL;
	if (strchr(parts, 'a'))
		part_a(&x);
	if (strchr(parts, 'b'))
		part_b(&x);
	if (strchr(parts, 'c'))
		part_c(&x, &ours1);
	if (strchr(parts, 'd'))
		part_d(&x, ours1);
	if (strchr(parts, 'e'))
		part_e(&x);
	if (strchr(parts, 'x'))
		part_x(&x);
	json_decref(ours1);
	if (json_path && json_dump_file(x.root, json_path, JSON_INDENT(2))) {
		fprintf(stderr, "bench_ingest: cannot write %s\n", json_path);
		return 1;
	}
	json_decref(x.root);
	pdma_gpu_unload(x.dl);
	return 0;
}
