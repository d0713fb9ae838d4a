// SPDX-License-Identifier: MIT
/* A backend that pins nothing: a pin is its address. bench/regcache and the
 * callgrind guard (tests/perf/reg_icount.c) measure the cache alone with it,
 * the hit and miss paths without a backend's cost. */
#include <stdint.h>

#include "mem/mem.h"

static int noop_query(void *be, uint64_t addr, size_t len, struct pdma_mem_alloc *a)
{
	(void)be;
	a->base = addr;
	a->size = len;
	a->buffer_id = 0;
	return 0;
}

static int noop_pin(void *be, uint64_t addr, size_t len, pdma_mem_revoke_fn revoke, void *arg,
		    void **pin)
{
	(void)be, (void)len, (void)revoke, (void)arg;
	*pin = (void *)(uintptr_t)addr;
	return 0;
}

static void noop_unpin(void *be, void *pin)
{
	(void)be, (void)pin;
}

const struct pdma_mem_ops pdma_mem_noop_ops = {
	.name = "noop", .page_size = 4096, .query = noop_query, .pin = noop_pin,
	.unpin = noop_unpin,
};
