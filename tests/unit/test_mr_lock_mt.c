// SPDX-License-Identifier: MIT
/*
 * The domain lock's bias (lib/mr/lock.h), under concurrency (TSan target,
 * label "threads"). Checks:
 *  - the process registers for membarrier(2) at the domain's open, not at
 *    the first bias (a registration with threads waits milliseconds);
 *  - a thread that takes the lock PDMA_BIAS_AFTER times in a row becomes its
 *    owner, also through the public registration path; another thread's take
 *    takes the bias away and doubles the run for the next;
 *  - an owner that exits is taken from without a wait, and a later thread
 *    can own the lock again;
 *  - at most PDMA_BIAS_OWNERS threads ever own a lock;
 *  - no update under the lock is lost while an owner and other threads take
 *    it at once;
 *  - a child forked by the owner, or by another thread, can take it.
 *
 * A test that needs a bias keeps a second thread alive (an idler, or its own
 * threads): with one thread the lock takes glibc's single-thread shortcut
 * and no bias is ever given.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mr/domain.h"

#define RW (PDMA_READ | PDMA_WRITE | PDMA_REMOTE_READ | PDMA_REMOTE_WRITE)

struct idler {
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool stop;
};

static void *idle_main(void *arg)
{
	struct idler *i = arg;

	pthread_mutex_lock(&i->mu);
	while (!i->stop)
		pthread_cond_wait(&i->cv, &i->mu);
	pthread_mutex_unlock(&i->mu);
	return NULL;
}

static void idler_start(struct idler *i)
{
	*i = (struct idler){ .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
	assert_int_equal(pthread_create(&i->th, NULL, idle_main, i), 0);
}

static void idler_stop(struct idler *i)
{
	pthread_mutex_lock(&i->mu);
	i->stop = true;
	pthread_cond_signal(&i->cv);
	pthread_mutex_unlock(&i->mu);
	pthread_join(i->th, NULL);
}

static struct pdma_domain *domain_open(void)
{
	struct pdma_domain_attr da;
	struct pdma_domain *d;

	pdma_domain_attr_init(&da);
	da.mr_mode |= PDMA_MR_PROV_KEY;
	da.use_cache = true;
	assert_int_equal(pdma_domain_open(&da, &d), 0);
	return d;
}

static void take(struct pdma_domain *d, unsigned long n)
{
	for (unsigned long i = 0; i < n; i++) {
		pdma_dom_lock(d);
		pdma_dom_unlock(d);
	}
}

static struct pdma_bias_owner *bias(struct pdma_domain *d)
{
	return atomic_load(&d->lock.bias);
}

static bool owned_by_me(struct pdma_domain *d)
{
	struct pdma_bias_owner *o = bias(d);

	return o && o->thread == pdma_thread_self();
}

struct taker {
	struct pdma_domain *d;
	unsigned long n;
	bool owned; /* out: the thread owned the lock after its n takes */
};

static void *take_main(void *arg)
{
	struct taker *t = arg;

	take(t->d, t->n);
	t->owned = owned_by_me(t->d);
	return NULL;
}

/* n takes on a thread of their own, which then exits: did it own the lock? */
static bool take_on_other_thread(struct pdma_domain *d, unsigned long n)
{
	struct taker t = { d, n, false };
	pthread_t th;

	assert_int_equal(pthread_create(&th, NULL, take_main, &t), 0);
	pthread_join(th, NULL);
	return t.owned;
}

/* The kernel offers the barrier the bias needs (lock.h: no bias without). */
static bool bias_possible(void)
{
	long cmds = syscall(__NR_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);

	return cmds >= 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED);
}

/* A domain for a test of the bias, with a second thread alive (an idler):
 * skipped where the kernel offers no barrier. */
static struct pdma_domain *biased_domain_open(struct idler *idle)
{
	struct pdma_domain *d;

	if (!bias_possible())
		skip();
	d = domain_open();
	idler_start(idle);
	return d;
}

/* First in the program: before any open the process is not registered for
 * the private expedited barrier (EPERM), after one it is. */
