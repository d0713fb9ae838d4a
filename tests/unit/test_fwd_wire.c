// SPDX-License-Identifier: MIT
/* The forwarding protocol's messages (ingest/forward/wire.c): a block's
 * metadata round-trips exactly (what a remote consumer sees is what a local
 * one does); the byte layout is fixed, little-endian (checked by hand, not by
 * the decoder); every malformed or truncated message and another version is
 * refused, never half-read. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "forward/wire.h"

static struct pdma_block sample_block(uint64_t *mask, uint32_t npackets)
{
	struct pdma_block b = {
		.stream_id = 0x1002, .format = PDMA_FMT_CI16, .bytes_per_sample = 4,
		.samples_per_packet = 248, .first_sample = 123456789012ull, .ts_int = 12345,
		.ts_frac = 6789012, .nsamples = (uint64_t)npackets * 248, .npackets = npackets,
		.seq = 1929012, .mem = PDMA_BLOCK_CUDA, .ctx_fields = PDMA_CTX_SAMPLE_RATE |
		PDMA_CTX_RF_FREQ, .ctx_sample_rate = 1e7, .ctx_rf_freq = 2.4e9 + 0.5,
		.ctx_bandwidth = 0, .gap_mask = mask,
	};
	uint32_t gaps = 0;

	for (uint32_t i = 0; i < npackets; i++)
		if (i % 7 == 3 || i == npackets - 1) {
			mask[i / 64] |= 1ull << (i % 64);
			gaps++;
		}
	b.gaps = gaps;
	return b;
}

static void test_block_round_trip(void **state)
{
	uint64_t mask[2] = { 0 }, got_mask[2];
	struct pdma_block b = sample_block(mask, 100), g;
	uint8_t buf[512];
	size_t n;

	(void)state;
	n = pdma_fwd_block_put(buf, &b);
	assert_int_equal(n, pdma_fwd_block_hdr_len(100));
	assert_int_equal(n, 96 + 16);
	memset(&g, 0xee, sizeof(g));
	assert_int_equal(pdma_fwd_block_get(buf, n, 128, 8192, &g, got_mask), 0);
	assert_int_equal(g.stream_id, b.stream_id);
	assert_int_equal(g.samples_per_packet, b.samples_per_packet);
	assert_true(g.first_sample == b.first_sample && g.ts_int == b.ts_int && g.ts_frac == b.ts_frac);
	assert_true(g.nsamples == b.nsamples && g.npackets == b.npackets && g.seq == b.seq);
	assert_int_equal(g.gaps, b.gaps);
	assert_int_equal(g.ctx_fields, b.ctx_fields);
	assert_true(g.ctx_sample_rate == b.ctx_sample_rate && g.ctx_rf_freq == b.ctx_rf_freq);
	assert_int_equal(g.mem, PDMA_BLOCK_CUDA);
	assert_ptr_equal(g.gap_mask, got_mask);
	assert_memory_equal(got_mask, mask, sizeof(mask));
}

/* The layout by hand: a peer built from DESIGN.md's table reads the same. */
static void test_block_layout(void **state)
{
	uint64_t mask[1] = { 0 };
	struct pdma_block b = sample_block(mask, 8);
	uint8_t buf[256];
	uint64_t v;

	(void)state;
	pdma_fwd_block_put(buf, &b);
	assert_memory_equal(buf, "\x02\x10\x00\x00", 4);          /* stream ID, LE */
	assert_memory_equal(buf + 12, "\xf8\x00\x00\x00", 4);     /* samples per packet */
	memcpy(&v, buf + 16, 8);
	assert_true(v == 123456789012ull);                        /* first sample */
	assert_memory_equal(buf + 48, "\x08\x00\x00\x00", 4);     /* npackets */
	assert_memory_equal(buf + 92, "\x02\x00\x00\x00", 4);     /* memory kind */
	assert_int_equal(buf[96], (1 << 3) | (1 << 7));           /* gap mask: packets 3 and 7 */
}

