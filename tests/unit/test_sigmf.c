// SPDX-License-Identifier: MIT
/* The SigMF writer (ingest/sinks/sigmf.h) on blocks made here: gap packets
 * skipped with a capture after each, streams kept apart, a frequency change
 * starting a capture, the metadata's fields, datetimes, and the refusals and
 * write errors (a dataset on /dev/full). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include <jansson.h>

#include "sinks/sigmf.h"

#define SPP 8
#define NPKT 16
#define RATE 1000000

struct blk {
	struct pdma_block b;
	uint64_t mask[1];
	uint32_t s[NPKT * SPP];
};

static uint32_t word(uint32_t id, uint64_t s)
{
	return (uint32_t)(s * 2654435761u) ^ id;
}

/* Block seq of stream id, packets in gaps (a bit mask) missing. */
static void make(struct blk *k, uint32_t id, uint64_t seq, uint64_t gaps)
{
	memset(k, 0, sizeof(*k));
	k->b.stream_id = id;
	k->b.format = PDMA_FMT_CI16;
	k->b.bytes_per_sample = 4;
	k->b.samples_per_packet = SPP;
	k->b.npackets = NPKT;
	k->b.nsamples = NPKT * SPP;
	k->b.first_sample = 5ull * RATE + seq * NPKT * SPP; /* 5 s after the epoch */
	k->b.seq = seq;
	k->b.mem = PDMA_BLOCK_HOST;
	k->b.data = k->s;
	k->b.gap_mask = k->mask;
	k->mask[0] = gaps;
	k->b.ctx_fields = PDMA_CTX_SAMPLE_RATE;
	k->b.ctx_sample_rate = 2e6;
	for (uint32_t i = 0; i < NPKT * SPP; i++)
		k->s[i] = (gaps >> (i / SPP) & 1) ? 0 : word(id, k->b.first_sample + i);
}

static char dir[] = "/tmp/test_sigmf.XXXXXX";

static char *path(uint32_t id, const char *ext)
{
	static char p[256];

	snprintf(p, sizeof(p), "%s/t-0x%x.%s", dir, id, ext);
	return p;
}

static json_t *meta(uint32_t id)
{
	json_error_t e;
	json_t *m = json_load_file(path(id, "sigmf-meta"), 0, &e);

	assert_non_null(m);
	return m;
}

static uint64_t cap_field(json_t *m, size_t i, const char *k)
{
	json_t *c = json_array_get(json_object_get(m, "captures"), i);

	assert_non_null(json_object_get(c, k));
	return (uint64_t)json_integer_value(json_object_get(c, k));
}

static struct pdma_sigmf *open_w(void)
{
	struct pdma_sigmf_attr a = { .dir = dir, .prefix = "t", .sample_rate = RATE,
				     .buf_bytes = 4096, .nosync = true };
	struct pdma_sigmf *w;

	assert_int_equal(pdma_sigmf_open(&a, &w), 0);
	return w;
}

/* Two streams interleaved, gaps inside and across blocks: each dataset holds
 * exactly the present packets, one capture per run. */
