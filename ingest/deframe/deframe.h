/* SPDX-License-Identifier: MIT */
/*
 * The deframer's per-packet core, shared verbatim by the CPU deframer
 * (deframe_cpu.c) and the GPU deframer (cuda/kernels.cu), so the two cannot
 * drift apart: same validation, same stream table, same placement rule. Only
 * the payload copy and the loop around it differ.
 *
 * Input: a ring of fixed-size slots; each slot starts with a header
 * (struct pdma_slot_hdr: datagram length, flags, a copy of the datagram's
 * last word) and holds one received datagram at byte PDMA_SLOT_HDR (36), in
 * a packed slot at byte PDMA_SLOT_HDR_PACKED (20), in a tiny one (len and
 * flags only) at byte PDMA_SLOT_HDR_TINY (4): with the DIFI prologue (28
 * bytes) the payload then starts 64- (16-) byte aligned, so the GPU copies
 * it with aligned, fully coalesced 16-byte accesses.
 *
 * Output, per stream: a contiguous circular sample buffer of out_pkts packets
 * (packet p of the stream, p = sample count / samples per packet, lands at
 * byte (p mod out_pkts) * payload_len) and one tag per packet position holding
 * p + 1 of the packet stored there (0: never written). A tag other than the
 * expected p + 1 flags a gap. A packet is written only if it is newer than what
 * its position holds, so duplicates and stale packets never overwrite data and
 * the result does not depend on processing order, as long as the packets of
 * one batch of one stream span fewer than out_pkts positions (the GPU processes
 * a batch in parallel; the CPU in order).
 *
 * Per packet the core also emits a descriptor (struct pdma_dfr_desc); the
 * exact accounting (lost / duplicated / reordered, on the CPU in every mode)
 * runs over descriptors in arrival order.
 *
 * Stream table: up to max_streams stream IDs, claimed on first sight, never
 * removed. Keys are (1 << 32) | stream ID so 0 means free; a lookup scans from
 * entry 0 and claims the first free entry with compare-and-swap, which is
 * correct under concurrency because entries are only ever added in order.
 *
 * Thread safety: the CPU functions are single-threaded per deframer; the GPU
 * uses the atomic variants.
 */
#ifndef PDMA_INGEST_DEFRAME_H
#define PDMA_INGEST_DEFRAME_H

#include <string.h>

#include "peerdma/vrt.h"
/* frame.h also defines PDMA_DFR_FN (host and device inline), for what follows */
#include "frame.h"

#define PDMA_SLOT_HDR 36u       /* datagram offset in a full slot (header struct + pad) */
#define PDMA_SLOT_HDR_PACKED 20u /* datagram offset in a packed slot (the same header, 4 bytes of pad) */
#define PDMA_SLOT_HDR_TINY 4u    /* datagram offset in a tiny slot (len and flags only) */

/*
 * Three slot layouts, told apart by each slot's own flags word, so a deframer
 * needs nothing but the slot:
 * - full: this struct, the datagram at PDMA_SLOT_HDR (36): the payload
 *   after the 28-byte DIFI prologue starts 64-byte aligned, slots are
 *   multiples of 64 bytes. The tail copy saves the GPU a second, dependent
 *   read per packet where the trailer lies past the slot's first 64 bytes.
 * - packed (PDMA_SLOT_PACKED): the same struct, the datagram at
 *   PDMA_SLOT_HDR_PACKED (20): the payload 16-byte aligned (what the GPU's
 *   copies need) in slots rounded to 16 bytes. For rings sized to small
 *   datagrams: a 64-byte datagram takes a 96-byte slot where the full layout
 *   takes 128 (36 + 64, rounded to 64), a 256-byte one 288 for 320. (A
 *   4-byte header, datagram at byte 4, was measured first for every size:
 *   fewer bytes, but without room for the tail copy the trailer's dependent
 *   read made it slower from 128-byte packets on; cuda/DESIGN.md.)
 * - tiny (PDMA_SLOT_TINY): len and flags, the datagram at
 *   PDMA_SLOT_HDR_TINY (4), in slots of exactly PDMA_SLOT_TINY_MAX (80)
 *   bytes: datagrams of up to 76 bytes, a 64-byte one in 80 bytes where
 *   packed takes 96. No tail copy and no rx_seq; the GPU instance for
 *   80-byte slots loads the whole slot, trailer included, in its one round
 *   trip, which is what the 4-byte header lacked at larger sizes.
 * len is 16 bits: a UDP datagram's length is; larger slots hold what a
 * datagram can be (pdma_slot_finish marks anything longer truncated).
 */
