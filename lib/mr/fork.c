// SPDX-License-Identifier: MIT
/*
 * fork() handlers (pthread_atfork): what makes a domain or cache opened before
 * a fork safe in the child (lib/mr/fork.h says what the child gets).
 *
 * Process-wide by nature: fork copies the whole process, and the state it
 * must fix (caches, the userfaultfd monitor, kernel-device files) is reached
 * from no single context object.
 *
 * Lock order, the one the library uses everywhere: the userfaultfd monitor's
 * lock (held while its thread is started or joined; that thread notifies),
 * the subscriber list's (a notification holds it while it takes a cache's
 * lock), the cache list and each cache's locks (never nested with each
 * other), then the domain list and each domain's lock and key pool lock (a
 * domain lock is never held while a cache lock is taken, nor the reverse).
 * No thread waits for the forking thread while holding one of them.
 *
 * Event queues are covered too: prepare takes each open EQ's lock after its
 * domain's (the order eq.c's close takes them in), and the child gets fresh
 * condition variables (a reader blocked in the parent at the fork stays
 * counted in the old one).
 *
 * Not covered: a region's quiesce lock held while the kdev event thread
 * revokes it stays held in the child (device access through that inherited MR
 * would then wait for ever there). Transfers are covered: they run under the
 * domain lock. CUDA cannot be used in a child at all.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "mr/domain.h"
#include "mr/fork.h"

static _Atomic uint64_t fork_gen;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
struct pdma_fork_list pdma_fork_domains = PDMA_FORK_LIST_INIT;

void pdma_fork_list_add(struct pdma_fork_list *l, struct pdma_fork_node *n)
{
	pthread_mutex_lock(&l->lock);
	n->prev = NULL;
	n->next = l->head;
	if (l->head)
		l->head->prev = n;
	l->head = n;
	pthread_mutex_unlock(&l->lock);
}

void pdma_fork_list_del(struct pdma_fork_list *l, struct pdma_fork_node *n)
{
	pthread_mutex_lock(&l->lock);
	if (n->prev)
		n->prev->next = n->next;
	else
		l->head = n->next;
	if (n->next)
		n->next->prev = n->prev;
	pthread_mutex_unlock(&l->lock);
}

#define domain_of(n) pdma_fork_entry(n, struct pdma_domain, fork_node)

static void domains_prepare(void)
{
	pthread_mutex_lock(&pdma_fork_domains.lock);
	for (struct pdma_fork_node *n = pdma_fork_domains.head; n; n = n->next) {
		struct pdma_domain *d = domain_of(n);

		pdma_dom_lock(d);
		pdma_dom_quiesce(d); /* no access in flight: the child has none */
		pthread_mutex_lock(&d->rand.lock);
		pthread_mutex_lock(&d->log_lock);
		/* A registration posts its event under the EQ's lock after it
		 * has dropped the domain's (eq.c), and a reader takes it too. */
		for (struct pdma_eq *eq = d->eqs; eq; eq = eq->next)
			pthread_mutex_lock(&eq->lock);
	}
}

/* Parent and child alike: the forking thread took each domain lock, and it
 * drops it, in the child too, where it is the one thread. No other thread
 * was inside (prepare waited for a bias owner to leave, lock.h), but one may
 * have been waiting for the lock in a way that left its mark on it (a taker
 * spinning for the bias owner to leave holds `held`): in the child the lock
 * is reset, not just unlocked (pdma_bias_fork_child). */
static void domains_release(bool child)
{
	for (struct pdma_fork_node *n = pdma_fork_domains.head; n; n = n->next) {
		struct pdma_domain *d = domain_of(n);

		for (struct pdma_eq *eq = d->eqs; eq; eq = eq->next) {
			/* A thread of the parent waiting in pdma_eq_read() at the
			 * fork is counted in the condition variable, and there it
			 * never leaves: the child's pthread_cond_destroy() (EQ
			 * close) would wait for it for ever. The child is the one
			 * thread, so a fresh one is safe. */
			if (child)
				pthread_cond_init(&eq->cond, NULL);
			pthread_mutex_unlock(&eq->lock);
		}
		pthread_mutex_unlock(&d->log_lock);
		pthread_mutex_unlock(&d->rand.lock);
		if (child)
			pdma_bias_fork_child(&d->lock); /* lock.c: what the others left */
		else
			pdma_dom_unlock(d);
	}
	pthread_mutex_unlock(&pdma_fork_domains.lock);
}

static void fork_prepare(void)
{
	pdma_uffd_fork_prepare();
	pdma_monitor_fork_prepare();
	pdma_cache_fork_prepare();
	domains_prepare();
}

static void fork_parent(void)
{
	domains_release(false);
	pdma_cache_fork_parent();
	pdma_monitor_fork_parent();
	pdma_uffd_fork_parent();
}

static void fork_child(void)
{
	atomic_fetch_add(&fork_gen, 1);
	domains_release(true);
	pdma_cache_fork_child();
	pdma_monitor_fork_child();
	pdma_uffd_fork_child();
}

static void fork_install(void)
{
	/* Fails only with ENOMEM; the process then runs without the handlers,
	 * as it did before they existed. */
	(void)pthread_atfork(fork_prepare, fork_parent, fork_child);
}

void pdma_fork_init(void)
{
	pthread_once(&fork_once, fork_install);
}

uint64_t pdma_fork_gen(void)
{
	return atomic_load_explicit(&fork_gen, memory_order_relaxed);
}
