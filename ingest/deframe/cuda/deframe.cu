// SPDX-License-Identifier: MIT
/*
 * The GPU deframer: validates VITA-49 headers (the same code as the CPU
 * deframer), strips them, places each payload by sample count into its
 * stream's output buffer and flags gaps through the per-position tags; the
 * result is byte-identical to the CPU deframer's (tests/gpu/test_deframer.c).
 *
 * This file is the host side: the handle, the choice of kernel per batch, the
 * launches on streams (graph.cu replays them as CUDA graphs) and the ops table
 * of gpu.h. The kernels are in kernels.cu; DESIGN.md says why these two:
 *   auto  (the default) v16 while the longest payload known is short, v11
 *         once it is longer, v7s before any is known;
 *   v11   two passes: header pass (one thread per packet, fast path, writes a
 *         work list), then a copy pass of 16-byte windows whose stride comes
 *         from the longest payload seen so far;
 *   v16   one pass for short payloads: v11's header pass, whose warps then
 *         copy their own 32 payloads (no work list, no second launch);
 *   v7s   one pass: a warp parses 32 headers, then copies their payloads.
 *
 * Built by nvcc into libpeerdma_vrt_cuda.so (ingest/deframe/cuda/CMakeLists.txt) and
 * loaded with dlopen() by ingest/deframe/gpu_loader.c only on machines with a GPU.
 */
#include <stdlib.h>
#include <string.h>

#include <algorithm>

#include "dfr.h"

static const struct kvar KV[] = {
	{ "auto", true, true, false },
	{ "v11", true, false, false },
	{ "v7s", false, false, false },
	{ "v16", true, false, true },
};
#define NKV (sizeof(KV) / sizeof(KV[0]))
#define KV_DEFAULT (&KV[0])
#define KV_V11 (&KV[1])
/* What auto runs before any payload is known (v11's copy stride would then
 * come from the slot geometry: ~580 windows a packet in 9 KiB slots), and
 * what v11 falls back to for a batch too large for its copy grid. */
#define KV_ONEPASS (&KV[2])

/* Variants measured and removed (DESIGN.md names the commits that hold
 * them): PEERDMA_DFR_KERNEL naming one is an error that says so. */
static const char *const REMOVED[] = { "v5",  "v5cs", "v5b4", "v5na", "v6",  "v6b4", "v7",  "v7b4", "v7f",
				       "tma", "v6tma", "v8tp", "v9",   "v9u8", "v10", "v11b3", "v12", "v13",
				       "v14", "v17", "v17u4", "v17b5", "v17u4b3" };

/* auto: the shortest payload (bytes) for which the two-pass v11 runs: any,
 * once one is known; v11 is ahead of v7s at every packet size from 64 bytes
 * up on the H100 and the H200 (DESIGN.md). PEERDMA_DFR_AUTO_MIN overrides. */
#define AUTO_MIN_PAYLOAD 1u

/* auto: the longest payload (bytes) for which the one-pass v16 runs instead
 * of v11: v16 is ahead up to 256-byte packets (224-byte payloads), v11 from
 * 512 on the H100 (DESIGN.md). PEERDMA_DFR_SMALL_MAX overrides (0: never). */
#define AUTO_SMALL_MAX 256u

/* Launch shape for n packets: packets per warp as many as 32 (the header
 * stage is then shared by a full warp), but few enough that every resident
 * warp gets work in balanced waves: a small batch (a 1 MiB host-staged chunk)
 * or a batch of few large packets still spreads over the whole GPU. */
void dfr_kshape(const struct pdma_gpu_dfr *g, uint32_t n, uint32_t *blocks, uint32_t *group)
{
	const uint32_t minb = DFR_ONEPASS_MINB;
	uint32_t resident = (uint32_t)g->sms * minb * 8; /* blocks of 8 warps */
	uint32_t waves = (uint32_t)((n + 32ull * resident - 1) / (32ull * resident));
	uint32_t gr = (uint32_t)((n + (uint64_t)waves * resident - 1) / ((uint64_t)waves * resident));
	if (gr < 1)
		gr = 1;
	uint32_t warps_needed = (n + gr - 1) / gr;
	uint32_t b = (warps_needed + 7) / 8;
	if (b > (uint32_t)g->sms * minb)
		b = (uint32_t)g->sms * minb;
	*blocks = b ? b : 1;
	*group = gr;
}

void dfr_make_kplan(struct pdma_gpu_dfr *g, const void *slots, uint32_t slot_size, uint32_t n,
		    struct pdma_dfr_desc *d_desc, struct kplan *k)
{
	dfr_kshape(g, n, &k->blocks, &k->group);
	k->c = g->c;
	k->t = g->t;
	k->slots = (const uint8_t *)slots;
	k->slot_size = slot_size;
	k->n = n;
	k->desc = d_desc;
	k->pmax = g->d_pmax;
	k->hhint = g->hint_d;
	void *p[] = { &k->c, &k->t, &k->slots, &k->slot_size, &k->n, &k->group, &k->desc, &k->pmax, &k->hhint };
	memcpy(k->p, p, sizeof(p));
}