static void test_block_refused(void **state)
{
	uint64_t mask[2] = { 0 }, got[2];
	struct pdma_block b = sample_block(mask, 100), g;
	uint8_t buf[512], bad[512];
	size_t n;

	(void)state;
	n = pdma_fwd_block_put(buf, &b);
	/* every truncation and one byte too many */
	for (size_t k = 0; k < n; k++)
		assert_int_equal(pdma_fwd_block_get(buf, k, 128, 8192, &g, got), -EPROTO);
	assert_int_equal(pdma_fwd_block_get(buf, n + 1, 128, 8192, &g, got), -EPROTO);
	/* more packets than the consumer's blocks, a payload larger than its
	 * buffers: refused, nothing written past them */
	assert_int_equal(pdma_fwd_block_get(buf, n, 64, 8192, &g, got), -EPROTO);
	assert_int_equal(pdma_fwd_block_get(buf, n, 128, 512, &g, got), -EPROTO);
	/* fields that do not agree */
	struct { size_t off; uint32_t v; } cases[] = {
		{ 4, 7 },          /* format */
		{ 8, 2 },          /* bytes per sample */
		{ 40, 1 },         /* nsamples low word: != npackets * spp */
		{ 52, 101 },       /* gaps > npackets */
		{ 52, 3 },         /* gaps != the mask's bits */
		{ 92, 9 },         /* memory kind */
		{ 48, 0 },         /* no packets */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		memcpy(bad, buf, n);
		memcpy(bad + cases[i].off, &cases[i].v, 4);
		assert_int_equal(pdma_fwd_block_get(bad, n, 128, 8192, &g, got), -EPROTO);
	}
	/* mask bits past npackets do not count (and are cleared) */
	memcpy(bad, buf, n);
	bad[96 + 15] |= 0x80; /* bit 127 */
	assert_int_equal(pdma_fwd_block_get(bad, n, 128, 8192, &g, got), 0);
	assert_true((got[1] >> 36) == 0);
}

static void test_hello(void **state)
{
	struct pdma_fwd_hello h = { .version = PDMA_FWD_VERSION, .credits = 16, .nstreams = 2,
				    .streams = { 0x1000, 0x1001 } }, g;
	uint8_t buf[PDMA_FWD_HELLO_FIXED + 4 * PDMA_FWD_MAX_SUBS];
	size_t n;

	(void)state;
	strcpy(h.name, "node-a");
	n = pdma_fwd_hello_put(buf, &h);
	assert_int_equal(n, PDMA_FWD_HELLO_FIXED + 8);
	assert_int_equal(pdma_fwd_hello_get(buf, n, &g), 0);
	assert_string_equal(g.name, "node-a");
	assert_int_equal(g.nstreams, 2);
	assert_int_equal(g.streams[1], 0x1001);
	assert_int_equal(g.credits, 16);
	for (size_t k = 0; k < n; k++)
		assert_int_equal(pdma_fwd_hello_get(buf, k, &g), -EPROTO);
	/* another version: said as such, whatever follows */
	h.version = 2;
	n = pdma_fwd_hello_put(buf, &h);
	assert_int_equal(pdma_fwd_hello_get(buf, 8, &g), -EPROTONOSUPPORT);
	assert_int_equal(g.version, 2);
	h.version = PDMA_FWD_VERSION;
	/* a name the forwarder would print: printable, not empty */
	strcpy(h.name, "a\x1b[2Jb");
	n = pdma_fwd_hello_put(buf, &h);
	assert_int_equal(pdma_fwd_hello_get(buf, n, &g), -EPROTO);
	h.name[0] = 0;
	n = pdma_fwd_hello_put(buf, &h);
	assert_int_equal(pdma_fwd_hello_get(buf, n, &g), -EPROTO);
	/* a stream count past the header */
	strcpy(h.name, "x");
	n = pdma_fwd_hello_put(buf, &h);
	uint32_t many = PDMA_FWD_MAX_SUBS + 1;
	memcpy(buf + PDMA_FWD_HELLO_FIXED - 4, &many, 4);
	assert_int_equal(pdma_fwd_hello_get(buf, n, &g), -EPROTO);
	/* bad magic */
	n = pdma_fwd_hello_put(buf, &h);
	buf[0] ^= 1;
	assert_int_equal(pdma_fwd_hello_get(buf, n, &g), -EPROTO);
}