static void test_registered_at_open(void **state)
{
	struct pdma_domain *d;

	(void)state;
	if (!bias_possible())
		skip(); /* no bias on this kernel: test_exclusion tests the plain lock */
	assert_int_equal(syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0), -1);
	assert_int_equal(errno, EPERM);
	d = domain_open();
	assert_int_equal(syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0), 0);
	assert_int_equal(pdma_domain_close(d), 0);
}

/* The run gives the bias; another thread's take takes it away and doubles the
 * next run; the same thread gets its record back. */
static void test_bias_given_and_taken(void **state)
{
	struct pdma_domain *d;
	struct idler idle;

	(void)state;
	d = biased_domain_open(&idle);
	take(d, PDMA_BIAS_AFTER - 1);
	assert_null(bias(d));
	take(d, 1);
	assert_true(owned_by_me(d));
	assert_int_equal(d->lock.n_owners, 1);
	take(d, 10000); /* by the bias: nothing changes */
	assert_true(owned_by_me(d));
	assert_int_equal(d->lock.taken_away, 0);

	assert_false(take_on_other_thread(d, 1)); /* one take: no bias for it */
	assert_null(bias(d));
	assert_int_equal(d->lock.taken_away, 1);
	assert_int_equal(d->lock.bias_after, 2 * PDMA_BIAS_AFTER);
	take(d, 2 * PDMA_BIAS_AFTER - 1);
	assert_null(bias(d));
	take(d, 1);
	assert_true(owned_by_me(d));
	assert_int_equal(d->lock.n_owners, 1); /* the same record */
	idler_stop(&idle);
	assert_int_equal(pdma_domain_close(d), 0);
}

/* An owner that exits leaves its record behind with in == 0: the next taker
 * takes the bias away without waiting for it, and a later thread (which may
 * have the dead one's thread pointer, and so its record) can own the lock. */
static void test_owner_exits(void **state)
{
	struct pdma_domain *d;
	struct idler idle;

	(void)state;
	d = biased_domain_open(&idle);
	assert_true(take_on_other_thread(d, PDMA_BIAS_AFTER));
	take(d, 1); /* the owner is gone: no wait */
	assert_null(bias(d));
	assert_int_equal(d->lock.taken_away, 1);
	assert_true(take_on_other_thread(d, 2 * PDMA_BIAS_AFTER));
	assert_in_range(d->lock.n_owners, 1, 2);
	take(d, 1);
	assert_int_equal(d->lock.taken_away, 2);
	idler_stop(&idle);
	assert_int_equal(pdma_domain_close(d), 0);
}

/* A cached registration and its close take the lock once each: a thread
 * that registers gets the bias, and keeps it while only it registers. */
static void test_registration_owns(void **state)
{
	static char buf[4096];
	struct pdma_domain *d;
	struct idler idle;
	struct pdma_mr *mr;

	(void)state;
	d = biased_domain_open(&idle);
	for (unsigned long i = 0; i < PDMA_BIAS_AFTER; i++) {
		assert_int_equal(pdma_mr_reg(d, buf, sizeof(buf), RW, 0, 0, 0, &mr, NULL), 0);
		assert_int_equal(pdma_mr_close(mr), 0);
	}
	assert_true(owned_by_me(d));
	for (int i = 0; i < 1000; i++) {
		assert_int_equal(pdma_mr_reg(d, buf, sizeof(buf), RW, 0, 0, 0, &mr, NULL), 0);
		assert_int_equal(pdma_mr_close(mr), 0);
	}
	assert_true(owned_by_me(d));
	assert_int_equal(d->lock.taken_away, 0);
	idler_stop(&idle);
	assert_int_equal(pdma_domain_close(d), 0);
}

/* Threads that are alive together each get a record of their own, and no
 * more than PDMA_BIAS_OWNERS are ever made: the fifth never owns the lock. */
struct turn {
	struct pdma_domain *d;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int next;      /* whose turn */
	bool done;     /* all took their turn: exit */
	bool owned[PDMA_BIAS_OWNERS + 1];
};

struct turn_arg {
	struct turn *t;
	int id;
};

