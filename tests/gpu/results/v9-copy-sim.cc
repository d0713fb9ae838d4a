// Host simulation of dfr_v9_copy's index arithmetic (ASan).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <random>
struct uint4 { uint32_t x, y, z, w; };
static uint4 mk(uint32_t a, uint32_t b, uint32_t c, uint32_t d) { return {a, b, c, d}; }
static uint32_t fsr(uint32_t lo, uint32_t hi, uint32_t sh) { return sh ? (uint32_t)((((uint64_t)hi << 32) | lo) >> sh) : lo; }
static uint4 shift16(uint4 lo, uint4 hi, uint32_t m)
{
	uint32_t w0 = lo.x, w1 = lo.y, w2 = lo.z, w3 = lo.w, w4 = hi.x, w5 = hi.y, w6 = hi.z, w7 = hi.w;
	if (m & 8) { w0 = w2; w1 = w3; w2 = w4; w3 = w5; w4 = w6; w5 = w7; }
	if (m & 4) { w0 = w1; w1 = w2; w2 = w3; w3 = w4; w4 = w5; }
	const uint32_t sh = 8 * (m & 3);
	return mk(fsr(w0, w1, sh), fsr(w1, w2, sh), fsr(w2, w3, sh), fsr(w3, w4, sh));
}
static uint4 ld(uintptr_t p) { uint4 r; memcpy(&r, (void *)p, 16); if (p & 15) abort(); return r; }
template <int U>
static void thread(uint32_t bx, uint32_t tx, const uint8_t *slots, uint32_t slot_size, uint32_t n, uint32_t stride,
		   uint8_t *out, const uint4 *wl)
{
	const uint32_t total = n * stride;
	const uint32_t base = bx * (256u * U) + tx;
	uint4 e[U]; uint32_t p[U], u[U];
	for (int q = 0; q < U; q++) {
		const uint32_t k = base + 256u * q;
		p[q] = k / stride; u[q] = k - p[q] * stride;
		e[q] = k < total ? wl[1 + p[q]] : mk(0, 0, 0, 0);
	}
	uint4 l0[U], l1[U]; uintptr_t aw[U]; uint32_t m[U], lo[U], hi[U], w4[U];
	for (int q = 0; q < U; q++) {
		const uint32_t len = e[q].w;
		const uintptr_t a = (uintptr_t)(out + (((unsigned long long)e[q].y << 32) | e[q].x));
		const uintptr_t s = (uintptr_t)(slots + (size_t)p[q] * slot_size + e[q].z);
		const uint32_t nw = (uint32_t)(((a + len + 15) >> 4) - (a >> 4));
		l0[q] = mk(0, 0, 0, 0); l1[q] = l0[q];
		aw[q] = (a & ~(uintptr_t)15) + 16u * u[q];
		lo[q] = hi[q] = 0; m[q] = 0;
		w4[q] = ((a | len) & 3) == 0;
		if (len && u[q] < nw) {
			lo[q] = aw[q] >= a ? 0 : (uint32_t)(a - aw[q]);
			hi[q] = aw[q] + 16 <= a + len ? 16 : (uint32_t)(a + len - aw[q]);
			const uintptr_t ss = s + aw[q] - a;
			m[q] = (uint32_t)ss & 15;
			const uintptr_t b0 = ss - m[q];
			if (m[q] + lo[q] < 16) l0[q] = ld(b0);
			if (m[q] + hi[q] > 16) l1[q] = ld(b0 + 16);
		}
	}
	for (int q = 0; q < U; q++) {
		if (hi[q] == 0) continue;
		const uint4 r = m[q] ? shift16(l0[q], l1[q], m[q]) : l0[q];
		const uint32_t wd[4] = { r.x, r.y, r.z, r.w };
		if (lo[q] == 0 && hi[q] == 16) { if (aw[q] & 15) abort(); memcpy((void *)aw[q], &r, 16); }
		else if (w4[q]) { for (uint32_t j = 0; j < 4; j++) if (4 * j >= lo[q] && 4 * j < hi[q]) memcpy((uint8_t *)aw[q] + 4 * j, &wd[j], 4); }
		else { for (uint32_t j = 0; j < 16; j++) if (j >= lo[q] && j < hi[q]) ((uint8_t *)aw[q])[j] = (uint8_t)(wd[j >> 2] >> (8 * (j & 3))); }
	}
}
int main()
{
	std::mt19937 rng(7);
	long checked = 0;
	for (int trial = 0; trial < 400; trial++) {
		const uint32_t slot_size = 16 * (4 + rng() % 200), n = 1 + rng() % 300;
		const uint32_t maxpl = slot_size - 36 - 4;
		const int mode = trial % 4; // 0 aligned uniform, 1 1500-like uniform, 2 random, 3 some len 0
		const uint32_t L = 1 + rng() % maxpl;
		const uint32_t stride = (maxpl + 15) / 16 + 1;
		std::vector<uint8_t> slots(n * slot_size);
		for (auto &b : slots) b = rng();
		size_t osz = (size_t)n * (maxpl + 16) + 64;
		uint8_t *outa = (uint8_t *)aligned_alloc(16, (osz + 15) & ~15ul);
		std::vector<uint8_t> ref(osz, 0xAB);
		memset(outa, 0xAB, osz);
		std::vector<uint4> wl(n + 1);
		size_t pos = 0;
		for (uint32_t i = 0; i < n; i++) {
			uint32_t len, off;
			if (mode == 0) { len = L & ~15u; off = 36 + 28; if (off + len > slot_size) len = 0; len = len ? len : 0; }
			else if (mode == 1) { len = L; off = 36 + 28; if (off + len > slot_size) len = slot_size - off; }
			else { off = 40 + rng() % (maxpl); len = rng() % (slot_size - off + 1); if (mode == 3 && rng() % 3 == 0) len = 0; }
			if (pos + len > osz) len = 0;
			wl[1 + i] = mk((uint32_t)pos, 0, off, len);
			memcpy(&ref[pos], &slots[(size_t)i * slot_size + off], len);
			pos += len + (mode == 2 ? rng() % 5 : 0);
		}
		// out-of-slot reads: ASan needs an exact allocation for the ring
		uint8_t *ring = (uint8_t *)aligned_alloc(16, slots.size());
		memcpy(ring, slots.data(), slots.size());
		const uint64_t thr = (uint64_t)n * stride;
		auto runU = [&](auto U) {
			constexpr int u = decltype(U)::value;
			memset(outa, 0xAB, osz);
			uint32_t blocks = (uint32_t)((thr + 256ull * u - 1) / (256ull * u));
			for (uint32_t b = 0; b < blocks; b++)
				for (uint32_t t = 0; t < 256; t++) thread<u>(b, t, ring, slot_size, n, stride, outa, wl.data());
			if (memcmp(outa, ref.data(), osz)) { printf("MISMATCH trial %d U=%d mode %d\n", trial, u, mode); exit(1); }
		};
		runU(std::integral_constant<int, 4>());
		runU(std::integral_constant<int, 8>());
		checked += n;
		free(ring); free(outa);
	}
	printf("v9 copy sim OK: %ld packets, U=4 and U=8\n", checked);
}
