// SPDX-License-Identifier: MIT
/* libFuzzer target: the forwarding protocol's decoders (ingest/forward/
 * wire.c), which read what a peer on the network sent. The first byte picks
 * the message and the consumer's geometry; the rest is the message.
 * Invariants: no out-of-bounds access (ASan) whatever the length; a decoded
 * BLOCK fits the consumer's buffers (packets, payload, mask) and its gap
 * count is its mask's; a decoded message encodes back to the same bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "forward/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t out[PDMA_FWD_HELLO_FIXED + 4 * PDMA_FWD_MAX_SUBS + 8192 * 8 + 256];
	static uint64_t mask[(PDMA_FWD_MAX_BLOCK_PACKETS + 63) / 64];
	uint32_t max_packets, max_payload;
	uint8_t sel;

	if (size < 1)
		return 0;
	sel = data[0];
	data++;
	size--;
	max_packets = 1u << (sel >> 4);          /* 1 .. 32768 */
	max_payload = 4u << ((sel >> 1) & 7);    /* 4 .. 512 */
	/* the decoder may not need a copy of the bytes: heap-allocated at the
	 * exact size, so that ASan sees a read one byte past them */
	uint8_t *msg = malloc(size ? size : 1);
	if (!msg)
		return 0;
	memcpy(msg, data, size);
	switch (sel & 1 ? 0 : (sel >> 1) % 4 + 1) {
	case 0: {
		struct pdma_block b;
		uint32_t bits = 0;

		if (pdma_fwd_block_get(msg, size, max_packets, max_payload, &b, mask))
			break;
		if (b.npackets > max_packets || b.samples_per_packet * 4ull > max_payload ||
		    b.nsamples != (uint64_t)b.npackets * b.samples_per_packet || b.gap_mask != mask)
			abort();
		for (uint32_t i = 0; i < (b.npackets + 63) / 64; i++)
			bits += (uint32_t)__builtin_popcountll(mask[i]);
		if (bits != b.gaps)
			abort();
		/* the mask's bits past npackets are cleared: only then equal */
		size_t n = pdma_fwd_block_put(out, &b);
		if (n != size)
			abort();
		break;
	}
	case 1: {
		struct pdma_fwd_hello h;

		if (pdma_fwd_hello_get(msg, size, &h))
			break;
		if (h.nstreams > PDMA_FWD_MAX_SUBS || !h.name[0] || strlen(h.name) > PDMA_FWD_NAME_LEN)
			abort();
		if (pdma_fwd_hello_put(out, &h) != size || memcmp(out, msg, size))
			abort();
		break;
	}
	case 2: {
		struct pdma_fwd_welcome w;

		if (pdma_fwd_welcome_get(msg, size, &w))
			break;
		if (w.status > 0 || (!w.status && (!w.block_packets || w.max_payload % 4)))
			abort();
		if (pdma_fwd_welcome_put(out, &w) != size)
			abort();
		break;
	}
	case 3: {
		uint32_t n;

		if (!pdma_fwd_credit_get(msg, size, &n) &&
		    (!n || pdma_fwd_credit_put(out, n) != size || memcmp(out, msg, size)))
			abort();
		break;
	}
	default: {
		struct pdma_fwd_end e;

		if (!pdma_fwd_end_get(msg, size, &e) &&
		    (pdma_fwd_end_put(out, &e) != size || memcmp(out, msg, size)))
			abort();
		break;
	}
	}
	free(msg);
	return 0;
}
