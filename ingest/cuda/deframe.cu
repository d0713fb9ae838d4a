// SPDX-License-Identifier: MIT
/*
 * The GPU deframer: validates VITA-49 headers (the same code as the CPU
 * deframer: include/peerdma/vrt.h and ingest/deframe.h are compiled here for
 * the device), strips them, places each payload by sample count into its
 * stream's output buffer and flags gaps through the per-position tags.
 *
 * One-pass variants (v5 ... v7s), per warp 32 packets at a time: each lane
 * parses one header and does the
 * table operations (stream lookup/claim, payload length, tag); then the whole
 * warp copies the payloads. The grid is capped at the resident block count,
 * so one launch covers any batch size.
 *
 * A batch (host-to-device chunk copies, kernels, descriptor copy back) is
 * launched on streams or replayed as a CUDA graph (gpu.h: launch modes).
 * Kernel variants (gpu.h) are template instances of one kernel, or of two
 * (the two-pass variants: header pass, then copy pass); the default (auto)
 * runs the two-pass v11 once a payload length is known and the one-pass v7s
 * (parser scratch in shared memory) before.
 *
 * Built by nvcc into libpeerdma_vrt_cuda.so (ingest/cuda/CMakeLists.txt) and
 * loaded with dlopen() by ingest/gpu_loader.c only on machines with a GPU.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <time.h>
#include <algorithm>
#include <vector>

extern "C" {
#include "deframe.h"
#include "gpu.h"
}

struct kvar;
struct gent;

/* v10: at most this many sub-batches per launch (header pass k + 1 on the
 * caller's stream overlaps copy pass k on a second stream). */
#define TP_MAXK 8
/* ... each of at least this many packets (a header grid of 64 blocks or more
 * and a copy grid that fills the GPU many times). */
#define TP_MINSUB 16384u

struct pdma_gpu_dfr {
	struct pdma_dfr_config c;
	int device;
	cudaDeviceProp prop;
	struct pdma_dfr_tables t;   /* device pointers */
	struct pdma_dfr_desc *d_desc;
	struct pdma_dfr_desc *h_desc; /* pinned host copy of the descriptors */
	size_t desc_cap;            /* descriptors */
	uint8_t *stage[2];          /* host-staged chunk buffers */
	size_t stage_cap;
	cudaStream_t s[2];
	cudaEvent_t ev[2];
	char err[256];
	int sms;
	int launch;                 /* PDMA_GPU_LAUNCH_* */
	const struct kvar *kv;      /* kernel variant */
	struct gent *gc;            /* graph cache [GCACHE] */
	uint64_t gstamp;
	uint64_t grebuilds;         /* graph shapes instantiated again after a refused update */
	bool tma_ok;                /* Hopper and the TMA variant's shared memory granted */
	uint4 *tpwl[2];             /* two-pass variant: work list (+ control entry) per stream */
	size_t tpcap[2];            /* entries */
	uint32_t tpseq;             /* two-pass launches so far (control values carry it) */
	cudaStream_t cs[2];         /* v10: copy-pass stream per stream s[i] */
	cudaEvent_t evh[2][TP_MAXK]; /* v10: header pass k done (on s[i]) */
	cudaEvent_t evc[2];         /* v10: last copy pass done (on cs[i]) */
	uint32_t tpmin;             /* v10: fewest packets per sub-batch (TP_MINSUB) */
	uint32_t *hint_h, *hint_d;  /* v11, auto: longest payload seen (mapped host word; 0 unknown) */
	uint32_t *d_pmax;           /* ... its device-side maximum */
	uint32_t auto_min;          /* auto: v11 once the longest payload seen is this long (AUTO_MIN_PAYLOAD) */
	int tp_part;                /* probe (bench_copy CPASS): 1 header pass only, 2 copy pass only */
	uint64_t topo;              /* graph capture: the launch topology launch() chose, folded per call */
	struct {                    /* registered host ranges and their device aliases */
		const uint8_t *p, *d;
		size_t n;
	} reg[8];
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

/* Per-thread parser scratch in shared memory (SV variants), padded so that
 * the 32 lanes' copies of a field spread over the banks (38-word stride:
 * 2-way conflicts at most). */
struct vrt_scratch {
	struct pdma_vrt_packet v;
	uint32_t pad;
};

/* The general header stage out of line, results by value (so the caller's
 * descriptor stays in registers): the fast-path variants' fallback without
 * shared scratch, whose parser frame then lives in this function alone. */
struct dfr_hres {
	struct pdma_dfr_desc d;
	struct pdma_dfr_pkt r;
	int st;
};

__device__ __noinline__ static struct dfr_hres dfr_header_slow(struct pdma_dfr_config c, const uint8_t *slot,
							    uint32_t slot_size)
{
	struct dfr_hres h;
	h.st = pdma_dfr_header(&c, slot, slot_size, &h.d, &h.r);
	return h;
}

/* The block's cached stream-table index of key want, or -1 (entries are
 * added in order, so the first free one ends the search). */
__device__ __forceinline__ static int cache_find(const unsigned long long *s_keys, uint32_t ncache,
						 unsigned long long want)
{
	for (uint32_t k = 0; k < ncache; k++) {
		const unsigned long long v = s_keys[k];
		if (v == want)
			return (int)k;
		if (v == 0)
			break;
	}
	return -1;
}

/* Byte offset of a payload in the output tables: stream idx, position pos. */
__device__ __forceinline__ static unsigned long long out_off(const struct pdma_dfr_config &c, uint32_t idx,
							    size_t pos, uint32_t len)
{
	return (size_t)idx * c.out_pkts * c.max_payload + pos * len;
}

/* The 16-byte output windows that bytes [a, a + len) touch: the two-pass copy
 * stride's unit. */
__device__ __forceinline__ static uint32_t windows16(uintptr_t a, uint32_t len)
{
	return (uint32_t)(((a + len + 15) >> 4) - (a >> 4));
}

/* Header stage of one packet, run by one lane: validate, find the stream
 * (shared-memory copy of the table first; global compare-and-swap only when a
 * stream is first seen), check the payload size, and claim the output
 * position with the tag atomic (newer wins).
 * FAST: pp, when given, is the slot's prefix (pdma_dfr_prefix, loaded by the
 * caller), and pdma_dfr_header_fast() runs first; the general path, out of
 * line, only for what it declines or when there is no prefix. */
template <bool SV, bool FAST>
__device__ static int dfr_lane(const struct pdma_dfr_config &c, const struct pdma_dfr_tables &t,
			       unsigned long long *s_keys, uint32_t *s_plen, uint32_t ncache,
			       const uint8_t *slot, uint32_t slot_size, struct pdma_dfr_desc &d,
			       uint32_t &off, uint32_t &len, unsigned long long &dst, struct vrt_scratch *sv,
			       uint32_t *pmax, uint32_t *hhint, const struct pdma_dfr_pre *pp = nullptr)
{
	struct pdma_dfr_pkt r;
	int st = PDMA_DFR_ST_DATA;
	bool done = false;
	if constexpr (FAST)
		done = pp && pdma_dfr_header_fast(&c, slot, slot_size, pp, &d, &r);
	if (!done) {
		if constexpr (SV) {
			st = pdma_dfr_header_v(&c, slot, slot_size, &d, &r, &sv->v);
		} else if constexpr (FAST) {
			const struct dfr_hres h = dfr_header_slow(c, slot, slot_size);
			d = h.d;
			r = h.r;
			st = h.st;
		} else {
			st = pdma_dfr_header(&c, slot, slot_size, &d, &r);
		}
	}
	if (st < 0)
		return st;
	unsigned long long want = (1ull << 32) | d.stream_id;
	int idx = cache_find(s_keys, ncache, want);
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
			if (cur == 0) {
				/* This thread claimed a new stream's payload length:
				 * raise the longest payload known, on the device and
				 * in the host's hint word (mapped; auto and v11 size
				 * their launches by it). Two raises in one launch may
				 * reach the host out of order: the hint then stays
				 * low until v11 sees a longer payload (performance
				 * only). */
				cur = r.payload_len;
				if (atomicMax(pmax, cur) < cur)
					*(volatile uint32_t *)hhint = cur;
			}
		}
		if ((uint32_t)idx < ncache)
			s_plen[idx] = cur;
	}
	if (cur != r.payload_len)
		return -PDMA_DFR_E_SIZE_CHANGE;
	uint32_t pr;
	if (r.pkt < (1ull << 53))
		pdma_dfr_divmod53(r.pkt, c.out_pkts, &pr); /* no 64-bit division (see there) */
	else
		pr = (uint32_t)(r.pkt % c.out_pkts);
	const size_t pos = pr;
	unsigned long long *tag = (unsigned long long *)&t.tags[(size_t)idx * c.out_pkts + pos];
	if (atomicMax(tag, (unsigned long long)(r.pkt + 1)) >= r.pkt + 1)
		return PDMA_DFR_ST_DATA_OLD; /* duplicate or stale: never overwrites */
	off = PDMA_SLOT_HDR + r.payload_off;
	len = r.payload_len;
	dst = out_off(c, (uint32_t)idx, pos, r.payload_len);
	return PDMA_DFR_ST_DATA;
}

/* Loads and stores of the warp copy: default caching, streaming hints
 * (ld.global.cs / st.global.cs: evict first) when CS, or loads that do not
 * allocate in L1 when NA (the payload streams through once; L1 then keeps
 * the header stage's lines and the parser's local-memory frame, which
 * otherwise are evicted, written back and re-read through L2 and DRAM). */
template <typename U, bool CS, bool NA> __device__ __forceinline__ U ld_unit(const U *p)
{
	if constexpr (NA && sizeof(U) == 16) {
		uint4 v;
		asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
		    : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
		    : "l"(p));
		U u;
		memcpy(&u, &v, 16);
		return u;
	} else if constexpr (NA && sizeof(U) == 4) {
		uint32_t v;
		asm("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(v) : "l"(p));
		U u;
		memcpy(&u, &v, 4);
		return u;
	} else if constexpr (CS) {
		return __ldcs(p);
	} else {
		return __ldg(p);
	}
}

template <typename U, bool CS> __device__ __forceinline__ void st_unit(U *p, U v)
{
	if constexpr (CS)
		__stcs(p, v);
	else
		*p = v;
}

/* Store one 16-byte unit (wl of its words valid, 1..4) at a 4-byte aligned
 * address: one 16-byte store when aligned and whole, else 8- or 4-byte
 * stores. */
__device__ __forceinline__ void st_mixed(uint8_t *a, uint4 r, uint32_t wl)
{
	if (wl >= 4 && ((uintptr_t)a & 15) == 0) {
		*(uint4 *)a = r;
	} else if (wl >= 4 && ((uintptr_t)a & 7) == 0) {
		((uint2 *)a)[0] = make_uint2(r.x, r.y);
		((uint2 *)a)[1] = make_uint2(r.z, r.w);
	} else {
		uint32_t *w = (uint32_t *)a;
		w[0] = r.x;
		if (wl > 1)
			w[1] = r.y;
		if (wl > 2)
			w[2] = r.z;
		if (wl > 3)
			w[3] = r.w;
	}
}

