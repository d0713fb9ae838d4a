// SPDX-License-Identifier: MIT
/* The CPU deframer, the accounting and the generator, without sockets. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "deframe/acct.h"
#include "deframe/deframe_cpu.h"
#include "gen/gen.h"
#include "rx/ring.h"
#include "support/gen_ring.h"

#define SLOT 2048u

/* Put one datagram into ring slot i (what a receive thread does). */
static void put_slot(struct pdma_ring *r, uint64_t i, const uint8_t *pkt, uint32_t len)
{
	uint8_t *s = pdma_ring_slot(r, i);
	memcpy(s + PDMA_SLOT_HDR, pkt, len);
	pdma_slot_finish(s, PDMA_SLOT_HDR, len, 0, (uint32_t)i);
}

static int data_pkt(uint8_t *b, uint32_t id, uint64_t p, uint32_t spp, uint64_t rate)
{
	uint64_t s = p * spp;
	struct pdma_vrt_packet v = { .type = 1, .tsi = 1, .tsf = 1, .count = (uint8_t)(p & 15),
				     .stream_id = id, .ts_int = (uint32_t)(s / rate),
				     .ts_frac = s % rate };
	int n = pdma_vrt_build(&v, NULL, spp * 4, b, SLOT);
	for (uint32_t i = 0; i < spp; i++)
		pdma_vrt_put32(b + v.payload_off + 4 * i, pdma_gen_sample(id, s + i));
	return n;
}

static void cfg_small(struct pdma_dfr_config *c)
{
	pdma_dfr_config_default(c);
	c->max_streams = 4;
	c->out_pkts = 64;
	c->max_payload = 1024;
	c->sample_rate = 1000000;
}

/* Arrival order 0 1 3 2 2 5 4 6 ... : exact lost/dup/reorder, placement by
 * sample count, duplicates never overwrite, gaps stay flagged. */
static void test_deframe_and_account(void **state)
{
	struct pdma_dfr_config c;
	struct pdma_dfr d;
	struct pdma_ring r;
	uint8_t b[SLOT];
	const uint64_t order[] = { 3, 1, 2, 4, 4, 6, 5, 7, 9, 12, 11, 2, 8, 13 };
	const uint32_t spp = 64, id = 0xabc;
	(void)state;

	cfg_small(&c);
	assert_int_equal(pdma_dfr_init(&d, &c), 0);
	assert_int_equal(pdma_ring_init(&r, 16, SLOT, PDMA_RING_FULL), 0);
	for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++)
		put_slot(&r, i, b, (uint32_t)data_pkt(b, id, 1000 + order[i], spp, c.sample_rate));
	pdma_dfr_process(&d, &r, 0, 14);

	struct pdma_stream_stats s;
	assert_true(pdma_acct_stream(&d.acct, 0, &s));
	assert_int_equal(s.stream_id, id);
	/* distinct: 1..9, 11, 12, 13 minus 10 -> 12 received, 10 lost */
	assert_int_equal(s.received, 12);
	assert_int_equal(s.first_pkt, 1001);
	assert_int_equal(s.last_pkt, 1013);
	assert_int_equal(s.lost, 1);
	assert_int_equal(s.duplicated, 2);          /* 4 again, 2 again */
	assert_int_equal(s.reordered, 5);           /* 1, 2, 5, 11, 8 */
	assert_int_equal(s.count_errors, 0);
	assert_int_equal(s.bytes, 12 * spp * 4);
	assert_int_equal(d.placed, 12);
	/* Output: position p % 64, tag p + 1, payload = the samples sent. */
	for (uint64_t p = 1001; p <= 1013; p++) {
		uint64_t tag = d.t.tags[p % 64];
		if (p == 1010) {
			assert_int_equal(tag, 0); /* the gap is flagged */
			continue;
		}
		assert_int_equal(tag, p + 1);
		const uint8_t *o = pdma_dfr_out(&d, 0) + (p % 64) * spp * 4;
		for (uint32_t i = 0; i < spp; i++)
			assert_int_equal(pdma_vrt_get32(o + 4 * i), pdma_gen_sample(id, p * spp + i));
	}
	pdma_ring_fini(&r);
	pdma_dfr_fini(&d);
}

/* A data packet of stream id with class ID (oui, icc, pcc), or without one
 * when !has_class. */
static int data_pkt_cls(uint8_t *b, uint32_t id, uint64_t p, uint32_t spp, uint64_t rate,
			int has_class, uint32_t oui, uint16_t pcc)
{
	uint64_t s = p * spp;
	struct pdma_vrt_packet v = { .type = 1, .tsi = 1, .tsf = 1, .count = (uint8_t)(p & 15),
				     .flags = has_class ? PDMA_VRT_F_CLASS : 0, .oui = oui, .icc = 1,
				     .pcc = pcc, .stream_id = id, .ts_int = (uint32_t)(s / rate),
				     .ts_frac = s % rate };
	int n = pdma_vrt_build(&v, NULL, spp * 4, b, SLOT);
	for (uint32_t i = 0; i < spp; i++)
		pdma_vrt_put32(b + v.payload_off + 4 * i, pdma_gen_sample(id, s + i));
	return n;
}

/* Stream identity: a data packet whose class ID differs from the one its
 * stream's first data packet carried is refused and counted (class_mismatch,
 * and malformed by reason), never placed among the stream's samples; context
 * packets carry their own class. Before, such packets were merged. */
