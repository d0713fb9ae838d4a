/* SPDX-License-Identifier: MIT */
/*
 * Process-wide invalidation fan-out. Sources that learn memory is going away
 * (allocation hooks on munmap/cuMemFree/..., userfaultfd events, kernel events
 * from /dev/peerdma, the sim backend's free) call pdma_monitor_notify() BEFORE
 * the memory is released; subscribers (registration caches) drop every region
 * overlapping the range. Process-wide because the sources are: an interposed
 * free() knows no domain.
 *
 * Thread safety: all calls from any thread. Callbacks run in the notifying
 * thread and must not call subscribe/unsubscribe.
 */
#ifndef PDMA_LIB_MONITOR_H
#define PDMA_LIB_MONITOR_H

#include <stddef.h>
#include <stdint.h>

#include "peerdma/mr.h"

typedef void (*pdma_monitor_fn)(void *arg, enum pdma_hmem_iface iface, uint64_t addr,
				size_t len);
struct pdma_monitor_sub;

int pdma_monitor_subscribe(pdma_monitor_fn fn, void *arg, struct pdma_monitor_sub **sub);
void pdma_monitor_unsubscribe(struct pdma_monitor_sub *sub);
void pdma_monitor_notify(enum pdma_hmem_iface iface, uint64_t addr, size_t len);

#endif /* PDMA_LIB_MONITOR_H */
