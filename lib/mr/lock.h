/* SPDX-License-Identifier: MIT */
/*
 * The domain lock: a test-and-set lock with a bias towards one thread.
 *
 * Why a bias: a cached registration takes the domain lock once and its close
 * once, and each take was an atomic exchange, about 9.5 ns on the H100
 * machine's host (bench/results/round2d-h100.txt): two of the four atomics
 * left on a cached reg+close. glibc's single-thread shortcut
 * (__libc_single_threaded) removes them only while the process has one
 * thread, and a CUDA program never does: the driver starts threads of its
 * own. Yet in such programs one thread usually does all the registering.
 *
 * How: a thread that takes the lock PDMA_BIAS_AFTER times in a row, no other
 * thread between, becomes its owner. The owner takes it without an atomic
 * read-modify-write; anyone else takes the exchange and first takes the bias
 * away:
 *
 *	owner:	o->in = 1; (compiler barrier) if (bias == o) enter; else o->in = 0, slow path
 *	other:	exchange held; if (bias) { bias = NULL; membarrier(); wait while o->in }
 *
 * That is Dekker's exclusion, with the owner's half of the store-load fence
 * moved into membarrier(2) (MEMBARRIER_CMD_PRIVATE_EXPEDITED), which makes
 * every running thread of the process execute a full fence: either the owner
 * sees bias == NULL, or the other thread sees o->in == 1 and waits. Taking
 * the bias away costs that system call (microseconds: an IPI to each CPU
 * running one of our threads), so at each take-away the run needed for the
 * next bias doubles: threads that keep alternating settle on the plain lock.
 * The same scheme as liburcu's membarrier flavour and the JVM's biased locks.
 *
 * An owner record belongs to one thread, named by its thread pointer, for the
 * life of the lock. A thread that has lost the bias still stores to its
 * record before it looks at the bias, so a record is never handed to another
 * thread: a lock has PDMA_BIAS_OWNERS records, and once all are used only
 * their threads can own it again. (A thread pointer is reused only after its
 * thread exited, so two live threads never share a record.)
 *
 * Without membarrier's private expedited command (kernels before 4.14, a
 * seccomp filter) no bias is given: the lock is the test-and-set lock. The
 * process registers for that command once, when its first lock is made
 * (pdma_bias_init, at pdma_domain_open): microseconds in a process with one
 * thread, an RCU grace period (milliseconds) in one with more.
 *
 * Thread safety: any thread may take and drop the lock; it is not recursive,
 * and it is dropped by the thread that took it.
 */
#ifndef PDMA_LIB_MR_LOCK_H
#define PDMA_LIB_MR_LOCK_H

#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/single_threaded.h>

#define PDMA_BIAS_OWNERS 4
#define PDMA_BIAS_AFTER 1024UL

struct pdma_bias_owner {
	uintptr_t thread; /* its thread pointer: set before the record is first given */
	atomic_int in;    /* 1 while it holds the lock by the bias (stored by it alone) */
};

struct pdma_bias_lock {
	atomic_int held;                      /* the test-and-set lock: 1 while held */
	_Atomic(struct pdma_bias_owner *) bias; /* changed only with held: NULL, or the owner */
	struct pdma_bias_owner *holder;       /* held by the bias: the owner's record; else NULL */
	/* Under the lock, either way it is held (a taker reads them only once
	 * the owner is out): */
	uintptr_t streak_thread;              /* the thread that took it last ... */
	unsigned long streak;                 /* ... and how many times in a row */
	unsigned long bias_after;             /* the run that gives a bias (doubles at take-away) */
	unsigned long taken_away;             /* biases taken away (tests, statistics) */
	unsigned int n_owners;
	struct pdma_bias_owner owners[PDMA_BIAS_OWNERS];
};

void pdma_bias_init(struct pdma_bias_lock *l);
void pdma_bias_lock_slow(struct pdma_bias_lock *l);
/* fork() child only, the lock held by the forking thread: free, no bias. */
void pdma_bias_fork_child(struct pdma_bias_lock *l);

/* A spin-wait hint: the core yields to its hyperthread sibling. */
static inline void pdma_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ volatile("yield");
#endif
}

/* One step of a wait on another thread: spin a little, then yield, so that
 * a thread preempted where it is waited for gets to run. */
static inline void pdma_spin_backoff(unsigned int spins)
{
	if (spins < 64)
		pdma_cpu_relax();
	else
		sched_yield();
}

static inline uintptr_t pdma_thread_self(void)
{
	return (uintptr_t)__builtin_thread_pointer();
}

static inline void pdma_bias_lock(struct pdma_bias_lock *l)
{
	struct pdma_bias_owner *o = atomic_load_explicit(&l->bias, memory_order_acquire);

	if (o && o->thread == pdma_thread_self()) {
		atomic_store_explicit(&o->in, 1, memory_order_relaxed);
		/* The CPU's half of the fence is the taker's membarrier(). */
		atomic_signal_fence(memory_order_seq_cst);
		if (atomic_load_explicit(&l->bias, memory_order_acquire) == o) {
			l->holder = o;
			return;
		}
		atomic_store_explicit(&o->in, 0, memory_order_release);
	} else if (__libc_single_threaded) {
		/* One thread: no other can hold the lock, and taking it is a
		 * store. (A fork child is not here: glibc leaves the flag
		 * false there; fork.c resets the lock in the child instead.) */
		atomic_store_explicit(&l->held, 1, memory_order_relaxed);
		return;
	}
	pdma_bias_lock_slow(l);
}

/* holder is NULL but while the owner holds the lock by its bias: only that
 * path sets it, and clears it before it lets go. */
static inline void pdma_bias_unlock(struct pdma_bias_lock *l)
{
	struct pdma_bias_owner *o = l->holder;

	if (o) {
		l->holder = NULL;
		atomic_store_explicit(&o->in, 0, memory_order_release);
	} else {
		atomic_store_explicit(&l->held, 0, memory_order_release);
	}
}

#endif /* PDMA_LIB_MR_LOCK_H */
