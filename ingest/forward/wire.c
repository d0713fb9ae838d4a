// SPDX-License-Identifier: MIT
/* The forwarding protocol's encoding and checks (wire.h). */
#include <endian.h>
#include <errno.h>
#include <string.h>

#include "forward/wire.h"

static void put32(uint8_t **p, uint32_t v)
{
	v = htole32(v);
	memcpy(*p, &v, 4);
	*p += 4;
}

static void put64(uint8_t **p, uint64_t v)
{
	v = htole64(v);
	memcpy(*p, &v, 8);
	*p += 8;
}

static void putd(uint8_t **p, double d)
{
	uint64_t v;

	memcpy(&v, &d, 8);
	put64(p, v);
}

static void putstr(uint8_t **p, const char *s, size_t n)
{
	size_t l = strnlen(s, n);

	memset(*p, 0, n);
	memcpy(*p, s, l);
	*p += n;
}

static uint32_t get32(const uint8_t **p)
{
	uint32_t v;

	memcpy(&v, *p, 4);
	*p += 4;
	return le32toh(v);
}

static uint64_t get64(const uint8_t **p)
{
	uint64_t v;

	memcpy(&v, *p, 8);
	*p += 8;
	return le64toh(v);
}

static double getd(const uint8_t **p)
{
	uint64_t v = get64(p);
	double d;

	memcpy(&d, &v, 8);
	return d;
}

/* n bytes, NUL-padded: printable ASCII only (names and messages are
 * printed by the other side), zeros after it (one encoding per string). */
static int getstr(const uint8_t **p, char *s, size_t n)
{
	size_t i;

	for (i = 0; i < n && (*p)[i]; i++) {
		if ((*p)[i] < 0x20 || (*p)[i] > 0x7e)
			return -EPROTO;
		s[i] = (char)(*p)[i];
	}
	s[i] = 0;
	for (size_t k = i; k < n; k++)
		if ((*p)[k])
			return -EPROTO;
	*p += n;
	return 0;
}

size_t pdma_fwd_hello_put(uint8_t *p, const struct pdma_fwd_hello *h)
{
	uint8_t *s = p;

	put32(&p, PDMA_FWD_MAGIC);
	put32(&p, h->version);
	put32(&p, h->credits);
	putstr(&p, h->name, PDMA_FWD_NAME_LEN);
	put32(&p, h->nstreams);
	for (uint32_t i = 0; i < h->nstreams && i < PDMA_FWD_MAX_SUBS; i++)
		put32(&p, h->streams[i]);
	return (size_t)(p - s);
}

int pdma_fwd_hello_get(const void *buf, size_t len, struct pdma_fwd_hello *h)
{
	const uint8_t *p = buf;

	memset(h, 0, sizeof(*h));
	if (len < 8 || get32(&p) != PDMA_FWD_MAGIC)
		return -EPROTO;
	h->version = get32(&p);
	/* the version before anything else: a later version may lay the
	 * rest out differently */
	if (h->version != PDMA_FWD_VERSION)
		return -EPROTONOSUPPORT;
	if (len < PDMA_FWD_HELLO_FIXED)
		return -EPROTO;
	h->credits = get32(&p);
	if (getstr(&p, h->name, PDMA_FWD_NAME_LEN) || !h->name[0])
		return -EPROTO;
	h->nstreams = get32(&p);
	/* credits may be 0: a consumer grants them once it has subscribed */
	if (h->nstreams > PDMA_FWD_MAX_SUBS || len != PDMA_FWD_HELLO_FIXED + 4 * (size_t)h->nstreams)
		return -EPROTO;
	for (uint32_t i = 0; i < h->nstreams; i++)
		h->streams[i] = get32(&p);
	return 0;
}

size_t pdma_fwd_welcome_put(uint8_t *p, const struct pdma_fwd_welcome *w)
{
	uint8_t *s = p;

	put32(&p, PDMA_FWD_MAGIC);
	put32(&p, w->version);
	put32(&p, (uint32_t)w->status);
	put32(&p, w->block_packets);
	put32(&p, w->max_payload);
	put64(&p, w->sample_rate);
	putstr(&p, w->msg, PDMA_FWD_MSG_LEN);
	return (size_t)(p - s);
}

int pdma_fwd_welcome_get(const void *buf, size_t len, struct pdma_fwd_welcome *w)
{
	const uint8_t *p = buf;

	memset(w, 0, sizeof(*w));
	if (len < 8 || get32(&p) != PDMA_FWD_MAGIC)
		return -EPROTO;
	w->version = get32(&p);
	/* as HELLO's: another version may lay the rest out differently */
	if (w->version != PDMA_FWD_VERSION)
		return -EPROTONOSUPPORT;
	if (len != PDMA_FWD_WELCOME_LEN)
		return -EPROTO;
	w->status = (int32_t)get32(&p);
	w->block_packets = get32(&p);
	w->max_payload = get32(&p);
	w->sample_rate = get64(&p);
	if (getstr(&p, w->msg, PDMA_FWD_MSG_LEN) || w->status > 0)
		return -EPROTO;
	if (!w->status && (!w->block_packets || w->block_packets > PDMA_FWD_MAX_BLOCK_PACKETS ||
			   !w->max_payload || w->max_payload % 4 || !w->sample_rate))
		return -EPROTO;
	return 0;
}

