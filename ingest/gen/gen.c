// SPDX-License-Identifier: MIT
/* The VITA-49 generator: DIFI-style data packets (stream ID, class ID, UTC
 * integer + sample-count fractional timestamps, optional trailer), with
 * deterministic injected loss, reordering and duplication, counted per
 * stream so a receiver's accounting can be checked against it exactly.
 * Sending them is send.c's, writing them to a pcap file pcap.c's. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gen/gen.h"
#include "gen/gen_int.h"
#include "peerdma/vrt.h"

#define GEN_OUI 0x7c386cu /* class ID OUI used by the generator (any 24-bit value) */
#define GEN_BURST 32u     /* datagrams per stream per round-robin turn */

struct gen_stream {
	uint64_t next;       /* next packet index to decide on */
	uint64_t end;        /* decide no packet from here: the config's count, or
			      * where a stop left the stream (pdma_gen_iter_finish) */
	uint64_t q[2];       /* pending packet indices, q[0] first */
	uint32_t nq;
	uint32_t turn;       /* datagrams sent in the current turn */
	bool ctx_sent;
	uint8_t ctx_count;
	uint64_t rng;
	struct pdma_gen_inject inj;
};

struct pdma_gen {
	struct pdma_gen_config c;
	uint32_t plen, spp;
	uint64_t k0;         /* packet index of the first packet (absolute) */
	struct pdma_gen_iter it; /* pdma_gen_next's walk over all streams */
	struct gen_stream *s;
};

void pdma_gen_iter_init(const struct pdma_gen *g, struct pdma_gen_iter *it, uint32_t first,
			uint32_t step, uint32_t burst)
{
	it->first = first;
	it->step = step;
	it->cur = first;
	it->live = first < g->c.streams ? (g->c.streams - first + step - 1) / step : 0;
	it->burst = burst;
	it->stop = NULL;
}

void pdma_gen_config_default(struct pdma_gen_config *c)
{
	memset(c, 0, sizeof(*c));
	c->streams = 4;
	c->stream_id_base = 0x1000;
	c->packet_size = 1024;
	c->packets = 1000;
	c->sample_rate = 10000000;
	c->ts_start = 1700000000;
	c->trailer = true;
	c->context = true;
	c->loss_burst = 1;
	c->seed = 1;
}

static uint32_t hdr_bytes(const struct pdma_gen_config *c)
{
	return 28 + (c->trailer ? 4u : 0u);
}

uint32_t pdma_gen_payload_len(const struct pdma_gen_config *c)
{
	return c->packet_size > hdr_bytes(c) ? c->packet_size - hdr_bytes(c) : 0;
}

