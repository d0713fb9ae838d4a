// SPDX-License-Identifier: MIT
/* Exact per-stream accounting over deframer descriptors: a window of
 * PDMA_ACCT_WINDOW bits per stream behind its newest packet tells new,
 * duplicated and reordered packets apart; lost is what the span between the
 * lowest and highest packet lacks. */
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "deframe/acct.h"

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

static void account(struct pdma_acct *a, const struct pdma_dfr_desc *d, uint32_t payload_len)
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
					a->st[i].s.class_mismatch += code == PDMA_DFR_E_CLASS_CHANGE;
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

void pdma_acct_add_dg(struct pdma_acct *a, const struct pdma_dfr_desc *d, uint32_t payload_len,
		      const uint8_t *dg, uint32_t dglen)
{
	account(a, d, payload_len);
	if (a->observe)
		a->observe(a->observe_arg, d, payload_len, dg, dglen);
}

void pdma_acct_add(struct pdma_acct *a, const struct pdma_dfr_desc *d, uint32_t payload_len)
{
	pdma_acct_add_dg(a, d, payload_len, NULL, 0);
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

json_t *pdma_acct_streams_json(const struct pdma_acct *a)
{
	json_t *streams = json_array();

	for (uint32_t i = 0; i < a->max_streams; i++) {
		struct pdma_stream_stats s;
		if (!pdma_acct_stream(a, i, &s))
			continue;
		json_t *j = json_object();
		json_object_set_new(j, "stream_id", json_integer(s.stream_id));
		json_object_set_new(j, "received", json_integer((json_int_t)s.received));
		json_object_set_new(j, "lost", json_integer((json_int_t)s.lost));
		json_object_set_new(j, "duplicated", json_integer((json_int_t)s.duplicated));
		json_object_set_new(j, "reordered", json_integer((json_int_t)s.reordered));
		json_object_set_new(j, "late", json_integer((json_int_t)s.late));
		json_object_set_new(j, "malformed", json_integer((json_int_t)s.malformed));
		json_object_set_new(j, "class_mismatch", json_integer((json_int_t)s.class_mismatch));
		json_object_set_new(j, "context", json_integer((json_int_t)s.context));
		json_object_set_new(j, "count_errors", json_integer((json_int_t)s.count_errors));
		json_object_set_new(j, "lost_by_4bit_count", json_integer((json_int_t)s.lost_count4));
		json_object_set_new(j, "payload_bytes", json_integer((json_int_t)s.bytes));
		json_array_append_new(streams, j);
	}
	return streams;
}
