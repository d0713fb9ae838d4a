// SPDX-License-Identifier: MIT
/*
 * The GPU deframer's device code: the header stage (validate a VITA-49 header
 * with the same code as the CPU deframer: include/peerdma/vrt.h and
 * ingest/deframe.h are compiled here for the device; find the stream; claim
 * the output position with the tag atomic), and the kernels the three
 * variants run (DESIGN.md says how they were chosen):
 *   v7s  dfr_onepass: per warp 32 packets at a time, each lane parses one
 *        header (parser scratch in shared memory), then the warp copies the
 *        32 payloads (warp_copy.cuh); a persistent grid, so one launch covers
 *        any batch size;
 *   v11  dfr_hdr_pass, one thread per packet on the header fast path, writing
 *        a work list; then dfr_copy_pass, one thread per 16-byte output window
 *        (2 per thread), launched as a programmatic dependent launch;
 *   v16  dfr_small_pass (dfr_tiny_pass for payloads of at most 64 bytes: the
 *        same code in 40 registers; dfr_tiny80_pass, the same loading whole
 *        80-byte slots), v11's header pass whose warps then copy their own
 *        32 payloads (warp_copy.cuh; in dfr_tiny80_pass, those that 16-byte
 *        stores cannot take).
 * The host side (deframe.cu) picks and launches them.
 */
#include "dfr.h"
#include "warp_copy.cuh"

/* Device stream lookup: plain loads first (the common case, a known stream,
 * costs no atomic), compare-and-swap only to claim a free entry. */
__device__ static int dfr_lookup(const struct pdma_dfr_config *c, unsigned long long *keys, uint32_t id,
				 bool claim)
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

#define DFR_CACHE 64 /* stream-table entries cached in shared memory */

/* Per-thread parser scratch in shared memory (v7s), padded so that the 32
 * lanes' copies of a field spread over the banks (38-word stride: 2-way
 * conflicts at most). Without it the parser's struct lives in a local-memory
 * stack frame (vrt.h indexes ctx_off[] at run-time indices), stored and
 * reloaded per field through L1/L2. */
struct vrt_scratch {
	struct pdma_vrt_packet v;
	uint32_t pad;
};

/* The general header stage out of line, results by value (so the caller's
 * descriptor stays in registers): the fast path's fallback, whose parser
 * frame then lives in this function alone. */
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

/* The 16-byte output windows that bytes [a, a + len) touch: the copy pass's
 * unit. */
__device__ __forceinline__ static uint32_t windows16(uintptr_t a, uint32_t len)
{
	return (uint32_t)(((a + len + 15) >> 4) - (a >> 4));
}

/* After the header stage (st, d, r): find the stream (shared-memory copy of
 * the table first; global compare-and-swap only when a stream is first
 * seen), check the payload size and class, and claim the output position
 * with the tag atomic (newer wins). The payload's source is src_base +
 * r.payload_off bytes from the packet's base (its slot, or the frame
 * region): off, len and dst say what to copy where. */
__device__ __forceinline__ static int dfr_place(const struct pdma_dfr_config &c, const struct pdma_dfr_tables &t,
						unsigned long long *s_keys, uint32_t *s_plen, unsigned long long *s_cls,
						uint32_t ncache, int st,
						struct pdma_dfr_desc &d, const struct pdma_dfr_pkt &r, uint32_t src_base,
						uint32_t &off, uint32_t &len, unsigned long long &dst, uint32_t *pmax,
						uint32_t *hhint)
{
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
	/* The class ID check of pdma_dfr_class_ok_host(): the first data
	 * packet's class claims the stream's slot. */
	{
		/* A claimed class never changes: the block's copy, once set,
		 * spares the chain a round trip to L2. */
		unsigned long long k = (uint32_t)idx < ncache ? s_cls[idx] : 0;
		if (k == 0) {
			unsigned long long *cl = (unsigned long long *)&t.cls[idx];
			k = *(volatile unsigned long long *)cl;
			if (k == 0) {
				k = atomicCAS(cl, 0ull, (unsigned long long)r.cls);
				if (k == 0)
					k = r.cls;
			}
			if ((uint32_t)idx < ncache)
				s_cls[idx] = k;
		}
		if (k != r.cls)
			return -PDMA_DFR_E_CLASS_CHANGE;
	}
	uint32_t pr;
	if (r.pkt < (1ull << 53))
		pdma_dfr_divmod53(r.pkt, c.out_pkts, &pr); /* no 64-bit division (see there) */
	else
		pr = (uint32_t)(r.pkt % c.out_pkts);
	const size_t pos = pr;
	unsigned long long *tag = (unsigned long long *)&t.tags[(size_t)idx * c.out_pkts + pos];
	if (atomicMax(tag, (unsigned long long)(r.pkt + 1)) >= r.pkt + 1)
		return PDMA_DFR_ST_DATA_OLD; /* duplicate or stale: never overwrites */
	off = src_base + r.payload_off;
	len = r.payload_len;
	dst = out_off(c, (uint32_t)idx, pos, r.payload_len);
	return PDMA_DFR_ST_DATA;
}

