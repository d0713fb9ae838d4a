/* SPDX-License-Identifier: MIT */
/*
 * VITA-49 (VRT) packets: strict parsing and building of VITA-49.0 / 49.2
 * signal data, extension data, context and extension context packets.
 *
 * Header-only on purpose: the same code runs in C user space, in CUDA device
 * code (the GPU deframer) and in kernel code, so it depends on nothing beyond
 * fixed-width integer types, allocates nothing and never touches errno. Byte
 * order is handled by explicit big-endian byte loads and stores, which are
 * correct on any host and compile to one load plus a byte swap.
 *
 * Errors: every violation has its own code, a negative value in
 * [-PDMA_VRT_E__MAX, -1] (pdma_vrt_strerror() names it). They are not errno
 * values because errno has too few distinct codes for "each violation its own
 * error". The ingest library never returns them: it counts malformed
 * packets by these codes (each stream's malformed count, and by reason).
 *
 * Command packets (types 6 and 7, VITA-49.2) are recognised and rejected with
 * PDMA_VRT_E_COMMAND; CIF1/CIF2/CIF3/CIF7 context extensions (49.2) are
 * rejected with PDMA_VRT_E_CIF_EXT: both are outside this pipeline's scope and
 * a strict parser must not guess at their layout.
 *
 * Thread safety: all functions are pure functions of their arguments.
 */
#ifndef PEERDMA_VRT_H
#define PEERDMA_VRT_H

#if defined(__KERNEL__)
#include <linux/types.h>
#else
#include <stddef.h>
#include <stdint.h>
#endif

#if defined(__CUDACC__)
#define PDMA_VRT_FN static __host__ __device__ __forceinline__
#else
#define PDMA_VRT_FN static inline
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Packet types (header bits 31-28). */
enum pdma_vrt_type {
	PDMA_VRT_DATA = 0,        /* signal data, no stream ID */
	PDMA_VRT_DATA_SID = 1,    /* signal data with stream ID */
	PDMA_VRT_EXT_DATA = 2,    /* extension data, no stream ID */
	PDMA_VRT_EXT_DATA_SID = 3,
	PDMA_VRT_CONTEXT = 4,
	PDMA_VRT_EXT_CONTEXT = 5,
	PDMA_VRT_COMMAND = 6,     /* 49.2: rejected */
	PDMA_VRT_EXT_COMMAND = 7, /* 49.2: rejected */
};

enum pdma_vrt_tsi { PDMA_VRT_TSI_NONE = 0, PDMA_VRT_TSI_UTC = 1, PDMA_VRT_TSI_GPS = 2,
		    PDMA_VRT_TSI_OTHER = 3 };
enum pdma_vrt_tsf { PDMA_VRT_TSF_NONE = 0, PDMA_VRT_TSF_SAMPLES = 1, PDMA_VRT_TSF_PICO = 2,
		    PDMA_VRT_TSF_FREE = 3 };

/* Error codes (returned negated). */
enum pdma_vrt_err {
	PDMA_VRT_E_SHORT = 1,       /* fewer than 4 bytes: no header word */
	PDMA_VRT_E_ALIGN,           /* exact mode: length not a multiple of 4 bytes */
	PDMA_VRT_E_TYPE,            /* reserved packet type 8-15 */
	PDMA_VRT_E_COMMAND,         /* command packet (49.2 type 6/7): unsupported */
	PDMA_VRT_E_SIZE_ZERO,       /* packet size field is 0 */
	PDMA_VRT_E_TRUNCATED,       /* size field says more words than the buffer holds */
	PDMA_VRT_E_LENGTH,          /* buffer longer than the packet (exact mode) */
	PDMA_VRT_E_PROLOGUE,        /* size too small for the indicated prologue + trailer */
	PDMA_VRT_E_RESERVED_BIT,    /* reserved header indicator bit set */
	PDMA_VRT_E_CLASS_RESERVED,  /* class ID reserved bits set */
	PDMA_VRT_E_PICOSECONDS,     /* TSF real-time picoseconds >= 10^12 */
	PDMA_VRT_E_TRAILER,         /* trailer indicator or count without its enable bit */
	PDMA_VRT_E_CIF_RESERVED,    /* CIF0 reserved bits set (49.0 packet) */
	PDMA_VRT_E_CIF_EXT,         /* CIF1/2/3/7 present (49.2): unsupported */
	PDMA_VRT_E_CONTEXT_SIZE,    /* context fields do not fill the payload exactly */
	PDMA_VRT_E_NOSPACE,         /* build: output buffer too small */
	PDMA_VRT_E_TOO_BIG,         /* build: packet over 65,535 words */
	PDMA_VRT_E_INVALID,         /* build: field out of range / inconsistent request */
	PDMA_VRT_E__MAX
};

