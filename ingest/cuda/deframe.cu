// SPDX-License-Identifier: MIT
/*
 * The GPU deframer: validates VITA-49 headers (the same code as the CPU
 * deframer: include/peerdma/vrt.h and ingest/deframe.h are compiled here for
 * the device), strips them, places each payload by sample count into its
 * stream's output buffer and flags gaps through the per-position tags.
 *
 * Per warp 32 packets at a time: each lane parses one header and does the
 * table operations (stream lookup/claim, payload length, tag); then the whole
 * warp copies the payloads. The grid is capped at the resident block count,
 * so one launch covers any batch size.
 *
 * Built by nvcc into libpeerdma_vrt_cuda.so (ingest/cuda/CMakeLists.txt) and
 * loaded with dlopen() by ingest/gpu_loader.c only on machines with a GPU.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <algorithm>
#include <vector>

extern "C" {
#include "deframe.h"
#include "gpu.h"
}

struct pdma_gpu_dfr {
	struct pdma_dfr_config c;
	int device;
	cudaDeviceProp prop;
	struct pdma_dfr_tables t;   /* device pointers */
	struct pdma_dfr_desc *d_desc;
	size_t desc_cap;            /* descriptors */
	uint8_t *stage[2];          /* host-staged chunk buffers */
	size_t stage_cap;
	cudaStream_t s[2];
	cudaEvent_t ev[2];
	char err[256];
	int sms;
};

#define CK(g, call)                                                                       \
	do {                                                                              \
		cudaError_t e_ = (call);                                                  \
		if (e_ != cudaSuccess) {                                                  \
			snprintf((g)->err, sizeof((g)->err), "%s: %s", #call,             \
				 cudaGetErrorString(e_));                                 \
			return e_ == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;          \
		}                                                                         \
	} while (0)

/* Device stream lookup: plain loads first (the common case, a known stream,
 * costs no atomic), compare-and-swap only to claim a free entry. */
__device__ static int dfr_lookup(const struct pdma_dfr_config *c, unsigned long long *keys,
				 uint32_t id, bool claim)
{
	unsigned long long want = (1ull << 32) | id;
	for (uint32_t i = 0; i < c->max_streams; i++) {
		unsigned long long v = *(volatile unsigned long long *)&keys[i];
		if (v == want)
			return (int)i;
		if (v == 0) {
			if (!claim)
				return -1;
			v = atomicCAS(&keys[i], 0ull, want);
			if (v == 0 || v == want)
				return (int)i;
		}
	}
	return -1;
}

#define DFR_CACHE 64   /* stream-table entries cached in shared memory */

/* Header stage of one packet, run by one lane: validate, find the stream
 * (shared-memory copy of the table first; global compare-and-swap only when a
 * stream is first seen), check the payload size, and claim the output
 * position with the tag atomic (newer wins). */
