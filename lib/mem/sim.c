// SPDX-License-Identifier: MIT
/*
 * The simulated GPU (lib/mem/sim.h) and its memory backend ops.
 *
 * Memory: one reserved, 64 KiB-aligned range of anonymous memory; allocations
 * are first fit in address order, so a free followed by an allocation of the
 * same size returns the same address with a new buffer ID (the reuse a real
 * H100 shows, and the one stale registrations come from).
 *
 * Pins follow the nv-p2p free-callback model: a pin is LIVE until either the
 * owner unpins it, or the memory is freed. pdma_sim_free() marks the pins
 * REVOKING under the lock, runs their revoke callbacks without the lock (the
 * callback may block briefly to quiesce DMA and may take other locks, as the
 * NVIDIA driver's does), then marks them DEAD. Ownership is decided under the
 * lock: an unpin that meets a REVOKING pin waits for DEAD, so a callback never
 * runs on a pin (or a region) that its owner already freed.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "mem/mem.h"
#include "monitor/monitor.h"
#include "mem/sim.h"

enum sim_pin_state { PIN_LIVE, PIN_REVOKING, PIN_DEAD };

struct sim_pin {
	struct sim_alloc *alloc;
	uint64_t start;
	size_t len;
	pdma_mem_revoke_fn revoke;
	void *arg;
	enum sim_pin_state state;
	struct sim_pin *next, **pprev; /* unlinked in O(1): many pins per allocation */
};

struct sim_alloc {
	uint64_t base;
	size_t size;
	uint64_t buffer_id;
	bool freeing;
	struct sim_pin *pins;
	struct sim_alloc *next; /* sorted by base */
};

struct pdma_sim {
	pthread_mutex_t lock;
	pthread_cond_t dead; /* a REVOKING pin became DEAD */
	void *map;
	size_t map_len;
	uint64_t vbase;
	size_t mem_size;
	uint64_t next_buffer_id;
	struct sim_alloc *allocs;
	uint64_t pin_structs; /* pins not yet unpinned, revoked or not */
	atomic_uint_fast64_t dma_bytes; /* off the lock: counted on every DMA */
	struct pdma_sim_stats st;
};

#define SIM_PAGE ((uint64_t)PDMA_SIM_PAGE_SIZE)

static size_t round_page(size_t n)
{
	return (n + SIM_PAGE - 1) & ~(SIM_PAGE - 1);
}

int pdma_sim_open(const struct pdma_sim_attr *attr, struct pdma_sim **out)
{
	struct pdma_sim *s;
	size_t mem = 64u << 20, bar;

	if (!out)
		return -EINVAL;
	if (attr && attr->mem_size)
		mem = attr->mem_size;
	if (mem > ((size_t)1 << 40))
		return -EINVAL;
	mem = round_page(mem);
	bar = attr && attr->bar_size ? attr->bar_size : mem;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	/* Over-reserve by one page to align the base to 64 KiB; NORESERVE so a
	 * large simulated GPU costs nothing until touched. */
	s->map_len = mem + SIM_PAGE;
	s->map = mmap(NULL, s->map_len, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (s->map == MAP_FAILED) {
		free(s);
		return -ENOMEM;
	}
	s->vbase = ((uint64_t)(uintptr_t)s->map + SIM_PAGE - 1) & ~(SIM_PAGE - 1);
	s->mem_size = mem;
	s->st.bar_size = bar;
	s->next_buffer_id = 1;
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->dead, NULL);
	*out = s;
	return 0;
}

int pdma_sim_close(struct pdma_sim *s)
{
	struct sim_alloc *a, *n;

	if (!s)
		return -EINVAL;
	pthread_mutex_lock(&s->lock);
	if (s->pin_structs) {
		pthread_mutex_unlock(&s->lock);
		return -EBUSY;
	}
	pthread_mutex_unlock(&s->lock);
	for (a = s->allocs; a; a = n) {
		n = a->next;
		free(a);
	}
	munmap(s->map, s->map_len);
	pthread_cond_destroy(&s->dead);
	pthread_mutex_destroy(&s->lock);
	free(s);
	return 0;
}

int pdma_sim_alloc(struct pdma_sim *s, size_t len, void **ptr)
{
	struct sim_alloc *a, **pp;
	uint64_t at;

	if (!s || !ptr || !len || len > s->mem_size)
		return len > 0 && s && ptr ? -ENOMEM : -EINVAL;
	len = round_page(len);
	a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	pthread_mutex_lock(&s->lock);
	at = s->vbase;
	for (pp = &s->allocs; *pp; pp = &(*pp)->next) {
		if ((*pp)->base - at >= len)
			break;
		at = (*pp)->base + (*pp)->size;
	}
	if (at + len > s->vbase + s->mem_size) {
		pthread_mutex_unlock(&s->lock);
		free(a);
		return -ENOMEM;
	}
	a->base = at;
	a->size = len;
	a->buffer_id = s->next_buffer_id++;
	a->next = *pp;
	*pp = a;
	pthread_mutex_unlock(&s->lock);
	*ptr = (void *)(uintptr_t)at;
	return 0;
}

