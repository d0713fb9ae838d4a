// SPDX-License-Identifier: MIT
/* The CPU deframer and the exact per-stream accounting. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ingest.h"

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
	d->t.tags = calloc(tags, sizeof(*d->t.tags));
	d->t.out = calloc(tags, cfg->max_payload);
	int ret = pdma_acct_init(&d->acct, cfg->max_streams);
	if (!d->t.keys || !d->t.plen || !d->t.tags || !d->t.out || ret) {
		pdma_dfr_fini(d);
		return -ENOMEM;
	}
	return 0;
}

void pdma_dfr_fini(struct pdma_dfr *d)
{
	free(d->t.keys);
	free(d->t.plen);
	free(d->t.tags);
	free(d->t.out);
	pdma_acct_fini(&d->acct);
	memset(d, 0, sizeof(*d));
}

uint32_t pdma_dfr_cpu_slot(const struct pdma_dfr_config *c, struct pdma_dfr_tables *t,
			   const uint8_t *slot, uint32_t slot_size, struct pdma_dfr_desc *desc)
{
	struct pdma_dfr_pkt r;
	int st = pdma_dfr_header(c, slot, slot_size, desc, &r);
	int idx;

	/* Only valid packets touch the stream table. Malformed ones are
	 * attributed to a stream by the accounting (by stream ID, in arrival
	 * order), so the result cannot depend on the order in which a parallel
	 * deframer sees packets, and garbage cannot claim table entries. */
	if (st >= 0) {
		idx = pdma_dfr_lookup_host(c, t->keys, desc->stream_id);
		if (idx >= 0)
			desc->stream = (uint16_t)idx;
		else
			st = -PDMA_DFR_E_TABLE_FULL;
	}
	if (st == PDMA_DFR_ST_DATA) {
		uint32_t *pl = &t->plen[desc->stream];
		if (*pl == 0)
			*pl = r.payload_len;
		if (*pl != r.payload_len) {
			st = -PDMA_DFR_E_SIZE_CHANGE;
		} else {
			size_t pos = (size_t)(r.pkt % c->out_pkts);
			uint64_t *tag = &t->tags[(size_t)desc->stream * c->out_pkts + pos];
			if (*tag < r.pkt + 1) {
				*tag = r.pkt + 1;
				memcpy(t->out + ((size_t)desc->stream * c->out_pkts * c->max_payload) +
					       pos * r.payload_len,
				       slot + PDMA_SLOT_HDR + r.payload_off, r.payload_len);
			} else {
				st = PDMA_DFR_ST_DATA_OLD;
			}
		}
	}
	desc->status = (int8_t)st;
	return st == PDMA_DFR_ST_DATA || st == PDMA_DFR_ST_DATA_OLD ? r.payload_len : 0;
}

void pdma_dfr_process(struct pdma_dfr *d, const struct pdma_ring *r, uint64_t first, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		struct pdma_dfr_desc desc;
		uint32_t len = pdma_dfr_cpu_slot(&d->cfg, &d->t, pdma_ring_slot(r, first + i),
						  r->slot_size, &desc);
		if (desc.status == PDMA_DFR_ST_DATA)
			d->placed++;
		pdma_acct_add(&d->acct, &desc, len);
	}
}

/* ---- accounting ---- */

int pdma_acct_init(struct pdma_acct *a, uint32_t max_streams)
{
	memset(a, 0, sizeof(*a));
	a->st = calloc(max_streams, sizeof(*a->st));
	if (!a->st)
		return -ENOMEM;
	a->max_streams = max_streams;
	return 0;
}

void pdma_acct_fini(struct pdma_acct *a)
{
	if (a->st)
		for (uint32_t i = 0; i < a->max_streams; i++)
			free(a->st[i].bits);
	free(a->st);
	memset(a, 0, sizeof(*a));
}