static void test_gaps_are_captures(void **state)
{
	struct pdma_sigmf *w = open_w();
	static struct blk k;
	/* stream 1: packets 3-4 of block 0 lost; 15 of block 1 and 0-1 of
	 * block 2 lost (one gap across the border); block 3 whole */
	const uint64_t g1[] = { 0x18, 1ull << 15, 0x3, 0 };

	(void)state;
	for (uint64_t s = 0; s < 4; s++) {
		make(&k, 1, s, g1[s]);
		assert_int_equal(pdma_sigmf_write(w, &k.b), 0);
		make(&k, 2, s, 0);
		assert_int_equal(pdma_sigmf_write(w, &k.b), 0);
	}
	assert_int_equal(pdma_sigmf_finish(w), 0);
	assert_int_equal(pdma_sigmf_streams(w), 2);

	struct pdma_sigmf_info in;
	pdma_sigmf_stream(w, 0, &in);
	assert_int_equal(in.stream_id, 1);
	assert_int_equal(in.samples, (4 * NPKT - 5) * SPP);
	assert_int_equal(in.missing, 5 * SPP);
	assert_int_equal(in.captures, 3);
	assert_true(in.rate_from_context);

	/* data: every present sample, in order */
	FILE *f = fopen(path(1, "sigmf-data"), "rb");
	assert_non_null(f);
	uint32_t v;
	uint64_t n = 0;
	for (uint64_t p = 0; p < 4 * NPKT; p++) {
		if (p == 3 || p == 4 || p == 31 || p == 32 || p == 33)
			continue;
		for (uint32_t i = 0; i < SPP; i++, n++) {
			assert_int_equal(fread(&v, 4, 1, f), 1);
			assert_int_equal(v, word(1, 5ull * RATE + p * SPP + i));
		}
	}
	assert_int_equal(fread(&v, 4, 1, f), 0);
	fclose(f);

	json_t *m = meta(1);
	json_t *g = json_object_get(m, "global");
	assert_string_equal(json_string_value(json_object_get(g, "core:datatype")), "ci16_le");
	assert_string_equal(json_string_value(json_object_get(g, "core:version")), PDMA_SIGMF_VERSION);
	assert_true(json_real_value(json_object_get(g, "core:sample_rate")) == 2e6);
	assert_int_equal(json_array_size(json_object_get(m, "annotations")), 0);
	assert_int_equal(json_array_size(json_object_get(m, "captures")), 3);
	assert_int_equal(cap_field(m, 0, "core:sample_start"), 0);
	assert_int_equal(cap_field(m, 0, "core:global_index"), 5ull * RATE);
	assert_int_equal(cap_field(m, 1, "core:sample_start"), 3 * SPP);
	assert_int_equal(cap_field(m, 1, "core:global_index"), 5ull * RATE + 5 * SPP);
	assert_int_equal(cap_field(m, 2, "core:sample_start"), (31 - 2) * SPP);
	assert_int_equal(cap_field(m, 2, "core:global_index"), 5ull * RATE + 34 * SPP);
	json_t *c0 = json_array_get(json_object_get(m, "captures"), 0);
	assert_string_equal(json_string_value(json_object_get(c0, "core:datetime")),
			    "1970-01-01T00:00:05.000000000Z");
	assert_null(json_object_get(c0, "core:frequency")); /* no RF frequency came */
	json_decref(m);

	m = meta(2);
	assert_int_equal(json_array_size(json_object_get(m, "captures")), 1);
	json_decref(m);
	pdma_sigmf_close(w);
	unlink(path(1, "sigmf-data"));
	unlink(path(1, "sigmf-meta"));
	unlink(path(2, "sigmf-data"));
	unlink(path(2, "sigmf-meta"));
}

/* A block that skips ahead (dropped from a full queue), an RF frequency
 * arriving, then changing: each starts a capture, with core:frequency. */
static void test_skips_and_frequency(void **state)
{
	struct pdma_sigmf *w = open_w();
	static struct blk k;

	(void)state;
	make(&k, 7, 0, 0);
	k.b.ctx_fields = 0; /* no context yet: the session's rate */
	assert_int_equal(pdma_sigmf_write(w, &k.b), 0);
	make(&k, 7, 2, 0); /* block 1 dropped */
	k.b.ctx_fields = 0;
	assert_int_equal(pdma_sigmf_write(w, &k.b), 0);
	/* blocks 3-4 at 915 MHz, block 5 at 2.4 GHz */
	for (uint64_t seq = 3; seq < 6; seq++) {
		make(&k, 7, seq, 0);
		k.b.ctx_fields = PDMA_CTX_RF_FREQ;
		k.b.ctx_rf_freq = seq < 5 ? 915e6 : 2.4e9;
		assert_int_equal(pdma_sigmf_write(w, &k.b), 0);
	}
	assert_int_equal(pdma_sigmf_finish(w), 0);

	json_t *m = meta(7), *caps = json_object_get(m, "captures");
	assert_int_equal(json_array_size(caps), 4);
	assert_int_equal(cap_field(m, 1, "core:global_index"), 5ull * RATE + 2 * NPKT * SPP);
	assert_int_equal(cap_field(m, 2, "core:sample_start"), 2 * NPKT * SPP);
	assert_int_equal(cap_field(m, 3, "core:sample_start"), 4 * NPKT * SPP);
	assert_null(json_object_get(json_array_get(caps, 1), "core:frequency"));
	assert_true(json_real_value(json_object_get(json_array_get(caps, 2), "core:frequency")) == 915e6);
	assert_true(json_real_value(json_object_get(json_array_get(caps, 3), "core:frequency")) == 2.4e9);
	assert_true(json_real_value(json_object_get(json_object_get(m, "global"), "core:sample_rate")) ==
		    RATE);
	json_decref(m);
	pdma_sigmf_close(w);
	unlink(path(7, "sigmf-data"));
	unlink(path(7, "sigmf-meta"));
}