/* Stream s[si]'s two-pass work list for batches of up to n packets. Graph
 * capture calls it first: an allocation cannot be captured. Every entry the
 * copy pass reads is written by the header pass before it, so no clear. */
static int tp_reserve(struct pdma_gpu_dfr *g, int si, uint32_t n)
{
	if (g->tpcap[si] >= n)
		return 0;
	cudaFree(g->tpwl[si]);
	g->tpwl[si] = NULL;
	g->tpcap[si] = 0;
	CK(g, cudaMalloc(&g->tpwl[si], (size_t)n * sizeof(uint4)));
	g->tpcap[si] = n;
	return 0;
}

/* The copy pass's windows per packet for payloads up to lmax, narrowed by
 * the longest payload seen so far when known (+1 for a misaligned
 * destination); *hintk: the bound the header pass reports news above (a
 * hint above the geometry's bound is not news to report again). */
static uint32_t copy_stride(struct pdma_gpu_dfr *g, uint32_t lmax, uint32_t *hintk)
{
	const uint32_t hint = *(volatile uint32_t *)g->hint_h;
	if (hint && hint < lmax)
		lmax = hint;
	*hintk = hint ? lmax : 0;
	return (lmax + 15) / 16 + 1;
}

/* The copy pass over n packets of the work list wl, datagrams in slots of
 * slot_size bytes from src (0: frame rings, each descriptor names its own
 * offset). Programmatic dependent launch: the copy grid's launch overlaps
 * the header pass's tail (it waits for its completion on the device). */
static int launch_copy(struct pdma_gpu_dfr *g, cudaStream_t s, const uint8_t *src, uint32_t slot_size,
		       uint32_t n, uint32_t stride, const uint4 *wl)
{
	const uint64_t thr = (uint64_t)n * stride;
	cudaLaunchConfig_t cfg;
	cudaLaunchAttribute at[1];
	memset(&cfg, 0, sizeof(cfg));
	memset(at, 0, sizeof(at));
	cfg.gridDim = dim3((uint32_t)((thr + 256ull * DFR_COPY_U - 1) / (256ull * DFR_COPY_U)));
	cfg.blockDim = dim3(256);
	cfg.stream = s;
	at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
	at[0].val.programmaticStreamSerializationAllowed = 1;
	cfg.attrs = at;
	cfg.numAttrs = 1;
	uint8_t *out = g->t.out;
	void *args[] = { &src, &slot_size, &n, &stride, &out, &wl };
	CK(g, cudaLaunchKernelExC(&cfg, (const void *)dfr_copy_pass, args));
	return 0;
}

/* v11: header pass, then copy pass, on stream s (its own work list per
 * stream); parts as dfr_launch. Returns 1 (nothing launched) for a batch
 * whose copy grid would pass 2^32 threads. */
static int launch_tp(struct pdma_gpu_dfr *g, const void *slots, uint32_t slot_size, uint32_t n,
		     struct pdma_dfr_desc *d_desc, cudaStream_t s, int parts)
{
	const int si = s == g->s[1];
	/* Windows per packet: the longest payload a slot can hold and the
	 * configuration accepts, narrowed by the longest payload seen so far
	 * when known (a packed or tiny slot's datagram starts earlier: the
	 * bound of any layout a slot this size can have); +1 for a misaligned
	 * destination. */
	uint32_t hintk;
	const uint32_t doff = slot_size <= PDMA_SLOT_TINY_MAX ? PDMA_SLOT_HDR_TINY : PDMA_SLOT_HDR_PACKED;
	uint32_t stride = copy_stride(g, std::min(g->c.max_payload, slot_size > doff + 4 ? slot_size - doff - 4 : 0u),
				      &hintk);
	const uint64_t thr = (uint64_t)n * stride;
	if (thr >= (1ull << 32) - 8192)
		return 1;
	int ret = tp_reserve(g, si, n);
	if (ret)
		return ret;
	g->topo = g->topo * 1000003u + 2u;
	const uint8_t *sl = (const uint8_t *)slots;
	uint4 *wl = g->tpwl[si];
	if (parts & DFR_PASS_HDR) {
		void *ha[] = { &g->c, &g->t, &sl, &slot_size, &n, &d_desc, &wl, &stride, &hintk, &g->d_pmax, &g->hint_d };
		CK(g, cudaLaunchKernel((const void *)dfr_hdr_pass, dim3((n + 255) / 256), dim3(256), ha, 0, s));
	}
	if (!(parts & DFR_PASS_COPY))
		return 0;
	return launch_copy(g, s, sl, slot_size, n, stride, wl);
}

