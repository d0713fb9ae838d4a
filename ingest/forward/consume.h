/* SPDX-License-Identifier: MIT */
/* The consumer's misbehaviours, for the tests of what a forwarder does with
 * a bad consumer (tests/forward/): not in the public header. */
#ifndef PDMA_INGEST_FORWARD_CONSUME_H
#define PDMA_INGEST_FORWARD_CONSUME_H

#include <stdbool.h>
#include <stdint.h>

#include "peerdma/forward.h"

struct pdma_consume_faults {
	uint32_t version;    /* HELLO's protocol version (0: the right one) */
	bool no_credits;     /* grant its pool at start, never return a credit (a consumer
			      * that stalls) */
	bool garbage_hello;  /* HELLO is random bytes */
};

int pdma_consume_open_faults(const struct pdma_consume_attr *a, const struct pdma_consume_faults *fl,
			     struct pdma_consume **c, char *msg, size_t msglen);

#endif
