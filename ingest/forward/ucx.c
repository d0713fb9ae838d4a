// SPDX-License-Identifier: MIT
/* UCP context, worker and memory maps for forwarding (ucx.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "forward/ucx.h"

double pdma_ucx_now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

int pdma_ucx_errno(ucs_status_t st)
{
	switch (st) {
	case UCS_OK: return 0;
	case UCS_ERR_NO_MEMORY: return -ENOMEM;
	case UCS_ERR_INVALID_PARAM: return -EINVAL;
	case UCS_ERR_BUSY: return -EADDRINUSE;
	case UCS_ERR_UNREACHABLE: return -ECONNREFUSED;
	case UCS_ERR_TIMED_OUT: return -ETIMEDOUT;
	case UCS_ERR_CANCELED: return -ECANCELED;
	case UCS_ERR_CONNECTION_RESET: return -ECONNRESET;
	/* a client endpoint whose connection the listener refused (or
	 * nothing listened) */
	case UCS_ERR_NOT_CONNECTED: return -ECONNREFUSED;
	case UCS_ERR_ENDPOINT_TIMEOUT: return -ETIMEDOUT;
	case UCS_ERR_REJECTED: return -ECONNREFUSED;
	default: return -EIO;
	}
}

int pdma_ucx_open(struct pdma_ucx *u, char *msg, size_t msglen)
{
	ucp_params_t p = { 0 };
	ucp_worker_params_t wp = { 0 };
	ucp_context_attr_t ca = { 0 };
	ucp_config_t *cfg = NULL;
	ucs_status_t st;
	unsigned maj, min, rel;

	memset(u, 0, sizeof(*u));
	st = ucp_config_read(NULL, NULL, &cfg);
	if (st != UCS_OK)
		goto fail;
	p.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
	/* WAKEUP: the threads sleep on the worker's event fd when idle */
	p.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
	p.mt_workers_shared = 0;
	st = ucp_init(&p, cfg, &u->ctx);
	ucp_config_release(cfg);
	if (st != UCS_OK)
		goto fail;
	/* Which memory the transports can send from: the staging decision
	 * rests on this, not on how UCX was packaged. */
	ca.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
	st = ucp_context_query(u->ctx, &ca);
	if (st != UCS_OK)
		goto fail;
	u->mem_types = ca.memory_types;
	u->cuda = !!(u->mem_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA));
	wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
	wp.thread_mode = UCS_THREAD_MODE_SINGLE;
	st = ucp_worker_create(u->ctx, &wp, &u->worker);
	if (st != UCS_OK)
		goto fail;
	ucp_get_version(&maj, &min, &rel);
	int n = snprintf(u->desc, sizeof(u->desc), "UCX %u.%u.%u, memory types:", maj, min, rel);
	for (int t = 0; t < UCS_MEMORY_TYPE_LAST && n > 0 && (size_t)n < sizeof(u->desc); t++)
		if (u->mem_types & UCS_BIT(t))
			n += snprintf(u->desc + n, sizeof(u->desc) - (size_t)n, " %s",
				      ucs_memory_type_names[t]);
	return 0;
fail:
	if (msg)
		snprintf(msg, msglen, "UCX: %s", ucs_status_string(st));
	pdma_ucx_close(u);
	return -EIO;
}

void pdma_ucx_close(struct pdma_ucx *u)
{
	if (u->worker)
		ucp_worker_destroy(u->worker);
	if (u->ctx)
		ucp_cleanup(u->ctx);
	u->worker = NULL;
	u->ctx = NULL;
}

int pdma_ucx_map(struct pdma_ucx *u, void *p, size_t n, ucs_memory_type_t mt, ucp_mem_h *memh)
{
	ucp_mem_map_params_t mp = { 0 };

	mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
			UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
	mp.address = p;
	mp.length = n;
	mp.memory_type = mt;
	/* a pool is large (streams x buffers x block bytes) and mostly
	 * untouched at first: where a transport registers memory (RDMA), let
	 * it do so without populating every page up front */
	mp.flags = UCP_MEM_MAP_NONBLOCK;
	return ucp_mem_map(u->ctx, &mp, memh) == UCS_OK ? 0 : -EIO;
}

unsigned pdma_ucx_progress(struct pdma_ucx *u)
{
	unsigned n = 0, k;

	while ((k = ucp_worker_progress(u->worker)))
		n += k;
	return n;
}

int pdma_ucx_wait(struct pdma_ucx *u, ucs_status_ptr_t r, int timeout_ms)
{
	double end = pdma_ucx_now() + timeout_ms / 1000.0;
	ucs_status_t st;

	if (r == NULL)
		return 0;
	if (UCS_PTR_IS_ERR(r))
		return pdma_ucx_errno(UCS_PTR_STATUS(r));
	while ((st = ucp_request_check_status(r)) == UCS_INPROGRESS) {
		if (!pdma_ucx_progress(u) && pdma_ucx_now() > end) {
			/* not cancelled and waited for: a close waits on the peer,
			 * which may never answer. Freed, UCX releases it when it
			 * completes (or at the worker's destruction). */
			ucp_request_free(r);
			return -ETIMEDOUT;
		}
	}
	ucp_request_free(r);
	return pdma_ucx_errno(st);
}
