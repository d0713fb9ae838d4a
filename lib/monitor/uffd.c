// SPDX-License-Identifier: MIT
/*
 * Host memory monitor through userfaultfd(2) (PEERDMA_MR_CACHE_MONITOR=
 * userfaultfd): the kernel reports unmap (munmap, and mmap MAP_FIXED over a
 * watched range), remove (madvise MADV_DONTNEED/MADV_REMOVE) and remap
 * (mremap) of the ranges the cache watches; a monitor thread turns each event
 * into pdma_monitor_notify(PDMA_HMEM_SYSTEM, ...).
 *
 * Guarantee: complete for watched ranges, including unmaps made inside libc
 * (free() of an mmap'ed chunk, malloc trimming) and by any library, because
 * the kernel sees them. The unmapping thread is held in the kernel until the
 * monitor thread has read the event, and the monitor marks pdma_uffd_seq odd
 * before it reads and even once the invalidations are done: a lookup waits
 * while it is odd, so after munmap() returns no lookup can hit the old pages.
 * Runs for any user: the full userfaultfd where the process may have it
 * (root, CAP_SYS_PTRACE, or vm.unprivileged_userfaultfd=1), else the
 * user-mode-only kind every process gets (5.11), which is enough in
 * write-protect mode only (see uffd_open()).
 * Limits: only anonymous, shmem and hugetlbfs mappings can be watched (a
 * region elsewhere, e.g. a file mapping, is handed out uncached); a range
 * watched by another userfaultfd (another library) cannot be watched.
 * Cost: one ioctl (about 1-2 us) per newly cached region; nothing per hit but
 * one load; each munmap/madvise/mremap of a watched range waits for a round
 * trip through the monitor thread (a few microseconds). Ranges stay watched
 * after eviction (unwatching could drop a range that an overlapping region
 * still needs); they stop being watched when unmapped or removed.
 * Ranges are watched in write-protect mode where the kernel has it (5.7 for
 * anonymous memory, 5.19 for shmem and hugetlbfs; Debian 12's 6.1 has both)
 * and nothing is ever write-protected: the events come all the same and no
 * page fault ever reaches the monitor thread. In missing-page mode (the
 * fallback) every first touch of a page in a watched range is resolved by
 * that thread with a zero page (what the kernel would map), and a transfer
 * of the simulated device that touched one while the thread waited for that
 * very transfer to quiesce (an unmap of the same MR) deadlocked both.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <linux/userfaultfd.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>

#include "monitor/monitor.h"
#include "mr/fork.h"

_Atomic unsigned pdma_uffd_seq;

static pthread_mutex_t uffd_lock = PTHREAD_MUTEX_INITIALIZER;
static int uffd_refs;
static atomic_int uffd_fd = -1;
static int uffd_stopfd = -1;
static pthread_t uffd_thread;
static bool uffd_wp; /* the kernel registers ranges in write-protect mode */
static bool uffd_user_only; /* UFFD_USER_MODE_ONLY: write-protect mode or nothing */

static void uffd_unwatch(int fd, uint64_t start, uint64_t len)
{
	struct uffdio_range r = { .start = start, .len = len };

	ioctl(fd, UFFDIO_UNREGISTER, &r);
}