__device__ static int dfr_lane(const struct pdma_dfr_config &c, const struct pdma_dfr_tables &t,
			       unsigned long long *s_keys, uint32_t *s_plen, uint32_t ncache,
			       const uint8_t *slot, uint32_t slot_size, struct pdma_dfr_desc &d,
			       uint32_t &off, uint32_t &len, unsigned long long &dst)
{
	struct pdma_dfr_pkt r;
	int st = pdma_dfr_header(&c, slot, slot_size, &d, &r);
	if (st < 0)
		return st;
	unsigned long long want = (1ull << 32) | d.stream_id;
	int idx = -1;
	for (uint32_t k = 0; k < ncache; k++) {
		unsigned long long v = s_keys[k];
		if (v == want) {
			idx = (int)k;
			break;
		}
		if (v == 0)
			break;
	}
	if (idx < 0) {
		idx = dfr_lookup(&c, (unsigned long long *)t.keys, d.stream_id, true);
		if (idx < 0)
			return -PDMA_DFR_E_TABLE_FULL;
		if ((uint32_t)idx < ncache)
			s_keys[idx] = want;
	}
	d.stream = (uint16_t)idx;
	if (st != PDMA_DFR_ST_DATA)
		return st;
	uint32_t cur = (uint32_t)idx < ncache ? s_plen[idx] : 0;
	if (cur == 0) {
		uint32_t *pl = &t.plen[idx];
		cur = *(volatile uint32_t *)pl;
		if (cur == 0) {
			cur = atomicCAS(pl, 0u, r.payload_len);
			if (cur == 0)
				cur = r.payload_len;
		}
		if ((uint32_t)idx < ncache)
			s_plen[idx] = cur;
	}
	if (cur != r.payload_len)
		return -PDMA_DFR_E_SIZE_CHANGE;
	size_t pos = (size_t)(r.pkt % c.out_pkts);
	unsigned long long *tag = (unsigned long long *)&t.tags[(size_t)idx * c.out_pkts + pos];
	if (atomicMax(tag, (unsigned long long)(r.pkt + 1)) >= r.pkt + 1)
		return PDMA_DFR_ST_DATA_OLD; /* duplicate or stale: never overwrites */
	off = PDMA_SLOT_HDR + r.payload_off;
	len = r.payload_len;
	dst = (size_t)idx * c.out_pkts * c.max_payload + pos * r.payload_len;
	return PDMA_DFR_ST_DATA;
}

/* The warp copies the payloads of its group of packets as one flattened
 * list of units (16 bytes when every payload of the group and its destination
 * are 16-byte aligned, else 4-byte words): each round every lane loads R units
 * (from whichever packets they fall in) before storing any, so several
 * packets' bytes are in flight per warp at once; the memory system, not the
 * per-packet latency, then sets the pace. Lane j owns packet j: its source
 * offset in its slot (off), byte count (len, 0: nothing to copy) and output
 * offset (dst). */
template <typename U, int R>
__device__ static void dfr_copy_units(const uint8_t *myslot, uint8_t *out, uint32_t lane,
				      uint32_t off, uint32_t cnt, unsigned long long dst)
{
	uint32_t incl = cnt;
#pragma unroll
	for (int d = 1; d < 32; d <<= 1) {
		uint32_t v = __shfl_up_sync(0xffffffffu, incl, d);
		if (lane >= (uint32_t)d)
			incl += v;
	}
	const uint32_t total = __shfl_sync(0xffffffffu, incl, 31);
	const uint32_t excl = incl - cnt;
	const unsigned long long srcb = (unsigned long long)(uintptr_t)(myslot + off);
	uint32_t j = 0; /* packet of this lane's current unit: only moves forward */
	for (uint32_t x0 = 0; x0 < total; x0 += 32u * R) {
		U r[R];
		uint32_t jk[R];
#pragma unroll
		for (int q = 0; q < R; q++) {
			uint32_t x = x0 + lane + 32u * q;
			/* Advance to the last packet starting at or before x: a
			 * warp-uniform loop (every lane shuffles), usually 0-1 steps
			 * for large packets, a few for small ones. */
			for (;;) {
				uint32_t e = __shfl_sync(0xffffffffu, excl, (j + 1) & 31);
				uint32_t step = j < 31 && e <= x;
				if (!__any_sync(0xffffffffu, step))
					break;
				j += step;
			}
			uint32_t k = x - __shfl_sync(0xffffffffu, excl, j);
			unsigned long long sp = __shfl_sync(0xffffffffu, srcb, j);
			jk[q] = (j << 27) | k;
			if (x < total)
				r[q] = __ldg((const U *)(uintptr_t)sp + k);
		}
#pragma unroll
		for (int q = 0; q < R; q++) {
			uint32_t x = x0 + lane + 32u * q;
			uint32_t jj = jk[q] >> 27, k = jk[q] & ((1u << 27) - 1);
			unsigned long long dp = __shfl_sync(0xffffffffu, dst, jj);
			if (x < total)
				((U *)(out + dp))[k] = r[q];
		}
	}
}

