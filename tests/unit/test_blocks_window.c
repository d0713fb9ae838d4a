// SPDX-License-Identifier: MIT
/* The block layer (ingest/blocks/) driven by hand-made descriptors over a
 * small window, one thread, no network: publication points, gaps, late
 * packets, a packet overwriting an unpublished one (counted at once), a jump
 * far past the window (only blocks the window still holds packets of are
 * published), and the exact sum: placed = in blocks + window_drops + late;
 * and pdma_sub_arm's wake-up (the forwarder sleeps in poll on it). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <cmocka.h>

#include "blocks/blocks.h"

#define B 4u      /* packets a block */
#define OUT 16u   /* window positions */
#define PLEN 8u   /* payload bytes: 2 samples */
#define SID 0x77u

static struct {
	struct pdma_dfr_config cfg;
	uint8_t *win;
	struct pdma_blocks *bl;
	struct pdma_sub *sub;
	uint64_t placed;
	uint64_t tag[OUT];  /* the deframer's tags for stream 0 */
} W;

static int setup(void **state)
{
	struct pdma_sub_attr sa;
	(void)state;

	memset(&W, 0, sizeof(W));
	W.cfg = (struct pdma_dfr_config){ .max_streams = 2, .out_pkts = OUT, .max_payload = PLEN,
					  .bytes_per_sample = 4, .sample_rate = 1000 };
	W.win = calloc((size_t)W.cfg.max_streams * OUT, PLEN);
	assert_non_null(W.win);
	assert_int_equal(pdma_blocks_open(&W.bl, &W.cfg, B, 1, 64, W.win, NULL), 0);
	pdma_sub_attr_init(&sa);
	sa.depth = 64;
	assert_int_equal(pdma_blocks_subscribe(W.bl, &sa, &W.sub), 0);
	pdma_blocks_start(W.bl, true);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	pdma_sub_close(W.sub);
	pdma_blocks_close(W.bl, NULL, NULL);
	free(W.win);
	return 0;
}

/* What the deframer does for packet p (it wrote p when its position held
 * something older), then the observer. The payload: p's two samples as
 * big-endian words (p, p) so a block shows which packet it holds. */
static void packet(uint64_t p)
{
	uint8_t *dst = W.win + (p % OUT) * PLEN;
	struct pdma_dfr_desc d = { .pkt = p, .stream_id = SID, .stream = 0, .status = PDMA_DFR_ST_DATA,
				   .count = 0x10 };
	if (W.tag[p % OUT] >= p + 1) {
		d.status = PDMA_DFR_ST_DATA_OLD;
	} else {
		W.tag[p % OUT] = p + 1;
		for (int i = 0; i < 2; i++) {
			dst[4 * i] = (uint8_t)(p >> 8);
			dst[4 * i + 1] = (uint8_t)p;
			dst[4 * i + 2] = 0;
			dst[4 * i + 3] = 1;
		}
		W.placed++;
	}
	pdma_blocks_observe(W.bl, &d, PLEN, NULL, 0);
}

/* The next block: [first, first + n) with the gap packets in gaps. */
static void expect_block(uint64_t first, uint32_t n, uint64_t gaps)
{
	struct pdma_block *b;

	assert_int_equal(pdma_sub_next(W.sub, &b, 0), 0);
	assert_int_equal(b->first_sample, first * 2);
	assert_int_equal(b->npackets, n);
	assert_int_equal(b->gap_mask[0], gaps);
	const int16_t *iq = b->data;
	for (uint32_t i = 0; i < n; i++) {
		int gap = (gaps >> i) & 1;
		assert_int_equal(iq[4 * i], gap ? 0 : (int16_t)(first + i)); /* host order: I */
		assert_int_equal(iq[4 * i + 1], gap ? 0 : 1);
	}
	pdma_block_release(b);
}

static void expect_none(void)
{
	struct pdma_block *b;

	assert_int_equal(pdma_sub_next(W.sub, &b, 0), -ETIMEDOUT);
}

static uint64_t stat_sum(void)
{
	struct pdma_ingest_stats s = { 0 };

	pdma_blocks_stats(W.bl, &s);
	return s.window_drops + s.late;
}

