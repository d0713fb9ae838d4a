// SPDX-License-Identifier: MIT
/* Frame rings in the CPU deframer (ingest/deframe/frame.h): Ethernet/IPv4/UDP
 * frames at buffer starts, every malformed kind counted under its reason,
 * checksums checked unless the NIC did, and the datagrams deframed exactly
 * as the slot path deframes the same datagrams (tables, output, accounting). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "deframe/deframe_cpu.h"
#include "deframe/frame_acct.h"
#include "gen/eth.h"
#include "support/frame_ring.h"

#define PORT 4991

static void cfg_dfr(struct pdma_dfr_config *c)
{
	pdma_dfr_config_default(c);
	c->max_streams = 8;
	c->out_pkts = 256;
	c->max_payload = 2048;
}

static void cfg_gen(struct pdma_gen_config *g, uint64_t seed)
{
	pdma_gen_config_default(g);
	g->streams = 3;
	g->packets = 300;
	g->packet_size = 1024;
	g->loss_pm = 20;
	g->dup_pm = 20;
	g->reorder_pm = 20;
	g->seed = seed;
}

/* Same tables, output and per-stream numbers. */
static void assert_same(const struct pdma_dfr *a, const struct pdma_dfr *b)
{
	const struct pdma_dfr_config *c = &a->cfg;
	size_t ns = c->max_streams, tags = ns * c->out_pkts;

	assert_memory_equal(a->t.keys, b->t.keys, ns * sizeof(uint64_t));
	assert_memory_equal(a->t.plen, b->t.plen, ns * sizeof(uint32_t));
	assert_memory_equal(a->t.cls, b->t.cls, ns * sizeof(uint64_t));
	assert_memory_equal(a->t.tags, b->t.tags, tags * sizeof(uint64_t));
	assert_memory_equal(a->t.out, b->t.out, tags * c->max_payload);
	assert_int_equal(a->placed, b->placed);
	assert_int_equal(a->acct.malformed_unattributed, b->acct.malformed_unattributed);
	assert_memory_equal(a->acct.malformed_by_code, b->acct.malformed_by_code, sizeof(a->acct.malformed_by_code));
	for (uint32_t i = 0; i < ns; i++) {
		struct pdma_stream_stats x, y;
		assert_int_equal(pdma_acct_stream(&a->acct, i, &x), pdma_acct_stream(&b->acct, i, &y));
		assert_memory_equal(&x, &y, sizeof(x));
	}
}

/* The generator's frames with every malformed kind inserted: the frame path
 * equals the slot path over the good frames' datagrams, and each kind is
 * counted under its reason exactly as often as it was injected. */
static void test_frames_equal_slots(void **state)
{
	struct pdma_dfr_config c;
	struct pdma_gen_config gc;
	struct pdma_dfr fd, sd;
	struct frame_ring r;
	const struct pdma_frm_cfg fc = { 0, PORT, 0 };
	(void)state;

	cfg_dfr(&c);
	cfg_gen(&gc, 7);
	assert_int_equal(frame_ring_build(&r, &gc, PORT, 5), 0);
	assert_int_equal(pdma_dfr_init(&fd, &c), 0);
	assert_int_equal(pdma_dfr_init(&sd, &c), 0);
	pdma_dfr_process_frames(&fd, &fc, r.base, r.fr, r.n);
	pdma_dfr_process(&sd, &r.slots, 0, r.good);
	assert_same(&fd, &sd);
	assert_true(fd.placed > 800);
	assert_int_equal(fd.frames.frames, r.n);
	assert_int_equal(fd.frames.datagrams, r.good);
	assert_int_equal(r.good / 5, r.n - r.good);
	for (int k = 1; k < PDMA_FRM_E__MAX; k++) {
		assert_true(r.injected[k] >= r.good / 5 / PDMA_ETH_MALFORMED_KINDS);
		assert_int_equal(fd.frames.skipped[k], r.injected[k]);
		assert_non_null(pdma_frm_reason_name(k));
	}
	assert_int_equal(pdma_frm_skipped_total(&fd.frames), r.n - r.good);
	/* Nothing skipped reached the stream accounting. */
	assert_int_equal(fd.acct.packets, r.good);
	pdma_dfr_fini(&fd);
	pdma_dfr_fini(&sd);
	frame_ring_fini(&r);
}

/* One good frame of the generator (datagram 1024 bytes) into f. */
static uint32_t one_frame(uint8_t *f, uint32_t cap)
{
	struct pdma_gen_config gc;
	struct pdma_frame *fr;
	struct frame_ring r;

	cfg_gen(&gc, 1);
	gc.packets = 2;
	gc.context = false;
	assert_int_equal(frame_ring_build(&r, &gc, PORT, 0), 0);
	fr = &r.fr[0];
	assert_true(fr->len <= cap);
	memcpy(f, r.base + fr->off, fr->len);
	uint32_t n = fr->len;
	frame_ring_fini(&r);
	return n;
}