struct pdma_slot_hdr {
	uint16_t len;      /* datagram bytes in the slot (0: empty / dropped) */
	uint16_t flags;    /* PDMA_SLOT_* */
	uint32_t rx_seq;   /* arrival sequence of the receive thread, mod 2^32 (diagnostics) */
	uint32_t resv;
	uint32_t tail;     /* PDMA_SLOT_TAIL: the datagram's last 4 bytes, as received */
};
#define PDMA_SLOT_TRUNC 1u /* the datagram was larger than the slot */
/* tail holds the datagram's last 4 bytes (a VRT packet's trailer, when it
 * has one). A producer sets it when the datagram has just landed and its end
 * is in the CPU's cache anyway; a deframer that reads only the slot's first
 * 64 bytes (the GPU's header pass) then checks the trailer without a second
 * scattered DRAM (or, from a mapped host ring, PCIe) read per packet. It is
 * the producer's promise that tail equals those bytes: the GPU's fast path
 * trusts it, the CPU deframer reads the bytes, and they agree exactly when
 * the promise holds. A producer that cannot keep it (a NIC writing slots
 * itself) leaves the flag clear, and the trailer is read from the datagram. */
#define PDMA_SLOT_TAIL 2u
#define PDMA_SLOT_PACKED 4u /* packed layout: the datagram at PDMA_SLOT_HDR_PACKED */
/* Tiny layout: only len and flags, the datagram at PDMA_SLOT_HDR_TINY, in
 * slots of at most PDMA_SLOT_TINY_MAX bytes. There is no room for rx_seq or
 * the tail copy, and none is needed: the GPU pass that runs on such small
 * packets loads the whole slot at once, trailer included (cuda/DESIGN.md). */
#define PDMA_SLOT_TINY 8u
#define PDMA_SLOT_TINY_MAX 80u

/* The datagram's offset in a slot whose flags word is flags (tiny wins
 * where a corrupt header claims both layouts). */
PDMA_DFR_FN uint32_t pdma_slot_off(uint32_t flags)
{
	return (flags & PDMA_SLOT_TINY) ? PDMA_SLOT_HDR_TINY
					: (flags & PDMA_SLOT_PACKED) ? PDMA_SLOT_HDR_PACKED : PDMA_SLOT_HDR;
}

/* A slot's datagram; *len its length where the slot holds that much, else 0
 * (a header claiming more than its slot: the deframer's SLOT_TRUNC). */
static inline const uint8_t *pdma_slot_dgram(const uint8_t *slot, uint32_t slot_size, uint32_t *len)
{
	const struct pdma_slot_hdr *h = (const struct pdma_slot_hdr *)slot;
	const uint32_t off = pdma_slot_off(h->flags);

	*len = slot_size >= off && h->len <= slot_size - off ? h->len : 0;
	return slot + off;
}

/* The bytes at the start of each of n slots (slot_size apart) that a
 * deframer reads: the header and the datagram of the slot whose datagram ends
 * last, rounded up to 64 (the GPU's header pass loads a slot's first 64
 * bytes at once), at least 128; slot_size when that is not less. A host-
 * staged batch copies only these bytes of each slot, to slots of this size
 * on the device. The verdicts do not change with the smaller slots: a header
 * claiming more than its slot reads as truncated in both (pdma_slot_dgram),
 * and every other datagram ends within the span. Reads each slot's header:
 * call it where those are about to be read anyway. */
static inline uint32_t pdma_slots_span(const uint8_t *slots, uint32_t slot_size, uint32_t n)
{
	uint32_t end = 128;

	for (uint32_t i = 0; i < n && end < slot_size; i++) {
		const uint8_t *s = slots + (size_t)i * slot_size;
		uint32_t len;
		const uint32_t e = (uint32_t)(pdma_slot_dgram(s, slot_size, &len) - s) + len;

		if (e > end)
			end = e;
	}
	end = (end + 63u) & ~63u;
	return end < slot_size ? end : slot_size;
}