__device__ static void dfr_copy_group(const uint8_t *myslot, uint8_t *out, uint32_t lane,
				      uint32_t off, uint32_t len, unsigned long long dst)
{
	bool aligned = ((((uintptr_t)(myslot + off) | (uintptr_t)(out + dst) | len) & 15) == 0);
	if (__all_sync(0xffffffffu, len == 0 || aligned))
		dfr_copy_units<uint4, 8>(myslot, out, lane, off, len / 16, dst);
	else
		dfr_copy_units<uint32_t, 8>(myslot, out, lane, off, len / 4, dst);
}

/* A warp takes `group` (<= 32) packets at a time. Each lane runs the header
 * stage of one of them (so the serial, branchy parse costs 1/32 of the issue
 * slots it would cost with one warp per packet), then the whole warp copies
 * the group's payloads (dfr_copy_group). */
__global__ void __launch_bounds__(256, 3) dfr_kernel(struct pdma_dfr_config c, struct pdma_dfr_tables t,
						     const uint8_t *__restrict__ slots, uint32_t slot_size,
						     uint32_t n, uint32_t group, struct pdma_dfr_desc *desc)
{
	__shared__ unsigned long long s_keys[DFR_CACHE];
	__shared__ uint32_t s_plen[DFR_CACHE];
	const uint32_t lane = threadIdx.x & 31;
	const uint32_t warps = (gridDim.x * blockDim.x) >> 5;
	const uint32_t ncache = c.max_streams < DFR_CACHE ? c.max_streams : DFR_CACHE;

	for (uint32_t k = threadIdx.x; k < ncache; k += blockDim.x) {
		s_keys[k] = *(volatile unsigned long long *)&t.keys[k];
		s_plen[k] = *(volatile uint32_t *)&t.plen[k];
	}
	__syncthreads();

	/* Lane j of warp w takes packet it * warps * group + j * warps + w: the
	 * warps copy their lane-0 packets, then their lane-1 packets, ..., so at
	 * any moment the whole grid streams through one contiguous stretch of the
	 * ring and of the outputs (DRAM locality), as a plain copy would. */
	const uint32_t w = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	for (uint64_t it0 = 0; it0 < n; it0 += (uint64_t)warps * group) {
		uint64_t i = it0 + (uint64_t)lane * warps + w;
		uint32_t off = 0, len = 0;
		unsigned long long dst = 0;
		const uint8_t *myslot = slots + (size_t)(i < n ? i : 0) * slot_size;
		if (lane < group && i < n) {
			struct pdma_dfr_desc d;
			int st = dfr_lane(c, t, s_keys, s_plen, ncache, myslot, slot_size, d, off, len, dst);
			d.status = (int8_t)st;
			if (desc)
				desc[i] = d;
		}
		dfr_copy_group(myslot, t.out, lane, off, len, dst);
	}
}

static int launch(struct pdma_gpu_dfr *g, const void *slots, uint32_t slot_size, uint32_t n,
		  struct pdma_dfr_desc *d_desc, cudaStream_t s)
{
	if (!n)
		return 0;
	/* Packets per warp: as many as 32 (the header stage is then shared by
	 * a full warp), but few enough that every resident warp gets work in
	 * balanced waves: a small batch (a 1 MiB host-staged chunk) or a batch
	 * of few large packets still spreads over the whole GPU. */
	uint32_t resident = (uint32_t)g->sms * 3 * 8; /* 3 blocks of 8 warps per SM */
	uint32_t waves = (uint32_t)((n + 32ull * resident - 1) / (32ull * resident));
	uint32_t group = (uint32_t)((n + (uint64_t)waves * resident - 1) / ((uint64_t)waves * resident));
	if (group < 1)
		group = 1;
	uint32_t warps_needed = (n + group - 1) / group;
	uint32_t blocks = (warps_needed + 7) / 8;
	if (blocks > (uint32_t)g->sms * 3)
		blocks = (uint32_t)g->sms * 3;
	dfr_kernel<<<blocks, 256, 0, s>>>(g->c, g->t, (const uint8_t *)slots, slot_size, n, group, d_desc);
	CK(g, cudaGetLastError());
	return 0;
}

