// SPDX-License-Identifier: MIT
/* VITA-49 parser/builder: every valid combination round-trips; every
 * malformed form is rejected with its own code; wire byte order is exact. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "peerdma/vrt.h"

static void put(uint8_t *b, size_t w, uint32_t v)
{
	pdma_vrt_put32(b + 4 * w, v);
}

/* A hand-assembled DIFI-style packet, checked field by field: the builder is
 * not allowed to vouch for the parser. */
static void test_wire_layout(void **state)
{
	uint8_t b[48];
	struct pdma_vrt_packet p;

	(void)state;
	/* type 1, C, T, TSI=UTC, TSF=samples, count 5, 12 words */
	put(b, 0, 0x1c550000u | 12);
	put(b, 1, 0xdeadbeef);           /* stream ID */
	put(b, 2, 0x00123456);           /* OUI */
	put(b, 3, 0xabcd0102);           /* ICC, PCC */
	put(b, 4, 1700000000u);          /* integer seconds */
	put(b, 5, 0x00000001);           /* frac hi */
	put(b, 6, 0x00000002);           /* frac lo */
	put(b, 7, 0x01020304);
	put(b, 8, 0x05060708);
	put(b, 9, 0x090a0b0c);
	put(b, 10, 0x0d0e0f10);
	put(b, 11, 0x40000000u | 0x00040000u | PDMA_VRT_TR_E | 3); /* valid data enable+ind, E, count 3 */
	assert_int_equal(pdma_vrt_parse(b, sizeof(b), PDMA_VRT_EXACT, &p), 48);
	assert_int_equal(p.type, PDMA_VRT_DATA_SID);
	assert_true(p.flags & PDMA_VRT_F_CLASS);
	assert_true(p.flags & PDMA_VRT_F_TRAILER);
	assert_int_equal(p.tsi, PDMA_VRT_TSI_UTC);
	assert_int_equal(p.tsf, PDMA_VRT_TSF_SAMPLES);
	assert_int_equal(p.count, 5);
	assert_int_equal(p.size_words, 12);
	assert_int_equal(p.stream_id, 0xdeadbeefu);
	assert_int_equal(p.oui, 0x123456);
	assert_int_equal(p.icc, 0xabcd);
	assert_int_equal(p.pcc, 0x0102);
	assert_int_equal(p.ts_int, 1700000000u);
	assert_true(p.ts_frac == 0x100000002ull);
	assert_int_equal(p.payload_off, 28);
	assert_int_equal(p.payload_len, 16);
	assert_int_equal(b[p.payload_off], 0x01);
	assert_int_equal(p.trailer & 0x7f, 3);

	/* And the builder produces exactly these bytes. */
	uint8_t o[48];
	struct pdma_vrt_packet q = p;
	assert_int_equal(pdma_vrt_build(&q, b + 28, 16, o, sizeof(o)), 48);
	assert_memory_equal(o, b, 48);
}

static int ctx_payload(uint8_t *b, int variant)
{
	/* CIF0 with sample rate (2 words) + bandwidth (2) + gain (1); variant 1
	 * adds GPS ASCII (2 + 2 words), variant 2 association lists. */
	size_t w = 0;
	uint32_t cif = PDMA_VRT_CIF0_CHANGE | PDMA_VRT_CIF0_BANDWIDTH | (1u << 23) |
		       PDMA_VRT_CIF0_SAMPLE_RATE;
	if (variant == 1)
		cif |= 1u << 9;
	if (variant == 2)
		cif |= 1u << 8;
	put(b, w++, cif);
	put(b, w++, 0); put(b, w++, 5u << 20);  /* bandwidth */
	put(b, w++, 0x00010002);                /* gain */
	put(b, w++, 0); put(b, w++, 10u << 20); /* sample rate */
	if (variant == 1) {
		put(b, w++, 0x00123456); put(b, w++, 2);
		put(b, w++, 0x41424344); put(b, w++, 0x45464700);
	}
	if (variant == 2) {
		/* 1 source, 2 system, 1 vector, A with 1 async (+ its tag) */
		put(b, w++, (2u << 16) | 1); put(b, w++, (1u << 16) | 0x8000u | 1);
		for (int i = 0; i < 1 + 2 + 1 + 1 + 1; i++)
			put(b, w++, 0x100 + i);
	}
	return (int)(w * 4);
}

/* Every valid combination of the optional fields and indicators of every
 * supported type round-trips through build and parse. */