/* The warp copies the payloads of its group of packets as one flattened
 * list of units (16 bytes when every payload of the group and its destination
 * are 16-byte aligned, else 4-byte words): each round every lane loads R units
 * (from whichever packets they fall in) before storing any, so several
 * packets' bytes are in flight per warp at once; the memory system, not the
 * per-packet latency, then sets the pace. Lane j owns packet j: its source
 * offset in its slot (off), byte count (len, 0: nothing to copy) and output
 * offset (dst). */
template <typename U, int R, bool CS, bool NA, bool MIXED>
__device__ static void dfr_copy_units(const uint8_t *myslot, uint8_t *out, uint32_t lane,
				      uint32_t off, uint32_t cnt, unsigned long long dst, uint32_t words)
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
				r[q] = ld_unit<U, CS, NA>((const U *)(uintptr_t)sp + k);
		}
#pragma unroll
		for (int q = 0; q < R; q++) {
			uint32_t x = x0 + lane + 32u * q;
			uint32_t jj = jk[q] >> 27, k = jk[q] & ((1u << 27) - 1);
			unsigned long long dp = __shfl_sync(0xffffffffu, dst, jj);
			if constexpr (MIXED) {
				uint32_t wl = __shfl_sync(0xffffffffu, words, jj) - 4 * k;
				if (x < total)
					st_mixed(out + dp + 16ull * k, *(const uint4 *)&r[q], wl);
			} else {
				if (x < total)
					st_unit<U, CS>((U *)(out + dp) + k, r[q]);
			}
		}
	}
}

/* Copy mode per group: 16-byte units when every payload and destination is
 * 16-byte aligned; with LD16, 16-byte loads and 16/8/4-byte stores when the
 * sources are 16-byte aligned and the destinations only 4-byte aligned (1500-
 * byte packets: 1468-byte payloads at 1468-byte spacing; the last load of a
 * payload reads up to 12 bytes past it, inside its slot); else 4-byte units. */
template <int R, bool CS, bool NA, bool LD16>
__device__ static void dfr_copy_group(const uint8_t *myslot, uint8_t *out, uint32_t lane,
				      uint32_t off, uint32_t len, unsigned long long dst, uint32_t slot_size)
{
	const uintptr_t src = (uintptr_t)(myslot + off);
	bool aligned = (((src | (uintptr_t)(out + dst) | len) & 15) == 0);
	if (__all_sync(0xffffffffu, len == 0 || aligned)) {
		dfr_copy_units<uint4, R, CS, NA, false>(myslot, out, lane, off, len / 16, dst, 0);
		return;
	}
	if constexpr (LD16) {
		bool src16 = (src & 15) == 0 && (((uintptr_t)(out + dst) | len) & 3) == 0 &&
			     ((off + len + 15u) & ~15u) <= slot_size;
		if (__all_sync(0xffffffffu, len == 0 || src16)) {
			dfr_copy_units<uint4, R, CS, NA, true>(myslot, out, lane, off, (len + 15) / 16, dst, len / 4);
			return;
		}
	}
	dfr_copy_units<uint32_t, R, CS, NA, false>(myslot, out, lane, off, len / 4, dst, 0);
}

/* ---- Hopper bulk copies (TMA): cp.async.bulk global -> shared -> global ----
 * Lane 0 of each warp moves the group's payloads in pieces of up to TMA_PIECE
 * bytes through TMA_STAGES shared-memory buffers: a bulk load completes on the
 * stage's mbarrier, then a bulk store writes the stage out; TMA_STAGES loads
 * are in flight per warp. Only when every payload and destination of the
 * group is 16-byte aligned with a length multiple of 16 (cp.async.bulk's
 * rule); otherwise the group takes the register copy above. */
#define TMA_STAGES 4
#define TMA_PIECE 2048u
#define TMA_SMEM (8u * TMA_STAGES * TMA_PIECE) /* 8 warps per block */

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ uint32_t smem_u32(const void *p)
{
	return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void mbar_init(uint32_t bar)
{
	asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void mbar_expect(uint32_t bar, uint32_t bytes)
{
	asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
		     : "memory");
}

/* Bounded wait: a lost completion traps (a launch error) instead of hanging. */
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity)
{
	uint32_t done;
	for (uint32_t spin = 0;; spin++) {
		asm volatile("{\n\t.reg .pred p;\n\t"
			     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
			     "selp.b32 %0, 1, 0, p;\n\t}"
			     : "=r"(done)
			     : "r"(bar), "r"(parity)
			     : "memory");
		if (done)
			return;
		if (spin > (1u << 24))
			__trap();
	}
}

__device__ __forceinline__ void bulk_g2s(uint32_t sdst, unsigned long long gsrc, uint32_t bytes,
					 uint32_t bar)
{
	asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
		     ::"r"(sdst), "l"(gsrc), "r"(bytes), "r"(bar)
		     : "memory");
}

__device__ __forceinline__ void bulk_s2g(unsigned long long gdst, uint32_t ssrc, uint32_t bytes)
{
	asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(gdst),
		     "r"(ssrc), "r"(bytes)
		     : "memory");
	asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

__device__ __forceinline__ void bulk_wait_read()
{
	asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}

__device__ __forceinline__ void bulk_wait_all()
{
	asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

/* Returns false (nothing done) when the group is not aligned for bulk copies.
 * tc counts this warp's pieces since the kernel began: piece t uses stage
 * t % TMA_STAGES and completes phase (t / TMA_STAGES) of its mbarrier. */
__device__ static bool dfr_copy_tma(const uint8_t *myslot, uint8_t *out, uint32_t lane, uint32_t off,
				    uint32_t len, unsigned long long dst, uint32_t sbuf, uint32_t bar0,
				    uint32_t &tc)
{
	const unsigned long long src = (unsigned long long)(uintptr_t)(myslot + off);
	const unsigned long long dstp = (unsigned long long)(uintptr_t)(out + dst);
	bool aligned = ((src | dstp | len) & 15) == 0;
	if (!__all_sync(0xffffffffu, len == 0 || aligned))
		return false;
	const uint32_t mask = __ballot_sync(0xffffffffu, len != 0);
	if (!mask)
		return true;
	/* Cursors (packet j, byte offset o) for the loads and for the stores;
	 * warp-uniform, every lane runs the loop (shuffles), lane 0 issues. */
	uint32_t jl = __ffs(mask) - 1, ol = 0, js = jl, os = 0, tl = tc, ts = tc;
	auto adv = [&](uint32_t &j, uint32_t &o) {
		uint32_t lj = __shfl_sync(0xffffffffu, len, j);
		o += TMA_PIECE;
		if (o >= lj) {
			uint32_t rest = mask & ~((2u << j) - 1u); /* j = 31: (2u << 31) = 0, rest 0 */
			o = 0;
			j = rest ? (uint32_t)__ffs(rest) - 1 : 32;
		}
	};
	auto load = [&](uint32_t j, uint32_t o, uint32_t t) {
		uint32_t lj = __shfl_sync(0xffffffffu, len, j);
		unsigned long long s = __shfl_sync(0xffffffffu, src, j);
		if (lane == 0) {
			uint32_t st = t % TMA_STAGES, bytes = min(TMA_PIECE, lj - o);
			mbar_expect(bar0 + 8 * st, bytes);
			bulk_g2s(sbuf + st * TMA_PIECE, s + o, bytes, bar0 + 8 * st);
		}
	};
	auto store = [&](uint32_t j, uint32_t o, uint32_t t) {
		uint32_t lj = __shfl_sync(0xffffffffu, len, j);
		unsigned long long d = __shfl_sync(0xffffffffu, dstp, j);
		if (lane == 0) {
			uint32_t st = t % TMA_STAGES, bytes = min(TMA_PIECE, lj - o);
			mbar_wait(bar0 + 8 * st, (t / TMA_STAGES) & 1);
			asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
			bulk_s2g(d + o, sbuf + st * TMA_PIECE, bytes);
		}
	};
	for (int k = 0; k < TMA_STAGES && jl < 32; k++) {
		load(jl, ol, tl++);
		adv(jl, ol);
	}
	while (ts < tl) {
		store(js, os, ts++);
		adv(js, os);
		if (jl < 32) {
			/* The stage just stored from is the next load's: wait until
			 * the bulk store has read it. */
			if (lane == 0)
				bulk_wait_read();
			load(jl, ol, tl++);
			adv(jl, ol);
		}
	}
	if (lane == 0)
		bulk_wait_read();
	tc = tl;
	__syncwarp();
	return true;
}
#endif

/* A warp takes `group` (<= 32) packets at a time. Each lane runs the header
 * stage of one of them (so the serial, branchy parse costs 1/32 of the issue
 * slots it would cost with one warp per packet), then the whole warp copies
 * the group's payloads (dfr_copy_group, or bulk copies when TMA). */
template <int MINB, int R, bool CS, bool TMA, bool NA, bool LD16, bool SV>
__global__ void __launch_bounds__(256, MINB)
	dfr_kernel(struct pdma_dfr_config c, struct pdma_dfr_tables t, const uint8_t *__restrict__ slots,
		   uint32_t slot_size, uint32_t n, uint32_t group, struct pdma_dfr_desc *desc, uint32_t *pmax,
		   uint32_t *hhint)
{
	__shared__ unsigned long long s_keys[DFR_CACHE];
	__shared__ uint32_t s_plen[DFR_CACHE];
	__shared__ struct vrt_scratch s_v[SV ? 256 : 1];
	const uint32_t lane = threadIdx.x & 31;
	const uint32_t warps = (gridDim.x * blockDim.x) >> 5;
	const uint32_t ncache = c.max_streams < DFR_CACHE ? c.max_streams : DFR_CACHE;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	extern __shared__ __align__(128) uint8_t dsm[];
	__shared__ __align__(8) unsigned long long s_bar[8 * TMA_STAGES];
	uint32_t tc = 0, sbuf = 0, bar0 = 0;
	if constexpr (TMA) {
		const uint32_t wi = threadIdx.x >> 5;
		sbuf = smem_u32(dsm + wi * TMA_STAGES * TMA_PIECE);
		bar0 = smem_u32(&s_bar[wi * TMA_STAGES]);
		if (lane == 0)
			for (int k = 0; k < TMA_STAGES; k++)
				mbar_init(bar0 + 8 * k);
		asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
	}
#endif

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
			int st = dfr_lane<SV, false>(c, t, s_keys, s_plen, ncache, myslot, slot_size, d, off, len, dst,
					       &s_v[SV ? threadIdx.x : 0], pmax, hhint);
			d.status = (int8_t)st;
			if (desc)
				desc[i] = d;
		}
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
		if constexpr (TMA) {
			if (dfr_copy_tma(myslot, t.out, lane, off, len, dst, sbuf, bar0, tc))
				continue;
		}
#endif
		dfr_copy_group<R, CS, NA, LD16>(myslot, t.out, lane, off, len, dst, slot_size);
	}
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	if constexpr (TMA) {
		if (lane == 0)
			bulk_wait_all();
	}
