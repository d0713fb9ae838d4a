// SPDX-License-Identifier: MIT
/*
 * The benchmarks' measurements of the GPU deframer (gpu_bench.h): linked with
 * the deframer's own objects into libpeerdma_vrt_cuda_bench.so
 * (ingest/deframe/cuda/CMakeLists.txt), so that the library carries no benchmark
 * code while these timings see its handle, launches and kernels as they are.
 * Besides the deframer: the copy ceilings (cudaMemcpy, copy kernels), the
 * one-pass kernel's warp copy without the deframing (skel) and probes of the
 * two-pass kernel's passes.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <vector>

#include "dfr.h"
#include "warp_copy.cuh"

extern "C" {
#include "gpu_bench.h"
}

/* Grid-stride copy with the one-pass deframer's occupancy (3 blocks of 256
 * per SM) and bytes in flight (8 loads of 16 bytes per lane before the
 * stores). */
__global__ void __launch_bounds__(256, 3) copy_kernel(const uint4 *__restrict__ a, uint4 *__restrict__ b,
						      size_t n16)
{
	const size_t nth = (size_t)gridDim.x * blockDim.x, tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	for (size_t base = 0; base < n16; base += nth * 8) {
		uint4 r[8];
#pragma unroll
		for (int q = 0; q < 8; q++) {
			size_t i = base + q * nth + tid;
			if (i < n16)
				r[q] = __ldg(a + i);
		}
#pragma unroll
		for (int q = 0; q < 8; q++) {
			size_t i = base + q * nth + tid;
			if (i < n16)
				b[i] = r[q];
		}
	}
}

/* One 16-byte unit per thread over a full grid. */
__global__ void copy_simple(const uint4 *__restrict__ a, uint4 *__restrict__ b, size_t n16)
{
	size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n16)
		b[i] = a[i];
}

/* The one-pass deframer without the deframing: the same grid, packet-to-lane
 * mapping and flattened copy of the same payloads, with source offset, length
 * and destination known in advance (no parse, no stream table, no tags).
 * Packet i goes to stream i % nstreams, position i / nstreams (the
 * generator's round-robin order). */
__global__ void __launch_bounds__(256, DFR_ONEPASS_MINB)
	skel_kernel(const uint8_t *__restrict__ slots, uint32_t slot_size, uint32_t n, uint32_t group,
		    uint8_t *out, uint32_t poff, uint32_t plen, uint32_t nstreams, unsigned long long region)
{
	const uint32_t lane = threadIdx.x & 31;
	const uint32_t warps = (gridDim.x * blockDim.x) >> 5;
	const uint32_t w = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	for (uint64_t it0 = 0; it0 < n; it0 += (uint64_t)warps * group) {
		uint64_t i = it0 + (uint64_t)lane * warps + w;
		uint32_t off = 0, len = 0;
		unsigned long long dst = 0;
		const uint8_t *myslot = slots + (size_t)(i < n ? i : 0) * slot_size;
		if (lane < group && i < n) {
			off = poff;
			len = plen;
			dst = (i % nstreams) * region + (i / nstreams) * plen;
		}
		dfr_copy_group<8>(myslot, out, lane, off, len, dst);
	}
}

/* Probes of the header pass's memory access (kinds TOUCH, TOUCHP): per packet
 * the three 16-byte loads of the slot's first 64 bytes and, with TR, the
 * trailer word the datagram length points at, folded into one word per packet
 * so that nothing is optimized away. */
template <bool TR>
__global__ void __launch_bounds__(256) hdr_touch(const uint8_t *__restrict__ slots, uint32_t slot_size, uint32_t n,
						 uint32_t *sink)
{
	const uint32_t i = blockIdx.x * 256 + threadIdx.x;
	if (i >= n)
		return;
	const uint4 *q = (const uint4 *)(slots + (size_t)i * slot_size);
	const uint4 a = q[0], b = q[2], e = q[3];
	uint32_t x = a.x ^ b.y ^ b.z ^ b.w ^ e.x ^ e.y ^ e.z ^ e.w;
	if (TR && a.x >= 4 && a.x <= slot_size - PDMA_SLOT_HDR)
		x ^= *(const uint32_t *)((const uint8_t *)q + PDMA_SLOT_HDR + (a.x & ~3u) - 4);
	sink[i] = x;
}

