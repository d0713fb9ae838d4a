/* SPDX-License-Identifier: MIT */
/* What the forwarder and the consumer ask of UCP: a context for active
 * messages with the memory types the installed UCX supports (queried, not
 * assumed: Debian's 1.13 has no CUDA), one single-threaded worker, and
 * mapped memory.
 *
 * UCX is loaded at run time (libucp.so.0, or PEERDMA_LIBUCP), on the first
 * pdma_ucx_open, never linked: loading UCX changes the whole process. Its
 * libucs constructor patches libc's mmap, munmap, mremap... (UCM's memory
 * hooks), and UCX 1.13's mremap hook drops the fifth argument, so every
 * mremap(MREMAP_FIXED) of the process goes to address 0 (openucx/ucx#8820,
 * fixed in 1.15; Debian 12 has 1.13.1). A program that links
 * libpeerdma_ingest and never forwards must not pay that. Before loading,
 * UCX_MEM_EVENTS=no is set unless the environment sets it: the forwarder's
 * and the consumer's memory is ucp_mem_map'ed by them, so UCX's own
 * registration cache (what the hooks serve) is never needed. */
#ifndef PDMA_INGEST_FORWARD_UCX_H
#define PDMA_INGEST_FORWARD_UCX_H

#include <stdbool.h>
#include <stddef.h>
#include <ucp/api/ucp.h>

/* The UCP (and two UCS) entry points used, in UCX's own types (its headers
 * are a build dependency; the library is not). */
struct pdma_ucp_api {
	ucs_status_t (*config_read)(const char *env_prefix, const char *filename,
				    ucp_config_t **config);
	void (*config_release)(ucp_config_t *config);
	ucs_status_t (*init_version)(unsigned api_major, unsigned api_minor,
				     const ucp_params_t *params, const ucp_config_t *config,
				     ucp_context_h *context);
	void (*cleanup)(ucp_context_h context);
	ucs_status_t (*context_query)(ucp_context_h context, ucp_context_attr_t *attr);
	void (*get_version)(unsigned *major, unsigned *minor, unsigned *release);
	ucs_status_t (*worker_create)(ucp_context_h context, const ucp_worker_params_t *params,
				      ucp_worker_h *worker);
	void (*worker_destroy)(ucp_worker_h worker);
	unsigned (*worker_progress)(ucp_worker_h worker);
	ucs_status_t (*worker_arm)(ucp_worker_h worker);
	ucs_status_t (*worker_get_efd)(ucp_worker_h worker, int *fd);
	ucs_status_t (*worker_set_am_recv_handler)(ucp_worker_h worker,
						   const ucp_am_handler_param_t *param);
	ucs_status_t (*listener_create)(ucp_worker_h worker, const ucp_listener_params_t *params,
					ucp_listener_h *listener);
	void (*listener_destroy)(ucp_listener_h listener);
	ucs_status_t (*listener_query)(ucp_listener_h listener, ucp_listener_attr_t *attr);
	ucs_status_t (*listener_reject)(ucp_listener_h listener, ucp_conn_request_h req);
	ucs_status_t (*ep_create)(ucp_worker_h worker, const ucp_ep_params_t *params,
				  ucp_ep_h *ep);
	ucs_status_ptr_t (*ep_close_nbx)(ucp_ep_h ep, const ucp_request_param_t *param);
	ucs_status_ptr_t (*am_send_nbx)(ucp_ep_h ep, unsigned id, const void *header,
					size_t header_length, const void *buffer, size_t count,
					const ucp_request_param_t *param);
	ucs_status_ptr_t (*am_recv_data_nbx)(ucp_worker_h worker, void *data_desc, void *buffer,
					     size_t count, const ucp_request_param_t *param);
	void (*am_data_release)(ucp_worker_h worker, void *data);
	ucs_status_t (*mem_map)(ucp_context_h context, const ucp_mem_map_params_t *params,
				ucp_mem_h *memh_p);
	ucs_status_t (*mem_unmap)(ucp_context_h context, ucp_mem_h memh);
	void (*request_free)(void *request);
	ucs_status_t (*request_check_status)(void *request);
	const char *(*status_string)(ucs_status_t status);
	const char **memory_type_names; /* ucs_memory_type_names[] */
};

/* The process-wide table, loaded once (thread-safe) and never unloaded
 * (UCX's hooks stay in libc): 0, or -ENODEV with msg naming what is
 * missing. */
int pdma_ucp_get(const struct pdma_ucp_api **api, char *msg, size_t msglen);

struct pdma_ucx {
	const struct pdma_ucp_api *api;
	ucp_context_h ctx;
	ucp_worker_h worker;
	uint64_t mem_types;       /* UCS_BIT(ucs_memory_type_t) */
	bool cuda;                /* UCS_MEMORY_TYPE_CUDA among them */
	char desc[160];           /* "UCX 1.13.1, memory types: host, ..." */
};

/* -ENODEV (UCX not installed) or -EIO with msg on a UCX failure. */
int pdma_ucx_open(struct pdma_ucx *u, char *msg, size_t msglen);
void pdma_ucx_close(struct pdma_ucx *u);
/* ucp_mem_map of [p, p + n) of memory type mt: -EIO. */
int pdma_ucx_map(struct pdma_ucx *u, void *p, size_t n, ucs_memory_type_t mt, ucp_mem_h *memh);
/* Progress until nothing more happens; nonzero when something did. */
unsigned pdma_ucx_progress(struct pdma_ucx *u);
/* Wait for a request (NULL, an error pointer or a request) with progress,
 * up to timeout_ms: 0, -ETIMEDOUT (the request left to UCX) or -EIO. */
int pdma_ucx_wait(struct pdma_ucx *u, ucs_status_ptr_t r, int timeout_ms);
/* Close ep at once (UCP_EP_CLOSE_FLAG_FORCE: its sends are cancelled, their
 * callbacks run), waiting for that up to timeout_ms: as pdma_ucx_wait. */
int pdma_ucx_close_ep(struct pdma_ucx *u, ucp_ep_h ep, int timeout_ms);
int pdma_ucx_errno(ucs_status_t st);
double pdma_ucx_now(void);

#endif /* PDMA_INGEST_FORWARD_UCX_H */
