/* SPDX-License-Identifier: MIT */
/*
 * A fake memory backend for the registration cache's unit tests
 * (test_cache_*.c): counting pins, a finite BAR, controllable buffer IDs and
 * pin failures, revocation on "free", so the tests check the cache alone.
 */
#ifndef PDMA_TESTS_FAKE_MEM_H
#define PDMA_TESTS_FAKE_MEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "cache/cache.h"

#define PG 65536ull
#define BASE 0x7f0000000000ull

struct fpin {
	uint64_t start;
	size_t len;
	pdma_mem_revoke_fn revoke;
	void *arg;
	int revoked;
	uint64_t gen;
	struct fpin *next;
};

struct fake_mem {
	size_t bar, used;
	unsigned pins, unpins, live, revokes;
	int fail_once;          /* -errno for the next pin */
	uint64_t buffer_id;     /* what query reports, and same_alloc compares */
	unsigned queries, id_checks;
	uint64_t unpinned[256]; /* starts, in unpin order */
	unsigned nunpinned;
	struct fpin *list;
};


extern const struct pdma_mem_ops fake_ops;
/* Backend-side free: revoke every live pin overlapping the range. */
void fake_free(struct fake_mem *f, uint64_t start, size_t len);
void fake_init(struct fake_mem *f, size_t bar_pages);
/* A cache with no host monitor: SIM trusted, CUDA tag-checked. */
struct pdma_cache *open_cache(size_t max_count, size_t max_size);
/* A get of the fake's memory as SIM that must succeed and cover the range. */
struct pdma_region *get_ok(struct pdma_cache *c, struct fake_mem *f, uint64_t addr, size_t len);
void stats(struct pdma_cache *c, struct pdma_cache_stats *s);

/* Under valgrind (PEERDMA_VALGRIND, tests/CMakeLists.txt) loops run shorter. */
static inline bool under_valgrind(void)
{
	return getenv("PEERDMA_VALGRIND") != NULL;
}

#endif /* PDMA_TESTS_FAKE_MEM_H */