static void test_roundtrip_all(void **state)
{
	uint8_t pay[256], buf[512], ctx[128];
	unsigned n = 0;

	(void)state;
	for (int i = 0; i < 256; i++)
		pay[i] = (uint8_t)(i * 7 + 1);
	for (unsigned type = 0; type <= 5; type++)
	for (unsigned c = 0; c < 2; c++)
	for (unsigned t = 0; t < 2; t++)
	for (unsigned i2 = 0; i2 < 2; i2++)
	for (unsigned i3 = 0; i3 < 2; i3++)
	for (unsigned tsi = 0; tsi < 4; tsi++)
	for (unsigned tsf = 0; tsf < 4; tsf++)
	for (unsigned pl = 0; pl < 3; pl++) {
		bool data = type <= 3;
		if (t && !data)
			continue;
		if (i3 && (type == 5 || (data && !i2)))
			continue;
		struct pdma_vrt_packet p = { 0 }, q;
		p.type = (uint8_t)type;
		p.flags = (uint8_t)((c ? PDMA_VRT_F_CLASS : 0) | (t ? PDMA_VRT_F_TRAILER : 0) |
				    (i2 ? PDMA_VRT_F_NOT_V49_0 : 0) | (i3 ? PDMA_VRT_F_SPECTRUM : 0));
		p.tsi = (uint8_t)tsi;
		p.tsf = (uint8_t)tsf;
		p.count = (uint8_t)(n & 15);
		p.stream_id = 0x1000 + n;
		p.oui = c ? 0x7a1b2c : 0;
		p.icc = c ? 0x1234 : 0;
		p.pcc = c ? (uint16_t)n : 0;
		p.pad_bits = (uint8_t)((c && data && i2) ? 5 : 0);
		p.ts_int = tsi ? 1000 + n : 0;
		p.ts_frac = tsf ? (tsf == 2 ? 999999999999ull : 0xfedcba9876543210ull) : 0;
		p.trailer = t ? (0x80000000u | 0x00080000u | PDMA_VRT_TR_E | 9) : 0;
		const uint8_t *src = pay;
		uint32_t len = pl == 0 ? 0 : pl == 1 ? 4 : 256;
		if (type == 4) {
			len = (uint32_t)ctx_payload(ctx, (int)pl);
			src = ctx;
		}
		int sz = pdma_vrt_build(&p, src, len, buf, sizeof(buf));
		assert_true(sz > 0);
		assert_int_equal(pdma_vrt_parse(buf, (size_t)sz, PDMA_VRT_EXACT, &q), sz);
		assert_int_equal(q.type, type);
		assert_int_equal(q.flags, p.flags);
		assert_int_equal(q.tsi, tsi);
		assert_int_equal(q.tsf, tsf);
		assert_int_equal(q.count, p.count);
		assert_int_equal(q.has_stream_id, pdma_vrt_type_has_sid(type));
		assert_int_equal(q.stream_id, q.has_stream_id ? p.stream_id : 0);
		assert_int_equal(q.oui, p.oui);
		assert_int_equal(q.icc, p.icc);
		assert_int_equal(q.pcc, p.pcc);
		assert_int_equal(q.pad_bits, p.pad_bits);
		assert_int_equal(q.ts_int, p.ts_int);
		assert_true(q.ts_frac == p.ts_frac);
		assert_int_equal(q.trailer, p.trailer);
		assert_int_equal(q.payload_len, len);
		assert_int_equal(q.payload_off, p.payload_off);
		assert_int_equal(q.size_words * 4, sz);
		if (len)
			assert_memory_equal(buf + q.payload_off, src, len);
		if (type == 4) {
			assert_int_equal(q.ctx_off[31 - 21], q.payload_off + 4 * 4);
			assert_int_equal(q.ctx_off[31 - 29], q.payload_off + 4);
			assert_int_equal(pdma_vrt_get32(buf + q.ctx_off[31 - 21] + 4), 10u << 20);
			assert_int_equal(q.ctx_off[31 - 9] != 0, pl == 1);
			assert_int_equal(q.ctx_off[31 - 8] != 0, pl == 2);
		}
		/* Non-exact mode accepts trailing bytes and reports the size. */
		memset(buf + sz, 0xee, 8);
		assert_int_equal(pdma_vrt_parse(buf, (size_t)sz + 8, 0, &q), sz);
		n++;
	}
	/* 4 data types x C(2) x T(2) x {i2=0,i3=0 | i2=1,i3=0/1}(3) x 16 ts x 3 payloads
	 * + context 2x3x16x3 (i2/i3 free) + ext context 2x2x16x3 */
	assert_int_equal(n, 4 * 2 * 2 * 3 * 16 * 3 + 2 * 4 * 16 * 3 + 2 * 2 * 16 * 3);
}