/* Fill slot's header once its datagram (len bytes at off, the ring's
 * PDMA_SLOT_HDR, PDMA_SLOT_HDR_PACKED or PDMA_SLOT_HDR_TINY, truncated when
 * trunc) has landed: every producer's one way to do it. A tiny slot's header
 * is len and flags alone: rx_seq is not kept. */
static inline void pdma_slot_finish(uint8_t *slot, uint32_t off, uint32_t len, int trunc, uint32_t rx_seq)
{
	struct pdma_slot_hdr *h = (struct pdma_slot_hdr *)slot;
	uint32_t fl = trunc || len > 0xffffu ? PDMA_SLOT_TRUNC : 0;

	if (len > 0xffffu)
		len = 0xffffu;
	h->len = (uint16_t)len;
	if (off == PDMA_SLOT_HDR_TINY) {
		h->flags = (uint16_t)(fl | PDMA_SLOT_TINY);
		return;
	}
	h->rx_seq = rx_seq;
	h->resv = 0;
	h->tail = 0;
	if (!fl && len >= 4) {
		memcpy(&h->tail, slot + off + len - 4, 4);
		fl |= PDMA_SLOT_TAIL;
	}
	h->flags = (uint16_t)(fl | (off == PDMA_SLOT_HDR_PACKED ? PDMA_SLOT_PACKED : 0));
}

/* Deframer errors beyond the parser's (descriptor status, negated). */
enum pdma_dfr_err {
	PDMA_DFR_E_NO_SID = 32,   /* data packet without stream ID */
	PDMA_DFR_E_NO_TS,         /* no sample-count (TSF = 1) timestamp */
	PDMA_DFR_E_FRAC_RANGE,    /* sample count >= sample rate */
	PDMA_DFR_E_MISALIGNED,    /* payload not whole samples / sample count not on a packet boundary */
	PDMA_DFR_E_SIZE_CHANGE,   /* payload length differs from the stream's first packet */
	PDMA_DFR_E_OVERSIZE,      /* payload longer than max_payload */
	PDMA_DFR_E_TABLE_FULL,    /* more streams than max_streams */
	PDMA_DFR_E_SLOT_TRUNC,    /* datagram did not fit its ring slot */
	PDMA_DFR_E_EMPTY,         /* empty datagram */
	PDMA_DFR_E_CLASS_CHANGE,  /* class ID differs from the stream's first data packet's */
	PDMA_DFR_E_FRAME,         /* frame ring: a frame skipped (reason in the count byte, frame.h) */
	PDMA_DFR_E__MAX
};

/* Descriptor status values >= 0. */
#define PDMA_DFR_ST_DATA 0     /* data packet, placed if newer than its position */
#define PDMA_DFR_ST_CONTEXT 1  /* context / extension context packet */
#define PDMA_DFR_ST_DATA_OLD 2 /* data packet not written: position holds it or newer */

#define PDMA_DFR_NO_STREAM 0xffffu

struct pdma_dfr_desc {
	uint64_t pkt;       /* packet index p within the stream (data) */
	uint32_t stream_id; /* valid when has_sid */
	uint16_t stream;    /* table index or PDMA_DFR_NO_STREAM */
	int8_t status;      /* PDMA_DFR_ST_* or -PDMA_VRT_E_* / -PDMA_DFR_E_* */
	uint8_t count;      /* bits 3-0 packet count, bit 4 has_sid */
};

struct pdma_dfr_config {
	uint32_t max_streams;      /* stream table entries (<= 65535) */
	uint32_t out_pkts;         /* per-stream output window, packets */
	uint32_t max_payload;      /* bytes; longer payloads are rejected */
	uint32_t bytes_per_sample; /* 4 for 16-bit I/Q */
	uint64_t sample_rate;      /* samples per second: integer second -> sample count */
};

/* A configuration both deframers accept (pdma_dfr_init, the GPU's open):
 * what the arithmetic below divides by is never 0. */
static inline int pdma_dfr_config_ok(const struct pdma_dfr_config *c)
{
	return c->max_streams && c->max_streams < PDMA_DFR_NO_STREAM && c->out_pkts && c->max_payload &&
	       c->bytes_per_sample && c->sample_rate && c->max_payload % c->bytes_per_sample == 0;
}

