/* SPDX-License-Identifier: MIT */
/* What the forwarder and the consumer ask of UCP: a context for active
 * messages with the memory types the installed UCX supports (queried, not
 * assumed: Debian's 1.13 has no CUDA), one single-threaded worker, and
 * mapped memory. */
#ifndef PDMA_INGEST_FORWARD_UCX_H
#define PDMA_INGEST_FORWARD_UCX_H

#include <stdbool.h>
#include <stddef.h>
#include <ucp/api/ucp.h>

struct pdma_ucx {
	ucp_context_h ctx;
	ucp_worker_h worker;
	uint64_t mem_types;       /* UCS_BIT(ucs_memory_type_t) */
	bool cuda;                /* UCS_MEMORY_TYPE_CUDA among them */
	char desc[160];           /* "UCX 1.13.1, memory types: host, ..." */
};

/* -EIO with msg on a UCX failure. */
int pdma_ucx_open(struct pdma_ucx *u, char *msg, size_t msglen);
void pdma_ucx_close(struct pdma_ucx *u);
/* ucp_mem_map of [p, p + n) of memory type mt: -EIO. */
int pdma_ucx_map(struct pdma_ucx *u, void *p, size_t n, ucs_memory_type_t mt, ucp_mem_h *memh);
/* Progress until nothing more happens; nonzero when something did. */
unsigned pdma_ucx_progress(struct pdma_ucx *u);
/* Wait for a request (NULL, an error pointer or a request) with progress,
 * up to timeout_ms: 0, -ETIMEDOUT (the request left to UCX) or -EIO. */
int pdma_ucx_wait(struct pdma_ucx *u, ucs_status_ptr_t r, int timeout_ms);
int pdma_ucx_errno(ucs_status_t st);
double pdma_ucx_now(void);

#endif /* PDMA_INGEST_FORWARD_UCX_H */
