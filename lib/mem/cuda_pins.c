// SPDX-License-Identifier: MIT
/*
 * The cuda backend's live pins. Each sits on one process-wide list so that
 * the deallocation hooks (lib/monitor/cuda.c), which know no domain, can
 * revoke them before the memory is released. The list is touched by pin,
 * unpin and the hooks only: never on a cache hit. A pin joins it (pending)
 * before the driver is asked about its memory, and releases in progress are
 * listed too, so that a free racing with a pin makes the pin fail (-EFAULT)
 * rather than outlive the memory. Revocation callbacks run without the
 * list's lock (they wait for DMA).
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mem/cuda_int.h"
#include "monitor/monitor.h"

pthread_mutex_t pdma_cuda_pins_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t pdma_cuda_pins_cond = PTHREAD_COND_INITIALIZER;
/* Releases in progress (between a hook's start and the driver's return):
 * a pin of their memory that is in progress meanwhile fails. */
static struct pdma_cuda_release *releasing;

static struct cuda_pin pins_head = { .prev = &pins_head, .next = &pins_head };

/*
 * A pin joins the live list before the driver is asked anything about its
 * memory, marked pending: a free racing with the pin (between classification
 * and the end of pin) then finds it, marks it revoked, and the pin fails with
 * -EFAULT instead of handing out a registration of freed memory. Until it is
 * committed its match range is the requested range itself.
 */
struct cuda_pin *pdma_cuda_pin_begin(struct pdma_cuda *ctx, uint64_t addr, size_t len,
				     pdma_mem_revoke_fn revoke, void *arg)
{
	struct cuda_pin *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->ctx = ctx;
	p->va = addr;
	p->len = len;
	p->device = -1;
	p->alloc_base = addr;
	p->alloc_size = len;
	p->fd = -1;
	p->revoke = revoke;
	p->arg = arg;
	p->pending = true;
	pthread_mutex_lock(&pdma_cuda_pins_lock);
	/* Its memory is being released right now: the pin will fail. */
	for (struct pdma_cuda_release *r = releasing; r; r = r->next)
		if (overlaps(addr, addr + len, r->addr, r->len))
			p->revoked = true;
	p->next = &pins_head;
	p->prev = pins_head.prev;
	pins_head.prev->next = p;
	pins_head.prev = p;
	pthread_mutex_unlock(&pdma_cuda_pins_lock);
	return p;
}

/* The pin failed: take it off the list and free it (its dma-buf, its host
 * registration). */
static void pin_abort(struct cuda_pin *p)
{
	pthread_mutex_lock(&pdma_cuda_pins_lock);
	p->prev->next = p->next;
	p->next->prev = p->prev;
	pthread_mutex_unlock(&pdma_cuda_pins_lock);
	if (p->fd >= 0)
		close(p->fd);
	if (p->kind == PDMA_CUDA_PIN_HOST_REGISTERED) {
		bool pushed = pdma_cuda_ctx_enter(p->ctx, 0);

		p->ctx->api->MemHostUnregister((void *)(uintptr_t)p->va);
		pdma_cuda_ctx_leave(p->ctx, pushed);
	}
	free(p);
}

/* The pin failed with ret: -EFAULT instead if its memory was released
 * meanwhile (the driver's error is then a consequence of that). */
int pdma_cuda_pin_fail(struct cuda_pin *p, int ret)
{
	bool raced;

	pthread_mutex_lock(&pdma_cuda_pins_lock);
	raced = p->revoked;
	pthread_mutex_unlock(&pdma_cuda_pins_lock);
	if (raced) {
		pdma_cuda_log(p->ctx, 4, "cuda: [%#llx, +%zu) was freed while it was being pinned",
			 (unsigned long long)p->va, p->len);
		ret = -EFAULT;
	}
	pin_abort(p);
	return ret;
}

/* Publish what classification found (the hooks read it). */
void pdma_cuda_pin_set_alloc(struct cuda_pin *p, const struct pdma_cuda_ptr_info *in, void *cuctx)
{
	pthread_mutex_lock(&pdma_cuda_pins_lock);
	p->device = in->device;
	p->buffer_id = in->buffer_id;
	p->alloc_base = in->base;
	p->alloc_size = in->size;
	p->cuctx = cuctx;
	pthread_mutex_unlock(&pdma_cuda_pins_lock);
}

/* 0, or -EFAULT if the memory was freed while it was being pinned. */
int pdma_cuda_pin_commit(struct cuda_pin *p)
{
	struct pdma_cuda *ctx = p->ctx;
	bool raced;

	pthread_mutex_lock(&pdma_cuda_pins_lock);
	raced = p->revoked;
	if (!raced)
		p->pending = false;
	pthread_mutex_unlock(&pdma_cuda_pins_lock);
	if (raced) {
		pdma_cuda_log(ctx, 4, "cuda: [%#llx, +%zu) was freed while it was being pinned",
			 (unsigned long long)p->va, p->len);
		pin_abort(p);
		return -EFAULT;
	}
	atomic_fetch_add_explicit(&ctx->st_pins, 1, memory_order_relaxed);
	atomic_fetch_add(&ctx->refs, 1);
	return 0;
}

/* ------------------------------------------------------------ revocation */

/*
 * Revocation runs the pins' callbacks (which quiesce their regions: they wait
 * for DMA sections in flight) without pdma_cuda_pins_lock, so that code inside a DMA
 * section may still look at pins. A pin being revoked is held on the list
 * (revoking > 0): its unpin waits until the callback has returned.
 */

