/* SPDX-License-Identifier: MIT */
/*
 * The CPU deframer: the shared per-packet core (deframe/deframe.h) run over a
 * receive ring's slots in order, each descriptor accounted at once
 * (deframe/acct.h). Also the host-side helpers both deframers use: the
 * default configuration and the names of deframer errors.
 *
 * Single-threaded: one deframer is driven by one thread at a time.
 */
#ifndef PDMA_INGEST_DEFRAME_CPU_H
#define PDMA_INGEST_DEFRAME_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "deframe/acct.h"
#include "deframe/deframe.h"
#include "deframe/frame_acct.h"
#include "rx/ring.h"

struct pdma_dfr {
	struct pdma_dfr_config cfg;
	struct pdma_dfr_tables t;
	struct pdma_acct acct;
	uint64_t placed;      /* packets written to output */
	struct pdma_frm_stats frames; /* frame rings only (pdma_dfr_process_frames) */
};

int pdma_dfr_init(struct pdma_dfr *d, const struct pdma_dfr_config *cfg);
void pdma_dfr_fini(struct pdma_dfr *d);
void pdma_dfr_config_default(struct pdma_dfr_config *c);
/* Name of a deframer error (-PDMA_DFR_E_*) or parser error. */
const char *pdma_dfr_strerror(int err);
/* Deframe one slot (no accounting); fills *desc. Returns payload length
 * placed or considered (>= 0) for data, 0 otherwise. */
uint32_t pdma_dfr_cpu_slot(const struct pdma_dfr_config *c, struct pdma_dfr_tables *t,
			   const uint8_t *slot, uint32_t slot_size, struct pdma_dfr_desc *desc);
/* Deframe and account n slots starting at ring index first. */
void pdma_dfr_process(struct pdma_dfr *d, const struct pdma_ring *r, uint64_t first, uint32_t n);
/*
 * Frame rings (deframe/frame.h): deframe one frame (no accounting), the
 * frame at base + fr->off; as pdma_dfr_cpu_slot otherwise. A skipped frame
 * gets status -PDMA_DFR_E_FRAME and its reason in desc->count.
 */
uint32_t pdma_dfr_cpu_frame(const struct pdma_dfr_config *c, struct pdma_dfr_tables *t,
			    const struct pdma_frm_cfg *fc, const uint8_t *base,
			    const struct pdma_frame *fr, struct pdma_dfr_desc *desc);
/*
 * The frame-ring entry point: deframe and account n frames, frame i at
 * base + frames[i].off, frames[i].len bytes long, with the NIC's completion
 * status in frames[i].flags (PDMA_NIC_CQE_IPCS / _L4CS: checksum verified,
 * trusted unless PDMA_NIC_CQE_ERR). Matching frames' datagrams are deframed
 * and accounted exactly as slots' (d->acct, d->placed, the tables); every
 * frame is counted in d->frames (skipped ones by reason). Frames are
 * processed in array order (arrival order). Reads only the frames' bytes;
 * never writes the region.
 */
void pdma_dfr_process_frames(struct pdma_dfr *d, const struct pdma_frm_cfg *fc, const uint8_t *base,
			     const struct pdma_frame *frames, uint32_t n);
/* Output of stream index idx: data pointer and tags. */
static inline uint8_t *pdma_dfr_out(const struct pdma_dfr *d, uint32_t idx)
{
	return d->t.out + (size_t)idx * d->cfg.out_pkts * d->cfg.max_payload;
}

#endif /* PDMA_INGEST_DEFRAME_CPU_H */
