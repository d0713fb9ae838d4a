// SPDX-License-Identifier: MIT
/*
 * The one-pass kernels' warp copy (v7s, and v16 after its header pass),
 * shared with the benchmark module's skeleton kernel
 * (bench/ingest/gpu_bench.cu), which runs this copy without the deframing to
 * measure what the copy alone costs.
 *
 * The warp copies the payloads of its group of packets as one flattened list
 * of units (16 bytes when every payload of the group and its destination are
 * 16-byte aligned, else 4-byte words): each round every lane loads R units
 * (from whichever packets they fall in) before storing any, so several
 * packets' bytes are in flight per warp at once; the memory system, not the
 * per-packet latency, then sets the pace. Lane j owns packet j: its source
 * offset in its slot (off), byte count (len, 0: nothing to copy) and output
 * offset (dst).
 */
#ifndef PDMA_INGEST_CUDA_WARP_COPY_CUH
#define PDMA_INGEST_CUDA_WARP_COPY_CUH

#include <stdint.h>

#define DFR_BSEARCH_UNITS 16 /* average units per packet below which the search is binary */

/* The rounds of the copy: each lane finds its unit's packet (the last one
 * starting at or before the unit) by BS, a binary search over the lanes'
 * start offsets (5 shuffles a unit), or else by walking forward from the
 * last one (a round of shuffle and vote per packet boundary crossed: 0-1 a
 * unit for long payloads, up to 16 for 2-unit ones). One instance each, so
 * that the choice is made once per group, not per unit. */
template <typename U, int R, bool BS>
__device__ static void dfr_copy_rounds(uint8_t *out, uint32_t lane, uint32_t excl, uint32_t total,
				       unsigned long long srcb, unsigned long long dst)
{
	uint32_t j = 0; /* packet of this lane's current unit */
	for (uint32_t x0 = 0; x0 < total; x0 += 32u * R) {
		U r[R];
		uint32_t jk[R];
#pragma unroll
		for (int q = 0; q < R; q++) {
			uint32_t x = x0 + lane + 32u * q;
			if constexpr (BS) {
				j = 0;
#pragma unroll
				for (uint32_t st = 16; st; st >>= 1)
					if (__shfl_sync(0xffffffffu, excl, j + st) <= x)
						j += st;
			} else {
				for (;;) {
					uint32_t e = __shfl_sync(0xffffffffu, excl, (j + 1) & 31);
					uint32_t step = j < 31 && e <= x;
					if (!__any_sync(0xffffffffu, step))
						break;
					j += step;
				}
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

/* Lane j's packet has cnt units: the warp's prefix sum of the counts, then
 * the rounds. With SEARCH (v16), by binary search while the packets average
 * fewer than DFR_BSEARCH_UNITS units, where the walk's boundary crossings
 * cost more than 5 shuffles (64-byte packets deframed 12-19% faster on the
 * H200, DESIGN.md). v7s walks only: with both, its 8 units in flight spill
 * at its 80 registers. */
template <typename U, int R, bool SEARCH>
__device__ static void dfr_copy_units(const uint8_t *myslot, uint8_t *out, uint32_t lane, uint32_t off,
				      uint32_t cnt, unsigned long long dst)
{
	uint32_t incl = cnt;
#pragma unroll
	for (int d = 1; d < 32; d <<= 1) {
		uint32_t v = __shfl_up_sync(0xffffffffu, incl, d);
		if (lane >= (uint32_t)d)
			incl += v;
	}
	const uint32_t total = __shfl_sync(0xffffffffu, incl, 31);
	const unsigned long long srcb = (unsigned long long)(uintptr_t)(myslot + off);

	if (SEARCH && total < 32u * DFR_BSEARCH_UNITS)
		dfr_copy_rounds<U, R, true>(out, lane, incl - cnt, total, srcb, dst);
	else
		dfr_copy_rounds<U, R, false>(out, lane, incl - cnt, total, srcb, dst);
}

/* Copy mode per group: 16-byte units when every payload and destination is
 * 16-byte aligned, else 4-byte units (1500-byte packets: 1468-byte payloads
 * at 1468-byte spacing, destinations only 4-byte aligned; the two-pass copy
 * handles those at full width). */
template <int R, bool SEARCH = false>
__device__ static void dfr_copy_group(const uint8_t *myslot, uint8_t *out, uint32_t lane, uint32_t off,
				      uint32_t len, unsigned long long dst)
{
	const uintptr_t src = (uintptr_t)(myslot + off);
	bool aligned = (((src | (uintptr_t)(out + dst) | len) & 15) == 0);
	if (__all_sync(0xffffffffu, len == 0 || aligned)) {
		dfr_copy_units<uint4, R, SEARCH>(myslot, out, lane, off, len / 16, dst);
		return;
	}
	dfr_copy_units<uint32_t, R, SEARCH>(myslot, out, lane, off, len / 4, dst);
}

#endif /* PDMA_INGEST_CUDA_WARP_COPY_CUH */
