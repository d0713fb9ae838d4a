// SPDX-License-Identifier: MIT
/*
 * The kdev backend: pins through the kernel module (/dev/peerdma,
 * include/uapi/peerdma.h), the only host backend that makes a DMA pin (the
 * plain host backend only checks the range: host.c). Host pages are held with
 * pin_user_pages(FOLL_LONGTERM) and watched by an MMU notifier, GPU pages
 * with nv-p2p, and when the kernel revokes a pin (munmap, GPU free, dma-buf
 * move) it queues an event on the file. One thread per backend reads those
 * events and revokes the matching region (quiescing its DMA) and notifies the
 * monitor, so caches drop the registration without any per-use check.
 *
 * fork(): the file and its pins stay the parent's. In a child the backend
 * refuses to pin (-ECHILD: the module would pin the child's pages on the
 * parent's file, whose events only the parent reads), never unpins (an
 * unpin would drop the parent's pin: pdma_region_fini skips inherited pins)
 * and closes only its copies of the descriptors (writing the stop eventfd
 * would stop the parent's event thread: the eventfd is shared).
 *
 * Ownership between a revocation and an unpin is decided under the backend
 * lock exactly as in the sim backend: the event marks the pin REVOKING and
 * runs the callback unlocked; an unpin meeting a REVOKING pin waits for DEAD.
 *
 * Synchronous monitor (pdma_kdev_sync, the cache's "kernel" monitor): the
 * module counts each revocation in a read-only page mapped from the file
 * (PEERDMA_CAP_REVOKE_COUNT) inside the revoking call, before munmap()
 * returns, while its event is queued once the pages are released, possibly
 * later. A caller that finds the counter ahead of the events handled reads
 * and handles them itself, waiting (poll) for those still on their way, so
 * what a returned munmap() revoked is handled before the caller goes on. The
 * event thread and such callers take turns under drain_lock: events are
 * handled in order, and "handled" counts only finished ones.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <uthash.h>

#include "mem/mem.h"
#include "mem/kdev.h"
#include "monitor/monitor.h"
#include "mr/fork.h"
#include "uapi/peerdma.h"

enum kpin_state { KPIN_LIVE, KPIN_REVOKING, KPIN_DEAD };

struct kpin {
	uint64_t handle;
	uint64_t addr;     /* the range the monitor is told about: user VA (host, GPU) */
	size_t len;
	uint32_t kind;     /* PEERDMA_KIND_* */
	uint32_t page_size; /* the module's entry size and count */
	uint32_t entries;
	enum pdma_hmem_iface iface;
	pdma_mem_revoke_fn revoke;
	void *arg;
	enum kpin_state state;
	UT_hash_handle hh;
};

struct pdma_kdev {
	int fd;
	int stop_fd; /* eventfd: wakes the event thread for shutdown */
	uint64_t caps;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t dead;
	struct kpin *pins; /* uthash by handle */
	pthread_mutex_t drain_lock; /* one reader of events at a time, in order */
	_Atomic uint64_t handled;   /* events read and handled (callbacks done) */
	const struct peerdma_counters *counters; /* mapped read-only; NULL: old module */
	uint64_t fork_gen; /* pdma_fork_gen() at open: another value means a child */
};

/* Under drain_lock: read what is queued and handle it. Returns the number of
 * events handled (0: none queued) or -errno. */
static int kdev_events_drain(struct pdma_kdev *k)
{
	struct peerdma_event ev[16];
	ssize_t n = read(k->fd, ev, sizeof(ev));

	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -errno;
	for (size_t i = 0; i < (size_t)n / sizeof(ev[0]); i++) {
		struct kpin *p;

		pthread_mutex_lock(&k->lock);
		HASH_FIND(hh, k->pins, &ev[i].handle, sizeof(ev[i].handle), p);
		if (p && p->state == KPIN_LIVE)
			p->state = KPIN_REVOKING;
		else
			p = NULL; /* unpinned meanwhile: its owner already let go */
		pthread_mutex_unlock(&k->lock);
		if (p) {
			pdma_monitor_notify(p->iface, p->addr, p->len);
			p->revoke(p->arg);
			pthread_mutex_lock(&k->lock);
			p->state = KPIN_DEAD;
			pthread_cond_broadcast(&k->dead);
			pthread_mutex_unlock(&k->lock);
		}
		atomic_fetch_add_explicit(&k->handled, 1, memory_order_release);
	}
	return (int)((size_t)n / sizeof(ev[0]));
}

