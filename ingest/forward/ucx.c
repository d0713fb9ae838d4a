// SPDX-License-Identifier: MIT
/* UCP context, worker and memory maps for forwarding, and UCX loaded at run
 * time (ucx.h says why). */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "forward/ucx.h"

#define UCP_SYMS(X)                                                           \
	X(config_read, ucp_config_read)                                       \
	X(config_release, ucp_config_release)                                 \
	X(init_version, ucp_init_version)                                     \
	X(cleanup, ucp_cleanup)                                               \
	X(context_query, ucp_context_query)                                   \
	X(get_version, ucp_get_version)                                       \
	X(worker_create, ucp_worker_create)                                   \
	X(worker_destroy, ucp_worker_destroy)                                 \
	X(worker_progress, ucp_worker_progress)                               \
	X(worker_arm, ucp_worker_arm)                                         \
	X(worker_get_efd, ucp_worker_get_efd)                                 \
	X(worker_set_am_recv_handler, ucp_worker_set_am_recv_handler)         \
	X(listener_create, ucp_listener_create)                               \
	X(listener_destroy, ucp_listener_destroy)                             \
	X(listener_query, ucp_listener_query)                                 \
	X(listener_reject, ucp_listener_reject)                               \
	X(ep_create, ucp_ep_create)                                           \
	X(ep_close_nbx, ucp_ep_close_nbx)                                     \
	X(am_send_nbx, ucp_am_send_nbx)                                       \
	X(am_recv_data_nbx, ucp_am_recv_data_nbx)                             \
	X(am_data_release, ucp_am_data_release)                               \
	X(mem_map, ucp_mem_map)                                               \
	X(mem_unmap, ucp_mem_unmap)                                           \
	X(request_free, ucp_request_free)                                     \
	X(request_check_status, ucp_request_check_status)                     \
	X(status_string, ucs_status_string)

/* Each pointer's type is checked against UCX's own declaration at compile
 * time: _Generic does not evaluate &sym, so nothing here links to UCX. */
#define UCP_CHECK(field, sym)                                                          \
	_Static_assert(_Generic(&sym, __typeof__(((struct pdma_ucp_api *)0)->field): 1, \
				default: 0),                                           \
		       #sym ": another type in this UCX's headers");
UCP_SYMS(UCP_CHECK)

static const struct {
	const char *name;
	size_t off;
} ucp_syms[] = {
#define UCP_ENTRY(field, sym) { #sym, offsetof(struct pdma_ucp_api, field) },
	UCP_SYMS(UCP_ENTRY)
};

/* Loaded once per process. */
static pthread_once_t ucp_once = PTHREAD_ONCE_INIT;
static struct pdma_ucp_api ucp_loaded;
static int ucp_err;
static char ucp_msg[256];

static void ucp_fail(const char *fmt, const char *a, const char *b)
{
	snprintf(ucp_msg, sizeof(ucp_msg), fmt, a, b);
	ucp_err = -ENODEV;
}

static void ucp_load(void)
{
	const char *path = getenv("PEERDMA_LIBUCP");
	void *h;

	if (!path || !*path)
		path = "libucp.so.0";
	/* before libucs's constructor reads it (ucx.h says why) */
	setenv("UCX_MEM_EVENTS", "no", 0);
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *e = dlerror();

		ucp_fail("UCX not available: cannot load %s (%s): install libucx0", path,
			 e ? e : "unknown error");
		return;
	}
	/* dlsym on the handle also searches what it loaded (libucs). A
	 * handle that fails stays loaded: its constructors have run. */
	for (size_t i = 0; i < sizeof(ucp_syms) / sizeof(ucp_syms[0]); i++) {
		void *f = dlsym(h, ucp_syms[i].name);

		if (!f) {
			ucp_fail("%s is not a usable UCX: %s missing", path, ucp_syms[i].name);
			return;
		}
		memcpy((char *)&ucp_loaded + ucp_syms[i].off, &f, sizeof(f));
	}
	ucp_loaded.memory_type_names = dlsym(h, "ucs_memory_type_names");
	if (!ucp_loaded.memory_type_names)
		ucp_fail("%s is not a usable UCX: %s missing", path, "ucs_memory_type_names");
}