/* Median of iters timings (CUDA events on s[0]) of body(), after the
 * warm-ups; pre() runs before each start event (not timed). */
template <typename P, typename F>
static int timed(struct pdma_gpu_dfr *g, int iters, P pre, F body, double *med)
{
	cudaEvent_t a, b;
	std::vector<float> ms;
	/* PEERDMA_BENCH_WARMUP: warm-up passes (default 2; 0 under a profiler
	 * so that each measurement is one launch). */
	const char *wu = getenv("PEERDMA_BENCH_WARMUP");
	int warm = wu && *wu ? atoi(wu) : 2;
	CK(g, cudaEventCreate(&a));
	CK(g, cudaEventCreate(&b));
	for (int w = 0; w < warm; w++) { /* warm-up */
		int r = pre();
		if (!r)
			r = body();
		if (r)
			return r;
	}
	CK(g, cudaDeviceSynchronize());
	for (int i = 0; i < iters; i++) {
		float t;
		int r = pre();
		if (r)
			return r;
		CK(g, cudaEventRecord(a, g->s[0]));
		r = body();
		if (r)
			return r;
		CK(g, cudaEventRecord(b, g->s[0]));
		CK(g, cudaEventSynchronize(b));
		CK(g, cudaEventElapsedTime(&t, a, b));
		ms.push_back(t);
	}
	cudaEventDestroy(a);
	cudaEventDestroy(b);
	std::sort(ms.begin(), ms.end());
	*med = ms[ms.size() / 2] / 1e3;
	return 0;
}

static int nothing()
{
	return 0;
}

static void fill(struct pdma_gpu_bench *r, double sec, double bytes)
{
	r->seconds = sec;
	r->bytes = bytes;
	r->gbps = bytes / sec / 1e9;
}

/* Bytes a deframe pass must move: each packet (datagram) read once, each
 * placed payload written once. Not counted: the slot header and the slot's
 * padding (read in the same DRAM sectors as the datagram's first and last
 * bytes), the tag atomic (8 bytes) per packet and the stream-table reads: the
 * deframer's overhead. Computed on the host from the slots. */
static double deframe_bytes(const uint8_t *host_slots, uint32_t slot_size, uint32_t n,
			    const struct pdma_dfr_config *c)
{
	double b = 0;
	for (uint32_t i = 0; i < n; i++) {
		const struct pdma_slot_hdr *h = (const struct pdma_slot_hdr *)(host_slots + (size_t)i * slot_size);
		struct pdma_dfr_desc d;
		struct pdma_dfr_pkt r;
		b += h->len;
		if (pdma_dfr_header(c, host_slots + (size_t)i * slot_size, slot_size, &d, &r) == 0)
			b += r.payload_len;
	}
	return b;
}

static int b_deframe(struct pdma_gpu_dfr *g, const void *dev_slots, uint32_t slot_size, uint32_t n, int iters,
		     struct pdma_gpu_bench *r)
{
	std::vector<uint8_t> h((size_t)slot_size * n);
	double sec;
	CK(g, cudaMemcpy(h.data(), dev_slots, h.size(), cudaMemcpyDeviceToHost));
	double bytes = deframe_bytes(h.data(), slot_size, n, &g->c);
	/* Every pass starts from empty tags, or "newer wins" would skip the
	 * payload copies after the first pass. The reset (a memset of the tags,
	 * a benchmark artefact: ingest never resets them) runs before the start
	 * event, so the time is the kernel's alone, as the copy's is. */
	int ret = timed(g, iters, [&]() { return dfr_reset_tags(g, g->s[0]); },
			[&]() { return dfr_launch(g, dev_slots, slot_size, n, NULL, g->s[0], DFR_PASS_ALL); }, &sec);
	if (ret)
		return ret;
	fill(r, sec, bytes);
	return 0;
}