static inline uint64_t kdev_revokes(const struct pdma_kdev *k)
{
	return __atomic_load_n(&k->counters->revokes, __ATOMIC_ACQUIRE);
}

bool pdma_kdev_monitor_ok(const struct pdma_kdev *k)
{
	return k && k->counters;
}

int pdma_kdev_sync(struct pdma_kdev *k)
{
	uint64_t want = kdev_revokes(k);
	int ret = 0, waited = 0;

	if (__builtin_expect(atomic_load_explicit(&k->handled, memory_order_acquire) >= want, 1))
		return 0;
	/* A child sees the parent's counter but cannot read its events (nor
	 * take a lock the fork may have copied held). */
	if (k->fork_gen != pdma_fork_gen())
		return -ECHILD;
	pthread_mutex_lock(&k->drain_lock);
	while (atomic_load_explicit(&k->handled, memory_order_acquire) < want) {
		struct pollfd pfd = { .fd = k->fd, .events = POLLIN };

		ret = kdev_events_drain(k);
		if (ret < 0)
			break;
		if (ret > 0)
			continue;
		/* Counted but not queued yet: the module releases the pages
		 * first (a workqueue item, microseconds). A revocation that is
		 * never followed by its event is a module bug: give up after
		 * PDMA_KDEV_SYNC_WAIT_MS rather than hang the caller. */
		if (waited >= PDMA_KDEV_SYNC_WAIT_MS) {
			ret = -ETIMEDOUT;
			break;
		}
		if (poll(&pfd, 1, 10) == 0)
			waited += 10;
	}
	pthread_mutex_unlock(&k->drain_lock);
	return ret < 0 ? ret : 0;
}