int pdma_ucp_get(const struct pdma_ucp_api **api, char *msg, size_t msglen)
{
	pthread_once(&ucp_once, ucp_load);
	if (ucp_err) {
		if (msg && msglen)
			snprintf(msg, msglen, "%s", ucp_msg);
		return ucp_err;
	}
	*api = &ucp_loaded;
	return 0;
}
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
	int ret;

	memset(u, 0, sizeof(*u));
	ret = pdma_ucp_get(&u->api, msg, msglen);
	if (ret)
		return ret;
	st = u->api->config_read(NULL, NULL, &cfg);
	if (st != UCS_OK)
		goto fail;
	p.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
	/* WAKEUP: the threads sleep on the worker's event fd when idle */
	p.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
	p.mt_workers_shared = 0;
	st = u->api->init_version(UCP_API_MAJOR, UCP_API_MINOR, &p, cfg, &u->ctx);
	u->api->config_release(cfg);
	if (st != UCS_OK)
		goto fail;
	/* Which memory the transports can send from: the staging decision
	 * rests on this, not on how UCX was packaged. */
	ca.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
	st = u->api->context_query(u->ctx, &ca);
	if (st != UCS_OK)
		goto fail;
	u->mem_types = ca.memory_types;
	u->cuda = !!(u->mem_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA));
	wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
	wp.thread_mode = UCS_THREAD_MODE_SINGLE;
	st = u->api->worker_create(u->ctx, &wp, &u->worker);
	if (st != UCS_OK)
		goto fail;
	u->api->get_version(&maj, &min, &rel);
	int n = snprintf(u->desc, sizeof(u->desc), "UCX %u.%u.%u, memory types:", maj, min, rel);
	for (int t = 0; t < UCS_MEMORY_TYPE_LAST && n > 0 && (size_t)n < sizeof(u->desc); t++)
		if (u->mem_types & UCS_BIT(t))
			n += snprintf(u->desc + n, sizeof(u->desc) - (size_t)n, " %s",
				      u->api->memory_type_names[t]);
	return 0;
fail:
	if (msg)
		snprintf(msg, msglen, "UCX: %s", u->api->status_string(st));
	pdma_ucx_close(u);
	return -EIO;
}

void pdma_ucx_close(struct pdma_ucx *u)
{
	if (u->worker)
		u->api->worker_destroy(u->worker);
	if (u->ctx)
		u->api->cleanup(u->ctx);
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
	return u->api->mem_map(u->ctx, &mp, memh) == UCS_OK ? 0 : -EIO;
}

unsigned pdma_ucx_progress(struct pdma_ucx *u)
{
	unsigned n = 0, k;

	while ((k = u->api->worker_progress(u->worker)))
		n += k;
	return n;
}

int pdma_ucx_close_ep(struct pdma_ucx *u, ucp_ep_h ep, int timeout_ms)
{
	ucp_request_param_t p = { 0 };

	p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
	p.flags = UCP_EP_CLOSE_FLAG_FORCE;
	return pdma_ucx_wait(u, u->api->ep_close_nbx(ep, &p), timeout_ms);
}

int pdma_ucx_wait(struct pdma_ucx *u, ucs_status_ptr_t r, int timeout_ms)
{
	double end = pdma_ucx_now() + timeout_ms / 1000.0;
	ucs_status_t st;

	if (r == NULL)
		return 0;
	if (UCS_PTR_IS_ERR(r))
		return pdma_ucx_errno(UCS_PTR_STATUS(r));
	while ((st = u->api->request_check_status(r)) == UCS_INPROGRESS) {
		if (!pdma_ucx_progress(u) && pdma_ucx_now() > end) {
			/* not cancelled and waited for: a close waits on the peer,
			 * which may never answer. Freed, UCX releases it when it
			 * completes (or at the worker's destruction). */
			u->api->request_free(r);
			return -ETIMEDOUT;
		}
	}
	u->api->request_free(r);
	return pdma_ucx_errno(st);
}
