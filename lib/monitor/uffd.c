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
 * Needs the full userfaultfd (root, CAP_SYS_PTRACE, or
 * vm.unprivileged_userfaultfd=1): the user-mode-only kind would make the
 * kernel's own faults on watched pages fail (see start()).
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

/* A userfaultfd with the events, and write-protect mode where the kernel
 * has it (a feature it does not know fails UFFDIO_API: then without). */
static int uffd_open(struct uffdio_api *api, bool *wp)
{
	static const uint64_t wp_features = UFFD_FEATURE_PAGEFAULT_FLAG_WP |
#ifdef UFFD_FEATURE_WP_HUGETLBFS_SHMEM
					    UFFD_FEATURE_WP_HUGETLBFS_SHMEM |
#endif
					    0;
	const uint64_t events = api->features;

	for (int with_wp = 1; with_wp >= 0; with_wp--) {
		int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);

		if (fd < 0)
			return -errno;
		api->api = UFFD_API;
		api->features = events | (with_wp ? wp_features : 0);
		if (ioctl(fd, UFFDIO_API, api) == 0) {
			*wp = with_wp;
			return fd;
		}
		int e = errno;

		close(fd);
		if (!with_wp || e != EINVAL)
			return -e;
	}
	return -EINVAL;
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
	/* Not UFFD_USER_MODE_ONLY (all an unprivileged process gets under
	 * vm.unprivileged_userfaultfd=0): with it, a fault the kernel takes on
	 * a watched page that is not present (read() or recv() into a buffer
	 * after madvise(MADV_DONTNEED), mlock or pin_user_pages of a range that
	 * mremap grew) fails with EFAULT instead of reaching the monitor
	 * thread. A monitor must never make the application's system calls
	 * fail, so without the full mode there is no userfaultfd monitor and
	 * the cache falls back to memhooks. */
	fd = uffd_open(&api, &uffd_wp);
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
	/* a mapping the kernel cannot write-protect: the missing-page mode */
	if (errno != EINVAL || !uffd_wp)
		return -errno;
	reg.mode = UFFDIO_REGISTER_MODE_MISSING;
	if (ioctl(fd, UFFDIO_REGISTER, &reg) < 0)
		return -errno;
	return 0;
}