/* Header stage of one packet, run by one lane: validate, then dfr_place.
 * FAST (v11): pp is the slot's prefix (pdma_dfr_prefix, loaded by the
 * caller) and pdma_dfr_header_fast() runs first; the general path, out of
 * line, only for what it declines. Else (v7s) the general path with its
 * parser scratch in shared memory (sv). */
template <bool FAST>
__device__ static int dfr_lane(const struct pdma_dfr_config &c, const struct pdma_dfr_tables &t,
			       unsigned long long *s_keys, uint32_t *s_plen, unsigned long long *s_cls, uint32_t ncache,
			       const uint8_t *slot,
			       uint32_t slot_size, struct pdma_dfr_desc &d, uint32_t &off, uint32_t &len,
			       unsigned long long &dst, struct vrt_scratch *sv, uint32_t *pmax, uint32_t *hhint,
			       const struct pdma_dfr_pre *pp = nullptr)
{
	struct pdma_dfr_pkt r;
	int st = PDMA_DFR_ST_DATA;
	uint32_t doff; /* the datagram's offset in the slot (its layout) */
	if constexpr (FAST) {
		if (pp && pdma_dfr_header_fast(&c, slot, slot_size, pp, &d, &r)) {
			doff = pp->off;
		} else {
			const struct dfr_hres h = dfr_header_slow(c, slot, slot_size);
			d = h.d;
			r = h.r;
			st = h.st;
			doff = pdma_slot_off(((const struct pdma_slot_hdr *)slot)->flags);
		}
	} else {
		st = pdma_dfr_header_v(&c, slot, slot_size, &d, &r, &sv->v);
		doff = pdma_slot_off(((const struct pdma_slot_hdr *)slot)->flags);
	}
	return dfr_place(c, t, s_keys, s_plen, s_cls, ncache, st, d, r, doff, off, len, dst, pmax, hhint);
}

/* The general datagram stage out of line (the frame lane's fallback). */
__device__ __noinline__ static struct dfr_hres dfr_dgram_slow(struct pdma_dfr_config c, const uint8_t *dg,
							   uint32_t len)
{
	struct dfr_hres h;
	struct pdma_vrt_packet v;
	h.st = pdma_dfr_dgram_v(&c, dg, len, &h.d, &h.r, &v);
	return h;
}

/* A frame ring's lane: the frame's headers (frame.h, checksums where the
 * NIC did not verify them), then its datagram on the fast path, the general
 * path out of line for what it declines, then dfr_place with the source at
 * the frame's offset in the region. */