/* Parse flags. */
#define PDMA_VRT_EXACT (1u << 0) /* the buffer must hold exactly one packet (a datagram) */

/* Header indicator bits as stored in pdma_vrt_packet.flags. */
#define PDMA_VRT_F_CLASS   (1u << 0) /* C: class ID present */
#define PDMA_VRT_F_TRAILER (1u << 1) /* data: trailer present */
#define PDMA_VRT_F_NOT_V49_0 (1u << 2) /* 49.2 indicator 2 (data/context) */
#define PDMA_VRT_F_SPECTRUM (1u << 3) /* data: spectrum (49.2); context: TSM */

/* A parsed packet. Offsets are bytes from the start of the packet. */
struct pdma_vrt_packet {
	uint8_t type;          /* enum pdma_vrt_type */
	uint8_t flags;         /* PDMA_VRT_F_* */
	uint8_t tsi, tsf;      /* enum pdma_vrt_tsi / pdma_vrt_tsf */
	uint8_t count;         /* 4-bit packet count */
	uint8_t has_stream_id;
	uint8_t pad_bits;      /* 49.2 class ID pad bit count (data), else 0 */
	uint8_t reserved0;
	uint16_t size_words;   /* whole packet */
	uint16_t payload_off;  /* bytes */
	uint32_t payload_len;  /* bytes */
	uint32_t stream_id;
	uint32_t oui;          /* 24 bits */
	uint16_t icc, pcc;     /* information / packet class codes */
	uint32_t ts_int;
	uint64_t ts_frac;
	uint32_t trailer;      /* valid when flags & PDMA_VRT_F_TRAILER */
	uint32_t cif0;         /* context packets */
	/* Context packets (type 4) only: byte offset of each CIF0 field (bit b at
	 * ctx_off[31 - b] for b = 31..8), 0 when absent. Bit 31 (change
	 * indicator) has no field. Not written for other packet types. */
	uint32_t ctx_off[24];
};

/* CIF0 field bits used by the pipeline. */
#define PDMA_VRT_CIF0_CHANGE      (1u << 31)
#define PDMA_VRT_CIF0_BANDWIDTH   (1u << 29)
#define PDMA_VRT_CIF0_RF_FREQ     (1u << 27)
#define PDMA_VRT_CIF0_SAMPLE_RATE (1u << 21)

/* Trailer bits (data packets). */
#define PDMA_VRT_TR_E (1u << 7)

/* A trailer word (host order) passes strict validation: an indicator (bits
 * 19-8) is meaningful only with its enable (bits 31-20), a count (6-0) only
 * with E (returns 1; 0: the parser's PDMA_VRT_E_TRAILER). Shared by the parser
 * and deframers that check the trailer apart from the header. */
PDMA_VRT_FN int pdma_vrt_trailer_ok(uint32_t t)
{
	return !((t >> 8) & 0xfffu & ~(t >> 20)) && ((t & PDMA_VRT_TR_E) || !(t & 0x7fu));
}

PDMA_VRT_FN uint32_t pdma_vrt_get32(const uint8_t *p)
{
#if defined(__CUDA_ARCH__)
	/* Device: one aligned word load and a byte permute instead of four
	 * byte loads (packets sit 4-byte aligned in the rings). */
	if (((uintptr_t)p & 3) == 0)
		return __byte_perm(*(const uint32_t *)p, 0, 0x0123);
#endif
	return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) |
	       (uint32_t)p[3];
}