/* Device-visible state of one deframer (arrays sized by the config). The
 * same layout lives in host memory (CPU) or device memory (GPU). */
struct pdma_dfr_tables {
	uint64_t *keys;      /* [max_streams] (1 << 32) | stream ID, 0 free */
	uint32_t *plen;      /* [max_streams] payload bytes per packet, 0 unknown */
	uint64_t *cls;       /* [max_streams] pdma_dfr_class() of the first data packet, 0 unknown */
	uint64_t *tags;      /* [max_streams * out_pkts] */
	uint8_t *out;        /* [max_streams * out_pkts * max_payload] */
};

/* Result of the per-packet header stage. */
struct pdma_dfr_pkt {
	uint32_t payload_off; /* bytes into the datagram */
	uint32_t payload_len;
	uint64_t pkt;
	uint32_t stream;
	uint64_t cls;         /* pdma_dfr_class() */
};

/* A data packet's class identity, never 0 (0 marks a stream whose class is
 * not known yet): the OUI and the information and packet class codes, or
 * "none" for a packet without class ID. A stream is a stream ID and the class
 * its first data packet came with; a data packet of that stream ID with
 * another class (a second sender reusing the ID, a reconfigured one) is
 * refused (PDMA_DFR_E_CLASS_CHANGE) and counted, never merged into the
 * stream's samples. Context packets carry their own class (the generator's
 * and DIFI's context packet class code differs from the data's) and are not
 * compared. The 49.2 pad-bit count is not part of it. */
PDMA_DFR_FN uint64_t pdma_dfr_class(int has_class, uint32_t oui, uint32_t icc_pcc)
{
	return has_class ? (1ull << 63) | ((uint64_t)(oui & 0xffffffu) << 32) | icc_pcc : 1ull << 62;
}

/* The header stage of one datagram (dg, len bytes: a slot's or a frame's),
 * up to (not including) the stream lookup: validates and computes the packet
 * index. Returns PDMA_DFR_ST_DATA / _CONTEXT or a negative error; fills *d
 * (partially on error) and *r (payload_off relative to dg). *vp is the
 * parser's scratch (the parsed packet): a local variable in
 * pdma_dfr_header(); the GPU passes a per-thread slot in shared memory,
 * since the parser's context walk indexes vp->ctx_off[] at run time, which
 * would otherwise put the whole struct in local memory (a stack frame per
 * thread, written for every packet). */
PDMA_DFR_FN int pdma_dfr_dgram_v(const struct pdma_dfr_config *c, const uint8_t *dg, uint32_t len,
				 struct pdma_dfr_desc *d, struct pdma_dfr_pkt *r,
				 struct pdma_vrt_packet *vp)
{
	uint64_t s;
	int e;

	d->pkt = 0;
	d->stream_id = 0;
	d->stream = PDMA_DFR_NO_STREAM;
	d->count = 0;
	if (len == 0)
		return -PDMA_DFR_E_EMPTY;
	e = pdma_vrt_parse(dg, len, PDMA_VRT_EXACT, vp);
	d->stream_id = vp->stream_id;
	d->count = (uint8_t)(vp->count | (vp->has_stream_id ? 0x10 : 0));
	if (e < 0)
		return e;
	if (!vp->has_stream_id)
		return -PDMA_DFR_E_NO_SID;
	if (!pdma_vrt_is_data(vp->type))
		return PDMA_DFR_ST_CONTEXT;
	if (vp->tsf != PDMA_VRT_TSF_SAMPLES)
		return -PDMA_DFR_E_NO_TS;
	if (vp->ts_frac >= c->sample_rate)
		return -PDMA_DFR_E_FRAC_RANGE;
	if (vp->payload_len == 0 || vp->payload_len % c->bytes_per_sample)
		return -PDMA_DFR_E_MISALIGNED;
	if (vp->payload_len > c->max_payload)
		return -PDMA_DFR_E_OVERSIZE;
	/* Absolute sample count: integer seconds (any TSI epoch) times the rate
	 * plus samples into the second. Exact for the 4-bit count's blind spot:
	 * 64 bits of samples never wrap in practice. */
	s = (uint64_t)vp->ts_int * c->sample_rate + vp->ts_frac;
	{
		uint32_t spp = vp->payload_len / c->bytes_per_sample;
		if (s % spp)
			return -PDMA_DFR_E_MISALIGNED;
		r->pkt = s / spp;
	}
	r->payload_off = vp->payload_off;
	r->payload_len = vp->payload_len;
	r->cls = pdma_dfr_class(vp->flags & PDMA_VRT_F_CLASS, vp->oui,
				((uint32_t)vp->icc << 16) | vp->pcc);
	d->pkt = r->pkt;
	return PDMA_DFR_ST_DATA;
}

