// SPDX-License-Identifier: MIT
/* The CPU deframer: the per-packet core over ring slots, in order. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "deframe/deframe_cpu.h"

void pdma_dfr_config_default(struct pdma_dfr_config *c)
{
	c->max_streams = 64;
	c->out_pkts = 4096;
	c->max_payload = 8192;
	c->bytes_per_sample = 4;
	c->sample_rate = 10000000;
}

int pdma_dfr_init(struct pdma_dfr *d, const struct pdma_dfr_config *cfg)
{
	memset(d, 0, sizeof(*d));
	if (!pdma_dfr_config_ok(cfg))
		return -EINVAL;
	d->cfg = *cfg;
	size_t ns = cfg->max_streams, tags = ns * cfg->out_pkts;
	d->t.keys = calloc(ns, sizeof(*d->t.keys));
	d->t.plen = calloc(ns, sizeof(*d->t.plen));
	d->t.cls = calloc(ns, sizeof(*d->t.cls));
	d->t.tags = calloc(tags, sizeof(*d->t.tags));
	d->t.out = calloc(tags, cfg->max_payload);
	int ret = pdma_acct_init(&d->acct, cfg->max_streams);
	if (!d->t.keys || !d->t.plen || !d->t.cls || !d->t.tags || !d->t.out || ret) {
		pdma_dfr_fini(d);
		return -ENOMEM;
	}
	return 0;
}

void pdma_dfr_fini(struct pdma_dfr *d)
{
	free(d->t.keys);
	free(d->t.plen);
	free(d->t.cls);
	free(d->t.tags);
	free(d->t.out);
	pdma_acct_fini(&d->acct);
	memset(d, 0, sizeof(*d));
}

/* After the header stage (st, *desc, r): the stream lookup, payload size and
 * class checks, and the placement of the payload at src. Returns the payload
 * length placed or considered for data, 0 otherwise; sets desc->status. */
static uint32_t place(const struct pdma_dfr_config *c, struct pdma_dfr_tables *t, int st,
		      const struct pdma_dfr_pkt *r, const uint8_t *src, struct pdma_dfr_desc *desc)
{
	/* Only valid packets touch the stream table. Malformed ones are
	 * attributed to a stream by the accounting (by stream ID, in arrival
	 * order), so the result cannot depend on the order in which a parallel
	 * deframer sees packets, and garbage cannot claim table entries. */
	if (st >= 0) {
		int idx = pdma_dfr_lookup_host(c, t->keys, desc->stream_id);
		if (idx >= 0)
			desc->stream = (uint16_t)idx;
		else
			st = -PDMA_DFR_E_TABLE_FULL;
	}
	if (st == PDMA_DFR_ST_DATA) {
		uint32_t *pl = &t->plen[desc->stream];
		if (*pl == 0)
			*pl = r->payload_len;
		if (*pl != r->payload_len) {
			st = -PDMA_DFR_E_SIZE_CHANGE;
		} else if (!pdma_dfr_class_ok_host(&t->cls[desc->stream], r->cls)) {
			st = -PDMA_DFR_E_CLASS_CHANGE;
		} else {
			size_t pos = (size_t)(r->pkt % c->out_pkts);
			uint64_t *tag = &t->tags[(size_t)desc->stream * c->out_pkts + pos];
			if (*tag < r->pkt + 1) {
				*tag = r->pkt + 1;
				memcpy(t->out + ((size_t)desc->stream * c->out_pkts * c->max_payload) +
					       pos * r->payload_len,
				       src + r->payload_off, r->payload_len);
			} else {
				st = PDMA_DFR_ST_DATA_OLD;
			}
		}
	}
	desc->status = (int8_t)st;
	return st == PDMA_DFR_ST_DATA || st == PDMA_DFR_ST_DATA_OLD ? r->payload_len : 0;
}

uint32_t pdma_dfr_cpu_slot(const struct pdma_dfr_config *c, struct pdma_dfr_tables *t,
			   const uint8_t *slot, uint32_t slot_size, struct pdma_dfr_desc *desc)
{
	struct pdma_dfr_pkt r = { 0 }; /* set by the header parse when st >= 0; gcc -O2 cannot tell */
	int st = pdma_dfr_header(c, slot, slot_size, desc, &r);

	return place(c, t, st, &r, slot + pdma_slot_off(((const struct pdma_slot_hdr *)slot)->flags), desc);
}

uint32_t pdma_dfr_cpu_frame(const struct pdma_dfr_config *c, struct pdma_dfr_tables *t,
			    const struct pdma_frm_cfg *fc, const uint8_t *base,
			    const struct pdma_frame *fr, struct pdma_dfr_desc *desc)
{
	struct pdma_dfr_pkt r = { 0 };
	struct pdma_vrt_packet v;
	uint32_t dg_off;
	const uint8_t *f = base + fr->off;
	int st = pdma_dfr_frame_v(c, fc, f, fr->len, fr->flags, desc, &r, &v, &dg_off);

	return place(c, t, st, &r, f, desc);
}

void pdma_dfr_process_frames(struct pdma_dfr *d, const struct pdma_frm_cfg *fc, const uint8_t *base,
			     const struct pdma_frame *frames, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		struct pdma_dfr_desc desc;
		uint32_t len = pdma_dfr_cpu_frame(&d->cfg, &d->t, fc, base, &frames[i], &desc);
		if (desc.status == PDMA_DFR_ST_DATA)
			d->placed++;
		pdma_frm_account(&d->frames, &d->acct, &desc, len);
	}
}

void pdma_dfr_process(struct pdma_dfr *d, const struct pdma_ring *r, uint64_t first, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		struct pdma_dfr_desc desc;
		const uint8_t *slot = pdma_ring_slot(r, first + i);
		uint32_t len = pdma_dfr_cpu_slot(&d->cfg, &d->t, slot, r->slot_size, &desc), dl;
		const uint8_t *dg = pdma_slot_dgram(slot, r->slot_size, &dl);

		if (desc.status == PDMA_DFR_ST_DATA)
			d->placed++;
		pdma_acct_add_dg(&d->acct, &desc, len, dg, dl);
	}
}

const char *pdma_dfr_strerror(int err)
{
	switch (err < 0 ? -err : err) {
	case PDMA_DFR_E_NO_SID: return "no stream ID";
	case PDMA_DFR_E_NO_TS: return "no sample-count timestamp";
	case PDMA_DFR_E_FRAC_RANGE: return "sample count >= sample rate";
	case PDMA_DFR_E_MISALIGNED: return "not on a packet/sample boundary";
	case PDMA_DFR_E_SIZE_CHANGE: return "payload size changed";
	case PDMA_DFR_E_OVERSIZE: return "payload over max_payload";
	case PDMA_DFR_E_TABLE_FULL: return "stream table full";
	case PDMA_DFR_E_SLOT_TRUNC: return "datagram larger than a ring slot";
	case PDMA_DFR_E_EMPTY: return "empty datagram";
	case PDMA_DFR_E_CLASS_CHANGE: return "class ID differs from the stream's";
	case PDMA_DFR_E_FRAME: return "frame skipped (not a matching Ethernet/IPv4/UDP frame)";
	default: return pdma_vrt_strerror(err);
	}
}
