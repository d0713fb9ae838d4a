/* SPDX-License-Identifier: MIT */
/*
 * Frame-ring counters (frame.h): every frame's descriptor, in arrival order,
 * either counted as skipped under its reason or handed to the stream
 * accounting (deframe/acct.h) as a datagram. The CPU deframer
 * (pdma_dfr_process_frames) and GPU batching (pdma_gpu_batch_frames) both
 * count through pdma_frm_account(), over descriptors that the shared header
 * stage wrote, so their counters are the same numbers for the same frames.
 *
 * Single-threaded, like the accounting it feeds.
 */
#ifndef PDMA_INGEST_DEFRAME_FRAME_ACCT_H
#define PDMA_INGEST_DEFRAME_FRAME_ACCT_H

#include <stdint.h>

#include "deframe/acct.h"
#include "deframe/frame.h"

struct pdma_frm_stats {
	uint64_t frames;                      /* frames seen */
	uint64_t datagrams;                   /* frames that carried a datagram to the deframer */
	uint64_t skipped[PDMA_FRM_E__MAX];    /* [reason]: frames skipped; [0] unused */
};

/* Count one frame's descriptor: skipped (status -PDMA_DFR_E_FRAME) by its
 * reason, else into the stream accounting a (payload_len as pdma_acct_add). */
void pdma_frm_account(struct pdma_frm_stats *fs, struct pdma_acct *a, const struct pdma_dfr_desc *d,
		      uint32_t payload_len);
/* All skipped frames. */
uint64_t pdma_frm_skipped_total(const struct pdma_frm_stats *fs);
/* A reason's name (a JSON key: "runt", "ethertype", "ip_hdr", ...), NULL for
 * PDMA_FRM_OK or out of range. peerdma gen --eth reports its injected
 * malformed frames under the same names. */
const char *pdma_frm_reason_name(int reason);

/* The counters as JSON: {"frames", "datagrams", "skipped": {reason: n, ...
 * every reason}}. A new reference. */
struct json_t;
struct json_t *pdma_frm_stats_json(const struct pdma_frm_stats *fs);

#endif /* PDMA_INGEST_DEFRAME_FRAME_ACCT_H */