static void test_class_mismatch(void **state)
{
	struct pdma_dfr_config c;
	struct pdma_dfr d;
	struct pdma_ring r;
	uint8_t b[SLOT];
	const uint32_t spp = 16, A = 0x123456;
	uint64_t i = 0;
	(void)state;

	cfg_small(&c);
	assert_int_equal(pdma_dfr_init(&d, &c), 0);
	assert_int_equal(pdma_ring_init(&r, 32, SLOT, PDMA_RING_FULL), 0);
#define PUT(...) put_slot(&r, i++, b, (uint32_t)data_pkt_cls(b, __VA_ARGS__))
	PUT(0x55, 100, spp, c.sample_rate, 1, A, 1);      /* claims class (A, 1, 1) */
	PUT(0x55, 101, spp, c.sample_rate, 1, A, 1);
	PUT(0x55, 102, spp, c.sample_rate, 1, A, 2);      /* other packet class code */
	PUT(0x55, 103, spp, c.sample_rate, 0, 0, 0);      /* no class ID at all */
	PUT(0x55, 104, spp, c.sample_rate, 1, A, 1);
	PUT(0x55, 105, spp, c.sample_rate, 1, A ^ 1, 1);  /* other OUI */
	PUT(0x56, 7, spp, c.sample_rate, 0, 0, 0);        /* claims "no class ID" */
	PUT(0x56, 8, spp, c.sample_rate, 1, A, 1);
	PUT(0x56, 9, spp, c.sample_rate, 0, 0, 0);
#undef PUT
	/* A context packet of stream 0x55 with its own packet class code. */
	uint8_t pay[4];
	pdma_vrt_put32(pay, 0);
	struct pdma_vrt_packet v = { .type = PDMA_VRT_CONTEXT, .flags = PDMA_VRT_F_CLASS, .tsi = 1,
				     .tsf = 1, .stream_id = 0x55, .oui = A, .icc = 1, .pcc = 2 };
	put_slot(&r, i++, b, (uint32_t)pdma_vrt_build(&v, pay, sizeof(pay), b, SLOT));
	pdma_dfr_process(&d, &r, 0, (uint32_t)i);

	assert_int_equal(d.acct.malformed_by_code[PDMA_DFR_E_CLASS_CHANGE], 4);
	struct pdma_stream_stats s;
	assert_true(pdma_acct_stream(&d.acct, 0, &s));
	assert_int_equal(s.stream_id, 0x55);
	assert_int_equal(s.received, 3);                  /* 100, 101, 104 */
	assert_int_equal(s.class_mismatch, 3);
	assert_int_equal(s.malformed, 3);
	assert_int_equal(s.context, 1);
	assert_int_equal(s.lost, 2);                      /* 102, 103: never good */
	for (uint64_t p = 100; p <= 105; p++)
		assert_int_equal(d.t.tags[p % c.out_pkts], (p == 102 || p == 103 || p == 105) ? 0 : p + 1);
	assert_true(pdma_acct_stream(&d.acct, 1, &s));
	assert_int_equal(s.stream_id, 0x56);
	assert_int_equal(s.received, 2);
	assert_int_equal(s.class_mismatch, 1);
	assert_int_equal(d.t.tags[c.out_pkts + 8], 0);
	assert_int_equal(d.placed, 5);
	assert_string_equal(pdma_dfr_strerror(-PDMA_DFR_E_CLASS_CHANGE), "class ID differs from the stream's");
	pdma_ring_fini(&r);
	pdma_dfr_fini(&d);
}

/* Each malformed form is counted under its reason, attributed to its stream
 * when the stream ID is readable, and never placed. */
static void test_malformed_accounting(void **state)
{
	struct pdma_dfr_config c;
	struct pdma_dfr d;
	struct pdma_ring r;
	uint8_t b[SLOT];
	int n;
	uint64_t i = 0;
	(void)state;

	cfg_small(&c);
	c.max_streams = 2;
	assert_int_equal(pdma_dfr_init(&d, &c), 0);
	assert_int_equal(pdma_ring_init(&r, 32, SLOT, PDMA_RING_FULL), 0);
	n = data_pkt(b, 7, 10, 16, c.sample_rate);
	put_slot(&r, i++, b, (uint32_t)n);                /* good: stream 7 -> index 0 */
	put_slot(&r, i++, b, (uint32_t)n - 4);            /* truncated */
	b[0] = 0x61;
	put_slot(&r, i++, b, (uint32_t)n);                /* command packet */
	b[0] = 0x91;
	put_slot(&r, i++, b, (uint32_t)n);                /* reserved type: not attributable */
	n = data_pkt(b, 7, 11, 16, c.sample_rate);
	b[1] = (uint8_t)((b[1] & 0xcf) | 0x20);           /* TSF = picoseconds */
	put_slot(&r, i++, b, (uint32_t)n);
	n = data_pkt(b, 7, 12, 8, c.sample_rate);         /* payload size changes */
	put_slot(&r, i++, b, (uint32_t)n);
	n = data_pkt(b, 8, 12, 16, c.sample_rate);        /* good: stream 8 -> index 1 */
	put_slot(&r, i++, b, (uint32_t)n);
	n = data_pkt(b, 8, 13, 16, c.sample_rate);
	pdma_vrt_put32(b + 16, 3);                        /* sample count not on a packet boundary */
	put_slot(&r, i++, b, (uint32_t)n);
	n = data_pkt(b, 9, 13, 16, c.sample_rate);        /* third stream: table full */
	put_slot(&r, i++, b, (uint32_t)n);
	n = data_pkt(b, 7, 14, 16, c.sample_rate);
	pdma_vrt_put32(b + 12, 0);
	pdma_vrt_put32(b + 16, (uint32_t)c.sample_rate);  /* frac == rate */
	put_slot(&r, i++, b, (uint32_t)n);
	n = data_pkt(b, 7, 15, 300, c.sample_rate);       /* 1200 > max_payload */
	put_slot(&r, i++, b, (uint32_t)n);
	struct pdma_vrt_packet v = { .type = 0, .tsi = 1, .tsf = 1 };
	n = pdma_vrt_build(&v, NULL, 64, b, SLOT);        /* no stream ID */
	put_slot(&r, i++, b, (uint32_t)n);
	v.type = 1;
	v.tsf = 0;
	v.stream_id = 7;
	n = pdma_vrt_build(&v, NULL, 64, b, SLOT);        /* no sample count */
	put_slot(&r, i++, b, (uint32_t)n);
	put_slot(&r, i++, b, 0);                          /* empty */
	pdma_dfr_process(&d, &r, 0, (uint32_t)i);

	const uint64_t *m = d.acct.malformed_by_code;
	assert_int_equal(m[PDMA_VRT_E_TRUNCATED], 1);
	assert_int_equal(m[PDMA_VRT_E_COMMAND], 1);
	assert_int_equal(m[PDMA_VRT_E_TYPE], 1);
	assert_int_equal(m[PDMA_VRT_E_PICOSECONDS], 0); /* TSF=2 below 10^12 is valid VRT ... */
	assert_int_equal(m[PDMA_DFR_E_NO_TS], 2);       /* ... but not a sample count; + tsf 0 */
	assert_int_equal(m[PDMA_DFR_E_SIZE_CHANGE], 1);
	assert_int_equal(m[PDMA_DFR_E_MISALIGNED], 1);
	assert_int_equal(m[PDMA_DFR_E_TABLE_FULL], 1);
	assert_int_equal(m[PDMA_DFR_E_FRAC_RANGE], 1);
	assert_int_equal(m[PDMA_DFR_E_OVERSIZE], 1);
	assert_int_equal(m[PDMA_DFR_E_NO_SID], 1);
	assert_int_equal(m[PDMA_DFR_E_EMPTY], 1);
	struct pdma_stream_stats s;
	assert_true(pdma_acct_stream(&d.acct, 0, &s));
	assert_int_equal(s.stream_id, 7);
	assert_int_equal(s.received, 1);
	assert_int_equal(s.malformed, 7); /* trunc, cmd, TSF=2, size, frac, oversize, TSF=0 */
	assert_true(pdma_acct_stream(&d.acct, 1, &s));
	assert_int_equal(s.stream_id, 8);
	assert_int_equal(s.received, 1);
	assert_int_equal(s.malformed, 1);
	/* reserved type, table full (stream 9), no SID, empty */
	assert_int_equal(d.acct.malformed_unattributed, 4);
	assert_int_equal(d.placed, 2);
	pdma_ring_fini(&r);
	pdma_dfr_fini(&d);
}

