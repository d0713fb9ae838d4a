// SPDX-License-Identifier: MIT
/* Pinned regions: see region.h. */
#include <errno.h>
#include <stdlib.h>

#include "cache/region.h"
#include "mr/fork.h"

static void region_revoke_cb(void *arg)
{
	pdma_region_revoke(arg);
}

int pdma_region_init(struct pdma_region *r, const struct pdma_mem_ops *ops, void *be,
		     enum pdma_hmem_iface iface, uint64_t start, size_t len, uint64_t buffer_id)
{
	int ret;

	r->start = start;
	r->len = len;
	r->buffer_id = buffer_id;
	r->iface = iface;
	r->ops = ops;
	r->be = be;
	r->fork_gen = pdma_fork_gen();
	atomic_init(&r->refcnt, 1);
	atomic_init(&r->valid, true);
	pthread_rwlock_init(&r->quiesce, NULL);
	pthread_mutex_init(&r->users.lock, NULL);
	r->users.head = NULL;
	/* The backend may revoke at any time after pin() returns, so the
	 * callback target must be fully initialised first. */
	ret = ops->pin(be, start, len, region_revoke_cb, r, &r->pin);
	if (ret) {
		pthread_mutex_destroy(&r->users.lock);
		pthread_rwlock_destroy(&r->quiesce);
	}
	return ret;
}

int pdma_region_create(const struct pdma_mem_ops *ops, void *be, enum pdma_hmem_iface iface,
		       uint64_t start, size_t len, uint64_t buffer_id, struct pdma_region **out)
{
	struct pdma_region *r = calloc(1, sizeof(*r));
	int ret;

	if (!r)
		return -ENOMEM;
	ret = pdma_region_init(r, ops, be, iface, start, len, buffer_id);
	if (ret) {
		free(r);
		return ret;
	}
	*out = r;
	return 0;
}

void pdma_region_revoke(struct pdma_region *r)
{
	/* Exclusive: waits for every DMA that already checked validity. */
	pthread_rwlock_wrlock(&r->quiesce);
	atomic_store_explicit(&r->valid, false, memory_order_release);
	pthread_rwlock_unlock(&r->quiesce);
	if (r->owner)
		pdma_cache_region_revoked(r);
	pthread_mutex_lock(&r->users.lock);
	for (struct pdma_fork_node *n = r->users.head; n; n = n->next) {
		struct pdma_region_user *u = pdma_fork_entry(n, struct pdma_region_user, node);

		u->revoked(u);
	}
	pthread_mutex_unlock(&r->users.lock);
}

void pdma_region_add_user(struct pdma_region *r, struct pdma_region_user *u)
{
	pdma_fork_list_add(&r->users, &u->node);
	/* A revocation that marked r invalid before u was listed may have
	 * walked the list without it: tell u here. The caller has not handed
	 * its object out yet, so no del_user can run meanwhile. */
	if (!atomic_load_explicit(&r->valid, memory_order_acquire))
		u->revoked(u);
}

void pdma_region_del_user(struct pdma_region *r, struct pdma_region_user *u)
{
	pdma_fork_list_del(&r->users, &u->node);
}

void pdma_region_fini(struct pdma_region *r)
{
	/* In a forked child, a pin inherited from the parent is forgotten, not
	 * unpinned: it is the parent's (a kernel-device unpin would drop the
	 * parent's pages, a CUDA call is not allowed in the child). */
	if (r->fork_gen == pdma_fork_gen())
		r->ops->unpin(r->be, r->pin);
	pthread_mutex_destroy(&r->users.lock);
	pthread_rwlock_destroy(&r->quiesce);
}

void pdma_region_destroy(struct pdma_region *r)
{
	pdma_region_fini(r);
	free(r);
}
