/* SPDX-License-Identifier: MIT */
/*
 * The forwarding protocol (ingest/forward/DESIGN.md): UCP active messages,
 * one AM id per message, little-endian integers at fixed offsets. Encoders
 * write into a caller's buffer; decoders check every length and field they
 * read and return -EPROTO (or -EPROTONOSUPPORT for another version), never
 * trusting the peer.
 */
#ifndef PDMA_INGEST_FORWARD_WIRE_H
#define PDMA_INGEST_FORWARD_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "peerdma/ingest.h"

#define PDMA_FWD_MAGIC   0x57464450u /* "PDFW" */
#define PDMA_FWD_VERSION 1u

enum pdma_fwd_am {
	PDMA_FWD_AM_HELLO = 1,
	PDMA_FWD_AM_WELCOME = 2,
	PDMA_FWD_AM_BLOCK = 3,
	PDMA_FWD_AM_CREDIT = 4,
	PDMA_FWD_AM_END = 5,
};

#define PDMA_FWD_NAME_LEN   32
#define PDMA_FWD_MSG_LEN    64
#define PDMA_FWD_MAX_SUBS   256   /* stream IDs in one HELLO */
#define PDMA_FWD_MAX_BLOCK_PACKETS 65536

struct pdma_fwd_hello {
	uint32_t version;
	uint32_t credits;
	char name[PDMA_FWD_NAME_LEN + 1];
	uint32_t nstreams;            /* 0: every stream */
	uint32_t streams[PDMA_FWD_MAX_SUBS];
};

struct pdma_fwd_welcome {
	uint32_t version;
	int32_t status;               /* 0 or a negative errno */
	uint32_t block_packets, max_payload;
	uint64_t sample_rate;
	char msg[PDMA_FWD_MSG_LEN + 1];
};

struct pdma_fwd_end {
	uint64_t dropped_blocks, dropped_packets;
};

/* The header bytes of each message (BLOCK: with its gap mask). */
#define PDMA_FWD_HELLO_FIXED   (4 + 4 + 4 + PDMA_FWD_NAME_LEN + 4)
#define PDMA_FWD_WELCOME_LEN   (4 + 4 + 4 + 4 + 4 + 8 + PDMA_FWD_MSG_LEN)
#define PDMA_FWD_BLOCK_FIXED   (4 * 4 + 8 * 4 + 4 * 2 + 8 + 4 + 8 * 3 + 4)
#define PDMA_FWD_END_LEN       (4 + 8 + 8)
#define PDMA_FWD_CREDIT_LEN    (4 + 4)

static inline size_t pdma_fwd_block_hdr_len(uint32_t npackets)
{
	return PDMA_FWD_BLOCK_FIXED + (size_t)(npackets + 63) / 64 * 8;
}

size_t pdma_fwd_hello_put(uint8_t *p, const struct pdma_fwd_hello *h);
int pdma_fwd_hello_get(const void *p, size_t len, struct pdma_fwd_hello *h);
size_t pdma_fwd_welcome_put(uint8_t *p, const struct pdma_fwd_welcome *w);
int pdma_fwd_welcome_get(const void *p, size_t len, struct pdma_fwd_welcome *w);
/* BLOCK: b's metadata and gap mask; buf holds pdma_fwd_block_hdr_len(npackets). */
size_t pdma_fwd_block_put(uint8_t *p, const struct pdma_block *b);
/* Into b (its gap_mask must point to room for max_packets bits); checks the
 * fields against the geometry the consumer was told in WELCOME. */
int pdma_fwd_block_get(const void *p, size_t len, uint32_t max_packets, uint32_t max_payload,
		       struct pdma_block *b, uint64_t *gap_mask);
size_t pdma_fwd_credit_put(uint8_t *p, uint32_t n);
int pdma_fwd_credit_get(const void *p, size_t len, uint32_t *n);
size_t pdma_fwd_end_put(uint8_t *p, const struct pdma_fwd_end *e);
int pdma_fwd_end_get(const void *p, size_t len, struct pdma_fwd_end *e);

#endif /* PDMA_INGEST_FORWARD_WIRE_H */
