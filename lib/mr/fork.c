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
 * lock), then the cache list and each cache's locks (never nested with each
 * other). No thread waits for the forking thread while holding one of them.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "mr/fork.h"

static _Atomic uint64_t fork_gen;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void fork_prepare(void)
{
	pdma_uffd_fork_prepare();
	pdma_monitor_fork_prepare();
	pdma_cache_fork_prepare();
}

static void fork_parent(void)
{
	pdma_cache_fork_parent();
	pdma_monitor_fork_parent();
	pdma_uffd_fork_parent();
}

static void fork_child(void)
{
	atomic_fetch_add(&fork_gen, 1);
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
