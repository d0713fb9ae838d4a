// SPDX-License-Identifier: MIT
/* Domains, counters and endpoints (the objects MRs bind to), log routing. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/cache.h"
#include "mr/domain.h"
#include "mem/cuda.h"
#include "mem/kdev.h"
#include "mr/fork.h"

void pdma_domain_attr_init(struct pdma_domain_attr *attr)
{
	*attr = (struct pdma_domain_attr){
		.mr_mode = PDMA_MR_BASIC | PDMA_MR_LOCAL | PDMA_MR_HMEM,
		.mr_key_size = 8,
		.mr_iov_limit = 4,
		.raw_key_size = PDMA_RAW_KEY_MIN,
	};
}

/* What open built, in reverse; also the unwinding of a failed open. */
static void domain_free(struct pdma_domain *d)
{
	if (d->cache)
		pdma_cache_close(d->cache);
	pdma_domain_backend_close(d);
	if (d->kdev)
		pdma_kdev_close(d->kdev);
	pdma_rand_fini(&d->rand);
	while (d->mr_pool) {
		struct pdma_mr *m = d->mr_pool;

		d->mr_pool = m->pool_next;
		free(m);
	}
	pdma_idmap_fini(&d->keys);
	pdma_idmap_fini(&d->descs);
	pthread_mutex_destroy(&d->cuda_lock);
	pthread_mutex_destroy(&d->log_lock);
	free(d->kdev_path);
	free(d);
}

int pdma_domain_open(const struct pdma_domain_attr *attr, struct pdma_domain **out)
{
	struct pdma_domain *d;
	int ret;

	if (!attr || !out)
		return -EINVAL;
	if (attr->mr_mode & ~PDMA_MR_MODE_ALL)
		return -EINVAL;
	if (attr->mr_key_size > 8 || attr->mr_iov_limit > 64)
		return -EINVAL;
	if (attr->raw_key_size && (attr->raw_key_size < PDMA_RAW_KEY_MIN ||
				   attr->raw_key_size > 64))
		return -EINVAL;
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->attr = *attr;
	if (!d->attr.mr_key_size)
		d->attr.mr_key_size = 8;
	if (!d->attr.mr_iov_limit)
		d->attr.mr_iov_limit = 4;
	if (!d->attr.raw_key_size)
		d->attr.raw_key_size = PDMA_RAW_KEY_MIN;
	d->key_mask = d->attr.mr_key_size == 8 ? UINT64_MAX
					       : (1ull << (8 * d->attr.mr_key_size)) - 1;
	pdma_bias_init(&d->lock);
	pthread_mutex_init(&d->cuda_lock, NULL);
	pthread_mutex_init(&d->log_lock, NULL);
	pdma_rand_init(&d->rand);
	pdma_fork_init(); /* before any pin: children must know inherited pins */
	if (d->attr.kernel_device) {
		/* The caller's string need not outlive the call: a copy of our
		 * own, which pdma_domain_query reports. */
		d->kdev_path = strdup(d->attr.kernel_device);
		d->attr.kernel_device = d->kdev_path;
		if (!d->kdev_path) {
			ret = -ENOMEM;
			goto err;
		}
		ret = pdma_kdev_open(d->kdev_path, &d->kdev);
		if (ret)
			goto err;
	}
	if (d->attr.use_cache) {
		struct pdma_cache_attr ca;

		pdma_cache_attr_from_env(&ca);
		ca.kdev = d->kdev; /* the kernel monitor, when the module can be one */
		/* CUDA regions need a per-hit buffer-ID check unless every way
		 * their memory can leave reaches the monitor first. With the
		 * hooks detected (auto) that holds for the allocations the hooks
		 * saw made, not for IPC or VMM mappings or memory allocated past
		 * them: TRUST_WATCHED decides per region. Forced "hooks" trusts
		 * all CUDA memory. */
		if (ca.mode[PDMA_HMEM_CUDA] == PDMA_CACHE_MODE_DEFAULT) {
			switch (pdma_cuda_monitor_mode()) {
			case PDMA_CUDA_MON_HOOKS:
				ca.mode[PDMA_HMEM_CUDA] = PDMA_CACHE_MODE_TRUST;
				break;
			case PDMA_CUDA_MON_AUTO:
				ca.mode[PDMA_HMEM_CUDA] = PDMA_CACHE_MODE_TRUST_WATCHED;
				break;
			default:
				ca.mode[PDMA_HMEM_CUDA] = PDMA_CACHE_MODE_TAG_CHECK;
			}
		}
		ret = pdma_cache_open(&ca, &d->cache);
		if (ret)
			goto err;
	}
	pdma_fork_list_add(&pdma_fork_domains, &d->fork_node);
	*out = d;
	return 0;
err:
	domain_free(d);
	return ret;
}