/* Packets older than the window are "late", not guessed at; a jump of more
 * than the window is all loss. */
static void test_window(void **state)
{
	struct pdma_acct a;
	struct pdma_dfr_desc d = { .stream = 0, .status = PDMA_DFR_ST_DATA, .stream_id = 1 };
	struct pdma_stream_stats s;
	(void)state;

	assert_int_equal(pdma_acct_init(&a, 1), 0);
	assert_false(pdma_acct_stream(&a, 0, &s));
	assert_false(pdma_acct_stream(&a, 1, &s));
	d.pkt = 5;
	d.count = 5 | 0x10;
	pdma_acct_add(&a, &d, 100);
	d.pkt = 5 + PDMA_ACCT_WINDOW + 10;
	d.count = (uint8_t)((d.pkt & 15) | 0x10);
	pdma_acct_add(&a, &d, 100);
	d.pkt = 6; /* behind the window */
	d.count = 6 | 0x10;
	pdma_acct_add(&a, &d, 100);
	d.pkt = 5 + PDMA_ACCT_WINDOW + 9; /* inside: reordered */
	d.count = (uint8_t)((d.pkt & 15) | 0x10);
	pdma_acct_add(&a, &d, 100);
	pdma_acct_add(&a, &d, 100); /* and its duplicate */
	d.pkt = 5 + PDMA_ACCT_WINDOW + 11;
	d.count = (uint8_t)(((d.pkt + 1) & 15) | 0x10); /* wrong 4-bit count for this index */
	pdma_acct_add(&a, &d, 100);
	assert_true(pdma_acct_stream(&a, 0, &s));
	assert_int_equal(s.received, 4);
	assert_int_equal(s.late, 1);
	assert_int_equal(s.reordered, 1);
	assert_int_equal(s.duplicated, 1);
	assert_int_equal(s.count_errors, 1);
	assert_int_equal(s.lost, PDMA_ACCT_WINDOW + 12 - 4);
	pdma_acct_fini(&a);
}

static void test_gen(void **state)
{
	struct pdma_gen_config c;
	struct pdma_gen *g, *h;
	uint8_t b[SLOT], b2[SLOT];
	uint32_t si, sj;
	int n, m;
	(void)state;

	pdma_gen_config_default(&c);
	c.packet_size = 1022;
	assert_int_equal(pdma_gen_open(&c, &g), -EINVAL);
	c.packet_size = 32; /* no payload left */
	assert_int_equal(pdma_gen_open(&c, &g), -EINVAL);
	c.packet_size = 1024;
	c.loss_pm = 600;
	c.dup_pm = 401;
	assert_int_equal(pdma_gen_open(&c, &g), -EINVAL);
	c.loss_pm = 50;
	c.dup_pm = 50;
	c.reorder_pm = 50;
	c.packets = 500;
	c.streams = 3;
	/* Deterministic: two generators with one seed emit identical bytes. */
	assert_int_equal(pdma_gen_open(&c, &g), 0);
	assert_int_equal(pdma_gen_open(&c, &h), 0);
	uint64_t total = 0, ctx = 0;
	while ((n = pdma_gen_next(g, b, sizeof(b), &si)) > 0) {
		m = pdma_gen_next(h, b2, sizeof(b2), &sj);
		assert_int_equal(n, m);
		assert_int_equal(si, sj);
		assert_memory_equal(b, b2, (size_t)n);
		struct pdma_vrt_packet v;
		assert_int_equal(pdma_vrt_parse(b, (size_t)n, PDMA_VRT_EXACT, &v), n);
		assert_int_equal(v.stream_id, c.stream_id_base + si);
		if (v.type == PDMA_VRT_CONTEXT) {
			ctx++;
			/* sample rate, 64-bit with the radix point at bit 20 */
			assert_true(pdma_vrt_get64(b + v.ctx_off[31 - 21]) == c.sample_rate << 20);
			continue;
		}
		assert_int_equal(n, 1024);
		total++;
	}
	assert_int_equal(n, 0);
	assert_int_equal(pdma_gen_next(h, b2, sizeof(b2), &sj), 0);
	assert_int_equal(ctx, 3);
	uint64_t sent = 0;
	for (uint32_t i = 0; i < 3; i++) {
		const struct pdma_gen_inject *in = pdma_gen_injected(g, i);
		assert_true(in->lost > 0 && in->duplicated > 0 && in->reordered > 0);
		assert_int_equal(in->sent, c.packets - in->lost + in->duplicated);
		sent += in->sent;
	}
	assert_int_equal(sent, total);
	assert_null(pdma_gen_injected(g, 3));
	assert_int_equal(pdma_gen_next(g, b, 100, &si), 0); /* finished stays finished */
	pdma_gen_close(g);
	pdma_gen_close(h);

	/* Too small an output buffer is an error, not a truncated packet. */
	c.loss_pm = c.dup_pm = c.reorder_pm = 0;
	c.context = false;
	assert_int_equal(pdma_gen_open(&c, &g), 0);
	assert_int_equal(pdma_gen_next(g, b, 1000, &si), -EMSGSIZE);
	pdma_gen_close(g);
}

/* A stop (pdma_gen_finish) after any number of datagrams: the streams send
 * what their events in progress owe (at most one datagram each) and end,
 * and the deframer's accounting of what was sent equals the generator's
 * counts exactly, at every stop point. Frequent events, so that stops land
 * between a duplicate's copies and inside swaps. */