#endif
}

/* One thread copies a whole payload (v11's rare overflow case). */
__device__ static void copy_serial(uint8_t *d, const uint8_t *s, uint32_t len)
{
	if ((((uintptr_t)d | (uintptr_t)s | len) & 3) == 0) {
		for (uint32_t k = 0; k < len; k += 4)
			*(uint32_t *)(d + k) = *(const uint32_t *)(s + k);
	} else {
		for (uint32_t k = 0; k < len; k++)
			d[k] = s[k];
	}
}

/* ---- two-pass variant (v8tp): header pass, then a full-grid copy ----
 * Pass 1: one thread per packet runs the same header stage (dfr_lane) and
 * writes a work-list entry {dst lo, dst hi, source offset in the slot,
 * length (0: nothing to copy)}; per block the largest length and whether any
 * destination or length is not 16-byte aligned go to a control entry with one
 * atomicMax each, tagged with the launch's sequence number (no reset needed:
 * a newer launch's value is always larger; a stale tag reads as 0).
 * Pass 2: packet p owns threads [p * stride, (p + 1) * stride), stride = the
 * largest payload's 16-byte windows (+1 when misaligned), so consecutive
 * threads copy consecutive 16-byte windows of the output: every window fully
 * inside a payload is one aligned 16-byte store; its source, when not
 * 16-byte aligned, is two aligned 16-byte loads funnel-shifted together.
 * The partial first and last windows take 4-byte (else byte) stores.
 * Measured on the H100: about half of v7s's rate (bench/ingest/NOTES.md,
 * "Version 8 try"); kept as a variant, not the default. */
/* FAST (v11): stride is the copy pass's windows per packet, from the host's
 * hint (the longest payload it knows of, hint bytes; 0: the slot geometry's
 * bound, which every packet fits). A payload wider than that (a new, longer
 * stream) is copied here by its header thread and left out of the work list;
 * every block that saw a payload longer than the hint raises the device-side
 * maximum *pmax and writes the result to the host's hint word (*hhint, mapped
 * host memory), so the next launch's stride covers it. The copy pass never
 * depends on the hint being right, only its width does. */
template <bool FAST>
__global__ void __launch_bounds__(256)
	dfr_tp_hdr(struct pdma_dfr_config c, struct pdma_dfr_tables t, const uint8_t *__restrict__ slots,
		   uint32_t slot_size, uint32_t n, struct pdma_dfr_desc *desc, uint4 *wl, uint32_t seq,
		   uint32_t stride, uint32_t hint, uint32_t *pmax, uint32_t *hhint)
{
	__shared__ unsigned long long s_keys[DFR_CACHE];
	__shared__ uint32_t s_plen[DFR_CACHE];
	/* The fast path needs no parser scratch (its fallback keeps a frame of
	 * its own): 38 KiB less shared memory per block, more resident blocks. */
	__shared__ struct vrt_scratch s_v[FAST ? 1 : 256];
	__shared__ uint32_t s_red[2];
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	/* The copy pass (launched with programmatic stream serialization) may
	 * start its blocks once every block here has begun; they wait in
	 * griddepcontrol.wait for this grid's completion and its writes. */
	asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
	const uint32_t lane = threadIdx.x & 31;
	const uint32_t ncache = c.max_streams < DFR_CACHE ? c.max_streams : DFR_CACHE;
	const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
	/* FAST: the slot's prefix is loaded before the stream table, so the
	 * two round trips overlap. pre is always a valid object, never a
	 * pointer chosen at run time (that kept it in local memory: a store and
	 * a reload per field on the critical path); len 0, where there is no
	 * prefix, makes the fast path decline. */
	struct pdma_dfr_pre pre;
	pre.len = 0;
	if constexpr (FAST) {
		if (i < n && slot_size >= PDMA_SLOT_HDR + 64u && !((uintptr_t)(slots + (size_t)i * slot_size) & 15))
			pdma_dfr_prefix(slots + (size_t)i * slot_size, &pre);
	}
	for (uint32_t k = threadIdx.x; k < ncache; k += blockDim.x) {
		s_keys[k] = *(volatile unsigned long long *)&t.keys[k];
		s_plen[k] = *(volatile uint32_t *)&t.plen[k];
	}
	if (threadIdx.x < 2)
		s_red[threadIdx.x] = 0;
	__syncthreads();
	uint32_t off = 0, len = 0;
	unsigned long long dst = 0;
	if (i < n) {
		const uint8_t *myslot = slots + (size_t)i * slot_size;
		struct pdma_dfr_desc d;
		int st = dfr_lane<!FAST, FAST>(c, t, s_keys, s_plen, ncache, myslot, slot_size, d, off, len, dst,
					       &s_v[FAST ? 0 : threadIdx.x], pmax, hhint, &pre);
		d.status = (int8_t)st;
		if (desc)
			desc[i] = d;
		if (!len)
			off = 0;
		uint32_t wlen = len;
		if constexpr (FAST) {
			const uintptr_t a = (uintptr_t)(t.out + dst);
			if (len && windows16(a, len) > stride) {
				copy_serial(t.out + dst, myslot + off, len);
				wlen = 0;
			}
		}
		wl[1 + i] = make_uint4((uint32_t)dst, (uint32_t)(dst >> 32), wlen ? off : 0, wlen);
	}
	if constexpr (FAST) {
		const uint32_t nw = __reduce_max_sync(0xffffffffu, len > hint ? len : 0u);
		if (lane == 0 && nw)
			atomicMax(&s_red[0], nw);
		__syncthreads();
		if (threadIdx.x == 0 && s_red[0]) {
			const uint32_t old = atomicMax(pmax, s_red[0]);
			*(volatile uint32_t *)hhint = old > s_red[0] ? old : s_red[0];
		}
		return;
	}
	const uint32_t mis = len && ((((uintptr_t)(t.out + dst)) | len) & 15) != 0;
	const uint32_t mx = __reduce_max_sync(0xffffffffu, len), mo = __reduce_or_sync(0xffffffffu, mis);
	if (lane == 0) {
		if (mx)
			atomicMax(&s_red[0], mx);
		if (mo)
			atomicOr(&s_red[1], mo);
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		unsigned long long *ctrl = (unsigned long long *)wl;
		if (s_red[0])
			atomicMax(&ctrl[0], ((unsigned long long)seq << 32) | s_red[0]);
		if (s_red[1])
			atomicMax(&ctrl[1], ((unsigned long long)seq << 32) | 1u);
	}
}

/* 16 bytes starting m (1..15) bytes into lo, continuing into hi. */
__device__ __forceinline__ uint4 shift16(uint4 lo, uint4 hi, uint32_t m)
{
	uint32_t w0 = lo.x, w1 = lo.y, w2 = lo.z, w3 = lo.w, w4 = hi.x, w5 = hi.y, w6 = hi.z, w7 = hi.w;
	if (m & 8) {
		w0 = w2; w1 = w3; w2 = w4; w3 = w5; w4 = w6; w5 = w7;
	}
	if (m & 4) {
		w0 = w1; w1 = w2; w2 = w3; w3 = w4; w4 = w5;
	}
	const uint32_t sh = 8 * (m & 3);
	return make_uint4(__funnelshift_r(w0, w1, sh), __funnelshift_r(w1, w2, sh), __funnelshift_r(w2, w3, sh),
			  __funnelshift_r(w3, w4, sh));
}

__global__ void __launch_bounds__(256)
	dfr_tp_copy(const uint8_t *__restrict__ slots, uint32_t slot_size, uint32_t n, uint8_t *out,
		    const uint4 *__restrict__ wl, uint32_t seq)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
	const unsigned long long c0 = ((volatile const unsigned long long *)wl)[0];
	const unsigned long long c1 = ((volatile const unsigned long long *)wl)[1];
	const uint32_t maxl = (uint32_t)(c0 >> 32) == seq ? (uint32_t)c0 : 0;
	if (!maxl)
		return;
	const uint32_t stride = ((maxl + 15) >> 4) + ((uint32_t)(c1 >> 32) == seq ? 1u : 0u);
	const uint32_t tid = blockIdx.x * blockDim.x + threadIdx.x;
	const uint32_t p = tid / stride, u = tid - p * stride;
	if (p >= n)
		return;
	const uint4 e = __ldg(&wl[1 + p]);
	const uint32_t len = e.w;
	if (!len)
		return;
	const uintptr_t s = (uintptr_t)(slots + (size_t)p * slot_size + e.z);
	const uintptr_t a = (uintptr_t)(out + (((unsigned long long)e.y << 32) | e.x));
	const uint32_t nw = windows16(a, len);
	if (u >= nw)
		return;
	const uintptr_t aw = (a & ~(uintptr_t)15) + 16u * u;
	if (aw >= a && aw + 16 <= a + len) {
		const uintptr_t sa = s + (aw - a);
		const uint32_t m = (uint32_t)sa & 15;
		uint4 r;
		if (m == 0) {
			r = __ldg((const uint4 *)sa);
		} else {
			const uint4 *b = (const uint4 *)(sa - m);
			r = shift16(__ldg(b), __ldg(b + 1), m);
		}
		*(uint4 *)aw = r;
		return;
	}
	const uintptr_t lo = aw > a ? aw : a, hi = aw + 16 < a + len ? aw + 16 : a + len;
	if (((a | len | s) & 3) == 0) {
		for (uintptr_t k = lo; k < hi; k += 4)
			*(uint32_t *)k = __ldg((const uint32_t *)(s + (k - a)));
	} else {
		for (uintptr_t k = lo; k < hi; k++)
			*(uint8_t *)k = *(const uint8_t *)(s + (k - a));
	}
}

/* ---- two passes done right (v9): pass 1 is v8tp's header pass; pass 2 ----
 * never reads the control entry: the per-packet stride (16-byte output
 * windows) comes from the host, an upper bound from the slot geometry and the
 * configured largest payload (min(max_payload, slot - PDMA_SLOT_HDR - 4)
 * rounded up to windows, +1 for a misaligned destination). Unit k of the grid
 * is window k % stride of packet k / stride; block b owns units
 * [b * 256 * U, (b + 1) * 256 * U), thread t units t, t + 256, ... (coalesced
 * like the copy kernel). Per thread: the U work-list entries are loaded
 * first, then every payload load (one aligned 16-byte load, two funnel-shifted
 * when the source is not 16-byte aligned; a block is loaded only when it
 * holds a byte the window stores), then every store (one aligned 16-byte
 * store for a full window, 4-byte or byte stores for the partial first and
 * last windows). The source address is the packet's slot (index * slot size)
 * plus the work list's payload offset. */
/* A copy window's store state between its loads and its store: [lo, hi)
 * bytes stored, source misalignment m, 4-byte stores allowed (w4). */
