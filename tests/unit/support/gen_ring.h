/* SPDX-License-Identifier: MIT */
/* Test support: slot rings (rx/ring.h) filled from two generators at once,
 * as two senders' datagrams arrive interleaved at one receiver. */
#ifndef PDMA_TEST_GEN_RING_H
#define PDMA_TEST_GEN_RING_H

#include <stdbool.h>
#include <stdint.h>

#include "gen/gen.h"
#include "rx/ring.h"

/* The datagrams of generators a and b, one from each in turn while both
 * last, into r's slots from slot 0. finish: each slot's header as a receive
 * thread writes it (pdma_slot_finish); else only its length and the
 * layout's flags, for a test that breaks datagrams before it finishes the
 * headers itself. Returns the number of slots filled; the test fails where
 * the ring has too few. */
uint32_t gen_ring_fill2(struct pdma_ring *r, const struct pdma_gen_config *a, const struct pdma_gen_config *b,
			bool finish);

#endif