static void test_gen_finish(void **state)
{
	struct pdma_gen_config gc;
	struct pdma_dfr_config c;
	uint8_t b[SLOT];
	uint32_t si;
	int n;
	(void)state;

	cfg_small(&c);
	pdma_gen_config_default(&gc);
	gc.streams = 2;
	gc.packets = 200;
	gc.packet_size = 256;
	gc.sample_rate = c.sample_rate;
	gc.loss_pm = 100;
	gc.loss_burst = 3;
	gc.dup_pm = 200;
	gc.reorder_pm = 200;
	uint64_t owed_total = 0;
	for (uint32_t stop = 0; stop < 240; stop++) {
		struct pdma_gen *g;
		struct pdma_dfr d;
		struct pdma_ring r;
		uint64_t i = 0;

		assert_int_equal(pdma_gen_open(&gc, &g), 0);
		assert_int_equal(pdma_dfr_init(&d, &c), 0);
		assert_int_equal(pdma_ring_init(&r, 512, SLOT, PDMA_RING_FULL), 0);
		for (; i < stop && (n = pdma_gen_next(g, b, sizeof(b), &si)) > 0; i++)
			put_slot(&r, i, b, (uint32_t)n);
		assert_true(pdma_gen_complete(g)); /* nothing cut yet */
		pdma_gen_finish(g);
		assert_false(pdma_gen_complete(g)); /* every stop here is before the end */
		uint64_t owed = 0;
		while ((n = pdma_gen_next(g, b, sizeof(b), &si)) > 0) {
			put_slot(&r, i++, b, (uint32_t)n);
			owed++;
		}
		assert_int_equal(n, 0);
		assert_true(owed <= gc.streams);
		owed_total += owed;
		pdma_dfr_process(&d, &r, 0, i);
		for (uint32_t k = 0; k < gc.streams; k++) {
			const struct pdma_gen_inject *in = pdma_gen_injected(g, k);
			struct pdma_stream_stats st;
			bool seen = false;

			for (uint32_t a = 0; pdma_acct_stream(&d.acct, a, &st); a++)
				if (st.stream_id == gc.stream_id_base + k) {
					seen = true;
					break;
				}
			if (!in->sent) {
				assert_false(seen && st.received);
				continue;
			}
			assert_true(seen);
			assert_int_equal(st.received, in->sent - in->duplicated);
			assert_int_equal(st.lost, in->lost);
			assert_int_equal(st.duplicated, in->duplicated);
			assert_int_equal(st.reordered, in->reordered);
		}
		pdma_ring_fini(&r);
		pdma_dfr_fini(&d);
		pdma_gen_close(g);
	}
	/* the stops did land inside events */
	assert_true(owed_total > 10);

	/* A stop after the last packet cuts nothing. */
	struct pdma_gen *g;
	assert_int_equal(pdma_gen_open(&gc, &g), 0);
	while ((n = pdma_gen_next(g, b, sizeof(b), &si)) > 0)
		;
	assert_int_equal(n, 0);
	pdma_gen_finish(g);
	assert_true(pdma_gen_complete(g));
	assert_int_equal(pdma_gen_next(g, b, sizeof(b), &si), 0);
	pdma_gen_close(g);
}

/* The header stage's fast path (the GPU's) against the general path: every
 * data packet the generator makes (sizes, with and without trailer) takes the
 * fast path with the same result; context packets and each malformed variant
 * of a good packet are left to the general path (fast path returns 0). */
static int fast_vs_general(const struct pdma_dfr_config *c, const uint8_t *slot, uint32_t slot_size)
{
	struct pdma_dfr_pre pre;
	struct pdma_dfr_desc d, fd, nd = { 0 };
	struct pdma_dfr_pkt r = { 0 }, fr, nr = { 0 };
	uint32_t tr_off = 1;
	int st = pdma_dfr_header(c, slot, slot_size, &d, &r);
	pdma_dfr_prefix(slot, slot_size, 0, &pre);
	/* Without the trailer (the fast path's first half): what it accepts, the
	 * general path calls DATA when the trailer passes and a trailer error
	 * otherwise, with the same packet fields as the fast path. */
	int nt = pdma_dfr_header_fast_nt(c, slot_size, &pre, &nd, &nr, &tr_off);
	int fast = pdma_dfr_header_fast(c, slot, slot_size, &pre, &fd, &fr);
	if (nt) {
		bool tok = !tr_off || pdma_vrt_trailer_ok(pdma_vrt_get32(slot + tr_off));
		assert_int_equal(tr_off, (pre.h >> 26) & 1u ? pre.off + pre.len - 4 : 0);
		assert_int_equal(fast, tok);
		assert_int_equal(st, tok ? PDMA_DFR_ST_DATA : -PDMA_VRT_E_TRAILER);
		assert_int_equal(nd.stream_id, d.stream_id);
		assert_int_equal(nd.count, d.count);
		if (tok)
			assert_true(nd.pkt == d.pkt && nr.pkt == r.pkt && nr.payload_len == r.payload_len);
	} else {
		assert_int_equal(fast, 0);
	}
	if (!fast)
		return 0;
	assert_int_equal(st, PDMA_DFR_ST_DATA);
	assert_true(fd.pkt == d.pkt && fr.pkt == r.pkt);
	assert_int_equal(fd.stream_id, d.stream_id);
	assert_int_equal(fd.stream, d.stream);
	assert_int_equal(fd.count, d.count);
	assert_int_equal(fr.payload_off, r.payload_off);
	assert_int_equal(fr.payload_len, r.payload_len);
	return 1;
}

/* The fast path's division (double quotient, integer correction) against
 * 64-bit integer division: at multiples of d and one either side, near 2^53,
 * for divisors from 1 to 2^32 - 1, and on pseudo-random values. */
static void test_divmod53(void **state)
{
	static const uint32_t ds[] = { 1, 2, 3, 7, 248, 249, 367, 1000, 65537, (1u << 18) - 1, 10000000,
				       2147483647u, 4294967295u };
	const uint64_t top = (1ull << 53) - 1;
	uint64_t x = 88172645463325252ull;
	(void)state;
	for (size_t k = 0; k < sizeof(ds) / sizeof(ds[0]); k++) {
		const uint32_t d = ds[k];
		uint64_t xs[12] = { 0, 1, d - 1u, d, (uint64_t)d + 1, top, top - 1, top / d * d, top / d * d - 1,
				    (top / d - 1) * d + 1, (uint64_t)d * 40322u + 247u, (uint64_t)d * 40322u };
		for (int i = 0; i < 12 + 20000; i++) {
			uint64_t v;
			uint32_t r;
			if (i < 12) {
				v = xs[i] & top;
			} else {
				x ^= x << 13;
				x ^= x >> 7;
				x ^= x << 17;
				v = (x >> (11 + (i & 31))) & top; /* all magnitudes */
			}
			const uint64_t q = pdma_dfr_divmod53(v, d, &r);
			assert_true(q == v / d);
			assert_int_equal(r, v % d);
		}
	}
}