static void test_datetime(void **state)
{
	char b[64];

	(void)state;
	assert_int_equal(pdma_sigmf_datetime(0, 10, b, sizeof(b)), 0);
	assert_string_equal(b, "1970-01-01T00:00:00.000000000Z");
	/* gen's default start, 1700000000 s, plus 2.5 samples of 10 MS/s */
	assert_int_equal(pdma_sigmf_datetime(17000000000000025ull, 10000000, b, sizeof(b)), 0);
	assert_string_equal(b, "2023-11-14T22:13:20.000002500Z");
	/* above 1 GS/s: picoseconds */
	assert_int_equal(pdma_sigmf_datetime(2000000000001ull, 2000000000, b, sizeof(b)), 0);
	assert_string_equal(b, "1970-01-01T00:16:40.000000000500Z");
	assert_int_equal(pdma_sigmf_datetime(UINT64_MAX, 1, b, sizeof(b)), -EOVERFLOW);
	assert_int_equal(pdma_sigmf_datetime(1, 0, b, sizeof(b)), -EOVERFLOW);
}

/* Refusals, and a dataset that cannot be written (ENOSPC): the error comes
 * back, and the metadata still describes what the dataset holds. */
static void test_errors(void **state)
{
	struct pdma_sigmf_attr a = { .dir = dir, .prefix = "t", .sample_rate = 0 };
	struct pdma_sigmf *w;
	static struct blk k;

	(void)state;
	assert_int_equal(pdma_sigmf_open(&a, &w), -EINVAL);
	a.sample_rate = RATE;
	a.prefix = "";
	assert_int_equal(pdma_sigmf_open(&a, &w), -EINVAL);

	w = open_w();
	make(&k, 3, 0, 0);
	k.b.format = 99;
	assert_int_equal(pdma_sigmf_write(w, &k.b), -EINVAL);
	make(&k, 3, 0, 0);
	k.b.samples_per_packet = 0;
	assert_int_equal(pdma_sigmf_write(w, &k.b), -EINVAL);
	assert_int_equal(pdma_sigmf_streams(w), 0); /* refused before any file */
	pdma_sigmf_close(w);

	if (access("/dev/full", W_OK))
		return;
	assert_int_equal(symlink("/dev/full", path(4, "sigmf-data")), 0);
	w = open_w(); /* 4 KiB buffer: 8 blocks of 512 bytes fill it, the 9th flushes */
	for (uint64_t s = 0; s < 8; s++) {
		make(&k, 4, s, 0);
		assert_int_equal(pdma_sigmf_write(w, &k.b), 0);
	}
	make(&k, 4, 8, 0);
	assert_int_equal(pdma_sigmf_write(w, &k.b), -ENOSPC);
	make(&k, 4, 9, 0);
	assert_int_equal(pdma_sigmf_write(w, &k.b), -ENOSPC);
	assert_int_equal(pdma_sigmf_finish(w), -ENOSPC);

	/* nothing reached the file: the metadata says so */
	struct pdma_sigmf_info in;
	pdma_sigmf_stream(w, 0, &in);
	assert_int_equal(in.error, -ENOSPC);
	assert_int_equal(in.samples, 0);
	json_t *m = meta(4);
	assert_int_equal(json_array_size(json_object_get(m, "captures")), 0);
	json_decref(m);
	pdma_sigmf_close(w);
	unlink(path(4, "sigmf-data"));
	unlink(path(4, "sigmf-meta"));
}

static int setup(void **state)
{
	(void)state;
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	return rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gaps_are_captures),
		cmocka_unit_test(test_skips_and_frequency),
		cmocka_unit_test(test_datetime),
		cmocka_unit_test(test_errors),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