/* v16: one launch of the header pass whose warps copy their own payloads. */
static int launch_small(struct pdma_gpu_dfr *g, const void *slots, uint32_t slot_size, uint32_t n,
			struct pdma_dfr_desc *d_desc, cudaStream_t s)
{
	uint32_t hint = *(volatile uint32_t *)g->hint_h;
	const uint8_t *sl = (const uint8_t *)slots;
	void *a[] = { &g->c, &g->t, &sl, &slot_size, &n, &d_desc, &hint, &g->d_pmax, &g->hint_d };
	/* The longest payload known picks the register budget, an 80-byte
	 * slot (a tiny one, deframe.h) the instance that loads it whole
	 * (kernels.cu). */
	const bool tiny = hint && hint <= DFR_TINY_MAX, s80 = tiny && slot_size == PDMA_SLOT_TINY_MAX;
	const void *k = s80 ? (const void *)dfr_tiny80_pass : tiny ? (const void *)dfr_tiny_pass
								  : (const void *)dfr_small_pass;

	g->topo = g->topo * 1000003u + (s80 ? 5u : tiny ? 4u : 3u);
	CK(g, cudaLaunchKernel(k, dim3((n + 255) / 256), dim3(256), a, 0, s));
	return 0;
}

int dfr_launch(struct pdma_gpu_dfr *g, const void *slots, uint32_t slot_size, uint32_t n,
	       struct pdma_dfr_desc *d_desc, cudaStream_t s, int parts)
{
	if (!n)
		return 0;
	if (parts != DFR_PASS_ALL) {
		int r = launch_tp(g, slots, slot_size, n, d_desc, s, parts);
		if (r > 0) {
			snprintf(g->err, sizeof(g->err), "batch too large for the two-pass copy grid");
			return -E2BIG;
		}
		return r;
	}
	const struct kvar *kv = g->kv;
	const uint32_t longest = *(volatile uint32_t *)g->hint_h;
	if (kv->small || (kv->autosel && longest && longest <= g->small_max))
		return launch_small(g, slots, slot_size, n, d_desc, s);
	/* auto: the one-pass kernel while no payload length is known. */
	if (kv->tp && !(kv->autosel && *(volatile uint32_t *)g->hint_h < g->auto_min)) {
		int r = launch_tp(g, slots, slot_size, n, d_desc, s, DFR_PASS_ALL);
		if (r <= 0)
			return r;
		/* too large for the copy grid: the one-pass kernel */
	}
	g->topo = g->topo * 1000003u + 1u;
	struct kplan k;
	dfr_make_kplan(g, slots, slot_size, n, d_desc, &k);
	CK(g, cudaLaunchKernel((const void *)dfr_onepass, dim3(k.blocks), dim3(256), k.p, 0, s));
	return 0;
}

int dfr_ensure_desc(struct pdma_gpu_dfr *g, size_t n)
{
	if (n <= g->desc_cap)
		return 0;
	if (g->d_desc)
		cudaFree(g->d_desc);
	cudaFree(g->d_frames);
	if (g->h_desc)
		cudaFreeHost(g->h_desc);
	g->d_desc = NULL;
	g->h_desc = NULL;
	g->desc_cap = 0;
	CK(g, cudaMalloc(&g->d_desc, n * sizeof(struct pdma_dfr_desc)));
	CK(g, cudaHostAlloc(&g->h_desc, n * sizeof(struct pdma_dfr_desc), cudaHostAllocDefault));
	g->desc_cap = n;
	return 0;
}

/* dfr_enqueue_run's stream path (also what graph capture records). */
struct run_args {
	struct pdma_gpu_dfr *g;
	const void *dp;
	uint32_t slot_size, n;
	bool want_desc;
	size_t doff;
};

static int run_streams(void *arg)
{
	const struct run_args *a = (const struct run_args *)arg;
	struct pdma_gpu_dfr *g = a->g;
	int ret = dfr_launch(g, a->dp, a->slot_size, a->n, a->want_desc ? g->d_desc + a->doff : NULL, g->s[0],
			     DFR_PASS_ALL);
	if (ret)
		return ret;
	if (a->want_desc)
		CK(g, cudaMemcpyAsync(g->h_desc + a->doff, g->d_desc + a->doff,
				      (size_t)a->n * sizeof(struct pdma_dfr_desc), cudaMemcpyDeviceToHost, g->s[0]));
	return 0;
}

int dfr_enqueue_run(struct pdma_gpu_dfr *g, const void *dp, uint32_t slot_size, uint32_t n, bool want_desc,
		    size_t doff)
{
	struct run_args a = { g, dp, slot_size, n, want_desc, doff };
	if (!n)
		return 0;
	if (g->launch == PDMA_GPU_LAUNCH_GRAPH && g->kv->tp) {
		int ret = tp_reserve(g, 0, n);
		if (ret)
			return ret;
		ret = dfr_capture_launch(g, 2, 1, want_desc, run_streams, &a);
		if (ret <= 0)
			return ret;
	} else if (g->launch == PDMA_GPU_LAUNCH_GRAPH) {
		struct bplan b;
		b.kind = 0;
		b.nch = 1;
		dfr_make_kplan(g, dp, slot_size, n, want_desc ? g->d_desc + doff : NULL, &b.k[0]);
		b.desc = want_desc;
		b.hdesc = g->h_desc + doff;
		b.ddesc = g->d_desc + doff;
		b.dbytes = (size_t)n * sizeof(struct pdma_dfr_desc);
		if (dfr_graph_launch(g, &b) == 0)
			return 0;
		CK(g, cudaStreamSynchronize(g->s[0]));
	}
	return run_streams(&a);
}

