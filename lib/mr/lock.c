// SPDX-License-Identifier: MIT
/*
 * The domain lock's slow path: the test-and-set exchange, taking a bias
 * away, giving one (lock.h says why and how).
 */
#include <limits.h>
#include <stdbool.h>
#include <unistd.h>

#include "mr/lock.h"
#include "mr/membarrier.h"

/* At most this many runs between biases: one take-away per 2^30 takes. */
#define BIAS_AFTER_MAX (1UL << 30)

void pdma_bias_init(struct pdma_bias_lock *l)
{
	*l = (struct pdma_bias_lock){ .bias_after = PDMA_BIAS_AFTER };
	/* Register now, not at the first bias: in a process with threads the
	 * kernel waits for an RCU grace period (7-15 ms on the development
	 * VM), a stall that belongs in an open, not in the registration that
	 * happens to be the PDMA_BIAS_AFTER-th. With one thread it is
	 * microseconds. */
	pdma_membarrier_ready();
}

/*
 * In a fork() child, with the lock held by the forking thread (fork.c's
 * prepare took it): no other thread exists any more, and whatever they were
 * doing to the lock is undone. One of them may have taken `held` while the
 * forking thread held the lock by its bias, and been spinning for it to
 * leave: left as it is, `held` would stay 1 for ever in the child. (glibc
 * 2.36 leaves __libc_single_threaded false in a fork child, so the child
 * takes the slow path, which spins on it.) Free and unbiased on return.
 */
void pdma_bias_fork_child(struct pdma_bias_lock *l)
{
	l->holder = NULL;
	for (unsigned int i = 0; i < l->n_owners; i++)
		atomic_store_explicit(&l->owners[i].in, 0, memory_order_relaxed);
	atomic_store_explicit(&l->bias, NULL, memory_order_relaxed);
	l->streak_thread = 0;
	l->streak = 0;
	atomic_store_explicit(&l->held, 0, memory_order_release);
}

/* Held: the owner o loses the bias, and is out of the lock on return. */
static void take_away(struct pdma_bias_lock *l, struct pdma_bias_owner *o)
{
	atomic_store_explicit(&l->bias, NULL, memory_order_relaxed);
	pdma_membarrier_fence();
	for (unsigned int spins = 0; atomic_load_explicit(&o->in, memory_order_acquire); spins++)
		pdma_spin_backoff(spins);
	l->taken_away++;
	if (l->bias_after < BIAS_AFTER_MAX)
		l->bias_after *= 2;
}

/* Held, by a thread that took the lock bias_after times in a row. */
static void give(struct pdma_bias_lock *l, uintptr_t self)
{
	struct pdma_bias_owner *o = NULL;

	l->streak = 0;
	if (!pdma_membarrier_ready()) {
		l->bias_after = ULONG_MAX;
		return;
	}
	for (unsigned int i = 0; i < l->n_owners && !o; i++)
		if (l->owners[i].thread == self)
			o = &l->owners[i];
	if (!o) {
		if (l->n_owners == PDMA_BIAS_OWNERS)
			return;
		o = &l->owners[l->n_owners++];
		o->thread = self;
	}
	atomic_store_explicit(&l->bias, o, memory_order_release);
}

void pdma_bias_lock_slow(struct pdma_bias_lock *l)
{
	uintptr_t self = pdma_thread_self();
	struct pdma_bias_owner *o;

	for (unsigned int spins = 0;; spins++) {
		if (!atomic_load_explicit(&l->held, memory_order_relaxed) &&
		    !atomic_exchange_explicit(&l->held, 1, memory_order_acquire))
			break;
		pdma_spin_backoff(spins);
	}
	/* The owner may be inside still: until it is out, touch nothing but
	 * the bias (its unlock reads and clears holder). */
	o = atomic_load_explicit(&l->bias, memory_order_relaxed);
	if (o)
		take_away(l, o);
	if (l->streak_thread != self) {
		l->streak_thread = self;
		l->streak = 0;
	}
	if (++l->streak >= l->bias_after)
		give(l, self);
}