static void *kdev_thread(void *arg)
{
	struct pdma_kdev *k = arg;
	struct pollfd pfd[2] = { { .fd = k->fd, .events = POLLIN },
				 { .fd = k->stop_fd, .events = POLLIN } };

	for (;;) {
		if (poll(pfd, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (pfd[1].revents)
			break;
		if (pfd[0].revents & POLLIN) {
			int ret;

			pthread_mutex_lock(&k->drain_lock);
			ret = kdev_events_drain(k);
			pthread_mutex_unlock(&k->drain_lock);
			if (ret < 0)
				break;
		}
		if (pfd[0].revents & (POLLERR | POLLHUP | POLLNVAL))
			break;
	}
	return NULL;
}

int pdma_kdev_open(const char *path, struct pdma_kdev **out)
{
	struct peerdma_version v = { .size = sizeof(v) };
	struct pdma_kdev *k;
	int ret;

	if (!out)
		return -EINVAL;
	k = calloc(1, sizeof(*k));
	if (!k)
		return -ENOMEM;
	k->fd = open(path ? path : PEERDMA_DEVICE, O_RDWR | O_CLOEXEC | O_NONBLOCK);
	if (k->fd < 0) {
		ret = errno == ENOENT ? -ENODEV : -errno;
		free(k);
		return ret;
	}
	if (ioctl(k->fd, PEERDMA_IOC_VERSION, &v)) {
		ret = -errno;
		goto err_fd;
	}
	if (v.abi_version >> 16 != PEERDMA_ABI_MAJOR) {
		ret = -EPROTO;
		goto err_fd;
	}
	k->caps = v.caps;
	if (k->caps & PEERDMA_CAP_REVOKE_COUNT) {
		void *c = mmap(NULL, (size_t)sysconf(_SC_PAGESIZE), PROT_READ, MAP_SHARED, k->fd,
			       PEERDMA_MMAP_COUNTERS);

		/* Without it the backend still works; only the kernel monitor
		 * is unavailable (pdma_kdev_monitor_ok). */
		k->counters = c == MAP_FAILED ? NULL : c;
	}
	pdma_fork_init();
	k->fork_gen = pdma_fork_gen();
	k->stop_fd = eventfd(0, EFD_CLOEXEC);
	if (k->stop_fd < 0) {
		ret = -errno;
		goto err_fd;
	}
	pthread_mutex_init(&k->lock, NULL);
	pthread_mutex_init(&k->drain_lock, NULL);
	pthread_cond_init(&k->dead, NULL);
	ret = -pthread_create(&k->thread, NULL, kdev_thread, k);
	if (ret) {
		pthread_cond_destroy(&k->dead);
		pthread_mutex_destroy(&k->drain_lock);
		pthread_mutex_destroy(&k->lock);
		close(k->stop_fd);
		goto err_fd;
	}
	*out = k;
	return 0;
err_fd:
	if (k->counters)
		munmap((void *)k->counters, (size_t)sysconf(_SC_PAGESIZE));
	close(k->fd);
	free(k);
	return ret;
}

int pdma_kdev_close(struct pdma_kdev *k)
{
	uint64_t one = 1;

	if (!k)
		return -EINVAL;
	if (k->fork_gen != pdma_fork_gen()) {
		/* Inherited: no event thread here, and the parent's lock state.
		 * The pins' records are this process's copies: free them. */
		struct kpin *p, *tmp;

		HASH_ITER(hh, k->pins, p, tmp) {
			HASH_DEL(k->pins, p);
			free(p);
		}
		/* Our copy of the counter mapping holds the parent's file
		 * open as the descriptor does: let go of both. */
		if (k->counters)
			munmap((void *)k->counters, (size_t)sysconf(_SC_PAGESIZE));
		close(k->stop_fd);
		close(k->fd);
		free(k);
		return 0;
	}
	pthread_mutex_lock(&k->lock);
	if (k->pins) {
		pthread_mutex_unlock(&k->lock);
		return -EBUSY;
	}
	pthread_mutex_unlock(&k->lock);
	if (write(k->stop_fd, &one, sizeof(one)) != sizeof(one))
		return -errno;
	pthread_join(k->thread, NULL);
	close(k->stop_fd);
	/* The mapping holds the file open too: unmap it first. */
	if (k->counters)
		munmap((void *)k->counters, (size_t)sysconf(_SC_PAGESIZE));
	close(k->fd); /* the module drops anything still pinned on this file */
	pthread_cond_destroy(&k->dead);
	pthread_mutex_destroy(&k->drain_lock);
	pthread_mutex_destroy(&k->lock);
	free(k);
	return 0;
}

uint64_t pdma_kdev_caps(const struct pdma_kdev *k)
{
	return k->caps;
}

uint64_t pdma_kdev_events(struct pdma_kdev *k)
{
	return atomic_load(&k->handled);
}

int pdma_kdev_pin_pages(struct pdma_kdev *k, const void *pin, uint32_t *state, uint64_t *phys,
			uint32_t n)
{
	const struct kpin *p = pin;
	struct peerdma_query q = { .size = sizeof(q), .handle = p->handle };
	struct peerdma_get_pages g = { .size = sizeof(g), .handle = p->handle,
				       .addrs = (uint64_t)(uintptr_t)phys, .count = n };

	if (ioctl(k->fd, PEERDMA_IOC_QUERY, &q))
		return -errno;
	*state = q.state;
	if (phys && ioctl(k->fd, PEERDMA_IOC_GET_PAGES, &g))
		return -errno;
	return 0;
}

int pdma_kdev_pin(struct pdma_kdev *k, uint32_t kind, uint32_t flags, int fd,
		  enum pdma_hmem_iface iface, uint64_t addr, size_t len, uint64_t va,
		  pdma_mem_revoke_fn revoke, void *arg, void **out)
{
	struct peerdma_pin pin = { .size = sizeof(pin), .flags = flags, .kind = kind, .fd = fd,
				   .addr = addr, .len = len };
	struct kpin *p;

	if (!k)
		return -ENODEV;
	if (k->fork_gen != pdma_fork_gen())
		return -ECHILD;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	pin.user_data = (uint64_t)(uintptr_t)p;
	/* Insert under the lock that the event thread takes, so an event for
	 * this handle cannot be looked up before the pin is in the table. */
	pthread_mutex_lock(&k->lock);
	if (ioctl(k->fd, PEERDMA_IOC_PIN, &pin)) {
		int e = errno;

		pthread_mutex_unlock(&k->lock);
		free(p);
		/* Host memory: EINVAL is the module refusing the range (not
		 * mapped, not pinnable). GPU kinds keep the module's errno: it
		 * says which (EOPNOTSUPP: no provider, EBADF, ENOMEM: BAR). */
		return e == EINVAL && kind == PEERDMA_KIND_HOST ? -EFAULT : -e;
	}
	p->handle = pin.handle;
	/* A dma-buf pin's pinned_addr is an offset in the buffer: the monitor
	 * and the MR speak of the virtual address the caller gave. */
	p->addr = kind == PEERDMA_KIND_HOST ? pin.pinned_addr : va;
	p->len = kind == PEERDMA_KIND_HOST ? pin.pinned_len : len;
	p->kind = kind;
	p->page_size = pin.page_size;
	p->entries = pin.entries;
	p->iface = iface;
	p->revoke = revoke;
	p->arg = arg;
	p->state = KPIN_LIVE;
	HASH_ADD(hh, k->pins, handle, sizeof(p->handle), p);
	pthread_mutex_unlock(&k->lock);
	*out = p;
	return 0;
}

/* The module's state of a pin: -ENODEV once revoked (whether or not its event
 * was handled yet), -errno if it cannot be asked. */
static int kdev_live(struct pdma_kdev *k, const struct kpin *p, struct peerdma_query *q)
{
	enum kpin_state st;

	pthread_mutex_lock(&k->lock);
	st = p->state;
	pthread_mutex_unlock(&k->lock);
	if (st != KPIN_LIVE)
		return -ENODEV;
	*q = (struct peerdma_query){ .size = sizeof(*q), .handle = p->handle };
	if (ioctl(k->fd, PEERDMA_IOC_QUERY, q))
		return errno == ENODEV ? -ENODEV : -errno;
	return q->state == PEERDMA_STATE_LIVE ? 0 : -ENODEV;
}

int pdma_kdev_dma(struct pdma_kdev *k, const void *pin, struct pdma_mr_dma *dma)
{
	const struct kpin *p = pin;
	struct peerdma_query q;
	int ret;

	if (k->fork_gen != pdma_fork_gen())
		return -ECHILD; /* the file and its handles are the parent's */
	ret = kdev_live(k, p, &q);
	if (ret)
		return ret;
	dma->kernel_fd = k->fd;
	dma->kind = p->kind;
	dma->handle = p->handle;
	dma->pinned_addr = p->addr;
	dma->pinned_len = p->len;
	dma->page_size = q.page_size;
	dma->entries = q.entries;
	dma->dmabuf_fd = -1;
	dma->dmabuf_offset = 0;
	return 0;
}

int pdma_kdev_dma_pages(struct pdma_kdev *k, const void *pin, uint64_t *addrs, uint32_t *count)
{
	const struct kpin *p = pin;
	struct peerdma_query q;
	struct peerdma_get_pages g = { .size = sizeof(g), .handle = p->handle };
	int ret;

	if (k->fork_gen != pdma_fork_gen())
		return -ECHILD;
	ret = kdev_live(k, p, &q);
	if (ret)
		return ret;
	if (*count < q.entries || !addrs) {
		*count = q.entries;
		return -ERANGE;
	}
	g.addrs = (uint64_t)(uintptr_t)addrs;
	g.count = *count;
	if (ioctl(k->fd, PEERDMA_IOC_GET_PAGES, &g))
		return -errno;
	*count = g.count;
	return 0;
}

void pdma_kdev_unpin(void *be, void *pin)
{
	struct pdma_kdev *k = be;
	struct kpin *p = pin;
	struct peerdma_unpin u = { .size = sizeof(u), .handle = p->handle };

	pthread_mutex_lock(&k->lock);
	while (p->state == KPIN_REVOKING)
		pthread_cond_wait(&k->dead, &k->lock);
	HASH_DEL(k->pins, p);
	/* A revoked handle stays allocated in the kernel until unpinned. */
	ioctl(k->fd, PEERDMA_IOC_UNPIN, &u);
	pthread_mutex_unlock(&k->lock);
	free(p);
}

static int kdev_host_query(void *be, uint64_t addr, size_t len, struct pdma_mem_alloc *alloc)
{
	(void)be;
	return pdma_mem_host_ops.query(NULL, addr, len, alloc);
}

static int kdev_host_pin(void *be, uint64_t addr, size_t len, pdma_mem_revoke_fn revoke,
			 void *arg, void **out)
{
	return pdma_kdev_pin(be, PEERDMA_KIND_HOST, 0, -1, PDMA_HMEM_SYSTEM, addr, len, addr,
			     revoke, arg, out);
}

static int kdev_host_dma(void *be, void *pin, struct pdma_mr_dma *dma)
{
	return pdma_kdev_dma(be, pin, dma);
}

static int kdev_host_dma_pages(void *be, void *pin, uint64_t *addrs, uint32_t *count)
{
	return pdma_kdev_dma_pages(be, pin, addrs, count);
}

const struct pdma_mem_ops pdma_mem_kdev_host_ops = {
	.name = "kdev-host",
	.page_size = 4096,
	.cpu_visible = true,
	.query = kdev_host_query,
	.pin = kdev_host_pin,
	.unpin = pdma_kdev_unpin,
	.dma = kdev_host_dma,
	.dma_pages = kdev_host_dma_pages,
};
