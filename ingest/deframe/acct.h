/* SPDX-License-Identifier: MIT */
/*
 * Exact per-stream accounting over deframer descriptors (struct pdma_dfr_desc,
 * deframe/deframe.h) in arrival order: received, lost, duplicated, reordered
 * and late packets from the sample-count timestamps, beside what the 4-bit
 * packet count alone would say. Both deframers feed it: the CPU deframer per
 * slot, GPU batching per batch of descriptors.
 *
 * Single-threaded: one accounting is driven by one thread at a time.
 */
#ifndef PDMA_INGEST_DEFRAME_ACCT_H
#define PDMA_INGEST_DEFRAME_ACCT_H

#include <stdbool.h>
#include <stdint.h>

#include "deframe/deframe.h"

#define PDMA_ACCT_WINDOW 16384u /* packets remembered behind the newest */

struct pdma_stream_stats {
	uint32_t stream_id;
	uint64_t received;    /* distinct data packets */
	uint64_t lost;        /* never seen between the lowest and highest index */
	uint64_t duplicated;
	uint64_t reordered;   /* arrived after a higher-index packet of its stream */
	uint64_t late;        /* older than the window: cannot be classified */
	uint64_t malformed;   /* attributed by stream ID */
	uint64_t class_mismatch; /* of malformed: data packets whose class ID differs
				  * from the stream's first (PDMA_DFR_E_CLASS_CHANGE) */
	uint64_t context;     /* context packets */
	uint64_t count_errors;/* 4-bit count inconsistent with the sample count */
	uint64_t lost_count4; /* what the 4-bit count alone would call lost */
	uint64_t bytes;       /* payload bytes of distinct packets */
	uint64_t first_pkt, last_pkt;
};

struct pdma_acct_stream {
	struct pdma_stream_stats s;
	bool known;           /* a valid packet (data or context) was seen */
	bool have;            /* a data packet was seen */
	uint8_t c_off;        /* packet count minus index, mod 16 */
	uint8_t c_high;       /* count of the highest packet */
	uint64_t low, high;
	uint64_t *bits;       /* PDMA_ACCT_WINDOW bits */
};

struct pdma_acct {
	uint32_t max_streams;
	struct pdma_acct_stream *st; /* indexed like the deframer's stream table */
	uint64_t malformed_unattributed;
	uint64_t malformed_by_code[PDMA_DFR_E__MAX];
	uint64_t packets;     /* all datagrams seen */
	/* Optional: shown every descriptor after it is accounted, with its
	 * datagram where that is in host memory (else NULL): the sample
	 * blocks of include/peerdma/ingest.h (blocks/blocks.h). */
	void (*observe)(void *arg, const struct pdma_dfr_desc *d, uint32_t payload_len,
			const uint8_t *dg, uint32_t dglen);
	void *observe_arg;
};

int pdma_acct_init(struct pdma_acct *a, uint32_t max_streams);
void pdma_acct_fini(struct pdma_acct *a);
/* Account one descriptor (arrival order). payload_len for byte totals. */
void pdma_acct_add(struct pdma_acct *a, const struct pdma_dfr_desc *d, uint32_t payload_len);
/* The same, with the descriptor's datagram (dglen bytes) for the observer. */
void pdma_acct_add_dg(struct pdma_acct *a, const struct pdma_dfr_desc *d, uint32_t payload_len,
		      const uint8_t *dg, uint32_t dglen);
/* Final per-stream numbers (lost is computed here). idx < max_streams. */
bool pdma_acct_stream(const struct pdma_acct *a, uint32_t idx, struct pdma_stream_stats *out);

/* The streams with a valid packet as a JSON array, one object each (stream_id,
 * received, lost, duplicated, reordered, late, malformed, class_mismatch,
 * context, count_errors, lost_by_4bit_count, payload_bytes): what `peerdma
 * ingest -j` and `peerdma deframe -j` print. A new reference. */
struct json_t;
struct json_t *pdma_acct_streams_json(const struct pdma_acct *a);

#endif /* PDMA_INGEST_DEFRAME_ACCT_H */