static int ensure_desc(struct pdma_gpu_dfr *g, size_t n)
{
	if (n <= g->desc_cap)
		return 0;
	if (g->d_desc)
		cudaFree(g->d_desc);
	g->d_desc = NULL;
	g->desc_cap = 0;
	CK(g, cudaMalloc(&g->d_desc, n * sizeof(struct pdma_dfr_desc)));
	g->desc_cap = n;
	return 0;
}

static int g_reset(struct pdma_gpu_dfr *g)
{
	size_t ns = g->c.max_streams, tags = ns * g->c.out_pkts;
	CK(g, cudaMemset(g->t.keys, 0, ns * sizeof(uint64_t)));
	CK(g, cudaMemset(g->t.plen, 0, ns * sizeof(uint32_t)));
	CK(g, cudaMemset(g->t.tags, 0, tags * sizeof(uint64_t)));
	CK(g, cudaMemset(g->t.out, 0, tags * g->c.max_payload));
	CK(g, cudaDeviceSynchronize());
	return 0;
}

static void g_close(struct pdma_gpu_dfr *g)
{
	if (!g)
		return;
	cudaFree(g->t.keys);
	cudaFree(g->t.plen);
	cudaFree(g->t.tags);
	cudaFree(g->t.out);
	cudaFree(g->d_desc);
	for (int i = 0; i < 2; i++) {
		cudaFree(g->stage[i]);
		if (g->s[i])
			cudaStreamDestroy(g->s[i]);
		if (g->ev[i])
			cudaEventDestroy(g->ev[i]);
	}
	free(g);
}

static int g_open(const struct pdma_dfr_config *c, int device, struct pdma_gpu_dfr **out)
{
	struct pdma_gpu_dfr *g = (struct pdma_gpu_dfr *)calloc(1, sizeof(*g));
	int ret;
	if (!g)
		return -ENOMEM;
	g->c = *c;
	g->device = device;
	size_t ns = c->max_streams, tags = ns * c->out_pkts;
#define OPEN_CK(call)                                                  \
	do {                                                           \
		cudaError_t e_ = (call);                               \
		if (e_ != cudaSuccess) {                               \
			fprintf(stderr, "gpu deframer: %s: %s\n", #call, \
				cudaGetErrorString(e_));               \
			ret = e_ == cudaErrorMemoryAllocation ? -ENOMEM : -ENODEV; \
			goto err;                                      \
		}                                                      \
	} while (0)
	OPEN_CK(cudaSetDevice(device));
	OPEN_CK(cudaGetDeviceProperties(&g->prop, device));
	g->sms = g->prop.multiProcessorCount;
	OPEN_CK(cudaMalloc(&g->t.keys, ns * sizeof(uint64_t)));
	OPEN_CK(cudaMalloc(&g->t.plen, ns * sizeof(uint32_t)));
	OPEN_CK(cudaMalloc(&g->t.tags, tags * sizeof(uint64_t)));
	OPEN_CK(cudaMalloc(&g->t.out, tags * c->max_payload));
	for (int i = 0; i < 2; i++) {
		OPEN_CK(cudaStreamCreateWithFlags(&g->s[i], cudaStreamNonBlocking));
		OPEN_CK(cudaEventCreate(&g->ev[i]));
	}
	ret = g_reset(g);
	if (ret)
		goto err;
	*out = g;
	return 0;
err:
	g_close(g);
	return ret;
}

static const char *g_name(struct pdma_gpu_dfr *g)
{
	return g->prop.name;
}

static int g_dev_alloc(struct pdma_gpu_dfr *g, size_t bytes, void **p)
{
	CK(g, cudaMalloc(p, bytes));
	return 0;
}

static int g_dev_free(struct pdma_gpu_dfr *g, void *p)
{
	CK(g, cudaFree(p));
	return 0;
}

static int g_upload(struct pdma_gpu_dfr *g, void *d, const void *s, size_t n)
{
	CK(g, cudaMemcpy(d, s, n, cudaMemcpyHostToDevice));
	return 0;
}

