/* SPDX-License-Identifier: MIT */
/* The data-path part of `peerdma demo`: gen -> ingest over 127.0.0.1 with the
 * CPU deframer, a few streams, deterministic injected loss (16-packet bursts,
 * the 4-bit count's blind spot), reordering and duplication. Prints what was
 * injected vs detected per stream to out; returns 0 only if they match
 * exactly and every deframed byte is what was sent, else 1 (or a negative
 * errno when the run itself failed). */
#ifndef PDMA_INGEST_DEMO_H
#define PDMA_INGEST_DEMO_H

#include <stdio.h>

int pdma_ingest_demo(FILE *out);

#endif