static void test_welcome_credit_end(void **state)
{
	struct pdma_fwd_welcome w = { .version = 1, .status = 0, .block_packets = 64,
				      .max_payload = 8192, .sample_rate = 10000000 }, gw;
	struct pdma_fwd_end e = { 5, 320 }, ge;
	uint8_t buf[256];
	uint32_t c;
	size_t n;

	(void)state;
	strcpy(w.msg, "welcome");
	n = pdma_fwd_welcome_put(buf, &w);
	assert_int_equal(pdma_fwd_welcome_get(buf, n, &gw), 0);
	assert_true(gw.block_packets == 64 && gw.max_payload == 8192 && gw.sample_rate == 10000000);
	assert_int_equal(pdma_fwd_welcome_get(buf, n - 1, &gw), -EPROTO);
	w.max_payload = 8190; /* not whole samples */
	n = pdma_fwd_welcome_put(buf, &w);
	assert_int_equal(pdma_fwd_welcome_get(buf, n, &gw), -EPROTO);
	/* a refusal carries no geometry, only its reason */
	w = (struct pdma_fwd_welcome){ .version = 1, .status = -EPROTONOSUPPORT };
	strcpy(w.msg, "protocol version 2 refused");
	n = pdma_fwd_welcome_put(buf, &w);
	assert_int_equal(pdma_fwd_welcome_get(buf, n, &gw), 0);
	assert_int_equal(gw.status, -EPROTONOSUPPORT);
	assert_string_equal(gw.msg, "protocol version 2 refused");
	/* a WELCOME of another version is not read past its version (wire.h),
	 * whatever its length */
	w.version = 2;
	n = pdma_fwd_welcome_put(buf, &w);
	assert_int_equal(pdma_fwd_welcome_get(buf, n, &gw), -EPROTONOSUPPORT);
	assert_int_equal(gw.version, 2);
	assert_int_equal(pdma_fwd_welcome_get(buf, 8, &gw), -EPROTONOSUPPORT);
	assert_int_equal(pdma_fwd_welcome_get(buf, 7, &gw), -EPROTO);

	n = pdma_fwd_credit_put(buf, 12);
	assert_int_equal(pdma_fwd_credit_get(buf, n, &c), 0);
	assert_int_equal(c, 12);
	assert_int_equal(pdma_fwd_credit_get(buf, n - 1, &c), -EPROTO);
	n = pdma_fwd_credit_put(buf, 0);
	assert_int_equal(pdma_fwd_credit_get(buf, n, &c), -EPROTO);

	n = pdma_fwd_end_put(buf, &e);
	assert_int_equal(pdma_fwd_end_get(buf, n, &ge), 0);
	assert_true(ge.dropped_blocks == 5 && ge.dropped_packets == 320);
	assert_int_equal(pdma_fwd_end_get(buf, n + 1, &ge), -EPROTO);
}

/* Random bytes never decode as a block that overruns its buffers. */
static void test_random_bytes(void **state)
{
	uint8_t buf[512];
	uint64_t got[2];
	struct pdma_block g;
	struct pdma_fwd_hello h;
	unsigned long long x = 88172645463325252ull;

	(void)state;
	for (int r = 0; r < 20000; r++) {
		size_t n = (size_t)(x % sizeof(buf));

		for (size_t i = 0; i < sizeof(buf); i++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			buf[i] = (uint8_t)x;
		}
		if (pdma_fwd_block_get(buf, n, 128, 8192, &g, got) == 0) {
			assert_true(g.npackets <= 128 && g.samples_per_packet * 4ull <= 8192);
			assert_true(g.nsamples == (uint64_t)g.npackets * g.samples_per_packet);
		}
		if (pdma_fwd_hello_get(buf, n, &h) == 0)
			assert_true(h.nstreams <= PDMA_FWD_MAX_SUBS && h.name[0]);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_block_round_trip), cmocka_unit_test(test_block_layout),
		cmocka_unit_test(test_block_refused),    cmocka_unit_test(test_hello),
		cmocka_unit_test(test_welcome_credit_end), cmocka_unit_test(test_random_bytes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
