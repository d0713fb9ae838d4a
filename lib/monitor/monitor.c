// SPDX-License-Identifier: MIT
/*
 * Invalidation fan-out (monitor.h). The subscriber list is process-wide by
 * necessity (see monitor.h); it changes rarely (domain open/close) and is
 * read on every notification, hence a read-write lock.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "monitor/monitor.h"
#include "mr/fork.h"

struct pdma_monitor_sub {
	pdma_monitor_fn fn;
	void *arg;
	struct pdma_monitor_sub *next;
};

static pthread_rwlock_t subs_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct pdma_monitor_sub *subs;

int pdma_monitor_subscribe(pdma_monitor_fn fn, void *arg, struct pdma_monitor_sub **sub)
{
	struct pdma_monitor_sub *s;

	if (!fn || !sub)
		return -EINVAL;
	s = malloc(sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->fn = fn;
	s->arg = arg;
	pthread_rwlock_wrlock(&subs_lock);
	s->next = subs;
	subs = s;
	pthread_rwlock_unlock(&subs_lock);
	*sub = s;
	return 0;
}

void pdma_monitor_unsubscribe(struct pdma_monitor_sub *sub)
{
	struct pdma_monitor_sub **p;

	if (!sub)
		return;
	pthread_rwlock_wrlock(&subs_lock);
	for (p = &subs; *p; p = &(*p)->next) {
		if (*p == sub) {
			*p = sub->next;
			break;
		}
	}
	pthread_rwlock_unlock(&subs_lock);
	free(sub);
}

/* fork(): a notifying thread (the userfaultfd monitor's) may hold the lock
 * at any time and does not exist in the child to release it. */
void pdma_monitor_fork_prepare(void)
{
	pthread_rwlock_wrlock(&subs_lock);
}

void pdma_monitor_fork_parent(void)
{
	pthread_rwlock_unlock(&subs_lock);
}

/* The child cannot unlock it: glibc's rwlock tells a writer's unlock by the
 * writer's thread ID, and the child's thread has another. Held by us alone,
 * it is made anew. */
void pdma_monitor_fork_child(void)
{
	pthread_rwlock_init(&subs_lock, NULL);
}

void pdma_monitor_notify(enum pdma_hmem_iface iface, uint64_t addr, size_t len)
{
	pthread_rwlock_rdlock(&subs_lock);
	for (struct pdma_monitor_sub *s = subs; s; s = s->next)
		s->fn(s->arg, iface, addr, len);
	pthread_rwlock_unlock(&subs_lock);
}