/* The header stage of a ring slot: its header's checks, then its datagram
 * (at pdma_slot_off(); r->payload_off relative to the datagram). */
PDMA_DFR_FN int pdma_dfr_header_v(const struct pdma_dfr_config *c, const uint8_t *slot,
				  uint32_t slot_size, struct pdma_dfr_desc *d,
				  struct pdma_dfr_pkt *r, struct pdma_vrt_packet *vp)
{
	const struct pdma_slot_hdr *sh = (const struct pdma_slot_hdr *)slot;
	const uint32_t len = sh->len, off = pdma_slot_off(sh->flags);

	if ((sh->flags & PDMA_SLOT_TRUNC) || slot_size < off || len > slot_size - off) {
		d->pkt = 0;
		d->stream_id = 0;
		d->stream = PDMA_DFR_NO_STREAM;
		d->count = 0;
		return -PDMA_DFR_E_SLOT_TRUNC;
	}
	return pdma_dfr_dgram_v(c, slot + off, len, d, r, vp);
}

PDMA_DFR_FN int pdma_dfr_header(const struct pdma_dfr_config *c, const uint8_t *slot,
				uint32_t slot_size, struct pdma_dfr_desc *d,
				struct pdma_dfr_pkt *r)
{
	struct pdma_vrt_packet v;
	return pdma_dfr_header_v(c, slot, slot_size, d, r, &v);
}

/*
 * Fast path of the header stage for the form nearly every packet has (a valid
 * DIFI-style data packet: type 1 or 3, class ID, integer timestamp, sample-
 * count fractional timestamp, optional trailer). The GPU reads the slot's
 * first 64 bytes with three independent 16-byte loads (one round trip, where
 * the general parser's loads depend on each other), then the trailer.
 *
 * pdma_dfr_header_v() stays the definition: the fast path returns 1 only for
 * packets it accepts, with *d and *r exactly as the general path fills them
 * (stream left at PDMA_DFR_NO_STREAM), and 0 for anything else (other forms,
 * every error), and the caller then runs the general path. The fuzz target
 * (tests/fuzz/fuzz_vrt.c) checks that agreement on arbitrary bytes.
 */
struct pdma_dfr_pre {
	uint32_t len, flags;       /* struct pdma_slot_hdr */
	uint32_t off;              /* pdma_slot_off(flags) */
	uint32_t tail;             /* its tail (host order; with PDMA_SLOT_TAIL in flags) */
	uint32_t h, sid, c0, c1;   /* VRT words 0-3 (host order) */
	uint32_t tsi, fhi, flo;    /* VRT words 4-6 */
};

/* Fill *p from a slot of at least 64 bytes (16-byte aligned on the GPU).
 * On the GPU, wide (a constant after inlining) with slot_size >= 80 loads the
 * slot's first 80 bytes: a tiny slot's trailer is then taken from them. */
