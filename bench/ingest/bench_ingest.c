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
 *  (f) consumers of the public ingest API (include/peerdma/ingest.h): block
 *      delivery latency, and each consumer's throughput against the receive
 *      rate of the same run;
 *  (g) the socket path: recvmmsg, io_uring and UDP GRO receive, one receive
 *      thread, with gen sending datagram by datagram or UDP GSO over
 *      loopback, and one at a time over a veth pair between two network
 *      namespaces with GRO (root); rate and CPU time per datagram;
 *  (x) the deframer's kernels and copies of its data volume without the
 *      deframing (a copy kernel, the payload moves alone), per size.
 * Prints a table per part and writes everything as JSON (--json FILE).
 * Parts a, b, e and x are in gpu_parts.c, c and d in loopback_parts.c, f in
 * consumer_parts.c, g in socket_parts.c; the GPU timings come from the benchmarks' GPU module
 * (gpu_bench.h), which is the deframer module plus the measurements.
 */
#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "bench_ingest.h"

double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

enum pdma_ring_layout bench_layout(const struct ctx *x, uint32_t pkt)
{
	/* auto as ingest decides it for a (recvmmsg) ring sized to pkt: tiny
	 * where a tiny slot holds it, else by the packed slot's size. A tiny
	 * slot cannot hold more than 76 bytes: larger packets get packed ones. */
	const int fits_tiny = pkt + PDMA_SLOT_HDR_TINY <= PDMA_SLOT_TINY_MAX;

	if (x->layout == PDMA_SLOTS_TINY)
		return fits_tiny ? PDMA_RING_TINY : PDMA_RING_PACKED;
	if (x->layout == PDMA_SLOTS_AUTO && fits_tiny)
		return pdma_ingest_ring_layout(x->layout, PDMA_SLOT_TINY_MAX, PDMA_RX_IO_RECVMMSG);
	return pdma_ingest_ring_layout(x->layout, slot_for(pkt, PDMA_RING_PACKED), PDMA_RX_IO_RECVMMSG);
}

uint32_t slot_for(uint32_t pkt, enum pdma_ring_layout layout)
{
	if (layout == PDMA_RING_TINY)
		return PDMA_SLOT_TINY_MAX;
	return layout == PDMA_RING_PACKED ? (PDMA_SLOT_HDR_PACKED + pkt + 15u) & ~15u
					  : (PDMA_SLOT_HDR + pkt + 63u) & ~63u;
}

/* n packets of pkt bytes from 4 streams into a host ring (no injection). */
int make_ring(struct pdma_ring *r, uint32_t pkt, enum pdma_ring_layout layout, size_t target_bytes,
	      uint32_t *n_out)
{
	return make_ring_slots(r, pkt, layout, slot_for(pkt, layout), target_bytes, n_out);
}

int make_ring_slots(struct pdma_ring *r, uint32_t pkt, enum pdma_ring_layout layout, uint32_t slot,
		    size_t target_bytes, uint32_t *n_out)
{
	struct pdma_gen_config g;
	struct pdma_gen *gen;
	uint32_t n = (uint32_t)(target_bytes / slot), si;
	int ret;

	pdma_gen_config_default(&g);
	g.streams = 4;
	g.packet_size = pkt;
	g.packets = n / 4;
	g.context = false;
	n = (uint32_t)(g.packets * 4);
	ret = pdma_ring_init(r, n, slot, layout);
	if (ret)
		return ret;
	ret = pdma_gen_open(&g, &gen);
	if (ret)
		return ret;
	for (uint32_t i = 0; i < n; i++) {
		uint8_t *s = pdma_ring_slot(r, i);
		int len = pdma_gen_next(gen, s + r->dgram_off, pdma_ring_room(r), &si);
		if (len <= 0) {
			pdma_gen_close(gen);
			return len < 0 ? len : -EIO;
		}
		pdma_slot_finish(s, r->dgram_off, (uint32_t)len, 0, i); /* as a receive thread does */
	}
	pdma_gen_close(gen);
	*n_out = n;
	return 0;
}

void dfr_cfg(struct pdma_dfr_config *c, uint32_t pkt, uint32_t n)
{
	pdma_dfr_config_default(c);
	c->max_streams = 4;
	c->out_pkts = n / 4 + 16; /* the whole batch fits: no position reuse */
	c->max_payload = pkt - 32;
}

int iters(const struct ctx *x, int full)
{
	return x->iters ? x->iters : x->quick ? 5 : full;
}