size_t pdma_fwd_block_put(uint8_t *p, const struct pdma_block *b)
{
	uint8_t *s = p;

	put32(&p, b->stream_id);
	put32(&p, b->format);
	put32(&p, b->bytes_per_sample);
	put32(&p, b->samples_per_packet);
	put64(&p, b->first_sample);
	put64(&p, b->ts_int);
	put64(&p, b->ts_frac);
	put64(&p, b->nsamples);
	put32(&p, b->npackets);
	put32(&p, b->gaps);
	put64(&p, b->seq);
	put32(&p, b->ctx_fields);
	putd(&p, b->ctx_sample_rate);
	putd(&p, b->ctx_rf_freq);
	putd(&p, b->ctx_bandwidth);
	put32(&p, (uint32_t)b->mem);
	for (uint32_t i = 0; i < (b->npackets + 63) / 64; i++)
		put64(&p, b->gap_mask[i]);
	return (size_t)(p - s);
}

int pdma_fwd_block_get(const void *buf, size_t len, uint32_t max_packets, uint32_t max_payload,
		       struct pdma_block *b, uint64_t *gap_mask)
{
	const uint8_t *p = buf;
	uint32_t gaps = 0, mem;

	if (len < PDMA_FWD_BLOCK_FIXED)
		return -EPROTO;
	b->stream_id = get32(&p);
	b->format = get32(&p);
	b->bytes_per_sample = get32(&p);
	b->samples_per_packet = get32(&p);
	b->first_sample = get64(&p);
	b->ts_int = get64(&p);
	b->ts_frac = get64(&p);
	b->nsamples = get64(&p);
	b->npackets = get32(&p);
	b->gaps = get32(&p);
	b->seq = get64(&p);
	b->ctx_fields = get32(&p);
	b->ctx_sample_rate = getd(&p);
	b->ctx_rf_freq = getd(&p);
	b->ctx_bandwidth = getd(&p);
	mem = get32(&p);
	if (b->format != PDMA_FMT_CI16 || b->bytes_per_sample != 4 || !b->npackets ||
	    b->npackets > max_packets || len != pdma_fwd_block_hdr_len(b->npackets) ||
	    (uint64_t)b->samples_per_packet * 4 > max_payload ||
	    b->nsamples != (uint64_t)b->npackets * b->samples_per_packet || b->gaps > b->npackets ||
	    mem < PDMA_BLOCK_HOST || mem > PDMA_BLOCK_CUDA_HOST)
		return -EPROTO;
	for (uint32_t i = 0; i < (b->npackets + 63) / 64; i++) {
		gap_mask[i] = get64(&p);
		if (i == b->npackets / 64 && b->npackets % 64)
			gap_mask[i] &= (1ull << (b->npackets % 64)) - 1;
		gaps += (uint32_t)__builtin_popcountll(gap_mask[i]);
	}
	/* the mask and the count must agree: consumers trust both */
	if (gaps != b->gaps)
		return -EPROTO;
	b->gap_mask = gap_mask;
	b->mem = (enum pdma_block_mem)mem; /* where the forwarder had it */
	return 0;
}

size_t pdma_fwd_credit_put(uint8_t *p, uint32_t n)
{
	uint8_t *s = p;

	put32(&p, PDMA_FWD_MAGIC);
	put32(&p, n);
	return (size_t)(p - s);
}

int pdma_fwd_credit_get(const void *buf, size_t len, uint32_t *n)
{
	const uint8_t *p = buf;

	if (len != PDMA_FWD_CREDIT_LEN || get32(&p) != PDMA_FWD_MAGIC)
		return -EPROTO;
	*n = get32(&p);
	return *n ? 0 : -EPROTO;
}

size_t pdma_fwd_end_put(uint8_t *p, const struct pdma_fwd_end *e)
{
	uint8_t *s = p;

	put32(&p, PDMA_FWD_MAGIC);
	put64(&p, e->dropped_blocks);
	put64(&p, e->dropped_packets);
	return (size_t)(p - s);
}

int pdma_fwd_end_get(const void *buf, size_t len, struct pdma_fwd_end *e)
{
	const uint8_t *p = buf;

	if (len != PDMA_FWD_END_LEN || get32(&p) != PDMA_FWD_MAGIC)
		return -EPROTO;
	e->dropped_blocks = get64(&p);
	e->dropped_packets = get64(&p);
	return 0;
}