static void uffd_handle(int fd, const struct uffd_msg *m)
{
	const uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE);

	switch (m->event) {
	case UFFD_EVENT_UNMAP:
		pdma_monitor_notify(PDMA_HMEM_SYSTEM, m->arg.remove.start,
				    m->arg.remove.end - m->arg.remove.start);
		break;
	case UFFD_EVENT_REMOVE:
		pdma_monitor_notify(PDMA_HMEM_SYSTEM, m->arg.remove.start,
				    m->arg.remove.end - m->arg.remove.start);
		uffd_unwatch(fd, m->arg.remove.start, m->arg.remove.end - m->arg.remove.start);
		break;
	case UFFD_EVENT_REMAP:
		pdma_monitor_notify(PDMA_HMEM_SYSTEM, m->arg.remap.from, m->arg.remap.len);
		break;
	case UFFD_EVENT_PAGEFAULT: {
		uint64_t a = m->arg.pagefault.address & ~(pg - 1);
		struct uffdio_zeropage z = { .range = { .start = a, .len = pg } };
		struct uffdio_range w = { .start = a, .len = pg };

		if (ioctl(fd, UFFDIO_ZEROPAGE, &z) == 0)
			break;
		if (errno != EEXIST)
			uffd_unwatch(fd, a, pg); /* let the kernel handle it */
		ioctl(fd, UFFDIO_WAKE, &w);
		break;
	}
	default:
		break;
	}
}

static void *uffd_main(void *arg)
{
	int fd = atomic_load(&uffd_fd);
	struct pollfd p[2] = { { .fd = fd, .events = POLLIN }, { .fd = uffd_stopfd, .events = POLLIN } };

	(void)arg;
	for (;;) {
		struct uffd_msg msg[16];
		ssize_t n;

		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (p[1].revents)
			break;
		if (!(p[0].revents & POLLIN))
			continue;
		/* Odd before the read releases the unmapping thread. */
		atomic_fetch_add(&pdma_uffd_seq, 1);
		while ((n = read(fd, msg, sizeof(msg))) > 0) {
			for (size_t i = 0; i < (size_t)n / sizeof(msg[0]); i++)
				uffd_handle(fd, &msg[i]);
		}
		atomic_fetch_add(&pdma_uffd_seq, 1);
	}
	return NULL;
}

/* A userfaultfd of that kind, its API negotiated with those features; or
 * -errno (a feature the kernel does not know: EINVAL from UFFDIO_API, which
 * may leave the context unusable, so a retry takes a fresh one). */
static int uffd_try(int flags, uint64_t features, struct uffdio_api *api)
{
	int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | flags);
	int e;

	if (fd < 0)
		return -errno;
	api->api = UFFD_API;
	api->features = features;
	if (ioctl(fd, UFFDIO_API, api) == 0)
		return fd;
	e = errno;
	close(fd);
	return -e;
}

/*
 * A userfaultfd with the events, and write-protect mode where the kernel
 * has it. A process refused the full kind (EPERM: not root, no
 * CAP_SYS_PTRACE, vm.unprivileged_userfaultfd=0, Debian's default) gets the
 * user-mode-only kind, but in write-protect mode only. In missing-page mode
 * a fault the kernel itself takes on a watched page that is not present
 * (read() or recv() into it, pin_user_pages, mlock: the tail of a watched
 * mapping that mremap grew) would fail with EFAULT under it instead of
 * reaching the monitor thread, and a monitor must never make the
 * application's system calls fail. In write-protect mode no fault is ever
 * the userfaultfd's (nothing is write-protected), so its kind does not
 * matter; the events come to both.
 */
static int uffd_open(struct uffdio_api *api, bool *wp, bool *user_only)
{
	static const uint64_t wp_features = UFFD_FEATURE_PAGEFAULT_FLAG_WP |
#ifdef UFFD_FEATURE_WP_HUGETLBFS_SHMEM
					    UFFD_FEATURE_WP_HUGETLBFS_SHMEM |
#endif
					    0;
	const uint64_t events = api->features;
	int fd = uffd_try(0, events | wp_features, api);

	*wp = fd >= 0;
	*user_only = false;
	if (fd == -EINVAL)
		fd = uffd_try(0, events, api);
#ifdef UFFD_USER_MODE_ONLY
	if (fd == -EPERM) {
		int u = uffd_try(UFFD_USER_MODE_ONLY, events | wp_features, api);

		if (u >= 0) {
			*wp = *user_only = true;
			fd = u;
		}
	}
#endif
	return fd;
}