PDMA_VRT_FN void pdma_vrt_put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

PDMA_VRT_FN uint64_t pdma_vrt_get64(const uint8_t *p)
{
	return ((uint64_t)pdma_vrt_get32(p) << 32) | pdma_vrt_get32(p + 4);
}

PDMA_VRT_FN int pdma_vrt_type_has_sid(unsigned type)
{
	return type == 1 || type == 3 || type == 4 || type == 5 || type == 6 || type == 7;
}

PDMA_VRT_FN int pdma_vrt_is_data(unsigned type)
{
	return type <= 3;
}

/* Size in words of the fixed-size CIF0 fields, indexed by 31 - bit; -1 marks
 * the two variable-size fields (GPS ASCII, context association lists). A
 * switch rather than a table so device code needs no constant memory. */
PDMA_VRT_FN int pdma_vrt_cif0_words(unsigned bit)
{
	switch (bit) {
	case 31: return 0;                  /* change indicator: flag only */
	case 30: case 24: case 23: case 22: case 19: case 18: case 16: case 10: return 1;
	case 29: case 28: case 27: case 26: case 25: case 21: case 20: case 17: case 15: return 2;
	case 14: case 13: return 11;        /* formatted GPS / INS geolocation */
	case 12: case 11: return 13;        /* ECEF / relative ephemeris */
	default: return -1;                 /* 9 GPS ASCII, 8 association lists */
	}
}

/* Walk the context fields of a context packet; fills ctx_off. */
PDMA_VRT_FN int pdma_vrt_parse_context(const uint8_t *pkt, struct pdma_vrt_packet *p)
{
	uint32_t off = p->payload_off, end = p->payload_off + p->payload_len;
	uint32_t cif0;
	int b;

	for (b = 0; b < 24; b++)
		p->ctx_off[b] = 0;
	if (p->payload_len < 4)
		return -PDMA_VRT_E_CONTEXT_SIZE;
	cif0 = pdma_vrt_get32(pkt + off);
	p->cif0 = cif0;
	off += 4;
	if (cif0 & 0x8eu) {
		/* 49.2: bits 1,2,3,7 enable CIF1/2/3/7; 49.0: all reserved. */
		return (p->flags & PDMA_VRT_F_NOT_V49_0) ? -PDMA_VRT_E_CIF_EXT
							  : -PDMA_VRT_E_CIF_RESERVED;
	}
	if (cif0 & 0x71u)
		return -PDMA_VRT_E_CIF_RESERVED;
	for (b = 30; b >= 8; b--) {
		int w;
		if (!(cif0 & (1u << b)))
			continue;
		p->ctx_off[31 - b] = off;
		w = pdma_vrt_cif0_words((unsigned)b);
		if (w < 0) {
			uint32_t n;
			if (end - off < 8)
				return -PDMA_VRT_E_CONTEXT_SIZE;
			if (b == 9) {
				/* GPS ASCII: OUI word, word count, then the characters. */
				n = 2 + pdma_vrt_get32(pkt + off + 4);
			} else {
				/* Association lists: source (9 bits) and system (9 bits)
				 * sizes, vector-component (16 bits), A flag and
				 * asynchronous-channel (15 bits); with A each async
				 * entry has a tag word too. */
				uint32_t w0 = pdma_vrt_get32(pkt + off);
				uint32_t w1 = pdma_vrt_get32(pkt + off + 4);
				uint32_t async = w1 & 0x7fffu;
				if (w0 & 0xfe00fe00u)
					return -PDMA_VRT_E_CONTEXT_SIZE;
				n = 2 + (w0 & 0x1ffu) + ((w0 >> 16) & 0x1ffu) + (w1 >> 16) + async;
				if (w1 & 0x8000u)
					n += async;
			}
			if (n > (end - off) / 4)
				return -PDMA_VRT_E_CONTEXT_SIZE;
			off += n * 4;
		} else {
			if ((uint32_t)w > (end - off) / 4)
				return -PDMA_VRT_E_CONTEXT_SIZE;
			off += (uint32_t)w * 4;
		}
	}
	if (off != end)
		return -PDMA_VRT_E_CONTEXT_SIZE;
	return 0;
}