static void *turn_main(void *arg)
{
	struct turn_arg *a = arg;
	struct turn *t = a->t;
	unsigned long n;

	pthread_mutex_lock(&t->mu);
	while (t->next != a->id)
		pthread_cond_wait(&t->cv, &t->mu);
	pthread_mutex_unlock(&t->mu);
	/* The first take takes the last owner's bias away: then a full run. */
	take(t->d, 1);
	n = t->d->lock.bias_after;
	take(t->d, n);
	t->owned[a->id] = owned_by_me(t->d);
	pthread_mutex_lock(&t->mu);
	t->next++;
	pthread_cond_broadcast(&t->cv);
	while (!t->done) /* alive until all had their turn: no reused thread pointer */
		pthread_cond_wait(&t->cv, &t->mu);
	pthread_mutex_unlock(&t->mu);
	return NULL;
}

static void test_owner_records_bounded(void **state)
{
	struct turn t = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
	struct turn_arg a[PDMA_BIAS_OWNERS + 1];
	pthread_t th[PDMA_BIAS_OWNERS + 1];

	(void)state;
	if (!bias_possible())
		skip();
	t.d = domain_open();
	for (int i = 0; i <= PDMA_BIAS_OWNERS; i++) {
		a[i] = (struct turn_arg){ &t, i };
		assert_int_equal(pthread_create(&th[i], NULL, turn_main, &a[i]), 0);
	}
	pthread_mutex_lock(&t.mu);
	while (t.next <= PDMA_BIAS_OWNERS)
		pthread_cond_wait(&t.cv, &t.mu);
	t.done = true;
	pthread_cond_broadcast(&t.cv);
	pthread_mutex_unlock(&t.mu);
	for (int i = 0; i <= PDMA_BIAS_OWNERS; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < PDMA_BIAS_OWNERS; i++)
		assert_true(t.owned[i]);
	assert_false(t.owned[PDMA_BIAS_OWNERS]);
	assert_int_equal(t.d->lock.n_owners, PDMA_BIAS_OWNERS);
	assert_int_equal(pdma_domain_close(t.d), 0);
}

/*
 * Exclusion: the owner and three other threads add to one counter under the
 * lock, by a load, a pause and a store: two holders at once lose updates.
 * The other threads take the lock in bursts with pauses between, so the
 * bias is given and taken away again and again while the owner runs.
 */
#define HAMMER_THREADS 3

struct hammer {
	struct pdma_domain *d;
	unsigned long counter; /* under the lock */
	atomic_bool stop;
	atomic_ulong others;
};

static void add_one(struct hammer *h)
{
	unsigned long v;

	pdma_dom_lock(h->d);
	v = *(volatile unsigned long *)&h->counter;
	/* About a microsecond, as long as a take-away's membarrier(): a
	 * taker that did not wait for the owner would overlap it. */
	for (int i = 0; i < 256; i++)
		pdma_cpu_relax();
	*(volatile unsigned long *)&h->counter = v + 1;
	pdma_dom_unlock(h->d);
}

static void *hammer_main(void *arg)
{
	struct hammer *h = arg;

	while (!atomic_load(&h->stop)) {
		for (int i = 0; i < 16; i++)
			add_one(h);
		atomic_fetch_add(&h->others, 16);
		for (int i = 0; i < 20000; i++)
			__asm__ volatile("" ::: "memory");
	}
	return NULL;
}

static void test_exclusion(void **state)
{
	struct hammer h = { .d = domain_open() };
	const unsigned long mine = 200000;
	pthread_t th[HAMMER_THREADS];

	(void)state;
	for (int i = 0; i < HAMMER_THREADS; i++)
		assert_int_equal(pthread_create(&th[i], NULL, hammer_main, &h), 0);
	for (unsigned long i = 0; i < mine; i++) {
		/* Give the bias back soon after each take-away: many of them. */
		if (!(i % 1024)) {
			pdma_dom_lock(h.d);
			h.d->lock.bias_after = 64;
			pdma_dom_unlock(h.d);
		}
		add_one(&h);
	}
	atomic_store(&h.stop, true);
	for (int i = 0; i < HAMMER_THREADS; i++)
		pthread_join(th[i], NULL);
	pdma_dom_lock(h.d);
	assert_int_equal(h.counter, mine + atomic_load(&h.others));
	pdma_dom_unlock(h.d);
	print_message("exclusion: %lu own adds, %lu by the others, bias taken away %lu times\n",
		      mine, atomic_load(&h.others), h.d->lock.taken_away);
	/* The test ran the protocol, not just the plain lock. */
	if (bias_possible())
		assert_true(h.d->lock.taken_away > 0);
	assert_int_equal(pdma_domain_close(h.d), 0);
}

