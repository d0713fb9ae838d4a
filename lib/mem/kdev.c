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
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
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
	uint64_t addr;
	size_t len;
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
	uint64_t events;
	uint64_t fork_gen; /* pdma_fork_gen() at open: another value means a child */
};

static int kdev_events_drain(struct pdma_kdev *k)
{
	struct peerdma_event ev[16];
	ssize_t n = read(k->fd, ev, sizeof(ev));

	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -errno;
	for (size_t i = 0; i < (size_t)n / sizeof(ev[0]); i++) {
		struct kpin *p;

		pthread_mutex_lock(&k->lock);
		k->events++;
		HASH_FIND(hh, k->pins, &ev[i].handle, sizeof(ev[i].handle), p);
		if (p && p->state == KPIN_LIVE)
			p->state = KPIN_REVOKING;
		else
			p = NULL; /* unpinned meanwhile: its owner already let go */
		pthread_mutex_unlock(&k->lock);
		if (!p)
			continue;
		pdma_monitor_notify(p->iface, p->addr, p->len);
		p->revoke(p->arg);
		pthread_mutex_lock(&k->lock);
		p->state = KPIN_DEAD;
		pthread_cond_broadcast(&k->dead);
		pthread_mutex_unlock(&k->lock);
	}
	return 0;
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
		if ((pfd[0].revents & POLLIN) && kdev_events_drain(k))
			break;
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
	pdma_fork_init();
	k->fork_gen = pdma_fork_gen();
	k->stop_fd = eventfd(0, EFD_CLOEXEC);
	if (k->stop_fd < 0) {
		ret = -errno;
		goto err_fd;
	}
	pthread_mutex_init(&k->lock, NULL);
	pthread_cond_init(&k->dead, NULL);
	ret = -pthread_create(&k->thread, NULL, kdev_thread, k);
	if (ret) {
		pthread_cond_destroy(&k->dead);
		pthread_mutex_destroy(&k->lock);
		close(k->stop_fd);
		goto err_fd;
	}
	*out = k;
	return 0;
err_fd:
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
	close(k->fd); /* the module drops anything still pinned on this file */
	pthread_cond_destroy(&k->dead);
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
	uint64_t n;

	pthread_mutex_lock(&k->lock);
	n = k->events;
	pthread_mutex_unlock(&k->lock);
	return n;
}

static int kdev_pin(struct pdma_kdev *k, uint32_t kind, enum pdma_hmem_iface iface,
		    uint64_t addr, size_t len, pdma_mem_revoke_fn revoke, void *arg, void **out)
{
	struct peerdma_pin pin = { .size = sizeof(pin), .kind = kind, .fd = -1, .addr = addr,
				   .len = len };
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
		return e == EINVAL ? -EFAULT : -e;
	}
	p->handle = pin.handle;
	p->addr = pin.pinned_addr;
	p->len = pin.pinned_len;
	p->iface = iface;
	p->revoke = revoke;
	p->arg = arg;
	p->state = KPIN_LIVE;
	HASH_ADD(hh, k->pins, handle, sizeof(p->handle), p);
	pthread_mutex_unlock(&k->lock);
	*out = p;
	return 0;
}

static void kdev_unpin(void *be, void *pin)
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
	return kdev_pin(be, PEERDMA_KIND_HOST, PDMA_HMEM_SYSTEM, addr, len, revoke, arg, out);
}

const struct pdma_mem_ops pdma_mem_kdev_host_ops = {
	.name = "kdev-host",
	.page_size = 4096,
	.cpu_visible = true,
	.query = kdev_host_query,
	.pin = kdev_host_pin,
	.unpin = kdev_unpin,
};