/* Under pdma_cuda_pins_lock: mark p revoked, close its dma-buf, queue it on *list. */
static void revoke_mark(struct cuda_pin *p, struct cuda_pin **list)
{
	p->revoked = true;
	if (p->fd >= 0) {
		close(p->fd);
		p->fd = -1;
	}
	p->revoking++;
	p->rnext = *list;
	*list = p;
}

/* Without pdma_cuda_pins_lock: run the callbacks of the queued pins, then let go. */
static void revoke_run(struct cuda_pin *list)
{
	for (struct cuda_pin *p = list; p; p = p->rnext) {
		atomic_fetch_add_explicit(&p->ctx->st_revoked, 1, memory_order_relaxed);
		if (p->revoke)
			p->revoke(p->arg);
	}
	if (!list)
		return;
	pthread_mutex_lock(&pdma_cuda_pins_lock);
	for (struct cuda_pin *p = list, *n; p; p = n) {
		n = p->rnext;
		p->revoking--;
	}
	pthread_cond_broadcast(&pdma_cuda_pins_cond);
	pthread_mutex_unlock(&pdma_cuda_pins_lock);
}

void pdma_cuda_release_begin(struct pdma_cuda_release *rel, uint64_t addr, size_t len)
{
	struct cuda_pin *list = NULL;

	if (!len)
		len = 1;
	rel->addr = addr;
	rel->len = len;
	/* Caches first (they drop and revoke their regions), without holding
	 * pdma_cuda_pins_lock: their callbacks may unpin. */
	pdma_monitor_notify(PDMA_HMEM_CUDA, addr, len);
	pthread_mutex_lock(&pdma_cuda_pins_lock);
	rel->next = releasing;
	releasing = rel;
	for (struct cuda_pin *p = pins_head.next; p != &pins_head; p = p->next) {
		uint64_t b = p->alloc_base, e = p->alloc_base + (p->alloc_size ? p->alloc_size : p->len);

		if (p->revoked || !overlaps(b, e, addr, len))
			continue;
		if (p->pending)
			p->revoked = true; /* its pin() fails with -EFAULT */
		else
			revoke_mark(p, &list);
	}
	pthread_mutex_unlock(&pdma_cuda_pins_lock);
	revoke_run(list);
}

void pdma_cuda_release_end(struct pdma_cuda_release *rel)
{
	pthread_mutex_lock(&pdma_cuda_pins_lock);
	for (struct pdma_cuda_release **r = &releasing; *r; r = &(*r)->next) {
		if (*r == rel) {
			*r = rel->next;
			break;
		}
	}
	pthread_mutex_unlock(&pdma_cuda_pins_lock);
}

void pdma_cuda_invalidate(uint64_t addr, size_t len)
{
	struct pdma_cuda_release rel;

	pdma_cuda_release_begin(&rel, addr, len);
	pdma_cuda_release_end(&rel);
}

void pdma_cuda_release_context_begin(struct pdma_cuda_release *rel, const void *cuctx,
				     int device)
{
	struct range { uint64_t b; size_t l; } *v = NULL;
	struct cuda_pin *list = NULL;
	size_t n = 0, cap = 0;
	bool all = false;

	/* Every pin in progress meanwhile fails: its context is not known. */
	rel->addr = 0;
	rel->len = SIZE_MAX;

	/* Collect the ranges first: notify must not run under pdma_cuda_pins_lock. */
	pthread_mutex_lock(&pdma_cuda_pins_lock);
	for (struct cuda_pin *p = pins_head.next; p != &pins_head; p = p->next) {
		bool match = cuctx ? p->cuctx == cuctx : (device < 0 || p->device == device);

		if (p->revoked || p->pending || !match || p->device < 0)
			continue;
		if (n == cap) {
			size_t nc = cap ? cap * 2 : 16;
			struct range *nv = realloc(v, nc * sizeof(*v));

			if (!nv) {
				all = true;
				break;
			}
			v = nv;
			cap = nc;
		}
		v[n].b = p->alloc_base;
		v[n].l = p->alloc_size ? p->alloc_size : p->len;
		n++;
	}
	pthread_mutex_unlock(&pdma_cuda_pins_lock);
	/* Every cached region holds a pin, so the pins of the context name
	 * all its regions. Out of memory to list them: drop every CUDA region
	 * rather than miss one. */
	if (all)
		pdma_monitor_notify(PDMA_HMEM_CUDA, 0, SIZE_MAX);
	else
		for (size_t i = 0; i < n; i++)
			pdma_monitor_notify(PDMA_HMEM_CUDA, v[i].b, v[i].l);
	free(v);
	pthread_mutex_lock(&pdma_cuda_pins_lock);
	rel->next = releasing;
	releasing = rel;
	for (struct cuda_pin *p = pins_head.next; p != &pins_head; p = p->next) {
		bool match = cuctx ? p->cuctx == cuctx : (device < 0 || p->device == device);

		if (p->revoked)
			continue;
		if (p->pending)
			p->revoked = true; /* its context is not known yet: -EFAULT */
		else if (match && p->device >= 0)
			revoke_mark(p, &list);
	}
	pthread_mutex_unlock(&pdma_cuda_pins_lock);
	revoke_run(list);
}

void pdma_cuda_invalidate_context(void *cuctx, int device)
{
	struct pdma_cuda_release rel;

	pdma_cuda_release_context_begin(&rel, cuctx, device);
	pdma_cuda_release_end(&rel);
}
