// SPDX-License-Identifier: MIT
/*
 * bench_ingest's GPU parts: (a) the deframer against the device-to-device
 * copy ceiling, (b) host-staged transfer against the host-to-device peak,
 * (e) small batches with stream and graph launch, (x) the deframer's kernels
 * next to copies of the same data volume. Timed by the benchmarks' GPU module
 * (gpu_bench.h).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "bench_ingest.h"

/* (x) items that are copies or probes of the deframer's data volume
 * (copy kinds, gpu_bench.h), by name; -1 for a kernel. */
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

/* (a) */
void part_a(struct ctx *x)
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
		if (make_ring(&r, pkt, bench_layout(x, pkt), target, &n)) {
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
					e = x->bops.deframe(g, dev, r.slot_size, n, iters(x, 20), &bd);
				/* Copy ceiling over the packet bytes (read + written). */
				if (!e)
					e = x->bops.d2d(g, (size_t)(bd.bytes / 2), iters(x, 20), &bc);
				if (!e)
					e = x->bops.copy(g, PDMA_GPU_COPY_KERNEL, dev, r.slot_size, n, iters(x, 20), &bk);
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
				json_object_set_new(o, "slot_layout",
						    json_string(r.dgram_off == PDMA_SLOT_HDR ? "full" :
								r.dgram_off == PDMA_SLOT_HDR_TINY ? "tiny" : "packed"));
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

/* (b), second table: ingest's default slots (9216 bytes) holding smaller
 * datagrams, host-staged in chunks of 1, 4 (ingest's default) and 16 MiB
 * copied, whole slots against each slot's span (pdma_slots_span: header +
 * datagram, rounded to 64), stream launch (ingest's default for
 * host-staged). The limit of either is the H2D peak over the bytes it
 * copies a slot. */
static void part_b_span(struct ctx *x, double peak, size_t target)
{
	static const uint32_t pkts[] = { 256, 1024, 1500, 4096 };
	static const size_t chunks[] = { 1u << 20, 4u << 20, 16u << 20 };
	const uint32_t slot = 9216;
	const int it = iters(x, 20);
	json_t *arr = json_array();

	printf("\n(b) ingest's %u-byte slots, host-staged, stream launch: whole slots vs each slot's span\n", slot);
	printf("    M slots/s (%% of the H2D peak over the bytes copied a slot); datagram GB/s\n");
	printf("%7s %6s %6s %10s %8s %10s %10s %8s %10s %8s\n", "packet", "span", "chunk", "whole", "of peak",
	       "dg GB/s", "span", "of peak", "dg GB/s", "speedup");
	for (size_t k = 0; k < sizeof(pkts) / sizeof(pkts[0]); k++) {
		struct pdma_ring r;
		struct pdma_dfr_config c;
		struct pdma_gpu_dfr *g;
		uint32_t n;
		if (make_ring_slots(&r, pkts[k], PDMA_RING_FULL, slot, target, &n))
			continue;
		dfr_cfg(&c, pkts[k], n);
		if (x->ops.open(&c, 0, &g)) {
			pdma_ring_fini(&r);
			continue;
		}
		const uint32_t span = pdma_slots_span(r.base, r.slot_size, n);
		int e = x->ops.host_register(g, r.base, r.bytes);
		if (!e)
			e = x->ops.set_launch(g, PDMA_GPU_LAUNCH_STREAM);
		for (size_t q = 0; q < sizeof(chunks) / sizeof(chunks[0]) && !e; q++) {
			struct pdma_gpu_bench w, p;
			e = x->bops.staged(g, r.base, r.slot_size, 0, n, chunks[q], it, &w);
			if (!e)
				e = x->bops.staged(g, r.base, r.slot_size, span, n, chunks[q], it, &p);
			if (e)
				break;
			const double ws = n / w.seconds, ps = n / p.seconds;
			const double wl = peak * 1e9 / slot, pl = peak * 1e9 / span;
			printf("%7u %6u %4zuMi %10.2f %7.1f%% %10.2f %10.2f %7.1f%% %10.2f %7.2fx\n", pkts[k], span,
			       chunks[q] >> 20, ws / 1e6, 100 * ws / wl, ws * pkts[k] / 1e9, ps / 1e6, 100 * ps / pl,
			       ps * pkts[k] / 1e9, ps / ws);
			json_t *j = json_object();
			json_object_set_new(j, "packet_bytes", json_integer(pkts[k]));
			json_object_set_new(j, "slot_bytes", json_integer(slot));
			json_object_set_new(j, "span_bytes", json_integer(span));
			json_object_set_new(j, "chunk_bytes", json_integer((json_int_t)chunks[q]));
			json_object_set_new(j, "whole_slots_per_s", json_real(ws));
			json_object_set_new(j, "whole_of_limit", json_real(ws / wl));
			json_object_set_new(j, "span_slots_per_s", json_real(ps));
			json_object_set_new(j, "span_of_limit", json_real(ps / pl));
			json_object_set_new(j, "speedup", json_real(ps / ws));
			json_array_append_new(arr, j);
		}
		if (e)
			fprintf(stderr, "(b) %u-byte packets in %u-byte slots: %s\n", pkts[k], slot, x->ops.last_error(g));
		x->ops.host_unregister(g, r.base);
		x->ops.close(g);
		pdma_ring_fini(&r);
	}
	json_object_set_new(x->root, "b_span", arr);
}

/* (b) */
void part_b(struct ctx *x)
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
	if (make_ring(&r, pkt, bench_layout(x, pkt), target, &n))
		return;
	dfr_cfg(&c, pkt, n);
	if (x->ops.open(&c, 0, &g)) {
		pdma_ring_fini(&r);
		return;
	}
	int e = x->ops.host_register(g, r.base, r.bytes);
	if (!e)
		e = x->bops.h2d(g, r.base, r.bytes, r.bytes, it, &peak);
	if (e) {
		fprintf(stderr, "(b): %s\n", x->ops.last_error(g));
		goto out;
	}
	/* A ring sized to its packets: the span is the whole slot. */
	const uint32_t span = pdma_slots_span(r.base, r.slot_size, n);
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
		int es = x->bops.h2d(g, r.base, r.bytes, chunks[k], it, &h);
		if (!es)
			es = x->ops.set_launch(g, PDMA_GPU_LAUNCH_STREAM);
		if (!es)
			es = x->bops.staged(g, r.base, r.slot_size, span, n, chunks[k], it, &bs);
		if (!es)
			es = x->ops.set_launch(g, PDMA_GPU_LAUNCH_GRAPH);
		if (!es)
			es = x->bops.staged(g, r.base, r.slot_size, span, n, chunks[k], it, &bg);
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
	if (!x->bops.mapped(g, r.base, r.slot_size, n, it, &b)) {
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
	if (!e)
		part_b_span(x, peak.gbps, target);
}

/* (e) small batches: what ingest does per batch (enqueue the batch, wait,
 * take its descriptors) back to back, stream vs graph launch. */
void part_e(struct ctx *x)
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
	const enum pdma_ring_layout lay = bench_layout(x, pkt);
	if (make_ring(&r, pkt, lay, (size_t)total * slot_for(pkt, lay), &n))
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
					e = x->bops.batches(g, r.base, r.slot_size, per, batches, staged,
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

/* (x) the kernels and data-volume copies, per packet size; GB/s on the
 * deframer's byte count, % of the D2D copy of the same bytes. */
void part_x(struct ctx *x)
{
	static const uint32_t def[] = { 1024, 1500, 8192 };
	static const char *items[] = { "d2d",  "copy", "simple", "skel1", "skel4", "v7s",
				       "v11",  "v16",  "auto",   "hdr",   "cpass", "touch", "touchp" };
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
	printf("\n(x) kernels and copies of the same data volume: GB/s on the deframer's byte count "
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
		if (make_ring(&r, pkt, bench_layout(x, pkt), target, &n))
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
						e = x->bops.d2d(g, (size_t)(bytes / 2), iters(x, 20), &b);
					else if (kind >= 0)
						e = x->bops.copy(g, kind, dev, r.slot_size, n, iters(x, 20), &b);
					else if ((e = x->ops.set_kernel(g, items[i])) == 0)
						e = x->bops.deframe(g, dev, r.slot_size, n, iters(x, 20), &b);
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