static int g_host_register(struct pdma_gpu_dfr *g, void *p, size_t n)
{
	CK(g, cudaHostRegister(p, n, cudaHostRegisterMapped | cudaHostRegisterPortable));
	return 0;
}

static int g_host_unregister(struct pdma_gpu_dfr *g, void *p)
{
	CK(g, cudaHostUnregister(p));
	return 0;
}

/* Device address of a pointer: itself for device memory, the mapped alias for
 * registered host memory. */
static int dev_ptr(struct pdma_gpu_dfr *g, const void *p, const void **dp)
{
	cudaPointerAttributes a;
	CK(g, cudaPointerGetAttributes(&a, p));
	if (a.type == cudaMemoryTypeHost) {
		void *d;
		CK(g, cudaHostGetDevicePointer(&d, (void *)p, 0));
		*dp = d;
	} else if (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged) {
		*dp = p;
	} else {
		snprintf(g->err, sizeof(g->err), "slots are not device or registered host memory");
		return -EFAULT;
	}
	return 0;
}

static int g_run(struct pdma_gpu_dfr *g, const void *slots, uint32_t slot_size, uint32_t n,
		 struct pdma_dfr_desc *desc)
{
	const void *dp;
	int ret = dev_ptr(g, slots, &dp);
	if (ret)
		return ret;
	if (desc && (ret = ensure_desc(g, n)))
		return ret;
	ret = launch(g, dp, slot_size, n, desc ? g->d_desc : NULL, g->s[0]);
	if (ret)
		return ret;
	if (desc)
		CK(g, cudaMemcpyAsync(desc, g->d_desc, (size_t)n * sizeof(*desc),
				      cudaMemcpyDeviceToHost, g->s[0]));
	CK(g, cudaStreamSynchronize(g->s[0]));
	return 0;
}

static int ensure_stage(struct pdma_gpu_dfr *g, size_t bytes)
{
	if (bytes <= g->stage_cap)
		return 0;
	for (int i = 0; i < 2; i++) {
		cudaFree(g->stage[i]);
		g->stage[i] = NULL;
	}
	g->stage_cap = 0;
	for (int i = 0; i < 2; i++)
		CK(g, cudaMalloc(&g->stage[i], bytes));
	g->stage_cap = bytes;
	return 0;
}

/* Host-staged: chunk k is copied on stream k % 2 and deframed there after
 * its copy; the other stream's copy overlaps this kernel. Slots are never
 * split: a chunk is a whole number of slots. Chunks of one stream run in order,
 * and the two streams' kernels only touch the tables through atomics whose
 * result does not depend on order (newer wins). */
static int staged(struct pdma_gpu_dfr *g, const void *host, uint32_t slot_size, uint32_t n,
		  size_t chunk, struct pdma_dfr_desc *desc, bool want_desc)
{
	uint32_t per = (uint32_t)(chunk / slot_size);
	int ret;
	if (per == 0)
		per = 1;
	if ((ret = ensure_stage(g, (size_t)per * slot_size)))
		return ret;
	if (want_desc && (ret = ensure_desc(g, n)))
		return ret;
	for (uint32_t first = 0, k = 0; first < n; first += per, k++) {
		uint32_t cnt = n - first < per ? n - first : per;
		cudaStream_t s = g->s[k & 1];
		CK(g, cudaMemcpyAsync(g->stage[k & 1], (const uint8_t *)host + (size_t)first * slot_size,
				      (size_t)cnt * slot_size, cudaMemcpyHostToDevice, s));
		ret = launch(g, g->stage[k & 1], slot_size, cnt, want_desc ? g->d_desc + first : NULL, s);
		if (ret)
			return ret;
	}
	if (want_desc) {
		CK(g, cudaStreamSynchronize(g->s[1]));
		CK(g, cudaMemcpyAsync(desc, g->d_desc, (size_t)n * sizeof(*desc),
				      cudaMemcpyDeviceToHost, g->s[0]));
	}
	CK(g, cudaStreamSynchronize(g->s[0]));
	CK(g, cudaStreamSynchronize(g->s[1]));
	return 0;
}