/*
 * Parse one packet at buf (len bytes). On success returns the packet's size in
 * bytes (> 0) and fills *p; on failure returns -PDMA_VRT_E_*, and *p holds
 * whatever was decoded before the violation (type and, where readable, the
 * stream ID, so callers can attribute malformed packets to a stream).
 */
PDMA_VRT_FN int pdma_vrt_parse(const void *buf, size_t len, unsigned flags,
			       struct pdma_vrt_packet *p)
{
	const uint8_t *b = (const uint8_t *)buf;
	uint32_t h, words, need, off;
	unsigned type;

	p->type = 0; p->flags = 0; p->tsi = 0; p->tsf = 0; p->count = 0;
	p->has_stream_id = 0; p->pad_bits = 0; p->reserved0 = 0;
	p->size_words = 0; p->payload_off = 0; p->payload_len = 0;
	p->stream_id = 0; p->oui = 0; p->icc = 0; p->pcc = 0;
	p->ts_int = 0; p->ts_frac = 0; p->trailer = 0; p->cif0 = 0;
	/* ctx_off is written for context packets only (by the context walk):
	 * not clearing it here keeps the data-packet path short on the GPU. */

	if (len < 4)
		return -PDMA_VRT_E_SHORT;
	h = pdma_vrt_get32(b);
	type = h >> 28;
	p->type = (uint8_t)type;
	if (pdma_vrt_type_has_sid(type) && len >= 8) {
		p->stream_id = pdma_vrt_get32(b + 4);
		p->has_stream_id = 1;
	}
	if (type > 7)
		return -PDMA_VRT_E_TYPE;
	if (type >= 6)
		return -PDMA_VRT_E_COMMAND;
	if ((flags & PDMA_VRT_EXACT) && (len & 3))
		return -PDMA_VRT_E_ALIGN;
	if (h & (1u << 27))
		p->flags |= PDMA_VRT_F_CLASS;
	if (h & (1u << 26)) {
		if (!pdma_vrt_is_data(type))
			return -PDMA_VRT_E_RESERVED_BIT;
		p->flags |= PDMA_VRT_F_TRAILER;
	}
	if (h & (1u << 25))
		p->flags |= PDMA_VRT_F_NOT_V49_0;
	if (h & (1u << 24)) {
		/* Data: spectrum (49.2 only); context: TSM; extension context: reserved. */
		if (type == PDMA_VRT_EXT_CONTEXT ||
		    (pdma_vrt_is_data(type) && !(h & (1u << 25))))
			return -PDMA_VRT_E_RESERVED_BIT;
		p->flags |= PDMA_VRT_F_SPECTRUM;
	}
	p->tsi = (uint8_t)((h >> 22) & 3);
	p->tsf = (uint8_t)((h >> 20) & 3);
	p->count = (uint8_t)((h >> 16) & 15);
	words = h & 0xffffu;
	p->size_words = (uint16_t)words;
	if (words == 0)
		return -PDMA_VRT_E_SIZE_ZERO;
	if ((size_t)words * 4 > len)
		return -PDMA_VRT_E_TRUNCATED;
	if ((flags & PDMA_VRT_EXACT) && (size_t)words * 4 != len)
		return -PDMA_VRT_E_LENGTH;

	need = 1 + (pdma_vrt_type_has_sid(type) ? 1u : 0u) +
	       ((p->flags & PDMA_VRT_F_CLASS) ? 2u : 0u) + (p->tsi ? 1u : 0u) +
	       (p->tsf ? 2u : 0u) + ((p->flags & PDMA_VRT_F_TRAILER) ? 1u : 0u);
	if (need > words)
		return -PDMA_VRT_E_PROLOGUE;