static bool bit_test_set(uint64_t *bits, uint64_t p)
{
	uint64_t b = p % PDMA_ACCT_WINDOW;
	uint64_t m = 1ull << (b & 63);
	bool was = bits[b >> 6] & m;
	bits[b >> 6] |= m;
	return was;
}

static void bit_clear(uint64_t *bits, uint64_t p)
{
	uint64_t b = p % PDMA_ACCT_WINDOW;
	bits[b >> 6] &= ~(1ull << (b & 63));
}

void pdma_acct_add(struct pdma_acct *a, const struct pdma_dfr_desc *d, uint32_t payload_len)
{
	struct pdma_acct_stream *s;

	a->packets++;
	if (d->status < 0) {
		int code = -d->status;
		if (code < PDMA_DFR_E__MAX)
			a->malformed_by_code[code]++;
		/* Attribute by stream ID to a stream already seen valid: a short
		 * scan, on the error path only. */
		if (d->count & 0x10)
			for (uint32_t i = 0; i < a->max_streams; i++)
				if (a->st[i].known && a->st[i].s.stream_id == d->stream_id) {
					a->st[i].s.malformed++;
					return;
				}
		a->malformed_unattributed++;
		return;
	}
	if (d->stream >= a->max_streams)
		return;
	s = &a->st[d->stream];
	s->s.stream_id = d->stream_id;
	s->known = true;
	if (d->status == PDMA_DFR_ST_CONTEXT) {
		s->s.context++;
		return;
	}
	uint64_t p = d->pkt;
	uint8_t count = d->count & 15;
	if (!s->bits) {
		/* First data packet: allocation here is once per stream, not per
		 * packet; the hot path below never allocates. */
		s->bits = calloc(PDMA_ACCT_WINDOW / 64, sizeof(uint64_t));
		if (!s->bits) {
			s->s.late++;
			return;
		}
	}
	if (!s->have) {
		s->have = true;
		s->low = s->high = p;
		s->c_off = (uint8_t)((count - p) & 15);
		s->c_high = count;
		bit_test_set(s->bits, p);
		s->s.received++;
		s->s.bytes += payload_len;
		return;
	}
	if (((count - p) & 15) != s->c_off)
		s->s.count_errors++;
	if (p > s->high) {
		/* Newer: clear the bits the window slides over. */
		uint64_t from = s->high + 1;
		if (p - s->high >= PDMA_ACCT_WINDOW)
			memset(s->bits, 0, PDMA_ACCT_WINDOW / 8);
		else
			for (uint64_t q = from; q <= p; q++)
				bit_clear(s->bits, q);
		s->s.lost_count4 += (uint8_t)((count - s->c_high - 1) & 15);
		s->c_high = count;
		s->high = p;
		bit_test_set(s->bits, p);
		s->s.received++;
		s->s.bytes += payload_len;
		return;
	}
	if (s->high - p >= PDMA_ACCT_WINDOW) {
		s->s.late++;
		return;
	}
	if (p < s->low) {
		/* Before the first packet seen, within the window: a reordered
		 * start of stream. Its bit was never set (cleared or zeroed). */
		s->low = p;
	} else if (bit_test_set(s->bits, p)) {
		s->s.duplicated++;
		return;
	}
	bit_test_set(s->bits, p);
	s->s.reordered++;
	s->s.received++;
	s->s.bytes += payload_len;
}

bool pdma_acct_stream(const struct pdma_acct *a, uint32_t idx, struct pdma_stream_stats *out)
{
	if (idx >= a->max_streams)
		return false;
	const struct pdma_acct_stream *s = &a->st[idx];
	*out = s->s;
	if (!s->have)
		return s->known;
	out->first_pkt = s->low;
	out->last_pkt = s->high;
	uint64_t span = s->high - s->low + 1;
	out->lost = span > s->s.received ? span - s->s.received : 0;
	return true;
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
	default: return pdma_vrt_strerror(err);
	}
}
