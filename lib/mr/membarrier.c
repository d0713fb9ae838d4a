// SPDX-License-Identifier: MIT
/*
 * membarrier(2) for the fast paths that need a fence on every thread
 * (membarrier.h says which and why).
 */
#include <errno.h>
#include <linux/membarrier.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "mr/membarrier.h"

static long membarrier(int cmd)
{
	return syscall(__NR_membarrier, cmd, 0, 0);
}

/*
 * Registration for MEMBARRIER_CMD_PRIVATE_EXPEDITED belongs to the process
 * (its mm): one state for all users. 0: not asked yet, 1: registered, -1:
 * unusable (kernels before 4.14, a seccomp filter).
 */
static atomic_int membarrier_state;

bool pdma_membarrier_ready(void)
{
	int s = atomic_load_explicit(&membarrier_state, memory_order_relaxed);
	long cmds;

	if (s)
		return s > 0;
	cmds = membarrier(MEMBARRIER_CMD_QUERY);
	s = cmds >= 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
	    !membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) ? 1 : -1;
	atomic_store_explicit(&membarrier_state, s, memory_order_relaxed);
	return s > 0;
}

/*
 * Should the private command fail after a successful registration (a seccomp
 * filter installed since), MEMBARRIER_CMD_GLOBAL gives the same guarantee,
 * slowly. Without either, a fast path may be inside its exclusion and no
 * wait can tell: continuing would break it, so the process stops.
 */
void pdma_membarrier_fence(void)
{
	if (!membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED))
		return;
	/* EPERM: this process is not registered (a forked child, where the
	 * kernel did not carry the parent's registration over). */
	if (errno == EPERM && !membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) &&
	    !membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED))
		return;
	if (!membarrier(MEMBARRIER_CMD_GLOBAL))
		return;
	abort();
}
