/* SPDX-License-Identifier: MIT */
/*
 * GNU Radio's stream tags as gr-zeromq sends them in front of a message's
 * samples (gr-zeromq/lib/tag_headers.cc, read by sub_source with
 * pass_tags=True): a header of u16 magic 0x5FF0, u8 version 1, u64 offset of
 * the message's first item, u64 tag count, then per tag its u64 offset and
 * three serialized PMTs (key, value, srcid). The integers are in host byte
 * order (GNU Radio writes them raw); the PMTs in PMT's serialization
 * (pmt_serialize.cc: a type byte, then big-endian fields).
 *
 * Only what the ZeroMQ sink needs: symbol keys, u64, double and (u64, double)
 * tuple values, a symbol srcid.
 *
 * Thread safety: a header is one thread's.
 */
#ifndef PDMA_INGEST_SINKS_GR_TAGS_H
#define PDMA_INGEST_SINKS_GR_TAGS_H

#include <stddef.h>
#include <stdint.h>

struct pdma_gr_tags {
	uint8_t *buf;
	size_t len, cap;
	uint64_t ntags;
	int err;          /* -ENOMEM once an append failed (then every append is a no-op) */
};

/* Starts a header for a message whose first item is at offset (reuses buf). */
void pdma_gr_tags_begin(struct pdma_gr_tags *h, uint64_t offset);
void pdma_gr_tag_u64(struct pdma_gr_tags *h, uint64_t offset, const char *key, uint64_t v);
void pdma_gr_tag_double(struct pdma_gr_tags *h, uint64_t offset, const char *key, double v);
/* UHD's rx_time: (u64 whole seconds, double fractional seconds). */
void pdma_gr_tag_time(struct pdma_gr_tags *h, uint64_t offset, const char *key, uint64_t secs,
		      double frac);
/* Writes the tag count into the header: 0, or -ENOMEM. */
int pdma_gr_tags_end(struct pdma_gr_tags *h);
void pdma_gr_tags_free(struct pdma_gr_tags *h);

#endif /* PDMA_INGEST_SINKS_GR_TAGS_H */