/* Deframe one frame: its reason (0: a datagram, data placed). */
static int classify(const uint8_t *f, uint32_t len, uint8_t flags)
{
	struct pdma_dfr_config c;
	struct pdma_dfr d;
	const struct pdma_frm_cfg fc = { 0, PORT, 0 };
	struct pdma_frame fr = { 0, (uint16_t)len, flags, 0 };
	int why = -1;

	cfg_dfr(&c);
	assert_int_equal(pdma_dfr_init(&d, &c), 0);
	pdma_dfr_process_frames(&d, &fc, f, &fr, 1);
	assert_int_equal(d.frames.frames, 1);
	if (d.frames.datagrams == 1) {
		assert_int_equal(d.placed, 1);
		why = 0;
	}
	for (int k = 1; k < PDMA_FRM_E__MAX; k++)
		if (d.frames.skipped[k]) {
			assert_int_equal(why, -1);
			assert_int_equal(d.frames.skipped[k], 1);
			assert_int_equal(d.acct.packets, 0);
			why = k;
		}
	pdma_dfr_fini(&d);
	return why;
}

static void put16(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

/* Every kind by hand, the NIC's checksum flags, VLAN tags, FCS and MAC
 * padding. */
static void test_frame_kinds(void **state)
{
	static uint8_t good[PDMA_ETH_OVERSIZE_LEN + 64], f[PDMA_ETH_OVERSIZE_LEN + 64];
	uint32_t n = one_frame(good, sizeof(good));
	(void)state;

	assert_int_equal(n, 1024 + PDMA_ETH_HDRS);
	assert_int_equal(classify(good, n, 0), 0);
	/* Each malformed kind, built as gen builds it. */
	for (uint32_t k = 0; k < PDMA_ETH_MALFORMED_KINDS; k++) {
		int why = pdma_eth_malformed_kind[k];
		memcpy(f, good, n);
		int m = pdma_eth_malform(f, n, sizeof(f), why);
		assert_true(m > 0);
		assert_int_equal(classify(f, (uint32_t)m, 0), why);
	}
	/* A runt padded by the MAC to 60 bytes (and 64 with an FCS): still a runt. */
	memcpy(f, good, 34);
	memset(f + 34, 0, 30);
	assert_int_equal(classify(f, 60, 0), PDMA_FRM_E_RUNT);
	assert_int_equal(classify(f, 64, 0), PDMA_FRM_E_RUNT);
	assert_int_equal(classify(f, 13, 0), PDMA_FRM_E_RUNT);
	assert_int_equal(classify(f, 41, 0), PDMA_FRM_E_RUNT);
	/* FCS (or any bytes) after the IP datagram: tolerated. */
	memcpy(f, good, n);
	memset(f + n, 0xee, 4);
	assert_int_equal(classify(f, n + 4, 0), 0);
	/* One 802.1Q tag: accepted; two: not IPv4 after the first. */
	memcpy(f, good, 12);
	put16(f + 12, 0x8100);
	put16(f + 14, 0x0005);
	memcpy(f + 16, good + 12, n - 12);
	assert_int_equal(classify(f, n + 4, 0), 0);
	assert_int_equal(classify(f, 17, 0), PDMA_FRM_E_RUNT);
	put16(f + 16, 0x8100);
	assert_int_equal(classify(f, n + 4, 0), PDMA_FRM_E_ETHERTYPE);
	/* IHL < 5; IHL 6 (an option word) with lengths to match is fine. */
	memcpy(f, good, n);
	f[14] = 0x44;
	assert_int_equal(classify(f, n, 0), PDMA_FRM_E_IP_HDR);
	/* IP total length below header + UDP. */
	memcpy(f, good, n);
	put16(f + 16, 27);
	assert_int_equal(classify(f, n, PDMA_NIC_CQE_IPCS), PDMA_FRM_E_IP_LEN);
	/* A fragment offset without MF (a last fragment). */
	memcpy(f, good, n);
	put16(f + 20, 0x0010);
	assert_int_equal(classify(f, n, PDMA_NIC_CQE_IPCS), PDMA_FRM_E_FRAGMENT);
	/* UDP length < 8. */
	memcpy(f, good, n);
	put16(f + 38, 7);
	assert_int_equal(classify(f, n, 0), PDMA_FRM_E_UDP_LEN);
	/* Oversize against a configured limit. */
	{
		struct pdma_dfr_config c;
		struct pdma_dfr d;
		const struct pdma_frm_cfg fc = { 1000, PORT, 0 };
		struct pdma_frame fr = { 0, (uint16_t)n, 0, 0 };
		cfg_dfr(&c);
		assert_int_equal(pdma_dfr_init(&d, &c), 0);
		pdma_dfr_process_frames(&d, &fc, good, &fr, 1);
		assert_int_equal(d.frames.skipped[PDMA_FRM_E_OVERSIZE], 1);
		pdma_dfr_fini(&d);
	}
	/* Checksums: a bad IP checksum passes when the NIC verified it
	 * (IPCS), is counted when the NIC also flags an error; the same for
	 * UDP (L4CS). A UDP checksum of 0 means none. */
	memcpy(f, good, n);
	f[25] ^= 1;
	assert_int_equal(classify(f, n, 0), PDMA_FRM_E_IP_CSUM);
	assert_int_equal(classify(f, n, PDMA_NIC_CQE_L4CS), PDMA_FRM_E_IP_CSUM);
	assert_int_equal(classify(f, n, PDMA_NIC_CQE_IPCS), 0);
	assert_int_equal(classify(f, n, PDMA_NIC_CQE_IPCS | PDMA_NIC_CQE_ERR), PDMA_FRM_E_IP_CSUM);
	memcpy(f, good, n);
	f[n - 8] ^= 0x10; /* a sample byte (the last word is the trailer) */
	assert_int_equal(classify(f, n, 0), PDMA_FRM_E_UDP_CSUM);
	assert_int_equal(classify(f, n, PDMA_NIC_CQE_IPCS), PDMA_FRM_E_UDP_CSUM);
	assert_int_equal(classify(f, n, PDMA_NIC_CQE_L4CS | PDMA_NIC_CQE_EOP), 0);
	assert_int_equal(classify(f, n, PDMA_NIC_CQE_L4CS | PDMA_NIC_CQE_ERR), PDMA_FRM_E_UDP_CSUM);
	put16(f + 40, 0);
	assert_int_equal(classify(f, n, 0), 0);
	/* An odd-length datagram's checksum: padded with a zero byte. */
	{
		struct pdma_eth_addr a = { { 1 }, { 2 }, 0x01020304, 0x05060708, 9, PORT };
		memset(f, 0, 64);
		memcpy(f + PDMA_ETH_HDRS, "abc", 3);
		int m = pdma_eth_frame(f, &a, 3, 1, 1);
		assert_int_equal(m, 45);
		assert_int_equal(pdma_frm_fold(pdma_frm_sum(f + 26, 8, 17u + 11u) +
					       pdma_frm_sum(f + 34, 11, 0)), 0xffff);
		/* A datagram that is not VITA-49: counted by the stream
		 * accounting as malformed (as a slot's), not as a frame. */
		struct pdma_dfr_config c;
		struct pdma_dfr d;
		const struct pdma_frm_cfg fc = { 0, PORT, 0 };
		struct pdma_frame fr = { 0, 60, 0, 0 };
		cfg_dfr(&c);
		assert_int_equal(pdma_dfr_init(&d, &c), 0);
		pdma_dfr_process_frames(&d, &fc, f, &fr, 1);
		assert_int_equal(d.frames.datagrams, 1);
		assert_int_equal(d.acct.packets, 1);
		assert_int_equal(d.acct.malformed_unattributed, 1);
		pdma_dfr_fini(&d);
	}
}

/* The datagram fast path (the GPU's) agrees with the general path on every
 * datagram of a generator run, with and without trailers, and on damaged
 * ones. */
static void test_dgram_fast(void **state)
{
	struct pdma_dfr_config c;
	struct pdma_gen_config gc;
	struct frame_ring r;
	const struct pdma_frm_cfg fc = { 0, PORT, 0 };
	uint32_t fast = 0;
	(void)state;

	cfg_dfr(&c);
	for (int tr = 0; tr < 2; tr++) {
		cfg_gen(&gc, 3);
		gc.trailer = tr;
		gc.packets = 50;
		assert_int_equal(frame_ring_build(&r, &gc, PORT, 0), 0);
		for (uint32_t i = 0; i < r.n; i++) {
			uint8_t *f = r.base + r.fr[i].off;
			for (int dmg = 0; dmg < 3; dmg++) {
				struct pdma_dfr_desc d, d2;
				struct pdma_dfr_pkt p = { 0 }, p2 = { 0 };
				struct pdma_vrt_packet v;
				uint32_t off = 0;
				if (dmg == 1)
					f[r.fr[i].len - 1] ^= 0xff; /* the trailer (or a sample) */
				if (dmg == 2)
					f[PDMA_ETH_HDRS + 3] ^= 1;  /* the size field */
				int st = pdma_dfr_frame_v(&c, &fc, f, r.fr[i].len, PDMA_NIC_CQE_IPCS | PDMA_NIC_CQE_L4CS,
							  &d, &p, &v, &off);
				assert_int_equal(off, PDMA_ETH_HDRS);
				if (pdma_dfr_dgram_fast(&c, f + off, r.fr[i].len - off, &d2, &p2)) {
					fast++;
					assert_int_equal(st, PDMA_DFR_ST_DATA);
					assert_int_equal(d.pkt, d2.pkt);
					assert_int_equal(d.stream_id, d2.stream_id);
					assert_int_equal(d.count, d2.count);
					assert_int_equal(p.payload_off, p2.payload_off + off);
					assert_int_equal(p.payload_len, p2.payload_len);
					assert_int_equal(p.cls, p2.cls);
				}
				if (dmg == 2)
					f[PDMA_ETH_HDRS + 3] ^= 1;
			}
		}
		frame_ring_fini(&r);
	}
	assert_true(fast >= 2 * 150);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_frames_equal_slots),
		cmocka_unit_test(test_frame_kinds),
		cmocka_unit_test(test_dgram_fast),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