PDMA_DFR_FN void pdma_dfr_prefix(const uint8_t *slot, uint32_t slot_size, int wide, struct pdma_dfr_pre *p)
{
#if defined(__CUDA_ARCH__)
	/* Every 16-byte word, independent of the layout (one round trip:
	 * the layout is known only from the first), then a select per field. */
	const uint4 a = ((const uint4 *)slot)[0], q = ((const uint4 *)slot)[1];
	const uint4 b = ((const uint4 *)slot)[2], e = ((const uint4 *)slot)[3];
	const bool w = wide && slot_size >= PDMA_SLOT_TINY_MAX;
	const uint4 f = w ? ((const uint4 *)slot)[4] : make_uint4(0, 0, 0, 0);
	const uint32_t fl = a.x >> 16;
	const bool tn = fl & PDMA_SLOT_TINY, pk = !tn && (fl & PDMA_SLOT_PACKED);
	p->len = a.x & 0xffffu;
	p->flags = fl;
	p->off = pdma_slot_off(fl);
	p->tail = __byte_perm(a.w, 0, 0x0123);
	/* The datagram starts at byte 4 (word 1 of a) tiny, byte 20 (word 1
	 * of q) packed, byte 36 (word 1 of b) full: the same words one and
	 * two 16-byte loads later. */
	p->h = __byte_perm(tn ? a.y : pk ? q.y : b.y, 0, 0x0123);
	p->sid = __byte_perm(tn ? a.z : pk ? q.z : b.z, 0, 0x0123);
	p->c0 = __byte_perm(tn ? a.w : pk ? q.w : b.w, 0, 0x0123);
	p->c1 = __byte_perm(tn ? q.x : pk ? b.x : e.x, 0, 0x0123);
	p->tsi = __byte_perm(tn ? q.y : pk ? b.y : e.y, 0, 0x0123);
	p->fhi = __byte_perm(tn ? q.z : pk ? b.z : e.z, 0, 0x0123);
	p->flo = __byte_perm(tn ? q.w : pk ? b.w : e.w, 0, 0x0123);
	if (w && tn && !(fl & PDMA_SLOT_TAIL)) {
		/* A datagram of 64-76 bytes (the tiny slots' reason to be)
		 * ends in the fifth load: its last word, at slot byte len (4 +
		 * len - 4), is word len / 4 - 16 of f when len is a multiple
		 * of 4 (the only packets the fast path takes). Shorter ones
		 * read it as other slots without the copy do: selecting from
		 * all 20 words cost the 40-register instance a spill. */
		const uint32_t k = p->len >> 2;
		if (!(p->len & 3u) && k >= 16u && k < 20u) {
			const uint32_t t = (k & 2u) ? ((k & 1u) ? f.w : f.z) : ((k & 1u) ? f.y : f.x);
			p->tail = __byte_perm(t, 0, 0x0123);
			p->flags = fl | PDMA_SLOT_TAIL;
		}
	}
#else
	const struct pdma_slot_hdr *sh = (const struct pdma_slot_hdr *)slot;
	const uint8_t *b;
	(void)slot_size;
	(void)wide;
	p->len = sh->len;
	p->flags = sh->flags;
	p->off = pdma_slot_off(sh->flags);
	b = slot + p->off;
	/* A tiny slot has no tail copy: the fast path reads the trailer
	 * (PDMA_SLOT_TAIL is never set on one, pdma_slot_finish). */
	p->tail = p->off == PDMA_SLOT_HDR_TINY ? 0 : pdma_vrt_get32((const uint8_t *)&sh->tail);
	p->h = pdma_vrt_get32(b);
	p->sid = pdma_vrt_get32(b + 4);
	p->c0 = pdma_vrt_get32(b + 8);
	p->c1 = pdma_vrt_get32(b + 12);
	p->tsi = pdma_vrt_get32(b + 16);
	p->fhi = pdma_vrt_get32(b + 20);
	p->flo = pdma_vrt_get32(b + 24);
#endif
}

/* Trailing zero bits of x != 0. */
PDMA_DFR_FN uint32_t pdma_dfr_ctz32(uint32_t x)
{
#if defined(__CUDA_ARCH__)
	return (uint32_t)__ffs((int)x) - 1u;
#else
	return (uint32_t)__builtin_ctz(x);
#endif
}

/* x / d (and x % d in *rem) for x < 2^53, d >= 1, exactly: the correctly
 * rounded double quotient is within one of the true one (x and d are exact
 * doubles), and integer arithmetic corrects it. A GPU emulates 64-bit integer
 * division with a long dependent sequence; on the header pass's critical path,
 * once per packet, that showed as instruction issue, not memory, bounding
 * it. This is a double division, two conversions and a correction. */
PDMA_DFR_FN uint64_t pdma_dfr_divmod53(uint64_t x, uint32_t d, uint32_t *rem)
{
	uint64_t q = (uint64_t)((double)x / (double)d);
	int64_t r = (int64_t)(x - q * d);

	if (r < 0) {
		q--;
		r += d;
	} else if (r >= (int64_t)d) {
		q++;
		r -= d;
	}
	*rem = (uint32_t)r;
	return q;
}