/* Start from a good packet, break one thing, expect its own code. */
static void test_malformed(void **state)
{
	uint8_t b[64], x[64];
	struct pdma_vrt_packet p = { .type = 1, .flags = PDMA_VRT_F_CLASS | PDMA_VRT_F_TRAILER,
				     .tsi = 1, .tsf = 1, .stream_id = 7, .oui = 1 };
	struct pdma_vrt_packet q;
	int sz;

	(void)state;
	memset(b, 0, sizeof(b));
	sz = pdma_vrt_build(&p, NULL, 16, b, sizeof(b));
	assert_int_equal(sz, 48);
	assert_int_equal(pdma_vrt_parse(b, 48, PDMA_VRT_EXACT, &q), 48);

#define BAD(code, len, flags) assert_int_equal(pdma_vrt_parse(x, (len), (flags), &q), -(code))
	memcpy(x, b, 48);
	BAD(PDMA_VRT_E_SHORT, 3, 0);
	BAD(PDMA_VRT_E_SHORT, 0, 0);
	BAD(PDMA_VRT_E_ALIGN, 47, PDMA_VRT_EXACT);
	BAD(PDMA_VRT_E_TRUNCATED, 44, 0);
	BAD(PDMA_VRT_E_LENGTH, 52, PDMA_VRT_EXACT);
	x[0] = 0x8c; BAD(PDMA_VRT_E_TYPE, 48, 0);
	assert_int_equal(q.type, 8);
	x[0] = 0xfc; BAD(PDMA_VRT_E_TYPE, 48, 0);
	x[0] = 0x6c; BAD(PDMA_VRT_E_COMMAND, 48, 0);
	assert_true(q.has_stream_id && q.stream_id == 7); /* attributable */
	x[0] = 0x7c; BAD(PDMA_VRT_E_COMMAND, 48, 0);
	memcpy(x, b, 48);
	x[2] = 0; x[3] = 0; BAD(PDMA_VRT_E_SIZE_ZERO, 48, 0);
	/* 7 prologue words + trailer need 8: size 7 is too small */
	x[3] = 7; BAD(PDMA_VRT_E_PROLOGUE, 48, 0);
	x[3] = 8; assert_int_equal(pdma_vrt_parse(x, 48, 0, &q), 32);
	memcpy(x, b, 48);
	x[0] = 0x1d; BAD(PDMA_VRT_E_RESERVED_BIT, 48, 0); /* spectrum without 49.2 */
	x[0] = 0x1f; assert_int_equal(pdma_vrt_parse(x, 48, 0, &q), 48); /* with it: ok */
	memcpy(x, b, 48);
	x[8] = 0x01; BAD(PDMA_VRT_E_CLASS_RESERVED, 48, 0);
	x[8] = 0x80; BAD(PDMA_VRT_E_CLASS_RESERVED, 48, 0); /* pad bits need 49.2 */
	x[0] = 0x1e; assert_int_equal(pdma_vrt_parse(x, 48, 0, &q), 48);
	assert_int_equal(q.pad_bits, 16);
	x[8] = 0x04; BAD(PDMA_VRT_E_CLASS_RESERVED, 48, 0);
	memcpy(x, b, 48);
	x[1] = 0x60; /* TSF = picoseconds */
	put(x, 5, 0xe8); put(x, 6, 0xd4a51000u); /* exactly 10^12 */
	BAD(PDMA_VRT_E_PICOSECONDS, 48, 0);
	put(x, 6, 0xd4a50fffu);
	assert_int_equal(pdma_vrt_parse(x, 48, 0, &q), 48);
	memcpy(x, b, 48);
	put(x, 11, 0x00000100); BAD(PDMA_VRT_E_TRAILER, 48, 0); /* indicator w/o enable */
	put(x, 11, 0x00000005); BAD(PDMA_VRT_E_TRAILER, 48, 0); /* count w/o E */
	put(x, 11, 0x00100100); assert_int_equal(pdma_vrt_parse(x, 48, 0, &q), 48);

	/* Context packets. */
	uint8_t c[128], cp[64];
	struct pdma_vrt_packet ctx = { .type = 4, .tsi = 1, .tsf = 1, .stream_id = 9 };
	int cl = ctx_payload(cp, 0);
	sz = pdma_vrt_build(&ctx, cp, (uint32_t)cl, c, sizeof(c));
	assert_int_equal(pdma_vrt_parse(c, (size_t)sz, PDMA_VRT_EXACT, &q), sz);
	memcpy(x, c, (size_t)sz);
	x[0] |= 0x04; BAD(PDMA_VRT_E_RESERVED_BIT, (size_t)sz, 0); /* T on context */
	memcpy(x, c, (size_t)sz);
	x[23] |= 0x01; BAD(PDMA_VRT_E_CIF_RESERVED, (size_t)sz, 0);
	x[23] = 0x02; BAD(PDMA_VRT_E_CIF_RESERVED, (size_t)sz, 0);  /* CIF1 in a 49.0 packet */
	x[0] |= 0x02; BAD(PDMA_VRT_E_CIF_EXT, (size_t)sz, 0);       /* CIF1 in a 49.2 packet */
	memcpy(x, c, (size_t)sz);
	x[20] |= 0x01; BAD(PDMA_VRT_E_CONTEXT_SIZE, (size_t)sz, 0); /* bit 24: one word too many */
	memcpy(x, c, (size_t)sz);
	x[21] &= (uint8_t)~0x20; BAD(PDMA_VRT_E_CONTEXT_SIZE, (size_t)sz, 0); /* drop sample rate */
	memcpy(x, c, (size_t)sz);
	x[0] |= 0x01; assert_int_equal(pdma_vrt_parse(x, (size_t)sz, 0, &q), sz); /* TSM ok */
	/* Extension context: payload opaque, but indicator 3 is reserved. */
	x[0] = (uint8_t)((x[0] & 0x0e) | 0x50);
	assert_int_equal(pdma_vrt_parse(x, (size_t)sz, 0, &q), sz);
	assert_int_equal(q.type, 5);
	x[0] |= 0x01;
	BAD(PDMA_VRT_E_RESERVED_BIT, (size_t)sz, 0);
	/* Empty context payload. */
	ctx.type = 4;
	sz = pdma_vrt_build(&ctx, NULL, 0, x, sizeof(x));
	BAD(PDMA_VRT_E_CONTEXT_SIZE, (size_t)sz, 0);
	/* GPS ASCII claiming more words than present. */
	cl = ctx_payload(cp, 1);
	put(cp, 7, 3);
	sz = pdma_vrt_build(&ctx, cp, (uint32_t)cl, x, sizeof(x));
	BAD(PDMA_VRT_E_CONTEXT_SIZE, (size_t)sz, 0);
	/* Association lists with reserved bits set in the size word. */
	cl = ctx_payload(cp, 2);
	put(cp, 6, (2u << 16) | 1 | 0x200u);
	sz = pdma_vrt_build(&ctx, cp, (uint32_t)cl, x, sizeof(x));
	BAD(PDMA_VRT_E_CONTEXT_SIZE, (size_t)sz, 0);
#undef BAD
}