/* The packet sizes of (a) / (x): --sizes or the defaults. */
size_t size_list(const struct ctx *x, const uint32_t *def, size_t ndef, uint32_t *out)
{
	size_t n = 0;
	for (; n < 8 && x->sizes[n]; n++)
		out[n] = x->sizes[n];
	if (n)
		return n;
	memcpy(out, def, ndef * sizeof(*def));
	return ndef;
}

/* Is name one of the comma-separated items of list? */
bool in_list(const char *list, const char *name)
{
	size_t n = strlen(name);
	for (const char *p = list; (p = strstr(p, name)); p += n)
		if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == 0))
			return true;
	return false;
}

/* The benchmarks' GPU module, and its path in PEERDMA_VRT_CUDA so that the
 * ingest sessions of part (c) load this module too, not the library's: one
 * CUDA runtime in the process. */
static int load_gpu(struct ctx *x)
{
	int e = pdma_gpu_load_module(PDMA_GPU_BENCH_MODULE, "PEERDMA_VRT_CUDA_BENCH", &x->ops, &x->dl);
	if (e)
		return e;
	pdma_vrt_cuda_bench_api_fn fn = (pdma_vrt_cuda_bench_api_fn)dlsym(x->dl, "pdma_vrt_cuda_bench_api");
	Dl_info di;
	if (!fn || fn(&x->bops, PDMA_GPU_BENCH_API_VERSION) || !dladdr((void *)fn, &di) || !di.dli_fname) {
		pdma_gpu_unload(x->dl);
		x->dl = NULL;
		return -EPROTO;
	}
	setenv("PEERDMA_VRT_CUDA", di.dli_fname, 1);
	return 0;
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
		{ "senders", required_argument, NULL, 'S' },
		{ "slot-layout", required_argument, NULL, 'L' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	struct ctx x = { 0 };
	const char *json_path = NULL, *parts = "abcdef";
	int opt;

	while ((opt = getopt_long(argc, argv, "qj:p:i:s:x:r:S:L:h", opts, NULL)) != -1) {
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
		case 'L':
			if (!strcmp(optarg, "auto") || !strcmp(optarg, "full") || !strcmp(optarg, "packed") ||
			    !strcmp(optarg, "tiny")) {
				x.layout = optarg[0] == 'a'   ? PDMA_SLOTS_AUTO
					   : optarg[0] == 'f' ? PDMA_SLOTS_FULL
					   : optarg[0] == 'p' ? PDMA_SLOTS_PACKED
							      : PDMA_SLOTS_TINY;
				break;
			}
			fprintf(stderr, "bench_ingest: --slot-layout wants auto, full, packed or tiny\n");
			return 2;
		case 'r': x.rxlist = optarg; break;
		case 'S':
			x.senders = (uint32_t)atoi(optarg);
			if (x.senders < 1 || x.senders > 16) {
				fprintf(stderr, "bench_ingest: --senders wants 1..16\n");
				return 2;
			}
			break;
		case 'h':
			printf("usage: bench_ingest [--quick] [--parts abcdefgx] [--json FILE] [--iters N]\n"
			       "                    [--sizes 1024,1500,...] [--x d2d,copy,simple,skel1,skel4,v7s,v11,auto,hdr,cpass,touch,touchp]\n"
			       "                    [--rx recvmmsg,io_uring,gro,xdp]   (receive I/O of parts c (not gro, xdp) and g;\n"
			       "                                                 default all)\n"
			       "                    [--senders N]   (gen's sender threads in part g, 1..16;\n"
			       "                                     default half the cores, at most 8)\n"
			       "                    [--slot-layout auto|full|packed|tiny]   (the rings of a, e, x;\n"
			       "                                     auto: tiny up to 76-byte packets, packed up to\n"
			       "                                     108, as ingest; tiny: packets over 76 bytes get\n"
			       "                                     packed slots)\n");
			return 0;
		default:
			return 2;
		}
	}
	x.root = json_object();
	int e = load_gpu(&x);
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
		printf("no GPU (%s): GPU parts skipped\n", e == -ENODEV   ? "no CUDA device"
							     : e == -ENOENT ? "module " PDMA_GPU_BENCH_MODULE " not found"
									    : "module version mismatch");
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
	if (strchr(parts, 'f'))
		part_f(&x);
	if (strchr(parts, 'g'))
		part_g(&x);
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