/* The fast path without the trailer: everything pdma_dfr_header_fast()
 * checks but the trailer word's content, from the prefix alone. Returns 1 and
 * fills *d, *r as the fast path does, with *tr_off the trailer's byte offset
 * in the slot (0: the packet has none); the packet is the fast path's (and
 * the general path's) only if that trailer passes pdma_vrt_trailer_ok(). */
PDMA_DFR_FN int pdma_dfr_header_fast_nt(const struct pdma_dfr_config *c, uint32_t slot_size,
					const struct pdma_dfr_pre *p, struct pdma_dfr_desc *d,
					struct pdma_dfr_pkt *r, uint32_t *tr_off)
{
	const uint32_t h = p->h, type = h >> 28, words = h & 0xffffu, tr = (h >> 26) & 1u;
	uint32_t plen, spp;
	uint64_t frac;

	if (slot_size < p->off + 64u || (p->flags & PDMA_SLOT_TRUNC) || p->len == 0 ||
	    p->len > slot_size - p->off)
		return 0;
	/* Data with stream ID; C set, S clear; TSI any but none; TSF samples. */
	if ((type != 1 && type != 3) || (h & 0x09000000u) != 0x08000000u || !((h >> 22) & 3u) ||
	    ((h >> 20) & 3u) != PDMA_VRT_TSF_SAMPLES)
		return 0;
	/* Exactly the datagram (so 4-byte multiple), prologue of 7 words. */
	if (words * 4u != p->len || words < 7u + tr)
		return 0;
	if (p->c0 & ((h & (1u << 25)) ? 0x07000000u : 0xff000000u))
		return 0;
	plen = words * 4u - 28u - 4u * tr;
	frac = ((uint64_t)p->fhi << 32) | p->flo;
	if (frac >= c->sample_rate || plen == 0 || plen > c->max_payload)
		return 0;
	if ((c->bytes_per_sample & (c->bytes_per_sample - 1)) == 0) {
		/* A power of two (4 for 16-bit I/Q): a mask and a shift, where
		 * a GPU would run a division sequence. */
		if (plen & (c->bytes_per_sample - 1))
			return 0;
		spp = plen >> pdma_dfr_ctz32(c->bytes_per_sample);
	} else {
		if (plen % c->bytes_per_sample)
			return 0;
		spp = plen / c->bytes_per_sample;
	}
	if (c->sample_rate <= UINT32_MAX) {
		/* s = tsi * rate + frac without a 64-bit division: with rate =
		 * a * spp + b, s = spp * (tsi * a) + t, t = tsi * b + frac <
		 * 2^32 * spp + 2^32 < 2^51 (spp < 2^18: payloads < 2^18 bytes). */
		const uint32_t rate = (uint32_t)c->sample_rate, a = rate / spp, b = rate - a * spp;
		uint32_t rt;
		const uint64_t qt = pdma_dfr_divmod53((uint64_t)p->tsi * b + frac, spp, &rt);
		if (rt)
			return 0;
		r->pkt = (uint64_t)p->tsi * a + qt;
	} else {
		const uint64_t s = (uint64_t)p->tsi * c->sample_rate + frac;
		if (s % spp)
			return 0;
		r->pkt = s / spp;
	}
	r->payload_off = 28;
	r->payload_len = plen;
	r->cls = pdma_dfr_class(1, p->c0, p->c1); /* C is set on this path */
	d->pkt = r->pkt;
	d->stream_id = p->sid;
	d->stream = PDMA_DFR_NO_STREAM;
	d->count = (uint8_t)(((h >> 16) & 15u) | 0x10u);
	*tr_off = tr ? p->off + words * 4u - 4u : 0u;
	return 1;
}

PDMA_DFR_FN int pdma_dfr_header_fast(const struct pdma_dfr_config *c, const uint8_t *slot,
				     uint32_t slot_size, const struct pdma_dfr_pre *p,
				     struct pdma_dfr_desc *d, struct pdma_dfr_pkt *r)
{
	uint32_t tr_off;

	if (!pdma_dfr_header_fast_nt(c, slot_size, p, d, r, &tr_off))
		return 0;
	/* The datagram's last word is its trailer (the fast path takes only
	 * packets that fill the datagram exactly). */
	return !tr_off || pdma_vrt_trailer_ok((p->flags & PDMA_SLOT_TAIL) ? p->tail : pdma_vrt_get32(slot + tr_off));
}