/* Copy kernels over half the deframer's byte count (read + written). */
static int copy_kernels(struct pdma_gpu_dfr *g, int kind, double bytes, int iters, struct pdma_gpu_bench *r)
{
	size_t n16 = (size_t)(bytes / 2) / 16;
	uint4 *a, *b;
	double sec;
	CK(g, cudaMalloc(&a, n16 * 16));
	CK(g, cudaMalloc(&b, n16 * 16));
	CK(g, cudaMemset(a, 0x5a, n16 * 16));
	int ret = timed(g, iters, nothing, [&]() {
		if (kind == PDMA_GPU_COPY_KERNEL)
			copy_kernel<<<g->sms * 3, 256, 0, g->s[0]>>>(a, b, n16);
		else
			copy_simple<<<(unsigned)((n16 + 255) / 256), 256, 0, g->s[0]>>>(a, b, n16);
		CK(g, cudaGetLastError());
		return 0;
	}, &sec);
	cudaFree(a);
	cudaFree(b);
	if (ret)
		return ret;
	fill(r, sec, 32.0 * (double)n16);
	return 0;
}

/* v11's passes alone, in place: CPASS times the copy pass (its header pass
 * before the start event, same work list), HDR the header pass. */
static int tp_pass(struct pdma_gpu_dfr *g, int kind, const void *dev_slots, uint32_t slot_size, uint32_t n,
		   int iters, double *sec)
{
	const struct kvar *was = g->kv;
	int ret = dfr_set_kernel(g, "v11");
	if (ret)
		return ret;
	if (kind == PDMA_GPU_COPY_CPASS)
		ret = timed(g, iters, [&]() {
			int e = dfr_reset_tags(g, g->s[0]);
			return e ? e : dfr_launch(g, dev_slots, slot_size, n, NULL, g->s[0], DFR_PASS_HDR);
		}, [&]() { return dfr_launch(g, dev_slots, slot_size, n, NULL, g->s[0], DFR_PASS_COPY); }, sec);
	else
		ret = timed(g, iters, [&]() { return dfr_reset_tags(g, g->s[0]); },
			    [&]() { return dfr_launch(g, dev_slots, slot_size, n, NULL, g->s[0], DFR_PASS_HDR); }, sec);
	g->kv = was;
	return ret;
}

static int touch(struct pdma_gpu_dfr *g, int kind, const void *dev_slots, uint32_t slot_size, uint32_t n,
		 int iters, double *sec)
{
	uint32_t *sink;
	const uint32_t blocks = (n + 255) / 256;
	CK(g, cudaMalloc(&sink, (size_t)n * sizeof(uint32_t)));
	int ret = timed(g, iters, nothing, [&]() {
		if (kind == PDMA_GPU_COPY_TOUCH)
			hdr_touch<true><<<blocks, 256, 0, g->s[0]>>>((const uint8_t *)dev_slots, slot_size, n, sink);
		else
			hdr_touch<false><<<blocks, 256, 0, g->s[0]>>>((const uint8_t *)dev_slots, slot_size, n, sink);
		CK(g, cudaGetLastError());
		return 0;
	}, sec);
	cudaFree(sink);
	return ret;
}

/* The skeleton: payloads of the same slots, moved by the one-pass warp copy
 * into one contiguous output (SKEL1) or four streams (SKEL4). */
static int skel(struct pdma_gpu_dfr *g, int kind, const void *dev_slots, const uint8_t *h, uint32_t slot_size,
		uint32_t n, int iters, double *sec)
{
	struct pdma_dfr_desc d;
	struct pdma_dfr_pkt p;
	if (pdma_dfr_header(&g->c, h, slot_size, &d, &p) != PDMA_DFR_ST_DATA) {
		snprintf(g->err, sizeof(g->err), "bench copy: slot 0 is not a data packet");
		return -EINVAL;
	}
	uint32_t ns = kind == PDMA_GPU_COPY_SKEL1 ? 1 : (g->c.max_streams < 4 ? g->c.max_streams : 4);
	unsigned long long region = kind == PDMA_GPU_COPY_SKEL1
					    ? (unsigned long long)g->c.max_streams * g->c.out_pkts * g->c.max_payload
					    : (unsigned long long)g->c.out_pkts * g->c.max_payload;
	if ((unsigned long long)(n / ns + 1) * p.payload_len > region) {
		snprintf(g->err, sizeof(g->err), "bench copy: output tables too small");
		return -EINVAL;
	}
	uint32_t blocks, group;
	dfr_kshape(g, n, &blocks, &group);
	return timed(g, iters, nothing, [&]() {
		skel_kernel<<<blocks, 256, 0, g->s[0]>>>((const uint8_t *)dev_slots, slot_size, n, group, g->t.out,
							 PDMA_SLOT_HDR + p.payload_off, p.payload_len, ns, region);
		CK(g, cudaGetLastError());
		return 0;
	}, sec);
}