__device__ static int dfr_frame_lane(const struct pdma_dfr_config &c, const struct pdma_frm_cfg &fc,
				     const struct pdma_dfr_tables &t, unsigned long long *s_keys, uint32_t *s_plen,
				     unsigned long long *s_cls,
				     uint32_t ncache, const uint8_t *base, struct pdma_frame fr,
				     struct pdma_dfr_desc &d, uint32_t &off, uint32_t &len, unsigned long long &dst,
				     uint32_t *pmax, uint32_t *hhint)
{
	const uint8_t *f = base + fr.off;
	struct pdma_dfr_pkt r;
	uint32_t dg_off, dl;
	int st = pdma_frm_parse(&fc, f, fr.len, fr.flags, &dg_off, &dl);
	if (st)
		return pdma_dfr_frame_skip(&d, st);
	st = PDMA_DFR_ST_DATA;
	if (!pdma_dfr_dgram_fast(&c, f + dg_off, dl, &d, &r)) {
		const struct dfr_hres h = dfr_dgram_slow(c, f + dg_off, dl);
		d = h.d;
		r = h.r;
		st = h.st;
	}
	return dfr_place(c, t, s_keys, s_plen, s_cls, ncache, st, d, r, fr.off + dg_off, off, len, dst, pmax,
			 hhint);
}

/* v7s. A warp takes `group` (<= 32) packets at a time. Each lane runs the
 * header stage of one of them (so the serial, branchy parse costs 1/32 of the
 * issue slots it would cost with one warp per packet), then the whole warp
 * copies the group's payloads (8 units in flight per lane). */
__global__ void __launch_bounds__(256, DFR_ONEPASS_MINB)
	dfr_onepass(struct pdma_dfr_config c, struct pdma_dfr_tables t, const uint8_t *__restrict__ slots,
		    uint32_t slot_size, uint32_t n, uint32_t group, struct pdma_dfr_desc *desc, uint32_t *pmax,
		    uint32_t *hhint)
{
	__shared__ unsigned long long s_keys[DFR_CACHE];
	__shared__ uint32_t s_plen[DFR_CACHE];
	__shared__ unsigned long long s_cls[DFR_CACHE];
	__shared__ struct vrt_scratch s_v[256];
	const uint32_t lane = threadIdx.x & 31;
	const uint32_t warps = (gridDim.x * blockDim.x) >> 5;
	const uint32_t ncache = c.max_streams < DFR_CACHE ? c.max_streams : DFR_CACHE;

	for (uint32_t k = threadIdx.x; k < ncache; k += blockDim.x) {
		s_keys[k] = *(volatile unsigned long long *)&t.keys[k];
		s_plen[k] = *(volatile uint32_t *)&t.plen[k];
		s_cls[k] = *(volatile unsigned long long *)&t.cls[k];
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
			int st = dfr_lane<false>(c, t, s_keys, s_plen, s_cls, ncache, myslot, slot_size, d, off, len,
						 dst, &s_v[threadIdx.x], pmax, hhint);
			d.status = (int8_t)st;
			if (desc)
				desc[i] = d;
		}
		dfr_copy_group<8>(myslot, t.out, lane, off, len, dst);
	}
}

/* One thread copies a whole payload (the header pass's rare overflow case). */
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

/* len (16, 32 or 48) bytes from s to o, both 16-byte aligned: every load,
 * then every store. The loads are volatile so that they are made here: a
 * compiler keeping the prefix's words in registers instead, across the
 * header work, spilled at dfr_tiny80_pass's 40 registers and lost a third
 * (cuda/DESIGN.md). */
__device__ __forceinline__ static void store_own(uint8_t *o, const uint8_t *s, uint32_t len)
{
	uint4 v[3];
#pragma unroll
	for (uint32_t k = 0; k < 3; k++)
		if (16u * k < len)
			asm volatile("ld.global.v4.u32 {%0,%1,%2,%3}, [%4];"
				     : "=r"(v[k].x), "=r"(v[k].y), "=r"(v[k].z), "=r"(v[k].w)
				     : "l"(s + 16u * k));
#pragma unroll
	for (uint32_t k = 0; k < 3; k++)
		if (16u * k < len)
			((uint4 *)o)[k] = v[k];
}