static int g_run_staged(struct pdma_gpu_dfr *g, const void *host, uint32_t slot_size, uint32_t n,
			size_t chunk, struct pdma_dfr_desc *desc)
{
	return staged(g, host, slot_size, n, chunk, desc, desc != NULL);
}

static int g_read_tables(struct pdma_gpu_dfr *g, struct pdma_dfr_tables *t)
{
	size_t ns = g->c.max_streams, tags = ns * g->c.out_pkts;
	CK(g, cudaMemcpy(t->keys, g->t.keys, ns * sizeof(uint64_t), cudaMemcpyDeviceToHost));
	CK(g, cudaMemcpy(t->plen, g->t.plen, ns * sizeof(uint32_t), cudaMemcpyDeviceToHost));
	CK(g, cudaMemcpy(t->tags, g->t.tags, tags * sizeof(uint64_t), cudaMemcpyDeviceToHost));
	CK(g, cudaMemcpy(t->out, g->t.out, tags * g->c.max_payload, cudaMemcpyDeviceToHost));
	return 0;
}

/* ---- measurements ---- */

template <typename F> static int timed(struct pdma_gpu_dfr *g, int iters, F body, double *med)
{
	cudaEvent_t a, b;
	std::vector<float> ms;
	CK(g, cudaEventCreate(&a));
	CK(g, cudaEventCreate(&b));
	for (int w = 0; w < 2; w++) { /* warm-up */
		int r = body();
		if (r)
			return r;
	}
	CK(g, cudaDeviceSynchronize());
	for (int i = 0; i < iters; i++) {
		float t;
		CK(g, cudaEventRecord(a, g->s[0]));
		int r = body();
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

static void fill(struct pdma_gpu_bench *r, double sec, double bytes)
{
	r->seconds = sec;
	r->bytes = bytes;
	r->gbps = bytes / sec / 1e9;
}

/* Bytes a deframe pass must move: each packet read once, each payload
 * written once (the header stage's table traffic is not counted: it is the
 * deframer's overhead). Computed on the host from the slots. */
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

static int g_bench_deframe(struct pdma_gpu_dfr *g, const void *dev_slots, uint32_t slot_size,
			   uint32_t n, int iters, struct pdma_gpu_bench *r)
{
	std::vector<uint8_t> h((size_t)slot_size * n);
	double sec;
	CK(g, cudaMemcpy(h.data(), dev_slots, h.size(), cudaMemcpyDeviceToHost));
	double bytes = deframe_bytes(h.data(), slot_size, n, &g->c);
	int ret = timed(g, iters, [&]() {
		/* Every pass starts from empty tags, or "newer wins" would skip
		 * the payload copies after the first pass. The reset (a memset of
		 * the tags) is inside the timed region: it is small (8 bytes per
		 * output position) and is counted against the deframer. */
		cudaMemsetAsync(g->t.tags, 0, (size_t)g->c.max_streams * g->c.out_pkts * 8, g->s[0]);
		return launch(g, dev_slots, slot_size, n, NULL, g->s[0]);
	}, &sec);
	if (ret)
		return ret;
	fill(r, sec, bytes);
	return 0;
}

static int g_bench_d2d(struct pdma_gpu_dfr *g, size_t bytes, int iters, struct pdma_gpu_bench *r)
{
	void *a, *b;
	double sec;
	CK(g, cudaMalloc(&a, bytes));
	CK(g, cudaMalloc(&b, bytes));
	CK(g, cudaMemset(a, 0x5a, bytes));
	int ret = timed(g, iters, [&]() {
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

static int g_bench_h2d(struct pdma_gpu_dfr *g, const void *host, size_t bytes, size_t chunk,
		       int iters, struct pdma_gpu_bench *r)
{
	void *d;
	double sec;
	CK(g, cudaMalloc(&d, bytes));
	int ret = timed(g, iters, [&]() {
		for (size_t o = 0; o < bytes; o += chunk)
			CK(g, cudaMemcpyAsync((uint8_t *)d + o, (const uint8_t *)host + o,
					      std::min(chunk, bytes - o), cudaMemcpyHostToDevice, g->s[0]));
		return 0;
	}, &sec);
	cudaFree(d);
	if (ret)
		return ret;
	fill(r, sec, (double)bytes);
	return 0;
}

static int g_bench_staged(struct pdma_gpu_dfr *g, const void *host, uint32_t slot_size, uint32_t n,
			  size_t chunk, int iters, struct pdma_gpu_bench *r)
{
	double sec;
	/* Timed on the host clock around a synchronous pass: the pass spans two
	 * streams, and the host clock includes everything. */
	int ret = staged(g, host, slot_size, n, chunk, NULL, false); /* warm-up */
	if (ret)
		return ret;
	std::vector<double> t;
	for (int i = 0; i < iters; i++) {
		struct timespec a, b;
		cudaMemsetAsync(g->t.tags, 0, (size_t)g->c.max_streams * g->c.out_pkts * 8, g->s[0]);
		CK(g, cudaStreamSynchronize(g->s[0]));
		clock_gettime(CLOCK_MONOTONIC, &a);
		ret = staged(g, host, slot_size, n, chunk, NULL, false);
		clock_gettime(CLOCK_MONOTONIC, &b);
		if (ret)
			return ret;
		t.push_back((double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9);
	}
	std::sort(t.begin(), t.end());
	sec = t[t.size() / 2];
	fill(r, sec, (double)slot_size * n); /* bytes through the copy engine */
	return 0;
}

static int g_bench_mapped(struct pdma_gpu_dfr *g, const void *host, uint32_t slot_size, uint32_t n,
			  int iters, struct pdma_gpu_bench *r)
{
	const void *dp;
	double sec;
	int ret = dev_ptr(g, host, &dp);
	if (ret)
		return ret;
	double bytes = 0;
	for (uint32_t i = 0; i < n; i++)
		bytes += ((const struct pdma_slot_hdr *)((const uint8_t *)host + (size_t)i * slot_size))->len;
	ret = timed(g, iters, [&]() {
		cudaMemsetAsync(g->t.tags, 0, (size_t)g->c.max_streams * g->c.out_pkts * 8, g->s[0]);
		return launch(g, dp, slot_size, n, NULL, g->s[0]);
	}, &sec);
	if (ret)
		return ret;
	fill(r, sec, bytes); /* packet bytes read over PCIe */
	return 0;
}

static int g_copy_one(struct pdma_gpu_dfr *g, void *d, const void *s, size_t n)
{
	CK(g, cudaMemcpy(d, s, n, cudaMemcpyHostToDevice));
	return 0;
}

static const char *g_last_error(struct pdma_gpu_dfr *g)
{
	return g->err;
}

extern "C" __attribute__((visibility("default"))) int pdma_vrt_cuda_api(struct pdma_gpu_ops *ops,
									  uint32_t version)
{
	if (version != PDMA_GPU_API_VERSION)
		return -EPROTO;
	ops->version = PDMA_GPU_API_VERSION;
	ops->open = g_open;
	ops->close = g_close;
	ops->device_name = g_name;
	ops->dev_alloc = g_dev_alloc;
	ops->dev_free = g_dev_free;
	ops->upload = g_upload;
	ops->host_register = g_host_register;
	ops->host_unregister = g_host_unregister;
	ops->run = g_run;
	ops->run_staged = g_run_staged;
	ops->read_tables = g_read_tables;
	ops->reset_tables = g_reset;
	ops->bench_deframe = g_bench_deframe;
	ops->bench_d2d = g_bench_d2d;
	ops->bench_h2d = g_bench_h2d;
	ops->bench_staged = g_bench_staged;
	ops->bench_mapped = g_bench_mapped;
	ops->copy_one = g_copy_one;
	ops->last_error = g_last_error;
	return 0;
}