static uint64_t splitmix(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

int pdma_gen_open(const struct pdma_gen_config *c, struct pdma_gen **out)
{
	uint32_t plen = pdma_gen_payload_len(c);

	if (!c->streams || c->streams > 65535 || c->packet_size % 4 || plen < 4 ||
	    c->packet_size > PDMA_GEN_MAX_PACKET || !c->sample_rate || !c->packets ||
	    c->packets > PDMA_GEN_MAX_PACKETS ||
	    c->loss_pm + c->dup_pm + c->reorder_pm > 1000)
		return -EINVAL;
	struct pdma_gen *g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->s = calloc(c->streams, sizeof(*g->s));
	if (!g->s) {
		free(g);
		return -ENOMEM;
	}
	g->c = *c;
	if (!g->c.loss_burst)
		g->c.loss_burst = 1;
	g->plen = plen;
	g->spp = plen / 4;
	/* Absolute sample counts (seconds x rate + samples into the second) of
	 * packet starts are multiples of the samples per packet, so a receiver
	 * recovers the packet index exactly: start at the first such boundary at
	 * or after ts_start. */
	g->k0 = ((uint64_t)c->ts_start * c->sample_rate + g->spp - 1) / g->spp;
	pdma_gen_iter_init(g, &g->it, 0, 1, GEN_BURST);
	for (uint32_t i = 0; i < c->streams; i++) {
		g->s[i].rng = c->seed * 0x100000001b3ull + i;
		g->s[i].end = c->packets;
	}
	*out = g;
	return 0;
}

void pdma_gen_close(struct pdma_gen *g)
{
	if (!g)
		return;
	free(g->s);
	free(g);
}

const struct pdma_gen_config *pdma_gen_get_config(const struct pdma_gen *g)
{
	return &g->c;
}

const struct pdma_gen_inject *pdma_gen_injected(const struct pdma_gen *g, uint32_t stream)
{
	return stream < g->c.streams ? &g->s[stream].inj : NULL;
}

/* Decide what happens to packet s->next and queue what is to be sent. The
 * events never touch the first or last packet, and a swap never pairs with
 * the last packet, so every injected event is visible to the receiver and
 * counts exactly once. */
static void refill(struct pdma_gen *g, struct gen_stream *s)
{
	uint64_t n = g->c.packets;

	while (s->nq == 0 && s->next < s->end) {
		uint64_t k = s->next;
		uint32_t r = (uint32_t)(splitmix(&s->rng) % 1000);
		uint32_t b = g->c.loss_burst;
		if (k == 0 || k + 1 >= n) {
			s->q[s->nq++] = k;
			s->next++;
		} else if (r < g->c.loss_pm) {
			if (k + b < n) {
				s->inj.lost += b;
				s->next += b;
			} else {
				s->q[s->nq++] = k;
				s->next++;
			}
		} else if (r < g->c.loss_pm + g->c.dup_pm) {
			s->q[s->nq++] = k;
			s->q[s->nq++] = k;
			s->inj.duplicated++;
			s->next++;
		} else if (r < g->c.loss_pm + g->c.dup_pm + g->c.reorder_pm && k + 2 < n) {
			s->q[s->nq++] = k + 1;
			s->q[s->nq++] = k;
			s->inj.reordered++;
			s->next += 2;
		} else {
			s->q[s->nq++] = k;
			s->next++;
		}
	}
}

static int build_data(struct pdma_gen *g, uint32_t si, uint64_t k, uint8_t *buf, size_t cap)
{
	const struct pdma_gen_config *c = &g->c;
	uint32_t id = c->stream_id_base + si;
	uint64_t s = (g->k0 + k) * g->spp;
	struct pdma_vrt_packet p = {
		.type = PDMA_VRT_DATA_SID,
		.flags = PDMA_VRT_F_CLASS | (c->trailer ? PDMA_VRT_F_TRAILER : 0),
		.tsi = PDMA_VRT_TSI_UTC,
		.tsf = PDMA_VRT_TSF_SAMPLES,
		.count = (uint8_t)(k & 15),
		.stream_id = id,
		.oui = GEN_OUI,
		.icc = 0,
		.pcc = 1,
		.ts_int = (uint32_t)(s / c->sample_rate),
		.ts_frac = s % c->sample_rate,
		/* calibrated time + valid data enabled and set */
		.trailer = 0xc0000000u | 0x000c0000u,
	};
	int n = pdma_vrt_build(&p, NULL, g->plen, buf, cap);
	if (n < 0)
		return -EMSGSIZE;
	/* pdma_gen_sample(id, s + i) for i = 0.. computed incrementally (the
	 * product's low 32 bits advance by the constant; test_ingest checks the
	 * content against pdma_gen_sample): the fill was most of the sender's
	 * user time. */
	uint8_t *o = buf + p.payload_off;
	uint32_t m = (uint32_t)s * 2654435761u, x = id * 40503u, lo = (uint32_t)(s + id);
	for (uint32_t i = 0; i < g->spp; i++, o += 4, m += 2654435761u, lo++) {
		uint32_t v = htonl(((m ^ x) & 0xffff0000u) | (lo & 0xffffu));
		memcpy(o, &v, 4);
	}
	return n;
}

static int build_context(struct pdma_gen *g, uint32_t si, struct gen_stream *s, uint8_t *buf,
			 size_t cap)
{
	uint8_t pay[20];
	/* Sample rate and bandwidth: 64-bit, radix point at bit 20 (Hz). */
	uint64_t rate = g->c.sample_rate << 20, bw = (g->c.sample_rate * 4 / 5) << 20;
	pdma_vrt_put32(pay, PDMA_VRT_CIF0_CHANGE | PDMA_VRT_CIF0_BANDWIDTH | PDMA_VRT_CIF0_SAMPLE_RATE);
	pdma_vrt_put32(pay + 4, (uint32_t)(bw >> 32));
	pdma_vrt_put32(pay + 8, (uint32_t)bw);
	pdma_vrt_put32(pay + 12, (uint32_t)(rate >> 32));
	pdma_vrt_put32(pay + 16, (uint32_t)rate);
	struct pdma_vrt_packet p = {
		.type = PDMA_VRT_CONTEXT,
		.flags = PDMA_VRT_F_CLASS,
		.tsi = PDMA_VRT_TSI_UTC,
		.tsf = PDMA_VRT_TSF_SAMPLES,
		.count = (uint8_t)(s->ctx_count++ & 15),
		.stream_id = g->c.stream_id_base + si,
		.oui = GEN_OUI,
		.pcc = 2,
		.ts_int = g->c.ts_start,
	};
	int n = pdma_vrt_build(&p, pay, sizeof(pay), buf, cap);
	return n < 0 ? -EMSGSIZE : n;
}

int pdma_gen_iter_next(struct pdma_gen *g, struct pdma_gen_iter *it, uint8_t *buf, size_t cap,
		       uint32_t *stream)
{
	if (it->stop && atomic_load(it->stop)) {
		it->stop = NULL;
		pdma_gen_iter_finish(g, it); /* what the events owe, then 0 */
	}
	while (it->live) {
		uint32_t si = it->cur;
		struct gen_stream *s = &g->s[si];
		if (s->turn >= it->burst || (s->nq == 0 && s->next >= s->end)) {
			s->turn = 0;
			it->cur += it->step;
			if (it->cur >= g->c.streams)
				it->cur = it->first;
			continue;
		}
		*stream = si;
		s->turn++;
		if (g->c.context && !s->ctx_sent) {
			s->ctx_sent = true;
			s->inj.context++;
			return build_context(g, si, s, buf, cap);
		}
		refill(g, s);
		if (s->nq == 0) { /* everything left was dropped */
			s->turn = it->burst;
			continue;
		}
		uint64_t k = s->q[0];
		s->q[0] = s->q[1];
		s->nq--;
		if (s->nq == 0 && s->next >= s->end)
			it->live--;
		s->inj.sent++;
		return build_data(g, si, k, buf, cap);
	}
	return 0;
}

int pdma_gen_next(struct pdma_gen *g, uint8_t *buf, size_t cap, uint32_t *stream)
{
	return pdma_gen_iter_next(g, &g->it, buf, cap, stream);
}

void pdma_gen_iter_finish(struct pdma_gen *g, struct pdma_gen_iter *it)
{
	it->live = 0;
	for (uint32_t i = it->first; i < g->c.streams; i += it->step) {
		struct gen_stream *s = &g->s[i];

		s->end = s->next;
		if (s->nq)
			it->live++;
	}
}

void pdma_gen_finish(struct pdma_gen *g)
{
	pdma_gen_iter_finish(g, &g->it);
}

bool pdma_gen_complete(const struct pdma_gen *g)
{
	for (uint32_t i = 0; i < g->c.streams; i++)
		if (g->s[i].end < g->c.packets)
			return false;
	return true;
}

void pdma_gen_stop_on(struct pdma_gen *g, const atomic_bool *stop)
{
	g->it.stop = stop;
}
