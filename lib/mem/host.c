// SPDX-License-Identifier: MIT
/*
 * Host memory backend: pages pinned with mlock(2).
 *
 * mlock is not reference counted by the kernel: one munlock unlocks a page for
 * every earlier mlock of it. Two MRs sharing a page (common: small buffers in
 * one page) would lose their pin when the first is closed. The live pins are
 * therefore kept in one process-wide list (mlock state is process-wide, so a
 * per-domain list would not be enough), and unpin munlocks only the parts of
 * its range that no other live pin covers.
 *
 * mlock keeps pages resident but does not follow a remap: after munmap+mmap at
 * the same address the new pages are not the pinned ones. Detecting that is
 * the monitors' job (cache) or the caller's (pdma_mr_refresh, MMU_NOTIFY).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "mem/mem.h"

#define HOST_PAGE 4096ull /* x86_64 and the pin granularity we report */

struct host_pin {
	uint64_t start;
	size_t len;
	struct host_pin *next;
};

static pthread_mutex_t host_lock = PTHREAD_MUTEX_INITIALIZER;
static struct host_pin *host_pins;

static int host_query(void *be, uint64_t addr, size_t len, struct pdma_mem_alloc *out)
{
	static const size_t chunk = 4096; /* pages per mincore call */
	unsigned char vec[4096];
	uint64_t start, page = HOST_PAGE;
	size_t plen;

	(void)be;
	if (!len || addr + len < addr)
		return -EINVAL;
	pdma_page_round(page, addr, len, &start, &plen);
	/* mincore fails with ENOMEM on any unmapped page: the ALLOCATED check. */
	for (size_t off = 0; off < plen; off += chunk * page) {
		size_t n = plen - off < chunk * page ? plen - off : chunk * page;

		if (mincore((void *)(uintptr_t)(start + off), n, vec))
			return -EFAULT;
	}
	out->base = start;
	out->size = plen;
	out->buffer_id = 0;
	return 0;
}

static int host_pin(void *be, uint64_t addr, size_t len, pdma_mem_revoke_fn revoke, void *arg,
		    void **out)
{
	struct host_pin *p;

	(void)be;
	(void)revoke; /* host pins are revoked by monitors, not by this backend */
	(void)arg;
	if ((addr | len) & (HOST_PAGE - 1) || !len)
		return -EINVAL;
	p = malloc(sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->start = addr;
	p->len = len;
	if (mlock((void *)(uintptr_t)addr, len)) {
		int e = errno;

		free(p);
		/* ENOMEM/EPERM/EAGAIN: over RLIMIT_MEMLOCK or out of lockable
		 * memory, the host's "BAR exhausted" (query checked mapping). */
		return (e == ENOMEM || e == EPERM || e == EAGAIN) ? -ENOMEM : -e;
	}
	pthread_mutex_lock(&host_lock);
	p->next = host_pins;
	host_pins = p;
	pthread_mutex_unlock(&host_lock);
	*out = p;
	return 0;
}

static int cmp_start(const void *a, const void *b)
{
	const struct host_pin *x = *(struct host_pin *const *)a, *y = *(struct host_pin *const *)b;

	return x->start < y->start ? -1 : x->start > y->start;
}

static void host_unpin(void *be, void *pin)
{
	struct host_pin *p = pin, **pp, *o, **over = NULL;
	size_t n = 0, cap = 0;
	uint64_t at, end;

	(void)be;
	pthread_mutex_lock(&host_lock);
	for (pp = &host_pins; *pp != p; pp = &(*pp)->next)
		;
	*pp = p->next;
	end = p->start + p->len;
	for (o = host_pins; o; o = o->next) {
		if (o->start >= end || o->start + o->len <= p->start)
			continue;
		if (n == cap) {
			struct host_pin **g = realloc(over, (cap = cap ? 2 * cap : 8) * sizeof(*g));

			if (!g) {
				/* Cannot compute the uncovered parts: leave the
				 * pages locked (a leak of locked memory, never a
				 * lost pin). */
				pthread_mutex_unlock(&host_lock);
				free(over);
				free(p);
				return;
			}
			over = g;
		}
		over[n++] = o;
	}
	if (n > 1)
		qsort(over, n, sizeof(*over), cmp_start);
	/* Walk the gaps between the other pins that overlap us. */
	at = p->start;
	for (size_t i = 0; i < n && at < end; i++) {
		uint64_t os = over[i]->start, oe = over[i]->start + over[i]->len;

		if (os > at)
			munlock((void *)(uintptr_t)at, (os < end ? os : end) - at);
		if (oe > at)
			at = oe;
	}
	if (at < end)
		munlock((void *)(uintptr_t)at, end - at);
	pthread_mutex_unlock(&host_lock);
	free(over);
	free(p);
}

const struct pdma_mem_ops pdma_mem_host_ops = {
	.name = "host",
	.page_size = HOST_PAGE,
	.cpu_visible = true,
	.query = host_query,
	.pin = host_pin,
	.unpin = host_unpin,
};