/*
 * Frame rings (frame.h): the header stage of frame f (len bytes, NIC status
 * flags): its Ethernet/IPv4/UDP headers (pdma_frm_parse), then its datagram
 * exactly as a slot's (pdma_dfr_dgram_v). A skipped frame returns
 * -PDMA_DFR_E_FRAME with the reason in d->count (no stream ID bit, so the
 * accounting can never attribute it to a stream). r->payload_off is relative
 * to the frame's first byte. *dg_off gets the datagram's offset in the frame.
 */
PDMA_DFR_FN int pdma_dfr_frame_skip(struct pdma_dfr_desc *d, int why)
{
	d->pkt = 0;
	d->stream_id = 0;
	d->stream = PDMA_DFR_NO_STREAM;
	d->count = (uint8_t)why;
	return -PDMA_DFR_E_FRAME;
}

PDMA_DFR_FN int pdma_dfr_frame_v(const struct pdma_dfr_config *c, const struct pdma_frm_cfg *fc,
				 const uint8_t *f, uint32_t len, uint32_t flags,
				 struct pdma_dfr_desc *d, struct pdma_dfr_pkt *r,
				 struct pdma_vrt_packet *vp, uint32_t *dg_off)
{
	uint32_t dl;
	int e = pdma_frm_parse(fc, f, len, flags, dg_off, &dl);

	if (e)
		return pdma_dfr_frame_skip(d, e);
	e = pdma_dfr_dgram_v(c, f + *dg_off, dl, d, r, vp);
	if (e == PDMA_DFR_ST_DATA)
		r->payload_off += *dg_off;
	return e;
}

/* The fast path (pdma_dfr_header_fast_nt) on a datagram that is not in a
 * slot: the same checks with the prefix read from the datagram itself and
 * the trailer from its last word (no slot-tail promise). 1 with *d, *r as
 * pdma_dfr_dgram_v fills them (payload_off relative to dg), 0 to decline
 * (the caller then runs the general path). */
PDMA_DFR_FN int pdma_dfr_dgram_fast(const struct pdma_dfr_config *c, const uint8_t *dg, uint32_t len,
				    struct pdma_dfr_desc *d, struct pdma_dfr_pkt *r)
{
	struct pdma_dfr_pre p;
	uint32_t tr_off;

	if (len < 64u) /* the slot form's minimum too */
		return 0;
	p.len = len;
	p.flags = 0;
	p.off = PDMA_SLOT_HDR;
	p.tail = 0;
	p.h = pdma_vrt_get32(dg);
	p.sid = pdma_vrt_get32(dg + 4);
	p.c0 = pdma_vrt_get32(dg + 8);
	p.c1 = pdma_vrt_get32(dg + 12);
	p.tsi = pdma_vrt_get32(dg + 16);
	p.fhi = pdma_vrt_get32(dg + 20);
	p.flo = pdma_vrt_get32(dg + 24);
	/* As if in a slot exactly its size: tr_off then counts from the slot. */
	if (!pdma_dfr_header_fast_nt(c, PDMA_SLOT_HDR + len, &p, d, r, &tr_off))
		return 0;
	return !tr_off || pdma_vrt_trailer_ok(pdma_vrt_get32(dg + tr_off - PDMA_SLOT_HDR));
}

/* Host (single-threaded): does a data packet of class cls belong to the
 * stream whose class slot is *known? The first data packet claims it. */
static inline int pdma_dfr_class_ok_host(uint64_t *known, uint64_t cls)
{
	if (*known == 0)
		*known = cls;
	return *known == cls;
}

/* Host (single-threaded) stream lookup; returns index or -1 when full. */
static inline int pdma_dfr_lookup_host(const struct pdma_dfr_config *c, uint64_t *keys,
				       uint32_t id)
{
	uint64_t want = (1ull << 32) | id;
	uint32_t i;
	for (i = 0; i < c->max_streams; i++) {
		if (keys[i] == want)
			return (int)i;
		if (keys[i] == 0) {
			keys[i] = want;
			return (int)i;
		}
	}
	return -1;
}

#endif /* PDMA_INGEST_DEFRAME_H */