/* A block goes out once its stream is one block (late_blocks) past it. */
static void test_window_publish_points(void **state)
{
	(void)state;
	for (uint64_t p = 100; p < 107; p++)
		packet(p);
	pdma_blocks_publish(W.bl);
	expect_none(); /* [100, 104) needs packet 107 */
	packet(107);
	pdma_blocks_publish(W.bl);
	expect_block(100, 4, 0);
	expect_none();
	packet(109); /* 108 lost */
	packet(112);
	packet(113);
	pdma_blocks_publish(W.bl);
	expect_block(104, 4, 0);
	packet(108 + 0); /* 108 after all, before [108, 112) is out */
	packet(115);
	pdma_blocks_publish(W.bl);
	expect_block(108, 4, 0x4 | 0x8); /* 110, 111 never came */
	packet(111); /* late: its block is out */
	pdma_blocks_publish_open(W.bl);
	expect_block(112, 4, 0x4); /* the idle flush ends at the newest, 115 */
	struct pdma_ingest_stats s = { 0 };
	pdma_blocks_stats(W.bl, &s);
	assert_int_equal(s.late, 1);
	assert_int_equal(s.window_drops, 0);
	assert_int_equal(s.blocks_published, 4);
	/* placed = in blocks (4 + 4 + 2 + 3) + drops + late */
	assert_int_equal(W.placed, 13 + stat_sum());
}

/* A packet a window ahead of an unpublished one overwrites it: that one
 * is counted at once, and its block shows a gap. */
static void test_window_overwrite_counted(void **state)
{
	(void)state;
	for (uint64_t p = 0; p < 3; p++)
		packet(p);
	packet(OUT + 1); /* position 1: packet 1 is lost */
	struct pdma_ingest_stats s = { 0 };
	pdma_blocks_stats(W.bl, &s);
	assert_int_equal(s.window_drops, 1);
	pdma_blocks_publish(W.bl);
	/* high 17: [0, 4) is more than a window behind? 17 + 1 - 16 = 2 < 4:
	 * published normally, with 1 and 3 as gaps */
	expect_block(0, 4, 0x2 | 0x8);
	pdma_blocks_publish_open(W.bl);
	uint64_t in_blocks = 2;
	struct pdma_block *b;
	while (pdma_sub_next(W.sub, &b, 0) == 0) {
		in_blocks += b->npackets - b->gaps;
		pdma_block_release(b);
	}
	assert_int_equal(W.placed, in_blocks + stat_sum());
}

/* A jump of a thousand windows: the blocks the window still holds packets
 * of go out (gaps where the jump overwrote), nothing in between, and the
 * stream goes on from the window's oldest block. */
static void test_window_jump(void **state)
{
	(void)state;
	for (uint64_t p = 0; p < 6; p++)
		packet(p);
	packet(16000 + 2); /* overwrites position 2: packet 2 lost */
	packet(16000 + 3);
	pdma_blocks_publish(W.bl);
	expect_block(0, 4, 0x4 | 0x8);
	expect_block(4, 4, 0x4 | 0x8); /* 6, 7 never came */
	/* then the window's blocks up to one behind the newest: from 15988 */
	uint64_t in_blocks = 4, n = 0;
	struct pdma_block *b;
	while (pdma_sub_next(W.sub, &b, 0) == 0) {
		assert_true(b->first_sample / 2 >= 16000 - OUT);
		in_blocks += b->npackets - b->gaps;
		n++;
		pdma_block_release(b);
	}
	assert_true(n <= OUT / B);
	pdma_blocks_publish_open(W.bl);
	while (pdma_sub_next(W.sub, &b, 0) == 0) {
		in_blocks += b->npackets - b->gaps;
		pdma_block_release(b);
	}
	struct pdma_ingest_stats s = { 0 };
	pdma_blocks_stats(W.bl, &s);
	assert_int_equal(s.window_drops, 2); /* packets 2 and 3 */
	assert_int_equal(W.placed, in_blocks + stat_sum());
}

static bool readable(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	uint64_t n;

	if (poll(&p, 1, 0) != 1)
		return false;
	assert_int_equal(read(fd, &n, sizeof(n)), sizeof(n));
	return true;
}

/* Armed on an empty queue, a block makes the fd readable, once; with a
 * block queued arming says so and arms nothing; the end wakes it too. */