static int b_copy(struct pdma_gpu_dfr *g, int kind, const void *dev_slots, uint32_t slot_size, uint32_t n,
		  int iters, struct pdma_gpu_bench *r)
{
	std::vector<uint8_t> h((size_t)slot_size * n);
	double sec;
	int ret;
	CK(g, cudaMemcpy(h.data(), dev_slots, h.size(), cudaMemcpyDeviceToHost));
	double bytes = deframe_bytes(h.data(), slot_size, n, &g->c);
	switch (kind) {
	case PDMA_GPU_COPY_KERNEL:
	case PDMA_GPU_COPY_SIMPLE:
		return copy_kernels(g, kind, bytes, iters, r);
	case PDMA_GPU_COPY_CPASS:
	case PDMA_GPU_COPY_HDR:
		ret = tp_pass(g, kind, dev_slots, slot_size, n, iters, &sec);
		break;
	case PDMA_GPU_COPY_TOUCH:
	case PDMA_GPU_COPY_TOUCHP:
		ret = touch(g, kind, dev_slots, slot_size, n, iters, &sec);
		break;
	case PDMA_GPU_COPY_SKEL1:
	case PDMA_GPU_COPY_SKEL4:
		ret = skel(g, kind, dev_slots, h.data(), slot_size, n, iters, &sec);
		break;
	default:
		return -EINVAL;
	}
	if (ret)
		return ret;
	fill(r, sec, bytes);
	return 0;
}

static int b_d2d(struct pdma_gpu_dfr *g, size_t bytes, int iters, struct pdma_gpu_bench *r)
{
	void *a, *b;
	double sec;
	CK(g, cudaMalloc(&a, bytes));
	CK(g, cudaMalloc(&b, bytes));
	CK(g, cudaMemset(a, 0x5a, bytes));
	int ret = timed(g, iters, nothing, [&]() {
		CK(g, cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, g->s[0]));
		return 0;
	}, &sec);
	cudaFree(a);
	cudaFree(b);
	if (ret)
		return ret;
	fill(r, sec, 2.0 * (double)bytes); /* read + written */
	return 0;
}

static int b_h2d(struct pdma_gpu_dfr *g, const void *host, size_t bytes, size_t chunk, int iters,
		 struct pdma_gpu_bench *r)
{
	void *d;
	double sec;
	CK(g, cudaMalloc(&d, bytes));
	int ret = timed(g, iters, nothing, [&]() {
		for (size_t o = 0; o < bytes; o += chunk)
			CK(g, cudaMemcpyAsync((uint8_t *)d + o, (const uint8_t *)host + o, std::min(chunk, bytes - o),
					      cudaMemcpyHostToDevice, g->s[0]));
		return 0;
	}, &sec);
	cudaFree(d);
	if (ret)
		return ret;
	fill(r, sec, (double)bytes);
	return 0;
}

/* A host-staged pass timed with CUDA events: start on s[0], s[1] waits for
 * it, the pass is enqueued (stream or graph launch: g->launch), the end event
 * on s[0] waits for s[1]'s last work. */
static int b_staged(struct pdma_gpu_dfr *g, const void *host, uint32_t slot_size, uint32_t span, uint32_t n,
		    size_t chunk, int iters, struct pdma_gpu_bench *r)
{
	double sec;
	int ret = timed(g, iters, [&]() { return dfr_reset_tags(g, g->s[0]); }, [&]() {
		cudaEvent_t a;
		CK(g, cudaEventCreateWithFlags(&a, cudaEventDisableTiming));
		CK(g, cudaEventRecord(a, g->s[0]));
		CK(g, cudaStreamWaitEvent(g->s[1], a, 0));
		cudaEventDestroy(a);
		int e = dfr_enqueue_staged(g, host, slot_size, span, n, chunk, false, 0);
		if (e)
			return e;
		CK(g, cudaEventRecord(g->ev[1], g->s[1]));
		CK(g, cudaStreamWaitEvent(g->s[0], g->ev[1], 0));
		return 0;
	}, &sec);
	if (ret)
		return ret;
	fill(r, sec, (double)dfr_stage_pitch(g, slot_size, span) * n); /* bytes through the copy engine */
	return 0;
}