/* v11, pass 1: one thread per packet runs the header stage on the fast path
 * and writes its work-list entry {dst lo, dst hi, source offset in the slot,
 * length (0: nothing to copy)}. stride is the copy pass's windows per packet,
 * from the host's hint (the longest payload it knows of, hint bytes; 0: the
 * slot geometry's bound, which every packet fits). A payload wider than that
 * (a new, longer stream) is copied here by its header thread and left out of
 * the work list; every block that saw a payload longer than the hint raises
 * the device-side maximum *pmax and writes the result to the host's hint word
 * (*hhint, mapped host memory), so the next launch's stride covers it. The
 * copy pass never depends on the hint being right, only its width does. */
/* The header pass's body: FR false for ring slots (dfr_hdr_pass), true for
 * a frame ring (dfr_frm_hdr_pass: slots is the region, slot_size 0, frame i
 * described by frames[i]; the work list's source offset is then from the
 * region's start, so the copy pass runs unchanged with slot_size 0). */
template <bool FR, bool SELF = false, bool WIDE = false>
__device__ __forceinline__ static void hdr_pass_body(const struct pdma_dfr_config &c, const struct pdma_dfr_tables &t,
						     const uint8_t *__restrict__ slots, uint32_t slot_size, uint32_t n,
						     struct pdma_dfr_desc *desc, uint4 *wl, uint32_t stride, uint32_t hint,
						     uint32_t *pmax, uint32_t *hhint, const struct pdma_frame *frames,
						     const struct pdma_frm_cfg &fc)
{
	__shared__ unsigned long long s_keys[DFR_CACHE];
	__shared__ uint32_t s_plen[DFR_CACHE];
	__shared__ unsigned long long s_cls[DFR_CACHE];
	__shared__ uint32_t s_red;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	/* The copy pass (launched with programmatic stream serialization) may
	 * start its blocks once every block here has begun; they wait in
	 * griddepcontrol.wait for this grid's completion and its writes. */
	asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
	const uint32_t lane = threadIdx.x & 31;
	const uint32_t ncache = c.max_streams < DFR_CACHE ? c.max_streams : DFR_CACHE;
	const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
	/* The slot's prefix (a frame's descriptor) is loaded before the stream
	 * table, so the two round trips overlap. pre is always a valid object,
	 * never a pointer chosen at run time (that kept it in local memory: a
	 * store and a reload per field on the critical path); len 0, where
	 * there is no prefix, makes the fast path decline. */
	struct pdma_dfr_pre pre;
	struct pdma_frame fr = {};
	pre.len = 0;
	if constexpr (FR) {
		if (i < n)
			fr = frames[i];
	} else if constexpr (WIDE) {
		/* The whole 80-byte slot: the header and a tiny slot's
		 * trailer. */
		if (i < n && slot_size >= PDMA_SLOT_TINY_MAX && !((uintptr_t)(slots + (size_t)i * slot_size) & 15))
			pdma_dfr_prefix(slots + (size_t)i * slot_size, slot_size, 1, &pre);
	} else {
		/* The prefix reads the slot's first 64 bytes (any layout). */
		if (i < n && slot_size >= 64u && !((uintptr_t)(slots + (size_t)i * slot_size) & 15))
			pdma_dfr_prefix(slots + (size_t)i * slot_size, slot_size, 0, &pre);
	}
	for (uint32_t k = threadIdx.x; k < ncache; k += blockDim.x) {
		s_keys[k] = *(volatile unsigned long long *)&t.keys[k];
		s_plen[k] = *(volatile uint32_t *)&t.plen[k];
		s_cls[k] = *(volatile unsigned long long *)&t.cls[k];
	}
	if (threadIdx.x == 0)
		s_red = 0;
	__syncthreads();
	uint32_t off = 0, len = 0;
	unsigned long long dst = 0;
	if (i < n) {
		const uint8_t *src = FR ? slots : slots + (size_t)i * slot_size;
		struct pdma_dfr_desc d;
		int st;
		if constexpr (FR)
			st = dfr_frame_lane(c, fc, t, s_keys, s_plen, s_cls, ncache, slots, fr, d, off, len, dst, pmax,
					    hhint);
		else
			st = dfr_lane<true>(c, t, s_keys, s_plen, s_cls, ncache, src, slot_size, d, off, len, dst,
					    nullptr, pmax, hhint, &pre);
		d.status = (int8_t)st;
		if (desc)
			desc[i] = d;
		if constexpr (!SELF) {
			uint32_t wlen = len;
			if (len && windows16((uintptr_t)(t.out + dst), len) > stride) {
				copy_serial(t.out + dst, src + off, len);
				wlen = 0;
			}
			wl[i] = make_uint4((uint32_t)dst, (uint32_t)(dst >> 32), wlen ? off : 0, wlen);
		}
	}
	if constexpr (SELF && WIDE) {
		/* dfr_tiny80_pass: a payload of one to three 16-byte words,
		 * aligned at both ends (a 64-byte packet's 32 bytes), is stored
		 * by its own thread from the lines the prefix just brought in;
		 * the warp copies the rest. */
		const uint8_t *sp = slots + (size_t)(i < n ? i : 0) * slot_size + off;
		uint8_t *o = t.out + dst;
		const bool own = len && len <= 48u && !(((uintptr_t)o | (uintptr_t)sp | len) & 15);
		if (own)
			store_own(o, sp, len);
		if (__any_sync(0xffffffffu, len && !own)) /* uniform: the copy is the warp's */
			dfr_copy_group<DFR_SMALL_R, true>(slots + (size_t)(i < n ? i : 0) * slot_size, t.out, lane,
							  off, own ? 0u : len, dst);
	} else if constexpr (SELF) {
		/* v16: the warp copies its 32 packets' payloads itself, as one
		 * flattened list (every lane takes part; len 0 past n). */
		dfr_copy_group<DFR_SMALL_R, true>(slots + (size_t)(i < n ? i : 0) * slot_size, t.out, lane, off, len, dst);
	}
	const uint32_t nw = __reduce_max_sync(0xffffffffu, len > hint ? len : 0u);
	if (lane == 0 && nw)
		atomicMax(&s_red, nw);
	__syncthreads();
	if (threadIdx.x == 0 && s_red) {
		const uint32_t old = atomicMax(pmax, s_red);
		*(volatile uint32_t *)hhint = old > s_red ? old : s_red;
	}
}