struct win {
	uint32_t lo, hi, m;
	bool w4;
};

template <int U, int MINB>
__global__ void __launch_bounds__(256, MINB)
	dfr_v9_copy(const uint8_t *__restrict__ slots, uint32_t slot_size, uint32_t n, uint32_t stride,
		    uint8_t *out, const uint4 *__restrict__ wl)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
	const uint32_t total = n * stride; /* < 2^32: checked on the host */
	const uint32_t base = blockIdx.x * (256u * U) + threadIdx.x;
	uint4 e[U];
	uint32_t p[U], u[U];
#pragma unroll
	for (int q = 0; q < U; q++) {
		const uint32_t k = base + 256u * q;
		p[q] = k / stride;
		u[q] = k - p[q] * stride;
		e[q] = k < total ? __ldg(&wl[1 + p[q]]) : make_uint4(0, 0, 0, 0);
	}
	uint4 l0[U], l1[U];
	uintptr_t aw[U];
	struct win w[U];
#pragma unroll
	for (int q = 0; q < U; q++) {
		const uint32_t len = e[q].w;
		const uintptr_t a = (uintptr_t)(out + (((unsigned long long)e[q].y << 32) | e[q].x));
		const uintptr_t s = (uintptr_t)(slots + (size_t)p[q] * slot_size + e[q].z);
		const uint32_t nw = windows16(a, len);
		l0[q] = make_uint4(0, 0, 0, 0);
		l1[q] = l0[q];
		aw[q] = (a & ~(uintptr_t)15) + 16u * u[q];
		uint32_t lo = 0, hi = 0, m = 0; /* bytes [lo, hi) of the window are stored */
		if (len && u[q] < nw) {
			lo = aw[q] >= a ? 0 : (uint32_t)(a - aw[q]);
			hi = aw[q] + 16 <= a + len ? 16 : (uint32_t)(a + len - aw[q]);
			const uintptr_t ss = s + aw[q] - a; /* source of the window's byte 0 */
			m = (uint32_t)ss & 15;
			const uintptr_t b0 = ss - m;
			if (m + lo < 16)
				l0[q] = __ldg((const uint4 *)b0);
			if (m + hi > 16)
				l1[q] = __ldg((const uint4 *)b0 + 1);
		}
		w[q] = { lo, hi, m, ((a | len) & 3) == 0 };
	}
#pragma unroll
	for (int q = 0; q < U; q++) {
		const uint32_t lo = w[q].lo, hi = w[q].hi, m = w[q].m;
		if (hi == 0)
			continue;
		const uint4 r = m ? shift16(l0[q], l1[q], m) : l0[q];
		if (lo == 0 && hi == 16) {
			*(uint4 *)aw[q] = r;
		} else if (w[q].w4) {
			const uint32_t wd[4] = { r.x, r.y, r.z, r.w };
#pragma unroll
			for (uint32_t j = 0; j < 4; j++)
				if (4 * j >= lo && 4 * j < hi)
					((uint32_t *)aw[q])[j] = wd[j];
		} else {
			const uint32_t wd[4] = { r.x, r.y, r.z, r.w };
#pragma unroll
			for (uint32_t j = 0; j < 16; j++)
				if (j >= lo && j < hi)
					((uint8_t *)aw[q])[j] = (uint8_t)(wd[j >> 2] >> (8 * (j & 3)));
		}
	}
}

/* ---- copies for the measurements (bench_copy) ---- */

/* Grid-stride copy with the deframer's occupancy (3 blocks of 256 per SM) and
 * bytes in flight (8 loads of 16 bytes per lane before the stores). */
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

/* The deframer without the deframing: the same grid, packet-to-lane mapping
 * and flattened copy of the same payloads, with source offset, length and
 * destination known in advance (no parse, no stream table, no tags). Packet i
 * goes to stream i % nstreams, position i / nstreams (the generator's
 * round-robin order). */
__global__ void __launch_bounds__(256, 3)
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
		dfr_copy_group<8, false, false, false>(myslot, out, lane, off, len, dst, slot_size);
	}
}

/* Bench probes of the header pass's memory access (bench_copy kinds TOUCH,
 * TOUCHP): per packet the three 16-byte loads of the slot's first 64 bytes
 * and, with TR, the trailer word the datagram length points at, folded into
 * one word per packet so that nothing is optimized away. */
template <bool TR>
__global__ void __launch_bounds__(256)
	hdr_touch(const uint8_t *__restrict__ slots, uint32_t slot_size, uint32_t n, uint32_t *sink)
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

/* ---- kernel variants ---- */

struct kvar {
	const char *name;
	const void *fn;
	int minb;       /* resident blocks of 256 per SM */
	uint32_t smem;  /* dynamic shared memory */
	bool tma;
	int plain;      /* TMA variants: the variant run instead on mapped host memory */
	bool tp;        /* two-pass: fn is the header pass, a copy pass follows (stream launch) */
	const void *cp; /* two-pass copy kernel with host-side stride (v9), else dfr_tp_copy */
	uint32_t cu;    /* its 16-byte units per thread */
	bool ov;        /* v10: sub-batches, header pass k + 1 overlapping copy pass k */
	bool dyn;       /* v11, auto: copy stride from the longest payload seen (hint) */
	bool autosel;   /* auto: v11 when that payload is >= AUTO_MIN_PAYLOAD, else DFR_FALLBACK_KV */
};

static const struct kvar KV[] = {
	/* 0 */ { "v5", (const void *)dfr_kernel<3, 8, false, false, false, false, false>, 3, 0, false, 0 },
	/* 1 */ { "v5cs", (const void *)dfr_kernel<3, 8, true, false, false, false, false>, 3, 0, false, 1 },
	/* 2 */ { "v5b4", (const void *)dfr_kernel<4, 4, false, false, false, false, false>, 4, 0, false, 2 },
	/* 3 */ { "v5na", (const void *)dfr_kernel<3, 8, false, false, true, false, false>, 3, 0, false, 3 },
	/* 4 */ { "v6", (const void *)dfr_kernel<3, 8, false, false, true, true, false>, 3, 0, false, 4 },
	/* 5 */ { "v6b4", (const void *)dfr_kernel<4, 4, false, false, true, true, false>, 4, 0, false, 5 },
	/* 6 */ { "v7s", (const void *)dfr_kernel<3, 8, false, false, false, false, true>, 3, 0, false, 6 },
	/* 7 */ { "v7", (const void *)dfr_kernel<3, 8, false, false, true, true, true>, 3, 0, false, 7 },
	/* 8 */ { "v7b4", (const void *)dfr_kernel<4, 4, false, false, true, true, true>, 4, 0, false, 8 },
	/* 9 */ { "tma", (const void *)dfr_kernel<3, 8, false, true, false, false, false>, 3, TMA_SMEM, true, 0 },
	/* 10 */ { "v6tma", (const void *)dfr_kernel<3, 8, false, true, true, true, false>, 3, TMA_SMEM, true, 4 },
	/* 11 */ { "v8tp", (const void *)dfr_tp_hdr<false>, 3, 0, false, 11, true },
	/* 12 */ { "v9", (const void *)dfr_tp_hdr<false>, 3, 0, false, 12, true, (const void *)dfr_v9_copy<4, 4>, 4 },
	/* 13 */ { "v9u8", (const void *)dfr_tp_hdr<false>, 3, 0, false, 13, true, (const void *)dfr_v9_copy<8, 2>, 8 },
	/* 14 */ { "v10", (const void *)dfr_tp_hdr<false>, 3, 0, false, 14, true, (const void *)dfr_v9_copy<4, 4>, 4, true },
	/* 15 */ { "v11", (const void *)dfr_tp_hdr<true>, 3, 0, false, 15, true, (const void *)dfr_v9_copy<2, 6>, 2,
		   false, true },
	/* 16 */ { "auto", (const void *)dfr_tp_hdr<true>, 3, 0, false, 16, true, (const void *)dfr_v9_copy<2, 6>, 2,
		   false, true, true },
};
#define NKV (sizeof(KV) / sizeof(KV[0]))
/* The default: auto (v11 once a payload length is known, v7s before), the
 * best ratio to the D2D copy at every packet size on the H100 and the H200
 * (bench/ingest/NOTES.md, bench/results/ingest.txt). */
#define DFR_DEFAULT_KV 16
#define DFR_V11_KV 15 /* what auto runs once a payload length is known */
/* What a two-pass variant falls back to for batches too large for its copy
 * grid (a one-pass variant). */
#define DFR_FALLBACK_KV 6
/* auto: the shortest payload (bytes) for which the two-pass v11 runs: any,
 * once one is known. Since its header pass reads the trailer from the slot
 * header and divides in 32 bits (bench/ingest/NOTES.md, "Version 15"), v11
 * is ahead of v7s at every packet size from 64 bytes up on the H100 and the
 * H200 (it was 736-992 bytes of payload on the H100, 992-1468 on the H200).
 * Before any payload is known v7s runs: v11's copy stride would then come
 * from the slot geometry (9 KiB slots: ~580 windows a packet).
 * PEERDMA_DFR_AUTO_MIN overrides it. */
#define AUTO_MIN_PAYLOAD 1u

/* Launch shape for n packets: packets per warp as many as 32 (the header
 * stage is then shared by a full warp), but few enough that every resident
 * warp gets work in balanced waves: a small batch (a 1 MiB host-staged chunk)
 * or a batch of few large packets still spreads over the whole GPU. */