static void test_header_fast(void **state)
{
	static const uint32_t sizes[] = { 64, 256, 1024, 1500, 8192 };
	static uint8_t slot[PDMA_SLOT_HDR + 8192 + 64];
	struct pdma_dfr_config c;
	(void)state;

	pdma_dfr_config_default(&c);
	c.max_payload = 8192;
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		for (int tr = 0; tr < 2; tr++) {
			struct pdma_gen_config gc;
			struct pdma_gen *g;
			uint32_t si;
			int n, data = 0, ctx = 0;
			pdma_gen_config_default(&gc);
			gc.packet_size = sizes[k];
			gc.trailer = tr;
			gc.packets = 20;
			gc.streams = 2;
			c.sample_rate = gc.sample_rate;
			assert_int_equal(pdma_gen_open(&gc, &g), 0);
			while ((n = pdma_gen_next(g, slot + PDMA_SLOT_HDR, sizeof(slot) - PDMA_SLOT_HDR, &si)) > 0) {
				struct pdma_slot_hdr *h = (struct pdma_slot_hdr *)slot;
				const uint32_t ss = (PDMA_SLOT_HDR + (uint32_t)n + 63u) & ~63u;
				h->len = (uint32_t)n;
				h->flags = 0;
				if (slot[PDMA_SLOT_HDR] >> 4 == PDMA_VRT_CONTEXT) {
					assert_int_equal(fast_vs_general(&c, slot, ss), 0);
					ctx++;
					continue;
				}
				assert_int_equal(fast_vs_general(&c, slot, ss), 1);
				pdma_slot_finish(slot, PDMA_SLOT_HDR, (uint32_t)n, 0, 0); /* with the copy of the last word */
				assert_int_equal(h->flags, PDMA_SLOT_TAIL);
				assert_int_equal(fast_vs_general(&c, slot, ss), 1);
				h->flags = 0;
				data++;
				/* Malformed or other forms: never the fast path. Each
				 * mutation is undone before the next. */
				h->flags = PDMA_SLOT_TRUNC;
				assert_int_equal(fast_vs_general(&c, slot, ss), 0);
				h->flags = 0;
				h->len = (uint32_t)n - 4;
				assert_int_equal(fast_vs_general(&c, slot, ss), 0);
				h->len = (uint32_t)n;
				assert_int_equal(fast_vs_general(&c, slot, (uint32_t)n + PDMA_SLOT_HDR - 4), 0);
				/* Header bits 20-31 (TSF, TSI, S, 49.2, type): the fast
				 * path declines all but TSI 3 (other), the 49.2 bit and
				 * type 3 (extension data), which stay valid and fast.
				 * T (26) and C (27) move fields: agreement only. */
				for (int bit = 20; bit < 32; bit++) {
					slot[PDMA_SLOT_HDR + 3 - bit / 8] ^= (uint8_t)(1u << (bit % 8));
					int f = fast_vs_general(&c, slot, ss);
					slot[PDMA_SLOT_HDR + 3 - bit / 8] ^= (uint8_t)(1u << (bit % 8));
					if (bit != 26 && bit != 27)
						assert_int_equal(f, bit == 23 || bit == 25 || bit == 29);
				}
				slot[PDMA_SLOT_HDR] ^= 0x08; /* C clear: another form */
				assert_int_equal(fast_vs_general(&c, slot, ss), 0);
				slot[PDMA_SLOT_HDR] ^= 0x08;
				slot[PDMA_SLOT_HDR + 8] ^= 0x80; /* class ID reserved bit */
				assert_int_equal(fast_vs_general(&c, slot, ss), 0);
				slot[PDMA_SLOT_HDR + 8] ^= 0x80;
				uint8_t was = slot[PDMA_SLOT_HDR + 20];
				slot[PDMA_SLOT_HDR + 20] = 0xff; /* fractional >= rate */
				assert_int_equal(fast_vs_general(&c, slot, ss), 0);
				slot[PDMA_SLOT_HDR + 20] = was;
				if (tr) {
					slot[PDMA_SLOT_HDR + n - 1] ^= 0x01; /* count without E */
					assert_int_equal(fast_vs_general(&c, slot, ss), 0);
					slot[PDMA_SLOT_HDR + n - 1] ^= 0x01;
					/* Every trailer bit: fast iff the trailer passes
					 * (indicators 19-8 need enables 31-20, the count E),
					 * and the deferred form agrees (checked inside). */
					for (int bit = 0; bit < 32; bit++) {
						uint8_t *tb = slot + PDMA_SLOT_HDR + n - 1 - bit / 8;
						*tb ^= (uint8_t)(1u << (bit % 8));
						uint32_t t = pdma_vrt_get32(slot + PDMA_SLOT_HDR + n - 4);
						bool ok = !((t >> 8) & 0xfffu & ~(t >> 20)) &&
							  ((t & PDMA_VRT_TR_E) || !(t & 0x7fu));
						assert_int_equal(fast_vs_general(&c, slot, ss), ok);
						pdma_slot_finish(slot, PDMA_SLOT_HDR, (uint32_t)n, 0, 0);
						assert_int_equal(fast_vs_general(&c, slot, ss), ok);
						h->flags = 0;
						*tb ^= (uint8_t)(1u << (bit % 8));
					}
					/* With PDMA_SLOT_TAIL the fast path takes the
					 * trailer from the slot header's copy (what the
					 * GPU's header pass relies on to skip the read):
					 * a copy that passes is trusted over bytes that
					 * fail, the producer's promise; without the flag
					 * the bytes decide. */
					struct pdma_dfr_pre pre;
					struct pdma_dfr_desc fd;
					struct pdma_dfr_pkt fr;
					pdma_slot_finish(slot, PDMA_SLOT_HDR, (uint32_t)n, 0, 0);
					slot[PDMA_SLOT_HDR + n - 1] ^= 0x01;
					pdma_dfr_prefix(slot, ss, 0, &pre);
					assert_int_equal(pdma_dfr_header_fast(&c, slot, ss, &pre, &fd, &fr), 1);
					h->flags = 0;
					pdma_dfr_prefix(slot, ss, 0, &pre);
					assert_int_equal(pdma_dfr_header_fast(&c, slot, ss, &pre, &fd, &fr), 0);
					slot[PDMA_SLOT_HDR + n - 1] ^= 0x01;
				}
				assert_int_equal(fast_vs_general(&c, slot, ss), 1);
			}
			assert_int_equal(n, 0);
			assert_int_equal(data, 40);
			assert_int_equal(ctx, gc.context ? 2 : 0);
			pdma_gen_close(g);
		}
	}
}