__global__ void __launch_bounds__(256)
	dfr_hdr_pass(struct pdma_dfr_config c, struct pdma_dfr_tables t, const uint8_t *__restrict__ slots,
		     uint32_t slot_size, uint32_t n, struct pdma_dfr_desc *desc, uint4 *wl, uint32_t stride,
		     uint32_t hint, uint32_t *pmax, uint32_t *hhint)
{
	const struct pdma_frm_cfg fc = {};
	hdr_pass_body<false>(c, t, slots, slot_size, n, desc, wl, stride, hint, pmax, hhint, nullptr, fc);
}

/* v16, one pass for small payloads: v11's header pass (fast path, one
 * thread per packet, a full grid), then each warp copies its 32 payloads
 * (warp_copy.cuh). No work list is written and read back and there is no
 * second launch: at 64-256-byte packets those are a third to a sixth of
 * the bytes v11 moves besides the packets (DESIGN.md). */
__global__ void __launch_bounds__(256)
	dfr_small_pass(struct pdma_dfr_config c, struct pdma_dfr_tables t, const uint8_t *__restrict__ slots,
		       uint32_t slot_size, uint32_t n, struct pdma_dfr_desc *desc, uint32_t hint, uint32_t *pmax,
		       uint32_t *hhint)
{
	const struct pdma_frm_cfg fc = {};
	hdr_pass_body<false, true>(c, t, slots, slot_size, n, desc, nullptr, 0, hint, pmax, hhint, nullptr, fc);
}

/* v16 for payloads of at most DFR_TINY_MAX bytes: the same code held to 40
 * registers, so 6 blocks of 256 fit an SM instead of 5. Each thread's chain
 * (prefix load, tag atomic, copy) is then hidden behind 20% more warps;
 * 64-byte packets gain 9-10% on the H200, 128-byte ones lose up to 5%
 * (their copy rounds want the registers; DESIGN.md). */