int pdma_domain_close(struct pdma_domain *d)
{
	if (!d)
		return -EINVAL;
	pdma_dom_lock(d);
	if (d->n_mr || d->n_cntr || d->n_ep || d->eqs || d->keys.n) {
		pdma_dom_unlock(d);
		return -EBUSY;
	}
	pdma_dom_unlock(d);
	pdma_fork_list_del(&pdma_fork_domains, &d->fork_node);
	domain_free(d);
	return 0;
}

int pdma_domain_query(const struct pdma_domain *d, struct pdma_domain_attr *attr)
{
	if (!d || !attr)
		return -EINVAL;
	*attr = d->attr;
	return 0;
}

const char *pdma_domain_cache_monitor(const struct pdma_domain *d)
{
	struct pdma_cache_stats s;

	if (!d || !d->cache)
		return NULL;
	pdma_cache_get_stats(d->cache, &s);
	if (s.mode[PDMA_HMEM_SYSTEM] == PDMA_CACHE_MODE_OFF)
		return "none";
	switch (s.monitor) {
	case PDMA_CACHE_MONITOR_USERFAULTFD: return "userfaultfd";
	case PDMA_CACHE_MONITOR_MEMHOOKS: return "memhooks";
	case PDMA_CACHE_MONITOR_KERNEL: return "kernel";
	default: return "none";
	}
}

/* Any thread, any time: a line being logged meanwhile goes to the old or
 * the new callback, each with its own argument. */
void pdma_domain_set_log(struct pdma_domain *d, pdma_log_fn fn, void *arg)
{
	if (!d)
		return;
	pthread_mutex_lock(&d->log_lock);
	__atomic_store_n(&d->log_fn, fn, __ATOMIC_RELAXED); /* pdma_log's unlocked test */
	d->log_arg = arg;
	pthread_mutex_unlock(&d->log_lock);
}

void pdma_log_msg(struct pdma_domain *d, int level, const char *msg)
{
	pdma_log_fn fn;
	void *arg;

	/* Called outside the lock: a callback may set the log again. */
	pthread_mutex_lock(&d->log_lock);
	fn = d->log_fn;
	arg = d->log_arg;
	pthread_mutex_unlock(&d->log_lock);
	if (fn)
		fn(arg, level, msg);
}

void pdma_log(struct pdma_domain *d, int level, const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	/* Formatted only where a callback is set (the common case: none). */
	if (!d || !__atomic_load_n(&d->log_fn, __ATOMIC_RELAXED))
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	pdma_log_msg(d, level, msg);
}

/* Counters and endpoints: see struct pdma_bind_target. */
static void *target_open(struct pdma_domain *d, size_t size, size_t *count)
{
	struct pdma_bind_target *t = calloc(1, size);

	if (!t)
		return NULL;
	t->dom = d;
	pdma_dom_lock(d);
	(*count)++;
	pdma_dom_unlock(d);
	return t;
}

static int target_close(struct pdma_bind_target *t, size_t *count)
{
	struct pdma_domain *d = t->dom;
	bool last;

	if (atomic_load(&t->closed))
		return -EINVAL;
	pdma_dom_lock(d);
	atomic_store(&t->closed, true);
	last = atomic_load(&t->binds) == 0;
	(*count)--;
	pdma_dom_unlock(d);
	if (last)
		free(t);
	return 0;
}

void pdma_target_unbind(struct pdma_bind_target *t)
{
	if (t && atomic_fetch_sub(&t->binds, 1) == 1 && atomic_load(&t->closed))
		free(t);
}

int pdma_cntr_open(struct pdma_domain *d, struct pdma_cntr **out)
{
	if (!d || !out)
		return -EINVAL;
	*out = target_open(d, sizeof(**out), &d->n_cntr);
	return *out ? 0 : -ENOMEM;
}

uint64_t pdma_cntr_read(const struct pdma_cntr *c)
{
	return atomic_load(&c->value);
}

int pdma_cntr_close(struct pdma_cntr *c)
{
	return c ? target_close(&c->t, &c->t.dom->n_cntr) : -EINVAL;
}

int pdma_ep_open(struct pdma_domain *d, struct pdma_ep **out)
{
	if (!d || !out)
		return -EINVAL;
	*out = target_open(d, sizeof(**out), &d->n_ep);
	return *out ? 0 : -ENOMEM;
}

int pdma_ep_close(struct pdma_ep *ep)
{
	return ep ? target_close(&ep->t, &ep->t.dom->n_ep) : -EINVAL;
}

int pdma_domain_backend_other(struct pdma_domain *d, enum pdma_hmem_iface iface, int device,
			      uint64_t addr, size_t len, const struct pdma_mem_ops **ops,
			      void **be, struct pdma_mem_alloc *alloc)
{
	/* Host memory and a simulated device that exists never get here. */
	switch (iface) {
	case PDMA_HMEM_SIM:
		pdma_log(d, 1, "no simulated device %d in this domain", device);
		return -ENODEV;
	case PDMA_HMEM_CUDA:
		return pdma_domain_cuda_backend(d, device, addr, len, ops, be, alloc);
	default:
		return -EINVAL;
	}
}