/* fork() takes every domain's lock in its prepare handler: from the owner,
 * and from another thread (which takes the bias away). The child takes the
 * lock and registers. */
static void fork_and_register(struct pdma_domain *d)
{
	static char buf[4096];
	pid_t pid = fork();
	int status;

	assert_true(pid >= 0);
	if (pid == 0) {
		struct pdma_mr *mr;
		int ok = pdma_mr_reg(d, buf, sizeof(buf), RW, 0, 0, 0, &mr, NULL) == 0 &&
			 pdma_mr_close(mr) == 0;

		_exit(ok ? 0 : 1);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

static void *fork_main(void *arg)
{
	fork_and_register(arg);
	return NULL;
}

static void test_fork(void **state)
{
	struct pdma_domain *d;
	struct idler idle;
	pthread_t th;

	(void)state;
	d = biased_domain_open(&idle);
	take(d, PDMA_BIAS_AFTER);
	assert_true(owned_by_me(d));
	fork_and_register(d);
	assert_true(owned_by_me(d));
	take(d, 1);
	assert_int_equal(pthread_create(&th, NULL, fork_main, d), 0);
	pthread_join(th, NULL);
	assert_null(bias(d));
	assert_int_equal(d->lock.taken_away, 1);
	take(d, 1);
	idler_stop(&idle);
	assert_int_equal(pdma_domain_close(d), 0);
}

/*
 * The state a fork can leave in the child's copy of the lock: the forking
 * thread held it by its bias (fork.c's prepare), and another thread had
 * already taken `held` and the bias away and was spinning for the owner to
 * leave. That thread is gone in the child, and glibc leaves
 * __libc_single_threaded false there, so the child takes the slow path.
 * Only unlocked, the lock kept `held` at 1 and the child's next lock spun
 * for ever (seen in CI: a child of test_mr_fork_mt hung); reset by
 * pdma_bias_fork_child, the child takes it and registers.
 */
static void test_fork_child_reset(void **state)
{
	struct pdma_domain *d;
	struct idler idle;
	int status;
	pid_t pid;

	(void)state;
	d = biased_domain_open(&idle);
	take(d, PDMA_BIAS_AFTER);
	assert_true(owned_by_me(d));
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		static char buf[64];
		struct pdma_mr *mr;

		struct pdma_bias_owner *o = NULL;

		alarm(10);
		for (unsigned int i = 0; i < d->lock.n_owners; i++)
			if (d->lock.owners[i].thread == pdma_thread_self())
				o = &d->lock.owners[i];
		if (!o)
			_exit(2);
		/* at the fork: this thread in by its bias (prepare) ... */
		atomic_store(&o->in, 1);
		d->lock.holder = o;
		/* ... another's exchange done and the bias taken away */
		atomic_store(&d->lock.held, 1);
		atomic_store(&d->lock.bias, NULL);
		pdma_bias_fork_child(&d->lock); /* what fork.c's child handler does */
		pdma_dom_lock(d);
		pdma_dom_unlock(d);
		_exit(pdma_mr_reg(d, buf, sizeof(buf), RW, 0, 0, 0, &mr, NULL) == 0 &&
		      pdma_mr_close(mr) == 0 ? 0 : 1);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (!WIFEXITED(status))
		fail_msg("child ended by signal %d (hung: alarm)", WTERMSIG(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	idler_stop(&idle);
	assert_int_equal(pdma_domain_close(d), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_registered_at_open),
		cmocka_unit_test(test_bias_given_and_taken),
		cmocka_unit_test(test_owner_exits),
		cmocka_unit_test(test_registration_owns),
		cmocka_unit_test(test_owner_records_bounded),
		cmocka_unit_test(test_exclusion),
		cmocka_unit_test(test_fork),
		cmocka_unit_test(test_fork_child_reset),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