int pdma_sim_free(struct pdma_sim *s, void *ptr)
{
	uint64_t addr = (uint64_t)(uintptr_t)ptr;
	struct sim_alloc *a, **pp;
	struct sim_pin *p;

	if (!s || !ptr)
		return -EINVAL;
	pthread_mutex_lock(&s->lock);
	for (a = s->allocs; a; a = a->next)
		if (a->base == addr && !a->freeing)
			break;
	if (!a) {
		pthread_mutex_unlock(&s->lock);
		return -EINVAL;
	}
	/* From here on no new pin can be taken on the allocation. */
	a->freeing = true;
	for (p = a->pins; p; p = p->next) {
		if (p->state == PIN_LIVE) {
			p->state = PIN_REVOKING;
			s->st.bar_used -= p->len;
			s->st.live_pins--;
			s->st.free_callbacks++;
		}
	}
	pthread_mutex_unlock(&s->lock);

	/* Caches drop their index entries, then each pin's owner quiesces. */
	pdma_monitor_notify(PDMA_HMEM_SIM, a->base, a->size);
	for (p = a->pins; p; p = p->next)
		if (p->state == PIN_REVOKING)
			p->revoke(p->arg);

	pthread_mutex_lock(&s->lock);
	for (p = a->pins; p; p = p->next) {
		if (p->state == PIN_REVOKING)
			p->state = PIN_DEAD;
		p->alloc = NULL;
	}
	pthread_cond_broadcast(&s->dead);
	/* Zero the memory as a real free would lose it: a stale write that got
	 * through would be visible to the next owner, not silently kept. */
	madvise((void *)(uintptr_t)a->base, a->size, MADV_DONTNEED);
	for (pp = &s->allocs; *pp != a; pp = &(*pp)->next)
		;
	*pp = a->next;
	pthread_mutex_unlock(&s->lock);
	free(a);
	return 0;
}

/* Caller holds s->lock. */
static struct sim_alloc *find_alloc(struct pdma_sim *s, uint64_t addr)
{
	for (struct sim_alloc *a = s->allocs; a && a->base <= addr; a = a->next)
		if (addr < a->base + a->size && !a->freeing)
			return a;
	return NULL;
}

int pdma_sim_ptr_info(struct pdma_sim *s, const void *addr, struct pdma_sim_ptr_info *info)
{
	struct sim_alloc *a;

	if (!s || !info)
		return -EINVAL;
	pthread_mutex_lock(&s->lock);
	a = find_alloc(s, (uint64_t)(uintptr_t)addr);
	if (a) {
		info->base = a->base;
		info->size = a->size;
		info->buffer_id = a->buffer_id;
	}
	pthread_mutex_unlock(&s->lock);
	return a ? 0 : -ENOENT;
}

void pdma_sim_get_stats(struct pdma_sim *s, struct pdma_sim_stats *st)
{
	pthread_mutex_lock(&s->lock);
	*st = s->st;
	pthread_mutex_unlock(&s->lock);
	st->dma_bytes = atomic_load(&s->dma_bytes);
}

void pdma_sim_count_dma(struct pdma_sim *s, size_t bytes)
{
	atomic_fetch_add_explicit(&s->dma_bytes, bytes, memory_order_relaxed);
}

static int sim_query(void *be, uint64_t addr, size_t len, struct pdma_mem_alloc *out)
{
	struct pdma_sim *s = be;
	struct sim_alloc *a;
	int ret = -EFAULT;

	if (!s)
		return -ENODEV;
	pthread_mutex_lock(&s->lock);
	a = find_alloc(s, addr);
	if (a && len <= a->base + a->size - addr) {
		out->base = a->base;
		out->size = a->size;
		out->buffer_id = a->buffer_id;
		ret = 0;
	}
	pthread_mutex_unlock(&s->lock);
	return ret;
}

static int sim_pin(void *be, uint64_t addr, size_t len, pdma_mem_revoke_fn revoke, void *arg,
		   void **out)
{
	struct pdma_sim *s = be;
	struct sim_alloc *a;
	struct sim_pin *p;

	if (!s)
		return -ENODEV;
	if ((addr | len) & (SIM_PAGE - 1) || !len || !revoke)
		return -EINVAL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	pthread_mutex_lock(&s->lock);
	a = find_alloc(s, addr);
	if (!a || len > a->base + a->size - addr) {
		pthread_mutex_unlock(&s->lock);
		free(p);
		return -EFAULT;
	}
	if (s->st.bar_used + len > s->st.bar_size) {
		pthread_mutex_unlock(&s->lock);
		free(p);
		return -ENOMEM;
	}
	p->alloc = a;
	p->start = addr;
	p->len = len;
	p->revoke = revoke;
	p->arg = arg;
	p->state = PIN_LIVE;
	p->next = a->pins;
	if (p->next)
		p->next->pprev = &p->next;
	p->pprev = &a->pins;
	a->pins = p;
	s->st.bar_used += len;
	s->st.live_pins++;
	s->st.pins++;
	s->pin_structs++;
	pthread_mutex_unlock(&s->lock);
	*out = p;
	return 0;
}

static void sim_unpin(void *be, void *pin)
{
	struct pdma_sim *s = be;
	struct sim_pin *p = pin;

	pthread_mutex_lock(&s->lock);
	while (p->state == PIN_REVOKING)
		pthread_cond_wait(&s->dead, &s->lock);
	if (p->state == PIN_LIVE) {
		s->st.bar_used -= p->len;
		s->st.live_pins--;
	}
	if (p->alloc) {
		*p->pprev = p->next;
		if (p->next)
			p->next->pprev = p->pprev;
	}
	s->st.unpins++;
	s->pin_structs--;
	pthread_mutex_unlock(&s->lock);
	free(p);
}

const struct pdma_mem_ops pdma_mem_sim_ops = {
	.name = "sim",
	.page_size = PDMA_SIM_PAGE_SIZE,
	.cpu_visible = true,
	.query = sim_query,
	.pin = sim_pin,
	.unpin = sim_unpin,
};
