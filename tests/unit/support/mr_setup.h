/* SPDX-License-Identifier: MIT */
/*
 * Openers for the MR layer's unit tests (test_mr_*.c): a domain, a simulated
 * device, a registration of simulated GPU memory, each asserting success.
 */
#ifndef PDMA_TESTS_MR_SETUP_H
#define PDMA_TESTS_MR_SETUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "peerdma/mr.h"
#include "mem/sim.h"

#define RW (PDMA_READ | PDMA_WRITE | PDMA_REMOTE_READ | PDMA_REMOTE_WRITE)


/* A domain with mr_mode mode over sim (may be NULL). */
struct pdma_domain *dom_open(uint32_t mode, struct pdma_sim *sim);
struct pdma_sim *sim_open(size_t mem, size_t bar);
/* Register [buf, buf + len) of simulated GPU memory with access. */
struct pdma_mr *reg_sim(struct pdma_domain *d, void *buf, size_t len, uint64_t access);

/* Host memory through the public API with the cache on (the environment's
 * monitor: userfaultfd by default). NULL if the domain cannot be opened. */
struct pdma_domain *dom_open_cached(void);
/* Does d's cache keep host registrations (a host monitor runs)? */
bool dom_host_cached(struct pdma_domain *d);
/* munmap/madvise return once the userfaultfd monitor has read their event;
 * lookups wait for the invalidation, and tests wait too before reading stats. */
void uffd_settle(void);
/* Locked memory of this process in KiB (VmLck in /proc/self/status). */
long vmlck_kib(void);

#endif /* PDMA_TESTS_MR_SETUP_H */
