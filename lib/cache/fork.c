// SPDX-License-Identifier: MIT
/*
 * Registration caches across fork() (the handlers lib/mr/fork.c calls).
 *
 * Every open cache is on one process-wide list, so that the fork handlers can
 * reach it (fork copies the process; no context object leads to all caches).
 * prepare takes each cache's locks, so the child's copy is consistent (the
 * userfaultfd monitor thread takes a cache's lock at any time, and it does
 * not exist in the child to release it). In the child every such cache
 * becomes pass-through: its regions are the parent's pins, watched by the
 * parent's monitor, so none is handed out again (each registration pins
 * afresh) and none is unpinned here (pdma_region_fini). Caches opened in the
 * child are ordinary.
 */
#include <pthread.h>

#include "cache/cache_int.h"
#include "mr/fork.h"

static struct pdma_fork_list caches = PDMA_FORK_LIST_INIT;

#define cache_of(n) pdma_fork_entry(n, struct pdma_cache, fork_node)

void pdma_cache_fork_track(struct pdma_cache *c)
{
	pdma_fork_init();
	pdma_fork_list_add(&caches, &c->fork_node);
}

void pdma_cache_fork_untrack(struct pdma_cache *c)
{
	pdma_fork_list_del(&caches, &c->fork_node);
}

void pdma_cache_fork_prepare(void)
{
	pthread_mutex_lock(&caches.lock);
	for (struct pdma_fork_node *n = caches.head; n; n = n->next) {
		struct pdma_cache *c = cache_of(n);

		pthread_mutex_lock(&c->lock);
		pthread_mutex_lock(&c->slab_lock);
	}
}

void pdma_cache_fork_parent(void)
{
	for (struct pdma_fork_node *n = caches.head; n; n = n->next) {
		struct pdma_cache *c = cache_of(n);

		pthread_mutex_unlock(&c->slab_lock);
		pthread_mutex_unlock(&c->lock);
	}
	pthread_mutex_unlock(&caches.lock);
}

void pdma_cache_fork_child(void)
{
	pdma_cache_shard_fork_child();
	for (struct pdma_fork_node *n = caches.head; n; n = n->next) {
		struct pdma_cache *c = cache_of(n);

		for (int i = 0; i < PDMA_CACHE_NIFACE; i++) {
			c->mode[i] = PDMA_CACHE_MODE_OFF;
			c->st.mode[i] = PDMA_CACHE_MODE_OFF;
		}
		/* The userfaultfd monitor is the parent's (lib/monitor/uffd.c
		 * forgets it in the child): never wait for it, never stop it. */
		if (c->uffd)
			c->st.monitor = PDMA_CACHE_MONITOR_DISABLED;
		c->uffd = false;
		pthread_mutex_unlock(&c->slab_lock);
		pthread_mutex_unlock(&c->lock);
	}
	pthread_mutex_unlock(&caches.lock);
}