	off = 4;
	if (pdma_vrt_type_has_sid(type))
		off += 4;
	if (p->flags & PDMA_VRT_F_CLASS) {
		uint32_t c0 = pdma_vrt_get32(b + off), c1 = pdma_vrt_get32(b + off + 4);
		/* 49.2 data packets carry a pad bit count in bits 31-27. */
		uint32_t rsv = (pdma_vrt_is_data(type) && (p->flags & PDMA_VRT_F_NOT_V49_0))
				       ? 0x07000000u : 0xff000000u;
		if (c0 & rsv)
			return -PDMA_VRT_E_CLASS_RESERVED;
		p->pad_bits = (uint8_t)((c0 & ~rsv) >> 27);
		p->oui = c0 & 0xffffffu;
		p->icc = (uint16_t)(c1 >> 16);
		p->pcc = (uint16_t)c1;
		off += 8;
	}
	if (p->tsi) {
		p->ts_int = pdma_vrt_get32(b + off);
		off += 4;
	}
	if (p->tsf) {
		p->ts_frac = pdma_vrt_get64(b + off);
		if (p->tsf == PDMA_VRT_TSF_PICO && p->ts_frac >= 1000000000000ull)
			return -PDMA_VRT_E_PICOSECONDS;
		off += 8;
	}
	p->payload_off = (uint16_t)off;
	p->payload_len = words * 4 - off - ((p->flags & PDMA_VRT_F_TRAILER) ? 4u : 0u);
	if (p->flags & PDMA_VRT_F_TRAILER) {
		uint32_t t = pdma_vrt_get32(b + words * 4 - 4);
		if (!pdma_vrt_trailer_ok(t))
			return -PDMA_VRT_E_TRAILER;
		p->trailer = t;
	}
	if (type == PDMA_VRT_CONTEXT) {
		int e = pdma_vrt_parse_context(b, p);
		if (e < 0)
			return e;
	}
	return (int)(words * 4);
}

/*
 * Build a packet into out (cap bytes) from the header fields in *p (type,
 * flags, tsi, tsf, count, stream_id, oui/icc/pcc, pad_bits, ts_int, ts_frac,
 * trailer) and payload_len bytes of payload, copied verbatim (it is already in
 * wire order: samples are big-endian, context fields too). payload may be NULL
 * to leave the payload area for the caller to fill. Returns the packet size in
 * bytes or -PDMA_VRT_E_NOSPACE / _TOO_BIG / _INVALID. The size_words,
 * payload_off and payload_len fields of *p are updated.
 */