__global__ void __launch_bounds__(256, DFR_TINY_MINB)
	dfr_tiny_pass(struct pdma_dfr_config c, struct pdma_dfr_tables t, const uint8_t *__restrict__ slots,
		      uint32_t slot_size, uint32_t n, struct pdma_dfr_desc *desc, uint32_t hint, uint32_t *pmax,
		      uint32_t *hhint)
{
	const struct pdma_frm_cfg fc = {};
	hdr_pass_body<false, true>(c, t, slots, slot_size, n, desc, nullptr, 0, hint, pmax, hhint, nullptr, fc);
}

/* dfr_tiny_pass for 80-byte slots: the prefix loads the whole slot, so a
 * tiny slot's trailer (deframe.h: no tail copy) costs no second, dependent
 * read, and a payload aligned for 16-byte stores (a 64-byte packet's 32
 * bytes) is stored by its own thread, not the warp copy (3-4% at 64 B). A
 * separate instance because the fifth load and its registers cost 2-14%
 * where the slot is larger (64-96-byte packets in packed slots, H200;
 * cuda/DESIGN.md). */
__global__ void __launch_bounds__(256, DFR_TINY_MINB)
	dfr_tiny80_pass(struct pdma_dfr_config c, struct pdma_dfr_tables t, const uint8_t *__restrict__ slots,
			uint32_t slot_size, uint32_t n, struct pdma_dfr_desc *desc, uint32_t hint, uint32_t *pmax,
			uint32_t *hhint)
{
	const struct pdma_frm_cfg fc = {};
	hdr_pass_body<false, true, true>(c, t, slots, slot_size, n, desc, nullptr, 0, hint, pmax, hhint, nullptr,
					 fc);
}

/* The header pass over a frame ring (region at base, frames[n]); then
 * dfr_copy_pass(base, 0, n, ...) copies as for slots. */
__global__ void __launch_bounds__(256)
	dfr_frm_hdr_pass(struct pdma_dfr_config c, struct pdma_dfr_tables t, struct pdma_frm_cfg fc,
			 const uint8_t *__restrict__ base, const struct pdma_frame *__restrict__ frames, uint32_t n,
			 struct pdma_dfr_desc *desc, uint4 *wl, uint32_t stride, uint32_t hint, uint32_t *pmax,
			 uint32_t *hhint)
{
	hdr_pass_body<true>(c, t, base, 0, n, desc, wl, stride, hint, pmax, hhint, frames, fc);
}

/* 16 bytes starting m (1..15) bytes into lo, continuing into hi. */
__device__ __forceinline__ static uint4 shift16(uint4 lo, uint4 hi, uint32_t m)
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

/* A copy window's store state between its loads and its store: [lo, hi)
 * bytes stored, source misalignment m, 4-byte stores allowed (w4). */
struct win {
	uint32_t lo, hi, m;
	bool w4;
};

/* v11, pass 2: unit k of the grid is window k % stride of packet k / stride
 * (stride from the host: see dfr_hdr_pass); block b owns units
 * [b * 256 * U, (b + 1) * 256 * U), thread t units t, t + 256, ... (coalesced
 * like a copy kernel), consecutive threads copying consecutive 16-byte
 * windows of the output. Per thread: the U work-list entries are loaded
 * first, then every payload load (one aligned 16-byte load, two funnel-shifted
 * when the source is not 16-byte aligned; a block is loaded only when it
 * holds a byte the window stores), then every store (one aligned 16-byte
 * store for a full window, 4-byte or byte stores for the partial first and
 * last windows). The source address is the packet's slot (index * slot size)
 * plus the work list's payload offset. U 2 at 6 blocks per SM: DESIGN.md. */
__global__ void __launch_bounds__(256, DFR_COPY_MINB)
	dfr_copy_pass(const uint8_t *__restrict__ slots, uint32_t slot_size, uint32_t n, uint32_t stride,
		      uint8_t *out, const uint4 *__restrict__ wl)
{
	constexpr int U = DFR_COPY_U;
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
		e[q] = k < total ? __ldg(&wl[p[q]]) : make_uint4(0, 0, 0, 0);
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
