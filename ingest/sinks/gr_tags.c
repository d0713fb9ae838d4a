// SPDX-License-Identifier: MIT
/* gr-zeromq's tag header and the few PMT serializations it needs (gr_tags.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sinks/gr_tags.h"

#define GR_HDR_MAGIC 0x5FF0u
#define GR_HDR_VERSION 1u
/* Where the tag count sits: after magic (2), version (1) and offset (8). */
#define GR_HDR_NTAGS_AT 11u

/* PMT serialization type bytes (GNU Radio's pmt_serial_tags). */
enum {
	PST_SYMBOL = 0x02,
	PST_DOUBLE = 0x04,
	PST_UINT64 = 0x0b,
	PST_TUPLE = 0x0c,
};

static void put(struct pdma_gr_tags *h, const void *p, size_t n)
{
	if (h->err)
		return;
	if (h->len + n > h->cap) {
		size_t cap = h->cap ? h->cap : 256;
		while (cap < h->len + n)
			cap *= 2;
		uint8_t *b = realloc(h->buf, cap);
		if (!b) {
			h->err = -ENOMEM;
			return;
		}
		h->buf = b;
		h->cap = cap;
	}
	memcpy(h->buf + h->len, p, n);
	h->len += n;
}

static void put_be(struct pdma_gr_tags *h, uint64_t v, unsigned bytes)
{
	uint8_t b[8];
	for (unsigned i = 0; i < bytes; i++)
		b[i] = (uint8_t)(v >> (8 * (bytes - 1 - i)));
	put(h, b, bytes);
}

static void pmt_symbol(struct pdma_gr_tags *h, const char *s)
{
	size_t n = strlen(s);
	uint8_t t = PST_SYMBOL;
	put(h, &t, 1);
	put_be(h, n, 2);
	put(h, s, n);
}

static void pmt_u64(struct pdma_gr_tags *h, uint64_t v)
{
	uint8_t t = PST_UINT64;
	put(h, &t, 1);
	put_be(h, v, 8);
}

static void pmt_double(struct pdma_gr_tags *h, double d)
{
	uint64_t v;
	uint8_t t = PST_DOUBLE;
	memcpy(&v, &d, sizeof(v));
	put(h, &t, 1);
	put_be(h, v, 8);
}

/* A tag's offset and key; its value follows, then the srcid (tag_end). */
static void tag_start(struct pdma_gr_tags *h, uint64_t offset, const char *key)
{
	put(h, &offset, sizeof(offset)); /* host order, as GNU Radio writes it */
	pmt_symbol(h, key);
}

static void tag_end(struct pdma_gr_tags *h)
{
	/* srcid: which block made the tag; a symbol names the producer. */
	pmt_symbol(h, "peerdma");
	h->ntags++;
}

void pdma_gr_tags_begin(struct pdma_gr_tags *h, uint64_t offset)
{
	uint16_t magic = GR_HDR_MAGIC;
	uint8_t version = GR_HDR_VERSION;
	uint64_t zero = 0;

	h->len = 0;
	h->ntags = 0;
	h->err = 0;
	put(h, &magic, sizeof(magic));
	put(h, &version, sizeof(version));
	put(h, &offset, sizeof(offset));
	put(h, &zero, sizeof(zero)); /* the count, written by pdma_gr_tags_end */
}

void pdma_gr_tag_u64(struct pdma_gr_tags *h, uint64_t offset, const char *key, uint64_t v)
{
	tag_start(h, offset, key);
	pmt_u64(h, v);
	tag_end(h);
}

void pdma_gr_tag_double(struct pdma_gr_tags *h, uint64_t offset, const char *key, double v)
{
	tag_start(h, offset, key);
	pmt_double(h, v);
	tag_end(h);
}

void pdma_gr_tag_time(struct pdma_gr_tags *h, uint64_t offset, const char *key, uint64_t secs,
		      double frac)
{
	uint8_t t = PST_TUPLE;
	tag_start(h, offset, key);
	put(h, &t, 1);
	put_be(h, 2, 4);
	pmt_u64(h, secs);
	pmt_double(h, frac);
	tag_end(h);
}

int pdma_gr_tags_end(struct pdma_gr_tags *h)
{
	if (h->err)
		return h->err;
	memcpy(h->buf + GR_HDR_NTAGS_AT, &h->ntags, sizeof(h->ntags));
	return 0;
}

void pdma_gr_tags_free(struct pdma_gr_tags *h)
{
	free(h->buf);
	memset(h, 0, sizeof(*h));
}