PDMA_VRT_FN int pdma_vrt_build(struct pdma_vrt_packet *p, const void *payload,
			       uint32_t payload_len, void *out, size_t cap)
{
	uint8_t *o = (uint8_t *)out;
	const uint8_t *src = (const uint8_t *)payload;
	uint32_t words, off, h;
	int trailer = (p->flags & PDMA_VRT_F_TRAILER) != 0;

	if (p->type > 5 || p->tsi > 3 || p->tsf > 3 || p->count > 15 || (payload_len & 3) ||
	    (trailer && !pdma_vrt_is_data(p->type)) || p->oui > 0xffffffu || p->pad_bits > 31 ||
	    (p->tsf == PDMA_VRT_TSF_PICO && p->ts_frac >= 1000000000000ull))
		return -PDMA_VRT_E_INVALID;
	if ((p->flags & PDMA_VRT_F_SPECTRUM) &&
	    (p->type == PDMA_VRT_EXT_CONTEXT ||
	     (pdma_vrt_is_data(p->type) && !(p->flags & PDMA_VRT_F_NOT_V49_0))))
		return -PDMA_VRT_E_INVALID;
	if (p->pad_bits && !(pdma_vrt_is_data(p->type) && (p->flags & PDMA_VRT_F_NOT_V49_0)))
		return -PDMA_VRT_E_INVALID;
	off = 4 + (pdma_vrt_type_has_sid(p->type) ? 4u : 0u) +
	      ((p->flags & PDMA_VRT_F_CLASS) ? 8u : 0u) + (p->tsi ? 4u : 0u) + (p->tsf ? 8u : 0u);
	if (payload_len > 65535u * 4)
		return -PDMA_VRT_E_TOO_BIG;
	words = (off + payload_len + (trailer ? 4u : 0u)) / 4;
	if (words > 65535u)
		return -PDMA_VRT_E_TOO_BIG;
	if ((size_t)words * 4 > cap)
		return -PDMA_VRT_E_NOSPACE;

	h = ((uint32_t)p->type << 28) | ((p->flags & PDMA_VRT_F_CLASS) ? 1u << 27 : 0) |
	    (trailer ? 1u << 26 : 0) | ((p->flags & PDMA_VRT_F_NOT_V49_0) ? 1u << 25 : 0) |
	    ((p->flags & PDMA_VRT_F_SPECTRUM) ? 1u << 24 : 0) | ((uint32_t)p->tsi << 22) |
	    ((uint32_t)p->tsf << 20) | ((uint32_t)p->count << 16) | words;
	pdma_vrt_put32(o, h);
	off = 4;
	if (pdma_vrt_type_has_sid(p->type)) {
		pdma_vrt_put32(o + off, p->stream_id);
		off += 4;
	}
	if (p->flags & PDMA_VRT_F_CLASS) {
		pdma_vrt_put32(o + off, ((uint32_t)p->pad_bits << 27) | p->oui);
		pdma_vrt_put32(o + off + 4, ((uint32_t)p->icc << 16) | p->pcc);
		off += 8;
	}
	if (p->tsi) {
		pdma_vrt_put32(o + off, p->ts_int);
		off += 4;
	}
	if (p->tsf) {
		pdma_vrt_put32(o + off, (uint32_t)(p->ts_frac >> 32));
		pdma_vrt_put32(o + off + 4, (uint32_t)p->ts_frac);
		off += 8;
	}
	p->payload_off = (uint16_t)off;
	p->payload_len = payload_len;
	p->size_words = (uint16_t)words;
	if (src)
		for (uint32_t i = 0; i < payload_len; i++)
			o[off + i] = src[i];
	if (trailer)
		pdma_vrt_put32(o + words * 4 - 4, p->trailer);
	return (int)(words * 4);
}

/* Name of an error code (negative or positive). */
PDMA_VRT_FN const char *pdma_vrt_strerror(int err)
{
	switch (err < 0 ? -err : err) {
	case 0: return "ok";
	case PDMA_VRT_E_SHORT: return "shorter than a header word";
	case PDMA_VRT_E_ALIGN: return "length not a multiple of 4";
	case PDMA_VRT_E_TYPE: return "reserved packet type";
	case PDMA_VRT_E_COMMAND: return "command packet unsupported";
	case PDMA_VRT_E_SIZE_ZERO: return "packet size 0";
	case PDMA_VRT_E_TRUNCATED: return "truncated packet";
	case PDMA_VRT_E_LENGTH: return "bytes after the packet";
	case PDMA_VRT_E_PROLOGUE: return "size too small for the prologue";
	case PDMA_VRT_E_RESERVED_BIT: return "reserved header bit set";
	case PDMA_VRT_E_CLASS_RESERVED: return "class ID reserved bits set";
	case PDMA_VRT_E_PICOSECONDS: return "picoseconds >= 10^12";
	case PDMA_VRT_E_TRAILER: return "trailer indicator without enable";
	case PDMA_VRT_E_CIF_RESERVED: return "CIF0 reserved bits set";
	case PDMA_VRT_E_CIF_EXT: return "CIF1/2/3/7 unsupported";
	case PDMA_VRT_E_CONTEXT_SIZE: return "context fields do not fill the packet";
	case PDMA_VRT_E_NOSPACE: return "output buffer too small";
	case PDMA_VRT_E_TOO_BIG: return "packet over 65535 words";
	case PDMA_VRT_E_INVALID: return "invalid field for build";
	default: return "unknown VRT error";
	}
}

#ifdef __cplusplus
}
#endif
#endif /* PEERDMA_VRT_H */