static void test_pcap(void **state)
{
	struct pdma_gen_config c;
	struct pdma_gen *g;
	char *buf = NULL;
	size_t len = 0;
	(void)state;

	pdma_gen_config_default(&c);
	c.streams = 2;
	c.packets = 5;
	c.packet_size = 256;
	assert_int_equal(pdma_gen_open(&c, &g), 0);
	FILE *f = open_memstream(&buf, &len);
	assert_int_equal(pdma_gen_write_pcap(g, f, "127.0.0.1", 4991, NULL), 0);
	fclose(f);
	/* 24-byte file header, then 12 records (2 context + 10 data). */
	uint32_t magic;
	memcpy(&magic, buf, 4);
	assert_int_equal(magic, 0xa1b2c3d4u);
	size_t off = 24, recs = 0;
	while (off < len) {
		uint32_t cap;
		memcpy(&cap, buf + off + 8, 4);
		const uint8_t *eth = (const uint8_t *)buf + off + 16;
		assert_int_equal(eth[12], 0x08);
		assert_int_equal(eth[23], 17);                   /* UDP */
		assert_int_equal(eth[36] << 8 | eth[37], 4991);  /* dst port */
		struct pdma_vrt_packet v;
		assert_int_equal(pdma_vrt_parse(eth + 42, cap - 42, PDMA_VRT_EXACT, &v), (int)cap - 42);
		off += 16 + cap;
		recs++;
	}
	assert_int_equal(off, len);
	assert_int_equal(recs, 12);
	free(buf);
	pdma_gen_close(g);
	f = fopen("/dev/null", "w");
	assert_int_equal(pdma_gen_open(&c, &g), 0);
	assert_int_equal(pdma_gen_write_pcap(g, f, "not-an-ip", 4991, NULL), -EINVAL);
	fclose(f);
	pdma_gen_close(g);
}

static void test_ring(void **state)
{
	struct pdma_ring r;
	uint8_t mem[4096];
	(void)state;
	assert_int_equal(pdma_ring_init(&r, 0, 2048, PDMA_RING_FULL), -EINVAL);
	assert_int_equal(pdma_ring_init(&r, 8, 16, PDMA_RING_FULL), -EINVAL);
	assert_int_equal(pdma_ring_init(&r, 5, 1000, PDMA_RING_FULL), 0);
	assert_int_equal(r.nslots, 8);
	assert_int_equal(r.slot_size, 1024);
	assert_ptr_equal(pdma_ring_slot(&r, 9), r.base + 1024);
	assert_int_equal(pdma_ring_register(&r, NULL, 0), -EINVAL);
	pdma_ring_fini(&r);
	assert_int_equal(pdma_ring_init_external(&r, mem, sizeof(mem), 1000, PDMA_RING_FULL), 0);
	assert_int_equal(r.nslots, 4);
	pdma_ring_fini(&r);
	assert_int_equal(pdma_ring_init_external(&r, NULL, sizeof(mem), 1000, PDMA_RING_FULL), -EINVAL);
	struct pdma_dfr_config c;
	struct pdma_dfr d;
	cfg_small(&c);
	c.max_payload = 1022;
	assert_int_equal(pdma_dfr_init(&d, &c), -EINVAL);
}

/* The CPU deframer on a ring of layout (slots sized to size-byte packets,
 * the datagram at off) against a full ring with the same traffic: what
 * pdma_slot_finish writes (flags want; with PDMA_SLOT_TAIL the copy of the
 * last word; the datagram intact), equal results (placed samples, tags,
 * descriptors' accounting), the fast path taking every data packet, and a
 * datagram longer than the slot refused. */
static void layout_vs_full(enum pdma_ring_layout layout, uint32_t off, uint32_t size, uint16_t want)
{
	struct pdma_dfr_config c;
	struct pdma_dfr df, dp;
	struct pdma_gen_config gc;
	struct pdma_gen *g;
	struct pdma_ring rf, rp;
	uint8_t b[SLOT];
	uint32_t si, n = 0;
	int len, fast = 0, data = 0;

	pdma_gen_config_default(&gc);
	gc.packet_size = size;
	gc.trailer = true;
	gc.packets = 100;
	gc.streams = 2;
	gc.loss_pm = 30;
	gc.dup_pm = 30;
	gc.reorder_pm = 30;
	cfg_small(&c);
	c.sample_rate = gc.sample_rate;
	c.out_pkts = 256;
	assert_int_equal(pdma_gen_open(&gc, &g), 0);
	assert_int_equal(pdma_ring_init(&rf, 512, PDMA_SLOT_HDR + size, PDMA_RING_FULL), 0);
	assert_int_equal(pdma_ring_init(&rp, 512, off + size, layout), 0);
	assert_int_equal(rp.dgram_off, off);
	assert_true(rp.slot_size < rf.slot_size);
	while ((len = pdma_gen_next(g, b, sizeof(b), &si)) > 0) {
		uint8_t *sf = pdma_ring_slot(&rf, n), *sp = pdma_ring_slot(&rp, n);
		const struct pdma_slot_hdr *h = (const struct pdma_slot_hdr *)sp;

		assert_true(n < 512);
		assert_true((uint32_t)len <= pdma_ring_room(&rp));
		memcpy(sf + PDMA_SLOT_HDR, b, (size_t)len);
		pdma_slot_finish(sf, PDMA_SLOT_HDR, (uint32_t)len, 0, n);
		memcpy(pdma_ring_dgram(&rp, n), b, (size_t)len);
		pdma_slot_finish(sp, rp.dgram_off, (uint32_t)len, 0, n);
		assert_int_equal(h->len, len);
		assert_int_equal(h->flags, want);
		if (want & PDMA_SLOT_TAIL)
			assert_memory_equal(&h->tail, b + len - 4, 4);
		assert_memory_equal(sp + off, b, (size_t)len);
		fast += fast_vs_general(&c, sp, rp.slot_size);
		data += b[0] >> 4 != PDMA_VRT_CONTEXT;
		n++;
	}
	pdma_gen_close(g);
	assert_int_equal(fast, data); /* every data packet */
	assert_true(data > 150);
	assert_int_equal(pdma_dfr_init(&df, &c), 0);
	assert_int_equal(pdma_dfr_init(&dp, &c), 0);
	pdma_dfr_process(&df, &rf, 0, n);
	pdma_dfr_process(&dp, &rp, 0, n);
	assert_true(df.placed > 150);
	assert_int_equal(dp.placed, df.placed);
	assert_memory_equal(dp.t.tags, df.t.tags, (size_t)c.max_streams * c.out_pkts * sizeof(uint64_t));
	assert_memory_equal(pdma_dfr_out(&dp, 0), pdma_dfr_out(&df, 0),
			    (size_t)c.max_streams * c.out_pkts * c.max_payload);
	for (uint32_t s = 0; s < 2; s++) {
		struct pdma_stream_stats a, e;
		assert_true(pdma_acct_stream(&df.acct, s, &e));
		assert_true(pdma_acct_stream(&dp.acct, s, &a));
		assert_memory_equal(&a, &e, sizeof(a));
	}

	/* More than the slot holds: truncated, refused. */
	uint8_t *sp = pdma_ring_slot(&rp, 0);
	struct pdma_dfr_desc d;
	pdma_slot_finish(sp, rp.dgram_off, pdma_ring_room(&rp), 1, 0);
	assert_int_equal(((const struct pdma_slot_hdr *)sp)->flags, (want & ~PDMA_SLOT_TAIL) | PDMA_SLOT_TRUNC);
	assert_int_equal(pdma_dfr_cpu_slot(&c, &dp.t, sp, rp.slot_size, &d), 0);
	assert_int_equal(d.status, -PDMA_DFR_E_SLOT_TRUNC);
	pdma_dfr_fini(&df);
	pdma_dfr_fini(&dp);
	pdma_ring_fini(&rf);
	pdma_ring_fini(&rp);
}

