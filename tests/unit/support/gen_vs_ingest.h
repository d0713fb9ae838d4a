/* SPDX-License-Identifier: MIT */
/* Test support: `peerdma gen -j`'s JSON against `peerdma ingest -j`'s, for
 * the tests that run both commands (test_ingest_cli, test_rx_xdp). */
#ifndef PDMA_TEST_GEN_VS_INGEST_H
#define PDMA_TEST_GEN_VS_INGEST_H

#include <jansson.h>

/* Per stream gen sent (packets data packets each): ingest counted exactly
 * the losses, duplicates and reorderings gen injected, nothing malformed, no
 * class mismatch, and received what was not lost. A failed check fails the
 * running cmocka test; returns how many injections there were in all. */
json_int_t gen_vs_ingest(json_t *gen, json_t *ingest, json_int_t packets);

#endif /* PDMA_TEST_GEN_VS_INGEST_H */
