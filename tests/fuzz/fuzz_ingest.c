// SPDX-License-Identifier: MIT
/*
 * libFuzzer target for the public ingest API's inputs (include/peerdma/
 * ingest.h): session attributes and subscription attributes from the
 * fuzzer's bytes. Checks, beyond "no crash, no leak": every return is 0 or
 * an errno the API documents (EINVAL for bad attributes with a message
 * naming the field, ENOMEM for what cannot be allocated, EOPNOTSUPP/ENODEV/
 * ENOENT for a path this machine lacks), and a session that opened accepts
 * exactly the subscriptions its rules allow. Port 0 only (ephemeral), and no
 * start: nothing leaves the process.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "peerdma/ingest.h"

/* Huge attribute values must fail with -ENOMEM, not abort the allocator. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
	return "allocator_may_return_null=1";
}

static uint64_t take(const uint8_t **p, size_t *n, int bytes)
{
	uint64_t v = 0;

	for (int i = 0; i < bytes; i++) {
		v = (v << 8) | (*n ? **p : 0);
		if (*n) {
			(*p)++;
			(*n)--;
		}
	}
	return v;
}

static void allowed(int ret, const int *ok, const char *what)
{
	if (!ret)
		return;
	for (; *ok; ok++)
		if (ret == -*ok)
			return;
	fprintf(stderr, "%s: undocumented return %d\n", what, ret);
	abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const int open_ok[] = { EINVAL, ENOMEM, EOPNOTSUPP, ENODEV, ENOENT, EADDRNOTAVAIL, 0 };
	static const int sub_ok[] = { EINVAL, ENOMEM, 0 };
	static const char *const addrs[] = { "127.0.0.1", "0.0.0.0", "300.1.2.3", "", "127.0.0.1x", NULL };
	struct pdma_ingest_attr a;
	struct pdma_ingest *ing = NULL;
	char msg[256];
	int ret;

	pdma_ingest_attr_init(&a);
	a.path = (enum pdma_ingest_path_kind)(take(&data, &size, 1) % 6); /* 4, 5: invalid */
	if (a.path == PDMA_INGEST_PATH_NIC)
		a.path = PDMA_INGEST_PATH_CPU; /* no NIC here: would only say ENOENT */
	a.bind_addr = addrs[take(&data, &size, 1) % 6];
	a.threads = (uint32_t)take(&data, &size, 1) % 80;
	a.sample_rate = take(&data, &size, 4);
	a.max_streams = (uint32_t)take(&data, &size, 2);
	a.max_payload = (uint32_t)take(&data, &size, 3);
	a.block_packets = (uint32_t)take(&data, &size, 3);
	a.window_blocks = (uint32_t)take(&data, &size, 2);
	a.late_blocks = (uint32_t)take(&data, &size, 1);
	a.flush_idle_ms = (uint32_t)take(&data, &size, 2);
	if (take(&data, &size, 1) == 0xa5)
		a.size = (uint32_t)take(&data, &size, 1);
	/* libFuzzer stops at a 2 GB allocation (its malloc limit), though the
	 * window's calloc costs nothing until written: attributes whose window
	 * and pools would pass 256 MiB are left out (their checks are the same
	 * code as the smaller ones'). */
	double blocks = (double)a.window_blocks + a.late_blocks + 2 + 2048.0 / (a.block_packets ? a.block_packets : 1);
	if ((double)a.max_streams * blocks * a.block_packets * a.max_payload * 2 > 256.0 * 1024 * 1024)
		return 0;
	ret = pdma_ingest_open(&a, &ing, msg, sizeof(msg));
	allowed(ret, open_ok, "pdma_ingest_open");
	if (ret) {
		if (ret == -EINVAL && !msg[0]) {
			fprintf(stderr, "EINVAL without a message (path %d, bind '%s', threads %u, rate %llu, "
				"streams %u, payload %u, block %u, window %u, late %u)\n", (int)a.path,
				a.bind_addr, a.threads, (unsigned long long)a.sample_rate, a.max_streams,
				a.max_payload, a.block_packets, a.window_blocks, a.late_blocks);
			abort();
		}
		return 0;
	}
	for (int i = 0; i < 3 && size; i++) {
		struct pdma_sub_attr sa;
		struct pdma_sub *sub;

		pdma_sub_attr_init(&sa);
		sa.stream_id = take(&data, &size, 1) & 1 ? take(&data, &size, 5) : PDMA_SUB_ALL_STREAMS;
		sa.policy = (enum pdma_sub_policy)(take(&data, &size, 1) % 3);
		sa.depth = (uint32_t)take(&data, &size, 3);
		bool valid = sa.depth && sa.depth <= 65536 && sa.policy <= PDMA_SUB_BACKPRESSURE &&
			     (sa.stream_id == PDMA_SUB_ALL_STREAMS || sa.stream_id <= UINT32_MAX);
		ret = pdma_ingest_subscribe(ing, &sa, &sub);
		allowed(ret, sub_ok, "pdma_ingest_subscribe");
		if ((ret == -EINVAL) == valid) {
			fprintf(stderr, "subscribe: %d for a %s attribute\n", ret, valid ? "valid" : "bad");
			abort();
		}
		if (!ret) {
			struct pdma_block *b;

			ret = pdma_sub_next(sub, &b, 0);
			if (ret != -ETIMEDOUT) {
				fprintf(stderr, "next on an idle session: %d\n", ret);
				abort();
			}
			pdma_sub_close(sub);
		}
	}
	pdma_ingest_close(ing);
	return 0;
}