int pdma_uffd_monitor_start(void)
{
	struct uffdio_api api = { .api = UFFD_API,
				  .features = UFFD_FEATURE_EVENT_UNMAP |
					      UFFD_FEATURE_EVENT_REMOVE |
					      UFFD_FEATURE_EVENT_REMAP };
	int fd, ret = 0;

	pthread_mutex_lock(&uffd_lock);
	if (uffd_refs++ > 0)
		goto out;
	/* refused (seccomp, as Docker's default profile; an unprivileged
	 * process on a kernel without write-protect mode): the cache falls
	 * back to memhooks */
	fd = uffd_open(&api, &uffd_wp, &uffd_user_only);
	if (fd < 0) {
		ret = fd;
		goto fail;
	}
	uffd_stopfd = eventfd(0, EFD_CLOEXEC);
	if (uffd_stopfd < 0) {
		ret = -errno;
		close(fd);
		goto fail;
	}
	atomic_store(&uffd_fd, fd);
	ret = -pthread_create(&uffd_thread, NULL, uffd_main, NULL);
	if (ret) {
		atomic_store(&uffd_fd, -1);
		close(fd);
		close(uffd_stopfd);
		uffd_stopfd = -1;
		goto fail;
	}
	goto out;
fail:
	uffd_refs--;
out:
	pthread_mutex_unlock(&uffd_lock);
	return ret;
}

void pdma_uffd_monitor_stop(void)
{
	uint64_t one = 1;

	pthread_mutex_lock(&uffd_lock);
	if (uffd_refs > 0 && --uffd_refs == 0) {
		if (write(uffd_stopfd, &one, sizeof(one)) != sizeof(one))
			one = 0;
		pthread_join(uffd_thread, NULL);
		close(atomic_exchange(&uffd_fd, -1));
		close(uffd_stopfd);
		uffd_stopfd = -1;
	}
	pthread_mutex_unlock(&uffd_lock);
}

/*
 * fork(): the monitor thread is not copied, and the userfaultfd context
 * belongs to the parent's address space (the child's mappings are not watched
 * by it: no UFFD_FEATURE_EVENT_FORK; a range registered through it from the
 * child would be watched in the parent). The child closes its copies of the
 * descriptors and starts from nothing; the next cache opened there starts a
 * monitor of its own. Caches inherited from the parent stop using this one
 * (lib/cache/fork.c) and never call stop for it.
 */
void pdma_uffd_fork_prepare(void)
{
	pthread_mutex_lock(&uffd_lock);
}

void pdma_uffd_fork_parent(void)
{
	pthread_mutex_unlock(&uffd_lock);
}

void pdma_uffd_fork_child(void)
{
	int fd = atomic_exchange(&uffd_fd, -1);

	if (fd >= 0)
		close(fd);
	if (uffd_stopfd >= 0)
		close(uffd_stopfd);
	uffd_stopfd = -1;
	uffd_refs = 0;
	/* Odd if the parent's thread was handling events at the fork. */
	atomic_store(&pdma_uffd_seq, 0);
	pthread_mutex_unlock(&uffd_lock);
}

int pdma_uffd_monitor_watch(uint64_t start, size_t len)
{
	struct uffdio_register reg = { .range = { .start = start, .len = len },
				       .mode = uffd_wp ? UFFDIO_REGISTER_MODE_WP
						       : UFFDIO_REGISTER_MODE_MISSING };
	int fd = atomic_load(&uffd_fd);

	if (fd < 0)
		return -ENODEV;
	if (ioctl(fd, UFFDIO_REGISTER, &reg) == 0)
		return 0;
	/* a mapping the kernel cannot write-protect: the missing-page mode,
	 * which the user-mode-only kind must not use (uffd_open()) */
	if (errno != EINVAL || !uffd_wp || uffd_user_only)
		return -errno;
	reg.mode = UFFDIO_REGISTER_MODE_MISSING;
	if (ioctl(fd, UFFDIO_REGISTER, &reg) < 0)
		return -errno;
	return 0;
}