/* Packed slots (deframe.h): the ring's geometry, then layout_vs_full with
 * the header's tail copy at 64-, 256- and 1024-byte packets. */
static void test_packed_slots(void **state)
{
	struct pdma_ring rp;
	(void)state;

	assert_int_equal(pdma_ring_init(&rp, 8, 20, PDMA_RING_PACKED), -EINVAL);
	assert_int_equal(pdma_ring_init(&rp, 8, 84, PDMA_RING_PACKED), 0);
	assert_int_equal(rp.slot_size, 96); /* 16-byte rounding, not 64 */
	assert_int_equal(rp.dgram_off, PDMA_SLOT_HDR_PACKED);
	assert_int_equal(pdma_ring_room(&rp), 76);
	assert_ptr_equal(pdma_ring_dgram(&rp, 9), rp.base + 96 + 20);
	pdma_ring_fini(&rp);
	assert_int_equal(pdma_ring_init(&rp, 8, 100, (enum pdma_ring_layout)7), -EINVAL);
	layout_vs_full(PDMA_RING_PACKED, PDMA_SLOT_HDR_PACKED, 64, PDMA_SLOT_PACKED | PDMA_SLOT_TAIL);
	layout_vs_full(PDMA_RING_PACKED, PDMA_SLOT_HDR_PACKED, 256, PDMA_SLOT_PACKED | PDMA_SLOT_TAIL);
	layout_vs_full(PDMA_RING_PACKED, PDMA_SLOT_HDR_PACKED, 1024, PDMA_SLOT_PACKED | PDMA_SLOT_TAIL);
}

/* Tiny slots (deframe.h): the ring's geometry (every slot 80 bytes, the
 * datagram at byte 4, 76 bytes of room), a header of len and flags alone
 * (pdma_slot_finish writes nothing past byte 4: no tail copy, no rx_seq),
 * then layout_vs_full at 64- and 76-byte packets (the fast path reads the
 * trailer from the datagram). */
static void test_tiny_slots(void **state)
{
	struct pdma_ring rt;
	uint8_t ref[PDMA_SLOT_TINY_MAX];
	(void)state;

	assert_int_equal(pdma_ring_init(&rt, 8, PDMA_SLOT_HDR_TINY, PDMA_RING_TINY), -EINVAL);
	assert_int_equal(pdma_ring_init(&rt, 8, 81, PDMA_RING_TINY), -EINVAL);
	assert_int_equal(pdma_ring_init(&rt, 8, 68, PDMA_RING_TINY), 0);
	assert_int_equal(rt.slot_size, 80); /* a tiny slot is 80 bytes or nothing */
	assert_int_equal(rt.dgram_off, PDMA_SLOT_HDR_TINY);
	assert_int_equal(pdma_ring_room(&rt), 76);
	assert_ptr_equal(pdma_ring_dgram(&rt, 9), rt.base + 80 + 4); /* slot 9 of 8 is slot 1 */
	uint8_t *s0 = pdma_ring_slot(&rt, 0);
	for (uint32_t k = 0; k < sizeof(ref); k++)
		s0[k] = ref[k] = (uint8_t)(k * 7 + 1);
	pdma_slot_finish(s0, rt.dgram_off, 76, 0, 99);
	assert_int_equal(((const struct pdma_slot_hdr *)s0)->len, 76);
	assert_int_equal(((const struct pdma_slot_hdr *)s0)->flags, PDMA_SLOT_TINY);
	assert_memory_equal(s0 + 4, ref + 4, sizeof(ref) - 4);
	pdma_ring_fini(&rt);
	layout_vs_full(PDMA_RING_TINY, PDMA_SLOT_HDR_TINY, 64, PDMA_SLOT_TINY);
	layout_vs_full(PDMA_RING_TINY, PDMA_SLOT_HDR_TINY, 76, PDMA_SLOT_TINY);
}

/* Two generators interleaved into ring r (1056-byte packets on streams
 * 0..3, 288-byte ones without a trailer on 0x2000..), as receive threads
 * write them; then corrupt headers: a length 4 short, the truncated flag,
 * and (every 150th) a length longer than the slot. Returns the count. */