static void test_sub_arm(void **state)
{
	int fd = eventfd(0, EFD_NONBLOCK);
	struct pdma_block *b;

	(void)state;
	assert_true(fd >= 0);
	assert_int_equal(pdma_sub_arm(W.sub, fd), 0);
	assert_false(readable(fd));
	for (uint64_t p = 0; p < 2 * B; p++)
		packet(p);
	pdma_blocks_publish(W.bl); /* block 0 out (block 1 holds it back) */
	assert_true(readable(fd));
	assert_int_equal(pdma_sub_arm(W.sub, fd), 1); /* block 0 waits */
	for (uint64_t p = 2 * B; p < 3 * B; p++)
		packet(p);
	pdma_blocks_publish(W.bl);
	assert_false(readable(fd)); /* not armed: no system call */
	while (pdma_sub_next(W.sub, &b, 0) == 0)
		pdma_block_release(b);
	assert_int_equal(pdma_sub_arm(W.sub, fd), 0);
	pdma_blocks_end_subs(W.bl);
	assert_true(readable(fd));
	assert_int_equal(pdma_sub_arm(W.sub, fd), 1); /* ended: nothing to sleep for */
	assert_false(readable(fd));
	close(fd);
}

/* A context packet of stream 0 carrying one 64-bit Hz field (radix point at
 * bit 20, VITA-49 CIF0 bit `field`). */
static void context_one(uint32_t field, double hz)
{
	uint8_t pay[12], buf[64];
	uint64_t v = (uint64_t)(hz * (1 << 20));
	struct pdma_vrt_packet p = { .type = PDMA_VRT_CONTEXT, .tsi = PDMA_VRT_TSI_UTC,
				     .tsf = PDMA_VRT_TSF_SAMPLES, .stream_id = SID };
	struct pdma_dfr_desc d = { .stream_id = SID, .stream = 0, .status = PDMA_DFR_ST_CONTEXT };

	pdma_vrt_put32(pay, field);
	pdma_vrt_put32(pay + 4, (uint32_t)(v >> 32));
	pdma_vrt_put32(pay + 8, (uint32_t)v);
	int n = pdma_vrt_build(&p, pay, sizeof(pay), buf, sizeof(buf));
	assert_true(n > 0);
	pdma_blocks_observe(W.bl, &d, 0, buf, (uint32_t)n);
}

/* ingest.h: each context field's value from the latest context packet that
 * carried it; one that leaves a field out does not forget it. */
static void test_context_fields(void **state)
{
	struct pdma_block *b;

	(void)state;
	context_one(PDMA_VRT_CIF0_SAMPLE_RATE, 5e6);
	context_one(PDMA_VRT_CIF0_RF_FREQ, 1e9);
	for (uint64_t p = 0; p < 2 * B; p++)
		packet(p);
	pdma_blocks_publish(W.bl); /* [0, B) */
	assert_int_equal(pdma_sub_next(W.sub, &b, 0), 0);
	assert_int_equal(b->ctx_fields, PDMA_CTX_SAMPLE_RATE | PDMA_CTX_RF_FREQ);
	assert_true(b->ctx_sample_rate == 5e6);
	assert_true(b->ctx_rf_freq == 1e9);
	pdma_block_release(b);
	context_one(PDMA_VRT_CIF0_SAMPLE_RATE, 2.5e6); /* a new rate, the frequency kept */
	for (uint64_t p = 2 * B; p < 3 * B; p++)
		packet(p);
	pdma_blocks_publish(W.bl); /* [B, 2B) */
	assert_int_equal(pdma_sub_next(W.sub, &b, 0), 0);
	assert_int_equal(b->ctx_fields, PDMA_CTX_SAMPLE_RATE | PDMA_CTX_RF_FREQ);
	assert_true(b->ctx_sample_rate == 2.5e6);
	assert_true(b->ctx_rf_freq == 1e9);
	pdma_block_release(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_window_publish_points, setup, teardown),
		cmocka_unit_test_setup_teardown(test_window_overwrite_counted, setup, teardown),
		cmocka_unit_test_setup_teardown(test_window_jump, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sub_arm, setup, teardown),
		cmocka_unit_test_setup_teardown(test_context_fields, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