static void kshape(const struct pdma_gpu_dfr *g, uint32_t n, int minb, uint32_t *blocks, uint32_t *group)
{
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

/* One deframe kernel launch, as stream launch or graph kernel node. */
struct kplan {
	const struct kvar *kv;
	uint32_t blocks;
	struct pdma_dfr_config c;
	struct pdma_dfr_tables t;
	const uint8_t *slots;
	uint32_t slot_size, n, group;
	struct pdma_dfr_desc *desc;
	uint32_t *pmax, *hhint;
	void *p[9];
};

/* on_device: the slots are device memory (TMA may read them); mapped host
 * memory always takes a register-copy variant. */
static void make_kplan(struct pdma_gpu_dfr *g, const struct kvar *kv, const void *slots, uint32_t slot_size,
		       uint32_t n, struct pdma_dfr_desc *d_desc, bool on_device, struct kplan *k)
{
	k->kv = (kv->tma && !(on_device && g->tma_ok)) ? &KV[kv->plain] : kv;
	kshape(g, n, k->kv->minb, &k->blocks, &k->group);
	k->c = g->c;
	k->t = g->t;
	k->slots = (const uint8_t *)slots;
	k->slot_size = slot_size;
	k->n = n;
	k->desc = d_desc;
	k->p[0] = &k->c;
	k->p[1] = &k->t;
	k->p[2] = &k->slots;
	k->p[3] = &k->slot_size;
	k->p[4] = &k->n;
	k->p[5] = &k->group;
	k->p[6] = &k->desc;
	k->pmax = g->d_pmax;
	k->hhint = g->hint_d;
	k->p[7] = &k->pmax;
	k->p[8] = &k->hhint;
}

static cudaKernelNodeParams knode(struct kplan *k)
{
	cudaKernelNodeParams p;
	memset(&p, 0, sizeof(p));
	p.func = (void *)k->kv->fn;
	p.gridDim = dim3(k->blocks);
	p.blockDim = dim3(256);
	p.sharedMemBytes = k->kv->smem;
	p.kernelParams = k->p;
	return p;
}

static int klaunch(struct pdma_gpu_dfr *g, struct kplan *k, cudaStream_t s)
{
	CK(g, cudaLaunchKernel(k->kv->fn, dim3(k->blocks), dim3(256), k->p, k->kv->smem, s));
	return 0;
}

/* Stream s[si]'s two-pass work list for batches of up to n packets: n + 1
 * entries (control entry, one per packet), + TP_MAXK - 1 for v10's
 * sub-batches, each with its own control entry. Graph capture calls it
 * first: the allocation and its synchronous clear cannot be captured. */
static int tp_reserve(struct pdma_gpu_dfr *g, int si, uint32_t n)
{
	if (g->tpcap[si] >= (size_t)n + TP_MAXK)
		return 0;
	cudaFree(g->tpwl[si]);
	g->tpwl[si] = NULL;
	g->tpcap[si] = 0;
	CK(g, cudaMalloc(&g->tpwl[si], ((size_t)n + TP_MAXK) * sizeof(uint4)));
	CK(g, cudaMemset(g->tpwl[si], 0, ((size_t)n + TP_MAXK) * sizeof(uint4)));
	g->tpcap[si] = (size_t)n + TP_MAXK;
	return 0;
}

/* The two-pass variants (v8tp ... v11, auto): header pass, copy pass, on
 * stream s (its own work list per stream). A batch whose copy grid would pass 2^32 threads
 * takes a one-pass variant (DFR_FALLBACK_KV) instead. */
static int launch_tp(struct pdma_gpu_dfr *g, const void *slots, uint32_t slot_size, uint32_t n,
		     struct pdma_dfr_desc *d_desc, cudaStream_t s)
{
	const int si = s == g->s[1];
	const struct kvar *kv = g->kv;
	/* v9: windows per packet from the geometry (the longest payload a slot
	 * can hold and the configuration accepts, +1 for misalignment). */
	uint32_t lmax = g->c.max_payload;
	if (kv->cp)
		lmax = std::min(lmax, slot_size > PDMA_SLOT_HDR + 4 ? slot_size - PDMA_SLOT_HDR - 4 : 0u);
	/* v11, auto: the longest payload seen so far, when known, narrows it. */
	const uint32_t hint = kv->dyn ? *(volatile uint32_t *)g->hint_h : 0;
	if (hint && hint < lmax)
		lmax = hint;
	const uint32_t stride = (lmax + 15) / 16 + 1;
	/* As the header pass sees it: no packet can pass lmax, so a hint above
	 * the geometry's bound is not news to report again. */
	const uint32_t hintk = hint ? lmax : 0;
	const uint64_t thr = (uint64_t)n * stride;
	if (thr >= (1ull << 32) - 8192)
		return 1;
	int ret = tp_reserve(g, si, n);
	if (ret)
		return ret;
	const uint32_t seq = ++g->tpseq ? g->tpseq : ++g->tpseq;
	uint32_t nk = kv->ov ? n / g->tpmin : 1;
	if (nk > TP_MAXK)
		nk = TP_MAXK;
	g->topo = g->topo * 1000003u + 2u + (nk > 1 ? nk : 1u);
	if (nk > 1) {
		/* v10: sub-batch k = packets [k * m, min(n, (k + 1) * m)), m a
		 * multiple of 256; its work list at wl + k * m + k (own control
		 * entry, then its packets). The header passes run in order on s
		 * (the tables see the packets in the same order as one pass),
		 * each followed by an event; copy pass k runs on cs[si] after
		 * header pass k's event, so header pass k + 1 overlaps copy pass
		 * k. s then waits for the last copy pass: the whole batch is done
		 * as seen by s, and the next use of this work list (on s) comes
		 * after every copy pass that reads it. */
		uint32_t m = (n + nk - 1) / nk;
		m = (m + 255) & ~255u;
		uint32_t k = 0;

		for (uint32_t o = 0; o < n; o += m, k++) {
			const uint32_t cnt = std::min(m, n - o);
			const uint8_t *sl = (const uint8_t *)slots + (size_t)o * slot_size;
			uint4 *wk = g->tpwl[si] + o + k;
			struct pdma_dfr_desc *dk = d_desc ? d_desc + o : NULL;
			void *ha[] = { &g->c, &g->t, &sl, &slot_size, (void *)&cnt, &dk, &wk, (void *)&seq,
				       (void *)&stride, (void *)&hintk, &g->d_pmax, &g->hint_d };
			CK(g, cudaLaunchKernel(kv->fn, dim3((cnt + 255) / 256), dim3(256), ha, 0, s));
			CK(g, cudaEventRecord(g->evh[si][k], s));
			CK(g, cudaStreamWaitEvent(g->cs[si], g->evh[si][k], 0));
			const uint64_t tk = (uint64_t)cnt * stride;
			const uint4 *wlc = wk;
			uint8_t *out = g->t.out;
			void *args[] = { &sl, &slot_size, (void *)&cnt, (void *)&stride, &out, &wlc };
			CK(g, cudaLaunchKernel(kv->cp, dim3((uint32_t)((tk + 256ull * kv->cu - 1) / (256ull * kv->cu))),
					       dim3(256), args, 0, g->cs[si]));
		}
		CK(g, cudaEventRecord(g->evc[si], g->cs[si]));
		CK(g, cudaStreamWaitEvent(s, g->evc[si], 0));
		return 0;
	}
	{
		const uint8_t *sl = (const uint8_t *)slots;
		void *ha[] = { &g->c, &g->t, &sl, &slot_size, &n, &d_desc, &g->tpwl[si], (void *)&seq,
			       (void *)&stride, (void *)&hintk, &g->d_pmax, &g->hint_d };
		if (g->tp_part != 2)
			CK(g, cudaLaunchKernel(kv->fn, dim3((n + 255) / 256), dim3(256), ha, 0, s));
		if (g->tp_part == 1)
			return 0;
	}
	/* Programmatic dependent launch: the copy grid's launch overlaps the
	 * header pass's tail (it waits for its completion on the device). */
	cudaLaunchConfig_t cfg;
	cudaLaunchAttribute at[1];
	memset(&cfg, 0, sizeof(cfg));
	memset(at, 0, sizeof(at));
	cfg.gridDim = dim3((uint32_t)((thr + 255) / 256));
	if (kv->cp)
		cfg.gridDim = dim3((uint32_t)((thr + 256ull * kv->cu - 1) / (256ull * kv->cu)));
	cfg.blockDim = dim3(256);
	cfg.stream = s;
	at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
	at[0].val.programmaticStreamSerializationAllowed = 1;
	cfg.attrs = at;
	cfg.numAttrs = 1;
	const uint8_t *sl = (const uint8_t *)slots;
	const uint4 *wl = (const uint4 *)g->tpwl[si];
	if (kv->cp) {
		uint8_t *out = g->t.out;
		void *args[] = { &sl, &slot_size, &n, (void *)&stride, &out, &wl };
		CK(g, cudaLaunchKernelExC(&cfg, kv->cp, args));
	} else {
		CK(g, cudaLaunchKernelEx(&cfg, dfr_tp_copy, sl, slot_size, n, g->t.out, wl, seq));
	}
	return 0;
}

static int launch(struct pdma_gpu_dfr *g, const void *slots, uint32_t slot_size, uint32_t n,
		  struct pdma_dfr_desc *d_desc, bool on_device, cudaStream_t s)
{
	struct kplan k;
	const struct kvar *kv = g->kv;
	if (!n)
		return 0;
	if (kv->autosel && *(volatile uint32_t *)g->hint_h < g->auto_min) {
		/* auto: payloads short (or not yet seen): the one-pass kernel. */
		kv = &KV[DFR_FALLBACK_KV];
	} else if (kv->tp) {
		int r = launch_tp(g, slots, slot_size, n, d_desc, s);
		if (r <= 0)
			return r;
		kv = &KV[DFR_FALLBACK_KV]; /* too large for the copy grid */
	}
	g->topo = g->topo * 1000003u + 1u;
	make_kplan(g, kv, slots, slot_size, n, d_desc, on_device, &k);
	return klaunch(g, &k, s);
}

static int ensure_desc(struct pdma_gpu_dfr *g, size_t n)
{
	if (n <= g->desc_cap)
		return 0;
	if (g->d_desc)
		cudaFree(g->d_desc);
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

/* ---- CUDA graphs: one executable graph per batch shape ----
 * Shape: kind (run: one kernel; staged: chunk copies and kernels), number of
 * chunks, descriptor copy or not, kernel function. Built and instantiated on
 * first use; afterwards each launch only updates its nodes' parameters
 * (addresses, counts, grid size) and replays it with cudaGraphLaunch. */
#define GMAXC 32 /* chunks per staged graph; longer batches take several launches */
#define GCACHE 8

struct gent {
	cudaGraphExec_t exec; /* NULL: free entry */
	cudaGraph_t graph;    /* kept: node updates name the nodes of the graph instantiated */
	int kind;             /* 0 run, 1 staged */
	uint32_t nch;
	bool desc;
	const void *fn;
	uint64_t stamp;
	uint64_t topo;        /* captured graphs: the topology launch() chose (pdma_gpu_dfr.topo) */
	cudaGraphNode_t cp[GMAXC], kn[GMAXC], dn;
};

/* One batch for the graph path: nch chunks (kind 1: copy host -> stage, then
 * kernel; kind 0: kernel only), then optionally the descriptors back. */
struct bplan {
	int kind;
	uint32_t nch;
	const void *hsrc[GMAXC];
	void *stage[GMAXC];
	size_t bytes[GMAXC];
	struct kplan k[GMAXC];
	bool desc;
	void *hdesc;
	const void *ddesc;
	size_t dbytes;
};

static void gent_free(struct gent *e)
{
	if (e->exec)
		cudaGraphExecDestroy(e->exec);
	if (e->graph)
		cudaGraphDestroy(e->graph);
	e->exec = NULL;
	e->graph = NULL;
}

static void graph_flush(struct pdma_gpu_dfr *g)
{
	for (int i = 0; g->gc && i < GCACHE; i++)
		gent_free(&g->gc[i]);
}

#define GCK(call)                                                                         \
	do {                                                                              \
		cudaError_t e_ = (call);                                                  \
		if (e_ != cudaSuccess) {                                                  \
			snprintf(g->err, sizeof(g->err), "graph: %s: %s", #call,          \
				 cudaGetErrorString(e_));                                 \
			goto fail;                                                        \
		}                                                                         \
	} while (0)

/* The cached executable graph of a shape, or NULL; *victim: the entry to
 * reuse for it (free, else least recently launched). topo is 0 for the
 * graphs built node by node. */
static struct gent *gcache_find(struct pdma_gpu_dfr *g, int kind, uint32_t nch, bool desc, const void *fn,
				uint64_t topo, struct gent **victim)
{
	*victim = &g->gc[0];
	for (int i = 0; i < GCACHE; i++) {
		struct gent *x = &g->gc[i];
		if (x->exec && x->kind == kind && x->nch == nch && x->desc == desc && x->fn == fn && x->topo == topo)
			return x;
		if (!x->exec || ((*victim)->exec && x->stamp < (*victim)->stamp))
			*victim = x;
	}
	return NULL;
}

/* A graph could not be built or launched (nothing of the batch was
 * launched): drop the cache and use stream launch from now on. Returns 1. */
static int graph_give_up(struct pdma_gpu_dfr *g, cudaGraph_t gr)
{
	if (gr)
		cudaGraphDestroy(gr);
	cudaGetLastError();
	graph_flush(g);
	fprintf(stderr, "gpu deframer: %s; using stream launch from now on\n", g->err);
	g->launch = PDMA_GPU_LAUNCH_STREAM;
	return 1;
}

/* Launches plan b as a graph on s[0]. Returns 0, or 1 when the graph path
 * failed before anything was launched (the caller then uses streams). */
static int graph_launch(struct pdma_gpu_dfr *g, struct bplan *b)
{
	const void *fn = b->k[0].kv->fn;
	struct gent *victim, *e;
	cudaGraph_t gr = NULL;
	for (uint32_t k = 1; k < b->nch; k++)
		if (b->k[k].kv->fn != fn)
			return 1;
	e = gcache_find(g, b->kind, b->nch, b->desc, fn, 0, &victim);
	if (e) {
		cudaError_t u = cudaSuccess;
		for (uint32_t k = 0; k < b->nch && u == cudaSuccess; k++) {
			if (b->kind == 1)
				u = cudaGraphExecMemcpyNodeSetParams1D(e->exec, e->cp[k], b->stage[k], b->hsrc[k],
								       b->bytes[k], cudaMemcpyHostToDevice);
			cudaKernelNodeParams p = knode(&b->k[k]);
			if (u == cudaSuccess)
				u = cudaGraphExecKernelNodeSetParams(e->exec, e->kn[k], &p);
		}
		if (b->desc && u == cudaSuccess)
			u = cudaGraphExecMemcpyNodeSetParams1D(e->exec, e->dn, b->hdesc, b->ddesc, b->dbytes,
							       cudaMemcpyDeviceToHost);
		if (u != cudaSuccess) {
			/* An update the driver refuses: instantiate this shape anew
			 * (counted; correct, only slower). */
			cudaGetLastError();
			if (!g->grebuilds++)
				fprintf(stderr, "gpu deframer: graph node update: %s; rebuilding instead\n",
					cudaGetErrorString(u));
			victim = e;
			e = NULL;
		}
	}
	if (!e) {
		e = victim;
		gent_free(e);
		GCK(cudaGraphCreate(&gr, 0));
		for (uint32_t k = 0; k < b->nch; k++) {
			cudaGraphNode_t dep[2];
			size_t nd = 0;
			if (b->kind == 1) {
				/* Stage k & 1 is free once kernel k - 2 is done. */
				if (k >= 2)
					dep[nd++] = e->kn[k - 2];
				GCK(cudaGraphAddMemcpyNode1D(&e->cp[k], gr, dep, nd, b->stage[k], b->hsrc[k],
							     b->bytes[k], cudaMemcpyHostToDevice));
				nd = 0;
				dep[nd++] = e->cp[k];
			}
			cudaKernelNodeParams p = knode(&b->k[k]);
			GCK(cudaGraphAddKernelNode(&e->kn[k], gr, dep, nd, &p));
		}
		if (b->desc) {
			/* Kernel k waited for kernel k - 2: the last two cover all. */
			cudaGraphNode_t dep[2] = { e->kn[b->nch - 1], b->nch >= 2 ? e->kn[b->nch - 2] : NULL };
			GCK(cudaGraphAddMemcpyNode1D(&e->dn, gr, dep, b->nch >= 2 ? 2 : 1, b->hdesc, b->ddesc,
						     b->dbytes, cudaMemcpyDeviceToHost));
		}
		GCK(cudaGraphInstantiate(&e->exec, gr, 0));
		e->graph = gr;
		gr = NULL;
		e->kind = b->kind;
		e->nch = b->nch;
		e->desc = b->desc;
		e->fn = fn;
		e->topo = 0;
	}
	e->stamp = ++g->gstamp;
	GCK(cudaGraphLaunch(e->exec, g->s[0]));
	return 0;
fail:
	return graph_give_up(g, gr);
}

/* Graph launch of the two-pass variants, whose batches are shaped on the host
 * as they are enqueued (copy-pass stride from the longest payload seen, v10's
 * sub-batches, auto's choice): what the stream path enqueues for the batch
 * (enqueue(), ending on s[0]) is captured into a graph, the copy pass's
 * programmatic dependent launch becoming a programmatic edge, and the
 * executable graph cached for the shape (kind 2 run, 3 staged; chunks;
 * descriptors; variant) is updated with it (cudaGraphExecUpdate), or
 * instantiated anew where the driver refuses (another topology, e.g. auto's
 * first batch, before any payload is known, runs a one-pass kernel; counted in
 * grebuilds). Nothing runs while capturing: on a capture failure (1
 * returned) the caller enqueues the batch on streams. The caller allocates
 * first (tp_reserve, stage and descriptor buffers): no allocation may happen
 * inside a capture. */
template <typename F>
static int capture_launch(struct pdma_gpu_dfr *g, int kind, uint32_t nch, bool desc, F enqueue)
{
	const void *fn = g->kv->fn;
	struct gent *e, *victim;
	cudaGraph_t gr = NULL;
	g->topo = 0;
	GCK(cudaStreamBeginCapture(g->s[0], cudaStreamCaptureModeThreadLocal));
	{
		const int ret = enqueue();
		const cudaError_t ce = cudaStreamEndCapture(g->s[0], &gr);
		if (ret) {
			/* last_error() has enqueue's reason. */
			if (gr)
				cudaGraphDestroy(gr);
			cudaGetLastError();
			return ret;
		}
		GCK(ce);
	}
	/* The shape includes the topology the capture recorded, so an update
	 * changes parameters only. */
	e = gcache_find(g, kind, nch, desc, fn, g->topo, &victim);
	if (e) {
		cudaGraphExecUpdateResultInfo info;
		if (cudaGraphExecUpdate(e->exec, gr, &info) != cudaSuccess) {
			cudaGetLastError();
			g->grebuilds++;
			victim = e;
			e = NULL;
		}
	}
	if (!e) {
		e = victim;
		gent_free(e);
		GCK(cudaGraphInstantiate(&e->exec, gr, 0));
		e->kind = kind;
		e->nch = nch;
		e->desc = desc;
		e->fn = fn;
		e->topo = g->topo;
	}
	cudaGraphDestroy(gr);
	gr = NULL;
	e->stamp = ++g->gstamp;
	GCK(cudaGraphLaunch(e->exec, g->s[0]));
	return 0;
fail:
	return graph_give_up(g, gr);
}
#undef GCK

/* enqueue_run's stream path (also what graph capture records). */
static int run_streams(struct pdma_gpu_dfr *g, const void *dp, bool on_device, uint32_t slot_size, uint32_t n,
		       bool want_desc, size_t doff)
{
	int ret = launch(g, dp, slot_size, n, want_desc ? g->d_desc + doff : NULL, on_device, g->s[0]);
	if (ret)
		return ret;
	if (want_desc)
		CK(g, cudaMemcpyAsync(g->h_desc + doff, g->d_desc + doff, (size_t)n * sizeof(struct pdma_dfr_desc),
				      cudaMemcpyDeviceToHost, g->s[0]));
	return 0;
}

/* Enqueue the deframing of n slots the GPU can address (descriptors to
 * h_desc + doff when want_desc). */
static int enqueue_run(struct pdma_gpu_dfr *g, const void *dp, bool on_device, uint32_t slot_size,
		       uint32_t n, bool want_desc, size_t doff)
{
	if (!n)
		return 0;
	if (g->launch == PDMA_GPU_LAUNCH_GRAPH && g->kv->tp) {
		int ret = tp_reserve(g, 0, n);
		if (ret)
			return ret;
		ret = capture_launch(g, 2, 1, want_desc, [&]() { return run_streams(g, dp, on_device, slot_size, n,
										     want_desc, doff); });
		if (ret <= 0)
			return ret;
	} else if (g->launch == PDMA_GPU_LAUNCH_GRAPH) {
		struct bplan b;
		b.kind = 0;
		b.nch = 1;
		make_kplan(g, g->kv, dp, slot_size, n, want_desc ? g->d_desc + doff : NULL, on_device, &b.k[0]);
		b.desc = want_desc;
		b.hdesc = g->h_desc + doff;
		b.ddesc = g->d_desc + doff;
		b.dbytes = (size_t)n * sizeof(struct pdma_dfr_desc);
		if (graph_launch(g, &b) == 0)
			return 0;
		CK(g, cudaStreamSynchronize(g->s[0]));
	}
	return run_streams(g, dp, on_device, slot_size, n, want_desc, doff);
}

static int sync_all(struct pdma_gpu_dfr *g)
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

/* enqueue_staged's stream path for slots [start, n), per slots a chunk:
 * chunk k on s[k % 2]; ends on s[0] (s[1] joined) when it copies descriptors
 * back or when capturing (capture: s[1] also forks from s[0] first, as a
 * capture must). */
static int staged_streams(struct pdma_gpu_dfr *g, const void *host, uint32_t slot_size, uint32_t n, uint32_t per,
			  uint32_t start, bool want_desc, size_t doff, bool capture)
{
	uint32_t k = 0;
	if (capture && n - start > per) {
		CK(g, cudaEventRecord(g->ev[0], g->s[0]));
		CK(g, cudaStreamWaitEvent(g->s[1], g->ev[0], 0));
	}
	for (uint32_t first = start; first < n; first += per, k++) {
		uint32_t cnt = n - first < per ? n - first : per;
		cudaStream_t s = g->s[k & 1];
		CK(g, cudaMemcpyAsync(g->stage[k & 1], (const uint8_t *)host + (size_t)first * slot_size,
				      (size_t)cnt * slot_size, cudaMemcpyHostToDevice, s));
		int ret = launch(g, g->stage[k & 1], slot_size, cnt, want_desc ? g->d_desc + doff + first : NULL,
				 true, s);
		if (ret)
			return ret;
	}
	if (k >= 2 && (want_desc || capture)) {
		CK(g, cudaEventRecord(g->ev[1], g->s[1]));
		CK(g, cudaStreamWaitEvent(g->s[0], g->ev[1], 0));
	}
	if (want_desc && n > start)
		CK(g, cudaMemcpyAsync(g->h_desc + doff + start, g->d_desc + doff + start,
				      (size_t)(n - start) * sizeof(struct pdma_dfr_desc), cudaMemcpyDeviceToHost,
				      g->s[0]));
	return 0;
}

/* Host-staged: registered host slots copied in chunks (a whole number of
 * slots each) to two device stage buffers and deframed there; chunk k uses
 * stage k % 2, so the copy of one chunk overlaps the kernel of the previous.
 * Stream launch: chunk k on stream k % 2. Graph launch: up to GMAXC chunks
 * per graph with the same dependencies (copy k after kernel k - 2, kernel k
 * after copy k), one launch on s[0]. The kernels of different chunks only
 * touch the tables through atomics whose result does not depend on order
 * (newer wins). Descriptors of slot i go to h_desc[doff + i]. */
static int enqueue_staged(struct pdma_gpu_dfr *g, const void *host, uint32_t slot_size, uint32_t n,
			  size_t chunk, bool want_desc, size_t doff)
{
	uint32_t per = (uint32_t)(chunk / slot_size), start = 0;
	int ret;
	if (per == 0)
		per = 1;
	if ((ret = ensure_stage(g, (size_t)per * slot_size)))
		return ret;
	if (g->launch == PDMA_GPU_LAUNCH_GRAPH && g->kv->tp) {
		/* Captured in parts of up to GMAXC chunks, as the other graphs. */
		if ((ret = tp_reserve(g, 0, per)) || (ret = tp_reserve(g, 1, per)))
			return ret;
		for (uint32_t first = 0; first < n;) {
			const uint32_t cnt = n - first < GMAXC * per ? n - first : GMAXC * per;
			ret = capture_launch(g, 3, (cnt + per - 1) / per, want_desc, [&]() {
				return staged_streams(g, host, slot_size, first + cnt, per, first, want_desc, doff, true);
			});
			if (ret < 0)
				return ret;
			if (ret > 0) {
				start = first; /* nothing of this part ran: streams from here */
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
				make_kplan(g, g->kv, g->stage[k & 1], slot_size, cnt,
					   want_desc ? g->d_desc + doff + first : NULL, true, &b.k[k]);
				b.nch++;
				first += cnt;
			}
			b.desc = want_desc;
			b.hdesc = g->h_desc + doff + sub;
			b.ddesc = g->d_desc + doff + sub;
			b.dbytes = (size_t)(first - sub) * sizeof(struct pdma_dfr_desc);
			if (graph_launch(g, &b)) {
				/* Nothing of this part was launched: streams from here. */
				CK(g, cudaStreamSynchronize(g->s[0]));
				start = sub;
				break;
			}
		}
		if (g->launch == PDMA_GPU_LAUNCH_GRAPH)
			return 0;
	}
	return staged_streams(g, host, slot_size, n, per, start, want_desc, doff, false);
}

static int g_reset(struct pdma_gpu_dfr *g)
{
	size_t ns = g->c.max_streams, tags = ns * g->c.out_pkts;
	CK(g, cudaMemset(g->t.keys, 0, ns * sizeof(uint64_t)));
	CK(g, cudaMemset(g->t.plen, 0, ns * sizeof(uint32_t)));
	CK(g, cudaMemset(g->t.tags, 0, tags * sizeof(uint64_t)));
	CK(g, cudaMemset(g->t.out, 0, tags * g->c.max_payload));
	CK(g, cudaMemset(g->d_pmax, 0, sizeof(uint32_t)));
	CK(g, cudaDeviceSynchronize());
	*(volatile uint32_t *)g->hint_h = 0;
	return 0;
}

static int reset_tags(struct pdma_gpu_dfr *g, cudaStream_t s)
{
	CK(g, cudaMemsetAsync(g->t.tags, 0, (size_t)g->c.max_streams * g->c.out_pkts * 8, s));
	return 0;
}

static void g_close(struct pdma_gpu_dfr *g)
{
	if (!g)
		return;
	graph_flush(g);
	free(g->gc);
	cudaFree(g->d_pmax);
	if (g->hint_h)
		cudaFreeHost(g->hint_h);
	cudaFree(g->t.keys);
	cudaFree(g->t.plen);
	cudaFree(g->t.tags);
	cudaFree(g->t.out);
	cudaFree(g->d_desc);
	if (g->h_desc)
		cudaFreeHost(g->h_desc);
	for (int i = 0; i < 2; i++) {
		cudaFree(g->stage[i]);
		cudaFree(g->tpwl[i]);
		if (g->s[i])
			cudaStreamDestroy(g->s[i]);
		if (g->ev[i])
			cudaEventDestroy(g->ev[i]);
		if (g->cs[i])
			cudaStreamDestroy(g->cs[i]);
		if (g->evc[i])
			cudaEventDestroy(g->evc[i]);
		for (int k = 0; k < TP_MAXK; k++)
			if (g->evh[i][k])
				cudaEventDestroy(g->evh[i][k]);
	}
	free(g);
}

static int g_set_kernel(struct pdma_gpu_dfr *g, const char *name)
{
	for (size_t i = 0; i < NKV; i++)
		if (!strcmp(KV[i].name, name)) {
			if (KV[i].tma && !g->tma_ok)
				return -ENOTSUP;
			g->kv = &KV[i];
			return 0;
		}
	return -ENOENT;
}

static const char *g_kernel_name(struct pdma_gpu_dfr *g)
{
	return g->kv->name;
}

static int g_set_launch(struct pdma_gpu_dfr *g, int mode)
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

static int g_open(const struct pdma_dfr_config *c, int device, struct pdma_gpu_dfr **out)
{
	if (!pdma_dfr_config_ok(c))
		return -EINVAL;
	struct pdma_gpu_dfr *g = (struct pdma_gpu_dfr *)calloc(1, sizeof(*g));
	const char *env;
	int ret;
	if (!g)
		return -ENOMEM;
	g->c = *c;
	g->device = device;
	g->kv = &KV[DFR_DEFAULT_KV];
	g->launch = PDMA_GPU_LAUNCH_GRAPH;
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
	g->gc = (struct gent *)calloc(GCACHE, sizeof(struct gent));
	if (!g->gc) {
		ret = -ENOMEM;
		goto err;
	}
	OPEN_CK(cudaSetDevice(device));
	OPEN_CK(cudaGetDeviceProperties(&g->prop, device));
	g->sms = g->prop.multiProcessorCount;
	if (g->prop.major >= 9) {
		g->tma_ok = true;
		for (size_t i = 0; i < NKV; i++)
			if (KV[i].tma)
				g->tma_ok = g->tma_ok &&
					    cudaFuncSetAttribute(KV[i].fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
								 TMA_SMEM) == cudaSuccess &&
					    cudaFuncSetAttribute(KV[i].fn, cudaFuncAttributePreferredSharedMemoryCarveout,
								 cudaSharedmemCarveoutMaxShared) == cudaSuccess;
		cudaGetLastError();
	}
	OPEN_CK(cudaMalloc(&g->d_pmax, sizeof(uint32_t)));
	OPEN_CK(cudaMemset(g->d_pmax, 0, sizeof(uint32_t)));
	OPEN_CK(cudaHostAlloc((void **)&g->hint_h, sizeof(uint32_t), cudaHostAllocMapped));
	*g->hint_h = 0;
	OPEN_CK(cudaHostGetDevicePointer((void **)&g->hint_d, g->hint_h, 0));
	OPEN_CK(cudaMalloc(&g->t.keys, ns * sizeof(uint64_t)));
	OPEN_CK(cudaMalloc(&g->t.plen, ns * sizeof(uint32_t)));
	OPEN_CK(cudaMalloc(&g->t.tags, tags * sizeof(uint64_t)));
	OPEN_CK(cudaMalloc(&g->t.out, tags * c->max_payload));
	for (int i = 0; i < 2; i++) {
		OPEN_CK(cudaStreamCreateWithFlags(&g->s[i], cudaStreamNonBlocking));
		OPEN_CK(cudaEventCreateWithFlags(&g->ev[i], cudaEventDisableTiming));
		OPEN_CK(cudaStreamCreateWithFlags(&g->cs[i], cudaStreamNonBlocking));
		OPEN_CK(cudaEventCreateWithFlags(&g->evc[i], cudaEventDisableTiming));
		for (int k = 0; k < TP_MAXK; k++)
			OPEN_CK(cudaEventCreateWithFlags(&g->evh[i][k], cudaEventDisableTiming));
	}
	if ((env = getenv("PEERDMA_GPU_LAUNCH")) && *env) {
		if (!strcmp(env, "stream"))
			g->launch = PDMA_GPU_LAUNCH_STREAM;
		else if (strcmp(env, "graph"))
			fprintf(stderr, "gpu deframer: PEERDMA_GPU_LAUNCH=%s: not stream or graph, ignored\n", env);
	}
	g->auto_min = AUTO_MIN_PAYLOAD;
	if ((env = getenv("PEERDMA_DFR_AUTO_MIN")) && *env)
		g->auto_min = (uint32_t)strtoul(env, NULL, 10);
	/* PEERDMA_DFR_V10_MIN: v10's fewest packets per sub-batch (tests set it
	 * low so that their small rings take the sub-batch path). */
	g->tpmin = TP_MINSUB;
	if ((env = getenv("PEERDMA_DFR_V10_MIN")) && *env)
		g->tpmin = (uint32_t)strtoul(env, NULL, 10);
	if (!g->tpmin)
		g->tpmin = 1;
	if ((env = getenv("PEERDMA_DFR_KERNEL")) && *env && g_set_kernel(g, env))
		fprintf(stderr, "gpu deframer: PEERDMA_DFR_KERNEL=%s: unknown or not on this GPU, using %s\n",
			env, g->kv->name);
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
	for (auto &r : g->reg)
		if (r.p == p)
			r.p = NULL;
	CK(g, cudaHostUnregister(p));
	return 0;
}

/* Device address of a pointer: itself for device memory, the mapped alias for
 * registered host memory. */
static int dev_ptr(struct pdma_gpu_dfr *g, const void *p, const void **dp, bool *on_device)
{
	cudaPointerAttributes a;
	for (auto &r : g->reg)
		if (r.p && (const uint8_t *)p >= r.p && (const uint8_t *)p < r.p + r.n) {
			*dp = r.d + ((const uint8_t *)p - r.p);
			*on_device = false;
			return 0;
		}
	CK(g, cudaPointerGetAttributes(&a, p));
	if (a.type == cudaMemoryTypeHost) {
		void *d;
		CK(g, cudaHostGetDevicePointer(&d, (void *)p, 0));
		*dp = d;
		*on_device = false;
	} else if (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged) {
		*dp = p;
		*on_device = a.type == cudaMemoryTypeDevice;
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
	bool on_device;
	int ret = dev_ptr(g, slots, &dp, &on_device);
	if (ret)
		return ret;
	if (desc && (ret = ensure_desc(g, n)))
		return ret;
	if ((ret = enqueue_run(g, dp, on_device, slot_size, n, desc != NULL, 0)))
		return ret;
	CK(g, cudaStreamSynchronize(g->s[0]));
	if (desc)
		memcpy(desc, g->h_desc, (size_t)n * sizeof(*desc));
	return 0;
}

static int g_run_staged(struct pdma_gpu_dfr *g, const void *host, uint32_t slot_size, uint32_t n,
			size_t chunk, struct pdma_dfr_desc *desc)
{
	int ret;
	if (desc && (ret = ensure_desc(g, n)))
		return ret;
	if ((ret = enqueue_staged(g, host, slot_size, n, chunk, desc != NULL, 0)))
		return ret;
	if ((ret = sync_all(g)))
		return ret;
	if (desc)
		memcpy(desc, g->h_desc, (size_t)n * sizeof(*desc));
	return 0;
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

static int g_bench_deframe(struct pdma_gpu_dfr *g, const void *dev_slots, uint32_t slot_size,
			   uint32_t n, int iters, struct pdma_gpu_bench *r)
{
	std::vector<uint8_t> h((size_t)slot_size * n);
	double sec;
	CK(g, cudaMemcpy(h.data(), dev_slots, h.size(), cudaMemcpyDeviceToHost));
	double bytes = deframe_bytes(h.data(), slot_size, n, &g->c);
	/* Every pass starts from empty tags, or "newer wins" would skip the
	 * payload copies after the first pass. The reset (a memset of the tags,
	 * a benchmark artefact: ingest never resets them) runs before the start
	 * event, so the time is the kernel's alone, as the copy's is. */
	int ret = timed(g, iters, [&]() { return reset_tags(g, g->s[0]); },
			[&]() { return launch(g, dev_slots, slot_size, n, NULL, true, g->s[0]); }, &sec);
	if (ret)
		return ret;
	fill(r, sec, bytes);
	return 0;
}

static int g_bench_copy(struct pdma_gpu_dfr *g, int kind, const void *dev_slots, uint32_t slot_size,
			uint32_t n, int iters, struct pdma_gpu_bench *r)
{
	std::vector<uint8_t> h((size_t)slot_size * n);
	double sec;
	int ret;
	CK(g, cudaMemcpy(h.data(), dev_slots, h.size(), cudaMemcpyDeviceToHost));
	double bytes = deframe_bytes(h.data(), slot_size, n, &g->c);
	if (kind == PDMA_GPU_COPY_KERNEL || kind == PDMA_GPU_COPY_SIMPLE) {
		size_t n16 = (size_t)(bytes / 2) / 16;
		uint4 *a, *b;
		CK(g, cudaMalloc(&a, n16 * 16));
		CK(g, cudaMalloc(&b, n16 * 16));
		CK(g, cudaMemset(a, 0x5a, n16 * 16));
		ret = timed(g, iters, nothing, [&]() {
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
	if (kind == PDMA_GPU_COPY_CPASS) {
		/* v11's copy pass alone, in place: its header pass runs before
		 * the start event (same work list). */
		const struct kvar *was = g->kv;
		g->kv = &KV[DFR_V11_KV];
		ret = timed(g, iters, [&]() {
			g->tp_part = 1;
			int e = reset_tags(g, g->s[0]);
			if (!e)
				e = launch(g, dev_slots, slot_size, n, NULL, true, g->s[0]);
			g->tp_part = 2;
			return e;
		}, [&]() { return launch(g, dev_slots, slot_size, n, NULL, true, g->s[0]); }, &sec);
		g->tp_part = 0;
		g->kv = was;
		if (ret)
			return ret;
		fill(r, sec, bytes);
		return 0;
	}
	if (kind == PDMA_GPU_COPY_HDR || kind == PDMA_GPU_COPY_TOUCH || kind == PDMA_GPU_COPY_TOUCHP) {
		void *buf;
		CK(g, cudaMalloc(&buf, ((size_t)n + 1) * sizeof(uint4)));
		const uint32_t blocks = (n + 255) / 256;
		ret = timed(g, iters, [&]() { return kind == PDMA_GPU_COPY_HDR ? reset_tags(g, g->s[0]) : 0; },
			    [&]() {
			if (kind == PDMA_GPU_COPY_HDR)
				dfr_tp_hdr<true><<<blocks, 256, 0, g->s[0]>>>(g->c, g->t, (const uint8_t *)dev_slots,
									      slot_size, n, NULL, (uint4 *)buf, 1,
									      ~0u >> 4, ~0u, g->d_pmax, g->hint_d);
			else if (kind == PDMA_GPU_COPY_TOUCH)
				hdr_touch<true><<<blocks, 256, 0, g->s[0]>>>((const uint8_t *)dev_slots, slot_size, n,
									     (uint32_t *)buf);
			else
				hdr_touch<false><<<blocks, 256, 0, g->s[0]>>>((const uint8_t *)dev_slots, slot_size, n,
									      (uint32_t *)buf);
			CK(g, cudaGetLastError());
			return 0;
		}, &sec);
		cudaFree(buf);
		if (ret)
			return ret;
		fill(r, sec, bytes);
		return 0;
	}
	if (kind != PDMA_GPU_COPY_SKEL1 && kind != PDMA_GPU_COPY_SKEL4)
		return -EINVAL;
	struct pdma_dfr_desc d;
	struct pdma_dfr_pkt p;
	if (pdma_dfr_header(&g->c, h.data(), slot_size, &d, &p) != PDMA_DFR_ST_DATA) {
		snprintf(g->err, sizeof(g->err), "bench_copy: slot 0 is not a data packet");
		return -EINVAL;
	}
	uint32_t ns = kind == PDMA_GPU_COPY_SKEL1 ? 1 : (g->c.max_streams < 4 ? g->c.max_streams : 4);
	unsigned long long region = kind == PDMA_GPU_COPY_SKEL1
					    ? (unsigned long long)g->c.max_streams * g->c.out_pkts * g->c.max_payload
					    : (unsigned long long)g->c.out_pkts * g->c.max_payload;
	if ((unsigned long long)(n / ns + 1) * p.payload_len > region) {
		snprintf(g->err, sizeof(g->err), "bench_copy: output tables too small");
		return -EINVAL;
	}
	uint32_t blocks, group;
	kshape(g, n, 3, &blocks, &group);
	ret = timed(g, iters, nothing, [&]() {
		skel_kernel<<<blocks, 256, 0, g->s[0]>>>((const uint8_t *)dev_slots, slot_size, n, group, g->t.out,
							 PDMA_SLOT_HDR + p.payload_off, p.payload_len, ns, region);
		CK(g, cudaGetLastError());
		return 0;
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

static int g_bench_h2d(struct pdma_gpu_dfr *g, const void *host, size_t bytes, size_t chunk,
		       int iters, struct pdma_gpu_bench *r)
{
	void *d;
	double sec;
	CK(g, cudaMalloc(&d, bytes));
	int ret = timed(g, iters, nothing, [&]() {
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

/* A host-staged pass timed with CUDA events: start on s[0], s[1] waits for
 * it, the pass is enqueued (stream or graph launch: g->launch), the end event
 * on s[0] waits for s[1]'s last work. Median of iters. */
static int g_bench_staged(struct pdma_gpu_dfr *g, const void *host, uint32_t slot_size, uint32_t n,
			  size_t chunk, int iters, struct pdma_gpu_bench *r)
{
	double sec;
	int ret = timed(g, iters, [&]() { return reset_tags(g, g->s[0]); }, [&]() {
		cudaEvent_t a;
		CK(g, cudaEventCreateWithFlags(&a, cudaEventDisableTiming));
		CK(g, cudaEventRecord(a, g->s[0]));
		CK(g, cudaStreamWaitEvent(g->s[1], a, 0));
		cudaEventDestroy(a);
		int e = enqueue_staged(g, host, slot_size, n, chunk, false, 0);
		if (e)
			return e;
		CK(g, cudaEventRecord(g->ev[1], g->s[1]));
		CK(g, cudaStreamWaitEvent(g->s[0], g->ev[1], 0));
		return 0;
	}, &sec);
	if (ret)
		return ret;
	fill(r, sec, (double)slot_size * n); /* bytes through the copy engine */
	return 0;
}

static int g_bench_mapped(struct pdma_gpu_dfr *g, const void *host, uint32_t slot_size, uint32_t n,
			  int iters, struct pdma_gpu_bench *r)
{
	const void *dp;
	bool on_device;
	double sec;
	int ret = dev_ptr(g, host, &dp, &on_device);
	if (ret)
		return ret;
	double bytes = 0;
	for (uint32_t i = 0; i < n; i++)
		bytes += ((const struct pdma_slot_hdr *)((const uint8_t *)host + (size_t)i * slot_size))->len;
	ret = timed(g, iters, [&]() { return reset_tags(g, g->s[0]); },
		    [&]() { return launch(g, dp, slot_size, n, NULL, on_device, g->s[0]); }, &sec);
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

static int g_bench_batches(struct pdma_gpu_dfr *g, const void *host, uint32_t slot_size, uint32_t per,
			   uint32_t batches, int staged_path, int mode, int sync_each, int reps,
			   struct pdma_gpu_bench *r)
{
	const void *dp;
	bool on_device;
	int old = g->launch, ret;
	std::vector<struct pdma_dfr_desc> hd(per);
	std::vector<double> t;
	if (!per || !batches || reps < 1)
		return -EINVAL;
	if ((ret = dev_ptr(g, host, &dp, &on_device)) || (ret = ensure_desc(g, (size_t)per * batches)) ||
	    (ret = g_set_launch(g, mode)))
		return ret;
	for (int rep = -1; rep < reps && !ret; rep++) { /* rep -1: warm-up (builds the graphs) */
		if ((ret = reset_tags(g, g->s[0])) || (ret = sync_all(g)))
			break;
		double t0 = now_s();
		for (uint32_t b = 0; b < batches && !ret; b++) {
			size_t o = (size_t)b * per * slot_size;
			if (sync_each)
				ret = staged_path ? g_run_staged(g, (const uint8_t *)host + o, slot_size, per,
								 (size_t)per * slot_size, hd.data())
						  : g_run(g, (const uint8_t *)host + o, slot_size, per, hd.data());
			else
				ret = staged_path ? enqueue_staged(g, (const uint8_t *)host + o, slot_size, per,
								   (size_t)per * slot_size, true, (size_t)b * per)
						  : enqueue_run(g, (const uint8_t *)dp + o, on_device, slot_size, per,
								true, (size_t)b * per);
		}
		if (!ret && !sync_each)
			ret = sync_all(g);
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
	ops->set_launch = g_set_launch;
	ops->get_launch = g_get_launch;
	ops->set_kernel = g_set_kernel;
	ops->kernel_name = g_kernel_name;
	ops->bench_copy = g_bench_copy;
	ops->bench_batches = g_bench_batches;
	return 0;
}