static void test_build_errors(void **state)
{
	uint8_t o[64];
	struct pdma_vrt_packet p = { .type = 1, .tsi = 1, .tsf = 1 };

	(void)state;
	assert_int_equal(pdma_vrt_build(&p, NULL, 3, o, sizeof(o)), -PDMA_VRT_E_INVALID);
	assert_int_equal(pdma_vrt_build(&p, NULL, 48, o, sizeof(o)), -PDMA_VRT_E_NOSPACE);
	assert_int_equal(pdma_vrt_build(&p, NULL, 44, o, sizeof(o)), 64);
	assert_int_equal(pdma_vrt_build(&p, NULL, 262140, o, sizeof(o)), -PDMA_VRT_E_TOO_BIG);
	p.type = 6;
	assert_int_equal(pdma_vrt_build(&p, NULL, 0, o, sizeof(o)), -PDMA_VRT_E_INVALID);
	p.type = 4;
	p.flags = PDMA_VRT_F_TRAILER;
	assert_int_equal(pdma_vrt_build(&p, NULL, 0, o, sizeof(o)), -PDMA_VRT_E_INVALID);
	p.type = 1;
	p.flags = PDMA_VRT_F_SPECTRUM;
	assert_int_equal(pdma_vrt_build(&p, NULL, 0, o, sizeof(o)), -PDMA_VRT_E_INVALID);
	p.flags = 0;
	p.tsf = 2;
	p.ts_frac = 1000000000000ull;
	assert_int_equal(pdma_vrt_build(&p, NULL, 0, o, sizeof(o)), -PDMA_VRT_E_INVALID);
	p.tsf = 1;
	p.oui = 1u << 24;
	assert_int_equal(pdma_vrt_build(&p, NULL, 0, o, sizeof(o)), -PDMA_VRT_E_INVALID);
	p.oui = 0;
	p.pad_bits = 1;
	assert_int_equal(pdma_vrt_build(&p, NULL, 0, o, sizeof(o)), -PDMA_VRT_E_INVALID);
}

static void test_strerror(void **state)
{
	(void)state;
	/* Every code has its own message. */
	for (int i = 1; i < PDMA_VRT_E__MAX; i++) {
		assert_string_not_equal(pdma_vrt_strerror(-i), "unknown VRT error");
		for (int j = 1; j < i; j++)
			assert_string_not_equal(pdma_vrt_strerror(-i), pdma_vrt_strerror(-j));
	}
	assert_string_equal(pdma_vrt_strerror(-PDMA_VRT_E__MAX), "unknown VRT error");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_wire_layout),
		cmocka_unit_test(test_roundtrip_all),
		cmocka_unit_test(test_malformed),
		cmocka_unit_test(test_build_errors),
		cmocka_unit_test(test_strerror),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
