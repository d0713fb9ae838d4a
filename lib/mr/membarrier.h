/* SPDX-License-Identifier: MIT */
/*
 * A full memory fence on every running thread of the process, through
 * membarrier(2) (MEMBARRIER_CMD_PRIVATE_EXPEDITED). Two fast paths lean on
 * it so that their own half of a Dekker exclusion is a plain store and a
 * compiler barrier: the domain lock's biased owner (lock.h) and the
 * registration cache's per-thread reference counts (lib/cache/shard.c). The
 * rare other side calls pdma_membarrier_fence() between its store and its
 * load, and so sees the fast path's store or is seen by its load.
 *
 * Thread safety: both calls from any thread.
 */
#ifndef PDMA_LIB_MR_MEMBARRIER_H
#define PDMA_LIB_MR_MEMBARRIER_H

#include <stdbool.h>

/* Register the process for the private expedited command (once: the state
 * belongs to the process). True when fences can be had. In a process with
 * threads the registration waits for an RCU grace period (milliseconds):
 * call it from an open, not from a path that is timed. */
bool pdma_membarrier_ready(void);

/* The fence. Only after pdma_membarrier_ready() returned true; never fails
 * then (it falls back to the global command, and stops the process if even
 * that is refused: continuing would break the exclusions built on it). */
void pdma_membarrier_fence(void);

#endif /* PDMA_LIB_MR_MEMBARRIER_H */