int dfr_sync_all(struct pdma_gpu_dfr *g)
{
	CK(g, cudaStreamSynchronize(g->s[0]));
	CK(g, cudaStreamSynchronize(g->s[1]));
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

/* dfr_enqueue_staged's stream path for slots [start, n), per slots a chunk:
 * chunk k on s[k % 2]; ends on s[0] (s[1] joined) when it copies descriptors
 * back or when capturing (capture: s[1] also forks from s[0] first, as a
 * capture must). Each slot's first pitch bytes are copied (pitch <=
 * slot_size, the host slots' stride) to device slots pitch bytes apart. */
struct staged_args {
	struct pdma_gpu_dfr *g;
	const void *host;
	uint32_t slot_size, pitch, n, per, start;
	bool want_desc;
	size_t doff;
	bool capture;
};

static int staged_streams(void *arg)
{
	const struct staged_args *a = (const struct staged_args *)arg;
	struct pdma_gpu_dfr *g = a->g;
	const uint32_t n = a->n, per = a->per, start = a->start, slot_size = a->slot_size, pitch = a->pitch;
	uint32_t k = 0;
	if (a->capture && n - start > per) {
		CK(g, cudaEventRecord(g->ev[0], g->s[0]));
		CK(g, cudaStreamWaitEvent(g->s[1], g->ev[0], 0));
	}
	for (uint32_t first = start; first < n; first += per, k++) {
		uint32_t cnt = n - first < per ? n - first : per;
		cudaStream_t s = g->s[k & 1];
		const uint8_t *src = (const uint8_t *)a->host + (size_t)first * slot_size;
		if (pitch < slot_size)
			CK(g, cudaMemcpy2DAsync(g->stage[k & 1], pitch, src, slot_size, pitch, cnt,
						cudaMemcpyHostToDevice, s));
		else
			CK(g, cudaMemcpyAsync(g->stage[k & 1], src, (size_t)cnt * slot_size, cudaMemcpyHostToDevice,
					      s));
		int ret = dfr_launch(g, g->stage[k & 1], pitch, cnt,
				     a->want_desc ? g->d_desc + a->doff + first : NULL, s, DFR_PASS_ALL);
		if (ret)
			return ret;
	}
	if (k >= 2 && (a->want_desc || a->capture)) {
		CK(g, cudaEventRecord(g->ev[1], g->s[1]));
		CK(g, cudaStreamWaitEvent(g->s[0], g->ev[1], 0));
	}
	if (a->want_desc && n > start)
		CK(g, cudaMemcpyAsync(g->h_desc + a->doff + start, g->d_desc + a->doff + start,
				      (size_t)(n - start) * sizeof(struct pdma_dfr_desc), cudaMemcpyDeviceToHost,
				      g->s[0]));
	return 0;
}

/* Host-staged: registered host slots copied in chunks (a whole number of
 * slots each) to two device stage buffers and deframed there; chunk k uses
 * stage k % 2, so the copy of one chunk overlaps the kernel of the previous.
 * With a span under slot_size (gpu.h) each chunk is one pitched copy of the
 * slots' first span bytes, deframed as span-byte slots: on the H200, 1 KiB
 * datagrams in 9216-byte slots went through at 34.9-36.2 M slots/s against
 * 5.5-5.8 M whole (DESIGN.md). Under graph launch the copies stay whole
 * (dfr_stage_pitch); host-staged batches default to stream launch.
 * Stream launch: chunk k on stream k % 2. Graph launch: up to GMAXC chunks
 * per graph with the same dependencies (copy k after kernel k - 2, kernel k
 * after copy k), one launch on s[0]. The kernels of different chunks only
 * touch the tables through atomics whose result does not depend on order
 * (newer wins). Descriptors of slot i go to h_desc[doff + i]. */
uint32_t dfr_stage_pitch(const struct pdma_gpu_dfr *g, uint32_t slot_size, uint32_t span)
{
	/* Graphs copy whole slots: an executable graph's memcpy node can be
	 * updated for the next batch only while it is one-dimensional
	 * (cudaGraphExecMemcpyNodeSetParams; a captured 2D copy made every
	 * cudaGraphExecUpdate fail, error 910, and each batch rebuild its graph). */
	return g->launch != PDMA_GPU_LAUNCH_GRAPH && span && span < slot_size ? span : slot_size;
}

int dfr_enqueue_staged(struct pdma_gpu_dfr *g, const void *host, uint32_t slot_size, uint32_t span, uint32_t n,
		       size_t chunk, bool want_desc, size_t doff)
{
	const uint32_t pitch = dfr_stage_pitch(g, slot_size, span);
	uint32_t per = (uint32_t)(chunk / pitch);
	int ret;
	if (per == 0)
		per = 1;
	struct staged_args a = { g, host, slot_size, pitch, n, per, 0, want_desc, doff, false };
	if ((ret = ensure_stage(g, (size_t)per * pitch)))
		return ret;
	if (g->launch == PDMA_GPU_LAUNCH_GRAPH && g->kv->tp) {
		/* Captured in parts of up to GMAXC chunks, as the other graphs. */
		if ((ret = tp_reserve(g, 0, per)) || (ret = tp_reserve(g, 1, per)))
			return ret;
		for (uint32_t first = 0; first < n;) {
			const uint32_t cnt = n - first < GMAXC * per ? n - first : GMAXC * per;
			struct staged_args p = { g, host, slot_size, pitch, first + cnt, per, first, want_desc, doff, true };
			ret = dfr_capture_launch(g, 3, (cnt + per - 1) / per, want_desc, staged_streams, &p);
			if (ret < 0)
				return ret;
			if (ret > 0) {
				a.start = first; /* nothing of this part ran: streams from here */
				break;
			}
			first += cnt;
		}
		if (g->launch == PDMA_GPU_LAUNCH_GRAPH)
			return 0;
	} else if (g->launch == PDMA_GPU_LAUNCH_GRAPH) {
		struct bplan b;
		uint32_t first = 0;
		while (first < n) {
			uint32_t sub = first;
			b.kind = 1;
			b.nch = 0;
			for (uint32_t k = 0; k < GMAXC && first < n; k++) {
				uint32_t cnt = n - first < per ? n - first : per;
				b.hsrc[k] = (const uint8_t *)host + (size_t)first * slot_size;
				b.stage[k] = g->stage[k & 1];
				b.bytes[k] = (size_t)cnt * slot_size;
				dfr_make_kplan(g, g->stage[k & 1], slot_size, cnt,
					       want_desc ? g->d_desc + doff + first : NULL, &b.k[k]);
				b.nch++;
				first += cnt;
			}
			b.desc = want_desc;
			b.hdesc = g->h_desc + doff + sub;
			b.ddesc = g->d_desc + doff + sub;
			b.dbytes = (size_t)(first - sub) * sizeof(struct pdma_dfr_desc);
			if (dfr_graph_launch(g, &b)) {
				/* Nothing of this part was launched: streams from here. */
				CK(g, cudaStreamSynchronize(g->s[0]));
				a.start = sub;
				break;
			}
		}
		if (g->launch == PDMA_GPU_LAUNCH_GRAPH)
			return 0;
	}
	return staged_streams(&a);
}

static int g_reset(struct pdma_gpu_dfr *g)
{
	on_device dev(g->device);
	size_t ns = g->c.max_streams, tags = ns * g->c.out_pkts;
	CK(g, cudaMemset(g->t.keys, 0, ns * sizeof(uint64_t)));
	CK(g, cudaMemset(g->t.plen, 0, ns * sizeof(uint32_t)));
	CK(g, cudaMemset(g->t.cls, 0, ns * sizeof(uint64_t)));
	CK(g, cudaMemset(g->t.tags, 0, tags * sizeof(uint64_t)));
	CK(g, cudaMemset(g->t.out, 0, tags * g->c.max_payload));
	CK(g, cudaMemset(g->d_pmax, 0, sizeof(uint32_t)));
	CK(g, cudaDeviceSynchronize());
	*(volatile uint32_t *)g->hint_h = 0;
	return 0;
}

int dfr_reset_tags(struct pdma_gpu_dfr *g, cudaStream_t s)
{
	CK(g, cudaMemsetAsync(g->t.tags, 0, (size_t)g->c.max_streams * g->c.out_pkts * 8, s));
	return 0;
}

static void g_close(struct pdma_gpu_dfr *g)
{
	if (!g)
		return;
	on_device dev(g->device);
	dfr_graph_fini(g);
	cudaFree(g->d_pmax);
	if (g->hint_h)
		cudaFreeHost(g->hint_h);
	cudaFree(g->t.keys);
	cudaFree(g->t.plen);
	cudaFree(g->t.cls);
	cudaFree(g->t.tags);
	cudaFree(g->t.out);
	cudaFree(g->d_desc);
	cudaFree(g->d_frames);
	if (g->h_desc)
		cudaFreeHost(g->h_desc);
	for (int i = 0; i < 2; i++) {
		cudaFree(g->stage[i]);
		cudaFree(g->tpwl[i]);
		if (g->s[i])
			cudaStreamDestroy(g->s[i]);
		if (g->ev[i])
			cudaEventDestroy(g->ev[i]);
	}
	free(g);
}

int dfr_set_kernel(struct pdma_gpu_dfr *g, const char *name)
{
	for (size_t i = 0; i < NKV; i++)
		if (!strcmp(KV[i].name, name)) {
			g->kv = &KV[i];
			return 0;
		}
	return -ENOENT;
}

static const char *g_kernel_name(struct pdma_gpu_dfr *g)
{
	return g->kv->name;
}

int dfr_set_launch(struct pdma_gpu_dfr *g, int mode)
{
	if (mode != PDMA_GPU_LAUNCH_STREAM && mode != PDMA_GPU_LAUNCH_GRAPH)
		return -EINVAL;
	g->launch = mode;
	return 0;
}

static int g_get_launch(struct pdma_gpu_dfr *g)
{
	return g->launch;
}

/* PEERDMA_DFR_KERNEL: a name that is not a kernel fails the open, so that a
 * run never measures or runs another kernel than the one asked for. */
static int env_kernel(struct pdma_gpu_dfr *g, const char *name)
{
	if (!dfr_set_kernel(g, name))
		return 0;
	bool removed = false;
	for (size_t i = 0; i < sizeof(REMOVED) / sizeof(REMOVED[0]); i++)
		removed = removed || !strcmp(REMOVED[i], name);
	fprintf(stderr,
		"gpu deframer: PEERDMA_DFR_KERNEL=%s: %s; the kernels are auto (the default), v11, v16 and v7s%s\n",
		name, removed ? "a kernel variant that was measured and removed" : "no such kernel",
		removed ? " (ingest/deframe/cuda/DESIGN.md: the variants, their numbers and the commits that hold them)"
			: "");
	return -EINVAL;
}

static int g_open_on(const struct pdma_dfr_config *c, int device, struct pdma_gpu_dfr **out)
{
	struct pdma_gpu_dfr *g = (struct pdma_gpu_dfr *)calloc(1, sizeof(*g));
	const char *env;
	int ret;
	if (!g)
		return -ENOMEM;
	g->c = *c;
	g->device = device;
	g->kv = KV_DEFAULT;
	g->launch = PDMA_GPU_LAUNCH_GRAPH;
	size_t ns = c->max_streams, tags = ns * c->out_pkts;
#define OPEN_CK(call)                                                                      \
	do {                                                                               \
		cudaError_t e_ = (call);                                                   \
		if (e_ != cudaSuccess) {                                                   \
			fprintf(stderr, "gpu deframer: %s: %s\n", #call, cudaGetErrorString(e_)); \
			ret = e_ == cudaErrorMemoryAllocation ? -ENOMEM : -ENODEV;         \
			goto err;                                                          \
		}                                                                          \
	} while (0)
	if ((ret = dfr_graph_init(g)))
		goto err;
	OPEN_CK(cudaGetDeviceProperties(&g->prop, device));
	g->sms = g->prop.multiProcessorCount;
	OPEN_CK(cudaMalloc(&g->d_pmax, sizeof(uint32_t)));
	OPEN_CK(cudaMemset(g->d_pmax, 0, sizeof(uint32_t)));
	OPEN_CK(cudaHostAlloc((void **)&g->hint_h, sizeof(uint32_t), cudaHostAllocMapped));
	*g->hint_h = 0;
	OPEN_CK(cudaHostGetDevicePointer((void **)&g->hint_d, g->hint_h, 0));
	OPEN_CK(cudaMalloc(&g->t.keys, ns * sizeof(uint64_t)));
	OPEN_CK(cudaMalloc(&g->t.plen, ns * sizeof(uint32_t)));
	OPEN_CK(cudaMalloc(&g->t.cls, ns * sizeof(uint64_t)));
	OPEN_CK(cudaMalloc(&g->t.tags, tags * sizeof(uint64_t)));
	OPEN_CK(cudaMalloc(&g->t.out, tags * c->max_payload));
	for (int i = 0; i < 2; i++) {
		OPEN_CK(cudaStreamCreateWithFlags(&g->s[i], cudaStreamNonBlocking));
		OPEN_CK(cudaEventCreateWithFlags(&g->ev[i], cudaEventDisableTiming));
	}
#undef OPEN_CK
	if ((env = getenv("PEERDMA_GPU_LAUNCH")) && *env) {
		if (!strcmp(env, "stream"))
			g->launch = PDMA_GPU_LAUNCH_STREAM;
		else if (strcmp(env, "graph"))
			fprintf(stderr, "gpu deframer: PEERDMA_GPU_LAUNCH=%s: not stream or graph, ignored\n", env);
	}
	g->auto_min = AUTO_MIN_PAYLOAD;
	if ((env = getenv("PEERDMA_DFR_AUTO_MIN")) && *env)
		g->auto_min = (uint32_t)strtoul(env, NULL, 10);
	g->small_max = AUTO_SMALL_MAX;
	if ((env = getenv("PEERDMA_DFR_SMALL_MAX")) && *env)
		g->small_max = (uint32_t)strtoul(env, NULL, 10);
	if ((env = getenv("PEERDMA_DFR_KERNEL")) && *env && (ret = env_kernel(g, env)))
		goto err;
	ret = g_reset(g);
	if (ret)
		goto err;
	*out = g;
	return 0;
err:
	g_close(g);
	return ret;
}

static int g_open(const struct pdma_dfr_config *c, int device, struct pdma_gpu_dfr **out)
{
	int n = 0;

	if (!pdma_dfr_config_ok(c))
		return -EINVAL;
	/* A device that does not exist is refused here, not used as another. */
	if (cudaGetDeviceCount(&n) != cudaSuccess || device < 0 || device >= n) {
		cudaGetLastError();
		fprintf(stderr, "gpu deframer: CUDA device %d does not exist (%d present)\n", device, n);
		return -ENODEV;
	}
	on_device dev(device); /* the open's allocations, streams and events */
	return g_open_on(c, device, out);
}

static const char *g_name(struct pdma_gpu_dfr *g)
{
	return g->prop.name;
}

static int g_dev_alloc(struct pdma_gpu_dfr *g, size_t bytes, void **p)
{
	on_device dev(g->device);
	CK(g, cudaMalloc(p, bytes));
	return 0;
}

static int g_dev_free(struct pdma_gpu_dfr *g, void *p)
{
	on_device dev(g->device);
	CK(g, cudaFree(p));
	return 0;
}

static int g_upload(struct pdma_gpu_dfr *g, void *d, const void *s, size_t n)
{
	on_device dev(g->device);
	CK(g, cudaMemcpy(d, s, n, cudaMemcpyHostToDevice));
	return 0;
}

static int g_host_register(struct pdma_gpu_dfr *g, void *p, size_t n)
{
	on_device dev(g->device);
	void *d;
	CK(g, cudaHostRegister(p, n, cudaHostRegisterMapped | cudaHostRegisterPortable));
	/* Remembered so that each batch's device address costs no driver call. */
	if (cudaHostGetDevicePointer(&d, p, 0) == cudaSuccess) {
		for (auto &r : g->reg)
			if (!r.p) {
				r.p = (const uint8_t *)p;
				r.d = (const uint8_t *)d;
				r.n = n;
				break;
			}
	}
	cudaGetLastError();
	return 0;
}

static int g_host_unregister(struct pdma_gpu_dfr *g, void *p)
{
	on_device dev(g->device);
	for (auto &r : g->reg)
		if (r.p == p)
			r.p = NULL;
	CK(g, cudaHostUnregister(p));
	return 0;
}

int dfr_dev_ptr(struct pdma_gpu_dfr *g, const void *p, const void **dp)
{
	cudaPointerAttributes a;
	for (auto &r : g->reg)
		if (r.p && (const uint8_t *)p >= r.p && (const uint8_t *)p < r.p + r.n) {
			*dp = r.d + ((const uint8_t *)p - r.p);
			return 0;
		}
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

int dfr_run(struct pdma_gpu_dfr *g, const void *slots, uint32_t slot_size, uint32_t n, struct pdma_dfr_desc *desc)
{
	on_device dev(g->device);
	const void *dp;
	int ret = dfr_dev_ptr(g, slots, &dp);
	if (ret)
		return ret;
	if (desc && (ret = dfr_ensure_desc(g, n)))
		return ret;
	if ((ret = dfr_enqueue_run(g, dp, slot_size, n, desc != NULL, 0)))
		return ret;
	CK(g, cudaStreamSynchronize(g->s[0]));
	if (desc)
		memcpy(desc, g->h_desc, (size_t)n * sizeof(*desc));
	return 0;
}

int dfr_run_staged(struct pdma_gpu_dfr *g, const void *host, uint32_t slot_size, uint32_t span, uint32_t n,
		   size_t chunk, struct pdma_dfr_desc *desc)
{
	on_device dev(g->device);
	int ret;
	if (desc && (ret = dfr_ensure_desc(g, n)))
		return ret;
	if ((ret = dfr_enqueue_staged(g, host, slot_size, span, n, chunk, desc != NULL, 0)))
		return ret;
	if ((ret = dfr_sync_all(g)))
		return ret;
	if (desc)
		memcpy(desc, g->h_desc, (size_t)n * sizeof(*desc));
	return 0;
}

/* Frame rings: v11's header pass over the frames, then the same copy pass
 * with the region as "slots" of size 0 (the work list holds offsets from
 * the region's start; frames are at most 4 GiB into it). The copy stride
 * comes from the longest payload seen, else from the longest a frame can
 * carry. Batches whose copy grid would pass 2^32 threads go in parts. */
static int frames_launch(struct pdma_gpu_dfr *g, const struct pdma_frm_cfg *fc, const uint8_t *base,
			 const struct pdma_frame *frames, uint32_t n, struct pdma_dfr_desc *d_desc)
{
	cudaStream_t s = g->s[0];
	const uint32_t maxf = fc->max_len ? fc->max_len : PDMA_FRM_MAX_LEN;
	uint32_t hintk;
	uint32_t stride = copy_stride(g, std::min(g->c.max_payload, maxf), &hintk);
	const uint32_t per = (uint32_t)std::min<uint64_t>(n, ((1ull << 32) - 8192) / stride);
	int ret = tp_reserve(g, 0, per);
	if (ret)
		return ret;
	uint4 *wl = g->tpwl[0];
	struct pdma_frm_cfg f = *fc;
	for (uint32_t first = 0; first < n; first += per) {
		uint32_t cnt = std::min(per, n - first);
		const struct pdma_frame *fp = frames + first;
		struct pdma_dfr_desc *dp = d_desc ? d_desc + first : NULL;
		void *ha[] = { &g->c, &g->t, &f, &base, &fp, &cnt, &dp, &wl, &stride, &hintk, &g->d_pmax, &g->hint_d };
		CK(g, cudaLaunchKernel((const void *)dfr_frm_hdr_pass, dim3((cnt + 255) / 256), dim3(256), ha, 0, s));
		/* frame rings: slot size 0, each descriptor names its frame's offset */
		ret = launch_copy(g, s, base, 0, cnt, stride, wl);
		if (ret)
			return ret;
	}
	return 0;
}

static int g_run_frames(struct pdma_gpu_dfr *g, const struct pdma_frm_cfg *fc, const void *base,
			const struct pdma_frame *frames, uint32_t n, struct pdma_dfr_desc *desc)
{
	const void *dbase, *dfr = NULL;
	cudaPointerAttributes a;
	int ret;
	if (!n)
		return 0;
	on_device dev(g->device);
	if ((ret = dfr_dev_ptr(g, base, &dbase)))
		return ret;
	/* Frame descriptors the device can read where they are, else a copy
	 * (n * 8 bytes: a NIC's completions polled into host memory). */
	if (cudaPointerGetAttributes(&a, frames) != cudaSuccess || a.type == cudaMemoryTypeUnregistered ||
	    dfr_dev_ptr(g, frames, &dfr))
		dfr = NULL;
	cudaGetLastError();
	if (!dfr) {
		if (g->frames_cap < n) {
			cudaFree(g->d_frames);
			g->d_frames = NULL;
			g->frames_cap = 0;
			CK(g, cudaMalloc(&g->d_frames, (size_t)n * sizeof(*frames)));
			g->frames_cap = n;
		}
		CK(g, cudaMemcpyAsync(g->d_frames, frames, (size_t)n * sizeof(*frames), cudaMemcpyHostToDevice,
				      g->s[0]));
		dfr = g->d_frames;
	}
	if (desc && (ret = dfr_ensure_desc(g, n)))
		return ret;
	if ((ret = frames_launch(g, fc, (const uint8_t *)dbase, (const struct pdma_frame *)dfr, n,
				 desc ? g->d_desc : NULL)))
		return ret;
	if (desc)
		CK(g, cudaMemcpyAsync(g->h_desc, g->d_desc, (size_t)n * sizeof(*desc), cudaMemcpyDeviceToHost, g->s[0]));
	CK(g, cudaStreamSynchronize(g->s[0]));
	if (desc)
		memcpy(desc, g->h_desc, (size_t)n * sizeof(*desc));
	return 0;
}

static int g_read_tables(struct pdma_gpu_dfr *g, struct pdma_dfr_tables *t)
{
	on_device dev(g->device);
	size_t ns = g->c.max_streams, tags = ns * g->c.out_pkts;
	CK(g, cudaMemcpy(t->keys, g->t.keys, ns * sizeof(uint64_t), cudaMemcpyDeviceToHost));
	CK(g, cudaMemcpy(t->plen, g->t.plen, ns * sizeof(uint32_t), cudaMemcpyDeviceToHost));
	CK(g, cudaMemcpy(t->cls, g->t.cls, ns * sizeof(uint64_t), cudaMemcpyDeviceToHost));
	CK(g, cudaMemcpy(t->tags, g->t.tags, tags * sizeof(uint64_t), cudaMemcpyDeviceToHost));
	CK(g, cudaMemcpy(t->out, g->t.out, tags * g->c.max_payload, cudaMemcpyDeviceToHost));
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
	ops->run = dfr_run;
	ops->run_staged = dfr_run_staged;
	ops->read_tables = g_read_tables;
	ops->reset_tables = g_reset;
	ops->last_error = g_last_error;
	ops->set_launch = dfr_set_launch;
	ops->get_launch = g_get_launch;
	ops->set_kernel = dfr_set_kernel;
	ops->kernel_name = g_kernel_name;
	ops->run_frames = g_run_frames;
	ops->blk_tables = dfr_blk_tables;
	ops->blk_copy = dfr_blk_copy;
	ops->blk_zero = dfr_blk_zero;
	ops->blk_fence = dfr_blk_fence;
	ops->blk_stream_wait = dfr_blk_stream_wait;
	ops->blk_event_destroy = dfr_blk_event_destroy;
	ops->blk_read = dfr_blk_read;
	return 0;
}