static int b_mapped(struct pdma_gpu_dfr *g, const void *host, uint32_t slot_size, uint32_t n, int iters,
		    struct pdma_gpu_bench *r)
{
	const void *dp;
	double sec;
	int ret = dfr_dev_ptr(g, host, &dp);
	if (ret)
		return ret;
	double bytes = 0;
	for (uint32_t i = 0; i < n; i++)
		bytes += ((const struct pdma_slot_hdr *)((const uint8_t *)host + (size_t)i * slot_size))->len;
	ret = timed(g, iters, [&]() { return dfr_reset_tags(g, g->s[0]); },
		    [&]() { return dfr_launch(g, dp, slot_size, n, NULL, g->s[0], DFR_PASS_ALL); }, &sec);
	if (ret)
		return ret;
	fill(r, sec, bytes); /* packet bytes read over PCIe */
	return 0;
}

static double now_s()
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int b_batches(struct pdma_gpu_dfr *g, const void *host, uint32_t slot_size, uint32_t per, uint32_t batches,
		     int staged_path, int mode, int sync_each, int reps, struct pdma_gpu_bench *r)
{
	const void *dp;
	int old = g->launch, ret;
	std::vector<struct pdma_dfr_desc> hd(per);
	std::vector<double> t;
	if (!per || !batches || reps < 1)
		return -EINVAL;
	if ((ret = dfr_dev_ptr(g, host, &dp)) || (ret = dfr_ensure_desc(g, (size_t)per * batches)) ||
	    (ret = dfr_set_launch(g, mode)))
		return ret;
	for (int rep = -1; rep < reps && !ret; rep++) { /* rep -1: warm-up (builds the graphs) */
		if ((ret = dfr_reset_tags(g, g->s[0])) || (ret = dfr_sync_all(g)))
			break;
		double t0 = now_s();
		for (uint32_t b = 0; b < batches && !ret; b++) {
			const size_t o = (size_t)b * per * slot_size;
			const uint8_t *hb = (const uint8_t *)host + o;
			const uint32_t span = staged_path ? pdma_slots_span(hb, slot_size, per) : 0;
			if (sync_each)
				ret = staged_path ? dfr_run_staged(g, hb, slot_size, span, per, (size_t)per * slot_size,
								   hd.data())
						  : dfr_run(g, hb, slot_size, per, hd.data());
			else
				ret = staged_path ? dfr_enqueue_staged(g, hb, slot_size, span, per, (size_t)per * slot_size,
								       true, (size_t)b * per)
						  : dfr_enqueue_run(g, (const uint8_t *)dp + o, slot_size, per, true,
								    (size_t)b * per);
		}
		if (!ret && !sync_each)
			ret = dfr_sync_all(g);
		double t1 = now_s();
		if (rep >= 0)
			t.push_back((t1 - t0) / batches);
	}
	bool fell_back = mode == PDMA_GPU_LAUNCH_GRAPH && g->launch != PDMA_GPU_LAUNCH_GRAPH;
	g->launch = fell_back ? PDMA_GPU_LAUNCH_STREAM : old;
	if (ret)
		return ret;
	if (fell_back)
		return -EIO; /* last_error() says why: not a graph measurement */
	std::sort(t.begin(), t.end());
	fill(r, t[t.size() / 2], (double)per * slot_size);
	return 0;
}

static int b_copy_one(struct pdma_gpu_dfr *g, void *d, const void *s, size_t n)
{
	CK(g, cudaMemcpy(d, s, n, cudaMemcpyHostToDevice));
	return 0;
}

extern "C" __attribute__((visibility("default"))) int pdma_vrt_cuda_bench_api(struct pdma_gpu_bench_ops *ops,
									      uint32_t version)
{
	if (version != PDMA_GPU_BENCH_API_VERSION)
		return -EPROTO;
	ops->version = PDMA_GPU_BENCH_API_VERSION;
	ops->deframe = b_deframe;
	ops->d2d = b_d2d;
	ops->h2d = b_h2d;
	ops->staged = b_staged;
	ops->mapped = b_mapped;
	ops->copy = b_copy;
	ops->batches = b_batches;
	ops->copy_one = b_copy_one;
	return 0;
}