static uint32_t fill_mixed(struct pdma_ring *r)
{
	struct pdma_gen_config a, b;

	pdma_gen_config_default(&a);
	a.streams = 4;
	a.packets = 100;
	a.packet_size = 1056;
	a.loss_pm = 20;
	a.dup_pm = 20;
	a.reorder_pm = 20;
	b = a;
	b.streams = 3;
	b.stream_id_base = 0x2000;
	b.packet_size = 288;
	b.trailer = false;
	b.seed = 5;
	const uint32_t n = gen_ring_fill2(r, &a, &b, true);
	for (uint32_t k = 10; k < n; k += 50) {
		struct pdma_slot_hdr *h = (struct pdma_slot_hdr *)pdma_ring_slot(r, k);
		switch ((k / 50) % 3) {
		case 0: h->len = (uint16_t)(h->len - 4); break;
		case 1: h->flags |= PDMA_SLOT_TRUNC; break;
		case 2: h->len = (uint16_t)r->slot_size; break;
		}
	}
	return n;
}

/* The CPU deframer over n slots of ring r: descriptors to desc, tables in d. */
static void deframe_slots(struct pdma_dfr *d, const struct pdma_dfr_config *c, const struct pdma_ring *r, uint32_t n,
			  struct pdma_dfr_desc *desc)
{
	assert_int_equal(pdma_dfr_init(d, c), 0);
	for (uint32_t i = 0; i < n; i++)
		pdma_dfr_cpu_slot(c, &d->t, pdma_ring_slot(r, i), r->slot_size, &desc[i]);
}

/* pdma_slots_span's promise, on which host-staged batches copy only the
 * first span bytes of each slot: the deframer gives the same verdicts,
 * tables and output over those bytes in span-sized slots as over the whole
 * slots, corrupt headers included; 64 bytes less truncates the longest
 * datagrams. Then its bounds: at least 128 bytes, at most the slot, and a
 * header claiming more than its slot adds nothing. */
static void test_slots_span(void **state)
{
	struct pdma_ring r, rs;
	struct pdma_dfr_config c;
	struct pdma_dfr dw, ds;
	(void)state;

	assert_int_equal(pdma_ring_init(&r, 1024, 9216, PDMA_RING_FULL), 0);
	const uint32_t n = fill_mixed(&r);
	const uint32_t span = pdma_slots_span(r.base, r.slot_size, n);
	assert_int_equal(span, 1152); /* 36 + 1056, rounded up to 64 */
	cfg_small(&c);
	c.max_streams = 8;
	c.max_payload = 1056;
	struct pdma_dfr_desc *dwd = calloc(n, sizeof(*dwd)), *dsd = calloc(n, sizeof(*dsd));
	assert_non_null(dwd);
	assert_non_null(dsd);
	/* The reference: the whole slots. */
	deframe_slots(&dw, &c, &r, n, dwd);
	uint32_t data = 0, trunc = 0;
	for (uint32_t i = 0; i < n; i++) {
		data += dwd[i].status == PDMA_DFR_ST_DATA;
		trunc += dwd[i].status == -PDMA_DFR_E_SLOT_TRUNC;
	}
	assert_true(data > 300);
	assert_true(trunc >= 8); /* both the flag and the too-long headers */
	for (uint32_t cut = 0; cut <= 64; cut += 64) {
		assert_int_equal(pdma_ring_init(&rs, n, span - cut, PDMA_RING_FULL), 0);
		assert_int_equal(rs.slot_size, span - cut);
		for (uint32_t i = 0; i < n; i++)
			memcpy(pdma_ring_slot(&rs, i), pdma_ring_slot(&r, i), rs.slot_size);
		deframe_slots(&ds, &c, &rs, n, dsd);
		uint32_t differ = 0;
		for (uint32_t i = 0; i < n; i++)
			differ += memcmp(&dwd[i], &dsd[i], sizeof(dwd[i])) != 0;
		if (cut) {
			assert_true(differ > 200); /* the 1056-byte datagrams no longer fit */
		} else {
			assert_int_equal(differ, 0);
			assert_memory_equal(ds.t.keys, dw.t.keys, c.max_streams * sizeof(uint64_t));
			assert_memory_equal(ds.t.tags, dw.t.tags, (size_t)c.max_streams * c.out_pkts * sizeof(uint64_t));
			assert_memory_equal(pdma_dfr_out(&ds, 0), pdma_dfr_out(&dw, 0),
					    (size_t)c.max_streams * c.out_pkts * c.max_payload);
		}
		pdma_dfr_fini(&ds);
		pdma_ring_fini(&rs);
	}
	pdma_dfr_fini(&dw);
	free(dwd);
	free(dsd);

	/* Bounds. */
	assert_int_equal(pdma_slots_span(r.base, r.slot_size, 0), 128);
	uint8_t *s0 = pdma_ring_slot(&r, 0), *s1 = pdma_ring_slot(&r, 1);
	pdma_slot_finish(s0, PDMA_SLOT_HDR, 1024, 0, 0);
	pdma_slot_finish(s1, PDMA_SLOT_HDR, 8, 0, 1);
	assert_int_equal(pdma_slots_span(r.base, r.slot_size, 2), 1088);
	assert_int_equal(pdma_slots_span(s1, r.slot_size, 1), 128);
	((struct pdma_slot_hdr *)s1)->len = 9216 - PDMA_SLOT_HDR + 1;
	assert_int_equal(pdma_slots_span(r.base, r.slot_size, 2), 1088);
	((struct pdma_slot_hdr *)s1)->len = 9216 - PDMA_SLOT_HDR;
	assert_int_equal(pdma_slots_span(r.base, r.slot_size, 2), 9216);
	pdma_ring_fini(&r);
	assert_int_equal(pdma_ring_init(&r, 4, 84, PDMA_RING_PACKED), 0);
	pdma_slot_finish(pdma_ring_slot(&r, 0), PDMA_SLOT_HDR_PACKED, 64, 0, 0);
	assert_int_equal(pdma_slots_span(r.base, r.slot_size, 1), 96); /* the slot: never more */
	pdma_ring_fini(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_deframe_and_account),
		cmocka_unit_test(test_malformed_accounting),
		cmocka_unit_test(test_class_mismatch),
		cmocka_unit_test(test_window),
		cmocka_unit_test(test_gen),
		cmocka_unit_test(test_gen_finish),
		cmocka_unit_test(test_divmod53),
		cmocka_unit_test(test_header_fast),
		cmocka_unit_test(test_pcap),
		cmocka_unit_test(test_ring),
		cmocka_unit_test(test_packed_slots),
		cmocka_unit_test(test_tiny_slots),
		cmocka_unit_test(test_slots_span),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
